// The built-in codec's calls, counted as the external codec's are
// (rbln_artifactd_codec_calls_total and _codec_call_seconds,
// core/core_metrics.h), on a synthesized artifact's real files.
#include "core/format/builtin_codec.h"

#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/core_metrics.h"
#include "core/metrics.h"
#include "core/os/env.h"
#include "core/testing/test_util.h"
#include "gtest/gtest.h"
#include "tools/synth.h"

namespace rbln {
namespace {

// The value of one series of the daemon's registry; -1 when it is missing.
double Sample(const std::string& series) {
  return metrics::Registry::Default().Sample(series).value_or(-1);
}

std::string Calls(absl::string_view op, absl::string_view outcome) {
  return absl::StrCat(
      "rbln_artifactd_codec_calls_total{codec=\"built-in\",op=\"", op,
      "\",outcome=\"", outcome, "\"}");
}

std::string Observed(absl::string_view op) {
  return absl::StrCat(
      "rbln_artifactd_codec_call_seconds_count{codec=\"built-in\",op=\"", op,
      "\"}");
}

class BuiltinCodecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RegisterCoreMetrics();
    absl::StatusOr<SynthSpec> spec = PresetSpec("tiny");
    ASSERT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<SynthResult> written =
        WriteSyntheticArtifact(Env::Default(), *spec, tmp_.Join("a"));
    ASSERT_TRUE(written.ok()) << written.status();
    for (const std::string& file : written->files) {
      if (absl::EndsWith(file, ".rbln")) graph_ = tmp_.Join("a/" + file);
    }
    ASSERT_FALSE(graph_.empty());
  }

  // Rescales graph_ into a new file with `factors`.
  absl::Status Rescale(const RescaleFactors& factors, const std::string& out) {
    RescaleRequest request;
    request.source_env = Env::Default();
    request.source_path = graph_;
    request.factors = factors;
    request.out_env = Env::Default();
    request.out_path = tmp_.Join(out);
    return BuiltinContainerCodec()->Rescale(request);
  }

  testing::TempDir tmp_;
  std::string graph_;
};

TEST_F(BuiltinCodecTest, EachInspectCountsItsOutcomeAndItsTime) {
  const double ok = Sample(Calls("inspect", "ok"));
  const double error = Sample(Calls("inspect", "error"));
  const double observed = Sample(Observed("inspect"));
  ASSERT_GE(ok, 0);
  EXPECT_TRUE(BuiltinContainerCodec()->Inspect(Env::Default(), graph_).ok());
  EXPECT_EQ(Sample(Calls("inspect", "ok")), ok + 1);
  EXPECT_EQ(Sample(Calls("inspect", "error")), error);
  EXPECT_EQ(Sample(Observed("inspect")), observed + 1);

  // Not a container: an error.
  EXPECT_FALSE(BuiltinContainerCodec()
                   ->Inspect(Env::Default(), tmp_.Join("a/rbln_config.json"))
                   .ok());
  EXPECT_EQ(Sample(Calls("inspect", "ok")), ok + 1);
  EXPECT_EQ(Sample(Calls("inspect", "error")), error + 1);
  EXPECT_EQ(Sample(Observed("inspect")), observed + 2);
  // The built-in codec has no worker to time out or crash.
  EXPECT_EQ(Sample(Calls("inspect", "timeout")), 0);
  EXPECT_EQ(Sample(Calls("inspect", "crash")), 0);
}

TEST_F(BuiltinCodecTest, EachRescaleCountsItsOutcomeAndItsTime) {
  absl::StatusOr<ContainerFacts> facts =
      BuiltinContainerCodec()->Inspect(Env::Default(), graph_);
  ASSERT_TRUE(facts.ok()) << facts.status();
  ASSERT_FALSE(facts->kv_tensors.empty());
  const double ok = Sample(Calls("rescale", "ok"));
  const double error = Sample(Calls("rescale", "error"));
  const double observed = Sample(Observed("rescale"));
  ASSERT_GE(ok, 0);
  const absl::Status same =
      Rescale({{facts->kv_tensors[0].name, {1, 1}}}, "same.rbln");
  EXPECT_TRUE(same.ok()) << same;
  EXPECT_EQ(Sample(Calls("rescale", "ok")), ok + 1);
  EXPECT_EQ(Sample(Observed("rescale")), observed + 1);

  const absl::Status unknown = Rescale({{"no-such-tensor", {1, 1}}}, "x.rbln");
  EXPECT_FALSE(unknown.ok());
  EXPECT_EQ(Sample(Calls("rescale", "ok")), ok + 1);
  EXPECT_EQ(Sample(Calls("rescale", "error")), error + 1);
  EXPECT_EQ(Sample(Observed("rescale")), observed + 2);
}

}  // namespace
}  // namespace rbln
