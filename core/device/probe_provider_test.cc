#include "core/device/probe_provider.h"

#include <sys/stat.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "core/core_metrics.h"
#include "core/device/device_spec.h"
#include "core/metrics.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
// docs/memory-model.md: what one RBLN-CA node holds, exactly; rbln-smi
// prints 15.7GiB.
constexpr uint64_t kCaAvailable = 16 * kGiB - 288 * kMiB;

// A clock the test moves by hand.
class FakeClock {
 public:
  absl::Time Now() {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ = absl::UnixEpoch();
};

class ProbeProviderTest : public ::testing::Test {
 protected:
  // Writes an executable fake tool: a /bin/sh script that appends a line to
  // the run counter, then runs `body`.
  std::string FakeTool(absl::string_view body,
                       absl::string_view name = "rbln-smi") {
    const std::string path = dir_.Join(name);
    testing::WriteFileOrDie(path, absl::StrCat("#!/bin/sh\necho run >> '",
                                               Counter(), "'\n", body, "\n"));
    EXPECT_EQ(chmod(path.c_str(), 0755), 0);
    return path;
  }

  // A fake tool that prints one of tests/testdata/rbln-smi/.
  std::string FakePrinting(absl::string_view sample,
                           absl::string_view name = "rbln-smi") {
    return FakeTool(
        absl::StrCat("cat '",
                     testing::TestdataPath(absl::StrCat("rbln-smi/", sample)),
                     "'"),
        name);
  }

  std::string Counter() const { return dir_.Join("runs"); }

  // How often a fake tool ran.
  size_t Runs() const {
    const std::string text = testing::ReadFileOrDie(Counter());
    return std::vector<absl::string_view>(
               absl::StrSplit(text, '\n', absl::SkipEmpty()))
        .size();
  }

  // Options for `tool` with no caching, so that every call probes. The
  // timeout only turns a stuck fake into a failure; HangingOptions is for the
  // fakes meant to hang.
  ProbeOptions Options(const std::string& tool) {
    ProbeOptions options;
    options.tool = tool;
    options.timeout = absl::Seconds(30);
    options.cache_ttl = absl::ZeroDuration();
    return options;
  }

  // An ATOM host's probe whose answers serve for 5 s of `clock`.
  std::unique_ptr<DramProvider> CachingAtomProvider(FakeClock* clock) {
    ProbeOptions options = Options(FakePrinting("rbln-smi-atom-ca12.txt"));
    options.cache_ttl = absl::Seconds(5);
    options.clock = [clock]() { return clock->Now(); };
    return NewProbeProvider(options);
  }

  // A short timeout, so that a fake that hangs costs little.
  ProbeOptions HangingOptions(const std::string& tool) {
    ProbeOptions options = Options(tool);
    options.timeout = absl::Milliseconds(300);
    return options;
  }

  // ForNpu must fall back to the spec table's exact answer with one warning
  // that contains `why`.
  void ExpectSpecFallback(DramProvider& provider, absl::string_view why) {
    absl::StatusOr<DramChoice> choice = provider.ForNpu("RBLN-CA12");
    ASSERT_TRUE(choice.ok()) << choice.status();
    EXPECT_EQ(choice->spec.AvailablePerNode(), kCaAvailable);
    EXPECT_THAT(choice->source, HasSubstr("spec table"));
    EXPECT_THAT(choice->source, Not(HasSubstr("probe")));
    EXPECT_THAT(choice->warnings,
                ElementsAre(AllOf(HasSubstr("device probe failed"),
                                  HasSubstr("spec table"), HasSubstr(why))));

    DeviceReport report = provider.Report();
    EXPECT_THAT(report.source, HasSubstr("spec table"));
    EXPECT_THAT(report.warnings, ElementsAre(HasSubstr(why)));
    ASSERT_THAT(report.devices, SizeIs(2));
    EXPECT_EQ(report.devices[0].source, "spec");
    EXPECT_EQ(report.devices[0].available_bytes, kCaAvailable);
  }

  testing::TempDir dir_;
};

TEST_F(ProbeProviderTest, ProbedAtomUsesTheSpecsExactBytes) {
  const std::string tool = FakePrinting("rbln-smi-atom-ca12.txt");
  std::unique_ptr<DramProvider> provider = NewProbeProvider(Options(tool));
  absl::StatusOr<DramChoice> choice = provider->ForNpu("RBLN-CA12");
  ASSERT_TRUE(choice.ok()) << choice.status();
  // Not floor(15.7 GiB), which is what rbln-smi prints.
  EXPECT_EQ(choice->spec.AvailablePerNode(), kCaAvailable);
  EXPECT_EQ(choice->spec.AvailablePerChiplet(), kCaAvailable);
  EXPECT_EQ(choice->spec.chiplets_per_node, 1u);
  EXPECT_THAT(choice->source, HasSubstr(absl::StrCat("probe: ", tool)));
  EXPECT_THAT(choice->source, HasSubstr("RBLN-CA12 rbln0, RBLN-CA12 rbln1"));
  EXPECT_THAT(choice->warnings, IsEmpty());
}

TEST_F(ProbeProviderTest, ReportListsTheProbedDevices) {
  const std::string tool = FakePrinting("rbln-smi-atom-ca12.txt");
  std::unique_ptr<DramProvider> provider = NewProbeProvider(Options(tool));
  DeviceReport report = provider->Report();
  EXPECT_THAT(report.source, HasSubstr(absl::StrCat("probe: ", tool)));
  EXPECT_THAT(report.warnings, IsEmpty());
  ASSERT_THAT(report.devices, SizeIs(2));
  for (int i = 0; i < 2; ++i) {
    const DeviceEntry& d = report.devices[i];
    EXPECT_EQ(d.index, i);
    EXPECT_EQ(d.name, "RBLN-CA12");
    EXPECT_EQ(d.family, "RBLN-CA");
    EXPECT_EQ(d.device_node, absl::StrCat("/dev/rbln", i));
    EXPECT_EQ(d.total_bytes, 16 * kGiB);
    EXPECT_EQ(d.available_bytes, kCaAvailable);
    EXPECT_EQ(d.chiplets, 1u);
    EXPECT_EQ(d.source, "probe");
  }
  EXPECT_EQ(report.devices[0].used_bytes, 2400000000u);
  EXPECT_EQ(report.devices[1].used_bytes, 0u);
}

TEST_F(ProbeProviderTest, ProbedRebelGivesFourChipletsOf35GiB) {
  std::unique_ptr<DramProvider> provider =
      NewProbeProvider(Options(FakePrinting("rbln-smi-rebel-cr13.txt")));
  absl::StatusOr<DramChoice> choice = provider->ForNpu("RBLN-CR13");
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->spec.chiplets_per_node, 4u);
  EXPECT_EQ(choice->spec.AvailablePerChiplet(), 35 * kGiB);
  EXPECT_EQ(choice->spec.AvailablePerNode(), 140 * kGiB);
  EXPECT_THAT(choice->source, HasSubstr("probe"));
  EXPECT_THAT(choice->warnings, IsEmpty());
  DeviceReport report = provider->Report();
  ASSERT_THAT(report.devices, SizeIs(4));
  EXPECT_EQ(report.devices[3].used_bytes, 12 * kGiB + kGiB / 2);
  EXPECT_EQ(report.devices[3].chiplets, 4u);
}

TEST_F(ProbeProviderTest, DeviceOfAnotherFamilyIsAWarning) {
  const std::string tool = FakePrinting("rbln-smi-rebel-cr13.txt");
  std::unique_ptr<DramProvider> provider = NewProbeProvider(Options(tool));
  absl::StatusOr<DramChoice> choice = provider->ForNpu("RBLN-CA12");
  ASSERT_TRUE(choice.ok()) << choice.status();
  // The artifact's target decides: the RBLN-CA spec, from the table.
  EXPECT_EQ(choice->spec.AvailablePerNode(), kCaAvailable);
  EXPECT_EQ(choice->spec.chiplets_per_node, 1u);
  EXPECT_THAT(choice->source, HasSubstr("spec table"));
  EXPECT_THAT(choice->source, HasSubstr("found no RBLN-CA* device"));
  EXPECT_THAT(choice->warnings,
              ElementsAre(AllOf(HasSubstr("targets RBLN-CA12"),
                                HasSubstr("RBLN-CR13 rbln0"),
                                HasSubstr("no device on this host can run"))));
}

TEST_F(ProbeProviderTest, MixedHostWarnsAboutTheOthersOnly) {
  const std::string tool = FakeTool(
      "cat <<'EOF'\n"
      "+---+\n"
      "| NPU | Name | Device | Memory(used/total) |\n"
      "+---+\n"
      "| 0 | RBLN-CA12 | rbln0 | 0.0B / 15.7GiB |\n"
      "| 1 | RBLN-CR13 | rbln1 | 0.0B / 140.0GiB |\n"
      "+---+\n"
      "EOF");
  std::unique_ptr<DramProvider> provider = NewProbeProvider(Options(tool));
  absl::StatusOr<DramChoice> choice = provider->ForNpu("RBLN-CA12");
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_THAT(choice->source, HasSubstr("found RBLN-CA12 rbln0;"));
  EXPECT_THAT(choice->warnings,
              ElementsAre(AllOf(HasSubstr("RBLN-CR13 rbln1"),
                                HasSubstr("which cannot run it"))));
}

TEST_F(ProbeProviderTest, TotalFarFromTheSpecIsAWarning) {
  const std::string tool = FakeTool(
      "cat <<'EOF'\n"
      "+---+\n"
      "| NPU | Name | Device | Memory(used/total) |\n"
      "+---+\n"
      "| 0 | RBLN-CA12 | rbln0 | 0.0B / 31.7GiB |\n"
      "+---+\n"
      "EOF");
  std::unique_ptr<DramProvider> provider = NewProbeProvider(Options(tool));
  absl::StatusOr<DramChoice> choice = provider->ForNpu("RBLN-CA12");
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->spec.AvailablePerNode(), kCaAvailable);
  EXPECT_THAT(choice->warnings,
              ElementsAre(AllOf(HasSubstr("rbln0 (RBLN-CA12) shows 31.70 GiB"),
                                HasSubstr("15.72 GiB"))));
}

TEST_F(ProbeProviderTest, UnknownProbedNameIsReportedWithItsOwnTotal) {
  const std::string tool = FakeTool(
      "cat <<'EOF'\n"
      "+---+\n"
      "| NPU | Name | Device | Memory(used/total) |\n"
      "+---+\n"
      "| 0 | RBLN-XZ1 | rbln0 | 1.0GiB / 64.0GiB |\n"
      "+---+\n"
      "EOF");
  std::unique_ptr<DramProvider> provider = NewProbeProvider(Options(tool));
  DeviceReport report = provider->Report();
  ASSERT_THAT(report.devices, SizeIs(1));
  EXPECT_EQ(report.devices[0].total_bytes, 64 * kGiB);
  EXPECT_EQ(report.devices[0].available_bytes, 64 * kGiB);
  EXPECT_EQ(report.devices[0].chiplets, 0u);  // unknown
  EXPECT_THAT(report.warnings, ElementsAre(HasSubstr("does not know")));
  // An artifact for that name is still an error: no spec, no override.
  absl::StatusOr<DramChoice> choice = provider->ForNpu("RBLN-XZ1");
  EXPECT_EQ(choice.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ProbeProviderTest, UnknownTargetNpuIsAnErrorEvenWithAWorkingProbe) {
  std::unique_ptr<DramProvider> provider =
      NewProbeProvider(Options(FakePrinting("rbln-smi-atom-ca12.txt")));
  absl::StatusOr<DramChoice> choice = provider->ForNpu("RBLN-ZZ9");
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(choice.status().message()),
              HasSubstr("unknown NPU 'RBLN-ZZ9'"));
}

// An artifact that names no NPU is sized for the NPU of the lowest-index
// device, as optimum-rbln resolves it from the host's device 0.
TEST_F(ProbeProviderTest, NoNpuNamedTakesTheLowestIndexDevices) {
  const std::string tool = FakeTool(
      "cat <<'EOF'\n"
      "+---+\n"
      "| NPU | Name | Device | Memory(used/total) |\n"
      "+---+\n"
      "| 3 | RBLN-CA12 | rbln3 | 0.0B / 15.7GiB |\n"
      "| 1 | RBLN-CR13 | rbln1 | 0.0B / 140.0GiB |\n"
      "+---+\n"
      "EOF");
  std::unique_ptr<DramProvider> provider = NewProbeProvider(Options(tool));
  absl::StatusOr<DramChoice> choice = provider->ForNpu("");
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->spec.family, "RBLN-CR");
  EXPECT_EQ(choice->spec.chiplets_per_node, 4u);
  EXPECT_THAT(choice->source,
              HasSubstr("NPU RBLN-CR13 from the probe's lowest-index device"));
}

TEST_F(ProbeProviderTest, NoNpuNamedAndNoDeviceSaysToGiveDeviceDram) {
  const std::string tool =
      FakeTool("echo 'rbln-smi: driver not loaded' >&2; exit 3");
  std::unique_ptr<DramProvider> provider = NewProbeProvider(Options(tool));
  absl::StatusOr<DramChoice> choice = provider->ForNpu("");
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(choice.status().message()),
              AllOf(HasSubstr("names no NPU"), HasSubstr("did not answer"),
                    HasSubstr("give the daemon --device-dram")));
  // The spec table alone (--rbln-smi none) says the probe is off.
  choice = NewSpecTableProvider()->ForNpu("");
  EXPECT_EQ(choice.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(choice.status().message()),
              AllOf(HasSubstr("the probe is off"), HasSubstr("--device-dram")));
}

TEST_F(ProbeProviderTest, FailingToolFallsBackWithItsError) {
  const std::string tool =
      FakeTool("echo 'rbln-smi: driver not loaded' >&2; exit 3");
  std::unique_ptr<DramProvider> provider = NewProbeProvider(Options(tool));
  ExpectSpecFallback(*provider, absl::StrCat(tool,
                                             " exited with status 3: "
                                             "rbln-smi: driver not "
                                             "loaded"));
}

TEST_F(ProbeProviderTest, HangingToolIsKilledAndFallsBack) {
  const std::string tool = FakeTool("sleep 30");
  std::unique_ptr<DramProvider> provider =
      NewProbeProvider(HangingOptions(tool));
  ExpectSpecFallback(*provider, "did not answer within 0.3 s");
}

TEST_F(ProbeProviderTest, MissingToolFallsBack) {
  const std::string tool = dir_.Join("not-installed/rbln-smi");
  std::unique_ptr<DramProvider> provider = NewProbeProvider(Options(tool));
  ExpectSpecFallback(*provider, absl::StrCat(tool, " not found"));
}

TEST_F(ProbeProviderTest, GarbledOutputFallsBack) {
  const std::string tool = FakeTool("echo 'Segmentation fault'");
  std::unique_ptr<DramProvider> provider = NewProbeProvider(Options(tool));
  ExpectSpecFallback(*provider, absl::StrCat("cannot read the output of ", tool,
                                             ": no device table header"));
}

// Each run is counted under what came of it (docs/metrics.md).
TEST_F(ProbeProviderTest, RunsAreCountedByResult) {
  const metrics::Registry& registry = metrics::Registry::Default();
  RegisterCoreMetrics();
  const auto runs = [&](absl::string_view result) {
    return registry
        .Sample(absl::StrCat("rbln_artifactd_probe_runs_total{result=\"",
                             result, "\"}"))
        .value_or(-1);
  };
  struct Case {
    std::string result;
    ProbeOptions options;
  };
  testing::TempDir empty;
  ProbeOptions no_tool = Options("");
  no_tool.search_path = empty.path();
  const Case cases[] = {
      {"ok", Options(FakePrinting("rbln-smi-atom-ca12.txt", "ok-smi"))},
      {"failed", Options(FakeTool("exit 3", "failing-smi"))},
      {"timeout", HangingOptions(FakeTool("sleep 30", "hanging-smi"))},
      {"unreadable", Options(FakeTool("echo 'Segmentation fault'", "odd-smi"))},
      {"no_tool", no_tool},
  };
  for (const Case& c : cases) {
    const double before = runs(c.result);
    std::unique_ptr<DramProvider> provider = NewProbeProvider(c.options);
    ASSERT_TRUE(provider->ForNpu("RBLN-CA12").ok());
    EXPECT_EQ(runs(c.result), before + 1) << c.result;
  }
}

TEST_F(ProbeProviderTest, NoToolOnThePathIsTheSpecTableWithoutAWarning) {
  testing::TempDir empty;
  ProbeOptions options = Options("");
  options.search_path = empty.path();
  std::unique_ptr<DramProvider> provider = NewProbeProvider(options);
  absl::StatusOr<DramChoice> choice = provider->ForNpu("RBLN-CA12");
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->spec.AvailablePerNode(), kCaAvailable);
  EXPECT_THAT(choice->warnings, IsEmpty());
  DeviceReport report = provider->Report();
  EXPECT_EQ(report.source, "spec table (no rbln-smi or rbln-stat on PATH)");
  EXPECT_THAT(report.warnings, IsEmpty());
}

TEST_F(ProbeProviderTest, LooksUpRblnSmiThenRblnStatOnThePath) {
  // Only the older tool is installed.
  const std::string stat =
      FakePrinting("rbln-smi-legacy-stat.txt", "rbln-stat");
  ProbeOptions options = Options("");
  options.search_path = absl::StrCat(dir_.Join("missing"), ":", dir_.path());
  std::unique_ptr<DramProvider> provider = NewProbeProvider(options);
  DeviceReport report = provider->Report();
  EXPECT_THAT(report.source, HasSubstr(absl::StrCat("probe: ", stat)));
  EXPECT_THAT(report.devices, SizeIs(2));

  // Once rbln-smi is there too, it wins.
  const std::string smi = FakePrinting("rbln-smi-rebel-cr13.txt", "rbln-smi");
  report = provider->Report();
  EXPECT_THAT(report.source, HasSubstr(absl::StrCat("probe: ", smi)));
  EXPECT_THAT(report.devices, SizeIs(4));
}

TEST_F(ProbeProviderTest, AToolNameIsLookedUpOnTheSearchPath) {
  const std::string tool = FakePrinting("rbln-smi-atom-ca12.txt", "my-smi");
  ProbeOptions options = Options("my-smi");
  options.search_path = dir_.path();
  std::unique_ptr<DramProvider> provider = NewProbeProvider(options);
  EXPECT_THAT(provider->Report().source, HasSubstr(tool));

  options.tool = "other-smi";
  provider = NewProbeProvider(options);
  ExpectSpecFallback(*provider, "other-smi not found on PATH");
}

TEST_F(ProbeProviderTest, AnswersAreCachedForTheTtl) {
  FakeClock clock;
  std::unique_ptr<DramProvider> provider = CachingAtomProvider(&clock);
  ASSERT_TRUE(provider->ForNpu("RBLN-CA12").ok());
  provider->Report();
  clock.Advance(absl::Seconds(4));
  ASSERT_TRUE(provider->ForNpu("RBLN-CA12").ok());
  EXPECT_EQ(Runs(), 1u);
  clock.Advance(absl::Seconds(2));
  ASSERT_TRUE(provider->ForNpu("RBLN-CA12").ok());
  EXPECT_EQ(Runs(), 2u);
}

// A caller that must not block asks first: only a fresh answer is at hand.
TEST_F(ProbeProviderTest, AnswersWithoutWaitingOnlyWhileTheAnswerIsFresh) {
  FakeClock clock;
  std::unique_ptr<DramProvider> provider = CachingAtomProvider(&clock);
  EXPECT_FALSE(provider->AnswersWithoutWaiting());  // never probed
  ASSERT_TRUE(provider->ForNpu("RBLN-CA12").ok());
  EXPECT_TRUE(provider->AnswersWithoutWaiting());
  clock.Advance(absl::Seconds(6));
  EXPECT_FALSE(provider->AnswersWithoutWaiting());
  EXPECT_EQ(Runs(), 1u);  // asking probes nothing
  EXPECT_TRUE(NewSpecTableProvider()->AnswersWithoutWaiting());
}

// A caller may keep what it made from an answer while the generation stays.
TEST_F(ProbeProviderTest, TheGenerationMovesWithEveryProbe) {
  FakeClock clock;
  std::unique_ptr<DramProvider> provider = CachingAtomProvider(&clock);
  EXPECT_EQ(provider->AnswersGeneration(), 0u);  // never probed
  ASSERT_TRUE(provider->ForNpu("RBLN-CA12").ok());
  const uint64_t first = provider->AnswersGeneration();
  EXPECT_NE(first, 0u);
  clock.Advance(absl::Seconds(4));
  ASSERT_TRUE(provider->ForNpu("RBLN-CA12").ok());
  EXPECT_EQ(provider->AnswersGeneration(), first);
  // Stale: the next answer probes again, so none is vouched for.
  clock.Advance(absl::Seconds(2));
  EXPECT_EQ(provider->AnswersGeneration(), 0u);
  EXPECT_EQ(Runs(), 1u);  // asking probes nothing
  ASSERT_TRUE(provider->ForNpu("RBLN-CA12").ok());
  const uint64_t second = provider->AnswersGeneration();
  EXPECT_NE(second, 0u);
  EXPECT_NE(second, first);
  // The spec table and an override never change.
  EXPECT_NE(NewSpecTableProvider()->AnswersGeneration(), 0u);
  EXPECT_NE(NewOverrideProvider({uint64_t{16} << 30, 1})->AnswersGeneration(),
            0u);
}

TEST_F(ProbeProviderTest, FailuresAreCachedToo) {
  // A hanging tool must not cost every request its timeout.
  FakeClock clock;
  ProbeOptions options = HangingOptions(FakeTool("sleep 30"));
  options.cache_ttl = absl::Seconds(5);
  options.clock = [&clock]() { return clock.Now(); };
  std::unique_ptr<DramProvider> provider = NewProbeProvider(options);
  EXPECT_THAT(provider->ForNpu("RBLN-CA12")->warnings, SizeIs(1));
  EXPECT_THAT(provider->ForNpu("RBLN-CA12")->warnings, SizeIs(1));
  EXPECT_EQ(Runs(), 1u);
}

TEST_F(ProbeProviderTest, ZeroTtlProbesEveryTime) {
  std::unique_ptr<DramProvider> provider =
      NewProbeProvider(Options(FakePrinting("rbln-smi-atom-ca12.txt")));
  provider->Report();
  provider->Report();
  provider->Report();
  EXPECT_EQ(Runs(), 3u);
}

TEST_F(ProbeProviderTest, ConcurrentCallersShareOneProbe) {
  ProbeOptions options = Options(FakePrinting("rbln-smi-atom-ca12.txt"));
  options.cache_ttl = absl::Hours(1);
  std::unique_ptr<DramProvider> provider = NewProbeProvider(options);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&provider]() {
      absl::StatusOr<DramChoice> choice = provider->ForNpu("RBLN-CA12");
      EXPECT_TRUE(choice.ok() && choice->warnings.empty());
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(Runs(), 1u);
}

TEST_F(ProbeProviderTest, JsonIsReadWhenTheToolKnowsJ) {
  const std::string tool = FakeTool(
      absl::StrCat("if [ \"$1\" = -j ]; then cat '",
                   testing::TestdataPath("rbln-smi/rbln-smi-json-ca12.json"),
                   "'; else echo 'table asked'; exit 9; fi"));
  std::unique_ptr<DramProvider> provider = NewProbeProvider(Options(tool));
  DeviceReport report = provider->Report();
  EXPECT_THAT(report.warnings, IsEmpty());
  ASSERT_THAT(report.devices, SizeIs(2));
  // Exact bytes, where the table prints 2.4GB.
  EXPECT_EQ(report.devices[0].used_bytes, 5100273664u);
  EXPECT_EQ(report.devices[0].device_node, "/dev/rbln0");
  EXPECT_EQ(Runs(), 1u);
  absl::StatusOr<DramChoice> choice = provider->ForNpu("RBLN-CA12");
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_THAT(choice->warnings, IsEmpty());  // -j's total is the spec's
  EXPECT_THAT(choice->source, HasSubstr("probe: "));
}

TEST_F(ProbeProviderTest, AToolThatRefusesJIsRunPlainlyForItsTable) {
  const std::string tool = FakeTool(absl::StrCat(
      "if [ \"$1\" = -j ]; then echo 'unknown option -j' >&2; exit 2; fi; "
      "cat '",
      testing::TestdataPath("rbln-smi/rbln-smi-atom-ca12.txt"), "'"));
  std::unique_ptr<DramProvider> provider = NewProbeProvider(Options(tool));
  DeviceReport report = provider->Report();
  EXPECT_THAT(report.warnings, IsEmpty());
  ASSERT_THAT(report.devices, SizeIs(2));
  EXPECT_EQ(report.devices[0].used_bytes, 2400000000u);  // the table's 2.4GB
  EXPECT_EQ(Runs(), 2u);
}

TEST_F(ProbeProviderTest, AToolThatIgnoresJIsReadOnceAsATable) {
  std::unique_ptr<DramProvider> provider =
      NewProbeProvider(Options(FakePrinting("rbln-smi-atom-ca12.txt")));
  DeviceReport report = provider->Report();
  ASSERT_THAT(report.devices, SizeIs(2));
  EXPECT_EQ(report.devices[0].used_bytes, 2400000000u);
  EXPECT_EQ(Runs(), 1u);
}

TEST_F(ProbeProviderTest, UsageOnStdoutForJIsFollowedByAPlainRun) {
  const std::string tool = FakeTool(absl::StrCat(
      "if [ \"$1\" = -j ]; then echo 'usage: rbln-smi [-a]'; exit 0; fi; "
      "cat '",
      testing::TestdataPath("rbln-smi/rbln-smi-rebel-cr13.txt"), "'"));
  std::unique_ptr<DramProvider> provider = NewProbeProvider(Options(tool));
  EXPECT_THAT(provider->Report().devices, SizeIs(4));
  EXPECT_EQ(Runs(), 2u);
}

TEST_F(ProbeProviderTest, UnreadableJsonFailsWithoutFallingBackToTheTable) {
  const std::string tool = FakeTool(absl::StrCat(
      "if [ \"$1\" = -j ]; then echo '{\"devices\": [{\"npu\": \"0\"}]}'; "
      "exit 0; fi; cat '",
      testing::TestdataPath("rbln-smi/rbln-smi-atom-ca12.txt"), "'"));
  std::unique_ptr<DramProvider> provider = NewProbeProvider(Options(tool));
  ExpectSpecFallback(*provider,
                     absl::StrCat("cannot read the output of ", tool,
                                  " -j: devices[0] (npu 0) has no memory "
                                  "figures"));
  EXPECT_EQ(Runs(), 2u);  // ForNpu and Report, each -j only
}

TEST_F(ProbeProviderTest, ProbeNowProbesAfreshAndRefreshesTheCache) {
  // The fake prints -j's JSON with `used` read from a file the test writes.
  const std::string used = dir_.Join("used");
  testing::WriteFileOrDie(used, "1000");
  const std::string tool = FakeTool(absl::StrCat(
      "printf '{\"devices\": [{\"npu\": \"0\", \"name\": \"RBLN-CA12\", "
      "\"device\": \"rbln0\", \"memory\": {\"used\": \"%s\", \"total\": "
      "\"16877879296\"}}]}' \"$(cat '",
      used, "')\""));
  FakeClock clock;
  ProbeOptions options = Options(tool);
  options.cache_ttl = absl::Seconds(5);
  options.clock = [&clock]() { return clock.Now(); };
  std::unique_ptr<DramProvider> provider = NewProbeProvider(options);
  ASSERT_THAT(provider->Report().devices, SizeIs(1));
  EXPECT_EQ(provider->Report().devices[0].used_bytes, 1000u);
  EXPECT_EQ(Runs(), 1u);
  const uint64_t generation = provider->AnswersGeneration();

  testing::WriteFileOrDie(used, "7000");
  // Within the TTL the cache still answers...
  EXPECT_EQ(provider->Report().devices[0].used_bytes, 1000u);
  // ...but ProbeNow runs the tool again.
  absl::StatusOr<std::vector<ProbedDevice>> now = provider->ProbeNow();
  ASSERT_TRUE(now.ok()) << now.status();
  ASSERT_THAT(*now, SizeIs(1));
  EXPECT_EQ((*now)[0].used_bytes, 7000u);
  EXPECT_EQ(Runs(), 2u);
  // Its answer is the cached one now.
  EXPECT_EQ(provider->Report().devices[0].used_bytes, 7000u);
  EXPECT_EQ(Runs(), 2u);
  EXPECT_NE(provider->AnswersGeneration(), generation);
}

TEST_F(ProbeProviderTest, ProbeNowRefusesFiguresThatAreNotALiveProbe) {
  testing::TempDir empty;
  ProbeOptions no_tool = Options("");
  no_tool.search_path = empty.path();
  const std::string failing = FakeTool("echo 'no driver' >&2; exit 3");
  const struct {
    std::unique_ptr<DramProvider> provider;
    std::string source;
  } cases[] = {
      {NewSpecTableProvider(), "from the spec table (the device probe is off)"},
      {NewOverrideProvider({uint64_t{16} << 30, 1}),
       "from the override of the device DRAM (--device-dram)"},
      {NewProbeProvider(no_tool),
       "from the spec table (no rbln-smi or rbln-stat on PATH)"},
      {NewProbeProvider(Options(failing)),
       absl::StrCat("from the spec table (the probe of ", failing,
                    " failed: ", failing, " exited with status 3: no driver)")},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.source);
    absl::StatusOr<std::vector<ProbedDevice>> now = c.provider->ProbeNow();
    EXPECT_EQ(now.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(now.status().message(),
                AllOf(HasSubstr(c.source),
                      HasSubstr("not a live probe, so a `free` budget cannot "
                                "be computed; give a byte budget, or reserve "
                                "the other models with --beside")));
  }
}

}  // namespace
}  // namespace rbln
