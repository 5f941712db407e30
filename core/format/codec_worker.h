// One running worker process of an external codec (docs/codec-protocol.md):
// lines sent and read on its socket under a deadline, its stderr logged line
// by line ("codec[PID]: LINE", escaped and cut) with the last few kept for
// error messages, and its end (exit, kill, reap).
//
// Thread-safe only as used: one thread at a time sends, reads and stops it
// (the call that leased it); its stderr is read on a thread of its own.
#ifndef RBLN_CORE_FORMAT_CODEC_WORKER_H_
#define RBLN_CORE_FORMAT_CODEC_WORKER_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/format/codec_launcher.h"
#include "core/os/unique_fd.h"

namespace rbln {

class CodecWorker {
 public:
  // A reply is one line; a compiled model's facts are a few kilobytes, so a
  // line this long is a codec gone wrong, and the daemon's memory stays
  // bounded.
  static constexpr size_t kMaxReplyBytes = size_t{16} << 20;

  // How a send or a read ended.
  enum class Io { kOk, kTimeout, kClosed, kTooLong, kCancelled, kError };

  // Takes over a launched `process` and starts reading its stderr, passing
  // each line to `log` (which may be empty).
  static absl::StatusOr<std::unique_ptr<CodecWorker>> Start(
      CodecProcess process, std::function<void(absl::string_view)> log);

  // Kills and reaps the process if it is still there, and logs what is left
  // of its stderr.
  ~CodecWorker();

  CodecWorker(const CodecWorker&) = delete;
  CodecWorker& operator=(const CodecWorker&) = delete;

  pid_t pid() const { return pid_; }
  int64_t NextId() { return next_id_++; }
  // What failed when a send or read returned Io::kError.
  const std::string& last_error() const { return last_error_; }

  // Sends `line`, with `fds` as SCM_RIGHTS on its first bytes. Polls
  // `cancelled` (may be empty) while it waits; a status other than OK ends
  // the wait with Io::kCancelled and is stored in `*cancel_status`.
  Io Send(const std::string& line, const std::vector<int>& fds,
          absl::Time deadline, const std::function<absl::Status()>& cancelled,
          absl::Status* cancel_status);

  // Reads one line (without its newline) into `line`, of at most
  // kMaxReplyBytes (else Io::kTooLong). Bytes after it are kept in `extra`
  // (a worker must send nothing unasked). `cancelled` as for Send.
  Io ReadLine(std::string* line, absl::Time deadline,
              const std::function<absl::Status()>& cancelled,
              absl::Status* cancel_status);

  const std::string& extra() const { return extra_; }

  // Whether an idle worker is still fit for a request: nothing to read (it
  // sent nothing unasked) and no hangup (it has not exited).
  bool StillIdle() const;

  // Signals end of file to the worker (it exits).
  void CloseSocket();

  // How the worker ended after it closed its socket: waits a moment for it
  // to exit, else kills it. Reaps it either way.
  std::string ExitDescription();

  // Waits until the worker exits by itself, up to `deadline`.
  bool ExitedBy(absl::Time deadline);

  // Ends the worker and every process it started (its ContainedGroup,
  // core/os/containment.h), and waits up to kCodecStopGrace for all to be
  // gone; FAILED_PRECONDITION naming the pids of any still there. Once:
  // later calls return the first answer.
  absl::Status Stop();
  // Stop, an error logged (with the pids still there).
  void Kill();

  // The last stderr lines, " | "-separated. After the worker ended, waits a
  // moment for its stderr to close, so that the last words are in.
  std::string LastStderrLines(bool ended);

 private:
  CodecWorker(CodecProcess process, UniqueFd stop,
              std::function<void(absl::string_view)> log);

  // Waits until the socket is ready for `events`; with `hangup`, a hangup
  // counts as ready (the read then sees end of file). Polls `cancelled`
  // every kCancelPollInterval.
  Io Wait(short events, absl::Time deadline,
          const std::function<absl::Status()>& cancelled,
          absl::Status* cancel_status, bool hangup);
  // The stderr reader's thread.
  void ReadStderr();
  void EmitStderrLine(absl::string_view line, bool cut);

  const pid_t pid_;
  const uid_t uid_;
  const std::unique_ptr<ContainedGroup> group_;
  const UniqueFd socket_;
  const UniqueFd stderr_;
  const UniqueFd stop_;  // an eventfd that ends the stderr reader
  const std::function<void(absl::string_view)> log_;
  int64_t next_id_ = 1;
  bool reaped_ = false;
  bool stopped_ = false;
  absl::Status stop_status_;
  std::string exit_description_;
  std::string last_error_;
  std::string extra_;
  std::thread stderr_reader_;

  absl::Mutex mu_;
  std::deque<std::string> last_lines_ ABSL_GUARDED_BY(mu_);
  bool stderr_closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace rbln

#endif  // RBLN_CORE_FORMAT_CODEC_WORKER_H_
