// Versions switched by a link (core/store/artifact_link.h): reads and writes
// through `current -> v2` act on v2 alone, by v2's name (locks, caches,
// staging, the exchange), and never touch the link; a link changed while a
// write runs aborts it, changing nothing; every other link stays refused.
#include <filesystem>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/budget.h"
#include "core/os/env.h"
#include "core/store/locks.h"
#include "core/store/store.h"
#include "core/testing/status_matchers.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/synth.h"

namespace rbln {
namespace {

namespace fs = std::filesystem;
using ::rbln::testing::StatusIs;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

// Runs `action` once, in the writer's thread, when the first directory
// whose path starts with `prefix` (a staging directory) is created.
class ActingEnv : public EnvWrapper {
 public:
  ActingEnv(Env* target, std::string prefix, std::function<void()> action)
      : EnvWrapper(target),
        prefix_(std::move(prefix)),
        action_(std::move(action)) {}

  absl::Status CreateDir(const std::string& path) override {
    if (absl::StartsWith(path, prefix_)) std::call_once(once_, action_);
    return EnvWrapper::CreateDir(path);
  }

 private:
  const std::string prefix_;
  const std::function<void()> action_;
  std::once_flag once_;
};

class StoreLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::canonical(tmp_.path()).string();
    ASSERT_NO_FATAL_FAILURE(MakeArtifact("v1"));
    ASSERT_NO_FATAL_FAILURE(MakeArtifact("v2"));
    ASSERT_NO_FATAL_FAILURE(MakeArtifact("team/v2"));
    fs::create_directory_symlink("v2", Abs("current"));
    fs::create_directory_symlink("v2", Abs("team/current"));
    confined_ = testing::ConfinedEnvOrDie(root_);
    ASSERT_NO_FATAL_FAILURE(OpenStore(confined_.get()));
    // The versions tell apart by their counts.
    ASSERT_TRUE(store_->Write({.name = "v1", .target = uint64_t{12}}).ok());
  }

  void OpenStore(Env* env, StoreOptions options = {}) {
    store_.reset();
    absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
        ArtifactStore::Open(env, root_, std::move(options));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  void MakeArtifact(const std::string& rel) {
    fs::create_directories(fs::path(Abs(rel)).parent_path());
    SynthSpec spec;
    spec.decoder_batch_sizes = {1, 2};
    absl::StatusOr<SynthResult> made =
        WriteSyntheticArtifact(Env::Default(), spec, Abs(rel));
    ASSERT_TRUE(made.ok()) << made.status();
  }

  std::string Abs(const std::string& rel) const { return root_ + "/" + rel; }

  void SwitchLink(const std::string& target, const std::string& rel) {
    testing::ReplaceSymlink(target, Abs(rel));
  }

  // The link's target, or "" (with a test failure) when `rel` is no link.
  std::string LinkAt(const std::string& rel) {
    EXPECT_TRUE(fs::is_symlink(Abs(rel))) << rel;
    std::error_code ec;
    return fs::read_symlink(Abs(rel), ec).string();
  }

  uint64_t Count(const std::string& name) {
    absl::StatusOr<Artifact> artifact = store_->Read(name);
    EXPECT_TRUE(artifact.ok()) << artifact.status();
    return artifact.ok() ? artifact->current_num_blocks() : 0;
  }

  uint64_t Inode(const std::string& rel) {
    absl::StatusOr<FileStat> st = Env::Default()->Stat(Abs(rel));
    EXPECT_TRUE(st.ok()) << st.status();
    return st.ok() ? st->inode : 0;
  }

  // Everything in the store (links as links) but its state directory, where
  // lock files come and go.
  std::map<std::string, uint64_t> Tree() {
    std::map<std::string, uint64_t> tree = testing::HashTree(root_);
    for (auto it = tree.begin(); it != tree.end();) {
      it = absl::StartsWith(it->first, kStateDirName) ? tree.erase(it)
                                                      : std::next(it);
    }
    return tree;
  }

  testing::TempDir tmp_;
  std::string root_;
  std::unique_ptr<Env> confined_;
  std::unique_ptr<ArtifactStore> store_;
};

TEST_F(StoreLinkTest, ReadsFollowTheLinkAndNameItsTarget) {
  std::string link_target = "stale";
  absl::StatusOr<std::shared_ptr<const ArtifactSummary>> summary =
      store_->ReadSummary("current", ArtifactStore::ReadMode::kMayRead,
                          &link_target);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ((*summary)->config.kvcache_num_blocks, 16u);
  EXPECT_EQ(link_target, "v2");
  // Absolute and nested names too; a cached answer names the target too.
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [name, target] :
         {std::pair<std::string, std::string>{Abs("current"), "v2"},
          {"team/current", "team/v2"}}) {
      absl::StatusOr<std::shared_ptr<const Artifact>> artifact =
          store_->ReadShared(name, {}, ArtifactStore::ReadMode::kMayRead,
                             &link_target);
      ASSERT_TRUE(artifact.ok()) << name << ": " << artifact.status();
      EXPECT_EQ((*artifact)->dir(), Abs(target)) << name;
      EXPECT_EQ(link_target, target) << name;
    }
  }
  // A plain name names no target.
  ASSERT_TRUE(
      store_->ReadSummary("v1", ArtifactStore::ReadMode::kMayRead, &link_target)
          .ok());
  EXPECT_EQ(link_target, "");
  // A non-operator's read check looks at the target's directory.
  absl::StatusOr<std::vector<FileStat>> chain =
      store_->StatArtifactPath("current");
  ASSERT_TRUE(chain.ok()) << chain.status();
  EXPECT_EQ(chain->back().type, FileType::kDirectory);
  EXPECT_EQ(chain->back().inode, Inode("v2"));
}

TEST_F(StoreLinkTest, SwitchingTheLinkSwitchesWhatIsRead) {
  EXPECT_EQ(Count("current"), 16u);  // now cached, by v2's name
  SwitchLink("v1", "current");
  std::string link_target;
  absl::StatusOr<std::shared_ptr<const ArtifactSummary>> summary =
      store_->ReadSummary("current", ArtifactStore::ReadMode::kMayRead,
                          &link_target);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ((*summary)->config.kvcache_num_blocks, 12u);
  EXPECT_EQ(link_target, "v1");
  EXPECT_EQ(Count("current"), 12u);
}

// The artifact cache holds what a link led to by the target's name: served
// again through the link while it is unchanged; a cached directory that a
// link replaced is not served by its old name.
TEST_F(StoreLinkTest, TheCacheKeepsTargetsByTheirNames) {
  const absl::Duration window = absl::Milliseconds(50);
  ASSERT_NO_FATAL_FAILURE(
      OpenStore(confined_.get(), {.artifact_cache_racy_window = window}));
  ASSERT_NO_FATAL_FAILURE(MakeArtifact("live"));
  absl::SleepFor(2 * window);
  auto first = store_->ReadShared("current");
  auto again = store_->ReadShared("current");
  auto direct = store_->ReadShared("v2");
  ASSERT_TRUE(first.ok() && again.ok() && direct.ok()) << first.status();
  EXPECT_EQ(*first, *again);
  EXPECT_EQ(*first, *direct);
  EXPECT_EQ(store_->artifact_cache().hits(), 2u);
  // A cache-only read (the gRPC thread's) looks at nothing on disk, so it
  // does not follow the link: the target is held, the link's name is not.
  auto cached_target =
      store_->ReadShared("v2", {}, ArtifactStore::ReadMode::kCachedOnly);
  auto cached_link =
      store_->ReadShared("current", {}, ArtifactStore::ReadMode::kCachedOnly);
  ASSERT_TRUE(cached_target.ok() && cached_link.ok());
  EXPECT_EQ(*cached_target, *direct);
  EXPECT_EQ(*cached_link, nullptr);
  auto summary =
      store_->ReadSummary("current", ArtifactStore::ReadMode::kCachedOnly);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(*summary, nullptr);

  // A real directory, cached, then moved away and replaced by a link.
  auto live = store_->ReadShared("live");
  ASSERT_TRUE(live.ok()) << live.status();
  ASSERT_TRUE(store_->ReadShared("live").ok());
  EXPECT_EQ(store_->artifact_cache().hits(), 4u);  // cached
  fs::rename(Abs("live"), Abs("old"));
  fs::create_directory_symlink("v1", Abs("live"));
  std::string link_target;
  auto now = store_->ReadShared("live", {}, ArtifactStore::ReadMode::kMayRead,
                                &link_target);
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ((*now)->dir(), Abs("v1"));
  EXPECT_EQ((*now)->current_num_blocks(), 12u);
  EXPECT_EQ(link_target, "v1");
}

TEST_F(StoreLinkTest, ASetWritesTheTargetAndLeavesTheLinkAsItWas) {
  const uint64_t v2_before = Inode("v2");
  const auto v1_before = testing::HashTree(Abs("v1"));
  absl::StatusOr<WriteResult> r =
      store_->Write({.name = "current", .target = uint64_t{10}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->written);
  EXPECT_EQ(r->name, "current");
  EXPECT_EQ(r->link_target, "v2");
  EXPECT_EQ(r->previous_num_blocks, 16u);
  // Still a link, to the same name; v2's directory was replaced (staged
  // beside it, exchanged on its name), nothing else changed.
  EXPECT_EQ(LinkAt("current"), "v2");
  EXPECT_NE(Inode("v2"), v2_before);
  EXPECT_EQ(Count("v2"), 10u);
  EXPECT_EQ(Count("current"), 10u);
  EXPECT_EQ(testing::HashTree(Abs("v1")), v1_before);
  for (const auto& entry : fs::directory_iterator(root_)) {
    const std::string name = entry.path().filename().string();
    EXPECT_FALSE(absl::StartsWith(name, ".current.")) << name;
  }

  // Fit, a dry run and a compare-and-set the same way.
  r = store_->Write(
      {.name = "current", .budget = MemoryBudget::Fraction(1, 2)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->name, "current");
  EXPECT_EQ(r->link_target, "v2");
  EXPECT_EQ(Count("v2"), r->new_num_blocks);
  const auto before = Tree();
  r = store_->Write(
      {.name = "current", .target = uint64_t{9}, .dry_run = true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->link_target, "v2");
  EXPECT_FALSE(r->written);
  EXPECT_THAT(store_->Write({.name = "current",
                             .target = uint64_t{9},
                             .expected_current = uint64_t{99}}),
              StatusIs(absl::StatusCode::kAborted, "kvcache_num_blocks of v2"));
  EXPECT_EQ(Tree(), before);
  EXPECT_EQ(LinkAt("current"), "v2");
}

TEST_F(StoreLinkTest, ACopyReadsTheTargetAndAnOutputIsNeverALink) {
  const auto before = Tree();
  absl::StatusOr<WriteResult> r = store_->Write(
      {.name = "current", .target = uint64_t{10}, .output_name = "copy"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->link_target, "v2");
  EXPECT_EQ(r->output_name, "copy");
  EXPECT_EQ(Count("copy"), 10u);
  EXPECT_EQ(Count("v2"), 16u);
  fs::remove_all(Abs("copy"));
  EXPECT_EQ(Tree(), before);

  // --replace never replaces a link, nor writes through one; the target
  // itself is the artifact, not an output.
  for (const WriteRequest& request :
       {WriteRequest{.name = "v1",
       .target = uint64_t{10},
       .output_name = "current",
       .replace = true},
        WriteRequest{.name = "v1",
        .target = uint64_t{10},
        .output_name = "current",
        .replace = true,
        .dry_run = true},
        WriteRequest{
            .name = "v1", .target = uint64_t{10}, .output_name = "current"}}) {
    EXPECT_THAT(store_->Write(request),
                StatusIs(absl::StatusCode::kPermissionDenied,
                         "output directory current is a symbolic "
                         "link; an output is never written through "
                         "a link, nor replaces one"));
  }
  EXPECT_THAT(
      store_->Write(
          {.name = "v1", .target = uint64_t{10}, .output_name = "current/sub"}),
      StatusIs(absl::StatusCode::kPermissionDenied, "symbolic link"));
  EXPECT_THAT(
      store_->Write({.name = "current",
                     .target = uint64_t{10},
                     .output_name = "v2",
                     .replace = true}),
      StatusIs(absl::StatusCode::kInvalidArgument, "is the artifact itself"));
  EXPECT_EQ(Tree(), before);
}

TEST_F(StoreLinkTest, ALinkSwitchedBeforeTheExchangeAbortsChangingNothing) {
  ActingEnv env(confined_.get(), Abs(".v2.staging-"),
                [this] { SwitchLink("v1", "current"); });
  ASSERT_NO_FATAL_FAILURE(OpenStore(&env));
  const auto v1 = testing::HashTree(Abs("v1"));
  const auto v2 = testing::HashTree(Abs("v2"));
  absl::StatusOr<WriteResult> r =
      store_->Write({.name = "current", .target = uint64_t{10}});
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kAborted,
                          "current was a symbolic link to v2 when "
                          "the write began, but it now names v1; "
                          "nothing was changed"));
  EXPECT_EQ(testing::HashTree(Abs("v1")), v1);
  EXPECT_EQ(testing::HashTree(Abs("v2")), v2);
  EXPECT_EQ(LinkAt("current"), "v1");
  std::vector<std::string> debris;
  for (const auto& entry : fs::directory_iterator(root_)) {
    if (absl::StrContains(entry.path().filename().string(), ".staging-")) {
      debris.push_back(entry.path().string());
    }
  }
  EXPECT_THAT(debris, IsEmpty());
}

TEST_F(StoreLinkTest, ALinkSwitchedWhileTheWriteWaitsForItsLockAborts) {
  // A maintenance tool holds v2's lock: the writer of current waits on
  // v2's (the target's) name.
  absl::StatusOr<std::unique_ptr<FileLock>> held = Env::Default()->LockFile(
      ArtifactLockPath(root_, "v2"), /*exclusive=*/true, /*wait=*/false);
  ASSERT_TRUE(held.ok()) << held.status();
  absl::Notification waiting;
  absl::StatusOr<WriteResult> result = absl::UnknownError("not run");
  std::thread writer([&] {
    WriteRequest request{.name = "current", .target = uint64_t{10}};
    request.waiting = [&](bool now) {
      if (now && !waiting.HasBeenNotified()) waiting.Notify();
    };
    result = store_->Write(request);
  });
  const bool waited = waiting.WaitForNotificationWithTimeout(absl::Seconds(60));
  SwitchLink("v1", "current");
  held->reset();
  writer.join();
  ASSERT_TRUE(waited) << "the write never waited for v2's lock";
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kAborted, "it now names v1"));
  EXPECT_EQ(Count("v1"), 12u);
  EXPECT_EQ(Count("v2"), 16u);
  EXPECT_EQ(LinkAt("current"), "v1");
}

TEST_F(StoreLinkTest, TheLinkAndItsTargetShareOneLock) {
  absl::StatusOr<std::unique_ptr<FileLock>> held = Env::Default()->LockFile(
      ArtifactLockPath(root_, "v2"), /*exclusive=*/true, /*wait=*/false);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_NO_FATAL_FAILURE(
      OpenStore(confined_.get(), {.wait_for_artifact_locks = false}));
  EXPECT_THAT(store_->Write({.name = "current", .target = uint64_t{10}}),
              StatusIs(absl::StatusCode::kUnavailable, "v2"));
  held->reset();
  EXPECT_TRUE(store_->Write({.name = "current", .target = uint64_t{10}}).ok());
}

TEST_F(StoreLinkTest, ListNamesEachLinkWithItsTarget) {
  fs::create_directory_symlink("../v1", Abs("team/climbing"));
  fs::create_directory_symlink("current", Abs("latest"));
  absl::StatusOr<StoreListing> listing = store_->ListAll();
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_THAT(listing->names, Contains("current"));
  EXPECT_THAT(listing->names, Contains("team/current"));
  EXPECT_THAT(listing->link_targets,
              UnorderedElementsAre(Pair("current", "v2"),
                                   Pair("team/current", "team/v2")));
  EXPECT_THAT(
      listing->skipped,
      Contains(AllOf(Field(&StoreListing::Skipped::name, "team/climbing"),
                     Field(&StoreListing::Skipped::reason,
                           HasSubstr("a symbolic link to '../v1', a path that "
                                     "climbs out of its directory")))));
  EXPECT_THAT(listing->skipped,
              Contains(Field(&StoreListing::Skipped::reason,
                             HasSubstr("itself a symbolic link"))));
  absl::StatusOr<std::vector<std::string>> names = store_->List();
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names,
              ElementsAre("current", "team/current", "team/v2", "v1", "v2"));
}

TEST_F(StoreLinkTest, EveryOtherLinkIsRefusedForReadsAndWrites) {
  testing::TempDir outside;
  ASSERT_NO_FATAL_FAILURE(MakeArtifact("v3"));
  fs::create_directory_symlink(Abs("v1"), Abs("absolute"));
  fs::create_directory_symlink(outside.path(), Abs("escape"));
  fs::create_directory_symlink("../v1", Abs("team/climbing"));
  fs::create_directory_symlink("current", Abs("latest"));
  fs::create_directory_symlink("team", Abs("crew"));
  fs::create_directory_symlink("empty", Abs("hollow"));
  fs::create_directories(Abs("empty"));
  const auto before = Tree();
  for (const std::string name : {"absolute", "escape", "team/climbing",
                                 "latest", "crew/current", "hollow"}) {
    SCOPED_TRACE(name);
    EXPECT_THAT(store_->Read(name),
                StatusIs(absl::StatusCode::kPermissionDenied, "symbolic link"));
    EXPECT_THAT(store_->Write({.name = name, .target = uint64_t{10}}),
                StatusIs(absl::StatusCode::kPermissionDenied, "symbolic link"));
    EXPECT_THAT(store_->Write({.name = name,
                               .budget = MemoryBudget::Fraction(1, 2),
                               .dry_run = true}),
                StatusIs(absl::StatusCode::kPermissionDenied, "symbolic link"));
  }
  fs::create_directory_symlink("v9", Abs("ghost"));
  EXPECT_THAT(store_->Write({.name = "ghost", .target = uint64_t{10}}),
              StatusIs(absl::StatusCode::kNotFound,
                       "ghost is a symbolic link to 'v9', which does "
                       "not exist"));
  fs::remove(Abs("ghost"));
  EXPECT_EQ(Tree(), before);
}

}  // namespace
}  // namespace rbln
