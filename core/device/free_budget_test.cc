#include "core/device/free_budget.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/device/device_spec.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kCaAvailable = 16 * kGiB - 288 * kMiB;  // 16877879296
constexpr uint64_t kCrAvailable = 140 * kGiB;              // 4 x 35 GiB

MemoryBudget Budget(absl::string_view text) {
  absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse(text);
  EXPECT_TRUE(budget.ok()) << budget.status();
  return budget.ok() ? *budget : MemoryBudget::Free(1, 1);
}

DeviceSpec Spec(absl::string_view npu) {
  absl::StatusOr<DeviceSpec> spec = LookupDeviceSpec(npu);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.value_or(DeviceSpec{});
}

ProbedDevice Device(int index, absl::string_view name, uint64_t used) {
  ProbedDevice device;
  device.index = index;
  device.name = std::string(name);
  device.device_node = absl::StrCat("rbln", index);
  device.used_bytes = used;
  device.total_bytes = kCaAvailable;
  return device;
}

std::vector<ProbedDevice> Sample(absl::string_view name) {
  const std::string text = testing::ReadFileOrDie(
      testing::TestdataPath(absl::StrCat("rbln-smi/", name)));
  absl::StatusOr<std::vector<ProbedDevice>> devices =
      absl::EndsWith(name, ".json") ? ParseRblnSmiJson(text)
                                    : ParseRblnSmi(text);
  EXPECT_TRUE(devices.ok()) << devices.status();
  return devices.value_or(std::vector<ProbedDevice>{});
}

TEST(FreeBudgetTest, TheJsonSampleLeavesWhatDeviceZerosProcessDoesNotHold) {
  absl::StatusOr<std::vector<FreeNodeBudget>> nodes =
      FreeBudgetPerBucket(Budget("free"), Spec("RBLN-CA12"),
                          Sample("rbln-smi-json-ca12.json"), {}, 2);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_THAT(*nodes, SizeIs(2));
  const FreeNodeBudget& n0 = (*nodes)[0];
  EXPECT_EQ(n0.device_index, 0);
  EXPECT_EQ(n0.device_node, "rbln0");
  EXPECT_EQ(n0.available_bytes, kCaAvailable);
  EXPECT_EQ(n0.used_bytes, 5100273664u);
  // 16877879296 - 5100273664, on the one chiplet.
  EXPECT_EQ(n0.node_bytes, 11777605632u);
  EXPECT_EQ(n0.per_chiplet_bytes, 11777605632u);
  ASSERT_THAT(n0.holders, SizeIs(1));
  EXPECT_EQ(n0.holders[0].pid, 41327u);
  const FreeNodeBudget& n1 = (*nodes)[1];
  EXPECT_EQ(n1.device_index, 1);
  EXPECT_EQ(n1.per_chiplet_bytes, kCaAvailable);
  EXPECT_THAT(n1.holders, IsEmpty());
}

TEST(FreeBudgetTest, APercentageOfWhatIsFreeRoundsDownExactly) {
  absl::StatusOr<std::vector<FreeNodeBudget>> nodes =
      FreeBudgetPerBucket(Budget("free-90%"), Spec("RBLN-CA12"),
                          Sample("rbln-smi-json-ca12.json"), {}, 1);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_THAT(*nodes, SizeIs(1));
  // 11777605632 * 0.9 = 10599845068.8
  EXPECT_EQ((*nodes)[0].node_bytes, 10599845068u);
  nodes =
      FreeBudgetPerBucket(MemoryBudget::Free(1, 3), Spec("RBLN-CA12"),
                          {Device(0, "RBLN-CA12", kCaAvailable - 100)}, {}, 1);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_EQ((*nodes)[0].node_bytes, 33u);  // 100 / 3
}

TEST(FreeBudgetTest, RebelSplitsWhatIsFreeOverFourChiplets) {
  // The table sample: rbln3 uses 12.5GiB, the others nothing.
  absl::StatusOr<std::vector<FreeNodeBudget>> nodes =
      FreeBudgetPerBucket(Budget("free-50%"), Spec("RBLN-CR13"),
                          Sample("rbln-smi-rebel-cr13.txt"), {3, 0}, 2);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_THAT(*nodes, SizeIs(2));
  const uint64_t used = 12 * kGiB + 512 * kMiB;
  EXPECT_EQ((*nodes)[0].device_index, 3);
  EXPECT_EQ((*nodes)[0].used_bytes, used);
  EXPECT_EQ((*nodes)[0].node_bytes, (kCrAvailable - used) / 2);
  EXPECT_EQ((*nodes)[0].per_chiplet_bytes, (kCrAvailable - used) / 2 / 4);
  EXPECT_EQ((*nodes)[1].device_index, 0);
  EXPECT_EQ((*nodes)[1].per_chiplet_bytes, kCrAvailable / 2 / 4);
}

TEST(FreeBudgetTest, UseAboveTheAvailableDramLeavesNothing) {
  // A device may show more in use than the spec's available DRAM (the
  // tool's total is its own); that leaves nothing, not an underflow.
  absl::StatusOr<std::vector<FreeNodeBudget>> nodes =
      FreeBudgetPerBucket(Budget("free"), Spec("RBLN-CA12"),
                          {Device(0, "RBLN-CA12", kCaAvailable),
                           Device(1, "RBLN-CA12", kCaAvailable + 1),
                           Device(2, "RBLN-CA12", 16 * kGiB)},
                          {}, 3);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  for (const FreeNodeBudget& node : *nodes) {
    SCOPED_TRACE(node.device_index);
    EXPECT_EQ(node.node_bytes, 0u);
    EXPECT_EQ(node.per_chiplet_bytes, 0u);
  }
}

TEST(FreeBudgetTest, DefaultOrderIsByIndexAndAListTakesItsFirstDevices) {
  const std::vector<ProbedDevice> devices = {Device(2, "RBLN-CA12", 3),
                                             Device(0, "RBLN-CA12", 1),
                                             Device(1, "RBLN-CA12", 2)};
  absl::StatusOr<std::vector<FreeNodeBudget>> nodes =
      FreeBudgetPerBucket(Budget("free"), Spec("RBLN-CA12"), devices, {}, 2);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_THAT(*nodes, SizeIs(2));
  EXPECT_EQ((*nodes)[0].device_index, 0);
  EXPECT_EQ((*nodes)[0].used_bytes, 1u);
  EXPECT_EQ((*nodes)[1].device_index, 1);
  nodes = FreeBudgetPerBucket(Budget("free"), Spec("RBLN-CA12"), devices,
                              {2, 1, 0}, 1);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_THAT(*nodes, SizeIs(1));
  EXPECT_EQ((*nodes)[0].device_index, 2);
  EXPECT_EQ((*nodes)[0].used_bytes, 3u);
}

struct RefuseCase {
  std::string name;
  std::vector<ProbedDevice> devices;
  std::vector<int> chosen;
  int num_nodes;
  absl::StatusCode code;
  std::string message;
};

TEST(FreeBudgetTest, RefusesADeviceListThatDoesNotFitTheGroup) {
  const std::vector<ProbedDevice> two = {Device(0, "RBLN-CA12", 0),
                                         Device(1, "RBLN-CA12", 0)};
  ProbedDevice nameless = Device(1, "", 0);
  nameless.device_node = "";
  const RefuseCase cases[] = {
      {"NotProbed",
       two,
       {1, 5},
       2,
       absl::StatusCode::kInvalidArgument,
       "--devices names device 5, which the probe did not find (it found 0 "
       "(rbln0), 1 (rbln1))"},
      {"Twice",
       two,
       {1, 1},
       2,
       absl::StatusCode::kInvalidArgument,
       "--devices names device 1 twice"},
      {"FewerChosen",
       two,
       {1},
       2,
       absl::StatusCode::kInvalidArgument,
       "the group has 2 nodes but only 1 devices were chosen (--devices 1)"},
      {"FewerProbed",
       two,
       {},
       4,
       absl::StatusCode::kFailedPrecondition,
       "the group has 4 nodes but only 2 devices were probed (0 (rbln0), 1 "
       "(rbln1))"},
      {"NoneProbed",
       {},
       {},
       1,
       absl::StatusCode::kFailedPrecondition,
       "only 0 devices were probed (none)"},
      {"OtherFamily",
       {Device(0, "RBLN-CA12", 0), Device(1, "RBLN-CR13", 0)},
       {},
       2,
       absl::StatusCode::kFailedPrecondition,
       "device 1 (rbln1) is an RBLN-CR13, not an RBLN-CA* device: the "
       "artifact cannot run on it"},
      {"UnknownFamily",
       {Device(0, "RBLN-XY99", 0)},
       {},
       1,
       absl::StatusCode::kFailedPrecondition,
       "device 0 (rbln0) is an RBLN-XY99, which the spec table does not know, "
       "not an RBLN-CA* device"},
      {"Nameless",
       {Device(0, "RBLN-CA12", 0), nameless},
       {},
       2,
       absl::StatusCode::kFailedPrecondition,
       "device 1 does not say its NPU, not an RBLN-CA* device"},
      {"NoNodes",
       two,
       {},
       0,
       absl::StatusCode::kInvalidArgument,
       "a group of 0 nodes"},
  };
  for (const RefuseCase& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<std::vector<FreeNodeBudget>> nodes = FreeBudgetPerBucket(
        Budget("free"), Spec("RBLN-CA12"), c.devices, c.chosen, c.num_nodes);
    ASSERT_FALSE(nodes.ok());
    EXPECT_EQ(nodes.status().code(), c.code);
    EXPECT_THAT(nodes.status().message(), HasSubstr(c.message));
  }
}

TEST(FreeBudgetTest, AnotherFamilyOutsideTheGroupIsNoConcern) {
  // Device 1 is a REBEL, but a one-node group sits on device 0 only.
  absl::StatusOr<std::vector<FreeNodeBudget>> nodes = FreeBudgetPerBucket(
      Budget("free"), Spec("RBLN-CA12"),
      {Device(0, "RBLN-CA12", 0), Device(1, "RBLN-CR13", 0)}, {}, 1);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_THAT(*nodes, SizeIs(1));
}

TEST(FreeBudgetTest, OnlyAFreeBudget) {
  absl::StatusOr<std::vector<FreeNodeBudget>> nodes = FreeBudgetPerBucket(
      Budget("90%"), Spec("RBLN-CA12"), {Device(0, "RBLN-CA12", 0)}, {}, 1);
  EXPECT_EQ(nodes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(nodes.status().message(),
              AllOf(HasSubstr("90%"), HasSubstr("is not free")));
}

}  // namespace
}  // namespace rbln
