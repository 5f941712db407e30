// An external codec (docs/codec-protocol.md): a bounded pool of long-lived
// worker processes, started from --codec-command
// (core/format/codec_launcher.h), that answer inspect and rescale for file
// formats the daemon cannot read itself (rebel-compiler's, through
// codecs/rebel/rbln_codec_rebel.py).
//
// A worker that hangs, crashes or answers something that is not protocol is
// killed with its process group; the request it was serving fails with a
// clear error, and the next request gets a fresh worker (after a backoff
// while workers keep failing).
//
// A rescale writes into a scratch directory `.codec-<name>` next to the
// output, owned by the codec's uid (mode 0700); after the worker answers ok,
// the daemon checks that the directory holds exactly the one regular file it
// asked for, owned by that uid, with one link, and copies it to the output
// path, a file of the daemon's own (a reflink where the file system has
// them), syncs it and removes the directory: a descriptor the codec kept, or
// a file it shares, cannot reach what is committed. Any failure removes the
// directory and leaves nothing at the output path.
//
// Thread-safe: up to `workers` calls run at once, each on a worker of its
// own; more wait for a free worker.
#ifndef RBLN_CORE_FORMAT_EXTERNAL_CODEC_H_
#define RBLN_CORE_FORMAT_EXTERNAL_CODEC_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/core_metrics.h"
#include "core/format/codec.h"
#include "core/format/codec_launcher.h"
#include "core/format/codec_wire.h"
#include "core/format/codec_worker.h"

namespace rbln {

// Bounds of --codec-workers.
inline constexpr int kMaxCodecWorkers = 16;

struct ExternalCodecOptions {
  // The command line of a worker, split into words as a shell would
  // (SplitCommandLine) and run without a shell.
  std::string command;
  // The user the workers run as when the daemon can change uid (a name or a
  // number; empty: kCodecUser where the host has it, else kFallbackCodecUser);
  // otherwise they run as the daemon's user (ResolveCodecUser).
  std::string user;
  // How long one request (hello, inspect, rescale) may take.
  absl::Duration timeout = absl::Seconds(120);
  // At most this many worker processes at once (1 ..= kMaxCodecWorkers).
  int workers = 2;
  // How every process a worker starts is ended with it
  // (core/os/containment.h): --codec-containment.
  ContainmentMode containment = ContainmentMode::kAuto;
  // Receives the workers' stderr lines ("codec[PID]: LINE", escaped and cut)
  // and their lifecycle ("codec[PID]: started ...", "... exited ..."), from
  // any thread. May be empty.
  std::function<void(absl::string_view line)> log;
};

class ExternalCodec : public ContainerCodec {
 public:
  // Starts the first worker and checks its hello, so that a codec that
  // cannot run fails the daemon's start. The error names the flag at fault:
  // INVALID_ARGUMENT for --codec-workers or --codec-timeout-seconds out of
  // range or a --codec-command that cannot be split; FAILED_PRECONDITION for
  // an unknown --codec-user, a --codec-command whose program is not found or
  // not executable, or a worker that did not answer hello with protocol 1
  // (with its last stderr lines).
  static absl::StatusOr<std::unique_ptr<ExternalCodec>> Start(
      const ExternalCodecOptions& options);

  // Closes every worker's socket (a worker exits at end of file), waits
  // briefly, then kills and reaps what is left. No call may be running.
  ~ExternalCodec() override;

  ExternalCodec(const ExternalCodec&) = delete;
  ExternalCodec& operator=(const ExternalCodec&) = delete;

  // "external (rbln_codec_rebel.py)": the first argument of the command
  // that names an existing file (the script of an interpreter), else the
  // program.
  std::string name() const override;

  // Errors name the file and the codec:
  //   DATA_LOSS           the codec cannot read it (UNREADABLE)
  //   FAILED_PRECONDITION the compiler cannot rescale (OLDER_COMPILER)
  //   INTERNAL            the codec failed (FAILED, BAD_REQUEST), answered
  //                       something that is not protocol (the worker is
  //                       killed), or wrote something other than asked
  //   DEADLINE_EXCEEDED   no answer within the timeout (the worker is killed)
  //   UNAVAILABLE         the worker exited during the request, or a new one
  //                       could not be started
  // Each call counts once in rbln_artifactd_codec_calls_total and
  // _codec_call_seconds (core/core_metrics.h): timeout for
  // DEADLINE_EXCEEDED, crash for a worker that exited, answered something
  // that is not protocol or could not be started, error for anything else
  // that failed.
  absl::StatusOr<ContainerFacts> Inspect(Env* env,
                                         const std::string& path) override;
  bool CanRescale() const override { return hello_.can_rescale; }
  absl::Status Rescale(const RescaleRequest& request) override;

  // The first worker's hello.
  const CodecHello& hello() const { return hello_; }
  // How the workers' processes are held (never kAuto).
  ContainmentMode containment() const { return containment_; }
  // The uid and gid the workers run as.
  uid_t worker_uid() const { return uid_; }
  gid_t worker_gid() const { return gid_; }
  // Worker processes started so far (the first one included).
  int64_t workers_started() const;

 private:
  struct Call;

  ExternalCodec(const ExternalCodecOptions& options,
                std::vector<std::string> argv, std::string name, CodecUser user,
                Containment containment);

  // A worker for one call: an idle one, else a new one (started and
  // greeted) when fewer than options_.workers live, else waits.
  // A failure to start one sets *failure (may be null) to kCrash.
  absl::StatusOr<std::unique_ptr<CodecWorker>> Acquire(CodecOutcome* failure);
  bool CanAcquire() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives a worker back: kept when `healthy`, else killed and reaped.
  void Release(std::unique_ptr<CodecWorker> worker, bool healthy);
  // A worker that answered: back to the pool, or stopped when `retire`
  // (with every process it started: CodecWorker::Stop's answer).
  absl::Status Done(std::unique_ptr<CodecWorker> worker, bool retire);
  // Starts a worker process and checks its hello.
  absl::StatusOr<std::unique_ptr<CodecWorker>> StartWorker(CodecHello* hello);
  // Sends hello to a new worker and reads its answer into `hello` (may be
  // null). Kills the worker when it fails.
  absl::Status Greet(CodecWorker& worker, CodecHello* hello);
  // One request and its ok reply on a worker of the pool, with the errors
  // mapped as Inspect documents.
  absl::StatusOr<CodecReply> Exchange(const Call& call);
  // The error of an exchange whose send or read ended with `io` (not kOk);
  // before the worker is released.
  absl::Status TransportError(CodecWorker& worker, CodecWorker::Io io,
                              const Call& call, absl::Status cancel_status);
  // The status of a request the codec answered with `failure`.
  absl::Status FailureStatus(const CodecFailure& failure,
                             absl::string_view path) const;
  // Rescale's work in its scratch directory: the exchange, the check of what
  // the codec wrote, the move to the output path (`*moved` once done).
  // Inspect and Rescale before they are counted: a failure that is a
  // timeout or a crash sets *failure (left as it is otherwise).
  absl::StatusOr<ContainerFacts> InspectUncounted(Env* env,
                                                  const std::string& path,
                                                  CodecOutcome* failure);
  absl::Status RescaleUncounted(const RescaleRequest& request,
                                CodecOutcome* failure);
  // Rescale's work in its scratch directory: the exchange, the check of what
  // the codec wrote, the move to the output path (`*moved` once done).
  absl::Status RescaleInScratch(const RescaleRequest& request,
                                const RandomAccessFile& source,
                                const std::string& scratch,
                                const std::string& out_name,
                                CodecOutcome* failure, bool* moved);
  void Log(absl::string_view line) const;

  const ExternalCodecOptions options_;
  const std::string name_;
  const uid_t uid_;
  const gid_t gid_;
  const ContainmentMode containment_;
  CodecHello hello_;
  // Started with argv[0] resolved on PATH.
  std::unique_ptr<CodecLauncher> launcher_;

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<CodecWorker>> idle_ ABSL_GUARDED_BY(mu_);
  // Workers idle, in use or starting.
  int live_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t started_ ABSL_GUARDED_BY(mu_) = 0;
  // Workers lost in a row (killed, or failed to start), for the backoff
  // before the next start.
  int failures_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time next_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace rbln

#endif  // RBLN_CORE_FORMAT_EXTERNAL_CODEC_H_
