// ArtifactServiceImpl in-process (a real store, an in-process gRPC channel):
// the bound on reads waiting for the reader threads, and Describe's replies.
#include "server/artifact_service.h"

#include <atomic>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/device/device_spec.h"
#include "core/device/dram.h"
#include "core/os/env.h"
#include "core/store/store.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
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

// What the store adds to a provider's source line: where the artifact's NPU
// came from.
constexpr char kNpuSource[] = "; NPU RBLN-CA12 from rbln_config.json's npu";

// Bounds that only turn a hang into a failure.
constexpr absl::Duration kWaitLimit = absl::Seconds(60);

// One DescribeArtifact call on the callback stub, and how it ended.
struct Call {
  grpc::ClientContext context;
  v1::DescribeArtifactRequest request;
  v1::DescribeArtifactResponse reply;
  grpc::Status status;
};

// A device provider whose answer a test gives; it counts the times asked.
class TestProvider final : public DramProvider {
 public:
  explicit TestProvider(std::function<absl::StatusOr<DramChoice>()> answer)
      : answer_(std::move(answer)) {}
  absl::StatusOr<DramChoice> ForNpu(absl::string_view) override {
    ++asked;
    return answer_();
  }
  DeviceReport Report() override { return {}; }
  uint64_t AnswersGeneration() override { return generation.load(); }

  std::atomic<int> asked{0};
  std::atomic<uint64_t> generation{0};  // 0: asked every time

 private:
  const std::function<absl::StatusOr<DramChoice>()> answer_;
};

// The service over a store holding the synthetic artifact "tiny", served
// in-process, its request log kept in log_.
class InProcessServiceTest : public ::testing::Test {
 protected:
  // What the store is opened with; device_provider_, when set, is its
  // device provider.
  virtual StoreOptions Options() = 0;

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
    StoreOptions options = Options();
    options.device_provider = device_provider_.get();
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
    channel_ = server_->InProcessChannel(grpc::ChannelArguments());
    stub_ = v1::ArtifactService::NewStub(channel_);
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
    service_.reset();
    spdlog::set_default_logger(previous_logger_);
  }

  // How many lines of the request log contain `text`. Read only while no
  // call runs: after server_->Shutdown(), or before any other call.
  int LinesWith(absl::string_view text) const {
    int lines = 0;
    for (absl::string_view line : absl::StrSplit(log_.str(), '\n')) {
      if (absl::StrContains(line, text)) ++lines;
    }
    return lines;
  }

  rbln::testing::TempDir tmp_;
  std::ostringstream log_;
  std::unique_ptr<TestProvider> device_provider_;  // outlives store_
  std::shared_ptr<spdlog::logger> previous_logger_;
  std::unique_ptr<ArtifactStore> store_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<DramProvider> dram_;
  std::unique_ptr<ArtifactServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ArtifactService::Stub> stub_;
};

// The bound on reads waiting for the reader threads.
class ReadQueueTest : public InProcessServiceTest {
 protected:
  StoreOptions Options() override {
    // A read that reaches the device waits here until Release(): it stands
    // for one that waits for the disk, and holds its reader thread.
    device_provider_ =
        std::make_unique<TestProvider>([this]() -> absl::StatusOr<DramChoice> {
          absl::MutexLock lock(&mu_);
          ++holding_;
          mu_.Await(absl::Condition(&released_));
          return absl::UnavailableError("no device in this test");
        });
    return StoreOptions();
  }

  void TearDown() override {
    Release();
    InProcessServiceTest::TearDown();
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

  absl::Mutex mu_;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  int holding_ ABSL_GUARDED_BY(mu_) = 0;   // reads in the device resolver
  int finished_ ABSL_GUARDED_BY(mu_) = 0;  // calls that have their status
  std::vector<std::unique_ptr<Call>> calls_;
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

TEST_F(ReadQueueTest, ARunningRequestIsListedUntilItEnds) {
  constexpr int kThreads = ArtifactServiceImpl::kReaderThreads;
  EXPECT_THAT(service_->DescribeRunning(), ::testing::IsEmpty());
  for (int i = 0; i < kThreads; ++i) StartDescribe();
  ASSERT_TRUE(WaitUntil(&holding_, kThreads));
  // What a forced exit would log: every read held in the device resolver.
  std::vector<std::string> running = service_->DescribeRunning();
  ASSERT_EQ(running.size(), static_cast<size_t>(kThreads));
  for (const std::string& line : running) {
    EXPECT_THAT(line, ::testing::StartsWith(
                          "DescribeArtifact artifact=\"tiny\" running_ms="));
  }
  Release();
  ASSERT_TRUE(WaitUntil(&finished_, kThreads));
  server_->Shutdown();
  EXPECT_THAT(service_->DescribeRunning(), ::testing::IsEmpty());
}

// Describe sends a reply made once for the artifact read, its name and the
// device (server/describe_replies.h): what changes any of them changes the
// reply.
class DescribeReplyTest : public InProcessServiceTest {
 protected:
  StoreOptions Options() override {
    StoreOptions options;
    // Every read is kept at once, so that the second Describe is the
    // cache's.
    options.artifact_cache_racy_window = absl::ZeroDuration();
    device_provider_ =
        std::make_unique<TestProvider>([this]() -> absl::StatusOr<DramChoice> {
          absl::MutexLock lock(&mu_);
          return choice_;
        });
    return options;
  }

  void SetUp() override {
    absl::StatusOr<DeviceSpec> spec = LookupDeviceSpec("RBLN-CA12");
    ASSERT_TRUE(spec.ok()) << spec.status();
    SetChoice(DramChoice{*spec, "the first device", {}});
    InProcessServiceTest::SetUp();
  }

  v1::DescribeArtifactResponse Describe(const std::string& name = "tiny",
                                        bool verify_payload = false) {
    grpc::ClientContext context;
    v1::DescribeArtifactRequest request;
    request.set_artifact(name);
    request.set_verify_payload(verify_payload);
    v1::DescribeArtifactResponse reply;
    grpc::Status status = stub_->DescribeArtifact(&context, request, &reply);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return reply;
  }

  void SetChoice(absl::StatusOr<DramChoice> choice) {
    absl::MutexLock lock(&mu_);
    choice_ = std::move(choice);
  }

  absl::Mutex mu_;
  absl::StatusOr<DramChoice> choice_ ABSL_GUARDED_BY(mu_);
};

// Only a caller on the daemon's Unix socket shares its file system: any
// other (here gRPC's in-process transport, neither TCP nor Unix) names
// artifacts as the store does.
TEST_F(DescribeReplyTest, ACallerNotOnTheUnixSocketNamesNoAbsolutePath) {
  grpc::ClientContext context;
  v1::GetKvcacheNumBlocksRequest request;
  request.set_artifact(tmp_.Join("tiny"));
  v1::GetKvcacheNumBlocksResponse reply;
  grpc::Status status = stub_->GetKvcacheNumBlocks(&context, request, &reply);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("is an absolute path"));
  EXPECT_EQ(Describe("tiny").artifact(), "tiny");
}

TEST_F(DescribeReplyTest, TheSameReadIsTheSameReply) {
  const v1::DescribeArtifactResponse first = Describe();
  ASSERT_EQ(first.artifact(), "tiny");
  EXPECT_EQ(first.dram_source(), absl::StrCat("the first device", kNpuSource));
  ASSERT_GT(first.buckets_size(), 0);
  ASSERT_GT(first.graphs_size(), 0);
  EXPECT_GT(first.max_fitting_num_blocks(), 0u);
  // The first read came from the files, the second from the artifact
  // cache, which made the reply kept; the third is that reply, the same
  // bytes.
  EXPECT_EQ(Describe().SerializeAsString(), first.SerializeAsString());
  EXPECT_EQ(service_->describe_replies().hits(), 0u);
  EXPECT_EQ(Describe().SerializeAsString(), first.SerializeAsString());
  EXPECT_EQ(service_->describe_replies().hits(), 1u);
  // Asked by another spelling of its name: the canonical name still.
  EXPECT_EQ(Describe("./tiny/").artifact(), "tiny");
  EXPECT_EQ(service_->describe_replies().hits(), 2u);
  EXPECT_EQ(service_->describe_replies().size(), 1u);
}

TEST_F(DescribeReplyTest, AVerifiedReadIsNotKept) {
  // Each reads every payload again: a new object every time, whose reply
  // would only take room.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Describe("tiny", /*verify_payload=*/true).artifact(), "tiny");
  }
  EXPECT_EQ(service_->describe_replies().size(), 0u);
  EXPECT_EQ(service_->describe_replies().hits(), 0u);
}

TEST_F(DescribeReplyTest, AnotherDeviceIsANewReply) {
  const v1::DescribeArtifactResponse first = Describe();
  ASSERT_GT(first.buckets_size(), 0);
  absl::StatusOr<DeviceSpec> spec = LookupDeviceSpec("RBLN-CA12");
  ASSERT_TRUE(spec.ok());
  spec->total_bytes_per_node /= 2;
  SetChoice(DramChoice{*spec, "a smaller device", {"a warning"}});
  const v1::DescribeArtifactResponse smaller = Describe();
  EXPECT_EQ(smaller.dram_source(),
            absl::StrCat("a smaller device", kNpuSource));
  ASSERT_EQ(smaller.warnings_size(), 1);
  EXPECT_EQ(smaller.warnings(0), "a warning");
  ASSERT_EQ(smaller.buckets_size(), first.buckets_size());
  EXPECT_LT(smaller.buckets(0).available_bytes(),
            first.buckets(0).available_bytes());
  // No device at all: no plan, and the reason.
  SetChoice(absl::UnavailableError("rbln-smi found no device"));
  const v1::DescribeArtifactResponse none = Describe();
  EXPECT_EQ(none.buckets_size(), 0);
  ASSERT_EQ(none.warnings_size(), 1);
  EXPECT_EQ(none.warnings(0), "no memory plan: rbln-smi found no device");
  // And back: the first reply again (made again: one artifact, one reply).
  absl::StatusOr<DeviceSpec> back = LookupDeviceSpec("RBLN-CA12");
  ASSERT_TRUE(back.ok());
  SetChoice(DramChoice{*back, "the first device", {}});
  EXPECT_EQ(Describe().SerializeAsString(), first.SerializeAsString());
  EXPECT_EQ(Describe().SerializeAsString(), first.SerializeAsString());
  EXPECT_EQ(service_->describe_replies().hits(), 1u);
}

TEST_F(DescribeReplyTest, AChangedArtifactIsANewReply) {
  const v1::DescribeArtifactResponse first = Describe();
  const uint64_t target = first.kvcache_num_blocks() - 1;
  ASSERT_GE(target, first.num_min_blocks());
  WriteRequest request;
  request.name = "tiny";
  request.target = target;
  absl::StatusOr<WriteResult> written = store_->Write(request);
  ASSERT_TRUE(written.ok()) << written.status();
  const v1::DescribeArtifactResponse after = Describe();
  EXPECT_EQ(after.kvcache_num_blocks(), target);
  EXPECT_EQ(after.compiled_num_blocks(), first.compiled_num_blocks());
}

TEST_F(DescribeReplyTest, BytesThatAreNoRequestAreRefusedAndLogged) {
  // Requests that protobuf cannot parse, sent as bytes on a generic stub: a
  // field 1 of length 100 in 3 bytes, and an artifact name that is not
  // UTF-8 (proto3 strings must be).
  for (const std::string& garbage :
       {std::string("\x0a\x64\x61", 3), std::string("\x0a\x02\xff\xfe", 4)}) {
    SCOPED_TRACE(absl::CEscape(garbage));
    grpc::GenericStub generic(channel_);
    grpc::ClientContext context;
    grpc::Slice slice(garbage);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer reply;
    absl::Mutex mu;
    bool done = false;
    grpc::Status status;
    generic.UnaryCall(
        &context, "/rbln.artifact.v1.ArtifactService/DescribeArtifact",
        grpc::StubOptions(), &request, &reply, [&](grpc::Status s) {
          absl::MutexLock lock(&mu);
          status = std::move(s);
          done = true;
        });
    {
      absl::MutexLock lock(&mu);
      ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&done), kWaitLimit));
    }
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(
        status.error_message(),
        HasSubstr("the request's bytes are not a DescribeArtifactRequest (a "
                  "string that is not UTF-8, or not protobuf at all)"));
    const auto& trailers = context.GetServerTrailingMetadata();
    EXPECT_NE(trailers.find(v1::kReplyMetadataKey), trailers.end());
  }
  // The service still answers.
  EXPECT_EQ(Describe().artifact(), "tiny");
  server_->Shutdown();
  EXPECT_EQ(LinesWith("method=DescribeArtifact artifact=\"\" "
                      "caller=\"anonymous\" role=reader "
                      "outcome=INVALID_ARGUMENT"),
            2)
      << log_.str();
}

// A device provider that numbers its answers (AnswersGeneration, as the
// daemon's do): a kept reply is sent without asking it.
class DeviceGenerationTest : public DescribeReplyTest {
 protected:
  StoreOptions Options() override {
    StoreOptions options = DescribeReplyTest::Options();
    device_provider_->generation = 5;
    return options;
  }

  int asked() const { return device_provider_->asked.load(); }
  void SetGeneration(uint64_t generation) {
    device_provider_->generation = generation;
  }
};

TEST_F(DeviceGenerationTest, AKeptReplyIsSentWithoutAskingTheDevice) {
  // The first Describe reads the files on a reader thread (its reply is not
  // kept); the second keeps its reply under generation 5.
  const v1::DescribeArtifactResponse first = Describe();
  EXPECT_EQ(first.dram_source(), absl::StrCat("the first device", kNpuSource));
  EXPECT_EQ(Describe().SerializeAsString(), first.SerializeAsString());
  EXPECT_EQ(asked(), 2);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Describe().SerializeAsString(), first.SerializeAsString());
  }
  EXPECT_EQ(asked(), 2);

  // The answers change, and their generation with them.
  absl::StatusOr<DeviceSpec> spec = LookupDeviceSpec("RBLN-CA12");
  ASSERT_TRUE(spec.ok());
  SetChoice(DramChoice{*spec, "another device", {}});
  SetGeneration(6);
  EXPECT_EQ(Describe().dram_source(),
            absl::StrCat("another device", kNpuSource));
  EXPECT_EQ(Describe().dram_source(),
            absl::StrCat("another device", kNpuSource));
  EXPECT_EQ(asked(), 3);

  // A new generation with the same answer: asked once, then kept again.
  SetGeneration(7);
  EXPECT_EQ(Describe().dram_source(),
            absl::StrCat("another device", kNpuSource));
  EXPECT_EQ(Describe().dram_source(),
            absl::StrCat("another device", kNpuSource));
  EXPECT_EQ(asked(), 4);

  // A resolver that cannot say (0) is asked every time.
  SetGeneration(0);
  EXPECT_EQ(Describe().dram_source(),
            absl::StrCat("another device", kNpuSource));
  EXPECT_EQ(Describe().dram_source(),
            absl::StrCat("another device", kNpuSource));
  EXPECT_EQ(asked(), 6);
}

// A read's line is logged once its reply has been sent, and only then; an
// error's before its reply.
using ReadLogTest = DescribeReplyTest;

TEST_F(ReadLogTest, EveryReadIsOneLineAnErrorBeforeItsReply) {
  const auto get = [this](const std::string& name,
                          v1::GetKvcacheNumBlocksResponse* reply) {
    grpc::ClientContext context;
    v1::GetKvcacheNumBlocksRequest request;
    request.set_artifact(name);
    return stub_->GetKvcacheNumBlocks(&context, request, reply);
  };
  v1::GetKvcacheNumBlocksResponse reply;
  EXPECT_EQ(get("missing", &reply).error_code(), grpc::StatusCode::NOT_FOUND);
  // No call runs now: the line was logged before the reply.
  EXPECT_EQ(LinesWith("method=GetKvcacheNumBlocks artifact=\"missing\" "
                      "caller=\"anonymous\" role=reader outcome=NOT_FOUND"),
            1)
      << log_.str();
  // The first of each reads the files on a reader thread, after an attempt
  // that found nothing cached (and logs nothing); the second is the
  // cache's, answered on gRPC's thread.
  for (int i = 0; i < 2; ++i) {
    const grpc::Status status = get("tiny", &reply);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(reply.artifact(), "tiny");
  }
  EXPECT_EQ(Describe().artifact(), "tiny");
  EXPECT_EQ(Describe().artifact(), "tiny");
  server_->Shutdown();  // waits for the calls' OnDone, and their lines
  EXPECT_EQ(LinesWith("method=GetKvcacheNumBlocks artifact=\"tiny\" "
                      "caller=\"anonymous\" role=reader outcome=OK "
                      "duration_ms="),
            2)
      << log_.str();
  EXPECT_EQ(LinesWith("method=DescribeArtifact artifact=\"tiny\" "
                      "caller=\"anonymous\" role=reader outcome=OK "
                      "duration_ms="),
            2)
      << log_.str();
  EXPECT_EQ(LinesWith("method="), 5) << log_.str();
  // Nothing is listed as running once the calls are done.
  EXPECT_THAT(service_->DescribeRunning(), ::testing::IsEmpty());
}

}  // namespace
}  // namespace rbln
