#include "core/store/locks.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/core_metrics.h"
#include "core/resize/rescale.h"
#include "core/status_macros.h"
#include "core/store/intent_record.h"
#include "core/text.h"
#include "spdlog/spdlog.h"
#include "xxhash.h"

namespace rbln {
namespace {

// How often a writer waiting for a lock looks whether it was cancelled.
constexpr absl::Duration kLockPollInterval = absl::Milliseconds(20);

// Calls WriteRequest::waiting(true) (when set) on the first Start(), and
// (false) when it goes out of scope after one; the wait's length, from the
// notice's creation (the first try), goes to the metrics under `holder`.
class WaitNotice {
 public:
  WaitNotice(const std::function<void(bool)>& waiting, LockHolder holder)
      : waiting_(waiting), holder_(holder), created_(absl::Now()) {}
  ~WaitNotice() {
    if (!started_) return;
    ObserveLockWait(holder_, absl::Now() - created_);
    if (waiting_) waiting_(false);
  }
  WaitNotice(const WaitNotice&) = delete;
  WaitNotice& operator=(const WaitNotice&) = delete;

  void Start() {
    if (started_) return;
    started_ = true;
    if (waiting_) waiting_(true);
  }

 private:
  const std::function<void(bool)>& waiting_;
  const LockHolder holder_;
  const absl::Time created_;
  bool started_ = false;
};

// Sets the writer flag of `entry`, waiting for the writer that holds it.
absl::Status BeginWriting(ArtifactLockEntry& entry, const std::string& name,
                          const std::function<bool()>& is_cancelled,
                          const std::function<void(bool)>& waiting) {
  auto idle = [&entry]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(entry.mu) {
    return !entry.writing;
  };
  WaitNotice notice(waiting, LockHolder::kDaemon);
  while (true) {
    entry.mu.LockWhenWithTimeout(absl::Condition(&idle), kLockPollInterval);
    if (!entry.writing) {
      entry.writing = true;
      entry.mu.Unlock();
      return absl::OkStatus();
    }
    entry.mu.Unlock();
    notice.Start();
    if (IsCancelled(is_cancelled)) {
      return WriteCancelled(absl::StrCat("while waiting for another write of ",
                                         Echo(name), " to finish"));
    }
  }
}

}  // namespace

std::string ArtifactLockPath(absl::string_view store_root,
                             absl::string_view canonical_name) {
  // A readable prefix for operators, and a hash so that any name (up to
  // PATH_MAX) maps to one short file name.
  const std::string readable = absl::StrReplaceAll(
      canonical_name.substr(0, 64), {{"%", "%25"}, {"/", "%2F"}});
  const uint64_t hash = XXH64(canonical_name.data(), canonical_name.size(), 0);
  return absl::StrCat(store_root, "/", kStateDirName, "/locks/", readable, "-",
                      absl::Hex(hash, absl::kZeroPad16), ".lock");
}

absl::StatusOr<std::unique_ptr<FileLock>> LockStore(Env* env,
                                                    const std::string& root) {
  const std::string state_dir = JoinPath(root, kStateDirName);
  for (const std::string& dir : {state_dir, JoinPath(state_dir, "locks"),
                                 JoinPath(state_dir, kIntentDirName)}) {
    absl::Status made = env->CreateDir(dir);
    if (!made.ok() && !absl::IsAlreadyExists(made)) return made;
    // Whoever controls the lock files controls who may write: they must be
    // the daemon's own.
    RBLN_ASSIGN_OR_RETURN(FileStat dir_st, env->Stat(dir));
    if (dir_st.type != FileType::kDirectory || dir_st.uid != geteuid() ||
        (dir_st.mode & 022) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "state directory ", dir,
          " must be a directory owned by the daemon's user (uid ", geteuid(),
          ") and writable by no one else; it is owned by uid ", dir_st.uid,
          " with mode ", absl::Hex(dir_st.mode),
          ": remove it (it holds no data) or chown/chmod it"));
    }
  }
  const std::string lock_path = JoinPath(state_dir, "LOCK");
  absl::StatusOr<std::unique_ptr<FileLock>> lock =
      env->LockFile(lock_path, /*exclusive=*/true, /*wait=*/false);
  if (absl::IsUnavailable(lock.status())) {
    absl::StatusOr<std::string> holder = env->ReadFileToString(lock_path, 64);
    return absl::FailedPreconditionError(absl::StrCat(
        "artifact store ", root, " is in use by another process (pid ",
        holder.ok() ? absl::StripAsciiWhitespace(*holder) : "unknown", ", per ",
        lock_path, "); stop it or choose another store"));
  }
  RBLN_RETURN_IF_ERROR(lock.status());
  RBLN_RETURN_IF_ERROR((*lock)->WriteContents(absl::StrCat(getpid(), "\n")));
  return lock;
}

std::shared_ptr<ArtifactLockEntry> ArtifactLockTable::Entry(
    const std::string& canonical_name) {
  absl::MutexLock lock(&mu_);
  std::weak_ptr<ArtifactLockEntry>& slot = entries_[canonical_name];
  std::shared_ptr<ArtifactLockEntry> entry = slot.lock();
  if (entry == nullptr) {
    entry = std::make_shared<ArtifactLockEntry>();
    slot = entry;
    if (entries_.size() > 1024) {
      for (auto it = entries_.begin(); it != entries_.end();) {
        if (it->second.expired()) {
          entries_.erase(it++);
        } else {
          ++it;
        }
      }
    }
  }
  return entry;
}

absl::StatusOr<std::unique_ptr<ArtifactLock>> ArtifactLock::Acquire(
    Env* env, absl::string_view store_root, const std::string& name, bool wait,
    const std::function<bool()>& is_cancelled,
    const std::function<void(bool)>& waiting) {
  const std::string path = ArtifactLockPath(store_root, name);
  WaitNotice notice(waiting, LockHolder::kOtherProcess);
  while (true) {
    absl::StatusOr<std::unique_ptr<FileLock>> flock =
        env->LockFile(path, /*exclusive=*/true, /*wait=*/false);
    if (flock.ok()) {
      return std::unique_ptr<ArtifactLock>(
          new ArtifactLock(env, path, *std::move(flock)));
    }
    // Only a conflicting lock means another process; an I/O error or a
    // full disk creating the lock file is reported as what it is.
    if (!absl::IsUnavailable(flock.status())) return flock.status();
    if (!wait) {
      return absl::UnavailableError(absl::StrCat(
          "artifact ", Echo(name),
          " is being changed by another process (a maintenance tool?); "
          "try again later"));
    }
    notice.Start();
    if (IsCancelled(is_cancelled)) {
      return WriteCancelled(
          absl::StrCat("while ", Echo(name), " was locked by another process"));
    }
    absl::SleepFor(kLockPollInterval);
  }
}

ArtifactLock::ArtifactLock(Env* env, std::string path,
                           std::unique_ptr<FileLock> lock)
    : env_(env), path_(std::move(path)), lock_(std::move(lock)) {}

ArtifactLock::~ArtifactLock() {
  absl::Status removed = env_->RemoveFile(path_);
  if (!removed.ok() && !absl::IsNotFound(removed)) {
    spdlog::warn("could not remove lock file {}: {}", LogValue(path_),
                 LogValue(removed.message()));
  }
  lock_.reset();  // unlocks, after the removal
}

absl::StatusOr<std::unique_ptr<WriterLease>> WriterLease::Acquire(
    ArtifactLockTable* table, Env* env, absl::string_view store_root,
    std::vector<std::string> names, bool wait_for_locks,
    const std::function<bool()>& is_cancelled,
    const std::function<void(bool)>& waiting) {
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  auto lease = std::unique_ptr<WriterLease>(new WriterLease());
  for (const std::string& name : names) {
    std::shared_ptr<ArtifactLockEntry> entry = table->Entry(name);
    RBLN_RETURN_IF_ERROR(BeginWriting(*entry, name, is_cancelled, waiting));
    lease->entries_.push_back(std::move(entry));
    RBLN_ASSIGN_OR_RETURN(
        std::unique_ptr<ArtifactLock> lock,
        ArtifactLock::Acquire(env, store_root, name, wait_for_locks,
                              is_cancelled, waiting));
    lease->locks_.push_back(std::move(lock));
  }
  return lease;
}

WriterLease::~WriterLease() {
  locks_.clear();
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    absl::MutexLock lock(&(*it)->mu);
    (*it)->writing = false;
  }
}

}  // namespace rbln
