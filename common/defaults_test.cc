#include "common/defaults.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/testing/test_util.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

// Sets (or, with nullopt, unsets) an environment variable for one test and
// restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    if (value.has_value()) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(DefaultClientAddressTest, AddressVariableWinsOverTheSocketAlias) {
  ScopedEnv socket(kSocketEnv, "/run/alias.sock");
  ScopedEnv address(kAddressEnv, "npu-host:50051");
  EXPECT_EQ(DefaultClientAddress(), "npu-host:50051");
  // The daemon's default does not read the client's variable.
  EXPECT_EQ(DefaultServerAddress(), "unix:/run/alias.sock");
}

TEST(DefaultClientAddressTest, SocketAliasStillWorks) {
  ScopedEnv socket(kSocketEnv, "/run/alias.sock");
  ScopedEnv address(kAddressEnv, std::nullopt);
  EXPECT_EQ(DefaultClientAddress(), "unix:/run/alias.sock");
  // Written with its scheme, as --server takes it: the same.
  ScopedEnv prefixed(kSocketEnv, "unix:/run/alias.sock");
  EXPECT_EQ(DefaultClientAddress(), "unix:/run/alias.sock");
  EXPECT_EQ(DefaultServerAddress(), "unix:/run/alias.sock");
}

TEST(DefaultClientAddressTest, EmptyVariablesAreUnset) {
  ScopedEnv socket(kSocketEnv, "");
  ScopedEnv address(kAddressEnv, "");
  ScopedEnv runtime("RUNTIME_DIRECTORY", "");
  testing::TempDir dir;
  EXPECT_EQ(DefaultClientAddress(dir.Join("absent.sock")),
            DefaultServerAddress());
  EXPECT_EQ(DefaultClientAddress().rfind("unix:/", 0), 0u);
}

// The per-user socket of whoever runs the test: root's is the system one.
std::string OwnSocketAddress() {
  if (geteuid() == 0) return absl::StrCat("unix:", kSystemSocket);
  return "unix:/run/user/4242/rbln-artifactd.sock";
}

TEST(DefaultServerAddressTest, SystemdRuntimeDirectoryWins) {
  ScopedEnv socket(kSocketEnv, std::nullopt);
  ScopedEnv runtime("RUNTIME_DIRECTORY", "/run/rbln-artifactd");
  EXPECT_EQ(DefaultServerAddress(),
            "unix:/run/rbln-artifactd/rbln-artifactd.sock");
}

TEST(DefaultServerAddressTest, FirstOfSeveralRuntimeDirectories) {
  ScopedEnv socket(kSocketEnv, std::nullopt);
  ScopedEnv runtime("RUNTIME_DIRECTORY", "/run/a:/run/b");
  EXPECT_EQ(DefaultServerAddress(), "unix:/run/a/rbln-artifactd.sock");
}

TEST(DefaultServerAddressTest, SocketVariableWinsOverRuntimeDirectory) {
  ScopedEnv socket(kSocketEnv, "/run/alias.sock");
  ScopedEnv runtime("RUNTIME_DIRECTORY", "/run/rbln-artifactd");
  EXPECT_EQ(DefaultServerAddress(), "unix:/run/alias.sock");
}

TEST(DefaultServerAddressTest, WithoutSystemdRootUsesTheSystemSocket) {
  ScopedEnv socket(kSocketEnv, std::nullopt);
  ScopedEnv runtime("RUNTIME_DIRECTORY", std::nullopt);
  ScopedEnv xdg("XDG_RUNTIME_DIR", "/run/user/4242");
  EXPECT_EQ(DefaultServerAddress(), OwnSocketAddress());
}

TEST(DefaultServerAddressTest, WithoutAnyRuntimeDirectoryTmp) {
  if (geteuid() == 0) GTEST_SKIP() << "root always uses " << kSystemSocket;
  ScopedEnv socket(kSocketEnv, std::nullopt);
  ScopedEnv runtime("RUNTIME_DIRECTORY", std::nullopt);
  ScopedEnv xdg("XDG_RUNTIME_DIR", std::nullopt);
  EXPECT_EQ(DefaultServerAddress(),
            absl::StrCat("unix:/tmp/rbln-artifactd-", geteuid(), ".sock"));
}

// Binds a Unix socket at `path` (a live daemon's socket file).
int BindUnixSocket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
      << path;
  return fd;
}

TEST(DefaultClientAddressTest, SystemSocketWhenItExistsForAnyUser) {
  ScopedEnv socket(kSocketEnv, std::nullopt);
  ScopedEnv address(kAddressEnv, std::nullopt);
  ScopedEnv xdg("XDG_RUNTIME_DIR", "/run/user/4242");
  testing::TempDir dir;
  const std::string system_socket = dir.Join("rbln-artifactd.sock");
  const int fd = BindUnixSocket(system_socket);
  EXPECT_EQ(DefaultClientAddress(system_socket),
            absl::StrCat("unix:", system_socket));
  close(fd);
}

TEST(DefaultClientAddressTest, OwnSocketWhenNoSystemSocket) {
  ScopedEnv socket(kSocketEnv, std::nullopt);
  ScopedEnv address(kAddressEnv, std::nullopt);
  ScopedEnv xdg("XDG_RUNTIME_DIR", "/run/user/4242");
  // The daemon's service directory is not the client's.
  ScopedEnv runtime("RUNTIME_DIRECTORY", "/run/some-other-service");
  testing::TempDir dir;
  EXPECT_EQ(DefaultClientAddress(dir.Join("rbln-artifactd.sock")),
            OwnSocketAddress());
}

TEST(DefaultClientAddressTest, SocketVariableWinsOverTheSystemSocket) {
  ScopedEnv socket(kSocketEnv, "/run/alias.sock");
  ScopedEnv address(kAddressEnv, std::nullopt);
  testing::TempDir dir;
  const std::string system_socket = dir.Join("rbln-artifactd.sock");
  const int fd = BindUnixSocket(system_socket);
  EXPECT_EQ(DefaultClientAddress(system_socket), "unix:/run/alias.sock");
  close(fd);
}

}  // namespace
}  // namespace rbln
