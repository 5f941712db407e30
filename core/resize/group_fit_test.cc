// FitGroup and DescribeGroup on hand-made memory models.
#include "core/resize/group_fit.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// A model of `nodes` x `chiplets` buckets, each with `other` bytes and one
// KV tensor of `per_block` bytes a block.
MemoryModel Model(uint32_t nodes, uint32_t chiplets, uint64_t other,
                  uint64_t per_block, uint64_t full) {
  MemoryModel model;
  model.num_nodes = nodes;
  model.chiplets_per_node = chiplets;
  model.num_full_blocks = full;
  for (uint32_t node = 0; node < nodes; ++node) {
    for (uint32_t chiplet = 0; chiplet < chiplets; ++chiplet) {
      MemoryBucket bucket;
      bucket.node = node;
      bucket.chiplet = chiplet;
      bucket.other_bytes = other + node * kMiB + chiplet * 3 * kMiB;
      bucket.kv_per_block = {per_block};
      model.buckets.push_back(bucket);
    }
  }
  return model;
}

GroupMember Member(const MemoryModel& model, std::string name,
                   uint32_t weight = 1, uint64_t min = 1) {
  return {.name = std::move(name),
          .model = &model,
          .num_min_blocks = min,
          .current_num_blocks = min,
          .weight = weight};
}

// Whether `members` at `counts` fit every bucket.
bool AllFit(const std::vector<GroupMember>& members,
            const std::vector<uint64_t>& counts,
            const std::vector<uint64_t>& budget) {
  for (const GroupBucket& bucket :
       DescribeGroup(members, counts, budget).buckets) {
    if (bucket.headroom_bytes < 0) return false;
  }
  return true;
}

TEST(GroupFitTest, OneMemberIsTheSingleFit) {
  std::mt19937_64 random(44);
  for (int round = 0; round < 200; ++round) {
    const MemoryModel model =
        Model(1 + random() % 3, 1 + random() % 4, (random() % 900) * kMiB,
              (1 + random() % 64) * 256 * 1024, 1 + random() % 4000);
    const uint64_t budget = (1 + random() % 2000) * kMiB;
    const FitResult single = FitModel(model, budget);
    const std::vector<GroupMember> members = {Member(model, "a", 1, 0)};
    absl::StatusOr<GroupPlan> group =
        FitGroup(members, std::vector<uint64_t>(model.num_nodes, budget));
    if (!group.ok()) {  // not even its other allocations fit
      EXPECT_EQ(single.num_blocks, 0u) << group.status();
      continue;
    }
    EXPECT_EQ(group->num_blocks[0], single.num_blocks) << "round " << round;
    EXPECT_EQ(group->limiting_bucket[0], single.limiting_bucket);
  }
}

TEST(GroupFitTest, NoMemberCanTakeOneMoreBlock) {
  std::mt19937_64 random(46);
  for (int round = 0; round < 100; ++round) {
    const uint32_t chiplets = 1 + random() % 4;
    std::vector<MemoryModel> models;
    const size_t n = 2 + random() % 3;
    for (size_t i = 0; i < n; ++i) {
      models.push_back(
          Model(1 + random() % 4, chiplets, (random() % 300) * kMiB,
                (1 + random() % 32) * 128 * 1024, 1 + random() % 3000));
    }
    std::vector<GroupMember> members;
    for (size_t i = 0; i < n; ++i) {
      members.push_back(Member(models[i], absl::StrCat("m", i),
                               1 + random() % 5, random() % 3));
    }
    const std::vector<uint64_t> budget(4, (800 + random() % 3000) * kMiB);
    absl::StatusOr<GroupPlan> plan = FitGroup(members, budget);
    if (!plan.ok()) continue;  // the minimums do not fit
    ASSERT_TRUE(AllFit(members, plan->num_blocks, budget));
    for (size_t i = 0; i < n; ++i) {
      if (plan->num_blocks[i] >= models[i].num_full_blocks) {
        EXPECT_EQ(plan->limiting_bucket[i], -1);
        continue;
      }
      std::vector<uint64_t> more = plan->num_blocks;
      ++more[i];
      EXPECT_FALSE(AllFit(members, more, budget))
          << "member " << i << " of round " << round << " could take more";
      EXPECT_GE(plan->limiting_bucket[i], 0);
    }
  }
}

TEST(GroupFitTest, EqualMembersShareEquallyAndWeightsTilt) {
  const MemoryModel model = Model(1, 2, 100 * kMiB, 2 * kMiB, 10000);
  const std::vector<uint64_t> budget = {1100 * kMiB};
  absl::StatusOr<GroupPlan> even =
      FitGroup({Member(model, "a"), Member(model, "b")}, budget);
  ASSERT_TRUE(even.ok()) << even.status();
  EXPECT_LE(even->num_blocks[0] - even->num_blocks[1], 1u);
  EXPECT_GE(even->num_blocks[0], even->num_blocks[1]);  // ties: the first
  absl::StatusOr<GroupPlan> tilted =
      FitGroup({Member(model, "a", 2), Member(model, "b", 1)}, budget);
  ASSERT_TRUE(tilted.ok()) << tilted.status();
  EXPECT_NEAR(static_cast<double>(tilted->num_blocks[0]),
              2.0 * tilted->num_blocks[1], 2.0);
}

TEST(GroupFitTest, BesideIsAFitAgainstWhatTheOthersLeave) {
  const MemoryModel a = Model(2, 2, 50 * kMiB, 3 * kMiB, 5000);
  const MemoryModel c = Model(1, 2, 300 * kMiB, 1 * kMiB, 5000);
  GroupMember beside = Member(c, "c");
  beside.reserved = true;
  beside.current_num_blocks = 100;
  const std::vector<uint64_t> budget(2, 1024 * kMiB);
  absl::StatusOr<GroupPlan> plan =
      FitGroup({Member(a, "a", 1, 0), beside}, budget);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_blocks[1], 100u);
  // By hand: the largest count of a whose every bucket fits beside c's.
  uint64_t expected = 0;
  for (uint64_t m = 1; m <= a.num_full_blocks; ++m) {
    bool fits = true;
    for (const MemoryBucket& bucket : a.buckets) {
      uint64_t reserved = 0;
      for (const MemoryBucket& other : c.buckets) {
        if (other.node == bucket.node && other.chiplet == bucket.chiplet) {
          reserved = other.other_bytes + other.KvBytes(100);
        }
      }
      fits = fits &&
             bucket.other_bytes + bucket.KvBytes(m) + reserved <= 1024 * kMiB;
    }
    if (!fits) break;
    expected = m;
  }
  EXPECT_EQ(plan->num_blocks[0], expected);
  EXPECT_EQ(plan->limiting_bucket[1], -1);
}

TEST(GroupFitTest, MinimumsThatDoNotFitNameTheBucket) {
  const MemoryModel model = Model(1, 2, 600 * kMiB, 2 * kMiB, 100);
  GroupPlan short_plan;
  absl::StatusOr<GroupPlan> plan =
      FitGroup({Member(model, "a", 1, 10), Member(model, "b", 1, 10)},
               {1024 * kMiB}, &short_plan);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(plan.status().message(), HasSubstr("node 0 chiplet 0 needs "));
  ASSERT_FALSE(short_plan.buckets.empty());
  EXPECT_LT(short_plan.buckets[0].headroom_bytes, 0);
}

TEST(GroupFitTest, BucketsThatDoNotLineUpAreRefused) {
  const MemoryModel two = Model(1, 2, 0, kMiB, 10);
  const MemoryModel four = Model(1, 4, 0, kMiB, 10);
  absl::StatusOr<GroupPlan> plan =
      FitGroup({Member(two, "a"), Member(four, "b")}, {1024 * kMiB});
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(),
              HasSubstr("b was compiled for 4 chiplets per node and a for 2"));
  MemoryModel per_node = Model(1, 1, 0, kMiB, 10);
  per_node.granularity = BucketGranularity::kNode;
  const MemoryModel one = Model(1, 1, 0, kMiB, 10);
  plan = FitGroup({Member(one, "a"), Member(per_node, "b")}, {1024 * kMiB});
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("per node"));
}

}  // namespace
}  // namespace rbln
