#include "client/socket_probe.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/str_cat.h"

namespace rbln::client {
namespace {

// The name of user `uid` (getpwuid_r), else the number.
std::string UserName(uid_t uid) {
  std::vector<char> buffer(16384);
  passwd entry{};
  passwd* found = nullptr;
  if (getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) == 0 &&
      found != nullptr) {
    return found->pw_name;
  }
  return absl::StrCat(uid);
}

// The name of group `gid` (getgrgid_r), else the number.
std::string GroupName(gid_t gid) {
  std::vector<char> buffer(16384);
  group entry{};
  group* found = nullptr;
  if (getgrgid_r(gid, &entry, buffer.data(), buffer.size(), &found) == 0 &&
      found != nullptr) {
    return found->gr_name;
  }
  return absl::StrCat(gid);
}

}  // namespace

SocketProbe ProbeUnixSocket(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) return {};
  path.copy(addr.sun_path, path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {.reach = SocketReach::kUnknown, .error = errno};
  int error = 0;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) !=
      0) {
    error = errno;
  }
  close(fd);
  switch (error) {
    case 0:
      return {.reach = SocketReach::kAccepts};
    case ENOENT:
    case ECONNREFUSED:
      return {.reach = SocketReach::kNotListening, .error = error};
    case EACCES:
    case EPERM:
      return {.reach = SocketReach::kDenied, .error = error};
    default:
      return {.reach = SocketReach::kUnknown, .error = error};
  }
}

std::optional<SocketFile> ExamineSocketFile(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return std::nullopt;
  return SocketFile{.owner = UserName(st.st_uid),
                    .group = GroupName(st.st_gid),
                    .mode = static_cast<uint32_t>(st.st_mode)};
}

}  // namespace rbln::client
