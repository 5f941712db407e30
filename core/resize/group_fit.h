// Several artifacts on one device group (docs/memory-model.md, "Sharing a
// device"): node i of every member sits on device i of the group (a member
// with fewer nodes takes the first devices), and each (node, chiplet)
// bucket must hold the sum of every member's other allocations and KV
// caches, aligned as the fit aligns (core/resize/fit.h).
//
// FitGroup sizes the members together by progressive filling over the
// weighted shares s_i = count_i / (num_full_blocks_i * weight_i), compared
// exactly as fractions: every count starts at its minimum (the minimums not
// fitting is GROUP_DOES_NOT_FIT); then the member with the smallest share
// among those not done (ties: the one given first) takes one more block if
// every bucket still holds, else is done; a member at its full count is
// done. A member that is `reserved` keeps its current count throughout
// (--beside: its whole memory is reserved first). The result is feasible
// and maximal: no member can take one more block.
//
// Thread-safe: pure functions.
#ifndef RBLN_CORE_RESIZE_GROUP_FIT_H_
#define RBLN_CORE_RESIZE_GROUP_FIT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/resize/fit.h"

namespace rbln {

// Bounds of a member's weight.
inline constexpr uint32_t kMinGroupWeight = 1;
inline constexpr uint32_t kMaxGroupWeight = 1000;

struct GroupMember {
  std::string name;  // for messages
  const MemoryModel* model = nullptr;
  uint64_t num_min_blocks = 0;
  uint64_t current_num_blocks = 0;
  uint32_t weight = 1;
  // Kept at current_num_blocks: memory reserved, not sized.
  bool reserved = false;
};

// A bucket of the group: what its budget is and what each member uses.
struct GroupBucket {
  uint32_t node = 0;
  uint32_t chiplet = 0;
  uint64_t budget_bytes = 0;
  std::vector<uint64_t> used_bytes;  // per member, in member order
  int64_t headroom_bytes = 0;        // budget - the sum (negative: over)
};

struct GroupPlan {
  std::vector<uint64_t> num_blocks;  // per member
  // Per member: the index in `buckets` of the bucket that refused its next
  // block; -1 at its full count (or reserved).
  std::vector<int> limiting_bucket;
  std::vector<GroupBucket> buckets;  // ordered by (node, chiplet)
};

// OK when the members can share buckets: each has a model, and all report
// memory with the same granularity and chiplets per node; else
// FAILED_PRECONDITION saying which differ.
absl::Status CheckLinedUp(absl::Span<const GroupMember> members);

// The group at `num_blocks` (one per member) against `budget_by_node`
// (bytes per bucket, for each node of the group: as many as the member
// with the most nodes has).
GroupPlan DescribeGroup(absl::Span<const GroupMember> members,
                        absl::Span<const uint64_t> num_blocks,
                        absl::Span<const uint64_t> budget_by_node);

// Progressive filling (the file comment). FAILED_PRECONDITION when the
// members do not line up (CheckLinedUp), or when the minimums (and the
// reserved members' current counts) do not fit: then the message names the
// first bucket over and by how many bytes, and `*short_plan` (may be null)
// gets the plan at those counts.
absl::StatusOr<GroupPlan> FitGroup(absl::Span<const GroupMember> members,
                                   absl::Span<const uint64_t> budget_by_node,
                                   GroupPlan* short_plan = nullptr);

}  // namespace rbln

#endif  // RBLN_CORE_RESIZE_GROUP_FIT_H_
