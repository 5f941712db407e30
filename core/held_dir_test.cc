// A held directory looked at again (Env::StatEntriesAgain) through the
// directory watches (core/dir_watch.h): no stat of its name while nothing on
// its path changed, and every change on the path seen by the next lookup,
// including one under a directory that replaced another on the way.
#include <fcntl.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "core/dir_watch.h"
#include "core/env.h"
#include "core/metrics.h"
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
    DirWatch::SetEnabled(GetParam());
    if (GetParam() && DirWatch::Get() == nullptr) {
      GTEST_SKIP() << "no inotify here";
    }
    env_ = testing::ConfinedEnvOrDie(tmp_.path());
    MakeDirs("p/q/a/b");
    dir_ = tmp_.Join("p/q/a/b");
    testing::WriteFileOrDie(JoinPath(dir_, "f"), "12345");
    absl::StatusOr<DirStats> first =
        env_->StatAndHoldEntries(dir_, names_, &held_);
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_NE(held_, nullptr);
    first_ = first->dir;
  }
  void TearDown() override { DirWatch::SetEnabled(true); }

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
        env_->StatEntriesAgain(*held_, dir_, names_);
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

  testing::TempDir tmp_;
  std::unique_ptr<Env> env_;
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

TEST_P(HeldDirTest, AFileSystemMountedOverItIsSeen) {
  Again();
  Again();
  if (mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount here: " << strerror(errno);
  }
  // The mount table is watched by a thread (core/dir_watch.h): wait for it.
  // The test fails only if the mount is never seen.
  bool seen = false;
  for (int i = 0; i < 1000 && !seen; ++i) {
    seen = Again().inode != first_.inode;
    if (!seen) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(seen);
  ASSERT_EQ(umount(dir_.c_str()), 0);
}

INSTANTIATE_TEST_SUITE_P(Watch, HeldDirTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Watched" : "NotWatched";
                         });

}  // namespace
}  // namespace rbln
