#include "core/resize/rescale.h"

#include <optional>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/error_facts.h"
#include "core/format/builtin_codec.h"
#include "core/os/env.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/synth.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;

class RescaleTest : public ::testing::Test {
 protected:
  // Writes `spec` as an artifact under the temp dir and opens it.
  Artifact Make(const SynthSpec& spec, const std::string& name = "a") {
    const std::string dir = tmp_.Join(name);
    absl::StatusOr<SynthResult> written =
        WriteSyntheticArtifact(Env::Default(), spec, dir);
    EXPECT_TRUE(written.ok()) << written.status();
    return Open(dir);
  }
  Artifact Open(const std::string& dir) {
    absl::StatusOr<Artifact> artifact = Artifact::Open(Env::Default(), dir);
    EXPECT_TRUE(artifact.ok()) << artifact.status();
    return *std::move(artifact);
  }
  // Plans and writes a resize of `artifact` to `target` into a new dir.
  Artifact Resize(const Artifact& artifact, uint64_t target,
                  const std::string& name) {
    absl::StatusOr<ResizePlan> plan = PlanResize(artifact, target, device_);
    EXPECT_TRUE(plan.ok()) << plan.status();
    const std::string out = tmp_.Join(name);
    EXPECT_TRUE(Env::Default()->CreateDir(out).ok());
    absl::Status written =
        WriteResizedArtifact(Env::Default(), artifact, *plan, out);
    EXPECT_TRUE(written.ok()) << written;
    return Open(out);
  }
  // A hash of a container's payload bytes, read straight from the file.
  uint64_t PayloadHash(const Artifact& artifact, size_t i) {
    const std::string bytes = testing::ReadFileOrDie(
        JoinPath(artifact.dir(), artifact.containers()[i].file_name));
    const Preamble& p =
        rbln::testing::ContainerOf(artifact.containers()[i]).preamble;
    return std::hash<std::string>()(
        bytes.substr(p.payload_offset, p.payload_length));
  }

  testing::TempDir tmp_;
  DeviceSpec device_ = *LookupDeviceSpec("RBLN-CA12");
};

TEST_F(RescaleTest, BytesBecomePerBlockTimesTargetAndPayloadIsIdentical) {
  SynthSpec spec;  // tiny: 64 KiB per tensor per block, 16 blocks compiled
  spec.sliding_window_layers = {1};
  spec.sliding_window = 512;
  const Artifact before = Make(spec);
  ASSERT_EQ(before.current_num_blocks(), 16u);
  const Artifact after = Resize(before, 11, "b");
  EXPECT_EQ(after.current_num_blocks(), 11u);
  EXPECT_EQ(after.compiled_num_blocks(), 16u);
  ASSERT_EQ(after.containers().size(), before.containers().size());
  for (size_t i = 0; i < after.containers().size(); ++i) {
    const v1::ContainerHeader& old_h =
        rbln::testing::ContainerOf(before.containers()[i]).header;
    const v1::ContainerHeader& new_h =
        rbln::testing::ContainerOf(after.containers()[i]).header;
    ASSERT_EQ(new_h.kv_tensors_size(), old_h.kv_tensors_size());
    for (int t = 0; t < new_h.kv_tensors_size(); ++t) {
      const v1::KvTensor& nt = new_h.kv_tensors(t);
      for (int p = 0; p < nt.placements_size(); ++p) {
        const uint64_t bytes = nt.placements(p).bytes();
        if (nt.resizable()) {
          EXPECT_EQ(bytes, uint64_t{64 << 10} * 11) << nt.name();
        } else {
          EXPECT_EQ(bytes, old_h.kv_tensors(t).placements(p).bytes());
          EXPECT_EQ(bytes, uint64_t{2} * 512 * 64 * 2 * 2);  // heads*W*hd*2*B
        }
      }
    }
    // Everything but the KV tensors (allocations, segments, ...) is kept.
    v1::ContainerHeader old_rest = old_h;
    v1::ContainerHeader new_rest = new_h;
    old_rest.clear_kv_tensors();
    new_rest.clear_kv_tensors();
    EXPECT_EQ(new_rest.SerializeAsString(), old_rest.SerializeAsString());
    EXPECT_EQ(PayloadHash(after, i), PayloadHash(before, i));
  }
  absl::StatusOr<Artifact> verified =
      Artifact::Open(Env::Default(), after.dir(), {.verify_payload = true});
  EXPECT_TRUE(verified.ok()) << verified.status();
}

TEST_F(RescaleTest, ConfigChangesOnlyTheCount) {
  const Artifact before = Make(SynthSpec{});
  const Artifact after = Resize(before, 12, "b");
  std::string expected = before.config_text();
  const std::string from = "\"kvcache_num_blocks\": 16";
  const size_t at = expected.find(from);
  ASSERT_NE(at, std::string::npos);
  expected.replace(at, from.size(), "\"kvcache_num_blocks\": 12");
  EXPECT_EQ(after.config_text(), expected);
}

TEST_F(RescaleTest, CompanionFilesAreCopiedUnchanged) {
  const Artifact before = Make(SynthSpec{});
  const Artifact after = Resize(before, 9, "b");
  EXPECT_EQ(after.companion_files(), before.companion_files());
  for (const std::string& name : before.companion_files()) {
    EXPECT_EQ(testing::HashFile(JoinPath(after.dir(), name)),
              testing::HashFile(JoinPath(before.dir(), name)))
        << name;
  }
}

TEST_F(RescaleTest, BelowMinimumIsInvalidArgument) {
  const Artifact a = Make(SynthSpec{});  // flash_attn: min(2048/256+1, 16)
  absl::StatusOr<ResizePlan> plan = PlanResize(a, 8, device_);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("minimum 9"));
  // The same facts for programs (error_facts.h); the store names the
  // artifact.
  std::optional<ErrorFacts> facts = GetErrorFacts(plan.status());
  ASSERT_TRUE(facts.has_value());
  EXPECT_EQ(facts->reason, ErrorReason::kBelowMinBlocks);
  EXPECT_EQ(facts->num_min_blocks, std::optional<uint64_t>(9));
  EXPECT_EQ(facts->num_full_blocks, std::optional<uint64_t>(16));
  EXPECT_EQ(facts->current_num_blocks,
            std::optional<uint64_t>(a.current_num_blocks()));
  EXPECT_EQ(facts->artifact, "");
  EXPECT_TRUE(PlanResize(a, 9, device_).ok());

  SynthSpec eager;
  eager.attn_impl = "eager";
  eager.block_size = eager.max_seq_len;
  eager.batch_size = 4;
  const Artifact e = Make(eager, "eager");
  plan = PlanResize(e, 3, device_);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("batch_size 4"));
  EXPECT_TRUE(PlanResize(e, 4, device_).ok());
}

TEST_F(RescaleTest, WarningsAboveCurrentCompiledAndFullCounts) {
  SynthSpec spec;
  spec.kvcache_num_blocks = 10;  // compiled below the full 16
  const Artifact a = Make(spec);
  absl::StatusOr<ResizePlan> plan = PlanResize(a, 12, device_);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->warnings.size(), 2u);
  // optimum-rbln's own warning, then ours.
  EXPECT_THAT(plan->warnings[0],
              HasSubstr("above the current count 10, which was sized to fit "
                        "device DRAM; the model may fail to allocate at "
                        "runtime"));
  EXPECT_THAT(plan->warnings[1], HasSubstr("above the compiled count 10"));
  EXPECT_EQ(plan->fits_device, std::optional<bool>(true));

  plan = PlanResize(a, 17, device_);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->warnings.size(), 3u);
  EXPECT_THAT(plan->warnings[2], HasSubstr("above the 16 blocks"));

  plan = PlanResize(a, 10, device_);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->warnings.empty());
  EXPECT_TRUE(plan->is_no_op());
}

TEST_F(RescaleTest, ACountTheDeviceCannotHoldCarriesItsRefusal) {
  const Artifact a = Make(SynthSpec{});
  absl::StatusOr<ResizePlan> plan = PlanResize(a, 16, device_);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->fits_device, std::optional<bool>(true));
  EXPECT_TRUE(plan->device_refusal.ok());
  const uint64_t max_fitting = plan->max_fitting_num_blocks;
  EXPECT_GE(max_fitting, 16u);

  // 4 tensors x align(64 KiB * 100000) = 4 x 6250 MiB: more than 15.7 GiB.
  plan = PlanResize(a, 100000, device_);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->fits_device, std::optional<bool>(false));
  EXPECT_EQ(plan->max_fitting_num_blocks, max_fitting);
  // Above the current, compiled and full counts, and the device.
  ASSERT_EQ(plan->warnings.size(), 4u);
  EXPECT_THAT(plan->warnings[3], HasSubstr("does not fit the RBLN-CA device"));
  EXPECT_THAT(plan->warnings[3],
              HasSubstr("16877879296 bytes (15.72 GiB) available"));
  EXPECT_EQ(plan->device_refusal.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(plan->device_refusal.message(), HasSubstr("node 0 chiplet 0"));
  EXPECT_THAT(
      plan->device_refusal.message(),
      HasSubstr(absl::StrCat("the full count of ", max_fitting, " fits")));
  EXPECT_THAT(plan->device_refusal.message(), HasSubstr("nothing was written"));
  EXPECT_THAT(plan->device_refusal.message(), HasSubstr("--force"));
  std::optional<ErrorFacts> facts = GetErrorFacts(plan->device_refusal);
  ASSERT_TRUE(facts.has_value());
  EXPECT_EQ(facts->reason, ErrorReason::kExceedsDevice);
  EXPECT_EQ(facts->max_fitting_num_blocks, max_fitting);
  EXPECT_EQ(facts->num_min_blocks, std::optional<uint64_t>(9));
}

TEST_F(RescaleTest, WithoutADeviceTheTargetIsNotCheckedAndSaysSo) {
  const Artifact a = Make(SynthSpec{});
  absl::StatusOr<ResizePlan> plan = PlanResize(
      a, 100000, absl::FailedPreconditionError("the artifact names no NPU"));
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->fits_device.has_value());
  EXPECT_TRUE(plan->device_refusal.ok());
  ASSERT_FALSE(plan->warnings.empty());
  EXPECT_THAT(plan->warnings.back(),
              HasSubstr("was not checked against a device: the artifact names "
                        "no NPU"));

  // A budget needs a device.
  absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse("80%");
  ASSERT_TRUE(budget.ok());
  EXPECT_EQ(PlanFit(a, *budget, absl::FailedPreconditionError("no NPU"))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(RescaleTest, OverflowingTargetIsRefused) {
  const Artifact a = Make(SynthSpec{});
  absl::StatusOr<ResizePlan> plan = PlanResize(a, uint64_t{1} << 50, device_);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("too many"));
}

TEST_F(RescaleTest, RescaleHeaderRefusesIndivisibleBytes) {
  v1::ContainerHeader h;
  v1::KvTensor* t = h.add_kv_tensors();
  t->set_name("k");
  t->set_resizable(true);
  t->add_placements()->set_bytes(100);
  absl::StatusOr<v1::ContainerHeader> out =
      RescaleHeader(h, {{"k", {3, 7}}}, "x.rbln");
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(out.status().message(), HasSubstr("x.rbln"));
  out = RescaleHeader(h, {{"k", {3, 5}}}, "x.rbln");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->kv_tensors(0).placements(0).bytes(), 60u);
}

TEST_F(RescaleTest, FitBelowMinimumNamesTheCounts) {
  const Artifact a = Make(SynthSpec{});
  // tiny: other 162 MiB; 4 tensors of 64 KiB per block each round up to
  // 2 MiB: 169 MiB leaves 7 MiB, less than the 8 MiB any count needs.
  absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse("169MiB");
  ASSERT_TRUE(budget.ok());
  absl::StatusOr<FitPlan> fit = PlanFit(a, *budget, device_);
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(fit.status().message(), HasSubstr("fits only 0"));
  EXPECT_THAT(fit.status().message(), HasSubstr("minimum 9"));

  budget = MemoryBudget::Parse("170MiB");
  ASSERT_TRUE(budget.ok());
  fit = PlanFit(a, *budget, device_);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->fit.num_blocks, 16u);
  EXPECT_EQ(fit->plan.target_num_blocks, 16u);
  EXPECT_EQ(fit->fit.buckets[0].headroom_bytes, 0);
}

// The fit must not depend on the count the artifact currently has: resize
// random artifacts to random counts and fit again at random budgets.
TEST_F(RescaleTest, FitIsInvariantUnderResizing) {
  std::mt19937_64 rng(20261129);
  auto pick = [&rng](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  int rounds_run = 0;
  for (int round = 0; round < 16; ++round) {
    SynthSpec spec;
    spec.npu = pick(0, 1) ? "RBLN-CA12" : "RBLN-CR13";
    spec.num_devices = static_cast<uint32_t>(pick(1, 4));
    spec.num_kv_heads = spec.num_devices * static_cast<uint32_t>(pick(1, 4));
    spec.num_layers = static_cast<uint32_t>(pick(2, 12));
    spec.head_dim = 64 * static_cast<uint32_t>(pick(1, 4));
    spec.dtype = pick(0, 1) ? "float16" : "float32";
    spec.block_size = 128 << pick(0, 5);
    spec.max_seq_len = spec.block_size * pick(1, 16);
    spec.batch_size = pick(1, 8);
    spec.attn_impl = pick(0, 3) ? "flash_attn" : "eager";
    spec.decoder_batch_sizes = {spec.batch_size};
    if (spec.batch_size > 1) spec.decoder_batch_sizes.push_back(1);
    if (pick(0, 1)) spec.sliding_window_layers = {0};
    spec.weight_bytes = pick(1, 8) << 30;
    spec.payload_bytes = pick(0, 64) << 10;
    const DeviceSpec device = *LookupDeviceSpec(spec.npu);
    const std::string name = absl::StrCat("r", round);
    absl::StatusOr<SynthResult> written =
        WriteSyntheticArtifact(Env::Default(), spec, tmp_.Join(name));
    // A draw too big for its device is refused by the generator; skip it.
    if (absl::IsFailedPrecondition(written.status())) continue;
    ASSERT_TRUE(written.ok()) << written.status();
    ++rounds_run;
    const Artifact original = Open(tmp_.Join(name));
    const uint64_t min = original.config().NumMinBlocks();
    const uint64_t full = original.config().NumFullBlocks();

    const uint64_t target = pick(min, full + 3);
    absl::StatusOr<ResizePlan> plan = PlanResize(original, target, device);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const std::string out = tmp_.Join(name + "-resized");
    ASSERT_TRUE(Env::Default()->CreateDir(out).ok());
    ASSERT_TRUE(
        WriteResizedArtifact(Env::Default(), original, *plan, out).ok());
    const Artifact resized = Open(out);
    ASSERT_EQ(resized.current_num_blocks(), target);

    for (int b = 0; b < 8; ++b) {
      const MemoryBudget budget =
          b % 2 ? MemoryBudget::Fraction(pick(1, 1000), 1000)
                : MemoryBudget::Bytes(pick(1, device.AvailablePerNode()));
      absl::StatusOr<FitResult> a = FitMemoryBudget(original, budget, device);
      absl::StatusOr<FitResult> r = FitMemoryBudget(resized, budget, device);
      ASSERT_TRUE(a.ok() && r.ok());
      EXPECT_EQ(a->num_blocks, r->num_blocks)
          << "round " << round << " budget " << budget.ToString();
      EXPECT_EQ(a->buckets[0].kv_bytes, r->buckets[0].kv_bytes);
    }
  }
  EXPECT_GE(rounds_run, 8);
}

TEST_F(RescaleTest, AMultimodalArtifactIsResizedInItsOwnLayout) {
  // optimum-rbln's layout: the decoder's config nested under
  // "language_model" in the parent's (here on one line, with escapes that a
  // re-serialization would change), its graphs and own config in
  // language_model/, another submodule and a top-level graph beside.
  const std::string top = tmp_.Join("llava");
  ASSERT_TRUE(Env::Default()->CreateDir(top).ok());
  absl::StatusOr<SynthResult> written = WriteSyntheticArtifact(
      Env::Default(), SynthSpec{}, JoinPath(top, "language_model"));
  ASSERT_TRUE(written.ok()) << written.status();
  const std::string sub_config =
      testing::ReadFileOrDie(JoinPath(top, "language_model/rbln_config.json"));
  const std::string parent_config = absl::StrCat(
      "{\"cls_name\": \"RBLNLlavaForConditionalGenerationConfig\", "
      "\"note\": \"caf\u00e9 \\/ \u00e9\", \"vision_tower\": {\"batch_size\": "
      "1, "
      "\"kvcache_num_blocks_hint\": 3}, \"language_model\": ",
      sub_config, "}");
  testing::WriteFileOrDie(JoinPath(top, kRblnConfigFileName), parent_config);
  ASSERT_TRUE(Env::Default()->CreateDir(JoinPath(top, "vision_tower")).ok());
  testing::WriteFileOrDie(JoinPath(top, "vision_tower/compiled_model.rbln"),
                          "vision graph");
  testing::WriteFileOrDie(JoinPath(top, "compiled_model.rbln"), "projector");

  const Artifact before = Open(top);
  ASSERT_EQ(before.submodule(), "language_model");
  const uint64_t current = before.current_num_blocks();
  const Artifact after = Resize(before, 12, "llava12");
  EXPECT_EQ(after.current_num_blocks(), 12u);
  EXPECT_EQ(after.submodule(), "language_model");

  // Both counts changed, and nothing else, byte for byte.
  const std::string from = absl::StrCat("\"kvcache_num_blocks\": ", current);
  const std::string to = "\"kvcache_num_blocks\": 12";
  EXPECT_EQ(testing::ReadFileOrDie(JoinPath(after.dir(), kRblnConfigFileName)),
            absl::StrReplaceAll(parent_config, {{from, to}}));
  EXPECT_EQ(testing::ReadFileOrDie(
                JoinPath(after.dir(), "language_model/rbln_config.json")),
            absl::StrReplaceAll(sub_config, {{from, to}}));
  // The decoder's graphs were rescaled; the others copied as they were.
  for (const ContainerFile& file : after.containers()) {
    EXPECT_EQ(file.path,
              JoinPath(after.dir(), "language_model/" + file.file_name));
  }
  for (const KvTensor& t : after.kv_tensors()) {
    const KvTensor& old = before.kv_tensors()[&t - &after.kv_tensors()[0]];
    for (size_t b = 0; b < t.bytes.size(); ++b) {
      EXPECT_EQ(t.bytes[b],
                old.resizable ? old.bytes[b] / current * 12 : old.bytes[b]);
    }
  }
  EXPECT_EQ(testing::ReadFileOrDie(
                JoinPath(after.dir(), "vision_tower/compiled_model.rbln")),
            "vision graph");
  EXPECT_EQ(
      testing::ReadFileOrDie(JoinPath(after.dir(), "compiled_model.rbln")),
      "projector");
  EXPECT_EQ(
      testing::ReadFileOrDie(
          JoinPath(after.dir(), "language_model/config.json")),
      testing::ReadFileOrDie(JoinPath(top, "language_model/config.json")));
}

TEST(CheckRescaledTest, ACopyMustHoldExactlyWhatWasAsked) {
  ContainerFacts before;
  before.num_nodes = 1;
  before.buckets_per_node = 2;
  before.other = {{"weights", {100, 200}}};
  before.kv_tensors = {{"k", {64, 128}, std::nullopt},
                       {"window", {10, 10}, std::nullopt}};
  const RescaleFactors factors = {{"k", {3, 2}}};
  ContainerFacts good = before;
  good.kv_tensors[0].bytes = {96, 192};
  EXPECT_TRUE(CheckRescaled(before, good, factors, "p.rbln", "c").ok());

  // A compiler whose rescale did nothing, or something else.
  absl::Status s = CheckRescaled(before, before, factors, "p.rbln", "c");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("KV tensor 'k' holds 64 bytes"));
  EXPECT_THAT(s.message(), HasSubstr("expected 96"));
  ContainerFacts other = good;
  other.other[0].bytes[1] = 201;
  EXPECT_THAT(CheckRescaled(before, other, factors, "p.rbln", "c").message(),
              HasSubstr("allocation 'weights' changed"));
  ContainerFacts fixed = good;
  fixed.kv_tensors[1].bytes = {15, 15};
  EXPECT_THAT(CheckRescaled(before, fixed, factors, "p.rbln", "c").message(),
              HasSubstr("KV tensor 'window'"));
  ContainerFacts empty;  // an empty file, read as nothing
  EXPECT_THAT(CheckRescaled(before, empty, factors, "p.rbln", "c").message(),
              HasSubstr("nodes or chiplets differ"));
}

}  // namespace
}  // namespace rbln
