// End-to-end tests of the NPU DRAM query (docs/device-dram.md): the real
// rbln-artifactd with a fake rbln-smi (a shell script printing a recorded
// device table, or failing), and the rbln-artifact client run as a user runs
// it. They check what reaches the user: the device table, the DRAM source of a
// fit, the fall-back warnings, and the order of choice (override > probe >
// spec).
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/daemon_testing.h"

namespace rbln::e2e {
namespace {

using ::rbln::testing::TestdataPath;
using ::rbln::testing::WriteFileOrDie;
using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
// An RBLN-CA12 node, exactly (docs/memory-model.md); rbln-smi prints "15.7GiB".
constexpr uint64_t kCaAvailable = 16 * kGiB - 288 * kMiB;

// A store with one synthesized RBLN-CA12 artifact ("llama", four nodes);
// each test starts the daemon with the DRAM flags it is about.
class E2eDeviceTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(
        Synthesize("llama3-8b-ca12-tp4", StorePath("llama")));
  }

  // A fake tool: an executable /bin/sh script running `body`.
  std::string FakeTool(absl::string_view name, absl::string_view body) {
    const std::string path = root_.Join(name);
    WriteFileOrDie(path, absl::StrCat("#!/bin/sh\n", body, "\n"));
    EXPECT_EQ(chmod(path.c_str(), 0755), 0);
    return path;
  }

  // A fake rbln-smi printing a recorded sample.
  std::string FakeSmi(absl::string_view sample) {
    return FakeTool(absl::StrCat("smi-", sample),
                    absl::StrCat("cat ", ShellQuote(TestdataPath(absl::StrCat(
                                             "rbln-smi/", sample)))));
  }

  // A dry-run fit of ./llama at 80%, as JSON. A fatal failure unless the
  // client exits 0 with a reply that has the fields the tests read.
  void DryRunFit(Outcome* outcome, rapidjson::Document* reply) {
    *outcome =
        Cli("--set-memory-budget 0.8 --model-id ./llama --dry-run --json");
    ASSERT_EQ(outcome->code, 0) << *outcome;
    *reply = ParseJson(*outcome);
    ASSERT_TRUE(reply->IsObject() && reply->HasMember("warnings") &&
                (*reply)["warnings"].IsArray() && reply->HasMember("fit") &&
                (*reply)["fit"].HasMember("dram_source"))
        << *outcome;
  }
};

TEST_F(E2eDeviceTest, DeviceInfoShowsTheProbedDevices) {
  const std::string smi = FakeSmi("rbln-smi-atom-ca12.txt");
  ASSERT_NO_FATAL_FAILURE(Start({"--rbln-smi", smi}));
  Outcome o = Cli("--device-info");
  ASSERT_EQ(o.code, 0) << o;
  EXPECT_THAT(o.out, HasSubstr(absl::StrCat("source: probe: ", smi)));
  // Total and available from the spec table by name, used from the probe.
  EXPECT_THAT(o.out, ContainsRegex("\n +0 +RBLN-CA12 +RBLN-CA +/dev/rbln0 "
                                   "+16\\.00 +2\\.24 +15\\.72 +1 +probe\n"));
  EXPECT_THAT(o.out, ContainsRegex("\n +1 +RBLN-CA12 +RBLN-CA +/dev/rbln1 "
                                   "+16\\.00 +0\\.00 +15\\.72 +1 +probe\n"));
  EXPECT_THAT(o.out, Not(HasSubstr("RBLN-CA*")));  // no spec-table rows
  EXPECT_EQ(o.err, "");

  Outcome json = Cli("--device-info --json");
  ASSERT_EQ(json.code, 0) << json;
  rapidjson::Document doc = ParseJson(json);
  ASSERT_TRUE(doc["devices"].IsArray());
  ASSERT_EQ(doc["devices"].Size(), 2u);
  const rapidjson::Value& rbln0 = doc["devices"][0];
  EXPECT_EQ(rbln0["index"].GetInt(), 0);
  EXPECT_STREQ(rbln0["name"].GetString(), "RBLN-CA12");
  EXPECT_STREQ(rbln0["device_node"].GetString(), "/dev/rbln0");
  EXPECT_STREQ(rbln0["source"].GetString(), "probe");
  EXPECT_EQ(JsonU64(rbln0, "used_bytes"), 2400000000u);  // "2.4GB"
  EXPECT_EQ(JsonU64(rbln0, "available_bytes"), kCaAvailable);
  EXPECT_EQ(rbln0["chiplets"].GetUint(), 1u);
  EXPECT_STREQ(doc["devices"][1]["device_node"].GetString(), "/dev/rbln1");
}

TEST_F(E2eDeviceTest, FitWithAProbedDeviceUsesTheExactSpecBytes) {
  ASSERT_NO_FATAL_FAILURE(Start({"--rbln-smi", "none"}));
  Outcome spec_outcome;
  rapidjson::Document spec;
  ASSERT_NO_FATAL_FAILURE(DryRunFit(&spec_outcome, &spec));
  EXPECT_THAT(std::string(spec["fit"]["dram_source"].GetString()),
              AllOf(HasSubstr("spec table"), Not(HasSubstr("probe"))));

  const std::string smi = FakeSmi("rbln-smi-atom-ca12.txt");
  ASSERT_NO_FATAL_FAILURE(Restart({"--rbln-smi", smi}));
  Outcome probe_outcome;
  rapidjson::Document probe;
  ASSERT_NO_FATAL_FAILURE(DryRunFit(&probe_outcome, &probe));
  EXPECT_EQ(JsonU64(probe, "new_num_blocks"), JsonU64(spec, "new_num_blocks"));
  // 80% of 16 GiB - 288 MiB, not of the 15.7 GiB rbln-smi prints.
  EXPECT_EQ(JsonU64(probe["fit"], "budget_per_chiplet"), kCaAvailable * 8 / 10);
  EXPECT_EQ(JsonU64(probe["fit"], "budget_per_chiplet"),
            JsonU64(spec["fit"], "budget_per_chiplet"));
  EXPECT_THAT(std::string(probe["fit"]["dram_source"].GetString()),
              AllOf(HasSubstr(absl::StrCat("probe: ", smi)),
                    HasSubstr("RBLN-CA12 rbln0")));
  EXPECT_EQ(probe["warnings"].Size(), 0u) << probe_outcome;

  // The human output says where the DRAM figure came from too.
  Outcome human = Cli("--set-memory-budget 0.8 --model-id ./llama --dry-run");
  ASSERT_EQ(human.code, 0) << human;
  EXPECT_THAT(human.err, HasSubstr(absl::StrCat("DRAM: probe: ", smi)));
}

TEST_F(E2eDeviceTest, FailingProbeStillFitsFromTheSpecTableWithAWarning) {
  ASSERT_NO_FATAL_FAILURE(Start({"--rbln-smi", "none"}));
  Outcome spec_outcome;
  rapidjson::Document spec;
  ASSERT_NO_FATAL_FAILURE(DryRunFit(&spec_outcome, &spec));
  const uint64_t spec_blocks = JsonU64(spec, "new_num_blocks");

  const std::string smi =
      FakeTool("broken-smi", "echo 'rbln-smi: no driver' >&2; exit 3");
  ASSERT_NO_FATAL_FAILURE(Restart({"--rbln-smi", smi}));
  Outcome o = Cli("--set-memory-budget 0.8 --model-id ./llama --dry-run");
  ASSERT_EQ(o.code, 0) << o;
  EXPECT_THAT(o.err,
              HasSubstr(absl::StrCat("warning: device probe failed, so the "
                                     "DRAM figures come from the spec table: ",
                                     smi,
                                     " exited with status 3: rbln-smi: "
                                     "no driver\n")));
  EXPECT_THAT(o.out, HasSubstr(absl::StrCat("-> ", spec_blocks)));

  Outcome json_outcome;
  rapidjson::Document json;
  ASSERT_NO_FATAL_FAILURE(DryRunFit(&json_outcome, &json));
  EXPECT_EQ(JsonU64(json, "new_num_blocks"), spec_blocks);
  ASSERT_EQ(json["warnings"].Size(), 1u) << json_outcome;
  EXPECT_THAT(std::string(json["warnings"][0].GetString()),
              HasSubstr("exited with status 3"));

  Outcome devices = Cli("--device-info");
  ASSERT_EQ(devices.code, 0) << devices;
  EXPECT_THAT(devices.out, HasSubstr("spec table (the probe of"));
  EXPECT_THAT(devices.out, ContainsRegex("RBLN-CA\\* +RBLN-CA +- +16\\.00"));
  EXPECT_THAT(devices.err, HasSubstr("warning: device probe failed"));
}

TEST_F(E2eDeviceTest, HangingProbeIsKilledAndTheFitStillAnswers) {
  const std::string smi = FakeTool("hanging-smi", "sleep 30");
  ASSERT_NO_FATAL_FAILURE(
      Start({"--rbln-smi", smi, "--probe-timeout-seconds", "0.3"}));
  Outcome o = Cli("--set-memory-budget 0.8 --model-id ./llama --dry-run");
  ASSERT_EQ(o.code, 0) << o;
  EXPECT_THAT(o.err, HasSubstr(absl::StrCat(
                         "warning: device probe failed, so the DRAM figures "
                         "come from the spec table: ",
                         smi, " did not answer within 0.3 s; killed it")));
}

TEST_F(E2eDeviceTest, ProbedDeviceOfAnotherFamilyIsAWarningInTheReply) {
  ASSERT_NO_FATAL_FAILURE(
      Start({"--rbln-smi", FakeSmi("rbln-smi-rebel-cr13.txt")}));
  Outcome o = Cli("--set-memory-budget 0.8 --model-id ./llama --dry-run");
  ASSERT_EQ(o.code, 0) << o;
  EXPECT_THAT(o.err, HasSubstr("warning: the artifact targets RBLN-CA12 "
                               "(RBLN-CA*) but "));
  EXPECT_THAT(o.err, HasSubstr("RBLN-CR13 rbln0"));
  // The artifact's target decides the spec: RBLN-CA, from the table.
  EXPECT_THAT(o.err, HasSubstr("DRAM: spec table: RBLN-CA*"));
}

TEST_F(E2eDeviceTest, ConfigFileSetsTheProbeAndAnOverrideWinsOverIt) {
  const std::string smi = FakeSmi("rbln-smi-atom-ca12.txt");
  const std::string config = root_.Join("rbln-artifactd.toml");
  WriteFileOrDie(
      config,
      absl::StrCat("# rbln-artifactd settings\n", "store = \"", store_, "\"\n",
                   "listen = [\"", address_, "\"]\n", "log-level = \"warn\"\n",
                   "rbln-smi = \"", smi, "\"\n"));
  ASSERT_NO_FATAL_FAILURE(StartWithFlags(address_, {"--config", config}));
  Outcome o = Cli("--device-info");
  ASSERT_EQ(o.code, 0) << o;
  EXPECT_THAT(o.out, HasSubstr(absl::StrCat("source: probe: ", smi)));
  EXPECT_THAT(o.out, HasSubstr("/dev/rbln1"));

  // An override, here on the command line over the same config file, comes
  // first in the order of choice.
  Stop();
  ASSERT_NO_FATAL_FAILURE(
      StartWithFlags(address_, {"--config", config, "--device-dram", "12GiB"}));
  Outcome fit;
  rapidjson::Document doc;
  ASSERT_NO_FATAL_FAILURE(DryRunFit(&fit, &doc));
  EXPECT_THAT(std::string(doc["fit"]["dram_source"].GetString()),
              HasSubstr("override"));
  EXPECT_EQ(JsonU64(doc["fit"], "budget_per_chiplet"), 12 * kGiB * 8 / 10);
}

// A count the device cannot hold is refused, in place and into a new
// directory, a shrink that still does not fit too; nothing is written. A dry
// run says so and exits 0; --force writes it, with the warning.
TEST_F(E2eDeviceTest, ACountTheDeviceCannotHoldIsRefusedUnlessForced) {
  ASSERT_NO_FATAL_FAILURE(Start({"--rbln-smi", "none"}));
  Outcome described = Cli("--describe --model-id ./llama --json");
  ASSERT_EQ(described.code, 0) << described;
  const rapidjson::Document description = ParseJson(described);
  const uint64_t max_fitting = JsonU64(description, "max_fitting_num_blocks");
  const std::string fitting_text =
      max_fitting == JsonU64(description, "num_full_blocks")
          ? absl::StrCat("the full count of ", max_fitting, " fits")
          : absl::StrCat("the largest count that fits is ", max_fitting);
  const auto before = testing::HashTree(store_ + "/llama");

  for (const char* where : {"", " --output-dir ./copy"}) {
    SCOPED_TRACE(where);
    Outcome o = Cli(absl::StrCat(
        "--set-kvcache-num-blocks 100000 --model-id ./llama --json", where));
    EXPECT_EQ(o.code, 1) << o;
    rapidjson::Document error = ParseJson(o);
    ASSERT_TRUE(error.HasMember("error")) << o;
    const rapidjson::Value& details = error["error"]["details"];
    EXPECT_EQ(std::string(details["reason"].GetString()), "EXCEEDS_DEVICE");
    EXPECT_EQ(JsonU64(details, "max_fitting_num_blocks"), max_fitting);
    EXPECT_THAT(o.err,
                AllOf(HasSubstr("FAILED_PRECONDITION"),
                      HasSubstr("does not fit the RBLN-CA device: node 0 "
                                "chiplet 0 needs"),
                      HasSubstr(absl::StrCat(kCaAvailable, " bytes")),
                      HasSubstr(fitting_text), HasSubstr("nothing was written"),
                      HasSubstr("--force")));
    EXPECT_EQ(testing::HashTree(store_ + "/llama"), before);
    EXPECT_FALSE(std::filesystem::exists(store_ + "/copy"));
  }

  Outcome dry = Cli(
      "--set-kvcache-num-blocks 100000 --model-id ./llama --dry-run --json");
  ASSERT_EQ(dry.code, 0) << dry;
  rapidjson::Document reply = ParseJson(dry);
  ASSERT_TRUE(reply.HasMember("fits_device")) << dry;
  EXPECT_FALSE(reply["fits_device"].GetBool());
  EXPECT_THAT(dry.err, HasSubstr("warning: kvcache_num_blocks 100000 does not "
                                 "fit the RBLN-CA device"));
  Outcome fits = Cli(absl::StrCat("--set-kvcache-num-blocks ", max_fitting,
                                  " --model-id ./llama --dry-run --json"));
  ASSERT_EQ(fits.code, 0) << fits;
  EXPECT_TRUE(ParseJson(fits)["fits_device"].GetBool());

  Outcome forced =
      Cli("--set-kvcache-num-blocks 100000 --model-id ./llama --force");
  ASSERT_EQ(forced.code, 0) << forced;
  EXPECT_THAT(forced.err, HasSubstr("warning: kvcache_num_blocks 100000 does "
                                    "not fit the RBLN-CA device"));
  EXPECT_EQ(CountOnDisk(store_ + "/llama"), 100000u);
  // The same count again writes nothing, so it is answered, not refused.
  const auto forced_tree = testing::HashTree(store_ + "/llama");
  Outcome again = Cli("--set-kvcache-num-blocks 100000 --model-id ./llama");
  EXPECT_EQ(again.code, 0) << again;
  EXPECT_THAT(again.err, AllOf(HasSubstr("(unchanged: nothing was written)"),
                               HasSubstr("does not fit the RBLN-CA device")));
  EXPECT_EQ(testing::HashTree(store_ + "/llama"), forced_tree);

  // A shrink that still does not fit is refused too, in place and into a
  // new directory.
  for (const char* where : {"", " --output-dir ./copy"}) {
    SCOPED_TRACE(where);
    Outcome o = Cli(absl::StrCat(
        "--set-kvcache-num-blocks 50000 --model-id ./llama", where));
    EXPECT_EQ(o.code, 1) << o;
    EXPECT_THAT(o.err, HasSubstr("kvcache_num_blocks 50000 does not fit"));
    EXPECT_EQ(testing::HashTree(store_ + "/llama"), forced_tree);
    EXPECT_FALSE(std::filesystem::exists(store_ + "/copy"));
  }
  // --force never passes the minimum.
  Outcome below =
      Cli("--set-kvcache-num-blocks 1 --model-id ./llama --force --json");
  EXPECT_EQ(below.code, 1) << below;
  EXPECT_THAT(below.out, HasSubstr("BELOW_MIN_BLOCKS"));
}

// An override whose chiplets do not line up with the artifact's: a set is
// written unchecked, saying so; a budget cannot be sized.
TEST_F(E2eDeviceTest, ChipletsThatDoNotLineUpLeaveASetUnchecked) {
  ASSERT_NO_FATAL_FAILURE(Start({"--device-dram", "16GiB,2"}));
  Outcome set = Cli("--set-kvcache-num-blocks 20 --model-id ./llama --json");
  ASSERT_EQ(set.code, 0) << set;
  EXPECT_FALSE(ParseJson(set).HasMember("fits_device")) << set;
  EXPECT_THAT(set.err,
              AllOf(HasSubstr("kvcache_num_blocks 20 was not checked against "
                              "a device"),
                    HasSubstr("1 chiplet(s) per node")));
  EXPECT_EQ(CountOnDisk(store_ + "/llama"), 20u);
  Outcome fit = Cli("--set-memory-budget 0.8 --model-id ./llama");
  EXPECT_EQ(fit.code, 1) << fit;
  EXPECT_THAT(fit.err, HasSubstr("FAILED_PRECONDITION"));
}

TEST_F(E2eDeviceTest, ForceGoesOnlyWithASet) {
  for (const char* args :
       {"--set-memory-budget 0.8 --model-id ./llama --force",
        "--get-kvcache-num-blocks --model-id ./llama --force"}) {
    SCOPED_TRACE(args);
    Outcome o = Cli(args);
    EXPECT_EQ(o.code, 2) << o;
    EXPECT_THAT(o.err,
                HasSubstr("--force goes only with --set-kvcache-num-blocks"));
  }
}

TEST_F(E2eDeviceTest, UnknownConfigEntryIsAStartupError) {
  const std::string config = root_.Join("typo.toml");
  WriteFileOrDie(config, "rbln-smii = \"/usr/bin/rbln-smi\"\n");
  Outcome o =
      Run("rbln-artifactd",
          absl::StrCat("--store ", ShellQuote(store_), " --listen ",
                       ShellQuote(address_), " --config ", ShellQuote(config)));
  EXPECT_NE(o.code, 0) << o;
  EXPECT_NE(o.code, 124) << "the daemon started despite the typo";
  EXPECT_THAT(o.err + o.out, HasSubstr("rbln-smii"));
}

}  // namespace
}  // namespace rbln::e2e
