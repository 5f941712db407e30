#include "core/format/external_codec.h"

#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "core/format/rbln_config.h"
#include "core/os/subprocess.h"
#include "core/os/unique_fd.h"
#include "core/status_macros.h"
#include "core/text.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

extern char** environ;

namespace rbln {
namespace {

// A reply is one line; a compiled model's facts are a few kilobytes, so a
// line this long is a codec gone wrong, and the daemon's memory stays
// bounded.
constexpr size_t kMaxReplyBytes = size_t{16} << 20;
// A stderr line is logged up to this many bytes (the rest is dropped), so a
// worker that floods stderr costs the daemon no memory.
constexpr size_t kMaxStderrLineBytes = 1000;
// Stderr lines kept per worker for error messages.
constexpr size_t kStderrLinesKept = 8;
// What is read of a stopped worker's stderr that is still in the pipe.
constexpr size_t kMaxDrainBytes = size_t{64} << 20;
// Tensor and allocation key names: no real name comes near it.
constexpr size_t kMaxNameBytes = 255;
// Allocation keys or KV tensors in one reply: real models have some hundreds
// of KV tensors (two per layer) and a handful of keys.
constexpr size_t kMaxNamedEntries = 4096;
constexpr size_t kMaxNpuBytes = 64;
// A codec's error message as repeated in a status.
constexpr size_t kMaxCodecMessageBytes = 500;
// After end of file on its socket, a worker has this long to exit before it
// is killed; on the daemon's shutdown, this long to exit in all.
constexpr absl::Duration kExitGrace = absl::Seconds(1);
constexpr absl::Duration kShutdownGrace = absl::Seconds(2);
// Restart backoff after a worker was lost: doubling from kBackoffStart up to
// kBackoffMax while workers keep failing, so that a codec that crashes at
// once cannot make the daemon spin.
constexpr absl::Duration kBackoffStart = absl::Milliseconds(100);
constexpr absl::Duration kBackoffMax = absl::Seconds(5);
// How often a rescale's cancellation is polled while the worker works.
constexpr absl::Duration kCancelPollInterval = absl::Seconds(1);
// Values in the protocol are non-negative and below 2^63.
constexpr uint64_t kMaxProtocolInteger = (uint64_t{1} << 63) - 1;

// Moves `fd` to a number of at least 3 (close-on-exec), so that placing the
// child's descriptors at 0, 1 and 2 cannot overwrite another of them.
absl::StatusOr<UniqueFd> AboveStdio(int fd) {
  UniqueFd owned(fd);
  if (fd >= 3) return owned;
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (moved < 0) return ErrnoToStatus("dup", "a codec descriptor", errno);
  return UniqueFd(moved);
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return absl::StrCat("signal ", sig, " (", strsignal(sig), ")");
  }
  return absl::StrCat("wait status ", status);
}

std::string Quoted(absl::string_view command) {
  return absl::StrCat("'", Echo(command), "'");
}

// What the child reports through its status pipe when it cannot exec.
struct ChildFailure {
  int step;  // index into kChildSteps
  int err;
};
constexpr const char* kChildSteps[] = {"setgroups",
                                       "setgid",
                                       "setuid",
                                       "clear capabilities or set "
                                       "no_new_privs",
                                       "set the parent-death "
                                       "signal",
                                       "dup2",
                                       "exec"};

// Whether this process may switch to another user: CAP_SETUID and
// CAP_SETGID in its effective set.
bool CanChangeIds() {
  struct __user_cap_header_struct header {};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  header.pid = 0;
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  const auto has = [&data](int cap) {
    return (data[CAP_TO_INDEX(cap)].effective & CAP_TO_MASK(cap)) != 0;
  };
  return has(CAP_SETUID) && has(CAP_SETGID);
}

// Runs in the forked child: only async-signal-safe calls until execve.
[[noreturn]] void ExecWorker(const char* program, char* const* argv,
                             int socket_fd, int stderr_fd, int status_fd,
                             bool drop, uid_t uid, gid_t gid, pid_t parent) {
  const auto fail = [status_fd](int step) {
    const ChildFailure failure{step, errno};
    ssize_t ignored = write(status_fd, &failure, sizeof(failure));
    (void)ignored;
    _exit(127);
  };
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
  if (drop) {
    if (setgroups(0, nullptr) != 0) fail(0);
    if (setgid(gid) != 0) fail(1);
    if (setuid(uid) != 0) fail(2);
  }
  // Capabilities the daemon was given as ambient ones (the systemd unit's
  // AmbientCapabilities=) would survive the exec: the codec gets none.
  // EINVAL: a kernel without ambient capabilities, where none survive.
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 &&
      errno != EINVAL) {
    fail(3);
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(3);
  // After setuid, which clears it. The signal comes when the thread that
  // forked ends: the codec's launcher thread, which lives as long as the
  // codec.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) fail(4);
  if (getppid() != parent) _exit(127);  // the daemon died before the prctl
  if (dup2(socket_fd, STDIN_FILENO) < 0 || dup2(socket_fd, STDOUT_FILENO) < 0 ||
      dup2(stderr_fd, STDERR_FILENO) < 0) {
    fail(5);
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
  execve(program, argv, environ);
  fail(6);
  _exit(127);
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

// The thread every worker is forked from. PR_SET_PDEATHSIG fires when the
// thread that forked a process ends, not the process: workers forked by
// request threads (which gRPC may end at any time) would die with them.
class ExternalCodec::Launcher {
 public:
  Launcher() : thread_([this]() { Loop(); }) {}
  ~Launcher() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }

  // Runs `task` on the launcher thread and waits for it.
  void Run(const std::function<void()>& task) {
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

 private:
  void Loop() {
    while (true) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](Launcher* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
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

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// One worker process: its socket, its stderr reader and its pid. Used by one
// thread at a time (the call that leased it); the stderr reader runs on a
// thread of its own.
class ExternalCodec::Worker {
 public:
  // How a send or a read ended.
  enum class Io { kOk, kTimeout, kClosed, kTooLong, kCancelled, kError };

  Worker(pid_t pid, UniqueFd socket, UniqueFd stderr_fd, UniqueFd stop,
         std::function<void(absl::string_view)> log)
      : pid_(pid),
        socket_(std::move(socket)),
        stderr_(std::move(stderr_fd)),
        stop_(std::move(stop)),
        log_(std::move(log)) {
    stderr_reader_ = std::thread([this]() { ReadStderr(); });
  }

  ~Worker() {
    Kill();
    const uint64_t one = 1;
    ssize_t ignored = write(stop_.get(), &one, sizeof(one));
    (void)ignored;
    stderr_reader_.join();
  }

  pid_t pid() const { return pid_; }
  int64_t NextId() { return next_id_++; }
  const std::string& last_error() const { return last_error_; }

  // Sends `line`, with `fds` as SCM_RIGHTS on its first bytes.
  Io Send(const std::string& line, const std::vector<int>& fds,
          absl::Time deadline, const std::function<absl::Status()>& cancelled,
          absl::Status* cancel_status) {
    size_t sent = 0;
    bool fds_sent = fds.empty();
    while (sent < line.size()) {
      const Io ready =
          Wait(POLLOUT, deadline, cancelled, cancel_status, /*hangup=*/false);
      if (ready != Io::kOk) return ready;
      iovec iov{const_cast<char*>(line.data() + sent), line.size() - sent};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      std::vector<char> control;
      if (!fds_sent) {
        control.resize(CMSG_SPACE(sizeof(int) * fds.size()));
        msg.msg_control = control.data();
        msg.msg_controllen = control.size();
        cmsghdr* header = CMSG_FIRSTHDR(&msg);
        header->cmsg_level = SOL_SOCKET;
        header->cmsg_type = SCM_RIGHTS;
        header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
        memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
      }
      const ssize_t n =
          sendmsg(socket_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        if (errno == EPIPE || errno == ECONNRESET) return Io::kClosed;
        last_error_ = absl::StrCat("send: ", strerror(errno));
        return Io::kError;
      }
      fds_sent = true;
      sent += static_cast<size_t>(n);
    }
    return Io::kOk;
  }

  // Reads one line (without its newline) into `line`. Bytes after it are
  // kept in `extra` (a worker must send nothing unasked).
  Io ReadLine(std::string* line, absl::Time deadline,
              const std::function<absl::Status()>& cancelled,
              absl::Status* cancel_status) {
    std::string buffer;
    char chunk[64 << 10];
    while (true) {
      const size_t newline = buffer.find('\n');
      if (newline != std::string::npos) {
        *line = buffer.substr(0, newline);
        extra_ = buffer.substr(newline + 1);
        return Io::kOk;
      }
      if (buffer.size() > kMaxReplyBytes) {
        *line = std::move(buffer);
        return Io::kTooLong;
      }
      const Io ready =
          Wait(POLLIN, deadline, cancelled, cancel_status, /*hangup=*/true);
      if (ready != Io::kOk) return ready;
      const ssize_t n = recv(socket_.get(), chunk, sizeof(chunk), MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        if (errno == ECONNRESET) return Io::kClosed;
        last_error_ = absl::StrCat("recv: ", strerror(errno));
        return Io::kError;
      }
      if (n == 0) {
        *line = std::move(buffer);
        return Io::kClosed;
      }
      buffer.append(chunk, static_cast<size_t>(n));
    }
  }

  const std::string& extra() const { return extra_; }

  // Whether an idle worker is still fit for a request: nothing to read (it
  // sent nothing unasked) and no hangup (it has not exited).
  bool StillIdle() const {
    pollfd p{socket_.get(), POLLIN, 0};
    return poll(&p, 1, 0) == 0;
  }

  // Signals end of file to the worker (it exits).
  void CloseSocket() { shutdown(socket_.get(), SHUT_RDWR); }

  // How the worker ended after it closed its socket: waits a moment for it
  // to exit, else kills it. Reaps it either way.
  std::string ExitDescription() {
    if (reaped_) return exit_description_;
    std::optional<int> status = WaitForExit(pid_, kExitGrace);
    if (status.has_value()) {
      reaped_ = true;
      exit_description_ =
          absl::StrCat("exited with ", DescribeWaitStatus(*status));
      return exit_description_;
    }
    Kill();
    exit_description_ = "closed its socket without exiting (killed)";
    return exit_description_;
  }

  // Waits until the worker exits by itself, up to `deadline`.
  bool ExitedBy(absl::Time deadline) {
    if (reaped_) return true;
    std::optional<int> status = WaitForExit(
        pid_, std::max(deadline - absl::Now(), absl::ZeroDuration()));
    if (!status.has_value()) return false;
    reaped_ = true;
    exit_description_ =
        absl::StrCat("exited with ", DescribeWaitStatus(*status));
    return true;
  }

  // SIGKILL to its process group, and reap it.
  void Kill() {
    if (reaped_) return;
    reaped_ = true;
    std::optional<int> status = KillAndReap(pid_);
    if (status.has_value() && exit_description_.empty()) {
      exit_description_ =
          absl::StrCat("killed (", DescribeWaitStatus(*status), ")");
    }
  }

  // The last stderr lines, " | "-separated. After the worker ended, waits a
  // moment for its stderr to close, so that the last words are in.
  std::string LastStderrLines(bool ended) {
    absl::MutexLock lock(&mu_);
    if (ended) {
      mu_.AwaitWithTimeout(absl::Condition(&stderr_closed_), kExitGrace);
    }
    if (last_lines_.empty()) return "(none)";
    return WireText(absl::StrJoin(last_lines_, " | "), kMaxCodecMessageBytes);
  }

 private:
  // Waits until the socket is ready for `events`; with `hangup`, a hangup
  // counts as ready (the read then sees end of file). Polls `cancelled`
  // every kCancelPollInterval.
  Io Wait(short events, absl::Time deadline,
          const std::function<absl::Status()>& cancelled,
          absl::Status* cancel_status, bool hangup) {
    while (true) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return Io::kTimeout;
      const absl::Duration slice = std::min(left, kCancelPollInterval);
      pollfd p{socket_.get(), events, 0};
      const int ready =
          poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(slice)) + 1);
      if (ready < 0 && errno != EINTR) {
        last_error_ = absl::StrCat("poll: ", strerror(errno));
        return Io::kError;
      }
      if (ready > 0) {
        if ((p.revents & events) != 0) return Io::kOk;
        if ((p.revents & (POLLHUP | POLLERR)) != 0) {
          return hangup ? Io::kOk : Io::kClosed;
        }
      }
      if (cancelled) {
        absl::Status status = cancelled();
        if (!status.ok()) {
          *cancel_status = std::move(status);
          return Io::kCancelled;
        }
      }
    }
  }

  void ReadStderr() {
    std::string line;
    bool cut = false;
    char chunk[16 << 10];
    pollfd fds[2] = {{stderr_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    // Once told to stop (the worker is dead), what is left in the pipe is
    // still read and logged, up to kMaxDrainBytes, without waiting for more.
    bool draining = false;
    size_t drained = 0;
    while (true) {
      if (!draining) {
        if (poll(fds, 2, -1) < 0) {
          if (errno == EINTR) continue;
          break;
        }
        if (fds[1].revents != 0) {
          draining = true;
          if (fcntl(stderr_.get(), F_SETFL, O_NONBLOCK) != 0) break;
        } else if (fds[0].revents == 0) {
          continue;
        }
      }
      const ssize_t n = read(stderr_.get(), chunk, sizeof(chunk));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN && !draining) continue;
      if (n <= 0) break;
      drained += draining ? static_cast<size_t>(n) : 0;
      if (drained > kMaxDrainBytes) break;
      absl::string_view data(chunk, static_cast<size_t>(n));
      while (!data.empty()) {
        const size_t newline = data.find('\n');
        const absl::string_view piece = data.substr(0, newline);
        const size_t room = kMaxStderrLineBytes - line.size();
        const absl::string_view kept = piece.substr(0, room);
        line.append(kept.data(), kept.size());
        if (piece.size() > room) cut = true;
        if (newline == absl::string_view::npos) break;
        EmitStderrLine(line, cut);
        line.clear();
        cut = false;
        data.remove_prefix(newline + 1);
      }
    }
    if (!line.empty()) EmitStderrLine(line, cut);
    absl::MutexLock lock(&mu_);
    stderr_closed_ = true;
  }

  void EmitStderrLine(absl::string_view line, bool cut) {
    std::string text = WireText(line, kMaxStderrLineBytes);
    if (cut) absl::StrAppend(&text, " ... (cut)");
    if (log_) log_(absl::StrCat("codec[", pid_, "]: ", text));
    absl::MutexLock lock(&mu_);
    last_lines_.push_back(std::move(text));
    if (last_lines_.size() > kStderrLinesKept) last_lines_.pop_front();
  }

  const pid_t pid_;
  const UniqueFd socket_;
  const UniqueFd stderr_;
  const UniqueFd stop_;  // an eventfd that ends the stderr reader
  const std::function<void(absl::string_view)> log_;
  int64_t next_id_ = 1;
  bool reaped_ = false;
  std::string exit_description_;
  std::string last_error_;
  std::string extra_;
  std::thread stderr_reader_;

  absl::Mutex mu_;
  std::deque<std::string> last_lines_ ABSL_GUARDED_BY(mu_);
  bool stderr_closed_ ABSL_GUARDED_BY(mu_) = false;
};

namespace {

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

void WriteString(JsonWriter& writer, absl::string_view s) {
  writer.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

std::string BuildRequest(int64_t id, absl::string_view op,
                         const std::function<void(JsonWriter&)>& fields,
                         const std::vector<const char*>& fd_names) {
  rapidjson::StringBuffer buffer;
  JsonWriter writer(buffer);
  writer.StartObject();
  writer.Key("id");
  writer.Int64(id);
  writer.Key("op");
  WriteString(writer, op);
  if (fields) fields(writer);
  if (!fd_names.empty()) {
    writer.Key("fds");
    writer.StartArray();
    for (const char* name : fd_names) writer.String(name);
    writer.EndArray();
  }
  writer.EndObject();
  return absl::StrCat(buffer.GetString(), "\n");
}

absl::string_view Basename(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

absl::string_view Dirname(absl::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos) return ".";
  return slash == 0 ? absl::string_view("/") : path.substr(0, slash);
}

// The error a reply is not protocol for, or OK.
absl::Status NotProtocol(absl::string_view why) {
  return absl::InvalidArgumentError(why);
}

// A name of a tensor or an allocation key: non-empty, at most kMaxNameBytes.
absl::Status CheckName(absl::string_view field, absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) {
    return NotProtocol(absl::StrCat(field, ": a name of ", name.size(),
                                    " bytes (1 to ", kMaxNameBytes, ")"));
  }
  return absl::OkStatus();
}

// [[bytes per bucket] per node], of exactly `num_nodes` x `per_node`.
absl::StatusOr<std::vector<uint64_t>> ParseBuckets(
    const rapidjson::Value& value, uint32_t num_nodes, uint32_t per_node,
    absl::string_view where) {
  if (!value.IsArray() || value.Size() != num_nodes) {
    return NotProtocol(absl::StrCat(where, ": not a list of ", num_nodes,
                                    " lists (one per node)"));
  }
  std::vector<uint64_t> bytes;
  bytes.reserve(size_t{num_nodes} * per_node);
  for (const rapidjson::Value& node : value.GetArray()) {
    if (!node.IsArray() || node.Size() != per_node) {
      return NotProtocol(absl::StrCat(where, ": a node's list is not ",
                                      per_node, " numbers (one per bucket)"));
    }
    for (const rapidjson::Value& n : node.GetArray()) {
      if (!n.IsUint64() || n.GetUint64() > kMaxProtocolInteger) {
        return NotProtocol(absl::StrCat(
            where, ": a byte count that is not an integer in 0 .. 2^63-1"));
      }
      bytes.push_back(n.GetUint64());
    }
  }
  return bytes;
}

// {name: [[bytes]]} with unique, bounded names.
absl::Status ParseNamedBuckets(
    const rapidjson::Value& reply, const char* field, uint32_t num_nodes,
    uint32_t per_node,
    const std::function<void(std::string, std::vector<uint64_t>)>& add) {
  const auto it = reply.FindMember(field);
  if (it == reply.MemberEnd() || !it->value.IsObject()) {
    return NotProtocol(absl::StrCat("no object \"", field, "\""));
  }
  if (it->value.MemberCount() > kMaxNamedEntries) {
    return NotProtocol(
        absl::StrCat(field, ": more than ", kMaxNamedEntries, " entries"));
  }
  absl::flat_hash_set<absl::string_view> seen;
  for (const auto& member : it->value.GetObject()) {
    const absl::string_view name(member.name.GetString(),
                                 member.name.GetStringLength());
    RBLN_RETURN_IF_ERROR(CheckName(field, name));
    if (!seen.insert(name).second) {
      return NotProtocol(absl::StrCat(field, ": a name given twice"));
    }
    RBLN_ASSIGN_OR_RETURN(std::vector<uint64_t> bytes,
                          ParseBuckets(member.value, num_nodes, per_node,
                                       absl::StrCat(field, ".", Echo(name))));
    add(std::string(name), std::move(bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ParseCount(const rapidjson::Value& reply,
                                    const char* field, uint32_t max) {
  const auto it = reply.FindMember(field);
  if (it == reply.MemberEnd() || !it->value.IsUint() ||
      it->value.GetUint() < 1 || it->value.GetUint() > max) {
    return NotProtocol(
        absl::StrCat("\"", field, "\" is not an integer in 1 .. ", max));
  }
  return it->value.GetUint();
}

absl::StatusOr<ContainerFacts> ParseInspectReply(
    const rapidjson::Value& reply) {
  ContainerFacts facts;
  const auto granularity = reply.FindMember("granularity");
  if (granularity == reply.MemberEnd() || !granularity->value.IsString()) {
    return NotProtocol("no \"granularity\"");
  }
  const absl::string_view g(granularity->value.GetString(),
                            granularity->value.GetStringLength());
  if (g == "chiplet") {
    facts.granularity = BucketGranularity::kChiplet;
  } else if (g == "node") {
    facts.granularity = BucketGranularity::kNode;
  } else {
    return NotProtocol("\"granularity\" is neither \"chiplet\" nor \"node\"");
  }
  RBLN_ASSIGN_OR_RETURN(facts.num_nodes,
                        ParseCount(reply, "num_nodes", kMaxNumDevices));
  RBLN_ASSIGN_OR_RETURN(
      facts.buckets_per_node,
      ParseCount(reply, "buckets_per_node", kMaxChipletsPerNode));
  if (facts.granularity == BucketGranularity::kNode &&
      facts.buckets_per_node != 1) {
    return NotProtocol(
        "granularity \"node\" with buckets_per_node other than 1");
  }
  RBLN_RETURN_IF_ERROR(ParseNamedBuckets(
      reply, "other", facts.num_nodes, facts.buckets_per_node,
      [&](std::string key, std::vector<uint64_t> bytes) {
        facts.other.push_back({std::move(key), std::move(bytes)});
      }));
  std::sort(facts.other.begin(), facts.other.end(),
            [](const AllocationFacts& a, const AllocationFacts& b) {
              return a.key < b.key;
            });
  RBLN_RETURN_IF_ERROR(ParseNamedBuckets(
      reply, "kv_tensors", facts.num_nodes, facts.buckets_per_node,
      [&](std::string name, std::vector<uint64_t> bytes) {
        facts.kv_tensors.push_back({std::move(name), std::move(bytes), {}});
      }));
  if (const auto npu = reply.FindMember("npu"); npu != reply.MemberEnd()) {
    if (!npu->value.IsString() || npu->value.GetStringLength() == 0 ||
        npu->value.GetStringLength() > kMaxNpuBytes) {
      return NotProtocol(absl::StrCat("\"npu\" is not a name of 1 to ",
                                      kMaxNpuBytes, " bytes"));
    }
    facts.npu = npu->value.GetString();
  }
  if (const auto blocks = reply.FindMember("compiled_num_blocks");
      blocks != reply.MemberEnd()) {
    if (!blocks->value.IsUint64() || blocks->value.GetUint64() < 1 ||
        blocks->value.GetUint64() > kMaxNumBlocks) {
      return NotProtocol(absl::StrCat(
          "\"compiled_num_blocks\" is not an integer in 1 .. ", kMaxNumBlocks));
    }
    facts.compiled_num_blocks = blocks->value.GetUint64();
  }
  return facts;
}

// A string field of a hello, bounded.
absl::StatusOr<std::string> HelloString(const rapidjson::Value& reply,
                                        const char* field) {
  const auto it = reply.FindMember(field);
  if (it == reply.MemberEnd() || !it->value.IsString() ||
      it->value.GetStringLength() > kMaxNameBytes) {
    return NotProtocol(absl::StrCat("no string \"", field, "\""));
  }
  return std::string(it->value.GetString(), it->value.GetStringLength());
}

absl::StatusOr<CodecHello> ParseHelloReply(const rapidjson::Value& reply) {
  const auto protocol = reply.FindMember("protocol");
  if (protocol == reply.MemberEnd() || !protocol->value.IsInt()) {
    return NotProtocol("no \"protocol\"");
  }
  if (protocol->value.GetInt() != kCodecProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "it speaks protocol ", protocol->value.GetInt(),
        "; this daemon speaks protocol ", kCodecProtocolVersion,
        " (docs/codec-protocol.md): install the codec that came with it"));
  }
  CodecHello hello;
  RBLN_ASSIGN_OR_RETURN(hello.codec, HelloString(reply, "codec"));
  RBLN_ASSIGN_OR_RETURN(hello.codec_version,
                        HelloString(reply, "codec_version"));
  RBLN_ASSIGN_OR_RETURN(hello.api, HelloString(reply, "api"));
  if (hello.api != "per_chiplet" && hello.api != "per_node") {
    return NotProtocol("\"api\" is neither \"per_chiplet\" nor \"per_node\"");
  }
  const auto can_rescale = reply.FindMember("can_rescale");
  if (can_rescale == reply.MemberEnd() || !can_rescale->value.IsBool()) {
    return NotProtocol("no boolean \"can_rescale\"");
  }
  hello.can_rescale = can_rescale->value.GetBool();
  if (const auto uid = reply.FindMember("uid");
      uid != reply.MemberEnd() && uid->value.IsInt64()) {
    hello.uid = uid->value.GetInt64();
  }
  return hello;
}

// The name of a codec for messages: the first argument naming an existing
// file (an interpreter's script), else the program.
std::string CodecName(const std::vector<std::string>& argv) {
  for (size_t i = 1; i < argv.size(); ++i) {
    struct stat st;
    if (!argv[i].empty() && argv[i][0] != '-' &&
        stat(argv[i].c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      return std::string(Basename(argv[i]));
    }
  }
  return std::string(Basename(argv[0]));
}

}  // namespace

// One request on a worker of the pool.
struct ExternalCodec::Call {
  absl::string_view op;    // "inspect", "rescale"
  absl::string_view path;  // the file, for messages
  std::function<void(JsonWriter&)> fields;
  std::vector<const char*> fd_names;
  std::vector<int> fds;
  // Polled while the worker works; a status other than OK kills the worker
  // and is returned. May be empty.
  std::function<absl::Status()> cancelled;
  // Reads an ok reply; an error means it is not protocol.
  std::function<absl::Status(const rapidjson::Value&)> parse;
  // Stop the worker once it has answered (after a rescale: so that no
  // descriptor it kept on its output outlives the call).
  bool retire = false;
};

ExternalCodec::ExternalCodec(const ExternalCodecOptions& options,
                             std::vector<std::string> argv, std::string name,
                             uid_t uid, gid_t gid, bool drop_privileges)
    : options_(options),
      argv_(std::move(argv)),
      name_(std::move(name)),
      uid_(uid),
      gid_(gid),
      drop_privileges_(drop_privileges),
      launcher_(std::make_unique<Launcher>()) {}

absl::StatusOr<std::unique_ptr<ExternalCodec>> ExternalCodec::Start(
    const ExternalCodecOptions& options) {
  const std::string flag =
      absl::StrCat("--codec-command ", Quoted(options.command));
  if (options.workers < 1 || options.workers > kMaxCodecWorkers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--codec-workers ", options.workers, ": give 1 to ", kMaxCodecWorkers));
  }
  if (options.timeout < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        "--codec-timeout-seconds: give at least 1 second");
  }
  absl::StatusOr<std::vector<std::string>> argv =
      SplitCommandLine(options.command);
  if (!argv.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--codec-command: ", argv.status().message()));
  }
  if (argv->front().find('/') == std::string::npos) {
    const char* path = getenv("PATH");
    absl::StatusOr<std::string> found =
        FindExecutableOnPath(argv->front(), path != nullptr ? path : "");
    if (!found.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(flag, ": ", found.status().message(),
                       "; give the program's full path"));
    }
    argv->front() = *found;
  } else if (access(argv->front().c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, ": ", Echo(argv->front()),
                     " is not an executable file (", strerror(errno), ")"));
  }

  // The user is looked up even when the daemon cannot switch to it, so that
  // a typo shows at once rather than on the day it runs as root.
  struct passwd entry {};
  struct passwd* found = nullptr;
  std::vector<char> buffer(16 << 10);
  uint32_t numeric = 0;
  int lookup_error = getpwnam_r(options.user.c_str(), &entry, buffer.data(),
                                buffer.size(), &found);
  if (found == nullptr && absl::SimpleAtoi(options.user, &numeric)) {
    lookup_error =
        getpwuid_r(numeric, &entry, buffer.data(), buffer.size(), &found);
  }
  if (found == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--codec-user ", Quoted(options.user), ": no such user on this host",
        lookup_error != 0 ? absl::StrCat(" (", strerror(lookup_error), ")")
                          : "",
        "; the codec runs as this user when the daemon is root (getent "
        "passwd lists them)"));
  }
  // Root, or a daemon given CAP_SETUID and CAP_SETGID (a systemd drop-in),
  // can run the codec as --codec-user.
  const bool root = geteuid() == 0 || CanChangeIds();
  const uid_t uid = root ? found->pw_uid : geteuid();
  const gid_t gid = root ? found->pw_gid : getegid();
  const std::string name = absl::StrCat("external (", CodecName(*argv), ")");
  std::unique_ptr<ExternalCodec> codec(
      new ExternalCodec(options, *std::move(argv), name, uid, gid, root));
  if (!root) {
    codec->Log(absl::StrCat(
        "codec: warning: the daemon is not root and lacks CAP_SETUID and "
        "CAP_SETGID, so the codec runs as its uid ",
        uid, ", not as --codec-user ", options.user,
        " (without capabilities, but able to write what that uid owns, "
        "the store included); see docs/real-artifacts.md to isolate it"));
  }
  absl::StatusOr<std::unique_ptr<Worker>> first =
      codec->StartWorker(&codec->hello_);
  if (!first.ok()) {
    return absl::Status(first.status().code(),
                        absl::StrCat(flag, " ", first.status().message()));
  }
  absl::MutexLock lock(&codec->mu_);
  codec->idle_.push_back(*std::move(first));
  codec->live_ = 1;
  return codec;
}

ExternalCodec::~ExternalCodec() {
  std::vector<std::unique_ptr<Worker>> workers;
  {
    absl::MutexLock lock(&mu_);
    workers = std::move(idle_);
  }
  for (const std::unique_ptr<Worker>& worker : workers) worker->CloseSocket();
  const absl::Time deadline = absl::Now() + kShutdownGrace;
  for (const std::unique_ptr<Worker>& worker : workers) {
    if (!worker->ExitedBy(deadline)) {
      Log(absl::StrCat("codec[", worker->pid(),
                       "]: did not exit at end of input; killed"));
    }
  }
  workers.clear();  // kills and reaps what is left
  launcher_.reset();
}

std::string ExternalCodec::name() const { return name_; }

int64_t ExternalCodec::workers_started() const {
  absl::MutexLock lock(&mu_);
  return started_;
}

void ExternalCodec::Log(absl::string_view line) const {
  if (options_.log) options_.log(line);
}

absl::StatusOr<std::unique_ptr<ExternalCodec::Worker>>
ExternalCodec::StartWorker(CodecHello* hello) {
  std::vector<char*> args;
  for (const std::string& arg : argv_) {
    args.push_back(const_cast<char*>(arg.c_str()));
  }
  args.push_back(nullptr);

  absl::Status spawned;
  pid_t pid = -1;
  UniqueFd daemon_end;
  UniqueFd stderr_read;
  launcher_->Run([&]() {
    spawned = [&]() -> absl::Status {
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
      const pid_t parent = getpid();
      const pid_t child = fork();
      if (child < 0) return ErrnoToStatus("fork for", "the codec", errno);
      if (child == 0) {
        ExecWorker(args[0], args.data(), theirs.get(), err_write.get(),
                   status_write.get(), drop_privileges_, uid_, gid_, parent);
      }
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
        if (!WaitForExit(child, kExitGrace).has_value()) KillAndReap(child);
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot start ", Echo(argv_[0]), " as uid ", uid_, ": ",
            kChildSteps[failure.step], " failed: ", strerror(failure.err),
            failure.err == EACCES ? " (that user must be able to reach and "
                                    "run it: check every directory above it)"
                                  : ""));
      }
      if (fcntl(ours.get(), F_SETFL, O_NONBLOCK) != 0) {
        KillAndReap(child);
        return ErrnoToStatus("configure", "the codec's socket", errno);
      }
      pid = child;
      daemon_end = std::move(ours);
      stderr_read = std::move(err_read);
      return absl::OkStatus();
    }();
  });
  if (!spawned.ok()) return spawned;
  UniqueFd stop(eventfd(0, EFD_CLOEXEC));
  if (stop.get() < 0) {
    KillAndReap(pid);
    return ErrnoToStatus("eventfd for", "the codec", errno);
  }
  auto worker = std::make_unique<Worker>(pid, std::move(daemon_end),
                                         std::move(stderr_read),
                                         std::move(stop), options_.log);
  {
    absl::MutexLock lock(&mu_);
    ++started_;
  }
  Log(absl::StrCat("codec[", pid, "]: started as uid ", uid_, ": ",
                   Echo(options_.command)));

  const std::string line = BuildRequest(worker->NextId(), "hello",
                                        [](JsonWriter& writer) {
                                          writer.Key("protocol");
                                          writer.Int(kCodecProtocolVersion);
                                        },
                                        {});
  const absl::Time deadline = absl::Now() + options_.timeout;
  absl::Status unused;
  std::string reply;
  Worker::Io io = worker->Send(line, {}, deadline, nullptr, &unused);
  if (io == Worker::Io::kOk)
    io = worker->ReadLine(&reply, deadline, nullptr, &unused);
  const std::string within = absl::StrCat("did not answer hello within ",
                                          FormatSeconds(options_.timeout));
  switch (io) {
    case Worker::Io::kOk:
      break;
    case Worker::Io::kTimeout:
      worker->Kill();
      return absl::FailedPreconditionError(absl::StrCat(
          within, " (--codec-timeout-seconds); its last stderr lines: ",
          worker->LastStderrLines(true)));
    case Worker::Io::kClosed: {
      const std::string how = worker->ExitDescription();
      return absl::FailedPreconditionError(absl::StrCat(
          within, ": it ", how,
          "; its last stderr lines: ", worker->LastStderrLines(true)));
    }
    default:
      worker->Kill();
      return absl::FailedPreconditionError(
          absl::StrCat(within, ": ",
                       io == Worker::Io::kTooLong ? "a line longer than 16 MiB"
                                                  : worker->last_error()));
  }
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseValidateEncodingFlag |
            rapidjson::kParseIterativeFlag>(reply.data(), reply.size());
  absl::StatusOr<CodecHello> parsed = NotProtocol(
      "its answer is not a JSON object with \"id\": 1 and "
      "\"ok\": true");
  if (!doc.HasParseError() && doc.IsObject() && doc.HasMember("id") &&
      doc["id"].IsInt64() && doc["id"].GetInt64() == 1 && doc.HasMember("ok") &&
      doc["ok"].IsBool() && doc["ok"].GetBool()) {
    parsed = ParseHelloReply(doc);
  }
  if (!parsed.ok()) {
    worker->Kill();
    return absl::FailedPreconditionError(absl::StrCat(
        "did not answer hello as protocol ", kCodecProtocolVersion, ": ",
        parsed.status().message(), ": ", Echo(reply),
        "; its last stderr lines: ", worker->LastStderrLines(false)));
  }
  if (hello != nullptr) *hello = *std::move(parsed);
  return worker;
}

bool ExternalCodec::CanAcquire() const {
  return !idle_.empty() || live_ < options_.workers;
}

absl::StatusOr<std::unique_ptr<ExternalCodec::Worker>>
ExternalCodec::Acquire() {
  absl::Duration backoff;
  while (true) {
    std::unique_ptr<Worker> stale;
    {
      absl::MutexLock lock(&mu_);
      if (!mu_.AwaitWithTimeout(
              absl::Condition(this, &ExternalCodec::CanAcquire),
              options_.timeout)) {
        return absl::UnavailableError(absl::StrCat(
            "all ", options_.workers, " codec worker(s) stayed busy for ",
            FormatSeconds(options_.timeout),
            " (--codec-timeout-seconds); nothing was changed: try again, or "
            "raise --codec-workers"));
      }
      if (idle_.empty()) {
        ++live_;
        backoff = std::max(next_start_ - absl::Now(), absl::ZeroDuration());
        break;
      }
      std::unique_ptr<Worker> worker = std::move(idle_.back());
      idle_.pop_back();
      if (worker->StillIdle()) return worker;
      --live_;
      stale = std::move(worker);
    }
    // It exited (or spoke unasked) while idle: replace it.
    Log(absl::StrCat("codec[", stale->pid(), "]: ", stale->ExitDescription(),
                     " while idle; a new worker replaces it"));
  }
  absl::SleepFor(backoff);
  absl::StatusOr<std::unique_ptr<Worker>> worker = StartWorker(nullptr);
  if (!worker.ok()) {
    Release(nullptr, false);
    return absl::UnavailableError(absl::StrCat(
        "the codec could not be restarted: ", worker.status().message()));
  }
  return worker;
}

void ExternalCodec::Release(std::unique_ptr<Worker> worker, bool healthy) {
  if (!healthy && worker != nullptr) {
    worker->Kill();
    Log(absl::StrCat("codec[", worker->pid(),
                     "]: stopped; the next request "
                     "starts a new worker"));
    worker.reset();
  }
  absl::MutexLock lock(&mu_);
  if (healthy) {
    failures_ = 0;
    idle_.push_back(std::move(worker));
    return;
  }
  --live_;
  ++failures_;
  absl::Duration backoff = kBackoffStart;
  for (int i = 1; i < failures_ && backoff < kBackoffMax; ++i) backoff *= 2;
  next_start_ = absl::Now() + std::min(backoff, kBackoffMax);
}

void ExternalCodec::Done(std::unique_ptr<Worker> worker, bool retire) {
  if (!retire) {
    Release(std::move(worker), true);
    return;
  }
  worker->Kill();
  worker.reset();
  absl::MutexLock lock(&mu_);
  --live_;
}

absl::StatusOr<std::string> ExternalCodec::Exchange(Call& call) {
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<Worker> worker, Acquire());
  const int64_t id = worker->NextId();
  const std::string line =
      BuildRequest(id, call.op, call.fields, call.fd_names);
  const absl::Time deadline = absl::Now() + options_.timeout;
  absl::Status cancel_status;
  std::string reply;
  Worker::Io io =
      worker->Send(line, call.fds, deadline, call.cancelled, &cancel_status);
  if (io == Worker::Io::kOk) {
    io = worker->ReadLine(&reply, deadline, call.cancelled, &cancel_status);
  }
  const auto garbage = [&](absl::string_view why) {
    const std::string message = absl::StrCat(
        "the codec answered ", call.op, " of ", call.path,
        " with something that is not protocol (", why, "): ", Echo(reply),
        "; it was stopped and will be restarted");
    Release(std::move(worker), false);
    return absl::InternalError(message);
  };
  switch (io) {
    case Worker::Io::kOk:
      break;
    case Worker::Io::kTimeout: {
      Release(std::move(worker), false);
      return absl::DeadlineExceededError(absl::StrCat(
          "the codec did not answer ", call.op, " for ", call.path, " within ",
          FormatSeconds(options_.timeout),
          " (--codec-timeout-seconds); it was stopped and will be restarted"));
    }
    case Worker::Io::kClosed: {
      const std::string how = worker->ExitDescription();
      const std::string lines = worker->LastStderrLines(true);
      Release(std::move(worker), false);
      return absl::UnavailableError(absl::StrCat(
          "the codec ", how, " during ", call.op, " of ", call.path,
          "; its last stderr lines: ", lines, "; it will be restarted"));
    }
    case Worker::Io::kTooLong:
      reply.resize(kMaxEchoBytes);
      return garbage("a line longer than 16 MiB");
    case Worker::Io::kCancelled:
      Release(std::move(worker), false);
      return cancel_status;
    case Worker::Io::kError: {
      const std::string error = worker->last_error();
      Release(std::move(worker), false);
      return absl::InternalError(absl::StrCat(
          "talking to the codec about ", call.path, " failed: ", error,
          "; it was stopped and will be restarted"));
    }
  }
  if (!worker->extra().empty()) return garbage("more than one line");
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseValidateEncodingFlag |
            rapidjson::kParseIterativeFlag>(reply.data(), reply.size());
  if (doc.HasParseError() || !doc.IsObject())
    return garbage("not a JSON object");
  if (!doc.HasMember("id") || !doc["id"].IsInt64() ||
      doc["id"].GetInt64() != id) {
    return garbage(absl::StrCat("not the id ", id, " of the request"));
  }
  if (!doc.HasMember("ok") || !doc["ok"].IsBool()) {
    return garbage("no boolean \"ok\"");
  }
  if (!doc["ok"].GetBool()) {
    const auto error = doc.FindMember("error");
    if (error == doc.MemberEnd() || !error->value.IsObject() ||
        !error->value.HasMember("code") || !error->value["code"].IsString() ||
        !error->value.HasMember("message") ||
        !error->value["message"].IsString()) {
      return garbage("an error without a string \"code\" and \"message\"");
    }
    const std::string code = error->value["code"].GetString();
    const std::string message =
        WireText(absl::string_view(error->value["message"].GetString(),
                                   error->value["message"].GetStringLength()),
                 kMaxCodecMessageBytes);
    absl::Status status;
    if (code == "UNREADABLE") {
      status = absl::DataLossError(absl::StrCat(
          call.path, ": the codec (", name_, ") cannot read it: ", message));
    } else if (code == "OLDER_COMPILER") {
      status =
          absl::FailedPreconditionError(absl::StrCat(call.path, ": ", message));
    } else if (code == "BAD_REQUEST" || code == "FAILED") {
      status = absl::InternalError(
          absl::StrCat(call.path, ": the codec failed: ", message));
    } else {
      return garbage("an unknown error code");
    }
    Done(std::move(worker), call.retire);
    return status;
  }
  if (absl::Status parsed = call.parse(doc); !parsed.ok()) {
    return garbage(parsed.message());
  }
  Done(std::move(worker), call.retire);
  return reply;
}

absl::StatusOr<ContainerFacts> ExternalCodec::Inspect(Env* env,
                                                      const std::string& path) {
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> source,
                        env->NewRandomAccessFile(path));
  ContainerFacts facts;
  const std::string file(Basename(path));
  Call call{
      .op = "inspect",
      .path = path,
      .fields =
          [&](JsonWriter& writer) {
            writer.Key("file");
            WriteString(writer, file);
          },
      .fd_names = {"source"},
      .fds = {source->native_handle()},
      .cancelled = nullptr,
      .parse =
          [&](const rapidjson::Value& reply) {
            RBLN_ASSIGN_OR_RETURN(facts, ParseInspectReply(reply));
            return absl::OkStatus();
          },
  };
  RBLN_RETURN_IF_ERROR(Exchange(call).status());
  return facts;
}

absl::Status ExternalCodec::Rescale(const RescaleRequest& request) {
  Env* out_env = request.out_env;
  const std::string& out_path = request.out_path;
  const std::string out_name(Basename(out_path));
  if (out_name.empty() || out_name == "." || out_name == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat(out_path, ": not a file path to write the rescaled copy"));
  }
  const std::string scratch =
      JoinPath(Dirname(out_path), absl::StrCat(".codec-", out_name));
  RBLN_ASSIGN_OR_RETURN(
      std::unique_ptr<RandomAccessFile> source,
      request.source_env->NewRandomAccessFile(request.source_path));
  // A scratch directory left by a daemon that died mid-rescale.
  if (out_env->Stat(scratch).ok()) {
    RBLN_RETURN_IF_ERROR(RemoveTree(out_env, scratch));
  }
  RBLN_RETURN_IF_ERROR(out_env->CreateDir(scratch));
  bool moved = false;
  const absl::Status status = [&]() -> absl::Status {
    // The codec's uid may write there, and nothing else of the store.
    RBLN_RETURN_IF_ERROR(out_env->SetOwnership(scratch, {uid_, gid_, 0700}));
    RBLN_ASSIGN_OR_RETURN(std::unique_ptr<Directory> dir,
                          out_env->OpenDirectory(scratch));
    const std::string& source_path = request.source_path;
    Call call{
        .op = "rescale",
        .path = source_path,
        .fields =
            [&](JsonWriter& writer) {
              writer.Key("file");
              WriteString(writer, Basename(source_path));
              writer.Key("out_name");
              WriteString(writer, out_name);
              writer.Key("factors");
              writer.StartObject();
              for (const auto& [tensor, factor] : request.factors) {
                writer.Key(tensor.data(),
                           static_cast<rapidjson::SizeType>(tensor.size()));
                writer.StartArray();
                writer.Uint64(factor.first);
                writer.Uint64(factor.second);
                writer.EndArray();
              }
              writer.EndObject();
            },
        .fd_names = {"source", "out_dir"},
        .fds = {source->native_handle(), dir->native_handle()},
        .cancelled =
            [&]() {
              return request.on_copied ? request.on_copied(0)
                                       : absl::OkStatus();
            },
        .parse = [](const rapidjson::Value&) { return absl::OkStatus(); },
        .retire = true,
    };
    RBLN_RETURN_IF_ERROR(Exchange(call).status());
    dir.reset();

    // The codec's output is checked where it can no longer change it: the
    // listing in its directory, the file once moved out of it.
    RBLN_ASSIGN_OR_RETURN(std::vector<DirEntry> entries,
                          out_env->ListDir(scratch));
    std::vector<std::string> others;
    bool written = false;
    for (const DirEntry& entry : entries) {
      if (entry.name == out_name) {
        written = true;
      } else {
        others.push_back(entry.name);
      }
    }
    const std::string what =
        absl::StrCat(source_path, ": the codec (", name_, ")");
    if (!others.empty()) {
      return absl::InternalError(
          absl::StrCat(what, " wrote ", Echo(absl::StrJoin(others, ", ")),
                       " in its scratch directory, other than ", Echo(out_name),
                       "; nothing was kept"));
    }
    if (!written) {
      return absl::InternalError(absl::StrCat(
          what, " answered ok but did not write ", Echo(out_name)));
    }
    RBLN_RETURN_IF_ERROR(
        out_env->Rename(JoinPath(scratch, out_name), out_path));
    moved = true;
    RBLN_ASSIGN_OR_RETURN(FileStat st, out_env->Stat(out_path));
    if (st.type != FileType::kRegular) {
      return absl::InternalError(
          absl::StrCat(what, " wrote ", Echo(out_name),
                       " as something other than a regular file"));
    }
    if (st.nlink != 1) {
      return absl::InternalError(absl::StrCat(what, " wrote ", Echo(out_name),
                                              " with ", st.nlink,
                                              " hard links (one expected)"));
    }
    if (st.uid != uid_) {
      return absl::InternalError(absl::StrCat(what, " left ", Echo(out_name),
                                              " owned by uid ", st.uid,
                                              ", not its own uid ", uid_));
    }
    RBLN_RETURN_IF_ERROR(out_env->SyncFile(out_path));
    RBLN_RETURN_IF_ERROR(out_env->RemoveDir(scratch));
    if (request.on_copied) RBLN_RETURN_IF_ERROR(request.on_copied(st.size));
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    if (out_env->Stat(scratch).ok()) RemoveTree(out_env, scratch).IgnoreError();
    if (moved) RemoveTree(out_env, out_path).IgnoreError();
  }
  return status;
}

}  // namespace rbln
