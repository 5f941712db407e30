// Read-only roots (rbln-artifactd --read-only-root [NAME=]DIR) through the
// real daemon and the real client: artifacts where they already are (a plain
// directory, and a Hugging Face-style cache whose snapshot files are
// symbolic links into a blob directory) are read, described, fitted with a
// dry run and copied into the store with --output-dir; in-place writes are
// refused with the command to use instead; a link leading outside its root
// is refused; and nothing is ever written inside a read-only root.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/format/artifact.h"
#include "core/os/env.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/daemon_testing.h"
#include "tests/test_certificates.h"

namespace rbln::e2e {
namespace {

namespace fs = std::filesystem;

using ::rbln::testing::HashTree;
using ::testing::HasSubstr;
using ::testing::Not;

// Every entry below `dir` (files, directories and links, by path), with a
// file's hash: what "nothing was written there" is checked against.
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> entries;
  for (const auto& [path, hash] : HashTree(dir)) {
    entries[path] = absl::StrCat(hash);
  }
  for (const fs::directory_entry& entry :
       fs::recursive_directory_iterator(dir)) {
    const std::string rel = fs::relative(entry.path(), dir).string();
    if (entry.is_symlink()) {
      entries[rel] = "-> " + fs::read_symlink(entry.path()).string();
    } else if (entry.is_directory()) {
      entries[rel] = "dir";
    }
  }
  return entries;
}

// Moves the files of the artifact `src` into a Hugging Face-style cache
// entry: `<hub>/models--org--NAME/blobs/<n>` with
// `snapshots/<revision>/<file>` a relative symbolic link to its blob.
std::string MakeHubEntry(const std::string& src, const std::string& hub,
                         const std::string& name, const std::string& revision) {
  const std::string repo = absl::StrCat(hub, "/models--org--", name);
  const std::string blobs = repo + "/blobs";
  const std::string snapshot = absl::StrCat(repo, "/snapshots/", revision);
  fs::create_directories(blobs);
  fs::create_directories(snapshot);
  int n = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(src)) {
    const std::string file = entry.path().filename().string();
    if (entry.is_directory()) {
      fs::rename(entry.path(), fs::path(snapshot) / file);
      continue;
    }
    const std::string blob = absl::StrCat("blob", n++);
    fs::rename(entry.path(), fs::path(blobs) / blob);
    fs::create_symlink(absl::StrCat("../../blobs/", blob),
                       fs::path(snapshot) / file);
  }
  return snapshot;
}

// The count of the artifact `dir` inside `root`, read as the daemon reads a
// read-only root (following links that stay inside it).
uint64_t CountInRoot(const std::string& root, const std::string& dir) {
  absl::StatusOr<std::unique_ptr<Env>> env = NewConfinedEnv(
      root, {.read_only = true, .follow_symlinks_beneath = true});
  EXPECT_TRUE(env.ok()) << env.status();
  if (!env.ok()) return 0;
  absl::StatusOr<Artifact> artifact =
      Artifact::Open(env->get(), dir, {.verify_payload = true});
  EXPECT_TRUE(artifact.ok()) << artifact.status();
  return artifact.ok() ? artifact->current_num_blocks() : 0;
}

constexpr uid_t kNobody = 65534;

class ReadOnlyRootTest : public TlsDaemonTest {
 protected:
  void SetUp() override {
    TlsDaemonTest::SetUp();
    fs::create_directories(models_);
    fs::create_directories(hub_);
    fs::create_directories(outside_);
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", store_ + "/own"));
    ASSERT_NO_FATAL_FAILURE(
        Synthesize("llama3-8b-ca12-tp4", models_ + "/llama"));
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", root_.Join("src")));
    snapshot_ = MakeHubEntry(root_.Join("src"), hub_, "tiny", "abc123");

    // A cache entry whose config links outside the cache, one with an
    // absolute link, and a store entry that is a link to an artifact
    // elsewhere.
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", root_.Join("src2")));
    fs::rename(root_.Join("src2/rbln_config.json"),
               outside_ + "/rbln_config.json");
    const std::string escaping =
        MakeHubEntry(root_.Join("src2"), hub_, "escaping", "def456");
    fs::create_symlink("../../../../../outside/rbln_config.json",
                       escaping + "/rbln_config.json");
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", root_.Join("src3")));
    const std::string absolute =
        MakeHubEntry(root_.Join("src3"), hub_, "absolute", "0f0f0f");
    fs::remove(absolute + "/rbln_config.json");
    fs::create_symlink(outside_ + "/rbln_config.json",
                       absolute + "/rbln_config.json");
    fs::create_symlink(models_ + "/llama", store_ + "/linked");
    // The models belong to another user, as a user's cache would.
    if (geteuid() == 0) {
      ASSERT_EQ(chown(models_.c_str(), kNobody, kNobody), 0);
      for (const fs::directory_entry& entry :
           fs::recursive_directory_iterator(models_)) {
        ASSERT_EQ(lchown(entry.path().c_str(), kNobody, kNobody), 0);
      }
    }

    models_before_ = Snapshot(models_);
    hub_before_ = Snapshot(hub_);
    tcp_ = absl::StrCat("127.0.0.1:", PickFreePort());
    // Over TCP only listed callers write: the client is cn:operator.
    UseOperatorTls(*certs_);
    ASSERT_NO_FATAL_FAILURE(
        Start({"--rbln-smi", "none", "--read-only-root", models_,
               "--read-only-root", "hf=" + hub_, "--listen", tcp_}));
  }

  void TearDown() override {
    TlsDaemonTest::TearDown();
    // Whatever a test did, the read-only roots are as they were, and no
    // state or lock file appeared in them.
    EXPECT_EQ(Snapshot(models_), models_before_);
    EXPECT_EQ(Snapshot(hub_), hub_before_);
    EXPECT_FALSE(fs::exists(models_ + "/.rbln-artifactd"));
    EXPECT_FALSE(fs::exists(hub_ + "/.rbln-artifactd"));
  }

  // Over the Unix socket unless `server` (then over TCP, as the operator).
  Outcome Cli(const std::string& args, const std::string& server = "") {
    return CliAt(server.empty() ? address_ : server, args, root_.path());
  }

  uint64_t Get(const std::string& model_id, const std::string& server = "") {
    Outcome o = Cli("--get-kvcache-num-blocks --model-id " + model_id, server);
    EXPECT_EQ(o.code, 0) << o;
    uint64_t count = 0;
    EXPECT_TRUE(absl::SimpleAtoi(absl::StripSuffix(o.out, "\n"), &count)) << o;
    return count;
  }

  const std::string models_ = root_.Join("models");
  const std::string hub_ = root_.Join("cache/huggingface/hub");
  const std::string outside_ = root_.Join("outside");
  std::string tcp_;
  std::string snapshot_;
  std::map<std::string, std::string> models_before_;
  std::map<std::string, std::string> hub_before_;
};

TEST_F(ReadOnlyRootTest, ReadsByAbsolutePathAndByRootName) {
  const uint64_t llama = CountOnDisk(models_ + "/llama");
  EXPECT_EQ(Get(models_ + "/llama"), llama);
  EXPECT_EQ(Get("models:llama"), llama);
  // Relative to the client's working directory, over the Unix socket.
  EXPECT_EQ(Get("models/llama"), llama);
  EXPECT_EQ(Get("models:llama", tcp_), llama);

  const uint64_t tiny = CountInRoot(hub_, snapshot_);
  EXPECT_EQ(Get(snapshot_), tiny);
  EXPECT_EQ(Get("hf:models--org--tiny/snapshots/abc123"), tiny);
  EXPECT_EQ(Get("hf:models--org--tiny/snapshots/abc123", tcp_), tiny);

  Outcome o = Cli("--json --get-kvcache-num-blocks --model-id " + snapshot_);
  ASSERT_EQ(o.code, 0) << o;
  rapidjson::Document doc = ParseJson(o);
  ASSERT_TRUE(doc.HasMember("artifact")) << o;
  EXPECT_EQ(std::string(doc["artifact"].GetString()),
            "hf:models--org--tiny/snapshots/abc123");
}

// Over TCP the caller is on another host: an absolute path, which means the
// daemon's file system, is refused; names are store-relative or NAME:path.
TEST_F(ReadOnlyRootTest, OverTcpAbsolutePathsAreRefused) {
  for (const std::string& args :
       {"--get-kvcache-num-blocks --model-id " + models_ + "/llama",
        "--describe --model-id " + store_ + "/own",
        "--set-kvcache-num-blocks 12 --model-id models:llama --output-dir " +
            store_ + "/abs-copy"}) {
    Outcome o = Cli(args, tcp_);
    EXPECT_EQ(o.code, 1) << o;
    EXPECT_THAT(o.err, HasSubstr("INVALID_ARGUMENT")) << o;
    EXPECT_THAT(o.err, HasSubstr("over TCP")) << o;
  }
  EXPECT_FALSE(fs::exists(store_ + "/abs-copy"));
  EXPECT_EQ(Get("own", tcp_), CountOnDisk(store_ + "/own"));
}

TEST_F(ReadOnlyRootTest, DescribeAndDryRunWork) {
  Outcome o = Cli("--describe --verify --model-id models:llama");
  EXPECT_EQ(o.code, 0) << o;
  EXPECT_THAT(o.out, HasSubstr("models:llama"));
  o = Cli("--set-memory-budget 0.5 --dry-run --model-id " + snapshot_);
  EXPECT_EQ(o.code, 0) << o;
  EXPECT_THAT(o.out, HasSubstr("dry run"));
  o = Cli("--set-kvcache-num-blocks 12 --dry-run --model-id models:llama");
  EXPECT_EQ(o.code, 0) << o;
}

TEST_F(ReadOnlyRootTest, InPlaceWriteIsRefusedWithTheCommandToUse) {
  Outcome o = Cli("--set-kvcache-num-blocks 12 --model-id " + snapshot_);
  EXPECT_EQ(o.code, 1) << o;
  EXPECT_THAT(o.err, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(o.err, HasSubstr("read-only root hf"));
  EXPECT_THAT(o.err, HasSubstr("--read-only-root"));
  EXPECT_THAT(o.err, HasSubstr("--output-dir " + store_));
  o = Cli("--set-memory-budget 0.5 --model-id models:llama");
  EXPECT_EQ(o.code, 1) << o;
  EXPECT_THAT(o.err, HasSubstr("--set-memory-budget 50%"));
}

TEST_F(ReadOnlyRootTest, OutputDirWriteCopiesIntoTheStore) {
  const uint64_t before = CountInRoot(hub_, snapshot_);
  Outcome o = Cli(absl::StrCat("--set-kvcache-num-blocks 12 --model-id ",
                               snapshot_, " --output-dir ", store_, "/copy"));
  ASSERT_EQ(o.code, 0) << o;
  EXPECT_EQ(CountOnDisk(store_ + "/copy"), 12u);
  EXPECT_EQ(CountInRoot(hub_, snapshot_), before);
  // The copy holds real files, not links into the cache.
  for (const fs::directory_entry& entry :
       fs::recursive_directory_iterator(store_ + "/copy")) {
    EXPECT_FALSE(entry.is_symlink()) << entry.path();
  }
  // By name over TCP, and a budget fit.
  o =
      Cli("--set-memory-budget 0.9 --model-id models:llama --output-dir "
          "llama-half",
          tcp_);
  ASSERT_EQ(o.code, 0) << o;
  EXPECT_GT(CountOnDisk(store_ + "/llama-half"), 0u);
  // The copy is the daemon's, not the root's foreign owner's; modes are
  // kept.
  for (const fs::directory_entry& entry :
       fs::recursive_directory_iterator(store_ + "/llama-half")) {
    struct stat copy, source;
    ASSERT_EQ(lstat(entry.path().c_str(), &copy), 0);
    const fs::path rel = fs::relative(entry.path(), store_ + "/llama-half");
    ASSERT_EQ(stat((fs::path(models_) / "llama" / rel).c_str(), &source), 0);
    EXPECT_EQ(copy.st_uid, geteuid()) << rel;
    EXPECT_EQ(copy.st_gid, getegid()) << rel;
    EXPECT_EQ(copy.st_mode & 07777, source.st_mode & 07777) << rel;
  }
}

TEST_F(ReadOnlyRootTest, NothingIsWrittenIntoAReadOnlyRoot) {
  Outcome o = Cli(absl::StrCat("--set-kvcache-num-blocks 12 --model-id ",
                               store_, "/own --output-dir ", models_, "/new"));
  EXPECT_EQ(o.code, 1) << o;
  EXPECT_THAT(o.err, HasSubstr("read-only root models"));
  EXPECT_FALSE(fs::exists(models_ + "/new"));
}

TEST_F(ReadOnlyRootTest, LinksLeadingOutsideTheRootAreRefused) {
  for (const std::string name :
       {"escaping/snapshots/def456", "absolute/snapshots/0f0f0f"}) {
    Outcome o = Cli(absl::StrCat("--get-kvcache-num-blocks --model-id ", hub_,
                                 "/models--org--", name));
    EXPECT_EQ(o.code, 1) << o;
    EXPECT_THAT(o.err, HasSubstr("PERMISSION_DENIED")) << name;
    EXPECT_THAT(o.err, HasSubstr("outside the read-only root")) << name;
  }
  // The store follows no link out of it.
  Outcome o = Cli("--get-kvcache-num-blocks --model-id " + store_ + "/linked");
  EXPECT_EQ(o.code, 1) << o;
  EXPECT_THAT(o.err, HasSubstr("symbolic link"));
}

TEST_F(ReadOnlyRootTest, OutsideEveryRootNamesTheRootsAndTheFlag) {
  Outcome o = Cli("--get-kvcache-num-blocks --model-id " + outside_);
  EXPECT_EQ(o.code, 1) << o;
  EXPECT_THAT(o.err, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(o.err, HasSubstr("outside the artifact store"));
  EXPECT_THAT(o.err, HasSubstr("models="));
  EXPECT_THAT(o.err, HasSubstr("hf="));
  EXPECT_THAT(o.err, HasSubstr("--read-only-root"));
}

TEST_F(ReadOnlyRootTest, ListShowsEveryRootAndWhatItSkipped) {
  Outcome o = Cli("--list");
  ASSERT_EQ(o.code, 0) << o;
  EXPECT_THAT(o.out, HasSubstr("read-only root models: " + models_));
  EXPECT_THAT(o.out, HasSubstr("read-only root hf: " + hub_));
  EXPECT_THAT(o.out, HasSubstr("own"));
  EXPECT_THAT(o.out, HasSubstr("models:llama"));
  EXPECT_THAT(o.out, HasSubstr("hf:models--org--tiny/snapshots/abc123"));
  EXPECT_THAT(o.out, HasSubstr("skipped"));
  EXPECT_THAT(o.out, HasSubstr("linked: a symbolic link"));
  EXPECT_THAT(o.out, HasSubstr("hf:models--org--escaping/snapshots/def456: "));
  EXPECT_THAT(o.out, HasSubstr("hf:models--org--absolute/snapshots/0f0f0f: "));

  // JSON Lines: the artifacts, then one object per entry skipped.
  o = Cli("--list --json");
  ASSERT_EQ(o.code, 0) << o;
  size_t skipped = 0;
  for (const rapidjson::Document& line : ParseJsonLines(o)) {
    if (line.HasMember("skipped_reason")) {
      ++skipped;
    } else {
      EXPECT_EQ(skipped, 0u) << "an artifact after a skipped entry: " << o;
      EXPECT_TRUE(line.HasMember("kvcache_num_blocks")) << o;
    }
  }
  EXPECT_GE(skipped, 3u) << o;
}

// Start-up refuses roots that overlap, or a missing one, naming it.
using ReadOnlyRootStartTest = DaemonTest;

TEST_F(ReadOnlyRootStartTest, OverlappingOrMissingRootsAreRefused) {
  fs::create_directories(StorePath("inside"));
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{
           {"--read-only-root", StorePath("inside")},
           {"--read-only-root", root_.path()},
           {"--read-only-root", root_.Join("missing")},
           {"--read-only-root", "bad name=" + StorePath("inside")}}) {
    Outcome o = Run("rbln-artifactd",
                    absl::StrCat("--rbln-smi none --store ", ShellQuote(store_),
                                 " --listen ", ShellQuote(address_), " ",
                                 flags[0], " ", ShellQuote(flags[1])));
    EXPECT_NE(o.code, 0) << flags[1] << o;
    EXPECT_THAT(o.err, HasSubstr("read-only")) << o;
  }
}

}  // namespace
}  // namespace rbln::e2e
