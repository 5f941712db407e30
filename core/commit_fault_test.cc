// Fault injection for the commit engine (DESIGN §6), in the manner of
// LevelDB's db/fault_injection_test.cc: a fault-free commit counts the N
// file-system calls it makes; then, for every k in 1..N, the same commit on a
// fresh copy of the store makes call k fail (EIO, ENOSPC) or crash (dropping
// unsynced data), and the store must hold a complete old or new artifact,
// the source of a copy untouched, and no staging debris.
#include <cerrno>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/artifact.h"
#include "core/env.h"
#include "core/store.h"
#include "core/testing/fault_injection_env.h"
#include "core/testing/test_util.h"
#include "gtest/gtest.h"
#include "spdlog/spdlog.h"
#include "tools/synth.h"

namespace rbln {
namespace {

using testing::FaultInjectionEnv;

constexpr uint64_t kOldBlocks = 16;
constexpr uint64_t kNewBlocks = 10;
constexpr uint64_t kReplacedOutputBlocks = 12;

enum class Commit { kInPlace, kNewOutput, kReplaceOutput };
enum class Fault { kEio, kEnospc, kCrash };

std::string CommitName(Commit commit) {
  switch (commit) {
    case Commit::kInPlace:
      return "InPlace";
    case Commit::kNewOutput:
      return "NewOutput";
    case Commit::kReplaceOutput:
      return "ReplaceOutput";
  }
  return "?";
}

std::string FaultName(Fault fault) {
  switch (fault) {
    case Fault::kEio:
      return "EIO";
    case Fault::kEnospc:
      return "ENOSPC";
    case Fault::kCrash:
      return "Crash";
  }
  return "?";
}

SynthSpec TinySpec() {
  SynthSpec spec;
  spec.decoder_batch_sizes = {1, 2};
  return spec;
}

// The container payloads of the artifact at `dir`, by file name.
std::map<std::string, std::string> PayloadsOf(const Artifact& artifact) {
  std::map<std::string, std::string> payloads;
  for (const ContainerFile& file : artifact.containers()) {
    const Preamble& preamble = file.container.preamble;
    payloads[file.file_name] =
        testing::ReadFileOrDie(JoinPath(artifact.dir(), file.file_name))
            .substr(preamble.payload_offset, preamble.payload_length);
  }
  return payloads;
}

// Store-relative paths of every staging directory anywhere below `dir`.
std::vector<std::string> StagingDebris(const std::string& dir,
                                       const std::string& rel = "") {
  std::vector<std::string> debris;
  absl::StatusOr<std::vector<DirEntry>> entries = Env::Default()->ListDir(dir);
  EXPECT_TRUE(entries.ok()) << entries.status();
  if (!entries.ok()) return debris;
  for (const DirEntry& entry : *entries) {
    const std::string entry_rel = JoinPath(rel, entry.name);
    if (StagedArtifactName(entry.name).has_value()) {
      debris.push_back(entry_rel);
    }
    if (entry.type == FileType::kDirectory) {
      for (std::string& below :
           StagingDebris(JoinPath(dir, entry.name), entry_rel)) {
        debris.push_back(std::move(below));
      }
    }
  }
  return debris;
}

// A fresh store holding the source artifact "a" (with a companion directory
// besides the synthesized files) and, for a replacing commit, an existing
// artifact "out".
class Scenario {
 public:
  explicit Scenario(Commit commit) : commit_(commit) {
    Env* env = Env::Default();
    absl::StatusOr<SynthResult> made =
        WriteSyntheticArtifact(env, TinySpec(), source_path());
    EXPECT_TRUE(made.ok()) << made.status();
    EXPECT_EQ(made->kvcache_num_blocks, kOldBlocks);
    const std::string extra = JoinPath(source_path(), "extra");
    EXPECT_TRUE(env->CreateDir(extra).ok());
    EXPECT_TRUE(env->CreateDir(JoinPath(extra, "sub")).ok());
    testing::WriteFileOrDie(JoinPath(extra, "notes.txt"), "calibration\n");
    testing::WriteFileOrDie(JoinPath(extra, "sub/table.bin"),
                            std::string(5000, '\x5a'));
    source_tree_ = testing::HashTree(source_path());
    absl::StatusOr<Artifact> source = Artifact::Open(env, source_path());
    EXPECT_TRUE(source.ok()) << source.status();
    source_payloads_ = PayloadsOf(*source);
    if (commit == Commit::kReplaceOutput) {
      SynthSpec spec = TinySpec();
      spec.kvcache_num_blocks = kReplacedOutputBlocks;
      EXPECT_TRUE(WriteSyntheticArtifact(env, spec, output_path()).ok());
      output_tree_ = testing::HashTree(output_path());
    }
  }

  WriteRequest Request() const {
    WriteRequest request{.name = "a", .target = kNewBlocks};
    if (commit_ != Commit::kInPlace) request.output_name = "out";
    request.replace = commit_ == Commit::kReplaceOutput;
    return request;
  }

  const std::string& root() const { return tmp_.path(); }
  std::string source_path() const { return tmp_.Join("a"); }
  std::string output_path() const { return tmp_.Join("out"); }

  // Checks the store as a commit that did (`committed`) or did not reach its
  // commit point must leave it; with `clean`, also that no staging directory
  // is left.
  void Verify(bool committed, bool clean) const {
    if (commit_ == Commit::kInPlace) {
      if (committed) {
        ExpectResized(source_path());
      } else {
        EXPECT_EQ(testing::HashTree(source_path()), source_tree_)
            << "the artifact changed without a commit";
      }
    } else {
      EXPECT_EQ(testing::HashTree(source_path()), source_tree_)
          << "the source of a copy changed";
      if (committed) {
        ExpectResized(output_path());
      } else if (commit_ == Commit::kReplaceOutput) {
        EXPECT_EQ(testing::HashTree(output_path()), output_tree_)
            << "the replaced output changed without a commit";
      } else {
        EXPECT_FALSE(Env::Default()->Stat(output_path()).ok())
            << "the output exists without a commit";
      }
    }
    if (clean) {
      std::vector<std::string> debris = StagingDebris(root());
      EXPECT_TRUE(debris.empty())
          << "staging debris: " << absl::StrJoin(debris, ", ");
      std::set<std::string> top;
      for (const auto& [name, hash] : testing::HashTree(root())) {
        top.insert(name.substr(0, name.find('/')));
      }
      std::set<std::string> expected = {kStateDirName, "a"};
      if (commit_ == Commit::kReplaceOutput || committed) {
        if (commit_ != Commit::kInPlace) expected.insert("out");
      }
      EXPECT_EQ(top, expected);
    }
  }

 private:
  // `dir` must be a complete, valid artifact with the new count, the
  // source's payloads and the source's companions.
  void ExpectResized(const std::string& dir) const {
    absl::StatusOr<Artifact> artifact =
        Artifact::Open(Env::Default(), dir, {.verify_payload = true});
    ASSERT_TRUE(artifact.ok()) << artifact.status();
    EXPECT_EQ(artifact->current_num_blocks(), kNewBlocks);
    EXPECT_EQ(PayloadsOf(*artifact), source_payloads_);
    for (const auto& [name, hash] : testing::HashTree(dir)) {
      if (name == kRblnConfigFileName || absl::EndsWith(name, ".rbln")) {
        continue;
      }
      auto source = source_tree_.find(name);
      ASSERT_NE(source, source_tree_.end()) << name << " is not the source's";
      EXPECT_EQ(hash, source->second) << name << " differs from the source's";
    }
  }

  testing::TempDir tmp_;
  const Commit commit_;
  std::map<std::string, uint64_t> source_tree_;
  std::map<std::string, std::string> source_payloads_;
  std::map<std::string, uint64_t> output_tree_;
};

class CommitFaultTest
    : public ::testing::TestWithParam<std::tuple<Commit, Fault>> {
 protected:
  static void SetUpTestSuite() {
    // Recovery logs every staging directory it removes: once per crash here.
    spdlog::set_level(spdlog::level::err);
  }

  Commit commit() const { return std::get<0>(GetParam()); }
  Fault fault() const { return std::get<1>(GetParam()); }
};

TEST_P(CommitFaultTest, EveryCallFailingLeavesOldOrNewAndNoDebris) {
  // The fault-free commit: how many calls it makes and which one publishes.
  int64_t num_calls = 0;
  int64_t commit_point = 0;
  {
    Scenario scenario(commit());
    FaultInjectionEnv env(Env::Default());
    absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
        ArtifactStore::Open(&env, scenario.root());
    ASSERT_TRUE(store.ok()) << store.status();
    env.Reset();
    absl::StatusOr<WriteResult> result = (*store)->Write(scenario.Request());
    ASSERT_TRUE(result.ok()) << result.status();
    const std::vector<std::string> log = env.call_log();
    num_calls = static_cast<int64_t>(log.size());
    for (size_t i = 0; i < log.size() && commit_point == 0; ++i) {
      if (absl::StartsWith(log[i], "RenameExchange ") ||
          absl::StartsWith(log[i], "RenameNoReplace ")) {
        commit_point = static_cast<int64_t>(i) + 1;
      }
    }
    ASSERT_GT(commit_point, 0) << absl::StrJoin(log, "\n");
    store->reset();
    scenario.Verify(/*committed=*/true, /*clean=*/true);
  }
  RecordProperty("fault_points", static_cast<int>(num_calls));
  std::cout << CommitName(commit()) << ": " << num_calls
            << " fault points, commit point at call " << commit_point << "\n";

  for (int64_t k = 1; k <= num_calls && !HasFailure(); ++k) {
    Scenario scenario(commit());
    FaultInjectionEnv env(Env::Default());
    absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
        ArtifactStore::Open(&env, scenario.root());
    ASSERT_TRUE(store.ok()) << store.status();
    switch (fault()) {
      case Fault::kEio:
        env.FailAt(k, EIO);
        break;
      case Fault::kEnospc:
        env.FailAt(k, ENOSPC);
        break;
      case Fault::kCrash:
        env.CrashAt(k);
        break;
    }
    const absl::Status status = (*store)->Write(scenario.Request()).status();
    SCOPED_TRACE(absl::StrCat(
        "k=", k, " of ", num_calls, ", ", FaultName(fault()), " at call [",
        env.faulted_call(), "], Write returned ", status.ToString()));
    ASSERT_FALSE(env.faulted_call().empty()) << "the fault never fired";
    // A fault absorbed before the commit point (a failed hard link falls
    // back to a copy) may still end in a commit.
    const bool committed = status.ok() || k > commit_point;
    if (!status.ok() && fault() != Fault::kCrash) {
      EXPECT_EQ(status.code(), fault() == Fault::kEnospc
                                   ? absl::StatusCode::kResourceExhausted
                                   : absl::StatusCode::kInternal);
      EXPECT_TRUE(absl::StrContains(status.message(), "(injected)"))
          << "the injected error was replaced by another";
    }
    store->reset();
    if (fault() != Fault::kCrash) {
      // The engine cleans up after itself: no recovery run here.
      scenario.Verify(committed, /*clean=*/true);
      continue;
    }
    // At the instant of the crash, and after the recovery of the next start.
    scenario.Verify(committed, /*clean=*/false);
    absl::StatusOr<std::unique_ptr<ArtifactStore>> reopened =
        ArtifactStore::Open(Env::Default(), scenario.root());
    ASSERT_TRUE(reopened.ok()) << reopened.status();
    reopened->reset();
    scenario.Verify(committed, /*clean=*/true);
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllCommitsAndFaults, CommitFaultTest,
    ::testing::Combine(::testing::Values(Commit::kInPlace, Commit::kNewOutput,
                                         Commit::kReplaceOutput),
                       ::testing::Values(Fault::kEio, Fault::kEnospc,
                                         Fault::kCrash)),
    [](const ::testing::TestParamInfo<CommitFaultTest::ParamType>& info) {
      return CommitName(std::get<0>(info.param)) +
             FaultName(std::get<1>(info.param));
    });

}  // namespace
}  // namespace rbln
