// Directory watches on real directories: what moves the generation, what
// does not, and that watches shared along paths are let go only by their
// last holder. The Env's use of them (StatEntriesAgain) is tested in
// core/env_test.cc.
#include "core/dir_watch.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "absl/time/clock.h"
#include "core/testing/test_util.h"
#include "core/unique_fd.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

class DirWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    watch_ = DirWatch::Get();
    if (watch_ == nullptr) GTEST_SKIP() << "no inotify here";
    root_ = UniqueFd(open(tmp_.path().c_str(), O_PATH | O_DIRECTORY));
    ASSERT_GE(root_.get(), 0);
    ASSERT_EQ(mkdir(tmp_.Join("a").c_str(), 0755), 0);
    ASSERT_EQ(mkdir(tmp_.Join("a/b").c_str(), 0755), 0);
    testing::WriteFileOrDie(tmp_.Join("a/b/file"), "x");
    watches_ = watch_->WatchPath(root_.get(), "a/b");
    if (watches_ == nullptr) GTEST_SKIP() << tmp_.path() << " is not watched";
  }

  // Whether the generation moved since the last call (or SetUp).
  bool Moved() {
    const uint64_t now = watch_->Generation();
    const bool moved = now != last_;
    last_ = now;
    return moved;
  }

  testing::TempDir tmp_;
  DirWatch* watch_ = nullptr;
  UniqueFd root_;
  std::unique_ptr<DirWatch::Watches> watches_;
  uint64_t last_ = 0;
};

TEST_F(DirWatchTest, EveryChangeAlongThePathMovesTheGeneration) {
  Moved();
  EXPECT_FALSE(Moved());
  testing::WriteFileOrDie(tmp_.Join("a/b/new"), "y");  // created in b
  EXPECT_TRUE(Moved());
  EXPECT_FALSE(Moved());
  ASSERT_EQ(chmod(tmp_.Join("a/b").c_str(), 0700), 0);  // b's attributes
  EXPECT_TRUE(Moved());
  ASSERT_EQ(rename(tmp_.Join("a/b/new").c_str(), tmp_.Join("a/b/n2").c_str()),
            0);
  EXPECT_TRUE(Moved());
  ASSERT_EQ(unlink(tmp_.Join("a/b/n2").c_str()), 0);
  EXPECT_TRUE(Moved());
  ASSERT_EQ(mkdir(tmp_.Join("a/c").c_str(), 0755), 0);  // in an ancestor
  EXPECT_TRUE(Moved());
  ASSERT_EQ(mkdir(tmp_.Join("top").c_str(), 0755), 0);  // in the root
  EXPECT_TRUE(Moved());
  ASSERT_EQ(rename(tmp_.Join("a").c_str(), tmp_.Join("moved").c_str()), 0);
  EXPECT_TRUE(Moved());
}

TEST_F(DirWatchTest, ReadsAndChangesOutsideThePathDoNotMoveIt) {
  ASSERT_EQ(mkdir(tmp_.Join("a/b/sub").c_str(), 0755), 0);
  Moved();
  EXPECT_EQ(testing::ReadFileOrDie(tmp_.Join("a/b/file")), "x");
  // A grandchild of b: b's own status does not change.
  testing::WriteFileOrDie(tmp_.Join("a/b/sub/deep"), "z");
  EXPECT_FALSE(Moved());
}

TEST_F(DirWatchTest, AWatchSharedByTwoPathsStaysUntilBothLetGo) {
  ASSERT_EQ(mkdir(tmp_.Join("a/c").c_str(), 0755), 0);
  std::unique_ptr<DirWatch::Watches> other =
      watch_->WatchPath(root_.get(), "a/c");
  ASSERT_NE(other, nullptr);
  const size_t watched = watch_->watched();
  EXPECT_GE(watched, 4u);  // the root, a, b and c (other tests' may remain)
  watches_.reset();        // b goes; the root and a stay, for c
  EXPECT_EQ(watch_->watched(), watched - 1);
  Moved();
  testing::WriteFileOrDie(tmp_.Join("a/b/unwatched"), "y");
  EXPECT_FALSE(Moved());
  testing::WriteFileOrDie(tmp_.Join("a/new"), "y");
  EXPECT_TRUE(Moved());
  other.reset();
  EXPECT_EQ(watch_->watched(), watched - 4);
  testing::WriteFileOrDie(tmp_.Join("a/other"), "y");
  EXPECT_FALSE(Moved());
}

TEST_F(DirWatchTest, AWatchTheKernelDroppedIsForgottenNotLetGoLater) {
  ASSERT_EQ(mkdir(tmp_.Join("gone").c_str(), 0755), 0);
  std::unique_ptr<DirWatch::Watches> gone =
      watch_->WatchPath(root_.get(), "gone");
  ASSERT_NE(gone, nullptr);
  const size_t watched = watch_->watched();
  ASSERT_EQ(rmdir(tmp_.Join("gone").c_str()), 0);
  EXPECT_TRUE(Moved());  // and its IN_IGNORED read: the watch is forgotten
  EXPECT_EQ(watch_->watched(), watched - 1);
  ASSERT_EQ(mkdir(tmp_.Join("next").c_str(), 0755), 0);
  std::unique_ptr<DirWatch::Watches> next =
      watch_->WatchPath(root_.get(), "next");
  ASSERT_NE(next, nullptr);
  gone.reset();  // lets go of the root only, once
  Moved();
  testing::WriteFileOrDie(tmp_.Join("next/file"), "y");
  EXPECT_TRUE(Moved());
  testing::WriteFileOrDie(tmp_.Join("a/b/file2"), "y");
  EXPECT_TRUE(Moved());
}

TEST_F(DirWatchTest, APathThatIsNotThereOrNotLocalIsNotWatched) {
  EXPECT_EQ(watch_->WatchPath(root_.get(), "a/missing"), nullptr);
  EXPECT_EQ(watch_->WatchPath(root_.get(), "a/b/file"), nullptr);
  EXPECT_EQ(watch_->WatchPath(root_.get(), "a/../a"), nullptr);
  // procfs: its changes queue no events.
  UniqueFd proc(open("/proc", O_PATH | O_DIRECTORY));
  ASSERT_GE(proc.get(), 0);
  EXPECT_EQ(watch_->WatchPath(proc.get(), "self"), nullptr);
}

TEST_F(DirWatchTest, AMountMovesTheGeneration) {
  const std::string point = tmp_.Join("a/b/mnt");
  ASSERT_EQ(mkdir(point.c_str(), 0755), 0);
  Moved();
  if (mount("tmpfs", point.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount here: " << strerror(errno);
  }
  // Seen by the watch's thread: wait for it (the test fails only if it
  // never comes).
  bool moved = false;
  for (int i = 0; i < 1000 && !moved; ++i) {
    moved = Moved();
    if (!moved) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(moved);
  ASSERT_EQ(umount(point.c_str()), 0);
}

TEST(DirWatchOffTest, TurnedOffThereIsNone) {
  DirWatch::SetEnabled(false);
  EXPECT_EQ(DirWatch::Get(), nullptr);
  DirWatch::SetEnabled(true);
}

}  // namespace
}  // namespace rbln
