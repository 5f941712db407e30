#include "core/store/retired_trees.h"

#include <cerrno>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/core_metrics.h"
#include "core/metrics.h"
#include "core/os/env.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

// Waits only to turn a hang into a failure: nothing here is timed.
constexpr absl::Duration kPatience = absl::Seconds(60);
// Longer than any test runs: a tree retired with it stays until removed
// some other way.
constexpr absl::Duration kForever = absl::Hours(1);

bool Exists(const std::string& path) { return Env::Default()->Stat(path).ok(); }

// Waits until `done` holds or kPatience has passed; returns whether it holds.
template <typename Predicate>
bool Eventually(Predicate done) {
  const absl::Time give_up = absl::Now() + kPatience;
  while (!done()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

class RetiredTreesTest : public ::testing::Test {
 protected:
  // A small tree, as an old version is: files, and a directory with one.
  std::string MakeTree(const std::string& name) {
    const std::string dir = tmp_.Join(name);
    EXPECT_TRUE(env_->CreateDir(dir).ok());
    EXPECT_TRUE(env_->CreateDir(JoinPath(dir, "sub")).ok());
    testing::WriteFileOrDie(JoinPath(dir, "rbln_config.json"), "{}");
    testing::WriteFileOrDie(JoinPath(dir, "sub/table.bin"), "bytes");
    return dir;
  }

  testing::TempDir tmp_;
  Env* env_ = Env::Default();
};

TEST_F(RetiredTreesTest, ZeroGraceRemovesBeforeRetireReturns) {
  RetiredTrees trees(env_, absl::ZeroDuration());
  const std::string tree = MakeTree("old");
  trees.Retire(tree);
  EXPECT_FALSE(Exists(tree));
  EXPECT_EQ(trees.pending(), 0u);
}

TEST_F(RetiredTreesTest, NegativeGraceCountsAsZero) {
  RetiredTrees trees(env_, absl::Seconds(-5));
  EXPECT_EQ(trees.grace(), absl::ZeroDuration());
  const std::string tree = MakeTree("old");
  trees.Retire(tree);
  EXPECT_FALSE(Exists(tree));
}

TEST_F(RetiredTreesTest, KeepsATreeForItsGraceThenRemovesIt) {
  RetiredTrees kept(env_, kForever);
  const std::string long_grace = MakeTree("long");
  kept.Retire(long_grace);
  EXPECT_TRUE(Exists(JoinPath(long_grace, "sub/table.bin")));
  EXPECT_EQ(kept.pending(), 1u);

  RetiredTrees trees(env_, absl::Seconds(1));
  const std::string first = MakeTree("first");
  const std::string second = MakeTree("second");
  trees.Retire(first);
  trees.Retire(second);
  EXPECT_TRUE(Eventually([&] { return trees.pending() == 0; }));
  EXPECT_FALSE(Exists(first));
  EXPECT_FALSE(Exists(second));
  // The other one's grace is its own.
  EXPECT_TRUE(Exists(long_grace));
  EXPECT_EQ(kept.pending(), 1u);
}

TEST_F(RetiredTreesTest, DestructionRemovesWhatIsPendingAtOnce) {
  const std::string first = MakeTree("first");
  const std::string second = MakeTree("second");
  {
    RetiredTrees trees(env_, kForever);
    trees.Retire(first);
    trees.Retire(second);
    EXPECT_TRUE(Exists(first));
    EXPECT_EQ(trees.pending(), 2u);
  }
  EXPECT_FALSE(Exists(first));
  EXPECT_FALSE(Exists(second));
}

TEST_F(RetiredTreesTest, RemoveNowRemovesEveryPendingTreeAndCountsThem) {
  RetiredTrees trees(env_, kForever);
  EXPECT_EQ(trees.RemoveNow(), 0u);
  const std::string first = MakeTree("first");
  const std::string second = MakeTree("second");
  trees.Retire(first);
  trees.Retire(second);
  EXPECT_EQ(trees.RemoveNow(), 2u);
  EXPECT_FALSE(Exists(first));
  EXPECT_FALSE(Exists(second));
  EXPECT_EQ(trees.pending(), 0u);
  EXPECT_EQ(trees.RemoveNow(), 0u);
  // Retiring goes on working afterwards.
  const std::string third = MakeTree("third");
  trees.Retire(third);
  EXPECT_EQ(trees.pending(), 1u);
  EXPECT_TRUE(Exists(third));
}

// rbln_artifactd_old_versions_pending: every tree retired and not yet
// removed, over all instances.
TEST_F(RetiredTreesTest, ThePendingGaugeFollowsRetireAndRemoval) {
  RegisterCoreMetrics();
  const auto pending = [] {
    return metrics::Registry::Default()
        .Sample("rbln_artifactd_old_versions_pending")
        .value_or(-1);
  };
  const double before = pending();
  ASSERT_GE(before, 0);
  {
    RetiredTrees zero(env_, absl::ZeroDuration());
    zero.Retire(MakeTree("at-once"));
    EXPECT_EQ(pending(), before);
    RetiredTrees trees(env_, kForever);
    trees.Retire(MakeTree("first"));
    trees.Retire(MakeTree("second"));
    EXPECT_EQ(pending(), before + 2);
    EXPECT_EQ(trees.RemoveNow(), 2u);
    EXPECT_EQ(pending(), before);
    trees.Retire(MakeTree("third"));
    RetiredTrees soon(env_, absl::Milliseconds(1));
    soon.Retire(MakeTree("fourth"));
    EXPECT_TRUE(Eventually([&] { return soon.pending() == 0; }));
    EXPECT_EQ(pending(), before + 1);
  }  // destruction removes "third"
  EXPECT_EQ(pending(), before);
}

TEST_F(RetiredTreesTest, ATreeMovedAwayMeanwhileIsNoError) {
  RetiredTrees trees(env_, absl::Seconds(1));
  const std::string tree = MakeTree("old");
  trees.Retire(tree);
  ASSERT_TRUE(env_->Rename(tree, tmp_.Join("moved")).ok());
  EXPECT_TRUE(Eventually([&] { return trees.pending() == 0; }));
  // Left where it went, for the store's recovery.
  EXPECT_TRUE(Exists(tmp_.Join("moved/sub/table.bin")));
}

// Refuses to remove one directory, as a file system may (EIO, EBUSY).
class StubbornEnv : public EnvWrapper {
 public:
  StubbornEnv(Env* target, std::string keep)
      : EnvWrapper(target), keep_(std::move(keep)) {}
  absl::Status RemoveDir(const std::string& path) override {
    if (path == keep_) return ErrnoToStatus("rmdir", path, EIO);
    return EnvWrapper::RemoveDir(path);
  }

 private:
  const std::string keep_;
};

TEST_F(RetiredTreesTest, ATreeThatCannotBeRemovedIsLeftAndForgotten) {
  const std::string tree = MakeTree("old");
  const std::string record = tmp_.Join("old.intent");
  testing::WriteFileOrDie(record, "names old");
  StubbornEnv env(env_, tree);
  RetiredTrees trees(&env, absl::Seconds(1));
  trees.Retire(tree, record);
  EXPECT_TRUE(Eventually([&] { return trees.pending() == 0; }));
  // What could be removed is; the directory stays for recovery to find,
  // with the record that lets recovery remove it.
  EXPECT_TRUE(Exists(tree));
  EXPECT_FALSE(Exists(JoinPath(tree, "rbln_config.json")));
  EXPECT_FALSE(Exists(JoinPath(tree, "sub")));
  EXPECT_TRUE(Exists(record));
}

// Logs the removals and directory fsyncs it passes on, in order.
class OrderLoggingEnv : public EnvWrapper {
 public:
  using EnvWrapper::EnvWrapper;
  absl::Status RemoveDir(const std::string& path) override {
    Log("RemoveDir " + path);
    return EnvWrapper::RemoveDir(path);
  }
  absl::Status RemoveFile(const std::string& path) override {
    Log("RemoveFile " + path);
    return EnvWrapper::RemoveFile(path);
  }
  absl::Status SyncDir(const std::string& path) override {
    Log("SyncDir " + path);
    return EnvWrapper::SyncDir(path);
  }
  std::vector<std::string> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  void Log(std::string call) {
    absl::MutexLock lock(&mu_);
    calls_.push_back(std::move(call));
  }
  mutable absl::Mutex mu_;
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
};

TEST_F(RetiredTreesTest, ItsRecordGoesAfterTheTreeAndTheParentsFsync) {
  const std::string tree = MakeTree("old");
  const std::string record = tmp_.Join("old.intent");
  testing::WriteFileOrDie(record, "names old");
  OrderLoggingEnv env(env_);
  {
    RetiredTrees trees(&env, absl::ZeroDuration());
    trees.Retire(tree, record);
  }
  EXPECT_FALSE(Exists(tree));
  EXPECT_FALSE(Exists(record));
  const std::vector<std::string> calls = env.calls();
  ASSERT_GE(calls.size(), 3u);
  EXPECT_THAT(
      std::vector<std::string>(calls.end() - 3, calls.end()),
      ::testing::ElementsAre("RemoveDir " + tree, "SyncDir " + tmp_.path(),
                             "RemoveFile " + record));
}

// Forgets files' pages, and records which, once each is done.
class ForgetfulEnv : public EnvWrapper {
 public:
  using EnvWrapper::EnvWrapper;
  absl::Status ForgetCachedPages(const std::string& path) override {
    absl::Status status = EnvWrapper::ForgetCachedPages(path);
    absl::MutexLock lock(&mu_);
    forgotten_.push_back(path);
    return status;
  }
  std::vector<std::string> forgotten() const {
    absl::MutexLock lock(&mu_);
    return forgotten_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> forgotten_ ABSL_GUARDED_BY(mu_);
};

TEST_F(RetiredTreesTest, ATreesPagesGoAtOnceItsFilesAfterTheGrace) {
  const std::string tree = MakeTree("old");
  const std::string graph = JoinPath(tree, "prefill.rbln");
  const std::string payload(1 << 20, 'w');
  ASSERT_TRUE(WriteStringToNewFile(env_, graph, payload).ok());
  // A companion file the new version shares (rescale links them) keeps its
  // pages: they are the new version's too.
  const std::string shared = JoinPath(tree, "tokenizer.json");
  ASSERT_TRUE(WriteStringToNewFile(env_, shared, "{}").ok());
  ASSERT_TRUE(env_->Link(shared, tmp_.Join("new-tokenizer.json")).ok());
  const bool droppable = testing::PageCacheIsDroppable(tmp_.path());
  if (droppable) {
    ASSERT_GT(testing::CachedPages(graph), 0u);
  }

  ForgetfulEnv env(env_);
  RetiredTrees trees(&env, kForever);
  trees.Retire(tree);
  EXPECT_TRUE(Eventually([&] { return env.forgotten().size() == 3; }));
  EXPECT_THAT(env.forgotten(), ::testing::UnorderedElementsAre(
                                   graph, JoinPath(tree, "rbln_config.json"),
                                   JoinPath(tree, "sub/table.bin")));
  if (droppable) {
    EXPECT_EQ(testing::CachedPages(graph), 0u);
  }
  // The files stay for the grace, whole.
  EXPECT_EQ(trees.pending(), 1u);
  EXPECT_EQ(testing::ReadFileOrDie(graph), payload);
  EXPECT_TRUE(Exists(shared));
}

TEST_F(RetiredTreesTest, ANewerTreesPagesDoNotWaitForAnOlderTreesGrace) {
  ForgetfulEnv env(env_);
  RetiredTrees trees(&env, kForever);
  const std::string first = MakeTree("first");
  trees.Retire(first);
  ASSERT_TRUE(Eventually([&] { return env.forgotten().size() == 2; }));

  // The thread now waits out the first tree's grace; the second's pages go
  // all the same.
  const std::string second = MakeTree("second");
  trees.Retire(second);
  EXPECT_TRUE(Eventually([&] { return env.forgotten().size() == 4; }));
  EXPECT_THAT(env.forgotten(), ::testing::UnorderedElementsAre(
                                   JoinPath(first, "rbln_config.json"),
                                   JoinPath(first, "sub/table.bin"),
                                   JoinPath(second, "rbln_config.json"),
                                   JoinPath(second, "sub/table.bin")));
  EXPECT_EQ(trees.pending(), 2u);
}

TEST_F(RetiredTreesTest, ConcurrentRetiresAndRemovalsLoseNothing) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 8;
  std::vector<std::string> all;
  {
    RetiredTrees trees(env_, absl::Milliseconds(50));
    std::vector<std::vector<std::string>> made(kThreads);
    for (int t = 0; t < kThreads; ++t) {
      for (int i = 0; i < kPerThread; ++i) {
        made[t].push_back(MakeTree(absl::StrCat("t", t, "-", i)));
        all.push_back(made[t].back());
      }
    }
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kPerThread; ++i) {
          trees.Retire(made[t][i]);
          if (i % 3 == t % 3) trees.RemoveNow();
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  for (const std::string& tree : all) EXPECT_FALSE(Exists(tree)) << tree;
}

}  // namespace
}  // namespace rbln
