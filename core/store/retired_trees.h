// RetiredTrees: the old versions of artifacts that commits swapped out, kept
// for a grace period and then removed in the background
// (docs/commit-protocol.md, step 6).
//
// After an in-place commit (or a replacing one into an output directory) the
// old version is beside the artifact under a retired name
// (core/store/staging_name.h). A serving process that opened the
// artifact directory before the swap and reads its files with openat()
// relative to that descriptor is still reading that tree: removing it at
// once would pull files from under it. So the commit hands the path here and
// replies; the tree is removed once the grace period has passed, on a thread
// of this object's own.
//
// * While it waits out its grace, the tree keeps its files but not their
//   cached pages: the thread tells the kernel at once that they will not be
//   read again (Env::ForgetCachedPages; a file with another link, such as a
//   companion file the new version shares, keeps them). A resize reads the
//   whole old version to copy it, which would otherwise leave gigabytes of
//   a dead version in the page cache, ahead of what is still read, until the
//   grace is over; the next large write would then wait for the kernel to
//   reclaim them (docs/performance.md, row 1). A reader still on the old
//   version reads it from the disk.
// * A grace of zero removes the tree in Retire() itself, before it returns
//   (and so before the commit replies).
// * RemoveNow() removes every pending tree at once, in the caller's thread:
//   for a write that ran out of disk space, which our grace period must not
//   have caused.
// * Destruction (the daemon stopping) removes every pending tree at once,
//   without waiting out its grace, and logs that it does.
// * A tree that cannot be removed (after a second try) is logged and left:
//   its intent record stays, so the store's recovery removes it when the
//   store is next opened. So is a tree pending when the process dies.
//
// Trees are named by path: a tree moved elsewhere meanwhile (its parent
// renamed) is not found; its record is dropped, and recovery reports the
// tree where it went but leaves it (it holds no record of that path).
//
// The trees pending in every instance are the metric
// rbln_artifactd_old_versions_pending (core/core_metrics.h).
//
// Thread-safe: all methods may be called concurrently. `env` must outlive
// this object, and is used from its thread.
#ifndef RBLN_CORE_STORE_RETIRED_TREES_H_
#define RBLN_CORE_STORE_RETIRED_TREES_H_

#include <chrono>
#include <cstddef>
#include <deque>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/os/env.h"

namespace rbln {

// Removes a staging tree (RemoveTree), trying twice; what still remains is
// logged as left for the recovery at the next start. Missing is success.
// Once the tree is gone, its parent is fsynced and then its intent record
// `record` ("": none) removed (core/store/intent_record.h), so that no
// crash leaves the tree without its record. Returns whether it is gone.
bool RemoveStagingTree(Env* env, const std::string& path,
                       const std::string& record);

class RetiredTrees {
 public:
  // `grace` below zero counts as zero. `forget_pages`: drop each retired
  // tree's cached pages at once (above); off only where a test counts every
  // call the env sees and the background thread's would interleave.
  RetiredTrees(Env* env, absl::Duration grace, bool forget_pages = true);
  ~RetiredTrees();

  RetiredTrees(const RetiredTrees&) = delete;
  RetiredTrees& operator=(const RetiredTrees&) = delete;

  absl::Duration grace() const { return grace_; }

  // Removes the tree at `path`, and then its intent record `record`, once
  // the grace period has passed from now; with a zero grace, now, before
  // returning.
  void Retire(std::string path, std::string record = "");

  // Removes every tree still pending at once, here, and waits for one the
  // background thread is removing (or whose pages it is dropping). Returns how
  // many trees that was (0: there was no space to give back).
  size_t RemoveNow();

  // Trees retired and not yet removed (or being removed).
  size_t pending() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Tree {
    std::string path;
    std::string record;
    Clock::time_point due;
    bool pages_forgotten = false;
  };

  void RemoveWhenDue();

  Env* const env_;
  const absl::Duration grace_;
  const bool forget_pages_;

  mutable absl::Mutex mu_;
  // In the order retired, which is the order due (one grace for all).
  std::deque<Tree> trees_ ABSL_GUARDED_BY(mu_);
  // Trees taken from trees_ by the background thread and being removed.
  size_t removing_ ABSL_GUARDED_BY(mu_) = 0;
  // Whether the background thread is dropping a tree's cached pages.
  bool forgetting_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Started by the first Retire() with a grace, so that a store that never
  // writes has no thread.
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rbln

#endif  // RBLN_CORE_STORE_RETIRED_TREES_H_
