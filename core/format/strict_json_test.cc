// ParseJsonObject and DescribeJsonValue on their own; rbln_config_test.cc
// covers them again through ParseRblnConfig and RewriteKvcacheNumBlocks.
#include "core/format/strict_json.h"

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;

constexpr char kPath[] = "/store/m/rbln_config.json";

absl::Status Parse(absl::string_view json) {
  rapidjson::Document doc;
  return ParseJsonObject(json, kPath, &doc);
}

// `depth` arrays inside one another, inside the top-level object.
std::string Nested(size_t depth) {
  return absl::StrCat(R"({"x": )", std::string(depth, '['),
                      std::string(depth, ']'), "}");
}

TEST(StrictJsonTest, ReadsAnObjectAsPythonWritesIt) {
  rapidjson::Document doc;
  ASSERT_TRUE(ParseJsonObject(R"({"a": NaN, "b": -Infinity, "c": [1, {}]})",
                              kPath, &doc)
                  .ok());
  EXPECT_TRUE(doc["a"].IsDouble());
  EXPECT_TRUE(doc["c"].IsArray());
}

TEST(StrictJsonTest, BoundsTheNestingAtItsLimit) {
  // The top-level object is one level.
  EXPECT_TRUE(Parse(Nested(kMaxJsonDepth - 1)).ok());
  const absl::Status deep = Parse(Nested(kMaxJsonDepth));
  EXPECT_EQ(deep.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(deep.message(), HasSubstr("nests deeper than 64 levels"));
}

TEST(StrictJsonTest, RefusesAKeyTwiceInOneObjectOnly) {
  const absl::Status twice = Parse(R"({"a": {"k": 1, "k": 2}})");
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(twice.message(), HasSubstr("key \"k\" appears twice"));
  EXPECT_TRUE(Parse(R"({"a": {"k": 1}, "b": {"k": 1}, "k": 0})").ok());
}

TEST(StrictJsonTest, SaysWhereTheSyntaxBreaks) {
  const absl::Status bad = Parse("{\n  \"a\": 1,\n  \"b\" 2\n}");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr(kPath));
  EXPECT_THAT(bad.message(), HasSubstr("line 3, column 7"));
}

TEST(StrictJsonTest, RefusesWhatPythonRefusesOrCannotBeAConfig) {
  for (const std::string& text :
       {std::string("\xEF\xBB\xBF{}"), std::string("{\"a\": \"\0\"}", 10),
        std::string("{\"a\": \"\xff\"}"), std::string("[1]"),
        std::string("")}) {
    EXPECT_EQ(Parse(text).code(), absl::StatusCode::kInvalidArgument)
        << absl::CHexEscape(text);
  }
  EXPECT_THAT(Parse("[1]").message(),
              HasSubstr("expected a JSON object at the top level, found an "
                        "array"));
}

TEST(StrictJsonTest, DescribesAValueShortly) {
  rapidjson::Document doc;
  ASSERT_TRUE(
      ParseJsonObject(absl::StrCat(R"({"n": -3, "t": true, "z": null, "s": ")",
                                   std::string(100, 'a'), "\"}"),
                      kPath, &doc)
          .ok());
  EXPECT_EQ(DescribeJsonValue(doc["n"]), "number -3");
  EXPECT_EQ(DescribeJsonValue(doc["t"]), "boolean true");
  EXPECT_EQ(DescribeJsonValue(doc["z"]), "null");
  EXPECT_EQ(DescribeJsonValue(doc["s"]),
            absl::StrCat("string \"", std::string(64, 'a'), "\"..."));
  EXPECT_EQ(DescribeJsonValue(doc), "an object");
}

}  // namespace
}  // namespace rbln
