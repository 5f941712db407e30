#include "core/format/codec_launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/os/containment.h"
#include "core/os/env.h"
#include "core/os/subprocess.h"
#include "core/status_macros.h"
#include "core/text.h"

extern char** environ;

namespace rbln {
namespace {

// Moves `fd` to a number of at least 3 (close-on-exec), so that placing the
// child's descriptors at 0, 1 and 2 cannot overwrite another of them.
absl::StatusOr<UniqueFd> AboveStdio(int fd) {
  UniqueFd owned(fd);
  if (fd >= 3) return owned;
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (moved < 0) return ErrnoToStatus("dup", "a codec descriptor", errno);
  return UniqueFd(moved);
}

std::string Quoted(absl::string_view command) {
  return absl::StrCat("'", Echo(command), "'");
}

// What the child reports through its status pipe when it cannot exec.
struct ChildFailure {
  int step;  // index into kChildSteps
  int err;
};
constexpr const char* kChildSteps[] = {"join its cgroup",
                                       "fork in its PID namespace",
                                       "setgroups",
                                       "setgid",
                                       "setuid",
                                       "clear capabilities or set "
                                       "no_new_privs",
                                       "set the parent-death "
                                       "signal",
                                       "dup2",
                                       "exec"};

// Whether this process may run the codec as another user: CAP_SETUID and
// CAP_SETGID to switch, and CAP_KILL to stop a worker of another uid (kill(2)
// checks the uids), in its effective set.
bool CanChangeIds() {
  struct __user_cap_header_struct header {};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  header.pid = 0;
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  const auto has = [&data](int cap) {
    return (data[CAP_TO_INDEX(cap)].effective & CAP_TO_MASK(cap)) != 0;
  };
  return has(CAP_SETUID) && has(CAP_SETGID) && has(CAP_KILL);
}

// getpwnam_r, then getpwuid_r for a number; false with `*lookup_error` set
// (0: no such user) when neither finds it.
bool LookUpUser(const std::string& user, struct passwd* entry,
                std::vector<char>* buffer, int* lookup_error) {
  struct passwd* found = nullptr;
  *lookup_error =
      getpwnam_r(user.c_str(), entry, buffer->data(), buffer->size(), &found);
  uint32_t numeric = 0;
  if (found == nullptr && absl::SimpleAtoi(user, &numeric)) {
    *lookup_error =
        getpwuid_r(numeric, entry, buffer->data(), buffer->size(), &found);
  }
  return found != nullptr;
}

// What the forked child needs to exec a worker.
struct WorkerExec {
  const char* program;
  char* const* argv;
  int socket_fd;
  int stderr_fd;
  int status_fd;
  int cgroup_procs_fd;  // -1: none
  bool drop;
  uid_t uid;
  gid_t gid;
  pid_t parent;  // the process that forked it
};

// Reports the failed step through the status pipe and ends the child.
[[noreturn]] void FailStep(int status_fd, int step) {
  const ChildFailure failure{step, errno};
  ssize_t ignored = write(status_fd, &failure, sizeof(failure));
  (void)ignored;
  _exit(127);
}

// Runs in the forked child: only async-signal-safe calls until execve.
[[noreturn]] void ExecWorker(const WorkerExec& w) {
  const auto fail = [&w](int step) { FailStep(w.status_fd, step); };
  // The daemon blocks SIGTERM/SIGINT/SIGHUP for its own use and gRPC ignores
  // SIGPIPE: the worker starts with the ordinary dispositions.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // A group of its own, so that a kill reaches what it started too.
  setpgid(0, 0);
  // Its cgroup, while it may still move itself.
  if (w.cgroup_procs_fd >= 0 && write(w.cgroup_procs_fd, "0", 1) != 1) {
    fail(0);
  }
  // Raw system calls: glibc's would signal the threads it believes this
  // process has (after RawFork, the parent's) and wait for them forever.
  if (w.drop) {
    if (syscall(SYS_setgroups, 0, nullptr) != 0) fail(2);
    if (syscall(SYS_setgid, w.gid) != 0) fail(3);
    if (syscall(SYS_setuid, w.uid) != 0) fail(4);
  }
  // Capabilities the daemon was given as ambient ones (the systemd unit's
  // AmbientCapabilities=) would survive the exec: the codec gets none.
  // EINVAL: a kernel without ambient capabilities, where none survive.
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 &&
      errno != EINVAL) {
    fail(5);
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(5);
  // After setuid, which clears it. The signal comes when the thread that
  // forked ends: the codec's launcher thread (or the PID namespace's init),
  // which lives as long as the codec.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) fail(6);
  if (getppid() != w.parent) _exit(127);  // the parent died before the prctl
  if (dup2(w.socket_fd, STDIN_FILENO) < 0 ||
      dup2(w.socket_fd, STDOUT_FILENO) < 0 ||
      dup2(w.stderr_fd, STDERR_FILENO) < 0) {
    fail(7);
  }
  // Every other descriptor closes at exec (the status pipe only then).
  if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    struct rlimit limit {};
    const int max_fd =
        getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < (1u << 20)
            ? static_cast<int>(limit.rlim_cur)
            : (1 << 20);
    for (int fd = 3; fd < max_fd; ++fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  execve(w.program, w.argv, environ);
  fail(8);
  _exit(127);
}

// PID 1 of the worker's own PID namespace (ContainmentMode::kPidNamespace):
// forks the worker, lets go of every descriptor (so that the worker's
// hang-up reaches the daemon), reaps whatever ends, and exits as the worker
// did; when it exits, the kernel ends every other process of the namespace.
[[noreturn]] void RunInit(WorkerExec w) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
    FailStep(w.status_fd, 6);
  }
  w.parent = getpid();  // 1
  const pid_t worker = RawFork(0);
  if (worker < 0) FailStep(w.status_fd, 1);
  if (worker == 0) ExecWorker(w);
  if (close_range(0, ~0U, 0) != 0) {  // a kernel before 5.9
    struct rlimit limit {};
    const int max_fd =
        getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < (1u << 20)
            ? static_cast<int>(limit.rlim_cur)
            : (1 << 20);
    for (int fd = 0; fd < max_fd; ++fd) close(fd);
  }
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  while (true) {
    int status = 0;
    const pid_t ended = wait(&status);
    if (ended < 0 && errno != EINTR) _exit(127);
    if (ended != worker) continue;
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
}

}  // namespace

absl::StatusOr<std::vector<std::string>> SplitCommandLine(
    absl::string_view command) {
  if (command.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        "the command holds a NUL byte; give it as plain text");
  }
  const std::string text(command);
  gint argc = 0;
  gchar** argv = nullptr;
  GError* error = nullptr;
  if (!g_shell_parse_argv(text.c_str(), &argc, &argv, &error)) {
    std::string message = error != nullptr ? error->message : "cannot split";
    // GLib repeats the whole text; the message already shows it.
    if (const size_t repeat = message.find(" (The text was");
        repeat != std::string::npos) {
      message.resize(repeat);
    }
    if (error != nullptr) g_error_free(error);
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot split ", Quoted(command),
        " into words as a shell would: ", message,
        " (quote a word with spaces in '...' or \"...\"; nothing is "
        "expanded)"));
  }
  std::vector<std::string> words(argv, argv + argc);
  g_strfreev(argv);
  return words;
}

std::string DefaultCodecUser(absl::string_view preferred,
                             std::string* warning) {
  warning->clear();
  struct passwd entry {};
  std::vector<char> buffer(16 << 10);
  int lookup_error = 0;
  if (LookUpUser(std::string(preferred), &entry, &buffer, &lookup_error)) {
    return std::string(preferred);
  }
  *warning = absl::StrCat(
      "codec: warning: this host has no user ", Echo(preferred),
      ", so the codec runs as ", kFallbackCodecUser,
      ", whom other services may share; create ", Echo(preferred),
      " (the package does, and so does systemd-sysusers with "
      "rbln-artifactd's sysusers file; else useradd --system "
      "--no-create-home --shell /usr/sbin/nologin ",
      Echo(preferred), ") and restart, or name a user with --codec-user");
  return kFallbackCodecUser;
}

absl::StatusOr<CodecUser> ResolveCodecUser(const std::string& user) {
  CodecUser resolved;
  std::string name = user;
  if (name.empty()) {
    std::string warning;
    name = DefaultCodecUser(kCodecUser, &warning);
    if (!warning.empty()) resolved.warnings.push_back(std::move(warning));
  }
  struct passwd entry {};
  std::vector<char> buffer(16 << 10);
  int lookup_error = 0;
  if (!LookUpUser(name, &entry, &buffer, &lookup_error)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--codec-user ", Quoted(name), ": no such user on this host",
        lookup_error != 0 ? absl::StrCat(" (", strerror(lookup_error), ")")
                          : "",
        "; the codec runs as this user when the daemon can change uid "
        "(getent passwd lists them)"));
  }
  // Root, or a daemon given the capabilities (the systemd unit, the image's
  // file capabilities), runs the codec as that user.
  resolved.drop_privileges = CanChangeIds();
  if (resolved.drop_privileges) {
    resolved.uid = entry.pw_uid;
    resolved.gid = entry.pw_gid;
    return resolved;
  }
  resolved.uid = geteuid();
  resolved.gid = getegid();
  // The default user's warning would only distract: no user is switched to.
  resolved.warnings.clear();
  resolved.warnings.push_back(absl::StrCat(
      "codec: warning: the daemon cannot change uid (it lacks CAP_SETUID, "
      "CAP_SETGID or CAP_KILL), so the codec runs as the daemon's own uid ",
      resolved.uid, ", not as ", Quoted(name),
      ": without capabilities, but able to write whatever uid ", resolved.uid,
      " can (its files in the store and the daemon's state) and to signal "
      "the daemon, so a codec that is taken over is not contained "
      "(docs/security.md, \"The external codec\"); give the daemon these "
      "capabilities to run it as ",
      Quoted(name), " (the shipped systemd unit and image do)"));
  return resolved;
}

CodecLauncher::CodecLauncher(std::vector<std::string> argv, CodecUser user,
                             Containment containment)
    : argv_(std::move(argv)),
      user_(user),
      containment_(std::move(containment)),
      thread_([this]() { Loop(); }) {}

CodecLauncher::~CodecLauncher() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void CodecLauncher::Run(const std::function<void()>& task) {
  absl::Notification done;
  {
    absl::MutexLock lock(&mu_);
    tasks_.push_back([&]() {
      task();
      done.Notify();
    });
  }
  done.WaitForNotification();
}

void CodecLauncher::Loop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CodecLauncher* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return self->stop_ || !self->tasks_.empty();
          },
          this));
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

absl::StatusOr<CodecProcess> CodecLauncher::Launch() {
  absl::StatusOr<CodecProcess> process;
  Run([&]() { process = Spawn(); });
  return process;
}

absl::StatusOr<CodecProcess> CodecLauncher::Spawn() {
  std::vector<char*> args;
  for (const std::string& arg : argv_) {
    args.push_back(const_cast<char*>(arg.c_str()));
  }
  args.push_back(nullptr);
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    return ErrnoToStatus("socketpair for", "the codec", errno);
  }
  UniqueFd ours(pair[0]);
  RBLN_ASSIGN_OR_RETURN(UniqueFd theirs, AboveStdio(pair[1]));
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    return ErrnoToStatus("pipe for", "the codec", errno);
  }
  UniqueFd err_read(err_pipe[0]);
  RBLN_ASSIGN_OR_RETURN(UniqueFd err_write, AboveStdio(err_pipe[1]));
  int status_pipe[2];
  if (pipe2(status_pipe, O_CLOEXEC) != 0) {
    return ErrnoToStatus("pipe for", "the codec", errno);
  }
  UniqueFd status_read(status_pipe[0]);
  RBLN_ASSIGN_OR_RETURN(UniqueFd status_write, AboveStdio(status_pipe[1]));
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<ContainedGroup> group,
                        ContainedGroup::Make(containment_));
  const WorkerExec exec = {.program = args[0],
                           .argv = args.data(),
                           .socket_fd = theirs.get(),
                           .stderr_fd = err_write.get(),
                           .status_fd = status_write.get(),
                           .cgroup_procs_fd = group->procs_fd(),
                           .drop = user_.drop_privileges,
                           .uid = user_.uid,
                           .gid = user_.gid,
                           .parent = getpid()};
  const bool pidns = containment_.mode == ContainmentMode::kPidNamespace;
  const pid_t child = StartOwnChild([&]() {
    const pid_t pid = pidns ? RawFork(CLONE_NEWPID) : fork();
    if (pid == 0) {
      if (pidns) RunInit(exec);
      ExecWorker(exec);
    }
    return pid;
  });
  if (child < 0) return ErrnoToStatus("fork for", "the codec", errno);
  setpgid(child, child);  // as the child does, whichever runs first
  theirs.Close();
  err_write.Close();
  status_write.Close();
  ChildFailure failure{};
  ssize_t n;
  do {
    n = read(status_read.get(), &failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof(failure))) {
    group->EndAll(child, user_.uid, kCodecExitGrace).IgnoreError();
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot start ", Echo(argv_[0]), " as uid ", user_.uid, ": ",
        kChildSteps[failure.step], " failed: ", strerror(failure.err),
        failure.err == EACCES ? " (that user must be able to reach and "
                                "run it: check every directory above it)"
                              : ""));
  }
  if (fcntl(ours.get(), F_SETFL, O_NONBLOCK) != 0) {
    group->EndAll(child, user_.uid, kCodecExitGrace).IgnoreError();
    return ErrnoToStatus("configure", "the codec's socket", errno);
  }
  return CodecProcess{.pid = child,
                      .socket = std::move(ours),
                      .stderr_fd = std::move(err_read),
                      .group = std::move(group),
                      .uid = user_.uid};
}

}  // namespace rbln
