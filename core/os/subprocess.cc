#include "core/os/subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/os/containment.h"
#include "core/os/env.h"
#include "core/os/unique_fd.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace rbln {
namespace {

// Enough of stderr for an error message; the rest is drained and dropped.
constexpr size_t kMaxStderrBytes = 64 << 10;
// How long a killed process may take to be reaped before a background thread
// takes over (a process stuck in the kernel cannot die at once).
constexpr absl::Duration kReapGrace = absl::Seconds(1);

// Deadlines follow the monotonic clock: a wall-clock step (NTP) must neither
// kill a healthy tool nor let a stuck one run on.
using SteadyClock = std::chrono::steady_clock;

SteadyClock::time_point DeadlineAfter(absl::Duration duration) {
  return SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                  absl::ToChronoNanoseconds(duration));
}

// Owns posix_spawn's attribute objects for the duration of one spawn.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
};

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

// Appends what `fd` has to `out`, keeping at most `limit` bytes in it; reading
// past that sets *overflow. Returns false at end of file or on an error.
bool Drain(int fd, size_t limit, std::string* out, bool* overflow) {
  char buf[16 << 10];
  const ssize_t n = read(fd, buf, sizeof(buf));
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  const size_t room = limit > out->size() ? limit - out->size() : 0;
  out->append(buf, std::min(room, static_cast<size_t>(n)));
  if (static_cast<size_t>(n) > room) *overflow = true;
  return true;
}

std::string FirstLine(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty()) return std::string(line.substr(0, 200));
  }
  return "";
}

}  // namespace

std::optional<int> WaitForExit(pid_t pid, absl::Duration grace) {
  const SteadyClock::time_point deadline = DeadlineAfter(grace);
  absl::Duration pause = absl::Milliseconds(1);
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0 && errno != EINTR) return std::nullopt;  // not our child
    if (SteadyClock::now() >= deadline) return std::nullopt;
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(20));
  }
}

std::optional<int> KillAndReap(pid_t pid) {
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);  // in case it left its group
  std::optional<int> status = WaitForExit(pid, kReapGrace);
  if (status.has_value()) return status;
  // Stuck in the kernel (or not our child): never block the caller on it.
  spdlog::warn("process {} has not exited; reaping it in the background", pid);
  std::thread([pid]() {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }).detach();
  return std::nullopt;
}

std::string FormatSeconds(absl::Duration duration) {
  return absl::StrFormat("%g s", absl::ToDoubleSeconds(duration));
}

absl::StatusOr<std::string> FindExecutableOnPath(
    absl::string_view name, absl::string_view search_path) {
  for (absl::string_view dir : absl::StrSplit(search_path, ':')) {
    const std::string candidate =
        absl::StrCat(dir.empty() ? "." : dir, "/", name);
    if (IsExecutableFile(candidate)) return candidate;
  }
  return absl::NotFoundError(
      absl::StrCat(name, " not found on PATH (", search_path, ")"));
}

namespace {

// argv[0], looked up on $PATH when it has no '/'.
absl::StatusOr<std::string> ResolveProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = getenv("PATH");
  return FindExecutableOnPath(name, path != nullptr ? path : "");
}

// A program started, with the read ends of its stdout and stderr.
struct Spawned {
  pid_t pid = -1;
  UniqueFd out;
  UniqueFd err;
};

// Starts `program` with the arguments argv[1..] as the header says: stdin
// from /dev/null, stdout and stderr to pipes, default signal dispositions,
// an empty signal mask, a process group of its own.
absl::StatusOr<Spawned> Spawn(const std::string& program,
                              const std::vector<std::string>& argv) {
  // Close-on-exec pipes: the child gets them only as its stdout and stderr
  // (dup2 clears the flag), and programs spawned concurrently on other
  // threads never hold them open.
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    return ErrnoToStatus("pipe for", program, errno);
  }
  Spawned spawned;
  spawned.out = UniqueFd(out_pipe[0]);
  UniqueFd out_write(out_pipe[1]);
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    return ErrnoToStatus("pipe for", program, errno);
  }
  spawned.err = UniqueFd(err_pipe[0]);
  UniqueFd err_write(err_pipe[1]);

  SpawnSetup setup;
  posix_spawn_file_actions_addopen(&setup.actions, STDIN_FILENO, "/dev/null",
                                   O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&setup.actions, out_write.get(),
                                   STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&setup.actions, err_write.get(),
                                   STDERR_FILENO);
  sigset_t empty_mask;
  sigemptyset(&empty_mask);
  posix_spawnattr_setsigmask(&setup.attr, &empty_mask);
  // gRPC ignores SIGPIPE and the daemon blocks SIGTERM/SIGINT; the program
  // must start with the ordinary dispositions.
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGCHLD}) {
    sigaddset(&defaults, sig);
  }
  posix_spawnattr_setsigdefault(&setup.attr, &defaults);
  posix_spawnattr_setpgroup(&setup.attr, 0);
  posix_spawnattr_setflags(&setup.attr, POSIX_SPAWN_SETSIGMASK |
                                            POSIX_SPAWN_SETSIGDEF |
                                            POSIX_SPAWN_SETPGROUP);
  std::vector<char*> args;
  args.push_back(const_cast<char*>(program.c_str()));
  for (size_t i = 1; i < argv.size(); ++i) {
    args.push_back(const_cast<char*>(argv[i].c_str()));
  }
  args.push_back(nullptr);

  const int spawn_error =
      posix_spawn(&spawned.pid, program.c_str(), &setup.actions, &setup.attr,
                  args.data(), environ);
  // The parent keeps only the read ends, so that end of file means the
  // program (and everything it started) closed its output.
  out_write.Close();
  err_write.Close();
  if (spawn_error == ENOENT) {
    return absl::NotFoundError(absl::StrCat(program, " not found"));
  }
  if (spawn_error != 0) return ErrnoToStatus("run", program, spawn_error);
  return spawned;
}

absl::Status TimedOut(const std::string& program, pid_t pid,
                      const RunProcessOptions& options) {
  KillAndReap(pid);
  return absl::DeadlineExceededError(
      absl::StrCat(program, " did not answer within ",
                   FormatSeconds(options.timeout), "; killed it"));
}

// Reads the program's stdout and stderr into `result` until both are
// closed; kills it past `deadline` or past max_output_bytes of stdout.
absl::Status ReadOutput(const std::string& program, const Spawned& spawned,
                        SteadyClock::time_point deadline,
                        const RunProcessOptions& options,
                        ProcessResult* result) {
  bool stdout_overflow = false;
  bool stderr_overflow = false;
  pollfd fds[2] = {{spawned.out.get(), POLLIN, 0},
                   {spawned.err.get(), POLLIN, 0}};
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    const SteadyClock::duration left = deadline - SteadyClock::now();
    if (left <= SteadyClock::duration::zero()) {
      return TimedOut(program, spawned.pid, options);
    }
    // Rounded up, so that poll() never wakes just before the deadline.
    const int ready =
        poll(fds, 2,
             static_cast<int>(
                 std::chrono::ceil<std::chrono::milliseconds>(left).count()));
    if (ready < 0 && errno != EINTR) {
      const absl::Status status =
          ErrnoToStatus("poll output of", program, errno);
      KillAndReap(spawned.pid);
      return status;
    }
    for (int i = 0; i < 2 && ready > 0; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const bool open = i == 0 ? Drain(fds[i].fd, options.max_output_bytes,
                                       &result->stdout_text, &stdout_overflow)
                               : Drain(fds[i].fd, kMaxStderrBytes,
                                       &result->stderr_text, &stderr_overflow);
      if (!open) fds[i].fd = -1;  // poll() skips negative descriptors
    }
    if (stdout_overflow) {
      KillAndReap(spawned.pid);
      return absl::ResourceExhaustedError(
          absl::StrCat(program, " printed more than ", options.max_output_bytes,
                       " bytes; killed it"));
    }
  }
  return absl::OkStatus();
}

// Waits for the program to exit, by the same deadline, into
// result->exit_status.
absl::Status WaitForResult(const std::string& program, pid_t pid,
                           SteadyClock::time_point deadline,
                           const RunProcessOptions& options,
                           ProcessResult* result) {
  absl::Duration pause = absl::Milliseconds(1);
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      if (WIFEXITED(status)) {
        result->exit_status = WEXITSTATUS(status);
        return absl::OkStatus();
      }
      const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      return absl::UnavailableError(absl::StrCat(
          program, " was killed by signal ", sig, " (", strsignal(sig), ")"));
    }
    if (done < 0 && errno != EINTR) {
      return ErrnoToStatus("wait for", program, errno);
    }
    if (SteadyClock::now() >= deadline) {
      return TimedOut(program, pid, options);
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(20));
  }
}

}  // namespace

absl::StatusOr<ProcessResult> RunProcess(const std::vector<std::string>& argv,
                                         const RunProcessOptions& options) {
  if (argv.empty() || argv[0].empty()) {
    return absl::InvalidArgumentError("no program to run");
  }
  const SteadyClock::time_point deadline = DeadlineAfter(options.timeout);
  absl::StatusOr<std::string> program = ResolveProgram(argv[0]);
  if (!program.ok()) return program.status();
  // Not an orphan for the codec's subreaper to end (core/os/containment.h).
  absl::StatusOr<Spawned> spawned;
  StartOwnChild([&]() {
    spawned = Spawn(*program, argv);
    return spawned.ok() ? spawned->pid : -1;
  });
  if (!spawned.ok()) return spawned.status();
  ProcessResult result;
  absl::Status status =
      ReadOutput(*program, *spawned, deadline, options, &result);
  // Output closed; the program may still linger (or have closed its output
  // early on purpose), so the wait is bounded by the same deadline.
  if (status.ok()) {
    status = WaitForResult(*program, spawned->pid, deadline, options, &result);
  }
  ForgetOwnChild(spawned->pid);
  if (!status.ok()) return status;
  return result;
}

absl::StatusOr<std::string> RunProcessForOutput(
    const std::vector<std::string>& argv, const RunProcessOptions& options) {
  absl::StatusOr<ProcessResult> result = RunProcess(argv, options);
  if (!result.ok()) return result.status();
  if (result->exit_status != 0) {
    const std::string why = FirstLine(result->stderr_text);
    return absl::UnavailableError(absl::StrCat(argv[0], " exited with status ",
                                               result->exit_status,
                                               why.empty() ? "" : ": ", why));
  }
  return std::move(result->stdout_text);
}

}  // namespace rbln
