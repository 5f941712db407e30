#include "core/store/retired_trees.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "core/core_metrics.h"
#include "core/os/subprocess.h"
#include "core/store/intent_record.h"
#include "core/text.h"
#include "spdlog/spdlog.h"

namespace rbln {

bool RemoveStagingTree(Env* env, const std::string& path,
                       const std::string& record) {
  absl::Status status = RemoveTree(env, path);
  if (!status.ok() && !absl::IsNotFound(status)) {
    status = RemoveTree(env, path);
  }
  if (!status.ok() && !absl::IsNotFound(status)) {
    spdlog::warn(
        "could not remove staging directory {}: {}; it is removed "
        "when the store is next opened",
        LogValue(path), LogValue(status.ToString()));
    return false;
  }
  if (record.empty()) return true;
  // The record goes only once the removal is durable: a power loss must
  // not bring the tree back without it. A failed sync keeps the record,
  // which the next start drops if the tree is gone.
  const absl::Status synced = env->SyncDir(std::string(Dirname(path)));
  if (synced.ok()) {
    DropIntentRecord(env, record);
  } else {
    spdlog::warn(
        "could not make the removal of {} durable: {}; its intent "
        "record stays until the next start",
        LogValue(path), LogValue(synced.message()));
  }
  return true;
}

namespace {

// Env::ForgetCachedPages for every regular file of the tree at `path` that
// has no other link (one that has is shared with the new version). Advice:
// what fails is skipped, and only logged at debug level (the tree may be
// gone already, removed by RemoveNow()).
void ForgetTreePages(Env* env, const std::string& path) {
  const absl::Status status = VisitTreeBottomUp(
      env, path, [env](const std::string& at, const FileStat& st) {
        if (st.type != FileType::kRegular || st.nlink != 1) {
          return absl::OkStatus();
        }
        return env->ForgetCachedPages(at);
      });
  if (!status.ok()) {
    spdlog::debug("could not drop every cached page of the old version {}: {}",
                  LogValue(path), LogValue(status.ToString()));
  }
}

}  // namespace

RetiredTrees::RetiredTrees(Env* env, absl::Duration grace, bool forget_pages)
    : env_(env),
      grace_(std::max(grace, absl::ZeroDuration())),
      forget_pages_(forget_pages) {}

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
  for (const Tree& tree : left) {
    RemoveStagingTree(env_, tree.path, tree.record);
  }
  AddPendingOldVersions(-static_cast<int64_t>(left.size()));
}

void RetiredTrees::Retire(std::string path, std::string record) {
  if (grace_ == absl::ZeroDuration()) {
    RemoveStagingTree(env_, path, record);
    return;
  }
  const Clock::time_point due =
      Clock::now() + absl::ToChronoNanoseconds(grace_);
  absl::MutexLock lock(&mu_);
  trees_.push_back({.path = std::move(path),
                    .record = std::move(record),
                    .due = due,
                    .pages_forgotten = !forget_pages_});
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
  for (const Tree& tree : taken) {
    RemoveStagingTree(env_, tree.path, tree.record);
  }
  AddPendingOldVersions(-static_cast<int64_t>(taken.size()));
  // Waits for the tree the thread is removing, and for one whose pages it
  // is dropping: the file it holds open would keep its blocks a moment after
  // the unlink above, and the caller wants the space now.
  absl::MutexLock lock(&mu_);
  const auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return removing_ == 0 && !forgetting_;
  };
  mu_.Await(absl::Condition(&idle));
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
  const auto first_with_pages = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::find_if(trees_.begin(), trees_.end(),
                        [](const Tree& t) { return !t.pages_forgotten; });
  };
  // While the oldest tree waits out its grace, a newer one's pages must not
  // wait with it.
  const auto stopping_or_pages = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || first_with_pages() != trees_.end();
  };
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(&stopping_or_retired));
    if (stopping_) return;
    // A tree's pages go as soon as it is retired, not after its grace.
    if (auto fresh = first_with_pages(); fresh != trees_.end()) {
      fresh->pages_forgotten = true;
      const std::string path = fresh->path;
      forgetting_ = true;
      mu_.Unlock();
      ForgetTreePages(env_, path);
      mu_.Lock();
      forgetting_ = false;
      continue;
    }
    const Clock::duration wait = trees_.front().due - Clock::now();
    if (wait > Clock::duration::zero()) {
      // Woken early to stop or for a newer tree's pages; RemoveNow() may
      // also have emptied the queue meanwhile, which the loop looks at again.
      mu_.AwaitWithTimeout(absl::Condition(&stopping_or_pages),
                           absl::FromChrono(wait));
      continue;
    }
    Tree tree = std::move(trees_.front());
    trees_.pop_front();
    ++removing_;
    mu_.Unlock();
    RemoveStagingTree(env_, tree.path, tree.record);
    AddPendingOldVersions(-1);
    spdlog::debug("removed the old version {} after its grace period",
                  LogValue(tree.path));
    mu_.Lock();
    --removing_;
  }
}

}  // namespace rbln
