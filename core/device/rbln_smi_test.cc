#include "core/device/rbln_smi.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kGiB = uint64_t{1} << 30;

std::string Sample(absl::string_view name) {
  return testing::ReadFileOrDie(
      testing::TestdataPath(absl::StrCat("rbln-smi/", name)));
}

// floor(tenths / 10 * 2^30): what "15.7GiB" means, computed independently of
// the parser's integer arithmetic.
uint64_t TenthsOfGib(uint64_t tenths) { return tenths * kGiB / 10; }

// The box of the CA12 sample up to its rows, for hand-made variations.
constexpr char kHeader[] =
    "+-----+-----------+---------+---------------------+\n"
    "| NPU |    Name   | Device  |  Memory(used/total) |\n"
    "+-----+-----------+---------+---------------------+\n";
constexpr char kBorder[] =
    "+-----+-----------+---------+---------------------+\n";

TEST(ParseRblnSmiTest, AtomSampleGivesBothDevicesExactly) {
  absl::StatusOr<std::vector<ProbedDevice>> devices =
      ParseRblnSmi(Sample("rbln-smi-atom-ca12.txt"));
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_EQ(devices->size(), 2u);
  const ProbedDevice& d0 = (*devices)[0];
  EXPECT_EQ(d0.index, 0);
  EXPECT_EQ(d0.name, "RBLN-CA12");
  EXPECT_EQ(d0.device_node, "rbln0");
  EXPECT_EQ(d0.used_bytes, 2400000000u);  // 2.4GB: powers of 1000
  EXPECT_EQ(d0.total_bytes, TenthsOfGib(157));
  EXPECT_EQ(d0.total_bytes, static_cast<uint64_t>(
                                std::floor(15.7 * static_cast<double>(kGiB))));
  const ProbedDevice& d1 = (*devices)[1];
  EXPECT_EQ(d1.index, 1);
  EXPECT_EQ(d1.name, "RBLN-CA12");
  EXPECT_EQ(d1.device_node, "rbln1");
  EXPECT_EQ(d1.used_bytes, 0u);
  EXPECT_EQ(d1.total_bytes, TenthsOfGib(157));
}

TEST(ParseRblnSmiTest, RebelSampleWithDoubleRuleAndCellsTouchingTheEdge) {
  absl::StatusOr<std::vector<ProbedDevice>> devices =
      ParseRblnSmi(Sample("rbln-smi-rebel-cr13.txt"));
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_EQ(devices->size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const ProbedDevice& d = (*devices)[i];
    EXPECT_EQ(d.index, i);
    EXPECT_EQ(d.name, "RBLN-CR13");
    EXPECT_EQ(d.device_node, absl::StrCat("rbln", i));
    EXPECT_EQ(d.total_bytes, 140 * kGiB);
  }
  EXPECT_EQ((*devices)[0].used_bytes, 0u);
  // "12.5GiB / 140.0GiB|": no space before the box's edge.
  EXPECT_EQ((*devices)[3].used_bytes, 12 * kGiB + kGiB / 2);
}

TEST(ParseRblnSmiTest, LegacyRblnStatLayout) {
  absl::StatusOr<std::vector<ProbedDevice>> devices =
      ParseRblnSmi(Sample("rbln-smi-legacy-stat.txt"));
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_EQ(devices->size(), 2u);
  EXPECT_EQ((*devices)[0].used_bytes, TenthsOfGib(24));  // 2.4GiB
  EXPECT_EQ((*devices)[0].total_bytes, TenthsOfGib(157));
  EXPECT_EQ((*devices)[1].device_node, "rbln1");
  EXPECT_EQ((*devices)[1].used_bytes, 0u);
}

TEST(ParseRblnSmiTest, FindsColumnsByNameWhenReorderedOrExtended) {
  const std::string text = absl::StrCat(
      "+---+---+---+---+---+\n",
      "| Memory (used/total) | Serial | npu | Device | NAME | Temp |\n",
      "+---+---+---+---+---+\n",
      "| 512MiB / 15.7GiB | XY-1 | 3 | rbln3 | RBLN-CA22 | 40C |\n",
      "| 1.5KB / 140.0GiB | XY-2 | 7 | rbln7 | RBLN-CR03 | 41C |\n",
      "+---+---+---+---+---+\n");
  absl::StatusOr<std::vector<ProbedDevice>> devices = ParseRblnSmi(text);
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_EQ(devices->size(), 2u);
  EXPECT_EQ((*devices)[0].index, 3);
  EXPECT_EQ((*devices)[0].name, "RBLN-CA22");
  EXPECT_EQ((*devices)[0].device_node, "rbln3");
  EXPECT_EQ((*devices)[0].used_bytes, 512u << 20);
  EXPECT_EQ((*devices)[1].index, 7);
  EXPECT_EQ((*devices)[1].used_bytes, 1500u);
  EXPECT_EQ((*devices)[1].total_bytes, 140 * kGiB);
}

TEST(ParseRblnSmiTest, StopsAtTheEndOfTheDeviceBox) {
  // A second table with an NPU column after the device box is not read.
  const std::string text = absl::StrCat(
      kHeader, "| 0   | RBLN-CA12 | rbln0   |   0.0B / 15.7GiB    |\n", kBorder,
      kHeader, "| 1   | garbage | here | nothing / useful |\n", kBorder);
  absl::StatusOr<std::vector<ProbedDevice>> devices = ParseRblnSmi(text);
  ASSERT_TRUE(devices.ok()) << devices.status();
  EXPECT_EQ(devices->size(), 1u);
}

TEST(ParseRblnSmiTest, WindowsLineEndingsAreFine) {
  const std::string text =
      absl::StrReplaceAll(Sample("rbln-smi-atom-ca12.txt"), {{"\n", "\r\n"}});
  absl::StatusOr<std::vector<ProbedDevice>> devices = ParseRblnSmi(text);
  ASSERT_TRUE(devices.ok()) << devices.status();
  EXPECT_EQ(devices->size(), 2u);
}

struct BadCase {
  std::string name;
  std::string text;
  std::string message;  // a part of the error
};

class ParseRblnSmiErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ParseRblnSmiErrorTest, SaysWhatWasWrong) {
  absl::StatusOr<std::vector<ProbedDevice>> devices =
      ParseRblnSmi(GetParam().text);
  ASSERT_FALSE(devices.ok()) << "parsed " << devices->size() << " device(s)";
  EXPECT_EQ(devices.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(devices.status().message()),
              HasSubstr(GetParam().message));
}

std::string CutSample(size_t lines_kept, size_t extra_chars) {
  const std::string sample = Sample("rbln-smi-atom-ca12.txt");
  size_t end = 0;
  for (size_t i = 0; i < lines_kept; ++i) end = sample.find('\n', end) + 1;
  return sample.substr(0, end + extra_chars);
}

INSTANTIATE_TEST_SUITE_P(
    Garbled, ParseRblnSmiErrorTest,
    ::testing::Values(
        BadCase{"Empty", "", "no device table header"},
        BadCase{"NotATable", "rbln-smi: command not supported\n",
                "no device table header"},
        BadCase{"HeaderLacksMemory",
                "| NPU | Name | Device | Temp |\n+---+\n| 0 | a | b | c |\n",
                "no Memory(used/total) column"},
        // The sample cut right after its header row, and after the rule
        // below it.
        BadCase{"HeaderOnly", CutSample(4, 0), "truncated table"},
        BadCase{"HeaderAndRuleOnly", CutSample(5, 0), "truncated table"},
        // Cut in the middle of the second device row.
        BadCase{"CutMidRow", CutSample(6, 40), "truncated table: line 7"},
        // Complete rows but no closing border.
        BadCase{"NoClosingBorder", CutSample(7, 0),
                "ends after 2 device row(s)"},
        BadCase{"NoDevices", absl::StrCat(kHeader, kBorder), "no devices"},
        BadCase{"UnknownUnit",
                absl::StrCat(kHeader,
                             "| 0 | RBLN-CA12 | rbln0 | 12.5XB / 15.7GiB |\n",
                             kBorder),
                "\"12.5XB\" has an unknown unit \"XB\""},
        BadCase{
            "SizeWithoutUnit",
            absl::StrCat(kHeader, "| 0 | RBLN-CA12 | rbln0 | 0 / 15.7GiB |\n",
                         kBorder),
            "has no unit"},
        BadCase{
            "MemoryNotUsedSlashTotal",
            absl::StrCat(kHeader, "| 0 | RBLN-CA12 | rbln0 | N/A |\n", kBorder),
            "memory used"},
        BadCase{"MemoryWithoutSlash",
                absl::StrCat(kHeader, "| 0 | RBLN-CA12 | rbln0 | 15.7GiB |\n",
                             kBorder),
                "is not USED / TOTAL"},
        BadCase{"UsedAboveTotal",
                absl::StrCat(kHeader,
                             "| 0 | RBLN-CA12 | rbln0 | 16GiB / 15.7GiB |\n",
                             kBorder),
                "within a non-zero total"},
        BadCase{
            "EmptyName",
            absl::StrCat(kHeader, "| 0 |  | rbln0 | 0B / 15.7GiB |\n", kBorder),
            "empty Name"},
        BadCase{"TextInsideTheTable",
                absl::StrCat(kHeader, "| 0 | RBLN-CA12 | rbln0 | 0B / 1GiB |\n",
                             "Segmentation fault\n", kBorder),
                "line 5 of the device table is not a device row"},
        BadCase{
            "NegativeIndex",
            absl::StrCat(kHeader, "| -1 | RBLN-CA12 | rbln0 | 0B / 1GiB |\n",
                         kBorder),
            "not a device row"}),
    [](const ::testing::TestParamInfo<BadCase>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace rbln
