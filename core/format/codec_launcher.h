// Starting an external codec's worker processes (docs/codec-protocol.md,
// "Transport"): its command line split as a shell would, the user it runs
// as, and the fork and exec.
//
// A worker is run directly (no shell) with the daemon's environment; its fd 0
// and fd 1 are one end of a Unix socket pair, its fd 2 a pipe, and every other
// descriptor is closed. It starts in a process group of its own with the
// ordinary signal dispositions, no ambient capabilities and
// PR_SET_NO_NEW_PRIVS; when privileges are dropped, as the codec user
// (setgroups(0), setgid, setuid). It dies with the daemon (PR_SET_PDEATHSIG).
// Whatever it starts is held with it as the Containment says (a PID
// namespace under an init of ours, a cgroup, or the daemon's subreaper:
// core/os/containment.h), and ended with it (CodecProcess::group).
//
// Thread-safe: CodecLauncher::Launch may be called from any thread.
#ifndef RBLN_CORE_FORMAT_CODEC_LAUNCHER_H_
#define RBLN_CORE_FORMAT_CODEC_LAUNCHER_H_

#include <sys/types.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/os/containment.h"
#include "core/os/unique_fd.h"

namespace rbln {

// How long a worker has to exit by itself (after a failed exec, or at end of
// file on its socket) before it is killed.
inline constexpr absl::Duration kCodecExitGrace = absl::Seconds(1);
// How long stopping a worker waits for every process it started to be gone.
inline constexpr absl::Duration kCodecStopGrace = absl::Seconds(3);

// Splits `command` into words as /bin/sh would (GLib's g_shell_parse_argv):
// blanks separate words; single quotes, double quotes and backslashes quote;
// '#' starts a comment. Nothing is expanded: $VAR, `cmd`, globs and ~ stay
// as they are written. INVALID_ARGUMENT for an empty command or an
// unterminated quote, saying what was wrong.
absl::StatusOr<std::vector<std::string>> SplitCommandLine(
    absl::string_view command);

// The codec's own system user, with no home and no shell: the Debian
// package's postinst, deploy/rbln-artifactd.sysusers and deploy/Dockerfile
// create it. An unset --codec-user means this user where the host has it,
// else kFallbackCodecUser.
inline constexpr char kCodecUser[] = "rbln-codec";
inline constexpr char kFallbackCodecUser[] = "nobody";

// Who the workers run as.
struct CodecUser {
  uid_t uid = 0;
  gid_t gid = 0;
  // Whether the daemon switches to uid and gid (it holds CAP_SETUID,
  // CAP_SETGID and CAP_KILL, as root does); else they are the daemon's own.
  bool drop_privileges = false;
  // What the daemon logs as warnings at start: the default user missing on
  // this host, or a daemon that cannot run the codec as another user.
  std::vector<std::string> warnings;
};

// What an unset --codec-user means: `preferred` when this host has that
// user, else kFallbackCodecUser with `*warning` saying how to create
// `preferred` (empty when it exists).
std::string DefaultCodecUser(absl::string_view preferred, std::string* warning);

// Looks up --codec-user `user` (a name, or a number; empty: DefaultCodecUser
// of kCodecUser), even when the daemon cannot switch to it, so that a typo
// shows at once rather than on the day it runs as root. FAILED_PRECONDITION
// for a user unknown on this host.
absl::StatusOr<CodecUser> ResolveCodecUser(const std::string& user);

// A worker just started: its pid (a process group of its own; for
// ContainmentMode::kPidNamespace, the init of its namespace), the daemon's
// end of its socket (non-blocking), the read end of its stderr pipe, and
// the container that ends whatever it starts.
struct CodecProcess {
  pid_t pid = -1;
  UniqueFd socket;
  UniqueFd stderr_fd;
  std::unique_ptr<ContainedGroup> group;
  uid_t uid = 0;  // the uid it runs as
};

// Forks every worker from a thread of its own: PR_SET_PDEATHSIG fires when
// the thread that forked a process ends, not the process, and workers forked
// by request threads (which gRPC may end at any time) would die with them.
class CodecLauncher {
 public:
  // `argv[0]` is the program's path; each worker is held as `containment`
  // (from PrepareContainment) says, core/os/containment.h.
  CodecLauncher(std::vector<std::string> argv, CodecUser user,
                Containment containment = {});
  // Ends the thread; workers forked from it receive SIGKILL.
  ~CodecLauncher();

  CodecLauncher(const CodecLauncher&) = delete;
  CodecLauncher& operator=(const CodecLauncher&) = delete;

  // Starts one worker and waits until it has exec'd. FAILED_PRECONDITION
  // names the step that failed in the child (setuid, exec, ...).
  absl::StatusOr<CodecProcess> Launch();

 private:
  // Runs `task` on the launcher thread and waits for it.
  void Run(const std::function<void()>& task);
  void Loop();
  // Forks and execs a worker; on the launcher thread.
  absl::StatusOr<CodecProcess> Spawn();

  const std::vector<std::string> argv_;
  const CodecUser user_;
  const Containment containment_;

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace rbln

#endif  // RBLN_CORE_FORMAT_CODEC_LAUNCHER_H_
