// Read leases on real files, through the Freshness that takes them
// (StatAndHoldEntries) and trusts them (StatEntriesAgain): another process's
// open for writing breaks one, and where none can be had each file is looked
// at as before.
#include "core/os/read_lease.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/metrics.h"
#include "core/os/env.h"
#include "core/os/freshness.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::ContainsRegex;

// Opens `path` for writing in a child process and appends `data`, as another
// program editing the file would: its open waits for the lease to go.
void AppendFromAnotherProcess(const std::string& path,
                              const std::string& data) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int fd = open(path.c_str(), O_WRONLY | O_APPEND);
    const bool ok = fd >= 0 && write(fd, data.data(), data.size()) ==
                                   static_cast<ssize_t>(data.size());
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

class ReadLeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    freshness_ = testing::ConfinedFreshnessOrDie(tmp_.path());
    dir_ = tmp_.Join("art");
    ASSERT_EQ(mkdir(dir_.c_str(), 0755), 0);
    path_ = JoinPath(dir_, "a");
    testing::WriteFileOrDie(path_, "12345");
    // Not where this machine cannot have one (a network or overlay file
    // system, neither root nor the files' owner).
    const int dir = open(dir_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(dir, 0);
    struct stat st;
    ASSERT_EQ(stat(path_.c_str(), &st), 0);
    struct stat now;
    const bool leasable =
        ReadLease::Take(dir, "a", st.st_dev, st.st_ino, &now) != nullptr;
    close(dir);
    if (!leasable) GTEST_SKIP() << "no read lease can be had on " << path_;
  }

  std::unique_ptr<HeldDir> Hold(DirStats* first) {
    std::unique_ptr<HeldDir> held;
    absl::StatusOr<DirStats> stats =
        freshness_->StatAndHoldEntries(dir_, names_, &held);
    EXPECT_TRUE(stats.ok()) << stats.status();
    if (stats.ok()) *first = *stats;
    EXPECT_NE(held, nullptr);
    return held;
  }

  FileStat Again(const HeldDir& held) {
    absl::StatusOr<DirStats> again =
        freshness_->StatEntriesAgain(held, dir_, names_);
    EXPECT_TRUE(again.ok()) << again.status();
    return again.ok() && again->entries[0].has_value() ? *again->entries[0]
                                                       : FileStat{};
  }

  testing::TempDir tmp_;
  std::unique_ptr<Freshness> freshness_;
  std::string dir_;
  std::string path_;
  const std::vector<std::string> names_ = {"a"};
};

TEST_F(ReadLeaseTest, ALeasedFileIsTrustedUntilAWriterOpensIt) {
  const int before = ReadLeasesHeld();
  DirStats first;
  std::unique_ptr<HeldDir> held = Hold(&first);
  ASSERT_NE(held, nullptr);
  ASSERT_EQ(ReadLeasesHeld(), before + 1) << "no lease on " << path_;
  EXPECT_EQ(Again(*held).size, 5u);

  AppendFromAnotherProcess(path_, "678");
  // The writer's open returned only once the lease was let go.
  EXPECT_EQ(ReadLeasesHeld(), before);
  const FileStat now = Again(*held);
  EXPECT_EQ(now.size, 8u);
  EXPECT_THAT(
      metrics::Registry::Default().Exposition(),
      ContainsRegex("read_lease_breaks_total\\{why=\"writer\"\\} [1-9]"));

  // Further changes are seen too, the file now looked at each time.
  ASSERT_EQ(truncate(path_.c_str(), 1), 0);
  EXPECT_EQ(Again(*held).size, 1u);
}

TEST_F(ReadLeaseTest, ATruncateBreaksTheLease) {
  const int before = ReadLeasesHeld();
  DirStats first;
  std::unique_ptr<HeldDir> held = Hold(&first);
  ASSERT_EQ(ReadLeasesHeld(), before + 1);
  // In this process, on another thread's behalf: the lease thread lets it
  // go while truncate waits.
  ASSERT_EQ(truncate(path_.c_str(), 2), 0);
  EXPECT_EQ(Again(*held).size, 2u);
  EXPECT_EQ(ReadLeasesHeld(), before);
}

// A read-only open with O_TRUNC empties the file and breaks no lease (nor
// do chmod or utimensat): the lease thread's periodic check finds it.
TEST_F(ReadLeaseTest, ATruncateThatBreaksNoLeaseIsFoundByTheCheck) {
  const int before = ReadLeasesHeld();
  DirStats first;
  std::unique_ptr<HeldDir> held = Hold(&first);
  ASSERT_EQ(ReadLeasesHeld(), before + 1);
  const int fd = open(path_.c_str(), O_RDONLY | O_TRUNC | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  close(fd);
  const absl::Time deadline =
      absl::Now() + 3 * kRemovedFileCheckPeriod + absl::Seconds(5);
  while (ReadLeasesHeld() != before && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(ReadLeasesHeld(), before);
  EXPECT_EQ(Again(*held).size, 0u);
  EXPECT_THAT(
      metrics::Registry::Default().Exposition(),
      ContainsRegex("read_lease_breaks_total\\{why=\"changed\"\\} [1-9]"));
}

TEST_F(ReadLeaseTest, AFileOpenForWritingIsLookedAtEachTime) {
  // A writer that opened the file before: no lease can be had, and its
  // writes need no new open.
  const int writer = open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  ASSERT_GE(writer, 0);
  const int before = ReadLeasesHeld();
  DirStats first;
  std::unique_ptr<HeldDir> held = Hold(&first);
  EXPECT_EQ(ReadLeasesHeld(), before);
  ASSERT_EQ(write(writer, "67", 2), 2);
  EXPECT_EQ(Again(*held).size, 7u);
  close(writer);
}

TEST_F(ReadLeaseTest, NoneIsTakenWhileTurnedOff) {
  freshness_ =
      testing::ConfinedFreshnessOrDie(tmp_.path(), {.read_leases = false});
  const int before = ReadLeasesHeld();
  DirStats first;
  std::unique_ptr<HeldDir> held = Hold(&first);
  EXPECT_EQ(ReadLeasesHeld(), before);
  ASSERT_EQ(chmod(path_.c_str(), 0600), 0);
  EXPECT_EQ(Again(*held).mode, 0600u);
}

TEST_F(ReadLeaseTest, DroppingTheHolderLetsTheLeaseGo) {
  const int before = ReadLeasesHeld();
  DirStats first;
  std::unique_ptr<HeldDir> held = Hold(&first);
  ASSERT_EQ(ReadLeasesHeld(), before + 1);
  held.reset();
  EXPECT_EQ(ReadLeasesHeld(), before);
  // Nothing left to break: a writer opens at once.
  AppendFromAnotherProcess(path_, "x");
}

TEST_F(ReadLeaseTest, ARemovedFileIsLetGoSoItsBlocksAreFreed) {
  const int before = ReadLeasesHeld();
  DirStats first;
  std::unique_ptr<HeldDir> held = Hold(&first);
  ASSERT_EQ(ReadLeasesHeld(), before + 1);
  ASSERT_EQ(unlink(path_.c_str()), 0);
  // The lease thread looks every kRemovedFileCheckPeriod.
  const absl::Time deadline =
      absl::Now() + 3 * kRemovedFileCheckPeriod + absl::Seconds(5);
  while (ReadLeasesHeld() != before && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(ReadLeasesHeld(), before);
  EXPECT_THAT(
      metrics::Registry::Default().Exposition(),
      ContainsRegex("read_lease_breaks_total\\{why=\"removed\"\\} [1-9]"));
}

TEST_F(ReadLeaseTest, AtMostkMaxReadLeasesAreHeld) {
  std::vector<std::string> many;
  for (int i = 0; i < kMaxReadLeases + 8; ++i) {
    many.push_back(absl::StrCat("f", i));
    testing::WriteFileOrDie(JoinPath(dir_, many.back()), "x");
  }
  std::unique_ptr<HeldDir> held;
  absl::StatusOr<DirStats> stats =
      freshness_->StatAndHoldEntries(dir_, many, &held);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(ReadLeasesHeld(), kMaxReadLeases);
  // The files beyond the limit are looked at each time.
  testing::WriteFileOrDie(
      JoinPath(dir_, "f" + std::to_string(kMaxReadLeases + 7)), "longer");
  absl::StatusOr<DirStats> again =
      freshness_->StatEntriesAgain(*held, dir_, many);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->entries.back()->size, 6u);
  held.reset();
  EXPECT_EQ(ReadLeasesHeld(), 0);
}

TEST(ReadLeaseFileSystemTest, NoneOnAFileSystemThatIsNotLocalStorage) {
  // procfs: regular files, but not a file system whose leases the kernel
  // breaks for every writer.
  const int proc = open("/proc/self", O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(proc, 0);
  struct stat st;
  ASSERT_EQ(fstatat(proc, "status", &st, 0), 0);
  ASSERT_TRUE(S_ISREG(st.st_mode));
  struct stat now;
  EXPECT_EQ(ReadLease::Take(proc, "status", st.st_dev, st.st_ino, &now),
            nullptr);
  close(proc);
}

TEST(ReadLeaseFileSystemTest, NoneWhenTheNameIsAnotherFileNow) {
  testing::TempDir tmp;
  testing::WriteFileOrDie(tmp.Join("a"), "1");
  testing::WriteFileOrDie(tmp.Join("b"), "2");
  struct stat a;
  ASSERT_EQ(stat(tmp.Join("a").c_str(), &a), 0);
  const int dir = open(tmp.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir, 0);
  struct stat now;
  EXPECT_EQ(ReadLease::Take(dir, "b", a.st_dev, a.st_ino, &now), nullptr);
  std::unique_ptr<ReadLease> lease =
      ReadLease::Take(dir, "a", a.st_dev, a.st_ino, &now);
  ASSERT_NE(lease, nullptr);
  EXPECT_TRUE(lease->intact());
  EXPECT_EQ(now.st_ino, a.st_ino);
  close(dir);
}

}  // namespace
}  // namespace rbln
