// The hostile-request matrix (docs/security.md): a caller who can reach the
// socket but has no shell on the host, and files in the store written by
// someone else, against the real daemon over its Unix socket. The requests
// go through a gRPC stub, not the CLI, so that they can carry what the CLI
// would refuse to send.
//
// Every case asserts the documented status code, a message under 1 KiB, that
// the daemon still serves, and that neither the store nor a sentinel
// directory outside it changed (except for what a successful write is meant
// to change).
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/format/artifact.h"
#include "core/os/env.h"
#include "core/store/staging_name.h"
#include "core/store/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/artifact/v1/artifact_service.grpc.pb.h"
#include "tests/daemon_stub_testing.h"

namespace rbln::e2e {
namespace {

namespace v1 = ::rbln::artifact::v1;
using ::rbln::testing::HashTree;
using ::rbln::testing::ReadFileOrDie;
using ::rbln::testing::WriteFileOrDie;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr size_t kMaxMessageBytes = 1024;
constexpr char kSecret[] = "TOP-SECRET-OUTSIDE-THE-STORE";

// What may not change: the store and a sentinel directory outside it.
struct Snapshot {
  std::map<std::string, uint64_t> store;
  std::map<std::string, uint64_t> outside;
  bool operator==(const Snapshot& other) const {
    return store == other.store && outside == other.outside;
  }
};

class HostileTest : public StubDaemonTest {
 protected:
  void SetUp() override {
    StubDaemonTest::SetUp();
    std::filesystem::create_directories(store_ + "/team");
    std::filesystem::create_directories(outside_);
    WriteFileOrDie(outside_ + "/secret.txt", kSecret);
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", store_ + "/a"));
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", store_ + "/team/b"));
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", store_ + "/healthy"));
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", outside_ + "/x"));
  }

  grpc::Status Get(const std::string& name,
                   v1::GetKvcacheNumBlocksResponse* resp = nullptr) {
    v1::GetKvcacheNumBlocksRequest req;
    req.set_artifact(name);
    v1::GetKvcacheNumBlocksResponse ignored;
    return stub_->GetKvcacheNumBlocks(Context().get(), req,
                                      resp ? resp : &ignored);
  }

  grpc::Status Set(const std::string& name, uint64_t n,
                   const v1::WriteOptions& options = {},
                   v1::ResizeResponse* resp = nullptr) {
    v1::SetKvcacheNumBlocksRequest req;
    req.set_artifact(name);
    req.set_num_blocks(n);
    *req.mutable_options() = options;
    v1::ResizeResponse ignored;
    return stub_->SetKvcacheNumBlocks(Context().get(), req,
                                      resp ? resp : &ignored);
  }

  grpc::Status Fit(const std::string& name, const std::string& budget,
                   const v1::WriteOptions& options = {}) {
    v1::FitMemoryBudgetRequest req;
    req.set_artifact(name);
    req.set_budget(budget);
    *req.mutable_options() = options;
    v1::ResizeResponse resp;
    return stub_->FitMemoryBudget(Context().get(), req, &resp);
  }

  grpc::Status Describe(const std::string& name,
                        v1::DescribeArtifactResponse* resp = nullptr) {
    v1::DescribeArtifactRequest req;
    req.set_artifact(name);
    v1::DescribeArtifactResponse ignored;
    return stub_->DescribeArtifact(Context().get(), req,
                                   resp ? resp : &ignored);
  }

  grpc::Status List(v1::ListArtifactsResponse* resp) {
    return stub_->ListArtifacts(Context().get(), v1::ListArtifactsRequest(),
                                resp);
  }

  Snapshot Take() const { return {HashTree(store_), HashTree(outside_)}; }

  // The daemon is alive and answers a request for an artifact no test
  // touches.
  void ExpectServing() {
    ASSERT_GT(daemon_.pid, 0);
    int status = 0;
    ASSERT_EQ(waitpid(daemon_.pid, &status, WNOHANG), 0)
        << "the daemon died: " << DescribeWaitStatus(status) << "\n"
        << daemon_.Logs();
    grpc::Status healthy = Get("healthy");
    EXPECT_TRUE(healthy.ok()) << healthy.error_message();
  }

  // The checks every refused request must pass.
  void ExpectRefused(const grpc::Status& status, grpc::StatusCode code,
                     const std::string& in_message, const Snapshot& before) {
    EXPECT_EQ(status.error_code(), code)
        << "message: " << absl::CHexEscape(status.error_message());
    EXPECT_LT(status.error_message().size(), kMaxMessageBytes);
    EXPECT_THAT(status.error_message(), HasSubstr(in_message));
    EXPECT_THAT(status.error_message(), Not(HasSubstr(kSecret)));
    ExpectServing();
    EXPECT_TRUE(Take() == before) << "the store or the sentinel changed";
  }

  uint64_t Count(const std::string& name) {
    v1::GetKvcacheNumBlocksResponse resp;
    grpc::Status status = Get(name, &resp);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return resp.kvcache_num_blocks();
  }

  std::vector<std::string> LockFiles() const {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(
             store_ + "/" + kStateDirName + "/locks", ec)) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  }

  const std::string outside_ = root_.Join("outside");
};

v1::WriteOptions Output(const std::string& dir) {
  v1::WriteOptions options;
  options.set_output_dir(dir);
  return options;
}

// 1. A config nested 200,000 deep crashed the daemon for every client.
TEST_F(HostileTest, DeeplyNestedConfigIsRefusedAndListStillWorks) {
  std::filesystem::create_directories(store_ + "/deep");
  std::filesystem::copy(store_ + "/a", store_ + "/deep/art",
                        std::filesystem::copy_options::recursive);
  WriteFileOrDie(store_ + "/deep/art/rbln_config.json",
                 std::string(200000, '[') + std::string(200000, ']'));
  ASSERT_NO_FATAL_FAILURE(Start());
  const Snapshot before = Take();
  ExpectRefused(Get("deep/art"), grpc::StatusCode::INVALID_ARGUMENT,
                "nests deeper than 64 levels", before);
  ExpectRefused(Describe("deep/art"), grpc::StatusCode::INVALID_ARGUMENT,
                "nests deeper", before);
  ExpectRefused(Set("deep/art", 8), grpc::StatusCode::INVALID_ARGUMENT,
                "nests deeper", before);
  ExpectRefused(Fit("deep/art", "0.5", Output("deep/out")),
                grpc::StatusCode::INVALID_ARGUMENT, "nests deeper", before);
  v1::ListArtifactsResponse list;
  ASSERT_TRUE(List(&list).ok());
  bool listed = false;
  for (const v1::ArtifactSummary& s : list.artifacts()) {
    if (s.artifact() != "deep/art") continue;
    listed = true;
    EXPECT_THAT(s.error(), HasSubstr("nests deeper"));
  }
  EXPECT_TRUE(listed);
  ExpectServing();
}

// 2. A FIFO named rbln_config.json wedged open() forever.
TEST_F(HostileTest, FifoConfigNeitherBlocksReadsNorWrites) {
  std::filesystem::create_directories(store_ + "/pipe");
  ASSERT_EQ(mkfifo((store_ + "/pipe/rbln_config.json").c_str(), 0644), 0);
  ASSERT_NO_FATAL_FAILURE(Start({"--max-concurrent-writes", "2"}));
  const Snapshot before = Take();
  ExpectRefused(Get("pipe"), grpc::StatusCode::FAILED_PRECONDITION,
                "is a FIFO, not a regular file", before);
  // More writes than --max-concurrent-writes, one after another: none may
  // keep its slot.
  for (int i = 0; i < 6; ++i) {
    ExpectRefused(Set("pipe", 8), grpc::StatusCode::FAILED_PRECONDITION, "FIFO",
                  before);
  }
  // 300 reads from 30 threads at once: none may keep a thread.
  std::atomic<int> refused{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 30; ++t) {
    readers.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        if (Get("pipe").error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
          ++refused;
        }
      }
    });
  }
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(refused.load(), 300);
  ExpectServing();
  EXPECT_TRUE(Set("a", 10).ok());
}

// 4. A symlinked rbln_config.json pointing outside was followed and quoted.
TEST_F(HostileTest, SymlinkedFilesAreNeverFollowed) {
  std::filesystem::create_directories(store_ + "/link");
  std::filesystem::copy(store_ + "/a", store_ + "/link/cfg",
                        std::filesystem::copy_options::recursive);
  std::filesystem::remove(store_ + "/link/cfg/rbln_config.json");
  std::filesystem::create_symlink(outside_ + "/secret.txt",
                                  store_ + "/link/cfg/rbln_config.json");
  std::filesystem::copy(store_ + "/a", store_ + "/link/rbln",
                        std::filesystem::copy_options::recursive);
  std::filesystem::remove(store_ + "/link/rbln/prefill.rbln");
  std::filesystem::create_symlink(outside_ + "/x/prefill.rbln",
                                  store_ + "/link/rbln/prefill.rbln");
  std::filesystem::create_directory_symlink(outside_, store_ + "/door");
  ASSERT_NO_FATAL_FAILURE(Start());
  const Snapshot before = Take();
  for (const char* name : {"link/cfg", "link/rbln", "door/x"}) {
    SCOPED_TRACE(name);
    ExpectRefused(Get(name), grpc::StatusCode::PERMISSION_DENIED,
                  "symbolic link", before);
    ExpectRefused(Set(name, 10, Output("copy")),
                  grpc::StatusCode::PERMISSION_DENIED, "symbolic link", before);
    ExpectRefused(Fit(name, "0.5"), grpc::StatusCode::PERMISSION_DENIED,
                  "symbolic link", before);
  }
  ExpectRefused(Set("a", 10, Output("door/new")),
                grpc::StatusCode::PERMISSION_DENIED, "symbolic link", before);
  EXPECT_FALSE(std::filesystem::exists(store_ + "/copy"));
}

// 7. A key twice: Python takes the last value, a first-wins reader the first.
TEST_F(HostileTest, DuplicateKeysAreRefusedNamingTheKeyAndFile) {
  const std::string config = store_ + "/a/rbln_config.json";
  std::string text = ReadFileOrDie(config);
  const size_t brace = text.find('{');
  text.insert(brace + 1, "\n  \"kvcache_num_blocks\": 999,");
  WriteFileOrDie(config, text);
  ASSERT_NO_FATAL_FAILURE(Start());
  const Snapshot before = Take();
  v1::GetKvcacheNumBlocksResponse resp;
  grpc::Status status = Get("a", &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("\"kvcache_num_blocks\" appears twice"));
  EXPECT_THAT(status.error_message(), HasSubstr("a/rbln_config.json"));
  ExpectRefused(Set("a", 10), grpc::StatusCode::INVALID_ARGUMENT,
                "appears twice", before);
  EXPECT_TRUE(Get("team/b").ok());
}

// 8 and 9. Oversized input: every message stays small and says what was
// wrong.
TEST_F(HostileTest, OversizedInputGetsShortMessages) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const Snapshot before = Take();
  const std::string huge(100000, 'n');
  ExpectRefused(Get(huge), grpc::StatusCode::INVALID_ARGUMENT,
                "longer than the 4095", before);
  ExpectRefused(Get(std::string(5000, 'x')), grpc::StatusCode::INVALID_ARGUMENT,
                "PATH_MAX", before);
  ExpectRefused(Get(std::string(300, 'c')), grpc::StatusCode::INVALID_ARGUMENT,
                "has a component of 300 bytes", before);
  ExpectRefused(Set("a", 10, Output(huge)), grpc::StatusCode::INVALID_ARGUMENT,
                "PATH_MAX", before);
  ExpectRefused(Fit("a", huge), grpc::StatusCode::INVALID_ARGUMENT,
                "more bytes)", before);
  v1::WriteOptions long_id;
  long_id.set_operation_id(huge);
  ExpectRefused(Set("a", 10, long_id), grpc::StatusCode::INVALID_ARGUMENT,
                "operation_id", before);
  // Not found, with a name just under the limit in every component.
  std::string deep;
  while (deep.size() < 3900) deep += std::string(190, 'd') + "/";
  ExpectRefused(Get(deep + "z"), grpc::StatusCode::NOT_FOUND, "no artifact",
                before);
  // A request larger than the daemon takes at all.
  ExpectRefused(Get(std::string(5 << 20, 'm')),
                grpc::StatusCode::RESOURCE_EXHAUSTED, "", before);
}

// 10. Counts whose bytes overflow were accepted and written.
TEST_F(HostileTest, HugeCountsAreInvalidBeforeAnyByteIsComputed) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const Snapshot before = Take();
  v1::WriteOptions dry;
  dry.set_dry_run(true);
  for (uint64_t n : {uint64_t{1} << 31, uint64_t{1} << 46,
                     (uint64_t{1} << 48) - 1, ~uint64_t{0}}) {
    SCOPED_TRACE(n);
    ExpectRefused(Set("a", n, dry), grpc::StatusCode::INVALID_ARGUMENT,
                  "hard limit of 2147483647", before);
    ExpectRefused(Set("a", n), grpc::StatusCode::INVALID_ARGUMENT, "hard limit",
                  before);
  }
  // A count in range but too big for the device is a warning, with sane
  // numbers.
  v1::ResizeResponse resp;
  ASSERT_TRUE(Set("a", 1u << 20, dry, &resp).ok());
  bool warned = false;
  for (const std::string& w : resp.warnings()) {
    if (absl::StrContains(w, "does not fit")) {
      warned = true;
      EXPECT_THAT(w, Not(HasSubstr("17179869184")));
    }
  }
  EXPECT_TRUE(warned);
  // A count above the bound in the file itself.
  const std::string config = store_ + "/team/b/rbln_config.json";
  std::string text = ReadFileOrDie(config);
  const size_t at = text.find("\"kvcache_num_blocks\": ");
  ASSERT_NE(at, std::string::npos);
  const size_t end = text.find_first_of(",\n}", at + 22);
  text.replace(at + 22, end - at - 22, "281474976710655");
  WriteFileOrDie(config, text);
  const Snapshot edited = Take();
  ExpectRefused(Describe("team/b"), grpc::StatusCode::FAILED_PRECONDITION,
                "hard limit", edited);
}

// 11. An absolute name with doubled slashes was refused as outside.
TEST_F(HostileTest, DoubledAndTrailingSlashesAreNormalised) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string root = std::filesystem::canonical(store_).string();
  for (const std::string& name :
       std::vector<std::string>{"/" + root + "/a", root + "//a/", "a//",
                                "./a/.", root + "/team//b"}) {
    SCOPED_TRACE(name);
    v1::GetKvcacheNumBlocksResponse resp;
    grpc::Status status = Get(name, &resp);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_TRUE(resp.artifact() == "a" || resp.artifact() == "team/b")
        << resp.artifact();
  }
  const Snapshot before = Take();
  ExpectRefused(Get(outside_ + "/x"), grpc::StatusCode::PERMISSION_DENIED,
                "outside the artifact store", before);
  ExpectRefused(Get("team/../../outside/x"),
                grpc::StatusCode::PERMISSION_DENIED, "'..'", before);
  ExpectRefused(Get(std::string("a\0b", 3)), grpc::StatusCode::INVALID_ARGUMENT,
                "NUL", before);
}

// Holds the cross-process lock of `name` as a maintenance tool would, so
// that a write of it waits.
class HeldLock {
 public:
  HeldLock(const std::string& store, const std::string& name) {
    const std::string root = std::filesystem::canonical(store).string();
    absl::StatusOr<std::unique_ptr<FileLock>> lock = Env::Default()->LockFile(
        ArtifactLockPath(root, name), /*exclusive=*/true, /*wait=*/false);
    EXPECT_TRUE(lock.ok()) << lock.status();
    if (lock.ok()) lock_ = *std::move(lock);
  }
  void Release() { lock_.reset(); }

 private:
  std::unique_ptr<FileLock> lock_;
};

// 12. Two running writes with one operation_id; progress of finished ones.
TEST_F(HostileTest, OperationIdsAreUniqueWhileRunningAndReportOutcomes) {
  ASSERT_NO_FATAL_FAILURE(Start());
  HeldLock held(store_, "a");
  v1::WriteOptions options;
  options.set_operation_id("op-1");
  grpc::Status first;
  std::thread writer([&] { first = Set("a", 10, options); });
  // Wait until the first write is running (its id is known).
  v1::GetWriteProgressRequest progress_req;
  progress_req.set_operation_id("op-1");
  v1::GetWriteProgressResponse progress;
  // It runs, and soon waits for the held lock (WRITE_STATE_WAITING).
  for (int i = 0; i < 500 && progress.state() != v1::WRITE_STATE_WAITING; ++i) {
    progress.Clear();
    ASSERT_TRUE(
        stub_->GetWriteProgress(Context().get(), progress_req, &progress).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(progress.state(), v1::WRITE_STATE_WAITING);
  ASSERT_TRUE(progress.running());
  const Snapshot before = Take();
  ExpectRefused(Set("team/b", 12, options), grpc::StatusCode::ALREADY_EXISTS,
                "op-1", before);
  held.Release();
  writer.join();
  EXPECT_TRUE(first.ok()) << first.error_message();
  progress.Clear();
  ASSERT_TRUE(
      stub_->GetWriteProgress(Context().get(), progress_req, &progress).ok());
  EXPECT_EQ(progress.state(), v1::WRITE_STATE_COMMITTED);
  EXPECT_TRUE(progress.written());
  EXPECT_FALSE(progress.running());
  // A failed write reports its code.
  options.set_operation_id("op-2");
  EXPECT_EQ(Set("a", 1, options).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  progress_req.set_operation_id("op-2");
  progress.Clear();
  ASSERT_TRUE(
      stub_->GetWriteProgress(Context().get(), progress_req, &progress).ok());
  EXPECT_EQ(progress.state(), v1::WRITE_STATE_FAILED);
  EXPECT_EQ(progress.code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(progress.message(), HasSubstr("below the minimum"));
  // The id is free again, and the table of outcomes stays bounded.
  options.set_operation_id("op-1");
  EXPECT_TRUE(Set("a", 12, options).ok());
  for (int i = 0; i < 1100; ++i) {
    v1::WriteOptions dry;
    dry.set_dry_run(true);
    dry.set_operation_id(absl::StrCat("bulk-", i));
    ASSERT_TRUE(Set("a", 10, dry).ok());
  }
  progress_req.set_operation_id("op-1");
  progress.Clear();
  ASSERT_TRUE(
      stub_->GetWriteProgress(Context().get(), progress_req, &progress).ok());
  EXPECT_EQ(progress.state(), v1::WRITE_STATE_UNKNOWN);
  progress_req.set_operation_id("bulk-1099");
  progress.Clear();
  ASSERT_TRUE(
      stub_->GetWriteProgress(Context().get(), progress_req, &progress).ok());
  EXPECT_EQ(progress.state(), v1::WRITE_STATE_COMMITTED);
  EXPECT_FALSE(progress.written());
}

// 13. A newline in a name forged a log line; NUL bytes reached the log.
TEST_F(HostileTest, LogLinesEscapeWhatCallersSend) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const Snapshot before = Take();
  ExpectRefused(Get("x\n[forged] method=Forged outcome=OK"),
                grpc::StatusCode::INVALID_ARGUMENT, "control character",
                before);
  ExpectRefused(Set("a", 10, Output("out\x1b[2J")),
                grpc::StatusCode::INVALID_ARGUMENT, "control character",
                before);
  ExpectRefused(Get(std::string("nul\0byte", 8)),
                grpc::StatusCode::INVALID_ARGUMENT, "NUL", before);
  ExpectRefused(Fit("a", "0.5\r\nmethod=Forged"),
                grpc::StatusCode::INVALID_ARGUMENT, "memory budget", before);
  const std::string log = ReadIfExists(daemon_.stderr_path);
  EXPECT_EQ(log.find('\0'), std::string::npos);
  EXPECT_EQ(log.find('\r'), std::string::npos);
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    EXPECT_FALSE(absl::StrContains(line, "method=Forged") &&
                 !absl::StrContains(line, "method=GetKvcacheNumBlocks") &&
                 !absl::StrContains(line, "method=FitMemoryBudget"))
        << "forged line: " << line;
  }
  EXPECT_THAT(log, HasSubstr("artifact=\"x\\n[forged]"));
}

// 14. One lock file per name ever requested, never removed.
TEST_F(HostileTest, LockFilesStayBoundedWhateverNamesCallersSend) {
  // Missing parents of an output are made; under a file they cannot be.
  WriteFileOrDie(store_ + "/notes", "a file");
  ASSERT_NO_FATAL_FAILURE(Start());
  const Snapshot before = Take();
  for (int i = 0; i < 200; ++i) {
    ExpectRefused(Set(absl::StrCat("missing-", i), 8),
                  grpc::StatusCode::NOT_FOUND, "no artifact", before);
    ExpectRefused(
        Set("a", 10, Output(absl::StrCat("notes/nowhere-", i, "/out"))),
        grpc::StatusCode::FAILED_PRECONDITION, "is not a directory", before);
    EXPECT_EQ(Set("a", 1, Output(absl::StrCat("out-", i))).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_THAT(LockFiles(), ::testing::IsEmpty());
  // Successful writes leave none either.
  ASSERT_TRUE(Set("a", 10).ok());
  ASSERT_TRUE(Set("a", 12, Output("copy")).ok());
  EXPECT_THAT(LockFiles(), ::testing::IsEmpty());
  EXPECT_EQ(Count("copy"), 12u);
}

// 15. Ownership and modes were lost: root:root 755/644 after a Set.
TEST_F(HostileTest, WritesKeepOwnersGroupsAndModes) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give files away";
  const std::string dir = store_ + "/a";
  ASSERT_EQ(chown(dir.c_str(), 4321, 4322), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0750), 0);
  std::map<std::string, std::pair<uid_t, mode_t>> expected;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string path = entry.path().string();
    ASSERT_EQ(chown(path.c_str(), 4321, 4322), 0);
    const mode_t mode = entry.is_directory() ? 0710 : 0640;
    ASSERT_EQ(chmod(path.c_str(), mode), 0);
    expected[path.substr(dir.size())] = {4321, mode};
  }
  expected[""] = {4321, 0750};
  ASSERT_NO_FATAL_FAILURE(Start());
  auto check = [&](const std::string& root) {
    for (const auto& [rel, want] : expected) {
      struct stat st;
      ASSERT_EQ(lstat((root + rel).c_str(), &st), 0) << root + rel;
      EXPECT_EQ(st.st_uid, 4321u) << root + rel;
      EXPECT_EQ(st.st_gid, 4322u) << root + rel;
      EXPECT_EQ(st.st_mode & 07777, want.second) << root + rel;
    }
  };
  ASSERT_TRUE(Set("a", 10).ok());
  check(dir);
  ASSERT_TRUE(Set("a", 12, Output("copy")).ok());
  check(store_ + "/copy");
  EXPECT_EQ(Count("copy"), 12u);
}

// 16. A flipped payload byte was copied with its stale checksum.
TEST_F(HostileTest, CorruptPayloadIsNeverCopiedSilently) {
  const std::string dir = store_ + "/a";
  absl::StatusOr<Artifact> artifact = Artifact::Open(Env::Default(), dir);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  const ContainerFile& prefill = artifact->prefill();
  const std::string path = dir + "/" + prefill.file_name;
  std::string bytes = ReadFileOrDie(path);
  bytes[rbln::testing::ContainerOf(prefill).preamble.payload_offset + 7] ^=
      0x01;
  WriteFileOrDie(path, bytes);
  ASSERT_NO_FATAL_FAILURE(Start());
  const Snapshot before = Take();
  ExpectRefused(Set("a", 10), grpc::StatusCode::DATA_LOSS, "prefill.rbln",
                before);
  ExpectRefused(Fit("a", "0.5", Output("copy")), grpc::StatusCode::DATA_LOSS,
                "was not copied", before);
  v1::WriteOptions verify;
  verify.set_verify(true);
  ExpectRefused(Set("a", 10, verify), grpc::StatusCode::DATA_LOSS, "checksum",
                before);
  verify.set_dry_run(true);
  ExpectRefused(Set("a", 10, verify), grpc::StatusCode::DATA_LOSS, "checksum",
                before);
  // The intact artifact is written, verified or not.
  verify.set_dry_run(false);
  EXPECT_TRUE(Set("team/b", 10, verify).ok());
  EXPECT_TRUE(Set("team/b", 12).ok());
}

// Threat model: planted look-alikes of the daemon's own files.
TEST_F(HostileTest, PlantedStagingLinksAndSpecialFilesAreLeftAlone) {
  // A staging-looking symbolic link to the outside, which recovery must not
  // follow, and special files among an artifact's companions.
  std::filesystem::create_directory_symlink(
      outside_, store_ + "/.a.staging-0123456789abcdef");
  ASSERT_EQ(mkfifo((store_ + "/team/b/tokenizer.fifo").c_str(), 0644), 0);
  const Snapshot outside_before = Take();
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_EQ(HashTree(outside_), outside_before.outside);
  const Snapshot before = Take();
  ExpectRefused(Set("team/b", 10, Output("copy")),
                grpc::StatusCode::FAILED_PRECONDITION, "special file", before);
  ExpectRefused(Get(".a.staging-0123456789abcdef/x"),
                grpc::StatusCode::PERMISSION_DENIED, "hidden component",
                before);
}

// 5. Swapping a store directory for a symbolic link while writes run made
// the daemon write outside the store.
TEST_F(HostileTest, SwappingDirectoriesForLinksNeverWritesOutside) {
  std::filesystem::create_directories(outside_ + "/team");
  ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", outside_ + "/team/b"));
  std::filesystem::create_directory_symlink(outside_ + "/team",
                                            store_ + "/team-link");
  ASSERT_NO_FATAL_FAILURE(Start());
  const auto outside_before = HashTree(outside_);

  std::atomic<bool> stop{false};
  std::atomic<int> swaps{0};
  std::thread swapper([&] {
    const std::string a = store_ + "/team";
    const std::string b = store_ + "/team-link";
    while (!stop.load()) {
      if (renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(),
                    RENAME_EXCHANGE) == 0) {
        ++swaps;
      }
    }
  });
  std::atomic<int> ok{0}, refused{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; !stop.load(); ++i) {
        grpc::Status status =
            (i % 2 == 0) ? Set("team/b", 9 + (i % 5))
                         : Set("team/b", 9 + (i % 5),
                               Output(absl::StrCat("team/out-", w, "-", i)));
        (status.ok() ? ok : refused)++;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(10));
  stop.store(true);
  for (std::thread& t : writers) t.join();
  swapper.join();
  // The store holds the directory again (an even number of exchanges).
  if (std::filesystem::is_symlink(store_ + "/team")) {
    ASSERT_EQ(renameat2(AT_FDCWD, (store_ + "/team").c_str(), AT_FDCWD,
                        (store_ + "/team-link").c_str(), RENAME_EXCHANGE),
              0);
  }
  printf("race: %d swaps, %d writes committed, %d refused\n", swaps.load(),
         ok.load(), refused.load());
  EXPECT_GT(swaps.load(), 100);
  EXPECT_GT(ok.load() + refused.load(), 20);
  EXPECT_EQ(HashTree(outside_), outside_before)
      << "something was written outside the store";
  ExpectServing();
  EXPECT_GE(Count("team/b"), 9u);
}

// A directory swapped for another real directory while writes run: the
// exchange must never take, and then delete, a tree it did not read.
TEST_F(HostileTest, SwappingDirectoriesForDirectoriesNeverLosesATree) {
  std::filesystem::create_directories(store_ + "/other");
  ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", store_ + "/other/b"));
  ASSERT_NO_FATAL_FAILURE(Start());
  std::atomic<bool> stop{false};
  std::atomic<int> swaps{0}, ok{0}, aborted{0};
  std::thread swapper([&] {
    const std::string a = store_ + "/team";
    const std::string b = store_ + "/other";
    while (!stop.load()) {
      if (renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(),
                    RENAME_EXCHANGE) == 0) {
        ++swaps;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < 3; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; !stop.load(); ++i) {
        grpc::Status status = Set("team/b", 9 + (i + w) % 5);
        if (status.ok()) ++ok;
        if (status.error_code() == grpc::StatusCode::ABORTED) ++aborted;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(5));
  stop.store(true);
  for (std::thread& t : writers) t.join();
  swapper.join();
  printf("directory swaps: %d, writes committed %d, aborted %d\n", swaps.load(),
         ok.load(), aborted.load());
  EXPECT_GT(swaps.load(), 100);
  EXPECT_GT(ok.load(), 0);
  // Both trees are whole: nothing was deleted in place of a staging tree.
  for (const std::string& dir : {store_ + "/team/b", store_ + "/other/b"}) {
    absl::StatusOr<Artifact> artifact =
        Artifact::Open(Env::Default(), dir, {.verify_payload = true});
    EXPECT_TRUE(artifact.ok()) << dir << ": " << artifact.status();
  }
  ExpectServing();
  // A staging directory whose parent was swapped away mid-write is left
  // where the parent went (it is not looked for by path elsewhere). The
  // next start removes what its intent records name, where they name it;
  // one that moved with its parent has no record there: it is left, and
  // reported with the command that removes it.
  stub_.reset();
  Stop();
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string log = ReadIfExists(daemon_.stderr_path);
  std::vector<absl::string_view> reported;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StrContains(line, "left in place: ")) reported.push_back(line);
  }
  int left = 0;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(store_)) {
    const std::string name = entry.path().filename().string();
    if (!StagedArtifactName(name) && !RetiredArtifactName(name)) continue;
    ++left;
    const std::string path = entry.path().string();
    EXPECT_EQ(std::count_if(reported.begin(), reported.end(),
                            [&](absl::string_view line) {
                              return absl::StrContains(
                                  line, absl::StrCat("rm -rf -- '", path, "'"));
                            }),
              1)
        << "debris after recovery, not reported once: " << path;
  }
  EXPECT_EQ(static_cast<int>(reported.size()), left) << log;
  printf("left in place after the swaps, and reported: %d\n", left);
  ExpectServing();
}

// A directory name that is not UTF-8 must not break --list for everyone.
TEST_F(HostileTest, NamesThatAreNotUtf8AreListedEscaped) {
  std::filesystem::copy(store_ + "/a", store_ + "/bad\xff\x1b[2Jname",
                        std::filesystem::copy_options::recursive);
  ASSERT_NO_FATAL_FAILURE(Start());
  v1::ListArtifactsResponse list;
  grpc::Status status = List(&list);
  ASSERT_TRUE(status.ok()) << status.error_message();
  bool found = false;
  for (const v1::ArtifactSummary& s : list.artifacts()) {
    if (!absl::StartsWith(s.artifact(), "bad")) continue;
    found = true;
    EXPECT_EQ(s.artifact(), "bad\\xff\\x1b[2Jname");
    EXPECT_THAT(s.error(), HasSubstr("not UTF-8"));
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(list.artifacts_size(), 4);  // a, bad…, healthy, team/b
}

// 3 and 6. Shutdown: a write that cannot reach its commit point in the grace
// period is cancelled and told so; the daemon exits in time.
TEST_F(HostileTest, ShutdownCancelsAWriteStuckBeforeItsCommitPoint) {
  ASSERT_NO_FATAL_FAILURE(Start({"--shutdown-grace-seconds", "1"}));
  const Snapshot before = Take();
  HeldLock held(store_, "a");
  grpc::Status write;
  std::thread writer([&] { write = Set("a", 10); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(kill(daemon_.pid, SIGTERM), 0);
  // Grace 1 s + 5 s: the bound the daemon promises, plus slack for a busy
  // machine.
  std::optional<int> status = WaitBounded(daemon_.pid, std::chrono::seconds(9));
  daemon_.pid = -1;
  writer.join();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(DescribeWaitStatus(*status), "exit 0");
  EXPECT_EQ(write.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(write.error_message(), HasSubstr("shutting down"));
  EXPECT_THAT(write.error_message(), HasSubstr("nothing was changed"));
  held.Release();
  EXPECT_EQ(HashTree(outside_), before.outside);
  absl::StatusOr<Artifact> a = Artifact::Open(Env::Default(), store_ + "/a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->current_num_blocks(), 16u);
}

// 5 of issue 45. A client that holds a connection open and answers nothing
// (not the GOAWAY's ping, which gRPC waits 20 s for) does not hold up the
// exit: once no call runs, the daemon closes its connections.
TEST_F(HostileTest, ShutdownClosesAConnectionThatAnswersNothing) {
  ASSERT_NO_FATAL_FAILURE(Start({"--shutdown-grace-seconds", "30"}));
  ASSERT_TRUE(Get("a").ok());
  const int conn = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(conn, 0) << strerror(errno);
  sockaddr_un to = {};
  to.sun_family = AF_UNIX;
  const std::string path(absl::StripPrefix(address_, "unix:"));
  ASSERT_LT(path.size(), sizeof(to.sun_path));
  path.copy(to.sun_path, path.size());
  ASSERT_EQ(connect(conn, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0)
      << strerror(errno);
  // HTTP/2's client preface and an empty SETTINGS frame; then silence.
  const std::string hello =
      absl::StrCat("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
                   std::string("\0\0\0\x04\0\0\0\0\0", 9));
  ASSERT_EQ(write(conn, hello.data(), hello.size()),
            static_cast<ssize_t>(hello.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(kill(daemon_.pid, SIGTERM), 0);
  // Well before gRPC's 20 s wait for the ping, or the 33 s of the grace
  // and gRPC's cancel.
  std::optional<int> status =
      WaitBounded(daemon_.pid, std::chrono::seconds(15));
  daemon_.pid = -1;
  close(conn);
  ASSERT_TRUE(status.has_value()) << "still running 15 s after SIGTERM";
  EXPECT_EQ(DescribeWaitStatus(*status), "exit 0");
}

TEST_F(HostileTest, ShutdownLetsAWriteThatFinishesInTheGraceReportIt) {
  ASSERT_NO_FATAL_FAILURE(Start({"--shutdown-grace-seconds", "20"}));
  HeldLock held(store_, "a");
  grpc::Status write;
  std::thread writer([&] { write = Set("a", 10); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(kill(daemon_.pid, SIGTERM), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  held.Release();
  std::optional<int> status =
      WaitBounded(daemon_.pid, std::chrono::seconds(30));
  daemon_.pid = -1;
  writer.join();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(DescribeWaitStatus(*status), "exit 0");
  EXPECT_TRUE(write.ok()) << write.error_message();
  absl::StatusOr<Artifact> a = Artifact::Open(Env::Default(), store_ + "/a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->current_num_blocks(), 10u);
}

// A file system image loop-mounted for one test; thawed and unmounted
// whatever happens to the test.
class LoopMount {
 public:
  // False (with the reason in `why`) where loop mounts are not possible.
  bool Mount(const std::string& image, const std::string& dir,
             std::string* why) {
    dir_ = dir;
    std::filesystem::create_directories(dir);
    mounted_ = rbln::testing::RunCommand(
                   absl::StrCat("truncate -s 64M ", image, " && mkfs.ext4 -q ",
                                image, " && mount -o loop ", image, " ", dir),
                   why) == 0;
    return mounted_;
  }
  bool Freeze() { return Run("fsfreeze -f "); }
  bool Thaw() { return Run("fsfreeze -u "); }
  ~LoopMount() {
    if (!mounted_) return;
    Thaw();
    Run("umount ");
  }

 private:
  bool Run(const std::string& command) {
    std::string output;
    return rbln::testing::RunCommand(command + dir_, &output) == 0;
  }
  std::string dir_;
  bool mounted_ = false;
};

// 3. A thread stuck in the kernel (a frozen file system) kept SIGTERM from
// ever finishing.
TEST_F(HostileTest, ShutdownEndsServingEvenWithAThreadStuckInTheKernel) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a loop mount";
  LoopMount mount;
  std::string why;
  if (!mount.Mount(root_.Join("fs.img"), root_.Join("mnt"), &why)) {
    GTEST_SKIP() << "no loop mount here: " << why;
  }
  const std::string frozen_store = root_.Join("mnt/store");
  std::filesystem::create_directories(frozen_store);
  ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", frozen_store + "/a"));
  ASSERT_NO_FATAL_FAILURE(StartWithFlags(
      address_, {"--store", frozen_store, "--listen", address_, "--rbln-smi",
                 "none", "--shutdown-grace-seconds", "1"}));
  ConnectStub();
  ASSERT_TRUE(mount.Freeze());
  // The write blocks in the kernel creating its lock file.
  std::thread writer([&] { Set("a", 10); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(kill(daemon_.pid, SIGTERM), 0);
  // By grace + 5 s the daemon has stopped serving and logged the stuck
  // operation; its process ends once the kernel lets the thread go.
  bool logged = false;
  for (int i = 0; i < 90 && !logged; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    logged = absl::StrContains(ReadIfExists(daemon_.stderr_path),
                               "still running at the forced exit: "
                               "SetKvcacheNumBlocks artifact=\"a\"");
  }
  const bool accepting = Accepts(address_);
  EXPECT_TRUE(mount.Thaw());
  std::optional<int> status =
      WaitBounded(daemon_.pid, std::chrono::seconds(30));
  daemon_.pid = -1;
  writer.join();
  EXPECT_TRUE(logged) << daemon_.Logs();
  EXPECT_FALSE(accepting) << "still serving after the forced exit";
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(DescribeWaitStatus(*status), "exit 1") << daemon_.Logs();
}

}  // namespace
}  // namespace rbln::e2e
