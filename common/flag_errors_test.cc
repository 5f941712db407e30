#include "common/flag_errors.h"

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr FlagExitCodes kCodes = {.usage = 64, .config = 78};

// A small program's flags: one required, one repeatable, one numeric, two
// that exclude each other, and a --config file.
struct TestApp {
  CLI::App app{"test program", "prog"};
  std::string store;
  std::vector<std::string> listen;
  uint32_t count = 0;
  double timeout = 5;
  bool get = false;
  bool set = false;

  TestApp() {
    app.add_option("--store", store, "store")->type_name("DIR")->required();
    app.add_option("--listen", listen, "listen");
    app.add_option("--count", count, "count");
    app.add_option("--timeout-seconds", timeout, "timeout")
        ->check(CLI::Range(0.01, 30.0));
    CLI::Option* get_opt = app.add_flag("--get-kvcache-num-blocks", get, "g");
    CLI::Option* set_opt = app.add_flag("--set-kvcache-num-blocks", set, "s");
    get_opt->excludes(set_opt);
    app.set_config("--config", "", "config file");
    app.allow_config_extras(CLI::config_extras_mode::error);
  }
};

struct Result {
  std::optional<int> code;
  std::string out;
  std::string err;
};

Result Parse(TestApp& t, const std::vector<std::string>& args) {
  std::ostringstream out, err;
  Result r;
  r.code = ParseFlags(t.app, args, "prog", kCodes, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

TEST(EditDistanceTest, CountsInsertionsDeletionsSubstitutionsAndSwaps) {
  EXPECT_EQ(EditDistance("", ""), 0u);
  EXPECT_EQ(EditDistance("store", "store"), 0u);
  EXPECT_EQ(EditDistance("store", "stores"), 1u);
  EXPECT_EQ(EditDistance("store", "stor"), 1u);
  EXPECT_EQ(EditDistance("store", "stare"), 1u);
  EXPECT_EQ(EditDistance("store", "sotre"), 1u);  // a swap is one edit
  EXPECT_EQ(EditDistance("listen", "store"), 5u);
  EXPECT_EQ(EditDistance("abc", ""), 3u);
}

TEST(SuggestFlagTest, NamesTheNearestLongFlag) {
  TestApp t;
  EXPECT_EQ(SuggestFlag(t.app, "--set-kvcache-num-block"),
            "--set-kvcache-num-blocks");
  EXPECT_EQ(SuggestFlag(t.app, "--stoer"), "--store");
  EXPECT_EQ(SuggestFlag(t.app, "--Store=/x"), "--store");
  EXPECT_EQ(SuggestFlag(t.app, "-listen"), "--listen");
  // A unique prefix.
  EXPECT_EQ(SuggestFlag(t.app, "--timeout"), "--timeout-seconds");
  // Nothing close.
  EXPECT_EQ(SuggestFlag(t.app, "--frobnicate"), "");
  EXPECT_EQ(SuggestFlag(t.app, "--x"), "");
}

TEST(GivenOnCommandLineTest, FindsBothForms) {
  EXPECT_TRUE(GivenOnCommandLine({"--store", "a"}, "--store"));
  EXPECT_TRUE(GivenOnCommandLine({"--store=a"}, "--store"));
  EXPECT_FALSE(GivenOnCommandLine({"--stores=a"}, "--store"));
  EXPECT_FALSE(GivenOnCommandLine({"--", "--store"}, "--store"));
  EXPECT_FALSE(GivenOnCommandLine({}, "--store"));
}

TEST(ParseFlagsTest, ParsesAGoodCommandLine) {
  TestApp t;
  Result r = Parse(t, {"--store", "/s", "--listen", "a:1", "--listen", "b:2",
                       "--count", "3"});
  EXPECT_EQ(r.code, std::nullopt) << r.err;
  EXPECT_EQ(t.store, "/s");
  EXPECT_EQ(t.listen, (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_EQ(t.count, 3u);
}

TEST(ParseFlagsTest, HelpExitsZeroOnStdout) {
  TestApp t;
  Result r = Parse(t, {"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--store"));
  EXPECT_EQ(r.err, "");
}

TEST(ParseFlagsTest, UnknownFlagGetsASuggestionBeforeAnythingElse) {
  TestApp t;
  // --store is missing too; the typo comes first.
  Result r = Parse(t, {"--set-kvcache-num-block", "64"});
  EXPECT_EQ(r.code, 64);
  EXPECT_EQ(r.err,
            "prog: unknown flag --set-kvcache-num-block (did you mean "
            "--set-kvcache-num-blocks?)\nRun with --help for more "
            "information.\n");
}

TEST(ParseFlagsTest, StrayArgumentsAreListedInTheOrderGiven) {
  TestApp t;
  Result r = Parse(t, {"--store", "/s", "first", "second", "third"});
  EXPECT_EQ(r.code, 64);
  EXPECT_THAT(r.err, HasSubstr("unexpected arguments 'first' 'second' "
                               "'third'"));
}

TEST(ParseFlagsTest, SeveralUnknownFlagsInTheOrderGiven) {
  TestApp t;
  Result r = Parse(t, {"--store", "/s", "--lisen", "x", "--cont", "1"});
  EXPECT_EQ(r.code, 64);
  EXPECT_THAT(r.err, HasSubstr("unknown flag --lisen (did you mean --listen?); "
                               "unknown flag --cont (did you mean --count?)"));
  EXPECT_THAT(r.err, Not(HasSubstr("'x'")));
}

TEST(ParseFlagsTest, DuplicateFlagSaysGiveItOnce) {
  TestApp t;
  Result r = Parse(t, {"--store", "/a", "--store", "/b"});
  EXPECT_EQ(r.code, 64);
  EXPECT_THAT(r.err, HasSubstr("prog: --store given twice; give it once"));
  EXPECT_THAT(r.err, Not(HasSubstr("At Most")));
}

// As with argparse (and so optimum-rbln-cli), a repeated switch is harmless.
TEST(ParseFlagsTest, RepeatedBooleanFlagIsAccepted) {
  TestApp t;
  Result r = Parse(t, {"--store", "/a", "--get-kvcache-num-blocks",
                       "--get-kvcache-num-blocks"});
  EXPECT_EQ(r.code, std::nullopt) << r.err;
  EXPECT_TRUE(t.get);
}

TEST(ParseFlagsTest, RequiredFlagNamesItsValue) {
  TestApp t;
  Result r = Parse(t, {"--count", "1"});
  EXPECT_EQ(r.code, 64);
  EXPECT_THAT(r.err, HasSubstr("prog: --store DIR is required"));
}

TEST(ParseFlagsTest, ConversionErrorSaysWhatIsExpected) {
  TestApp t;
  Result r = Parse(t, {"--store", "/a", "--count", "many"});
  EXPECT_EQ(r.code, 64);
  EXPECT_THAT(r.err, HasSubstr("--count needs a whole number, got 'many'"));
}

TEST(ParseFlagsTest, OutOfRangeInOurWords) {
  for (const char* value : {"abc", "31", "0"}) {
    TestApp t;
    Result r = Parse(t, {"--store", "/a", "--timeout-seconds", value});
    EXPECT_EQ(r.code, 64);
    EXPECT_THAT(r.err,
                HasSubstr(absl::StrCat("--timeout-seconds needs a number from "
                                       "0.01 to 30, got '",
                                       value, "'")));
    EXPECT_THAT(r.err, Not(HasSubstr("not in range")));
  }
}

TEST(ParseFlagsTest, ExclusionsInOurWords) {
  TestApp t;
  Result r = Parse(t, {"--store", "/a", "--get-kvcache-num-blocks",
                       "--set-kvcache-num-blocks"});
  EXPECT_EQ(r.code, 64);
  EXPECT_THAT(r.err, HasSubstr("does not go with"));
  EXPECT_THAT(r.err, Not(HasSubstr("excludes")));
}

TEST(ParseFlagsTest, AFlagTakenAsAValueIsAForgottenValue) {
  TestApp t;
  Result r = Parse(t, {"--count", "--store", "/a"});
  EXPECT_EQ(r.code, 64);
  EXPECT_THAT(r.err, HasSubstr("prog: --count needs a value (UINT), got the "
                               "flag --store\n"));
}

TEST(ParseFlagsTest, MissingValue) {
  TestApp t;
  Result r = Parse(t, {"--store", "/a", "--count"});
  EXPECT_EQ(r.code, 64);
  EXPECT_THAT(r.err, HasSubstr("--count needs a value"));
}

class ConfigFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& text) {
    const std::string path = dir_.path() + "/config.toml";
    std::ofstream(path) << text;
    return path;
  }
  rbln::testing::TempDir dir_;
};

TEST_F(ConfigFileTest, ReadsTomlWithArrays) {
  TestApp t;
  const std::string path = Write(
      "# comment\n"
      "store = \"/srv/artifacts\"\n"
      "listen = [\"unix:/run/a.sock\", \"0.0.0.0:50051\"]\n"
      "timeout-seconds = 5\n");
  Result r = Parse(t, {"--config", path});
  EXPECT_EQ(r.code, std::nullopt) << r.err;
  EXPECT_EQ(t.store, "/srv/artifacts");
  EXPECT_EQ(t.listen,
            (std::vector<std::string>{"unix:/run/a.sock", "0.0.0.0:50051"}));
}

TEST_F(ConfigFileTest, UnknownEntryNamesTheLineAndTheMeantEntry) {
  TestApp t;
  const std::string path = Write(
      "store = \"/srv/artifacts\"\n"
      "\n"
      "lisen = \"0.0.0.0:50051\"\n");
  Result r = Parse(t, {"--config", path});
  EXPECT_EQ(r.code, 78);
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat(
                         "prog: cannot read --config ", path,
                         ": line 3: unknown entry 'lisen' (did you mean "
                         "listen?)")));
  EXPECT_THAT(r.err, Not(HasSubstr("INI")));
}

TEST_F(ConfigFileTest, SectionsAndLinesWithoutEqualsAreNamed) {
  TestApp t;
  std::string path = Write("[daemon]\nstore = \"/srv/artifacts\"\n");
  Result r = Parse(t, {"--config", path});
  EXPECT_EQ(r.code, 78);
  EXPECT_THAT(r.err, HasSubstr(": line 1: unknown section [daemon]: entries "
                               "go at the top, without a section"));

  TestApp u;
  path = Write("store: \"/srv/artifacts\"\n");
  r = Parse(u, {"--config", path});
  EXPECT_EQ(r.code, 78);
  EXPECT_THAT(r.err, HasSubstr(": line 1: cannot read 'store: "));
  EXPECT_THAT(r.err, HasSubstr("write one name = value per line"));
}

TEST(FormatConfigErrorTest, NamesTheLineWhenOneSetsTheKey) {
  rbln::testing::TempDir dir;
  const std::string path = dir.Join("c.toml");
  std::ofstream(path) << "# x\nstore = 1\n  device-dram = \"16\"\n";
  EXPECT_EQ(FormatConfigError(path, "device-dram", "bad"),
            absl::StrCat("cannot read --config ", path, ": line 3: bad"));
  EXPECT_EQ(FormatConfigError(path, "listen", "bad"),
            absl::StrCat("cannot read --config ", path, ": bad"));
}

TEST_F(ConfigFileTest, BadValueFromTheFileIsAConfigError) {
  TestApp t;
  const std::string path = Write(
      "store = \"/srv/artifacts\"\n"
      "timeout-seconds = 100\n");
  Result r = Parse(t, {"--config", path});
  EXPECT_EQ(r.code, 78);
  EXPECT_THAT(r.err, AllOf(HasSubstr(absl::StrCat("cannot read --config ", path,
                                                  ": line 2: ")),
                           HasSubstr("--timeout-seconds")));
}

TEST_F(ConfigFileTest, BadValueOnTheCommandLineStaysAUsageError) {
  TestApp t;
  const std::string path = Write("store = \"/srv/artifacts\"\n");
  Result r = Parse(t, {"--config", path, "--timeout-seconds", "100"});
  EXPECT_EQ(r.code, 64);
  EXPECT_THAT(r.err, Not(HasSubstr("--config")));
}

TEST_F(ConfigFileTest, MissingFile) {
  TestApp t;
  const std::string path = dir_.path() + "/absent.toml";
  Result r = Parse(t, {"--config", path});
  EXPECT_EQ(r.code, 78);
  EXPECT_THAT(r.err,
              HasSubstr(absl::StrCat("prog: cannot read --config ", path,
                                     ": no such file, or not readable")));
}

}  // namespace
}  // namespace rbln
