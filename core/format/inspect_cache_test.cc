#include "core/format/inspect_cache.h"

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

std::shared_ptr<const ContainerFacts> Facts(const std::string& npu,
                                            size_t tensors = 1) {
  auto facts = std::make_shared<ContainerFacts>();
  facts->npu = npu;
  facts->num_nodes = 1;
  facts->buckets_per_node = 1;
  for (size_t i = 0; i < tensors; ++i) {
    facts->kv_tensors.push_back({"t" + std::to_string(i), {1024}, true});
  }
  return facts;
}

// When the inspections below began: long after their files last changed.
const absl::Time kLongAgo = absl::FromUnixSeconds(1000);

FileIdentity Id(uint64_t inode, int64_t mtime = 1, uint64_t size = 100) {
  return {.device = 7,
          .inode = inode,
          .size = size,
          .mtime_ns = mtime,
          .ctime_ns = mtime};
}

TEST(InspectCacheTest, ServesOnlyTheSameFileAsInspectedByTheSameCodec) {
  InspectCache cache;
  cache.Insert("built-in", Id(1), Facts("RBLN-CA12"), kLongAgo);
  ASSERT_NE(cache.Find("built-in", Id(1)), nullptr);
  EXPECT_EQ(cache.Find("built-in", Id(1))->npu, "RBLN-CA12");
  // Changed contents, a changed inode (ctime), a replaced file, another
  // codec: each misses.
  EXPECT_EQ(cache.Find("built-in", Id(1, /*mtime=*/2)), nullptr);
  EXPECT_EQ(cache.Find("built-in", Id(1, 1, /*size=*/101)), nullptr);
  EXPECT_EQ(cache.Find("built-in", Id(2)), nullptr);
  EXPECT_EQ(cache.Find("external (x)", Id(1)), nullptr);
  EXPECT_EQ(cache.hits(), 2u);
  EXPECT_EQ(cache.misses(), 4u);
}

TEST(InspectCacheTest, ANewerInspectionOfTheSameInodeReplacesTheOld) {
  InspectCache cache;
  cache.Insert("built-in", Id(1), Facts("old"), kLongAgo);
  cache.Insert("built-in", Id(1, 2), Facts("new"), kLongAgo);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.Find("built-in", Id(1)), nullptr);
  ASSERT_NE(cache.Find("built-in", Id(1, 2)), nullptr);
  EXPECT_EQ(cache.Find("built-in", Id(1, 2))->npu, "new");
}

TEST(InspectCacheTest, EraseDropsTheFileItNames) {
  InspectCache cache;
  cache.Insert("built-in", Id(1), Facts("a"), kLongAgo);
  cache.Insert("built-in", Id(2), Facts("b"), kLongAgo);
  cache.Erase(Id(1));
  cache.Erase(Id(3));  // not held: nothing happens
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.Find("built-in", Id(1)), nullptr);
  EXPECT_NE(cache.Find("built-in", Id(2)), nullptr);
}

TEST(InspectCacheTest, LeastRecentlyUsedEntriesGoPastTheBound) {
  // Room for a few small entries only.
  InspectCache cache(/*max_bytes=*/3 * 1024);
  for (uint64_t inode = 1; inode <= 100; ++inode) {
    cache.Insert("built-in", Id(inode), Facts("x"), kLongAgo);
    // The first stays in use, so it stays.
    ASSERT_NE(cache.Find("built-in", Id(1)), nullptr) << inode;
  }
  EXPECT_LT(cache.size(), 100u);
  EXPECT_GE(cache.size(), 2u);
  EXPECT_EQ(cache.Find("built-in", Id(2)), nullptr);
  EXPECT_NE(cache.Find("built-in", Id(100)), nullptr);
  // Facts larger than the whole bound are not kept at all.
  cache.Insert("built-in", Id(500), Facts("huge", 1000), kLongAgo);
  EXPECT_EQ(cache.Find("built-in", Id(500)), nullptr);
}

// A file rewritten at the same size within one tick of a coarse clock keeps
// its identity: facts of a file that changed within the racy window before
// the inspection began are not kept, whichever of its times is recent; for
// times in whole seconds the window is seconds long.
TEST(InspectCacheTest, AFileChangedWithinTheRacyWindowIsNotKept) {
  InspectCache cache;  // 20 ms, or 3 s for whole seconds
  const absl::Time start = absl::FromUnixSeconds(1000);
  const auto ago = [&](absl::Duration d) {
    return absl::ToUnixNanos(start - d);
  };
  const auto kept = [&](uint64_t inode, int64_t mtime, int64_t ctime) {
    FileIdentity id = Id(inode, mtime);
    id.ctime_ns = ctime;
    cache.Insert("built-in", id, Facts("x"), start);
    return cache.Find("built-in", id) != nullptr;
  };
  const int64_t fraction = 1234567;  // not a whole second
  EXPECT_FALSE(kept(1, ago(absl::Milliseconds(10)) + fraction,
                    ago(absl::Milliseconds(10)) + fraction));
  EXPECT_TRUE(kept(2, ago(absl::Milliseconds(50)) + fraction,
                   ago(absl::Milliseconds(50)) + fraction));
  // The status changed lately (a chmod, a hard link), the data long ago.
  EXPECT_FALSE(kept(3, ago(absl::Seconds(60)) + fraction,
                    ago(absl::Milliseconds(5)) + fraction));
  // Changed after the inspection began.
  EXPECT_FALSE(kept(4, ago(-absl::Seconds(1)) + fraction,
                    ago(-absl::Seconds(1)) + fraction));
  // Whole seconds: a file system that stamps seconds (FAT: 2).
  EXPECT_FALSE(kept(5, ago(absl::Seconds(2)), ago(absl::Seconds(2))));
  EXPECT_TRUE(kept(6, ago(absl::Seconds(4)), ago(absl::Seconds(4))));
}

}  // namespace
}  // namespace rbln
