#include "core/store/staging_name.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::ContainsRegex;

TEST(StagedArtifactNameTest, AcceptsExactlyStagingNames) {
  EXPECT_EQ(StagedArtifactName(".a.staging-0123456789abcdef"), "a");
  EXPECT_EQ(StagedArtifactName(".llama.staging-fedcba9876543210"), "llama");
  EXPECT_EQ(StagedArtifactName(".my.model.staging-0000000000000000"),
            "my.model");

  const std::string rejected[] = {
      "",
      ".",
      "a.staging-0123456789abcdef",     // no leading dot
      ".staging-0123456789abcdef",      // no artifact name
      "..staging-0123456789abcdef",     // empty artifact name
      ".a.staging-0123456789abcde",     // 15 digits
      ".a.staging-0123456789abcdef0",   // 17 digits
      ".a.staging-0123456789ABCDEF",    // uppercase
      ".a.staging-0123456789abcdeF",    // one uppercase digit
      ".a.staging-0123456789abcdeg",    // not hex
      ".a.staging-0123456789abcde-",    // not hex
      ".a.staging0123456789abcdef0",    // no dash
      ".a.Staging-0123456789abcdef",    // infix case
      ".a-staging-0123456789abcdef",    // infix dot
      ".a.staging-",                    // no digits
      ".a.staging-0123456789abcdef/",   // trailing slash
      ".a.staging-0123456789abcdef.x",  // suffix
      " .a.staging-0123456789abcdef",   // leading space
  };
  for (const std::string& entry : rejected) {
    EXPECT_EQ(StagedArtifactName(entry), std::nullopt) << entry;
  }
}

TEST(RetiredArtifactNameTest, AcceptsExactlyRetiredNames) {
  EXPECT_EQ(RetiredArtifactName(".a.retired-0123456789abcdef"), "a");
  EXPECT_EQ(RetiredArtifactName(".my.model.retired-0000000000000000"),
            "my.model");
  const std::string rejected[] = {
      "a.retired-0123456789abcdef",    // no leading dot
      "..retired-0123456789abcdef",    // empty artifact name
      ".a.retired-0123456789abcde",    // 15 digits
      ".a.retired-0123456789abcdef0",  // 17 digits
      ".a.retired-0123456789ABCDEF",   // uppercase
      ".a.retired-0123456789abcdeg",   // not hex
      ".a.Retired-0123456789abcdef",   // infix case
      ".a.retired-",                   // no digits
      ".a.retired-0123456789abcdef/",  // trailing slash
  };
  for (const std::string& entry : rejected) {
    EXPECT_EQ(RetiredArtifactName(entry), std::nullopt) << entry;
  }
  // Each kind of name is only itself.
  EXPECT_EQ(RetiredArtifactName(".a.staging-0123456789abcdef"), std::nullopt);
  EXPECT_EQ(StagedArtifactName(".a.retired-0123456789abcdef"), std::nullopt);
}

TEST(RetiredArtifactNameTest, RetiredNameForRoundTripsAndIsRandom) {
  for (const std::string& name : {std::string("a"), std::string("llama-3.1"),
                                  std::string("x.retired-0123456789abcdef")}) {
    const std::string retired = RetiredNameFor(name);
    EXPECT_THAT(retired, ContainsRegex("^\\..*\\.retired-[0-9a-f]{16}$"));
    EXPECT_EQ(RetiredArtifactName(retired), name) << retired;
    EXPECT_EQ(StagedArtifactName(retired), std::nullopt) << retired;
  }
  EXPECT_NE(RetiredNameFor("a"), RetiredNameFor("a"));
}

TEST(StagedArtifactNameTest, StagingNameForRoundTripsAndIsRandom) {
  for (const std::string& name : {std::string("a"), std::string("llama-3.1"),
                                  std::string("x.staging-0123456789abcdef")}) {
    const std::string staging = StagingNameFor(name);
    EXPECT_THAT(staging, ContainsRegex("^\\..*\\.staging-[0-9a-f]{16}$"));
    EXPECT_EQ(StagedArtifactName(staging), name) << staging;
  }
  EXPECT_NE(StagingNameFor("a"), StagingNameFor("a"));
}

}  // namespace
}  // namespace rbln
