// ArtifactStore::FitTogether on synthesized artifacts: the plan, what it
// writes and in which order, and what it refuses.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/budget.h"
#include "core/error_facts.h"
#include "core/os/env.h"
#include "core/store/store.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/synth.h"

namespace rbln {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class StoreGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::canonical(tmp_.path()).string();
    for (const char* name : {"a", "b", "c"}) {
      // Blocks of many megabytes, so that each one counts past the 2 MiB
      // alignment.
      SynthSpec spec;
      spec.num_layers = 16;
      spec.num_kv_heads = 8;
      spec.head_dim = 128;
      absl::StatusOr<SynthResult> made =
          WriteSyntheticArtifact(Env::Default(), spec, root_ + "/" + name);
      ASSERT_TRUE(made.ok()) << made.status();
    }
    env_ = testing::ConfinedEnvOrDie(root_);
    absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
        ArtifactStore::Open(env_.get(), root_, {});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  GroupRequest Request(const std::string& budget,
                       std::vector<std::string> names = {"a", "b", "c"}) {
    GroupRequest request;
    for (const std::string& name : names) request.members.push_back({name});
    absl::StatusOr<MemoryBudget> parsed = MemoryBudget::Parse(budget);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    if (parsed.ok()) request.budget = *parsed;
    return request;
  }

  uint64_t Count(const std::string& name) {
    absl::StatusOr<Artifact> artifact = store_->Read(name);
    EXPECT_TRUE(artifact.ok()) << artifact.status();
    return artifact.ok() ? artifact->current_num_blocks() : 0;
  }

  testing::TempDir tmp_;
  std::string root_;
  std::unique_ptr<Env> env_;
  std::unique_ptr<ArtifactStore> store_;
};

TEST_F(StoreGroupTest, ADryRunPlansAGroupThatFitsAndWritesNothing) {
  const auto before = testing::HashTree(root_ + "/a");
  GroupRequest request = Request("50%");
  request.dry_run = true;
  absl::StatusOr<GroupResult> result = store_->FitTogether(request);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->members.size(), 3u);
  EXPECT_TRUE(result->fits);
  for (const GroupBucket& bucket : result->buckets) {
    EXPECT_GE(bucket.headroom_bytes, 0);
    EXPECT_EQ(bucket.used_bytes.size(), 3u);
  }
  for (const GroupMemberResult& member : result->members) {
    EXPECT_FALSE(member.written);
    EXPECT_GE(member.new_num_blocks, member.num_min_blocks);
    EXPECT_TRUE(member.limiting_bucket >= 0 ||
                member.new_num_blocks == member.num_full_blocks);
  }
  EXPECT_EQ(testing::HashTree(root_ + "/a"), before);
  // The same artifacts alone get more than in the group.
  absl::StatusOr<GroupResult> alone = store_->FitTogether([&] {
    GroupRequest one = Request("50%", {"a"});
    one.dry_run = true;
    return one;
  }());
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_GE(alone->members[0].new_num_blocks,
            result->members[0].new_num_blocks);
}

TEST_F(StoreGroupTest, ShrinksAreCommittedBeforeGrowsAndARetryFinishes) {
  // b grows and a shrinks when the group is sized: a first.
  ASSERT_TRUE(store_->Write({.name = "b", .target = uint64_t{9}}).ok());
  // A budget that holds them as they are now (a full, b at 9), and no more.
  GroupRequest now = Request("100%", {"b", "a"});
  now.describe_only = true;
  absl::StatusOr<GroupResult> current = store_->FitTogether(now);
  ASSERT_TRUE(current.ok()) << current.status();
  uint64_t most = 0;
  size_t per_node = 0;
  for (const GroupBucket& bucket : current->buckets) {
    most = std::max(most, bucket.used_bytes[0] + bucket.used_bytes[1]);
    per_node += bucket.node == 0 ? 1 : 0;
  }
  const std::string budget = absl::StrCat(most * per_node, "B");
  GroupRequest dry = Request(budget, {"b", "a"});
  dry.dry_run = true;
  absl::StatusOr<GroupResult> plan = store_->FitTogether(dry);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const uint64_t a_target = plan->members[1].new_num_blocks;
  const uint64_t b_target = plan->members[0].new_num_blocks;
  ASSERT_LT(a_target, Count("a"));
  ASSERT_GT(b_target, 9u);

  // Stopped after the first commit: a is written, b is not.
  GroupRequest stopped = Request(budget, {"b", "a"});
  std::vector<uint64_t> seen;
  bool stop = false;
  stopped.after_commit = [&](size_t) {
    seen = {Count("a"), 0};
    stop = true;
  };
  stopped.is_cancelled = [&] { return stop; };
  absl::StatusOr<GroupResult> partial = store_->FitTogether(stopped);
  ASSERT_FALSE(partial.ok());
  EXPECT_EQ(partial.status().code(), absl::StatusCode::kAborted);
  std::optional<ErrorFacts> facts = GetErrorFacts(partial.status());
  ASSERT_TRUE(facts.has_value());
  EXPECT_EQ(facts->reason, ErrorReason::kGroupPartial);
  EXPECT_THAT(facts->written_artifacts, ElementsAre("a"));
  EXPECT_EQ(seen.front(), a_target);
  EXPECT_EQ(Count("a"), a_target);
  EXPECT_EQ(Count("b"), 9u);

  // A retry plans again and finishes it.
  absl::StatusOr<GroupResult> retry =
      store_->FitTogether(Request(budget, {"b", "a"}));
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_TRUE(retry->members[1].already_at_target);
  EXPECT_FALSE(retry->members[1].written);
  EXPECT_TRUE(retry->members[0].written);
  EXPECT_EQ(Count("b"), b_target);
  EXPECT_EQ(Count("a"), a_target);
}

TEST_F(StoreGroupTest, DescribeOnlyShowsTheCurrentCounts) {
  GroupRequest request = Request("10%");
  request.describe_only = true;
  absl::StatusOr<GroupResult> result = store_->FitTogether(request);
  ASSERT_TRUE(result.ok()) << result.status();
  for (const GroupMemberResult& member : result->members) {
    EXPECT_EQ(member.new_num_blocks, member.previous_num_blocks);
    EXPECT_FALSE(member.written);
  }
}

TEST_F(StoreGroupTest, WhatTheGroupRefuses) {
  fs::create_directory_symlink("a", root_ + "/current");
  absl::StatusOr<GroupResult> twice =
      store_->FitTogether(Request("50%", {"a", "current"}));
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(twice.status().message(), HasSubstr("are the same artifact"));

  GroupRequest cas = Request("50%", {"a", "b"});
  cas.members[1].expected_num_blocks = Count("b") + 1;
  absl::StatusOr<GroupResult> mismatch = store_->FitTogether(cas);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kAborted);

  absl::StatusOr<GroupResult> tiny = store_->FitTogether(Request("2MiB"));
  ASSERT_FALSE(tiny.ok());
  EXPECT_EQ(tiny.status().code(), absl::StatusCode::kFailedPrecondition);
  std::optional<ErrorFacts> facts = GetErrorFacts(tiny.status());
  ASSERT_TRUE(facts.has_value()) << tiny.status();
  EXPECT_EQ(facts->reason, ErrorReason::kGroupDoesNotFit);
  EXPECT_TRUE(facts->bytes_short.has_value());
  EXPECT_GT(*facts->bytes_short, 0u);

  GroupRequest heavy = Request("50%", {"a"});
  heavy.members[0].weight = 1001;
  EXPECT_EQ(store_->FitTogether(heavy).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rbln
