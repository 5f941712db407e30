#include "core/os/posix_file.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/core_metrics.h"
#include "core/status_macros.h"

namespace rbln {
namespace {

constexpr uint64_t kCloneAlignment = 4096;
// What one copy_file_range moves before its writeback is started.
constexpr uint64_t kWritebackChunk = uint64_t{64} << 20;

int64_t TimeNs(const struct timespec& ts) {
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
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
        return ErrnoToStatus("read", path_, errno);
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }

  absl::StatusOr<uint64_t> Size() const override {
    struct stat st;
    if (fstat(fd_, &st) != 0) return ErrnoToStatus("stat", path_, errno);
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
        return ErrnoToStatus("write", path_, errno);
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
          return ErrnoToStatus("seek", path_, errno);
        }
        off_t in = static_cast<off_t>(src_offset + done);
        n = sendfile(fd_, src_fd, &in, chunk);
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoToStatus("copy into", path_, errno);
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
    if (fdatasync(fd_) != 0) return ErrnoToStatus("fsync", path_, errno);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    if (fd_ < 0) return absl::OkStatus();
    int fd = fd_;
    fd_ = -1;
    if (close(fd) != 0) return ErrnoToStatus("close", path_, errno);
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
    if (ftruncate(fd_, 0) != 0) return ErrnoToStatus("truncate", path_, errno);
    if (pwrite(fd_, contents.data(), contents.size(), 0) !=
        static_cast<ssize_t>(contents.size())) {
      return ErrnoToStatus("write", path_, errno);
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

absl::string_view TypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

FileType TypeOf(mode_t mode) {
  if (S_ISREG(mode)) return FileType::kRegular;
  if (S_ISDIR(mode)) return FileType::kDirectory;
  if (S_ISLNK(mode)) return FileType::kSymlink;
  return FileType::kOther;
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

absl::Status NotRegular(absl::string_view path, mode_t mode) {
  if (S_ISLNK(mode)) return ErrnoToStatus("open", path, ELOOP);
  return absl::FailedPreconditionError(absl::StrCat(
      path, " is ", TypeName(mode),
      ", not a regular file; the daemon reads only regular files"));
}

absl::StatusOr<FileStat> StatPath(const PathResolver& paths,
                                  const std::string& path) {
  RBLN_ASSIGN_OR_RETURN(Location at, paths.Locate("stat", path));
  struct stat st;
  if (fstatat(at.dir, at.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return ErrnoToStatus("stat", path, errno);
  }
  return ToFileStat(st);
}

absl::StatusOr<UniqueFd> OpenRegularFile(const PathResolver& paths,
                                         const std::string& path) {
  RBLN_ASSIGN_OR_RETURN(Location at, paths.Locate("open", path));
  struct stat st;
  if (fstatat(at.dir, at.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return ErrnoToStatus("open", path, errno);
  }
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  UniqueFd fd(openat(at.dir, at.leaf.c_str(),
                     O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoToStatus("open", path, errno);
  if (fstat(fd.get(), &st) != 0) return ErrnoToStatus("stat", path, errno);
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  return fd;
}

std::unique_ptr<RandomAccessFile> NewPosixRandomAccessFile(std::string path,
                                                           UniqueFd fd) {
  return std::make_unique<PosixRandomAccessFile>(std::move(path), fd.Release());
}

std::unique_ptr<WritableFile> NewPosixWritableFile(std::string path,
                                                   UniqueFd fd) {
  return std::make_unique<PosixWritableFile>(std::move(path), fd.Release());
}

std::unique_ptr<FileLock> NewPosixFileLock(std::string path, UniqueFd fd) {
  return std::make_unique<PosixFileLock>(std::move(path), fd.Release());
}

std::unique_ptr<Directory> NewPosixDirectory(std::string path, UniqueFd fd) {
  return std::make_unique<PosixDirectory>(std::move(path), fd.Release());
}

}  // namespace rbln
