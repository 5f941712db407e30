#include "core/thread_pool.h"

#include <cassert>
#include <limits>
#include <utility>

namespace rbln {

ThreadPool::ThreadPool(int threads) {
  assert(threads >= 1);
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

void ThreadPool::Schedule(absl::AnyInvocable<void() &&> work) {
  TrySchedule(std::move(work), std::numeric_limits<size_t>::max());
}

bool ThreadPool::TrySchedule(absl::AnyInvocable<void() &&> work,
                             size_t max_queued) {
  absl::MutexLock lock(&mu_);
  if (queue_.size() >= max_queued) return false;
  queue_.push_back(std::move(work));
  return true;
}

void ThreadPool::Run() {
  while (true) {
    absl::AnyInvocable<void() &&> work;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, and nothing is left
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    std::move(work)();
  }
}

}  // namespace rbln
