#include "client/failure.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/json_output.h"
#include "common/flag_errors.h"
#include "rapidjson/document.h"

namespace rbln::client {
namespace {

// Codes that gRPC itself gives a call that broke off (the connection closed,
// a deadline passed, a frame too big or garbled); any other code is a
// server's answer, marked or not (an older daemon, gRPC's UNIMPLEMENTED).
bool TransportMayCause(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kResourceExhausted:
      return true;
    default:
      return false;
  }
}

// What broke off a call that got no reply of the daemon's, as gRPC's `code`
// tells it: a `write` either way.
std::string WhatHappened(absl::StatusCode code, bool write) {
  switch (code) {
    case absl::StatusCode::kDeadlineExceeded:
      return write ? "no reply from the daemon in time during the write"
                   : "no reply from the daemon in time";
    case absl::StatusCode::kResourceExhausted:
      // gRPC's own limit on a message (4 MiB by default), or a limit of
      // the transport: not a closed connection.
      return write ? "a message of the write was larger than gRPC allows"
                   : "the reply was larger than gRPC allows";
    default:
      return write ? "the daemon closed the connection during the write"
                   : "the daemon closed the connection before replying";
  }
}

// The reason and counts of the daemon's ErrorDetail, into `failure`.
void AddErrorDetail(const rbln::artifact::v1::ErrorDetail& detail,
                    Failure* failure) {
  using Detail = rbln::artifact::v1::ErrorDetail;
  failure->details.emplace_back("reason", Detail::Reason_Name(detail.reason()));
  if (detail.has_current_num_blocks()) {
    failure->counts.emplace_back("current_num_blocks",
                                 detail.current_num_blocks());
  }
  if (detail.has_num_min_blocks()) {
    failure->counts.emplace_back("num_min_blocks", detail.num_min_blocks());
  }
  if (detail.has_num_full_blocks()) {
    failure->counts.emplace_back("num_full_blocks", detail.num_full_blocks());
  }
  if (detail.has_max_fitting_num_blocks()) {
    failure->counts.emplace_back("max_fitting_num_blocks",
                                 detail.max_fitting_num_blocks());
  }
}

}  // namespace

Failure ClientFailure(const absl::Status& status) {
  return {
      .status = status, .exit_code = kExitFailed, .text = FormatError(status)};
}

Failure UsageFailure(absl::string_view message) {
  return {.status = absl::InvalidArgumentError(message),
          .exit_code = kExitUsage,
          .text = FormatUsageError(message)};
}

Failure UnreachableFailure(absl::string_view server) {
  return {.status = absl::UnavailableError(absl::StrCat(
              "cannot reach rbln-artifactd at ", server, " (not running?)")),
          .exit_code = kExitUnreachable,
          .text = FormatUnreachable(server),
          .details = {{"server", std::string(server)}}};
}

Failure SocketDeniedFailure(absl::string_view path, uint32_t uid,
                            const std::optional<SocketFile>& file) {
  const std::string whom =
      file.has_value()
          ? absl::StrFormat("the socket is %s:%s %04o", file->owner,
                            file->group, file->mode & 07777)
          : "a directory on its path is closed to you";
  const std::string message =
      absl::StrCat("permission denied on the socket ", path, " (you are uid ",
                   uid, "; ", whom, "); ask for its group or run as its owner");
  return {.status = absl::PermissionDeniedError(message),
          .exit_code = kExitDenied,
          .text = absl::StrCat(kProgramName, ": ", message, "\n"),
          .details = {{"server", absl::StrCat("unix:", path)}}};
}

Failure CallFailure(const CliOptions& options, const absl::Status& status,
                    bool replied,
                    const rbln::artifact::v1::ErrorDetail* detail) {
  replied = replied || !TransportMayCause(status.code());
  Failure failure;
  if (!options.model_id.empty()) {
    failure.details.emplace_back("artifact", options.model_id);
  }
  if (!options.output_dir.empty()) {
    failure.details.emplace_back("output_dir", options.output_dir);
  }
  if (detail != nullptr) AddErrorDetail(*detail, &failure);
  if (replied) {
    std::string message(status.message());
    // The daemon speaks of its API ("replace"); name the flag.
    if (absl::IsAlreadyExists(status) && !options.output_dir.empty() &&
        !options.replace && !absl::StrContains(message, "--replace")) {
      absl::StrAppend(&message, "; add --replace to replace it");
    }
    failure.status = absl::Status(status.code(), message);
    failure.exit_code =
        absl::IsUnauthenticated(status) ? kExitDenied : kExitFailed;
    failure.text = FormatError(failure.status);
    return failure;
  }
  const std::string cause = absl::StrCat(
      absl::StatusCodeToString(status.code()), ": ", status.message());
  const bool changes = IsWriter(options.operation) && !options.dry_run;
  std::string message;
  if (changes) {
    const std::string what =
        options.output_dir.empty()
            ? "the artifact is either unchanged or fully at the new count"
            : "the output directory is either as it was or holds the "
              "complete resized copy";
    const std::string check =
        options.output_dir.empty() ? options.model_id : options.output_dir;
    message = absl::StrCat(WhatHappened(status.code(), true), "; ", what,
                           "; check with --get-kvcache-num-blocks "
                           "--model-id ",
                           check, " (gRPC: ", cause, ")");
    failure.details.emplace_back("outcome", "unknown");
  } else {
    message = absl::StrCat(WhatHappened(status.code(), false),
                           "; nothing was changed (",
                           IsWriter(options.operation) ? "a dry run" : "a read",
                           " changes nothing); retry (gRPC: ", cause, ")");
    failure.details.emplace_back("outcome", "unchanged");
  }
  failure.status = absl::Status(status.code(), message);
  failure.exit_code = kExitInterrupted;
  failure.text = FormatError(failure.status);
  return failure;
}

int ReportFailure(const Failure& failure, bool json, std::ostream& out,
                  std::ostream& err) {
  err << failure.text;
  if (json) out << FormatJsonError(failure);
  return failure.exit_code;
}

std::string FormatJsonError(const Failure& failure) {
  rapidjson::Document doc(rapidjson::kObjectType);
  auto& alloc = doc.GetAllocator();
  auto text = [&alloc](absl::string_view s) {
    return rapidjson::Value(s.data(),
                            static_cast<rapidjson::SizeType>(s.size()), alloc);
  };
  rapidjson::Value details(rapidjson::kObjectType);
  for (const auto& [key, value] : failure.details) {
    details.AddMember(text(key), text(value), alloc);
  }
  for (const auto& [key, value] : failure.counts) {
    details.AddMember(text(key), rapidjson::Value(value), alloc);
  }
  rapidjson::Value error(rapidjson::kObjectType);
  error.AddMember("code", text(absl::StatusCodeToString(failure.status.code())),
                  alloc);
  error.AddMember("code_number", static_cast<int>(failure.status.code()),
                  alloc);
  error.AddMember("message", text(failure.status.message()), alloc);
  error.AddMember("details", details, alloc);
  doc.AddMember("error", error, alloc);
  return ToJsonLine(doc);
}

std::string FormatError(const absl::Status& status) {
  return absl::StrCat(kProgramName, ": error (",
                      absl::StatusCodeToString(status.code()),
                      "): ", status.message(), "\n");
}

std::string FormatUnreachable(absl::string_view server) {
  return absl::StrCat(kProgramName, ": cannot reach rbln-artifactd at ", server,
                      ". Start it with: rbln-artifactd --store DIR --listen ",
                      server,
                      "\n(or give --server ADDR of a running daemon)\n");
}

std::string FormatUsageError(absl::string_view message) {
  return FormatFlagError(kProgramName, message);
}

}  // namespace rbln::client
