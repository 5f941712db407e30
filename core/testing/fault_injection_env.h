// FaultInjectionEnv: an Env for tests that counts every file-system call made
// through it and makes a chosen one fail, or simulates a crash, in the manner
// of LevelDB's db/fault_injection_test.cc.
//
// Counted calls are every Env method and every method of the files and locks
// it returns, except path() and native_handle() (which do no I/O). A failed
// or crashed call does not reach the wrapped Env.
//
//  * FailAt(k, errno): the k-th call from now fails with that errno, mapped
//    to a status as env.h documents (ENOSPC -> RESOURCE_EXHAUSTED, EIO ->
//    INTERNAL, ...), the message naming the operation, the path and
//    "(injected)". Later calls succeed.
//  * CrashAt(k): the k-th call from now and every later one fail. At that
//    moment every file written through this Env loses what it was not
//    fsynced: it is truncated to its size at its last Sync() (0 if never
//    synced), as the kernel would drop an unwritten page cache. The file is
//    found by a descriptor of its own, so wherever a rename has moved it.
//
// Directory entries are not rolled back at a crash (a rename or an unlink
// stays done even if its directory was never fsynced).
//
// Thread-safe. Files and locks opened through this Env must not outlive it.
#ifndef RBLN_CORE_TESTING_FAULT_INJECTION_ENV_H_
#define RBLN_CORE_TESTING_FAULT_INJECTION_ENV_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/os/env.h"
#include "core/status_macros.h"

namespace rbln::testing {

struct FaultInjectionOptions {
  // Pass Sync() and SyncDir() on to the wrapped Env. A test that relies only
  // on CrashAt's simulated data loss may turn this off: the calls are still
  // counted, can still fail, and still mark data as synced, but the test no
  // longer waits for the disk to flush (milliseconds per call).
  bool forward_syncs = true;
};

class FaultInjectionEnv : public EnvWrapper {
 public:
  explicit FaultInjectionEnv(Env* target,
                             const FaultInjectionOptions& options = {})
      : EnvWrapper(target), options_(options) {}

  // The k-th call (1-based) from now fails with `error_number`; replaces any
  // pending fault.
  void FailAt(int64_t k, int error_number);
  // The k-th call (1-based) from now and every later call fail, and unsynced
  // data is dropped; replaces any pending fault.
  void CrashAt(int64_t k);
  // Calls made since construction or the last Reset().
  int64_t calls() const;
  // "<method> <path>" of each of those calls, in order ("RenameExchange
  // /s/.a.staging-0123456789abcdef <-> /s/a").
  std::vector<std::string> call_log() const;
  // Whether a CrashAt has fired (since the last Reset()).
  bool crashed() const;
  // "<op> <path>" of the call that was made to fail or crash, "" if none.
  std::string faulted_call() const;
  // Zeroes the count, cancels pending faults, ends a crash and forgets the
  // files written so far.
  void Reset();

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override;
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override;
  absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                               uint64_t max_bytes) override;
  absl::StatusOr<std::vector<DirEntry>> ListDir(
      const std::string& path) override;
  absl::StatusOr<FileStat> Stat(const std::string& path) override;
  absl::StatusOr<std::optional<std::string>> ReadLink(
      const std::string& path) override {
    RBLN_RETURN_IF_ERROR(Tick("ReadLink", path));
    return target()->ReadLink(path);
  }
  absl::Status CreateDir(const std::string& path) override;
  absl::Status SetOwnership(const std::string& path,
                            const FileOwnership& owner) override;
  absl::Status RemoveFile(const std::string& path) override;
  absl::Status RemoveDir(const std::string& path) override;
  absl::Status Link(const std::string& from, const std::string& to) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status RenameNoReplace(const std::string& from,
                               const std::string& to) override;
  absl::Status RenameExchange(const std::string& a,
                              const std::string& b) override;
  absl::Status SyncDir(const std::string& path) override;
  absl::Status SyncFile(const std::string& path) override {
    RBLN_RETURN_IF_ERROR(Tick("SyncFile", path));
    if (!options_.forward_syncs) return absl::OkStatus();
    return target()->SyncFile(path);
  }
  absl::StatusOr<std::unique_ptr<Directory>> OpenDirectory(
      const std::string& path) override {
    RBLN_RETURN_IF_ERROR(Tick("OpenDirectory", path));
    return target()->OpenDirectory(path);
  }
  absl::StatusOr<std::unique_ptr<FileLock>> LockFile(const std::string& path,
                                                     bool exclusive,
                                                     bool wait) override;

 private:
  class CountedRandomAccessFile;
  class CountedWritableFile;
  class CountedFileLock;

  // What a WritableFile opened through this Env has written and synced.
  struct WrittenFile;

  // Every counted call starts here: logs it, and returns the injected error
  // when it is the one to fail (or the crash has happened). `op` is the
  // method's name.
  absl::Status Tick(absl::string_view op, absl::string_view path);
  // Truncates every written file to its size at its last sync.
  void DropUnsyncedData() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<WrittenFile> TrackWrittenFile(const std::string& path);
  void RecordWrite(WrittenFile& file, uint64_t end);
  void RecordSync(WrittenFile& file);

  const FaultInjectionOptions options_;
  mutable absl::Mutex mu_;
  std::vector<std::string> call_log_ ABSL_GUARDED_BY(mu_);
  int64_t fault_at_ ABSL_GUARDED_BY(mu_) = 0;  // 0: none pending
  int fault_errno_ ABSL_GUARDED_BY(mu_) = 0;   // 0: a crash
  bool crashed_ ABSL_GUARDED_BY(mu_) = false;
  std::string faulted_call_ ABSL_GUARDED_BY(mu_);
  // Shared with the open file objects, which may outlive a Reset().
  std::vector<std::shared_ptr<WrittenFile>> written_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rbln::testing

#endif  // RBLN_CORE_TESTING_FAULT_INJECTION_ENV_H_
