// Directory watches on real directories: what moves the generation, what
// does not, and that watches shared along paths are let go only by their
// last holder. The POSIX Freshness's use of them (StatEntriesAgain) is
// tested in core/os/held_dir_test.cc. Each test runs in a mount namespace of
// its own where it can (as root), so that another test's mount does not move
// the generation under it.
#include "core/os/dir_watch.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <future>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/os/unique_fd.h"
#include "core/testing/test_util.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

class DirWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    private_mounts_ = testing::EnterPrivateMountNamespace();
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

  // A new directory `rel` beneath the root, watched.
  std::unique_ptr<DirWatch::Watches> MakeAndWatch(const std::string& rel) {
    EXPECT_EQ(mkdir(tmp_.Join(rel).c_str(), 0755), 0) << rel;
    std::unique_ptr<DirWatch::Watches> watches =
        watch_->WatchPath(root_.get(), rel);
    EXPECT_NE(watches, nullptr) << rel;
    return watches;
  }

  // Whether the generation moved since the last call (or SetUp).
  bool Moved() {
    const uint64_t now = watch_->Generation();
    const bool moved = now != last_;
    last_ = now;
    return moved;
  }

  bool private_mounts_ = false;
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
  // The modification time alone (touch -m), and a file in b written.
  const struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, tmp_.Join("a/b").c_str(), times, 0), 0);
  EXPECT_TRUE(Moved());
  const int file = open(tmp_.Join("a/b/file").c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(file, 0);
  EXPECT_EQ(write(file, "y", 1), 1);
  close(file);
  EXPECT_TRUE(Moved());
  // b exchanged with another directory.
  ASSERT_EQ(mkdir(tmp_.Join("other").c_str(), 0755), 0);
  ASSERT_EQ(renameat2(AT_FDCWD, tmp_.Join("a/b").c_str(), AT_FDCWD,
                      tmp_.Join("other").c_str(), RENAME_EXCHANGE),
            0);
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
  std::unique_ptr<DirWatch::Watches> other = MakeAndWatch("a/c");
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

TEST_F(DirWatchTest, AWatchTheKernelDroppedIsForgottenAndOthersStay) {
  std::unique_ptr<DirWatch::Watches> gone = MakeAndWatch("gone");
  ASSERT_NE(gone, nullptr);
  const size_t watched = watch_->watched();
  ASSERT_EQ(rmdir(tmp_.Join("gone").c_str()), 0);
  EXPECT_TRUE(Moved());  // and its IN_IGNORED read: the watch is forgotten
  EXPECT_EQ(watch_->watched(), watched - 1);
  std::unique_ptr<DirWatch::Watches> next = MakeAndWatch("next");
  ASSERT_NE(next, nullptr);
  gone.reset();  // lets go of the root once, which others still hold
  EXPECT_EQ(watch_->watched(), watched);
  Moved();
  testing::WriteFileOrDie(tmp_.Join("next/file"), "y");
  EXPECT_TRUE(Moved());
  testing::WriteFileOrDie(tmp_.Join("a/b/file2"), "y");
  EXPECT_TRUE(Moved());
}

TEST_F(DirWatchTest, AChangeBehindMoreEventsThanOneCallReadsIsNotMissed) {
  std::unique_ptr<DirWatch::Watches> busy = MakeAndWatch("busy");
  ASSERT_NE(busy, nullptr);
  // More than a call reads (16 reads of 4 KiB) of events of a watch then
  // let go: they concern nobody, but a change of b queued behind them does.
  const std::string name(200, 'f');
  for (int i = 0; i < 1000; ++i) {
    testing::WriteFileOrDie(tmp_.Join(absl::StrCat("busy/", i, name)), "");
  }
  busy.reset();
  Moved();  // drains what it can; moved, by b's own events or the rest
  testing::WriteFileOrDie(tmp_.Join("a/b/changed"), "y");
  // Every call moves it until the queue has been read to its end, and the
  // change of b is seen by the first.
  EXPECT_TRUE(Moved());
  for (int i = 0; i < 100 && Moved(); ++i) {
  }
  EXPECT_FALSE(Moved());
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

TEST_F(DirWatchTest, AMountIsSeenByTheNextCall) {
  if (!private_mounts_) GTEST_SKIP() << "no mount namespace of its own";
  const std::string point = tmp_.Join("a/b/mnt");
  ASSERT_EQ(mkdir(point.c_str(), 0755), 0);
  Moved();
  EXPECT_FALSE(Moved());
  ASSERT_EQ(mount("tmpfs", point.c_str(), "tmpfs", 0, "size=1m"), 0)
      << strerror(errno);
  EXPECT_TRUE(Moved());
  EXPECT_FALSE(Moved());
  ASSERT_EQ(umount(point.c_str()), 0);
  EXPECT_TRUE(Moved());
}

TEST_F(DirWatchTest, AMountBeforeAThreadsFirstCallIsNotMissed) {
  if (!private_mounts_) GTEST_SKIP() << "no mount namespace of its own";
  const std::string point = tmp_.Join("a/b/mnt");
  ASSERT_EQ(mkdir(point.c_str(), 0755), 0);
  Moved();
  EXPECT_FALSE(Moved());
  // A thread's own view of the mount table starts at its first call, after
  // the mount, so that call asks the shared one. (The new thread starts in
  // this thread's namespace.)
  ASSERT_EQ(mount("tmpfs", point.c_str(), "tmpfs", 0, "size=1m"), 0)
      << strerror(errno);
  uint64_t seen = 0;
  std::thread([&] { seen = watch_->Generation(); }).join();
  EXPECT_NE(seen, last_);
  ASSERT_EQ(umount(point.c_str()), 0);
}

TEST_F(DirWatchTest, AThreadsFirstCallMovesNothingWithoutAMount) {
  Moved();
  uint64_t seen = 0;
  std::thread([&] { seen = watch_->Generation(); }).join();
  EXPECT_EQ(seen, last_);
}

TEST_F(DirWatchTest, OneMountMovesTheGenerationOnceForEveryThread) {
  if (!private_mounts_) GTEST_SKIP() << "no mount namespace of its own";
  const std::string point = tmp_.Join("a/b/mnt");
  ASSERT_EQ(mkdir(point.c_str(), 0755), 0);
  // Another thread with a view of the mount table of its own, from before
  // the mount.
  std::promise<void> mounted;
  std::promise<uint64_t> before, after;
  std::thread other([&] {
    before.set_value(watch_->Generation());
    mounted.get_future().wait();
    after.set_value(watch_->Generation());
  });
  const uint64_t other_before = before.get_future().get();
  Moved();
  ASSERT_EQ(mount("tmpfs", point.c_str(), "tmpfs", 0, "size=1m"), 0)
      << strerror(errno);
  EXPECT_TRUE(Moved());
  mounted.set_value();
  // It sees the mark too, and finds the mount counted already.
  EXPECT_EQ(after.get_future().get(), last_);
  EXPECT_NE(last_, other_before);
  other.join();
  ASSERT_EQ(umount(point.c_str()), 0);
}

}  // namespace
}  // namespace rbln
