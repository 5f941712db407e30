#include "tools/synth.h"

#include <sys/stat.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/help_format.h"
#include "core/format/artifact.h"
#include "core/resize/fit.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct PresetCase {
  const char* name;
  uint64_t per_block_per_tensor;  // kv_heads / T * S * head_dim * dtype
  uint64_t compiled;              // hand-computed fit at 100%
  uint64_t full;
};

// Hand computations (per node, or per chiplet for REBEL):
//  tiny: 2 * 256 * 64 * 2 = 64 KiB; fits all 2048 / 256 * 2 = 16.
//  llama3-8b-ca12-tp4: 8/4 * 16384 * 128 * 2 = 8 MiB, 64 tensors = 512 MiB a
//    block; available 16877879296 - other 4199680000 = 12678199296 -> 23.
//  llama3-70b-cr-tp2: 8/2 * 16384 * 128 * 2 = 16 MiB; 40 tensors a chiplet =
//    640 MiB a block; 35 GiB - (17638426624 weights + 72 MiB workspace)
//    = 19867039744 -> 29 of 64.
//  gemma-hybrid-ca12: 4 * 1024 * 256 * 2 = 2 MiB; fits all 8 * 4 = 32.
constexpr PresetCase kPresets[] = {
    {"tiny", 64 << 10, 16, 16},
    {"llama3-8b-ca12-tp4", 8 * kMiB, 23, 32},
    {"llama3-70b-cr-tp2", 16 * kMiB, 29, 64},
    {"gemma-hybrid-ca12", 2 * kMiB, 32, 32},
};

void PrintTo(const PresetCase& c, std::ostream* os) { *os << c.name; }

class PresetTest : public ::testing::TestWithParam<PresetCase> {};

TEST_P(PresetTest, OpensCleanlyWithNumbersFromItsShapes) {
  const PresetCase& c = GetParam();
  testing::TempDir tmp;
  const std::string dir = tmp.Join(c.name);
  absl::StatusOr<SynthSpec> spec = PresetSpec(c.name);
  ASSERT_TRUE(spec.ok());
  absl::StatusOr<uint64_t> per_block = KvBytesPerBlockPerNode(*spec);
  ASSERT_TRUE(per_block.ok());
  EXPECT_EQ(*per_block, c.per_block_per_tensor);

  absl::StatusOr<SynthResult> written =
      WriteSyntheticArtifact(Env::Default(), *spec, dir);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->kvcache_num_blocks, c.compiled);
  EXPECT_EQ(written->num_full_blocks, c.full);

  absl::StatusOr<Artifact> a =
      Artifact::Open(Env::Default(), dir, {.verify_payload = true});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->current_num_blocks(), c.compiled);
  EXPECT_EQ(a->compiled_num_blocks(), c.compiled);
  EXPECT_EQ(a->config().NumFullBlocks(), c.full);
  EXPECT_EQ(a->config().cls_name, spec->cls_name);
  EXPECT_EQ(a->num_nodes(), spec->num_devices);
  // Without decoder_batch_sizes there is one decoder, for batch_size.
  EXPECT_EQ(a->containers().size(),
            1 + std::max<size_t>(1, spec->decoder_batch_sizes.size()));

  uint64_t payload = 0;
  for (const ContainerFile& f : a->containers()) {
    const Container container = rbln::testing::ContainerOf(f);
    payload += container.preamble.payload_length;
    for (const v1::KvTensor& t : container.header.kv_tensors()) {
      EXPECT_EQ(t.placements_size(), static_cast<int>(spec->num_devices));
      for (const v1::Placement& p : t.placements()) {
        EXPECT_EQ(p.chiplet(), t.layer_index() % a->buckets_per_node());
        if (t.resizable()) {
          EXPECT_EQ(p.bytes(), c.per_block_per_tensor * c.compiled) << t.name();
        }
      }
    }
  }
  // Segments start 4 KiB-aligned, so the payload may carry padding.
  EXPECT_GE(payload, spec->payload_bytes);
  EXPECT_LT(payload, spec->payload_bytes + 4 * 4096 * a->containers().size());

  // Compiled at 100% of the device: the fit at 1.0 gives the same count.
  absl::StatusOr<FitResult> fit = FitMemoryBudget(
      *a, MemoryBudget::Fraction(1, 1), *LookupDeviceSpec(spec->npu));
  ASSERT_TRUE(fit.ok());
  EXPECT_EQ(fit->num_blocks, c.compiled);
}

INSTANTIATE_TEST_SUITE_P(AllPresets, PresetTest, ::testing::ValuesIn(kPresets),
                         [](const ::testing::TestParamInfo<PresetCase>& info) {
                           std::string name = info.param.name;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

TEST(SynthTest, AtLeastTwoPresetsAreMemoryBound) {
  int bound = 0;
  for (const PresetCase& c : kPresets) bound += c.compiled < c.full;
  EXPECT_GE(bound, 2);
}

TEST(SynthTest, GemmaHasFixedSlidingWindowTensors) {
  testing::TempDir tmp;
  ASSERT_TRUE(WriteSyntheticArtifact(Env::Default(),
                                     *PresetSpec("gemma-hybrid-ca12"),
                                     tmp.Join("g"))
                  .ok());
  absl::StatusOr<Artifact> a = Artifact::Open(Env::Default(), tmp.Join("g"));
  ASSERT_TRUE(a.ok());
  int fixed = 0;
  const Container prefill = rbln::testing::ContainerOf(a->prefill());
  for (const v1::KvTensor& t : prefill.header.kv_tensors()) {
    if (t.resizable()) continue;
    ++fixed;
    EXPECT_EQ(t.layer_index() % 2, 0u);
    // 4 heads * 4096 window * 256 * 2 bytes * batch 4.
    EXPECT_EQ(t.placements(0).bytes(), uint64_t{4} * 4096 * 256 * 2 * 4);
  }
  EXPECT_EQ(fixed, 26);
}

TEST(SynthTest, PayloadIsRealBytesNotHoles) {
  testing::TempDir tmp;
  SynthSpec spec;
  spec.payload_bytes = 8 * kMiB;
  ASSERT_TRUE(WriteSyntheticArtifact(Env::Default(), spec, tmp.Join("p")).ok());
  struct stat st;
  ASSERT_EQ(stat(tmp.Join("p/prefill.rbln").c_str(), &st), 0);
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, 4 * kMiB - 4096);
}

TEST(SynthTest, RefusesImpossibleSpecs) {
  testing::TempDir tmp;
  SynthSpec spec;
  spec.num_kv_heads = 3;
  spec.num_devices = 2;
  absl::StatusOr<SynthResult> r =
      WriteSyntheticArtifact(Env::Default(), spec, tmp.Join("a"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("do not split"));

  spec = SynthSpec{};
  spec.weight_bytes = uint64_t{20} << 30;  // more than a CA12 holds
  r = WriteSyntheticArtifact(Env::Default(), spec, tmp.Join("b"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("does not fit"));

  EXPECT_EQ(PresetSpec("huge").status().code(), absl::StatusCode::kNotFound);
}

TEST(SynthToolTest, WritesAnArtifactAndRefusesAnExistingDirectory) {
  testing::TempDir tmp;
  const std::string tool = testing::BinaryPath("rbln-artifact-synth");
  std::string out;
  const std::string dir = tmp.Join("llama");
  ASSERT_EQ(testing::RunCommand(
                absl::StrCat(tool,
                             " --preset llama3-8b-ca12-tp4 --layers 16 "
                             "--payload-bytes 1MiB --out ",
                             dir),
                &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("kvcache_num_blocks"));
  absl::StatusOr<Artifact> a = Artifact::Open(Env::Default(), dir);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(rbln::testing::ContainerOf(a->prefill()).header.kv_tensors_size(),
            32);

  EXPECT_NE(testing::RunCommand(
                absl::StrCat(tool, " --preset tiny --out ", dir), &out),
            0);
  EXPECT_THAT(out, HasSubstr("exists"));
  EXPECT_NE(
      testing::RunCommand(
          absl::StrCat(tool, " --preset nope --out ", tmp.Join("x")), &out),
      0);
  EXPECT_THAT(out, HasSubstr("unknown preset"));
  EXPECT_NE(
      testing::RunCommand(absl::StrCat(tool, " --preset tiny --out ",
                                       tmp.Join("y"), " --payload-bytes 0.5"),
                          &out),
      0);
  EXPECT_THAT(out, HasSubstr("rbln-artifact-synth: --payload-bytes: size "
                             "\"0.5\" has no unit"));
}

TEST(SynthTest, CreatesMissingParentsButNotAnExistingDirectory) {
  testing::TempDir tmp;
  const std::string dir = tmp.Join("store/team/tiny");
  absl::StatusOr<SynthResult> r =
      WriteSyntheticArtifact(Env::Default(), SynthSpec{}, dir);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(Artifact::Open(Env::Default(), dir).ok());
  r = WriteSyntheticArtifact(Env::Default(), SynthSpec{}, dir);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  // A trailing slash and "." components change nothing.
  r = WriteSyntheticArtifact(Env::Default(), SynthSpec{}, tmp.Join("a/./b/c/"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(Artifact::Open(Env::Default(), tmp.Join("a/b/c")).ok());
}

TEST(SynthTest, UnknownNpuNamesTheToolsOwnFlag) {
  testing::TempDir tmp;
  SynthSpec spec;
  spec.npu = "RBLN-XX1";
  absl::StatusOr<SynthResult> r =
      WriteSyntheticArtifact(Env::Default(), spec, tmp.Join("a"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("--npu: unknown NPU 'RBLN-XX1'"));
  EXPECT_THAT(r.status().message(), HasSubstr("give --npu RBLN-CA12"));
  EXPECT_THAT(r.status().message(), Not(HasSubstr("DRAM")));
}

TEST(SynthToolTest, ExitCodesAndMessagesNameTheProgram) {
  testing::TempDir tmp;
  const std::string tool = testing::BinaryPath("rbln-artifact-synth");
  std::string out;
  // 2: usage, with the flag that was meant.
  EXPECT_EQ(
      testing::RunCommand(
          absl::StrCat(tool, " --preset tiny --outt ", tmp.Join("x")), &out),
      2);
  EXPECT_THAT(out, HasSubstr("rbln-artifact-synth: unknown flag --outt (did "
                             "you mean --out?)"));
  EXPECT_EQ(testing::RunCommand(absl::StrCat(tool, " --preset tiny"), &out), 2);
  EXPECT_THAT(out, HasSubstr("rbln-artifact-synth: --out DIR is required"));
  EXPECT_EQ(
      testing::RunCommand(
          absl::StrCat(tool, " --npu RBLN-XX1 --out ", tmp.Join("y")), &out),
      2);
  EXPECT_THAT(out, HasSubstr("rbln-artifact-synth: --npu: unknown NPU"));
  // 1: the artifact could not be written.
  ASSERT_EQ(testing::RunCommand(
                absl::StrCat(tool, " --out ", tmp.Join("deep/er/z")), &out),
            0)
      << out;
  EXPECT_EQ(testing::RunCommand(
                absl::StrCat(tool, " --out ", tmp.Join("deep/er/z")), &out),
            1);
  EXPECT_THAT(out, HasSubstr("rbln-artifact-synth: "));
  // --help documents the exit codes.
  EXPECT_EQ(testing::RunCommand(absl::StrCat(tool, " --help"), &out), 0);
  EXPECT_THAT(out, HasSubstr("Exit codes:"));
  EXPECT_THAT(out, HasSubstr("2  usage error"));
  // In 80 columns, with value names rather than CLI11's types.
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    EXPECT_LE(line.size(), kHelpWidth) << line;
  }
  EXPECT_THAT(out, HasSubstr("  --layers N "));
  EXPECT_THAT(out, Not(HasSubstr("UINT")));
}

}  // namespace
}  // namespace rbln
