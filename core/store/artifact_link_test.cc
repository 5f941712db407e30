// FollowArtifactLink: the one kind of symbolic link the store follows
// (`current -> v2`), and every other kind refused with a message that names
// the link and its target, says what is wrong and what to do.
#include "core/store/artifact_link.h"

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/error_facts.h"
#include "core/os/env.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/synth.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;

class ArtifactLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::canonical(tmp_.path()).string();
    ASSERT_NO_FATAL_FAILURE(MakeArtifact("v2"));
    ASSERT_NO_FATAL_FAILURE(MakeArtifact("team/v2"));
    std::filesystem::create_directories(root_ + "/empty");
    testing::WriteFileOrDie(root_ + "/file.json", "{}");
    env_ = testing::ConfinedEnvOrDie(root_);
    store_ = {"", root_, ""};
  }

  void MakeArtifact(const std::string& rel) {
    std::filesystem::create_directories(
        std::filesystem::path(root_ + "/" + rel).parent_path());
    absl::StatusOr<SynthResult> made =
        WriteSyntheticArtifact(Env::Default(), SynthSpec(), root_ + "/" + rel);
    ASSERT_TRUE(made.ok()) << made.status();
  }

  void Link(const std::string& target, const std::string& rel) {
    std::filesystem::create_symlink(target, root_ + "/" + rel);
  }

  absl::StatusOr<std::optional<std::string>> Follow(const std::string& rel) {
    return FollowArtifactLink(env_.get(), store_, rel);
  }

  testing::TempDir tmp_;
  std::string root_;
  std::unique_ptr<Env> env_;
  NamedRoot store_;
};

TEST_F(ArtifactLinkTest, FollowsALinkToAnArtifactBesideIt) {
  Link("v2", "current");
  Link("v2", "team/current");
  absl::StatusOr<std::optional<std::string>> target = Follow("current");
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(*target, "v2");
  // Beside it: in the link's own directory, named canonically.
  target = Follow("team/current");
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(*target, "team/v2");
}

TEST_F(ArtifactLinkTest, WhatIsNoLinkIsLeftToTheRead) {
  for (const std::string rel : {"v2", "team", "file.json", "missing"}) {
    absl::StatusOr<std::optional<std::string>> target = Follow(rel);
    ASSERT_TRUE(target.ok()) << rel << ": " << target.status();
    EXPECT_EQ(*target, std::nullopt) << rel;
  }
}

TEST_F(ArtifactLinkTest, RefusesEveryOtherLinkSayingWhatIsWrong) {
  testing::TempDir outside;
  Link(root_ + "/v2", "absolute");
  Link(outside.path(), "escape");
  Link("../v2", "team/climbing");
  Link("team/v2", "deeper");
  Link(".", "itself");
  Link("..", "team/parent");
  Link(".v2.staging-0123456789abcdef", "hidden");
  Link("v2", "current");
  Link("current", "latest");
  Link("file.json", "config");
  Link("empty", "hollow");
  Link("v\n2", "control");
  const struct {
    const char* link;
    const char* what;
  } cases[] = {
      {"absolute", "an absolute path"},
      {"escape", "an absolute path"},
      {"team/climbing", "climbs out of its directory"},
      {"deeper", "not a name in the same directory"},
      {"itself", "its own directory"},
      {"team/parent", "climbs out of its directory"},
      {"hidden", "a hidden name"},
      {"latest", "itself a symbolic link (a link is followed one hop only)"},
      {"config", "not a directory"},
      {"hollow", "not an artifact (no rbln_config.json in it)"},
      {"control", "not a name the store takes"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.link);
    absl::StatusOr<std::optional<std::string>> target = Follow(c.link);
    EXPECT_EQ(target.status().code(), absl::StatusCode::kPermissionDenied)
        << target.status();
    EXPECT_THAT(target.status().message(),
                HasSubstr(std::string(c.link) + " is a symbolic link to '"));
    EXPECT_THAT(target.status().message(), HasSubstr(c.what));
    // What to do.
    EXPECT_THAT(target.status().message(), HasSubstr("ln -sfn v2 current"));
  }
}

TEST_F(ArtifactLinkTest, ALinkToNothingIsNotFound) {
  Link("v9", "ghost");
  absl::StatusOr<std::optional<std::string>> target = Follow("ghost");
  EXPECT_EQ(target.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(target.status().message(),
              HasSubstr("ghost is a symbolic link to 'v9', which does not "
                        "exist"));
  std::optional<ErrorFacts> facts = GetErrorFacts(target.status());
  ASSERT_TRUE(facts.has_value());
  EXPECT_EQ(facts->reason, ErrorReason::kArtifactNotFound);
  EXPECT_EQ(facts->artifact, "ghost");
}

TEST_F(ArtifactLinkTest, ALinkInAMiddleComponentIsRefusedAsEver) {
  Link("team", "crew");
  Link("v2", "team/current");
  absl::StatusOr<std::optional<std::string>> target = Follow("crew/current");
  EXPECT_EQ(target.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(target.status().message(), HasSubstr("symbolic link"));
}

}  // namespace
}  // namespace rbln
