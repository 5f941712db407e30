// Fault injection for the commit engine (docs/commit-protocol.md), in the
// manner of LevelDB's db/fault_injection_test.cc: a fault-free commit counts
// the N file-system calls it makes; then, for every k in 1..N, the same commit
// on a fresh copy of the store makes call k fail (EIO, ENOSPC) or crash
// (dropping unsynced data), and the store must hold a complete old or new
// artifact, the source of a copy untouched, and no staging debris.
//
// A commit's calls end when the store is closed: with an old-version grace
// period, the old version swapped out is removed then (or by the next
// start's recovery after a crash), and its removal is faulted too.
#include <stdlib.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "core/format/artifact.h"
#include "core/os/env.h"
#include "core/store/intent_record.h"
#include "core/store/locks.h"
#include "core/store/staging_name.h"
#include "core/store/store.h"
#include "core/testing/fault_injection_env.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/spdlog.h"
#include "tools/synth.h"

namespace rbln {
namespace {

using testing::FaultInjectionEnv;
using testing::FaultInjectionOptions;

constexpr uint64_t kOldBlocks = 16;
constexpr uint64_t kNewBlocks = 10;
constexpr uint64_t kReplacedOutputBlocks = 12;

// Durability is what FaultInjectionEnv simulates here (CrashAt drops what was
// not synced), so waiting for the disk at every fsync would only make the
// thousand commits below slow.
constexpr FaultInjectionOptions kUnsynced = {.forward_syncs = false};

// kNewOutputInNewParents writes its output where two parents are missing:
// the commit makes them, and a failed one removes them.
enum class Commit {
  kInPlace,
  kNewOutput,
  kReplaceOutput,
  kNewOutputInNewParents
};
enum class Fault { kEio, kEnospc, kCrash };
// Whether the old version is removed before the write returns, or kept for
// a grace period longer than the test, so that closing the store removes it.
enum class OldVersion { kRemovedAtOnce, kRemovedAtClose };

std::string CommitName(Commit commit) {
  switch (commit) {
    case Commit::kInPlace:
      return "InPlace";
    case Commit::kNewOutput:
      return "NewOutput";
    case Commit::kReplaceOutput:
      return "ReplaceOutput";
    case Commit::kNewOutputInNewParents:
      return "NewOutputInNewParents";
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

// A known bug in core/format/artifact.cc, which this test may not change:
SynthSpec TinySpec() {
  SynthSpec spec;
  spec.decoder_batch_sizes = {1, 2};
  return spec;
}

// The container payloads of the artifact at `dir`, by file name.
std::map<std::string, std::string> PayloadsOf(const Artifact& artifact) {
  std::map<std::string, std::string> payloads;
  for (const ContainerFile& file : artifact.containers()) {
    const Preamble& preamble = rbln::testing::ContainerOf(file).preamble;
    payloads[file.file_name] =
        testing::ReadFileOrDie(JoinPath(artifact.dir(), file.file_name))
            .substr(preamble.payload_offset, preamble.payload_length);
  }
  return payloads;
}

// Calls `visit(rel, entry)` for every entry below `dir`, `rel` being its path
// relative to `dir`.
void WalkTree(
    const std::string& dir,
    const std::function<void(const std::string&, const DirEntry&)>& visit,
    const std::string& rel = "") {
  absl::StatusOr<std::vector<DirEntry>> entries =
      Env::Default()->ListDir(JoinPath(dir, rel));
  ASSERT_TRUE(entries.ok()) << entries.status();
  for (const DirEntry& entry : *entries) {
    const std::string entry_rel = JoinPath(rel, entry.name);
    visit(entry_rel, entry);
    if (entry.type == FileType::kDirectory) WalkTree(dir, visit, entry_rel);
  }
}

// Relative path -> XXH64 of the contents of every file below `dir` (other
// entries map to their type). testing::HashTree does the same, but zero-fills
// a 1 MiB buffer per file: under ASan, the thousands of trees hashed here
// spent most of this test's time in page faults.
std::map<std::string, uint64_t> TreeDigest(const std::string& dir) {
  std::map<std::string, uint64_t> digest;
  WalkTree(dir, [&](const std::string& rel, const DirEntry& entry) {
    if (entry.type != FileType::kRegular) {
      digest[rel] = static_cast<uint64_t>(entry.type);
      return;
    }
    const std::string data = testing::ReadFileOrDie(JoinPath(dir, rel));
    digest[rel] = XXH64(data.data(), data.size(), 0);
  });
  return digest;
}

// Paths relative to `dir` of every staging directory and old version under
// a retired name anywhere below it.
std::vector<std::string> StagingDebris(const std::string& dir) {
  std::vector<std::string> debris;
  WalkTree(dir, [&](const std::string& rel, const DirEntry& entry) {
    if (StagedArtifactName(entry.name).has_value() ||
        RetiredArtifactName(entry.name).has_value()) {
      debris.push_back(rel);
    }
  });
  return debris;
}

// The artifacts every run starts from, made once per test: the source "a"
// (the synthesized files plus a companion directory) and, for a replacing
// commit, an existing artifact "out"; with what they hold.
struct Originals {
  explicit Originals(Commit commit) {
    // Only to skip the fsyncs: these files need not be durable.
    FaultInjectionEnv env(Env::Default(), kUnsynced);
    const std::string source = dir.Join("a");
    absl::StatusOr<SynthResult> made =
        WriteSyntheticArtifact(&env, TinySpec(), source);
    EXPECT_TRUE(made.ok()) << made.status();
    EXPECT_EQ(made->kvcache_num_blocks, kOldBlocks);
    const std::string extra = JoinPath(source, "extra");
    EXPECT_TRUE(env.CreateDir(extra).ok());
    EXPECT_TRUE(env.CreateDir(JoinPath(extra, "sub")).ok());
    testing::WriteFileOrDie(JoinPath(extra, "notes.txt"), "calibration\n");
    testing::WriteFileOrDie(JoinPath(extra, "sub/table.bin"),
                            std::string(5000, '\x5a'));
    source_tree = TreeDigest(source);
    absl::StatusOr<Artifact> artifact = Artifact::Open(&env, source);
    EXPECT_TRUE(artifact.ok()) << artifact.status();
    source_payloads = PayloadsOf(*artifact);
    if (commit == Commit::kReplaceOutput) {
      SynthSpec spec = TinySpec();
      spec.kvcache_num_blocks = kReplacedOutputBlocks;
      EXPECT_TRUE(WriteSyntheticArtifact(&env, spec, dir.Join("out")).ok());
      output_tree = TreeDigest(dir.Join("out"));
    }
  }

  testing::TempDir dir;
  std::map<std::string, uint64_t> source_tree;
  std::map<std::string, std::string> source_payloads;
  std::map<std::string, uint64_t> output_tree;  // empty: no "out"
};

// A fresh store holding a copy of the originals, and the checks of what a
// commit in it may leave.
class Scenario {
 public:
  Scenario(Commit commit, const Originals& originals)
      : commit_(commit), originals_(originals) {
    std::filesystem::copy(originals.dir.path(), root(),
                          std::filesystem::copy_options::recursive);
  }

  WriteRequest Request() const {
    WriteRequest request{.name = "a", .target = kNewBlocks};
    if (commit_ != Commit::kInPlace) request.output_name = output_name();
    request.replace = commit_ == Commit::kReplaceOutput;
    return request;
  }

  const std::string& root() const { return tmp_.path(); }
  // The intent records in the state directory.
  std::vector<std::string> IntentRecords() const {
    std::vector<std::string> names;
    absl::StatusOr<std::vector<DirEntry>> entries = Env::Default()->ListDir(
        JoinPath(tmp_.Join(kStateDirName), kIntentDirName));
    EXPECT_TRUE(entries.ok()) << entries.status();
    if (entries.ok()) {
      for (const DirEntry& entry : *entries) names.push_back(entry.name);
    }
    return names;
  }
  std::string source_path() const { return tmp_.Join("a"); }
  std::string output_name() const {
    return commit_ == Commit::kNewOutputInNewParents ? "new/sub/out" : "out";
  }
  std::string output_path() const { return tmp_.Join(output_name()); }

  // The artifacts are as a commit that did (`committed`) or did not reach its
  // commit point must leave them.
  void ExpectArtifacts(bool committed) const {
    if (commit_ == Commit::kInPlace) {
      if (committed) {
        ExpectResized(source_path());
      } else {
        EXPECT_EQ(TreeDigest(source_path()), originals_.source_tree)
            << "the artifact changed without a commit";
      }
      return;
    }
    EXPECT_EQ(TreeDigest(source_path()), originals_.source_tree)
        << "the source of a copy changed";
    if (committed) {
      ExpectResized(output_path());
    } else if (commit_ == Commit::kReplaceOutput) {
      EXPECT_EQ(TreeDigest(output_path()), originals_.output_tree)
          << "the replaced output changed without a commit";
    } else {
      EXPECT_FALSE(Env::Default()->Stat(output_path()).ok())
          << "the output exists without a commit";
    }
  }

  // No staging directory is left anywhere, nor anything else new: but for
  // the empty parents that a commit made for its output when a crash
  // (`crashed`) cut it short.
  void ExpectClean(bool committed, bool crashed = false) const {
    std::vector<std::string> debris = StagingDebris(root());
    EXPECT_TRUE(debris.empty())
        << "staging debris: " << absl::StrJoin(debris, ", ");
    std::vector<std::string> expected = {kStateDirName, "a"};
    if (commit_ == Commit::kReplaceOutput ||
        (commit_ == Commit::kNewOutput && committed)) {
      expected.push_back("out");
    }
    if (commit_ == Commit::kNewOutputInNewParents &&
        (committed || (crashed && Exists("new")))) {
      expected.push_back("new");
    }
    if (commit_ == Commit::kNewOutputInNewParents && !committed && crashed &&
        Exists("new")) {
      WalkTree(
          tmp_.Join("new"), [](const std::string& rel, const DirEntry& entry) {
            EXPECT_EQ(entry.type, FileType::kDirectory)
                << "new/" << rel << " is in a parent a crashed commit made";
          });
    }
    std::vector<std::string> top;
    absl::StatusOr<std::vector<DirEntry>> entries =
        Env::Default()->ListDir(root());
    ASSERT_TRUE(entries.ok()) << entries.status();
    for (const DirEntry& entry : *entries) top.push_back(entry.name);
    EXPECT_EQ(top, expected);
  }

 private:
  // `dir` must be a complete, valid artifact with the new count, the
  // source's payloads and the source's companions.
  void ExpectResized(const std::string& dir) const {
    absl::StatusOr<Artifact> artifact =
        Artifact::Open(Env::Default(), dir, {.verify_payload = true});
    ASSERT_TRUE(artifact.ok()) << artifact.status();
    EXPECT_EQ(artifact->current_num_blocks(), kNewBlocks);
    EXPECT_EQ(PayloadsOf(*artifact), originals_.source_payloads);
    for (const auto& [name, hash] : TreeDigest(dir)) {
      if (name == kRblnConfigFileName || absl::EndsWith(name, ".rbln")) {
        continue;
      }
      auto source = originals_.source_tree.find(name);
      ASSERT_NE(source, originals_.source_tree.end())
          << name << " is not the source's";
      EXPECT_EQ(hash, source->second) << name << " differs from the source's";
    }
  }

  bool Exists(const std::string& rel) const {
    return Env::Default()->Stat(tmp_.Join(rel)).ok();
  }

  const Commit commit_;
  const Originals& originals_;
  testing::TempDir tmp_;
};

class CommitFaultTest
    : public ::testing::TestWithParam<std::tuple<Commit, Fault, OldVersion>> {
 protected:
  static void SetUpTestSuite() {
    // Recovery logs every staging directory it removes: once per crash here.
    spdlog::set_level(spdlog::level::err);
    // About a thousand stores are created and deleted; on ext4 allocating
    // their inodes takes two thirds of this test's time, and nothing checked
    // here depends on the file system. So a RAM-backed one is used when there
    // is one and TMPDIR does not name another.
    const char* tmpdir = getenv("TMPDIR");
    if ((tmpdir == nullptr || *tmpdir == '\0') &&
        access("/dev/shm", W_OK | X_OK) == 0) {
      setenv("TMPDIR", "/dev/shm", /*overwrite=*/1);
    }
  }

  Commit commit() const { return std::get<0>(GetParam()); }
  Fault fault() const { return std::get<1>(GetParam()); }
  StoreOptions options() const {
    StoreOptions options;
    if (std::get<2>(GetParam()) == OldVersion::kRemovedAtClose) {
      options.old_version_grace = absl::Hours(1);
      // Its pages would be forgotten on a thread of its own, whose calls
      // would land among the commit's, which this test numbers.
      options.forget_old_version_pages = false;
    }
    return options;
  }
};

TEST_P(CommitFaultTest, EveryCallFailingLeavesOldOrNewAndNoDebris) {
  const Originals originals(commit());
  // The fault-free commit: how many calls it makes and which one publishes.
  int64_t num_calls = 0;
  int64_t commit_point = 0;
  int64_t num_syncs = 0;
  int64_t syncs_before_commit = 0;
  {
    Scenario scenario(commit(), originals);
    std::unique_ptr<Env> confined = testing::ConfinedEnvOrDie(scenario.root());
    FaultInjectionEnv env(confined.get(), kUnsynced);
    absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
        ArtifactStore::Open(&env, scenario.root(), options());
    ASSERT_TRUE(store.ok()) << store.status();
    env.Reset();
    absl::StatusOr<WriteResult> result = (*store)->Write(scenario.Request());
    ASSERT_TRUE(result.ok()) << result.status();
    store->reset();  // removes an old version kept for its grace
    const std::vector<std::string> log = env.call_log();
    num_calls = static_cast<int64_t>(log.size());
    for (size_t i = 0; i < log.size() && commit_point == 0; ++i) {
      if (absl::StartsWith(log[i], "RenameExchange ") ||
          absl::StartsWith(log[i], "RenameNoReplace ")) {
        commit_point = static_cast<int64_t>(i) + 1;
      }
    }
    ASSERT_GT(commit_point, 0) << absl::StrJoin(log, "\n");
    // fsyncs (Sync, SyncDir, SyncFile) before the commit point, and in all
    // (docs/performance.md, "The deferred delete and the fsyncs of one
    // commit").
    for (size_t i = 0; i < log.size(); ++i) {
      if (absl::StartsWith(log[i], "Sync")) {
        ++num_syncs;
        if (static_cast<int64_t>(i) < commit_point) ++syncs_before_commit;
      }
    }
    scenario.ExpectArtifacts(/*committed=*/true);
    scenario.ExpectClean(/*committed=*/true);
  }
  std::cout << CommitName(commit()) << ": " << num_calls
            << " fault points, commit point at call " << commit_point
            << ", fsyncs " << syncs_before_commit << " before it and "
            << num_syncs << " in all\n";

  // One failing k is enough to read; the next ones would mostly repeat it.
  for (int64_t k = 1; k <= num_calls && !HasFailure(); ++k) {
    Scenario scenario(commit(), originals);
    std::unique_ptr<Env> confined = testing::ConfinedEnvOrDie(scenario.root());
    FaultInjectionEnv env(confined.get(), kUnsynced);
    absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
        ArtifactStore::Open(&env, scenario.root(), options());
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
    // The commit's last calls: an old version kept for its grace is removed.
    store->reset();
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
    // At the instant of the failure or crash.
    scenario.ExpectArtifacts(committed);
    if (fault() == Fault::kCrash) {
      // The next start's recovery removes the staging directories (which
      // touches nothing else: RecoveryRemovesOnlyStagingDebris).
      absl::StatusOr<std::unique_ptr<ArtifactStore>> reopened =
          ArtifactStore::Open(scenario.root());
      ASSERT_TRUE(reopened.ok()) << reopened.status();
    }
    // After an I/O error the engine itself removed its staging directory and
    // the parents it made (no recovery ran); after a crash, recovery removed
    // the staging directory.
    scenario.ExpectClean(committed, fault() == Fault::kCrash);
    // A record the engine could not remove names nothing left; the next
    // start drops it, reporting nothing (no directory lacks its record).
    absl::StatusOr<std::unique_ptr<ArtifactStore>> again =
        ArtifactStore::Open(scenario.root());
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_THAT((*again)->left_in_place(), ::testing::IsEmpty());
    EXPECT_THAT(scenario.IntentRecords(), ::testing::IsEmpty());
  }
}

std::string TestName(
    const ::testing::TestParamInfo<CommitFaultTest::ParamType>& info) {
  return CommitName(std::get<0>(info.param)) +
         FaultName(std::get<1>(info.param)) +
         (std::get<2>(info.param) == OldVersion::kRemovedAtClose
              ? "OldVersionRemovedAtClose"
              : "");
}

INSTANTIATE_TEST_SUITE_P(
    AllCommitsAndFaults, CommitFaultTest,
    ::testing::Combine(::testing::Values(Commit::kInPlace, Commit::kNewOutput,
                                         Commit::kReplaceOutput,
                                         Commit::kNewOutputInNewParents),
                       ::testing::Values(Fault::kEio, Fault::kEnospc,
                                         Fault::kCrash),
                       ::testing::Values(OldVersion::kRemovedAtOnce)),
    TestName);

// Only these commits swap an old version out.
INSTANTIATE_TEST_SUITE_P(
    OldVersionsKeptForAGracePeriod, CommitFaultTest,
    ::testing::Combine(
        ::testing::Values(Commit::kInPlace, Commit::kReplaceOutput),
        ::testing::Values(Fault::kEio, Fault::kEnospc, Fault::kCrash),
        ::testing::Values(OldVersion::kRemovedAtClose)),
    TestName);

}  // namespace
}  // namespace rbln
