// The POSIX (Linux) Env.
#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/env.h"
#include "core/status_macros.h"

namespace rbln {
namespace {

constexpr uint64_t kCloneAlignment = 4096;

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
      return absl::OkStatus();
    }
    uint64_t done = 0;
    bool use_sendfile = false;
    while (done < length) {
      const size_t chunk =
          static_cast<size_t>(std::min<uint64_t>(length - done, 1u << 30));
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
      done += static_cast<uint64_t>(n);
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

class PosixEnv : public Env {
 public:
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("open", path, errno);
    return std::make_unique<PosixRandomAccessFile>(path, fd);
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override {
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
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
    DIR* dir = opendir(path.c_str());
    if (dir == nullptr) return ErrnoStatus("list", path, errno);
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
          std::string full = JoinPath(path, name);
          type = lstat(full.c_str(), &st) == 0 ? TypeOf(st.st_mode)
                                               : FileType::kOther;
          break;
        }
        default:
          type = FileType::kOther;
      }
      entries.push_back({std::string(name), type});
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
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) return ErrnoStatus("stat", path, errno);
    return FileStat{TypeOf(st.st_mode),
                    static_cast<uint64_t>(st.st_size),
                    static_cast<uint32_t>(st.st_mode & 07777),
                    static_cast<uint64_t>(st.st_dev),
                    static_cast<uint64_t>(st.st_ino),
                    static_cast<uint64_t>(st.st_nlink)};
  }

  absl::Status CreateDir(const std::string& path) override {
    if (mkdir(path.c_str(), 0755) != 0)
      return ErrnoStatus("mkdir", path, errno);
    return absl::OkStatus();
  }

  absl::Status RemoveFile(const std::string& path) override {
    if (unlink(path.c_str()) != 0) return ErrnoStatus("unlink", path, errno);
    return absl::OkStatus();
  }

  absl::Status RemoveDir(const std::string& path) override {
    if (rmdir(path.c_str()) != 0) return ErrnoStatus("rmdir", path, errno);
    return absl::OkStatus();
  }

  absl::Status Link(const std::string& from, const std::string& to) override {
    if (link(from.c_str(), to.c_str()) != 0) {
      return ErrnoStatus("link", absl::StrCat(from, " -> ", to), errno);
    }
    return absl::OkStatus();
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (rename(from.c_str(), to.c_str()) != 0) {
      return ErrnoStatus("rename", absl::StrCat(from, " -> ", to), errno);
    }
    return absl::OkStatus();
  }

  absl::Status RenameNoReplace(const std::string& from,
                               const std::string& to) override {
    if (renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(),
                  RENAME_NOREPLACE) != 0) {
      return ErrnoStatus("rename", absl::StrCat(from, " -> ", to), errno);
    }
    return absl::OkStatus();
  }

  absl::Status RenameExchange(const std::string& a,
                              const std::string& b) override {
    if (renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) !=
        0) {
      return ErrnoStatus("exchange", absl::StrCat(a, " <-> ", b), errno);
    }
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& path) override {
    int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("open", path, errno);
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    if (rc != 0) return ErrnoStatus("fsync", path, err);
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<FileLock>> LockFile(const std::string& path,
                                                     bool exclusive,
                                                     bool wait) override {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus("open", path, errno);
    int op = (exclusive ? LOCK_EX : LOCK_SH) | (wait ? 0 : LOCK_NB);
    int rc;
    do {
      rc = flock(fd, op);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      int err = errno;
      close(fd);
      return ErrnoStatus("lock", path, err);
    }
    return std::make_unique<PosixFileLock>(path, fd);
  }
};

}  // namespace

absl::Status ErrnoToStatus(absl::string_view op, absl::string_view path,
                           int err) {
  std::string message = absl::StrCat(op, " ", path, ": ", strerror(err));
  switch (err) {
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

absl::Status RemoveTree(Env* env, const std::string& path) {
  RBLN_ASSIGN_OR_RETURN(FileStat st, env->Stat(path));
  if (st.type != FileType::kDirectory) return env->RemoveFile(path);
  RBLN_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, env->ListDir(path));
  absl::Status first;
  for (const DirEntry& entry : entries) {
    first.Update(RemoveTree(env, JoinPath(path, entry.name)));
  }
  first.Update(env->RemoveDir(path));
  return first;
}

absl::Status CopyFile(Env* env, const std::string& from,
                      const std::string& to) {
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> src,
                        env->NewRandomAccessFile(from));
  RBLN_ASSIGN_OR_RETURN(uint64_t size, src->Size());
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> dst,
                        env->NewWritableFile(to));
  RBLN_RETURN_IF_ERROR(dst->CopyRangeFrom(*src, 0, size, 0));
  RBLN_RETURN_IF_ERROR(dst->Sync());
  return dst->Close();
}

}  // namespace rbln
