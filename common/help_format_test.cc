#include "common/help_format.h"

#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

size_t LongestLine(const std::string& text) {
  size_t longest = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    longest = std::max(longest, line.size());
  }
  return longest;
}

TEST(WrapTextTest, BreaksAtTheLastSpaceThatFits) {
  EXPECT_EQ(WrapText("aaa bbb ccc", 7), "aaa bbb\nccc");
  EXPECT_EQ(WrapText("aaa bbb ccc", 6), "aaa\nbbb\nccc");
  EXPECT_EQ(WrapText("aaa  bbb", 80), "aaa bbb");
  EXPECT_EQ(WrapText("", 10), "");
}

TEST(WrapTextTest, KeepsNewlinesAndLongWords) {
  EXPECT_EQ(WrapText("aa bb\ncc dd", 5), "aa bb\ncc dd");
  EXPECT_EQ(WrapText("a /a/very/long/path b", 6), "a\n/a/very/long/path\nb");
}

// `n` sentences of nine words.
std::string Repeat(int n) {
  std::string text;
  for (int i = 0; i < n; ++i)
    text += "one two three four five six seven eight nine. ";
  return text;
}

// A program with a group, a switch, a checked number with a value name, a
// checked number without one, and a description longer than a line.
struct SampleApp {
  CLI::App app{"Sixteen characters of description, " + Repeat(20), "prog"};
  std::string store;
  int workers = 2;
  unsigned int count = 0;
  bool verbose = false;

  SampleApp() {
    app.formatter(std::make_shared<HelpFormatter>());
    app.add_option("--store", store, "The store directory (default: here)")
        ->type_name("DIR")
        ->capture_default_str()
        ->group("Store");
    app.add_option("--codec-timeout-seconds", workers,
                   "How long one codec request may take before it is killed "
                   "and restarted, 1 to 86400 (default: 120 seconds)")
        ->option_text("SECONDS")
        ->check(CLI::Range(1, 86400))
        ->group("Codec");
    app.add_option("--count", count, "A count")->group("Codec");
    app.add_flag("--verbose", verbose, "Say more")->group("Codec");
    // 27 characters with its value name: one column short of the
    // descriptions.
    app.add_option("--read-only-root", store, "A root")
        ->type_name("[NAME=]DIR")
        ->group("Store");
  }
};

TEST(HelpFormatterTest, FitsEightyColumnsWithValueNamesOnly) {
  SampleApp sample;
  const std::string help = sample.app.help();
  EXPECT_LE(LongestLine(help), kHelpWidth) << help;
  EXPECT_THAT(help, HasSubstr("\nStore:\n  --store DIR "));
  EXPECT_THAT(help, HasSubstr("\nCodec:\n  --codec-timeout-seconds SECONDS\n" +
                              std::string(kHelpNameWidth, ' ') + "How long"));
  EXPECT_THAT(help, HasSubstr("  --verbose                   Say more\n"));
  // Neither the check nor the captured default is shown.
  EXPECT_THAT(help, Not(HasSubstr("INT in")));
  EXPECT_THAT(help, Not(HasSubstr("[1 - 86400]")));
  EXPECT_THAT(help, Not(HasSubstr("DIR=")));
  // Without a name of its own, the type is the value name.
  EXPECT_THAT(help, HasSubstr("  --count UINT "));
}

TEST(HelpFormatterTest, KeepsTwoSpacesBeforeADescription) {
  SampleApp sample;
  EXPECT_THAT(sample.app.help(),
              HasSubstr("  --read-only-root [NAME=]DIR\n" +
                        std::string(kHelpNameWidth, ' ') + "A root\n"));
}

TEST(HelpFormatterTest, WrapsDescriptionsInTheirColumn) {
  SampleApp sample;
  const std::string help = sample.app.help();
  EXPECT_THAT(help, HasSubstr("killed and restarted, 1 to 86400 (default: 120"
                              "\n" +
                              std::string(kHelpNameWidth, ' ') + "seconds)"));
}

TEST(HelpFormatterTest, WrapsTheDescriptionAtEightyColumns) {
  SampleApp sample;
  const std::string help = sample.app.help();
  // 80 characters exactly: the line is full.
  EXPECT_EQ(help.substr(0, help.find('\n')),
            "Sixteen characters of description, one two three four five six "
            "seven eight nine.");
}

TEST(HelpFormatterTest, UsageAndGroupsAreOneBlankLineApart) {
  SampleApp sample;
  const std::string help = sample.app.help();
  EXPECT_THAT(help, HasSubstr("nine.\n\nUsage: prog [OPTIONS]\n\n"));
  EXPECT_THAT(help, HasSubstr("A root\n\nCodec:\n"));
}

}  // namespace
}  // namespace rbln
