// ThreadPool: a fixed number of threads running scheduled work in order.
// The daemon hands it what must not run on one of gRPC's own threads (a read
// that may block on the disk or on a codec process; docs/performance.md).
// Work waits in a queue for a free thread: Schedule queues without bound,
// TrySchedule only below a cap the caller gives.
//
// Thread-safe. The destructor runs what is still queued, then joins.
#ifndef RBLN_CORE_THREAD_POOL_H_
#define RBLN_CORE_THREAD_POOL_H_

#include <cstddef>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace rbln {

class ThreadPool {
 public:
  // `threads` >= 1.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs `work` on one of the pool's threads, after what was scheduled
  // before it.
  void Schedule(absl::AnyInvocable<void() &&> work);
  // The same, unless `max_queued` works already wait for a thread (those
  // running do not count): then returns false, and `work` is destroyed
  // without running.
  bool TrySchedule(absl::AnyInvocable<void() &&> work, size_t max_queued);

 private:
  void Run();

  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace rbln

#endif  // RBLN_CORE_THREAD_POOL_H_
