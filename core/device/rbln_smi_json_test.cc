#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/device/rbln_smi.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

std::string Sample(absl::string_view name) {
  return testing::ReadFileOrDie(
      testing::TestdataPath(absl::StrCat("rbln-smi/", name)));
}

// {"devices": [<devices>]} with `rest` appended to the top-level object.
std::string Json(absl::string_view devices, absl::string_view rest = "") {
  return absl::StrCat("{\"devices\": [", devices, "]", rest, "}");
}

// One device with memory figures as given (JSON text, quoted or not).
std::string Device(absl::string_view npu, absl::string_view used,
                   absl::string_view total) {
  return absl::StrCat("{\"npu\": ", npu, ", \"name\": \"RBLN-CA12\", ",
                      "\"device\": \"rbln", npu == "\"1\"" ? "1" : "0",
                      "\", \"memory\": {\"used\": ", used,
                      ", \"total\": ", total, "}}");
}

TEST(ParseRblnSmiJsonTest, SampleGivesBothDevicesAndWhoHoldsTheMemory) {
  absl::StatusOr<std::vector<ProbedDevice>> devices =
      ParseRblnSmiJson(Sample("rbln-smi-json-ca12.json"));
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_THAT(*devices, SizeIs(2));
  const ProbedDevice& d0 = (*devices)[0];
  EXPECT_EQ(d0.index, 0);
  EXPECT_EQ(d0.name, "RBLN-CA12");
  EXPECT_EQ(d0.device_node, "rbln0");
  EXPECT_EQ(d0.used_bytes, 5100273664u);
  // Exact: 16 GiB - 288 MiB, not the table's rounded 15.7GiB.
  EXPECT_EQ(d0.total_bytes, (uint64_t{16} << 30) - (uint64_t{288} << 20));
  ASSERT_THAT(d0.contexts, SizeIs(1));
  EXPECT_EQ(d0.contexts[0].pid, 41327u);
  EXPECT_EQ(d0.contexts[0].process, "python3");
  EXPECT_EQ(d0.contexts[0].bytes, 5100273664u);
  const ProbedDevice& d1 = (*devices)[1];
  EXPECT_EQ(d1.index, 1);
  EXPECT_EQ(d1.device_node, "rbln1");
  EXPECT_EQ(d1.used_bytes, 0u);
  EXPECT_EQ(d1.total_bytes, d0.total_bytes);
  EXPECT_THAT(d1.contexts, IsEmpty());
}

TEST(ParseRblnSmiJsonTest, OnlyTheMemoryFiguresAreRequired) {
  absl::StatusOr<std::vector<ProbedDevice>> devices = ParseRblnSmiJson(
      Json("{\"memory\": {\"used\": \"1\", \"total\": \"2\"}}, "
           "{\"memory\": {\"used\": \"0\", \"total\": "
           "\"18446744073709551615\"}}"));
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_THAT(*devices, SizeIs(2));
  // Without npu, the position is the index.
  EXPECT_EQ((*devices)[0].index, 0);
  EXPECT_EQ((*devices)[1].index, 1);
  EXPECT_EQ((*devices)[0].name, "");
  EXPECT_EQ((*devices)[0].device_node, "");
  EXPECT_EQ((*devices)[0].used_bytes, 1u);
  EXPECT_EQ((*devices)[1].total_bytes, UINT64_MAX);
}

TEST(ParseRblnSmiJsonTest, ReadsJsonIntegersAndKeepsTheToolsIndexes) {
  absl::StatusOr<std::vector<ProbedDevice>> devices = ParseRblnSmiJson(Json(
      absl::StrCat(Device("3", "5", "10"), ", ", Device("\"1\"", "0", "10")),
      ", \"KMD_version\": \"1.3.73\", \"extra\": {\"a\": [1, 2]}"));
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_THAT(*devices, SizeIs(2));
  EXPECT_EQ((*devices)[0].index, 3);
  EXPECT_EQ((*devices)[0].used_bytes, 5u);
  EXPECT_EQ((*devices)[1].index, 1);
}

TEST(ParseRblnSmiJsonTest, ContextsGoToTheirDevicesAndOthersAreIgnored) {
  const std::string text = Json(
      absl::StrCat(Device("\"0\"", "\"8\"", "\"16\""), ", ",
                   Device("\"1\"", "\"0\"", "\"16\"")),
      ", \"contexts\": ["
      "{\"npu\": \"0\", \"pid\": \"10\", \"memalloc\": \"3\"},"
      "{\"npu\": \"0\", \"pid\": \"11\", \"process\": \"vllm\", "
      "\"memalloc\": \"5\"},"
      "{\"npu\": \"7\", \"pid\": \"12\", \"memalloc\": \"1\"},"  // unlisted
      "{\"pid\": \"13\"},"                                       // no npu
      "{\"npu\": \"1\"}]");                                      // no pid
  absl::StatusOr<std::vector<ProbedDevice>> devices = ParseRblnSmiJson(text);
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_THAT((*devices)[0].contexts, SizeIs(2));
  EXPECT_EQ((*devices)[0].contexts[0].pid, 10u);
  EXPECT_EQ((*devices)[0].contexts[0].process, "");
  EXPECT_EQ((*devices)[0].contexts[0].bytes, 3u);
  EXPECT_EQ((*devices)[0].contexts[1].pid, 11u);
  EXPECT_EQ((*devices)[0].contexts[1].process, "vllm");
  EXPECT_THAT((*devices)[1].contexts, IsEmpty());
}

TEST(ParseRblnSmiJsonTest, TellsJsonFromATable) {
  EXPECT_TRUE(LooksLikeRblnSmiJson(Sample("rbln-smi-json-ca12.json")));
  EXPECT_TRUE(LooksLikeRblnSmiJson(" \n\t{"));
  EXPECT_FALSE(LooksLikeRblnSmiJson(Sample("rbln-smi-atom-ca12.txt")));
  EXPECT_FALSE(LooksLikeRblnSmiJson("rbln-smi: unknown option -j\n"));
  EXPECT_FALSE(LooksLikeRblnSmiJson("[]"));
  EXPECT_FALSE(LooksLikeRblnSmiJson(""));
}

struct BadJson {
  std::string name;
  std::string text;
  std::string message;  // a part of the error
};

class ParseRblnSmiJsonErrorTest : public ::testing::TestWithParam<BadJson> {};

TEST_P(ParseRblnSmiJsonErrorTest, SaysWhatWasWrong) {
  absl::StatusOr<std::vector<ProbedDevice>> devices =
      ParseRblnSmiJson(GetParam().text);
  ASSERT_FALSE(devices.ok()) << "parsed " << devices->size() << " device(s)";
  EXPECT_EQ(devices.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(devices.status().message()),
              HasSubstr(GetParam().message));
}

// `count` devices with indexes 0..count-1.
std::string ManyDevices(size_t count) {
  std::vector<std::string> devices;
  for (size_t i = 0; i < count; ++i) {
    devices.push_back(
        absl::StrCat("{\"npu\": \"", i,
                     "\", \"memory\": {\"used\": \"0\", \"total\": "
                     "\"1\"}}"));
  }
  return Json(absl::StrJoin(devices, ","));
}

std::string ManyContexts(size_t count) {
  std::vector<std::string> contexts(count, "{}");
  return Json(
      Device("0", "0", "1"),
      absl::StrCat(", \"contexts\": [", absl::StrJoin(contexts, ","), "]"));
}

std::string Used(absl::string_view used) {
  return Json(Device("0", used, "\"100\""));
}

INSTANTIATE_TEST_SUITE_P(
    Malformed, ParseRblnSmiJsonErrorTest,
    ::testing::Values(
        BadJson{"Empty", "", "not valid JSON: The document is empty"},
        BadJson{"Table", Sample("rbln-smi-atom-ca12.txt"), "not valid JSON"},
        BadJson{"Truncated", Sample("rbln-smi-json-ca12.json").substr(0, 300),
                "not valid JSON"},
        BadJson{"TrailingGarbage", Json(Device("0", "0", "1"), "") + "x",
                "not valid JSON"},
        BadJson{"NulByte", std::string("{\"devices\": [\0]}", 17),
                "NUL byte at offset 13"},
        BadJson{"InvalidUtf8", "{\"devices\": [], \"x\": \"\xff\"}",
                "not valid JSON"},
        BadJson{
            "TooLarge",
            Json(Device("0", "0", "1"),
                 absl::StrCat(", \"pad\": \"",
                              std::string(kMaxRblnSmiJsonBytes, 'a'), "\"")),
            "at most 1048576 are read"},
        BadJson{"TopLevelArray", "[{\"memory\": {}}]",
                "the JSON is an array, not an object"},
        BadJson{"NoDevices", "{\"KMD_version\": \"1.3.73\"}",
                "no devices: the JSON has no devices array"},
        BadJson{"EmptyDevices", Json(""), "no devices: devices[] lists no NPU"},
        BadJson{"DevicesNotAnArray", "{\"devices\": {}}",
                "devices is an object, not an array"},
        BadJson{"DeviceNotAnObject", Json("\"rbln0\""),
                "devices[0] is string \"rbln0\", not an object"},
        BadJson{"TooManyDevices", ManyDevices(kMaxRblnSmiDevices + 1),
                "devices lists 257 entries; at most 256 are read"},
        BadJson{"TooManyContexts", ManyContexts(kMaxRblnSmiContexts + 1),
                "contexts lists 4097 entries"},
        BadJson{"NoMemory",
                Json(absl::StrCat(Device("0", "0", "1"), ",",
                                  "{\"npu\": \"1\", \"name\": \"RBLN-CA12\", "
                                  "\"device\": \"rbln1\"}")),
                "devices[1] (npu 1, RBLN-CA12, rbln1) has no memory figures"},
        BadJson{"MemoryNotAnObject",
                Json("{\"device\": \"rbln2\", \"memory\": \"16GiB\"}"),
                "devices[0] (rbln2) has no memory figures (memory.used and "
                "memory.total): memory is string \"16GiB\""},
        BadJson{"NoTotal", Json("{\"memory\": {\"used\": \"0\"}}"),
                "devices[0] has no memory.total"},
        BadJson{"NoUsed", Json("{\"npu\": \"4\", \"memory\": {}}"),
                "devices[0] (npu 4) has no memory.used"},
        BadJson{"UsedNotANumber", Used("\"N/A\""),
                "memory.used is string \"N/A\", not a whole decimal number"},
        BadJson{"UsedNegative", Used("\"-1\""), "not a whole decimal number"},
        BadJson{"UsedNegativeNumber", Used("-1"),
                "memory.used is number -1, not a whole number of at most 64 "
                "bits"},
        BadJson{"UsedFractional", Used("\"1.5\""),
                "not a whole decimal number"},
        BadJson{"UsedFloat", Used("1.5"), "not a whole number"},
        BadJson{"UsedWithSpace", Used("\" 12\""), "not a whole decimal number"},
        BadJson{"UsedWithUnit", Used("\"12GiB\""),
                "not a whole decimal number"},
        BadJson{"UsedEmpty", Used("\"\""), "not a decimal number"},
        BadJson{"UsedNull", Used("null"), "is null, not a decimal string"},
        BadJson{"UsedHuge", Used("\"18446744073709551616\""),
                "too large for 64 bits"},
        BadJson{"UsedHugeNumber", Used("18446744073709551616"),
                "not a whole number of at most 64 bits"},
        BadJson{"UsedManyDigits",
                Used(absl::StrCat("\"", std::string(400, '9'), "\"")),
                "too large for 64 bits"},
        BadJson{"UsedAboveTotal", Used("\"101\""),
                "memory used 101 of total 100 is not a used size within a "
                "non-zero total"},
        BadJson{"ZeroTotal", Json(Device("0", "\"0\"", "\"0\"")),
                "within a non-zero total"},
        BadJson{"IndexTwice",
                Json(absl::StrCat(Device("\"0\"", "0", "1"), ",",
                                  Device("\"0\"", "0", "1"))),
                "devices[1] has npu 0, which devices[0] has too"},
        BadJson{"IndexPastTheLimit", Json(Device("\"256\"", "0", "1")),
                "devices[0].npu is 256, past the 256 devices"},
        BadJson{"NameNotAString",
                Json("{\"name\": 12, \"memory\": {\"used\": \"0\", "
                     "\"total\": \"1\"}}"),
                "devices[0].name is number 12, not a string"},
        BadJson{"ContextsNotAnArray",
                Json(Device("0", "0", "1"), ", \"contexts\": {}"),
                "contexts is an object, not an array"},
        BadJson{"ContextNotAnObject",
                Json(Device("0", "0", "1"), ", \"contexts\": [7]"),
                "contexts[0] is number 7, not an object"},
        BadJson{"ContextPidNotANumber",
                Json(Device("0", "0", "1"),
                     ", \"contexts\": [{\"npu\": \"0\", \"pid\": \"x\"}]"),
                "contexts[0].pid is string \"x\""}),
    [](const ::testing::TestParamInfo<BadJson>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace rbln
