// Commits on real file systems that are small or foreign
// (docs/commit-protocol.md): a disk that fills up mid-stage must leave the
// source byte-identical, the staging removed and its space given back, and
// old versions waiting out their grace period must not be why it fills; an
// output directory on another file system must receive a correct copy.
//
// Each test mounts a 6 MiB tmpfs inside its store (tmpfs has no reflink, so
// payloads are really copied). Mounting needs root or CAP_SYS_ADMIN; where it
// is refused (an unprivileged container) the tests are skipped with the
// reason.
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/os/env.h"
#include "core/store/store.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/artifact_check.h"
#include "tools/synth.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kMountName[] = "disk";  // the tmpfs, relative to the store
constexpr char kMountSize[] = "6m";

SynthSpec SpecWithPayload(uint64_t payload_bytes) {
  SynthSpec spec;
  spec.decoder_batch_sizes = {1, 2};
  spec.payload_bytes = payload_bytes;
  return spec;
}

class CommitDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mount_point_ = tmp_.Join(kMountName);
    ASSERT_EQ(mkdir(mount_point_.c_str(), 0755), 0) << strerror(errno);
    const std::string options = absl::StrCat("size=", kMountSize);
    if (mount("tmpfs", mount_point_.c_str(), "tmpfs", 0, options.c_str()) !=
        0) {
      GTEST_SKIP() << "cannot mount a tmpfs at " << mount_point_ << ": "
                   << strerror(errno)
                   << " (needs root or CAP_SYS_ADMIN, e.g. not in an "
                      "unprivileged container)";
    }
    mounted_ = true;
  }

  void TearDown() override {
    // Before TempDir removes the tree, which must not reach into the tmpfs.
    if (mounted_ && umount2(mount_point_.c_str(), MNT_DETACH) != 0) {
      ADD_FAILURE() << "umount " << mount_point_ << ": " << strerror(errno);
    }
  }

  // Free bytes on the file system holding `path`.
  static uint64_t FreeBytes(const std::string& path) {
    struct statfs st;
    if (statfs(path.c_str(), &st) != 0) {
      ADD_FAILURE() << "statfs " << path << ": " << strerror(errno);
      return 0;
    }
    return static_cast<uint64_t>(st.f_bfree) * st.f_bsize;
  }

  void OpenStore(StoreOptions options = {}) {
    absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
        ArtifactStore::Open(tmp_.path(), std::move(options));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  Env* env_ = Env::Default();
  testing::TempDir tmp_;
  std::string mount_point_;
  bool mounted_ = false;
  std::unique_ptr<ArtifactStore> store_;
};

TEST_F(CommitDiskTest, FullDiskLeavesTheSourceByteIdenticalAndNoStaging) {
  // 4 MiB of payload in a 6 MiB tmpfs: a second copy cannot be staged there.
  const SynthSpec spec = SpecWithPayload(uint64_t{4} << 20);
  const std::string full = JoinPath(kMountName, "a");
  ASSERT_TRUE(WriteSyntheticArtifact(env_, spec, tmp_.Join(full)).ok());
  ASSERT_TRUE(WriteSyntheticArtifact(env_, spec, tmp_.Join("src")).ok());
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  const std::map<std::string, uint64_t> full_before =
      testing::HashTree(tmp_.Join(full));
  const std::map<std::string, uint64_t> src_before =
      testing::HashTree(tmp_.Join("src"));
  const uint64_t free_before = FreeBytes(mount_point_);
  printf("tmpfs %s: %llu bytes free of %s\n", mount_point_.c_str(),
         static_cast<unsigned long long>(free_before), kMountSize);

  const std::string output = JoinPath(kMountName, "b");
  struct Case {
    std::string name;
    std::string output_name;  // empty: in place
  };
  for (const Case& c :
       {Case{full, ""}, Case{full, output}, Case{"src", output}}) {
    SCOPED_TRACE(
        absl::StrCat("Set ", c.name, " -> ",
                     c.output_name.empty() ? "in place" : c.output_name));
    absl::StatusOr<WriteResult> r = store_->Write(
        {.name = c.name, .target = uint64_t{9}, .output_name = c.output_name});
    ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted)
        << r.status();
    printf("%s -> %s: %s\n", c.name.c_str(),
           c.output_name.empty() ? "in place" : c.output_name.c_str(),
           r.status().ToString().c_str());
    // Says what ran out and where: a path on the full file system.
    EXPECT_THAT(r.status().message(), HasSubstr("No space left on device"));
    EXPECT_THAT(r.status().message(),
                HasSubstr(JoinPath(store_->root(), kMountName)));

    EXPECT_EQ(testing::HashTree(tmp_.Join(full)), full_before);
    EXPECT_EQ(testing::HashTree(tmp_.Join("src")), src_before);
    EXPECT_FALSE(env_->Stat(tmp_.Join(output)).ok()) << "output was created";
    EXPECT_THAT(testing::FindStagingDebris(tmp_.path()), IsEmpty());
    EXPECT_EQ(FreeBytes(mount_point_), free_before)
        << "the staging's space was not given back";
  }
  absl::StatusOr<Artifact> a = store_->Read(full, {.verify_payload = true});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->current_num_blocks(), a->compiled_num_blocks());
}

TEST_F(CommitDiskTest, OldVersionsWaitingOutTheirGraceGiveWayToAWrite) {
  // 2.5 MiB of payload in a 6 MiB tmpfs: room for the artifact and one more
  // version, not two.
  const uint64_t payload = uint64_t{5} << 19;
  const std::string name = JoinPath(kMountName, "a");
  ASSERT_TRUE(
      WriteSyntheticArtifact(env_, SpecWithPayload(payload), tmp_.Join(name))
          .ok());
  ASSERT_NO_FATAL_FAILURE(OpenStore({.old_version_grace = absl::Hours(1)}));
  ASSERT_TRUE(store_->Write({.name = name, .target = uint64_t{12}}).ok());
  const std::vector<std::string> first =
      testing::FindStagingDebris(tmp_.path());
  ASSERT_EQ(first.size(), 1u);
  // The old version holds the space the next version needs.
  ASSERT_LT(FreeBytes(mount_point_), payload);

  absl::StatusOr<WriteResult> r =
      store_->Write({.name = name, .target = uint64_t{10}});
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<Artifact> a = store_->Read(name, {.verify_payload = true});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->current_num_blocks(), 10u);
  // The first old version went to make room; the second waits.
  const std::vector<std::string> now = testing::FindStagingDebris(tmp_.path());
  ASSERT_EQ(now.size(), 1u);
  EXPECT_NE(now[0], first[0]);
  store_.reset();
  EXPECT_THAT(testing::FindStagingDebris(tmp_.path()), IsEmpty());
}

// Outcome chosen for a destination on another file system: a correct copy.
// copy_file_range refuses to cross file systems (EXDEV); Env then copies
// with sendfile, which also keeps the bytes in the kernel. The staging
// directory sits beside the destination, so the publishing rename never
// crosses file systems.
TEST_F(CommitDiskTest, OutputOnAnotherFileSystemIsACorrectCopy) {
  const SynthSpec spec = SpecWithPayload(uint64_t{1} << 20);
  const std::string on_tmpfs = JoinPath(kMountName, "c");
  ASSERT_TRUE(WriteSyntheticArtifact(env_, spec, tmp_.Join("a")).ok());
  ASSERT_TRUE(WriteSyntheticArtifact(env_, spec, tmp_.Join(on_tmpfs)).ok());
  absl::StatusOr<FileStat> root_st = env_->Stat(tmp_.path());
  absl::StatusOr<FileStat> mount_st = env_->Stat(mount_point_);
  ASSERT_TRUE(root_st.ok() && mount_st.ok());
  ASSERT_NE(root_st->device, mount_st->device) << "the tmpfs is not mounted";
  ASSERT_NO_FATAL_FAILURE(OpenStore());

  struct Case {
    std::string name;
    std::string output_name;
    uint64_t target;
  };
  for (const Case& c :
       {Case{"a", JoinPath(kMountName, "b"), 9}, Case{on_tmpfs, "d", 12}}) {
    SCOPED_TRACE(absl::StrCat("Set ", c.name, " -> ", c.output_name));
    const testing::ArtifactBaseline base =
        testing::TakeBaseline(tmp_.Join(c.name));
    const std::map<std::string, uint64_t> source_before =
        testing::HashTree(tmp_.Join(c.name));
    absl::StatusOr<WriteResult> r = store_->Write(
        {.name = c.name, .target = c.target, .output_name = c.output_name});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->written);
    EXPECT_EQ(testing::CheckResizedArtifact(tmp_.Join(c.output_name), base),
              c.target);
    EXPECT_EQ(testing::HashTree(tmp_.Join(c.name)), source_before);
  }
  EXPECT_THAT(testing::FindStagingDebris(tmp_.path()), IsEmpty());
}

}  // namespace
}  // namespace rbln
