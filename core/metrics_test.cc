#include "core/metrics.h"

#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "core/core_metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace metrics {
namespace {

TEST(RegistryTest, ExpositionIsExactWithEscapesAndBuckets) {
  Registry registry;
  CounterFamily& requests = registry.AddCounter(
      "x_requests_total", "Requests.\nA second line, a \\ and a \"quote\".",
      {"method", "code"});
  requests.WithLabels({"Get", "OK"}).Increment(2);
  requests.WithLabels({"a\"b\\c\nd", "NOT_FOUND"}).Increment();
  registry.AddCounter("x_plain_total", "Plain.");
  HistogramFamily& durations = registry.AddHistogram(
      "x_duration_seconds", "Durations.", {0.125, 1, 2.5}, {"method"});
  Histogram& get = durations.WithLabels({"Get"});
  get.Observe(0.0625);
  get.Observe(0.125);  // a bound belongs to its own bucket
  get.Observe(3);
  registry.AddHistogram("x_idle_seconds", "Idle.", {1});
  GaugeFamily& held = registry.AddGauge("x_held", "Held now.", {"kind"});
  held.WithLabels({"a"}).Add(3);
  held.WithLabels({"a"}).Add(-5);
  held.WithLabels({"b"}).Set(7);
  registry.AddGauge("x_idle", "Idle.");

  EXPECT_EQ(registry.Exposition(),
            "# HELP x_requests_total Requests.\\nA second line, a \\\\ and a "
            "\"quote\".\n"
            "# TYPE x_requests_total counter\n"
            "x_requests_total{method=\"Get\",code=\"OK\"} 2\n"
            "x_requests_total{method=\"a\\\"b\\\\c\\nd\",code=\"NOT_FOUND\"} "
            "1\n"
            "# HELP x_plain_total Plain.\n"
            "# TYPE x_plain_total counter\n"
            "x_plain_total 0\n"
            "# HELP x_duration_seconds Durations.\n"
            "# TYPE x_duration_seconds histogram\n"
            "x_duration_seconds_bucket{method=\"Get\",le=\"0.125\"} 2\n"
            "x_duration_seconds_bucket{method=\"Get\",le=\"1\"} 2\n"
            "x_duration_seconds_bucket{method=\"Get\",le=\"2.5\"} 2\n"
            "x_duration_seconds_bucket{method=\"Get\",le=\"+Inf\"} 3\n"
            "x_duration_seconds_sum{method=\"Get\"} 3.1875\n"
            "x_duration_seconds_count{method=\"Get\"} 3\n"
            "# HELP x_idle_seconds Idle.\n"
            "# TYPE x_idle_seconds histogram\n"
            "x_idle_seconds_bucket{le=\"1\"} 0\n"
            "x_idle_seconds_bucket{le=\"+Inf\"} 0\n"
            "x_idle_seconds_sum 0\n"
            "x_idle_seconds_count 0\n"
            "# HELP x_held Held now.\n"
            "# TYPE x_held gauge\n"
            "x_held{kind=\"a\"} -2\n"
            "x_held{kind=\"b\"} 7\n"
            "# HELP x_idle Idle.\n"
            "# TYPE x_idle gauge\n"
            "x_idle 0\n");
}

TEST(RegistryTest, ChildrenAreListedByLabelValuesAndKept) {
  Registry registry;
  CounterFamily& family = registry.AddCounter("x_total", "X.", {"k"});
  Counter& b = family.WithLabels({"b"});
  family.WithLabels({"a"}).Increment();
  b.Increment(5);
  // The same values give the same counter.
  EXPECT_EQ(&family.WithLabels({"b"}), &b);
  EXPECT_EQ(registry.Exposition(),
            "# HELP x_total X.\n# TYPE x_total counter\n"
            "x_total{k=\"a\"} 1\nx_total{k=\"b\"} 5\n");
}

TEST(RegistryTest, ConcurrentCountsAreExact) {
  Registry registry;
  CounterFamily& counters = registry.AddCounter("x_total", "X.", {"t"});
  HistogramFamily& histograms =
      registry.AddHistogram("x_seconds", "X.", {0.5}, {"t"});
  constexpr int kThreads = 8;
  constexpr int kPerThread = 10000;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i]() {
      // Half the threads share a child; the others race to create theirs.
      const std::string label = i % 2 == 0 ? "shared" : std::to_string(i);
      for (int n = 0; n < kPerThread; ++n) {
        counters.WithLabels({label}).Increment();
        histograms.WithLabels({"all"}).Observe(n % 2 == 0 ? 0.25 : 1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(counters.WithLabels({"shared"}).value(), kThreads / 2 * kPerThread);
  EXPECT_EQ(counters.WithLabels({"1"}).value(), kPerThread);
  const Histogram& all = histograms.WithLabels({"all"});
  EXPECT_THAT(
      all.CumulativeCounts(),
      ::testing::ElementsAre(kThreads * kPerThread / 2, kThreads * kPerThread));
  EXPECT_EQ(all.sum(), kThreads * kPerThread / 2 * 1.25);
}

TEST(RegistryTest, WrongNumberOfLabelValuesAborts) {
  Registry registry;
  CounterFamily& family = registry.AddCounter("x_total", "X.", {"a", "b"});
  EXPECT_DEATH(family.WithLabels({"only-one"}),
               "x_total takes 2 label values, got 1");
}

TEST(FormatValueTest, ShortestTextThatReadsBack) {
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(0.0025), "0.0025");
  EXPECT_EQ(FormatValue(600), "600");
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(1e21), "1e+21");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(EscapeLabelValueTest, EscapesBackslashQuoteAndNewlineOnly) {
  EXPECT_EQ(EscapeLabelValue("plain"), "\"plain\"");
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd\te"), "\"a\\\\b\\\"c\\nd\te\"");
}

TEST(DurationBucketsTest, Ascending) {
  const std::vector<double> bounds = DurationBuckets();
  EXPECT_TRUE(std::is_sorted(bounds.begin(), bounds.end()));
  EXPECT_EQ(std::adjacent_find(bounds.begin(), bounds.end()), bounds.end());
}

// The daemon's own metrics (core/core_metrics.h): valid, prefixed names, each
// once, counters ending in _total and nothing else, and every one exported
// from the start.
TEST(CoreMetricsTest, NamesAreValidUniqueAndPrefixed) {
  RegisterCoreMetrics();
  const std::string text = Registry::Default().Exposition();
  const std::regex name("[a-zA-Z_:][a-zA-Z0-9_:]*");
  std::set<std::string> seen;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, "# TYPE ")) continue;
    const std::vector<std::string> parts = absl::StrSplit(line, ' ');
    ASSERT_EQ(parts.size(), 4u) << line;
    const std::string& metric = parts[2];
    EXPECT_TRUE(std::regex_match(metric, name)) << metric;
    EXPECT_TRUE(absl::StartsWith(metric, "rbln_artifactd_")) << metric;
    EXPECT_TRUE(seen.insert(metric).second) << metric << " twice";
    EXPECT_EQ(absl::EndsWith(metric, "_total"), parts[3] == "counter")
        << metric << " is a " << parts[3];
  }
  EXPECT_THAT(seen,
              ::testing::IsSupersetOf({"rbln_artifactd_commits_total",
                                       "rbln_artifactd_copied_bytes_total",
                                       "rbln_artifactd_cloned_bytes_total",
                                       "rbln_artifactd_recoveries_total",
                                       "rbln_artifactd_lock_wait_seconds",
                                       "rbln_artifactd_probe_runs_total",
                                       "rbln_artifactd_container_calls_total",
                                       "rbln_artifactd_codec_calls_total",
                                       "rbln_artifactd_codec_call_seconds",
                                       "rbln_artifactd_artifact_cache_lookups_"
                                       "total",
                                       "rbln_artifactd_old_versions_pending"}));
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "rbln_artifactd_commits_total{kind=\"in_place\"} 0\n"));
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "rbln_artifactd_probe_runs_total{result=\"timeout\"} "
                        "0\n"));
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "rbln_artifactd_artifact_cache_lookups_total{result="
                        "\"miss\"} 0\n"));
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "# TYPE rbln_artifactd_old_versions_pending gauge\n"
                        "rbln_artifactd_old_versions_pending 0\n"));
}

TEST(CoreMetricsTest, EventsMoveTheirCounters) {
  RegisterCoreMetrics();
  const Registry& registry = Registry::Default();
  const std::string commits =
      "rbln_artifactd_commits_total{kind=\"output_dir\"}";
  const std::optional<double> before = registry.Sample(commits);
  ASSERT_TRUE(before.has_value());
  CountCommit(CommitKind::kOutputDir);
  EXPECT_EQ(registry.Sample(commits), *before + 1);
  const std::string decode_errors =
      "rbln_artifactd_container_calls_total{operation=\"decode\",result="
      "\"error\"}";
  const double decode_before = registry.Sample(decode_errors).value_or(-1);
  CountContainerCall(ContainerOperation::kDecode, absl::DataLossError("bad"));
  EXPECT_EQ(registry.Sample(decode_errors), decode_before + 1);
  const std::string crashes =
      "rbln_artifactd_codec_calls_total{codec=\"external\",op=\"rescale\","
      "outcome=\"crash\"}";
  const std::string slow =
      "rbln_artifactd_codec_call_seconds_bucket{codec=\"external\",op="
      "\"rescale\",le=\"2.5\"}";
  const double crashes_before = registry.Sample(crashes).value_or(-1);
  const double slow_before = registry.Sample(slow).value_or(-1);
  ObserveCodecCall(CodecKind::kExternal, CodecCallOp::kRescale,
                   CodecOutcome::kCrash, absl::Seconds(2));
  EXPECT_EQ(registry.Sample(crashes), crashes_before + 1);
  EXPECT_EQ(registry.Sample(slow), slow_before + 1);
  const std::string waits =
      "rbln_artifactd_lock_wait_seconds_count{holder=\"other_process\"}";
  const double waits_before = registry.Sample(waits).value_or(-1);
  ObserveLockWait(LockHolder::kOtherProcess, absl::Milliseconds(30));
  EXPECT_EQ(registry.Sample(waits), waits_before + 1);
  const std::string hits =
      "rbln_artifactd_artifact_cache_lookups_total{result=\"hit\"}";
  const double hits_before = registry.Sample(hits).value_or(-1);
  CountArtifactCacheLookup(CacheLookup::kHit);
  EXPECT_EQ(registry.Sample(hits), hits_before + 1);
  const std::string pending = "rbln_artifactd_old_versions_pending";
  const double pending_before = registry.Sample(pending).value_or(-1);
  AddPendingOldVersions(2);
  EXPECT_EQ(registry.Sample(pending), pending_before + 2);
  AddPendingOldVersions(-2);
  EXPECT_EQ(registry.Sample(pending), pending_before);
  EXPECT_EQ(registry.Sample("rbln_artifactd_no_such_total"), std::nullopt);
}

}  // namespace
}  // namespace metrics
}  // namespace rbln
