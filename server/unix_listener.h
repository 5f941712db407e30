// The daemon's own Unix-socket listener. gRPC 1.51 does not tell a handler
// the uid of a Unix-socket peer, so the daemon binds and accepts the socket
// itself: a thread accept()s each connection, reads its SO_PEERCRED into a
// UnixPeerTable, and hands the descriptor to gRPC
// (grpc::AddInsecureChannelFromFd), whose ServerContext::peer() then reads
// "fd:N" (auth.h).
//
// Thread-safe: Start and Stop are called once each, from any thread.
#ifndef RBLN_SERVER_UNIX_LISTENER_H_
#define RBLN_SERVER_UNIX_LISTENER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/server_address.h"
#include "grpcpp/server.h"
#include "server/auth.h"

namespace rbln {

class UnixListener {
 public:
  // Binds `address` (a Unix socket's path), replacing a
  // stale socket file (the caller checked that no server answers there).
  // The file is created with the process's umask.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Bind(
      const ServerAddress& address);
  ~UnixListener();

  // Listens, and accepts connections into `server` until Stop, recording
  // each peer in `peers`. Both must outlive Stop.
  absl::Status Start(grpc::Server* server, UnixPeerTable* peers);
  // Takes no new connections (those accepted keep being served by gRPC).
  void Stop();

 private:
  UnixListener(int listen_fd, int wake_fd);
  void AcceptLoop(grpc::Server* server, UnixPeerTable* peers);

  int listen_fd_;      // -1 once stopped
  const int wake_fd_;  // an eventfd: written by Stop
  std::thread thread_;
};

}  // namespace rbln

#endif  // RBLN_SERVER_UNIX_LISTENER_H_
