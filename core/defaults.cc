#include "core/defaults.h"

#include <stdlib.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace rbln {
namespace {

const char* NonEmptyEnv(const char* name) {
  const char* value = getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

}  // namespace

std::string DefaultServerAddress() {
  if (const char* socket = NonEmptyEnv(kSocketEnv)) {
    return absl::StrCat("unix:", socket);
  }
  if (geteuid() == 0) return "unix:/run/rbln-artifactd.sock";
  if (const char* runtime = NonEmptyEnv("XDG_RUNTIME_DIR")) {
    return absl::StrCat("unix:", runtime, "/rbln-artifactd.sock");
  }
  return absl::StrCat("unix:/tmp/rbln-artifactd-", geteuid(), ".sock");
}

std::string DefaultClientAddress() {
  if (const char* address = NonEmptyEnv(kAddressEnv)) return address;
  return DefaultServerAddress();
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
