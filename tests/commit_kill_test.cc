// Crash safety against real process death (docs/commit-protocol.md, "Crash
// safety"): commit-stress commits Sets in a loop and is SIGKILLed at a random
// instant, over and over. After each kill, opening the store (recovery) must
// leave the artifact complete, old or new, with its payload and companion files
// intact, and no staging debris anywhere in the store.
//
// The delays come from std::mt19937 with a fixed seed, printed;
// RBLN_KILL_SEED=<n> replays another. Where the kills land still depends on
// the machine's speed, so the longest delay scales with the time a commit
// takes here.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/os/env.h"
#include "core/store/store.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/spdlog.h"
#include "tests/artifact_check.h"
#include "tools/synth.h"

extern char** environ;

namespace rbln {
namespace {

using ::testing::AnyOfArray;
using ::testing::IsEmpty;

constexpr uint32_t kDefaultSeed = 20240611;
// Kill delays are uniform in [0, kCommitsPerMaxDelay x the time one commit
// takes here], clamped to [kMinMaxDelayMs, kMaxMaxDelayMs]: on a loaded
// machine a commit can take longer than 40 ms, and a kill must still often
// land after one; the cap bounds the test's run time.
constexpr int kMinMaxDelayMs = 40;
constexpr int kMaxMaxDelayMs = 150;
constexpr double kCommitsPerMaxDelay = 2.5;
constexpr uint64_t kOriginalBlocks = 16;  // what the synthesized spec fits

uint32_t KillSeed() {
  uint32_t seed = kDefaultSeed;
  const char* text = getenv("RBLN_KILL_SEED");
  if (text != nullptr && !absl::SimpleAtoi(text, &seed)) {
    ADD_FAILURE() << "RBLN_KILL_SEED=" << text << " is not a number";
  }
  return seed;
}

// Starts commit-stress with `args` and waits until it has opened the store
// (its start line), so that the kill delay counts from its first commit
// rather than from its start-up. Its stderr, where it reports a failure, is
// ours. Returns its pid, or -1 after failing the test.
pid_t StartCommitStress(const std::vector<std::string>& args) {
  std::vector<std::string> all = {testing::BinaryPath("commit-stress")};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : all) argv.push_back(arg.data());
  argv.push_back(nullptr);
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe: " << strerror(errno);
    return -1;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, all[0].c_str(), &actions, nullptr,
                             argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    ADD_FAILURE() << "posix_spawn " << all[0] << ": " << strerror(rc);
    return -1;
  }
  // Nothing more is written to stdout after the start line; EOF means the
  // process ended.
  char c = 0;
  while (read(out[0], &c, 1) == 1 && c != '\n') {
  }
  close(out[0]);
  if (c != '\n') {
    ADD_FAILURE() << "commit-stress ended before opening the store; its "
                     "error is above";
    waitpid(pid, nullptr, 0);
    return -1;
  }
  return pid;
}

// Milliseconds an output-directory Set of the artifact at `name` takes here
// (a full copy: the most work a commit does): the fastest of three,
// measured in-process on a scratch output that is removed again.
double MeasureCommitMs(const std::string& root, const std::string& name) {
  absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
      ArtifactStore::Open(root);
  if (!store.ok()) {
    ADD_FAILURE() << store.status();
    return 0;
  }
  double fastest = 0;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<WriteResult> r = (*store)->Write(
        {.name = name, .target = uint64_t{9}, .output_name = "timing"});
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - start)
                          .count();
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(RemoveTree(Env::Default(), JoinPath(root, "timing")).ok());
    fastest = i == 0 ? ms : std::min(fastest, ms);
  }
  return fastest;
}

struct KillStats {
  int kills = 0;
  // Kills after which recovery found (and removed) a staging directory:
  // they landed inside a commit.
  int mid_commit = 0;
  std::map<uint64_t, int> counts;  // block count seen after a kill -> rounds

  std::string ToString() const {
    return absl::StrCat(
        kills, " kills, ", mid_commit,
        " mid-commit (recovery removed staging), counts seen: ",
        absl::StrJoin(counts, ", ", [](std::string* out, const auto& entry) {
          absl::StrAppend(out, entry.first, " x", entry.second);
        }));
  }
};

class CommitKillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Recovery warns once per removed staging directory; KillStats counts
    // them instead.
    saved_level_ = spdlog::get_level();
    spdlog::set_level(spdlog::level::err);
    SynthSpec spec;
    spec.decoder_batch_sizes = {1, 2};
    spec.payload_bytes = uint64_t{1} << 20;
    absl::StatusOr<SynthResult> synth =
        WriteSyntheticArtifact(env_, spec, tmp_.Join("a"));
    ASSERT_TRUE(synth.ok()) << synth.status();
    ASSERT_EQ(synth->kvcache_num_blocks, kOriginalBlocks);
    base_ = testing::TakeBaseline(tmp_.Join("a"));
    const double commit_ms = MeasureCommitMs(tmp_.path(), "a");
    const int max_delay_ms =
        std::clamp(static_cast<int>(kCommitsPerMaxDelay * commit_ms),
                   kMinMaxDelayMs, kMaxMaxDelayMs);
    delay_ = std::uniform_int_distribution<int>(0, max_delay_ms);
    const uint32_t seed = KillSeed();
    printf(
        "one output commit takes %.1f ms here; kill delays 0-%d ms, "
        "std::mt19937 seed %u\n",
        commit_ms, max_delay_ms, seed);
    rng_.seed(seed);
  }

  void TearDown() override { spdlog::set_level(saved_level_); }

  // Doubles the longest kill delay: the measured commit does not include
  // commit-stress's own start, which a slow machine (a sanitizer build)
  // can make longer than the whole window.
  void WidenKillDelays() {
    delay_ = std::uniform_int_distribution<int>(0, 2 * delay_.b());
    printf("no two outcomes yet: kill delays now 0-%d ms\n", delay_.b());
  }

  // Runs commit-stress with `args` for a random delay (announced in the
  // failure messages), SIGKILLs it, and runs recovery by opening (and
  // closing) the store. Checks that commit-stress was still running and that
  // no staging debris is left.
  void KillAndRecover(const std::vector<std::string>& args, KillStats* stats) {
    const int delay_ms = delay_(rng_);
    trace_ = absl::StrCat("round ", stats->kills, ": killed after ", delay_ms,
                          " ms");
    SCOPED_TRACE(trace_);
    const pid_t pid = StartCommitStress(args);
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ASSERT_EQ(kill(pid, SIGKILL), 0) << strerror(errno);
    int wait_status = 0;
    ASSERT_EQ(waitpid(pid, &wait_status, 0), pid) << strerror(errno);
    ASSERT_TRUE(WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == SIGKILL)
        << "commit-stress ended by itself before the kill (wait status "
        << wait_status << "); its error is above";
    ++stats->kills;

    absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
        ArtifactStore::Open(tmp_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    if (!(*store)->recovered().empty()) ++stats->mid_commit;
    store->reset();  // releases the store LOCK for the next commit-stress
    EXPECT_THAT(testing::FindStagingDebris(tmp_.path()), IsEmpty());
  }

  Env* env_ = Env::Default();
  testing::TempDir tmp_;
  testing::ArtifactBaseline base_;
  std::mt19937 rng_;
  std::string trace_;  // the last round, for failure messages
  std::uniform_int_distribution<int> delay_;
  spdlog::level::level_enum saved_level_ = spdlog::level::info;
};

TEST_F(CommitKillTest, InPlaceSetSurvivesSigkillAtAnyInstant) {
  constexpr int kRounds = 120;
  const std::vector<uint64_t> targets = {9, 12, 16};
  std::vector<uint64_t> allowed = targets;
  allowed.push_back(kOriginalBlocks);
  const std::vector<std::string> args = {
      "--store", tmp_.path(), "--artifact",
      "a",       "--targets", absl::StrJoin(targets, ",")};
  KillStats stats;
  for (int round = 0; round < kRounds; ++round) {
    KillAndRecover(args, &stats);
    if (HasFatalFailure()) break;
    SCOPED_TRACE(trace_);
    const uint64_t count = testing::CheckResizedArtifact(tmp_.Join("a"), base_);
    EXPECT_THAT(count, AnyOfArray(allowed));
    ++stats.counts[count];
    if (HasFailure()) break;  // one broken round says it all
  }
  printf("in place: %s\n", stats.ToString().c_str());
  // Else commit-stress never got to commit, and nothing was tested.
  EXPECT_GE(stats.counts.size(), 2u) << stats.ToString();
}

TEST_F(CommitKillTest, OutputSetSurvivesSigkillAndNeverTouchesTheSource) {
  // At least kRounds; then kRounds more at a time, with a wider kill window,
  // until outputs of two counts were seen (at most kMaxRounds).
  constexpr int kRounds = 30;
  constexpr int kMaxRounds = 4 * kRounds;
  const std::vector<uint64_t> targets = {9, 12};
  const std::vector<std::string> args = {
      "--store",  tmp_.path(), "--artifact",
      "a",        "--targets", absl::StrJoin(targets, ","),
      "--output", "b"};
  const std::map<std::string, uint64_t> source =
      testing::HashTree(tmp_.Join("a"));
  KillStats stats;
  int absent = 0;  // rounds that ended before the first output existed
  for (int round = 0; round < kMaxRounds; ++round) {
    if (round > 0 && round % kRounds == 0) {
      if (stats.counts.size() >= 2) break;
      WidenKillDelays();
    }
    KillAndRecover(args, &stats);
    if (HasFatalFailure()) break;
    SCOPED_TRACE(trace_);
    EXPECT_EQ(testing::HashTree(tmp_.Join("a")), source)
        << "the source changed";
    if (!env_->Stat(tmp_.Join("b")).ok()) {
      ++absent;
    } else {
      const uint64_t count =
          testing::CheckResizedArtifact(tmp_.Join("b"), base_);
      EXPECT_THAT(count, AnyOfArray(targets));
      ++stats.counts[count];
    }
    if (HasFailure()) break;
  }
  printf("output directory: %s; no output yet: %d\n", stats.ToString().c_str(),
         absent);
  EXPECT_GE(stats.counts.size(), 2u) << stats.ToString();
}

}  // namespace
}  // namespace rbln
