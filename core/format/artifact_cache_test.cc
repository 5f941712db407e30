#include "core/format/artifact_cache.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "core/core_metrics.h"
#include "core/format/inspect_cache.h"
#include "core/metrics.h"
#include "core/os/env.h"
#include "core/os/freshness.h"
#include "core/os/read_lease.h"
#include "core/testing/test_util.h"
#include "gtest/gtest.h"
#include "tools/synth.h"

namespace rbln {
namespace {

// The start of a read long after the test wrote its files: they look still
// (not racy) to a cache with the default window.
absl::Time ReadLater() { return absl::Now() + absl::Seconds(10); }

// rbln_artifactd_artifact_cache_not_kept_total for `why` (core_metrics.h).
double NotKept(absl::string_view why) {
  RegisterCoreMetrics();
  return metrics::Registry::Default()
      .Sample(absl::StrCat(
          "rbln_artifactd_artifact_cache_not_kept_total{why=\"", why, "\"}"))
      .value_or(-1);
}

// Sets the modification times of `dir` and of the files in it an hour back,
// so that a change made by the test, however soon, shows in them.
void AgeTree(Env* env, const std::string& dir) {
  const struct timespec hour_ago[2] = {{time(nullptr) - 3600, 0},
                                       {time(nullptr) - 3600, 0}};
  absl::StatusOr<std::vector<DirEntry>> entries = env->ListDir(dir);
  ASSERT_TRUE(entries.ok()) << entries.status();
  for (const DirEntry& entry : *entries) {
    ASSERT_EQ(utimensat(AT_FDCWD, JoinPath(dir, entry.name).c_str(), hour_ago,
                        AT_SYMLINK_NOFOLLOW),
              0);
  }
  ASSERT_EQ(utimensat(AT_FDCWD, dir.c_str(), hour_ago, 0), 0);
}

// Public: the changes below reach into it.
class ArtifactCacheTest : public ::testing::Test {
 public:
  void SetUp() override {
    dir_ = tmp_.Join("tiny");
    ASSERT_TRUE(WriteSyntheticArtifact(env_, SynthSpec{}, dir_).ok());
    ASSERT_NO_FATAL_FAILURE(AgeTree(env_, dir_));
  }

  std::shared_ptr<const Artifact> Open() {
    absl::StatusOr<Artifact> artifact =
        Artifact::Open(env_, dir_, {.freshness = freshness_});
    EXPECT_TRUE(artifact.ok()) << artifact.status();
    if (!artifact.ok()) return nullptr;
    return std::make_shared<const Artifact>(*std::move(artifact));
  }

  std::shared_ptr<const ArtifactSummary> Summary() {
    absl::StatusOr<ArtifactSummary> summary =
        ReadArtifactSummary(env_, dir_, freshness_);
    EXPECT_TRUE(summary.ok()) << summary.status();
    if (!summary.ok()) return nullptr;
    return std::make_shared<const ArtifactSummary>(*std::move(summary));
  }

  // Replaces `name`'s bytes in place (same inode), keeping its size.
  void RewriteInPlace(const std::string& name, absl::string_view from,
                      absl::string_view to) {
    const std::string path = JoinPath(dir_, name);
    const std::string text = testing::ReadFileOrDie(path);
    ASSERT_NE(text.find(std::string(from)), std::string::npos);
    ASSERT_EQ(from.size(), to.size());
    testing::WriteFileOrDie(path, absl::StrReplaceAll(text, {{from, to}}));
  }

  Env* env_ = Env::Default();
  // Env::Default()'s paths: any.
  const std::unique_ptr<Freshness> owned_freshness_ = NewPosixFreshness();
  Freshness* const freshness_ = owned_freshness_.get();
  testing::TempDir tmp_;
  std::string dir_;
  ArtifactCache cache_;
};

TEST_F(ArtifactCacheTest, AnUnchangedArtifactIsServedFromTheCache) {
  EXPECT_EQ(cache_.FindArtifact(freshness_, dir_), nullptr);
  std::shared_ptr<const Artifact> artifact = Open();
  ASSERT_NE(artifact, nullptr);
  cache_.InsertArtifact(freshness_, artifact, ReadLater());
  EXPECT_EQ(cache_.size(), 1u);
  EXPECT_EQ(cache_.FindArtifact(freshness_, dir_), artifact);
  EXPECT_EQ(cache_.FindArtifact(freshness_, dir_), artifact);
  EXPECT_EQ(cache_.hits(), 2u);
  EXPECT_EQ(cache_.misses(), 1u);
  // Summaries are kept apart.
  EXPECT_EQ(cache_.FindSummary(freshness_, dir_), nullptr);
}

TEST_F(ArtifactCacheTest, FilesChangedJustBeforeTheReadAreNotKept) {
  // The test's files were written a moment ago: a read beginning now could
  // share their timestamp tick with a second, unseen change.
  const double recent = NotKept("recent");
  cache_.InsertArtifact(freshness_, Open(), absl::Now());
  cache_.InsertSummary(freshness_, dir_, Summary(), absl::Now());
  EXPECT_EQ(cache_.size(), 0u);
  EXPECT_EQ(NotKept("recent"), recent + 2);
  EXPECT_EQ(cache_.FindArtifact(freshness_, dir_), nullptr);
}

// Each way a file an artifact was read from can change makes the next
// lookup miss (and drops the entry).
struct Change {
  std::string name;
  std::function<void(ArtifactCacheTest*)> apply;
};
void PrintTo(const Change& change, std::ostream* os) { *os << change.name; }

class ArtifactCacheChangeTest : public ArtifactCacheTest,
                                public ::testing::WithParamInterface<Change> {};

TEST_P(ArtifactCacheChangeTest, MissesTheArtifactAndTheSummary) {
  cache_.InsertArtifact(freshness_, Open(), ReadLater());
  cache_.InsertSummary(freshness_, dir_, Summary(), ReadLater());
  ASSERT_NE(cache_.FindArtifact(freshness_, dir_), nullptr);
  ASSERT_NE(cache_.FindSummary(freshness_, dir_), nullptr);
  GetParam().apply(this);
  EXPECT_EQ(cache_.FindArtifact(freshness_, dir_), nullptr);
  EXPECT_EQ(cache_.FindSummary(freshness_, dir_), nullptr);
  EXPECT_EQ(cache_.size(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Changes, ArtifactCacheChangeTest,
    ::testing::Values(
        // The same size, in place: only the times tell.
        Change{"ConfigRewrittenInPlace",
               [](ArtifactCacheTest* t) {
                 t->RewriteInPlace(kRblnConfigFileName,
                                   "\"kvcache_num_blocks\": 16",
                                   "\"kvcache_num_blocks\": 32");
               }},
        // As touch(1) does it: an open for writing (which breaks a read
        // lease, core/os/read_lease.h), then new times.
        Change{"PrefillTouched",
               [](ArtifactCacheTest* t) {
                 const int fd = open(JoinPath(t->dir_, "prefill.rbln").c_str(),
                                     O_WRONLY | O_CLOEXEC);
                 ASSERT_GE(fd, 0);
                 EXPECT_EQ(futimens(fd, nullptr), 0);
                 close(fd);
               }},
        Change{"ConfigReplacedByRename",
               [](ArtifactCacheTest* t) {
                 const std::string path =
                     JoinPath(t->dir_, kRblnConfigFileName);
                 testing::WriteFileOrDie(path + ".new",
                                         testing::ReadFileOrDie(path));
                 ASSERT_TRUE(t->env_->Rename(path + ".new", path).ok());
               }},
        Change{"CompanionAdded",
               [](ArtifactCacheTest* t) {
                 testing::WriteFileOrDie(JoinPath(t->dir_, "README.md"), "x");
               }},
        Change{"DirectoryReplaced",
               [](ArtifactCacheTest* t) {
                 const std::string copy = t->tmp_.Join("copy");
                 ASSERT_TRUE(
                     WriteSyntheticArtifact(t->env_, SynthSpec{}, copy).ok());
                 ASSERT_TRUE(t->env_->RenameExchange(copy, t->dir_).ok());
               }},
        Change{"DirectoryRemoved",
               [](ArtifactCacheTest* t) {
                 ASSERT_TRUE(RemoveTree(t->env_, t->dir_).ok());
               }}),
    [](const ::testing::TestParamInfo<Change>& info) {
      return info.param.name;
    });

TEST_F(ArtifactCacheTest, AReadWhoseDirectoryWasExchangedAboveItIsNotKept) {
  // p/tiny is read; then p and q trade places, so that p/tiny names the
  // other artifact, whose own directory and files did not change.
  for (const char* parent : {"p", "q"}) {
    ASSERT_EQ(mkdir(tmp_.Join(parent).c_str(), 0755), 0);
    const std::string dir = JoinPath(tmp_.Join(parent), "tiny");
    ASSERT_TRUE(WriteSyntheticArtifact(env_, SynthSpec{}, dir).ok());
    ASSERT_NO_FATAL_FAILURE(AgeTree(env_, dir));
  }
  dir_ = JoinPath(tmp_.Join("p"), "tiny");
  std::shared_ptr<const Artifact> artifact = Open();
  std::shared_ptr<const ArtifactSummary> summary = Summary();
  ASSERT_NE(artifact, nullptr);
  ASSERT_NE(summary, nullptr);
  ASSERT_EQ(renameat2(AT_FDCWD, tmp_.Join("p").c_str(), AT_FDCWD,
                      tmp_.Join("q").c_str(), RENAME_EXCHANGE),
            0);
  cache_.InsertArtifact(freshness_, artifact, ReadLater());
  cache_.InsertSummary(freshness_, dir_, summary, ReadLater());
  EXPECT_EQ(cache_.size(), 0u);
  EXPECT_EQ(cache_.FindArtifact(freshness_, dir_), nullptr);
  EXPECT_EQ(cache_.FindSummary(freshness_, dir_), nullptr);
  // Read again where the name now leads, it is kept.
  cache_.InsertSummary(freshness_, dir_, Summary(), ReadLater());
  EXPECT_NE(cache_.FindSummary(freshness_, dir_), nullptr);
}

TEST_F(ArtifactCacheTest, AReadWhoseSubmoduleDirectoryWasExchangedIsNotKept) {
  // optimum-rbln's layout for a vision-language model (as in
  // artifact_test.cc): the decoder's graphs in llava/language_model/.
  const std::string top = tmp_.Join("llava");
  ASSERT_EQ(mkdir(top.c_str(), 0755), 0);
  const std::string sub = JoinPath(top, "language_model");
  ASSERT_EQ(rename(dir_.c_str(), sub.c_str()), 0);
  testing::WriteFileOrDie(
      JoinPath(top, kRblnConfigFileName),
      absl::StrCat("{\"cls_name\": \"RBLNLlavaForConditionalGenerationConfig\","
                   " \"language_model\": ",
                   testing::ReadFileOrDie(JoinPath(sub, kRblnConfigFileName)),
                   "}"));
  const std::string other = JoinPath(top, "other");
  ASSERT_TRUE(WriteSyntheticArtifact(env_, SynthSpec{}, other).ok());
  for (const std::string& dir : {sub, other, top}) {
    ASSERT_NO_FATAL_FAILURE(AgeTree(env_, dir));
  }
  dir_ = top;
  std::shared_ptr<const Artifact> artifact = Open();
  std::shared_ptr<const ArtifactSummary> summary = Summary();
  ASSERT_NE(artifact, nullptr);
  ASSERT_NE(summary, nullptr);
  ASSERT_EQ(artifact->graph_dir(), sub);
  // The graphs' directory trades places with another: the top directory is
  // the same one, only its times moved.
  ASSERT_EQ(renameat2(AT_FDCWD, sub.c_str(), AT_FDCWD, other.c_str(),
                      RENAME_EXCHANGE),
            0);
  cache_.InsertArtifact(freshness_, artifact, ReadLater());
  cache_.InsertSummary(freshness_, dir_, summary, ReadLater());
  EXPECT_EQ(cache_.size(), 0u);
  cache_.InsertSummary(freshness_, dir_, Summary(), ReadLater());
  EXPECT_NE(cache_.FindSummary(freshness_, dir_), nullptr);
}

TEST_F(ArtifactCacheTest, EraseDropsBothKinds) {
  cache_.InsertArtifact(freshness_, Open(), ReadLater());
  cache_.InsertSummary(freshness_, dir_, Summary(), ReadLater());
  EXPECT_EQ(cache_.size(), 2u);
  cache_.Erase(freshness_, dir_);
  EXPECT_EQ(cache_.size(), 0u);
  EXPECT_EQ(cache_.FindArtifact(freshness_, dir_), nullptr);
}

TEST_F(ArtifactCacheTest, ClearDropsEverythingAndWhatAReadBeganBefore) {
  // No racy window: a read that begins now could be kept.
  ArtifactCache cache(ArtifactCache::kDefaultMaxBytes, absl::ZeroDuration());
  const int leases_before = ReadLeasesHeld();
  cache.InsertArtifact(freshness_, Open(), absl::Now());
  cache.InsertSummary(freshness_, dir_, Summary(), absl::Now());
  ASSERT_EQ(cache.size(), 2u);
  const absl::Time began = absl::Now();
  std::shared_ptr<const ArtifactSummary> summary = Summary();
  EXPECT_EQ(cache.Clear(), 2u);
  EXPECT_EQ(cache.size(), 0u);
  // What the entries held open is let go (a file system can be unmounted).
  EXPECT_EQ(ReadLeasesHeld(), leases_before);
  EXPECT_EQ(cache.FindSummary(freshness_, dir_), nullptr);
  // A read that was running keeps nothing; one begun since is kept.
  const double cleared = NotKept("cleared");
  cache.InsertSummary(freshness_, dir_, summary, began);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(NotKept("cleared"), cleared + 1);
  absl::SleepFor(absl::Milliseconds(1));
  cache.InsertSummary(freshness_, dir_, Summary(), absl::Now());
  EXPECT_EQ(cache.size(), 1u);
}

// Writes through a shared writable mapping change a file's contents without
// changing its size or times: no lookup could see them, so an artifact whose
// files are open for writing somewhere is not kept.
class ArtifactCacheWriterTest : public ArtifactCacheTest {
 public:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(ArtifactCacheTest::SetUp());
    config_ = JoinPath(dir_, kRblnConfigFileName);
    // Not where this machine can have no read lease (an overlay or network
    // file system, neither root nor the files' owner).
    const int before = ReadLeasesHeld();
    cache_.InsertSummary(freshness_, dir_, Summary(), ReadLater());
    const bool leased = ReadLeasesHeld() > before;
    cache_.Clear();
    if (!leased) GTEST_SKIP() << "no read lease can be had on " << config_;
  }

  std::string config_;
};

// A shared writable mapping of `path`, whose descriptor is closed at once:
// the mapping alone keeps the file open for writing.
class SharedMapping {
 public:
  explicit SharedMapping(const std::string& path) {
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    EXPECT_GE(fd, 0) << path;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return;
    size_ = st.st_size;
    void* map = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    EXPECT_NE(map, MAP_FAILED) << path;
    if (map != MAP_FAILED) map_ = map;
  }
  ~SharedMapping() { Unmap(); }
  void Unmap() {
    if (map_ != nullptr) munmap(map_, size_);
    map_ = nullptr;
  }

 private:
  void* map_ = nullptr;
  size_t size_ = 0;
};

TEST_F(ArtifactCacheWriterTest, AFileMappedForWritingIsNotCached) {
  SharedMapping mapping(config_);
  std::shared_ptr<const ArtifactSummary> summary = Summary();
  std::shared_ptr<const Artifact> artifact = Open();
  EXPECT_TRUE(summary->may_change_unseen);
  EXPECT_TRUE(artifact->may_change_unseen());
  const double changing = NotKept("changing");
  cache_.InsertSummary(freshness_, dir_, summary, ReadLater());
  cache_.InsertArtifact(freshness_, artifact, ReadLater());
  EXPECT_EQ(cache_.size(), 0u);
  // What an operator sees when the hit rate drops (docs/metrics.md).
  EXPECT_EQ(NotKept("changing"), changing + 2);
  EXPECT_EQ(cache_.FindSummary(freshness_, dir_), nullptr);
  // Once it is gone, reads are kept again.
  mapping.Unmap();
  cache_.InsertSummary(freshness_, dir_, Summary(), ReadLater());
  EXPECT_EQ(cache_.size(), 1u);
  EXPECT_NE(cache_.FindSummary(freshness_, dir_), nullptr);
}

// A read-only root (links beneath it followed) holds no directory and takes
// no lease, but what was read while a file was open for writing is not
// kept there either.
TEST_F(ArtifactCacheWriterTest,
       AFileMappedForWritingInAReadOnlyRootIsNotCached) {
  absl::StatusOr<std::unique_ptr<Env>> root = NewConfinedEnv(
      tmp_.path(), {.read_only = true, .follow_symlinks_beneath = true});
  ASSERT_TRUE(root.ok()) << root.status();
  Env* env = root->get();
  absl::StatusOr<std::unique_ptr<Freshness>> root_freshness =
      NewConfinedFreshness(
          tmp_.path(), {.read_only = true, .follow_symlinks_beneath = true});
  ASSERT_TRUE(root_freshness.ok()) << root_freshness.status();
  Freshness* freshness = root_freshness->get();
  SharedMapping mapping(JoinPath(dir_, "prefill.rbln"));
  absl::StatusOr<ArtifactSummary> summary =
      ReadArtifactSummary(env, dir_, freshness);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(summary->may_change_unseen);
  cache_.InsertSummary(
      freshness, dir_,
      std::make_shared<const ArtifactSummary>(*std::move(summary)),
      ReadLater());
  EXPECT_EQ(cache_.size(), 0u);
  mapping.Unmap();
  summary = ReadArtifactSummary(env, dir_, freshness);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_FALSE(summary->may_change_unseen);
}

// The inspect cache goes by a file's identity, which writes through a
// mapping do not change: a graph open for writing is inspected afresh and
// its facts are not kept.
TEST_F(ArtifactCacheWriterTest, AGraphOpenForWritingBypassesTheInspectCache) {
  InspectCache inspect(InspectCache::kDefaultMaxBytes, absl::ZeroDuration());
  SharedMapping mapping(JoinPath(dir_, "prefill.rbln"));
  absl::StatusOr<Artifact> artifact = Artifact::Open(
      env_, dir_, {.inspect_cache = &inspect, .freshness = freshness_});
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  const size_t graphs = artifact->containers().size();
  ASSERT_GE(graphs, 2u);
  // Every graph but the one being written.
  EXPECT_EQ(inspect.size(), graphs - 1);
  mapping.Unmap();
  artifact = Artifact::Open(
      env_, dir_, {.inspect_cache = &inspect, .freshness = freshness_});
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  EXPECT_EQ(inspect.size(), graphs);
}

TEST_F(ArtifactCacheWriterTest,
       AFileOpenedForWritingAfterItWasCachedIsReadAgain) {
  cache_.InsertSummary(freshness_, dir_, Summary(), ReadLater());
  ASSERT_NE(cache_.FindSummary(freshness_, dir_), nullptr);
  // Opened for writing, nothing written yet: its status is as it was, but
  // a mapping could now change it unseen.
  const int fd = open(config_.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(cache_.FindSummary(freshness_, dir_), nullptr);
  EXPECT_EQ(cache_.size(), 0u);
  // While it stays open, a read is not kept.
  cache_.InsertSummary(freshness_, dir_, Summary(), ReadLater());
  EXPECT_EQ(cache_.size(), 0u);
  close(fd);
  cache_.InsertSummary(freshness_, dir_, Summary(), ReadLater());
  EXPECT_NE(cache_.FindSummary(freshness_, dir_), nullptr);
}

// tmpfs has no page_mkwrite: once a read fault has mapped a page, writes
// through a shared mapping change no time, and a writer may have come and
// gone between a read's question and its insert. Nothing read from a tmpfs
// is kept, nor inspected facts of its graphs.
TEST(ArtifactCacheTmpfsTest, NothingReadFromATmpfsIsKept) {
  struct statfs fs;
  if (statfs("/dev/shm", &fs) != 0 || fs.f_type != TMPFS_MAGIC) {
    GTEST_SKIP() << "no tmpfs at /dev/shm";
  }
  char base[] = "/dev/shm/rbln-test-XXXXXX";
  ASSERT_NE(mkdtemp(base), nullptr) << std::strerror(errno);
  const std::string dir = JoinPath(base, "tiny");
  Env* env = Env::Default();
  std::unique_ptr<Freshness> freshness = NewPosixFreshness();
  ASSERT_TRUE(WriteSyntheticArtifact(env, SynthSpec{}, dir).ok());
  absl::StatusOr<ArtifactSummary> summary =
      ReadArtifactSummary(env, dir, freshness.get());
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(summary->may_change_unseen);
  InspectCache inspect(InspectCache::kDefaultMaxBytes, absl::ZeroDuration());
  absl::StatusOr<Artifact> artifact = Artifact::Open(
      env, dir, {.inspect_cache = &inspect, .freshness = freshness.get()});
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  EXPECT_TRUE(artifact->may_change_unseen());
  EXPECT_EQ(inspect.size(), 0u);
  ArtifactCache cache;
  cache.InsertArtifact(freshness.get(),
                       std::make_shared<const Artifact>(*std::move(artifact)),
                       ReadLater());
  EXPECT_EQ(cache.size(), 0u);
  std::filesystem::remove_all(base);
}

TEST_F(ArtifactCacheTest, EachFreshnessHasItsOwnEntries) {
  std::unique_ptr<Freshness> confined =
      testing::ConfinedFreshnessOrDie(tmp_.path());
  cache_.InsertArtifact(freshness_, Open(), ReadLater());
  EXPECT_EQ(cache_.FindArtifact(confined.get(), dir_), nullptr);
  EXPECT_NE(cache_.FindArtifact(freshness_, dir_), nullptr);
}

TEST_F(ArtifactCacheTest, AConfinedFreshnessRevalidatesThroughItsRoot) {
  std::unique_ptr<Freshness> confined =
      testing::ConfinedFreshnessOrDie(tmp_.path());
  cache_.InsertArtifact(confined.get(), Open(), ReadLater());
  EXPECT_NE(cache_.FindArtifact(confined.get(), dir_), nullptr);
  // A symbolic link swapped in for the directory is never followed.
  ASSERT_TRUE(env_->Rename(dir_, tmp_.Join("moved")).ok());
  ASSERT_EQ(symlink("moved", dir_.c_str()), 0);
  EXPECT_EQ(cache_.FindArtifact(confined.get(), dir_), nullptr);
}

TEST_F(ArtifactCacheTest, IsBoundedByBytesDroppingTheLeastRecentlyUsed) {
  // Room for about two artifacts.
  std::shared_ptr<const Artifact> first = Open();
  ArtifactCache small(3 * (first->config_text().size() + 4096));
  std::vector<std::string> dirs;
  for (int i = 0; i < 6; ++i) {
    dirs.push_back(tmp_.Join(absl::StrCat("a", i)));
    ASSERT_TRUE(WriteSyntheticArtifact(env_, SynthSpec{}, dirs.back()).ok());
    absl::StatusOr<Artifact> a = Artifact::Open(env_, dirs.back());
    ASSERT_TRUE(a.ok()) << a.status();
    small.InsertArtifact(freshness_,
                         std::make_shared<const Artifact>(*std::move(a)),
                         ReadLater());
    // The first stays in use, so it stays.
    if (i > 0) {
      EXPECT_NE(small.FindArtifact(freshness_, dirs[0]), nullptr) << i;
    }
  }
  EXPECT_LE(small.size(), 3u);
  EXPECT_GE(small.size(), 2u);
  EXPECT_NE(small.FindArtifact(freshness_, dirs[0]), nullptr);
  EXPECT_NE(small.FindArtifact(freshness_, dirs[5]), nullptr);
  EXPECT_EQ(small.FindArtifact(freshness_, dirs[1]), nullptr);
}

}  // namespace
}  // namespace rbln
