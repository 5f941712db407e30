// ExternalCodec with real worker processes (tests/codecs/test_codec.py) on
// real files, through a confined Env: the round trips, every way a codec can
// break, the pool and, as root, the uid drop.
#include "core/format/external_codec.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "core/core_metrics.h"
#include "core/metrics.h"
#include "core/os/containment.h"
#include "core/os/env.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr uid_t kNobody = 65534;

// rbln_artifactd_codec_calls_total{codec="external",op,outcome} now.
double Calls(absl::string_view op, absl::string_view outcome) {
  RegisterCoreMetrics();
  return metrics::Registry::Default()
      .Sample(absl::StrCat(
          "rbln_artifactd_codec_calls_total{codec=\"external\",op=\"", op,
          "\",outcome=\"", outcome, "\"}"))
      .value_or(-1);
}

// The calls rbln_artifactd_codec_call_seconds{codec="external",op} timed.
double Timed(absl::string_view op) {
  RegisterCoreMetrics();
  return metrics::Registry::Default()
      .Sample(absl::StrCat(
          "rbln_artifactd_codec_call_seconds_count{codec=\"external\",op=\"",
          op, "\"}"))
      .value_or(-1);
}

// A file of the test codec's format: one node of two chiplets.
std::string CodecFile(absl::string_view mode = "") {
  return absl::StrCat(
      R"({"test_codec": 1, "granularity": "chiplet", "num_nodes": 1, )",
      R"("buckets_per_node": 2, "other": {"weights": [[100, 200]], )",
      R"("program": [[7, 9]]}, "kv_tensors": {"kv0": [[64, 64]], )",
      R"("kv1": [[32, 32]]})",
      mode.empty() ? "" : absl::StrCat(R"(, "mode": ")", mode, "\""), "}");
}

class ExternalCodecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The script where any uid can read it (the checkout may not be).
    std::filesystem::permissions(scripts_.path(), std::filesystem::perms(0755));
    script_ = scripts_.Join("test_codec.py");
    std::filesystem::copy_file(
        testing::SourcePath("tests/codecs/test_codec.py"), script_);
    std::filesystem::permissions(script_, std::filesystem::perms(0644));
    // The store: under a 0700 directory of the test's uid, which the codec
    // (as nobody) cannot search; it reads what it is handed.
    root_ = std::filesystem::canonical(tmp_.path()).string() + "/store";
    std::filesystem::create_directories(root_ + "/model");
    std::filesystem::create_directories(root_ + "/staging");
    env_ = testing::ConfinedEnvOrDie(root_);
    WriteSource("prefill.rbln", CodecFile());
  }

  std::string WriteSource(const std::string& name, absl::string_view data) {
    const std::string path = root_ + "/model/" + name;
    testing::WriteFileOrDie(path, data);
    return path;
  }

  absl::StatusOr<std::unique_ptr<ExternalCodec>> Start(
      const std::string& args = "", absl::Duration timeout = absl::Seconds(30),
      int workers = 2) {
    return ExternalCodec::Start(
        {.command = absl::StrCat("/usr/bin/python3 ", script_, " ", args),
         .user = "nobody",
         .timeout = timeout,
         .workers = workers,
         .containment = containment_,
         .log = [this](absl::string_view line) {
           absl::MutexLock lock(&mu_);
           log_.emplace_back(line);
         }});
  }

  std::unique_ptr<ExternalCodec> StartOrDie(
      const std::string& args = "", absl::Duration timeout = absl::Seconds(30),
      int workers = 2) {
    absl::StatusOr<std::unique_ptr<ExternalCodec>> codec =
        Start(args, timeout, workers);
    EXPECT_TRUE(codec.ok()) << codec.status();
    return codec.ok() ? *std::move(codec) : nullptr;
  }

  std::vector<std::string> Log() {
    absl::MutexLock lock(&mu_);
    return log_;
  }

  // The pids the log says were started.
  std::vector<pid_t> StartedPids() {
    std::vector<pid_t> pids;
    for (const std::string& line : Log()) {
      absl::string_view rest = line;
      if (!absl::ConsumePrefix(&rest, "codec[")) continue;
      const size_t end = rest.find("]: started");
      int pid = 0;
      if (end != absl::string_view::npos &&
          absl::SimpleAtoi(rest.substr(0, end), &pid)) {
        pids.push_back(pid);
      }
    }
    return pids;
  }

  // Rescales model/<source> into staging/out.rbln with kv0 x2.
  absl::Status RescaleInto(ExternalCodec& codec, const std::string& source) {
    RescaleRequest request;
    request.source_env = env_.get();
    request.source_path = source;
    request.factors = {{"kv0", {2, 1}}};
    request.out_env = env_.get();
    request.out_path = out_path();
    return codec.Rescale(request);
  }

  std::string out_path() const { return root_ + "/staging/out.rbln"; }

  // Nothing left by a failed rescale: no output, no scratch directory.
  void ExpectStagingEmpty() {
    absl::StatusOr<std::vector<DirEntry>> entries =
        env_->ListDir(root_ + "/staging");
    ASSERT_TRUE(entries.ok()) << entries.status();
    std::vector<std::string> names;
    for (const DirEntry& entry : *entries) names.push_back(entry.name);
    EXPECT_THAT(names, IsEmpty());
  }

  testing::TempDir tmp_;
  testing::TempDir scripts_;
  std::string script_;
  std::string root_;
  std::unique_ptr<Env> env_;
  // The processes whose command line names this test's codec script.
  std::vector<pid_t> CodecProcesses() const {
    std::vector<pid_t> found;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      pid_t pid = 0;
      if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
      std::ifstream in(entry.path() / "cmdline");
      std::stringstream cmdline;
      cmdline << in.rdbuf();
      if (absl::StrContains(cmdline.str(), script_)) found.push_back(pid);
    }
    return found;
  }

  // What is left of them once they are all gone, or after 20 s.
  std::vector<pid_t> CodecProcessesLeft() const {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    std::vector<pid_t> left = CodecProcesses();
    while (!left.empty() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(50));
      left = CodecProcesses();
    }
    return left;
  }

  ContainmentMode containment_ = ContainmentMode::kAuto;
  absl::Mutex mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
};

// Item 1 of issue 44, in each containment mode this machine allows.
class ContainmentTest : public ExternalCodecTest,
                        public ::testing::WithParamInterface<ContainmentMode> {
 protected:
  void SetUp() override {
    ExternalCodecTest::SetUp();
    absl::StatusOr<Containment> allowed = PrepareContainment(GetParam());
    if (!allowed.ok()) GTEST_SKIP() << allowed.status().message();
    containment_ = GetParam();
  }
};

TEST_P(ContainmentTest, ADetachedSleeperOfEveryCallIsGoneAfterTheCodecStops) {
  std::unique_ptr<ExternalCodec> codec = StartOrDie("--mode fork-sleeper");
  ASSERT_NE(codec, nullptr);
  EXPECT_EQ(codec->containment(), GetParam());
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(codec->Inspect(env_.get(), root_ + "/model/prefill.rbln").ok());
  }
  // A sleeper per call, and the worker.
  EXPECT_GE(CodecProcesses().size(), 21u);
  codec.reset();
  EXPECT_THAT(CodecProcessesLeft(), IsEmpty());
}

TEST_P(ContainmentTest, ADescriptorADetachedProcessKeptCannotReachTheOutput) {
  std::unique_ptr<ExternalCodec> codec = StartOrDie();
  ASSERT_NE(codec, nullptr);
  ASSERT_TRUE(RescaleInto(*codec, WriteSource("kept.rbln",
                                              CodecFile("keep-descriptor")))
                  .ok());
  const uint64_t written = testing::HashFile(out_path());
  codec.reset();
  EXPECT_THAT(CodecProcessesLeft(), IsEmpty());
  EXPECT_EQ(testing::HashFile(out_path()), written);
  // Not the codec's file: the daemon's copy of it.
  std::string inode;
  for (const std::string& line : Log()) {
    const size_t at = line.find("output inode ");
    if (at != std::string::npos) inode = line.substr(at + 13);
  }
  ASSERT_FALSE(inode.empty());
  struct stat committed {};
  ASSERT_EQ(stat(out_path().c_str(), &committed), 0);
  EXPECT_NE(inode, absl::StrCat(committed.st_ino));
  EXPECT_THAT(testing::ReadFileOrDie(out_path()),
              ::testing::Not(HasSubstr("corrupted")));
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ContainmentTest,
    ::testing::Values(ContainmentMode::kPidNamespace, ContainmentMode::kCgroup,
                      ContainmentMode::kSubreaper),
    [](const ::testing::TestParamInfo<ContainmentMode>& info) {
      return std::string(ContainmentModeName(info.param));
    });

TEST_F(ExternalCodecTest, AnOutputWithTwoLinksOrNotARegularFileIsRefused) {
  // Where the codec's uid may make the second link.
  testing::TempDir shared;
  std::filesystem::permissions(shared.path(), std::filesystem::perms(01777));
  std::unique_ptr<ExternalCodec> codec =
      StartOrDie(absl::StrCat("--outside ", shared.Join("second-link")));
  ASSERT_NE(codec, nullptr);
  absl::Status status =
      RescaleInto(*codec, WriteSource("linked.rbln", CodecFile("two-links")));
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_THAT(status.message(), HasSubstr("with 2 hard links (one expected)"));
  ExpectStagingEmpty();
  status = RescaleInto(*codec, WriteSource("fifo.rbln", CodecFile("fifo")));
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("as something other than a regular file"));
  ExpectStagingEmpty();
}

TEST_F(ExternalCodecTest, SaysHelloAndRunsAsTheCodecUser) {
  std::unique_ptr<ExternalCodec> codec = StartOrDie();
  ASSERT_NE(codec, nullptr);
  EXPECT_EQ(codec->name(), "external (test_codec.py)");
  EXPECT_EQ(codec->hello().codec, "test");
  EXPECT_EQ(codec->hello().codec_version, "1.0");
  EXPECT_EQ(codec->hello().api, "per_chiplet");
  EXPECT_TRUE(codec->hello().can_rescale);
  EXPECT_EQ(codec->workers_started(), 1);
  const uid_t expected = geteuid() == 0 ? kNobody : geteuid();
  EXPECT_EQ(codec->worker_uid(), expected);
  ASSERT_TRUE(codec->hello().uid.has_value());
  EXPECT_EQ(*codec->hello().uid, expected);
  if (geteuid() != 0) {
    EXPECT_THAT(Log(), ::testing::Contains(HasSubstr("not root")));
  }
}

TEST_F(ExternalCodecTest, InspectsAFileItIsHandedAsADescriptor) {
  std::unique_ptr<ExternalCodec> codec = StartOrDie();
  ASSERT_NE(codec, nullptr);
  // As root the codec is nobody, and the file lies in a 0700 directory of
  // root's: only the descriptor lets it read the file.
  const double ok = Calls("inspect", "ok");
  const double timed = Timed("inspect");
  absl::StatusOr<ContainerFacts> facts =
      codec->Inspect(env_.get(), root_ + "/model/prefill.rbln");
  ASSERT_TRUE(facts.ok()) << facts.status();
  EXPECT_EQ(Calls("inspect", "ok"), ok + 1);
  EXPECT_EQ(Timed("inspect"), timed + 1);
  EXPECT_EQ(facts->granularity, BucketGranularity::kChiplet);
  EXPECT_EQ(facts->num_nodes, 1u);
  EXPECT_EQ(facts->buckets_per_node, 2u);
  ASSERT_EQ(facts->other.size(), 2u);
  EXPECT_EQ(facts->other[0].key, "program");  // sorted by key
  EXPECT_THAT(facts->other[1].bytes, ElementsAre(100, 200));
  EXPECT_EQ(facts->OtherBytes(1), 209u);
  ASSERT_EQ(facts->kv_tensors.size(), 2u);
  EXPECT_EQ(facts->kv_tensors[0].name, "kv0");
  EXPECT_THAT(facts->kv_tensors[0].bytes, ElementsAre(64, 64));
  EXPECT_FALSE(facts->kv_tensors[0].resizable.has_value());
}

TEST_F(ExternalCodecTest, RescalesIntoTheOutputPathAndLeavesNothingElse) {
  std::unique_ptr<ExternalCodec> codec = StartOrDie();
  ASSERT_NE(codec, nullptr);
  const std::string source = root_ + "/model/prefill.rbln";
  const uint64_t source_hash = testing::HashFile(source);
  const double ok = Calls("rescale", "ok");
  const double timed = Timed("rescale");
  ASSERT_TRUE(RescaleInto(*codec, source).ok());
  EXPECT_EQ(Calls("rescale", "ok"), ok + 1);
  EXPECT_EQ(Timed("rescale"), timed + 1);
  EXPECT_EQ(testing::HashFile(source), source_hash);
  absl::StatusOr<std::vector<DirEntry>> entries =
      env_->ListDir(root_ + "/staging");
  ASSERT_TRUE(entries.ok());
  ASSERT_EQ(entries->size(), 1u);  // no scratch directory left
  EXPECT_EQ((*entries)[0].name, "out.rbln");
  absl::StatusOr<FileStat> st = env_->Stat(out_path());
  ASSERT_TRUE(st.ok());
  // The daemon's own file, not the codec's, with the source's mode (the
  // caller gives it the source's owner).
  EXPECT_EQ(st->uid, geteuid());
  absl::StatusOr<FileStat> source_st = env_->Stat(source);
  ASSERT_TRUE(source_st.ok());
  EXPECT_EQ(st->mode, source_st->mode);
  // The worker that wrote it was stopped once it answered (so that nothing
  // it kept open on its output outlives the call): a new one reads it.
  std::vector<pid_t> pids = StartedPids();
  ASSERT_EQ(pids.size(), 1u);
  EXPECT_NE(kill(pids[0], 0), 0);
  absl::StatusOr<ContainerFacts> facts = codec->Inspect(env_.get(), out_path());
  ASSERT_TRUE(facts.ok()) << facts.status();
  EXPECT_THAT(facts->kv_tensors[0].bytes, ElementsAre(128, 128));
  EXPECT_THAT(facts->kv_tensors[1].bytes, ElementsAre(32, 32));
  EXPECT_EQ(codec->workers_started(), 2);
}

TEST_F(ExternalCodecTest, AFileItCannotReadIsDataLossAndKeepsTheWorker) {
  std::unique_ptr<ExternalCodec> codec = StartOrDie();
  ASSERT_NE(codec, nullptr);
  const std::string path = WriteSource("other.rbln", "RBLN\x00 not json");
  const double error = Calls("inspect", "error");
  absl::StatusOr<ContainerFacts> facts = codec->Inspect(env_.get(), path);
  ASSERT_FALSE(facts.ok());
  EXPECT_EQ(facts.status().code(), absl::StatusCode::kDataLoss);
  // The codec answered: an error, not a crash.
  EXPECT_EQ(Calls("inspect", "error"), error + 1);
  EXPECT_THAT(facts.status().message(),
              HasSubstr(path + ": the codec (external (test_codec.py)) "
                               "cannot read it: not a test codec file"));
  EXPECT_TRUE(codec->Inspect(env_.get(), root_ + "/model/prefill.rbln").ok());
  EXPECT_EQ(codec->workers_started(), 1);
}

struct BrokenCase {
  const char* mode;
  absl::StatusCode code;
  const char* message;
  const char* outcome;  // of rbln_artifactd_codec_calls_total
};

class BrokenCodecTest : public ExternalCodecTest,
                        public ::testing::WithParamInterface<BrokenCase> {};

// A worker that hangs, exits or answers garbage fails that one request with
// a clear error, is replaced, and the next request succeeds.
TEST_P(BrokenCodecTest, InspectFailsClearlyAndTheNextCallGetsANewWorker) {
  std::unique_ptr<ExternalCodec> codec = StartOrDie("", absl::Seconds(1), 1);
  ASSERT_NE(codec, nullptr);
  const std::string path =
      WriteSource("broken.rbln", CodecFile(GetParam().mode));
  const double counted = Calls("inspect", GetParam().outcome);
  const double timed = Timed("inspect");
  absl::StatusOr<ContainerFacts> facts = codec->Inspect(env_.get(), path);
  ASSERT_FALSE(facts.ok());
  EXPECT_EQ(Calls("inspect", GetParam().outcome), counted + 1);
  EXPECT_EQ(Timed("inspect"), timed + 1);
  EXPECT_EQ(facts.status().code(), GetParam().code) << facts.status();
  EXPECT_THAT(facts.status().message(), HasSubstr(GetParam().message));
  EXPECT_THAT(facts.status().message(), HasSubstr(path));
  EXPECT_TRUE(codec->Inspect(env_.get(), root_ + "/model/prefill.rbln").ok());
  EXPECT_EQ(codec->workers_started(), 2);
  // The broken worker is gone and reaped.
  const std::vector<pid_t> pids = StartedPids();
  ASSERT_EQ(pids.size(), 2u);
  EXPECT_NE(kill(pids[0], 0), 0);
}

// Only inspect answers shapes: wrong-shape is not a rescale's case.
using BrokenRescaleTest = BrokenCodecTest;

TEST_P(BrokenRescaleTest, RescaleFailsClearlyAndLeavesNothing) {
  std::unique_ptr<ExternalCodec> codec = StartOrDie("", absl::Seconds(1), 1);
  ASSERT_NE(codec, nullptr);
  const std::string path =
      WriteSource("broken.rbln", CodecFile(GetParam().mode));
  const double counted = Calls("rescale", GetParam().outcome);
  const absl::Status status = RescaleInto(*codec, path);
  EXPECT_EQ(status.code(), GetParam().code) << status;
  EXPECT_EQ(Calls("rescale", GetParam().outcome), counted + 1);
  EXPECT_THAT(status.message(), HasSubstr(GetParam().message));
  ExpectStagingEmpty();
  EXPECT_TRUE(RescaleInto(*codec, root_ + "/model/prefill.rbln").ok());
}

const BrokenCase kBrokenCases[] = {
    BrokenCase{"hang", absl::StatusCode::kDeadlineExceeded,
               "within 1 s (--codec-timeout-seconds); it was stopped and "
               "will be restarted",
               "timeout"},
    BrokenCase{"exit", absl::StatusCode::kUnavailable, "exited with status 3",
               "crash"},
    BrokenCase{"garbage", absl::StatusCode::kInternal,
               "with something that is not protocol", "crash"},
    BrokenCase{"wrong-shape", absl::StatusCode::kInternal,
               "kv_tensors.kv0: not a list of 1 lists", "crash"}};

std::string CaseName(const ::testing::TestParamInfo<BrokenCase>& info) {
  std::string name = info.param.mode;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(Modes, BrokenCodecTest,
                         ::testing::ValuesIn(kBrokenCases), CaseName);
INSTANTIATE_TEST_SUITE_P(Modes, BrokenRescaleTest,
                         // all but wrong-shape, the last
                         ::testing::ValuesIn(kBrokenCases, kBrokenCases + 3),
                         CaseName);

TEST_F(ExternalCodecTest, AnExitingWorkerShowsItsLastStderrLines) {
  std::unique_ptr<ExternalCodec> codec = StartOrDie();
  ASSERT_NE(codec, nullptr);
  const std::string path = WriteSource("exit.rbln", CodecFile("exit"));
  absl::StatusOr<ContainerFacts> facts = codec->Inspect(env_.get(), path);
  ASSERT_FALSE(facts.ok());
  EXPECT_THAT(facts.status().message(),
              HasSubstr("its last stderr lines: test codec: exiting with "
                        "status 3 as asked"));
  EXPECT_THAT(Log(), ::testing::Contains(HasSubstr(
                         "]: test codec: exiting with status 3 as asked")));
}

TEST_F(ExternalCodecTest, ExtraFilesInTheScratchDirectoryAreRefused) {
  std::unique_ptr<ExternalCodec> codec = StartOrDie();
  ASSERT_NE(codec, nullptr);
  const double refused = Calls("rescale", "error");
  const absl::Status status =
      RescaleInto(*codec, WriteSource("extra.rbln", CodecFile("extra-file")));
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  // The codec answered ok, but its output was refused.
  EXPECT_EQ(Calls("rescale", "error"), refused + 1);
  EXPECT_THAT(status.message(),
              HasSubstr("wrote extra in its scratch directory, other than "
                        "out.rbln; nothing was kept"));
  ExpectStagingEmpty();
}

TEST_F(ExternalCodecTest, AnOlderCompilerIsAFailedPrecondition) {
  std::unique_ptr<ExternalCodec> codec = StartOrDie();
  ASSERT_NE(codec, nullptr);
  const absl::Status status =
      RescaleInto(*codec, WriteSource("old.rbln", CodecFile("older-compiler")));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr("has no exp_rescale_buffer_size"));
  ExpectStagingEmpty();
}

TEST_F(ExternalCodecTest, AsRootTheCodecCannotWriteOutsideItsScratchDir) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "needs root: only then does the codec run as nobody, "
                    "and only the uid keeps it inside its scratch directory";
  }
  const std::string outside = root_ + "/evil";
  std::unique_ptr<ExternalCodec> codec =
      StartOrDie(absl::StrCat("--mode write-outside --outside ", outside));
  ASSERT_NE(codec, nullptr);
  const absl::Status status =
      RescaleInto(*codec, root_ + "/model/prefill.rbln");
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_THAT(status.message(), HasSubstr("the codec failed: [Errno 13] "
                                          "Permission denied"));
  EXPECT_FALSE(std::filesystem::exists(outside));
  ExpectStagingEmpty();
}

TEST_F(ExternalCodecTest, MoreCallsThanWorkersAllSucceed) {
  std::unique_ptr<ExternalCodec> codec = StartOrDie("", absl::Seconds(60), 2);
  ASSERT_NE(codec, nullptr);
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(8);
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i]() {
      for (int round = 0; round < 3 && results[i].ok(); ++round) {
        results[i] =
            codec->Inspect(env_.get(), root_ + "/model/prefill.rbln").status();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& status : results) EXPECT_TRUE(status.ok()) << status;
  EXPECT_LE(codec->workers_started(), 2);
}

TEST_F(ExternalCodecTest, AFloodOfStderrIsLoggedInBoundedLines) {
  std::unique_ptr<ExternalCodec> codec = StartOrDie();
  ASSERT_NE(codec, nullptr);
  const std::string path = WriteSource("flood.rbln", CodecFile("stderr-flood"));
  ASSERT_TRUE(codec->Inspect(env_.get(), path).ok());
  codec.reset();  // the stderr reader has read it all once the worker ended
  bool cut = false;
  size_t floods = 0;
  for (const std::string& line : Log()) {
    EXPECT_LE(line.size(), 1100u);
    cut = cut || absl::EndsWith(line, "(cut)");
    floods += absl::StrContains(line, "flood line") ? 1 : 0;
  }
  EXPECT_TRUE(cut);
  EXPECT_EQ(floods, 20000u);
}

TEST_F(ExternalCodecTest, StoppingTheCodecReapsItsWorkers) {
  std::unique_ptr<ExternalCodec> codec = StartOrDie();
  ASSERT_NE(codec, nullptr);
  const std::vector<pid_t> pids = StartedPids();
  ASSERT_EQ(pids.size(), 1u);
  EXPECT_EQ(kill(pids[0], 0), 0);
  codec.reset();
  EXPECT_NE(kill(pids[0], 0), 0);  // exited and reaped: no zombie
}

TEST_F(ExternalCodecTest, ACodecThatDoesNotAnswerHelloFailsTheStart) {
  absl::StatusOr<std::unique_ptr<ExternalCodec>> codec =
      Start("--mode no-hello", absl::Seconds(1));
  ASSERT_FALSE(codec.ok());
  EXPECT_EQ(codec.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(codec.status().message(),
              HasSubstr("--codec-command '/usr/bin/python3 "));
  EXPECT_THAT(codec.status().message(),
              HasSubstr("did not answer hello within 1 s"));
}

TEST_F(ExternalCodecTest, AnUnknownUserOrProgramFailsTheStart) {
  absl::StatusOr<std::unique_ptr<ExternalCodec>> codec =
      ExternalCodec::Start({.command = "python3 x", .user = "no-such-user-x"});
  ASSERT_FALSE(codec.ok());
  EXPECT_THAT(codec.status().message(),
              HasSubstr("--codec-user 'no-such-user-x': no such user"));

  codec = ExternalCodec::Start({.command = "no-such-codec-program --x"});
  ASSERT_FALSE(codec.ok());
  EXPECT_THAT(codec.status().message(),
              HasSubstr("--codec-command 'no-such-codec-program --x': "
                        "no-such-codec-program not found"));

  // A file that is not executable.
  codec = ExternalCodec::Start({.command = script_});
  ASSERT_FALSE(codec.ok());
  EXPECT_THAT(codec.status().message(), HasSubstr("is not an executable file"));

  codec = ExternalCodec::Start({.command = "python3 'unterminated"});
  ASSERT_FALSE(codec.ok());
  EXPECT_THAT(codec.status().message(),
              HasSubstr("--codec-command: cannot split"));
}

}  // namespace
}  // namespace rbln
