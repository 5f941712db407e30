#include "core/os/path_resolver.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"

namespace rbln {
namespace {

// How many symbolic links one path may pass through when they are followed
// (as the kernel's own limit, MAXSYMLINKS).
constexpr int kMaxSymlinkHops = 40;

}  // namespace

int LinkAwareErrno(int dir, const char* name, int err) {
  struct stat st;
  if (err == ENOTDIR && fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      S_ISLNK(st.st_mode)) {
    return ELOOP;
  }
  return err;
}

absl::StatusOr<UniqueFd> OpenDirectoryAt(const Location& at,
                                         absl::string_view op,
                                         absl::string_view path) {
  UniqueFd fd(openat(at.dir, at.leaf.c_str(),
                     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    return ErrnoToStatus(op, path,
                         LinkAwareErrno(at.dir, at.leaf.c_str(), errno));
  }
  return fd;
}

PathResolver::PathResolver(std::string root, UniqueFd root_fd,
                           const ConfinedEnvOptions& options)
    : root_(std::move(root)),
      root_fd_(std::move(root_fd)),
      use_openat2_(options.use_openat2),
      read_only_(options.read_only),
      follow_symlinks_(options.follow_symlinks_beneath) {}

absl::StatusOr<std::unique_ptr<PathResolver>> PathResolver::Confine(
    const std::string& root, const ConfinedEnvOptions& options) {
  char* resolved = realpath(root.c_str(), nullptr);
  if (resolved == nullptr) return ErrnoToStatus("open", root, errno);
  std::string canonical = resolved;
  free(resolved);
  UniqueFd fd(
      open(canonical.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOTDIR) {
      return absl::FailedPreconditionError(
          absl::StrCat(root, " is not a directory"));
    }
    return ErrnoToStatus("open", canonical, errno);
  }
  return std::unique_ptr<PathResolver>(
      new PathResolver(std::move(canonical), std::move(fd), options));
}

absl::StatusOr<absl::string_view> PathResolver::BeneathRoot(
    absl::string_view op, absl::string_view path) const {
  absl::string_view rel = path;
  if (path.size() >= PATH_MAX) {
    // Both ways of resolving refuse it alike (openat2 would by itself).
    return ErrnoToStatus(op, path, ENAMETOOLONG);
  }
  if (!absl::ConsumePrefix(&rel, root_) ||
      (!rel.empty() && !absl::ConsumePrefix(&rel, "/"))) {
    return absl::PermissionDeniedError(
        absl::StrCat(op, " ", path, ": outside the directory ", root_,
                     " that this process is confined to"));
  }
  return rel;
}

absl::StatusOr<Location> PathResolver::Locate(absl::string_view op,
                                              const std::string& path) const {
  Location at;
  if (root_.empty()) {
    at.leaf = path;
    return at;
  }
  RBLN_ASSIGN_OR_RETURN(absl::string_view rel, BeneathRoot(op, path));
  // One plain component, as an artifact at the top of a store is: its
  // parent is the root (no allocation but the leaf's, on every lookup).
  if (!follow_symlinks_ && !rel.empty() && rel != "." && rel != ".." &&
      rel.find('/') == absl::string_view::npos) {
    at.dir = root_fd_.get();
    at.leaf = std::string(rel);
    return at;
  }
  std::vector<absl::string_view> parts;
  for (absl::string_view part : absl::StrSplit(rel, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") {
      return absl::PermissionDeniedError(
          absl::StrCat(op, " ", path, ": '..' is not followed here"));
    }
    parts.push_back(part);
  }
  std::string resolved = absl::StrJoin(parts, "/");
  for (int hops = 0;; ++hops) {
    RBLN_ASSIGN_OR_RETURN(Location at, LocateBeneath(op, path, resolved));
    if (!follow_symlinks_) return at;
    // A symbolic link as the last component is followed here, one hop at
    // a time, so that the call itself still acts on a non-link leaf.
    struct stat st;
    if (fstatat(at.dir, at.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISLNK(st.st_mode)) {
      return at;
    }
    if (hops >= kMaxSymlinkHops) return ErrnoToStatus(op, path, ELOOP);
    RBLN_ASSIGN_OR_RETURN(std::string target,
                          ReadLink(op, path, at.dir, at.leaf));
    const size_t slash = resolved.rfind('/');
    resolved = slash == std::string::npos
                   ? target
                   : absl::StrCat(resolved.substr(0, slash + 1), target);
    if (resolved.size() >= PATH_MAX) {
      return ErrnoToStatus(op, path, ENAMETOOLONG);
    }
  }
}

// Where `rel` (relative to the root; "" for the root itself) is: its
// parent resolved beneath the root, and its last component. A last
// component of "." or ".." (from a followed link) is resolved with the
// parent, leaving ".".
absl::StatusOr<Location> PathResolver::LocateBeneath(
    absl::string_view op, absl::string_view path,
    const std::string& rel) const {
  Location at;
  at.dir = root_fd_.get();
  if (rel.empty()) {
    at.leaf = ".";
    return at;
  }
  const size_t slash = rel.rfind('/');
  std::string parent = slash == std::string::npos ? "" : rel.substr(0, slash);
  at.leaf = slash == std::string::npos ? rel : rel.substr(slash + 1);
  if (at.leaf == "." || at.leaf == "..") {
    parent = rel;
    at.leaf = ".";
  }
  if (parent.empty()) return at;
  RBLN_ASSIGN_OR_RETURN(at.holder, ResolveDir(op, path, parent));
  at.dir = at.holder.get();
  return at;
}

// The target of the symbolic link `leaf` in `dir`: a relative path (an
// absolute one could only lead outside the root).
absl::StatusOr<std::string> PathResolver::ReadLink(
    absl::string_view op, absl::string_view path, int dir,
    const std::string& leaf) const {
  char buf[PATH_MAX];
  const ssize_t n = readlinkat(dir, leaf.c_str(), buf, sizeof(buf));
  if (n < 0) return ErrnoToStatus(op, path, errno);
  if (static_cast<size_t>(n) >= sizeof(buf)) {
    return ErrnoToStatus(op, path, ENAMETOOLONG);
  }
  std::string target(buf, static_cast<size_t>(n));
  if (target.empty() || target[0] == '/') return ResolveError(op, path, EXDEV);
  return target;
}

// A descriptor (O_PATH) of the directory `rel` beneath the root, reached
// without following any symbolic link (but, with follow_symlinks_, those
// that stay beneath the root).
absl::StatusOr<UniqueFd> PathResolver::ResolveDir(
    absl::string_view op, absl::string_view path,
    const std::string& rel) const {
  if (use_openat2_ && openat2_works_.load(std::memory_order_relaxed)) {
    struct open_how how = {};
    how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
                  (follow_symlinks_ ? 0 : RESOLVE_NO_SYMLINKS);
    for (int attempt = 0; attempt < 3; ++attempt) {
      long fd =
          syscall(SYS_openat2, root_fd_.get(), rel.c_str(), &how, sizeof(how));
      if (fd >= 0) return UniqueFd(static_cast<int>(fd));
      const int err = errno;
      if (err == EAGAIN || err == EINTR) continue;  // a rename raced it
      if (err == ENOSYS || err == EPERM || err == EINVAL || err == E2BIG) {
        // No openat2 here (an old kernel, or a seccomp filter): walk.
        openat2_works_.store(false, std::memory_order_relaxed);
        break;
      }
      return ResolveError(op, path, err);
    }
  }
  return WalkDir(op, path, rel);
}

// ResolveDir one component at a time, never following a link by the
// kernel: a link is refused, or (follow_symlinks_) its relative target is
// walked in its place; ".." goes back up the directories walked, never
// above the root.
absl::StatusOr<UniqueFd> PathResolver::WalkDir(absl::string_view op,
                                               absl::string_view path,
                                               const std::string& rel) const {
  std::vector<UniqueFd> walked;
  std::deque<std::string> pending = absl::StrSplit(rel, '/', absl::SkipEmpty());
  int hops = 0;
  while (!pending.empty()) {
    const std::string name = std::move(pending.front());
    pending.pop_front();
    if (name == ".") continue;
    if (name == "..") {
      if (walked.empty()) return ResolveError(op, path, EXDEV);
      walked.pop_back();
      continue;
    }
    const int at = walked.empty() ? root_fd_.get() : walked.back().get();
    UniqueFd next(openat(at, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    struct stat st;
    if (next.get() < 0 || fstat(next.get(), &st) != 0) {
      return ResolveError(op, path, errno);
    }
    if (S_ISLNK(st.st_mode)) {
      if (!follow_symlinks_ || ++hops > kMaxSymlinkHops) {
        return ResolveError(op, path, ELOOP);
      }
      RBLN_ASSIGN_OR_RETURN(std::string target, ReadLink(op, path, at, name));
      std::vector<std::string> parts =
          absl::StrSplit(target, '/', absl::SkipEmpty());
      pending.insert(pending.begin(), parts.begin(), parts.end());
      continue;
    }
    if (!S_ISDIR(st.st_mode)) return ResolveError(op, path, ENOTDIR);
    walked.push_back(std::move(next));
  }
  if (walked.empty()) {
    UniqueFd root(
        openat(root_fd_.get(), ".", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (root.get() < 0) return ResolveError(op, path, errno);
    return root;
  }
  return std::move(walked.back());
}

absl::Status PathResolver::ResolveError(absl::string_view op,
                                        absl::string_view path, int err) const {
  if (err == EXDEV) {
    return absl::PermissionDeniedError(
        absl::StrCat(op, " ", path, ": the path leads outside ",
                     read_only_ ? "the read-only root" : "the artifact store",
                     " (a symbolic link to an absolute path, or one that "
                     "climbs above the root, is not followed)"));
  }
  return ErrnoToStatus(op, path, err);
}

}  // namespace rbln
