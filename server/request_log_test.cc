#include "server/request_log.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/artifact/v1/artifact_service.pb.h"
#include "server/testing/captured_log.h"

namespace rbln {
namespace {

namespace v1 = ::rbln::artifact::v1;

using ::testing::HasSubstr;
using ::testing::Not;

class RequestLogTest : public ::testing::Test {
 protected:
  int Running() const {
    int running = 0;
    running_.ForEach([&](const RequestLog&) { ++running; });
    return running;
  }

  // A reply of about `bytes` bytes.
  static v1::ListArtifactsResponse BigReply(size_t bytes) {
    v1::ListArtifactsResponse reply;
    reply.set_store(std::string(bytes, 'x'));
    return reply;
  }

  rbln::testing::CapturedLog log_;
  RunningRequests running_;
  grpc::ServerContext context_;
};

TEST_F(RequestLogTest, AnErrorIsLoggedWithItsCallerAndReturnedAsGrpcs) {
  {
    RequestLog log(&running_, &context_, "SetKvcacheNumBlocks", "team/llama");
    EXPECT_EQ(Running(), 1);
    EXPECT_FALSE(log.finished());
    log.SetCaller({.identity = "uid:7", .is_operator = true});
    const grpc::Status status =
        log.Finish(absl::FailedPreconditionError("no room"));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(status.error_message(), "no room");
    EXPECT_TRUE(log.finished());
  }
  EXPECT_EQ(Running(), 0);
  const std::string line = log_.str();
  EXPECT_THAT(line, HasSubstr("method=SetKvcacheNumBlocks"));
  EXPECT_THAT(line, HasSubstr("artifact=\"team/llama\""));
  EXPECT_THAT(line, HasSubstr("caller=\"uid:7\" role=operator"));
  EXPECT_THAT(line, HasSubstr("outcome=FAILED_PRECONDITION"));
  EXPECT_THAT(line, HasSubstr("error=\"no room\""));
}

TEST_F(RequestLogTest, AWriteLogsItsCounts) {
  RequestLog log(&running_, &context_, "FitMemoryBudget", "a");
  log.SetCounts(absl::OkStatus(), 12, 10, /*written=*/true);
  EXPECT_TRUE(log.Finish(absl::OkStatus()).ok());
  EXPECT_THAT(log_.str(), HasSubstr("caller=none"));
  EXPECT_THAT(log_.str(), HasSubstr("previous=12 new=10 written=true"));
}

TEST_F(RequestLogTest, AReplyNoClientWouldTakeIsLoggedAsFailed) {
  RequestLog log(&running_, &context_, "ListArtifacts", "");
  grpc::Status status = log.FinishReply(BigReply(kMaxReplyMessageBytes + 1));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("bytes a gRPC client"));
  EXPECT_THAT(log_.str(), HasSubstr("outcome=RESOURCE_EXHAUSTED"));
  EXPECT_THAT(log_.str(), Not(HasSubstr("outcome=OK")));
}

TEST_F(RequestLogTest, AReplyWithinTheLimitIsOk) {
  RequestLog log(&running_, &context_, "ListArtifacts", "");
  EXPECT_TRUE(log.FinishReply(BigReply(1000)).ok());
  EXPECT_THAT(log_.str(), HasSubstr("outcome=OK"));
}

TEST_F(RequestLogTest, AnAnsweredReadIsLoggedOnceSent) {
  RequestLog log(&running_, &context_, "GetKvcacheNumBlocks", "a");
  log.LogOnceSent();
  EXPECT_TRUE(log.Finish(absl::OkStatus()).ok());
  EXPECT_THAT(log_.str(), Not(HasSubstr("GetKvcacheNumBlocks")));
  log.WriteLine();
  log.WriteLine();  // once only
  const std::string lines = log_.str();
  EXPECT_THAT(lines, HasSubstr("method=GetKvcacheNumBlocks"));
  EXPECT_EQ(lines.find("method="), lines.rfind("method="));
}

TEST_F(RequestLogTest, AnErrorOfAReadIsLoggedBeforeItsReply) {
  RequestLog log(&running_, &context_, "DescribeArtifact", "a");
  log.LogOnceSent();
  log.Finish(absl::NotFoundError("gone"));
  EXPECT_THAT(log_.str(), HasSubstr("outcome=NOT_FOUND"));
}

TEST_F(RequestLogTest, AnUnfinishedRequestIsNotLogged) {
  RequestLog log(&running_, &context_, "ListArtifacts", "");
  log.WriteLine();
  EXPECT_EQ(log_.str(), "");
}

}  // namespace
}  // namespace rbln
