#include "server/unix_listener.h"

#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace rbln {
namespace {

// As gRPC's own listener: the kernel's default backlog bound.
constexpr int kBacklog = SOMAXCONN;

}  // namespace

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Bind(
    const ServerAddress& address) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t room = sizeof(addr.sun_path) - 1;
  if (address.path.size() > room) {
    return absl::InvalidArgumentError(
        absl::StrCat("the socket path is longer than ", room, " bytes"));
  }
  address.path.copy(addr.sun_path, address.path.size());
  const socklen_t length = static_cast<socklen_t>(
      offsetof(sockaddr_un, sun_path) + address.path.size() + 1);
  struct stat st {};
  if (lstat(address.path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
    unlink(address.path.c_str());
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(std::strerror(errno));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), length) != 0) {
    const int error = errno;
    close(fd);
    return absl::UnavailableError(std::strerror(error));
  }
  const int wake = eventfd(0, EFD_CLOEXEC);
  if (wake < 0) {
    close(fd);
    return absl::InternalError(std::strerror(errno));
  }
  return std::unique_ptr<UnixListener>(new UnixListener(fd, wake));
}

UnixListener::UnixListener(int listen_fd, int wake_fd)
    : listen_fd_(listen_fd), wake_fd_(wake_fd) {}

UnixListener::~UnixListener() {
  Stop();
  if (listen_fd_ >= 0) close(listen_fd_);
  close(wake_fd_);
}

absl::Status UnixListener::Start(grpc::Server* server, UnixPeerTable* peers) {
  // Listening only now, with the server running: until then a client's
  // connect is refused, so "the socket accepts" means "the daemon serves".
  if (listen(listen_fd_, kBacklog) != 0) {
    return absl::UnavailableError(std::strerror(errno));
  }
  thread_ = std::thread([this, server, peers] { AcceptLoop(server, peers); });
  return absl::OkStatus();
}

void UnixListener::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) != sizeof(one)) {
    spdlog::error("cannot wake the Unix-socket listener: {}",
                  std::strerror(errno));
  }
  thread_.join();
  // Closed, not only no longer accepted from: a client connecting during a
  // shutdown is refused at once instead of waiting in the backlog.
  close(listen_fd_);
  listen_fd_ = -1;
}

void UnixListener::AcceptLoop(grpc::Server* server, UnixPeerTable* peers) {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (true) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("Unix-socket listener: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    // gRPC's endpoints expect non-blocking descriptors.
    const int fd =
        accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // EMFILE and the like: the pending connection stays queued; do not
      // spin on it.
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
        spdlog::warn("Unix-socket listener: accept: {}", std::strerror(errno));
        usleep(100 * 1000);
      }
      continue;
    }
    absl::StatusOr<UnixPeer> peer = ReadUnixPeer(fd);
    if (!peer.ok()) {
      spdlog::warn("Unix-socket listener: {}",
                   std::string(peer.status().message()));
      close(fd);
      continue;
    }
    peers->Add(fd, *std::move(peer));
    grpc::AddInsecureChannelFromFd(server, fd);
  }
}

}  // namespace rbln
