// Running a helper program (rbln-smi) from the daemon, bounded in time and
// output, so that a broken tool can cost a request a few seconds but never
// hang or exhaust the daemon.
//
// The program is run directly (posix_spawn, no shell: arguments are never
// interpreted), with stdin from /dev/null, default signal dispositions and an
// empty signal mask (the daemon blocks SIGTERM for its own use), in a process
// group of its own so that a timeout kills whatever it started too.
//
// Thread-safe: no shared state; the pipes are close-on-exec, so a program
// started on one thread never inherits another's.
#ifndef RBLN_CORE_OS_SUBPROCESS_H_
#define RBLN_CORE_OS_SUBPROCESS_H_

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rbln {

struct RunProcessOptions {
  // From start to exit, output read included; past it the process group is
  // killed (SIGKILL).
  absl::Duration timeout = absl::Seconds(5);
  // More on stdout than this kills the process: nothing we run legitimately
  // prints megabytes, and the daemon's memory stays bounded.
  size_t max_output_bytes = size_t{1} << 20;
};

struct ProcessResult {
  int exit_status = 0;
  std::string stdout_text;
  // The start of stderr (the rest is read and dropped), for error messages.
  std::string stderr_text;
};

// Runs argv[0] with arguments argv[1..]. argv[0] without a '/' is looked up
// on $PATH. Returns the exit status and output of a process that exited by
// itself, whatever its status. Errors say what happened, naming argv[0]:
//   NOT_FOUND          "<program> not found"
//   PERMISSION_DENIED  the file is not executable
//   DEADLINE_EXCEEDED  "<program> did not answer within 5 s; killed it"
//   RESOURCE_EXHAUSTED more output than max_output_bytes
//   UNAVAILABLE        killed by a signal
absl::StatusOr<ProcessResult> RunProcess(const std::vector<std::string>& argv,
                                         const RunProcessOptions& options);

// RunProcess for callers that only want the output of a successful run: a
// non-zero exit is UNAVAILABLE "<program> exited with status 3: <first line
// of its stderr>".
absl::StatusOr<std::string> RunProcessForOutput(
    const std::vector<std::string>& argv, const RunProcessOptions& options);

// The first executable file called `name` in the directories of
// `search_path` (a $PATH-style list; empty entries mean the current
// directory). NOT_FOUND names the program.
absl::StatusOr<std::string> FindExecutableOnPath(absl::string_view name,
                                                 absl::string_view search_path);

// Waits up to `grace` for the child `pid` to exit and returns its wait
// status; nullopt when it is still running then (or is not a child of this
// process).
std::optional<int> WaitForExit(pid_t pid, absl::Duration grace);

// SIGKILL to the process group `pid` leads (what the program started dies
// too) and to `pid` itself, then its wait status. A process that does not
// die within a second (stuck in the kernel) is left to a detached thread to
// reap, so that the caller never blocks on it, and nullopt is returned.
std::optional<int> KillAndReap(pid_t pid);

// "5 s", "0.3 s": a timeout as error messages and help texts write it.
std::string FormatSeconds(absl::Duration duration);

}  // namespace rbln

#endif  // RBLN_CORE_OS_SUBPROCESS_H_
