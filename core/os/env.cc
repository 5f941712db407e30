// What core/os/env.h declares besides the Env interface: the errno
// mapping every Env shares, and the helpers built on any Env (as LevelDB's
// util/env.cc).
#include "core/os/env.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace rbln {

absl::Status ErrnoToStatus(absl::string_view op, absl::string_view path,
                           int err) {
  std::string message = absl::StrCat(op, " ", path, ": ", strerror(err));
  switch (err) {
    case ELOOP:
      return absl::PermissionDeniedError(absl::StrCat(
          op, " ", path,
          ": a symbolic link is there or on the way, and is not followed "
          "here (the artifact store follows a link only as the last part of "
          "an artifact's name, to an artifact beside it: current -> v2); "
          "replace it with the real file or directory"));
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

absl::Status Env::ForgetCachedPages(const std::string&) {
  return absl::OkStatus();
}

absl::StatusOr<std::optional<FileStat>> StatIfExists(Env* env,
                                                     const std::string& path) {
  absl::StatusOr<FileStat> st = env->Stat(path);
  if (absl::IsNotFound(st.status())) return std::nullopt;
  RBLN_RETURN_IF_ERROR(st.status());
  return *st;
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
