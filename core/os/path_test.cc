#include "core/os/path.h"

#include "gtest/gtest.h"

namespace rbln {
namespace {

TEST(JoinPathTest, PutsExactlyOneSlashBetween) {
  EXPECT_EQ(JoinPath("/s", "a"), "/s/a");
  EXPECT_EQ(JoinPath("/s/", "a"), "/s/a");
  EXPECT_EQ(JoinPath("/", "a"), "/a");
  EXPECT_EQ(JoinPath("", "a"), "a");
  EXPECT_EQ(JoinPath("s", "a/b"), "s/a/b");
}

TEST(BasenameTest, IsWhatFollowsTheLastSlash) {
  EXPECT_EQ(Basename("/s/team/llama"), "llama");
  EXPECT_EQ(Basename("llama"), "llama");
  EXPECT_EQ(Basename("/llama"), "llama");
  EXPECT_EQ(Basename("/"), "");
  EXPECT_EQ(Basename("dir/"), "");
  EXPECT_EQ(Basename(""), "");
}

TEST(DirnameTest, IsWhatPrecedesTheLastSlashAsPosixHasIt) {
  EXPECT_EQ(Dirname("/s/team/llama"), "/s/team");
  EXPECT_EQ(Dirname("team/llama"), "team");
  // A name in the root: its directory is the root, not "".
  EXPECT_EQ(Dirname("/llama"), "/");
  EXPECT_EQ(Dirname("/"), "/");
  EXPECT_EQ(Dirname("llama"), ".");
  EXPECT_EQ(Dirname(""), ".");
}

TEST(DirnameTest, JoinedWithTheBasenameGivesThePathBack) {
  for (absl::string_view path : {"/s/a", "/a", "s/a"}) {
    EXPECT_EQ(JoinPath(Dirname(path), Basename(path)), path);
  }
}

TEST(IsWithinTest, GoesByWholeComponents) {
  EXPECT_TRUE(IsWithin("a/b", "a/b"));
  EXPECT_TRUE(IsWithin("a/b/c", "a/b"));
  EXPECT_TRUE(IsWithin("/s/team/llama", "/s"));
  EXPECT_FALSE(IsWithin("a/bc", "a/b"));
  EXPECT_FALSE(IsWithin("a", "a/b"));
  EXPECT_FALSE(IsWithin("/s2", "/s"));
}

}  // namespace
}  // namespace rbln
