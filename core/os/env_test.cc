// The confined Env (NewConfinedEnv) on the real file system, with openat2 and
// with the component-by-component walk used where openat2 is missing: both
// must refuse the same things.
#include "core/os/env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;

class ConfinedEnvTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    root_ = std::filesystem::canonical(tmp_.path()).string() + "/root";
    outside_ = std::filesystem::canonical(tmp_.path()).string() + "/outside";
    std::filesystem::create_directories(root_ + "/dir/sub");
    std::filesystem::create_directories(outside_);
    testing::WriteFileOrDie(root_ + "/dir/file", "inside");
    testing::WriteFileOrDie(outside_ + "/secret", "outside");
    std::filesystem::create_directory_symlink(outside_, root_ + "/door");
    std::filesystem::create_directory_symlink(root_ + "/dir", root_ + "/alias");
    std::filesystem::create_symlink(outside_ + "/secret", root_ + "/dir/link");
    ASSERT_EQ(mkfifo((root_ + "/dir/fifo").c_str(), 0644), 0);
    absl::StatusOr<std::unique_ptr<Env>> env =
        NewConfinedEnv(root_, {.use_openat2 = GetParam()});
    ASSERT_TRUE(env.ok()) << env.status();
    env_ = *std::move(env);
  }

  testing::TempDir tmp_;
  std::string root_;
  std::string outside_;
  std::unique_ptr<Env> env_;
};

TEST_P(ConfinedEnvTest, ReadsAndWritesBeneathTheRoot) {
  EXPECT_EQ(env_->ConfinedRoot(), root_);
  absl::StatusOr<std::string> text =
      env_->ReadFileToString(root_ + "/dir/file", 100);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "inside");
  ASSERT_TRUE(
      WriteStringToNewFile(env_.get(), root_ + "/dir/sub/new", "x").ok());
  ASSERT_TRUE(
      env_->RenameNoReplace(root_ + "/dir/sub/new", root_ + "/dir/renamed")
          .ok());
  EXPECT_TRUE(env_->Stat(root_ + "/dir/renamed").ok());
  absl::StatusOr<std::vector<DirEntry>> entries = env_->ListDir(root_);
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_EQ(entries->size(), 3u);  // alias, dir, door
  EXPECT_TRUE(env_->SyncDir(root_).ok());
  EXPECT_TRUE(env_->SyncDir(root_ + "/dir").ok());
}

TEST_P(ConfinedEnvTest, RefusesEverySymbolicLinkOnThePath) {
  for (const std::string& path :
       {root_ + "/door/secret", root_ + "/alias/file", root_ + "/dir/link"}) {
    SCOPED_TRACE(path);
    absl::StatusOr<std::string> text = env_->ReadFileToString(path, 100);
    EXPECT_EQ(text.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(text.status().message(), HasSubstr("symbolic link"));
  }
  EXPECT_EQ(env_->CreateDir(root_ + "/door/made").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(WriteStringToNewFile(env_.get(), root_ + "/door/made", "x").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(env_->ListDir(root_ + "/door").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(std::filesystem::exists(outside_ + "/made"));
}

TEST_P(ConfinedEnvTest, ReadsALinkAsTheLastComponentOnly) {
  // The link's own text, whatever it leads to; nothing is followed.
  absl::StatusOr<std::optional<std::string>> target =
      env_->ReadLink(root_ + "/door");
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(*target, outside_);
  target = env_->ReadLink(root_ + "/dir/link");
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(*target, outside_ + "/secret");
  // Not a link: nullopt; nothing there: NOT_FOUND.
  for (const std::string path : {"/dir", "/dir/file", "/dir/fifo"}) {
    target = env_->ReadLink(root_ + path);
    ASSERT_TRUE(target.ok()) << path << ": " << target.status();
    EXPECT_EQ(*target, std::nullopt) << path;
  }
  EXPECT_EQ(env_->ReadLink(root_ + "/dir/missing").status().code(),
            absl::StatusCode::kNotFound);
  // A link on the way is refused as for every other call.
  for (const std::string path : {"/door/secret", "/alias/link"}) {
    target = env_->ReadLink(root_ + path);
    EXPECT_EQ(target.status().code(), absl::StatusCode::kPermissionDenied)
        << path << ": " << target.status();
    EXPECT_THAT(target.status().message(), HasSubstr("symbolic link"));
  }
  EXPECT_EQ(env_->ReadLink(outside_ + "/secret").status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_P(ConfinedEnvTest, RefusesPathsOutsideTheRoot) {
  for (const std::string& path :
       {outside_ + "/secret", root_ + "/../outside/secret", root_ + "x/a",
        std::string("/etc/passwd")}) {
    SCOPED_TRACE(path);
    EXPECT_EQ(env_->ReadFileToString(path, 100).status().code(),
              absl::StatusCode::kPermissionDenied);
  }
}

TEST_P(ConfinedEnvTest, RefusesSpecialFilesWithoutOpeningThem) {
  // A FIFO would block open() forever.
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      env_->NewRandomAccessFile(root_ + "/dir/fifo");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(file.status().message(), HasSubstr("is a FIFO"));
  EXPECT_EQ(env_->NewRandomAccessFile(root_ + "/dir").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(ConfinedEnvTest, LockFilesCanBeRemovedByTheirHolder) {
  const std::string path = root_ + "/dir/lock";
  absl::StatusOr<std::unique_ptr<FileLock>> first =
      env_->LockFile(path, /*exclusive=*/true, /*wait=*/false);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(env_->LockFile(path, true, false).status().code(),
            absl::StatusCode::kUnavailable);
  // The holder removes the file, then unlocks: the next locker gets a lock
  // on a fresh file that is linked at the name.
  ASSERT_TRUE(env_->RemoveFile(path).ok());
  first->reset();
  absl::StatusOr<std::unique_ptr<FileLock>> second =
      env_->LockFile(path, true, false);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(std::filesystem::exists(path));
}

TEST_P(ConfinedEnvTest, AWaiterOnARemovedLockFileLocksTheLinkedOne) {
  const std::string path = root_ + "/dir/lock";
  absl::StatusOr<std::unique_ptr<FileLock>> first =
      env_->LockFile(path, /*exclusive=*/true, /*wait=*/false);
  ASSERT_TRUE(first.ok()) << first.status();
  // The waiter opens the file that is about to be removed and blocks in
  // flock on it.
  absl::StatusOr<std::unique_ptr<FileLock>> second =
      absl::UnknownError("not run");
  std::thread waiter([&] { second = env_->LockFile(path, true, true); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(env_->RemoveFile(path).ok());
  first->reset();
  waiter.join();
  ASSERT_TRUE(second.ok()) << second.status();
  // Its lock must be on the file linked at the name now, or a third locker
  // would get the name's lock too.
  EXPECT_EQ(env_->LockFile(path, true, false).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_P(ConfinedEnvTest, SetOwnershipChangesModeAndRefusesLinks) {
  const std::string path = root_ + "/dir/file";
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  ASSERT_TRUE(env_->SetOwnership(path, {st.st_uid, st.st_gid, 0604}).ok());
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0604u);
  EXPECT_EQ(env_->SetOwnership(root_ + "/dir/link", {0, 0, 0777}).code(),
            absl::StatusCode::kPermissionDenied);
  ASSERT_EQ(stat((outside_ + "/secret").c_str(), &st), 0);
  EXPECT_NE(st.st_mode & 07777, 0777u);
}

// A read-only root's Env: links that stay beneath the root are followed,
// in any component and as the last one; others are refused; nothing is
// written.
TEST_P(ConfinedEnvTest, ReadOnlyRootFollowsLinksThatStayInside) {
  std::filesystem::create_directories(root_ + "/blobs");
  std::filesystem::create_directories(root_ + "/snap/rev");
  testing::WriteFileOrDie(root_ + "/blobs/b1", "blob one");
  std::filesystem::create_symlink("../../blobs/b1", root_ + "/snap/rev/file");
  std::filesystem::create_symlink("rev", root_ + "/snap/latest");
  std::filesystem::create_symlink("../../../outside/secret",
                                  root_ + "/snap/rev/escape");
  std::filesystem::create_symlink("loop", root_ + "/snap/loop");
  absl::StatusOr<std::unique_ptr<Env>> env =
      NewConfinedEnv(root_, {.use_openat2 = GetParam(),
                             .read_only = true,
                             .follow_symlinks_beneath = true});
  ASSERT_TRUE(env.ok()) << env.status();
  Env* ro = env->get();

  for (const std::string path : {"/snap/rev/file", "/snap/latest/file"}) {
    absl::StatusOr<std::string> text = ro->ReadFileToString(root_ + path, 100);
    ASSERT_TRUE(text.ok()) << path << ": " << text.status();
    EXPECT_EQ(*text, "blob one") << path;
  }
  absl::StatusOr<FileStat> st = ro->Stat(root_ + "/snap/rev/file");
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->type, FileType::kRegular);
  EXPECT_EQ(st->size, 8u);
  st = ro->Stat(root_ + "/snap/latest");
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->type, FileType::kDirectory);

  // Leading outside: a relative link that climbs out, an absolute one, a
  // link to a directory outside; and an absolute link, even one into the
  // root (as RESOLVE_BENEATH, which cannot tell where it would lead).
  for (const std::string path : {"/snap/rev/escape", "/dir/link",
                                 "/door/secret", "/door", "/alias/file"}) {
    absl::StatusOr<std::string> text = ro->ReadFileToString(root_ + path, 100);
    EXPECT_EQ(text.status().code(), absl::StatusCode::kPermissionDenied)
        << path << ": " << text.status();
    EXPECT_THAT(text.status().message(),
                HasSubstr("outside the read-only root"))
        << path;
  }
  EXPECT_FALSE(ro->Stat(root_ + "/snap/loop").ok());

  // Nothing is written.
  for (const absl::Status& status :
       {WriteStringToNewFile(ro, root_ + "/dir/new", "x"),
        ro->CreateDir(root_ + "/newdir"), ro->RemoveFile(root_ + "/dir/file"),
        ro->Rename(root_ + "/dir/file", root_ + "/dir/moved"),
        ro->LockFile(root_ + "/dir/lock", true, false).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
    EXPECT_THAT(status.message(), HasSubstr("read-only root"));
  }
  EXPECT_TRUE(std::filesystem::exists(root_ + "/dir/file"));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/dir/new"));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/dir/lock"));
}

TEST_P(ConfinedEnvTest, OpensDirectoriesAndSyncsFilesWithoutFollowingLinks) {
  absl::StatusOr<std::unique_ptr<Directory>> dir =
      env_->OpenDirectory(root_ + "/dir");
  ASSERT_TRUE(dir.ok()) << dir.status();
  struct stat st;
  ASSERT_EQ(fstat((*dir)->native_handle(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(env_->OpenDirectory(root_ + "/alias").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(env_->OpenDirectory(root_ + "/door/x").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(env_->OpenDirectory(outside_).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(env_->OpenDirectory(root_ + "/dir/file").status().code(),
            absl::StatusCode::kNotFound);  // ENOTDIR

  EXPECT_TRUE(env_->SyncFile(root_ + "/dir/file").ok());
  EXPECT_EQ(env_->SyncFile(root_ + "/dir/link").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(env_->SyncFile(root_ + "/dir/fifo").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(env_->SyncFile(root_ + "/dir").code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(ConfinedEnvTest, ForgetsTheCachedPagesOfRegularFilesOnly) {
  EXPECT_EQ(env_->ForgetCachedPages(root_ + "/dir/link").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(env_->ForgetCachedPages(root_ + "/door/secret").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(env_->ForgetCachedPages(root_ + "/dir/fifo").code(),
            absl::StatusCode::kFailedPrecondition);  // and did not block
  EXPECT_EQ(env_->ForgetCachedPages(root_ + "/dir").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(env_->ForgetCachedPages(root_ + "/dir/missing").code(),
            absl::StatusCode::kNotFound);

  const std::string path = root_ + "/dir/big";
  const std::string data(1 << 20, 'x');
  // Written and synced: every page cached, and clean.
  ASSERT_TRUE(WriteStringToNewFile(env_.get(), path, data).ok());
  // tmpfs keeps its pages: they are the file.
  const bool droppable = testing::PageCacheIsDroppable(root_);
  if (droppable) {
    ASSERT_GT(testing::CachedPages(path), 0u);
  }
  EXPECT_TRUE(env_->ForgetCachedPages(path).ok());
  if (droppable) {
    EXPECT_EQ(testing::CachedPages(path), 0u);
  }
  EXPECT_EQ(testing::ReadFileOrDie(path), data);  // advice, nothing more
}

INSTANTIATE_TEST_SUITE_P(Resolution, ConfinedEnvTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Openat2" : "ComponentWalk";
                         });

TEST(NewConfinedEnvTest, RefusesAMissingRootAndAFile) {
  testing::TempDir tmp;
  EXPECT_EQ(NewConfinedEnv(tmp.Join("missing")).status().code(),
            absl::StatusCode::kNotFound);
  testing::WriteFileOrDie(tmp.Join("file"), "x");
  EXPECT_EQ(NewConfinedEnv(tmp.Join("file")).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace rbln
