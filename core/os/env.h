// Env: every file-system call the core makes goes through this interface, so
// that tests can wrap it (EnvWrapper) and inject faults at any step, in the
// manner of LevelDB's Env.
//
// All methods return absl::Status values built from errno with the path and
// the operation in the message; ENOSPC and EDQUOT map to RESOURCE_EXHAUSTED,
// ENOENT and ENOTDIR to NOT_FOUND, EEXIST to ALREADY_EXISTS, EACCES, EPERM
// and EROFS to PERMISSION_DENIED, ELOOP (a symbolic link) to
// PERMISSION_DENIED, EXDEV and ENXIO to FAILED_PRECONDITION, EWOULDBLOCK to
// UNAVAILABLE, EINVAL and ENAMETOOLONG to INVALID_ARGUMENT, anything else to
// INTERNAL.
//
// No method follows a symbolic link in the last component of its path, and
// files are opened for reading only when they are regular files (a FIFO, a
// device or a socket is refused before it is opened, so nothing blocks).
// A symbolic link where none is followed is PERMISSION_DENIED.
//
// Confinement (NewConfinedEnv): an Env confined to a root takes only paths at
// or below that root (and shorter than PATH_MAX), creates files 0600 and
// directories 0700 (their final owner and mode are set once written), and
// resolves each path afresh, inside the kernel, beneath a descriptor of the
// root that it opened once (core/os/path_resolver.h). So no path is checked
// and later used: a directory swapped for a symbolic link mid-operation makes
// the operation fail, never reach outside the root. The artifact store
// accepts only a confined Env.
//
// Env implementations are safe for concurrent use from multiple threads
// without external synchronization. File objects are not: each belongs to one
// thread at a time.
#ifndef RBLN_CORE_OS_ENV_H_
#define RBLN_CORE_OS_ENV_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/os/path.h"  // JoinPath, for the paths every call takes

namespace rbln {

// A file opened for positioned reads.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;

  // Reads up to buf.size() bytes at `offset`; returns the number read, which
  // is short only at end of file.
  virtual absl::StatusOr<size_t> ReadAt(uint64_t offset,
                                        absl::Span<char> buf) const = 0;
  virtual absl::StatusOr<uint64_t> Size() const = 0;
  virtual const std::string& path() const = 0;
  // The OS file descriptor, for kernel-side copies. Wrappers forward it.
  virtual int native_handle() const = 0;
};

// A directory held open (O_RDONLY | O_DIRECTORY), to hand to another process
// as a file descriptor: that process may then create files in it by
// /proc/self/fd/<fd>/<name> without any right on the directories above it.
class Directory {
 public:
  virtual ~Directory() = default;
  virtual const std::string& path() const = 0;
  // The OS file descriptor (close-on-exec). Wrappers forward it.
  virtual int native_handle() const = 0;
};

// A new file opened for positioned writes. Data is durable only after Sync().
class WritableFile {
 public:
  virtual ~WritableFile() = default;

  virtual absl::Status WriteAt(uint64_t offset, absl::string_view data) = 0;
  // Copies `length` bytes of `src` at `src_offset` to `dst_offset` of this
  // file without passing them through user memory: a reflink
  // (FICLONERANGE) when the file system shares extents and the offsets are
  // block aligned, else copy_file_range. The bytes never enter this process.
  virtual absl::Status CopyRangeFrom(const RandomAccessFile& src,
                                     uint64_t src_offset, uint64_t length,
                                     uint64_t dst_offset) = 0;
  virtual absl::Status Sync() = 0;
  virtual absl::Status Close() = 0;
  virtual const std::string& path() const = 0;
};

enum class FileType { kRegular, kDirectory, kSymlink, kOther };

struct DirEntry {
  std::string name;
  FileType type;
};

struct FileStat {
  FileType type;
  uint64_t size;
  uint32_t mode;  // permission bits (07777)
  uint64_t device;
  uint64_t inode;
  uint64_t nlink;
  uint32_t uid;
  uint32_t gid;
  // Last change of the contents, and of the inode (nanoseconds since the
  // epoch): with device, inode and size, what tells that a file changed.
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
};

// Whether `a` and `b` are the same version of the same file (device, inode,
// size, mtime and ctime), or both absent.
inline bool SameVersion(const FileStat& a, const FileStat& b) {
  return a.device == b.device && a.inode == b.inode && a.size == b.size &&
         a.mtime_ns == b.mtime_ns && a.ctime_ns == b.ctime_ns;
}
inline bool SameVersion(const std::optional<FileStat>& a,
                        const std::optional<FileStat>& b) {
  return a.has_value() == b.has_value() &&
         (!a.has_value() || SameVersion(*a, *b));
}

// Who owns a file and with which permission bits.
struct FileOwnership {
  uint32_t uid;
  uint32_t gid;
  uint32_t mode;  // 07777

  static FileOwnership Of(const FileStat& st) {
    return {st.uid, st.gid, st.mode};
  }
};

// An flock held on an open file; released when destroyed.
class FileLock {
 public:
  virtual ~FileLock() = default;
  // Replaces the locked file's contents (e.g. with the holder's pid).
  virtual absl::Status WriteContents(absl::string_view contents) = 0;
};

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide POSIX Env. Never deleted.
  static Env* Default();

  // The root this Env is confined to (resolved, absolute), or "" when it
  // takes any path.
  virtual std::string ConfinedRoot() const = 0;

  // Opens a regular file for reading (FAILED_PRECONDITION for a directory,
  // a FIFO, a device or a socket; PERMISSION_DENIED for a symbolic link).
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) = 0;
  // Creates `path`, which must not exist (O_EXCL), with mode 0644.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;

  // Reads a whole small file; refuses files larger than `max_bytes`.
  virtual absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                                       uint64_t max_bytes) = 0;
  // Entries of a directory, without "." and "..", sorted by name.
  virtual absl::StatusOr<std::vector<DirEntry>> ListDir(
      const std::string& path) = 0;
  // lstat: a symlink is reported as kSymlink, not followed.
  virtual absl::StatusOr<FileStat> Stat(const std::string& path) = 0;
  // The target of the symbolic link at `path`, as written in it (readlinkat
  // on the descriptor of its parent, resolved as every path is), or nullopt
  // when something else is there; NOT_FOUND when nothing is. Where links
  // are followed (follow_symlinks_beneath), what one leads to is read.
  virtual absl::StatusOr<std::optional<std::string>> ReadLink(
      const std::string& path) = 0;
  virtual absl::Status CreateDir(const std::string& path) = 0;
  // Gives a regular file or directory `owner` (chown, only when it differs,
  // then chmod); a change is fsynced where later fsyncs of other inodes
  // would not carry it (core/os/journal.h). PERMISSION_DENIED when the process
  // may not give it away.
  virtual absl::Status SetOwnership(const std::string& path,
                                    const FileOwnership& owner) = 0;
  virtual absl::Status RemoveFile(const std::string& path) = 0;
  virtual absl::Status RemoveDir(const std::string& path) = 0;
  virtual absl::Status Link(const std::string& from, const std::string& to) = 0;
  // rename(2): replaces `to` if it exists.
  virtual absl::Status Rename(const std::string& from,
                              const std::string& to) = 0;
  // renameat2(RENAME_NOREPLACE): fails with ALREADY_EXISTS when `to` exists.
  virtual absl::Status RenameNoReplace(const std::string& from,
                                       const std::string& to) = 0;
  // renameat2(RENAME_EXCHANGE): atomically swaps two existing paths.
  virtual absl::Status RenameExchange(const std::string& a,
                                      const std::string& b) = 0;
  // fsync of a directory, making entries created or renamed in it durable.
  virtual absl::Status SyncDir(const std::string& path) = 0;
  // fsync of an existing regular file (written by another process), opened
  // read-only and never through a symbolic link.
  virtual absl::Status SyncFile(const std::string& path) = 0;
  // Tells the kernel that the cached pages of the regular file at `path` will
  // not be read again (posix_fadvise POSIX_FADV_DONTNEED), so that its
  // memory is the first to go to other files. Advice: the file and what it
  // reads are unchanged, only slower to read. The default does nothing.
  virtual absl::Status ForgetCachedPages(const std::string& path);
  // Opens an existing directory (never through a symbolic link, resolved as
  // every other path is), e.g. to pass it to a worker process.
  virtual absl::StatusOr<std::unique_ptr<Directory>> OpenDirectory(
      const std::string& path) = 0;

  // Takes an exclusive (or shared) flock on `path`, creating it (0600) when
  // missing. With `wait` false it fails fast with UNAVAILABLE when another
  // open file description holds a conflicting lock. Once locked, the file is
  // checked to still be the one linked at `path` (else it starts again), so
  // an exclusive holder may remove the lock file before it unlocks: see
  // docs/commit-protocol.md. UNAVAILABLE also when the file was replaced
  // under it 100 times running.
  virtual absl::StatusOr<std::unique_ptr<FileLock>> LockFile(
      const std::string& path, bool exclusive, bool wait) = 0;
};

// Forwards every call to another Env; subclasses override what they change.
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}
  Env* target() const { return target_; }

  std::string ConfinedRoot() const override { return target_->ConfinedRoot(); }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    return target_->NewRandomAccessFile(path);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override {
    return target_->NewWritableFile(path);
  }
  absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                               uint64_t max_bytes) override {
    return target_->ReadFileToString(path, max_bytes);
  }
  absl::StatusOr<std::vector<DirEntry>> ListDir(
      const std::string& path) override {
    return target_->ListDir(path);
  }
  absl::StatusOr<FileStat> Stat(const std::string& path) override {
    return target_->Stat(path);
  }
  absl::StatusOr<std::optional<std::string>> ReadLink(
      const std::string& path) override {
    return target_->ReadLink(path);
  }
  absl::Status CreateDir(const std::string& path) override {
    return target_->CreateDir(path);
  }
  absl::Status SetOwnership(const std::string& path,
                            const FileOwnership& owner) override {
    return target_->SetOwnership(path, owner);
  }
  absl::Status RemoveFile(const std::string& path) override {
    return target_->RemoveFile(path);
  }
  absl::Status RemoveDir(const std::string& path) override {
    return target_->RemoveDir(path);
  }
  absl::Status Link(const std::string& from, const std::string& to) override {
    return target_->Link(from, to);
  }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    return target_->Rename(from, to);
  }
  absl::Status RenameNoReplace(const std::string& from,
                               const std::string& to) override {
    return target_->RenameNoReplace(from, to);
  }
  absl::Status RenameExchange(const std::string& a,
                              const std::string& b) override {
    return target_->RenameExchange(a, b);
  }
  absl::Status SyncDir(const std::string& path) override {
    return target_->SyncDir(path);
  }
  absl::Status SyncFile(const std::string& path) override {
    return target_->SyncFile(path);
  }
  absl::Status ForgetCachedPages(const std::string& path) override {
    return target_->ForgetCachedPages(path);
  }
  absl::StatusOr<std::unique_ptr<Directory>> OpenDirectory(
      const std::string& path) override {
    return target_->OpenDirectory(path);
  }
  absl::StatusOr<std::unique_ptr<FileLock>> LockFile(const std::string& path,
                                                     bool exclusive,
                                                     bool wait) override {
    return target_->LockFile(path, exclusive, wait);
  }

 private:
  Env* target_;
};

// The status for `err` (an errno value) from operation `op` on `path`, with
// the code mapping in the file comment. Env implementations and wrappers use
// it so that every error reads alike.
absl::Status ErrnoToStatus(absl::string_view op, absl::string_view path,
                           int err);

struct ConfinedEnvOptions {
  // Resolve with openat2; false walks one component at a time, as on a
  // kernel (or under a seccomp filter) without openat2. For tests.
  bool use_openat2 = true;
  // Every call that would change something (create, mkdir, chown, remove,
  // link, rename, lock) is PERMISSION_DENIED, naming the root.
  bool read_only = false;
  // Follow symbolic links, in any component and as the last one, when they
  // resolve beneath the root (openat2 with RESOLVE_BENEATH but without
  // RESOLVE_NO_SYMLINKS): a relative link into a sibling directory, as a
  // Hugging Face cache links snapshot files into its blob directory. A link
  // to an absolute path, or one that climbs above the root, is
  // PERMISSION_DENIED; at most 40 links per path. Stat then reports what a
  // link leads to. For read-only roots only: a writable store follows none
  // (but the one kind the store reads itself, core/store/artifact_link.h).
  bool follow_symlinks_beneath = false;
};

// An Env confined to `root` (an existing directory; a symbolic link above or
// at it is followed once, now). Paths given to it are absolute and at or
// below the root as resolved; any other path is PERMISSION_DENIED.
absl::StatusOr<std::unique_ptr<Env>> NewConfinedEnv(
    const std::string& root, const ConfinedEnvOptions& options = {});

// Helpers built on Env.

// Env::Stat, telling a missing path (nullopt) from a failure to look, which
// says nothing about whether the path exists.
absl::StatusOr<std::optional<FileStat>> StatIfExists(Env* env,
                                                     const std::string& path);

// Writes `data` to a new file at `path` and syncs it.
absl::Status WriteStringToNewFile(Env* env, const std::string& path,
                                  absl::string_view data);

// Calls `visit` with `path` and its Stat and, when it is a directory, with
// everything below it first, each directory after its entries (symlinks are
// visited, not followed). Goes on past errors, returning the first one. A
// directory nested deeper than kMaxTreeDepth is not visited nor looked
// into (an error), so that no tree someone built can exhaust the stack.
inline constexpr int kMaxTreeDepth = 128;
absl::Status VisitTreeBottomUp(
    Env* env, const std::string& path,
    const std::function<absl::Status(const std::string& path,
                                     const FileStat& st)>& visit);

// Removes `path` and everything below it (VisitTreeBottomUp): what is nested
// too deep is left in place (an error).
absl::Status RemoveTree(Env* env, const std::string& path);

// Who a copy belongs to: the source's owner and group (kSource), or the
// process that writes it (kWriter: a copy out of a read-only root, whose
// owners are not the store's); the source's permission bits either way.
enum class CopyOwner { kSource, kWriter };
FileOwnership OwnershipOfCopy(const FileStat& source, CopyOwner owner);

// Copies a regular file's bytes into a new file at `to` (kernel-side copy),
// then syncs it; the copy gets the source's mode and the owner `owner` says.
// `from` is read through `from_env`, `to` written through `to_env` (they may
// differ: a read-only root and the store).
absl::Status CopyFile(Env* from_env, const std::string& from, Env* to_env,
                      const std::string& to,
                      CopyOwner owner = CopyOwner::kSource);

}  // namespace rbln

#endif  // RBLN_CORE_OS_ENV_H_
