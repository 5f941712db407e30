// The POSIX (Linux) Env.
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "core/core_metrics.h"
#include "core/os/dir_watch.h"
#include "core/os/env.h"
#include "core/os/local_fs.h"
#include "core/os/read_lease.h"
#include "core/os/unique_fd.h"
#include "core/status_macros.h"

namespace rbln {
namespace {

constexpr uint64_t kCloneAlignment = 4096;
// What one copy_file_range moves before its writeback is started.
constexpr uint64_t kWritebackChunk = uint64_t{64} << 20;

absl::Status ErrnoStatus(absl::string_view op, absl::string_view path,
                         int err) {
  return ErrnoToStatus(op, path, err);
}

FileType TypeOf(mode_t mode) {
  if (S_ISREG(mode)) return FileType::kRegular;
  if (S_ISDIR(mode)) return FileType::kDirectory;
  if (S_ISLNK(mode)) return FileType::kSymlink;
  return FileType::kOther;
}

int64_t TimeNs(const struct timespec& ts) {
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

FileStat ToFileStat(const struct stat& st) {
  return FileStat{TypeOf(st.st_mode),
                  static_cast<uint64_t>(st.st_size),
                  static_cast<uint32_t>(st.st_mode & 07777),
                  static_cast<uint64_t>(st.st_dev),
                  static_cast<uint64_t>(st.st_ino),
                  static_cast<uint64_t>(st.st_nlink),
                  static_cast<uint32_t>(st.st_uid),
                  static_cast<uint32_t>(st.st_gid),
                  TimeNs(st.st_mtim),
                  TimeNs(st.st_ctim)};
}

class PosixRandomAccessFile : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd)
      : path_(std::move(path)), fd_(fd) {}
  ~PosixRandomAccessFile() override { close(fd_); }

  absl::StatusOr<size_t> ReadAt(uint64_t offset,
                                absl::Span<char> buf) const override {
    size_t done = 0;
    while (done < buf.size()) {
      ssize_t n = pread(fd_, buf.data() + done, buf.size() - done,
                        static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("read", path_, errno);
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }

  absl::StatusOr<uint64_t> Size() const override {
    struct stat st;
    if (fstat(fd_, &st) != 0) return ErrnoStatus("stat", path_, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  const std::string& path() const override { return path_; }
  int native_handle() const override { return fd_; }

 private:
  std::string path_;
  int fd_;
};

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd)
      : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) close(fd_);
  }

  absl::Status WriteAt(uint64_t offset, absl::string_view data) override {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = pwrite(fd_, data.data() + done, data.size() - done,
                         static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("write", path_, errno);
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  absl::Status CopyRangeFrom(const RandomAccessFile& src, uint64_t src_offset,
                             uint64_t length, uint64_t dst_offset) override {
    if (length == 0) return absl::OkStatus();
    const int src_fd = src.native_handle();
    if (TryClone(src, src_fd, src_offset, length, dst_offset)) {
      CountClonedBytes(length);
      return absl::OkStatus();
    }
    uint64_t done = 0;
    bool use_sendfile = false;
    while (done < length) {
      const size_t chunk = static_cast<size_t>(
          std::min<uint64_t>(length - done, kWritebackChunk));
      ssize_t n;
      if (!use_sendfile) {
        loff_t in = static_cast<loff_t>(src_offset + done);
        loff_t out = static_cast<loff_t>(dst_offset + done);
        n = copy_file_range(src_fd, &in, fd_, &out, chunk, 0);
        if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL ||
                      errno == EOPNOTSUPP)) {
          // Different file systems on an older kernel: sendfile also keeps
          // the bytes in the kernel.
          use_sendfile = true;
          continue;
        }
      } else {
        if (lseek(fd_, static_cast<off_t>(dst_offset + done), SEEK_SET) < 0) {
          return ErrnoStatus("seek", path_, errno);
        }
        off_t in = static_cast<off_t>(src_offset + done);
        n = sendfile(fd_, src_fd, &in, chunk);
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("copy into", path_, errno);
      }
      if (n == 0) {
        return absl::DataLossError(
            absl::StrCat("copy from ", src.path(), ": file ended at offset ",
                         src_offset + done, ", expected ", length,
                         " bytes from offset ", src_offset));
      }
      // Start the writeback of what was just copied while the next chunk
      // copies, so that Sync waits for the last chunk's only (the kernel
      // would start it only past its dirty-page thresholds; measured in
      // docs/performance.md, row 1). A hint: Sync still makes it durable.
      sync_file_range(fd_, static_cast<off64_t>(dst_offset + done), n,
                      SYNC_FILE_RANGE_WRITE);
      done += static_cast<uint64_t>(n);
      CountCopiedBytes(static_cast<uint64_t>(n));
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (fdatasync(fd_) != 0) return ErrnoStatus("fsync", path_, errno);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    if (fd_ < 0) return absl::OkStatus();
    int fd = fd_;
    fd_ = -1;
    if (close(fd) != 0) return ErrnoStatus("close", path_, errno);
    return absl::OkStatus();
  }

  const std::string& path() const override { return path_; }

 private:
  // A reflink shares extents instead of copying. It needs block-aligned
  // offsets and a block-aligned length, unless the range ends at the source's
  // end of file. Any refusal falls back to copying.
  bool TryClone(const RandomAccessFile& src, int src_fd, uint64_t src_offset,
                uint64_t length, uint64_t dst_offset) {
    if (src_offset % kCloneAlignment != 0 || dst_offset % kCloneAlignment != 0)
      return false;
    if (length % kCloneAlignment != 0) {
      absl::StatusOr<uint64_t> size = src.Size();
      if (!size.ok() || src_offset + length != *size) return false;
    }
    struct file_clone_range range;
    range.src_fd = src_fd;
    range.src_offset = src_offset;
    range.src_length = length;
    range.dest_offset = dst_offset;
    return ioctl(fd_, FICLONERANGE, &range) == 0;
  }

  std::string path_;
  int fd_;
};

class PosixFileLock : public FileLock {
 public:
  PosixFileLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixFileLock() override { close(fd_); }  // closing releases the flock

  absl::Status WriteContents(absl::string_view contents) override {
    if (ftruncate(fd_, 0) != 0) return ErrnoStatus("truncate", path_, errno);
    if (pwrite(fd_, contents.data(), contents.size(), 0) !=
        static_cast<ssize_t>(contents.size())) {
      return ErrnoStatus("write", path_, errno);
    }
    return absl::OkStatus();
  }

 private:
  std::string path_;
  int fd_;
};

class PosixDirectory : public Directory {
 public:
  PosixDirectory(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixDirectory() override { close(fd_); }

  const std::string& path() const override { return path_; }
  int native_handle() const override { return fd_; }

 private:
  std::string path_;
  int fd_;
};

// Where one call acts: the last component `leaf` of its path, in the
// directory `dir` (AT_FDCWD for an unconfined Env, else a descriptor that
// `holder` keeps open).
struct Location {
  UniqueFd holder;
  int dir = AT_FDCWD;
  std::string leaf;
};

absl::string_view TypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

absl::Status NotRegular(absl::string_view path, mode_t mode) {
  if (S_ISLNK(mode)) return ErrnoStatus("open", path, ELOOP);
  return absl::FailedPreconditionError(absl::StrCat(
      path, " is ", TypeName(mode),
      ", not a regular file; the daemon reads only regular files"));
}

// O_DIRECTORY | O_NOFOLLOW on a symbolic link fails with ENOTDIR; say what
// it really is.
int LinkAwareErrno(int dir, const char* name, int err) {
  struct stat st;
  if (err == ENOTDIR && fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      S_ISLNK(st.st_mode)) {
    return ELOOP;
  }
  return err;
}

// Opens the directory `at` names (never through a symbolic link).
absl::StatusOr<UniqueFd> OpenDirectoryAt(const Location& at,
                                         absl::string_view op,
                                         absl::string_view path) {
  UniqueFd fd(openat(at.dir, at.leaf.c_str(),
                     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    return ErrnoStatus(op, path,
                       LinkAwareErrno(at.dir, at.leaf.c_str(), errno));
  }
  return fd;
}

// How many times a lock is taken again when its file was replaced meanwhile
// (a holder removed it); more means something else keeps replacing it.
constexpr int kMaxLockAttempts = 100;

// How many symbolic links one path may pass through when they are followed
// (as the kernel's own limit, MAXSYMLINKS).
constexpr int kMaxSymlinkHops = 40;

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
  // The generation at which its path could not be watched (core/
  // dir_watch.h); tried again once the generation moves. Stored under `mu`.
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
  // Of the Env that made it (shared: it may outlive the Env).
  const std::shared_ptr<std::atomic<int>> count_;
};

// Whether the ext2/3/4 file system on the block device `dev` writes a
// journal (ext2, and ext4 made without one, share ext4's magic number).
// jbd2 lists each journal it runs in /proc/fs/jbd2 as "<device>-<inode>";
// where /sys or /proc cannot tell (a container), the answer is no. Not
// remembered: a loop device may carry another file system tomorrow, and a
// few reads are nothing next to the fsync they may spare.
bool Ext4HasJournal(dev_t dev) {
  std::ifstream uevent(
      absl::StrCat("/sys/dev/block/", major(dev), ":", minor(dev), "/uevent"));
  for (std::string line; std::getline(uevent, line);) {
    absl::string_view name = line;
    if (!absl::ConsumePrefix(&name, "DEVNAME=") || name.empty()) continue;
    DIR* jbd2 = opendir("/proc/fs/jbd2");
    if (jbd2 == nullptr) return false;
    const std::string prefix = absl::StrCat(name, "-");
    bool journal = false;
    while (const dirent* entry = readdir(jbd2)) {
      if (absl::StartsWith(entry->d_name, prefix)) journal = true;
    }
    closedir(jbd2);
    return journal;
  }
  return false;
}

// Whether the file system of `fd` makes an owner or mode change durable
// with the next fsync of any inode changed after it. Callers set ownership
// after the data's fdatasync, and every commit ends with changes to the
// directories and their fsyncs (docs/commit-protocol.md). XFS, and ext4
// with a journal, write one log in order, so those carry the change (tmpfs
// keeps nothing anyway). Btrfs logs each fsynced inode alone, ext4 without
// a journal writes only the inode fsynced, and other file systems are not
// known to: there SetOwnership fsyncs what it changed.
bool JournalCarriesOwnership(int fd) {
  struct statfs fs {};
  if (fstatfs(fd, &fs) != 0) return false;
  if (fs.f_type == XFS_SUPER_MAGIC || fs.f_type == TMPFS_MAGIC) return true;
  struct stat st {};
  return fs.f_type == EXT4_SUPER_MAGIC && fstat(fd, &st) == 0 &&
         Ext4HasJournal(st.st_dev);
}

class PosixEnv : public Env {
 public:
  // Unconfined.
  PosixEnv() = default;
  // Confined to `root` (resolved), whose descriptor is `root_fd`.
  PosixEnv(std::string root, UniqueFd root_fd,
           const ConfinedEnvOptions& options)
      : root_(std::move(root)),
        root_fd_(std::move(root_fd)),
        use_openat2_(options.use_openat2),
        read_only_(options.read_only),
        follow_symlinks_(options.follow_symlinks_beneath) {}

  std::string ConfinedRoot() const override { return root_; }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    RBLN_ASSIGN_OR_RETURN(UniqueFd fd, OpenRegular(path));
    return std::make_unique<PosixRandomAccessFile>(path, fd.Release());
  }

  bool MayChangeUnseen(const std::string& path) override {
    absl::StatusOr<UniqueFd> fd = OpenRegular(path);
    // UNAVAILABLE: another process's write lease refused the open
    // (EWOULDBLOCK); it is being written.
    if (!fd.ok()) return absl::IsUnavailable(fd.status());
    struct statfs fs;
    if (fstatfs(fd->get(), &fs) != 0) return false;
    // tmpfs has no page_mkwrite: a page mapped by a read fault is written
    // without a fault, and the file's times never show it.
    if (fs.f_type == TMPFS_MAGIC) return true;
    return ReadLease::WrittenElsewhere(fd->get());
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override {
    RBLN_RETURN_IF_ERROR(CheckWritable("create", path));
    RBLN_ASSIGN_OR_RETURN(Location at, Locate("create", path));
    // O_EXCL: never an existing file, nor a symbolic link's target.
    int fd = openat(at.dir, at.leaf.c_str(),
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    create_file_mode());
    if (fd < 0) return ErrnoStatus("create", path, errno);
    return std::make_unique<PosixWritableFile>(path, fd);
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
    RBLN_ASSIGN_OR_RETURN(Location at, Locate("list", path));
    RBLN_ASSIGN_OR_RETURN(UniqueFd fd, OpenDirectoryAt(at, "list", path));
    DIR* dir = fdopendir(fd.get());
    if (dir == nullptr) return ErrnoStatus("list", path, errno);
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
    if (err != 0) return ErrnoStatus("list", path, err);
    std::sort(
        entries.begin(), entries.end(),
        [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    return entries;
  }

  absl::StatusOr<FileStat> Stat(const std::string& path) override {
    RBLN_ASSIGN_OR_RETURN(Location at, Locate("stat", path));
    struct stat st;
    if (fstatat(at.dir, at.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return ErrnoStatus("stat", path, errno);
    }
    return ToFileStat(st);
  }

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
    if (follow_symlinks_) return Env::StatEntries(dir, names);
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

  absl::Status CreateDir(const std::string& path) override {
    RBLN_RETURN_IF_ERROR(CheckWritable("mkdir", path));
    RBLN_ASSIGN_OR_RETURN(Location at, Locate("mkdir", path));
    if (mkdirat(at.dir, at.leaf.c_str(), create_dir_mode()) != 0) {
      return ErrnoStatus("mkdir", path, errno);
    }
    return absl::OkStatus();
  }

  absl::Status SetOwnership(const std::string& path,
                            const FileOwnership& owner) override {
    RBLN_RETURN_IF_ERROR(CheckWritable("chown", path));
    RBLN_ASSIGN_OR_RETURN(Location at, Locate("chown", path));
    struct stat st;
    if (fstatat(at.dir, at.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return ErrnoStatus("chown", path, errno);
    }
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
      return NotRegular(path, st.st_mode);
    }
    // Changed through a descriptor, so a swap cannot redirect it.
    UniqueFd fd(openat(at.dir, at.leaf.c_str(),
                       O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
                           (S_ISDIR(st.st_mode) ? O_DIRECTORY : 0)));
    if (fd.get() < 0) return ErrnoStatus("chown", path, errno);
    if (fstat(fd.get(), &st) != 0) return ErrnoStatus("chown", path, errno);
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
        return ErrnoStatus("chown", path, err);
      }
    }
    // After the chown, which clears set-user-ID and set-group-ID bits.
    if (fchmod(fd.get(), owner.mode & 07777) != 0) {
      return ErrnoStatus("chmod", path, errno);
    }
    if (changed && !JournalCarriesOwnership(fd.get()) && fsync(fd.get()) != 0) {
      return ErrnoStatus("fsync", path, errno);
    }
    return absl::OkStatus();
  }

  absl::Status RemoveFile(const std::string& path) override {
    RBLN_RETURN_IF_ERROR(CheckWritable("unlink", path));
    RBLN_ASSIGN_OR_RETURN(Location at, Locate("unlink", path));
    if (unlinkat(at.dir, at.leaf.c_str(), 0) != 0) {
      return ErrnoStatus("unlink", path, errno);
    }
    return absl::OkStatus();
  }

  absl::Status RemoveDir(const std::string& path) override {
    RBLN_RETURN_IF_ERROR(CheckWritable("rmdir", path));
    RBLN_ASSIGN_OR_RETURN(Location at, Locate("rmdir", path));
    if (unlinkat(at.dir, at.leaf.c_str(), AT_REMOVEDIR) != 0) {
      return ErrnoStatus("rmdir", path, errno);
    }
    return absl::OkStatus();
  }

  absl::Status Link(const std::string& from, const std::string& to) override {
    RBLN_RETURN_IF_ERROR(CheckWritable("link", to));
    RBLN_ASSIGN_OR_RETURN(Location src, Locate("link", from));
    RBLN_ASSIGN_OR_RETURN(Location dst, Locate("link", to));
    // No AT_SYMLINK_FOLLOW: a symbolic link would be linked as itself.
    if (linkat(src.dir, src.leaf.c_str(), dst.dir, dst.leaf.c_str(), 0) != 0) {
      return ErrnoStatus("link", absl::StrCat(from, " -> ", to), errno);
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
    RBLN_ASSIGN_OR_RETURN(Location at, Locate("open", path));
    RBLN_ASSIGN_OR_RETURN(UniqueFd fd, OpenDirectoryAt(at, "open", path));
    if (fsync(fd.get()) != 0) return ErrnoStatus("fsync", path, errno);
    return absl::OkStatus();
  }

  absl::Status SyncFile(const std::string& path) override {
    RBLN_ASSIGN_OR_RETURN(Location at, Locate("fsync", path));
    UniqueFd fd(openat(at.dir, at.leaf.c_str(),
                       O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (fd.get() < 0) return ErrnoStatus("fsync", path, errno);
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return ErrnoStatus("fsync", path, errno);
    if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
    if (fsync(fd.get()) != 0) return ErrnoStatus("fsync", path, errno);
    return absl::OkStatus();
  }

  absl::Status ForgetCachedPages(const std::string& path) override {
    RBLN_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                          NewRandomAccessFile(path));
    // posix_fadvise returns the error rather than setting errno.
    const int error =
        posix_fadvise(file->native_handle(), 0, 0, POSIX_FADV_DONTNEED);
    if (error != 0)
      return ErrnoStatus("forget the cached pages of", path, error);
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Directory>> OpenDirectory(
      const std::string& path) override {
    RBLN_ASSIGN_OR_RETURN(Location at, Locate("open", path));
    RBLN_ASSIGN_OR_RETURN(UniqueFd fd, OpenDirectoryAt(at, "open", path));
    return std::make_unique<PosixDirectory>(path, fd.Release());
  }

  absl::StatusOr<std::unique_ptr<FileLock>> LockFile(const std::string& path,
                                                     bool exclusive,
                                                     bool wait) override {
    RBLN_RETURN_IF_ERROR(CheckWritable("lock", path));
    RBLN_ASSIGN_OR_RETURN(Location at, Locate("lock", path));
    const int op = (exclusive ? LOCK_EX : LOCK_SH) | (wait ? 0 : LOCK_NB);
    for (int attempt = 0; attempt < kMaxLockAttempts; ++attempt) {
      UniqueFd fd(openat(at.dir, at.leaf.c_str(),
                         O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                         0600));
      if (fd.get() < 0) return ErrnoStatus("open", path, errno);
      struct stat held;
      if (fstat(fd.get(), &held) != 0) return ErrnoStatus("stat", path, errno);
      if (!S_ISREG(held.st_mode)) return NotRegular(path, held.st_mode);
      int rc;
      do {
        rc = flock(fd.get(), op);
      } while (rc != 0 && errno == EINTR);
      if (rc != 0) return ErrnoStatus("lock", path, errno);
      // The previous holder may have removed the file before unlocking: the
      // lock is good only on the file still linked at `path`.
      struct stat linked;
      if (fstatat(at.dir, at.leaf.c_str(), &linked, AT_SYMLINK_NOFOLLOW) == 0 &&
          linked.st_dev == held.st_dev && linked.st_ino == held.st_ino) {
        return std::make_unique<PosixFileLock>(path, fd.Release());
      }
    }
    return absl::UnavailableError(absl::StrCat(
        "lock ", path, ": the lock file keeps being replaced; try again"));
  }

 private:
  // A confined Env creates what only its owner may read: the store gives
  // every file and directory its final owner and mode once written, and a
  // staged copy of a private artifact must not be readable before then.
  mode_t create_file_mode() const { return root_.empty() ? 0644 : 0600; }
  mode_t create_dir_mode() const { return root_.empty() ? 0755 : 0700; }

  absl::Status CheckWritable(absl::string_view op,
                             absl::string_view path) const {
    if (!read_only_) return absl::OkStatus();
    return absl::PermissionDeniedError(
        absl::StrCat(op, " ", path, ": ", root_,
                     " is a read-only root; nothing is ever written there"));
  }

  absl::Status RenameAt(absl::string_view op, const std::string& from,
                        const std::string& to, unsigned flags) {
    RBLN_RETURN_IF_ERROR(CheckWritable(op, to));
    RBLN_ASSIGN_OR_RETURN(Location src, Locate(op, from));
    RBLN_ASSIGN_OR_RETURN(Location dst, Locate(op, to));
    if (renameat2(src.dir, src.leaf.c_str(), dst.dir, dst.leaf.c_str(),
                  flags) != 0) {
      return ErrnoStatus(
          op,
          absl::StrCat(from, flags == RENAME_EXCHANGE ? " <-> " : " -> ", to),
          errno);
    }
    return absl::OkStatus();
  }

  // The parent directory and last component of `path`; for a confined Env,
  // the parent resolved beneath the root (see env.h).
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
    return ErrnoStatus("stat", JoinPath(dir, name), errno);
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
      RBLN_ASSIGN_OR_RETURN(absl::string_view rel, BeneathRoot("stat", dir));
      std::unique_ptr<DirWatch::Watches> watches =
          open.watch->WatchPath(root_fd_.get(), rel);
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
    RBLN_ASSIGN_OR_RETURN(Location at, Locate("stat", dir));
    struct stat st;
    if (fstatat(at.dir, at.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return ErrnoStatus("stat", dir, errno);
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
                           DirStats* stats) {
    held->leased_names.assign(names.begin(), names.end());
    held->leases.resize(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      std::optional<FileStat>& entry = stats->entries[i];
      if (!entry.has_value() || entry->type != FileType::kRegular) continue;
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
    if (follow_symlinks_) return Env::StatEntries(dir, names);
    RBLN_ASSIGN_OR_RETURN(Location at, Locate("stat", dir));
    UniqueFd fd(openat(at.dir, at.leaf.c_str(),
                       O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (fd.get() < 0) {
      return ErrnoStatus("stat", dir,
                         LinkAwareErrno(at.dir, at.leaf.c_str(), errno));
    }
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return ErrnoStatus("stat", dir, errno);
    DirStats stats;
    stats.dir = ToFileStat(st);
    RBLN_RETURN_IF_ERROR(StatNamesIn(fd.get(), dir, names, &stats));
    if (held != nullptr && held_dirs_->fetch_add(1) < kMaxHeldDirs) {
      auto open = std::make_unique<PosixHeldDir>(
          std::move(fd), st, root_.empty() ? nullptr : DirWatch::Get(),
          held_dirs_);
      LeaseEntries(open.get(), names, &stats);
      *held = std::move(open);
    } else if (held != nullptr) {
      held_dirs_->fetch_sub(1);
    }
    return stats;
  }

  // `path` relative to the root (of a confined Env), as given: "" for the
  // root itself.
  absl::StatusOr<absl::string_view> BeneathRoot(absl::string_view op,
                                                absl::string_view path) const {
    absl::string_view rel = path;
    if (path.size() >= PATH_MAX) {
      // Both ways of resolving refuse it alike (openat2 would by itself).
      return ErrnoStatus(op, path, ENAMETOOLONG);
    }
    if (!absl::ConsumePrefix(&rel, root_) ||
        (!rel.empty() && !absl::ConsumePrefix(&rel, "/"))) {
      return absl::PermissionDeniedError(
          absl::StrCat(op, " ", path, ": outside the directory ", root_,
                       " that this process is confined to"));
    }
    return rel;
  }

  // `path` opened read-only and non-blocking (another process's write
  // lease refuses it with UNAVAILABLE instead of making it wait), when it
  // is a regular file: looked at before it is opened, since opening a FIFO
  // or a device can block or have effects of its own, and again once open,
  // since it may have been swapped between the look and the open.
  absl::StatusOr<UniqueFd> OpenRegular(const std::string& path) {
    RBLN_ASSIGN_OR_RETURN(Location at, Locate("open", path));
    struct stat st;
    if (fstatat(at.dir, at.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return ErrnoStatus("open", path, errno);
    }
    if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
    UniqueFd fd(openat(at.dir, at.leaf.c_str(),
                       O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (fd.get() < 0) return ErrnoStatus("open", path, errno);
    if (fstat(fd.get(), &st) != 0) return ErrnoStatus("stat", path, errno);
    if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
    return fd;
  }

  absl::StatusOr<Location> Locate(absl::string_view op,
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
      if (hops >= kMaxSymlinkHops) return ErrnoStatus(op, path, ELOOP);
      RBLN_ASSIGN_OR_RETURN(std::string target,
                            ReadLink(op, path, at.dir, at.leaf));
      const size_t slash = resolved.rfind('/');
      resolved = slash == std::string::npos
                     ? target
                     : absl::StrCat(resolved.substr(0, slash + 1), target);
      if (resolved.size() >= PATH_MAX) {
        return ErrnoStatus(op, path, ENAMETOOLONG);
      }
    }
  }

  // Where `rel` (relative to the root; "" for the root itself) is: its
  // parent resolved beneath the root, and its last component. A last
  // component of "." or ".." (from a followed link) is resolved with the
  // parent, leaving ".".
  absl::StatusOr<Location> LocateBeneath(absl::string_view op,
                                         absl::string_view path,
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
  absl::StatusOr<std::string> ReadLink(absl::string_view op,
                                       absl::string_view path, int dir,
                                       const std::string& leaf) const {
    char buf[PATH_MAX];
    const ssize_t n = readlinkat(dir, leaf.c_str(), buf, sizeof(buf));
    if (n < 0) return ErrnoStatus(op, path, errno);
    if (static_cast<size_t>(n) >= sizeof(buf)) {
      return ErrnoStatus(op, path, ENAMETOOLONG);
    }
    std::string target(buf, static_cast<size_t>(n));
    if (target.empty() || target[0] == '/')
      return ResolveError(op, path, EXDEV);
    return target;
  }

  // A descriptor (O_PATH) of the directory `rel` beneath the root, reached
  // without following any symbolic link.
  absl::StatusOr<UniqueFd> ResolveDir(absl::string_view op,
                                      absl::string_view path,
                                      const std::string& rel) const {
    if (use_openat2_ && openat2_works_.load(std::memory_order_relaxed)) {
      struct open_how how = {};
      how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
      how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
                    (follow_symlinks_ ? 0 : RESOLVE_NO_SYMLINKS);
      for (int attempt = 0; attempt < 3; ++attempt) {
        long fd = syscall(SYS_openat2, root_fd_.get(), rel.c_str(), &how,
                          sizeof(how));
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
    // One component at a time, never following a link by the kernel: a
    // link is refused, or (follow_symlinks_) its relative target is walked
    // in its place; ".." goes back up the directories walked, never above
    // the root.
    std::vector<UniqueFd> walked;
    std::deque<std::string> pending =
        absl::StrSplit(rel, '/', absl::SkipEmpty());
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

  absl::Status ResolveError(absl::string_view op, absl::string_view path,
                            int err) const {
    if (err == EXDEV) {
      return absl::PermissionDeniedError(
          absl::StrCat(op, " ", path, ": the path leads outside ",
                       read_only_ ? "the read-only root" : "the artifact store",
                       " (a symbolic link to an absolute path, or one that "
                       "climbs above the root, is not followed)"));
    }
    return ErrnoStatus(op, path, err);
  }

  const std::string root_;  // "" when unconfined
  const UniqueFd root_fd_{};
  const bool use_openat2_ = true;
  const bool read_only_ = false;
  const bool follow_symlinks_ = false;
  mutable std::atomic<bool> openat2_works_{true};
  // Directories held open now (PosixHeldDir).
  const std::shared_ptr<std::atomic<int>> held_dirs_ =
      std::make_shared<std::atomic<int>>(0);
};

}  // namespace

absl::Status ErrnoToStatus(absl::string_view op, absl::string_view path,
                           int err) {
  std::string message = absl::StrCat(op, " ", path, ": ", strerror(err));
  switch (err) {
    case ELOOP:
      return absl::PermissionDeniedError(absl::StrCat(
          op, " ", path,
          ": a symbolic link is there or on the way; the artifact store "
          "follows none (replace it with the real file or directory)"));
    case ENAMETOOLONG:
      return absl::InvalidArgumentError(message);
    case ENXIO:
      return absl::FailedPreconditionError(message);
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EEXIST:
    case ENOTEMPTY:
      return absl::AlreadyExistsError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(
          absl::StrCat(message, " (free space on that file system)"));
    case EXDEV:
      return absl::FailedPreconditionError(message);
    case EWOULDBLOCK:
      return absl::UnavailableError(message);
    case EINVAL:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

Env* Env::Default() {
  static Env* env = new PosixEnv();
  return env;
}

absl::StatusOr<std::unique_ptr<Env>> NewConfinedEnv(
    const std::string& root, const ConfinedEnvOptions& options) {
  char* resolved = realpath(root.c_str(), nullptr);
  if (resolved == nullptr) return ErrnoStatus("open", root, errno);
  std::string canonical = resolved;
  free(resolved);
  UniqueFd fd(
      open(canonical.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOTDIR) {
      return absl::FailedPreconditionError(
          absl::StrCat(root, " is not a directory"));
    }
    return ErrnoStatus("open", canonical, errno);
  }
  return std::make_unique<PosixEnv>(std::move(canonical), std::move(fd),
                                    options);
}

absl::StatusOr<DirStats> Env::StatEntries(const std::string& dir,
                                          absl::Span<const std::string> names) {
  DirStats stats;
  RBLN_ASSIGN_OR_RETURN(stats.dir, Stat(dir));
  for (const std::string& name : names) {
    absl::StatusOr<FileStat> st = Stat(JoinPath(dir, name));
    if (absl::IsNotFound(st.status())) {
      stats.entries.push_back(std::nullopt);
      continue;
    }
    RBLN_RETURN_IF_ERROR(st.status());
    stats.entries.push_back(*st);
  }
  return stats;
}

absl::StatusOr<DirStats> Env::StatAndHoldEntries(
    const std::string& dir, absl::Span<const std::string> names,
    std::unique_ptr<HeldDir>* held) {
  held->reset();
  return StatEntries(dir, names);
}

absl::Status Env::ForgetCachedPages(const std::string&) {
  return absl::OkStatus();
}

absl::StatusOr<DirStats> Env::StatEntriesAgain(
    const HeldDir&, const std::string& dir,
    absl::Span<const std::string> names) {
  return StatEntries(dir, names);
}

bool Env::MayChangeUnseen(const std::string&) { return false; }

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

absl::Status WriteStringToNewFile(Env* env, const std::string& path,
                                  absl::string_view data) {
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                        env->NewWritableFile(path));
  RBLN_RETURN_IF_ERROR(file->WriteAt(0, data));
  RBLN_RETURN_IF_ERROR(file->Sync());
  return file->Close();
}

namespace {

absl::Status VisitTreeAt(
    Env* env, const std::string& path, int depth,
    const std::function<absl::Status(const std::string&, const FileStat&)>&
        visit) {
  RBLN_ASSIGN_OR_RETURN(FileStat st, env->Stat(path));
  if (st.type != FileType::kDirectory) return visit(path, st);
  if (depth >= kMaxTreeDepth) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " nests directories deeper than ", kMaxTreeDepth,
                     " levels; it is not looked into"));
  }
  RBLN_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, env->ListDir(path));
  absl::Status first;
  for (const DirEntry& entry : entries) {
    first.Update(
        VisitTreeAt(env, JoinPath(path, entry.name), depth + 1, visit));
  }
  first.Update(visit(path, st));
  return first;
}

}  // namespace

absl::Status VisitTreeBottomUp(
    Env* env, const std::string& path,
    const std::function<absl::Status(const std::string&, const FileStat&)>&
        visit) {
  return VisitTreeAt(env, path, 0, visit);
}

absl::Status RemoveTree(Env* env, const std::string& path) {
  return VisitTreeBottomUp(
      env, path, [env](const std::string& at, const FileStat& st) {
        return st.type == FileType::kDirectory ? env->RemoveDir(at)
                                               : env->RemoveFile(at);
      });
}

FileOwnership OwnershipOfCopy(const FileStat& source, CopyOwner owner) {
  if (owner == CopyOwner::kSource) return FileOwnership::Of(source);
  return {static_cast<uint32_t>(geteuid()), static_cast<uint32_t>(getegid()),
          source.mode};
}

absl::Status CopyFile(Env* from_env, const std::string& from, Env* to_env,
                      const std::string& to, CopyOwner owner) {
  RBLN_ASSIGN_OR_RETURN(FileStat st, from_env->Stat(from));
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> src,
                        from_env->NewRandomAccessFile(from));
  RBLN_ASSIGN_OR_RETURN(uint64_t size, src->Size());
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> dst,
                        to_env->NewWritableFile(to));
  RBLN_RETURN_IF_ERROR(dst->CopyRangeFrom(*src, 0, size, 0));
  RBLN_RETURN_IF_ERROR(dst->Sync());
  RBLN_RETURN_IF_ERROR(dst->Close());
  return to_env->SetOwnership(to, OwnershipOfCopy(st, owner));
}

}  // namespace rbln
