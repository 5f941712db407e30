#include "client/socket_probe.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <string>

#include "core/testing/test_util.h"
#include "gtest/gtest.h"

namespace rbln::client {
namespace {

using ::rbln::testing::TempDir;

// A Unix socket bound at `path`; listening when `listen` is set.
class BoundSocket {
 public:
  BoundSocket(const std::string& path, bool listen) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    ok_ = fd_ >= 0 &&
          bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
          (!listen || ::listen(fd_, 4) == 0);
  }
  ~BoundSocket() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return ok_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

TEST(ProbeUnixSocketTest, TellsListeningFromAbsentFromRefusing) {
  TempDir dir;
  const std::string listening = dir.Join("listening.sock");
  BoundSocket server(listening, /*listen=*/true);
  ASSERT_TRUE(server.ok()) << strerror(errno);
  EXPECT_EQ(ProbeUnixSocket(listening).reach, SocketReach::kAccepts);

  const SocketProbe absent = ProbeUnixSocket(dir.Join("absent.sock"));
  EXPECT_EQ(absent.reach, SocketReach::kNotListening);
  EXPECT_EQ(absent.error, ENOENT);

  // A socket file nobody listens on (a daemon that was killed).
  const std::string stale = dir.Join("stale.sock");
  BoundSocket bound(stale, /*listen=*/false);
  ASSERT_TRUE(bound.ok()) << strerror(errno);
  const SocketProbe refused = ProbeUnixSocket(stale);
  EXPECT_EQ(refused.reach, SocketReach::kNotListening);
  EXPECT_EQ(refused.error, ECONNREFUSED);

  EXPECT_EQ(ProbeUnixSocket(std::string(200, 'x')).reach,
            SocketReach::kUnknown);
}

TEST(ProbeUnixSocketTest, NoWritePermissionIsDenied) {
  if (geteuid() == 0) {
    GTEST_SKIP() << "root may connect to any socket; tests/cli_exit_test.cc "
                    "covers this as user nobody";
  }
  TempDir dir;
  const std::string path = dir.Join("closed.sock");
  BoundSocket server(path, /*listen=*/true);
  ASSERT_TRUE(server.ok()) << strerror(errno);
  ASSERT_EQ(chmod(path.c_str(), 0), 0) << strerror(errno);
  const SocketProbe probe = ProbeUnixSocket(path);
  EXPECT_EQ(probe.reach, SocketReach::kDenied);
  EXPECT_EQ(probe.error, EACCES);
}

TEST(ExamineSocketFileTest, OwnerGroupAndMode) {
  TempDir dir;
  const std::string path = dir.Join("s.sock");
  BoundSocket server(path, /*listen=*/true);
  ASSERT_TRUE(server.ok()) << strerror(errno);
  ASSERT_EQ(chmod(path.c_str(), 0660), 0) << strerror(errno);
  std::optional<SocketFile> file = ExamineSocketFile(path);
  ASSERT_TRUE(file.has_value());
  EXPECT_EQ(file->mode & 07777, 0660u);
  EXPECT_TRUE(S_ISSOCK(file->mode));
  EXPECT_FALSE(file->owner.empty());
  EXPECT_FALSE(file->group.empty());
  if (geteuid() == 0) {
    EXPECT_EQ(file->owner, "root");
  }
  EXPECT_FALSE(ExamineSocketFile(dir.Join("absent")).has_value());
}

}  // namespace
}  // namespace rbln::client
