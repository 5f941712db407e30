// Fit: the largest KV-cache block count whose memory fits a budget on every
// bucket of an artifact's memory model, per (node, chiplet), or per node for
// graphs whose compiler reports memory per node only. The model and the rule
// are docs/memory-model.md, "Fit a budget". The answer is never above the
// full count nor kMaxNumBlocks, and does not depend on how often the artifact
// was resized before.
//
// Thread-safe: pure functions.
#ifndef RBLN_CORE_RESIZE_FIT_H_
#define RBLN_CORE_RESIZE_FIT_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/budget.h"
#include "core/device/device_spec.h"
#include "core/format/artifact.h"
#include "core/format/codec.h"

namespace rbln {

inline constexpr uint64_t kKvAlignment = uint64_t{2} << 20;  // 2 MiB

struct MemoryBucket {
  uint32_t node = 0;
  uint32_t chiplet = 0;
  uint64_t other_bytes = 0;
  std::vector<uint64_t> kv_per_block;  // one entry per resizable tensor
  std::vector<uint64_t> kv_fixed;      // one entry per fixed tensor

  // kv(b, m), saturating at UINT64_MAX.
  uint64_t KvBytes(uint64_t num_blocks) const;
  // Sum of kv_per_block: the raw bytes one more block costs (before
  // alignment).
  uint64_t KvBytesPerBlock() const;
};

struct MemoryModel {
  // kNode: one bucket per node (chiplet 0), holding the whole node: an
  // older compiler reported memory per node only.
  BucketGranularity granularity = BucketGranularity::kChiplet;
  uint32_t num_nodes = 0;
  uint32_t chiplets_per_node = 0;  // buckets per node: 1 for kNode
  uint64_t num_full_blocks = 0;
  std::vector<MemoryBucket> buckets;  // ordered by (node, chiplet)
};

// Memory other artifacts hold on the same devices (--beside), per (node,
// chiplet) bucket: counted as other allocations of the artifact planned,
// so that a fit leaves it to them.
struct MemoryReservation {
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> bytes;
  // "C (12 blocks)", one per artifact reserved, for messages.
  std::vector<std::string> names;
};
// Adds `model`'s whole memory at `num_blocks` (other allocations and KV
// caches, aligned as the fit aligns) to `*reserved`.
void Reserve(const MemoryModel& model, uint64_t num_blocks,
             MemoryReservation* reserved);
// Adds the reserved bytes of each of `model`'s buckets to its other
// allocations; nothing when `reserved` is null.
void ApplyReservation(const MemoryReservation* reserved, MemoryModel* model);

// Builds the model of `artifact` from its containers' headers.
MemoryModel BuildMemoryModel(const Artifact& artifact);

// The same from codec facts: `kv_tensors` (prefill's) supply the KV
// tensors, all `graphs` (prefill included, all with the same buckets) the
// other allocations; resizable bytes are divided by `current_num_blocks`
// (which must divide them).
MemoryModel BuildMemoryModel(absl::Span<const ContainerFacts* const> graphs,
                             absl::Span<const KvTensor> kv_tensors,
                             uint64_t current_num_blocks,
                             uint64_t num_full_blocks);

// OK when the artifact's buckets can be measured against `device`: memory
// per node, or as many chiplets per node as the device has; else
// FAILED_PRECONDITION saying which differ.
absl::Status CheckChiplets(const Artifact& artifact, const DeviceSpec& device);

// What one bucket of `device` can hold: a chiplet's available DRAM, or a
// node's for BucketGranularity::kNode.
uint64_t AvailablePerBucket(BucketGranularity granularity,
                            const DeviceSpec& device);

// The numbers behind a decision, for one bucket at the chosen block count.
struct BucketFit {
  uint32_t node = 0;
  uint32_t chiplet = 0;
  uint64_t budget_bytes = 0;
  // What the device's bucket holds, whatever the budget.
  uint64_t device_available_bytes = 0;
  uint64_t other_bytes = 0;
  uint64_t kv_bytes = 0;            // kv(b, num_blocks)
  uint64_t kv_bytes_per_block = 0;  // raw, before alignment
  int64_t headroom_bytes = 0;       // budget - other - kv (negative: over)
};

struct FitResult {
  uint64_t num_blocks = 0;
  uint64_t num_full_blocks = 0;
  uint64_t budget_per_chiplet = 0;
  std::vector<BucketFit> buckets;
  // Index into buckets of the one that first refuses num_blocks + 1 (the
  // bucket that decided the result); -1 when num_blocks is the full count.
  int limiting_bucket = -1;
};

// True when m blocks fit every bucket under `budget_per_chiplet`.
bool Fits(const MemoryModel& model, uint64_t budget_per_chiplet,
          uint64_t num_blocks);

// Fits the model to a per-chiplet budget (the rule in the file comment).
FitResult FitModel(const MemoryModel& model, uint64_t budget_per_chiplet);

// The per-bucket numbers of `model` at `num_blocks` under a budget.
std::vector<BucketFit> DescribeBuckets(const MemoryModel& model,
                                       uint64_t budget_per_chiplet,
                                       uint64_t num_blocks);

// The memory plan of `artifact` against the whole of `device`: every bucket
// at the current count, and the largest count that fits 100% of the device.
struct MemoryPlan {
  std::vector<BucketFit> buckets;
  uint64_t max_fitting_num_blocks = 0;
};
// FAILED_PRECONDITION when the artifact's chiplets per node differ from the
// device's.
absl::StatusOr<MemoryPlan> PlanMemory(const Artifact& artifact,
                                      const DeviceSpec& device);

// Fits `artifact` to `budget` on `device`. FAILED_PRECONDITION when the
// artifact's chiplets per node differ from the device's; INVALID_ARGUMENT for
// a byte budget above the device's available DRAM. A result below the
// minimum block count is returned as is; callers apply the guards.
// `reserved` (may be null): memory of other artifacts on the same devices.
absl::StatusOr<FitResult> FitMemoryBudget(
    const Artifact& artifact, const MemoryBudget& budget,
    const DeviceSpec& device, const MemoryReservation* reserved = nullptr);

}  // namespace rbln

#endif  // RBLN_CORE_RESIZE_FIT_H_
