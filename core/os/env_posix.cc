// The POSIX (Linux) Env (core/os/env.h): each call resolves its path
// (core/os/path_resolver.h), then acts on the descriptor it got, with the
// file objects of core/os/posix_file.h.
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/os/env.h"
#include "core/os/journal.h"
#include "core/os/path_resolver.h"
#include "core/os/posix_file.h"
#include "core/os/unique_fd.h"
#include "core/status_macros.h"

namespace rbln {
namespace {

// How many times a lock is taken again when its file was replaced meanwhile
// (a holder removed it); more means something else keeps replacing it.
constexpr int kMaxLockAttempts = 100;

class PosixEnv : public Env {
 public:
  // Unconfined (a default PathResolver), or confined as `paths` is.
  explicit PosixEnv(std::unique_ptr<PathResolver> paths)
      : paths_(std::move(paths)) {}

  std::string ConfinedRoot() const override { return paths_->root(); }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    RBLN_ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularFile(*paths_, path));
    return NewPosixRandomAccessFile(path, std::move(fd));
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override {
    RBLN_RETURN_IF_ERROR(CheckWritable("create", path));
    RBLN_ASSIGN_OR_RETURN(Location at, paths_->Locate("create", path));
    // O_EXCL: never an existing file, nor a symbolic link's target.
    UniqueFd fd(openat(at.dir, at.leaf.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                       create_file_mode()));
    if (fd.get() < 0) return ErrnoToStatus("create", path, errno);
    return NewPosixWritableFile(path, std::move(fd));
  }

  absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                               uint64_t max_bytes) override {
    RBLN_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                          NewRandomAccessFile(path));
    RBLN_ASSIGN_OR_RETURN(uint64_t size, file->Size());
    if (size > max_bytes) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " is ", size, " bytes, more than the ", max_bytes,
                       " bytes accepted for it"));
    }
    std::string data(size, '\0');
    RBLN_ASSIGN_OR_RETURN(size_t n,
                          file->ReadAt(0, absl::MakeSpan(data.data(), size)));
    data.resize(n);
    return data;
  }

  absl::StatusOr<std::vector<DirEntry>> ListDir(
      const std::string& path) override {
    RBLN_ASSIGN_OR_RETURN(Location at, paths_->Locate("list", path));
    RBLN_ASSIGN_OR_RETURN(UniqueFd fd, OpenDirectoryAt(at, "list", path));
    DIR* dir = fdopendir(fd.get());
    if (dir == nullptr) return ErrnoToStatus("list", path, errno);
    fd.Release();  // closedir closes it
    std::vector<DirEntry> entries;
    errno = 0;
    while (struct dirent* ent = readdir(dir)) {
      absl::string_view name = ent->d_name;
      if (name == "." || name == "..") continue;
      FileType type;
      switch (ent->d_type) {
        case DT_REG:
          type = FileType::kRegular;
          break;
        case DT_DIR:
          type = FileType::kDirectory;
          break;
        case DT_LNK:
          type = FileType::kSymlink;
          break;
        case DT_UNKNOWN: {
          struct stat st;
          type = fstatat(dirfd(dir), ent->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0
                     ? TypeOf(st.st_mode)
                     : FileType::kOther;
          break;
        }
        default:
          type = FileType::kOther;
      }
      entries.push_back({std::string(name), type});
      errno = 0;
    }
    int err = errno;
    closedir(dir);
    if (err != 0) return ErrnoToStatus("list", path, err);
    std::sort(
        entries.begin(), entries.end(),
        [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    return entries;
  }

  absl::StatusOr<FileStat> Stat(const std::string& path) override {
    return StatPath(*paths_, path);
  }

  absl::StatusOr<std::optional<std::string>> ReadLink(
      const std::string& path) override {
    RBLN_ASSIGN_OR_RETURN(Location at, paths_->Locate("readlink", path));
    char buf[PATH_MAX];
    const ssize_t n = readlinkat(at.dir, at.leaf.c_str(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINVAL) return std::nullopt;  // not a symbolic link
      return ErrnoToStatus("readlink", path, errno);
    }
    if (static_cast<size_t>(n) >= sizeof(buf)) {
      return ErrnoToStatus("readlink", path, ENAMETOOLONG);
    }
    return std::string(buf, static_cast<size_t>(n));
  }

  absl::Status CreateDir(const std::string& path) override {
    RBLN_RETURN_IF_ERROR(CheckWritable("mkdir", path));
    RBLN_ASSIGN_OR_RETURN(Location at, paths_->Locate("mkdir", path));
    if (mkdirat(at.dir, at.leaf.c_str(), create_dir_mode()) != 0) {
      return ErrnoToStatus("mkdir", path, errno);
    }
    return absl::OkStatus();
  }

  absl::Status SetOwnership(const std::string& path,
                            const FileOwnership& owner) override {
    RBLN_RETURN_IF_ERROR(CheckWritable("chown", path));
    RBLN_ASSIGN_OR_RETURN(Location at, paths_->Locate("chown", path));
    struct stat st;
    if (fstatat(at.dir, at.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return ErrnoToStatus("chown", path, errno);
    }
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
      return NotRegular(path, st.st_mode);
    }
    // Changed through a descriptor, so a swap cannot redirect it.
    UniqueFd fd(openat(at.dir, at.leaf.c_str(),
                       O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
                           (S_ISDIR(st.st_mode) ? O_DIRECTORY : 0)));
    if (fd.get() < 0) return ErrnoToStatus("chown", path, errno);
    if (fstat(fd.get(), &st) != 0) return ErrnoToStatus("chown", path, errno);
    const bool changed = st.st_uid != owner.uid || st.st_gid != owner.gid ||
                         (st.st_mode & 07777) != (owner.mode & 07777);
    if (st.st_uid != owner.uid || st.st_gid != owner.gid) {
      if (fchown(fd.get(), owner.uid, owner.gid) != 0) {
        const int err = errno;
        if (err == EPERM) {
          return absl::PermissionDeniedError(absl::StrCat(
              "cannot give ", path, " its owner ", owner.uid, ":", owner.gid,
              " back (", strerror(err),
              "); the daemon needs CAP_CHOWN for a store that holds other "
              "users' files"));
        }
        return ErrnoToStatus("chown", path, err);
      }
    }
    // After the chown, which clears set-user-ID and set-group-ID bits.
    if (fchmod(fd.get(), owner.mode & 07777) != 0) {
      return ErrnoToStatus("chmod", path, errno);
    }
    if (changed && !JournalCarriesOwnership(fd.get()) && fsync(fd.get()) != 0) {
      return ErrnoToStatus("fsync", path, errno);
    }
    return absl::OkStatus();
  }

  absl::Status RemoveFile(const std::string& path) override {
    RBLN_RETURN_IF_ERROR(CheckWritable("unlink", path));
    RBLN_ASSIGN_OR_RETURN(Location at, paths_->Locate("unlink", path));
    if (unlinkat(at.dir, at.leaf.c_str(), 0) != 0) {
      return ErrnoToStatus("unlink", path, errno);
    }
    return absl::OkStatus();
  }

  absl::Status RemoveDir(const std::string& path) override {
    RBLN_RETURN_IF_ERROR(CheckWritable("rmdir", path));
    RBLN_ASSIGN_OR_RETURN(Location at, paths_->Locate("rmdir", path));
    if (unlinkat(at.dir, at.leaf.c_str(), AT_REMOVEDIR) != 0) {
      return ErrnoToStatus("rmdir", path, errno);
    }
    return absl::OkStatus();
  }

  absl::Status Link(const std::string& from, const std::string& to) override {
    RBLN_RETURN_IF_ERROR(CheckWritable("link", to));
    RBLN_ASSIGN_OR_RETURN(Location src, paths_->Locate("link", from));
    RBLN_ASSIGN_OR_RETURN(Location dst, paths_->Locate("link", to));
    // No AT_SYMLINK_FOLLOW: a symbolic link would be linked as itself.
    if (linkat(src.dir, src.leaf.c_str(), dst.dir, dst.leaf.c_str(), 0) != 0) {
      return ErrnoToStatus("link", absl::StrCat(from, " -> ", to), errno);
    }
    return absl::OkStatus();
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    return RenameAt("rename", from, to, 0);
  }

  absl::Status RenameNoReplace(const std::string& from,
                               const std::string& to) override {
    return RenameAt("rename", from, to, RENAME_NOREPLACE);
  }

  absl::Status RenameExchange(const std::string& a,
                              const std::string& b) override {
    return RenameAt("exchange", a, b, RENAME_EXCHANGE);
  }

  absl::Status SyncDir(const std::string& path) override {
    RBLN_ASSIGN_OR_RETURN(Location at, paths_->Locate("open", path));
    RBLN_ASSIGN_OR_RETURN(UniqueFd fd, OpenDirectoryAt(at, "open", path));
    if (fsync(fd.get()) != 0) return ErrnoToStatus("fsync", path, errno);
    return absl::OkStatus();
  }

  absl::Status SyncFile(const std::string& path) override {
    RBLN_ASSIGN_OR_RETURN(Location at, paths_->Locate("fsync", path));
    UniqueFd fd(openat(at.dir, at.leaf.c_str(),
                       O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (fd.get() < 0) return ErrnoToStatus("fsync", path, errno);
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return ErrnoToStatus("fsync", path, errno);
    if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
    if (fsync(fd.get()) != 0) return ErrnoToStatus("fsync", path, errno);
    return absl::OkStatus();
  }

  absl::Status ForgetCachedPages(const std::string& path) override {
    RBLN_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                          NewRandomAccessFile(path));
    // posix_fadvise returns the error rather than setting errno.
    const int error =
        posix_fadvise(file->native_handle(), 0, 0, POSIX_FADV_DONTNEED);
    if (error != 0)
      return ErrnoToStatus("forget the cached pages of", path, error);
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Directory>> OpenDirectory(
      const std::string& path) override {
    RBLN_ASSIGN_OR_RETURN(Location at, paths_->Locate("open", path));
    RBLN_ASSIGN_OR_RETURN(UniqueFd fd, OpenDirectoryAt(at, "open", path));
    return NewPosixDirectory(path, std::move(fd));
  }

  absl::StatusOr<std::unique_ptr<FileLock>> LockFile(const std::string& path,
                                                     bool exclusive,
                                                     bool wait) override {
    RBLN_RETURN_IF_ERROR(CheckWritable("lock", path));
    RBLN_ASSIGN_OR_RETURN(Location at, paths_->Locate("lock", path));
    const int op = (exclusive ? LOCK_EX : LOCK_SH) | (wait ? 0 : LOCK_NB);
    for (int attempt = 0; attempt < kMaxLockAttempts; ++attempt) {
      UniqueFd fd(openat(at.dir, at.leaf.c_str(),
                         O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                         0600));
      if (fd.get() < 0) return ErrnoToStatus("open", path, errno);
      struct stat held;
      if (fstat(fd.get(), &held) != 0)
        return ErrnoToStatus("stat", path, errno);
      if (!S_ISREG(held.st_mode)) return NotRegular(path, held.st_mode);
      int rc;
      do {
        rc = flock(fd.get(), op);
      } while (rc != 0 && errno == EINTR);
      if (rc != 0) return ErrnoToStatus("lock", path, errno);
      // The previous holder may have removed the file before unlocking: the
      // lock is good only on the file still linked at `path`.
      struct stat linked;
      if (fstatat(at.dir, at.leaf.c_str(), &linked, AT_SYMLINK_NOFOLLOW) == 0 &&
          linked.st_dev == held.st_dev && linked.st_ino == held.st_ino) {
        return NewPosixFileLock(path, std::move(fd));
      }
    }
    return absl::UnavailableError(absl::StrCat(
        "lock ", path, ": the lock file keeps being replaced; try again"));
  }

 private:
  // A confined Env creates what only its owner may read: the store gives
  // every file and directory its final owner and mode once written, and a
  // staged copy of a private artifact must not be readable before then.
  mode_t create_file_mode() const {
    return paths_->root().empty() ? 0644 : 0600;
  }
  mode_t create_dir_mode() const {
    return paths_->root().empty() ? 0755 : 0700;
  }

  absl::Status CheckWritable(absl::string_view op,
                             absl::string_view path) const {
    if (!paths_->read_only()) return absl::OkStatus();
    return absl::PermissionDeniedError(
        absl::StrCat(op, " ", path, ": ", paths_->root(),
                     " is a read-only root; nothing is ever written there"));
  }

  absl::Status RenameAt(absl::string_view op, const std::string& from,
                        const std::string& to, unsigned flags) {
    RBLN_RETURN_IF_ERROR(CheckWritable(op, to));
    RBLN_ASSIGN_OR_RETURN(Location src, paths_->Locate(op, from));
    RBLN_ASSIGN_OR_RETURN(Location dst, paths_->Locate(op, to));
    if (renameat2(src.dir, src.leaf.c_str(), dst.dir, dst.leaf.c_str(),
                  flags) != 0) {
      return ErrnoToStatus(
          op,
          absl::StrCat(from, flags == RENAME_EXCHANGE ? " <-> " : " -> ", to),
          errno);
    }
    return absl::OkStatus();
  }

  const std::unique_ptr<PathResolver> paths_;
};

}  // namespace

Env* Env::Default() {
  static Env* env = new PosixEnv(std::make_unique<PathResolver>());
  return env;
}

absl::StatusOr<std::unique_ptr<Env>> NewConfinedEnv(
    const std::string& root, const ConfinedEnvOptions& options) {
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<PathResolver> paths,
                        PathResolver::Confine(root, options));
  return std::make_unique<PosixEnv>(std::move(paths));
}

}  // namespace rbln
