#include "core/store/store.h"

#include <stdlib.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/core_metrics.h"
#include "core/error_facts.h"
#include "core/os/path.h"
#include "core/resize/rescale.h"
#include "core/status_macros.h"
#include "core/store/artifact_name.h"
#include "core/text.h"
#include "spdlog/spdlog.h"
#include "xxhash.h"

namespace rbln {
namespace {

constexpr absl::string_view kStagingInfix = ".staging-";
constexpr size_t kStagingRandomDigits = 16;
// How deep below the root the store is searched for artifacts and debris.
// Real stores nest a few levels (team/model/variant); a deeper tree is
// someone's mistake or attack and is not walked.
constexpr int kMaxStoreDepth = 32;
// How often a writer waiting for a lock looks whether it was cancelled.
constexpr absl::Duration kLockPollInterval = absl::Milliseconds(20);

absl::StatusOr<bool> IsArtifactDir(Env* env, const std::string& path) {
  RBLN_ASSIGN_OR_RETURN(std::optional<FileStat> st,
                        StatIfExists(env, JoinPath(path, kRblnConfigFileName)));
  return st.has_value() && st->type == FileType::kRegular;
}

// The payload bytes of all of `artifact`'s containers.
uint64_t PayloadBytes(const Artifact& artifact) {
  uint64_t total = 0;
  for (const ContainerFile& file : artifact.containers()) {
    total += file.copy_bytes();
  }
  return total;
}

bool IsCancelled(const std::function<bool()>& is_cancelled) {
  return is_cancelled && is_cancelled();
}

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

absl::Status CheckCancelled(const WriteRequest& request) {
  if (IsCancelled(request.is_cancelled)) {
    return WriteCancelled("before it began");
  }
  return absl::OkStatus();
}

// A lookup that may not read (ReadMode::kCachedOnly) counts only when it
// hits: on a miss its caller reads next, and that lookup counts, so that one
// read counts once.
void CountCacheMiss(ArtifactStore::ReadMode mode) {
  if (mode == ArtifactStore::ReadMode::kMayRead) {
    CountArtifactCacheLookup(CacheLookup::kMiss);
  }
}

}  // namespace

std::string StagingNameFor(absl::string_view name) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string suffix(kStagingRandomDigits, '0');
  // From the kernel each time: a name someone could predict could be
  // created first, in their place.
  uint64_t bits = 0;
  if (getrandom(&bits, sizeof(bits), 0) != sizeof(bits)) {
    thread_local std::mt19937_64 fallback(std::random_device{}());
    bits = fallback();
  }
  for (char& c : suffix) {
    c = kHex[bits & 0xf];
    bits >>= 4;
  }
  return absl::StrCat(".", name, kStagingInfix, suffix);
}

std::optional<std::string> StagedArtifactName(absl::string_view entry) {
  if (!absl::ConsumePrefix(&entry, ".")) return std::nullopt;
  if (entry.size() <= kStagingInfix.size() + kStagingRandomDigits) {
    return std::nullopt;
  }
  const absl::string_view digits =
      entry.substr(entry.size() - kStagingRandomDigits);
  for (char c : digits) {
    if (!absl::ascii_isdigit(c) && !(c >= 'a' && c <= 'f')) return std::nullopt;
  }
  entry.remove_suffix(kStagingRandomDigits);
  if (!absl::ConsumeSuffix(&entry, kStagingInfix) || entry.empty()) {
    return std::nullopt;
  }
  return std::string(entry);
}

struct ArtifactStore::LockEntry {
  // Held (writing == true) by a writer for its whole transaction; a flag
  // rather than a mutex so that a waiting writer can give up when cancelled.
  absl::Mutex mu;
  bool writing ABSL_GUARDED_BY(mu) = false;
  // Shared by readers; exclusive only for the instant of an exchange.
  absl::Mutex rw;
};

// An artifact's cross-process flock. The lock file exists only while a lock
// is held: it is removed before the flock is released, and Env::LockFile
// takes a lock only on the file still linked at its name (the protocol in
// docs/commit-protocol.md).
class ArtifactStore::ArtifactLock {
 public:
  // UNAVAILABLE when another process holds the lock and `wait` is false, or
  // CANCELLED when `is_cancelled` says so while waiting for it. `waiting`
  // (may be empty) is told when the wait starts and ends.
  static absl::StatusOr<std::unique_ptr<ArtifactLock>> Acquire(
      ArtifactStore* store, const std::string& name, bool wait,
      const std::function<bool()>& is_cancelled,
      const std::function<void(bool)>& waiting) {
    const std::string path = store->LockFilePath(name);
    WaitNotice notice(waiting, LockHolder::kOtherProcess);
    while (true) {
      absl::StatusOr<std::unique_ptr<FileLock>> flock =
          store->env_->LockFile(path, /*exclusive=*/true, /*wait=*/false);
      if (flock.ok()) {
        return std::unique_ptr<ArtifactLock>(
            new ArtifactLock(store->env_, path, *std::move(flock)));
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
        return WriteCancelled(absl::StrCat("while ", Echo(name),
                                           " was locked by another process"));
      }
      absl::SleepFor(kLockPollInterval);
    }
  }

  ~ArtifactLock() {
    absl::Status removed = env_->RemoveFile(path_);
    if (!removed.ok() && !absl::IsNotFound(removed)) {
      spdlog::warn("could not remove lock file {}: {}", LogValue(path_),
                   LogValue(removed.message()));
    }
    lock_.reset();  // unlocks, after the removal
  }

 private:
  ArtifactLock(Env* env, std::string path, std::unique_ptr<FileLock> lock)
      : env_(env), path_(std::move(path)), lock_(std::move(lock)) {}

  Env* const env_;
  const std::string path_;
  std::unique_ptr<FileLock> lock_;
};

// The in-process writer flags and cross-process locks of one write's
// artifacts, taken in name order so that two writers never deadlock.
class ArtifactStore::WriterLease {
 public:
  static absl::StatusOr<std::unique_ptr<WriterLease>> Acquire(
      ArtifactStore* store, std::vector<std::string> names,
      const std::function<bool()>& is_cancelled,
      const std::function<void(bool)>& waiting) {
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    auto lease = std::unique_ptr<WriterLease>(new WriterLease());
    for (const std::string& name : names) {
      std::shared_ptr<LockEntry> entry = store->Entry(name);
      RBLN_RETURN_IF_ERROR(BeginWriting(*entry, name, is_cancelled, waiting));
      lease->entries_.push_back(std::move(entry));
      RBLN_ASSIGN_OR_RETURN(
          std::unique_ptr<ArtifactLock> lock,
          ArtifactLock::Acquire(store, name,
                                store->options_.wait_for_artifact_locks,
                                is_cancelled, waiting));
      lease->locks_.push_back(std::move(lock));
    }
    return lease;
  }

  ~WriterLease() {
    locks_.clear();
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
      absl::MutexLock lock(&(*it)->mu);
      (*it)->writing = false;
    }
  }

 private:
  WriterLease() = default;

  static absl::Status BeginWriting(LockEntry& entry, const std::string& name,
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
        return WriteCancelled(absl::StrCat(
            "while waiting for another write of ", Echo(name), " to finish"));
      }
    }
  }

  std::vector<std::shared_ptr<LockEntry>> entries_;
  std::vector<std::unique_ptr<ArtifactLock>> locks_;
};

ArtifactStore::ArtifactStore(Env* env, std::unique_ptr<Freshness> freshness,
                             std::string root, StoreOptions options)
    : env_(env),
      freshness_(std::move(freshness)),
      root_(std::move(root)),
      options_(std::move(options)),
      spec_table_(NewSpecTableProvider()),
      artifact_cache_(ArtifactCache::kDefaultMaxBytes,
                      options_.artifact_cache_racy_window),
      retired_(env, options_.old_version_grace,
               options_.forget_old_version_pages) {
  names_.push_back({"", root_, ""});
}

absl::StatusOr<ReadOnlyRootSpec> ParseReadOnlyRoot(absl::string_view text) {
  ReadOnlyRootSpec spec;
  const size_t equals = text.find('=');
  const size_t slash = text.find('/');
  if (equals != absl::string_view::npos && equals < slash) {
    spec.name = std::string(text.substr(0, equals));
    spec.dir = std::string(text.substr(equals + 1));
  } else {
    spec.dir = std::string(text);
  }
  std::string dir = spec.dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", Echo(text), "': give [NAME=]DIR, a directory"));
  }
  if (spec.name.empty()) spec.name = std::string(Basename(dir));
  if (!IsValidRootName(spec.name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", Echo(text), "': the name '", Echo(spec.name),
        "' may hold only letters, digits, '-', '_' and '.' (not first), at "
        "most ",
        kMaxRootNameBytes, " of them; give one with NAME=DIR"));
  }
  return spec;
}

absl::Status ArtifactStore::OpenReadOnlyRoots() {
  for (const ReadOnlyRootSpec& spec : options_.read_only_roots) {
    const std::string what =
        absl::StrCat("read-only root ", spec.name, "=", Echo(spec.dir));
    if (!IsValidRootName(spec.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": not a valid root name"));
    }
    absl::StatusOr<std::unique_ptr<Env>> env = NewConfinedEnv(
        spec.dir, {.read_only = true, .follow_symlinks_beneath = true});
    if (!env.ok()) {
      return absl::Status(env.status().code(),
                          absl::StrCat(what, ": ", env.status().message()));
    }
    const std::string dir = (*env)->ConfinedRoot();
    absl::StatusOr<std::unique_ptr<Freshness>> freshness = NewConfinedFreshness(
        dir, {.read_only = true, .follow_symlinks_beneath = true},
        options_.freshness);
    if (!freshness.ok()) {
      return absl::Status(
          freshness.status().code(),
          absl::StrCat(what, ": ", freshness.status().message()));
    }
    for (const NamedRoot& other : names_) {
      if (other.name == spec.name) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": the name ", spec.name,
                         " is taken; give each root its own with NAME=DIR"));
      }
      if (IsWithin(dir, other.dir) || IsWithin(other.dir, dir)) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, " (", dir, ") overlaps ",
            other.name.empty() ? "the store "
                               : absl::StrCat("the root ", other.name, " "),
            other.dir,
            "; roots must be separate directories (nothing is written in a "
            "read-only root, everything in the store)"));
      }
    }
    std::error_code ec;
    std::string given =
        std::filesystem::absolute(spec.dir, ec).lexically_normal().string();
    while (given.size() > 1 && given.back() == '/') given.pop_back();
    names_.push_back({spec.name, dir, !ec && given != dir ? given : ""});
    read_only_.push_back({*std::move(env), *std::move(freshness)});
  }
  return absl::OkStatus();
}

std::vector<StoreRootInfo> ArtifactStore::roots() const {
  std::vector<StoreRootInfo> roots;
  for (size_t i = 0; i < names_.size(); ++i) {
    roots.push_back({names_[i].name, names_[i].dir, i > 0});
  }
  return roots;
}

ArtifactStore::Located ArtifactStore::LocateRel(size_t root,
                                                std::string rel) const {
  Located at;
  at.root = root;
  at.name = QualifiedArtifactName(names_[root], rel);
  at.path = rel.empty() ? names_[root].dir : JoinPath(names_[root].dir, rel);
  at.rel = std::move(rel);
  at.env = root == 0 ? env_ : read_only_[root - 1].env.get();
  at.freshness =
      root == 0 ? freshness_.get() : read_only_[root - 1].freshness.get();
  at.read_only = root > 0;
  return at;
}

absl::StatusOr<std::shared_ptr<const ArtifactStore::Located>>
ArtifactStore::Locate(absl::string_view name, bool* held) const {
  {
    absl::MutexLock lock(&located_mu_);
    if (const std::shared_ptr<const Located>* kept = located_.Use(name)) {
      if (held != nullptr) *held = true;
      return *kept;
    }
  }
  if (held != nullptr) *held = false;
  RBLN_ASSIGN_OR_RETURN(RootedName rooted, ResolveArtifactName(name, names_));
  return std::make_shared<const Located>(
      LocateRel(rooted.root, std::move(rooted.rel)));
}

void ArtifactStore::KeepLocated(absl::string_view name,
                                std::shared_ptr<const Located> at) const {
  // The name twice (the list's node and the index) and the strings, each
  // with what the heap adds, and what the list, the index and the shared
  // pointer add.
  const uint64_t bytes = sizeof(Located) + 2 * name.size() + at->rel.size() +
                         at->name.size() + at->path.size() + 5 * 32 + 128;
  std::string key(name);
  absl::MutexLock lock(&located_mu_);
  if (!roots_complete_ || located_.Use(name) != nullptr) return;
  located_.Insert(std::move(key), std::move(at), bytes);
}

uint64_t ArtifactStore::located_bytes() const {
  absl::MutexLock lock(&located_mu_);
  return located_.bytes();
}

ArtifactStore::~ArtifactStore() = default;

absl::StatusOr<std::unique_ptr<ArtifactStore>> ArtifactStore::Open(
    const std::string& root, StoreOptions options) {
  absl::StatusOr<std::unique_ptr<Env>> env = NewConfinedEnv(root);
  if (absl::IsNotFound(env.status())) {
    return absl::NotFoundError(
        absl::StrCat("artifact store ", root, " does not exist"));
  }
  RBLN_RETURN_IF_ERROR(env.status());
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<ArtifactStore> store,
                        Open(env->get(), root, std::move(options)));
  store->owned_env_ = *std::move(env);
  return store;
}

absl::StatusOr<std::unique_ptr<ArtifactStore>> ArtifactStore::Open(
    Env* env, const std::string& root, StoreOptions options) {
  char* resolved = realpath(root.c_str(), nullptr);
  if (resolved == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("artifact store ", root, " does not exist"));
  }
  std::string canonical_root = resolved;
  free(resolved);
  if (env->ConfinedRoot() != canonical_root) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the artifact store ", canonical_root,
        " must be opened with an Env confined to it (NewConfinedEnv); this "
        "one is confined to '",
        env->ConfinedRoot(), "'"));
  }
  RBLN_ASSIGN_OR_RETURN(FileStat st, env->Stat(canonical_root));
  if (st.type != FileType::kDirectory) {
    return absl::FailedPreconditionError(
        absl::StrCat("artifact store ", root, " is not a directory"));
  }
  RBLN_ASSIGN_OR_RETURN(
      std::unique_ptr<Freshness> freshness,
      NewConfinedFreshness(canonical_root, {}, options.freshness));
  auto store = std::unique_ptr<ArtifactStore>(new ArtifactStore(
      env, std::move(freshness), canonical_root, std::move(options)));
  std::error_code ec;
  std::string given =
      std::filesystem::absolute(root, ec).lexically_normal().string();
  while (given.size() > 1 && given.back() == '/') given.pop_back();
  if (!ec && given != canonical_root) store->given_root_ = given;
  store->names_[0].given_dir = store->given_root_;
  RBLN_RETURN_IF_ERROR(store->OpenReadOnlyRoots());
  {
    // The roots are complete from here on: names may be kept.
    absl::MutexLock lock(&store->located_mu_);
    store->roots_complete_ = true;
  }

  const std::string state_dir = JoinPath(canonical_root, kStateDirName);
  for (const std::string& dir : {state_dir, JoinPath(state_dir, "locks")}) {
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
        "artifact store ", canonical_root,
        " is in use by another process (pid ",
        holder.ok() ? absl::StripAsciiWhitespace(*holder) : "unknown", ", per ",
        lock_path, "); stop it or choose another store"));
  }
  RBLN_RETURN_IF_ERROR(lock.status());
  store->store_lock_ = *std::move(lock);
  RBLN_RETURN_IF_ERROR(
      store->store_lock_->WriteContents(absl::StrCat(getpid(), "\n")));
  store->RemoveStaleLockFiles(JoinPath(state_dir, "locks"));
  RBLN_RETURN_IF_ERROR(store->RemoveDebris());
  return store;
}

void ArtifactStore::RemoveStaleLockFiles(const std::string& dir) {
  absl::StatusOr<std::vector<DirEntry>> entries = env_->ListDir(dir);
  if (!entries.ok()) return;
  for (const DirEntry& entry : *entries) {
    const std::string path = JoinPath(dir, entry.name);
    // A lock file left by a writer that was killed; one that a maintenance
    // tool holds now stays.
    absl::StatusOr<std::unique_ptr<FileLock>> stale =
        env_->LockFile(path, /*exclusive=*/true, /*wait=*/false);
    if (!stale.ok()) continue;
    absl::Status removed = env_->RemoveFile(path);
    if (!removed.ok()) {
      spdlog::warn("could not remove stale lock file {}: {}", LogValue(path),
                   LogValue(removed.message()));
    }
  }
}

absl::Status ArtifactStore::WalkStore(const StoreVisitor& visit) {
  return WalkRoot(0, visit, nullptr);
}

absl::Status ArtifactStore::WalkRoot(
    size_t root, const StoreVisitor& visit,
    std::vector<StoreListing::Skipped>* skipped) {
  auto skip = [&](const std::string& rel, std::string reason) {
    const std::string name = QualifiedArtifactName(names_[root], rel);
    spdlog::warn("skipping {}: {}", LogValue(name), LogValue(reason));
    if (skipped != nullptr) skipped->push_back({name, std::move(reason)});
  };
  std::vector<std::pair<std::string, int>> pending = {{"", 0}};
  while (!pending.empty()) {
    const auto [rel, depth] = std::move(pending.back());
    pending.pop_back();
    const Located dir = LocateRel(root, rel);
    absl::StatusOr<std::vector<DirEntry>> entries = dir.env->ListDir(dir.path);
    if (!entries.ok()) {
      // The root must be readable; one bad directory below it (removed
      // meanwhile, unreadable, too deep a path) must not hide the rest.
      if (rel.empty()) return entries.status();
      skip(rel, absl::StrCat("cannot be read: ", entries.status().message()));
      continue;
    }
    for (std::string& child : visit(rel, *entries)) {
      if (depth + 1 >= kMaxStoreDepth) {
        skip(child,
             absl::StrCat("deeper than ", kMaxStoreDepth, " directories"));
        continue;
      }
      pending.emplace_back(std::move(child), depth + 1);
    }
  }
  return absl::OkStatus();
}

absl::Status ArtifactStore::RemoveDebris() {
  return WalkStore(
      [this](const std::string& rel_dir, const std::vector<DirEntry>& entries) {
        std::vector<std::string> descend;
        for (const DirEntry& entry : entries) {
          if (entry.type != FileType::kDirectory) continue;
          const std::string rel =
              rel_dir.empty() ? entry.name : JoinPath(rel_dir, entry.name);
          std::optional<std::string> owner = StagedArtifactName(entry.name);
          if (owner.has_value()) {
            const std::string artifact =
                rel_dir.empty() ? *owner : JoinPath(rel_dir, *owner);
            // A staging directory whose artifact is locked belongs to a live
            // writer in another process: not debris.
            absl::StatusOr<std::unique_ptr<ArtifactLock>> busy =
                ArtifactLock::Acquire(this, artifact, /*wait=*/false, nullptr,
                                      nullptr);
            if (!busy.ok()) continue;
            spdlog::warn(
                "recovery: removing staging directory {} left by an "
                "interrupted commit of {}, or an old version of it that a "
                "crash or kill left waiting out its grace period",
                LogValue(PathOf(rel)), LogValue(artifact));
            RemoveStagingTree(env_, PathOf(rel));
            recovered_.push_back(rel);
            CountRecovery();
            continue;
          }
          if (absl::StartsWith(entry.name, ".")) continue;
          if (IsArtifactDir(env_, PathOf(rel)).value_or(false)) continue;
          descend.push_back(rel);
        }
        return descend;
      });
}

absl::StatusOr<std::string> ArtifactStore::CanonicalName(
    absl::string_view name) const {
  RBLN_ASSIGN_OR_RETURN(std::shared_ptr<const Located> at, Locate(name));
  return at->name;
}

std::string ArtifactStore::PathOf(absl::string_view canonical_name) const {
  return canonical_name.empty() ? root_ : JoinPath(root_, canonical_name);
}

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

std::string ArtifactStore::LockFilePath(
    const std::string& canonical_name) const {
  return ArtifactLockPath(root_, canonical_name);
}

std::shared_ptr<ArtifactStore::LockEntry> ArtifactStore::Entry(
    const std::string& canonical_name) {
  absl::MutexLock lock(&mu_);
  std::weak_ptr<LockEntry>& slot = entries_[canonical_name];
  std::shared_ptr<LockEntry> entry = slot.lock();
  if (entry == nullptr) {
    entry = std::make_shared<LockEntry>();
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

DramProvider* ArtifactStore::device_provider() const {
  return options_.device_provider != nullptr ? options_.device_provider
                                             : spec_table_.get();
}

absl::StatusOr<DramChoice> ArtifactStore::DeviceFor(
    const Artifact& artifact) const {
  RBLN_ASSIGN_OR_RETURN(DramChoice choice,
                        device_provider()->ForNpu(artifact.npu()));
  if (!artifact.npu().empty()) {
    absl::StrAppend(&choice.source, "; NPU ", artifact.npu(), " from ",
                    artifact.npu_source());
  }
  return choice;
}

uint64_t ArtifactStore::DeviceGeneration() const {
  return device_provider()->AnswersGeneration();
}

absl::StatusOr<std::vector<FileStat>> ArtifactStore::StatArtifactPath(
    absl::string_view name) const {
  RBLN_ASSIGN_OR_RETURN(std::shared_ptr<const Located> at, Locate(name));
  std::vector<FileStat> chain;
  std::string path = names_[at->root].dir;
  RBLN_ASSIGN_OR_RETURN(FileStat top, at->env->Stat(path));
  chain.push_back(top);
  for (absl::string_view part :
       absl::StrSplit(at->rel, '/', absl::SkipEmpty())) {
    absl::StrAppend(&path, "/", part);
    RBLN_ASSIGN_OR_RETURN(FileStat dir, at->env->Stat(path));
    chain.push_back(dir);
  }
  return chain;
}

ArtifactOptions ArtifactStore::WithCodecs(const Located& at,
                                          ArtifactOptions options) {
  options.external_codec = options_.external_codec;
  options.inspect_cache = &inspect_cache_;
  options.freshness = at.freshness;
  return options;
}

absl::StatusOr<Artifact> ArtifactStore::Read(absl::string_view name,
                                             ArtifactOptions options) {
  RBLN_ASSIGN_OR_RETURN(std::shared_ptr<const Artifact> artifact,
                        ReadShared(name, std::move(options)));
  return *artifact;
}

absl::StatusOr<std::shared_ptr<const Artifact>> ArtifactStore::ReadShared(
    absl::string_view name, ArtifactOptions options, ReadMode mode) {
  RBLN_ASSIGN_OR_RETURN(std::shared_ptr<const Located> at, Locate(name));
  return ReadShared(*at, std::move(options), mode);
}

absl::StatusOr<std::shared_ptr<const Artifact>> ArtifactStore::ReadShared(
    const Located& at, ArtifactOptions options, ReadMode mode) {
  const bool cached = !options.verify_payload;
  if (cached) {
    if (auto artifact = artifact_cache_.FindArtifact(at.freshness, at.path)) {
      CountArtifactCacheLookup(CacheLookup::kHit);
      return artifact;
    }
    CountCacheMiss(mode);
  }
  if (mode == ReadMode::kCachedOnly) return nullptr;
  const absl::Time start = absl::Now();
  absl::StatusOr<Artifact> artifact;
  {
    std::shared_ptr<LockEntry> entry = Entry(at.name);
    absl::ReaderMutexLock lock(&entry->rw);
    artifact =
        Artifact::Open(at.env, at.path, WithCodecs(at, std::move(options)));
  }
  if (!artifact.ok()) return NameArtifactInFacts(artifact.status(), at.name);
  auto shared = std::make_shared<const Artifact>(*std::move(artifact));
  if (cached) artifact_cache_.InsertArtifact(at.freshness, shared, start);
  return shared;
}

absl::StatusOr<std::shared_ptr<const ArtifactSummary>>
ArtifactStore::ReadSummary(absl::string_view name, ReadMode mode) {
  RBLN_ASSIGN_OR_RETURN(std::shared_ptr<const Located> at, Locate(name));
  return ReadSummary(*at, mode);
}

absl::StatusOr<std::shared_ptr<const ArtifactSummary>>
ArtifactStore::ReadSummary(const Located& at, ReadMode mode) {
  if (auto summary = artifact_cache_.FindSummary(at.freshness, at.path)) {
    CountArtifactCacheLookup(CacheLookup::kHit);
    return summary;
  }
  CountCacheMiss(mode);
  if (mode == ReadMode::kCachedOnly) return nullptr;
  const absl::Time start = absl::Now();
  absl::StatusOr<ArtifactSummary> summary;
  {
    std::shared_ptr<LockEntry> entry = Entry(at.name);
    absl::ReaderMutexLock lock(&entry->rw);
    summary = ReadArtifactSummary(at.env, at.path, at.freshness);
  }
  if (!summary.ok()) return NameArtifactInFacts(summary.status(), at.name);
  auto shared = std::make_shared<const ArtifactSummary>(*std::move(summary));
  artifact_cache_.InsertSummary(at.freshness, at.path, shared, start);
  return shared;
}

absl::StatusOr<std::vector<std::string>> ArtifactStore::List() {
  StoreListing listing;
  RBLN_RETURN_IF_ERROR(ListRoot(0, &listing));
  return std::move(listing.names);
}

absl::StatusOr<StoreListing> ArtifactStore::ListAll() {
  StoreListing listing;
  RBLN_RETURN_IF_ERROR(ListRoot(0, &listing));
  // A read-only root that cannot be read (unmounted, permissions changed)
  // is one skipped entry, not a failed listing.
  for (size_t root = 1; root < names_.size(); ++root) {
    absl::Status status = ListRoot(root, &listing);
    if (!status.ok()) {
      listing.skipped.push_back(
          {LocateRel(root, "").name, std::string(status.message())});
    }
  }
  return listing;
}

absl::Status ArtifactStore::ListRoot(size_t root, StoreListing* listing) {
  const size_t first = listing->names.size();
  // Whether `rel` is an artifact; what cannot be told is noted as skipped
  // (false), so that nothing is passed over silently.
  auto is_artifact = [&](const std::string& rel) {
    const Located at = LocateRel(root, rel);
    absl::StatusOr<std::optional<FileStat>> config =
        StatIfExists(at.env, JoinPath(at.path, kRblnConfigFileName));
    if (!config.ok()) {
      listing->skipped.push_back(
          {at.name, std::string(config.status().message())});
      return false;
    }
    if (config->has_value() && (*config)->type == FileType::kSymlink) {
      listing->skipped.push_back(
          {at.name, absl::StrCat(kRblnConfigFileName,
                                 " is a symbolic link; the store follows "
                                 "none (copy the file in, or serve the "
                                 "artifact with --read-only-root)")});
      return false;
    }
    return config->has_value() && (*config)->type == FileType::kRegular;
  };
  auto skip = [&](const Located& at, std::string reason) {
    listing->skipped.push_back({at.name, std::move(reason)});
  };
  // A read-only root may be one artifact itself.
  if (root > 0 && is_artifact("")) {
    listing->names.push_back(LocateRel(root, "").name);
    return absl::OkStatus();
  }
  RBLN_RETURN_IF_ERROR(WalkRoot(
      root,
      [&](const std::string& rel, const std::vector<DirEntry>& entries) {
        std::vector<std::string> descend;
        for (const DirEntry& entry : entries) {
          if (absl::StartsWith(entry.name, ".")) continue;
          std::string child =
              rel.empty() ? entry.name : JoinPath(rel, entry.name);
          const Located at = LocateRel(root, child);
          if (entry.type == FileType::kSymlink) {
            if (root == 0) {
              skip(at,
                   "a symbolic link; the store follows none (move the "
                   "artifact into the store, or serve the directory it "
                   "lives in with --read-only-root)");
              continue;
            }
            // In a read-only root a link is followed if it stays inside.
            absl::StatusOr<FileStat> target = at.env->Stat(at.path);
            if (!target.ok()) {
              skip(at, std::string(target.status().message()));
              continue;
            }
            if (target->type != FileType::kDirectory) continue;
            if (is_artifact(child)) {
              listing->names.push_back(at.name);
            } else {
              skip(at,
                   "a symbolic link to a directory that is not an artifact; "
                   "links are not walked into");
            }
            continue;
          }
          if (entry.type != FileType::kDirectory) continue;
          const size_t noted = listing->skipped.size();
          if (is_artifact(child)) {
            listing->names.push_back(at.name);
          } else if (listing->skipped.size() == noted) {
            descend.push_back(std::move(child));
          }
        }
        return descend;
      },
      &listing->skipped));
  std::sort(listing->names.begin() + first, listing->names.end());
  return absl::OkStatus();
}

absl::Status ArtifactStore::CheckNotInsideArtifact(
    const std::string& canonical_name) {
  for (size_t slash = canonical_name.find('/'); slash != std::string::npos;
       slash = canonical_name.find('/', slash + 1)) {
    const std::string ancestor = canonical_name.substr(0, slash);
    RBLN_ASSIGN_OR_RETURN(bool is_artifact,
                          IsArtifactDir(env_, PathOf(ancestor)));
    if (is_artifact) {
      return absl::InvalidArgumentError(absl::StrCat(
          canonical_name, " lies inside the artifact ", ancestor,
          "; artifacts cannot be nested (choose a directory outside it)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<WriteResult> ArtifactStore::Write(const WriteRequest& request) {
  if (request.target.has_value() == request.budget.has_value()) {
    return absl::InvalidArgumentError(
        "give exactly one of a target block count and a memory budget");
  }
  RBLN_ASSIGN_OR_RETURN(const std::shared_ptr<const Located> source_at,
                        Locate(request.name));
  const Located& source = *source_at;
  const std::string& name = source.name;
  std::string output_name;
  std::vector<std::string> lock_names = {name};
  if (!request.output_name.empty()) {
    RBLN_ASSIGN_OR_RETURN(const std::shared_ptr<const Located> output_at,
                          Locate(request.output_name));
    const Located& output = *output_at;
    if (output.read_only) {
      return WithErrorFacts(
          absl::PermissionDeniedError(absl::StrCat(
              "output directory ", Echo(output.name),
              " is in the read-only root ", names_[output.root].name,
              "; nothing is ever written there: choose a directory in the "
              "store ",
              root_)),
          {.reason = ErrorReason::kReadOnlyRoot, .artifact = output.name});
    }
    output_name = output.name;
    if (!source.read_only &&
        (IsWithin(output_name, name) || IsWithin(name, output_name))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output directory ", output_name,
          output_name == name ? " is the artifact itself"
                              : " overlaps the artifact " + name,
          "; omit the output directory to resize in place, or choose one "
          "outside the artifact"));
    }
    lock_names.push_back(output_name);
  } else if (request.replace) {
    return absl::InvalidArgumentError(
        "replace applies only to an output directory");
  } else if (source.read_only && !request.dry_run) {
    return WithErrorFacts(
        absl::PermissionDeniedError(absl::StrCat(
            Echo(name), " is in the read-only root ", names_[source.root].name,
            " (rbln-artifactd --read-only-root ", names_[source.root].name, "=",
            names_[source.root].dir,
            ") and cannot be changed in place; write a resized copy into the "
            "store instead: rbln-artifact ",
            request.target.has_value()
                ? absl::StrCat("--set-kvcache-num-blocks ", *request.target)
                : absl::StrCat("--set-memory-budget ",
                               request.budget->ToString()),
            " --model-id ", Echo(request.name), " --output-dir ",
            JoinPath(root_, source.rel.empty()
                                ? names_[source.root].name
                                : std::string(Basename(source.rel))))),
        {.reason = ErrorReason::kReadOnlyRoot, .artifact = name});
  }
  for (const std::string& written : lock_names) {
    if (written == name && source.read_only) continue;
    RBLN_RETURN_IF_ERROR(CheckNotInsideArtifact(written));
  }
  if (request.dry_run) {
    // A consistent snapshot is enough: no writer lease, so a dry run never
    // waits behind a long copy.
    RBLN_ASSIGN_OR_RETURN(std::shared_ptr<const Artifact> artifact,
                          ReadShared(name, {.verify_payload = request.verify}));
    WriteResult result;
    RBLN_RETURN_IF_ERROR(
        Plan(request, name, output_name, *artifact, &result).status());
    return result;
  }
  // Lock files are made only for an artifact that exists and an output
  // directory that can be created: a name that resolves to nothing leaves
  // no trace in the state directory.
  RBLN_ASSIGN_OR_RETURN(const bool is_artifact,
                        IsArtifactDir(source.env, source.path));
  if (!is_artifact) {
    // Artifact::Open says precisely what is missing (unless it has just
    // appeared, and then the write goes on).
    RBLN_RETURN_IF_ERROR(NameArtifactInFacts(
        Artifact::Open(source.env, source.path, WithCodecs(source)).status(),
        source.name));
  }
  if (!output_name.empty()) {
    RBLN_RETURN_IF_ERROR(CheckOutput(output_name, request.replace).status());
  }
  RBLN_ASSIGN_OR_RETURN(
      std::unique_ptr<WriterLease> lease,
      WriterLease::Acquire(this, lock_names, request.is_cancelled,
                           request.waiting));
  return WriteLocked(request, source, output_name);
}

absl::Status ArtifactStore::VerifyBeforeCopy(
    Env* env, const Artifact& artifact, bool requested,
    std::vector<std::string>* warnings) {
  const uint64_t payload = PayloadBytes(artifact);
  if (!requested && payload > kCheapVerifyBytes) {
    warnings->push_back(absl::StrCat(
        "payload checksums were not checked: ", (payload >> 20) + 1,
        " MiB were cloned unread (ask to verify, rbln-artifact --verify, to "
        "check them first)"));
    return absl::OkStatus();
  }
  absl::Status status = VerifyPayloads(env, artifact);
  if (absl::IsDataLoss(status)) {
    return absl::DataLossError(absl::StrCat(
        status.message(),
        "; the artifact is corrupt and was not copied (nothing was "
        "changed): restore it from its source or recompile"));
  }
  return status;
}

absl::StatusOr<ResizePlan> ArtifactStore::Plan(const WriteRequest& request,
                                               const std::string& name,
                                               const std::string& output_name,
                                               const Artifact& artifact,
                                               WriteResult* result) {
  result->name = name;
  result->output_name = output_name;
  result->previous_num_blocks = artifact.current_num_blocks();
  if (request.expected_current.has_value() &&
      *request.expected_current != artifact.current_num_blocks()) {
    return WithErrorFacts(
        absl::AbortedError(
            absl::StrCat("kvcache_num_blocks of ", name, " is ",
                         artifact.current_num_blocks(), ", not the expected ",
                         *request.expected_current,
                         "; nothing was changed (read it again and retry)")),
        {.reason = ErrorReason::kCasMismatch,
         .artifact = name,
         .current_num_blocks = artifact.current_num_blocks()});
  }
  // No device (the artifact names no NPU this daemon knows, and no probe
  // or override says): a set is written unchecked, a budget refused.
  const absl::StatusOr<DramChoice> device = DeviceFor(artifact);
  const absl::StatusOr<DeviceSpec> spec =
      device.ok() ? absl::StatusOr<DeviceSpec>(device->spec) : device.status();
  ResizePlan plan;
  if (request.budget.has_value()) {
    absl::StatusOr<FitPlan> fit = PlanFit(artifact, *request.budget, spec);
    if (!fit.ok()) return NameArtifactInFacts(fit.status(), name);
    result->fit = std::move(fit->fit);
    plan = std::move(fit->plan);
  } else {
    absl::StatusOr<ResizePlan> resize =
        PlanResize(artifact, *request.target, spec);
    if (!resize.ok()) return NameArtifactInFacts(resize.status(), name);
    plan = *std::move(resize);
  }
  // A count the device cannot hold is written only when forced; an
  // in-place set to the count the artifact has writes nothing, and says so.
  const bool writes = !output_name.empty() || !plan.is_no_op();
  if (!request.dry_run && !request.force && writes &&
      !plan.device_refusal.ok()) {
    return NameArtifactInFacts(plan.device_refusal, name);
  }
  result->new_num_blocks = plan.target_num_blocks;
  result->fits_device = plan.fits_device;
  if (device.ok()) {
    result->dram_source = device->source;
    result->warnings = device->warnings;
  }
  result->warnings.insert(result->warnings.end(), plan.warnings.begin(),
                          plan.warnings.end());
  if (!output_name.empty()) {
    RBLN_RETURN_IF_ERROR(CheckOutput(output_name, request.replace).status());
  }
  return plan;
}

absl::StatusOr<WriteResult> ArtifactStore::WriteLocked(
    const WriteRequest& request, const Located& source,
    const std::string& output_name) {
  const std::string& name = source.name;
  RBLN_RETURN_IF_ERROR(CheckCancelled(request));
  // Writers on this artifact are excluded by the lease, so this snapshot
  // stays current until the commit.
  absl::StatusOr<Artifact> opened =
      Artifact::Open(source.env, source.path, WithCodecs(source));
  if (!opened.ok()) return NameArtifactInFacts(opened.status(), name);
  Artifact artifact = *std::move(opened);
  WriteResult result;
  RBLN_ASSIGN_OR_RETURN(ResizePlan plan,
                        Plan(request, name, output_name, artifact, &result));
  if (!(output_name.empty() && plan.is_no_op())) {
    RBLN_RETURN_IF_ERROR(VerifyBeforeCopy(source.env, artifact, request.verify,
                                          &result.warnings));
  }

  WriteResizedOptions write_options;
  write_options.source_env = source.env;
  // Whoever owns files in a read-only root (a user's cache) is not thereby
  // an owner in the store: the copy is the daemon's, with the same modes.
  write_options.copy_owner =
      source.read_only ? CopyOwner::kWriter : CopyOwner::kSource;
  write_options.is_cancelled = request.is_cancelled;
  if (request.progress) {
    const uint64_t total = PayloadBytes(artifact);
    auto done = std::make_shared<uint64_t>(0);
    write_options.on_copied = [done, total,
                               progress = request.progress](uint64_t bytes) {
      *done += bytes;
      progress(*done, total);
    };
  }
  if (output_name.empty()) {
    if (plan.is_no_op()) return result;
    RBLN_RETURN_IF_ERROR(
        CommitInPlace(artifact, plan, name, write_options, &result.warnings));
    // A new directory (inode) is there now: what is held of the old one
    // would miss anyway, and goes at once, with the codecs' facts of the
    // containers it replaced.
    artifact_cache_.Erase(source.freshness, source.path);
    for (const ContainerFile& file : artifact.containers()) {
      inspect_cache_.Erase(FileIdentity::Of(file.stat));
    }
    CountCommit(CommitKind::kInPlace);
  } else {
    RBLN_RETURN_IF_ERROR(CommitToOutput(artifact, plan, output_name,
                                        request.replace, write_options,
                                        &result.warnings));
    artifact_cache_.Erase(freshness_.get(), PathOf(output_name));
    CountCommit(CommitKind::kOutputDir);
  }
  result.written = true;
  return result;
}

absl::Status ArtifactStore::Exchange(const std::string& name,
                                     const std::string& staging,
                                     const FileStat& expected,
                                     const std::function<bool()>& is_cancelled,
                                     bool* staging_is_theirs) {
  *staging_is_theirs = false;
  std::shared_ptr<LockEntry> entry = Entry(name);
  // Readers hold the lock only while they read headers, but a caller that
  // gives up must not wait for them.
  while (!entry->rw.TryLock()) {
    if (IsCancelled(is_cancelled)) {
      return WriteCancelled(absl::StrCat("while readers held ", Echo(name)));
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  absl::Status status = env_->RenameExchange(staging, PathOf(name));
  if (status.ok()) {
    // What came out must be the directory this write read or checked: a
    // tree someone put there meanwhile is swapped back, never removed. (A
    // failure to look is not proof of a swap: the commit stands.)
    absl::StatusOr<FileStat> out = env_->Stat(staging);
    if (out.ok() &&
        (out->device != expected.device || out->inode != expected.inode)) {
      absl::Status back = env_->RenameExchange(staging, PathOf(name));
      *staging_is_theirs = !back.ok();
      status =
          back.ok()
              ? absl::AbortedError(absl::StrCat(
                    Echo(name),
                    " was replaced by another directory while the write ran; "
                    "nothing was changed (read it again and retry)"))
              : absl::InternalError(absl::StrCat(
                    Echo(name),
                    " was replaced by another directory while the write ran, "
                    "and swapping it back failed (",
                    back.message(), "); it is at ", Echo(staging)));
    }
  }
  entry->rw.Unlock();
  return status;
}

namespace {

// A failure after the commit point: the new version is in place, so the
// write succeeded, but the parent's fsync did not make it durable yet.
void NoteUndurable(const absl::Status& status,
                   std::vector<std::string>* warnings) {
  if (status.ok()) return;
  warnings->push_back(
      absl::StrCat("the change is in place but could not be made durable (",
                   status.message(),
                   "); a power loss now could bring back the old "
                   "version"));
}

}  // namespace

absl::Status ArtifactStore::Stage(const Artifact& artifact,
                                  const ResizePlan& plan,
                                  const std::string& staging,
                                  const std::string& what,
                                  const WriteResizedOptions& write_options) {
  const auto stage = [&](const WriteResizedOptions& options) {
    absl::Status status = env_->CreateDir(staging);
    if (!status.ok()) return status;
    status = WriteResizedArtifact(env_, artifact, plan, staging, options);
    if (!status.ok()) RemoveStagingTree(env_, staging);
    return status;
  };
  // What the first try reported copied, so that a second one goes on from
  // there rather than past the total.
  uint64_t reported = 0;
  WriteResizedOptions first = write_options;
  if (write_options.on_copied) {
    first.on_copied = [&](uint64_t bytes) {
      reported += bytes;
      write_options.on_copied(bytes);
    };
  }
  absl::Status status = stage(first);
  if (absl::IsResourceExhausted(status)) {
    // Old versions waiting out their grace period must not be why a write
    // fails: they go at once (a reader still on one loses it), and the
    // write is tried once more.
    const size_t removed = retired_.RemoveNow();
    if (removed > 0) {
      spdlog::warn(
          "out of space writing {}: removed {} old artifact version(s) "
          "before their grace period was over; trying once more",
          LogValue(what), removed);
      uint64_t copied = 0;
      WriteResizedOptions again = write_options;
      if (write_options.on_copied) {
        again.on_copied = [&](uint64_t bytes) {
          const uint64_t before = std::max(copied, reported);
          copied += bytes;
          if (copied > before) write_options.on_copied(copied - before);
        };
      }
      status = stage(again);
    }
  }
  if (absl::IsResourceExhausted(status)) {
    uint64_t bytes = 0;
    for (const ContainerFile& file : artifact.containers()) {
      bytes += file.stat.size;
    }
    status = absl::ResourceExhaustedError(
        absl::StrCat("not enough free space to write ", what,
                     " (the containers alone "
                     "need about ",
                     (bytes >> 20) + 1,
                     " MiB on that file system); nothing "
                     "was changed: ",
                     status.message()));
  }
  return status;
}

absl::Status ArtifactStore::CommitInPlace(
    const Artifact& artifact, const ResizePlan& plan, const std::string& name,
    const WriteResizedOptions& write_options,
    std::vector<std::string>* warnings) {
  const std::string path = PathOf(name);
  const std::string parent(Dirname(path));
  const std::string staging = JoinPath(parent, StagingNameFor(Basename(path)));
  WriteResizedOptions options = write_options;
  options.link_companions = true;
  RBLN_RETURN_IF_ERROR(Stage(artifact, plan, staging,
                             absl::StrCat("the resized ", name), options));
  bool staging_is_theirs = false;
  absl::Status status =
      Exchange(name, staging, artifact.dir_stat(), write_options.is_cancelled,
               &staging_is_theirs);
  if (staging_is_theirs) return status;
  if (!status.ok()) {
    RemoveStagingTree(env_, staging);
    return status;
  }
  // From here the artifact path holds the new version; `staging` the old,
  // which readers that opened the artifact before the swap may be reading.
  NoteUndurable(env_->SyncDir(parent), warnings);
  retired_.Retire(staging);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<FileStat>> ArtifactStore::CheckOutput(
    const std::string& output_name, bool replace) {
  const std::string dest = PathOf(output_name);
  const std::string parent(Dirname(dest));
  RBLN_ASSIGN_OR_RETURN(std::optional<FileStat> parent_st,
                        StatIfExists(env_, parent));
  if (parent_st.has_value() && parent_st->type == FileType::kSymlink) {
    return ErrnoToStatus("open", parent, ELOOP);
  }
  if (!parent_st.has_value() || parent_st->type != FileType::kDirectory) {
    return absl::NotFoundError(
        absl::StrCat("the parent directory ", parent, " of output directory ",
                     output_name, " does not exist; create it first"));
  }
  RBLN_ASSIGN_OR_RETURN(std::optional<FileStat> dest_st,
                        StatIfExists(env_, dest));
  if (!dest_st.has_value()) return std::nullopt;
  if (dest_st->type == FileType::kSymlink) {
    return ErrnoToStatus("open", dest, ELOOP);
  }
  if (!replace) {
    return WithErrorFacts(
        absl::AlreadyExistsError(absl::StrCat(
            "output directory ", output_name,
            " already exists; choose a new directory, or replace it "
            "(rbln-artifact --replace; replace in the API)")),
        {.reason = ErrorReason::kOutputExists, .artifact = output_name});
  }
  if (dest_st->type != FileType::kDirectory) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to replace ", output_name, ": it is not a directory"));
  }
  RBLN_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, env_->ListDir(dest));
  if (!entries.empty()) {
    RBLN_ASSIGN_OR_RETURN(bool is_artifact, IsArtifactDir(env_, dest));
    if (!is_artifact) {
      return absl::FailedPreconditionError(
          absl::StrCat("refusing to replace ", output_name,
                       ": it is neither empty nor a compiled artifact"));
    }
  }
  return dest_st;
}

absl::Status ArtifactStore::CommitToOutput(
    const Artifact& artifact, const ResizePlan& plan,
    const std::string& output_name, bool replace,
    const WriteResizedOptions& write_options,
    std::vector<std::string>* warnings) {
  // Checked again under the lease: the destination may have appeared since.
  RBLN_ASSIGN_OR_RETURN(const std::optional<FileStat> existing,
                        CheckOutput(output_name, replace));
  const bool exists = existing.has_value();
  const std::string dest = PathOf(output_name);
  const std::string parent(Dirname(dest));
  const std::string staging = JoinPath(parent, StagingNameFor(Basename(dest)));
  RBLN_RETURN_IF_ERROR(Stage(artifact, plan, staging,
                             absl::StrCat("the resized copy ", output_name),
                             write_options));
  bool staging_is_theirs = false;
  absl::Status status =
      exists ? Exchange(output_name, staging, *existing,
                        write_options.is_cancelled, &staging_is_theirs)
             : env_->RenameNoReplace(staging, dest);
  if (staging_is_theirs) return status;
  if (!status.ok()) {
    RemoveStagingTree(env_, staging);
    if (absl::IsAlreadyExists(status)) {
      return WithErrorFacts(
          absl::AlreadyExistsError(
              absl::StrCat("output directory ", output_name,
                           " was created by someone else meanwhile; nothing "
                           "was written there")),
          {.reason = ErrorReason::kOutputExists, .artifact = output_name});
    }
    return status;
  }
  NoteUndurable(env_->SyncDir(parent), warnings);
  if (exists) retired_.Retire(staging);  // the replaced tree
  return absl::OkStatus();
}

}  // namespace rbln
