// Freshness: whether files a cache read are still what it read, told as
// cheaply as the kernel allows. ArtifactCache (core/format/artifact_cache.h)
// asks it, and Artifact::Open asks it which files may change unseen; Env is
// kept to operating-system calls (core/os/env.h).
//
// The POSIX implementation (core/os/freshness_posix.cc) looks at a
// directory's entries through one descriptor of the directory, and can
// keep the directory open (HeldDir) so that looking again resolves only its
// name. Where it can, it also holds a read lease on each file
// (core/os/read_lease.h: a file still leased has not been opened for
// writing, so it is not looked at) and watches the directory's path
// (core/os/dir_watch.h: while nothing on the path changed, its name is not
// looked at either). docs/architecture.md, "The read path", tells why.
//
// Paths are resolved as an Env with the same confinement resolves them
// (core/os/path_resolver.h). Thread-safe: a Freshness and its HeldDirs may
// be used from any thread.
#ifndef RBLN_CORE_OS_FRESHNESS_H_
#define RBLN_CORE_OS_FRESHNESS_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/os/env.h"

namespace rbln {

// Directories one POSIX Freshness keeps open at once for
// StatAndHoldEntries: few next to the descriptors a daemon may open (1024 by
// default).
inline constexpr int kMaxHeldDirs = 256;

// A directory kept open by Freshness::StatAndHoldEntries, so that looking
// at its entries again (StatEntriesAgain) resolves only the directory's own
// name. Belongs to the Freshness that made it, which it must not outlive.
class HeldDir {
 public:
  virtual ~HeldDir() = default;
};

// A directory and some of its entries, looked at together.
struct DirStats {
  FileStat dir;
  // One per name asked for, in the same order; nullopt when the directory
  // has no such entry.
  std::vector<std::optional<FileStat>> entries;
  // An entry is, or has been since it was leased, open for writing
  // somewhere: its read lease was refused for that (ReadLease::Take) or has
  // been broken. What such a file holds can change without its status
  // changing (a shared writable mapping), so a cache should not trust it.
  // Known only where read leases are taken (StatAndHoldEntries and
  // StatEntriesAgain of the POSIX Freshness); else false.
  bool written = false;
};

// What a POSIX Freshness may use besides looking (the daemon's
// --no-read-leases and --no-dir-watch turn them off).
struct FreshnessOptions {
  // Take read leases on the files of held directories.
  bool read_leases = true;
  // Watch the paths of held directories of a confined Freshness.
  bool dir_watch = true;
};

class Freshness {
 public:
  virtual ~Freshness() = default;

  // Stat of the directory `dir` and of the entries `names` in it (single
  // components), as Env::Stat would report each, resolving `dir` once where
  // it can (then one fstatat per name): what a cache needs to check that
  // the files it read are still the same.
  virtual absl::StatusOr<DirStats> StatEntries(
      const std::string& dir, absl::Span<const std::string> names) = 0;
  // StatEntries, keeping the directory open in *held where it can (at most
  // kMaxHeldDirs at once), with a read lease on each regular file where one
  // can be had (the entry is then the file's status once leased); else
  // *held is null.
  virtual absl::StatusOr<DirStats> StatAndHoldEntries(
      const std::string& dir, absl::Span<const std::string> names,
      std::unique_ptr<HeldDir>* held) = 0;
  // StatEntries again, for a directory `held` (from this Freshness) keeps
  // open and the same `names`: when `dir` still names that directory, one
  // lstat of `dir` and one fstatat per name through the open directory;
  // else as StatEntries. No lstat of `dir` while the directory watch saw
  // nothing change on the path nor in the mount table since
  // (core/os/dir_watch.h); the directory is then reported as it was held. A
  // file leased when the directory was held (core/os/read_lease.h) is not
  // looked at while the lease holds: it is reported as it was then (its
  // contents cannot have changed; a change of mode, owner or times alone is
  // not seen).
  virtual absl::StatusOr<DirStats> StatEntriesAgain(
      const HeldDir& held, const std::string& dir,
      absl::Span<const std::string> names) = 0;

  // Whether what the regular file `path` holds may change without its size
  // or times changing, so that a cache should not keep what was read from
  // it: the file is open for writing somewhere (a writer's descriptor, a
  // shared writable mapping, a write lease), told by a read lease taken and
  // let go at once (ReadLease::WrittenElsewhere; not when read leases are
  // off), or it is on a tmpfs, whose writes through a mapping change no
  // time once a read has mapped the page. False where it cannot tell, and
  // on any error.
  virtual bool MayChangeUnseen(const std::string& path) = 0;
};

// The POSIX Freshness for any path, as Env::Default() takes it (its
// directories are held, but never watched).
std::unique_ptr<Freshness> NewPosixFreshness(
    const FreshnessOptions& options = {});

// The POSIX Freshness for the paths that NewConfinedEnv(root, confinement)
// takes, resolved alike beneath a descriptor of its own of `root`. Where
// links are followed (ConfinedEnvOptions::follow_symlinks_beneath), each
// entry is looked at by its path, and no directory is held.
absl::StatusOr<std::unique_ptr<Freshness>> NewConfinedFreshness(
    const std::string& root, const ConfinedEnvOptions& confinement = {},
    const FreshnessOptions& options = {});

}  // namespace rbln

#endif  // RBLN_CORE_OS_FRESHNESS_H_
