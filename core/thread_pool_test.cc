#include "core/thread_pool.h"

#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

TEST(ThreadPoolTest, RunsEveryScheduledWorkOnItsOwnThreads) {
  absl::Mutex mu;
  std::set<std::thread::id> threads;
  int done = 0;
  {
    ThreadPool pool(2);
    for (int i = 0; i < 100; ++i) {
      pool.Schedule([&] {
        absl::MutexLock lock(&mu);
        threads.insert(std::this_thread::get_id());
        ++done;
      });
    }
  }  // the destructor runs what is queued, then joins
  EXPECT_EQ(done, 100);
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
  EXPECT_LE(threads.size(), 2u);
}

TEST(ThreadPoolTest, OneBlockedWorkDoesNotHoldUpTheOtherThread) {
  ThreadPool pool(2);
  absl::Notification release, second_ran;
  pool.Schedule([&] { release.WaitForNotification(); });
  pool.Schedule([&] { second_ran.Notify(); });
  second_ran.WaitForNotification();  // would hang with one thread
  release.Notify();
}

TEST(ThreadPoolTest, TakesMoveOnlyWork) {
  auto value = std::make_unique<int>(7);
  int seen = 0;
  {
    ThreadPool pool(1);
    pool.Schedule([v = std::move(value), &seen]() mutable { seen = *v; });
  }
  EXPECT_EQ(seen, 7);
}

}  // namespace
}  // namespace rbln
