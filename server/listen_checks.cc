#include "server/listen_checks.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace rbln {

bool UnixSocketIsLive(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return false;
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool live =
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return live;
}

int ResolveToBind(const ServerAddress& address, addrinfo** found) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const std::string port = std::to_string(address.port);
  return getaddrinfo(address.host.c_str(), port.c_str(), &hints, found);
}

int TcpBindError(const ServerAddress& address) {
  addrinfo* found = nullptr;
  if (ResolveToBind(address, &found) != 0) return -1;
  int last_error = 0;
  bool any_bound = false;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const int fd =
        socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = errno;
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      any_bound = true;
    } else {
      last_error = errno;
      if (last_error == EADDRINUSE) {
        close(fd);
        freeaddrinfo(found);
        return EADDRINUSE;
      }
    }
    close(fd);
  }
  freeaddrinfo(found);
  return any_bound ? 0 : last_error;
}

std::optional<DaemonError> CheckListenAddress(const std::string& text,
                                              const ServerAddress& address,
                                              int bad_value_code,
                                              const std::string& flag) {
  using Kind = ServerAddress::Kind;
  if (address.kind == Kind::kUnix) {
    if (UnixSocketIsLive(address.path)) {
      return DaemonError{
          kExitUnavailable,
          absl::StrCat("another server already listens on ", text,
                       "; stop it or choose another ", flag)};
    }
    std::error_code ec;
    const std::filesystem::path dir =
        std::filesystem::path(address.path).parent_path();
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
      return DaemonError{
          kExitConfig,
          absl::StrCat("cannot listen on ", text, ": the directory ",
                       dir.string(),
                       " does not exist; create it or choose another path")};
    }
    return std::nullopt;
  }
  if (address.kind != Kind::kTcp) return std::nullopt;
  const int error = TcpBindError(address);
  if (error == 0) return std::nullopt;
  if (error == EADDRINUSE) {
    return DaemonError{
        kExitUnavailable,
        absl::StrCat("port ", address.port, " is in use (", flag, " ", text,
                     "): another program listens on it; stop it or choose "
                     "another port")};
  }
  if (error < 0) {
    return DaemonError{
        bad_value_code,
        absl::StrCat(flag, " ", text, ": cannot resolve '", address.host, "'")};
  }
  return DaemonError{kExitConfig, absl::StrCat("cannot listen on ", text, ": ",
                                               strerror(error))};
}

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 &&
         IN6_IS_ADDR_LOOPBACK(&v6);
}

std::vector<std::string> InsecureRemoteListeners(
    const std::vector<std::string>& listen,
    const std::vector<ServerAddress>& addresses, bool tls) {
  std::vector<std::string> insecure_remote;
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (addresses[i].kind == ServerAddress::Kind::kTcp && !tls &&
        !IsLoopbackHost(addresses[i].host)) {
      insecure_remote.push_back(listen[i]);
    }
  }
  return insecure_remote;
}

absl::Status MakeUnixPathsAbsolute(absl::string_view cwd,
                                   std::vector<std::string>* listen,
                                   std::vector<ServerAddress>* addresses) {
  for (size_t i = 0; i < addresses->size(); ++i) {
    ServerAddress& address = (*addresses)[i];
    if (address.kind != ServerAddress::Kind::kUnix ||
        absl::StartsWith(address.path, "/")) {
      continue;
    }
    std::vector<absl::string_view> parts =
        absl::StrSplit(cwd, '/', absl::SkipEmpty());
    for (absl::string_view part :
         absl::StrSplit(address.path, '/', absl::SkipEmpty())) {
      if (part != ".") parts.push_back(part);
    }
    const std::string target =
        absl::StrCat("unix:/", absl::StrJoin(parts, "/"));
    // Parsed again for the bound on a socket address's length.
    absl::StatusOr<ServerAddress> absolute = ParseServerAddress(target);
    if (!absolute.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat((*listen)[i], " in the working directory ", cwd, " is ",
                       target, ": ", absolute.status().message()));
    }
    address = *std::move(absolute);
    (*listen)[i] = GrpcTarget(address);
  }
  return absl::OkStatus();
}

void RemoveUnixSockets(const std::vector<std::string>& listen) {
  for (const std::string& address : listen) {
    if (absl::StartsWith(address, "unix:")) unlink(address.substr(5).c_str());
  }
}

std::optional<std::string> ChownUnixSockets(
    const std::vector<ServerAddress>& addresses, gid_t gid) {
  for (const ServerAddress& address : addresses) {
    if (address.kind != ServerAddress::Kind::kUnix) continue;
    if (chown(address.path.c_str(), static_cast<uid_t>(-1), gid) != 0) {
      return absl::StrCat("cannot give ", address.path, " to group ", gid, ": ",
                          strerror(errno));
    }
  }
  return std::nullopt;
}

}  // namespace rbln
