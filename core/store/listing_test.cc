#include "core/store/listing.h"

#include <filesystem>
#include <string>
#include <vector>

#include "core/os/env.h"
#include "core/os/path.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;
using ::testing::StartsWith;

class ListingTest : public ::testing::Test {
 protected:
  void MakeArtifact(const std::string& rel) {
    std::filesystem::create_directories(tmp_.Join(rel));
    testing::WriteFileOrDie(JoinPath(tmp_.Join(rel), "rbln_config.json"), "{}");
  }

  // Every page of `limit` entries from the beginning, and the pages taken.
  std::vector<std::string> AllPages(size_t limit, const std::string& prefix,
                                    int* pages) {
    std::vector<std::string> names;
    RootPageQuery query = {.prefix = prefix, .limit = limit};
    for (*pages = 1;; ++*pages) {
      std::vector<ListedEntry> entries;
      absl::StatusOr<bool> more =
          ListRootPage(root_, 0, Env::Default(), false, query, &entries);
      EXPECT_TRUE(more.ok()) << more.status();
      EXPECT_LE(entries.size(), limit);
      for (const ListedEntry& entry : entries) names.push_back(entry.name);
      if (!more.ok() || !*more) return names;
      query.after = entries.back().next.after;
    }
  }

  testing::TempDir tmp_;
  NamedRoot root_ = {.name = "", .dir = tmp_.path()};
};

TEST_F(ListingTest, NamesComeInByteOrderAcrossFolders) {
  // "a-c" sorts before "a/b" as bytes ('-' < '/'), though the folder "a"
  // sorts before the name "a-c".
  for (const char* name : {"b", "a/b", "a-c", "a/a/z", "a.d"}) {
    MakeArtifact(name);
  }
  int pages = 0;
  EXPECT_THAT(AllPages(100, "", &pages),
              ElementsAre("a-c", "a.d", "a/a/z", "a/b", "b"));
  EXPECT_EQ(pages, 1);
  EXPECT_THAT(AllPages(1, "", &pages),
              ElementsAre("a-c", "a.d", "a/a/z", "a/b", "b"));
  EXPECT_EQ(pages, 5);
}

TEST_F(ListingTest, PrefixIsPlainBytes) {
  for (const char* name : {"team3/x", "team30/y", "team4/z", "team3x"}) {
    MakeArtifact(name);
  }
  int pages = 0;
  EXPECT_THAT(AllPages(2, "team3", &pages),
              ElementsAre("team3/x", "team30/y", "team3x"));
  EXPECT_THAT(AllPages(2, "team3/", &pages), ElementsAre("team3/x"));
  EXPECT_THAT(AllPages(2, "team5", &pages), ElementsAre());
}

TEST_F(ListingTest, ResumesAfterTheLastNameInAChangedStore) {
  for (const char* name : {"a/1", "a/2", "b/1", "c/1"}) MakeArtifact(name);
  std::vector<ListedEntry> first;
  ASSERT_TRUE(
      ListRootPage(root_, 0, Env::Default(), false, {.limit = 2}, &first).ok());
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first.back().name, "a/2");
  // Removed after the token (b/1, and a/2 itself), added after it (a/3) and
  // before it (a/0): the next page continues after "a/2".
  ASSERT_TRUE(RemoveTree(Env::Default(), tmp_.Join("b")).ok());
  ASSERT_TRUE(RemoveTree(Env::Default(), tmp_.Join("a/2")).ok());
  MakeArtifact("a/3");
  MakeArtifact("a/0");
  std::vector<ListedEntry> rest;
  absl::StatusOr<bool> more =
      ListRootPage(root_, 0, Env::Default(), false,
                   {.after = first.back().next.after, .limit = 10}, &rest);
  ASSERT_TRUE(more.ok());
  EXPECT_FALSE(*more);
  std::vector<std::string> names;
  for (const ListedEntry& entry : rest) names.push_back(entry.name);
  EXPECT_THAT(names, ElementsAre("a/3", "c/1"));
}

TEST_F(ListingTest, SkippedEntriesTakeTheirPlaceAndAreNotRepeated) {
  MakeArtifact("a");
  MakeArtifact("c");
  // A link the store does not follow (core/store/artifact_link.h).
  std::filesystem::create_directory_symlink("../a", tmp_.Join("b"));
  int pages = 0;
  EXPECT_THAT(AllPages(1, "", &pages), ElementsAre("a", "b", "c"));
  EXPECT_EQ(pages, 3);
}

TEST_F(ListingTest, LinksTheStoreFollowsAreArtifactsWithTheirTargets) {
  MakeArtifact("team/v1");
  MakeArtifact("team/v2");
  std::filesystem::create_directory_symlink("v2", tmp_.Join("team/current"));
  std::filesystem::create_directory_symlink("../team/v1",
                                            tmp_.Join("team/climbing"));
  std::vector<ListedEntry> entries;
  RootPageQuery query = {.limit = 1};
  // One at a time, so that each link is classified again on its own page.
  for (int page = 0; page < 10; ++page) {
    const size_t before = entries.size();
    absl::StatusOr<bool> more =
        ListRootPage(root_, 0, Env::Default(), false, query, &entries);
    ASSERT_TRUE(more.ok()) << more.status();
    ASSERT_EQ(entries.size(), before + 1);
    if (!*more) break;
    query.after = entries.back().next.after;
  }
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[0].name, "team/climbing");
  ASSERT_TRUE(entries[0].skipped_reason.has_value());
  // The reason without the name the listing shows beside it.
  EXPECT_THAT(*entries[0].skipped_reason,
              StartsWith("a symbolic link to '../team/v1', a path that climbs "
                         "out of its directory"));
  EXPECT_EQ(entries[0].link_target, "");
  EXPECT_EQ(entries[1].name, "team/current");
  EXPECT_FALSE(entries[1].skipped_reason.has_value());
  EXPECT_EQ(entries[1].link_target, "team/v2");
  EXPECT_EQ(entries[2].name, "team/v1");
  EXPECT_EQ(entries[2].link_target, "");
  EXPECT_EQ(entries[3].name, "team/v2");
  EXPECT_EQ(entries[3].link_target, "");

  StoreListing listing;
  ASSERT_TRUE(ListRoot(root_, Env::Default(), false, &listing).ok());
  EXPECT_THAT(listing.names, ElementsAre("team/current", "team/v1", "team/v2"));
  EXPECT_THAT(listing.link_targets,
              ElementsAre(Pair("team/current", "team/v2")));
  ASSERT_EQ(listing.skipped.size(), 1u);
  EXPECT_EQ(listing.skipped[0].name, "team/climbing");
}

}  // namespace
}  // namespace rbln
