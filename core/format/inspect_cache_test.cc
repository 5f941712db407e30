#include "core/format/inspect_cache.h"

#include <memory>
#include <string>

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

FileIdentity Id(uint64_t inode, int64_t mtime = 1, uint64_t size = 100) {
  return {.device = 7,
          .inode = inode,
          .size = size,
          .mtime_ns = mtime,
          .ctime_ns = mtime};
}

TEST(InspectCacheTest, ServesOnlyTheSameFileAsInspectedByTheSameCodec) {
  InspectCache cache;
  cache.Insert("built-in", Id(1), Facts("RBLN-CA12"));
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
  cache.Insert("built-in", Id(1), Facts("old"));
  cache.Insert("built-in", Id(1, 2), Facts("new"));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.Find("built-in", Id(1)), nullptr);
  ASSERT_NE(cache.Find("built-in", Id(1, 2)), nullptr);
  EXPECT_EQ(cache.Find("built-in", Id(1, 2))->npu, "new");
}

TEST(InspectCacheTest, EraseDropsTheFileItNames) {
  InspectCache cache;
  cache.Insert("built-in", Id(1), Facts("a"));
  cache.Insert("built-in", Id(2), Facts("b"));
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
    cache.Insert("built-in", Id(inode), Facts("x"));
    // The first stays in use, so it stays.
    ASSERT_NE(cache.Find("built-in", Id(1)), nullptr) << inode;
  }
  EXPECT_LT(cache.size(), 100u);
  EXPECT_GE(cache.size(), 2u);
  EXPECT_EQ(cache.Find("built-in", Id(2)), nullptr);
  EXPECT_NE(cache.Find("built-in", Id(100)), nullptr);
  // Facts larger than the whole bound are not kept at all.
  cache.Insert("built-in", Id(500), Facts("huge", 1000));
  EXPECT_EQ(cache.Find("built-in", Id(500)), nullptr);
}

}  // namespace
}  // namespace rbln
