// The POSIX Freshness (core/os/freshness.h).
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <atomic>
#include <cerrno>
#include <memory>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/core_metrics.h"
#include "core/os/dir_watch.h"
#include "core/os/freshness.h"
#include "core/os/local_fs.h"
#include "core/os/path.h"
#include "core/os/path_resolver.h"
#include "core/os/posix_file.h"
#include "core/os/read_lease.h"
#include "core/os/unique_fd.h"
#include "core/status_macros.h"

namespace rbln {
namespace {

class PosixHeldDir : public HeldDir {
 public:
  PosixHeldDir(UniqueFd dir_fd, const struct stat& st, DirWatch* dir_watch,
               std::shared_ptr<std::atomic<int>> count)
      : fd(std::move(dir_fd)),
        held(st),
        watch(dir_watch),
        count_(std::move(count)) {}
  ~PosixHeldDir() override { count_->fetch_sub(1); }

  const UniqueFd fd;  // O_PATH
  // The directory's status when it was held: what a lookup reports while
  // the watches saw no change since `dir` last named it unchanged.
  const struct stat held;
  // Null: the directory's name is looked at on every lookup.
  DirWatch* const watch;
  // The watch's generation when `dir` was last seen to name this directory
  // unchanged, with the watches along it added before; 0: not now. Stored
  // under `mu` only.
  mutable std::atomic<uint64_t> verified{0};
  mutable absl::Mutex mu;
  mutable std::unique_ptr<DirWatch::Watches> watches ABSL_GUARDED_BY(mu);
  // The generation at which its path could not be watched
  // (core/os/dir_watch.h); tried again once the generation moves. Stored
  // under `mu`.
  mutable std::atomic<uint64_t> watch_failed_at{0};
  // The generation in which the leased files were last looked at and found
  // as leased; the leases are trusted under the watch only while it stands.
  mutable std::atomic<uint64_t> leases_checked{0};
  // Per name held, a read lease on the file where one could be had, and
  // the file's status when it was taken (reported while the lease holds).
  std::vector<std::string> leased_names;
  std::vector<std::unique_ptr<ReadLease>> leases;
  std::vector<std::optional<FileStat>> leased_stats;

 private:
  // Of the Freshness that made it (shared: it may outlive it).
  const std::shared_ptr<std::atomic<int>> count_;
};

class PosixFreshness : public Freshness {
 public:
  PosixFreshness(std::unique_ptr<PathResolver> paths,
                 const FreshnessOptions& options)
      : paths_(std::move(paths)), options_(options) {}

  absl::StatusOr<DirStats> StatEntries(
      const std::string& dir, absl::Span<const std::string> names) override {
    return StatDirEntries(dir, names, nullptr);
  }

  absl::StatusOr<DirStats> StatAndHoldEntries(
      const std::string& dir, absl::Span<const std::string> names,
      std::unique_ptr<HeldDir>* held) override {
    held->reset();
    return StatDirEntries(dir, names, held);
  }

  absl::StatusOr<DirStats> StatEntriesAgain(
      const HeldDir& held, const std::string& dir,
      absl::Span<const std::string> names) override {
    if (paths_->follow_symlinks()) return StatEach(dir, names);
    const auto& open = static_cast<const PosixHeldDir&>(held);
    uint64_t watched_at = 0;
    RBLN_ASSIGN_OR_RETURN(std::optional<struct stat> st,
                          LookAgain(open, dir, &watched_at));
    if (!st.has_value()) return StatDirEntries(dir, names, nullptr);
    DirStats stats;
    stats.dir = ToFileStat(*st);
    // A file still leased has not been opened for writing since: what it
    // looked like then stands (core/os/read_lease.h). Under a watch, only once
    // the files were looked at in the generation the watch vouches for: a
    // file mounted over a leased one, a truncating open for reading or a
    // chmod break no lease, but move the generation.
    const bool same_names = names.size() == open.leases.size();
    const bool trusted =
        same_names &&
        (watched_at == 0 || open.leases_checked.load() == watched_at);
    bool as_leased = same_names;
    stats.entries.reserve(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      const bool leased = same_names && open.leases[i] != nullptr &&
                          open.leased_names[i] == names[i];
      if (leased && open.leases[i]->broken()) {
        // Opened for writing (or truncated, or let go by the lease thread)
        // since: the status alone would miss writes through a mapping.
        stats.written = true;
      } else if (trusted && leased && open.leases[i]->intact()) {
        stats.entries.push_back(open.leased_stats[i]);
        continue;
      }
      RBLN_ASSIGN_OR_RETURN(std::optional<FileStat> entry,
                            StatNameIn(open.fd.get(), dir, names[i]));
      if (leased && !SameVersion(entry, open.leased_stats[i])) {
        as_leased = false;
      }
      stats.entries.push_back(std::move(entry));
    }
    // Looked at after the generation was read, and it has not moved since:
    // until it does, the leases tell what a look would.
    if (watched_at != 0 && !trusted && as_leased &&
        open.watch->Generation() == watched_at) {
      open.leases_checked.store(watched_at);
    }
    return stats;
  }

  bool MayChangeUnseen(const std::string& path) override {
    absl::StatusOr<UniqueFd> fd = OpenRegularFile(*paths_, path);
    // UNAVAILABLE: another process's write lease refused the open
    // (EWOULDBLOCK); it is being written.
    if (!fd.ok()) return absl::IsUnavailable(fd.status());
    struct statfs fs;
    if (fstatfs(fd->get(), &fs) != 0) return false;
    // tmpfs has no page_mkwrite: a page mapped by a read fault is written
    // without a fault, and the file's times never show it.
    if (fs.f_type == TMPFS_MAGIC) return true;
    return options_.read_leases && ReadLease::WrittenElsewhere(fd->get());
  }

 private:
  // The process's directory watch, for a directory held now; null where
  // the held directory's name is to be looked at on every lookup: watching
  // is off, or the paths have no root to watch from (unconfined).
  DirWatch* Watch() const {
    if (paths_->root().empty() || !options_.dir_watch) return nullptr;
    return DirWatch::Get();
  }

  // StatEntries by each entry's path: where links are followed, each name
  // may lead elsewhere.
  absl::StatusOr<DirStats> StatEach(const std::string& dir,
                                    absl::Span<const std::string> names) const {
    DirStats stats;
    RBLN_ASSIGN_OR_RETURN(stats.dir, StatPath(*paths_, dir));
    for (const std::string& name : names) {
      absl::StatusOr<FileStat> st = StatPath(*paths_, JoinPath(dir, name));
      if (absl::IsNotFound(st.status())) {
        stats.entries.push_back(std::nullopt);
        continue;
      }
      RBLN_RETURN_IF_ERROR(st.status());
      stats.entries.push_back(*st);
    }
    return stats;
  }

  // The entries `names` of the directory open as `fd` (`dir`), into
  // stats->entries.
  static absl::Status StatNamesIn(int fd, const std::string& dir,
                                  absl::Span<const std::string> names,
                                  DirStats* stats) {
    stats->entries.reserve(stats->entries.size() + names.size());
    for (const std::string& name : names) {
      RBLN_ASSIGN_OR_RETURN(std::optional<FileStat> entry,
                            StatNameIn(fd, dir, name));
      stats->entries.push_back(std::move(entry));
    }
    return absl::OkStatus();
  }

  // The entry `name` (one component) of `dir`, open as `fd`; nullopt when
  // there is none.
  static absl::StatusOr<std::optional<FileStat>> StatNameIn(
      int fd, const std::string& dir, const std::string& name) {
    if (name.empty() || name == "." || name == ".." ||
        name.find('/') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("stat ", JoinPath(dir, name), ": '", name,
                       "' is not a single path component"));
    }
    struct stat st;
    if (fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      return ToFileStat(st);
    }
    if (errno == ENOENT) return std::nullopt;
    return ErrnoToStatus("stat", JoinPath(dir, name), errno);
  }

  // The status of `dir` when it still names the directory `open` holds,
  // else nullopt. Without a system call but the watch's while nothing
  // watched changed since `dir` was last seen to name it unchanged
  // (core/os/dir_watch.h, where the order below is explained). *watched_at:
  // the generation the watches along its path vouch for the answer in; 0
  // where the path is not watched.
  absl::StatusOr<std::optional<struct stat>> LookAgain(const PosixHeldDir& open,
                                                       const std::string& dir,
                                                       uint64_t* watched_at) {
    *watched_at = 0;
    if (open.watch == nullptr) {
      CountDirCheck(DirCheck::kLooked);
      return LookAtName(open, dir);
    }
    uint64_t generation = open.watch->Generation();
    if (generation != 0 && open.verified.load() == generation) {
      CountDirCheck(DirCheck::kWatched);
      *watched_at = generation;
      return open.held;
    }
    // Not watchable now: looked at, as many at once as ask.
    if (generation == 0 || open.watch_failed_at.load() == generation) {
      CountDirCheck(DirCheck::kLooked);
      return LookAtName(open, dir);
    }
    // One lookup at a time re-watches and records, so that none lets go of
    // the watches another recorded a generation with.
    absl::MutexLock lock(&open.mu);
    generation = open.watch->Generation();
    if (generation != 0 && open.verified.load() == generation) {
      CountDirCheck(DirCheck::kWatched);
      *watched_at = generation;
      return open.held;
    }
    CountDirCheck(DirCheck::kLooked);
    if (generation == 0) return LookAtName(open, dir);
    if (open.watch_failed_at.load() != generation) {
      // Along the path as it is now: a directory on the way may have been
      // replaced by one that nothing watches yet. Tried again once the
      // generation moves after a failure (the watches may have been used
      // up for a while).
      RBLN_ASSIGN_OR_RETURN(absl::string_view rel,
                            paths_->BeneathRoot("stat", dir));
      std::unique_ptr<DirWatch::Watches> watches =
          open.watch->WatchPath(paths_->root_fd(), rel);
      if (watches == nullptr) {
        open.watch_failed_at.store(generation);
        open.verified.store(0);
      }
      open.watches.swap(watches);  // the old ones let go after the new
    }
    if (open.watches != nullptr) *watched_at = generation;
    RBLN_ASSIGN_OR_RETURN(std::optional<struct stat> st, LookAtName(open, dir));
    if (st.has_value() && open.watches != nullptr &&
        SameFileVersion(*st, open.held) &&
        open.watch->Generation() == generation) {
      open.verified.store(generation);
    }
    return st;
  }

  // The status of `dir` from its name, when that still names the directory
  // `open` holds, else nullopt.
  absl::StatusOr<std::optional<struct stat>> LookAtName(
      const PosixHeldDir& open, const std::string& dir) {
    RBLN_ASSIGN_OR_RETURN(Location at, paths_->Locate("stat", dir));
    struct stat st;
    if (fstatat(at.dir, at.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return ErrnoToStatus("stat", dir, errno);
    }
    // The open directory pins its inode, so the same device and inode mean
    // that `dir` names it still.
    if (!S_ISDIR(st.st_mode) || st.st_dev != open.held.st_dev ||
        st.st_ino != open.held.st_ino) {
      return std::nullopt;
    }
    return st;
  }

  // Read leases on the regular files among `names` (their entries in
  // *stats), each entry then replaced by the file's status once leased.
  static void LeaseEntries(PosixHeldDir* held,
                           absl::Span<const std::string> names,
                           bool read_leases, DirStats* stats) {
    held->leased_names.assign(names.begin(), names.end());
    held->leases.resize(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      std::optional<FileStat>& entry = stats->entries[i];
      if (!entry.has_value() || entry->type != FileType::kRegular) continue;
      if (!read_leases) continue;
      struct stat now;
      bool written = false;
      held->leases[i] = ReadLease::Take(held->fd.get(), names[i], entry->device,
                                        entry->inode, &now, &written);
      if (held->leases[i] != nullptr) entry = ToFileStat(now);
      stats->written = stats->written || written;
    }
    held->leased_stats = stats->entries;
  }

  // StatEntries through one O_PATH descriptor of `dir`, kept in *held when
  // `held` is given and fewer than kMaxHeldDirs are held.
  absl::StatusOr<DirStats> StatDirEntries(const std::string& dir,
                                          absl::Span<const std::string> names,
                                          std::unique_ptr<HeldDir>* held) {
    // Where links are followed, each name may lead elsewhere: Stat each.
    if (paths_->follow_symlinks()) return StatEach(dir, names);
    RBLN_ASSIGN_OR_RETURN(Location at, paths_->Locate("stat", dir));
    UniqueFd fd(openat(at.dir, at.leaf.c_str(),
                       O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (fd.get() < 0) {
      return ErrnoToStatus("stat", dir,
                           LinkAwareErrno(at.dir, at.leaf.c_str(), errno));
    }
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return ErrnoToStatus("stat", dir, errno);
    DirStats stats;
    stats.dir = ToFileStat(st);
    RBLN_RETURN_IF_ERROR(StatNamesIn(fd.get(), dir, names, &stats));
    if (held != nullptr && held_dirs_->fetch_add(1) < kMaxHeldDirs) {
      auto open = std::make_unique<PosixHeldDir>(std::move(fd), st, Watch(),
                                                 held_dirs_);
      LeaseEntries(open.get(), names, options_.read_leases, &stats);
      *held = std::move(open);
    } else if (held != nullptr) {
      held_dirs_->fetch_sub(1);
    }
    return stats;
  }

  const std::unique_ptr<PathResolver> paths_;
  const FreshnessOptions options_;
  // Directories held open now (PosixHeldDir).
  const std::shared_ptr<std::atomic<int>> held_dirs_ =
      std::make_shared<std::atomic<int>>(0);
};

}  // namespace

std::unique_ptr<Freshness> NewPosixFreshness(const FreshnessOptions& options) {
  return std::make_unique<PosixFreshness>(std::make_unique<PathResolver>(),
                                          options);
}

absl::StatusOr<std::unique_ptr<Freshness>> NewConfinedFreshness(
    const std::string& root, const ConfinedEnvOptions& confinement,
    const FreshnessOptions& options) {
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<PathResolver> paths,
                        PathResolver::Confine(root, confinement));
  return std::make_unique<PosixFreshness>(std::move(paths), options);
}

}  // namespace rbln
