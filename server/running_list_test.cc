#include "server/running_list.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<int> Items(const RunningList<int>& list) {
  std::vector<int> items;
  list.ForEach([&items](const int& item) { items.push_back(item); });
  return items;
}

TEST(RunningListTest, ListsWhatRunsNewestFirstWhicheverLeaves) {
  RunningList<int> list;
  EXPECT_THAT(Items(list), IsEmpty());
  const int one = 1, two = 2, three = 3, four = 4;
  std::optional<RunningList<int>::Node> a, b, c;
  a.emplace(&list, &one);
  b.emplace(&list, &two);
  c.emplace(&list, &three);
  EXPECT_THAT(Items(list), ElementsAre(3, 2, 1));
  b.reset();  // the middle one
  EXPECT_THAT(Items(list), ElementsAre(3, 1));
  c.reset();  // the newest (the list's head)
  EXPECT_THAT(Items(list), ElementsAre(1));
  {
    RunningList<int>::Node d(&list, &four);
    EXPECT_THAT(Items(list), ElementsAre(4, 1));
    a.reset();  // the oldest (the tail)
    EXPECT_THAT(Items(list), ElementsAre(4));
  }
  EXPECT_THAT(Items(list), IsEmpty());
}

TEST(RunningListTest, ManyThreadsJoiningAndLeavingLeaveItEmpty) {
  RunningList<int> list;
  std::atomic<bool> stop{false};
  size_t most = 0;
  std::thread reader([&] {
    while (!stop.load()) most = std::max(most, Items(list).size());
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&list, t] {
      std::vector<std::unique_ptr<RunningList<int>::Node>> held;
      for (int i = 0; i < 20000; ++i) {
        held.push_back(std::make_unique<RunningList<int>::Node>(&list, &t));
        // Leave in another order than joined: every third from the front.
        if (held.size() == 3) held.erase(held.begin() + i % 3);
        if (held.size() > 2) held.erase(held.begin());
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  stop.store(true);
  reader.join();
  EXPECT_THAT(Items(list), IsEmpty());
  EXPECT_LE(most, 4u * 3);
}

}  // namespace
}  // namespace rbln
