// End-to-end tests of what the rbln-artifact client says and returns when
// things go wrong (README "The CLI": exit codes, --json, messages): the real
// client binary against the real rbln-artifactd on a real Unix socket.
//
//   3  no daemon              4  a socket the caller may not use
//   5  the daemon killed while a write runs (outcome unknown)
//   1  the daemon's refusals, with --json's error object on stdout
//
// Writes are held up deterministically by taking the artifact's
// cross-process lock the way a maintenance tool does
// (docs/commit-protocol.md); every wait is bounded.
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/os/env.h"
#include "core/store/store.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "rbln/artifact/v1/artifact_service.grpc.pb.h"
#include "rbln/artifact/v1/reply_metadata.h"
#include "tests/daemon_testing.h"

namespace rbln::e2e {
namespace {

namespace v1 = ::rbln::artifact::v1;
using ::rbln::testing::BinaryPath;
using ::rbln::testing::CopyForOtherUsers;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint32_t kNobody = 65534;
constexpr char kScript[] = "/usr/bin/script";

// script(1) gives the client a terminal.
bool HaveScript() { return access(kScript, X_OK) == 0; }
constexpr char kNoScript[] =
    "/usr/bin/script (util-linux) is missing: it gives the client a terminal";

// One line of JSON, parsed; fails the test when it is not an object.
rapidjson::Document ParseLine(const std::string& line) {
  rapidjson::Document doc;
  doc.Parse(line.c_str());
  EXPECT_FALSE(doc.HasParseError()) << "not JSON: " << line;
  EXPECT_TRUE(doc.IsObject()) << line;
  return doc;
}

// The {"error": {...}} object of --json (one line on stdout), checked for
// its shape; returns the inner object's fields as a document.
rapidjson::Document ErrorObject(const std::string& line) {
  rapidjson::Document doc = ParseLine(line);
  EXPECT_TRUE(doc.IsObject() && doc.HasMember("error") &&
              doc["error"].IsObject())
      << line;
  if (!doc.IsObject() || !doc.HasMember("error")) return doc;
  const rapidjson::Value& error = doc["error"];
  EXPECT_TRUE(error.HasMember("code") && error["code"].IsString()) << line;
  EXPECT_TRUE(error.HasMember("code_number") && error["code_number"].IsInt())
      << line;
  EXPECT_TRUE(error.HasMember("message") && error["message"].IsString() &&
              error["message"].GetStringLength() > 0)
      << line;
  EXPECT_TRUE(error.HasMember("details") && error["details"].IsObject())
      << line;
  return doc;
}

std::string Str(const rapidjson::Value& object, const char* field) {
  if (!object.IsObject() || !object.HasMember(field) ||
      !object[field].IsString()) {
    ADD_FAILURE() << "no string field " << field;
    return "";
  }
  return object[field].GetString();
}

class CliExitTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", StorePath("tiny")));
    ASSERT_NO_FATAL_FAILURE(Start({"--rbln-smi", "none"}));
  }

  // Starts rbln-artifact ARGS in the store under script(1) (util-linux,
  // Essential on Debian), so that its stderr is a terminal; its output
  // (stdout and stderr together) goes to `output_path`.
  pid_t SpawnOnATerminal(const std::string& args,
                         const std::string& output_path) {
    const std::string command =
        absl::StrCat(ShellQuote(BinaryPath("rbln-artifact")), " --server ",
                     ShellQuote(address_), " ", args);
    return Spawn(
        {kScript, "--quiet", "--return", "--command", command, "/dev/null"},
        store_, output_path, root_.Join("script.err"));
  }

  // Waits (bounded) until the file at `path` contains `text`, or until
  // `pid` exits. Returns whether the text appeared.
  bool AwaitOutput(const std::string& path, const std::string& text,
                   pid_t pid) {
    const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (absl::StrContains(ReadIfExists(path), text)) return true;
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        ADD_FAILURE() << "the client exited (" << DescribeWaitStatus(status)
                      << ") before printing '" << text << "':\n"
                      << ReadIfExists(path);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "no '" << text << "' within " << kStartTimeout.count()
                  << " s:\n"
                  << ReadIfExists(path);
    return false;
  }

  // The daemon's socket.
  const std::string socket_ = address_.substr(5);
};

// --- 3: no daemon. ---

TEST_F(CliExitTest, NoDaemonExitsThreeWithAnUnavailableErrorObject) {
  const std::string nowhere = "unix:" + root_.Join("nowhere.sock");
  Outcome o =
      CliAt(nowhere, "--get-kvcache-num-blocks --model-id ./tiny", store_);
  EXPECT_EQ(o.code, 3) << o;
  EXPECT_THAT(o.err, HasSubstr("cannot reach rbln-artifactd at " + nowhere));
  EXPECT_EQ(o.out, "");

  o = CliAt(nowhere, "--get-kvcache-num-blocks --model-id ./tiny --json",
            store_);
  EXPECT_EQ(o.code, 3) << o;
  EXPECT_THAT(o.err, HasSubstr("cannot reach rbln-artifactd at " + nowhere));
  rapidjson::Document doc = ErrorObject(o.out);
  EXPECT_EQ(Str(doc["error"], "code"), "UNAVAILABLE");
  EXPECT_EQ(doc["error"]["code_number"].GetInt(), 14);
  EXPECT_EQ(Str(doc["error"]["details"], "server"), nowhere);
}

// --- 4: a socket the caller may not use, told apart from no daemon. ---

TEST_F(CliExitTest, SocketTheCallerMayNotUseExitsFourNotThree) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "needs root, to run the client as user nobody "
                    "(uid 65534) against a root-owned 0660 socket";
  }
  // Let nobody reach the socket's directory (the socket itself stays 0660).
  ASSERT_EQ(chmod(root_.path().c_str(), 0755), 0) << strerror(errno);
  const std::string as_nobody =
      absl::StrCat("cd / && ", kCommandTimeout, " setpriv --reuid=", kNobody,
                   " --regid=", kNobody, " --clear-groups ",
                   ShellQuote(CopyForOtherUsers(BinaryPath("rbln-artifact"))));

  Outcome o = RunShell(
      absl::StrCat(as_nobody, " --server ", ShellQuote(address_), " --list"),
      root_.Join("cli.err"));
  EXPECT_EQ(o.code, 4) << o;
  EXPECT_EQ(o.err, absl::StrCat("rbln-artifact: permission denied on the "
                                "socket ",
                                socket_,
                                " (you are uid 65534; the socket is root:root "
                                "0660); ask for its group or run as its "
                                "owner\n"));
  EXPECT_EQ(o.out, "");

  o = RunShell(absl::StrCat(as_nobody, " --server ", ShellQuote(address_),
                            " --list --json"),
               root_.Join("cli.err"));
  EXPECT_EQ(o.code, 4) << o;
  rapidjson::Document doc = ErrorObject(o.out);
  EXPECT_EQ(Str(doc["error"], "code"), "PERMISSION_DENIED");

  // No socket at all is still "not running", for nobody too.
  o = RunShell(absl::StrCat(as_nobody, " --server unix:",
                            root_.Join("nowhere.sock"), " --list"),
               root_.Join("cli.err"));
  EXPECT_EQ(o.code, 3) << o;

  // A directory above the socket closed to the caller: denied as well.
  ASSERT_EQ(chmod(root_.path().c_str(), 0700), 0) << strerror(errno);
  o = RunShell(
      absl::StrCat(as_nobody, " --server ", ShellQuote(address_), " --list"),
      root_.Join("cli.err"));
  EXPECT_EQ(o.code, 4) << o;
  EXPECT_THAT(o.err, HasSubstr("a directory on its path is closed to you"));

  // The daemon still serves its owner.
  EXPECT_EQ(Cli("--list").code, 0);
}

// --- 5: the daemon dies while a write runs. ---

TEST_F(CliExitTest, DaemonKilledDuringAWriteExitsFiveOutcomeUnknown) {
  if (!HaveScript()) GTEST_SKIP() << kNoScript;
  const uint64_t before = CountOnDisk(StorePath("tiny"));
  HeldArtifactLock lock(store_, "tiny");
  ASSERT_TRUE(lock.held());
  const std::string output = root_.Join("writer.out");
  const pid_t writer = SpawnOnATerminal(
      "--set-kvcache-num-blocks 12 --model-id ./tiny --json", output);
  ASSERT_GT(writer, 0);
  // The notice proves that the write is inside the daemon, waiting.
  ASSERT_TRUE(AwaitOutput(output, "waiting for another write to", writer));

  ASSERT_EQ(kill(daemon_.pid, SIGKILL), 0) << strerror(errno);
  std::optional<int> daemon_status = WaitBounded(daemon_.pid, kExitTimeout);
  daemon_.pid = -1;
  ASSERT_TRUE(daemon_status.has_value());

  std::optional<int> status = WaitBounded(writer, kExitTimeout);
  ASSERT_TRUE(status.has_value());
  const std::string text = ReadIfExists(output);
  EXPECT_EQ(DescribeWaitStatus(*status), "exit 5") << text;
  EXPECT_THAT(text, HasSubstr("the daemon closed the connection during the "
                              "write"));
  EXPECT_THAT(text, HasSubstr("the artifact is either unchanged or fully at "
                              "the new count; check with "
                              "--get-kvcache-num-blocks --model-id "));
  EXPECT_THAT(text, Not(HasSubstr("Cancelling all calls")));
  // --json: the error object, on a line of its own.
  std::string json_line;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripSuffix(line, "\r");
    if (absl::StartsWith(line, "{\"error\"")) json_line = std::string(line);
  }
  rapidjson::Document doc = ErrorObject(json_line);
  EXPECT_EQ(Str(doc["error"]["details"], "outcome"), "unknown");
  // Here the write never got its lock: nothing changed.
  lock.Release();
  EXPECT_EQ(CountOnDisk(StorePath("tiny")), before);
}

// The daemon's own UNAVAILABLE at shutdown is its answer, not an
// interruption: the outcome is known (nothing changed), so exit 1.
TEST_F(CliExitTest, ShutdownCancellingAWriteIsTheDaemonsAnswerExitOne) {
  if (!HaveScript()) GTEST_SKIP() << kNoScript;
  ASSERT_NO_FATAL_FAILURE(
      Restart({"--rbln-smi", "none", "--shutdown-grace-seconds", "1"}));
  const uint64_t before = CountOnDisk(StorePath("tiny"));
  HeldArtifactLock lock(store_, "tiny");
  ASSERT_TRUE(lock.held());
  const std::string output = root_.Join("writer.out");
  const pid_t writer =
      SpawnOnATerminal("--set-kvcache-num-blocks 12 --model-id ./tiny", output);
  ASSERT_GT(writer, 0);
  ASSERT_TRUE(AwaitOutput(output, "waiting for another write to", writer));

  ASSERT_EQ(kill(daemon_.pid, SIGTERM), 0) << strerror(errno);
  // Grace 1 s + 5 s, the daemon's bound, plus slack for a busy machine.
  std::optional<int> daemon_status =
      WaitBounded(daemon_.pid, std::chrono::seconds(30));
  daemon_.pid = -1;
  ASSERT_TRUE(daemon_status.has_value());
  EXPECT_EQ(DescribeWaitStatus(*daemon_status), "exit 0");
  std::optional<int> status = WaitBounded(writer, kExitTimeout);
  ASSERT_TRUE(status.has_value());
  const std::string text = ReadIfExists(output);
  EXPECT_EQ(DescribeWaitStatus(*status), "exit 1") << text;
  EXPECT_THAT(text, HasSubstr("rbln-artifact: error (UNAVAILABLE): "));
  EXPECT_THAT(text, HasSubstr("shutting down; nothing was changed"));
  EXPECT_THAT(text, Not(HasSubstr("closed the connection")));
  lock.Release();
  EXPECT_EQ(CountOnDisk(StorePath("tiny")), before);
}

// --- Waiting for another writer. ---

TEST_F(CliExitTest, AWaitingWriterSaysSoOnATerminalAndThenWrites) {
  if (!HaveScript()) GTEST_SKIP() << kNoScript;
  HeldArtifactLock lock(store_, "tiny");
  ASSERT_TRUE(lock.held());
  const std::string output = root_.Join("writer.out");
  const pid_t writer =
      SpawnOnATerminal("--set-kvcache-num-blocks 12 --model-id ./tiny", output);
  ASSERT_GT(writer, 0);
  ASSERT_TRUE(AwaitOutput(output,
                          absl::StrCat("waiting for another write to ", store_,
                                       "/tiny to finish\u2026"),
                          writer));
  lock.Release();
  std::optional<int> status = WaitBounded(writer, kExitTimeout);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(DescribeWaitStatus(*status), "exit 0") << ReadIfExists(output);
  EXPECT_THAT(ReadIfExists(output), HasSubstr("kvcache_num_blocks: 16 -> 12"));
  EXPECT_EQ(CountOnDisk(StorePath("tiny")), 12u);
}

TEST_F(CliExitTest, GetWriteProgressReportsAWriteWaitingForALock) {
  auto stub = v1::ArtifactService::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  HeldArtifactLock lock(store_, "tiny");
  ASSERT_TRUE(lock.held());
  v1::SetKvcacheNumBlocksRequest request;
  request.set_artifact("tiny");
  request.set_num_blocks(10);
  request.mutable_options()->set_operation_id("cli-exit-test-waiting");
  grpc::Status write_status;
  v1::ResizeResponse write_reply;
  grpc::ClientContext write_context;
  write_context.set_deadline(std::chrono::system_clock::now() + kExitTimeout);
  std::thread writer([&] {
    write_status =
        stub->SetKvcacheNumBlocks(&write_context, request, &write_reply);
  });

  v1::GetWriteProgressRequest poll;
  poll.set_operation_id("cli-exit-test-waiting");
  v1::GetWriteProgressResponse progress;
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (std::chrono::steady_clock::now() < deadline) {
    grpc::ClientContext context;
    progress.Clear();
    const grpc::Status status =
        stub->GetWriteProgress(&context, poll, &progress);
    // On failure the writer thread must still be joined: no ASSERT here.
    EXPECT_TRUE(status.ok()) << status.error_message();
    if (!status.ok() || progress.state() == v1::WRITE_STATE_WAITING) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(progress.state(), v1::WRITE_STATE_WAITING)
      << progress.DebugString();
  EXPECT_TRUE(progress.running());
  lock.Release();
  writer.join();
  ASSERT_TRUE(write_status.ok()) << write_status.error_message();
  EXPECT_EQ(write_reply.new_num_blocks(), 10u);

  grpc::ClientContext context;
  ASSERT_TRUE(stub->GetWriteProgress(&context, poll, &progress).ok());
  EXPECT_EQ(progress.state(), v1::WRITE_STATE_COMMITTED);
  EXPECT_TRUE(progress.written());
}

// --- The daemon marks its errors (and a transport failure lacks it). ---

// An error carries the mark; a success, which only a handler gives, does
// not (the trailer is a tenth of a cached read's cost: docs/performance.md).
TEST_F(CliExitTest, EveryHandlerErrorCarriesTheMarkASuccessNone) {
  auto stub = v1::ArtifactService::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  for (const std::string& name : {std::string("tiny"), std::string("none")}) {
    grpc::ClientContext context;
    v1::GetKvcacheNumBlocksRequest request;
    request.set_artifact(name);
    v1::GetKvcacheNumBlocksResponse reply;
    grpc::Status status = stub->GetKvcacheNumBlocks(&context, request, &reply);
    EXPECT_EQ(status.ok(), name == "tiny") << status.error_message();
    const auto& trailers = context.GetServerTrailingMetadata();
    auto it = trailers.find(v1::kReplyMetadataKey);
    if (status.ok()) {
      EXPECT_EQ(it, trailers.end()) << name;
      continue;
    }
    ASSERT_NE(it, trailers.end()) << name;
    EXPECT_EQ(it->second, v1::kReplyMetadataValue);
  }
}

// --- --json. ---

TEST_F(CliExitTest, JsonPrintsSixtyFourBitIntegersAsNumbers) {
  Outcome get = Cli("--get-kvcache-num-blocks --model-id ./tiny --json");
  ASSERT_EQ(get.code, 0) << get;
  rapidjson::Document g = ParseLine(get.out);
  for (const char* field : {"kvcache_num_blocks", "compiled_num_blocks",
                            "num_full_blocks", "num_min_blocks"}) {
    ASSERT_TRUE(g.HasMember(field)) << field;
    EXPECT_TRUE(g[field].IsNumber() && g[field].IsUint64()) << field;
  }
  EXPECT_EQ(g["kvcache_num_blocks"].GetUint64(),
            CountOnDisk(StorePath("tiny")));

  Outcome describe = Cli("--describe --model-id ./tiny --json");
  ASSERT_EQ(describe.code, 0) << describe;
  rapidjson::Document d = ParseLine(describe.out);
  ASSERT_TRUE(d["graphs"].IsArray() && d["graphs"].Size() > 0) << describe;
  for (const rapidjson::Value& graph : d["graphs"].GetArray()) {
    ASSERT_TRUE(graph["file_bytes"].IsUint64()) << describe;
    const std::string file =
        StorePath(absl::StrCat("tiny/", graph["file_name"].GetString()));
    EXPECT_EQ(graph["file_bytes"].GetUint64(),
              std::filesystem::file_size(file));
    EXPECT_TRUE(graph["payload_bytes"].IsUint64());
  }
  ASSERT_TRUE(d["buckets"].IsArray() && d["buckets"].Size() > 0) << describe;
  for (const rapidjson::Value& bucket : d["buckets"].GetArray()) {
    EXPECT_TRUE(bucket["available_bytes"].IsUint64());
    EXPECT_TRUE(bucket["headroom_bytes"].IsInt64());  // int64: may be < 0
  }

  Outcome set = Cli("--set-kvcache-num-blocks 12 --model-id ./tiny --json");
  ASSERT_EQ(set.code, 0) << set;
  rapidjson::Document s = ParseLine(set.out);
  ASSERT_TRUE(s["new_num_blocks"].IsUint64()) << set;
  EXPECT_EQ(s["new_num_blocks"].GetUint64(), 12u);
  EXPECT_TRUE(s["previous_num_blocks"].IsUint64());
}

TEST_F(CliExitTest, JsonErrorObjectForALostCompareAndSet) {
  const uint64_t current = CountOnDisk(StorePath("tiny"));
  Outcome o = Cli(absl::StrCat("--set-kvcache-num-blocks 10 --model-id ./tiny",
                               " --expect ", current + 1, " --json"));
  EXPECT_EQ(o.code, 1) << o;
  EXPECT_THAT(o.err, HasSubstr("rbln-artifact: error (ABORTED): "));
  EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 1) << o;
  rapidjson::Document doc = ErrorObject(o.out);
  const rapidjson::Value& error = doc["error"];
  EXPECT_EQ(Str(error, "code"), "ABORTED");
  EXPECT_EQ(error["code_number"].GetInt(), 10);
  EXPECT_THAT(o.err, HasSubstr(Str(error, "message")));
  EXPECT_EQ(Str(error["details"], "artifact"), StorePath("tiny"));
  EXPECT_EQ(CountOnDisk(StorePath("tiny")), current);
}

TEST_F(CliExitTest, JsonUsageErrorIsAnInvalidArgumentObject) {
  Outcome o = Cli("--get-kvcache-num-blocks --json");
  EXPECT_EQ(o.code, 2) << o;
  EXPECT_THAT(o.err, HasSubstr("needs --model-id"));
  rapidjson::Document doc = ErrorObject(o.out);
  EXPECT_EQ(Str(doc["error"], "code"), "INVALID_ARGUMENT");
}

// --- Messages that say what to do. ---

TEST_F(CliExitTest, ExistingOutputDirNamesReplace) {
  Outcome first =
      Cli("--set-kvcache-num-blocks 12 --model-id ./tiny --output-dir ./copy");
  ASSERT_EQ(first.code, 0) << first;
  Outcome again =
      Cli("--set-kvcache-num-blocks 10 --model-id ./tiny --output-dir ./copy");
  EXPECT_EQ(again.code, 1) << again;
  EXPECT_THAT(again.err, HasSubstr("error (ALREADY_EXISTS)"));
  EXPECT_THAT(again.err, HasSubstr("rbln-artifact --replace"));
  EXPECT_THAT(again.err, Not(HasSubstr("add --replace")));  // said once
  EXPECT_EQ(CountOnDisk(StorePath("copy")), 12u);
  Outcome replaced =
      Cli("--set-kvcache-num-blocks 10 --model-id ./tiny --output-dir ./copy "
          "--replace");
  EXPECT_EQ(replaced.code, 0) << replaced;
  EXPECT_EQ(CountOnDisk(StorePath("copy")), 10u);
}

TEST_F(CliExitTest, AParentOfOutputDirThatIsNoDirectoryIsNamed) {
  rbln::testing::WriteFileOrDie(StorePath("notes"), "a file");
  for (const char* dry_run : {"", " --dry-run"}) {
    Outcome o = Cli(absl::StrCat(
        "--set-kvcache-num-blocks 10 --model-id ./tiny --output-dir "
        "./notes/such/copy",
        dry_run));
    EXPECT_EQ(o.code, 1) << o;
    EXPECT_THAT(o.err, HasSubstr("error (FAILED_PRECONDITION)"));
    EXPECT_THAT(o.err,
                HasSubstr(absl::StrCat(store_,
                                       "/notes, a parent of output directory "
                                       "notes/such/copy, is not a directory")));
  }
  EXPECT_EQ(rbln::testing::ReadFileOrDie(StorePath("notes")), "a file");
}

}  // namespace
}  // namespace rbln::e2e
