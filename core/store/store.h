// ArtifactStore: a directory tree of artifacts (and read-only roots that it
// only reads), read through caches, and changed by a commit engine that
// never leaves an artifact half-written: stage then swap, recovery after a
// crash, and the locks, as docs/commit-protocol.md tells.
//
// Names: an artifact is named by its path relative to the store root ("a",
// "team/llama"), by an absolute path inside the store, or as "NAME:path" in
// a read-only root (core/store/artifact_name.h). Every file-system call goes
// through an Env confined to its root (core/os/env.h): a symbolic link on
// the path, even one swapped in while a write runs, fails the call
// (PERMISSION_DENIED), and nothing outside the root is read or written. One
// exception, versions switched by a link (core/store/artifact_link.h): the
// last component of a name in the store may be a link to an artifact beside
// it (`current -> v2`), which reads and writes follow, acting on the target
// alone.
//
// Opening and names are in store.cc, the reads in store_read.cc, the commit
// engine in store_commit.cc; its parts in locks.h, staging_name.h,
// recovery.h, listing.h and retired_trees.h.
//
// Thread-safe: all methods may be called concurrently.
#ifndef RBLN_CORE_STORE_STORE_H_
#define RBLN_CORE_STORE_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/budget.h"
#include "core/device/device_spec.h"
#include "core/device/dram.h"
#include "core/format/artifact.h"
#include "core/format/artifact_cache.h"
#include "core/format/codec.h"
#include "core/lru_by_bytes.h"
#include "core/os/env.h"
#include "core/os/freshness.h"
#include "core/resize/fit.h"
#include "core/resize/group_fit.h"
#include "core/resize/rescale.h"
#include "core/store/artifact_name.h"
#include "core/store/intent_record.h"
#include "core/store/listing.h"
#include "core/store/locks.h"
#include "core/store/recovery.h"
#include "core/store/retired_trees.h"

namespace rbln {

// A directory of existing artifacts that the store reads, and copies from
// into the store, but never changes (`--read-only-root [NAME=]DIR`).
struct ReadOnlyRootSpec {
  std::string name;  // artifacts in it are "NAME:path"
  std::string dir;
};

// Parses "[NAME=]DIR"; the name defaults to DIR's last component.
// INVALID_ARGUMENT when DIR is empty or the name is not a valid root name
// (core/store/artifact_name.h).
absl::StatusOr<ReadOnlyRootSpec> ParseReadOnlyRoot(absl::string_view text);

struct StoreOptions {
  // Which device figures apply to an artifact: the provider's for the
  // artifact's target NPU. Not owned; null: the spec table.
  DramProvider* device_provider = nullptr;
  // Read-only roots: symbolic links inside them are followed when they
  // resolve beneath the same root (a Hugging Face cache links snapshot files
  // into its blob directory); nothing is ever written inside one, and the
  // lock files of their artifacts live in the store's state directory.
  std::vector<ReadOnlyRootSpec> read_only_roots;
  // Wait for a conflicting cross-process artifact lock (a maintenance tool)
  // instead of failing with UNAVAILABLE. The wait ends when the write is
  // cancelled.
  bool wait_for_artifact_locks = true;
  // The codec for .rbln files the built-in one does not recognise
  // (--codec-command; core/format/external_codec.h), or null: such files are
  // then an error that says how to configure one. Not owned; outlives the
  // store.
  ContainerCodec* external_codec = nullptr;
  // How long the old version that a commit swapped out stays at its staging
  // path before it is removed in the background, so that a reader that
  // opened the artifact directory before the swap finishes on it
  // (docs/commit-protocol.md, "Reading an artifact across a commit"). Zero:
  // removed before Write returns. Closing the store removes what is still
  // pending at once. The daemon's default is kDefaultOldVersionGrace.
  absl::Duration old_version_grace = absl::ZeroDuration();
  // Whether the old version's cached pages are dropped as soon as it is
  // swapped out, while its files wait out the grace (core/store/
  // retired_trees.h). Off only in tests that count every call of the env.
  bool forget_old_version_pages = true;
  // How long every file of an artifact must have been still before a read
  // of it is kept in the artifact cache (core/format/artifact_cache.h).
  absl::Duration artifact_cache_racy_window = ArtifactCache::kDefaultRacyWindow;
  // What the artifact cache's checks may use besides looking at each file:
  // read leases and directory watches (core/os/freshness.h).
  FreshnessOptions freshness;
};

// rbln-artifactd's default --old-version-grace-seconds: longer than a
// serving process takes to load a model's files once it has opened the
// directory, short enough that old versions do not pile up on disk.
inline constexpr absl::Duration kDefaultOldVersionGrace = absl::Seconds(30);

// Below this many payload bytes in all, a write checks every payload
// segment's checksum even when not asked to (it reads the bytes once more,
// which costs little at that size); larger payloads are cloned by the
// kernel unread unless WriteRequest::verify is set.
inline constexpr uint64_t kCheapVerifyBytes = uint64_t{64} << 20;

struct WriteRequest {
  std::string name;
  // Exactly one of target (Set) and budget (Fit).
  std::optional<uint64_t> target;
  std::optional<MemoryBudget> budget;
  // Empty: in place. Else a new artifact written there (named as `name` is).
  std::string output_name;
  bool replace = false;  // allow an existing output directory to be replaced
  bool dry_run = false;  // plan and report; write nothing
  // A set (target) only: write a count that does not fit the device
  // (ResizePlan::device_refusal), with the warning.
  bool force = false;
  // Compare-and-set: ABORTED unless the current count is this.
  std::optional<uint64_t> expected_current;
  // A `free` budget: the probed devices node i sits on (empty: index
  // order). Read by no other budget.
  std::vector<int> devices;
  // Artifacts on the same devices (--beside): their whole memory at their
  // current counts is reserved first, for the fit and for the check
  // against the device (core/resize/fit.h, MemoryReservation).
  std::vector<std::string> beside;
  // Check every payload segment's checksum before copying it (DATA_LOSS on
  // a mismatch), whatever the payload's size (see kCheapVerifyBytes).
  bool verify = false;
  // Called from the writing thread as payload bytes are copied.
  std::function<void(uint64_t done, uint64_t total)> progress;
  // Called from the writing thread with true when the write starts waiting
  // for another writer of one of its artifacts (in this process, or another
  // process's lock), and with false when that wait ends (the lock is taken,
  // or the write gives up).
  std::function<void(bool waiting)> waiting;
  // Polled while waiting for a lock, once the locks are held, between files
  // and just before the commit point; when it returns true the write stops
  // with CANCELLED, changing nothing (the caller's deadline passed, or the
  // daemon is shutting down).
  std::function<bool()> is_cancelled;
};

// FitTogether's request: the members (canonical or as callers name them,
// in the order their ties break), the budget of the group (none: the whole
// device), and what to do.
struct GroupMemberRequest {
  std::string name;
  uint32_t weight = 1;
  std::optional<uint64_t> expected_num_blocks;  // compare-and-set
};
struct GroupRequest {
  std::vector<GroupMemberRequest> members;
  std::optional<MemoryBudget> budget;
  // The probed devices node i sits on (devices[i]); empty: index order.
  // Only a `free` budget reads them (core/device/free_budget.h).
  std::vector<int> devices;
  bool describe_only = false;  // the plan at the current counts
  bool dry_run = false;
  // As WriteRequest's, for every member's write.
  std::function<bool()> is_cancelled;
  // Called after each member's commit with how many are committed (a test's
  // crash point).
  std::function<void(size_t committed)> after_commit;
};
struct GroupMemberResult {
  std::string name;  // canonical
  uint64_t previous_num_blocks = 0;
  uint64_t new_num_blocks = 0;
  uint64_t num_min_blocks = 0;
  uint64_t num_full_blocks = 0;
  bool written = false;
  bool already_at_target = false;
  int limiting_bucket = -1;
};
struct GroupResult {
  std::vector<GroupMemberResult> members;
  std::vector<GroupBucket> buckets;
  std::vector<std::string> warnings;
  bool fits = true;  // every bucket's headroom >= 0
};

// A root of names: the store, or a read-only root.
struct StoreRootInfo {
  std::string name;  // "" for the store
  std::string dir;   // resolved
  bool read_only = false;
};

struct WriteResult {
  std::string name;  // canonical name of the source, as asked
  // The artifact `name` is a symbolic link to, which was read and written
  // in its place (canonical; core/store/artifact_link.h); "" when no link.
  std::string link_target;
  std::string output_name;  // canonical name written ("" when in place)
  uint64_t previous_num_blocks = 0;
  uint64_t new_num_blocks = 0;
  bool written = false;  // false for dry runs and in-place no-ops
  std::vector<std::string> warnings;
  std::optional<FitResult> fit;  // for budget requests
  std::string dram_source;       // where the device figures came from
  // Whether new_num_blocks fits the device; nullopt when not checked.
  std::optional<bool> fits_device;
};

class ArtifactStore {
 public:
  // Opens the store at `root` (an existing directory): checks that the state
  // directory belongs to this process's user and no one else may write it,
  // takes the store LOCK (FAILED_PRECONDITION naming the holder's pid when
  // another process has it), removes lock files nobody holds, then removes
  // the staging debris its intent records name and reports what looks like
  // debris but has no record (see recovered() and left_in_place()).
  // `env` must be confined to the root (NewConfinedEnv, or a wrapper of
  // one): FAILED_PRECONDITION otherwise.
  static absl::StatusOr<std::unique_ptr<ArtifactStore>> Open(
      Env* env, const std::string& root, StoreOptions options = {});
  // The same with an Env of its own, confined to `root`.
  static absl::StatusOr<std::unique_ptr<ArtifactStore>> Open(
      const std::string& root, StoreOptions options = {});
  ~ArtifactStore();

  ArtifactStore(const ArtifactStore&) = delete;
  ArtifactStore& operator=(const ArtifactStore&) = delete;

  const std::string& root() const { return root_; }
  // Store-relative paths of the staging and retired directories removed at
  // open (those the store's intent records named).
  const std::vector<std::string>& recovered() const {
    return recovered_.removed;
  }
  // Store-relative paths of the directories named as staging or retired
  // ones that no record named: left in place, and logged (RemoveDebris).
  const std::vector<std::string>& left_in_place() const {
    return recovered_.left_in_place;
  }

  // The store first, then the read-only roots in the order given.
  std::vector<StoreRootInfo> roots() const;

  // The canonical name for `name` ("team/llama" in the store, "NAME:path"
  // in a read-only root), checked as the file comment says. Does not
  // require the artifact to exist.
  absl::StatusOr<std::string> CanonicalName(absl::string_view name) const;
  // The absolute path of a canonical name in the store.
  std::string PathOf(absl::string_view canonical_name) const;

  // Where a name resolved: roots()[root] at `rel`.
  struct Located {
    size_t root = 0;
    std::string rel;
    std::string name;  // canonical (qualified), as CanonicalName gives it
    std::string path;  // absolute
    Env* env = nullptr;
    // The root's: what the artifact cache checks the files read through.
    Freshness* freshness = nullptr;
    bool read_only = false;
    // Reached through this symbolic link (its canonical name, as asked;
    // core/store/artifact_link.h), whose target rel, name and path are; ""
    // when not. Locate never sets it: a link is followed per request.
    std::string link;
  };
  // Resolves `name` as CanonicalName does, with its path: for a read that
  // logs the canonical name before it reads (ReadShared and ReadSummary
  // take it), so that a request resolves its name once. Resolution is
  // lexical and the roots are fixed once the store is open, so what a name
  // resolved to can be kept and shared: Locate looks in a memo of the most
  // recent names first (about kMaxLocatedBytes of them), and sets *held
  // (when given) to whether it was there. A name resolved anew is kept only
  // by KeepLocated, which a request calls once its caller may read: so that
  // a listing of every artifact, or a flood of names from a caller who may
  // not, does not push out the names readers use.
  absl::StatusOr<std::shared_ptr<const Located>> Locate(
      absl::string_view name, bool* held = nullptr) const;
  void KeepLocated(absl::string_view name,
                   std::shared_ptr<const Located> at) const;
  // The memo's estimated size (for tests).
  uint64_t located_bytes() const;

  // Who owns each directory on the way to the artifact `name`, and its
  // mode: its root (the store or a read-only root), every directory below,
  // and last the artifact's own directory (each the directory itself,
  // never a link: in a read-only root, what a link leads to; in the store,
  // the target of a link it follows).
  absl::StatusOr<std::vector<FileStat>> StatArtifactPath(
      absl::string_view name) const;

  // Opens an artifact for reading (a consistent snapshot), through the
  // store's codecs and inspect cache (options.external_codec and
  // options.inspect_cache are the store's).
  absl::StatusOr<Artifact> Read(absl::string_view name,
                                ArtifactOptions options = {});
  // The same, shared with the store's artifact cache
  // (core/format/artifact_cache.h): an artifact whose files are unchanged
  // since it was last read is served without reading them again (unless
  // options.verify_payload asks for the payloads to be read).
  // ReadMode::kCachedOnly answers only from the cache, with null when the
  // artifact would have to be read (it still resolves the name, so a name
  // that does not resolve is its error). ReadMode::kReadWithoutKeeping
  // reads what the cache does not hold and does not keep it: a listing of
  // every artifact must not fill the cache (nor push out what readers use).
  // A name in the store that is a symbolic link to an artifact beside it is
  // followed (what is not such a link is refused); *link_target, when
  // given, gets the target's canonical name, or "" when no link was
  // followed.
  enum class ReadMode { kMayRead, kCachedOnly, kReadWithoutKeeping };
  absl::StatusOr<std::shared_ptr<const Artifact>> ReadShared(
      absl::string_view name, ArtifactOptions options = {},
      ReadMode mode = ReadMode::kMayRead, std::string* link_target = nullptr);
  absl::StatusOr<std::shared_ptr<const Artifact>> ReadShared(
      const Located& at, ArtifactOptions options = {},
      ReadMode mode = ReadMode::kMayRead, std::string* link_target = nullptr);

  // Reads rbln_config.json of an artifact alone (ReadArtifactSummary): what
  // Get and List need, with or without a codec for its graphs. Through the
  // artifact cache, and through a link, as ReadShared.
  absl::StatusOr<std::shared_ptr<const ArtifactSummary>> ReadSummary(
      absl::string_view name, ReadMode mode = ReadMode::kMayRead,
      std::string* link_target = nullptr);
  absl::StatusOr<std::shared_ptr<const ArtifactSummary>> ReadSummary(
      const Located& at, ReadMode mode = ReadMode::kMayRead,
      std::string* link_target = nullptr);

  // Forgets every artifact read and kept (ArtifactCache::Clear) and every
  // graph inspected (InspectCache): the directories and read leases the
  // artifact cache holds are let go, so that a file system mounted beneath
  // the store or a read-only root can be unmounted (the daemon's SIGHUP;
  // not one mounted at a root itself, which stays open while the store
  // is). Returns how many artifact entries went.
  size_t DropCachedReads() {
    inspect_cache_.Clear();
    return artifact_cache_.Clear();
  }

  // The store's inspect cache and artifact cache (for tests and metrics).
  InspectCache& inspect_cache() { return inspect_cache_; }
  const ArtifactCache& artifact_cache() const { return artifact_cache_; }
  // The old versions waiting out their grace period (for tests).
  const RetiredTrees& retired_trees() const { return retired_; }

  // Set or Fit, in place or into an output directory (see WriteRequest).
  absl::StatusOr<WriteResult> Write(const WriteRequest& request);

  // Canonical names of every artifact (a directory holding
  // rbln_config.json, or a link to one that the store follows) under the
  // store root, sorted; hidden entries are skipped.
  absl::StatusOr<std::vector<std::string>> List();
  // The same for the store and every read-only root, with the targets of
  // the links listed, and what was passed over and why (a symbolic link in
  // the store that is not followed, one leading outside its read-only root,
  // an unreadable or too deep directory).
  absl::StatusOr<StoreListing> ListAll();
  // One page of that listing: at most `limit` (> 0) entries, artifacts and
  // entries passed over, from `from` on (the store's in byte order of their
  // names, then each read-only root's), whose canonical names start with
  // `prefix`; `more` when the page filled before the listing ended. Reads
  // only the directories on the way to `from` and after it
  // (core/store/listing.h).
  struct ListedPage {
    std::vector<ListedEntry> entries;
    bool more = false;
  };
  absl::StatusOr<ListedPage> ListPage(const ListPosition& from,
                                      absl::string_view prefix, size_t limit);

  // Several artifacts sized together on one device group
  // (core/resize/group_fit.h; core/store/store_group.cc): planned from one
  // consistent read of each, then, unless describe_only or dry_run, written
  // under all their writer locks (taken in name order), shrinks before
  // grows, each its own atomic commit with compare-and-set on the count it
  // was planned from. The first failure stops the rest: ABORTED with
  // GROUP_PARTIAL naming those written (when any was; else that member's
  // own error). GROUP_DOES_NOT_FIT when the minimums do not fit.
  absl::StatusOr<GroupResult> FitTogether(const GroupRequest& request);

  // The device figures that apply to `artifact`, their source naming where
  // its NPU came from; the provider's error when there are none (no NPU
  // named or known, no probe or override that says).
  absl::StatusOr<DramChoice> DeviceFor(const Artifact& artifact) const;
  // Stays the same for as long as DeviceFor's answers do; 0 when unknown
  // (DramProvider::AnswersGeneration).
  uint64_t DeviceGeneration() const;

 private:
  DramProvider* device_provider() const;

  // A read-only root: its own Env and Freshness.
  struct ReadOnlyRoot {
    std::unique_ptr<Env> env;
    std::unique_ptr<Freshness> freshness;
  };

  ArtifactStore(Env* env, std::unique_ptr<Freshness> freshness,
                std::string root, StoreOptions options);
  absl::Status OpenReadOnlyRoots();
  Located LocateRel(size_t root, std::string rel) const;
  // Where the symbolic link `at` names leads (FollowArtifactLink), with
  // `link` set; nullopt when `at` is in a read-only root or not a link.
  absl::StatusOr<std::optional<Located>> FollowLink(const Located& at) const;

  // store_read.cc.
  // ArtifactOptions for a read at `at`, with the store's codec and cache.
  ArtifactOptions WithCodecs(const Located& at, ArtifactOptions options = {});
  // What `find` (a lookup of the artifact cache by a Located) finds at
  // `at`, or, when `at` is a link the store follows, at its target (in
  // *target, and its name in *link_target when given); null when neither
  // holds it. With ReadMode::kCachedOnly nothing on disk is looked at: a
  // name the cache does not hold as asked is null, link or not (the read
  // that follows, on a reader thread, follows the link).
  template <typename Find>
  absl::StatusOr<std::invoke_result_t<Find, const Located&>> FindFollowing(
      const Located& at, const Find& find, ReadMode mode,
      std::optional<Located>* target, std::string* link_target);

  // store_group.cc: a member of FitTogether's group, as read.
  struct GroupMemberState {
    Located at;  // the artifact (a link's target)
    std::shared_ptr<const Artifact> artifact;
    MemoryModel model;
    DramChoice device;
    uint32_t weight = 1;
  };
  // Resolves, reads and checks every member (names given twice, weights,
  // compare-and-set, devices, NPU families).
  absl::StatusOr<std::vector<GroupMemberState>> LoadGroup(
      const GroupRequest& request);
  // Writes the planned counts of `result` (ArtifactStore::FitTogether).
  // A free budget (core/device/free_budget.h) as the bytes of the node with
  // the least free memory among those `artifact`'s nodes sit on, probed
  // afresh, with a warning naming each node's figure; any other budget as
  // it is.
  absl::StatusOr<MemoryBudget> ResolveFreeBudget(
      const MemoryBudget& budget, const std::vector<int>& devices,
      const Artifact& artifact, const DeviceSpec& spec,
      std::vector<std::string>* warnings);
  // The memory the artifacts `beside` hold, for `artifact` (named `name`):
  // read at their current counts, lined up with it (one NPU family, the
  // same chiplets); INVALID_ARGUMENT for the artifact itself or a name
  // given twice. A warning says what was reserved.
  absl::StatusOr<MemoryReservation> ReserveBeside(
      const std::vector<std::string>& beside, const Artifact& artifact,
      const std::string& name, std::vector<std::string>* warnings);
  // The budget of each node of the group, per bucket.
  absl::StatusOr<std::vector<uint64_t>> GroupBudget(
      const GroupRequest& request, const GroupMemberState& first,
      uint32_t nodes, std::vector<std::string>* warnings);
  absl::StatusOr<GroupResult> ApplyGroup(
      const GroupRequest& request, const std::vector<GroupMemberState>& group,
      GroupResult result);

  // store_commit.cc, in the order of docs/commit-protocol.md.
  // ABORTED, naming both, unless the link `source` was reached through
  // still names its target (nothing to check when `source` is no link's).
  absl::Status CheckLinkUnchanged(const Located& source) const;
  // INVALID_ARGUMENT when a proper ancestor of the name is an artifact.
  absl::Status CheckNotInsideArtifact(const std::string& canonical_name);
  absl::StatusOr<WriteResult> WriteLocked(const WriteRequest& request,
                                          const Located& source,
                                          const std::string& output_name);
  // Reads the request against `artifact` (compare-and-set, device, guards,
  // output checks) into `result`; returns the resize to make.
  absl::StatusOr<ResizePlan> Plan(const WriteRequest& request,
                                  const std::string& name,
                                  const std::string& output_name,
                                  const Artifact& artifact,
                                  WriteResult* result);
  // Checks the payload checksums of `artifact` before a write copies it:
  // always when `requested`, else when that is cheap (kCheapVerifyBytes).
  // When the payload is not checked, says so in `warnings`.
  absl::Status VerifyBeforeCopy(Env* env, const Artifact& artifact,
                                bool requested,
                                std::vector<std::string>* warnings);
  // Records the intent (core/store/intent_record.h) of a staging directory
  // for the entry `base` of `parent`, creates it and writes the resized
  // artifact into it; on error removes both. `what` names the result in a
  // disk-full message. When the disk is full and old versions are waiting
  // out their grace period, they are removed at once and the write is tried
  // once more.
  absl::StatusOr<StagingIntent> Stage(const Artifact& artifact,
                                      const ResizePlan& plan,
                                      const std::string& parent,
                                      absl::string_view base,
                                      const std::string& what,
                                      const WriteResizedOptions& write_options);
  // Swaps `staging` in at `name`, holding the artifact's reader lock
  // exclusively for that instant (CANCELLED, changing nothing, when
  // `is_cancelled` says so while readers hold it). What comes out must be
  // `expected` (by device and inode), the directory the write read or
  // checked; one that someone put there meanwhile is swapped back: ABORTED,
  // nothing changed, or INTERNAL with `*staging_is_theirs` set when swapping
  // back failed (their tree is then at `staging` and must not be removed).
  absl::Status Exchange(const std::string& name, const std::string& staging,
                        const FileStat& expected,
                        const std::function<bool()>& is_cancelled,
                        bool* staging_is_theirs);
  // The commits append warnings (e.g. a failed fsync after the commit
  // point) to `warnings`. In place, `source` is the artifact written (a
  // link it was reached through is read again before the exchange).
  absl::Status CommitInPlace(const Artifact& artifact, const ResizePlan& plan,
                             const Located& source,
                             const WriteResizedOptions& write_options,
                             std::vector<std::string>* warnings);
  // The existing destination (to be replaced), or nullopt when there is
  // none; the errors a real write would give for it (a parent that is a
  // link or not a directory, exists without replace, not replaceable).
  // Missing parents are fine: the write makes them (CommitToOutput).
  absl::StatusOr<std::optional<FileStat>> CheckOutput(
      const std::string& output_name, bool replace);
  absl::Status CommitToOutput(const Artifact& artifact, const ResizePlan& plan,
                              const std::string& output_name, bool replace,
                              const WriteResizedOptions& write_options,
                              std::vector<std::string>* warnings);

  std::unique_ptr<Env> owned_env_;  // when opened without an Env
  Env* const env_;
  // The store root's, for the artifact cache (before it: it outlives the
  // directories the cache holds).
  const std::unique_ptr<Freshness> freshness_;
  const std::string root_;  // resolved (realpath)
  std::string given_root_;  // as given, when it differs
  const StoreOptions options_;
  // names_[0] is the store; names_[i] (i > 0) the read-only root whose Env
  // is read_only_[i - 1].env.
  std::vector<NamedRoot> names_;
  std::vector<ReadOnlyRoot> read_only_;
  const std::unique_ptr<DramProvider> spec_table_;
  // What the codecs said of each graph file, while it stays the same.
  InspectCache inspect_cache_;
  // Parsed artifacts and summaries, while their files stay the same.
  ArtifactCache artifact_cache_;
  std::unique_ptr<FileLock> store_lock_;
  RecoveredDebris recovered_;

  // What Locate resolved, by the name as given (KeepLocated). A flood of
  // distinct names cannot grow it past the bound: it only costs each name
  // its resolution.
  static constexpr uint64_t kMaxLocatedBytes = uint64_t{1} << 20;
  mutable absl::Mutex located_mu_;
  mutable LruByBytes<std::string, std::shared_ptr<const Located>> located_
      ABSL_GUARDED_BY(located_mu_){kMaxLocatedBytes};
  // Set once the roots are complete (Open): nothing is kept before.
  bool roots_complete_ ABSL_GUARDED_BY(located_mu_) = false;

  // The artifacts' in-process locks.
  ArtifactLockTable locks_;
  // Last, so that it is destroyed first: what is pending is removed while
  // the Env and the store's LOCK are still there.
  RetiredTrees retired_;
};

}  // namespace rbln

#endif  // RBLN_CORE_STORE_STORE_H_
