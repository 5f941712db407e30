// Holding together every process an external codec's worker starts, so that
// ending the worker ends them all, however they detached (setsid, a double
// fork): docs/security.md, "The external codec".
//
//   pidns      the worker runs under a tiny init of ours, PID 1 of a PID
//              namespace of its own: when the init ends, the kernel ends
//              the rest (needs CAP_SYS_ADMIN).
//   cgroup     the worker runs in a cgroup v2 of its own beside the
//              daemon's, ended as a whole through cgroup.kill (needs a
//              writable cgroup2 hierarchy, Linux 5.14 or later).
//   subreaper  the daemon is a child subreaper (PR_SET_CHILD_SUBREAPER):
//              what a worker leaves behind becomes the daemon's child, and
//              is killed and reaped when a worker stops (always works; it
//              cannot tell whose an orphan is, so every orphan of the codec's
//              uid goes at each stop).
//
// Thread-safe.
#ifndef RBLN_CORE_OS_CONTAINMENT_H_
#define RBLN_CORE_OS_CONTAINMENT_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/os/unique_fd.h"

namespace rbln {

enum class ContainmentMode { kAuto, kPidNamespace, kCgroup, kSubreaper };

// "auto", "pidns", "cgroup", "subreaper"; INVALID_ARGUMENT listing them.
absl::StatusOr<ContainmentMode> ParseContainmentMode(absl::string_view name);
absl::string_view ContainmentModeName(ContainmentMode mode);

// A mode as this host allows it: never kAuto.
struct Containment {
  ContainmentMode mode = ContainmentMode::kSubreaper;
  // kCgroup: the cgroup2 directory each worker's cgroup is made in.
  std::string cgroup_parent;
};

// `asked` on this host: kAuto is the first of pidns, cgroup and subreaper
// that works here (tried, not guessed); a mode named that the host does not
// allow is FAILED_PRECONDITION saying what is missing. kSubreaper makes this
// process a child subreaper.
absl::StatusOr<Containment> PrepareContainment(ContainmentMode asked);

// fork() with clone `flags` (CLONE_NEWPID) and without glibc's fork
// handlers: the child may call only async-signal-safe functions (and
// RawFork) before it execs or _exits.
pid_t RawFork(unsigned long flags);

// Children this process started itself (codec workers, helper programs),
// which the subreaper's drain must not take for orphans: `start` forks or
// spawns one and returns its pid (or -1), under the lock the drain holds.
pid_t StartOwnChild(const std::function<pid_t()>& start);
void ForgetOwnChild(pid_t pid);

// One worker's container: made before the worker is forked, ended with it.
class ContainedGroup {
 public:
  // kCgroup: makes the worker's cgroup and opens its cgroup.procs.
  static absl::StatusOr<std::unique_ptr<ContainedGroup>> Make(
      const Containment& containment);
  // Removes the cgroup (when empty).
  ~ContainedGroup();

  ContainedGroup(const ContainedGroup&) = delete;
  ContainedGroup& operator=(const ContainedGroup&) = delete;

  ContainmentMode mode() const { return containment_.mode; }
  // For the forked child, before it drops privileges: write "0" here to
  // join the cgroup (async-signal-safe); -1 when there is none.
  int procs_fd() const { return procs_.get(); }

  // Ends the worker `leader` (the init, for pidns; none when it was reaped
  // already) and every process it started, and waits up to `grace` for all
  // to be gone (for the subreaper: the orphans of uid `uid`).
  // FAILED_PRECONDITION naming the pids still there. The leader's wait
  // status goes to `*leader_status` (may be null) once it is reaped.
  absl::Status EndAll(std::optional<pid_t> leader, uid_t uid,
                      absl::Duration grace,
                      std::optional<int>* leader_status = nullptr);

 private:
  explicit ContainedGroup(Containment containment)
      : containment_(std::move(containment)) {}

  absl::Status EndCgroup(absl::Time deadline);
  absl::Status DrainOrphans(uid_t uid, absl::Time deadline);

  const Containment containment_;
  std::string cgroup_;  // kCgroup: the worker's cgroup directory
  UniqueFd procs_;
};

}  // namespace rbln

#endif  // RBLN_CORE_OS_CONTAINMENT_H_
