// Confined path resolution on the real file system, with openat2 and with
// the component-by-component walk used where openat2 is missing: both must
// find the same places and refuse the same paths. What the Env does at those
// places is tested in core/os/env_test.cc.
#include "core/os/path_resolver.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;

class PathResolverTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    root_ = std::filesystem::canonical(tmp_.path()).string() + "/root";
    std::filesystem::create_directories(root_ + "/a/b");
    std::filesystem::create_directories(root_ + "/blobs");
    testing::WriteFileOrDie(root_ + "/a/b/file", "x");
    testing::WriteFileOrDie(root_ + "/blobs/data", "12345");
    std::filesystem::create_directory_symlink("a", root_ + "/alias");
    std::filesystem::create_symlink("../blobs/data", root_ + "/a/link");
    std::filesystem::create_directory_symlink("/etc", root_ + "/out");
    std::filesystem::create_directory_symlink("../..", root_ + "/a/up");
    paths_ = Confine({});
  }

  std::unique_ptr<PathResolver> Confine(ConfinedEnvOptions options) {
    options.use_openat2 = GetParam();
    absl::StatusOr<std::unique_ptr<PathResolver>> paths =
        PathResolver::Confine(root_, options);
    EXPECT_TRUE(paths.ok()) << paths.status();
    return paths.ok() ? *std::move(paths) : nullptr;
  }

  // What `at` names, as fstatat sees it (not following a link).
  static struct stat StatOf(const Location& at) {
    struct stat st = {};
    EXPECT_EQ(fstatat(at.dir, at.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW), 0)
        << at.leaf;
    return st;
  }

  static ino_t InodeOf(const std::string& path) {
    struct stat st = {};
    EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
    return st.st_ino;
  }

  testing::TempDir tmp_;
  std::string root_;
  std::unique_ptr<PathResolver> paths_;
};

TEST_P(PathResolverTest, FindsThePlaceOfAPathBeneathTheRoot) {
  EXPECT_EQ(paths_->root(), root_);
  absl::StatusOr<Location> top = paths_->Locate("stat", root_ + "/a");
  ASSERT_TRUE(top.ok()) << top.status();
  // One component: its parent is the root's own descriptor.
  EXPECT_EQ(top->dir, paths_->root_fd());
  EXPECT_EQ(top->leaf, "a");
  absl::StatusOr<Location> deep = paths_->Locate("stat", root_ + "/a/b/file");
  ASSERT_TRUE(deep.ok()) << deep.status();
  EXPECT_EQ(deep->dir, deep->holder.get());
  EXPECT_EQ(deep->leaf, "file");
  EXPECT_EQ(StatOf(*deep).st_ino, InodeOf(root_ + "/a/b/file"));
  absl::StatusOr<Location> root = paths_->Locate("stat", root_);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(StatOf(*root).st_ino, InodeOf(root_));
  // BeneathRoot's answer points into the path it was given: keep it.
  const std::string ab = root_ + "/a/b";
  absl::StatusOr<absl::string_view> rel = paths_->BeneathRoot("stat", ab);
  ASSERT_TRUE(rel.ok()) << rel.status();
  EXPECT_EQ(*rel, "a/b");
}

TEST_P(PathResolverTest, RefusesWhatLeadsOutsideOrThroughALink) {
  for (const std::string& path :
       {std::string("/etc/passwd"), root_ + "x/a", root_ + "/alias/b",
        root_ + "/out/passwd", root_ + "/a/../a/b", root_ + "/a/up/x"}) {
    absl::StatusOr<Location> at = paths_->Locate("stat", path);
    EXPECT_EQ(at.status().code(), absl::StatusCode::kPermissionDenied)
        << path << ": " << at.status();
  }
  absl::StatusOr<Location> outside = paths_->Locate("open", "/etc/passwd");
  EXPECT_THAT(outside.status().message(), HasSubstr("outside the directory"));
  // The last component is not followed: the call acts on the link itself.
  absl::StatusOr<Location> link = paths_->Locate("stat", root_ + "/a/link");
  ASSERT_TRUE(link.ok()) << link.status();
  EXPECT_TRUE(S_ISLNK(StatOf(*link).st_mode));
  const std::string long_path = root_ + "/" + std::string(PATH_MAX, 'a');
  EXPECT_EQ(paths_->Locate("stat", long_path).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(PathResolverTest, AMissingParentIsNotFound) {
  EXPECT_EQ(paths_->Locate("stat", root_ + "/missing/x").status().code(),
            absl::StatusCode::kNotFound);
  // A missing last component is the caller's to find out.
  EXPECT_TRUE(paths_->Locate("stat", root_ + "/a/missing").ok());
}

TEST_P(PathResolverTest, FollowsLinksThatStayBeneathTheRootWhenAsked) {
  std::unique_ptr<PathResolver> follow =
      Confine({.read_only = true, .follow_symlinks_beneath = true});
  ASSERT_NE(follow, nullptr);
  EXPECT_TRUE(follow->follow_symlinks());
  absl::StatusOr<Location> data = follow->Locate("open", root_ + "/a/link");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(StatOf(*data).st_ino, InodeOf(root_ + "/blobs/data"));
  absl::StatusOr<Location> through =
      follow->Locate("open", root_ + "/alias/b/file");
  ASSERT_TRUE(through.ok()) << through.status();
  EXPECT_EQ(StatOf(*through).st_ino, InodeOf(root_ + "/a/b/file"));
  // An absolute link, or one that climbs above the root, is refused.
  absl::StatusOr<Location> out = follow->Locate("open", root_ + "/out/passwd");
  EXPECT_EQ(out.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(out.status().message(), HasSubstr("the read-only root"));
  EXPECT_EQ(follow->Locate("open", root_ + "/a/up/x").status().code(),
            absl::StatusCode::kPermissionDenied);
}

INSTANTIATE_TEST_SUITE_P(Resolve, PathResolverTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Openat2" : "Walk";
                         });

TEST(PathResolverConfineTest, RefusesAMissingRootAndAFile) {
  testing::TempDir tmp;
  EXPECT_EQ(PathResolver::Confine(tmp.Join("missing"), {}).status().code(),
            absl::StatusCode::kNotFound);
  testing::WriteFileOrDie(tmp.Join("file"), "x");
  EXPECT_EQ(PathResolver::Confine(tmp.Join("file"), {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(PathResolverConfineTest, UnconfinedItTakesAnyPathAsGiven) {
  PathResolver paths;
  EXPECT_EQ(paths.root(), "");
  absl::StatusOr<Location> at = paths.Locate("stat", "/etc/passwd");
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(at->dir, AT_FDCWD);
  EXPECT_EQ(at->leaf, "/etc/passwd");
}

}  // namespace
}  // namespace rbln
