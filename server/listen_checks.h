// Checks of the addresses rbln-artifactd listens on, made before and after
// gRPC binds them (gRPC reports a failure only as a log line), and the Unix
// socket files the daemon makes: whether another server answers on one,
// whether a TCP port is free, whether a host is loopback.
//
// Thread-safe: no state; the checks bind and close sockets of their own.
#ifndef RBLN_SERVER_LISTEN_CHECKS_H_
#define RBLN_SERVER_LISTEN_CHECKS_H_

#include <netdb.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/server_address.h"
#include "server/daemon_error.h"

namespace rbln {

// getaddrinfo of the TCP `address` for binding it, as the daemon's
// listeners do (any family, a stream socket, passive, the port a number):
// its return code; on 0 the caller frees `*found` (freeaddrinfo).
int ResolveToBind(const ServerAddress& address, addrinfo** found);

// True when something accepts connections on the Unix socket at `path`
// (another daemon): binding would silently take its address away.
bool UnixSocketIsLive(const std::string& path);

// Why `address` cannot be bound, found by binding it as gRPC would (with
// SO_REUSEADDR, without SO_REUSEPORT): 0 when every resolved address could
// be, EADDRINUSE when one is in use, else the error of the last one (gRPC
// serves when any of a name's addresses can be bound). -1: the host does
// not resolve.
int TcpBindError(const ServerAddress& address);

// Start-up checks of the address `text` (given as `flag`), parsed as
// `address`, that gRPC would report only as a log line: another server on
// its Unix socket or TCP port (kExitUnavailable), a socket directory that
// does not exist or a port that cannot be bound (kExitConfig), a host that
// does not resolve (`bad_value_code`). nullopt when all looks bindable.
std::optional<DaemonError> CheckListenAddress(
    const std::string& text, const ServerAddress& address, int bad_value_code,
    const std::string& flag = "--listen");

// True for a host that only this machine can reach: "localhost",
// 127.0.0.0/8, ::1. A name that resolves to loopback is not trusted to keep
// doing so.
bool IsLoopbackHost(const std::string& host);

// The `listen` texts whose `addresses` (the same index) are TCP ports that
// other hosts may reach, served without TLS (`tls` false).
std::vector<std::string> InsecureRemoteListeners(
    const std::vector<std::string>& listen,
    const std::vector<ServerAddress>& addresses, bool tls);

// Makes every relative Unix socket path of `addresses` absolute against
// `cwd` (an absolute directory; "." components dropped, ".." kept as
// written), and the gRPC target of the same index in `listen` with it
// ("unix:PATH"), so that the socket bound, removed and reported is one path
// wherever it is looked at from. INVALID_ARGUMENT, in ParseServerAddress's
// words, when a path grows longer than a socket address holds.
absl::Status MakeUnixPathsAbsolute(absl::string_view cwd,
                                   std::vector<std::string>* listen,
                                   std::vector<ServerAddress>* addresses);

// Removes the Unix socket files of the gRPC targets `listen` ("unix:PATH").
void RemoveUnixSockets(const std::vector<std::string>& listen);

// Gives the Unix socket files of `addresses` to `gid`; the first failure,
// else nullopt.
std::optional<std::string> ChownUnixSockets(
    const std::vector<ServerAddress>& addresses, gid_t gid);

}  // namespace rbln

#endif  // RBLN_SERVER_LISTEN_CHECKS_H_
