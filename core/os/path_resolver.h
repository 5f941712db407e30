// PathResolver: where a path given to the POSIX Env (or to the caches'
// freshness checks, core/os/freshness.h) is, as a directory descriptor and
// a last component for the *at() call that acts on it. The one place that
// confines paths beneath a root (env.h, "Confinement"): the parent
// directory is resolved inside the kernel beneath a descriptor of the root,
// opened once, with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS), or, where openat2 is missing or filtered, one
// O_NOFOLLOW step at a time; what acts next uses the descriptor, never the
// name again.
//
// Thread-safe: a resolver is immutable but for a flag that remembers that
// openat2 is missing.
#ifndef RBLN_CORE_OS_PATH_RESOLVER_H_
#define RBLN_CORE_OS_PATH_RESOLVER_H_

#include <fcntl.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/os/env.h"
#include "core/os/unique_fd.h"

namespace rbln {

// Where one call acts: the last component `leaf` of its path, in the
// directory `dir` (AT_FDCWD for an unconfined resolver, else a descriptor
// that `holder` keeps open, or the root's).
struct Location {
  UniqueFd holder;
  int dir = AT_FDCWD;
  std::string leaf;
};

class PathResolver {
 public:
  // Unconfined: any path, resolved by the kernel as given.
  PathResolver() = default;
  // Confined to `root` (an existing directory; a symbolic link above or at
  // it is followed once, now), as NewConfinedEnv confines an Env.
  static absl::StatusOr<std::unique_ptr<PathResolver>> Confine(
      const std::string& root, const ConfinedEnvOptions& options);

  PathResolver(const PathResolver&) = delete;
  PathResolver& operator=(const PathResolver&) = delete;

  // The root (resolved, absolute), or "" when unconfined.
  const std::string& root() const { return root_; }
  // The root's descriptor (O_PATH); -1 when unconfined.
  int root_fd() const { return root_fd_.get(); }
  bool read_only() const { return read_only_; }
  // Symbolic links beneath the root are followed (ConfinedEnvOptions).
  bool follow_symlinks() const { return follow_symlinks_; }

  // Where `path` is, for the operation `op` (named in errors). A path
  // outside the root, or through a symbolic link where none is followed,
  // is PERMISSION_DENIED; a path of PATH_MAX bytes or more
  // INVALID_ARGUMENT. With follow_symlinks(), a link as the last component
  // is followed too (at most 40 links per path), so that the call acts on
  // what it leads to.
  absl::StatusOr<Location> Locate(absl::string_view op,
                                  const std::string& path) const;

  // `path` relative to the root, as given: "" for the root itself. The
  // errors of Locate for a path outside it.
  absl::StatusOr<absl::string_view> BeneathRoot(absl::string_view op,
                                                absl::string_view path) const;

 private:
  PathResolver(std::string root, UniqueFd root_fd,
               const ConfinedEnvOptions& options);

  absl::StatusOr<Location> LocateBeneath(absl::string_view op,
                                         absl::string_view path,
                                         const std::string& rel) const;
  absl::StatusOr<std::string> ReadLink(absl::string_view op,
                                       absl::string_view path, int dir,
                                       const std::string& leaf) const;
  absl::StatusOr<UniqueFd> ResolveDir(absl::string_view op,
                                      absl::string_view path,
                                      const std::string& rel) const;
  absl::StatusOr<UniqueFd> WalkDir(absl::string_view op, absl::string_view path,
                                   const std::string& rel) const;
  absl::Status ResolveError(absl::string_view op, absl::string_view path,
                            int err) const;

  const std::string root_;  // "" when unconfined
  const UniqueFd root_fd_{};
  const bool use_openat2_ = true;
  const bool read_only_ = false;
  const bool follow_symlinks_ = false;
  mutable std::atomic<bool> openat2_works_{true};
};

// The errno to report for `err` from an open of `name` in `dir` with
// O_DIRECTORY | O_NOFOLLOW: ELOOP where that name is a symbolic link (the
// kernel says ENOTDIR), else `err`.
int LinkAwareErrno(int dir, const char* name, int err);

// Opens the directory `at` names (never through a symbolic link), read-only.
absl::StatusOr<UniqueFd> OpenDirectoryAt(const Location& at,
                                         absl::string_view op,
                                         absl::string_view path);

}  // namespace rbln

#endif  // RBLN_CORE_OS_PATH_RESOLVER_H_
