#include "core/lru_by_bytes.h"

#include <string>

#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

TEST(LruByBytesTest, FindsWhatWasInsertedAndCountsItsBytes) {
  LruByBytes<std::string, int> lru(100);
  EXPECT_EQ(lru.Find("a"), nullptr);
  lru.Insert("a", 1, 30);
  lru.Insert("b", 2, 40);
  ASSERT_NE(lru.Find("a"), nullptr);
  EXPECT_EQ(*lru.Find("a"), 1);
  EXPECT_EQ(*lru.Find("b"), 2);
  EXPECT_EQ(lru.size(), 2u);
  EXPECT_EQ(lru.bytes(), 70u);
}

TEST(LruByBytesTest, InsertReplacesTheValueAndItsBytes) {
  LruByBytes<std::string, int> lru(100);
  lru.Insert("a", 1, 30);
  lru.Insert("a", 2, 50);
  EXPECT_EQ(*lru.Find("a"), 2);
  EXPECT_EQ(lru.size(), 1u);
  EXPECT_EQ(lru.bytes(), 50u);
}

TEST(LruByBytesTest, DropsTheLeastRecentlyInsertedPastTheBound) {
  LruByBytes<std::string, int> lru(100);
  lru.Insert("a", 1, 40);
  lru.Insert("b", 2, 40);
  lru.Insert("c", 3, 40);
  EXPECT_EQ(lru.Find("a"), nullptr);
  EXPECT_NE(lru.Find("b"), nullptr);
  EXPECT_NE(lru.Find("c"), nullptr);
  EXPECT_EQ(lru.bytes(), 80u);
}

TEST(LruByBytesTest, TouchKeepsAValueAndFindAloneDoesNot) {
  LruByBytes<std::string, int> lru(100);
  lru.Insert("a", 1, 40);
  lru.Insert("b", 2, 40);
  lru.Touch("a");
  lru.Find("b");  // not a use
  lru.Insert("c", 3, 40);
  EXPECT_NE(lru.Find("a"), nullptr);
  EXPECT_EQ(lru.Find("b"), nullptr);
  lru.Touch("missing");  // nothing to do
  EXPECT_EQ(lru.size(), 2u);
}

TEST(LruByBytesTest, UseFindsAndKeepsAValue) {
  LruByBytes<std::string, int> lru(100);
  lru.Insert("a", 1, 40);
  lru.Insert("b", 2, 40);
  const absl::string_view a = "a";  // looked up without a std::string
  ASSERT_NE(lru.Use(a), nullptr);
  EXPECT_EQ(*lru.Use(a), 1);
  EXPECT_EQ(lru.Use(absl::string_view("missing")), nullptr);
  lru.Insert("c", 3, 40);
  EXPECT_NE(lru.Find(a), nullptr);
  EXPECT_EQ(lru.Find("b"), nullptr);
}

TEST(LruByBytesTest, AValueLargerThanTheBoundIsNotKeptAndDropsTheOld) {
  LruByBytes<std::string, int> lru(100);
  lru.Insert("a", 1, 40);
  lru.Insert("a", 2, 101);
  EXPECT_EQ(lru.Find("a"), nullptr);
  EXPECT_EQ(lru.bytes(), 0u);
  lru.Insert("b", 3, 100);  // exactly the bound fits
  EXPECT_NE(lru.Find("b"), nullptr);
}

TEST(LruByBytesTest, EraseSaysWhetherAnythingWasHeld) {
  LruByBytes<std::string, int> lru(100);
  lru.Insert("a", 1, 40);
  EXPECT_TRUE(lru.Erase("a"));
  EXPECT_FALSE(lru.Erase("a"));
  EXPECT_EQ(lru.size(), 0u);
  EXPECT_EQ(lru.bytes(), 0u);
}

TEST(LruByBytesTest, ManyInsertsStayWithinTheBound) {
  LruByBytes<int, int> lru(1000);
  for (int i = 0; i < 10000; ++i) {
    lru.Insert(i % 137, i, 1 + i % 50);
    ASSERT_LE(lru.bytes(), 1000u);
  }
  EXPECT_NE(lru.Find(9999 % 137), nullptr);
}

}  // namespace
}  // namespace rbln
