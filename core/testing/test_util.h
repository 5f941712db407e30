// Helpers shared by the tests: temporary directories on the real file system,
// file hashing, and locating the built binaries.
#ifndef RBLN_CORE_TESTING_TEST_UTIL_H_
#define RBLN_CORE_TESTING_TEST_UTIL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "core/format/artifact.h"
#include "core/format/container.h"
#include "core/os/env.h"
#include "core/os/freshness.h"

namespace rbln::testing {

// A fresh directory under $TMPDIR (default /tmp; /var/tmp where /tmp is a
// tmpfs, from which nothing is cached), removed with everything in it on
// destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Join(absl::string_view name) const;

 private:
  std::string path_;
};

// An Env confined to `root` (NewConfinedEnv); aborts the test run when it
// cannot be made.
std::unique_ptr<Env> ConfinedEnvOrDie(const std::string& root);
// The Freshness of the paths that Env takes (NewConfinedFreshness); aborts
// the test run when it cannot be made.
std::unique_ptr<Freshness> ConfinedFreshnessOrDie(
    const std::string& root, const FreshnessOptions& options = {});

std::string ReadFileOrDie(const std::string& path);
void WriteFileOrDie(const std::string& path, absl::string_view data);
// `ln -sfn target link`: a symbolic link at `link` holding `target`, made
// beside it and renamed over whatever link was there, in one step; aborts
// the test run when it cannot be done.
void ReplaceSymlink(const std::string& target, const std::string& link);

// How many pages of the file at `path` are in the page cache (mincore over a
// mapping that brings none in); aborts the test run when it cannot tell.
size_t CachedPages(const std::string& path);
// Whether the kernel can drop the cached pages of files in `dir`: not on
// tmpfs, whose pages are the files themselves.
bool PageCacheIsDroppable(const std::string& dir);

// XXH64 of a file's bytes (streamed).
uint64_t HashFile(const std::string& path);
// Relative path -> XXH64 for every regular file below `dir` (recursively);
// symlinks and directories are listed with a hash of their kind/target, and
// special files (FIFOs, sockets, devices) by their kind, unopened.
std::map<std::string, uint64_t> HashTree(const std::string& dir);

// <relative> in the source tree: under $RBLN_SOURCE_DIR when set, else
// under the source directory this library was built from.
std::string SourcePath(absl::string_view relative);

// SourcePath("tests/testdata/<relative>").
std::string TestdataPath(absl::string_view relative);

// $RBLN_BIN_DIR/name (set by ctest), else beside the running test binary.
std::string BinaryPath(absl::string_view name);
// `path` (a program, or a directory such as the generated Python stubs)
// where every user can reach it: a copy in a directory of its own under /tmp
// (else /var/tmp) that others may search, made once per path and process and
// removed when the process exits. Tests that run something as another user
// run the copy, so that they pass wherever the tree was built (a clone in
// /root, mode 0700, is closed to others). "" with a test failure added when
// no copy can be made.
std::string CopyForOtherUsers(const std::string& path);

// Runs a shell command; returns its exit status (or -1) and its stdout and
// stderr combined in `output`.
int RunCommand(const std::string& command, std::string* output);

// Moves the calling thread into a mount namespace of its own whose mounts
// are private: mounts it makes are not seen by other processes (tests that
// run beside it), nor theirs by it. False without the right to
// (CAP_SYS_ADMIN); the thread is then where it was. Moves once per process
// (later calls say whether the first did): call it from one thread, before
// anything has looked at the mount table.
bool EnterPrivateMountNamespace();

// The built-in container of an opened artifact's graph file, read again
// (preamble and header); aborts the test run when it is not one.
Container ContainerOf(const ContainerFile& file);

}  // namespace rbln::testing

#endif  // RBLN_CORE_TESTING_TEST_UTIL_H_
