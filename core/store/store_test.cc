#include "core/store/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/core_metrics.h"
#include "core/device/device_spec.h"
#include "core/error_facts.h"
#include "core/format/rbln_config.h"
#include "core/metrics.h"
#include "core/os/env.h"
#include "core/os/unique_fd.h"
#include "core/resize/fit.h"
#include "core/store/intent_record.h"
#include "core/store/locks.h"
#include "core/store/staging_name.h"
#include "core/testing/status_matchers.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/synth.h"

namespace rbln {
namespace {

using ::rbln::testing::StatusIs;
using ::testing::Contains;
using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

// The fixture's artifact: RBLN-CA12, flash_attn, L 2048, S 256, B 2, so
// num_full_blocks 16 (also the compiled and current count) and
// num_min_blocks min(2048 / 256 + 1, 16) = 9.
constexpr uint64_t kInitialBlocks = 16;
constexpr uint64_t kMinBlocks = 9;

SynthSpec DefaultSpec() {
  SynthSpec spec;
  spec.decoder_batch_sizes = {1, 2};
  return spec;
}

// A spec whose KV tensors take exactly 2 MiB (the alignment) per block, so
// that every block count has its own memory footprint and a byte budget can
// select any of them: 8 / 1 * 1024 * 128 * 2 bytes per block per tensor.
SynthSpec TwoMibPerBlockSpec() {
  SynthSpec spec = DefaultSpec();
  spec.num_kv_heads = 8;
  spec.head_dim = 128;
  spec.block_size = 1024;
  spec.max_seq_len = 8192;  // full 16, minimum min(8 + 1, 16) = 9
  return spec;
}

void MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  ASSERT_FALSE(ec) << "mkdir -p " << path << ": " << ec.message();
}

void MakeArtifact(const std::string& dir,
                  const SynthSpec& spec = DefaultSpec()) {
  MakeDirs(std::filesystem::path(dir).parent_path().string());
  absl::StatusOr<SynthResult> made =
      WriteSyntheticArtifact(Env::Default(), spec, dir);
  ASSERT_TRUE(made.ok()) << made.status();
}

void MakeSymlink(const std::string& target, const std::string& link) {
  std::error_code ec;
  std::filesystem::create_directory_symlink(target, link, ec);
  ASSERT_FALSE(ec) << "symlink " << link << ": " << ec.message();
}

bool Exists(const std::string& path) { return Env::Default()->Stat(path).ok(); }

uint64_t InodeOf(const std::string& path) {
  absl::StatusOr<FileStat> st = Env::Default()->Stat(path);
  EXPECT_TRUE(st.ok()) << st.status();
  return st.ok() ? st->inode : 0;
}

// Every entry anywhere below `dir` (not following symlinks) whose name
// `is_named` accepts.
std::vector<std::string> EntriesBelow(
    const std::string& dir,
    std::optional<std::string> (*is_named)(absl::string_view)) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (is_named(entry.path().filename().string()).has_value()) {
      found.push_back(entry.path().string());
    }
  }
  return found;
}

// Every staging-named entry below `dir`.
std::vector<std::string> StagingEntriesBelow(const std::string& dir) {
  return EntriesBelow(dir, StagedArtifactName);
}

// Every retired-named entry below `dir`: old versions in their grace.
std::vector<std::string> RetiredEntriesBelow(const std::string& dir) {
  return EntriesBelow(dir, RetiredArtifactName);
}

// What commits left below `dir`: staging or retired entries.
std::vector<std::string> DebrisBelow(const std::string& dir) {
  std::vector<std::string> found = StagingEntriesBelow(dir);
  for (std::string& retired : RetiredEntriesBelow(dir)) {
    found.push_back(std::move(retired));
  }
  return found;
}

// HashTree of a store without its state directory, which gains lock files
// as writers come and go.
std::map<std::string, uint64_t> HashStore(const std::string& root) {
  std::map<std::string, uint64_t> tree = testing::HashTree(root);
  for (auto it = tree.begin(); it != tree.end();) {
    if (absl::StartsWith(it->first, kStateDirName)) {
      it = tree.erase(it);
    } else {
      ++it;
    }
  }
  return tree;
}

// Removes a directory tree when it goes out of scope.
class ScopedRemoveAll {
 public:
  explicit ScopedRemoveAll(std::string path) : path_(std::move(path)) {}
  ~ScopedRemoveAll() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

 private:
  std::string path_;
};

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join("a")));
    ASSERT_NO_FATAL_FAILURE(ReopenStore());
  }

  void ReopenStore(StoreOptions options = {}) {
    store_.reset();
    absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
        ArtifactStore::Open(tmp_.path(), std::move(options));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    root_ = store_->root();
  }

  // The store root as the store sees it (realpath of the temp dir).
  const std::string& Root() const { return root_; }
  std::string Abs(absl::string_view name) const {
    return JoinPath(root_, name);
  }

  uint64_t CurrentBlocks(absl::string_view name) {
    absl::StatusOr<Artifact> artifact = store_->Read(name);
    EXPECT_TRUE(artifact.ok()) << artifact.status();
    return artifact.ok() ? artifact->current_num_blocks() : 0;
  }

  // A directory for the entry `base` of the store-relative `parent`, made
  // as a commit makes one, its intent record first: at its staging name, or
  // at its retired name (an old version). Returns its store-relative path.
  std::string MakeRecordedDebris(const std::string& parent,
                                 absl::string_view base, bool retired) {
    absl::StatusOr<StagingIntent> intent = RecordStagingIntent(
        env_, Root(), parent.empty() ? Root() : Abs(parent), base);
    EXPECT_TRUE(intent.ok()) << intent.status();
    if (!intent.ok()) return "";
    const std::string& path = retired ? intent->retired : intent->staging;
    MakeDirs(path);
    return path.substr(Root().size() + 1);
  }

  // The intent records in the store's state directory.
  std::vector<std::string> IntentRecords() const {
    absl::StatusOr<std::vector<DirEntry>> entries =
        Env::Default()->ListDir(JoinPath(Abs(kStateDirName), kIntentDirName));
    EXPECT_TRUE(entries.ok()) << entries.status();
    std::vector<std::string> names;
    for (const DirEntry& entry : entries.value_or(std::vector<DirEntry>{})) {
      names.push_back(entry.name);
    }
    return names;
  }

  Env* env_ = Env::Default();
  testing::TempDir tmp_;
  std::unique_ptr<ArtifactStore> store_;
  std::string root_;
};

TEST_F(StoreTest, SetInPlaceCommitsAndLeavesNoStaging) {
  const auto before = testing::HashTree(tmp_.Join("a"));
  absl::StatusOr<WriteResult> r =
      store_->Write({.name = "a", .target = uint64_t{10}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->written);
  EXPECT_EQ(r->previous_num_blocks, 16u);
  EXPECT_EQ(r->new_num_blocks, 10u);
  absl::StatusOr<Artifact> a = store_->Read("a", {.verify_payload = true});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->current_num_blocks(), 10u);
  const auto after = testing::HashTree(tmp_.Join("a"));
  EXPECT_EQ(after.at("tokenizer.json"), before.at("tokenizer.json"));
  EXPECT_NE(after.at("rbln_config.json"), before.at("rbln_config.json"));
  absl::StatusOr<std::vector<DirEntry>> entries = env_->ListDir(tmp_.path());
  ASSERT_TRUE(entries.ok());
  for (const DirEntry& e : *entries) {
    EXPECT_FALSE(StagedArtifactName(e.name).has_value()) << e.name;
    EXPECT_FALSE(RetiredArtifactName(e.name).has_value()) << e.name;
  }
}

// Reads are served from the artifact cache while the files stay the same,
// and never after a commit or an edit changed them.
TEST_F(StoreTest, TheArtifactCacheServesUnchangedArtifactsOnly) {
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join("b")));
  // Until the files have been still for the racy window, every read reads
  // them again (core/format/artifact_cache.h).
  const absl::Duration window = absl::Milliseconds(50);
  ReopenStore({.artifact_cache_racy_window = window});
  absl::SleepFor(2 * window);
  auto first = store_->ReadShared("a");
  auto again = store_->ReadShared("a");
  ASSERT_TRUE(first.ok() && again.ok()) << first.status();
  EXPECT_EQ(*first, *again);
  auto summary = store_->ReadSummary("a");
  auto summary_again = store_->ReadSummary("a");
  ASSERT_TRUE(summary.ok() && summary_again.ok()) << summary.status();
  EXPECT_EQ(*summary, *summary_again);
  EXPECT_EQ(store_->artifact_cache().hits(), 2u);
  // A payload check always reads.
  auto verified = store_->ReadShared("a", {.verify_payload = true});
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_NE(*verified, *first);

  // Our commit: the next read sees the new count, at once, and the codecs'
  // facts of the containers it replaced are dropped.
  const absl::StatusOr<FileStat> prefill =
      Env::Default()->Stat(JoinPath(Abs("a"), "prefill.rbln"));
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  EXPECT_NE(
      store_->inspect_cache().Find("built-in", FileIdentity::Of(*prefill)),
      nullptr);
  ASSERT_TRUE(store_->Write({.name = "a", .target = uint64_t{10}}).ok());
  EXPECT_EQ(
      store_->inspect_cache().Find("built-in", FileIdentity::Of(*prefill)),
      nullptr);
  EXPECT_EQ((*store_->ReadShared("a"))->current_num_blocks(), 10u);
  EXPECT_EQ((*store_->ReadSummary("a"))->config.kvcache_num_blocks, 10u);
  ASSERT_TRUE(store_
                  ->Write({.name = "a",
                           .target = uint64_t{12},
                           .output_name = "b",
                           .replace = true})
                  .ok());
  EXPECT_EQ((*store_->ReadSummary("b"))->config.kvcache_num_blocks, 12u);

  // Someone else's edit in place, keeping the size.
  const std::string config = JoinPath(Abs("a"), kRblnConfigFileName);
  std::string text = testing::ReadFileOrDie(config);
  const size_t at = text.find("\"kvcache_num_blocks\": 10");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 24, "\"kvcache_num_blocks\": 14");
  testing::WriteFileOrDie(config, text);
  EXPECT_EQ((*store_->ReadSummary("a"))->config.kvcache_num_blocks, 14u);
  // The whole read sees it too, and refuses it: the graphs hold 10 blocks.
  EXPECT_EQ(store_->ReadShared("a").status().code(),
            absl::StatusCode::kDataLoss);
}

// rbln_artifactd_artifact_cache_lookups_total counts each read once: a try
// that may not read (kCachedOnly) counts only when it hits, since on a miss
// its caller reads next; a payload check does not look.
TEST_F(StoreTest, EachReadCountsOneArtifactCacheLookup) {
  const absl::Duration window = absl::Milliseconds(50);
  ReopenStore({.artifact_cache_racy_window = window});
  absl::SleepFor(2 * window);
  RegisterCoreMetrics();
  const auto lookups = [](absl::string_view result) {
    return metrics::Registry::Default()
        .Sample(absl::StrCat(
            "rbln_artifactd_artifact_cache_lookups_total{result=\"", result,
            "\"}"))
        .value_or(-1);
  };
  const double hits = lookups("hit");
  const double misses = lookups("miss");
  using ReadMode = ArtifactStore::ReadMode;
  auto summary = store_->ReadSummary("a", ReadMode::kCachedOnly);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(*summary, nullptr);
  EXPECT_EQ(lookups("miss"), misses);
  ASSERT_TRUE(store_->ReadSummary("a").ok());
  EXPECT_EQ(lookups("miss"), misses + 1);
  summary = store_->ReadSummary("a", ReadMode::kCachedOnly);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_NE(*summary, nullptr);
  ASSERT_TRUE(store_->ReadSummary("a").ok());
  EXPECT_EQ(lookups("hit"), hits + 2);
  ASSERT_TRUE(store_->ReadShared("a").ok());
  ASSERT_TRUE(store_->ReadShared("a").ok());
  ASSERT_TRUE(store_->ReadShared("a", {.verify_payload = true}).ok());
  EXPECT_EQ(lookups("hit"), hits + 3);
  EXPECT_EQ(lookups("miss"), misses + 2);
}

TEST_F(StoreTest, OutputDirectoryLeavesTheSourceByteIdentical) {
  const auto before = testing::HashTree(tmp_.Join("a"));
  absl::StatusOr<WriteResult> r =
      store_->Write({.name = "a",
                     .budget = MemoryBudget::Fraction(1, 2),
                     .output_name = "b"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(testing::HashTree(tmp_.Join("a")), before);
  absl::StatusOr<Artifact> b = store_->Read("b", {.verify_payload = true});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->current_num_blocks(), r->new_num_blocks);

  r = store_->Write({.name = "a", .target = uint64_t{9}, .output_name = "b"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  r = store_->Write({.name = "a",
                     .target = uint64_t{9},
                     .output_name = "b",
                     .replace = true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(store_->Read("b")->current_num_blocks(), 9u);
}

TEST_F(StoreTest, RecoveryRemovesOnlyWhatItsRecordsName) {
  store_.reset();
  const std::string debris = MakeRecordedDebris("", "a", /*retired=*/false);
  const std::string retired = MakeRecordedDebris("", "a", /*retired=*/true);
  // Exact names, but no record: left in place.
  const std::string unrecorded = StagingNameFor("a");
  const std::string unrecorded_retired = RetiredNameFor("a");
  ASSERT_TRUE(env_->CreateDir(tmp_.Join(unrecorded)).ok());
  ASSERT_TRUE(env_->CreateDir(tmp_.Join(unrecorded_retired)).ok());
  ASSERT_TRUE(env_->CreateDir(tmp_.Join(".a.staging-notdebris")).ok());
  ASSERT_TRUE(env_->CreateDir(tmp_.Join(".a.retired-notdebris")).ok());
  ASSERT_EQ(IntentRecords().size(), 2u);
  absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
      ArtifactStore::Open(tmp_.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_THAT((*store)->recovered(), UnorderedElementsAre(debris, retired));
  EXPECT_THAT((*store)->left_in_place(),
              UnorderedElementsAre(unrecorded, unrecorded_retired));
  EXPECT_FALSE(env_->Stat(tmp_.Join(debris)).ok());
  EXPECT_FALSE(env_->Stat(tmp_.Join(retired)).ok());
  EXPECT_THAT(IntentRecords(), IsEmpty());
  for (const std::string& kept :
       {unrecorded, unrecorded_retired, std::string(".a.staging-notdebris"),
        std::string(".a.retired-notdebris")}) {
    EXPECT_TRUE(env_->Stat(tmp_.Join(kept)).ok()) << kept;
  }
}

TEST_F(StoreTest, SecondOpenFailsFastNamingThePid) {
  absl::StatusOr<std::unique_ptr<ArtifactStore>> second =
      ArtifactStore::Open(tmp_.path());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("pid ", getpid())));
}

// ---------------------------------------------------------------------------
// Names

TEST_F(StoreTest, ANameKeptIsNotResolvedAgainAndAFloodStaysBounded) {
  bool held = true;
  absl::StatusOr<std::shared_ptr<const ArtifactStore::Located>> first =
      store_->Locate("team//./llama/", &held);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(held);
  EXPECT_EQ((*first)->name, "team/llama");
  EXPECT_EQ((*first)->path, Abs("team/llama"));
  // Resolved anew until a request keeps it.
  EXPECT_NE(store_->Locate("team//./llama/").value_or(nullptr), *first);
  EXPECT_EQ(store_->located_bytes(), 0u);
  store_->KeepLocated("team//./llama/", *first);
  EXPECT_EQ(store_->Locate("team//./llama/", &held).value_or(nullptr), *first);
  EXPECT_TRUE(held);
  // Other text for the same artifact is resolved on its own, to the same
  // place.
  absl::StatusOr<std::shared_ptr<const ArtifactStore::Located>> plain =
      store_->Locate("team/llama", &held);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(held);
  EXPECT_EQ((*plain)->path, (*first)->path);
  // A name that does not resolve fails each time and is never kept.
  const uint64_t bytes = store_->located_bytes();
  EXPECT_GT(bytes, 0u);
  EXPECT_FALSE(store_->Locate("../outside").ok());
  EXPECT_FALSE(store_->Locate("../outside", &held).ok());
  EXPECT_FALSE(held);
  EXPECT_EQ(store_->located_bytes(), bytes);
  // Far more distinct names than the memo holds (about 4 KiB each, kept
  // twice and resolved into two more): it stays within its bound, the
  // oldest go, and what is asked again resolves anew.
  std::string long_dir;
  for (int i = 0; i < 20; ++i) {
    absl::StrAppend(&long_dir, std::string(190, 'x'), "/");
  }
  for (int i = 0; i < 1000; ++i) {
    const std::string name = absl::StrCat(long_dir, i);
    absl::StatusOr<std::shared_ptr<const ArtifactStore::Located>> at =
        store_->Locate(name);
    ASSERT_TRUE(at.ok()) << at.status();
    store_->KeepLocated(name, *at);
    ASSERT_LE(store_->located_bytes(), uint64_t{1} << 20);
  }
  EXPECT_GT(store_->located_bytes(), (uint64_t{1} << 20) / 2);
  absl::StatusOr<std::shared_ptr<const ArtifactStore::Located>> again =
      store_->Locate("team//./llama/", &held);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(held);
  EXPECT_EQ((*again)->name, "team/llama");
}

TEST_F(StoreTest, AcceptsRelativeNestedAndAbsoluteNames) {
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join("team/llama")));
  EXPECT_EQ(store_->CanonicalName("a").value_or("?"), "a");
  EXPECT_EQ(store_->CanonicalName("./a/").value_or("?"), "a");
  EXPECT_EQ(store_->CanonicalName("team/llama").value_or("?"), "team/llama");
  EXPECT_EQ(store_->CanonicalName("team//./llama/").value_or("?"),
            "team/llama");
  EXPECT_EQ(store_->CanonicalName(Abs("a")).value_or("?"), "a");
  EXPECT_EQ(store_->CanonicalName(Abs("team/llama")).value_or("?"),
            "team/llama");
  // A name that does not exist yet (an output directory) is fine.
  EXPECT_EQ(store_->CanonicalName("new/dir").value_or("?"), "new/dir");
  EXPECT_EQ(store_->PathOf("team/llama"), Abs("team/llama"));

  absl::StatusOr<Artifact> nested = store_->Read("team/llama");
  ASSERT_TRUE(nested.ok()) << nested.status();
  EXPECT_EQ(nested->current_num_blocks(), kInitialBlocks);
  absl::StatusOr<Artifact> absolute = store_->Read(Abs("a"));
  ASSERT_TRUE(absolute.ok()) << absolute.status();
  EXPECT_EQ(absolute->current_num_blocks(), kInitialBlocks);

  // Writers report the canonical name whatever form they were given.
  absl::StatusOr<WriteResult> r =
      store_->Write({.name = Abs("team/llama"), .target = uint64_t{12}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->name, "team/llama");
  EXPECT_EQ(CurrentBlocks("team/llama"), 12u);
  r = store_->Write(
      {.name = "./a", .target = uint64_t{11}, .output_name = Abs("team/b")});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->name, "a");
  EXPECT_EQ(r->output_name, "team/b");
  EXPECT_EQ(CurrentBlocks("team/b"), 11u);
}

TEST_F(StoreTest, RefusesDotDot) {
  testing::TempDir outside;
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(outside.Join("x")));
  const std::string escape = absl::StrCat(
      "../", std::filesystem::path(outside.path()).filename().string(), "/x");
  for (const std::string& name :
       {std::string(".."), std::string("../x"), std::string("a/.."),
        std::string("a/../a"), std::string("team/../../etc"), escape,
        Abs("../x"), Abs("a/../../x")}) {
    SCOPED_TRACE(name);
    EXPECT_THAT(store_->CanonicalName(name),
                StatusIs(absl::StatusCode::kPermissionDenied, "'..'"));
    EXPECT_THAT(store_->Read(name),
                StatusIs(absl::StatusCode::kPermissionDenied, "'..'"));
  }
  const auto outside_before = testing::HashTree(outside.path());
  EXPECT_THAT(store_->Write({.name = escape, .target = uint64_t{10}}),
              StatusIs(absl::StatusCode::kPermissionDenied, "'..'"));
  EXPECT_THAT(
      store_->Write(
          {.name = "a", .target = uint64_t{10}, .output_name = "../escaped"}),
      StatusIs(absl::StatusCode::kPermissionDenied, "'..'"));
  EXPECT_EQ(testing::HashTree(outside.path()), outside_before);
  EXPECT_FALSE(Exists(std::filesystem::path(Root()).parent_path().string() +
                      "/escaped"));
  EXPECT_EQ(CurrentBlocks("a"), kInitialBlocks);
}

TEST_F(StoreTest, RefusesAbsolutePathsOutsideTheStore) {
  testing::TempDir outside;
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(outside.Join("x")));
  // A sibling whose name starts with the root's: outside, not nested.
  const std::string lookalike = Root() + "-sibling";
  ScopedRemoveAll remove_lookalike(lookalike);
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(lookalike + "/x"));
  for (const std::string& name :
       {outside.Join("x"), lookalike + "/x", lookalike, std::string("/"),
        std::string("/etc/passwd")}) {
    SCOPED_TRACE(name);
    EXPECT_THAT(store_->CanonicalName(name),
                StatusIs(absl::StatusCode::kPermissionDenied,
                         "outside the artifact store"));
    EXPECT_THAT(store_->Read(name),
                StatusIs(absl::StatusCode::kPermissionDenied, name));
  }
  const auto outside_before = testing::HashTree(outside.path());
  const auto lookalike_before = testing::HashTree(lookalike);
  EXPECT_THAT(
      store_->Write({.name = outside.Join("x"), .target = uint64_t{10}}),
      StatusIs(absl::StatusCode::kPermissionDenied, "outside"));
  // An output is told where it may go: into the store, never a read-only
  // root (those are for sources).
  const absl::StatusOr<WriteResult> output = store_->Write(
      {.name = "a", .target = uint64_t{10}, .output_name = outside.Join("y")});
  EXPECT_THAT(output,
              StatusIs(absl::StatusCode::kPermissionDenied,
                       absl::StrCat("output directory ", outside.Join("y"),
                                    " is outside the artifact store ", Root(),
                                    "; the output must be inside the store: "
                                    "choose a directory in ",
                                    Root())));
  EXPECT_THAT(output.status().message(), Not(HasSubstr("read-only-root")));
  EXPECT_EQ(GetErrorFacts(output.status())->reason, ErrorReason::kOutsideStore);
  EXPECT_THAT(store_->Write({.name = lookalike + "/x", .target = uint64_t{10}}),
              StatusIs(absl::StatusCode::kPermissionDenied, "outside"));
  EXPECT_EQ(testing::HashTree(outside.path()), outside_before);
  EXPECT_EQ(testing::HashTree(lookalike), lookalike_before);
  EXPECT_FALSE(Exists(outside.Join("y")));
}

TEST_F(StoreTest, RefusesSymlinkThatEscapesTheStore) {
  testing::TempDir outside;
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(outside.Join("x")));
  ASSERT_NO_FATAL_FAILURE(MakeSymlink(outside.Join("x"), tmp_.Join("escape")));
  ASSERT_NO_FATAL_FAILURE(MakeSymlink(outside.path(), tmp_.Join("door")));
  const auto outside_before = testing::HashTree(outside.path());
  for (const std::string& name : {std::string("escape"), std::string("door/x"),
                                  Abs("escape"), std::string("door/new")}) {
    SCOPED_TRACE(name);
    // Names are lexical; the link is refused where the file system is used.
    EXPECT_TRUE(store_->CanonicalName(name).ok());
    EXPECT_THAT(store_->Read(name),
                StatusIs(absl::StatusCode::kPermissionDenied, "symbolic link"));
  }
  // The message names the link that was found.
  EXPECT_THAT(store_->Read("door/x"),
              StatusIs(absl::StatusCode::kPermissionDenied, Abs("door")));
  EXPECT_THAT(store_->Write({.name = "escape", .target = uint64_t{10}}),
              StatusIs(absl::StatusCode::kPermissionDenied, "symbolic link"));
  EXPECT_THAT(
      store_->Write({.name = "escape", .budget = MemoryBudget::Fraction(1, 2)}),
      StatusIs(absl::StatusCode::kPermissionDenied, "symbolic link"));
  EXPECT_THAT(
      store_->Write(
          {.name = "a", .target = uint64_t{10}, .output_name = "door/new"}),
      StatusIs(absl::StatusCode::kPermissionDenied, "symbolic link"));
  EXPECT_THAT(store_->Write({.name = "a",
                             .target = uint64_t{10},
                             .output_name = "escape",
                             .replace = true}),
              StatusIs(absl::StatusCode::kPermissionDenied, "symbolic link"));
  EXPECT_EQ(testing::HashTree(outside.path()), outside_before);
  EXPECT_EQ(CurrentBlocks("a"), kInitialBlocks);
}

TEST_F(StoreTest, RefusesSymlinkThatStaysInsideTheStoreButAVersionLink) {
  // A link in a middle component would give every artifact below it two
  // names, and so two locks; a last-component link to an artifact beside it
  // (core/store/artifact_link.h, store_link_test.cc) is read and written
  // by its target's name.
  ASSERT_NO_FATAL_FAILURE(MakeSymlink("a", tmp_.Join("alias")));
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join("team/llama")));
  ASSERT_NO_FATAL_FAILURE(MakeSymlink("team", tmp_.Join("crew")));
  EXPECT_THAT(store_->Read("crew/llama"),
              StatusIs(absl::StatusCode::kPermissionDenied, "symbolic link"));
  EXPECT_THAT(store_->Write({.name = "crew/llama", .target = uint64_t{10}}),
              StatusIs(absl::StatusCode::kPermissionDenied, "symbolic link"));
  EXPECT_EQ(CurrentBlocks("team/llama"), kInitialBlocks);
  absl::StatusOr<WriteResult> r =
      store_->Write({.name = Abs("alias"), .target = uint64_t{10}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->name, "alias");
  EXPECT_EQ(r->link_target, "a");
  EXPECT_EQ(CurrentBlocks("a"), 10u);
  EXPECT_TRUE(std::filesystem::is_symlink(tmp_.Join("alias")));
}

TEST_F(StoreTest, RefusesNulBytes) {
  const std::string names[] = {std::string("a\0", 2), std::string("a\0b", 3),
                               std::string("\0", 1),
                               Abs(std::string("a\0/../../etc", 12))};
  for (const std::string& name : names) {
    SCOPED_TRACE(absl::CEscape(name));
    EXPECT_THAT(store_->CanonicalName(name),
                StatusIs(absl::StatusCode::kInvalidArgument, "NUL"));
    EXPECT_THAT(store_->Read(name),
                StatusIs(absl::StatusCode::kInvalidArgument, "NUL"));
    EXPECT_THAT(store_->Write({.name = name, .target = uint64_t{10}}),
                StatusIs(absl::StatusCode::kInvalidArgument, "NUL"));
  }
  EXPECT_THAT(store_->Write({.name = "a",
                             .target = uint64_t{10},
                             .output_name = std::string("b\0", 2)}),
              StatusIs(absl::StatusCode::kInvalidArgument, "NUL"));
  EXPECT_FALSE(Exists(tmp_.Join("b")));
  EXPECT_EQ(CurrentBlocks("a"), kInitialBlocks);
}

TEST_F(StoreTest, RefusesHiddenComponents) {
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join(".hidden")));
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join("team/.secret")));
  const std::string staging = StagingNameFor("a");
  const std::string retired = RetiredNameFor("a");
  const std::map<std::string, std::string> cases = {
      {kStateDirName, kStateDirName},
      {absl::StrCat(kStateDirName, "/locks"), kStateDirName},
      {".hidden", ".hidden"},
      {Abs(".hidden"), ".hidden"},
      {"team/.secret", ".secret"},
      {staging, staging},
      {absl::StrCat("team/", staging), staging},
      {retired, retired},
      {absl::StrCat("team/", retired), retired},
      {"a/.git", ".git"},
  };
  for (const auto& [name, component] : cases) {
    SCOPED_TRACE(name);
    EXPECT_THAT(store_->CanonicalName(name),
                StatusIs(absl::StatusCode::kPermissionDenied,
                         absl::StrCat("hidden component '", component, "'")));
    EXPECT_THAT(store_->Read(name),
                StatusIs(absl::StatusCode::kPermissionDenied, component));
  }
  const auto state_before = testing::HashTree(Abs(kStateDirName));
  const auto hidden_before = testing::HashTree(tmp_.Join(".hidden"));
  EXPECT_THAT(store_->Write({.name = ".hidden", .target = uint64_t{10}}),
              StatusIs(absl::StatusCode::kPermissionDenied, ".hidden"));
  EXPECT_THAT(store_->Write({.name = "a",
                             .target = uint64_t{10},
                             .output_name = absl::StrCat(kStateDirName, "/x")}),
              StatusIs(absl::StatusCode::kPermissionDenied, kStateDirName));
  for (const std::string& output : {staging, retired}) {
    EXPECT_THAT(
        store_->Write(
            {.name = "a", .target = uint64_t{10}, .output_name = output}),
        StatusIs(absl::StatusCode::kPermissionDenied, output));
    EXPECT_FALSE(Exists(tmp_.Join(output)));
  }
  EXPECT_EQ(testing::HashTree(tmp_.Join(".hidden")), hidden_before);
  EXPECT_EQ(testing::HashTree(Abs(kStateDirName)), state_before);
  EXPECT_EQ(CurrentBlocks("a"), kInitialBlocks);
}

TEST_F(StoreTest, RefusesEmptyNameAndTheStoreRoot) {
  EXPECT_THAT(store_->CanonicalName(""),
              StatusIs(absl::StatusCode::kInvalidArgument, "no artifact"));
  EXPECT_THAT(store_->Write({.name = "", .target = uint64_t{10}}),
              StatusIs(absl::StatusCode::kInvalidArgument, "no artifact"));
  for (const std::string& name :
       {std::string("."), std::string("./"), std::string("./."), Root(),
        Root() + "/", Root() + "/."}) {
    SCOPED_TRACE(name);
    EXPECT_THAT(store_->CanonicalName(name),
                StatusIs(absl::StatusCode::kInvalidArgument, "store root"));
    EXPECT_THAT(store_->Read(name),
                StatusIs(absl::StatusCode::kInvalidArgument, "store root"));
    EXPECT_THAT(store_->Write({.name = name, .target = uint64_t{10}}),
                StatusIs(absl::StatusCode::kInvalidArgument, "store root"));
    EXPECT_THAT(store_->Write({.name = "a",
                               .target = uint64_t{10},
                               .output_name = name,
                               .replace = true}),
                StatusIs(absl::StatusCode::kInvalidArgument, "store root"));
  }
  EXPECT_EQ(CurrentBlocks("a"), kInitialBlocks);
}

TEST_F(StoreTest, UnknownArtifactIsNotFound) {
  EXPECT_THAT(store_->Read("nope"), StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_THAT(store_->Read("team/nope"),
              StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_THAT(store_->Write({.name = "nope", .target = uint64_t{10}}),
              StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_THAT(store_->Write({.name = "nope",
                             .budget = MemoryBudget::Fraction(1, 2),
                             .output_name = "out"}),
              StatusIs(absl::StatusCode::kNotFound, ""));
  // A directory without rbln_config.json is not an artifact.
  ASSERT_NO_FATAL_FAILURE(MakeDirs(tmp_.Join("plain")));
  EXPECT_THAT(store_->Read("plain"), StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_FALSE(Exists(tmp_.Join("nope")));
  EXPECT_FALSE(Exists(tmp_.Join("out")));
  EXPECT_THAT(DebrisBelow(Root()), IsEmpty());
}

// ---------------------------------------------------------------------------
// Recovery

TEST_F(StoreTest, RecoveryRemovesStagingDirectoriesAtAnyDepth) {
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join("team/llama")));
  store_.reset();
  const auto a_before = testing::HashTree(tmp_.Join("a"));
  const auto llama_before = testing::HashTree(tmp_.Join("team/llama"));

  ASSERT_NO_FATAL_FAILURE(MakeDirs(tmp_.Join("x/y/z")));
  const std::string top = MakeRecordedDebris("", "a", false);
  const std::string nested = MakeRecordedDebris("team", "llama", false);
  const std::string deep = MakeRecordedDebris("x/y/z", "q", false);
  const std::string orphan = MakeRecordedDebris("", "gone", false);
  // Old versions that were waiting out their grace.
  const std::string retired = MakeRecordedDebris("", "a", true);
  const std::string nested_retired = MakeRecordedDebris("team", "llama", true);
  for (const std::string& rel :
       {top, nested, deep, orphan, retired, nested_retired}) {
    ASSERT_NO_FATAL_FAILURE(MakeDirs(tmp_.Join(rel + "/sub")));
    testing::WriteFileOrDie(tmp_.Join(rel + "/rbln_config.json"), "{}");
    testing::WriteFileOrDie(tmp_.Join(rel + "/sub/f"), "partial");
  }
  // A half-written staging copy of the artifact itself, as a crash leaves.
  const std::string copy = MakeRecordedDebris("", "a", false);
  ASSERT_TRUE(env_->RemoveDir(tmp_.Join(copy)).ok());
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join(copy)));

  ASSERT_NO_FATAL_FAILURE(ReopenStore());
  std::vector<std::string> expected = {top,    nested,  deep,
                                       orphan, retired, nested_retired};
  std::vector<std::string> recovered = store_->recovered();
  ASSERT_EQ(recovered.size(), 7u) << ::testing::PrintToString(recovered);
  recovered.erase(std::remove_if(recovered.begin(), recovered.end(),
                                 [&](const std::string& r) {
                                   return std::find(expected.begin(),
                                                    expected.end(),
                                                    r) != expected.end();
                                 }),
                  recovered.end());
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_EQ(recovered[0], copy);

  for (const std::string& rel : expected) EXPECT_FALSE(Exists(tmp_.Join(rel)));
  EXPECT_THAT(DebrisBelow(Root()), IsEmpty());
  EXPECT_THAT(IntentRecords(), IsEmpty());
  EXPECT_THAT(store_->left_in_place(), IsEmpty());
  // Everything else is as it was, the directories that held debris too.
  EXPECT_EQ(testing::HashTree(tmp_.Join("a")), a_before);
  EXPECT_EQ(testing::HashTree(tmp_.Join("team/llama")), llama_before);
  EXPECT_TRUE(Exists(tmp_.Join("x/y/z")));
  EXPECT_EQ(CurrentBlocks("team/llama"), kInitialBlocks);

  // A clean store recovers nothing.
  ASSERT_NO_FATAL_FAILURE(ReopenStore());
  EXPECT_THAT(store_->recovered(), IsEmpty());
}

TEST_F(StoreTest, RecoveryLeavesLookAlikesStateAndOutsideAlone) {
  testing::TempDir outside;
  const std::string exact = "0123456789abcdef";
  ASSERT_NO_FATAL_FAILURE(MakeDirs(outside.Join(".o.staging-" + exact)));
  testing::WriteFileOrDie(outside.Join("victim"), "keep me");
  store_.reset();

  const std::string look_alike_dirs[] = {
      ".a.staging-0123456789abcde",    // 15 digits
      ".a.staging-0123456789abcdef0",  // 17 digits
      ".a.staging-0123456789ABCDEF",   // uppercase
      ".a.staging-notdebris",
      "a.staging-" + exact,  // not hidden: an ordinary directory
      ".staging-" + exact,
      "team/.llama.staging-0123456789abcdeF",
      ".a.retired-0123456789abcde",   // 15 digits
      ".a.retired-0123456789ABCDEF",  // uppercase
      ".a.Retired-" + exact,
      "a.retired-" + exact,
  };
  for (const std::string& rel : look_alike_dirs) {
    ASSERT_NO_FATAL_FAILURE(MakeDirs(tmp_.Join(rel)));
    testing::WriteFileOrDie(tmp_.Join(rel + "/f"), rel);
  }
  // Regular files with an exact staging or retired name.
  testing::WriteFileOrDie(tmp_.Join(".b.staging-" + exact), "a file");
  testing::WriteFileOrDie(tmp_.Join(".b.retired-" + exact), "a file");
  ASSERT_NO_FATAL_FAILURE(MakeDirs(tmp_.Join("team")));
  testing::WriteFileOrDie(tmp_.Join("team/.c.staging-" + exact), "a file");
  // Exact names inside an artifact directory belong to the artifact.
  ASSERT_NO_FATAL_FAILURE(MakeDirs(tmp_.Join("a/.x.staging-" + exact)));
  ASSERT_NO_FATAL_FAILURE(MakeDirs(tmp_.Join("a/sub/.y.staging-" + exact)));
  ASSERT_NO_FATAL_FAILURE(MakeDirs(tmp_.Join("a/.z.retired-" + exact)));
  // An exact name in the state directory.
  ASSERT_NO_FATAL_FAILURE(
      MakeDirs(JoinPath(tmp_.Join(kStateDirName), ".a.staging-" + exact)));
  // Symbolic links: one with an exact staging name pointing outside, one to
  // an outside directory that holds an exact staging name.
  ASSERT_NO_FATAL_FAILURE(
      MakeSymlink(outside.path(), tmp_.Join(".d.staging-" + exact)));
  ASSERT_NO_FATAL_FAILURE(
      MakeSymlink(outside.path(), tmp_.Join(".d.retired-" + exact)));
  ASSERT_NO_FATAL_FAILURE(MakeSymlink(outside.path(), tmp_.Join("door")));

  const auto store_before = testing::HashTree(tmp_.path());
  const auto outside_before = testing::HashTree(outside.path());
  ASSERT_NO_FATAL_FAILURE(ReopenStore());
  EXPECT_THAT(store_->recovered(), IsEmpty());
  EXPECT_EQ(testing::HashTree(tmp_.path()), store_before);
  EXPECT_EQ(testing::HashTree(outside.path()), outside_before);
  EXPECT_TRUE(Exists(outside.Join(".o.staging-" + exact)));
}

TEST_F(StoreTest, RecoveryKeepsStagingOfAnArtifactLockedElsewhere) {
  // A writer in another process (a maintenance tool) holds the artifact's
  // lock: its staging directory and the old version it swapped out are
  // live, not debris, and not reported. Once it is gone they are reported,
  // never removed: this daemon holds no record of them.
  store_.reset();
  const std::string live = tmp_.Join(StagingNameFor("a"));
  const std::string live_retired = tmp_.Join(RetiredNameFor("a"));
  ASSERT_NO_FATAL_FAILURE(MakeDirs(live));
  ASSERT_NO_FATAL_FAILURE(MakeDirs(live_retired));
  const std::string lock_path = ArtifactLockPath(tmp_.path(), "a");
  absl::StatusOr<std::unique_ptr<FileLock>> held =
      env_->LockFile(lock_path, /*exclusive=*/true, /*wait=*/false);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_NO_FATAL_FAILURE(ReopenStore());
  EXPECT_THAT(store_->recovered(), IsEmpty());
  EXPECT_TRUE(Exists(live));
  EXPECT_TRUE(Exists(live_retired));

  EXPECT_THAT(store_->left_in_place(), IsEmpty());

  held->reset();
  ASSERT_NO_FATAL_FAILURE(ReopenStore());
  EXPECT_THAT(store_->recovered(), IsEmpty());
  EXPECT_EQ(store_->left_in_place().size(), 2u);
  EXPECT_TRUE(Exists(live));
  EXPECT_TRUE(Exists(live_retired));
}

// ---------------------------------------------------------------------------
// The store LOCK

TEST_F(StoreTest, SecondOpenNamesTheLockAndWorksAfterTheFirstCloses) {
  const auto before = HashStore(tmp_.path());
  absl::StatusOr<std::unique_ptr<ArtifactStore>> second =
      ArtifactStore::Open(tmp_.path());
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kFailedPrecondition,
                               absl::StrCat("pid ", getpid())));
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kFailedPrecondition,
                               JoinPath(Abs(kStateDirName), "LOCK")));
  // The refused open changed nothing (it did not rewrite the pid either).
  EXPECT_EQ(HashStore(tmp_.path()), before);
  // The first store still works.
  EXPECT_EQ(CurrentBlocks("a"), kInitialBlocks);

  const std::string root = Root();
  store_.reset();
  second = ArtifactStore::Open(tmp_.path());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->root(), root);
  EXPECT_EQ(testing::ReadFileOrDie(
                JoinPath(JoinPath(tmp_.path(), kStateDirName), "LOCK")),
            absl::StrCat(getpid(), "\n"));
}

TEST_F(StoreTest, OpenRefusesMissingRootAndFiles) {
  EXPECT_THAT(ArtifactStore::Open(tmp_.Join("missing")),
              StatusIs(absl::StatusCode::kNotFound, "missing"));
  testing::WriteFileOrDie(tmp_.Join("file"), "x");
  EXPECT_THAT(
      ArtifactStore::Open(tmp_.Join("file")),
      StatusIs(absl::StatusCode::kFailedPrecondition, "not a directory"));
}

// Runs `child` in a forked process and returns its exit code (-1 when it did
// not exit normally). The child gets the write end of a pipe whose contents
// the parent returns in `output`. The child must not return into gtest: it
// ends with _exit.
int RunInChild(const std::function<int(int out_fd)>& child,
               std::string* output) {
  int fds[2];
  if (pipe(fds) != 0) {
    ADD_FAILURE() << "pipe: " << errno;
    return -1;
  }
  fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << errno;
    return -1;
  }
  if (pid == 0) {
    close(fds[0]);
    _exit(child(fds[1]));
  }
  close(fds[1]);
  output->clear();
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    output->append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
}

void WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// In a child: opens the store and reports the status code as the exit code
// and the message on `out_fd`.
int OpenStoreInChild(const std::string& root, int out_fd) {
  absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
      ArtifactStore::Open(root);
  WriteAll(out_fd, store.status().message());
  return static_cast<int>(store.status().code());
}

TEST_F(StoreTest, AnotherProcessCannotOpenAHeldStore) {
  const std::string root = tmp_.path();
  std::string output;
  int code = RunInChild(
      [&](int out_fd) { return OpenStoreInChild(root, out_fd); }, &output);
  EXPECT_EQ(code, static_cast<int>(absl::StatusCode::kFailedPrecondition))
      << output;
  EXPECT_THAT(output, HasSubstr(absl::StrCat("pid ", getpid())));

  // The LOCK is a real flock, visible to any process.
  const std::string lock_file = JoinPath(Abs(kStateDirName), "LOCK");
  EXPECT_EQ(testing::RunCommand(absl::StrCat("flock -n '", lock_file, "' true"),
                                &output),
            1)
      << output;

  store_.reset();
  EXPECT_EQ(testing::RunCommand(absl::StrCat("flock -n '", lock_file, "' true"),
                                &output),
            0)
      << output;
  code = RunInChild([&](int out_fd) { return OpenStoreInChild(root, out_fd); },
                    &output);
  EXPECT_EQ(code, 0) << output;
  // The child's lock died with it.
  ASSERT_NO_FATAL_FAILURE(ReopenStore());
}

TEST_F(StoreTest, OpenFailsWhileAnotherProcessHoldsTheStore) {
  store_.reset();
  const std::string root = tmp_.path();
  int ready[2];
  int release[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(release), 0);
  fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(ready[0]);
    close(release[1]);
    absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
        ArtifactStore::Open(root);
    WriteAll(ready[1], store.ok() ? "ok" : "failed");
    close(ready[1]);
    char c;
    while (read(release[0], &c, 1) < 0 && errno == EINTR) {
    }
    _exit(store.ok() ? 0 : 1);
  }
  close(ready[1]);
  close(release[0]);
  std::string reply;
  char buf[16];
  ssize_t n;
  while ((n = read(ready[0], buf, sizeof(buf))) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  close(ready[0]);
  EXPECT_EQ(reply, "ok");

  absl::StatusOr<std::unique_ptr<ArtifactStore>> mine =
      ArtifactStore::Open(root);
  EXPECT_THAT(mine, StatusIs(absl::StatusCode::kFailedPrecondition,
                             absl::StrCat("pid ", pid, ",")));

  close(release[1]);  // the child exits, and its lock with it
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  ASSERT_NO_FATAL_FAILURE(ReopenStore());
  EXPECT_EQ(CurrentBlocks("a"), kInitialBlocks);
}

TEST_F(StoreTest, AnArtifactLockedByAnotherProcessIsUnavailable) {
  // Another process (a maintenance tool) holding the artifact's flock is
  // simulated by a second open file description on the same lock file.
  store_.reset();
  absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
      ArtifactStore::Open(tmp_.path(), {.wait_for_artifact_locks = false});
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join("b")));
  absl::StatusOr<std::unique_ptr<FileLock>> held =
      env_->LockFile(ArtifactLockPath(tmp_.path(), "a"), /*exclusive=*/true,
                     /*wait=*/false);
  ASSERT_TRUE(held.ok()) << held.status();

  const auto before = HashStore(tmp_.path());
  EXPECT_THAT((*store)->Write({.name = "a", .target = uint64_t{10}}),
              StatusIs(absl::StatusCode::kUnavailable, "artifact a"));
  EXPECT_THAT((*store)->Write({.name = "b",
                               .target = uint64_t{10},
                               .output_name = "a",
                               .replace = true}),
              StatusIs(absl::StatusCode::kUnavailable, "another process"));
  EXPECT_EQ(HashStore(tmp_.path()), before);
  // Readers and other artifacts are not affected.
  absl::StatusOr<Artifact> a = (*store)->Read("a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->current_num_blocks(), kInitialBlocks);
  ASSERT_TRUE((*store)->Write({.name = "b", .target = uint64_t{12}}).ok());

  held->reset();
  absl::StatusOr<WriteResult> r =
      (*store)->Write({.name = "a", .target = uint64_t{10}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*store)->Read("a")->current_num_blocks(), 10u);
}

// ---------------------------------------------------------------------------
// Writes

TEST_F(StoreTest, CompareAndSetMismatchIsAbortedAndChangesNothing) {
  const auto before = HashStore(tmp_.path());
  EXPECT_THAT(store_->Write({.name = "a",
                             .target = uint64_t{10},
                             .expected_current = uint64_t{12}}),
              StatusIs(absl::StatusCode::kAborted, "16"));
  EXPECT_THAT(store_->Write({.name = "a",
                             .target = uint64_t{10},
                             .expected_current = uint64_t{12}}),
              StatusIs(absl::StatusCode::kAborted, "12"));
  EXPECT_THAT(store_->Write({.name = "a",
                             .budget = MemoryBudget::Fraction(1, 2),
                             .expected_current = uint64_t{12}}),
              StatusIs(absl::StatusCode::kAborted, "16"));
  EXPECT_THAT(store_->Write({.name = "a",
                             .target = uint64_t{10},
                             .output_name = "b",
                             .expected_current = uint64_t{12}}),
              StatusIs(absl::StatusCode::kAborted, "16"));
  EXPECT_THAT(store_->Write({.name = "a",
                             .target = uint64_t{10},
                             .dry_run = true,
                             .expected_current = uint64_t{12}}),
              StatusIs(absl::StatusCode::kAborted, "16"));
  EXPECT_EQ(HashStore(tmp_.path()), before);

  absl::StatusOr<WriteResult> r =
      store_->Write({.name = "a",
                     .target = uint64_t{10},
                     .expected_current = kInitialBlocks});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->written);
  EXPECT_EQ(r->previous_num_blocks, kInitialBlocks);
  EXPECT_EQ(CurrentBlocks("a"), 10u);

  // The old expectation is now stale; the message names the new value.
  absl::StatusOr<WriteResult> stale =
      store_->Write({.name = "a",
                     .target = uint64_t{12},
                     .expected_current = kInitialBlocks});
  EXPECT_THAT(stale, StatusIs(absl::StatusCode::kAborted, "is 10"));
  // And so do its facts, for programs.
  std::optional<ErrorFacts> facts = GetErrorFacts(stale.status());
  ASSERT_TRUE(facts.has_value());
  EXPECT_EQ(facts->reason, ErrorReason::kCasMismatch);
  EXPECT_EQ(facts->artifact, "a");
  EXPECT_EQ(facts->current_num_blocks, std::optional<uint64_t>(10));
  EXPECT_EQ(CurrentBlocks("a"), 10u);
}

TEST_F(StoreTest, NoOpInPlaceWritesNothing) {
  const std::string dir = tmp_.Join("a");
  const uint64_t dir_inode = InodeOf(dir);
  const uint64_t config_inode = InodeOf(JoinPath(dir, kRblnConfigFileName));
  const uint64_t prefill_inode = InodeOf(JoinPath(dir, "prefill.rbln"));
  const auto before = HashStore(tmp_.path());

  absl::StatusOr<WriteResult> r =
      store_->Write({.name = "a", .target = kInitialBlocks});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->written);
  EXPECT_EQ(r->previous_num_blocks, kInitialBlocks);
  EXPECT_EQ(r->new_num_blocks, kInitialBlocks);
  // A budget that fits the full count is a no-op too.
  r = store_->Write({.name = "a", .budget = MemoryBudget::Fraction(1, 1)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->written);
  EXPECT_EQ(r->new_num_blocks, kInitialBlocks);

  EXPECT_EQ(InodeOf(dir), dir_inode);
  EXPECT_EQ(InodeOf(JoinPath(dir, kRblnConfigFileName)), config_inode);
  EXPECT_EQ(InodeOf(JoinPath(dir, "prefill.rbln")), prefill_inode);
  EXPECT_EQ(HashStore(tmp_.path()), before);
}

TEST_F(StoreTest, NoOpWithAnOutputDirectoryWritesAFullCopy) {
  const auto source_before = testing::HashTree(tmp_.Join("a"));
  const uint64_t source_config_inode = InodeOf(tmp_.Join("a/rbln_config.json"));
  absl::StatusOr<WriteResult> r = store_->Write(
      {.name = "a", .target = kInitialBlocks, .output_name = "copy"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->written);
  EXPECT_EQ(r->output_name, "copy");
  EXPECT_EQ(r->new_num_blocks, kInitialBlocks);
  absl::StatusOr<Artifact> copy =
      store_->Read("copy", {.verify_payload = true});
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(copy->current_num_blocks(), kInitialBlocks);

  const auto copy_tree = testing::HashTree(tmp_.Join("copy"));
  std::vector<std::string> source_files, copy_files;
  for (const auto& [path, hash] : source_before) source_files.push_back(path);
  for (const auto& [path, hash] : copy_tree) copy_files.push_back(path);
  EXPECT_EQ(copy_files, source_files);
  EXPECT_EQ(copy_tree.at("tokenizer.json"), source_before.at("tokenizer.json"));
  EXPECT_EQ(copy_tree.at("config.json"), source_before.at("config.json"));
  // A copy, not links to the source.
  EXPECT_NE(InodeOf(tmp_.Join("copy/rbln_config.json")), source_config_inode);
  EXPECT_NE(InodeOf(tmp_.Join("copy/tokenizer.json")),
            InodeOf(tmp_.Join("a/tokenizer.json")));
  EXPECT_EQ(testing::HashTree(tmp_.Join("a")), source_before);
  EXPECT_EQ(InodeOf(tmp_.Join("a/rbln_config.json")), source_config_inode);
}

TEST_F(StoreTest, DryRunReportsButWritesNothing) {
  const auto before = HashStore(tmp_.path());
  const uint64_t config_inode = InodeOf(tmp_.Join("a/rbln_config.json"));

  // Above the compiled (and the full) count: allowed, with warnings.
  absl::StatusOr<WriteResult> r =
      store_->Write({.name = "a", .target = uint64_t{20}, .dry_run = true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->written);
  EXPECT_EQ(r->previous_num_blocks, kInitialBlocks);
  EXPECT_EQ(r->new_num_blocks, 20u);
  EXPECT_THAT(r->warnings, Not(IsEmpty()));
  EXPECT_THAT(::testing::PrintToString(r->warnings),
              HasSubstr("above the compiled count 16"));
  EXPECT_FALSE(r->fit.has_value());

  r = store_->Write({.name = "a", .target = uint64_t{10}, .dry_run = true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->new_num_blocks, 10u);
  EXPECT_THAT(r->warnings, IsEmpty());

  r = store_->Write({.name = "a",
                     .target = uint64_t{10},
                     .output_name = "out",
                     .dry_run = true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->written);
  EXPECT_EQ(r->new_num_blocks, 10u);

  r = store_->Write(
      {.name = "a", .budget = MemoryBudget::Fraction(1, 2), .dry_run = true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->written);
  ASSERT_TRUE(r->fit.has_value());
  EXPECT_EQ(r->fit->num_blocks, r->new_num_blocks);

  EXPECT_FALSE(Exists(tmp_.Join("out")));
  EXPECT_EQ(HashStore(tmp_.path()), before);
  EXPECT_EQ(InodeOf(tmp_.Join("a/rbln_config.json")), config_inode);
  EXPECT_EQ(CurrentBlocks("a"), kInitialBlocks);
}

TEST_F(StoreTest, FitReportsBucketsAndCommitsTheFittedCount) {
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join("big"), TwoMibPerBlockSpec()));
  absl::StatusOr<Artifact> big = store_->Read("big");
  ASSERT_TRUE(big.ok()) << big.status();
  ASSERT_EQ(big->current_num_blocks(), 16u);
  absl::StatusOr<DramChoice> device = store_->DeviceFor(*big);
  ASSERT_TRUE(device.ok()) << device.status();
  ASSERT_EQ(device->spec.chiplets_per_node, 1u);
  // The spec table's answers never change: a generation vouches for them.
  EXPECT_NE(store_->DeviceGeneration(), 0u);

  // A byte budget of exactly the memory of 12 blocks fits 12.
  const MemoryModel model = BuildMemoryModel(*big);
  ASSERT_EQ(model.buckets.size(), 1u);
  const uint64_t budget_bytes =
      model.buckets[0].other_bytes + model.buckets[0].KvBytes(12);
  ASSERT_LT(model.buckets[0].KvBytes(12), model.buckets[0].KvBytes(13));

  absl::StatusOr<WriteResult> r = store_->Write(
      {.name = "big", .budget = MemoryBudget::Bytes(budget_bytes)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->written);
  EXPECT_EQ(r->previous_num_blocks, 16u);
  EXPECT_EQ(r->new_num_blocks, 12u);
  ASSERT_TRUE(r->fit.has_value());
  EXPECT_EQ(r->fit->num_blocks, 12u);
  EXPECT_EQ(r->fit->num_full_blocks, 16u);
  EXPECT_EQ(r->fit->budget_per_chiplet, budget_bytes);
  ASSERT_EQ(r->fit->buckets.size(), 1u);
  EXPECT_EQ(r->fit->buckets[0].other_bytes, model.buckets[0].other_bytes);
  EXPECT_EQ(r->fit->buckets[0].headroom_bytes, 0);
  EXPECT_EQ(r->fit->limiting_bucket, 0);
  EXPECT_EQ(CurrentBlocks("big"), 12u);
  // The budget is transient: the config only holds the count.
  EXPECT_THAT(testing::ReadFileOrDie(tmp_.Join("big/rbln_config.json")),
              Not(HasSubstr(absl::StrCat(budget_bytes))));

  // The same budget on the resized artifact gives the same answer (a no-op),
  // and from another count it commits 12 again.
  r = store_->Write(
      {.name = "big", .budget = MemoryBudget::Bytes(budget_bytes)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->written);
  EXPECT_EQ(r->new_num_blocks, 12u);
  ASSERT_TRUE(store_->Write({.name = "big", .target = uint64_t{10}}).ok());
  r = store_->Write(
      {.name = "big", .budget = MemoryBudget::Bytes(budget_bytes)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->written);
  EXPECT_EQ(r->previous_num_blocks, 10u);
  EXPECT_EQ(r->new_num_blocks, 12u);

  // A fraction on the small artifact: per-chiplet budget from the spec.
  r = store_->Write({.name = "a", .budget = MemoryBudget::Fraction(1, 2)});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->fit.has_value());
  EXPECT_EQ(r->fit->budget_per_chiplet, device->spec.AvailablePerChiplet() / 2);
  EXPECT_EQ(r->fit->buckets.size(), 1u);
  EXPECT_EQ(r->new_num_blocks, r->fit->num_blocks);

  // A Set carries no fit.
  r = store_->Write({.name = "a", .target = uint64_t{11}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->fit.has_value());
}

// ---------------------------------------------------------------------------
// Output directories

TEST_F(StoreTest, ExistingOutputIsRefusedAndUntouched) {
  ASSERT_TRUE(
      store_->Write({.name = "a", .target = uint64_t{12}, .output_name = "b"})
          .ok());
  ASSERT_NO_FATAL_FAILURE(MakeDirs(tmp_.Join("plain")));
  testing::WriteFileOrDie(tmp_.Join("plain/notes.txt"), "mine");
  ASSERT_NO_FATAL_FAILURE(MakeDirs(tmp_.Join("empty")));
  testing::WriteFileOrDie(tmp_.Join("file"), "a file");
  const auto before = HashStore(tmp_.path());
  for (const char* out : {"b", "plain", "empty", "file"}) {
    SCOPED_TRACE(out);
    EXPECT_THAT(store_->Write(
                    {.name = "a", .target = uint64_t{10}, .output_name = out}),
                StatusIs(absl::StatusCode::kAlreadyExists,
                         absl::StrCat("output directory ", out)));
  }
  EXPECT_EQ(HashStore(tmp_.path()), before);
  EXPECT_EQ(CurrentBlocks("b"), 12u);
}

TEST_F(StoreTest, ReplaceOverAnArtifactSwapsItIn) {
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join("team/b")));
  testing::WriteFileOrDie(tmp_.Join("team/b/extra.txt"), "old version");
  const auto source_before = testing::HashTree(tmp_.Join("a"));
  absl::StatusOr<WriteResult> r = store_->Write({.name = "a",
                                                 .target = uint64_t{9},
                                                 .output_name = "team/b",
                                                 .replace = true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->written);
  absl::StatusOr<Artifact> b = store_->Read("team/b", {.verify_payload = true});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->current_num_blocks(), 9u);
  // The replaced version is gone entirely, under any name.
  EXPECT_FALSE(Exists(tmp_.Join("team/b/extra.txt")));
  EXPECT_THAT(DebrisBelow(Root()), IsEmpty());
  EXPECT_EQ(testing::HashTree(tmp_.Join("a")), source_before);
}

TEST_F(StoreTest, ReplaceRefusesANonEmptyNonArtifactDirectory) {
  ASSERT_NO_FATAL_FAILURE(MakeDirs(tmp_.Join("home/sub")));
  testing::WriteFileOrDie(tmp_.Join("home/sub/thesis.tex"), "precious");
  testing::WriteFileOrDie(tmp_.Join("file"), "a file");
  const auto before = HashStore(tmp_.path());
  EXPECT_THAT(store_->Write({.name = "a",
                             .target = uint64_t{10},
                             .output_name = "home",
                             .replace = true}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "neither empty nor a compiled artifact"));
  EXPECT_THAT(
      store_->Write({.name = "a",
                     .target = uint64_t{10},
                     .output_name = "file",
                     .replace = true}),
      StatusIs(absl::StatusCode::kFailedPrecondition, "not a directory"));
  EXPECT_EQ(HashStore(tmp_.path()), before);
}

TEST_F(StoreTest, ReplaceOverAnEmptyDirectoryWorks) {
  ASSERT_NO_FATAL_FAILURE(MakeDirs(tmp_.Join("empty")));
  absl::StatusOr<WriteResult> r = store_->Write({.name = "a",
                                                 .target = uint64_t{9},
                                                 .output_name = "empty",
                                                 .replace = true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(CurrentBlocks("empty"), 9u);
  EXPECT_EQ(CurrentBlocks("a"), kInitialBlocks);
  EXPECT_THAT(DebrisBelow(Root()), IsEmpty());
  // replace with a destination that does not exist simply creates it.
  r = store_->Write({.name = "a",
                     .target = uint64_t{10},
                     .output_name = "fresh",
                     .replace = true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(CurrentBlocks("fresh"), 10u);
}

TEST_F(StoreTest, OutputOverlappingTheSourceIsRefused) {
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join("team/llama")));
  const auto before = HashStore(tmp_.path());
  struct Case {
    std::string name, output;
  };
  const Case cases[] = {
      {"a", "a"},
      {"a", "./a/"},
      {"a", Abs("a")},
      {Abs("a"), "a"},
      {"a", "a/sub"},
      {"a", "a/sub/deeper"},
      {"team/llama", "team"},
      {"team/llama", "team/llama/x"},
  };
  for (const Case& c : cases) {
    for (bool replace : {false, true}) {
      SCOPED_TRACE(
          absl::StrCat(c.name, " -> ", c.output, " replace ", replace));
      EXPECT_THAT(
          store_->Write({.name = c.name,
                         .target = uint64_t{10},
                         .output_name = c.output,
                         .replace = replace}),
          StatusIs(absl::StatusCode::kInvalidArgument, "output directory"));
    }
  }
  EXPECT_EQ(HashStore(tmp_.path()), before);
  // A sibling that merely shares a prefix does not overlap.
  absl::StatusOr<WriteResult> r =
      store_->Write({.name = "a", .target = uint64_t{10}, .output_name = "ab"});
  ASSERT_TRUE(r.ok()) << r.status();
  r = store_->Write(
      {.name = "team/llama", .target = uint64_t{10}, .output_name = "team/l"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(CurrentBlocks("ab"), 10u);
  EXPECT_EQ(CurrentBlocks("team/l"), 10u);
}

TEST_F(StoreTest, InvalidRequestCombinationsAreRefused) {
  const auto before = HashStore(tmp_.path());
  EXPECT_THAT(
      store_->Write({.name = "a", .target = uint64_t{10}, .replace = true}),
      StatusIs(absl::StatusCode::kInvalidArgument, "replace"));
  EXPECT_THAT(store_->Write({.name = "a",
                             .target = uint64_t{10},
                             .budget = MemoryBudget::Fraction(1, 2)}),
              StatusIs(absl::StatusCode::kInvalidArgument, "exactly one"));
  EXPECT_THAT(store_->Write({.name = "a"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "exactly one"));
  EXPECT_THAT(store_->Write({.name = "a",
                             .target = uint64_t{10},
                             .budget = MemoryBudget::Fraction(1, 2),
                             .output_name = "b"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "exactly one"));
  EXPECT_EQ(HashStore(tmp_.path()), before);
}

// ---------------------------------------------------------------------------
// Guards through the store

TEST_F(StoreTest, TargetBelowTheMinimumIsRefusedAndChangesNothing) {
  const auto before = HashStore(tmp_.path());
  for (uint64_t target : {uint64_t{0}, uint64_t{1}, kMinBlocks - 1}) {
    SCOPED_TRACE(target);
    EXPECT_THAT(store_->Write({.name = "a", .target = target}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         absl::StrCat("minimum ", kMinBlocks)));
    EXPECT_THAT(
        store_->Write({.name = "a", .target = target, .output_name = "b"}),
        StatusIs(absl::StatusCode::kInvalidArgument, "minimum"));
  }
  EXPECT_EQ(HashStore(tmp_.path()), before);
  // The minimum itself is fine.
  absl::StatusOr<WriteResult> r =
      store_->Write({.name = "a", .target = kMinBlocks});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(CurrentBlocks("a"), kMinBlocks);
}

TEST_F(StoreTest, BudgetBelowTheMinimumIsRefusedAndChangesNothing) {
  const auto before = HashStore(tmp_.path());
  // 100 MiB per device cannot even hold the weights and workspaces.
  const MemoryBudget tiny = MemoryBudget::Bytes(uint64_t{100} << 20);
  EXPECT_THAT(store_->Write({.name = "a", .budget = tiny}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("below the minimum ", kMinBlocks)));
  EXPECT_THAT(store_->Write({.name = "a", .budget = tiny, .output_name = "b"}),
              StatusIs(absl::StatusCode::kFailedPrecondition, "fits only 0"));
  EXPECT_THAT(store_->Write({.name = "a", .budget = tiny, .dry_run = true}),
              StatusIs(absl::StatusCode::kFailedPrecondition, "minimum"));
  EXPECT_EQ(HashStore(tmp_.path()), before);
}

// ---------------------------------------------------------------------------
// List

TEST_F(StoreTest, ListFindsNestedArtifactsSortedAndSkipsHiddenOnes) {
  for (const char* name : {"z", "team/llama", "team/sub/deep", "b-x", "b/y",
                           ".hidden/x", "team/.secret"}) {
    ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join(name)));
  }
  // Staging debris left after the store was opened (with a config inside).
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join(StagingNameFor("a"))));
  ASSERT_NO_FATAL_FAILURE(
      MakeArtifact(tmp_.Join("team/" + StagingNameFor("llama"))));
  ASSERT_NO_FATAL_FAILURE(MakeDirs(tmp_.Join("empty/dir")));
  ASSERT_NO_FATAL_FAILURE(MakeSymlink("a", tmp_.Join("alias")));
  testing::WriteFileOrDie(tmp_.Join("stray.json"), "{}");

  absl::StatusOr<std::vector<std::string>> names = store_->List();
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, ElementsAre("a", "alias", "b-x", "b/y", "team/llama",
                                  "team/sub/deep", "z"));
  // Every listed name reads.
  for (const std::string& name : *names) {
    EXPECT_TRUE(store_->Read(name).ok()) << name;
  }
}

TEST_F(StoreTest, ListOfAStoreWithoutArtifactsIsEmpty) {
  testing::TempDir empty;
  store_.reset();
  absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
      ArtifactStore::Open(empty.path());
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::vector<std::string>> names = (*store)->List();
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, IsEmpty());
}

// ---------------------------------------------------------------------------
// Regressions: each of these once failed.

// The lock file of a long nested name still fits one file name (it is
// hashed).
TEST_F(StoreTest, WritesANestedArtifactWithALongName) {
  const std::string name =
      absl::StrCat(std::string(90, 'x'), "/", std::string(90, 'y'), "/",
                   std::string(90, 'z'));
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join(name)));
  absl::StatusOr<WriteResult> r =
      store_->Write({.name = name, .target = uint64_t{10}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(CurrentBlocks(name), 10u);
}

// Staging adds 26 bytes to a directory name, so names are limited to 200
// bytes a component: longer ones get a clear INVALID_ARGUMENT instead of
// "File name too long" from mkdir; 200 works.
TEST_F(StoreTest, LongDirectoryNamesAreRefusedClearlyOrWork) {
  const std::string too_long(240, 'w');  // NAME_MAX is 255
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join(too_long)));
  EXPECT_THAT(store_->Write({.name = too_long, .target = uint64_t{10}}),
              StatusIs(absl::StatusCode::kInvalidArgument, "at most 200"));
  const std::string name(200, 'w');
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join(name)));
  absl::StatusOr<WriteResult> r =
      store_->Write({.name = name, .target = uint64_t{10}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(CurrentBlocks(name), 10u);
  r = store_->Write({.name = "a",
                     .target = uint64_t{11},
                     .output_name = std::string(200, 'v')});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(CurrentBlocks(std::string(200, 'v')), 11u);
}

// A store opened through a symbolic link above it (/srv -> /data/srv)
// accepts absolute names under the root as configured.
TEST_F(StoreTest, AcceptsAbsoluteNamesUnderTheRootAsGiven) {
  testing::TempDir other;
  ASSERT_NO_FATAL_FAILURE(MakeSymlink(tmp_.path(), other.Join("models")));
  store_.reset();
  const std::string given_root = other.Join("models");
  absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
      ArtifactStore::Open(given_root);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->CanonicalName(JoinPath(given_root, "a")).value_or("?"),
            "a");
  absl::StatusOr<Artifact> a = (*store)->Read(JoinPath(given_root, "a"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->current_num_blocks(), kInitialBlocks);
}

// An output inside ANOTHER artifact ("b/inner") would change b without b's
// lock: refused.
TEST_F(StoreTest, RefusesAnOutputDirectoryInsideAnotherArtifact) {
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join("b")));
  const auto b_before = testing::HashTree(tmp_.Join("b"));
  absl::StatusOr<WriteResult> r = store_->Write(
      {.name = "a", .target = uint64_t{10}, .output_name = "b/inner"});
  EXPECT_FALSE(r.ok()) << "wrote an artifact into artifact b";
  EXPECT_THAT(r.status().message(), HasSubstr("b"));
  EXPECT_EQ(testing::HashTree(tmp_.Join("b")), b_before);
}

// A dry run fails where the real write would (existing output, a parent
// that is not a directory), and makes no missing parent.
TEST_F(StoreTest, DryRunChecksTheOutputDirectory) {
  ASSERT_NO_FATAL_FAILURE(MakeDirs(tmp_.Join("taken")));
  testing::WriteFileOrDie(tmp_.Join("file"), "a file");
  const auto before = HashStore(tmp_.path());
  EXPECT_THAT(store_->Write({.name = "a",
                             .target = uint64_t{10},
                             .output_name = "taken",
                             .dry_run = true}),
              StatusIs(absl::StatusCode::kAlreadyExists, "taken"));
  EXPECT_THAT(store_->Write({.name = "a",
                             .target = uint64_t{10},
                             .output_name = "file/sub/b",
                             .dry_run = true}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "a parent of output directory file/sub/b, is not a "
                       "directory"));
  absl::StatusOr<WriteResult> r = store_->Write({.name = "a",
                                                 .target = uint64_t{10},
                                                 .output_name = "missing/b",
                                                 .dry_run = true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->written);
  EXPECT_FALSE(Exists(tmp_.Join("missing")));
  EXPECT_EQ(HashStore(tmp_.path()), before);
}

// --- Old versions: kept for a grace period after a commit swapped them out
// (core/store/retired_trees.h), so that a reader holding the artifact
// directory finishes on the version it opened. Nothing here is timed: what
// must still be there is kept for an hour, and what must go is waited for.

constexpr absl::Duration kForever = absl::Hours(1);

// The bytes of `rel` read relative to the directory descriptor `dir` with
// openat(), as the reader protocol of docs/commit-protocol.md reads them.
std::optional<std::string> ReadAt(int dir, const std::string& rel) {
  UniqueFd fd(openat(dir, rel.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) return std::nullopt;
  std::string data;
  char buf[1 << 16];
  ssize_t n;
  while ((n = read(fd.get(), buf, sizeof(buf))) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    data.append(buf, static_cast<size_t>(n));
  }
  return data;
}

bool WaitUntilNoDebrisBelow(const std::string& root) {
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (!DebrisBelow(root).empty()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

std::string FileName(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

TEST_F(StoreTest, AReaderOfTheDirectoryFinishesOnTheOldVersion) {
  ASSERT_NO_FATAL_FAILURE(ReopenStore({.old_version_grace = kForever}));
  const std::map<std::string, uint64_t> old_version =
      testing::HashTree(Abs("a"));
  // A serving process opens the artifact directory once, before the swap.
  UniqueFd dir(open(Abs("a").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_GE(dir.get(), 0) << strerror(errno);
  ASSERT_TRUE(store_->Write({.name = "a", .target = uint64_t{10}}).ok());

  // The new version is at the artifact's path; the old one, the directory
  // the reader holds, beside it under a retired name (not a staging name,
  // which would read as an interrupted commit).
  EXPECT_EQ(CurrentBlocks("a"), 10u);
  EXPECT_THAT(StagingEntriesBelow(Root()), IsEmpty());
  const std::vector<std::string> retired = RetiredEntriesBelow(Root());
  ASSERT_EQ(retired.size(), 1u);
  EXPECT_EQ(retired[0], Abs(FileName(retired[0])));
  EXPECT_EQ(RetiredArtifactName(FileName(retired[0])), "a");
  struct stat held;
  ASSERT_EQ(fstat(dir.get(), &held), 0);
  EXPECT_EQ(InodeOf(retired[0]), held.st_ino);
  EXPECT_EQ(store_->retired_trees().pending(), 1u);

  // Every file opened relative to the descriptor is the old version's.
  for (const auto& [rel, hash] : old_version) {
    struct stat st;
    ASSERT_EQ(fstatat(dir.get(), rel.c_str(), &st, AT_SYMLINK_NOFOLLOW), 0)
        << rel;
    if (!S_ISREG(st.st_mode)) continue;
    const std::optional<std::string> data = ReadAt(dir.get(), rel);
    ASSERT_TRUE(data.has_value()) << rel;
    EXPECT_EQ(XXH64(data->data(), data->size(), 0), hash) << rel;
  }
  EXPECT_THAT(ReadAt(dir.get(), kRblnConfigFileName).value_or(""),
              HasSubstr("\"kvcache_num_blocks\": 16"));
  // The same name opened by path is the new version's: a reader that opens
  // each file by path can load a mix of the two.
  EXPECT_THAT(testing::ReadFileOrDie(JoinPath(Abs("a"), kRblnConfigFileName)),
              HasSubstr("\"kvcache_num_blocks\": 10"));

  // Names see only the artifact.
  EXPECT_THAT(*store_->List(), ElementsAre("a"));
  absl::StatusOr<StoreListing> listing = store_->ListAll();
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_THAT(listing->names, ElementsAre("a"));
  EXPECT_TRUE(listing->skipped.empty());
  EXPECT_EQ((*store_->ReadSummary("a"))->config.kvcache_num_blocks, 10u);
  EXPECT_THAT(
      store_->Read(FileName(retired[0])),
      StatusIs(absl::StatusCode::kPermissionDenied, "hidden component"));

  // Another write keeps another old version, each for its own grace.
  ASSERT_TRUE(store_->Write({.name = "a", .target = uint64_t{12}}).ok());
  EXPECT_EQ(CurrentBlocks("a"), 12u);
  EXPECT_EQ(RetiredEntriesBelow(Root()).size(), 2u);
  EXPECT_THAT(StagingEntriesBelow(Root()), IsEmpty());
  EXPECT_THAT(*store_->List(), ElementsAre("a"));

  // Closing the store (the daemon stopping) removes them without waiting.
  store_.reset();
  EXPECT_THAT(DebrisBelow(Root()), IsEmpty());
  EXPECT_FALSE(ReadAt(dir.get(), kRblnConfigFileName).has_value());
}

TEST_F(StoreTest, TheOldVersionIsRemovedOnceItsGraceIsOver) {
  ASSERT_NO_FATAL_FAILURE(ReopenStore({.old_version_grace = absl::Seconds(1)}));
  ASSERT_TRUE(store_->Write({.name = "a", .target = uint64_t{10}}).ok());
  EXPECT_TRUE(WaitUntilNoDebrisBelow(Root()));
  // Its thread counts the tree as removed just after it is gone.
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (store_->retired_trees().pending() > 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(store_->retired_trees().pending(), 0u);
  EXPECT_EQ(CurrentBlocks("a"), 10u);
}

TEST_F(StoreTest, WithoutGraceTheOldVersionIsGoneWhenTheWriteReturns) {
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join("b")));
  ASSERT_NO_FATAL_FAILURE(
      ReopenStore({.old_version_grace = absl::ZeroDuration()}));
  UniqueFd dir(open(Abs("a").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_GE(dir.get(), 0) << strerror(errno);
  ASSERT_TRUE(store_->Write({.name = "a", .target = uint64_t{10}}).ok());
  EXPECT_THAT(DebrisBelow(Root()), IsEmpty());
  EXPECT_FALSE(ReadAt(dir.get(), kRblnConfigFileName).has_value());
  ASSERT_TRUE(store_
                  ->Write({.name = "a",
                           .target = uint64_t{12},
                           .output_name = "b",
                           .replace = true})
                  .ok());
  EXPECT_THAT(DebrisBelow(Root()), IsEmpty());
}

TEST_F(StoreTest, AReplacedOutputIsKeptForTheGraceToo) {
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join("team/b")));
  testing::WriteFileOrDie(tmp_.Join("team/b/extra.txt"), "old version");
  ASSERT_NO_FATAL_FAILURE(ReopenStore({.old_version_grace = kForever}));
  ASSERT_TRUE(store_
                  ->Write({.name = "a",
                           .target = uint64_t{9},
                           .output_name = "team/b",
                           .replace = true})
                  .ok());
  EXPECT_EQ(CurrentBlocks("team/b"), 9u);
  EXPECT_FALSE(Exists(tmp_.Join("team/b/extra.txt")));
  EXPECT_THAT(StagingEntriesBelow(Root()), IsEmpty());
  const std::vector<std::string> retired = RetiredEntriesBelow(Root());
  ASSERT_EQ(retired.size(), 1u);
  EXPECT_EQ(retired[0], JoinPath(Abs("team"), FileName(retired[0])));
  EXPECT_EQ(RetiredArtifactName(FileName(retired[0])), "b");
  EXPECT_EQ(testing::ReadFileOrDie(JoinPath(retired[0], "extra.txt")),
            "old version");
  EXPECT_THAT(*store_->List(), ElementsAre("a", "team/b"));
  store_.reset();
  EXPECT_THAT(DebrisBelow(Root()), IsEmpty());
}

// Fails the creation of the nth file in a staging directory with ENOSPC
// (once armed), as a file system that fills up mid-write does.
class FillingDiskEnv : public EnvWrapper {
 public:
  using EnvWrapper::EnvWrapper;

  void FailNthStagedFile(int nth) {
    absl::MutexLock lock(&mu_);
    countdown_ = nth;
  }
  int failures() const {
    absl::MutexLock lock(&mu_);
    return failures_;
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override {
    if (absl::StrContains(path, ".staging-")) {
      absl::MutexLock lock(&mu_);
      if (countdown_ > 0 && --countdown_ == 0) {
        ++failures_;
        return ErrnoToStatus("create", path, ENOSPC);
      }
    }
    return EnvWrapper::NewWritableFile(path);
  }

 private:
  mutable absl::Mutex mu_;
  int countdown_ ABSL_GUARDED_BY(mu_) = 0;
  int failures_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST_F(StoreTest, AFullDiskTakesTheOldVersionsAndTheWriteTriesOnceMore) {
  ASSERT_NO_FATAL_FAILURE(MakeArtifact(tmp_.Join("b")));
  store_.reset();
  std::unique_ptr<Env> confined = testing::ConfinedEnvOrDie(tmp_.path());
  FillingDiskEnv env(confined.get());
  absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
      ArtifactStore::Open(&env, tmp_.path(), {.old_version_grace = kForever});
  ASSERT_TRUE(store.ok()) << store.status();
  // Old versions of both artifacts wait out their grace.
  ASSERT_TRUE((*store)->Write({.name = "a", .target = uint64_t{10}}).ok());
  ASSERT_TRUE((*store)->Write({.name = "b", .target = uint64_t{10}}).ok());
  const std::vector<std::string> old_versions = RetiredEntriesBelow(Root());
  ASSERT_EQ(old_versions.size(), 2u);

  // The disk fills at the second container, after the first was copied.
  env.FailNthStagedFile(2);
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  absl::StatusOr<WriteResult> r =
      (*store)->Write({.name = "a",
                       .target = uint64_t{12},
                       .progress = [&](uint64_t done, uint64_t total) {
                         progress.emplace_back(done, total);
                       }});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(env.failures(), 1);
  EXPECT_EQ((*store)->Read("a")->current_num_blocks(), 12u);
  // Both old versions went; the one this write swapped out waits.
  EXPECT_THAT(StagingEntriesBelow(Root()), IsEmpty());
  const std::vector<std::string> now = RetiredEntriesBelow(Root());
  ASSERT_EQ(now.size(), 1u);
  EXPECT_THAT(old_versions, Not(Contains(now[0])));
  EXPECT_EQ(RetiredArtifactName(FileName(now[0])), "a");
  // Progress went on from where the first try had got to: never back, never
  // past the total, and to the end.
  ASSERT_FALSE(progress.empty());
  for (size_t i = 0; i < progress.size(); ++i) {
    EXPECT_LE(progress[i].first, progress[i].second);
    if (i > 0) {
      EXPECT_GE(progress[i].first, progress[i - 1].first);
    }
  }
  EXPECT_EQ(progress.back().first, progress.back().second);
}

TEST_F(StoreTest, AFullDiskWithNoOldVersionWaitingFailsAndChangesNothing) {
  for (const absl::Duration grace : {absl::ZeroDuration(), kForever}) {
    SCOPED_TRACE(absl::StrCat("grace ", absl::FormatDuration(grace)));
    store_.reset();
    std::unique_ptr<Env> confined = testing::ConfinedEnvOrDie(tmp_.path());
    FillingDiskEnv env(confined.get());
    absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
        ArtifactStore::Open(&env, tmp_.path(), {.old_version_grace = grace});
    ASSERT_TRUE(store.ok()) << store.status();
    const auto before = HashStore(tmp_.path());
    env.FailNthStagedFile(1);
    // A second try would succeed: there is none, as nothing was freed.
    EXPECT_THAT((*store)->Write({.name = "a", .target = uint64_t{10}}),
                StatusIs(absl::StatusCode::kResourceExhausted,
                         "not enough free space"));
    EXPECT_EQ(env.failures(), 1);
    EXPECT_EQ(HashStore(tmp_.path()), before);
  }
}

TEST_F(StoreTest, AnOldVersionPendingAtACrashIsRemovedAtTheNextOpen) {
  store_.reset();
  const std::string root = tmp_.path();
  std::string output;
  const int code = RunInChild(
      [&](int out_fd) {
        absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
            ArtifactStore::Open(root, {.old_version_grace = kForever});
        absl::Status status = store.status();
        if (store.ok()) {
          status =
              (*store)->Write({.name = "a", .target = uint64_t{10}}).status();
        }
        WriteAll(out_fd, status.ToString());
        // Dies with the old version pending, as a killed daemon does.
        _exit(status.ok() ? 0 : 1);
        return 1;
      },
      &output);
  ASSERT_EQ(code, 0) << output;
  ASSERT_EQ(RetiredEntriesBelow(Root()).size(), 1u);
  ASSERT_NO_FATAL_FAILURE(ReopenStore());
  EXPECT_EQ(store_->recovered().size(), 1u);
  EXPECT_THAT(DebrisBelow(Root()), IsEmpty());
  EXPECT_EQ(CurrentBlocks("a"), 10u);
}

// ---------------------------------------------------------------------------
// Parents of an output directory: made as upstream's mkdir(parents=True)
// makes them, inside the store only, never through a link.

TEST_F(StoreTest, MissingParentsOfAnOutputAreMadeLikeTheirParent) {
  ASSERT_NO_FATAL_FAILURE(MakeDirs(tmp_.Join("team")));
  ASSERT_EQ(chmod(tmp_.Join("team").c_str(), 02750), 0) << strerror(errno);
  absl::StatusOr<WriteResult> r = store_->Write(
      {.name = "a", .target = uint64_t{10}, .output_name = "team/x/y/out"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->written);
  EXPECT_EQ(CurrentBlocks("team/x/y/out"), 10u);
  const absl::StatusOr<FileStat> team = env_->Stat(tmp_.Join("team"));
  ASSERT_TRUE(team.ok()) << team.status();
  for (const char* made : {"team/x", "team/x/y"}) {
    SCOPED_TRACE(made);
    const absl::StatusOr<FileStat> st = env_->Stat(tmp_.Join(made));
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->type, FileType::kDirectory);
    EXPECT_EQ(st->mode, 02750u);
    EXPECT_EQ(st->uid, team->uid);
    EXPECT_EQ(st->gid, team->gid);
  }
  // Under the root, with replace (nothing to replace), and in one that
  // exists in part.
  r = store_->Write({.name = "a",
                     .target = uint64_t{11},
                     .output_name = "new/deeper/b",
                     .replace = true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(CurrentBlocks("new/deeper/b"), 11u);
  EXPECT_EQ(env_->Stat(tmp_.Join("new"))->mode, env_->Stat(tmp_.path())->mode);
  r = store_->Write(
      {.name = "a", .target = uint64_t{12}, .output_name = "team/x/z/c"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(CurrentBlocks("team/x/z/c"), 12u);
  EXPECT_THAT(*store_->List(),
              ElementsAre("a", "new/deeper/b", "team/x/y/out", "team/x/z/c"));
  EXPECT_THAT(DebrisBelow(Root()), IsEmpty());
}

TEST_F(StoreTest, AFailedWriteRemovesTheParentsItMadeAndOnlyThose) {
  ASSERT_NO_FATAL_FAILURE(MakeDirs(tmp_.Join("team")));
  store_.reset();
  std::unique_ptr<Env> confined = testing::ConfinedEnvOrDie(tmp_.path());
  FillingDiskEnv env(confined.get());
  absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
      ArtifactStore::Open(&env, tmp_.path());
  ASSERT_TRUE(store.ok()) << store.status();
  const auto before = HashStore(tmp_.path());
  env.FailNthStagedFile(2);
  EXPECT_THAT(
      (*store)->Write({.name = "a",
                       .target = uint64_t{10},
                       .output_name = "team/new/deeper/out"}),
      StatusIs(absl::StatusCode::kResourceExhausted, "not enough free space"));
  EXPECT_EQ(env.failures(), 1);
  EXPECT_TRUE(Exists(tmp_.Join("team")));
  EXPECT_FALSE(Exists(tmp_.Join("team/new")));
  EXPECT_EQ(HashStore(tmp_.path()), before);
}

TEST_F(StoreTest, ALinkOrAFileAmongTheParentsIsRefused) {
  testing::TempDir outside;
  ASSERT_NO_FATAL_FAILURE(MakeDirs(tmp_.Join("team")));
  ASSERT_NO_FATAL_FAILURE(MakeSymlink(outside.path(), tmp_.Join("team/door")));
  ASSERT_NO_FATAL_FAILURE(MakeSymlink("..", tmp_.Join("team/up")));
  testing::WriteFileOrDie(tmp_.Join("team/file"), "a file");
  const auto before = HashStore(tmp_.path());
  for (const bool dry_run : {true, false}) {
    SCOPED_TRACE(dry_run ? "dry run" : "write");
    // A link as the nearest parent, or above a missing one.
    for (const std::string output :
         {"team/door/out", "team/door/new/out", "team/up/new/out"}) {
      SCOPED_TRACE(output);
      EXPECT_THAT(store_->Write({.name = "a",
                                 .target = uint64_t{10},
                                 .output_name = output,
                                 .dry_run = dry_run}),
                  StatusIs(absl::StatusCode::kPermissionDenied, "team/"));
    }
    EXPECT_THAT(
        store_->Write({.name = "a",
                       .target = uint64_t{10},
                       .output_name = "team/file/new/out",
                       .dry_run = dry_run}),
        StatusIs(absl::StatusCode::kFailedPrecondition, "is not a directory"));
  }
  EXPECT_EQ(HashStore(tmp_.path()), before);
  EXPECT_TRUE(std::filesystem::is_empty(outside.path()));
  EXPECT_FALSE(Exists(tmp_.Join("new")));
}

}  // namespace
}  // namespace rbln
