// SIGHUP (systemctl reload), end to end: besides reloading the tokens and TLS
// files (tests/auth_test.cc), it drops the read cache, whose held
// directories and read leases otherwise keep a file system mounted inside
// the store busy (docs/deploying.md, "Unmounting a file system inside the
// store"). Root only: it bind-mounts a directory into the store.
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/testing/test_util.h"
#include "gtest/gtest.h"
#include "tests/daemon_testing.h"

namespace rbln::e2e {
namespace {

class ReloadTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    if (geteuid() != 0) GTEST_SKIP() << "mounting needs root";
    // A bind mount of a directory on the test's own file system (not a
    // tmpfs, from which nothing is cached: docs/security.md).
    const std::string source = root_.Join("elsewhere");
    std::filesystem::create_directories(source);
    std::filesystem::create_directories(mount_point_);
    if (mount(source.c_str(), mount_point_.c_str(), nullptr, MS_BIND,
              nullptr) != 0) {
      GTEST_SKIP() << "cannot bind-mount here: " << std::strerror(errno);
    }
    mounted_ = true;
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", Artifact()));
    // The daemon keeps a read only once its files have been still for 2 s
    // (core/format/artifact_cache.h).
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    // At info level: the reload's line.
    ASSERT_NO_FATAL_FAILURE(StartWithFlags(
        address_, {"--store", store_, "--listen", address_, "--rbln-smi",
                   "none", "--device-dram", "16GiB", "--log-level", "info"}));
  }

  void TearDown() override {
    DaemonTest::TearDown();
    if (mounted_) umount2(mount_point_.c_str(), MNT_DETACH);
  }

  std::string Artifact() const { return absl::StrCat(mount_point_, "/tiny"); }

  Outcome Client(const std::string& args) {
    return CliAt(address_, args, root_.path());
  }

  const std::string mount_point_ = StorePath("team");
  bool mounted_ = false;
};

TEST_F(ReloadTest, SighupLetsGoOfAFileSystemTheReadCacheHeld) {
  // A Get and a Describe: two cached reads of the artifact on the mount.
  const std::string model = absl::StrCat("--model-id ", Artifact());
  Outcome get = Client(model + " --get-kvcache-num-blocks");
  ASSERT_EQ(get.code, 0) << get;
  Outcome describe = Client(model + " --describe");
  ASSERT_EQ(describe.code, 0) << describe;
  ASSERT_EQ(Client(model + " --get-kvcache-num-blocks").out, get.out);

  // What the cache holds open keeps the file system busy...
  ASSERT_NE(umount2(mount_point_.c_str(), 0), 0);
  ASSERT_EQ(errno, EBUSY) << std::strerror(errno);

  // ...until a reload drops it.
  ASSERT_EQ(kill(daemon_.pid, SIGHUP), 0);
  ASSERT_TRUE(AwaitLog(daemon_, "SIGHUP: dropped 2 cached reads"));
  EXPECT_EQ(umount2(mount_point_.c_str(), 0), 0) << std::strerror(errno);
  mounted_ = false;

  // The daemon goes on: the artifact is gone with the mount, and it says
  // so.
  Outcome gone = Client(model + " --get-kvcache-num-blocks");
  EXPECT_NE(gone.code, 0) << gone;
  EXPECT_NE(gone.err.find("tiny"), std::string::npos) << gone;
}

}  // namespace
}  // namespace rbln::e2e
