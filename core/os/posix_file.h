// The POSIX Env's files (core/os/env_posix.cc): positioned reads, new files
// written and copied into inside the kernel, flocks and open directories,
// each over a descriptor the Env opened; and what the Env reports of a
// struct stat. The caches' freshness checks (core/os/freshness_posix.cc)
// share the opening and the reporting.
//
// File objects belong to one thread at a time (env.h); the functions are
// thread-safe.
#ifndef RBLN_CORE_OS_POSIX_FILE_H_
#define RBLN_CORE_OS_POSIX_FILE_H_

#include <sys/stat.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/os/env.h"
#include "core/os/path_resolver.h"
#include "core/os/unique_fd.h"

namespace rbln {

// What Env::Stat reports of `st`.
FileStat ToFileStat(const struct stat& st);
FileType TypeOf(mode_t mode);

// Env::Stat of `path`, resolved by `paths` (lstat: a symbolic link as the
// last component is reported, not followed).
absl::StatusOr<FileStat> StatPath(const PathResolver& paths,
                                  const std::string& path);

// The error for a path that is not a regular file where one is needed:
// PERMISSION_DENIED (as ELOOP) for a symbolic link, else FAILED_PRECONDITION
// saying what it is.
absl::Status NotRegular(absl::string_view path, mode_t mode);

// `path` opened read-only and non-blocking (another process's write lease
// refuses it with UNAVAILABLE instead of making it wait), when it is a
// regular file: looked at before it is opened, since opening a FIFO or a
// device can block or have effects of its own, and again once open, since
// it may have been swapped between the look and the open.
absl::StatusOr<UniqueFd> OpenRegularFile(const PathResolver& paths,
                                         const std::string& path);

// The file objects, owning `fd`.
std::unique_ptr<RandomAccessFile> NewPosixRandomAccessFile(std::string path,
                                                           UniqueFd fd);
std::unique_ptr<WritableFile> NewPosixWritableFile(std::string path,
                                                   UniqueFd fd);
// An flock held on `fd`, released when the lock is destroyed.
std::unique_ptr<FileLock> NewPosixFileLock(std::string path, UniqueFd fd);
std::unique_ptr<Directory> NewPosixDirectory(std::string path, UniqueFd fd);

}  // namespace rbln

#endif  // RBLN_CORE_OS_POSIX_FILE_H_
