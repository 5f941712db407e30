// A held directory looked at again (Freshness::StatEntriesAgain) through the
// directory watches (core/os/dir_watch.h): no stat of its name while nothing on
// its path changed, and every change on the path seen by the next lookup,
// including one under a directory that replaced another on the way.
#include <fcntl.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/metrics.h"
#include "core/os/dir_watch.h"
#include "core/os/env.h"
#include "core/os/freshness.h"
#include "core/os/read_lease.h"
#include "core/testing/test_util.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

// rbln_artifactd_dir_checks_total{how="<how>"}.
uint64_t DirChecks(const std::string& how) {
  const std::string text = metrics::Registry::Default().Exposition();
  std::smatch match;
  const std::regex line("rbln_artifactd_dir_checks_total\\{how=\"" + how +
                        "\"\\} ([0-9]+)");
  return std::regex_search(text, match, line) ? std::stoull(match[1]) : 0;
}

class HeldDirTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    // Another test's mount would move the generation under this one's.
    private_mounts_ = testing::EnterPrivateMountNamespace();
    if (GetParam() && DirWatch::Get() == nullptr) {
      GTEST_SKIP() << "no inotify here";
    }
    freshness_ =
        testing::ConfinedFreshnessOrDie(tmp_.path(), {.dir_watch = GetParam()});
    MakeDirs("p/q/a/b");
    dir_ = tmp_.Join("p/q/a/b");
    testing::WriteFileOrDie(JoinPath(dir_, "f"), "12345");
    absl::StatusOr<DirStats> first =
        freshness_->StatAndHoldEntries(dir_, names_, &held_);
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_NE(held_, nullptr);
    first_ = first->dir;
  }

  void MakeDirs(const std::string& rel) {
    std::string path = tmp_.path();
    for (size_t at = 0; at != std::string::npos;) {
      const size_t slash = rel.find('/', at);
      path = tmp_.Join(rel.substr(0, slash));
      if (access(path.c_str(), F_OK) != 0) {
        ASSERT_EQ(mkdir(path.c_str(), 0755), 0) << path;
      }
      at = slash == std::string::npos ? slash : slash + 1;
    }
  }

  void Move(const std::string& from, const std::string& to) {
    ASSERT_EQ(rename(tmp_.Join(from).c_str(), tmp_.Join(to).c_str()), 0)
        << from << " -> " << to;
  }

  FileStat Again() {
    absl::StatusOr<DirStats> again =
        freshness_->StatEntriesAgain(*held_, dir_, names_);
    EXPECT_TRUE(again.ok()) << again.status();
    return again.ok() ? again->dir : FileStat{};
  }

  // Whether the last `lookups` lookups were answered by the watches.
  bool Watched(int lookups) {
    const uint64_t before = DirChecks("watched");
    for (int i = 0; i < lookups; ++i) {
      EXPECT_EQ(Again().inode, first_.inode);
    }
    return DirChecks("watched") == before + lookups;
  }

  bool private_mounts_ = false;
  testing::TempDir tmp_;
  std::unique_ptr<Freshness> freshness_;
  std::string dir_;
  const std::vector<std::string> names_ = {"f"};
  std::unique_ptr<HeldDir> held_;
  FileStat first_;
};

TEST_P(HeldDirTest, UnchangedItIsAnsweredByTheWatchesAlone) {
  Again();  // the first lookup adds the watches and looks
  EXPECT_EQ(Watched(3), GetParam());
  // A change in the directory: looked at again, and its new status seen.
  testing::WriteFileOrDie(JoinPath(dir_, "new"), "x");
  const uint64_t looked = DirChecks("looked");
  const FileStat changed = Again();
  EXPECT_EQ(DirChecks("looked"), looked + 1);
  EXPECT_EQ(changed.inode, first_.inode);
  EXPECT_NE(changed.mtime_ns, first_.mtime_ns);
}

TEST_P(HeldDirTest, ItsNameGivenToAnotherDirectoryIsSeen) {
  Again();
  Again();
  Move("p/q/a/b", "p/q/a/old");
  MakeDirs("p/q/a/b");
  EXPECT_NE(Again().inode, first_.inode);
}

TEST_P(HeldDirTest, AnAncestorReplacedIsSeen) {
  Again();
  Again();
  MakeDirs("other/a/b");
  Move("p/q", "q_old");
  Move("other", "p/q");
  EXPECT_NE(Again().inode, first_.inode);
}

TEST_P(HeldDirTest, ADirectoryThatReplacedAnotherOnThePathIsWatchedToo) {
  Again();
  // The path's directories above b replaced by new ones, b itself not moved
  // (its status unchanged): p/q/a/b is now n1/n2/a/b.
  MakeDirs("n1/n2");
  Move("p/q/a", "n1/n2/a");
  Move("p", "p_old");
  Move("n1", "p");
  Move("p/n2", "p/q");
  EXPECT_EQ(Again().ctime_ns, first_.ctime_ns);
  EXPECT_EQ(Watched(2), GetParam());
  // A change inside n1 and n2 alone, which nothing watched before they were
  // watched along the new path.
  Move("p/q", "p/q_old");
  MakeDirs("p/q/a/b");
  EXPECT_NE(Again().inode, first_.inode);
}

TEST_P(HeldDirTest, AFileSystemMountedOverItIsSeenByTheNextLookup) {
  if (!private_mounts_) GTEST_SKIP() << "no mount namespace of its own";
  Again();
  EXPECT_EQ(Watched(2), GetParam());
  ASSERT_EQ(mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=1m"), 0)
      << strerror(errno);
  EXPECT_NE(Again().inode, first_.inode);
  ASSERT_EQ(umount(dir_.c_str()), 0);
  EXPECT_EQ(Again().inode, first_.inode);
}

TEST_P(HeldDirTest, AFileMountedOverALeasedFileIsSeenUnderAWatch) {
  if (!GetParam()) GTEST_SKIP() << "without the watch, a lease is trusted";
  if (!private_mounts_) GTEST_SKIP() << "no mount namespace of its own";
  // Opened by nobody for writing, the file keeps its lease.
  if (ReadLeasesHeld() == 0) GTEST_SKIP() << "no lease";
  const auto entry = [&] {
    absl::StatusOr<DirStats> again =
        freshness_->StatEntriesAgain(*held_, dir_, names_);
    EXPECT_TRUE(again.ok()) << again.status();
    return again.ok() && again->entries[0].has_value() ? *again->entries[0]
                                                       : FileStat{};
  };
  const FileStat before = entry();
  EXPECT_TRUE(Watched(2));
  testing::TempDir elsewhere;  // outside the watched tree: only the mount
  testing::WriteFileOrDie(elsewhere.Join("other"), "67");
  ASSERT_EQ(mount(elsewhere.Join("other").c_str(), JoinPath(dir_, "f").c_str(),
                  nullptr, MS_BIND, nullptr),
            0)
      << strerror(errno);
  // A lookup that asks for no file sees the directory unchanged first (as
  // another cache entry of it may), which must not vouch for the files.
  ASSERT_TRUE(freshness_->StatEntriesAgain(*held_, dir_, {}).ok());
  const FileStat covered = entry();
  EXPECT_NE(covered.inode, before.inode);
  EXPECT_EQ(covered.size, 2u);
  ASSERT_EQ(umount(JoinPath(dir_, "f").c_str()), 0);
  EXPECT_EQ(entry().inode, before.inode);
  // Then the leases are trusted again: the watch alone answers.
  EXPECT_TRUE(Watched(2));
}

TEST_P(HeldDirTest, ItsTimesAndAnExchangeAreSeen) {
  Again();
  EXPECT_EQ(Watched(2), GetParam());
  // touch -m: the modification time alone.
  const struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, dir_.c_str(), times, 0), 0);
  EXPECT_EQ(Again().mtime_ns, int64_t{12345} * 1000000000);
  MakeDirs("x");
  ASSERT_EQ(renameat2(AT_FDCWD, dir_.c_str(), AT_FDCWD, tmp_.Join("x").c_str(),
                      RENAME_EXCHANGE),
            0);
  EXPECT_NE(Again().inode, first_.inode);
}

TEST_P(HeldDirTest, OnAFileSystemNotTrustedItIsLookedAtEveryTime) {
  if (!private_mounts_) GTEST_SKIP() << "no mount namespace of its own";
  // ramfs: local, but not among the file systems trusted to report every
  // change (core/os/local_fs.h), as a network file system would not.
  MakeDirs("r");
  ASSERT_EQ(mount("ramfs", tmp_.Join("r").c_str(), "ramfs", 0, nullptr), 0)
      << strerror(errno);
  MakeDirs("r/x");
  const std::string dir = tmp_.Join("r/x");
  std::unique_ptr<HeldDir> held;
  absl::StatusOr<DirStats> first =
      freshness_->StatAndHoldEntries(dir, {}, &held);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_NE(held, nullptr);
  const uint64_t looked = DirChecks("looked");
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(freshness_->StatEntriesAgain(*held, dir, {}).ok());
  }
  if (GetParam()) {
    EXPECT_EQ(DirChecks("looked"), looked + 3);
  }
  Move("r/x", "r/y");
  MakeDirs("r/x");
  absl::StatusOr<DirStats> again = freshness_->StatEntriesAgain(*held, dir, {});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(again->dir.inode, first->dir.inode);
  held.reset();
  ASSERT_EQ(umount(tmp_.Join("r").c_str()), 0);
}

TEST_P(HeldDirTest, LookupsRacingEachOtherMissNoChange) {
  // Lookups of the same held directory on other threads all along, while
  // the path is rebuilt around b and then led elsewhere: each lookup made
  // after a change sees it.
  std::atomic<bool> stop{false};
  std::vector<std::thread> lookers;
  for (int i = 0; i < 2; ++i) {
    lookers.emplace_back([&] {
      while (!stop.load())
        freshness_->StatEntriesAgain(*held_, dir_, names_).ok();
    });
  }
  for (int round = 0; round < 20; ++round) {
    const std::string n = absl::StrCat("n", round);
    // The directories above b replaced by new ones, b not moved.
    MakeDirs(n + "/n2");
    Move("p/q/a", n + "/n2/a");
    Move("p", absl::StrCat("p_old", round));
    Move(n, "p");
    Move("p/n2", "p/q");
    EXPECT_EQ(Again().inode, first_.inode) << round;
    // Then led elsewhere, in a directory that replaced another.
    Move("p/q", "p/q_old");
    MakeDirs("p/q/a/b");
    EXPECT_NE(Again().inode, first_.inode) << round;
    // And back.
    Move("p/q", absl::StrCat("p/q_new", round));
    Move("p/q_old", "p/q");
    EXPECT_EQ(Again().inode, first_.inode) << round;
  }
  stop.store(true);
  for (std::thread& looker : lookers) looker.join();
}

INSTANTIATE_TEST_SUITE_P(Watch, HeldDirTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Watched" : "NotWatched";
                         });

}  // namespace
}  // namespace rbln
