#include "client/run.h"

#include <chrono>
#include <functional>
#include <optional>
#include <random>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/failure.h"
#include "client/json_output.h"
#include "client/requests.h"
#include "client/text_output.h"
#include "google/rpc/status.pb.h"
#include "grpcpp/grpcpp.h"
#include "rbln/artifact/v1/reply_metadata.h"

namespace rbln::client {
namespace {

namespace v1 = ::rbln::artifact::v1;

// A resize of a large artifact copies its payloads: allow it time.
constexpr std::chrono::hours kWriteDeadline{1};
constexpr std::chrono::seconds kReadDeadline{60};
constexpr std::chrono::seconds kProgressDeadline{1};
constexpr absl::Duration kProgressInterval = absl::Milliseconds(200);
// Erases the progress bar: back to column 0, clear to the end of the line.
constexpr char kClearLine[] = "\r\033[K";

template <typename Duration>
void SetDeadline(grpc::ClientContext& context, Duration timeout) {
  context.set_deadline(std::chrono::system_clock::now() + timeout);
}

absl::Status ToAbsl(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

// Whether the daemon's handler produced the call's status (reply_metadata.h).
bool Replied(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(v1::kReplyMetadataKey);
  return it != trailers.end() && it->second == v1::kReplyMetadataValue;
}

// The ErrorDetail in the status's google.rpc.Status details (the
// grpc-status-details-bin trailer), if the daemon sent one.
std::optional<v1::ErrorDetail> ReadErrorDetail(const grpc::Status& status) {
  google::rpc::Status details;
  if (status.error_details().empty() ||
      !details.ParseFromString(status.error_details())) {
    return std::nullopt;
  }
  for (const google::protobuf::Any& any : details.details()) {
    v1::ErrorDetail detail;
    if (any.Is<v1::ErrorDetail>() && any.UnpackTo(&detail)) return detail;
  }
  return std::nullopt;
}

// Reports a failed call (CallFailure); returns the exit code.
int ReportCallFailure(const CliOptions& options,
                      const grpc::ClientContext& context,
                      const grpc::Status& status, std::ostream& out,
                      std::ostream& err) {
  const std::optional<v1::ErrorDetail> detail = ReadErrorDetail(status);
  return ReportFailure(CallFailure(options, ToAbsl(status), Replied(context),
                                   detail.has_value() ? &*detail : nullptr),
                       options.json, out, err);
}

// Prints `reply` as JSON or as `human`; returns the exit code.
int PrintReply(const google::protobuf::Message& reply, const std::string& human,
               bool json, std::ostream& out, std::ostream& err) {
  if (!json) {
    out << human;
    return kExitOk;
  }
  absl::StatusOr<std::string> text = FormatJson(reply);
  if (!text.ok()) {
    return ReportFailure(ClientFailure(text.status()), json, out, err);
  }
  out << *text;
  return kExitOk;
}

using ResizeCall =
    std::function<grpc::Status(grpc::ClientContext*, v1::ResizeResponse*)>;

// Runs `call` in `context`; with an `operation_id`, on a second thread while
// this one draws the write's progress on `err` until it returns, and prints
// `waiting_notice` once the write has waited for another writer for
// kWaitNoticeAfter.
grpc::Status RunWrite(const ResizeCall& call,
                      v1::ArtifactService::StubInterface& stub,
                      const std::string& operation_id,
                      const std::string& waiting_notice, std::ostream& err,
                      grpc::ClientContext& context, v1::ResizeResponse* reply) {
  SetDeadline(context, kWriteDeadline);
  if (operation_id.empty()) return call(&context, reply);

  grpc::Status status;
  absl::Notification done;
  std::thread writer([&] {
    status = call(&context, reply);
    done.Notify();
  });
  bool drawn = false;
  std::optional<absl::Time> waiting_since;
  bool noticed = false;
  v1::GetWriteProgressRequest request;
  request.set_operation_id(operation_id);
  while (!done.WaitForNotificationWithTimeout(kProgressInterval)) {
    grpc::ClientContext progress_context;
    SetDeadline(progress_context, kProgressDeadline);
    v1::GetWriteProgressResponse progress;
    // Progress is a courtesy: a failed poll only skips a redraw.
    if (!stub.GetWriteProgress(&progress_context, request, &progress).ok()) {
      continue;
    }
    if (progress.state() == v1::WRITE_STATE_WAITING) {
      if (!waiting_since.has_value()) waiting_since = absl::Now();
      if (!noticed && absl::Now() - *waiting_since >= kWaitNoticeAfter) {
        err << (drawn ? kClearLine : "") << waiting_notice << std::flush;
        noticed = true;
        drawn = false;
      }
    } else {
      waiting_since.reset();
    }
    if (progress.bytes_total() > 0) {
      err << FormatProgressBar(progress.bytes_done(), progress.bytes_total())
          << std::flush;
      drawn = true;
    }
  }
  writer.join();
  if (drawn) err << kClearLine << std::flush;
  return status;
}

int RunResize(const CliOptions& options,
              v1::ArtifactService::StubInterface& stub, const RunOptions& run,
              std::ostream& out, std::ostream& err) {
  std::string operation_id =
      run.terminal && !options.dry_run ? RandomOperationId() : "";
  ResizeCall call;
  if (options.operation == Operation::kSet) {
    v1::SetKvcacheNumBlocksRequest request =
        BuildSetRequest(options, operation_id);
    call = [&stub, request](grpc::ClientContext* context,
                            v1::ResizeResponse* reply) {
      return stub.SetKvcacheNumBlocks(context, request, reply);
    };
  } else {
    v1::FitMemoryBudgetRequest request = BuildFitRequest(options, operation_id);
    call = [&stub, request](grpc::ClientContext* context,
                            v1::ResizeResponse* reply) {
      return stub.FitMemoryBudget(context, request, reply);
    };
  }
  v1::ResizeResponse reply;
  grpc::ClientContext context;
  grpc::Status status =
      RunWrite(call, stub, operation_id, FormatWaitingForLock(options), err,
               context, &reply);
  if (!status.ok()) {
    return ReportCallFailure(options, context, status, out, err);
  }
  err << FormatWarnings(reply.warnings());
  const ResizeOutput human = FormatResize(options, reply);
  if (!options.json) err << human.err;
  return PrintReply(reply, human.out, options.json, out, err);
}

// `--list`: follows the pages, printing each as it comes, so that neither
// side holds the whole listing.
int RunList(const CliOptions& options, v1::ArtifactService::StubInterface& stub,
            std::ostream& out, std::ostream& err) {
  v1::ListArtifactsRequest request;
  request.set_prefix(options.prefix);
  ListTotals totals;
  for (bool first = true;; first = false) {
    v1::ListArtifactsResponse page;
    grpc::ClientContext context;
    SetDeadline(context, kReadDeadline);
    grpc::Status status = stub.ListArtifacts(&context, request, &page);
    if (!status.ok()) {
      return ReportCallFailure(options, context, status, out, err);
    }
    totals.Add(page);
    if (options.json) {
      absl::StatusOr<std::string> lines = FormatListPageJson(page);
      if (!lines.ok()) {
        return ReportFailure(ClientFailure(lines.status()), true, out, err);
      }
      out << *lines << std::flush;
    } else {
      out << FormatListPage(page, first) << std::flush;
    }
    if (page.next_page_token().empty()) break;
    request.set_page_token(page.next_page_token());
  }
  out << (options.json ? FormatListEndJson(totals.skipped, totals.not_readable)
                       : FormatListEnd(totals));
  return kExitOk;
}

// `--colocate`: FitTogether, one call for the whole group.
int RunGroup(const CliOptions& options,
             v1::ArtifactService::StubInterface& stub, std::ostream& out,
             std::ostream& err) {
  grpc::ClientContext context;
  SetDeadline(context, kWriteDeadline);
  v1::FitTogetherResponse reply;
  grpc::Status status =
      stub.FitTogether(&context, BuildFitTogetherRequest(options), &reply);
  if (!status.ok())
    return ReportCallFailure(options, context, status, out, err);
  err << FormatWarnings(reply.warnings());
  return PrintReply(reply, FormatFitTogether(reply), options.json, out, err);
}

}  // namespace

int RunCommand(const CliOptions& options,
               v1::ArtifactService::StubInterface& stub, const RunOptions& run,
               std::ostream& out, std::ostream& err) {
  if (!options.colocate.empty()) return RunGroup(options, stub, out, err);
  if (IsWriter(options.operation)) {
    return RunResize(options, stub, run, out, err);
  }
  grpc::ClientContext context;
  SetDeadline(context, kReadDeadline);
  auto finish = [&](const grpc::Status& status,
                    const google::protobuf::Message& reply,
                    const std::string& human) {
    if (!status.ok()) {
      return ReportCallFailure(options, context, status, out, err);
    }
    return PrintReply(reply, human, options.json, out, err);
  };
  switch (options.operation) {
    case Operation::kGet: {
      v1::GetKvcacheNumBlocksResponse reply;
      grpc::Status status =
          stub.GetKvcacheNumBlocks(&context, BuildGetRequest(options), &reply);
      return finish(status, reply, FormatGet(reply));
    }
    case Operation::kDescribe: {
      v1::DescribeArtifactResponse reply;
      grpc::Status status = stub.DescribeArtifact(
          &context, BuildDescribeRequest(options), &reply);
      if (status.ok()) err << FormatWarnings(reply.warnings());
      return finish(status, reply, FormatDescribe(reply));
    }
    case Operation::kList:
      return RunList(options, stub, out, err);
    case Operation::kDeviceInfo: {
      v1::GetDeviceInfoResponse reply;
      grpc::Status status =
          stub.GetDeviceInfo(&context, v1::GetDeviceInfoRequest(), &reply);
      if (status.ok()) err << FormatWarnings(reply.warnings());
      return finish(status, reply, FormatDeviceInfo(reply));
    }
    case Operation::kServerInfo: {
      v1::GetServerInfoResponse reply;
      grpc::Status status =
          stub.GetServerInfo(&context, v1::GetServerInfoRequest(), &reply);
      return finish(status, reply, FormatServerInfo(reply));
    }
    case Operation::kSet:
    case Operation::kFitBudget:
      break;  // handled above
  }
  return ReportFailure(ClientFailure(absl::InternalError("unknown operation")),
                       options.json, out, err);
}

std::string RandomOperationId() {
  std::random_device random;
  return absl::StrFormat("%08x%08x%08x%08x", random(), random(), random(),
                         random());
}

}  // namespace rbln::client
