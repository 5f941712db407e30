// Before the client creates its gRPC channel to a Unix socket it connects
// once itself: gRPC reports "nobody listens" and "not allowed to connect"
// alike (UNAVAILABLE), and a user needs to know which (exit 3 or 4).
//
// Thread-safe: no shared state.
#ifndef RBLN_CLIENT_SOCKET_PROBE_H_
#define RBLN_CLIENT_SOCKET_PROBE_H_

#include <optional>
#include <string>

#include "client/failure.h"

namespace rbln::client {

enum class SocketReach {
  kAccepts,       // something accepted the connection (it is then closed)
  kNotListening,  // no socket file (ENOENT), or nobody listens (ECONNREFUSED)
  kDenied,        // EACCES or EPERM: the socket or a directory above it
  kUnknown,       // anything else (a path too long for sockaddr_un, ...)
};

struct SocketProbe {
  SocketReach reach = SocketReach::kUnknown;
  int error = 0;  // connect()'s errno, 0 when it accepted
};

// Connects to the Unix socket at `path` and disconnects.
SocketProbe ProbeUnixSocket(const std::string& path);

// The owner, group and mode of the file at `path` (lstat), or nullopt when
// it cannot be examined.
std::optional<SocketFile> ExamineSocketFile(const std::string& path);

}  // namespace rbln::client

#endif  // RBLN_CLIENT_SOCKET_PROBE_H_
