#include "client/failure.h"

#include <optional>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"

namespace rbln::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(FailureTest, JsonErrorObject) {
  Failure failure{
      .status = absl::AbortedError("current count is 32, \"expected\" 64\n"),
      .exit_code = kExitFailed,
      .details = {{"artifact", "/srv/store/llama"}}};
  rapidjson::Document doc = ParseJsonLine(FormatJsonError(failure));
  ASSERT_TRUE(doc.HasMember("error"));
  const rapidjson::Value& error = doc["error"];
  EXPECT_STREQ(error["code"].GetString(), "ABORTED");
  EXPECT_EQ(error["code_number"].GetInt(), 10);
  EXPECT_STREQ(error["message"].GetString(),
               "current count is 32, \"expected\" 64\n");
  ASSERT_TRUE(error["details"].IsObject());
  EXPECT_STREQ(error["details"]["artifact"].GetString(), "/srv/store/llama");

  std::ostringstream out, err;
  failure.text = "shown\n";
  EXPECT_EQ(ReportFailure(failure, /*json=*/false, out, err), kExitFailed);
  EXPECT_EQ(out.str(), "");
  EXPECT_EQ(err.str(), "shown\n");
  EXPECT_EQ(ReportFailure(failure, /*json=*/true, out, err), kExitFailed);
  EXPECT_EQ(out.str(), FormatJsonError(failure));
}

std::string Detail(const Failure& failure, absl::string_view key) {
  for (const auto& [k, v] : failure.details) {
    if (k == key) return v;
  }
  return "(none)";
}

TEST(FailureTest, StatusesTheDaemonReturnedExitOneOrFour) {
  Failure aborted = CallFailure(Writer(), absl::AbortedError("count is 32"),
                                /*replied=*/true);
  EXPECT_EQ(aborted.exit_code, kExitFailed);
  EXPECT_EQ(aborted.text, "rbln-artifact: error (ABORTED): count is 32\n");
  EXPECT_EQ(Detail(aborted, "artifact"), "/srv/store/llama");
  EXPECT_EQ(Detail(aborted, "outcome"), "(none)");

  // The daemon's own UNAVAILABLE (shutting down) is a known outcome.
  Failure stopping = CallFailure(
      Writer(), absl::UnavailableError("shutting down; nothing was changed"),
      /*replied=*/true);
  EXPECT_EQ(stopping.exit_code, kExitFailed);
  EXPECT_THAT(stopping.text, HasSubstr("nothing was changed"));

  EXPECT_EQ(
      CallFailure(Writer(), absl::UnauthenticatedError("who?"), true).exit_code,
      kExitDenied);
  // A path outside the store is the store's refusal, not the caller's.
  EXPECT_EQ(CallFailure(Writer(), absl::PermissionDeniedError("outside"), true)
                .exit_code,
            kExitFailed);
}

TEST(FailureTest, ErrorDetailAddsReasonAndCountsAsJsonNumbers) {
  rbln::artifact::v1::ErrorDetail detail;
  detail.set_reason(rbln::artifact::v1::ErrorDetail::BELOW_MIN_BLOCKS);
  detail.set_artifact("llama");
  detail.set_current_num_blocks(32);
  detail.set_num_min_blocks(17);
  detail.set_num_full_blocks(64);
  const absl::Status below =
      absl::InvalidArgumentError("kvcache_num_blocks 3 is below the minimum");
  Failure failure = CallFailure(Writer(), below, /*replied=*/true, &detail);
  // People see the daemon's message, as without a detail.
  EXPECT_EQ(failure.text, CallFailure(Writer(), below, true).text);
  rapidjson::Document doc = ParseJsonLine(FormatJsonError(failure));
  const rapidjson::Value& details = doc["error"]["details"];
  EXPECT_STREQ(details["reason"].GetString(), "BELOW_MIN_BLOCKS");
  EXPECT_STREQ(details["artifact"].GetString(), "/srv/store/llama");
  ASSERT_TRUE(details["current_num_blocks"].IsUint64());
  EXPECT_EQ(details["current_num_blocks"].GetUint64(), 32u);
  EXPECT_EQ(details["num_min_blocks"].GetUint64(), 17u);
  EXPECT_EQ(details["num_full_blocks"].GetUint64(), 64u);

  // Counts the detail leaves unset are absent, not zero.
  rbln::artifact::v1::ErrorDetail cas;
  cas.set_reason(rbln::artifact::v1::ErrorDetail::CAS_MISMATCH);
  cas.set_current_num_blocks(0);
  rapidjson::Document cas_doc = ParseJsonLine(FormatJsonError(
      CallFailure(Writer(), absl::AbortedError("stale"), true, &cas)));
  const rapidjson::Value& cas_details = cas_doc["error"]["details"];
  EXPECT_STREQ(cas_details["reason"].GetString(), "CAS_MISMATCH");
  EXPECT_EQ(cas_details["current_num_blocks"].GetUint64(), 0u);
  EXPECT_FALSE(cas_details.HasMember("num_min_blocks"));
  EXPECT_FALSE(cas_details.HasMember("num_full_blocks"));
  EXPECT_FALSE(cas_details.HasMember("max_fitting_num_blocks"));

  // A count the device cannot hold says the largest that fits.
  rbln::artifact::v1::ErrorDetail exceeds;
  exceeds.set_reason(rbln::artifact::v1::ErrorDetail::EXCEEDS_DEVICE);
  exceeds.set_max_fitting_num_blocks(23);
  rapidjson::Document exceeds_doc = ParseJsonLine(FormatJsonError(CallFailure(
      Writer(), absl::FailedPreconditionError("too big"), true, &exceeds)));
  const rapidjson::Value& exceeds_details = exceeds_doc["error"]["details"];
  EXPECT_STREQ(exceeds_details["reason"].GetString(), "EXCEEDS_DEVICE");
  EXPECT_EQ(exceeds_details["max_fitting_num_blocks"].GetUint64(), 23u);
}

TEST(FailureTest, AlreadyExistsNamesReplace) {
  const absl::Status exists = absl::AlreadyExistsError(
      "output directory copy already exists; choose a new directory");
  Failure copy = CallFailure(Writer("/srv/store/copy"), exists, true);
  EXPECT_EQ(copy.exit_code, kExitFailed);
  EXPECT_THAT(copy.text, HasSubstr("exists; choose a new directory; add "
                                   "--replace to replace it\n"));
  EXPECT_THAT(copy.status.message(), HasSubstr("add --replace"));
  EXPECT_EQ(Detail(copy, "output_dir"), "/srv/store/copy");
  // Without --output-dir (an operation id in use) there is nothing to replace.
  EXPECT_THAT(CallFailure(Writer(), exists, true).text,
              Not(HasSubstr("--replace")));
}

TEST(FailureTest, InterruptedWriteSaysTheOutcomeIsUnknown) {
  const absl::Status closed = absl::UnavailableError("Socket closed");
  Failure in_place = CallFailure(Writer(), closed, /*replied=*/false);
  EXPECT_EQ(in_place.exit_code, kExitInterrupted);
  EXPECT_EQ(in_place.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(in_place.text,
            "rbln-artifact: error (UNAVAILABLE): the daemon closed the "
            "connection during the write; the artifact is either unchanged "
            "or fully at the new count; check with --get-kvcache-num-blocks "
            "--model-id /srv/store/llama (gRPC: UNAVAILABLE: Socket "
            "closed)\n");
  EXPECT_EQ(Detail(in_place, "outcome"), "unknown");

  Failure copy = CallFailure(Writer("/srv/store/copy"), closed, false);
  EXPECT_THAT(copy.text, HasSubstr("the output directory is either as it was "
                                   "or holds the complete resized copy; check "
                                   "with --get-kvcache-num-blocks --model-id "
                                   "/srv/store/copy (gRPC: "));
  Failure late = CallFailure(
      Writer(), absl::DeadlineExceededError("Deadline Exceeded"), false);
  EXPECT_EQ(late.exit_code, kExitInterrupted);
  EXPECT_THAT(late.text, HasSubstr("no reply from the daemon in time during "
                                   "the write"));
  // Unmarked, but no transport gives these: a server's answer.
  for (const absl::Status& answer : {absl::UnimplementedError("unknown method"),
                                     absl::AbortedError("count is 32")}) {
    Failure failure = CallFailure(Writer(), answer, /*replied=*/false);
    EXPECT_EQ(failure.exit_code, kExitFailed) << answer;
    EXPECT_EQ(failure.text, FormatError(answer));
  }
}

TEST(FailureTest, InterruptedReadChangedNothing) {
  CliOptions get;
  get.operation = Operation::kGet;
  get.model_id = "/srv/store/llama";
  Failure read = CallFailure(get, absl::UnavailableError("Socket closed"),
                             /*replied=*/false);
  EXPECT_EQ(read.exit_code, kExitInterrupted);
  EXPECT_THAT(read.text, HasSubstr("the daemon closed the connection before "
                                   "replying; nothing was changed (a read "
                                   "changes nothing); retry (gRPC: "
                                   "UNAVAILABLE: Socket closed)\n"));
  EXPECT_EQ(Detail(read, "outcome"), "unchanged");
  // A reply over gRPC's message limit is no closed connection.
  Failure big =
      CallFailure(get,
                  absl::ResourceExhaustedError(
                      "Received message larger than max (4710060 vs. 4194304)"),
                  false);
  EXPECT_EQ(big.exit_code, kExitInterrupted);
  EXPECT_THAT(big.text, HasSubstr("the reply was larger than gRPC allows; "
                                  "nothing was changed"));
  EXPECT_THAT(big.text, HasSubstr("(gRPC: RESOURCE_EXHAUSTED: Received "
                                  "message larger than max (4710060 vs. "
                                  "4194304))"));
  EXPECT_THAT(big.text, Not(HasSubstr("closed the connection")));
  CliOptions dry_run = Writer();
  dry_run.dry_run = true;
  EXPECT_THAT(CallFailure(dry_run, absl::CancelledError("gone"), false).text,
              HasSubstr("(a dry run changes nothing)"));
}

TEST(FailureTest, ConnectionFailures) {
  Failure unreachable = UnreachableFailure("unix:/run/x.sock");
  EXPECT_EQ(unreachable.exit_code, kExitUnreachable);
  EXPECT_EQ(unreachable.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(unreachable.text, FormatUnreachable("unix:/run/x.sock"));
  EXPECT_EQ(Detail(unreachable, "server"), "unix:/run/x.sock");

  Failure denied = SocketDeniedFailure(
      "/run/x.sock", 65534,
      SocketFile{.owner = "root", .group = "rbln", .mode = 0140660});
  EXPECT_EQ(denied.exit_code, kExitDenied);
  EXPECT_EQ(denied.status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(denied.text,
            "rbln-artifact: permission denied on the socket /run/x.sock (you "
            "are uid 65534; the socket is root:rbln 0660); ask for its group "
            "or run as its owner\n");
  EXPECT_THAT(SocketDeniedFailure("/run/x.sock", 1000, std::nullopt).text,
              HasSubstr("(you are uid 1000; a directory on its path is closed "
                        "to you)"));
}

TEST(FailureTest, Diagnostics) {
  EXPECT_EQ(
      FormatError(absl::FailedPreconditionError("budget fits 1 block")),
      "rbln-artifact: error (FAILED_PRECONDITION): budget fits 1 block\n");
  EXPECT_THAT(
      FormatUnreachable("unix:/run/rbln-artifactd/rbln-artifactd.sock"),
      HasSubstr("rbln-artifact: cannot reach rbln-artifactd at "
                "unix:/run/rbln-artifactd/rbln-artifactd.sock. Start it with: "
                "rbln-artifactd --store DIR --listen "
                "unix:/run/rbln-artifactd/rbln-artifactd.sock\n"));
}

}  // namespace
}  // namespace rbln::client
