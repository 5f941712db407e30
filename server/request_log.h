// RequestLog: the one log line of a request to ArtifactServiceImpl (logfmt,
// or JSON: server/log_format.h), naming its method, artifact, caller, role,
// outcome and duration. The line is logged when the handler finishes, or,
// for an answered read, once its reply has been sent (read_reactor.h),
// stamped with the time the handler finished (server/log_sink.h writes it
// later). While the request runs it is on a RunningRequests list (for the
// log of a forced exit).
//
// One thread at a time per RequestLog (the handler's, then the one that
// sends the reply); the list it joins is thread-safe.
#ifndef RBLN_SERVER_REQUEST_LOG_H_
#define RBLN_SERVER_REQUEST_LOG_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "server/auth.h"
#include "server/log_format.h"
#include "server/running_list.h"

namespace rbln {

// gRPC's default limit on a message a client receives: a larger reply
// reaches no client that keeps the default (each of ours does).
inline constexpr size_t kMaxReplyMessageBytes = 4 << 20;

class RequestLog;
using RunningRequests = RunningList<RequestLog>;

class RequestLog {
 public:
  // Joins `running` (which must outlive it) for the request of `context`
  // to `method` (a literal: only its view is kept) naming `artifact` (kept
  // to kMaxEchoBytes and one byte more, so that the log shows it was cut).
  RequestLog(RunningRequests* running, grpc::ServerContextBase* context,
             absl::string_view method, absl::string_view artifact);
  RequestLog(const RequestLog&) = delete;
  RequestLog& operator=(const RequestLog&) = delete;

  absl::string_view method() const { return method_; }
  const std::string& artifact() const { return artifact_; }
  absl::Time start() const { return start_; }
  // Finish has run: the request is answered, though it may still be on
  // the running list (until its reply is sent).
  bool finished() const { return finished_.load(std::memory_order_acquire); }

  // The counts of a write that ended in `status` (none for an error).
  void SetCounts(const absl::Status& status, uint64_t previous, uint64_t next,
                 bool written);
  // The identified caller; caller=none until then.
  void SetCaller(const Caller& caller);

  // A read's answer is logged once its reply has been sent (ReadReactor):
  // Finish then only notes the outcome, unless it is an error (written
  // before the reply, as every line at warn: server/log_sink.h).
  void LogOnceSent() { once_sent_ = true; }

  // Notes the outcome, logs the line (unless LogOnceSent and OK), and
  // returns the reply's status, an error marked as the handler's own
  // (MarkedReply, server/proto_conversions.h).
  grpc::Status Finish(const absl::Status& status);
  // Finish(OK) for a synchronous handler whose reply is `reply`, unless it
  // cannot be delivered: a reply over kMaxReplyMessageBytes is
  // RESOURCE_EXHAUSTED (logged as such, and said to the caller instead of a
  // reply it would refuse), and a call its caller cancelled or left is
  // CANCELLED; never outcome=OK for a caller who got nothing.
  grpc::Status FinishReply(const google::protobuf::Message& reply);

  // Logs the line of a finished request, once; nothing for one not finished.
  // A change's line is flushed before its reply.
  void WriteLine();

 private:
  grpc::ServerContextBase* const context_;
  const absl::string_view method_;
  const std::string artifact_;
  const absl::Time start_;
  // Once identified; caller=none until then.
  std::optional<std::string> caller_identity_;
  absl::string_view caller_role_;
  std::vector<LogField> counts_;
  bool wrote_ = false;
  bool once_sent_ = false;
  // Set by Finish.
  std::optional<absl::Status> status_;
  absl::Time finished_at_;
  std::atomic<bool> finished_{false};
  bool logged_ = false;
  // Last: the request is listed once the rest is set.
  const RunningRequests::Node running_;
};

}  // namespace rbln

#endif  // RBLN_SERVER_REQUEST_LOG_H_
