// ArtifactServiceImpl in-process (a real store, an in-process gRPC channel):
// the bound on reads waiting for the reader threads.
#include "server/artifact_service.h"

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/device/dram.h"
#include "core/env.h"
#include "core/store/store.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rbln/artifact/v1/reply_metadata.h"
#include "server/auth.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tools/synth.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;

// Bounds that only turn a hang into a failure.
constexpr absl::Duration kWaitLimit = absl::Seconds(60);

// One DescribeArtifact call on the callback stub, and how it ended.
struct Call {
  grpc::ClientContext context;
  v1::DescribeArtifactRequest request;
  v1::DescribeArtifactResponse reply;
  grpc::Status status;
};

class ReadQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The request log, to read back.
    previous_logger_ = spdlog::default_logger();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>(
        "test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log_)));
    SynthSpec spec;
    spec.payload_bytes = 64 << 10;
    absl::StatusOr<SynthResult> made =
        WriteSyntheticArtifact(Env::Default(), spec, tmp_.Join("tiny"));
    ASSERT_TRUE(made.ok()) << made.status();
    StoreOptions options;
    // A read that reaches the device waits here until Release(): it stands
    // for one that waits for the disk, and holds its reader thread.
    options.device_resolver =
        [this](const Artifact&) -> absl::StatusOr<DramChoice> {
      absl::MutexLock lock(&mu_);
      ++holding_;
      mu_.Await(absl::Condition(&released_));
      return absl::UnavailableError("no device in this test");
    };
    absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
        ArtifactStore::Open(tmp_.path(), std::move(options));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    absl::StatusOr<std::unique_ptr<Authenticator>> auth =
        Authenticator::Create({});
    ASSERT_TRUE(auth.ok()) << auth.status();
    auth_ = *std::move(auth);
    dram_ = NewSpecTableProvider();
    service_ = std::make_unique<ArtifactServiceImpl>(
        store_.get(), dram_.get(), auth_.get(), 1, ServerFacts{});
    grpc::ServerBuilder builder;
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::ArtifactService::NewStub(
        server_->InProcessChannel(grpc::ChannelArguments()));
  }

  void TearDown() override {
    Release();
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
    service_.reset();
    spdlog::set_default_logger(previous_logger_);
  }

  // Starts a Describe of "tiny" that checks every payload: never answered
  // from the cache, so it goes to the reader threads.
  void StartDescribe() {
    calls_.push_back(std::make_unique<Call>());
    Call* call = calls_.back().get();
    call->request.set_artifact("tiny");
    call->request.set_verify_payload(true);
    stub_->async()->DescribeArtifact(&call->context, &call->request,
                                     &call->reply,
                                     [this, call](grpc::Status status) {
                                       absl::MutexLock lock(&mu_);
                                       call->status = std::move(status);
                                       ++finished_;
                                     });
  }

  // Waits until `*counter` reaches `value`; false after kWaitLimit.
  bool WaitUntil(const int* counter, int value) {
    absl::MutexLock lock(&mu_);
    const auto reached = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return *counter >= value;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), kWaitLimit);
  }

  void Release() {
    absl::MutexLock lock(&mu_);
    released_ = true;
  }

  rbln::testing::TempDir tmp_;
  std::ostringstream log_;
  std::shared_ptr<spdlog::logger> previous_logger_;
  absl::Mutex mu_;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  int holding_ ABSL_GUARDED_BY(mu_) = 0;   // reads in the device resolver
  int finished_ ABSL_GUARDED_BY(mu_) = 0;  // calls that have their status
  std::vector<std::unique_ptr<Call>> calls_;
  std::unique_ptr<ArtifactStore> store_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<DramProvider> dram_;
  std::unique_ptr<ArtifactServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::ArtifactService::Stub> stub_;
};

TEST_F(ReadQueueTest, ReadsBeyondTheQueueAreRefusedTheOthersAnswered) {
  constexpr int kThreads = ArtifactServiceImpl::kReaderThreads;
  constexpr int kQueued = ArtifactServiceImpl::kMaxQueuedReads;
  constexpr int kRefused = 3;
  for (int i = 0; i < kThreads; ++i) StartDescribe();
  ASSERT_TRUE(WaitUntil(&holding_, kThreads));
  // Every reader thread holds a read, so nothing leaves the queue until
  // Release(): of what follows, kQueued wait and the rest are refused at
  // once, whatever order they arrive in.
  for (int i = 0; i < kQueued + kRefused; ++i) StartDescribe();
  ASSERT_TRUE(WaitUntil(&finished_, kRefused));
  Release();
  ASSERT_TRUE(WaitUntil(&finished_, kThreads + kQueued + kRefused));

  int answered = 0;
  int refused = 0;
  for (const std::unique_ptr<Call>& call : calls_) {
    if (call->status.ok()) {
      ++answered;
      EXPECT_EQ(call->reply.artifact(), "tiny");
    } else {
      ++refused;
      EXPECT_EQ(call->status.error_code(),
                grpc::StatusCode::RESOURCE_EXHAUSTED);
      EXPECT_EQ(call->status.error_message(),
                absl::StrCat("too many reads are waiting for the disk (",
                             kQueued, " queued for the daemon's ", kThreads,
                             " reader threads); retry with backoff"));
    }
    // A refusal is the handler's own reply, marked so; an answer is OK,
    // which only a handler gives, and unmarked.
    const auto& trailers = call->context.GetServerTrailingMetadata();
    auto mark = trailers.find(v1::kReplyMetadataKey);
    if (call->status.ok()) {
      EXPECT_EQ(mark, trailers.end());
    } else {
      ASSERT_NE(mark, trailers.end());
      EXPECT_EQ(mark->second, v1::kReplyMetadataValue);
    }
  }
  EXPECT_EQ(answered, kThreads + kQueued);
  EXPECT_EQ(refused, kRefused);

  // Each refusal is one request log line, naming the caller.
  server_->Shutdown();
  int logged = 0;
  for (absl::string_view line : absl::StrSplit(log_.str(), '\n')) {
    if (!absl::StrContains(line, "outcome=RESOURCE_EXHAUSTED")) continue;
    ++logged;
    EXPECT_THAT(line, HasSubstr("method=DescribeArtifact artifact=\"tiny\" "
                                "caller=\"anonymous\" role=reader"));
    EXPECT_THAT(line, HasSubstr("error=\"too many reads are waiting"));
  }
  EXPECT_EQ(logged, kRefused) << log_.str();
}

}  // namespace
}  // namespace rbln
