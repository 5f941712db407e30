#include "server/request_log.h"

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "core/text.h"
#include "server/proto_conversions.h"
#include "spdlog/spdlog.h"

namespace rbln {

RequestLog::RequestLog(RunningRequests* running,
                       grpc::ServerContextBase* context,
                       absl::string_view method, absl::string_view artifact)
    : context_(context),
      method_(method),
      // A request may carry megabytes; the log shows 200 bytes of it.
      artifact_(artifact.substr(0, kMaxEchoBytes + 1)),
      start_(absl::Now()),
      running_(running, this) {}

void RequestLog::SetCounts(const absl::Status& status, uint64_t previous,
                           uint64_t next, bool written) {
  if (!status.ok()) return;
  counts_ = {LogField::Number("previous", static_cast<int64_t>(previous)),
             LogField::Number("new", static_cast<int64_t>(next)),
             LogField::Bool("written", written)};
  wrote_ = written;
}

void RequestLog::SetCaller(const Caller& caller) {
  caller_identity_ = caller.identity;
  caller_role_ = caller.role();
}

grpc::Status RequestLog::Finish(const absl::Status& status) {
  finished_at_ = absl::Now();
  status_ = status;
  finished_.store(true, std::memory_order_release);
  if (!once_sent_ || !status.ok()) WriteLine();
  return MarkedReply(context_, ToGrpc(status));
}

grpc::Status RequestLog::FinishReply(const google::protobuf::Message& reply) {
  const size_t bytes = reply.ByteSizeLong();
  if (bytes > kMaxReplyMessageBytes) {
    return Finish(absl::ResourceExhaustedError(absl::StrCat(
        "the reply is ", bytes, " bytes, more than the ", kMaxReplyMessageBytes,
        " bytes a gRPC client receives by default; ask for less")));
  }
  if (context_->IsCancelled()) {
    return Finish(absl::CancelledError(
        "the caller cancelled the call, or went away, before its reply"));
  }
  return Finish(absl::OkStatus());
}

void RequestLog::WriteLine() {
  if (!status_.has_value() || logged_) return;
  logged_ = true;
  const absl::Status& status = *status_;
  const int64_t ms = absl::ToInt64Milliseconds(finished_at_ - start_);
  const std::string outcome = absl::StatusCodeToString(status.code());
  absl::InlinedVector<LogField, 10> fields = {
      LogField::Word("method", method_),
      LogField::Text("artifact", artifact_, kMaxEchoBytes)};
  if (caller_identity_.has_value()) {
    fields.push_back(LogField::Text("caller", *caller_identity_));
    fields.push_back(LogField::Word("role", caller_role_));
  } else {
    fields.push_back(LogField::Word("caller", "none"));
  }
  fields.push_back(LogField::Word("outcome", outcome));
  fields.insert(fields.end(), counts_.begin(), counts_.end());
  fields.push_back(LogField::Number("duration_ms", ms));
  if (!status.ok()) {
    fields.push_back(LogField::Text("error", status.message()));
  }
  LogEvent(status.ok() ? spdlog::level::info : spdlog::level::warn,
           {method_, " ", outcome}, fields, finished_at_);
  // A change is on record before its reply; a read's line may follow its
  // reply by the sink's linger (server/log_sink.h).
  if (wrote_) spdlog::default_logger_raw()->flush();
}

}  // namespace rbln
