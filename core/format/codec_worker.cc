#include "core/format/codec_worker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/format/codec_wire.h"
#include "core/os/env.h"
#include "core/os/subprocess.h"
#include "core/text.h"

namespace rbln {
namespace {

// A stderr line is logged up to this many bytes (the rest is dropped), so a
// worker that floods stderr costs the daemon no memory.
constexpr size_t kMaxStderrLineBytes = 1000;
// Stderr lines kept per worker for error messages.
constexpr size_t kStderrLinesKept = 8;
// What is read of a stopped worker's stderr that is still in the pipe.
constexpr size_t kMaxDrainBytes = size_t{64} << 20;
// How often a rescale's cancellation is polled while the worker works.
constexpr absl::Duration kCancelPollInterval = absl::Seconds(1);

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return absl::StrCat("signal ", sig, " (", strsignal(sig), ")");
  }
  return absl::StrCat("wait status ", status);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CodecWorker>> CodecWorker::Start(
    CodecProcess process, std::function<void(absl::string_view)> log) {
  UniqueFd stop(eventfd(0, EFD_CLOEXEC));
  if (stop.get() < 0) {
    const int err = errno;
    if (process.group != nullptr) {
      process.group->EndAll(process.pid, process.uid, kCodecExitGrace)
          .IgnoreError();
    } else {
      KillAndReap(process.pid);
    }
    return ErrnoToStatus("eventfd for", "the codec", err);
  }
  return std::unique_ptr<CodecWorker>(
      new CodecWorker(std::move(process), std::move(stop), std::move(log)));
}

CodecWorker::CodecWorker(CodecProcess process, UniqueFd stop,
                         std::function<void(absl::string_view)> log)
    : pid_(process.pid),
      uid_(process.uid),
      group_(std::move(process.group)),
      socket_(std::move(process.socket)),
      stderr_(std::move(process.stderr_fd)),
      stop_(std::move(stop)),
      log_(std::move(log)) {
  stderr_reader_ = std::thread([this]() { ReadStderr(); });
}

CodecWorker::~CodecWorker() {
  Kill();
  const uint64_t one = 1;
  ssize_t ignored = write(stop_.get(), &one, sizeof(one));
  (void)ignored;
  stderr_reader_.join();
}

CodecWorker::Io CodecWorker::Send(
    const std::string& line, const std::vector<int>& fds, absl::Time deadline,
    const std::function<absl::Status()>& cancelled,
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
    const ssize_t n = sendmsg(socket_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
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

CodecWorker::Io CodecWorker::ReadLine(
    std::string* line, absl::Time deadline,
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

bool CodecWorker::StillIdle() const {
  pollfd p{socket_.get(), POLLIN, 0};
  return poll(&p, 1, 0) == 0;
}

void CodecWorker::CloseSocket() { shutdown(socket_.get(), SHUT_RDWR); }

std::string CodecWorker::ExitDescription() {
  if (reaped_) return exit_description_;
  std::optional<int> status = WaitForExit(pid_, kCodecExitGrace);
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

bool CodecWorker::ExitedBy(absl::Time deadline) {
  if (reaped_) return true;
  std::optional<int> status =
      WaitForExit(pid_, std::max(deadline - absl::Now(), absl::ZeroDuration()));
  if (!status.has_value()) return false;
  reaped_ = true;
  exit_description_ = absl::StrCat("exited with ", DescribeWaitStatus(*status));
  return true;
}

void CodecWorker::Kill() {
  const bool first = !stopped_;
  const absl::Status stopped = Stop();
  if (first && !stopped.ok() && log_) {
    log_(absl::StrCat("codec[", pid_, "]: ", stopped.message()));
  }
}

absl::Status CodecWorker::Stop() {
  if (stopped_) return stop_status_;
  stopped_ = true;
  if (group_ == nullptr) {  // a worker made in a test, without a container
    if (!reaped_) {
      std::optional<int> status = KillAndReap(pid_);
      if (status.has_value() && exit_description_.empty()) {
        exit_description_ =
            absl::StrCat("killed (", DescribeWaitStatus(*status), ")");
      }
    }
    reaped_ = true;
    return stop_status_;
  }
  // A reaped leader's pid may be another process's by now.
  if (reaped_) ForgetOwnChild(pid_);
  std::optional<int> status;
  stop_status_ = group_->EndAll(reaped_ ? std::nullopt : std::optional(pid_),
                                uid_, kCodecStopGrace, &status);
  reaped_ = true;
  if (status.has_value() && exit_description_.empty()) {
    exit_description_ =
        absl::StrCat("killed (", DescribeWaitStatus(*status), ")");
  }
  return stop_status_;
}

std::string CodecWorker::LastStderrLines(bool ended) {
  absl::MutexLock lock(&mu_);
  if (ended) {
    mu_.AwaitWithTimeout(absl::Condition(&stderr_closed_), kCodecExitGrace);
  }
  if (last_lines_.empty()) return "(none)";
  return WireText(absl::StrJoin(last_lines_, " | "), kMaxCodecMessageBytes);
}

CodecWorker::Io CodecWorker::Wait(
    short events, absl::Time deadline,
    const std::function<absl::Status()>& cancelled, absl::Status* cancel_status,
    bool hangup) {
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

void CodecWorker::ReadStderr() {
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

void CodecWorker::EmitStderrLine(absl::string_view line, bool cut) {
  std::string text = WireText(line, kMaxStderrLineBytes);
  if (cut) absl::StrAppend(&text, " ... (cut)");
  if (log_) log_(absl::StrCat("codec[", pid_, "]: ", text));
  absl::MutexLock lock(&mu_);
  last_lines_.push_back(std::move(text));
  if (last_lines_.size() > kStderrLinesKept) last_lines_.pop_front();
}

}  // namespace rbln
