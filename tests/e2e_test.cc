// End-to-end tests: the real rbln-artifactd process on a real Unix socket
// (and once on TCP), a store synthesized by rbln-artifact-synth, and the
// rbln-artifact client run as a user runs it, from the store directory with
// relative paths. Every check reads the artifacts back from disk, so a
// client that prints the right thing while the daemon writes the wrong thing
// fails.
//
// Processes are bounded: a daemon that does not come up, or a client or
// daemon that does not exit, fails the test instead of hanging it.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/format/artifact.h"
#include "core/os/env.h"
#include "core/store/staging_name.h"
#include "core/store/store.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/artifact_check.h"
#include "tests/daemon_testing.h"
#include "tests/test_certificates.h"

namespace rbln::e2e {
namespace {

using ::rbln::testing::BinaryPath;
using ::rbln::testing::HashTree;
using ::rbln::testing::ReadFileOrDie;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

// A store with two synthesized artifacts ("tiny" and "llama", the
// llama3-8b-ca12-tp4 preset) served by a daemon on `<root>/d.sock`, spelled
// as the store's sibling: `<root>/store/../d.sock`.
class E2eTest : public DaemonTest {
 protected:
  E2eTest() { address_ = absl::StrCat("unix:", store_, "/../d.sock"); }

  void SetUp() override {
    DaemonTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", StorePath("tiny")));
    ASSERT_NO_FATAL_FAILURE(
        Synthesize("llama3-8b-ca12-tp4", StorePath("llama")));
    ASSERT_NO_FATAL_FAILURE(Start(DaemonFlags()));
  }

  // The spec table whatever the host has (these tests expect its figures,
  // and a host with NPUs would otherwise probe them); the probe is covered by
  // tests/e2e_device_test.cc.
  virtual std::vector<std::string> DaemonFlags() const {
    return {"--rbln-smi", "none"};
  }

  // The count the client prints for `model_id`; fails unless it is a bare
  // number and a newline.
  uint64_t Get(const std::string& model_id) {
    Outcome o = Cli("--get-kvcache-num-blocks --model-id " + model_id);
    EXPECT_EQ(o.code, 0) << o;
    uint64_t count = 0;
    EXPECT_TRUE(absl::EndsWith(o.out, "\n") &&
                absl::SimpleAtoi(absl::StripSuffix(o.out, "\n"), &count))
        << "not a bare number: '" << o.out << "'";
    return count;
  }

  // new_num_blocks of a dry-run budget fit, read from --json.
  uint64_t DryRunFit(const std::string& budget, const std::string& model_id) {
    Outcome o = Cli(absl::StrCat("--set-memory-budget ", budget, " --model-id ",
                                 model_id, " --dry-run --json"));
    EXPECT_EQ(o.code, 0) << o;
    if (o.code != 0) return 0;
    rapidjson::Document doc = ParseJson(o);
    EXPECT_TRUE(doc.HasMember("written") && doc["written"].IsBool() &&
                !doc["written"].GetBool())
        << o;
    return JsonU64(doc, "new_num_blocks");
  }

  // --get-kvcache-num-blocks --json of `model_id`, parsed.
  rapidjson::Document GetJson(const std::string& model_id) {
    Outcome o = Cli("--get-kvcache-num-blocks --json --model-id " + model_id);
    EXPECT_EQ(o.code, 0) << o;
    return ParseJson(o);
  }
};

// --- The four commands of the seed PR, as its users type them. ---

TEST_F(E2eTest, GetPrintsTheBareCountFromRblnConfig) {
  EXPECT_EQ(Get("./tiny"), CountOnDisk(StorePath("tiny")));
  EXPECT_EQ(Get("./llama"), CountOnDisk(StorePath("llama")));
  // The two presets differ, so a constant answer would fail one of them.
  EXPECT_NE(CountOnDisk(StorePath("tiny")), CountOnDisk(StorePath("llama")));
}

TEST_F(E2eTest, SetKvcacheNumBlocksThenGetReturnsIt) {
  const uint64_t before = Get("./llama");
  const uint64_t target = before - 3;
  Outcome set = Cli(
      absl::StrCat("--set-kvcache-num-blocks ", target, " --model-id ./llama"));
  ASSERT_EQ(set.code, 0) << set;
  // optimum-rbln-cli's line on stdout; the change on stderr.
  EXPECT_EQ(set.out,
            absl::StrCat("Set kvcache_num_blocks to ", target,
                         " for artifact at ", StorePath("llama"), "\n"));
  EXPECT_THAT(set.err, HasSubstr(absl::StrCat(before, " -> ", target)));
  EXPECT_EQ(Get("./llama"), target);
  EXPECT_EQ(CountOnDisk(StorePath("llama")), target);

  // And back up: the rescale is exact in both directions.
  set = Cli(
      absl::StrCat("--set-kvcache-num-blocks ", before, " --model-id llama"));
  ASSERT_EQ(set.code, 0) << set;
  EXPECT_EQ(Get("./llama"), before);
}

// Once an artifact's files have been still for 2 s, Get and Describe are
// answered from the daemon's artifact cache on gRPC's own thread
// (docs/performance.md); each answer still follows every change: another
// process's edit and the daemon's own commits.
TEST_F(E2eTest, CachedAnswersFollowEveryChange) {
  const uint64_t before = Get("./llama");
  auto described = [this]() {
    Outcome describe = Cli("--describe --json --model-id ./llama");
    EXPECT_EQ(describe.code, 0) << describe;
    return describe.code == 0
               ? JsonU64(ParseJson(describe), "kvcache_num_blocks")
               : 0;
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(2300));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Get("./llama"), before);
    EXPECT_EQ(described(), before);
  }

  // Edited in place by someone else, keeping its size, then put back.
  const std::string config = JoinPath(StorePath("llama"), kRblnConfigFileName);
  const std::string text = ReadFileOrDie(config);
  const std::string from = absl::StrCat("\"kvcache_num_blocks\": ", before);
  const uint64_t edited = before % 10 == 0 ? before + 1 : before - 1;
  const std::string to = absl::StrCat("\"kvcache_num_blocks\": ", edited);
  ASSERT_EQ(from.size(), to.size());
  ASSERT_NE(text.find(from), std::string::npos);
  rbln::testing::WriteFileOrDie(config,
                                absl::StrReplaceAll(text, {{from, to}}));
  EXPECT_EQ(Get("./llama"), edited);
  rbln::testing::WriteFileOrDie(config, text);
  EXPECT_EQ(Get("./llama"), before);

  // Replaced by hand with an edited copy (a rename, which the directory's
  // watch sees: docs/performance.md, "The directory check"), then put back.
  const std::string dir = StorePath("llama");
  std::filesystem::copy(dir, dir + ".new",
                        std::filesystem::copy_options::recursive);
  rbln::testing::WriteFileOrDie(JoinPath(dir + ".new", kRblnConfigFileName),
                                absl::StrReplaceAll(text, {{from, to}}));
  ASSERT_EQ(rename(dir.c_str(), (dir + ".old").c_str()), 0);
  ASSERT_EQ(rename((dir + ".new").c_str(), dir.c_str()), 0);
  EXPECT_EQ(Get("./llama"), edited);
  // Describe checks the count against the containers, which the copy kept
  // as they were: an error, not the answer cached for the old directory.
  EXPECT_THAT(Cli("--describe --json --model-id ./llama").out,
              HasSubstr("DATA_LOSS"));
  ASSERT_EQ(rename(dir.c_str(), (dir + ".new").c_str()), 0);
  ASSERT_EQ(rename((dir + ".old").c_str(), dir.c_str()), 0);
  EXPECT_EQ(Get("./llama"), before);
  EXPECT_EQ(described(), before);

  // The daemon's own commit.
  Outcome set = Cli(absl::StrCat("--set-kvcache-num-blocks ", before - 2,
                                 " --model-id ./llama"));
  ASSERT_EQ(set.code, 0) << set;
  EXPECT_EQ(Get("./llama"), before - 2);
  EXPECT_EQ(described(), before - 2);
}

TEST_F(E2eTest, SetMemoryBudgetFractionWritesTheFittingCount) {
  rapidjson::Document get = GetJson("./llama");
  const uint64_t min_blocks = JsonU64(get, "num_min_blocks");
  const uint64_t full_blocks = JsonU64(get, "num_full_blocks");
  const uint64_t planned = DryRunFit("0.8", "./llama");
  ASSERT_GE(planned, min_blocks);
  ASSERT_LE(planned, full_blocks);
  // 80% of the device fits fewer blocks than the compile-time 100% fit.
  ASSERT_LT(planned, JsonU64(get, "kvcache_num_blocks"));

  Outcome o = Cli("--set-memory-budget 0.8 --model-id ./llama");
  ASSERT_EQ(o.code, 0) << o;
  EXPECT_EQ(o.out,
            absl::StrCat("memory_budget 0.8 fits kvcache_num_blocks=", planned,
                         "\nSet kvcache_num_blocks to ", planned,
                         " for artifact at ", StorePath("llama"), "\n"));
  EXPECT_THAT(o.err, HasSubstr(absl::StrCat("-> ", planned)));
  EXPECT_THAT(o.err, HasSubstr("budget 80%"));
  EXPECT_EQ(Get("./llama"), planned);
  EXPECT_EQ(CountOnDisk(StorePath("llama")), planned);
}

TEST_F(E2eTest, SetMemoryBudgetBytesIntoOutputDirLeavesSourceUntouched) {
  const auto source_before = HashTree(StorePath("llama"));
  const uint64_t source_count = Get("./llama");
  const uint64_t planned = DryRunFit("10GB", "./llama");
  ASSERT_NE(planned, source_count);

  Outcome o = Cli(
      "--set-memory-budget 10GB --model-id ./llama --output-dir ./llama_10gb");
  ASSERT_EQ(o.code, 0) << o;
  EXPECT_THAT(o.out, HasSubstr("llama_10gb"));
  EXPECT_EQ(HashTree(StorePath("llama")), source_before);
  EXPECT_EQ(Get("./llama"), source_count);
  // The copy opens (payload checksums verified) with the new count, through
  // the daemon and on disk.
  EXPECT_EQ(Get("./llama_10gb"), planned);
  EXPECT_EQ(CountOnDisk(StorePath("llama_10gb")), planned);
  // Companion files came along.
  EXPECT_TRUE(std::filesystem::exists(StorePath("llama_10gb/tokenizer.json")));
}

// --- Budgets ---

TEST_F(E2eTest, LargerBudgetFitsAtLeastAsManyBlocks) {
  const auto before = HashTree(StorePath("llama"));
  const uint64_t at_65 = DryRunFit("0.65", "./llama");
  const uint64_t at_80 = DryRunFit("0.8", "./llama");
  const uint64_t at_100 = DryRunFit("100%", "./llama");
  EXPECT_LE(at_65, at_80);
  EXPECT_LE(at_80, at_100);
  EXPECT_LT(at_65, at_100);  // the numbers do depend on the budget
  EXPECT_LE(DryRunFit("0.5", "./tiny"), DryRunFit("0.8", "./tiny"));
  // Half of an RBLN-CA12 cannot hold the 8B model's minimum: refused, with
  // the numbers, and nothing changed.
  Outcome half = Cli("--set-memory-budget 0.5 --model-id ./llama");
  EXPECT_EQ(half.code, 1) << half;
  EXPECT_THAT(half.err, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(half.err, HasSubstr("minimum"));
  // Dry runs and refusals wrote nothing.
  EXPECT_EQ(HashTree(StorePath("llama")), before);
}

TEST_F(E2eTest, BudgetInBytesIsPerDevice) {
  Outcome o =
      Cli("--set-memory-budget 10GB --model-id ./llama --dry-run --json");
  ASSERT_EQ(o.code, 0) << o;
  rapidjson::Document doc = ParseJson(o);
  ASSERT_TRUE(doc.HasMember("fit") && doc["fit"].IsObject()) << o;
  // RBLN-CA12 has one chiplet per device: the whole 10 GB is that chiplet's,
  // and 10GB is 10 x 2^30 bytes, as optimum-rbln-cli reads it.
  EXPECT_EQ(JsonU64(doc["fit"], "budget_per_chiplet"), 10737418240u);
  // Each bucket says its budget and, apart, what the device holds.
  for (const rapidjson::Value& bucket : doc["fit"]["buckets"].GetArray()) {
    EXPECT_EQ(JsonU64(bucket, "budget_bytes"), 10737418240u);
    EXPECT_EQ(JsonU64(bucket, "available_bytes"), 10737418240u);
    EXPECT_EQ(JsonU64(bucket, "device_available_bytes"), 16877879296u);
  }
  // The same budget spelled four ways fits the same count.
  const uint64_t count = DryRunFit("10GB", "./llama");
  EXPECT_EQ(DryRunFit("10GiB", "./llama"), count);
  EXPECT_EQ(DryRunFit("10gb", "./llama"), count);
  EXPECT_EQ(DryRunFit("10737418240", "./llama"), count);
  EXPECT_LE(DryRunFit("10GB", "./llama"), DryRunFit("10GiB", "./llama"));
  // Garbage is refused as such, by the client (the same grammar) before
  // anything is sent.
  Outcome bad = Cli("--set-memory-budget 10XB --model-id ./llama");
  EXPECT_EQ(bad.code, 2) << bad;
  EXPECT_THAT(bad.err, HasSubstr("unknown unit \"XB\""));
}

// --- Output directories ---

TEST_F(E2eTest, ExistingOutputDirIsRefusedAndUntouched) {
  Outcome first =
      Cli("--set-kvcache-num-blocks 12 --model-id ./tiny --output-dir ./copy");
  ASSERT_EQ(first.code, 0) << first;
  const auto copy_before = HashTree(StorePath("copy"));
  const auto source_before = HashTree(StorePath("tiny"));

  Outcome again =
      Cli("--set-kvcache-num-blocks 10 --model-id ./tiny --output-dir ./copy");
  EXPECT_EQ(again.code, 1) << again;
  EXPECT_THAT(again.err, HasSubstr("ALREADY_EXISTS"));
  EXPECT_THAT(again.err, HasSubstr("exists"));
  EXPECT_EQ(HashTree(StorePath("copy")), copy_before);
  EXPECT_EQ(HashTree(StorePath("tiny")), source_before);

  // A directory that is not an artifact is no different.
  std::filesystem::create_directory(StorePath("notes"));
  rbln::testing::WriteFileOrDie(StorePath("notes/todo.txt"), "keep me");
  Outcome notes =
      Cli("--set-memory-budget 0.8 --model-id ./tiny --output-dir ./notes");
  EXPECT_EQ(notes.code, 1) << notes;
  EXPECT_THAT(notes.err, HasSubstr("exists"));
  EXPECT_EQ(ReadFileOrDie(StorePath("notes/todo.txt")), "keep me");
}

// As optimum-rbln-cli's mkdir(parents=True): the missing parents are made,
// each owned and moded like its parent; never by a dry run, never through
// a link, and a failed write takes back the ones it made.
TEST_F(E2eTest, MissingParentsOfAnOutputDirAreMade) {
  std::filesystem::create_directory(StorePath("team"));
  ASSERT_EQ(chmod(StorePath("team").c_str(), 0750), 0) << strerror(errno);
  const auto before = HashTree(store_);
  Outcome dry =
      Cli("--set-kvcache-num-blocks 10 --model-id ./tiny --output-dir "
          "./team/a/b/copy --dry-run");
  EXPECT_EQ(dry.code, 0) << dry;
  EXPECT_FALSE(std::filesystem::exists(StorePath("team/a")));
  EXPECT_EQ(HashTree(store_), before);

  Outcome made =
      Cli("--set-kvcache-num-blocks 10 --model-id ./tiny --output-dir "
          "./team/a/b/copy");
  ASSERT_EQ(made.code, 0) << made;
  EXPECT_EQ(CountOnDisk(StorePath("team/a/b/copy")), 10u);
  struct stat team;
  ASSERT_EQ(stat(StorePath("team").c_str(), &team), 0);
  for (const char* parent : {"team/a", "team/a/b"}) {
    struct stat st;
    ASSERT_EQ(lstat(StorePath(parent).c_str(), &st), 0) << parent;
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << parent;
    EXPECT_EQ(st.st_mode & 07777, 0750u) << parent;
    EXPECT_EQ(st.st_uid, team.st_uid) << parent;
    EXPECT_EQ(st.st_gid, team.st_gid) << parent;
  }

  // A link among the parents is refused, and nothing is made through it.
  ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", root_.Join("outside/tiny")));
  const auto outside_before = HashTree(root_.Join("outside"));
  std::filesystem::create_directory_symlink("../outside",
                                            StorePath("team/door"));
  for (const char* output : {"./team/door/copy", "./team/door/x/copy"}) {
    Outcome o = Cli(absl::StrCat(
        "--set-kvcache-num-blocks 10 --model-id ./tiny --output-dir ", output));
    EXPECT_EQ(o.code, 1) << output << "\n" << o;
    EXPECT_THAT(o.err, HasSubstr("PERMISSION_DENIED")) << output;
  }
  EXPECT_EQ(HashTree(root_.Join("outside")), outside_before);

  // A write that fails once the parents are made (a FIFO in the source is
  // no file an artifact may hold) leaves none of them; "team" was there.
  ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", StorePath("odd")));
  ASSERT_EQ(mkfifo(StorePath("odd/pipe").c_str(), 0600), 0) << strerror(errno);
  Outcome failed =
      Cli("--set-kvcache-num-blocks 10 --model-id ./odd --output-dir "
          "./team/c/d/copy");
  EXPECT_EQ(failed.code, 1) << failed;
  EXPECT_THAT(failed.err, HasSubstr("pipe"));
  EXPECT_FALSE(std::filesystem::exists(StorePath("team/c")));
  EXPECT_TRUE(std::filesystem::exists(StorePath("team/a/b/copy")));
  EXPECT_THAT(rbln::testing::FindStagingDebris(store_), ::testing::IsEmpty());
}

TEST_F(E2eTest, ReplaceOverwritesAnExistingOutputDir) {
  ASSERT_EQ(
      Cli("--set-kvcache-num-blocks 12 --model-id ./tiny --output-dir ./copy")
          .code,
      0);
  const auto source_before = HashTree(StorePath("tiny"));
  Outcome o =
      Cli("--set-kvcache-num-blocks 10 --model-id ./tiny --output-dir ./copy "
          "--replace");
  ASSERT_EQ(o.code, 0) << o;
  EXPECT_EQ(Get("./copy"), 10u);
  EXPECT_EQ(CountOnDisk(StorePath("copy")), 10u);
  EXPECT_EQ(HashTree(StorePath("tiny")), source_before);
  // --replace without --output-dir is a usage error.
  Outcome usage =
      Cli("--set-kvcache-num-blocks 10 --model-id ./tiny --replace");
  EXPECT_EQ(usage.code, 2) << usage;
}

// --- The old version after an in-place Set (--old-version-grace-seconds) ---

// The staging- and retired-named entries of the store, by file name.
std::vector<std::string> OldVersionsIn(const std::string& store) {
  std::vector<std::string> names;
  for (const std::string& path : rbln::testing::FindStagingDebris(store)) {
    names.push_back(std::filesystem::path(path).filename().string());
  }
  return names;
}

TEST_F(E2eTest, TheOldVersionStaysForTheDefaultGraceAndGoesAtShutdown) {
  // At --log-level info, to see the shutdown's lines.
  ASSERT_NO_FATAL_FAILURE(Stop());
  std::vector<std::string> flags = {"--store", store_,        "--listen",
                                    address_,  "--log-level", "info"};
  for (const std::string& flag : DaemonFlags()) flags.push_back(flag);
  ASSERT_NO_FATAL_FAILURE(StartWithFlags(address_, flags));
  // A serving process holds the artifact directory open across the Set.
  const int dir = open(StorePath("tiny").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(dir, 0) << strerror(errno);
  const uint64_t before = Get("./tiny");
  Outcome set = Cli(absl::StrCat("--set-kvcache-num-blocks ", before - 1,
                                 " --model-id ./tiny"));
  ASSERT_EQ(set.code, 0) << set;
  // The default grace (30 s) outlasts this check: the old version is there,
  // under a retired name, and the held directory still reads it.
  const std::vector<std::string> old_versions = OldVersionsIn(store_);
  ASSERT_EQ(old_versions.size(), 1u);
  EXPECT_EQ(RetiredArtifactName(old_versions[0]), "tiny");
  // Read whole (payload checksums too) through the descriptor.
  EXPECT_EQ(CountOnDisk(absl::StrCat("/proc/self/fd/", dir, "/.")), before);
  EXPECT_EQ(Get("./tiny"), before - 1);
  // Stopping the daemon removes it without waiting for the grace to end,
  // and says so before its last line.
  ASSERT_NO_FATAL_FAILURE(Stop());
  EXPECT_THAT(OldVersionsIn(store_), ::testing::IsEmpty());
  close(dir);
  const std::string log = ReadIfExists(daemon_.stderr_path);
  const size_t removing =
      log.find("stopping: removing 1 old artifact version(s) now");
  // The last line says how long the stop took.
  const size_t stopped = log.find("rbln-artifactd stopped: exiting ");
  ASSERT_NE(removing, std::string::npos) << log;
  ASSERT_NE(stopped, std::string::npos) << log;
  EXPECT_LT(removing, stopped) << log;
  EXPECT_THAT(log.substr(stopped),
              ::testing::ContainsRegex("^rbln-artifactd stopped: exiting "
                                       "[0-9]+ ms after signal 15\n"));
}

TEST_F(E2eTest, OldVersionGraceSecondsIsHonouredFromFlagAndConfigFile) {
  // 0: the old version is gone by the time the client has its reply.
  ASSERT_NO_FATAL_FAILURE(Stop());
  std::vector<std::string> flags = DaemonFlags();
  flags.insert(flags.end(), {"--old-version-grace-seconds", "0"});
  ASSERT_NO_FATAL_FAILURE(Start(flags));
  ASSERT_EQ(Cli("--set-kvcache-num-blocks 12 --model-id ./tiny").code, 0);
  EXPECT_THAT(OldVersionsIn(store_), ::testing::IsEmpty());
  ASSERT_EQ(Cli("--set-kvcache-num-blocks 13 --model-id ./tiny --output-dir "
                "./copy")
                .code,
            0);
  ASSERT_EQ(Cli("--set-kvcache-num-blocks 12 --model-id ./tiny --output-dir "
                "./copy --replace")
                .code,
            0);
  EXPECT_THAT(OldVersionsIn(store_), ::testing::IsEmpty());

  // 1 (from the config file): removed by the running daemon, soon after.
  ASSERT_NO_FATAL_FAILURE(Stop());
  const std::string config = root_.Join("grace.toml");
  std::ofstream(config) << "old-version-grace-seconds = 1\n";
  flags = DaemonFlags();
  flags.insert(flags.end(), {"--config", config});
  ASSERT_NO_FATAL_FAILURE(Start(flags));
  ASSERT_EQ(Cli("--set-kvcache-num-blocks 11 --model-id ./tiny").code, 0);
  const auto give_up = std::chrono::steady_clock::now() + kExitTimeout;
  while (!OldVersionsIn(store_).empty() &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_THAT(OldVersionsIn(store_), ::testing::IsEmpty());
  EXPECT_GT(daemon_.pid, 0);
  EXPECT_EQ(kill(daemon_.pid, 0), 0) << "the daemon is no longer running";
  EXPECT_EQ(Get("./tiny"), 11u);
}

// --- Refusals ---

TEST_F(E2eTest, BelowMinimumIsRefusedAndChangesNothing) {
  const uint64_t min_blocks = JsonU64(GetJson("./tiny"), "num_min_blocks");
  ASSERT_GT(min_blocks, 1u);
  const auto before = HashTree(StorePath("tiny"));
  Outcome o = Cli(absl::StrCat("--set-kvcache-num-blocks ", min_blocks - 1,
                               " --model-id ./tiny"));
  EXPECT_EQ(o.code, 1) << o;
  EXPECT_THAT(o.err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(o.err, HasSubstr(absl::StrCat(min_blocks)));
  EXPECT_EQ(HashTree(StorePath("tiny")), before);
  // The minimum itself is accepted.
  Outcome at_min = Cli(absl::StrCat("--set-kvcache-num-blocks ", min_blocks,
                                    " --model-id ./tiny"));
  EXPECT_EQ(at_min.code, 0) << at_min;
  EXPECT_EQ(CountOnDisk(StorePath("tiny")), min_blocks);
}

TEST_F(E2eTest, MutuallyExclusiveFlagsAreUsageErrorsWithoutConnecting) {
  // Nothing listens there: exit 2 (not 3) proves nothing was sent.
  const std::string nowhere = "unix:" + root_.Join("nowhere.sock");
  for (const std::string args : {
           "--get-kvcache-num-blocks --set-kvcache-num-blocks 12 --model-id "
           "./tiny",
           "--set-kvcache-num-blocks 12 --set-memory-budget 0.8 --model-id "
           "./tiny",
           "--get-kvcache-num-blocks --set-memory-budget 0.8 --model-id ./tiny",
           "--list --device-info",
           "--describe --list --model-id ./tiny",
       }) {
    Outcome o = CliAt(nowhere, args, store_);
    EXPECT_EQ(o.code, 2) << args << "\n" << o;
    EXPECT_THAT(o.err, HasSubstr("does not go with")) << args;
    EXPECT_THAT(o.err, HasSubstr("--help")) << args;
  }
  for (const std::string args : {
           "--model-id ./tiny",         // no operation
           "--get-kvcache-num-blocks",  // no --model-id
           "--set-kvcache-num-blocks 0 --model-id ./tiny",
           "--get-kvcache-num-blocks --dry-run --model-id ./tiny",
       }) {
    Outcome o = CliAt(nowhere, args, store_);
    EXPECT_EQ(o.code, 2) << args << "\n" << o;
  }
}

TEST_F(E2eTest, UnknownArtifactIsNotFound) {
  Outcome o = Cli("--get-kvcache-num-blocks --model-id ./no_such_model");
  EXPECT_EQ(o.code, 1) << o;
  EXPECT_THAT(o.err, HasSubstr("NOT_FOUND"));
  EXPECT_THAT(o.err, HasSubstr("no_such_model"));
  Outcome set = Cli("--set-kvcache-num-blocks 12 --model-id ./no_such_model");
  EXPECT_EQ(set.code, 1) << set;
  EXPECT_THAT(set.err, HasSubstr("NOT_FOUND"));
  EXPECT_FALSE(std::filesystem::exists(StorePath("no_such_model")));
}

TEST_F(E2eTest, PathsOutsideTheStoreArePermissionDenied) {
  // A real artifact beside the store, so that a daemon that did not check
  // would find something to read and change.
  ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", root_.Join("outside")));
  const auto outside_before = HashTree(root_.Join("outside"));
  std::filesystem::create_directory_symlink("../outside", StorePath("escape"));
  for (const std::string args : {
           "--get-kvcache-num-blocks --model-id /etc",
           "--get-kvcache-num-blocks --model-id ../outside",
           "--describe --model-id ../outside",
           "--set-kvcache-num-blocks 10 --model-id ../outside",
           "--set-memory-budget 0.8 --model-id ./escape",
           "--get-kvcache-num-blocks --model-id ./escape",
           "--set-kvcache-num-blocks 10 --model-id ./tiny --output-dir "
           "../elsewhere",
           "--set-kvcache-num-blocks 10 --model-id ./tiny --output-dir "
           "/tmp/rbln-e2e-never",
       }) {
    Outcome o = Cli(args);
    EXPECT_EQ(o.code, 1) << args << "\n" << o;
    EXPECT_THAT(o.err, HasSubstr("PERMISSION_DENIED")) << args;
  }
  EXPECT_EQ(HashTree(root_.Join("outside")), outside_before);
  EXPECT_FALSE(std::filesystem::exists(root_.Join("elsewhere")));
  EXPECT_FALSE(std::filesystem::exists("/tmp/rbln-e2e-never"));
}

TEST_F(E2eTest, AnOutputOutsideTheStoreIsToldToGoInsideIt) {
  const std::string store = std::filesystem::canonical(store_).string();
  for (const std::string& output :
       {root_.Join("elsewhere"), std::string("../elsewhere")}) {
    Outcome o =
        Cli("--set-kvcache-num-blocks 10 --model-id ./tiny "
            "--output-dir " +
            output);
    EXPECT_EQ(o.code, 1) << o;
    EXPECT_THAT(o.err, HasSubstr("PERMISSION_DENIED"));
    EXPECT_THAT(o.err, HasSubstr(absl::StrCat(
                           " is outside the artifact store ", store,
                           "; the output must be inside the store: choose a "
                           "directory in ",
                           store)))
        << output;
    // --read-only-root serves sources; an output never goes there.
    EXPECT_THAT(o.err, Not(HasSubstr("--read-only-root"))) << output;
  }
  EXPECT_FALSE(std::filesystem::exists(root_.Join("elsewhere")));
}

// Regression: CLI11 takes the next argument as an option's value, so a
// forgotten value once swallowed the following flag (`--output-dir
// --dry-run` wrote a real copy to "./--dry-run"). Like optimum-rbln-cli
// (argparse), the client refuses it as a usage error.
TEST_F(E2eTest, AFlagIsNeverTakenAsAnotherOptionsValue) {
  const auto before = HashTree(store_);
  for (const std::string args : {
           "--set-memory-budget 0.8 --model-id ./tiny --output-dir --dry-run",
           "--set-kvcache-num-blocks 10 --model-id --dry-run",
           "--set-memory-budget --dry-run --model-id ./tiny",
       }) {
    Outcome o = Cli(args);
    EXPECT_EQ(o.code, 2) << args << "\n" << o;
  }
  EXPECT_EQ(HashTree(store_), before);
}

TEST_F(E2eTest, DescribeVerifyFindsACorruptPayload) {
  const std::string dir = StorePath("tiny");
  absl::StatusOr<Artifact> artifact = Artifact::Open(Env::Default(), dir);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  const ContainerFile& prefill = artifact->prefill();
  ASSERT_GT(rbln::testing::ContainerOf(prefill).preamble.payload_length, 0u);
  const std::string path = dir + "/" + prefill.file_name;
  std::string bytes = ReadFileOrDie(path);
  bytes[rbln::testing::ContainerOf(prefill).preamble.payload_offset +
        rbln::testing::ContainerOf(prefill).preamble.payload_length / 2] ^=
      0x5a;
  rbln::testing::WriteFileOrDie(path, bytes);

  // Opening reads headers only; --verify reads every payload.
  Outcome plain = Cli("--describe --model-id ./tiny");
  EXPECT_EQ(plain.code, 0) << plain;
  Outcome verify = Cli("--describe --verify --model-id ./tiny");
  EXPECT_EQ(verify.code, 1) << verify;
  EXPECT_THAT(verify.err, HasSubstr("DATA_LOSS"));
  EXPECT_THAT(verify.err, HasSubstr(prefill.file_name));
  // The intact artifact verifies.
  Outcome intact = Cli("--describe --verify --model-id ./llama");
  EXPECT_EQ(intact.code, 0) << intact;
}

TEST_F(E2eTest, DescribeVerifySaysWhatItVerified) {
  absl::StatusOr<Artifact> artifact =
      Artifact::Open(Env::Default(), StorePath("llama"));
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  uint64_t segments = 0;
  uint64_t bytes = 0;
  for (const ContainerFile& file : artifact->containers()) {
    const Container container = rbln::testing::ContainerOf(file);
    for (const auto& segment : container.header.segments()) {
      ++segments;
      bytes += segment.length();
    }
  }
  ASSERT_GT(segments, 0u);

  Outcome verify = Cli("--describe --verify --model-id ./llama");
  EXPECT_EQ(verify.code, 0) << verify;
  EXPECT_TRUE(absl::EndsWith(
      verify.out, absl::StrCat("\nverified: ", segments, " payload segments, ",
                               bytes, " bytes, every checksum matched\n")))
      << verify;
  Outcome json = Cli("--describe --verify --json --model-id ./llama");
  ASSERT_EQ(json.code, 0) << json;
  rapidjson::Document doc = ParseJson(json);
  EXPECT_EQ(JsonU64(doc, "verified_segments"), segments);
  EXPECT_EQ(JsonU64(doc, "verified_bytes"), bytes);

  // Without --verify nothing is claimed.
  Outcome plain = Cli("--describe --model-id ./llama");
  EXPECT_EQ(plain.code, 0) << plain;
  EXPECT_THAT(plain.out, Not(HasSubstr("verified")));
  json = Cli("--describe --json --model-id ./llama");
  ASSERT_EQ(json.code, 0) << json;
  doc = ParseJson(json);
  EXPECT_FALSE(doc.HasMember("verified_segments")) << json;
  EXPECT_FALSE(doc.HasMember("verified_bytes")) << json;
}

TEST_F(E2eTest, NoDaemonExitsThreeNamingTheAddressAndHowToStartIt) {
  const std::string nowhere = "unix:" + root_.Join("nowhere.sock");
  Outcome o =
      CliAt(nowhere, "--get-kvcache-num-blocks --model-id ./tiny", store_);
  EXPECT_EQ(o.code, 3) << o;
  EXPECT_THAT(o.err, HasSubstr(nowhere));
  EXPECT_THAT(o.err, HasSubstr("rbln-artifactd --store"));
  EXPECT_EQ(o.out, "");
}

TEST_F(E2eTest, ExpectMismatchIsAbortedAndChangesNothing) {
  const uint64_t current = Get("./tiny");
  const auto before = HashTree(StorePath("tiny"));
  Outcome o = Cli(absl::StrCat("--set-kvcache-num-blocks 10 --model-id ./tiny",
                               " --expect ", current + 1));
  EXPECT_EQ(o.code, 1) << o;
  EXPECT_THAT(o.err, HasSubstr("ABORTED"));
  EXPECT_EQ(HashTree(StorePath("tiny")), before);
  Outcome fit = Cli(absl::StrCat("--set-memory-budget 0.8 --model-id ./llama",
                                 " --expect 1"));
  EXPECT_EQ(fit.code, 1) << fit;
  EXPECT_THAT(fit.err, HasSubstr("ABORTED"));
  // The right expectation goes through.
  Outcome ok = Cli(absl::StrCat("--set-kvcache-num-blocks 10 --model-id ./tiny",
                                " --expect ", current));
  EXPECT_EQ(ok.code, 0) << ok;
  EXPECT_EQ(CountOnDisk(StorePath("tiny")), 10u);
}

// --- Reading ---

TEST_F(E2eTest, JsonOutputParsesWithTheExpectedFields) {
  rapidjson::Document get = GetJson("./llama");
  EXPECT_EQ(std::string(get["artifact"].GetString()), "llama");
  EXPECT_EQ(JsonU64(get, "kvcache_num_blocks"),
            CountOnDisk(StorePath("llama")));
  EXPECT_GE(JsonU64(get, "num_full_blocks"),
            JsonU64(get, "compiled_num_blocks"));
  EXPECT_LE(JsonU64(get, "num_min_blocks"), JsonU64(get, "kvcache_num_blocks"));

  Outcome set = Cli("--set-kvcache-num-blocks 12 --model-id ./tiny --json");
  ASSERT_EQ(set.code, 0) << set;
  rapidjson::Document resize = ParseJson(set);
  EXPECT_EQ(JsonU64(resize, "new_num_blocks"), 12u);
  EXPECT_EQ(JsonU64(resize, "previous_num_blocks"), 16u);
  EXPECT_TRUE(resize["written"].GetBool());
  EXPECT_EQ(std::string(resize["artifact"].GetString()), "tiny");
  EXPECT_TRUE(resize["warnings"].IsArray());

  Outcome describe = Cli("--describe --model-id ./llama --json");
  ASSERT_EQ(describe.code, 0) << describe;
  rapidjson::Document d = ParseJson(describe);
  EXPECT_EQ(std::string(d["npu"].GetString()), "RBLN-CA12");
  EXPECT_EQ(d["num_nodes"].GetUint(), 4u);
  ASSERT_TRUE(d["buckets"].IsArray());
  EXPECT_EQ(d["buckets"].Size(), 4u);  // 4 nodes x 1 chiplet
  for (const rapidjson::Value& bucket : d["buckets"].GetArray()) {
    EXPECT_GT(JsonU64(bucket, "kv_bytes_per_block"), 0u);
    EXPECT_EQ(JsonU64(bucket, "kv_bytes"),
              JsonU64(bucket, "kv_bytes_per_block") *
                  JsonU64(d, "kvcache_num_blocks"));
  }
  ASSERT_TRUE(d["graphs"].IsArray());
  EXPECT_EQ(d["graphs"].Size(), 3u);  // prefill, decoder_batch_1, _4
  EXPECT_GT(JsonU64(d, "max_fitting_num_blocks"), 0u);

  // JSON Lines: one object per artifact.
  Outcome list = Cli("--list --json");
  ASSERT_EQ(list.code, 0) << list;
  std::map<std::string, uint64_t> listed;
  for (const rapidjson::Document& a : ParseJsonLines(list)) {
    listed[a["artifact"].GetString()] = JsonU64(a, "kvcache_num_blocks");
  }
  EXPECT_EQ(listed,
            (std::map<std::string, uint64_t>{
                {"llama", CountOnDisk(StorePath("llama"))}, {"tiny", 12}}));

  Outcome devices = Cli("--device-info --json");
  ASSERT_EQ(devices.code, 0) << devices;
  rapidjson::Document di = ParseJson(devices);
  ASSERT_TRUE(di["devices"].IsArray());
  ASSERT_GT(di["devices"].Size(), 0u);
  for (const rapidjson::Value& dev : di["devices"].GetArray()) {
    EXPECT_GT(JsonU64(dev, "available_bytes"), 0u);
    EXPECT_LE(JsonU64(dev, "available_bytes"), JsonU64(dev, "total_bytes"));
  }
  EXPECT_TRUE(di["source"].IsString());
}

TEST_F(E2eTest, DescribeShowsTheMemoryTable) {
  Outcome o = Cli("--describe --model-id ./llama");
  ASSERT_EQ(o.code, 0) << o;
  EXPECT_THAT(o.out, HasSubstr("artifact:    llama"));
  EXPECT_THAT(o.out, HasSubstr("RBLN-CA12, 4 nodes x 1 chiplet"));
  EXPECT_THAT(o.out, HasSubstr(absl::StrCat("current ",
                                            CountOnDisk(StorePath("llama")))));
  EXPECT_THAT(o.out, ::testing::ContainsRegex(
                         "NODE +CHIPLET +AVAILABLE +OTHER +KV +PER BLOCK "
                         "+HEADROOM"));
  // One row per node.
  for (int node = 0; node < 4; ++node) {
    EXPECT_THAT(o.out, ::testing::ContainsRegex(
                           absl::StrCat("\n +", node, " +0 +15\\.72 ")));
  }
}

TEST_F(E2eTest, ListShowsBothArtifactsWithTheirCounts) {
  Outcome o = Cli("--list");
  ASSERT_EQ(o.code, 0) << o;
  EXPECT_THAT(o.out, HasSubstr("ARTIFACT"));
  EXPECT_THAT(o.out, ::testing::ContainsRegex(absl::StrCat(
                         "\nllama +", CountOnDisk(StorePath("llama")),
                         " +RBLN-CA12 +4 ")));
  EXPECT_THAT(o.out, ::testing::ContainsRegex(absl::StrCat(
                         "\ntiny +", CountOnDisk(StorePath("tiny")),
                         " +RBLN-CA12 +1 ")));
}

TEST_F(E2eTest, DeviceInfoShowsTheSpecTable) {
  Outcome o = Cli("--device-info");
  ASSERT_EQ(o.code, 0) << o;
  EXPECT_THAT(o.out, HasSubstr("spec table"));
  EXPECT_THAT(o.out, ::testing::ContainsRegex(
                         "RBLN-CA\\* +RBLN-CA +- +16\\.00 +0\\.00 +15\\.72 +1 "
                         "+spec"));
  EXPECT_THAT(o.out, HasSubstr("RBLN-CR"));
}

TEST_F(E2eTest, HelpListsTheSeedFlagsAndExitCodes) {
  Outcome o = CliAt("unix:" + root_.Join("nowhere.sock"), "--help", store_);
  EXPECT_EQ(o.code, 0) << o;
  for (const char* flag :
       {"--get-kvcache-num-blocks", "--set-kvcache-num-blocks",
        "--set-memory-budget", "--model-id", "--output-dir", "Exit codes"}) {
    EXPECT_THAT(o.out, HasSubstr(flag));
  }
}

// --- The daemon ---

TEST_F(E2eTest, SecondDaemonOnTheSameStoreFailsFastNamingThePid) {
  Outcome o = Run("rbln-artifactd",
                  absl::StrCat("--store ", ShellQuote(store_), " --listen ",
                               ShellQuote("unix:" + root_.Join("other.sock")),
                               " --log-level warn"));
  EXPECT_NE(o.code, 0) << o;
  EXPECT_NE(o.code, 124) << "the second daemon did not give up";
  EXPECT_THAT(o.err, HasSubstr("in use"));
  EXPECT_THAT(o.err, HasSubstr(absl::StrCat("pid ", daemon_.pid)));
  EXPECT_FALSE(std::filesystem::exists(root_.Join("other.sock")));

  // Another store on the same socket is refused too, without taking the
  // socket away from the running daemon.
  const std::string other_store = root_.Join("other-store");
  std::filesystem::create_directory(other_store);
  Outcome same_socket =
      Run("rbln-artifactd",
          absl::StrCat("--store ", ShellQuote(other_store), " --listen ",
                       ShellQuote(address_), " --log-level warn"));
  EXPECT_NE(same_socket.code, 0) << same_socket;
  EXPECT_NE(same_socket.code, 124) << "the second daemon did not give up";
  EXPECT_THAT(same_socket.err, HasSubstr("already listens"));

  // The first daemon still serves.
  EXPECT_EQ(Get("./tiny"), CountOnDisk(StorePath("tiny")));
}

TEST_F(E2eTest, DeviceDramOverrideFitsFewerBlocks) {
  // Eight-way tensor parallel llama 8B: its full count fits an RBLN-CA12's
  // spec-table DRAM at 80%, but not 8 GiB.
  ASSERT_NO_FATAL_FAILURE(Synthesize("llama3-8b-ca12-tp4", StorePath("l8"),
                                     {"--num-devices", "8"}));
  const uint64_t with_spec = DryRunFit("0.8", "./l8");
  ASSERT_NO_FATAL_FAILURE(Stop());
  ASSERT_NO_FATAL_FAILURE(Start({"--device-dram", "8GiB"}));
  Outcome o = Cli("--set-memory-budget 0.8 --model-id ./l8 --dry-run --json");
  ASSERT_EQ(o.code, 0) << o;
  rapidjson::Document doc = ParseJson(o);
  const uint64_t with_override = JsonU64(doc, "new_num_blocks");
  EXPECT_LT(with_override, with_spec);
  EXPECT_GT(with_override, 0u);
  EXPECT_THAT(std::string(doc["fit"]["dram_source"].GetString()),
              HasSubstr("override"));
  // 80% of 8 GiB, one chiplet per device.
  EXPECT_EQ(JsonU64(doc["fit"], "budget_per_chiplet"),
            static_cast<uint64_t>(0.8 * 8.0 * (uint64_t{1} << 30)));
  Outcome devices = Cli("--device-info");
  EXPECT_THAT(devices.out, HasSubstr("8.00"));
  EXPECT_THAT(devices.out, HasSubstr("override"));
}

// A write that cannot proceed (here: its output's cross-process lock is held,
// as a maintenance tool would) occupies one server thread only: Gets and
// Describes of other artifacts, and of its own source, keep flowing, and the
// write completes once the lock is released. Deterministic: the write is
// known to be waiting, since the lock is ours.
TEST_F(E2eTest, ABlockedWriteDoesNotHoldUpOtherRequests) {
  absl::StatusOr<std::unique_ptr<FileLock>> held = Env::Default()->LockFile(
      ArtifactLockPath(store_, "llama_copy"), /*exclusive=*/true,
      /*wait=*/false);
  ASSERT_TRUE(held.ok()) << held.status();
  const pid_t writer =
      Spawn({BinaryPath("rbln-artifact"), "--server", address_,
             "--set-kvcache-num-blocks", "10", "--model-id", "./llama",
             "--output-dir", "./llama_copy"},
            store_, root_.Join("writer.out"), root_.Join("writer.err"));
  ASSERT_GT(writer, 0);
  const uint64_t tiny = CountOnDisk(StorePath("tiny"));
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Get("./tiny"), tiny);
    EXPECT_EQ(Get("./llama"), CountOnDisk(StorePath("llama")));
    Outcome describe = Cli("--describe --model-id ./tiny");
    EXPECT_EQ(describe.code, 0) << describe;
  }
  int status = 0;
  EXPECT_EQ(waitpid(writer, &status, WNOHANG), 0)
      << "the write finished while its output's lock was held";
  held->reset();
  std::optional<int> done = WaitBounded(writer, kExitTimeout);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(DescribeWaitStatus(*done), "exit 0")
      << ReadIfExists(root_.Join("writer.err"));
  EXPECT_EQ(CountOnDisk(StorePath("llama_copy")), 10u);
}

TEST_F(E2eTest, UnixSocketIsOwnerAndGroupOnly) {
  struct stat st {};
  ASSERT_EQ(stat(address_.substr(5).c_str(), &st), 0) << strerror(errno);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777 & ~0660, 0u)
      << "socket mode " << std::oct << (st.st_mode & 0777);
}

TEST_F(E2eTest, StartsWithNoFlagsAndTheClientFindsIt) {
  // The environment moves the defaults somewhere harmless; no flags at all.
  ASSERT_NO_FATAL_FAILURE(Stop());
  const std::string socket = root_.Join("default.sock");
  setenv("RBLN_ARTIFACTD_STORE", store_.c_str(), 1);
  setenv("RBLN_ARTIFACTD_SOCKET", socket.c_str(), 1);
  StartWithFlags("unix:" + socket, {});
  unsetenv("RBLN_ARTIFACTD_STORE");
  unsetenv("RBLN_ARTIFACTD_SOCKET");
  ASSERT_FALSE(HasFatalFailure());
  Outcome o =
      RunShell(absl::StrCat("cd ", ShellQuote(store_),
                            " && RBLN_ARTIFACTD_SOCKET=", ShellQuote(socket),
                            " ", kCommandTimeout, " ",
                            ShellQuote(BinaryPath("rbln-artifact")),
                            " --get-kvcache-num-blocks --model-id ./tiny"),
               root_.Join("cli.err"));
  EXPECT_EQ(o.code, 0) << o;
  EXPECT_EQ(o.out, absl::StrCat(CountOnDisk(StorePath("tiny")), "\n"));
}

// Regression: a store configured through a symbolic link (--store
// /srv/link, /srv/link -> /data/store) accepts absolute names spelled with
// the configured path.
TEST_F(E2eTest, StoreConfiguredThroughASymlinkAcceptsItsOwnSpelling) {
  ASSERT_NO_FATAL_FAILURE(Stop());
  const std::string link = root_.Join("store-link");
  std::filesystem::create_directory_symlink(store_, link);
  ASSERT_NO_FATAL_FAILURE(
      StartDaemon(root_.path(), link, address_, {}, &daemon_));
  EXPECT_EQ(Get("./tiny"), CountOnDisk(StorePath("tiny")));
  EXPECT_EQ(Get(link + "/tiny"), CountOnDisk(StorePath("tiny")));
}

// --- TCP: relative names are relative to the store root. ---

class E2eTcpTest : public TlsDaemonTest {
 protected:
  void SetUp() override {
    TlsDaemonTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", StorePath("tiny")));
    const int port = PickFreePort();
    ASSERT_GT(port, 0);
    address_ = absl::StrCat("127.0.0.1:", port);
    // Over TCP only listed callers write: the client is cn:operator.
    UseOperatorTls(*certs_);
    ASSERT_NO_FATAL_FAILURE(Start());
  }

  // Run from "/", far from the store: over TCP the client's directory must
  // not matter.
  Outcome Cli(const std::string& args) { return CliAt(address_, args, "/"); }
};

// optimum-rbln-cli's Set line names the directory written: over TCP the
// daemon's store joined with the store-relative name
// (tests/optimum_output_test.cc has the Unix socket's).
TEST_F(E2eTcpTest, TheSetLineNamesTheStoreJoinedWithTheName) {
  Outcome set = Cli("--set-kvcache-num-blocks 10 --model-id tiny");
  ASSERT_EQ(set.code, 0) << set;
  EXPECT_EQ(set.out, absl::StrCat("Set kvcache_num_blocks to 10 for artifact "
                                  "at ",
                                  store_, "/tiny\n"));
  EXPECT_EQ(set.err, "kvcache_num_blocks: 16 -> 10\n");

  Outcome copy = Cli("--set-memory-budget 0.8 --model-id tiny -o team-c");
  ASSERT_EQ(copy.code, 0) << copy;
  EXPECT_EQ(copy.out, absl::StrCat("memory_budget 0.8 fits "
                                   "kvcache_num_blocks=16\n"
                                   "Set kvcache_num_blocks to 16 for "
                                   "artifact at ",
                                   store_, "/team-c\n"));
  EXPECT_EQ(copy.err,
            "warning: kvcache_num_blocks 16 is above the current count 10, "
            "which was sized to fit device DRAM; the model may fail to "
            "allocate at runtime\n"
            "kvcache_num_blocks: 10 -> 16 (written to team-c)\n"
            "budget 80%: 12.57 GiB per chiplet; the full count of 16 blocks "
            "fits\n"
            "DRAM: spec table: RBLN-CA* has 15.72 GiB available per device (1 "
            "chiplet(s) of 15.72 GiB); NPU RBLN-CA12 from rbln_config.json's "
            "npu\n");
  EXPECT_EQ(CountOnDisk(store_ + "/team-c"), 16u);
}

TEST_F(E2eTcpTest, ModelIdIsRelativeToTheStoreRoot) {
  const uint64_t count = CountOnDisk(store_ + "/tiny");
  Outcome get = Cli("--get-kvcache-num-blocks --model-id tiny");
  ASSERT_EQ(get.code, 0) << get;
  EXPECT_EQ(get.out, absl::StrCat(count, "\n"));

  Outcome set =
      Cli("--set-kvcache-num-blocks 10 --model-id tiny --output-dir tiny_10");
  ASSERT_EQ(set.code, 0) << set;
  EXPECT_EQ(CountOnDisk(store_ + "/tiny_10"), 10u);
  EXPECT_EQ(CountOnDisk(store_ + "/tiny"), count);

  Outcome escape = Cli("--get-kvcache-num-blocks --model-id ../tiny");
  EXPECT_EQ(escape.code, 1) << escape;
  EXPECT_THAT(escape.err, HasSubstr("PERMISSION_DENIED"));
}

// --- Many client processes at once. ---

// Kinds of client in the mix.
enum class Kind { kSet, kSetExpect, kFit, kDescribe, kGet, kSetOwn };

struct Client {
  Kind kind;
  std::string artifact;
  uint64_t value = 0;  // the count a writer asks for
  pid_t pid = -1;
  Outcome outcome;
};

class E2eConcurrencyTest : public E2eTest {
 protected:
  // Runs 24 client processes at once against a daemon started with
  // `daemon_flags`: on the shared artifact "tiny" sets (some with --expect),
  // budget fits, describes and gets; and one writer each on "solo0".."solo3".
  // Checks every outcome and the artifacts afterwards. With `strict`, no
  // write may be refused for load (UNAVAILABLE).
  void RunMix(const std::vector<std::string>& daemon_flags, bool strict) {
    std::vector<std::string> names = {"tiny"};
    for (int i = 0; i < 4; ++i) {
      names.push_back(absl::StrCat("solo", i));
      ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", StorePath(names.back())));
    }
    if (!daemon_flags.empty()) {
      ASSERT_NO_FATAL_FAILURE(Restart(daemon_flags));
    }
    std::map<std::string, rbln::testing::ArtifactBaseline> baselines;
    for (const std::string& name : names) {
      baselines[name] = rbln::testing::TakeBaseline(StorePath(name));
    }
    const uint64_t initial = baselines["tiny"].num_blocks;
    const uint64_t fit_value = DryRunFit("0.8", "./tiny");
    const uint64_t min_blocks = JsonU64(GetJson("./tiny"), "num_min_blocks");
    ASSERT_GT(initial, min_blocks + 4);

    std::vector<Client> clients;
    for (int i = 0; i < 24; ++i) {
      Client c;
      c.kind = static_cast<Kind>(i % 6);
      c.artifact =
          c.kind == Kind::kSetOwn ? absl::StrCat("solo", i / 6) : "tiny";
      c.value = min_blocks + static_cast<uint64_t>(i % 5);
      if (c.kind == Kind::kFit) c.value = fit_value;
      clients.push_back(c);
    }
    for (size_t i = 0; i < clients.size(); ++i) {
      Client& c = clients[i];
      std::vector<std::string> argv = {BinaryPath("rbln-artifact"), "--server",
                                       address_};
      const std::string model = "./" + c.artifact;
      switch (c.kind) {
        case Kind::kSet:
        case Kind::kSetOwn:
          argv.insert(argv.end(), {"--set-kvcache-num-blocks",
                                   absl::StrCat(c.value), "--model-id", model});
          break;
        case Kind::kSetExpect:
          argv.insert(argv.end(),
                      {"--set-kvcache-num-blocks", absl::StrCat(c.value),
                       "--model-id", model, "--expect", absl::StrCat(initial)});
          break;
        case Kind::kFit:
          argv.insert(argv.end(),
                      {"--set-memory-budget", "0.8", "--model-id", model});
          break;
        case Kind::kDescribe:
          argv.insert(argv.end(), {"--describe", "--model-id", model});
          break;
        case Kind::kGet:
          argv.insert(argv.end(),
                      {"--get-kvcache-num-blocks", "--model-id", model});
          break;
      }
      // Half of the solo writers also compare-and-set (they are alone on
      // their artifact, so they must not be ABORTED).
      if (c.kind == Kind::kSetOwn && i / 6 % 2 == 1) {
        argv.insert(argv.end(), {"--expect", absl::StrCat(initial)});
      }
      c.pid = Spawn(argv, store_, root_.Join(absl::StrCat("c", i, ".out")),
                    root_.Join(absl::StrCat("c", i, ".err")));
    }
    for (size_t i = 0; i < clients.size(); ++i) {
      Client& c = clients[i];
      if (c.pid <= 0) continue;
      std::optional<int> status = WaitBounded(c.pid, kExitTimeout);
      c.outcome.code =
          status.has_value() && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
      c.outcome.out = ReadIfExists(root_.Join(absl::StrCat("c", i, ".out")));
      c.outcome.err = ReadIfExists(root_.Join(absl::StrCat("c", i, ".err")));
    }

    // Per process: exit 0, or 1 with a documented reason.
    std::set<uint64_t> shared_written = {};
    bool any_admitted = false;
    for (size_t i = 0; i < clients.size(); ++i) {
      const Client& c = clients[i];
      SCOPED_TRACE(absl::StrCat("client ", i, " on ", c.artifact));
      const bool writer = c.kind == Kind::kSet || c.kind == Kind::kSetExpect ||
                          c.kind == Kind::kFit || c.kind == Kind::kSetOwn;
      if (!writer) {
        EXPECT_EQ(c.outcome.code, 0) << c.outcome;
        continue;
      }
      ASSERT_TRUE(c.outcome.code == 0 || c.outcome.code == 1) << c.outcome;
      const bool unavailable = absl::StrContains(
          c.outcome.err, "rbln-artifact: error (UNAVAILABLE)");
      if (!unavailable) any_admitted = true;
      if (c.outcome.code == 0) {
        EXPECT_THAT(c.outcome.err, HasSubstr(absl::StrCat("-> ", c.value)));
        if (c.artifact == "tiny") shared_written.insert(c.value);
        continue;
      }
      const bool aborted =
          absl::StrContains(c.outcome.err, "rbln-artifact: error (ABORTED)");
      EXPECT_TRUE((unavailable && !strict) ||
                  (aborted && c.kind == Kind::kSetExpect))
          << c.outcome;
    }
    EXPECT_TRUE(any_admitted) << "every write was refused for load";
    std::map<std::string, int> tally;
    for (const Client& c : clients) {
      ++tally[c.outcome.code == 0                             ? "ok"
              : absl::StrContains(c.outcome.err, "(ABORTED)") ? "ABORTED"
              : absl::StrContains(c.outcome.err, "(UNAVAILABLE)")
                  ? "UNAVAILABLE"
                  : "other"];
    }
    std::cout << "outcomes of " << clients.size() << " clients: "
              << absl::StrJoin(tally, ", ", absl::PairFormatter(" ")) << "\n";

    // Readers saw the initial count or one that a successful writer wrote.
    std::set<uint64_t> shared_seen = shared_written;
    shared_seen.insert(initial);
    for (const Client& c : clients) {
      if (c.kind == Kind::kGet && c.outcome.code == 0) {
        uint64_t seen = 0;
        EXPECT_TRUE(
            absl::SimpleAtoi(absl::StripSuffix(c.outcome.out, "\n"), &seen))
            << c.outcome;
        EXPECT_TRUE(shared_seen.count(seen)) << "get saw " << seen;
      }
      if (c.kind == Kind::kDescribe && c.outcome.code == 0) {
        EXPECT_THAT(c.outcome.out, HasSubstr("HEADROOM"));
      }
    }

    // Afterwards: every artifact is complete and a resize of its original,
    // holding a count that was written (or the initial one).
    const uint64_t shared_final = rbln::testing::CheckResizedArtifact(
        StorePath("tiny"), baselines["tiny"]);
    if (shared_written.empty()) {
      EXPECT_EQ(shared_final, initial);
    } else {
      EXPECT_TRUE(shared_written.count(shared_final))
          << "tiny holds " << shared_final
          << ", which no successful writer wrote";
    }
    EXPECT_EQ(Get("./tiny"), shared_final);
    for (const Client& c : clients) {
      if (c.kind != Kind::kSetOwn) continue;
      const uint64_t final_count = rbln::testing::CheckResizedArtifact(
          StorePath(c.artifact), baselines[c.artifact]);
      EXPECT_EQ(final_count, c.outcome.code == 0 ? c.value : initial)
          << c.artifact << ": " << c.outcome;
    }
    // Old versions wait out their grace while the daemon runs; stopping it
    // removes them.
    ASSERT_NO_FATAL_FAILURE(Stop());
    EXPECT_THAT(rbln::testing::FindStagingDebris(store_), ::testing::IsEmpty());
  }
};

TEST_F(E2eConcurrencyTest, ManyClientProcessesWithDefaultWriteLimit) {
  RunMix({}, /*strict=*/false);
}

TEST_F(E2eConcurrencyTest, ManyClientProcessesWithRoomForEveryWrite) {
  RunMix({"--max-concurrent-writes", "64"}, /*strict=*/true);
}

// --- The request log's timing (server/log_sink.h). ---

// How many lines of the daemon's log name `method`.
int LinesOf(const Daemon& daemon, absl::string_view method) {
  int count = 0;
  for (absl::string_view line :
       absl::StrSplit(ReadIfExists(daemon.stderr_path), '\n')) {
    if (absl::StrContains(line, absl::StrCat("method=", method, " "))) {
      ++count;
    }
  }
  return count;
}

// With a minute of linger, a read's line waits; a change's line is out
// before its reply, with the lines that waited before it; a stop writes
// the rest. (The linger counts from the first line after the start-up
// flush: the test must end within that minute.)
using E2eLogTest = DaemonTest;

TEST_F(E2eLogTest, AChangesLineIsOutBeforeItsReplyAReadsWaitsForTheStop) {
  ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", StorePath("tiny")));
  ASSERT_NO_FATAL_FAILURE(StartWithFlags(
      address_, {"--store", store_, "--listen", address_, "--rbln-smi", "none",
                 "--log-linger-ms", "60000"}));
  const auto cli = [&](const std::string& args) {
    Outcome o = Cli(args);
    EXPECT_EQ(o.code, 0) << o;
  };
  // The socket accepts before the start-up lines are flushed (just before
  // the daemon reports itself ready): a Get before that flush would be
  // written with them.
  for (int tries = 0; !absl::StrContains(ReadIfExists(daemon_.stderr_path),
                                         "rbln-artifactd serving store");
       ++tries) {
    ASSERT_LT(tries, 3000) << daemon_.Logs();
    absl::SleepFor(absl::Milliseconds(10));
  }

  cli("--get-kvcache-num-blocks --model-id tiny");
  EXPECT_EQ(LinesOf(daemon_, "GetKvcacheNumBlocks"), 0) << daemon_.Logs();
  cli("--set-kvcache-num-blocks 10 --model-id tiny");
  EXPECT_EQ(LinesOf(daemon_, "SetKvcacheNumBlocks"), 1) << daemon_.Logs();
  EXPECT_THAT(ReadIfExists(daemon_.stderr_path),
              ContainsRegex("method=GetKvcacheNumBlocks artifact=\"tiny\""
                            "[^\n]* outcome=OK (.|\n)*"
                            "method=SetKvcacheNumBlocks artifact=\"tiny\""
                            "[^\n]* new=10 written=true"));
  // A dry run changes nothing: its line waits too.
  cli("--set-kvcache-num-blocks 12 --model-id tiny --dry-run");
  cli("--get-kvcache-num-blocks --model-id tiny");
  EXPECT_EQ(LinesOf(daemon_, "GetKvcacheNumBlocks"), 1) << daemon_.Logs();
  EXPECT_EQ(LinesOf(daemon_, "SetKvcacheNumBlocks"), 1) << daemon_.Logs();

  Stop();
  EXPECT_EQ(LinesOf(daemon_, "GetKvcacheNumBlocks"), 2) << daemon_.Logs();
  EXPECT_EQ(LinesOf(daemon_, "SetKvcacheNumBlocks"), 2) << daemon_.Logs();
}

}  // namespace
}  // namespace rbln::e2e
