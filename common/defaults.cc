#include "common/defaults.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace rbln {
namespace {

const char* NonEmptyEnv(const char* name) {
  const char* value = getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

// The socket of a daemon started by hand, without systemd: root's is the
// system one; other users have their own, which they may create.
std::string OwnSocket() {
  if (geteuid() == 0) return kSystemSocket;
  if (const char* runtime = NonEmptyEnv("XDG_RUNTIME_DIR")) {
    return absl::StrCat(runtime, "/rbln-artifactd.sock");
  }
  return absl::StrCat("/tmp/rbln-artifactd-", geteuid(), ".sock");
}

// True unless nothing is at `path`: a socket the caller may not even stat
// (a directory it cannot search) is still the daemon's, and its error is
// the one to report.
bool MayExist(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 || (errno != ENOENT && errno != ENOTDIR);
}

// $RBLN_ARTIFACTD_SOCKET as an address: a path, or (as people also write
// it) already unix:PATH.
std::string SocketEnvAddress(absl::string_view socket) {
  return absl::StartsWith(socket, "unix:") ? std::string(socket)
                                           : absl::StrCat("unix:", socket);
}

}  // namespace

std::string DefaultServerAddress() {
  if (const char* socket = NonEmptyEnv(kSocketEnv)) {
    return SocketEnvAddress(socket);
  }
  // systemd gives the unit's RuntimeDirectory= here (several are separated
  // by ':'; the unit names one).
  if (const char* runtime = NonEmptyEnv("RUNTIME_DIRECTORY")) {
    const absl::string_view dir = absl::string_view(runtime).substr(
        0, absl::string_view(runtime).find(':'));
    return absl::StrCat("unix:", dir, "/rbln-artifactd.sock");
  }
  return absl::StrCat("unix:", OwnSocket());
}

std::string DefaultClientAddress(const std::string& system_socket) {
  if (const char* address = NonEmptyEnv(kAddressEnv)) return address;
  if (const char* socket = NonEmptyEnv(kSocketEnv)) {
    return SocketEnvAddress(socket);
  }
  if (MayExist(system_socket)) return absl::StrCat("unix:", system_socket);
  return absl::StrCat("unix:", OwnSocket());
}

std::string DefaultStoreDir() {
  if (const char* store = NonEmptyEnv(kStoreEnv)) return store;
  if (geteuid() == 0) return "/var/lib/rbln-artifactd";
  if (const char* home = NonEmptyEnv("HOME")) {
    return absl::StrCat(home, "/.local/share/rbln-artifactd");
  }
  return absl::StrCat("/tmp/rbln-artifactd-store-", geteuid());
}

}  // namespace rbln
