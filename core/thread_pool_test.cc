#include "core/thread_pool.h"

#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
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

TEST(ThreadPoolTest, TryScheduleRefusesBeyondTheQueueCap) {
  absl::Mutex mu;
  std::vector<int> ran;
  const auto record = [&](int i) {
    return [&, i] {
      absl::MutexLock lock(&mu);
      ran.push_back(i);
    };
  };
  auto dropped = std::make_shared<int>(0);
  absl::Notification release;
  absl::BlockingCounter busy(2);
  {
    ThreadPool pool(2);
    // Both threads busy, so that what follows waits in the queue.
    for (int i = 0; i < 2; ++i) {
      pool.Schedule([&] {
        busy.DecrementCount();
        release.WaitForNotification();
      });
    }
    busy.Wait();
    EXPECT_TRUE(pool.TrySchedule(record(1), 2));
    EXPECT_TRUE(pool.TrySchedule(record(2), 2));
    // Two wait: a third is refused, and destroyed without running.
    EXPECT_FALSE(pool.TrySchedule([dropped] { *dropped = 1; }, 2));
    EXPECT_EQ(dropped.use_count(), 1);
    EXPECT_FALSE(pool.TrySchedule(record(3), 0));
    // The cap is the caller's: a larger one still admits.
    EXPECT_TRUE(pool.TrySchedule(record(4), 3));
    // Schedule has none.
    pool.Schedule(record(5));
    release.Notify();
  }  // the destructor runs what is queued, then joins
  EXPECT_THAT(ran, ::testing::UnorderedElementsAre(1, 2, 4, 5));
  EXPECT_EQ(*dropped, 0);
}

TEST(ThreadPoolTest, TryScheduleAdmitsAgainOnceTheQueueDrains) {
  absl::Notification running, release, first_ran, second_ran;
  ThreadPool pool(1);
  pool.Schedule([&] {
    running.Notify();
    release.WaitForNotification();
  });
  running.WaitForNotification();  // out of the queue
  EXPECT_TRUE(pool.TrySchedule([&] { first_ran.Notify(); }, 1));
  EXPECT_FALSE(pool.TrySchedule([] {}, 1));
  release.Notify();
  first_ran.WaitForNotification();  // it left the queue before running
  EXPECT_TRUE(pool.TrySchedule([&] { second_ran.Notify(); }, 1));
  second_ran.WaitForNotification();
}

}  // namespace
}  // namespace rbln
