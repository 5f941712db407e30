#include "core/device/dram.h"

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(ParseDramOverrideTest, AcceptsSizesWithUnitsAndLargeBareCounts) {
  const struct {
    const char* text;
    uint64_t bytes;
    uint32_t chiplets;  // 0: none given
  } cases[] = {
      {"16GiB", 16 * kGiB, 0},
      // GB is binary, as optimum-rbln-cli reads it: 16GB is 16 GiB.
      {"16GB", 16 * kGiB, 0},
      {"144GiB,4", 144 * kGiB, 4},
      {"17179869184", 16 * kGiB, 0},
      {"1073741824", kGiB, 0},   // a bare count of exactly 1 GiB
      {"512MiB", 512 << 20, 0},  // small, but the unit says so
      {"16B", 16, 0},
      {".5GiB,2", kGiB / 2, 2},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    absl::StatusOr<DramOverride> dram = ParseDramOverride(c.text);
    ASSERT_TRUE(dram.ok()) << dram.status();
    EXPECT_EQ(dram->bytes_per_node, c.bytes);
    EXPECT_EQ(dram->chiplets.value_or(0), c.chiplets);
  }
}

// --device-dram needs no NPU: an artifact that names none is sized by it.
TEST(OverrideProviderTest, AnswersForAnArtifactThatNamesNoNpu) {
  std::unique_ptr<DramProvider> provider =
      NewOverrideProvider({.bytes_per_node = 16 * kGiB, .chiplets = 2});
  absl::StatusOr<DramChoice> choice = provider->ForNpu("");
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->spec.AvailablePerNode(), 16 * kGiB);
  EXPECT_EQ(choice->spec.chiplets_per_node, 2u);
}

TEST(ParseDramOverrideTest, RefusesWithAHint) {
  const std::pair<std::string, std::string> cases[] = {
      {"16",
       "is a bare number below 1 GiB (did you mean 16GiB? write 16B "
       "for bytes)"},
      {"1073741823", "below 1 GiB"},
      {"16G", "(did you mean 16GB?)"},
      {"0GiB", "is zero"},
      {"0", "is zero"},
      {"0.8", "has no unit"},
      {"80%", "unknown unit \"%\""},
      {"16GiB,0", "chiplet count"},
      {"16GiB,4,2", "more than one comma"},
      {"99999999999999999999", "too large"},
  };
  for (const auto& [text, problem] : cases) {
    SCOPED_TRACE(text);
    absl::StatusOr<DramOverride> dram = ParseDramOverride(text);
    ASSERT_FALSE(dram.ok());
    EXPECT_EQ(dram.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(dram.status().message(),
                HasSubstr("device DRAM \"" + text + "\""));
    EXPECT_THAT(dram.status().message(), HasSubstr(problem));
    EXPECT_THAT(dram.status().message(), HasSubstr("write BYTES[,CHIPLETS]"));
  }
}

}  // namespace
}  // namespace rbln
