#include "core/store/retired_trees.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "core/core_metrics.h"
#include "core/subprocess.h"
#include "core/text.h"
#include "spdlog/spdlog.h"

namespace rbln {

void RemoveStagingTree(Env* env, const std::string& path) {
  absl::Status status = RemoveTree(env, path);
  if (!status.ok() && !absl::IsNotFound(status)) {
    status = RemoveTree(env, path);
  }
  if (!status.ok() && !absl::IsNotFound(status)) {
    spdlog::warn(
        "could not remove staging directory {}: {}; it is removed "
        "when the store is next opened",
        LogValue(path), LogValue(status.ToString()));
  }
}

RetiredTrees::RetiredTrees(Env* env, absl::Duration grace)
    : env_(env), grace_(std::max(grace, absl::ZeroDuration())) {}

RetiredTrees::~RetiredTrees() {
  std::deque<Tree> left;
  std::thread thread;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    left.swap(trees_);
    thread = std::move(thread_);
  }
  // It finishes the tree it is removing, if any, and takes no other.
  if (thread.joinable()) thread.join();
  if (left.empty()) return;
  spdlog::info(
      "stopping: removing {} old artifact version(s) now, before their "
      "grace period of {} is over",
      left.size(), FormatSeconds(grace_));
  for (const Tree& tree : left) RemoveStagingTree(env_, tree.path);
  AddPendingOldVersions(-static_cast<int64_t>(left.size()));
}

void RetiredTrees::Retire(std::string path) {
  if (grace_ == absl::ZeroDuration()) {
    RemoveStagingTree(env_, path);
    return;
  }
  const Clock::time_point due =
      Clock::now() + absl::ToChronoNanoseconds(grace_);
  absl::MutexLock lock(&mu_);
  trees_.push_back({std::move(path), due});
  AddPendingOldVersions(1);
  if (!thread_.joinable() && !stopping_) {
    thread_ = std::thread([this] { RemoveWhenDue(); });
  }
}

size_t RetiredTrees::RemoveNow() {
  std::deque<Tree> taken;
  size_t in_flight = 0;
  {
    absl::MutexLock lock(&mu_);
    taken.swap(trees_);
    in_flight = removing_;
  }
  for (const Tree& tree : taken) RemoveStagingTree(env_, tree.path);
  AddPendingOldVersions(-static_cast<int64_t>(taken.size()));
  if (in_flight > 0) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](size_t* removing) { return *removing == 0; }, &removing_));
  }
  return taken.size() + in_flight;
}

size_t RetiredTrees::pending() const {
  absl::MutexLock lock(&mu_);
  return trees_.size() + removing_;
}

void RetiredTrees::RemoveWhenDue() {
  const auto stopping_or_retired = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !trees_.empty();
  };
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(&stopping_or_retired));
    if (stopping_) return;
    const Clock::duration wait = trees_.front().due - Clock::now();
    if (wait > Clock::duration::zero()) {
      // Woken early only to stop; RemoveNow() may also have emptied the
      // queue meanwhile, which the loop looks at again.
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(wait));
      continue;
    }
    Tree tree = std::move(trees_.front());
    trees_.pop_front();
    ++removing_;
    mu_.Unlock();
    RemoveStagingTree(env_, tree.path);
    AddPendingOldVersions(-1);
    spdlog::debug("removed the old version {} after its grace period",
                  LogValue(tree.path));
    mu_.Lock();
    --removing_;
  }
}

}  // namespace rbln
