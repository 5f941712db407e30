#include "server/listen_checks.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;

// A socket listening on `address` (a Unix path, or 127.0.0.1 with any
// port), closed on destruction.
class Listening {
 public:
  explicit Listening(const std::string& unix_path) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    unix_path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    ok_ = bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
          listen(fd_, 1) == 0;
  }
  Listening() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    ok_ = bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
          listen(fd_, 1) == 0 &&
          getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
    port_ = ntohs(addr.sin_port);
  }
  ~Listening() { close(fd_); }

  bool ok() const { return ok_; }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
  uint16_t port_ = 0;
};

ServerAddress Unix(const std::string& path) {
  return {.kind = ServerAddress::Kind::kUnix, .path = path};
}

ServerAddress Tcp(const std::string& host, uint16_t port) {
  return {.kind = ServerAddress::Kind::kTcp, .host = host, .port = port};
}

TEST(ListenChecksTest, LoopbackHosts) {
  for (const char* host : {"localhost", "127.0.0.1", "127.1.2.3", "::1"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "10.0.0.1", "::", "::2", "example.com",
                           "localhost.example.com"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(ListenChecksTest, InsecureRemoteListenersArePlaintextTcpToOtherHosts) {
  const std::vector<std::string> listen = {"unix:/run/a.sock", "0.0.0.0:1",
                                           "127.0.0.1:2"};
  const std::vector<ServerAddress> addresses = {
      Unix("/run/a.sock"), Tcp("0.0.0.0", 1), Tcp("127.0.0.1", 2)};
  EXPECT_EQ(InsecureRemoteListeners(listen, addresses, /*tls=*/false),
            std::vector<std::string>{"0.0.0.0:1"});
  EXPECT_TRUE(InsecureRemoteListeners(listen, addresses, /*tls=*/true).empty());
}

TEST(ListenChecksTest, AUnixSocketAnotherServerListensOnIsInUse) {
  rbln::testing::TempDir tmp;
  const std::string path = tmp.Join("d.sock");
  EXPECT_FALSE(UnixSocketIsLive(path));
  EXPECT_FALSE(CheckListenAddress("unix:" + path, Unix(path), kExitUsage));
  Listening other(path);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(UnixSocketIsLive(path));
  const std::optional<DaemonError> problem =
      CheckListenAddress("unix:" + path, Unix(path), kExitUsage);
  ASSERT_TRUE(problem.has_value());
  EXPECT_EQ(problem->exit_code, kExitUnavailable);
  EXPECT_THAT(problem->message, HasSubstr("another server already listens"));
}

TEST(ListenChecksTest, AUnixSocketInAMissingDirectoryIsAConfigError) {
  rbln::testing::TempDir tmp;
  const std::string path = tmp.Join("missing/d.sock");
  const std::optional<DaemonError> problem =
      CheckListenAddress("unix:" + path, Unix(path), kExitUsage);
  ASSERT_TRUE(problem.has_value());
  EXPECT_EQ(problem->exit_code, kExitConfig);
  EXPECT_THAT(problem->message, HasSubstr("does not exist"));
}

TEST(ListenChecksTest, ATcpPortInUseIsUnavailable) {
  Listening other;
  ASSERT_TRUE(other.ok());
  const ServerAddress address = Tcp("127.0.0.1", other.port());
  EXPECT_EQ(TcpBindError(address), EADDRINUSE);
  const std::optional<DaemonError> problem =
      CheckListenAddress(absl::StrCat("127.0.0.1:", other.port()), address,
                         kExitUsage, "--health-listen");
  ASSERT_TRUE(problem.has_value());
  EXPECT_EQ(problem->exit_code, kExitUnavailable);
  EXPECT_THAT(problem->message,
              HasSubstr(absl::StrCat("port ", other.port(),
                                     " is in use (--health-listen")));
}

TEST(ListenChecksTest, RelativeUnixSocketPathsAreMadeAbsolute) {
  std::vector<std::string> listen = {"unix:rel.sock", "unix:./x/./y.sock",
                                     "unix:/abs.sock", "127.0.0.1:50051",
                                     "unix:../up.sock"};
  std::vector<ServerAddress> addresses = {
      Unix("rel.sock"), Unix("./x/./y.sock"), Unix("/abs.sock"),
      Tcp("127.0.0.1", 50051), Unix("../up.sock")};
  ASSERT_TRUE(MakeUnixPathsAbsolute("/run/work/", &listen, &addresses).ok());
  EXPECT_EQ(listen,
            (std::vector<std::string>{
                "unix:/run/work/rel.sock", "unix:/run/work/x/y.sock",
                "unix:/abs.sock", "127.0.0.1:50051",
                // ".." is left for the kernel: the directory may be a link.
                "unix:/run/work/../up.sock"}));
  EXPECT_EQ(addresses[0].path, "/run/work/rel.sock");
  EXPECT_EQ(addresses[1].path, "/run/work/x/y.sock");
  EXPECT_EQ(addresses[2].path, "/abs.sock");
  EXPECT_EQ(addresses[3].kind, ServerAddress::Kind::kTcp);
  EXPECT_EQ(addresses[4].path, "/run/work/../up.sock");

  // A path that fits only as given is refused, saying why.
  const std::string deep = "/" + std::string(100, 'd');
  listen = {"unix:d.sock"};
  addresses = {Unix("d.sock")};
  const absl::Status too_long =
      MakeUnixPathsAbsolute(deep, &listen, &addresses);
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.message(),
              HasSubstr(absl::StrCat("unix:d.sock in the working directory ",
                                     deep, " is unix:", deep, "/d.sock")));
  EXPECT_THAT(too_long.message(), HasSubstr("at most 107 bytes"));
  EXPECT_EQ(listen[0], "unix:d.sock");  // unchanged
}

TEST(ListenChecksTest, UnixSocketFilesAreRemovedAndGivenAGroup) {
  rbln::testing::TempDir tmp;
  const std::string path = tmp.Join("d.sock");
  {
    Listening made(path);
    ASSERT_TRUE(made.ok());
  }
  EXPECT_EQ(ChownUnixSockets({Unix(path), Tcp("127.0.0.1", 1)}, getegid()),
            std::nullopt);
  EXPECT_TRUE(
      ChownUnixSockets({Unix(tmp.Join("none.sock"))}, getegid()).has_value());
  RemoveUnixSockets({"127.0.0.1:1", "unix:" + path});
  struct stat st;
  EXPECT_NE(lstat(path.c_str(), &st), 0);
}

}  // namespace
}  // namespace rbln
