// ArtifactStore: a directory tree of artifacts, and the commit engine that
// changes them safely (DESIGN §6; the protocol is described for operators in
// docs/commit-protocol.md).
//
// * Stage then rename. An in-place resize builds the new version in a sibling
//   `.<name>.staging-<16 hex>` (unchanged files hard-linked, each container
//   rewritten with its payload cloned inside the kernel, everything fsynced),
//   swaps it with the artifact by renameat2(RENAME_EXCHANGE), fsyncs the
//   parent, and deletes the old tree. A resize into an output directory
//   stages a full copy beside the destination and publishes it with
//   renameat2(RENAME_NOREPLACE) (or, when replacing, an exchange).
// * Crash safety. At every instant the artifact path holds the complete old
//   or the complete new version. Opening a store removes staging debris that
//   a crash left (and nothing else).
// * Locks. Per artifact: writers exclude each other (in process, and across
//   processes by an flock in the state directory); readers share and only
//   wait for the instant of an exchange. A store is opened by one process at
//   a time (the LOCK file in the state directory). Writers on different
//   artifacts never wait for each other.
//
// Names: an artifact is named by its path relative to the store root ("a",
// "team/llama") or by an absolute path inside the store. Names with "..",
// components starting with '.', NUL bytes, or symbolic links anywhere on the
// path are refused (PERMISSION_DENIED for anything that leaves the store).
//
// Thread-safe: all methods may be called concurrently.
#ifndef RBLN_CORE_STORE_H_
#define RBLN_CORE_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/artifact.h"
#include "core/budget.h"
#include "core/device_spec.h"
#include "core/dram.h"
#include "core/env.h"
#include "core/fit.h"
#include "core/rescale.h"

namespace rbln {

// The state directory under the store root (locks); never an artifact.
inline constexpr char kStateDirName[] = ".rbln-artifactd";

// Which device figures apply to an artifact (by default the spec table's
// entry for the artifact's target NPU).
using DeviceResolver =
    std::function<absl::StatusOr<DramChoice>(const Artifact& artifact)>;

struct StoreOptions {
  DeviceResolver device_resolver;  // empty: the spec table
  // Wait for a conflicting cross-process artifact lock (a maintenance tool)
  // instead of failing with UNAVAILABLE.
  bool wait_for_artifact_locks = true;
};

struct WriteRequest {
  std::string name;
  // Exactly one of target (Set) and budget (Fit).
  std::optional<uint64_t> target;
  std::optional<MemoryBudget> budget;
  // Empty: in place. Else a new artifact written there (named as `name` is).
  std::string output_name;
  bool replace = false;  // allow an existing output directory to be replaced
  bool dry_run = false;  // plan and report; write nothing
  // Compare-and-set: ABORTED unless the current count is this.
  std::optional<uint64_t> expected_current;
  // Called from the writing thread as payload bytes are copied.
  std::function<void(uint64_t done, uint64_t total)> progress;
  // Polled once the locks are held and again just before the commit point;
  // when it returns true the write stops with CANCELLED, changing nothing
  // (e.g. the caller's deadline passed while waiting for a lock).
  std::function<bool()> is_cancelled;
};

struct WriteResult {
  std::string name;         // canonical store-relative name of the source
  std::string output_name;  // canonical name written ("" when in place)
  uint64_t previous_num_blocks = 0;
  uint64_t new_num_blocks = 0;
  bool written = false;  // false for dry runs and in-place no-ops
  std::vector<std::string> warnings;
  std::optional<FitResult> fit;  // for budget requests
  std::string dram_source;       // where the device figures came from
};

class ArtifactStore {
 public:
  // Opens the store at `root` (an existing directory): takes the store LOCK
  // (FAILED_PRECONDITION naming the holder's pid when another process has
  // it), then removes staging debris under the root (see recovered()).
  static absl::StatusOr<std::unique_ptr<ArtifactStore>> Open(
      Env* env, const std::string& root, StoreOptions options = {});
  ~ArtifactStore();

  ArtifactStore(const ArtifactStore&) = delete;
  ArtifactStore& operator=(const ArtifactStore&) = delete;

  const std::string& root() const { return root_; }
  // Store-relative paths of the staging directories removed at open.
  const std::vector<std::string>& recovered() const { return recovered_; }

  // The canonical store-relative name for `name`, checked as the file
  // comment says. Does not require the artifact to exist.
  absl::StatusOr<std::string> CanonicalName(absl::string_view name) const;
  std::string PathOf(absl::string_view canonical_name) const;

  // Opens an artifact for reading (a consistent snapshot).
  absl::StatusOr<Artifact> Read(absl::string_view name,
                                const ArtifactOptions& options = {});

  // Set or Fit, in place or into an output directory (see WriteRequest).
  absl::StatusOr<WriteResult> Write(const WriteRequest& request);

  // Canonical names of every artifact (a directory holding
  // rbln_config.json) under the root, sorted; hidden entries are skipped.
  absl::StatusOr<std::vector<std::string>> List();

  // The device figures that apply to `artifact`.
  absl::StatusOr<DramChoice> DeviceFor(const Artifact& artifact) const;

 private:
  struct LockEntry;
  class WriterLease;

  ArtifactStore(Env* env, std::string root, StoreOptions options);
  std::shared_ptr<LockEntry> Entry(const std::string& canonical_name);
  std::string LockFilePath(const std::string& canonical_name) const;
  // INVALID_ARGUMENT when a proper ancestor of the name is an artifact.
  absl::Status CheckNotInsideArtifact(const std::string& canonical_name);
  absl::Status RemoveDebris(const std::string& rel_dir);
  // Reads the request against `artifact` (compare-and-set, device, guards,
  // output checks) into `result`; returns the resize to make.
  absl::StatusOr<ResizePlan> Plan(const WriteRequest& request,
                                  const std::string& name,
                                  const std::string& output_name,
                                  const Artifact& artifact,
                                  WriteResult* result);
  absl::StatusOr<WriteResult> WriteLocked(const WriteRequest& request,
                                          const std::string& name,
                                          const std::string& output_name);
  // Writes the resized artifact into `staging` (created here); on error
  // removes it. `what` names the result in a disk-full message.
  absl::Status Stage(const Artifact& artifact, const ResizePlan& plan,
                     const std::string& staging, const std::string& what,
                     const WriteResizedOptions& write_options);
  // The commits append warnings (e.g. a failed fsync after the commit
  // point) to `warnings`.
  absl::Status CommitInPlace(const Artifact& artifact, const ResizePlan& plan,
                             const std::string& name,
                             const WriteResizedOptions& write_options,
                             std::vector<std::string>* warnings);
  // Whether the output exists (and may be replaced); the errors a real
  // write would give for it (parent missing, exists without replace, not
  // replaceable).
  absl::StatusOr<bool> CheckOutput(const std::string& output_name,
                                   bool replace);
  absl::Status CommitToOutput(const Artifact& artifact, const ResizePlan& plan,
                              const std::string& output_name, bool replace,
                              const WriteResizedOptions& write_options,
                              std::vector<std::string>* warnings);
  absl::Status Exchange(const std::string& name, const std::string& staging);

  Env* const env_;
  const std::string root_;  // resolved (realpath)
  std::string given_root_;  // as given, when it differs
  const StoreOptions options_;
  const std::unique_ptr<DramProvider> spec_table_;
  std::unique_ptr<FileLock> store_lock_;
  std::vector<std::string> recovered_;

  absl::Mutex mu_;
  // Live lock entries by canonical name; an entry is dropped when the last
  // user releases it.
  absl::flat_hash_map<std::string, std::weak_ptr<LockEntry>> entries_
      ABSL_GUARDED_BY(mu_);
};

// The file whose exclusive flock a writer of `canonical_name` holds, in the
// store's state directory. A maintenance tool that changes an artifact
// directly takes the same lock to keep the daemon out.
std::string ArtifactLockPath(absl::string_view store_root,
                             absl::string_view canonical_name);

// Staging names: `.<name>.staging-<16 lowercase hex digits>`.
std::string StagingNameFor(absl::string_view name);
// The artifact name a staging entry belongs to, or nullopt when `entry` is
// not exactly a staging name.
std::optional<std::string> StagedArtifactName(absl::string_view entry);

}  // namespace rbln

#endif  // RBLN_CORE_STORE_H_
