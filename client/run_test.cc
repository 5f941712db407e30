#include "client/run.h"

#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/failure.h"
#include "client/flags.h"
#include "client/paths.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rbln/artifact/v1/reply_metadata.h"

namespace rbln::client {
namespace {

namespace v1 = ::rbln::artifact::v1;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// An in-process daemon that records requests and answers with canned replies
// (or `error` when set), marked as the real daemon marks them
// (reply_metadata.h) unless told not to: its errors then look like a
// transport's.
class FakeArtifactService final : public v1::ArtifactService::Service {
 public:
  grpc::Status GetKvcacheNumBlocks(
      grpc::ServerContext* context,
      const v1::GetKvcacheNumBlocksRequest* request,
      v1::GetKvcacheNumBlocksResponse* reply) override {
    absl::MutexLock lock(&mu_);
    get_request_ = *request;
    reply->set_artifact("llama");
    reply->set_kvcache_num_blocks(128);
    return Reply(context);
  }

  grpc::Status SetKvcacheNumBlocks(
      grpc::ServerContext* context,
      const v1::SetKvcacheNumBlocksRequest* request,
      v1::ResizeResponse* reply) override {
    absl::MutexLock lock(&mu_);
    set_request_ = *request;
    if (!request->options().operation_id().empty()) {
      // A long write: report half way until the client has polled twice.
      bytes_done_ = uint64_t{1} << 30;
      bytes_total_ = uint64_t{2} << 30;
      mu_.AwaitWithTimeout(
          absl::Condition(
              +[](int* polls) { return *polls >= 2; }, &progress_polls_),
          absl::Seconds(10));
    }
    reply->set_artifact("llama");
    reply->set_previous_num_blocks(64);
    reply->set_new_num_blocks(request->num_blocks());
    reply->set_written(!request->options().dry_run());
    reply->add_warnings("128 is above the compiled count 64");
    return Reply(context);
  }

  grpc::Status FitMemoryBudget(grpc::ServerContext* context,
                               const v1::FitMemoryBudgetRequest* request,
                               v1::ResizeResponse*) override {
    absl::MutexLock lock(&mu_);
    fit_request_ = *request;
    return Reply(context);
  }

  grpc::Status DescribeArtifact(grpc::ServerContext* context,
                                const v1::DescribeArtifactRequest* request,
                                v1::DescribeArtifactResponse* reply) override {
    absl::MutexLock lock(&mu_);
    describe_request_ = *request;
    reply->set_artifact("llama");
    reply->set_npu("RBLN-CA12");
    reply->add_warnings("a live RBLN-CR03 is not the artifact's RBLN-CA12");
    return Reply(context);
  }

  // Two pages: "llama" and a skipped entry, then "qwen" and one left out.
  grpc::Status ListArtifacts(grpc::ServerContext* context,
                             const v1::ListArtifactsRequest* request,
                             v1::ListArtifactsResponse* reply) override {
    absl::MutexLock lock(&mu_);
    list_requests_.push_back(*request);
    if (request->page_token().empty()) {
      reply->set_store("/srv/store");
      reply->add_artifacts()->set_artifact("llama");
      v1::SkippedEntry* skipped = reply->add_skipped();
      skipped->set_artifact("linked");
      skipped->set_reason("a symbolic link");
      reply->set_next_page_token("page2");
    } else {
      reply->add_artifacts()->set_artifact("qwen");
      v1::ArtifactSummary* link = reply->add_artifacts();
      link->set_artifact("stable");
      link->set_link_target("qwen");
      reply->set_not_readable(1);
    }
    return Reply(context);
  }
  std::vector<v1::ListArtifactsRequest> list_requests() {
    absl::MutexLock lock(&mu_);
    return list_requests_;
  }

  // While a write runs: its first `waiting_polls` polls say it waits for
  // another writer, the next ones that it is half way.
  grpc::Status GetWriteProgress(grpc::ServerContext*,
                                const v1::GetWriteProgressRequest* request,
                                v1::GetWriteProgressResponse* reply) override {
    absl::MutexLock lock(&mu_);
    progress_ids_.push_back(request->operation_id());
    if (bytes_total_ == 0) return grpc::Status::OK;
    reply->set_running(true);
    if (waiting_replies_ < waiting_polls_) {
      ++waiting_replies_;
      reply->set_state(v1::WRITE_STATE_WAITING);
      return grpc::Status::OK;
    }
    reply->set_state(v1::WRITE_STATE_RUNNING);
    reply->set_bytes_done(bytes_done_);
    reply->set_bytes_total(bytes_total_);
    ++progress_polls_;
    return grpc::Status::OK;
  }

  void set_error(grpc::Status error, bool marked = true) {
    absl::MutexLock lock(&mu_);
    error_ = std::move(error);
    mark_replies_ = marked;
  }
  void set_waiting_polls(int polls) {
    absl::MutexLock lock(&mu_);
    waiting_polls_ = polls;
  }
  v1::GetKvcacheNumBlocksRequest get_request() {
    absl::MutexLock lock(&mu_);
    return get_request_;
  }
  v1::SetKvcacheNumBlocksRequest set_request() {
    absl::MutexLock lock(&mu_);
    return set_request_;
  }
  v1::FitMemoryBudgetRequest fit_request() {
    absl::MutexLock lock(&mu_);
    return fit_request_;
  }
  v1::DescribeArtifactRequest describe_request() {
    absl::MutexLock lock(&mu_);
    return describe_request_;
  }
  std::vector<std::string> progress_ids() {
    absl::MutexLock lock(&mu_);
    return progress_ids_;
  }

 private:
  grpc::Status Reply(grpc::ServerContext* context)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (mark_replies_) {
      context->AddTrailingMetadata(v1::kReplyMetadataKey,
                                   v1::kReplyMetadataValue);
    }
    return error_;
  }

  absl::Mutex mu_;
  grpc::Status error_ ABSL_GUARDED_BY(mu_);
  bool mark_replies_ ABSL_GUARDED_BY(mu_) = true;
  std::vector<v1::ListArtifactsRequest> list_requests_ ABSL_GUARDED_BY(mu_);
  int waiting_polls_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_replies_ ABSL_GUARDED_BY(mu_) = 0;
  v1::GetKvcacheNumBlocksRequest get_request_ ABSL_GUARDED_BY(mu_);
  v1::SetKvcacheNumBlocksRequest set_request_ ABSL_GUARDED_BY(mu_);
  v1::FitMemoryBudgetRequest fit_request_ ABSL_GUARDED_BY(mu_);
  v1::DescribeArtifactRequest describe_request_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> progress_ids_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_done_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_total_ ABSL_GUARDED_BY(mu_) = 0;
  int progress_polls_ ABSL_GUARDED_BY(mu_) = 0;
};

class RunCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::ArtifactService::NewStub(
        server_->InProcessChannel(grpc::ChannelArguments()));
  }
  void TearDown() override { server_->Shutdown(); }

  // Parses `args` (which must be valid) and runs them against the fake.
  int Run(const std::vector<std::string>& args, bool terminal = false) {
    std::ostringstream parse_out, parse_err;
    ParsedCommandLine parsed =
        ParseCommandLine(args, "unix:/run/fake.sock", parse_out, parse_err);
    EXPECT_TRUE(parsed.options.has_value()) << parse_err.str();
    if (!parsed.options.has_value()) return -1;
    absl::StatusOr<CliOptions> options =
        ResolvePaths(*parsed.options, "/srv/store");
    EXPECT_TRUE(options.ok()) << options.status();
    std::ostringstream out, err;
    int code = RunCommand(*options, *stub_, RunOptions{.terminal = terminal},
                          out, err);
    out_ = out.str();
    err_ = err.str();
    return code;
  }

  FakeArtifactService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::ArtifactService::Stub> stub_;
  std::string out_;
  std::string err_;
};

TEST_F(RunCommandTest, GetPrintsTheBareNumber) {
  EXPECT_EQ(Run({"--get-kvcache-num-blocks", "--model-id", "./llama"}),
            kExitOk);
  EXPECT_EQ(out_, "128\n");
  EXPECT_EQ(err_, "");
  EXPECT_EQ(service_.get_request().artifact(), "/srv/store/llama");
}

TEST_F(RunCommandTest, RefusalExitsOneWithTheDaemonsMessage) {
  service_.set_error(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                  "the budget fits 1 block; the minimum is 2"));
  EXPECT_EQ(Run({"--set-memory-budget", "1GB", "--model-id", "llama"}),
            kExitFailed);
  EXPECT_EQ(out_, "");
  EXPECT_EQ(err_,
            "rbln-artifact: error (FAILED_PRECONDITION): the budget fits 1 "
            "block; the minimum is 2\n");
  EXPECT_EQ(service_.fit_request().budget(), "1GB");
}

TEST_F(RunCommandTest, CompareAndSetMismatchIsAborted) {
  service_.set_error(grpc::Status(grpc::StatusCode::ABORTED,
                                  "current count is 32, expected 64"));
  EXPECT_EQ(Run({"--set-kvcache-num-blocks", "128", "--model-id", "llama",
                 "--expect", "64", "--json"}),
            kExitFailed);
  EXPECT_THAT(err_, HasSubstr("error (ABORTED): current count is 32"));
  EXPECT_EQ(service_.set_request().options().expected_current(), 64u);
  // With --json, stdout gets the error object.
  EXPECT_THAT(out_, StartsWith("{\"error\":{\"code\":\"ABORTED\","
                               "\"code_number\":10,\"message\":\"current "
                               "count is 32, expected 64\",\"details\":{"
                               "\"artifact\":\"/srv/store/llama\"}}}\n"));
}

TEST_F(RunCommandTest, WithoutTheDaemonsMarkAnErrorIsAnInterruption) {
  service_.set_error(grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone"),
                     /*marked=*/false);
  EXPECT_EQ(Run({"--set-kvcache-num-blocks", "128", "--model-id", "llama"}),
            kExitInterrupted);
  EXPECT_THAT(err_, HasSubstr("the daemon closed the connection during the "
                              "write; the artifact is either unchanged or "
                              "fully at the new count; check with --get"));
  EXPECT_THAT(err_, HasSubstr("(gRPC: UNAVAILABLE: gone)"));
  EXPECT_EQ(Run({"--get-kvcache-num-blocks", "--model-id", "llama"}),
            kExitInterrupted);
  EXPECT_THAT(err_, HasSubstr("nothing was changed (a read changes nothing)"));
  // The same status from the daemon's handler is its answer.
  service_.set_error(grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone"));
  EXPECT_EQ(Run({"--set-kvcache-num-blocks", "128", "--model-id", "llama"}),
            kExitFailed);
  EXPECT_EQ(err_, "rbln-artifact: error (UNAVAILABLE): gone\n");
}

TEST_F(RunCommandTest, UnauthenticatedExitsFour) {
  service_.set_error(
      grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "who are you?"));
  EXPECT_EQ(Run({"--list", "--json"}), kExitDenied);
  EXPECT_THAT(err_, HasSubstr("error (UNAUTHENTICATED): who are you?"));
  EXPECT_THAT(out_, HasSubstr("\"code\":\"UNAUTHENTICATED\""));
}

TEST_F(RunCommandTest, AWaitingWriteSaysSoOnATerminal) {
  // 8 polls, at least 200 ms apart: the write waits for more than 1 s.
  service_.set_waiting_polls(8);
  EXPECT_EQ(Run({"--set-kvcache-num-blocks", "128", "--model-id", "llama"},
                /*terminal=*/true),
            kExitOk);
  EXPECT_THAT(err_, StartsWith("waiting for another write to "
                               "/srv/store/llama to finish\u2026\n\r["));
  // Once.
  EXPECT_EQ(err_.find("waiting for"), err_.rfind("waiting for"));
}

TEST_F(RunCommandTest, DryRunPrintsTheLineAndWarningsWithoutProgress) {
  EXPECT_EQ(Run({"--set-kvcache-num-blocks", "128", "--model-id", "llama",
                 "--dry-run"},
                /*terminal=*/true),
            kExitOk);
  EXPECT_EQ(out_, "kvcache_num_blocks: 64 -> 128 (dry run: nothing written)\n");
  EXPECT_EQ(err_, "warning: 128 is above the compiled count 64\n");
  EXPECT_EQ(service_.set_request().options().operation_id(), "");
  EXPECT_THAT(service_.progress_ids(), IsEmpty());
}

TEST_F(RunCommandTest, WriteDrawsProgressOnATerminal) {
  EXPECT_EQ(Run({"--set-kvcache-num-blocks", "128", "--model-id", "llama"},
                /*terminal=*/true),
            kExitOk);
  EXPECT_EQ(out_,
            "Set kvcache_num_blocks to 128 for artifact at /srv/store/llama\n");
  std::string id = service_.set_request().options().operation_id();
  EXPECT_EQ(id.size(), 32u);
  EXPECT_TRUE(std::all_of(id.begin(), id.end(), [](char c) {
    return absl::ascii_isxdigit(static_cast<unsigned char>(c));
  })) << id;
  std::vector<std::string> polled = service_.progress_ids();
  ASSERT_GE(polled.size(), 2u);
  for (const std::string& p : polled) EXPECT_EQ(p, id);
  EXPECT_THAT(err_, StartsWith("\r[###############...............]  50%  "
                               "1.00 / 2.00 GiB"));
  // The bar is cleared before the warnings are printed.
  EXPECT_THAT(err_, EndsWith("\r\033[Kwarning: 128 is above the compiled "
                             "count 64\nkvcache_num_blocks: 64 -> 128\n"));
}

TEST_F(RunCommandTest, NoProgressWhenNotATerminal) {
  EXPECT_EQ(Run({"--set-kvcache-num-blocks", "128", "--model-id", "llama",
                 "--output-dir", "out"}),
            kExitOk);
  EXPECT_EQ(service_.set_request().options().operation_id(), "");
  EXPECT_EQ(service_.set_request().options().output_dir(), "/srv/store/out");
  EXPECT_THAT(service_.progress_ids(), IsEmpty());
  EXPECT_EQ(out_,
            "Set kvcache_num_blocks to 128 for artifact at /srv/store/out\n");
  EXPECT_EQ(err_,
            "warning: 128 is above the compiled count 64\n"
            "kvcache_num_blocks: 64 -> 128\n");
}

TEST_F(RunCommandTest, DescribeSendsVerifyAndPrintsWarnings) {
  EXPECT_EQ(Run({"--describe", "--verify", "--model-id", "/srv/store/llama"}),
            kExitOk);
  EXPECT_TRUE(service_.describe_request().verify_payload());
  EXPECT_THAT(out_, HasSubstr("artifact:    llama\n"));
  EXPECT_EQ(err_,
            "warning: a live RBLN-CR03 is not the artifact's RBLN-CA12\n");
}

TEST_F(RunCommandTest, ListFollowsThePagesWithThePrefix) {
  EXPECT_EQ(Run({"--list", "--json", "--prefix", "team3/"}), kExitOk);
  EXPECT_EQ(out_,
            "{\"artifact\":\"llama\",\"kvcache_num_blocks\":0,\"npu\":\"\","
            "\"num_nodes\":0,\"cls_name\":\"\",\"error\":\"\","
            "\"link_target\":\"\"}\n"
            "{\"artifact\":\"qwen\",\"kvcache_num_blocks\":0,\"npu\":\"\","
            "\"num_nodes\":0,\"cls_name\":\"\",\"error\":\"\","
            "\"link_target\":\"\"}\n"
            "{\"artifact\":\"stable\",\"kvcache_num_blocks\":0,\"npu\":\"\","
            "\"num_nodes\":0,\"cls_name\":\"\",\"error\":\"\","
            "\"link_target\":\"qwen\"}\n"
            "{\"artifact\":\"linked\",\"skipped_reason\":\"a symbolic "
            "link\"}\n"
            "{\"not_readable\":1}\n");
  const std::vector<v1::ListArtifactsRequest> requests =
      service_.list_requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].prefix(), "team3/");
  EXPECT_EQ(requests[1].prefix(), "team3/");
  EXPECT_EQ(requests[1].page_token(), "page2");
  EXPECT_EQ(Run({"--list"}), kExitOk);
  EXPECT_EQ(out_,
            "store: /srv/store\n"
            "ARTIFACT  BLOCKS  NPU  NODES  CLASS\n"
            "llama          0           0\n"
            // Aligned within each page.
            "qwen                 0           0\n"
            "stable -> qwen       0           0\n"
            "skipped 1:\n"
            "  linked: a symbolic link\n"
            "left out 1 artifact(s) you cannot read yourself (ask their "
            "owner, or for operator rights: rbln-artifactd --operators)\n");
}

TEST_F(RunCommandTest, JsonForEveryReadParsesBack) {
  EXPECT_EQ(Run({"--get-kvcache-num-blocks", "--model-id", "llama", "--json"}),
            kExitOk);
  v1::GetKvcacheNumBlocksResponse get;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_, &get).ok())
      << out_;
  EXPECT_EQ(get.kvcache_num_blocks(), 128u);
  EXPECT_THAT(out_, HasSubstr("\"num_min_blocks\""));  // defaults printed
}

TEST_F(RunCommandTest, UnimplementedDeviceInfoIsAFailure) {
  // The fake does not implement GetDeviceInfo: the stock UNIMPLEMENTED.
  EXPECT_EQ(Run({"--device-info"}), kExitFailed);
  EXPECT_THAT(err_, StartsWith("rbln-artifact: error (UNIMPLEMENTED)"));
}

TEST(RandomOperationIdTest, DiffersEachTime) {
  EXPECT_NE(RandomOperationId(), RandomOperationId());
}

}  // namespace
}  // namespace rbln::client
