// ArtifactStore under concurrent use (docs/commit-protocol.md): readers always
// see a complete version, writers on one artifact serialize into a single chain
// of commits, compare-and-set aborts name the current count, and a writer on
// one artifact never holds up readers or writers of another.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/os/env.h"
#include "core/resize/fit.h"
#include "core/store/staging_name.h"
#include "core/store/store.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/synth.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;

// KV tensors of exactly 2 MiB (the alignment) per block: every block count
// has its own footprint, so a byte budget can select any of them. Full count
// 16, minimum min(8192 / 1024 + 1, 16) = 9, compiled (and initial) 16.
SynthSpec TwoMibPerBlockSpec() {
  SynthSpec spec;
  spec.decoder_batch_sizes = {1, 2};
  spec.num_kv_heads = 8;
  spec.head_dim = 128;
  spec.block_size = 1024;
  spec.max_seq_len = 8192;
  return spec;
}

constexpr uint64_t kInitialBlocks = 16;
constexpr uint64_t kMinBlocks = 9;

// Aborts the test binary when not disarmed within `timeout`: gtest has no
// timeout of its own, and a deadlock must fail rather than hang.
class Watchdog {
 public:
  Watchdog(absl::Duration timeout, std::string what)
      : thread_([this, timeout, what = std::move(what)] {
          if (!done_.WaitForNotificationWithTimeout(timeout)) {
            ADD_FAILURE() << "watchdog: " << what << " did not finish within "
                          << timeout << " (deadlock?)";
            fprintf(stderr, "watchdog: %s did not finish within %s\n",
                    what.c_str(), absl::FormatDuration(timeout).c_str());
            fflush(stderr);
            std::abort();
          }
        }) {}
  ~Watchdog() {
    done_.Notify();
    thread_.join();
  }

 private:
  absl::Notification done_;
  std::thread thread_;
};

// Every decimal number in `text`.
std::vector<uint64_t> NumbersIn(const std::string& text) {
  std::vector<uint64_t> numbers;
  static const std::regex kNumber("[0-9]+");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kNumber);
       it != std::sregex_iterator(); ++it) {
    uint64_t n;
    if (absl::SimpleAtoi(it->str(), &n)) numbers.push_back(n);
  }
  return numbers;
}

struct Transition {
  uint64_t from;
  uint64_t to;
};

// What one worker thread saw, per artifact index.
struct Observations {
  std::vector<std::vector<Transition>> writes;
  std::vector<std::vector<uint64_t>> reads;
  std::vector<std::vector<uint64_t>> aborted_currents;
  int reads_ok = 0, writes_ok = 0, aborted = 0;
};

class StoreConcurrencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"alpha", "team/beta", "gamma"}) {
      std::error_code ec;
      std::filesystem::create_directories(
          std::filesystem::path(tmp_.Join(name)).parent_path(), ec);
      ASSERT_FALSE(ec) << ec.message();
      absl::StatusOr<SynthResult> made =
          WriteSyntheticArtifact(env_, TwoMibPerBlockSpec(), tmp_.Join(name));
      ASSERT_TRUE(made.ok()) << made.status();
      ASSERT_EQ(made->kvcache_num_blocks, kInitialBlocks);
      names_.push_back(name);
    }
  }

  // `env`: nullptr for the store's own (confined) Env.
  absl::Status OpenStore(Env* env = nullptr) {
    absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
        env == nullptr ? ArtifactStore::Open(tmp_.path())
                       : ArtifactStore::Open(env, tmp_.path());
    if (!store.ok()) return store.status();
    store_ = *std::move(store);
    return absl::OkStatus();
  }

  Env* env_ = Env::Default();
  testing::TempDir tmp_;
  std::vector<std::string> names_;
  std::unique_ptr<ArtifactStore> store_;
};

TEST_F(StoreConcurrencyTest, RandomReadersAndWritersFormOneChainPerArtifact) {
  ASSERT_TRUE(OpenStore().ok());
  const size_t num_artifacts = names_.size();

  // Byte budgets that fit exactly m blocks (computed from the initial
  // artifact; the fit does not depend on the current count).
  absl::StatusOr<Artifact> initial = store_->Read(names_[0]);
  ASSERT_TRUE(initial.ok()) << initial.status();
  const MemoryModel model = BuildMemoryModel(*initial);
  ASSERT_EQ(model.buckets.size(), 1u);
  std::vector<std::pair<uint64_t, MemoryBudget>> budgets;
  for (uint64_t m = kMinBlocks; m <= kInitialBlocks; ++m) {
    budgets.emplace_back(m, MemoryBudget::Bytes(model.buckets[0].other_bytes +
                                                model.buckets[0].KvBytes(m)));
  }

  constexpr int kThreads = 8;
  constexpr int kMaxOpsPerThread = 300;
  const absl::Time deadline = absl::Now() + absl::Seconds(3);
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));

  std::vector<Observations> seen(kThreads);
  for (Observations& o : seen) {
    o.writes.resize(num_artifacts);
    o.reads.resize(num_artifacts);
    o.aborted_currents.resize(num_artifacts);
  }
  {
    Watchdog watchdog(absl::Seconds(120), "the random workload");
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        Observations& mine = seen[t];
        std::mt19937 rng(seed + t);
        for (int op = 0; op < kMaxOpsPerThread && absl::Now() < deadline;
             ++op) {
          const size_t i = rng() % num_artifacts;
          const std::string& name = names_[i];
          const int kind = static_cast<int>(rng() % 4);
          if (kind == 0) {
            // Reads are cheap next to commits (which fsync): a burst of them
            // keeps readers around while exchanges happen.
            for (int n = 1 + rng() % 16; n > 0; --n) {
              absl::StatusOr<Artifact> a =
                  store_->Read(name, {.verify_payload = rng() % 4 == 0});
              if (!a.ok()) {
                ADD_FAILURE() << "Read(" << name << "): " << a.status();
                break;
              }
              mine.reads[i].push_back(a->current_num_blocks());
              ++mine.reads_ok;
            }
            continue;
          }
          WriteRequest request;
          request.name = name;
          std::optional<uint64_t> expected_budget_result;
          if (kind == 1) {
            request.target = kMinBlocks + rng() % 12;  // 9..20
          } else if (kind == 2) {
            const auto& [m, budget] = budgets[rng() % budgets.size()];
            request.budget = budget;
            expected_budget_result = m;
          } else {
            absl::StatusOr<Artifact> a = store_->Read(name);
            if (!a.ok()) {
              ADD_FAILURE() << "Read(" << name << "): " << a.status();
              continue;
            }
            mine.reads[i].push_back(a->current_num_blocks());
            request.target = kMinBlocks + rng() % 8;  // 9..16
            request.expected_current = a->current_num_blocks();
          }
          absl::StatusOr<WriteResult> r = store_->Write(request);
          if (r.ok()) {
            ++mine.writes_ok;
            if (expected_budget_result.has_value()) {
              EXPECT_EQ(r->new_num_blocks, *expected_budget_result) << name;
            } else {
              EXPECT_EQ(r->new_num_blocks, *request.target) << name;
            }
            if (request.expected_current.has_value()) {
              EXPECT_EQ(r->previous_num_blocks, *request.expected_current);
            }
            EXPECT_EQ(r->written, r->previous_num_blocks != r->new_num_blocks);
            if (r->written) {
              mine.writes[i].push_back(
                  {r->previous_num_blocks, r->new_num_blocks});
            }
          } else if (absl::IsAborted(r.status()) &&
                     request.expected_current.has_value()) {
            ++mine.aborted;
            // The message names the current count, which differs from the
            // expected one (and, checked below, is a committed value).
            const std::string message(r.status().message());
            bool named = false;
            for (uint64_t n : NumbersIn(message)) {
              if (n != *request.expected_current) {
                mine.aborted_currents[i].push_back(n);
                named = true;
              }
            }
            EXPECT_TRUE(named) << message;
            EXPECT_THAT(message,
                        HasSubstr(absl::StrCat(*request.expected_current)));
          } else {
            ADD_FAILURE() << "Write(" << name << "): " << r.status();
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  }

  int reads_ok = 0, writes_ok = 0, aborted = 0;
  for (const Observations& o : seen) {
    reads_ok += o.reads_ok;
    writes_ok += o.writes_ok;
    aborted += o.aborted;
  }
  RecordProperty("reads", reads_ok);
  RecordProperty("writes", writes_ok);
  RecordProperty("aborted", aborted);
  EXPECT_GT(reads_ok, 0);
  EXPECT_GT(writes_ok, 0);

  for (size_t i = 0; i < num_artifacts; ++i) {
    SCOPED_TRACE(names_[i]);
    absl::StatusOr<Artifact> last =
        store_->Read(names_[i], {.verify_payload = true});
    ASSERT_TRUE(last.ok()) << last.status();
    const uint64_t final_count = last->current_num_blocks();

    std::map<uint64_t, int64_t> balance;  // outdegree - indegree
    std::map<uint64_t, std::set<uint64_t>> next;
    std::set<uint64_t> committed = {kInitialBlocks};
    size_t edges = 0;
    for (const Observations& o : seen) {
      for (const Transition& t : o.writes[i]) {
        ++balance[t.from];
        --balance[t.to];
        next[t.from].insert(t.to);
        committed.insert(t.to);
        ++edges;
      }
    }
    // A single chain initial -> ... -> final: every count is left as often
    // as it is entered, except the initial one (left once more) and the
    // final one (entered once more), which cancel when they are the same.
    std::set<uint64_t> vertices = committed;
    vertices.insert(final_count);
    for (uint64_t v : vertices) {
      const int64_t want =
          (v == kInitialBlocks ? 1 : 0) - (v == final_count ? 1 : 0);
      EXPECT_EQ(balance[v], want)
          << "count " << v << " after " << edges << " commits";
    }
    // ... and connected: every committed count is reachable from the
    // initial one along commits.
    std::set<uint64_t> reached = {kInitialBlocks};
    std::vector<uint64_t> pending = {kInitialBlocks};
    while (!pending.empty()) {
      const uint64_t v = pending.back();
      pending.pop_back();
      for (uint64_t w : next[v]) {
        if (reached.insert(w).second) pending.push_back(w);
      }
    }
    EXPECT_EQ(reached, committed);
    EXPECT_EQ(committed.count(final_count), 1u);

    for (const Observations& o : seen) {
      for (uint64_t v : o.reads[i]) {
        EXPECT_EQ(committed.count(v), 1u)
            << "read a count never written: " << v;
      }
      for (uint64_t v : o.aborted_currents[i]) {
        EXPECT_EQ(committed.count(v), 1u)
            << "ABORTED named a count never written: " << v;
      }
    }
  }
  // No staging or old version left behind anywhere.
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(tmp_.path())) {
    const std::string name = entry.path().filename().string();
    EXPECT_FALSE(StagedArtifactName(name).has_value()) << entry.path();
    EXPECT_FALSE(RetiredArtifactName(name).has_value()) << entry.path();
  }
}

// Blocks the creation of any file whose path starts with `prefix` (the
// staging directory of one artifact) until released.
class BlockingEnv : public EnvWrapper {
 public:
  BlockingEnv(Env* target, std::string prefix)
      : EnvWrapper(target), prefix_(std::move(prefix)) {}

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override {
    if (absl::StartsWith(path, prefix_)) {
      std::call_once(blocked_once_, [this] { blocked_.Notify(); });
      if (!release_.WaitForNotificationWithTimeout(absl::Seconds(60))) {
        return absl::DeadlineExceededError(
            "test: the blocked writer was never released");
      }
    }
    return EnvWrapper::NewWritableFile(path);
  }

  absl::Notification& blocked() { return blocked_; }
  absl::Notification& release() { return release_; }

 private:
  const std::string prefix_;
  std::once_flag blocked_once_;
  absl::Notification blocked_;
  absl::Notification release_;
};

TEST_F(StoreConcurrencyTest, AWriterOnOneArtifactDoesNotDelayAnother) {
  const std::string root = std::filesystem::canonical(tmp_.path()).string();
  std::unique_ptr<Env> confined = testing::ConfinedEnvOrDie(root);
  BlockingEnv env(confined.get(), JoinPath(root, ".alpha.staging-"));
  ASSERT_TRUE(OpenStore(&env).ok());
  Watchdog watchdog(absl::Seconds(120), "the isolation test");

  std::atomic<bool> a_done{false};
  absl::StatusOr<WriteResult> a_result = absl::UnknownError("not run");
  std::thread a_writer([&] {
    a_result = store_->Write({.name = "alpha", .target = uint64_t{11}});
    a_done = true;
  });
  struct Joiner {
    std::thread& thread;
    BlockingEnv& env;
    ~Joiner() {
      if (!env.release().HasBeenNotified()) env.release().Notify();
      if (thread.joinable()) thread.join();
    }
  } joiner{a_writer, env};

  ASSERT_TRUE(env.blocked().WaitForNotificationWithTimeout(absl::Seconds(60)))
      << "the writer on alpha never reached its staging directory";

  // While alpha's writer is stuck mid-stage: another artifact's writers and
  // alpha's readers proceed.
  absl::StatusOr<WriteResult> b =
      store_->Write({.name = "team/beta", .target = uint64_t{10}});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->written);
  absl::StatusOr<WriteResult> c = store_->Write(
      {.name = "gamma", .target = uint64_t{12}, .output_name = "gamma-12"});
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<Artifact> alpha = store_->Read("alpha");
  ASSERT_TRUE(alpha.ok()) << alpha.status();
  EXPECT_EQ(alpha->current_num_blocks(), kInitialBlocks);  // not yet
  absl::StatusOr<std::vector<std::string>> names = store_->List();
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_FALSE(a_done.load()) << "alpha's writer finished while blocked";

  // A second writer on alpha waits for the first; its compare-and-set on
  // the count it saw then fails against the first writer's commit.
  absl::Notification second_done;
  absl::StatusOr<WriteResult> second = absl::UnknownError("not run");
  std::thread second_writer([&] {
    second = store_->Write({.name = "alpha",
                            .target = uint64_t{13},
                            .expected_current = kInitialBlocks});
    second_done.Notify();
  });
  EXPECT_FALSE(
      second_done.WaitForNotificationWithTimeout(absl::Milliseconds(200)))
      << "a second writer on alpha did not wait for the first: "
      << second.status();

  env.release().Notify();
  second_writer.join();
  a_writer.join();

  ASSERT_TRUE(a_result.ok()) << a_result.status();
  EXPECT_TRUE(a_result->written);
  EXPECT_EQ(a_result->new_num_blocks, 11u);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAborted)
      << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr("11"));
  EXPECT_EQ(store_->Read("alpha")->current_num_blocks(), 11u);
  EXPECT_EQ(store_->Read("team/beta")->current_num_blocks(), 10u);
  EXPECT_EQ(store_->Read("gamma-12")->current_num_blocks(), 12u);
  EXPECT_EQ(store_->Read("gamma")->current_num_blocks(), kInitialBlocks);
}

// WriteRequest::waiting: told when a write starts and stops waiting, for a
// maintenance tool's lock (another process) and for another write of the
// same artifact in this process. Deterministic: the test holds the lock.
TEST_F(StoreConcurrencyTest, AWaitingWriterSaysWhenItStartsAndStopsWaiting) {
  ASSERT_TRUE(OpenStore().ok());
  Watchdog watchdog(absl::Seconds(120), "the waiting test");
  absl::StatusOr<std::unique_ptr<FileLock>> held =
      env_->LockFile(ArtifactLockPath(tmp_.path(), "alpha"),
                     /*exclusive=*/true, /*wait=*/false);
  ASSERT_TRUE(held.ok()) << held.status();

  // What each writer was told, in order.
  struct Told {
    absl::Mutex mu;
    std::vector<bool> events ABSL_GUARDED_BY(mu);
    absl::Notification waiting;
    std::vector<bool> Events() {
      absl::MutexLock lock(&mu);
      return events;
    }
  };
  auto write = [this](Told* told, uint64_t target) {
    WriteRequest request{.name = "alpha", .target = target};
    request.waiting = [told](bool waiting) {
      absl::MutexLock lock(&told->mu);
      told->events.push_back(waiting);
      if (waiting && !told->waiting.HasBeenNotified()) told->waiting.Notify();
    };
    return store_->Write(request);
  };
  // The first writer takes alpha's writer flag, then waits for our lock; the
  // second waits for the first, in this process.
  Told first_told, second_told;
  absl::StatusOr<WriteResult> first = absl::UnknownError("not run");
  absl::StatusOr<WriteResult> second = absl::UnknownError("not run");
  std::thread first_writer([&] { first = write(&first_told, 11); });
  const bool first_waits =
      first_told.waiting.WaitForNotificationWithTimeout(absl::Seconds(60));
  std::thread second_writer([&] { second = write(&second_told, 12); });
  const bool second_waits =
      second_told.waiting.WaitForNotificationWithTimeout(absl::Seconds(60));
  held->reset();
  first_writer.join();
  second_writer.join();

  EXPECT_TRUE(first_waits) << "the first writer never said it waits";
  EXPECT_TRUE(second_waits) << "the second writer never said it waits";
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(first_told.Events(), (std::vector<bool>{true, false}));
  EXPECT_EQ(second_told.Events(), (std::vector<bool>{true, false}));
  EXPECT_EQ(store_->Read("alpha")->current_num_blocks(), 12u);
}

}  // namespace
}  // namespace rbln
