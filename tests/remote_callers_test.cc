// What a caller on another host, or a program rather than a person, relies
// on (issue 10), against the real daemon over its Unix socket: the
// structured error details of the grpc-status-details-bin trailer, read
// through the generated stub and through rbln-artifact --json; the client's
// address variable; the socket's group, for a serving process that is not
// root.
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/error_facts.h"
#include "gmock/gmock.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "rbln/artifact/v1/artifact_service.grpc.pb.h"
#include "tests/daemon_stub_testing.h"

namespace rbln::e2e {
namespace {

namespace v1 = ::rbln::artifact::v1;
using ::rbln::testing::BinaryPath;
using ::rbln::testing::CopyForOtherUsers;

// The one ErrorDetail in the status's details (grpc-status-details-bin), or
// nullopt when there is none; fails the test when the trailer is
// malformed or its code and message differ from the status's.
std::optional<v1::ErrorDetail> DetailOf(const grpc::Status& status) {
  if (status.error_details().empty()) return std::nullopt;
  google::rpc::Status details;
  EXPECT_TRUE(details.ParseFromString(status.error_details()));
  EXPECT_EQ(details.code(), static_cast<int>(status.error_code()));
  EXPECT_EQ(details.message(), status.error_message());
  EXPECT_EQ(details.details_size(), 1);
  if (details.details_size() != 1) return std::nullopt;
  v1::ErrorDetail detail;
  EXPECT_TRUE(details.details(0).UnpackTo(&detail))
      << details.details(0).type_url();
  return detail;
}

class RemoteCallersTest : public StubDaemonTest {
 protected:
  void SetUp() override {
    StubDaemonTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", StorePath("a")));
  }

  v1::GetKvcacheNumBlocksResponse Get(const std::string& name) {
    v1::GetKvcacheNumBlocksRequest req;
    req.set_artifact(name);
    v1::GetKvcacheNumBlocksResponse resp;
    grpc::Status status =
        stub_->GetKvcacheNumBlocks(Context().get(), req, &resp);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return resp;
  }

  grpc::Status Set(const std::string& name, uint64_t n,
                   std::optional<uint64_t> expected = std::nullopt) {
    v1::SetKvcacheNumBlocksRequest req;
    req.set_artifact(name);
    req.set_num_blocks(n);
    if (expected.has_value()) {
      req.mutable_options()->set_expected_current(*expected);
    }
    v1::ResizeResponse resp;
    return stub_->SetKvcacheNumBlocks(Context().get(), req, &resp);
  }
};

// Core's reasons (core/error_facts.h) and the proto's enum name the same
// set: the server translates by name, and a reason missing from either side
// would reach clients as REASON_UNSPECIFIED.
TEST(ErrorReasonTest, CoreReasonsAreTheProtoEnum) {
  const ErrorReason all[] = {
      ErrorReason::kBelowMinBlocks, ErrorReason::kTooManyBlocks,
      ErrorReason::kBudgetBelowMin, ErrorReason::kCasMismatch,
      ErrorReason::kOutputExists,   ErrorReason::kOutsideStore,
      ErrorReason::kReadOnlyRoot,   ErrorReason::kArtifactNotFound,
      ErrorReason::kNotAnOperator,  ErrorReason::kNotReadableByCaller,
      ErrorReason::kExceedsDevice,  ErrorReason::kGroupDoesNotFit,
      ErrorReason::kGroupPartial};
  for (ErrorReason reason : all) {
    const std::string name(ErrorReasonName(reason));
    v1::ErrorDetail::Reason parsed = v1::ErrorDetail::REASON_UNSPECIFIED;
    EXPECT_TRUE(v1::ErrorDetail::Reason_Parse(name, &parsed)) << name;
    EXPECT_NE(parsed, v1::ErrorDetail::REASON_UNSPECIFIED) << name;
  }
  // Plus REASON_UNSPECIFIED, and nothing else.
  EXPECT_EQ(v1::ErrorDetail::Reason_descriptor()->value_count(),
            static_cast<int>(std::size(all)) + 1);
}

TEST_F(RemoteCallersTest, CompareAndSetMismatchCarriesTheCurrentCount) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const v1::GetKvcacheNumBlocksResponse before = Get("a");
  const uint64_t target = before.num_min_blocks();
  ASSERT_NE(target, before.kvcache_num_blocks());
  grpc::Status status = Set("a", target, before.kvcache_num_blocks() + 1);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::ABORTED)
      << status.error_message();
  std::optional<v1::ErrorDetail> detail = DetailOf(status);
  ASSERT_TRUE(detail.has_value()) << "no grpc-status-details-bin";
  EXPECT_EQ(detail->reason(), v1::ErrorDetail::CAS_MISMATCH);
  EXPECT_EQ(detail->artifact(), "a");
  ASSERT_TRUE(detail->has_current_num_blocks());
  EXPECT_EQ(detail->current_num_blocks(), before.kvcache_num_blocks());
  EXPECT_FALSE(detail->has_num_min_blocks());
  EXPECT_EQ(Get("a").kvcache_num_blocks(), before.kvcache_num_blocks());
}

TEST_F(RemoteCallersTest, BelowMinimumCarriesTheBounds) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const v1::GetKvcacheNumBlocksResponse before = Get("a");
  ASSERT_GT(before.num_min_blocks(), 0u);
  grpc::Status status = Set("a", before.num_min_blocks() - 1);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << status.error_message();
  std::optional<v1::ErrorDetail> detail = DetailOf(status);
  ASSERT_TRUE(detail.has_value()) << "no grpc-status-details-bin";
  EXPECT_EQ(detail->reason(), v1::ErrorDetail::BELOW_MIN_BLOCKS);
  EXPECT_EQ(detail->artifact(), "a");
  EXPECT_EQ(detail->current_num_blocks(), before.kvcache_num_blocks());
  EXPECT_EQ(detail->num_min_blocks(), before.num_min_blocks());
  EXPECT_EQ(detail->num_full_blocks(), before.num_full_blocks());
}

TEST_F(RemoteCallersTest, OtherRefusalsNameTheirReason) {
  ASSERT_NO_FATAL_FAILURE(Start());
  v1::GetKvcacheNumBlocksRequest req;
  v1::GetKvcacheNumBlocksResponse resp;
  req.set_artifact("../elsewhere");
  grpc::Status outside =
      stub_->GetKvcacheNumBlocks(Context().get(), req, &resp);
  ASSERT_EQ(outside.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  std::optional<v1::ErrorDetail> detail = DetailOf(outside);
  ASSERT_TRUE(detail.has_value());
  EXPECT_EQ(detail->reason(), v1::ErrorDetail::OUTSIDE_STORE);
  EXPECT_EQ(detail->artifact(), "../elsewhere");

  req.set_artifact("missing");
  grpc::Status missing =
      stub_->GetKvcacheNumBlocks(Context().get(), req, &resp);
  ASSERT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND);
  detail = DetailOf(missing);
  ASSERT_TRUE(detail.has_value());
  EXPECT_EQ(detail->reason(), v1::ErrorDetail::ARTIFACT_NOT_FOUND);
  EXPECT_EQ(detail->artifact(), "missing");

  // An existing output directory, without replace.
  std::filesystem::create_directories(store_ + "/taken");
  v1::SetKvcacheNumBlocksRequest copy;
  copy.set_artifact("a");
  copy.set_num_blocks(Get("a").kvcache_num_blocks());
  copy.mutable_options()->set_output_dir("taken");
  v1::ResizeResponse copied;
  grpc::Status exists =
      stub_->SetKvcacheNumBlocks(Context().get(), copy, &copied);
  ASSERT_EQ(exists.error_code(), grpc::StatusCode::ALREADY_EXISTS)
      << exists.error_message();
  detail = DetailOf(exists);
  ASSERT_TRUE(detail.has_value());
  EXPECT_EQ(detail->reason(), v1::ErrorDetail::OUTPUT_EXISTS);
  EXPECT_EQ(detail->artifact(), "taken");

  // An error without facts to state has no details.
  v1::FitMemoryBudgetRequest fit;
  fit.set_artifact("a");
  fit.set_budget("80");
  v1::ResizeResponse reply;
  grpc::Status ambiguous = stub_->FitMemoryBudget(Context().get(), fit, &reply);
  ASSERT_EQ(ambiguous.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ambiguous.error_details(), "");
}

TEST_F(RemoteCallersTest, JsonErrorOfTheClientShowsTheReason) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const v1::GetKvcacheNumBlocksResponse before = Get("a");
  Outcome below = CliAt(
      address_,
      absl::StrCat("--set-kvcache-num-blocks ", before.num_min_blocks() - 1,
                   " --model-id ", ShellQuote(store_ + "/a"), " --json"),
      root_.path());
  EXPECT_EQ(below.code, 1) << below;
  rapidjson::Document doc = ParseJson(below);
  ASSERT_TRUE(doc.HasMember("error")) << below;
  const rapidjson::Value& details = doc["error"]["details"];
  ASSERT_TRUE(details.HasMember("reason")) << below;
  EXPECT_STREQ(details["reason"].GetString(), "BELOW_MIN_BLOCKS");
  EXPECT_EQ(JsonU64(details, "num_min_blocks"), before.num_min_blocks());
  EXPECT_EQ(JsonU64(details, "num_full_blocks"), before.num_full_blocks());
  EXPECT_EQ(JsonU64(details, "current_num_blocks"),
            before.kvcache_num_blocks());
  ASSERT_TRUE(details["num_min_blocks"].IsUint64()) << "not a JSON number";
  // People still read the daemon's sentence on stderr.
  EXPECT_THAT(below.err, ::testing::HasSubstr("is below the minimum"));
}

TEST_F(RemoteCallersTest, AddressVariableIsTheClientsDefault) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string client = ShellQuote(BinaryPath("rbln-artifact"));
  const std::string get = absl::StrCat(" --get-kvcache-num-blocks --model-id ",
                                       ShellQuote(store_ + "/a"));
  // A bare absolute path, and it wins over the older socket variable.
  Outcome bare = RunShell(
      absl::StrCat(
          "cd / && RBLN_ARTIFACTD_ADDRESS=", ShellQuote(address_.substr(5)),
          " RBLN_ARTIFACTD_SOCKET=/nonexistent/rbln.sock ", kCommandTimeout,
          " ", client, get),
      root_.Join("bare.err"));
  EXPECT_EQ(bare.code, 0) << bare;
  EXPECT_EQ(bare.out, absl::StrCat(Get("a").kvcache_num_blocks(), "\n"));
  // The older variable alone still works.
  Outcome alias = RunShell(absl::StrCat("cd / && env -u RBLN_ARTIFACTD_ADDRESS "
                                        "RBLN_ARTIFACTD_SOCKET=",
                                        ShellQuote(address_.substr(5)), " ",
                                        kCommandTimeout, " ", client, get),
                           root_.Join("alias.err"));
  EXPECT_EQ(alias.code, 0) << alias;
  // A malformed value is a usage error naming the variable.
  Outcome bad = RunShell(absl::StrCat("cd / && RBLN_ARTIFACTD_ADDRESS=50051 ",
                                      kCommandTimeout, " ", client, get),
                         root_.Join("bad.err"));
  EXPECT_EQ(bad.code, 2) << bad;
  EXPECT_THAT(bad.err, ::testing::HasSubstr("RBLN_ARTIFACTD_ADDRESS"));
  EXPECT_THAT(bad.err, ::testing::HasSubstr("unix:PATH, HOST:PORT or an "
                                            "absolute path"));
}

TEST_F(RemoteCallersTest, DaemonListensOnABareAbsolutePath) {
  const std::string path = address_.substr(5);
  ASSERT_NO_FATAL_FAILURE(StartWithFlags(
      address_, {"--store", store_, "--listen", path, "--rbln-smi", "none"}));
  ConnectStub();
  EXPECT_GT(Get("a").kvcache_num_blocks(), 0u);
  // Stopping it (TearDown) checks that the socket is removed at exit.
}

// A group and a user in it, for one test; removed after.
class ScopedGroupUser {
 public:
  explicit ScopedGroupUser(const std::string& tag)
      : group_("rblng" + tag), user_("rblnu" + tag) {
    std::string out;
    ok_ = rbln::testing::RunCommand("groupadd " + group_, &out) == 0 &&
          rbln::testing::RunCommand(
              absl::StrCat("useradd -M -N -g nogroup -G ", group_,
                           " -s /usr/sbin/nologin ", user_),
              &out) == 0;
    why_ = out;
  }
  ~ScopedGroupUser() {
    std::string out;
    rbln::testing::RunCommand("userdel " + user_ + " 2>/dev/null", &out);
    rbln::testing::RunCommand("groupdel " + group_ + " 2>/dev/null", &out);
  }
  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  const std::string& group() const { return group_; }
  const std::string& user() const { return user_; }

 private:
  const std::string group_;
  const std::string user_;
  bool ok_ = false;
  std::string why_;
};

TEST_F(RemoteCallersTest, SocketGroupAdmitsItsMembers) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "needs root: it creates a group and a user, and runs "
                    "the client as that user";
  }
  ScopedGroupUser account(absl::StrCat(getpid()));
  ASSERT_TRUE(account.ok()) << account.why();
  // The user must reach the socket's directory (the socket decides).
  ASSERT_EQ(chmod(root_.path().c_str(), 0711), 0);
  const std::string as_user = absl::StrCat(
      "cd / && ", kCommandTimeout, " setpriv --reuid=", account.user(),
      " --regid=", account.group(), " --init-groups ",
      ShellQuote(CopyForOtherUsers(BinaryPath("rbln-artifact"))), " --server ",
      ShellQuote(address_), " --get-kvcache-num-blocks --model-id ",
      ShellQuote(store_ + "/a"));

  ASSERT_NO_FATAL_FAILURE(Start({"--socket-group", account.group()}));
  struct stat st {};
  ASSERT_EQ(stat(address_.substr(5).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  Outcome member = RunShell(as_user, root_.Join("member.err"));
  EXPECT_EQ(member.code, 0) << member;
  EXPECT_EQ(member.out, absl::StrCat(Get("a").kvcache_num_blocks(), "\n"));
  stub_.reset();
  Stop();

  // Without the option the socket stays root's group: denied.
  ASSERT_NO_FATAL_FAILURE(Start());
  Outcome outsider = RunShell(as_user, root_.Join("outsider.err"));
  EXPECT_EQ(outsider.code, 4) << outsider;
  EXPECT_THAT(outsider.err, ::testing::HasSubstr("permission denied"));
}

TEST_F(RemoteCallersTest, UnknownSocketGroupIsAConfigurationError) {
  std::string out;
  const int code = rbln::testing::RunCommand(
      absl::StrCat(ShellQuote(BinaryPath("rbln-artifactd")), " --store ",
                   ShellQuote(store_), " --listen ", ShellQuote(address_),
                   " --rbln-smi none --socket-group no-such-group-rbln"),
      &out);
  EXPECT_EQ(code, 78) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("unknown group 'no-such-group-rbln'"));
  EXPECT_FALSE(std::filesystem::exists(address_.substr(5)));
}

}  // namespace
}  // namespace rbln::e2e
