// The kernel's inotify queue overflowing: the events it dropped may have
// been of a watched directory, so the generation moves (core/os/dir_watch.h).
//
// A test executable of its own, so that it makes the process's inotify
// instance: the queue's length is read from
// /proc/sys/fs/inotify/max_queued_events when an instance is made, and this
// test lowers it for that moment (as root; skipped otherwise). Other
// processes that make an instance in that moment get the short queue too,
// which costs them only lookups (an overflow makes them trust nothing).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/os/dir_watch.h"
#include "core/os/unique_fd.h"
#include "core/testing/test_util.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

constexpr char kMaxQueuedEvents[] = "/proc/sys/fs/inotify/max_queued_events";
constexpr int kShortQueue = 16;

// Writes `value` to the sysctl; false when it cannot be written.
bool WriteMaxQueuedEvents(const std::string& value) {
  UniqueFd fd(open(kMaxQueuedEvents, O_WRONLY | O_CLOEXEC));
  return fd.get() >= 0 && write(fd.get(), value.data(), value.size()) ==
                              static_cast<ssize_t>(value.size());
}

// The process's DirWatch, made while the sysctl is kShortQueue; null (with
// `why`) when that cannot be arranged.
DirWatch* WatchWithShortQueue(std::string* why) {
  const std::string saved = std::string(
      absl::StripAsciiWhitespace(testing::ReadFileOrDie(kMaxQueuedEvents)));
  int saved_value = 0;
  if (!absl::SimpleAtoi(saved, &saved_value) || saved_value <= kShortQueue) {
    *why = absl::StrCat(kMaxQueuedEvents, " is ", saved);
    return nullptr;
  }
  if (!WriteMaxQueuedEvents(absl::StrCat(kShortQueue))) {
    *why = absl::StrCat("cannot write ", kMaxQueuedEvents, " (not root?)");
    return nullptr;
  }
  DirWatch* watch = DirWatch::Get();
  EXPECT_TRUE(WriteMaxQueuedEvents(saved)) << "restore " << saved;
  if (watch == nullptr) *why = "no inotify here";
  return watch;
}

TEST(DirWatchOverflowTest, AChangeLostToAFullQueueStillMovesTheGeneration) {
  testing::EnterPrivateMountNamespace();  // no other test's mount moves it
  std::string why;
  DirWatch* watch = WatchWithShortQueue(&why);
  if (watch == nullptr) GTEST_SKIP() << why;
  testing::TempDir tmp;
  ASSERT_EQ(mkdir(tmp.Join("held").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(tmp.Join("busy").c_str(), 0755), 0);
  UniqueFd root(open(tmp.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_GE(root.get(), 0);
  std::unique_ptr<DirWatch::Watches> held =
      watch->WatchPath(root.get(), "held");
  std::unique_ptr<DirWatch::Watches> busy =
      watch->WatchPath(root.get(), "busy");
  if (held == nullptr || busy == nullptr) {
    GTEST_SKIP() << tmp.path() << " is not watched";
  }
  const uint64_t before = watch->Generation();
  ASSERT_NE(before, 0u);
  // Fill the queue with events of `busy`, then let it go: what it queued
  // concerns nobody now. The change in `held` finds the queue full and is
  // dropped; only the overflow tells of it.
  for (int i = 0; i < 4 * kShortQueue; ++i) {
    testing::WriteFileOrDie(tmp.Join(absl::StrCat("busy/", i)), "x");
  }
  busy.reset();
  testing::WriteFileOrDie(tmp.Join("held/changed"), "y");
  const uint64_t after = watch->Generation();
  EXPECT_NE(after, before);
  // The queue is read to its end: nothing more moves it.
  EXPECT_EQ(watch->Generation(), after);
}

}  // namespace
}  // namespace rbln
