#include "core/resize/fit.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace rbln {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

absl::uint128 AlignUp(absl::uint128 bytes) {
  return (bytes + (kKvAlignment - 1)) / kKvAlignment * kKvAlignment;
}

uint64_t Saturate(absl::uint128 value) {
  return value > kMax ? kMax : static_cast<uint64_t>(value);
}

// kv(b, m), saturating at 2^64 (one past the largest byte count), so that a
// sum past 2^64 never "fits" and never wraps in 128 bits.
absl::uint128 KvBytesExact(const MemoryBucket& bucket, uint64_t num_blocks) {
  const absl::uint128 past = absl::uint128(kMax) + 1;
  absl::uint128 total = 0;
  auto add = [&](absl::uint128 bytes) {
    total = std::min(past, total + AlignUp(std::min(past, bytes)));
  };
  for (uint64_t per_block : bucket.kv_per_block) {
    add(absl::uint128(per_block) * num_blocks);
  }
  for (uint64_t fixed : bucket.kv_fixed) add(fixed);
  return total;
}

bool BucketFits(const MemoryBucket& bucket, uint64_t budget_per_chiplet,
                uint64_t num_blocks) {
  return absl::uint128(bucket.other_bytes) + KvBytesExact(bucket, num_blocks) <=
         budget_per_chiplet;
}

}  // namespace

uint64_t MemoryBucket::KvBytes(uint64_t num_blocks) const {
  return Saturate(KvBytesExact(*this, num_blocks));
}

uint64_t MemoryBucket::KvBytesPerBlock() const {
  absl::uint128 total = 0;
  for (uint64_t per_block : kv_per_block) total += per_block;
  return Saturate(total);
}

MemoryModel BuildMemoryModel(absl::Span<const ContainerFacts* const> graphs,
                             absl::Span<const KvTensor> kv_tensors,
                             uint64_t current_num_blocks,
                             uint64_t num_full_blocks) {
  MemoryModel model;
  if (graphs.empty()) return model;
  const ContainerFacts& first = *graphs.front();
  model.granularity = first.granularity;
  model.num_nodes = first.num_nodes;
  model.chiplets_per_node = first.buckets_per_node;
  model.num_full_blocks = num_full_blocks;
  for (uint32_t node = 0; node < model.num_nodes; ++node) {
    for (uint32_t chiplet = 0; chiplet < model.chiplets_per_node; ++chiplet) {
      MemoryBucket bucket;
      bucket.node = node;
      bucket.chiplet = chiplet;
      model.buckets.push_back(std::move(bucket));
    }
  }
  // Every graph has the same buckets (Artifact::Open checks it).
  for (const ContainerFacts* graph : graphs) {
    for (size_t b = 0; b < model.buckets.size(); ++b) {
      MemoryBucket& bucket = model.buckets[b];
      bucket.other_bytes =
          Saturate(absl::uint128(bucket.other_bytes) + graph->OtherBytes(b));
    }
  }
  for (const KvTensor& tensor : kv_tensors) {
    for (size_t b = 0; b < model.buckets.size() && b < tensor.bytes.size();
         ++b) {
      if (tensor.resizable) {
        model.buckets[b].kv_per_block.push_back(tensor.bytes[b] /
                                                current_num_blocks);
      } else {
        model.buckets[b].kv_fixed.push_back(tensor.bytes[b]);
      }
    }
  }
  return model;
}

MemoryModel BuildMemoryModel(const Artifact& artifact) {
  std::vector<const ContainerFacts*> graphs;
  for (const ContainerFile& file : artifact.containers()) {
    graphs.push_back(file.facts.get());
  }
  return BuildMemoryModel(graphs, artifact.kv_tensors(),
                          artifact.current_num_blocks(),
                          artifact.config().NumFullBlocks());
}

bool Fits(const MemoryModel& model, uint64_t budget_per_chiplet,
          uint64_t num_blocks) {
  return std::all_of(model.buckets.begin(), model.buckets.end(),
                     [&](const MemoryBucket& bucket) {
                       return BucketFits(bucket, budget_per_chiplet,
                                         num_blocks);
                     });
}

std::vector<BucketFit> DescribeBuckets(const MemoryModel& model,
                                       uint64_t budget_per_chiplet,
                                       uint64_t num_blocks) {
  std::vector<BucketFit> fits;
  for (const MemoryBucket& bucket : model.buckets) {
    BucketFit fit;
    fit.node = bucket.node;
    fit.chiplet = bucket.chiplet;
    fit.budget_bytes = budget_per_chiplet;
    fit.other_bytes = bucket.other_bytes;
    fit.kv_bytes = bucket.KvBytes(num_blocks);
    fit.kv_bytes_per_block = bucket.KvBytesPerBlock();
    const absl::int128 headroom = absl::int128(budget_per_chiplet) -
                                  absl::int128(bucket.other_bytes) -
                                  absl::int128(fit.kv_bytes);
    fit.headroom_bytes = static_cast<int64_t>(
        std::clamp<absl::int128>(headroom, std::numeric_limits<int64_t>::min(),
                                 std::numeric_limits<int64_t>::max()));
    fits.push_back(fit);
  }
  return fits;
}

FitResult FitModel(const MemoryModel& model, uint64_t budget_per_chiplet) {
  FitResult result;
  result.num_full_blocks = model.num_full_blocks;
  result.budget_per_chiplet = budget_per_chiplet;
  // A count is never above kMaxNumBlocks, whatever the full count.
  const uint64_t cap = std::min(model.num_full_blocks, kMaxNumBlocks);
  if (Fits(model, budget_per_chiplet, cap)) {
    result.num_blocks = cap;
  } else {
    // Invariant: fits(lo) or lo == 0; !fits(hi).
    uint64_t lo = 0;
    uint64_t hi = cap;
    while (hi - lo > 1) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (Fits(model, budget_per_chiplet, mid)) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    result.num_blocks = lo;
    for (size_t i = 0; i < model.buckets.size(); ++i) {
      if (!BucketFits(model.buckets[i], budget_per_chiplet, lo + 1)) {
        result.limiting_bucket = static_cast<int>(i);
        break;
      }
    }
  }
  result.buckets =
      DescribeBuckets(model, budget_per_chiplet, result.num_blocks);
  return result;
}

absl::Status CheckChiplets(const Artifact& artifact, const DeviceSpec& device) {
  // Memory reported per node fits any device's node.
  if (artifact.granularity() == BucketGranularity::kNode ||
      artifact.buckets_per_node() == device.chiplets_per_node) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      artifact.dir(), " was compiled for ", artifact.buckets_per_node(),
      " chiplet(s) per node but the device (", device.family, ") has ",
      device.chiplets_per_node));
}

uint64_t AvailablePerBucket(BucketGranularity granularity,
                            const DeviceSpec& device) {
  return granularity == BucketGranularity::kNode ? device.AvailablePerNode()
                                                 : device.AvailablePerChiplet();
}

absl::StatusOr<MemoryPlan> PlanMemory(const Artifact& artifact,
                                      const DeviceSpec& device) {
  RBLN_RETURN_IF_ERROR(CheckChiplets(artifact, device));
  const MemoryModel model = BuildMemoryModel(artifact);
  const uint64_t available = AvailablePerBucket(model.granularity, device);
  MemoryPlan plan;
  plan.buckets =
      DescribeBuckets(model, available, artifact.current_num_blocks());
  for (BucketFit& b : plan.buckets) b.device_available_bytes = available;
  plan.max_fitting_num_blocks = FitModel(model, available).num_blocks;
  return plan;
}

void Reserve(const MemoryModel& model, uint64_t num_blocks,
             MemoryReservation* reserved) {
  for (const MemoryBucket& bucket : model.buckets) {
    uint64_t& held = reserved->bytes[{bucket.node, bucket.chiplet}];
    held = Saturate(absl::uint128(held) + bucket.other_bytes +
                    KvBytesExact(bucket, num_blocks));
  }
}

void ApplyReservation(const MemoryReservation* reserved, MemoryModel* model) {
  if (reserved == nullptr) return;
  for (MemoryBucket& bucket : model->buckets) {
    auto it = reserved->bytes.find({bucket.node, bucket.chiplet});
    if (it == reserved->bytes.end()) continue;
    bucket.other_bytes =
        Saturate(absl::uint128(bucket.other_bytes) + it->second);
  }
}

absl::StatusOr<FitResult> FitMemoryBudget(const Artifact& artifact,
                                          const MemoryBudget& budget,
                                          const DeviceSpec& device,
                                          const MemoryReservation* reserved) {
  RBLN_RETURN_IF_ERROR(CheckChiplets(artifact, device));
  MemoryModel model = BuildMemoryModel(artifact);
  ApplyReservation(reserved, &model);
  RBLN_ASSIGN_OR_RETURN(uint64_t per_bucket,
                        model.granularity == BucketGranularity::kNode
                            ? budget.PerNodeBytes(device)
                            : budget.PerChipletBytes(device));
  FitResult result = FitModel(model, per_bucket);
  for (BucketFit& b : result.buckets) {
    b.device_available_bytes = AvailablePerBucket(model.granularity, device);
  }
  return result;
}

}  // namespace rbln
