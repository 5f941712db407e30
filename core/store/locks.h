// The store's locks (docs/commit-protocol.md, "Locks"): the store's LOCK,
// held by the one process that has the store open; per artifact, an
// in-process writer flag and reader/writer lock (ArtifactLockTable), and an
// exclusive flock on a lock file in the state directory that exists only
// while it is held (ArtifactLock); and the two together for every artifact
// of one write, taken in name order (WriterLease).
//
// Thread-safe. A lock is released when its object is destroyed.
#ifndef RBLN_CORE_STORE_LOCKS_H_
#define RBLN_CORE_STORE_LOCKS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/os/env.h"

namespace rbln {

// The state directory under the store root (locks); never an artifact.
inline constexpr char kStateDirName[] = ".rbln-artifactd";

// The file whose exclusive flock a writer of `canonical_name` holds, in the
// store's state directory. A maintenance tool that changes an artifact
// directly takes the same lock to keep the daemon out.
std::string ArtifactLockPath(absl::string_view store_root,
                             absl::string_view canonical_name);

// Makes the state directory of the store at `root` (resolved) and its
// locks/ and intents/ (core/store/intent_record.h) directories where missing,
// checks that they belong to this process's user and that no one else may write
// them, and takes the store's LOCK with this process's pid in it:
// FAILED_PRECONDITION naming the holder's pid when another process has it.
absl::StatusOr<std::unique_ptr<FileLock>> LockStore(Env* env,
                                                    const std::string& root);

// One artifact's in-process locks.
struct ArtifactLockEntry {
  // Held (writing == true) by a writer for its whole transaction; a flag
  // rather than a mutex so that a waiting writer can give up when cancelled.
  absl::Mutex mu;
  bool writing ABSL_GUARDED_BY(mu) = false;
  // Shared by readers; exclusive only for the instant of an exchange.
  absl::Mutex rw;
};

// The in-process locks of a store's artifacts, by canonical name. An entry
// lives while someone holds it.
class ArtifactLockTable {
 public:
  std::shared_ptr<ArtifactLockEntry> Entry(const std::string& canonical_name);

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::weak_ptr<ArtifactLockEntry>> entries_
      ABSL_GUARDED_BY(mu_);
};

// An artifact's cross-process flock. The lock file exists only while a lock
// is held: it is removed before the flock is released, and Env::LockFile
// takes a lock only on the file still linked at its name (the protocol in
// docs/commit-protocol.md).
class ArtifactLock {
 public:
  // The lock of `name` in the store at `store_root`. UNAVAILABLE when
  // another process holds it and `wait` is false, or CANCELLED when
  // `is_cancelled` (may be empty) says so while waiting for it. `waiting`
  // (may be empty) is told when the wait starts and ends.
  static absl::StatusOr<std::unique_ptr<ArtifactLock>> Acquire(
      Env* env, absl::string_view store_root, const std::string& name,
      bool wait, const std::function<bool()>& is_cancelled,
      const std::function<void(bool)>& waiting);
  ~ArtifactLock();

  ArtifactLock(const ArtifactLock&) = delete;
  ArtifactLock& operator=(const ArtifactLock&) = delete;

 private:
  ArtifactLock(Env* env, std::string path, std::unique_ptr<FileLock> lock);

  Env* const env_;
  const std::string path_;
  std::unique_ptr<FileLock> lock_;
};

// The in-process writer flags and cross-process locks of one write's
// artifacts, taken in name order so that two writers never deadlock.
class WriterLease {
 public:
  // Waits for the other writers of `names` in this process, then for their
  // cross-process locks when `wait_for_locks` (else UNAVAILABLE when
  // another process holds one); CANCELLED when `is_cancelled` says so while
  // waiting. `waiting` as ArtifactLock::Acquire's.
  static absl::StatusOr<std::unique_ptr<WriterLease>> Acquire(
      ArtifactLockTable* table, Env* env, absl::string_view store_root,
      std::vector<std::string> names, bool wait_for_locks,
      const std::function<bool()>& is_cancelled,
      const std::function<void(bool)>& waiting);
  ~WriterLease();

  WriterLease(const WriterLease&) = delete;
  WriterLease& operator=(const WriterLease&) = delete;

 private:
  WriterLease() = default;

  std::vector<std::shared_ptr<ArtifactLockEntry>> entries_;
  std::vector<std::unique_ptr<ArtifactLock>> locks_;
};

}  // namespace rbln

#endif  // RBLN_CORE_STORE_LOCKS_H_
