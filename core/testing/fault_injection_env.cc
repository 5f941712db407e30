#include "core/testing/fault_injection_env.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"

namespace rbln::testing {
namespace {

// The codes env.h documents for errno values, so that an injected error looks
// to the caller like the real one would.
absl::Status InjectedStatus(absl::string_view call, int err) {
  const absl::Status real = ErrnoToStatus(call, "", err);
  return absl::Status(real.code(), absl::StrCat(real.message(), " (injected)"));
}

}  // namespace

struct FaultInjectionEnv::WrittenFile {
  explicit WrittenFile(std::string path_in) : path(std::move(path_in)) {
    // A descriptor of our own follows the file through renames (the staging
    // directory becomes the artifact), where a path would not.
    fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      ADD_FAILURE() << "FaultInjectionEnv: open " << path << ": "
                    << strerror(errno);
    }
  }
  ~WrittenFile() {
    if (fd >= 0) ::close(fd);
  }
  WrittenFile(const WrittenFile&) = delete;
  WrittenFile& operator=(const WrittenFile&) = delete;

  const std::string path;  // where it was created
  int fd;
  uint64_t size = 0;
  uint64_t synced_size = 0;
};

class FaultInjectionEnv::CountedRandomAccessFile : public RandomAccessFile {
 public:
  CountedRandomAccessFile(FaultInjectionEnv* env,
                          std::unique_ptr<RandomAccessFile> base)
      : env_(env), base_(std::move(base)) {}

  absl::StatusOr<size_t> ReadAt(uint64_t offset,
                                absl::Span<char> buf) const override {
    RBLN_RETURN_IF_ERROR(env_->Tick("ReadAt", path()));
    return base_->ReadAt(offset, buf);
  }
  absl::StatusOr<uint64_t> Size() const override {
    RBLN_RETURN_IF_ERROR(env_->Tick("Size", path()));
    return base_->Size();
  }
  const std::string& path() const override { return base_->path(); }
  int native_handle() const override { return base_->native_handle(); }

  const RandomAccessFile& base() const { return *base_; }

 private:
  FaultInjectionEnv* const env_;
  const std::unique_ptr<RandomAccessFile> base_;
};

class FaultInjectionEnv::CountedWritableFile : public WritableFile {
 public:
  CountedWritableFile(FaultInjectionEnv* env,
                      std::unique_ptr<WritableFile> base,
                      std::shared_ptr<WrittenFile> written)
      : env_(env), base_(std::move(base)), written_(std::move(written)) {}

  absl::Status WriteAt(uint64_t offset, absl::string_view data) override {
    RBLN_RETURN_IF_ERROR(env_->Tick("WriteAt", path()));
    RBLN_RETURN_IF_ERROR(base_->WriteAt(offset, data));
    env_->RecordWrite(*written_, offset + data.size());
    return absl::OkStatus();
  }

  absl::Status CopyRangeFrom(const RandomAccessFile& src, uint64_t src_offset,
                             uint64_t length, uint64_t dst_offset) override {
    RBLN_RETURN_IF_ERROR(env_->Tick("CopyRangeFrom", path()));
    // The copy is one call: what the real file does with its source (its
    // size, for a reflink) must neither count nor be able to fail apart, or
    // a crash could land inside the copy and the kernel would go on writing.
    const auto* counted = dynamic_cast<const CountedRandomAccessFile*>(&src);
    RBLN_RETURN_IF_ERROR(
        base_->CopyRangeFrom(counted != nullptr ? counted->base() : src,
                             src_offset, length, dst_offset));
    env_->RecordWrite(*written_, dst_offset + length);
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    RBLN_RETURN_IF_ERROR(env_->Tick("Sync", path()));
    if (env_->options_.forward_syncs) RBLN_RETURN_IF_ERROR(base_->Sync());
    env_->RecordSync(*written_);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    RBLN_RETURN_IF_ERROR(env_->Tick("Close", path()));
    return base_->Close();
  }

  const std::string& path() const override { return base_->path(); }

 private:
  FaultInjectionEnv* const env_;
  const std::unique_ptr<WritableFile> base_;
  const std::shared_ptr<WrittenFile> written_;
};

class FaultInjectionEnv::CountedFileLock : public FileLock {
 public:
  CountedFileLock(FaultInjectionEnv* env, std::string path,
                  std::unique_ptr<FileLock> base)
      : env_(env), path_(std::move(path)), base_(std::move(base)) {}

  absl::Status WriteContents(absl::string_view contents) override {
    RBLN_RETURN_IF_ERROR(env_->Tick("WriteContents", path_));
    return base_->WriteContents(contents);
  }

 private:
  FaultInjectionEnv* const env_;
  const std::string path_;
  const std::unique_ptr<FileLock> base_;
};

void FaultInjectionEnv::FailAt(int64_t k, int error_number) {
  absl::MutexLock lock(&mu_);
  fault_at_ = static_cast<int64_t>(call_log_.size()) + k;
  fault_errno_ = error_number;
}

void FaultInjectionEnv::CrashAt(int64_t k) {
  absl::MutexLock lock(&mu_);
  fault_at_ = static_cast<int64_t>(call_log_.size()) + k;
  fault_errno_ = 0;
}

int64_t FaultInjectionEnv::calls() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(call_log_.size());
}

std::vector<std::string> FaultInjectionEnv::call_log() const {
  absl::MutexLock lock(&mu_);
  return call_log_;
}

bool FaultInjectionEnv::crashed() const {
  absl::MutexLock lock(&mu_);
  return crashed_;
}

std::string FaultInjectionEnv::faulted_call() const {
  absl::MutexLock lock(&mu_);
  return faulted_call_;
}

void FaultInjectionEnv::Reset() {
  absl::MutexLock lock(&mu_);
  call_log_.clear();
  fault_at_ = 0;
  fault_errno_ = 0;
  crashed_ = false;
  faulted_call_.clear();
  written_.clear();
}

absl::Status FaultInjectionEnv::Tick(absl::string_view op,
                                     absl::string_view path) {
  absl::MutexLock lock(&mu_);
  call_log_.push_back(absl::StrCat(op, " ", path));
  const std::string& call = call_log_.back();
  if (crashed_) {
    return absl::InternalError(
        absl::StrCat(call, ": the process has crashed (injected)"));
  }
  if (static_cast<int64_t>(call_log_.size()) != fault_at_) {
    return absl::OkStatus();
  }
  faulted_call_ = call;
  if (fault_errno_ != 0) return InjectedStatus(call, fault_errno_);
  crashed_ = true;
  DropUnsyncedData();
  return absl::InternalError(absl::StrCat(call, ": crashed here (injected)"));
}

void FaultInjectionEnv::DropUnsyncedData() {
  for (const std::shared_ptr<WrittenFile>& file : written_) {
    // A file synced after its last write has nothing to lose.
    if (file->size <= file->synced_size || file->fd < 0) continue;
    if (::ftruncate(file->fd, static_cast<off_t>(file->synced_size)) != 0) {
      ADD_FAILURE() << "FaultInjectionEnv: truncate " << file->path << ": "
                    << strerror(errno);
    }
  }
}

std::shared_ptr<FaultInjectionEnv::WrittenFile>
FaultInjectionEnv::TrackWrittenFile(const std::string& path) {
  auto file = std::make_shared<WrittenFile>(path);
  absl::MutexLock lock(&mu_);
  written_.push_back(file);
  return file;
}

void FaultInjectionEnv::RecordWrite(WrittenFile& file, uint64_t end) {
  absl::MutexLock lock(&mu_);
  file.size = std::max(file.size, end);
}

void FaultInjectionEnv::RecordSync(WrittenFile& file) {
  absl::MutexLock lock(&mu_);
  file.synced_size = file.size;
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>>
FaultInjectionEnv::NewRandomAccessFile(const std::string& path) {
  RBLN_RETURN_IF_ERROR(Tick("NewRandomAccessFile", path));
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                        target()->NewRandomAccessFile(path));
  return std::make_unique<CountedRandomAccessFile>(this, std::move(file));
}

absl::StatusOr<std::unique_ptr<WritableFile>>
FaultInjectionEnv::NewWritableFile(const std::string& path) {
  RBLN_RETURN_IF_ERROR(Tick("NewWritableFile", path));
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                        target()->NewWritableFile(path));
  return std::make_unique<CountedWritableFile>(this, std::move(file),
                                               TrackWrittenFile(path));
}

absl::StatusOr<std::string> FaultInjectionEnv::ReadFileToString(
    const std::string& path, uint64_t max_bytes) {
  RBLN_RETURN_IF_ERROR(Tick("ReadFileToString", path));
  return target()->ReadFileToString(path, max_bytes);
}

absl::StatusOr<std::vector<DirEntry>> FaultInjectionEnv::ListDir(
    const std::string& path) {
  RBLN_RETURN_IF_ERROR(Tick("ListDir", path));
  return target()->ListDir(path);
}

absl::StatusOr<FileStat> FaultInjectionEnv::Stat(const std::string& path) {
  RBLN_RETURN_IF_ERROR(Tick("Stat", path));
  return target()->Stat(path);
}

absl::Status FaultInjectionEnv::CreateDir(const std::string& path) {
  RBLN_RETURN_IF_ERROR(Tick("CreateDir", path));
  return target()->CreateDir(path);
}

absl::Status FaultInjectionEnv::SetOwnership(const std::string& path,
                                             const FileOwnership& owner) {
  RBLN_RETURN_IF_ERROR(Tick("SetOwnership", path));
  return target()->SetOwnership(path, owner);
}

absl::Status FaultInjectionEnv::RemoveFile(const std::string& path) {
  RBLN_RETURN_IF_ERROR(Tick("RemoveFile", path));
  return target()->RemoveFile(path);
}

absl::Status FaultInjectionEnv::RemoveDir(const std::string& path) {
  RBLN_RETURN_IF_ERROR(Tick("RemoveDir", path));
  return target()->RemoveDir(path);
}

absl::Status FaultInjectionEnv::Link(const std::string& from,
                                     const std::string& to) {
  RBLN_RETURN_IF_ERROR(Tick("Link", absl::StrCat(from, " -> ", to)));
  return target()->Link(from, to);
}

absl::Status FaultInjectionEnv::Rename(const std::string& from,
                                       const std::string& to) {
  RBLN_RETURN_IF_ERROR(Tick("Rename", absl::StrCat(from, " -> ", to)));
  return target()->Rename(from, to);
}

absl::Status FaultInjectionEnv::RenameNoReplace(const std::string& from,
                                                const std::string& to) {
  RBLN_RETURN_IF_ERROR(Tick("RenameNoReplace", absl::StrCat(from, " -> ", to)));
  return target()->RenameNoReplace(from, to);
}

absl::Status FaultInjectionEnv::RenameExchange(const std::string& a,
                                               const std::string& b) {
  RBLN_RETURN_IF_ERROR(Tick("RenameExchange", absl::StrCat(a, " <-> ", b)));
  return target()->RenameExchange(a, b);
}

absl::Status FaultInjectionEnv::SyncDir(const std::string& path) {
  RBLN_RETURN_IF_ERROR(Tick("SyncDir", path));
  if (!options_.forward_syncs) return absl::OkStatus();
  return target()->SyncDir(path);
}

absl::StatusOr<std::unique_ptr<FileLock>> FaultInjectionEnv::LockFile(
    const std::string& path, bool exclusive, bool wait) {
  RBLN_RETURN_IF_ERROR(Tick("LockFile", path));
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<FileLock> lock,
                        target()->LockFile(path, exclusive, wait));
  return std::make_unique<CountedFileLock>(this, path, std::move(lock));
}

}  // namespace rbln::testing
