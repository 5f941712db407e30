// The POSIX Freshness (core/os/freshness.h) on the real file system: what
// it reports of a directory's entries, the directories it holds, what may
// change unseen, and its options. Held directories under watches are tested
// in core/os/held_dir_test.cc, read leases in core/os/read_lease_test.cc.
#include "core/os/freshness.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/os/env.h"
#include "core/os/read_lease.h"
#include "core/os/unique_fd.h"
#include "core/testing/test_util.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

TEST(StatEntriesTest, ReportsEachEntryOrItsAbsenceThroughOneDirectory) {
  testing::TempDir tmp;
  std::unique_ptr<Env> env = testing::ConfinedEnvOrDie(tmp.path());
  std::unique_ptr<Freshness> freshness =
      testing::ConfinedFreshnessOrDie(tmp.path());
  testing::WriteFileOrDie(tmp.Join("a"), "12345");
  ASSERT_EQ(mkdir(tmp.Join("d").c_str(), 0755), 0);
  ASSERT_EQ(symlink("a", tmp.Join("link").c_str()), 0);
  const std::vector<std::string> names = {"a", "missing", "d", "link"};
  absl::StatusOr<DirStats> stats = freshness->StatEntries(tmp.path(), names);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->dir.type, FileType::kDirectory);
  ASSERT_EQ(stats->entries.size(), 4u);
  ASSERT_TRUE(stats->entries[0].has_value());
  EXPECT_EQ(stats->entries[0]->size, 5u);
  EXPECT_FALSE(stats->entries[1].has_value());
  EXPECT_EQ(stats->entries[2]->type, FileType::kDirectory);
  EXPECT_EQ(stats->entries[3]->type, FileType::kSymlink);  // not followed
  // The same as Stat says of each.
  absl::StatusOr<FileStat> a = env->Stat(tmp.Join("a"));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(stats->entries[0]->inode, a->inode);
  EXPECT_EQ(stats->entries[0]->ctime_ns, a->ctime_ns);

  const std::vector<std::string> bad = {"d/x"};
  EXPECT_EQ(freshness->StatEntries(tmp.path(), bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(freshness->StatEntries(tmp.Join("link"), names).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(freshness->StatEntries(tmp.Join("missing"), names).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(StatEntriesTest, AHeldDirectoryIsLookedAtAgainThroughItsDescriptor) {
  testing::TempDir tmp;
  std::unique_ptr<Freshness> freshness =
      testing::ConfinedFreshnessOrDie(tmp.path());
  const std::string dir = tmp.Join("art");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  testing::WriteFileOrDie(JoinPath(dir, "a"), "12345");
  const std::vector<std::string> names = {"a", "missing"};

  std::unique_ptr<HeldDir> held;
  absl::StatusOr<DirStats> first =
      freshness->StatAndHoldEntries(dir, names, &held);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(first->entries[0]->size, 5u);
  EXPECT_FALSE(first->entries[1].has_value());

  absl::StatusOr<DirStats> again =
      freshness->StatEntriesAgain(*held, dir, names);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->dir.inode, first->dir.inode);
  EXPECT_EQ(again->entries[0]->inode, first->entries[0]->inode);
  EXPECT_FALSE(again->entries[1].has_value());

  // A file changed and one added: seen through the held directory.
  testing::WriteFileOrDie(JoinPath(dir, "missing"), "x");
  ASSERT_EQ(truncate(JoinPath(dir, "a").c_str(), 2), 0);
  again = freshness->StatEntriesAgain(*held, dir, names);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->entries[0]->size, 2u);
  ASSERT_TRUE(again->entries[1].has_value());

  // The name now names another directory: that one is reported, not the
  // held one.
  ASSERT_EQ(rename(dir.c_str(), tmp.Join("old").c_str()), 0);
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  testing::WriteFileOrDie(JoinPath(dir, "a"), "abc");
  again = freshness->StatEntriesAgain(*held, dir, names);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(again->dir.inode, first->dir.inode);
  EXPECT_EQ(again->entries[0]->size, 3u);
  EXPECT_FALSE(again->entries[1].has_value());

  // A symbolic link in its place is refused as StatEntries refuses it.
  ASSERT_EQ(rename(dir.c_str(), tmp.Join("newer").c_str()), 0);
  ASSERT_EQ(symlink("old", dir.c_str()), 0);
  EXPECT_EQ(freshness->StatEntriesAgain(*held, dir, names).status().code(),
            absl::StatusCode::kPermissionDenied);
  ASSERT_EQ(unlink(dir.c_str()), 0);
  EXPECT_EQ(freshness->StatEntriesAgain(*held, dir, names).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(StatEntriesTest, HoldsAtMostkMaxHeldDirs) {
  testing::TempDir tmp;
  std::unique_ptr<Freshness> freshness =
      testing::ConfinedFreshnessOrDie(tmp.path());
  std::vector<std::unique_ptr<HeldDir>> held(kMaxHeldDirs + 1);
  for (auto& h : held)
    ASSERT_TRUE(freshness->StatAndHoldEntries(tmp.path(), {}, &h).ok());
  for (int i = 0; i < kMaxHeldDirs; ++i) EXPECT_NE(held[i], nullptr) << i;
  EXPECT_EQ(held[kMaxHeldDirs], nullptr);
  // One let go: the next is held again.
  held[0].reset();
  std::unique_ptr<HeldDir> next;
  ASSERT_TRUE(freshness->StatAndHoldEntries(tmp.path(), {}, &next).ok());
  EXPECT_NE(next, nullptr);
}

// Whether a read lease can be had on `path` here (not on an overlay or
// network file system, nor by a process that is neither root nor the
// file's owner).
bool Leasable(const std::string& dir, const std::string& name) {
  UniqueFd fd(open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  struct stat st;
  if (fd.get() < 0 || fstatat(fd.get(), name.c_str(), &st, 0) != 0) {
    return false;
  }
  struct stat now;
  return ReadLease::Take(fd.get(), name, st.st_dev, st.st_ino, &now) != nullptr;
}

TEST(MayChangeUnseenTest, AFileOpenForWritingMayChangeUnseen) {
  testing::TempDir tmp;
  testing::WriteFileOrDie(tmp.Join("a"), "12345");
  if (!Leasable(tmp.path(), "a")) GTEST_SKIP() << "no read lease here";
  std::unique_ptr<Freshness> freshness =
      testing::ConfinedFreshnessOrDie(tmp.path());
  EXPECT_FALSE(freshness->MayChangeUnseen(tmp.Join("a")));
  UniqueFd writer(open(tmp.Join("a").c_str(), O_WRONLY | O_CLOEXEC));
  ASSERT_GE(writer.get(), 0);
  EXPECT_TRUE(freshness->MayChangeUnseen(tmp.Join("a")));
  // Without read leases it cannot tell.
  std::unique_ptr<Freshness> no_leases =
      testing::ConfinedFreshnessOrDie(tmp.path(), {.read_leases = false});
  EXPECT_FALSE(no_leases->MayChangeUnseen(tmp.Join("a")));
  writer.Close();
  EXPECT_FALSE(freshness->MayChangeUnseen(tmp.Join("a")));
  // Nor on an error: a missing file, a directory, a path outside the root.
  EXPECT_FALSE(freshness->MayChangeUnseen(tmp.Join("missing")));
  EXPECT_FALSE(freshness->MayChangeUnseen(tmp.path()));
  EXPECT_FALSE(freshness->MayChangeUnseen("/etc/passwd"));
}

TEST(MayChangeUnseenTest, AFileOnATmpfsMayChangeUnseen) {
  struct statfs fs;
  if (statfs("/dev/shm", &fs) != 0 || fs.f_type != TMPFS_MAGIC) {
    GTEST_SKIP() << "no tmpfs at /dev/shm";
  }
  char base[] = "/dev/shm/rbln-test-XXXXXX";
  ASSERT_NE(mkdtemp(base), nullptr) << std::strerror(errno);
  testing::WriteFileOrDie(JoinPath(base, "a"), "12345");
  std::unique_ptr<Freshness> freshness =
      NewPosixFreshness({.read_leases = false});
  EXPECT_TRUE(freshness->MayChangeUnseen(JoinPath(base, "a")));
  std::filesystem::remove_all(base);
}

// A read-only root follows links beneath it: each entry is looked at by its
// path, as Env::Stat of that root reports it, and no directory is held.
TEST(StatEntriesTest, WhereLinksAreFollowedEachEntryIsLookedAtByItsPath) {
  testing::TempDir tmp;
  ASSERT_EQ(mkdir(tmp.Join("blobs").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(tmp.Join("snap").c_str(), 0755), 0);
  testing::WriteFileOrDie(tmp.Join("blobs/x"), "12345");
  ASSERT_EQ(symlink("../blobs/x", tmp.Join("snap/a").c_str()), 0);
  absl::StatusOr<std::unique_ptr<Freshness>> freshness = NewConfinedFreshness(
      tmp.path(), {.read_only = true, .follow_symlinks_beneath = true});
  ASSERT_TRUE(freshness.ok()) << freshness.status();
  const std::vector<std::string> names = {"a", "missing"};
  std::unique_ptr<HeldDir> held;
  absl::StatusOr<DirStats> stats =
      (*freshness)->StatAndHoldEntries(tmp.Join("snap"), names, &held);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(held, nullptr);
  ASSERT_TRUE(stats->entries[0].has_value());
  EXPECT_EQ(stats->entries[0]->type, FileType::kRegular);
  EXPECT_EQ(stats->entries[0]->size, 5u);
  EXPECT_FALSE(stats->entries[1].has_value());
  // A link leading outside the root is refused.
  ASSERT_EQ(symlink("/etc", tmp.Join("out").c_str()), 0);
  EXPECT_EQ((*freshness)->StatEntries(tmp.Join("out"), names).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(StatEntriesTest, AnUnconfinedFreshnessTakesAnyPath) {
  testing::TempDir tmp;
  testing::WriteFileOrDie(tmp.Join("a"), "12345");
  std::unique_ptr<Freshness> freshness = NewPosixFreshness();
  const std::vector<std::string> names = {"a"};
  std::unique_ptr<HeldDir> held;
  absl::StatusOr<DirStats> first =
      freshness->StatAndHoldEntries(tmp.path(), names, &held);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_NE(held, nullptr);
  ASSERT_EQ(truncate(tmp.Join("a").c_str(), 2), 0);
  absl::StatusOr<DirStats> again =
      freshness->StatEntriesAgain(*held, tmp.path(), names);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->entries[0]->size, 2u);
}

}  // namespace
}  // namespace rbln
