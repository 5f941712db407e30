#include "core/resize/fit.h"

#include <string>

#include "core/os/env.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/synth.h"

namespace rbln {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

MemoryBucket Bucket(uint32_t chiplet, uint64_t other,
                    std::vector<uint64_t> per_block,
                    std::vector<uint64_t> fixed = {}) {
  MemoryBucket b;
  b.chiplet = chiplet;
  b.other_bytes = other;
  b.kv_per_block = std::move(per_block);
  b.kv_fixed = std::move(fixed);
  return b;
}

MemoryModel Model(uint64_t full, std::vector<MemoryBucket> buckets) {
  MemoryModel m;
  m.num_nodes = 1;
  m.chiplets_per_node = static_cast<uint32_t>(buckets.size());
  m.num_full_blocks = full;
  m.buckets = std::move(buckets);
  return m;
}

TEST(FitTest, KvBytesAlignsEachTensorTo2MiB) {
  const MemoryBucket b = Bucket(0, 0, {1 * kMiB, 3 * kMiB}, {5 * kMiB});
  // align(1)=2, align(3)=4, align(5)=6.
  EXPECT_EQ(b.KvBytes(1), 12 * kMiB);
  // align(2)=2, align(6)=6, fixed 6.
  EXPECT_EQ(b.KvBytes(2), 14 * kMiB);
  EXPECT_EQ(b.KvBytesPerBlock(), 4 * kMiB);
  EXPECT_EQ(b.KvBytes(0), 6 * kMiB);
}

TEST(FitTest, AlignmentLowersTheResult) {
  // Two tensors of 1 MiB per block in 11 MiB: unaligned 2m <= 11 gives 5,
  // aligned 2 * align(m MiB) <= 11 gives 4.
  const MemoryModel model = Model(100, {Bucket(0, 0, {kMiB, kMiB})});
  const FitResult fit = FitModel(model, 11 * kMiB);
  EXPECT_EQ(fit.num_blocks, 4u);
  ASSERT_EQ(fit.buckets.size(), 1u);
  EXPECT_EQ(fit.buckets[0].kv_bytes, 8 * kMiB);
  EXPECT_EQ(fit.buckets[0].headroom_bytes, static_cast<int64_t>(3 * kMiB));
  EXPECT_EQ(fit.limiting_bucket, 0);
}

TEST(FitTest, SmallPerBlockTensorsStillCostTwoMiBEach) {
  // 64 KiB per block: up to 32 blocks still round up to one 2 MiB unit.
  const MemoryModel model = Model(16, {Bucket(0, 0, {64 << 10, 64 << 10})});
  EXPECT_EQ(FitModel(model, 4 * kMiB).num_blocks, 16u);
  EXPECT_EQ(FitModel(model, 4 * kMiB - 1).num_blocks, 0u);
}

TEST(FitTest, TighterChipletDecides) {
  const MemoryModel model = Model(10000, {Bucket(0, 1 * kGiB, {2 * kMiB}),
                                          Bucket(1, 3 * kGiB, {2 * kMiB})});
  const FitResult fit = FitModel(model, 4 * kGiB);
  // Chiplet 0 alone would take 3 GiB / 2 MiB = 1536; chiplet 1 only 512.
  EXPECT_EQ(fit.num_blocks, 512u);
  EXPECT_EQ(fit.limiting_bucket, 1);
  EXPECT_EQ(fit.buckets[1].headroom_bytes, 0);
  EXPECT_EQ(fit.buckets[0].headroom_bytes, static_cast<int64_t>(2 * kGiB));
}

TEST(FitTest, FixedSlidingWindowTensorsTakeTheirAlignedSize) {
  // Fixed 3 MiB -> 4 MiB; 2 MiB per block: 4 + 2m <= 20 -> m = 8.
  const MemoryModel model = Model(100, {Bucket(0, 0, {2 * kMiB}, {3 * kMiB})});
  EXPECT_EQ(FitModel(model, 20 * kMiB).num_blocks, 8u);
  EXPECT_EQ(FitModel(model, 20 * kMiB - 1).num_blocks, 7u);
}

TEST(FitTest, BudgetBelowOtherAllocationsGivesZero) {
  const MemoryModel model = Model(32, {Bucket(0, 5 * kGiB, {2 * kMiB})});
  const FitResult fit = FitModel(model, 4 * kGiB);
  EXPECT_EQ(fit.num_blocks, 0u);
  EXPECT_EQ(fit.limiting_bucket, 0);
  EXPECT_EQ(fit.buckets[0].headroom_bytes, -static_cast<int64_t>(kGiB));
}

TEST(FitTest, FullCountWhenItFits) {
  const MemoryModel model = Model(32, {Bucket(0, kGiB, {2 * kMiB})});
  const FitResult fit = FitModel(model, 2 * kGiB);
  EXPECT_EQ(fit.num_blocks, 32u);
  EXPECT_EQ(fit.limiting_bucket, -1);
  EXPECT_EQ(fit.buckets[0].kv_bytes, 64 * kMiB);
}

TEST(FitTest, ResultIsTheLargestFittingCount) {
  // Exhaustive check of the binary search against a linear scan.
  const MemoryModel model =
      Model(300, {Bucket(0, 7 * kMiB, {3 * kMiB + 5, 700 << 10}, {kMiB + 1}),
                  Bucket(1, 13 * kMiB, {kMiB, 2 * kMiB + 1})});
  for (uint64_t budget = 0; budget < 1200 * kMiB; budget += 3 * kMiB + 17) {
    uint64_t expected = 0;
    for (uint64_t m = 1; m <= model.num_full_blocks; ++m) {
      if (Fits(model, budget, m)) expected = m;
    }
    EXPECT_EQ(FitModel(model, budget).num_blocks, expected)
        << "budget " << budget;
  }
}

TEST(FitTest, HugeCountsSaturateInsteadOfWrapping) {
  const MemoryModel model =
      Model(UINT64_MAX, {Bucket(0, 0, {uint64_t{1} << 40})});
  EXPECT_FALSE(Fits(model, 64 * kGiB, uint64_t{1} << 40));
  EXPECT_EQ(FitModel(model, 64 * kGiB).num_blocks, 0u);
  EXPECT_EQ(FitModel(model, UINT64_MAX).num_blocks, (uint64_t{1} << 24) - 1);
}

// Through a synthesized artifact: llama3-8b on 4 x RBLN-CA12.
// Per node: KV 64 tensors x 8 MiB per block; other = 16060522496 / 4 weights
// + 96 + 16 + 64 MiB workspaces = 4199680000 bytes.
TEST(FitTest, MemoryBudgetOnLlama8B) {
  testing::TempDir tmp;
  const std::string dir = tmp.Join("llama");
  absl::StatusOr<SynthSpec> spec = PresetSpec("llama3-8b-ca12-tp4");
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(WriteSyntheticArtifact(Env::Default(), *spec, dir).ok());
  absl::StatusOr<Artifact> artifact = Artifact::Open(Env::Default(), dir);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  absl::StatusOr<DeviceSpec> device = LookupDeviceSpec("RBLN-CA12");
  ASSERT_TRUE(device.ok());

  const uint64_t other = 4199680000;
  const uint64_t per_block = 64 * 8 * kMiB;
  for (const char* text : {"0.8", "50%", "1.0", "10GB", "12GiB"}) {
    absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse(text);
    ASSERT_TRUE(budget.ok());
    absl::StatusOr<uint64_t> per_chiplet = budget->PerChipletBytes(*device);
    ASSERT_TRUE(per_chiplet.ok());
    const uint64_t expected =
        *per_chiplet < other
            ? 0
            : std::min<uint64_t>(32, (*per_chiplet - other) / per_block);
    absl::StatusOr<FitResult> fit =
        FitMemoryBudget(*artifact, *budget, *device);
    ASSERT_TRUE(fit.ok()) << fit.status();
    EXPECT_EQ(fit->num_blocks, expected) << text;
    EXPECT_EQ(fit->buckets.size(), 4u);
    EXPECT_EQ(fit->buckets[0].other_bytes, other);
    EXPECT_EQ(fit->buckets[0].kv_bytes_per_block, per_block);
  }
}

TEST(FitTest, ChipletMismatchWithDeviceIsRefused) {
  testing::TempDir tmp;
  const std::string dir = tmp.Join("tiny");
  ASSERT_TRUE(WriteSyntheticArtifact(Env::Default(), SynthSpec{}, dir).ok());
  absl::StatusOr<Artifact> artifact = Artifact::Open(Env::Default(), dir);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  absl::StatusOr<DeviceSpec> rebel = LookupDeviceSpec("RBLN-CR13");
  ASSERT_TRUE(rebel.ok());
  absl::StatusOr<FitResult> fit =
      FitMemoryBudget(*artifact, MemoryBudget::Fraction(1, 2), *rebel);
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(fit.status().message(), ::testing::HasSubstr("chiplet"));
}

}  // namespace
}  // namespace rbln
