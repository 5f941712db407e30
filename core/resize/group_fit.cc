#include "core/resize/group_fit.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace rbln {
namespace {

// The group's nodes: as many as the member with the most.
uint32_t GroupNodes(absl::Span<const GroupMember> members) {
  uint32_t nodes = 0;
  for (const GroupMember& member : members) {
    nodes = std::max(nodes, member.model->num_nodes);
  }
  return nodes;
}

size_t BucketIndex(uint32_t node, uint32_t chiplet, uint32_t chiplets) {
  return static_cast<size_t>(node) * chiplets + chiplet;
}

// What a member's bucket holds at `num_blocks`, saturating.
uint64_t Use(const MemoryBucket& bucket, uint64_t num_blocks) {
  const absl::uint128 sum =
      absl::uint128(bucket.other_bytes) + bucket.KvBytes(num_blocks);
  return sum > std::numeric_limits<uint64_t>::max()
             ? std::numeric_limits<uint64_t>::max()
             : static_cast<uint64_t>(sum);
}

int64_t Headroom(uint64_t budget, absl::uint128 used) {
  const absl::int128 room = absl::int128(budget) - absl::int128(used);
  if (room > std::numeric_limits<int64_t>::max()) {
    return std::numeric_limits<int64_t>::max();
  }
  if (room < std::numeric_limits<int64_t>::min()) {
    return std::numeric_limits<int64_t>::min();
  }
  return static_cast<int64_t>(room);
}

absl::uint128 Used(const GroupBucket& bucket) {
  absl::uint128 sum = 0;
  for (uint64_t bytes : bucket.used_bytes) sum += bytes;
  return sum;
}

// The highest count a member may reach.
uint64_t Cap(const GroupMember& member) {
  return std::min(member.model->num_full_blocks, kMaxNumBlocks);
}

// Whether member a's share is below member b's: count_a / (full_a * w_a) <
// count_b / (full_b * w_b), exactly.
bool SmallerShare(const GroupMember& a, uint64_t count_a, const GroupMember& b,
                  uint64_t count_b) {
  const absl::uint128 scale_a =
      absl::uint128(std::max<uint64_t>(1, a.model->num_full_blocks)) * a.weight;
  const absl::uint128 scale_b =
      absl::uint128(std::max<uint64_t>(1, b.model->num_full_blocks)) * b.weight;
  // The products stay below 2^64 * 2^64 / ... : counts and full counts are
  // at most kMaxNumBlocks, weights at most kMaxGroupWeight.
  return absl::uint128(count_a) * scale_b < absl::uint128(count_b) * scale_a;
}

}  // namespace

absl::Status CheckLinedUp(absl::Span<const GroupMember> members) {
  if (members.empty()) {
    return absl::InvalidArgumentError("no artifacts to size together");
  }
  const GroupMember& first = members.front();
  for (const GroupMember& member : members) {
    if (member.model == nullptr || member.model->buckets.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(member.name, " has no memory model to size"));
    }
    if (member.model->granularity != first.model->granularity) {
      return absl::FailedPreconditionError(absl::StrCat(
          member.name, " reports its memory ",
          member.model->granularity == BucketGranularity::kNode ? "per node"
                                                                : "per chiplet",
          " and ", first.name, " ",
          first.model->granularity == BucketGranularity::kNode ? "per node"
                                                               : "per chiplet",
          ": their buckets cannot be lined up (recompile one with the "
          "other's compiler)"));
    }
    if (member.model->chiplets_per_node != first.model->chiplets_per_node) {
      return absl::FailedPreconditionError(absl::StrCat(
          member.name, " was compiled for ", member.model->chiplets_per_node,
          " chiplets per node and ", first.name, " for ",
          first.model->chiplets_per_node,
          ": they cannot share a device's chiplets"));
    }
  }
  return absl::OkStatus();
}

GroupPlan DescribeGroup(absl::Span<const GroupMember> members,
                        absl::Span<const uint64_t> num_blocks,
                        absl::Span<const uint64_t> budget_by_node) {
  GroupPlan plan;
  plan.num_blocks.assign(num_blocks.begin(), num_blocks.end());
  plan.limiting_bucket.assign(members.size(), -1);
  const uint32_t chiplets = members.front().model->chiplets_per_node;
  const uint32_t nodes = GroupNodes(members);
  for (uint32_t node = 0; node < nodes; ++node) {
    for (uint32_t chiplet = 0; chiplet < chiplets; ++chiplet) {
      GroupBucket bucket;
      bucket.node = node;
      bucket.chiplet = chiplet;
      bucket.budget_bytes =
          node < budget_by_node.size() ? budget_by_node[node] : 0;
      bucket.used_bytes.assign(members.size(), 0);
      plan.buckets.push_back(std::move(bucket));
    }
  }
  for (size_t i = 0; i < members.size(); ++i) {
    for (const MemoryBucket& own : members[i].model->buckets) {
      plan.buckets[BucketIndex(own.node, own.chiplet, chiplets)].used_bytes[i] =
          Use(own, num_blocks[i]);
    }
  }
  for (GroupBucket& bucket : plan.buckets) {
    bucket.headroom_bytes = Headroom(bucket.budget_bytes, Used(bucket));
  }
  return plan;
}

absl::StatusOr<GroupPlan> FitGroup(absl::Span<const GroupMember> members,
                                   absl::Span<const uint64_t> budget_by_node,
                                   GroupPlan* short_plan) {
  RBLN_RETURN_IF_ERROR(CheckLinedUp(members));
  const size_t n = members.size();
  std::vector<uint64_t> counts(n);
  for (size_t i = 0; i < n; ++i) {
    counts[i] = members[i].reserved ? members[i].current_num_blocks
                                    : members[i].num_min_blocks;
  }
  GroupPlan plan = DescribeGroup(members, counts, budget_by_node);
  for (const GroupBucket& bucket : plan.buckets) {
    if (bucket.headroom_bytes >= 0) continue;
    if (short_plan != nullptr) *short_plan = plan;
    return absl::FailedPreconditionError(absl::StrCat(
        "the group does not fit at its minimum block counts: node ",
        bucket.node, " chiplet ", bucket.chiplet, " needs ",
        -bucket.headroom_bytes, " bytes more than its budget of ",
        bucket.budget_bytes, " bytes"));
  }
  const uint32_t chiplets = members.front().model->chiplets_per_node;
  std::vector<absl::uint128> sums;
  for (const GroupBucket& bucket : plan.buckets) sums.push_back(Used(bucket));
  std::vector<bool> done(n);
  for (size_t i = 0; i < n; ++i) {
    done[i] = members[i].reserved || counts[i] >= Cap(members[i]);
  }
  std::vector<int> limiting(n, -1);
  while (true) {
    size_t next = n;
    for (size_t i = 0; i < n; ++i) {
      if (!done[i] &&
          (next == n ||
           SmallerShare(members[i], counts[i], members[next], counts[next]))) {
        next = i;
      }
    }
    if (next == n) break;
    // One more block for `next`, if every bucket it uses still holds.
    std::vector<std::pair<size_t, uint64_t>> grown;
    for (const MemoryBucket& own : members[next].model->buckets) {
      const size_t at = BucketIndex(own.node, own.chiplet, chiplets);
      const uint64_t use = Use(own, counts[next] + 1);
      if (sums[at] - plan.buckets[at].used_bytes[next] + use >
          plan.buckets[at].budget_bytes) {
        limiting[next] = static_cast<int>(at);
        break;
      }
      grown.emplace_back(at, use);
    }
    if (limiting[next] >= 0) {
      done[next] = true;
      continue;
    }
    for (const auto& [at, use] : grown) {
      sums[at] = sums[at] - plan.buckets[at].used_bytes[next] + use;
      plan.buckets[at].used_bytes[next] = use;
    }
    done[next] = ++counts[next] >= Cap(members[next]);
  }
  plan = DescribeGroup(members, counts, budget_by_node);
  plan.limiting_bucket = std::move(limiting);
  return plan;
}

}  // namespace rbln
