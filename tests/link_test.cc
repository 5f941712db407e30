// Versions switched by a link, end to end (docs/security.md, "Versions
// switched by a link"): the real daemon and client over a store whose
// `current` is a symbolic link to `v2`. Get, set, fit, describe and list
// work through it and name both; a set replaces v2's directory and leaves
// the link as it was; a link switched while a write waits for its lock
// aborts the write, changing nothing; every other link in the store, and a
// link out of it, stays refused.
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "rbln/artifact/v1/artifact_service.grpc.pb.h"
#include "tests/daemon_stub_testing.h"

namespace rbln::e2e {
namespace {

namespace fs = std::filesystem;
namespace v1 = ::rbln::artifact::v1;
using ::rbln::testing::HashTree;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

class LinkTest : public StubDaemonTest {
 protected:
  void SetUp() override {
    StubDaemonTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", StorePath("v1")));
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", StorePath("v2")));
    fs::create_directory_symlink("v2", StorePath("current"));
    ASSERT_NO_FATAL_FAILURE(Start());
    // The versions tell apart by their counts.
    Outcome set = Cli("--set-kvcache-num-blocks 12 --model-id ./v1");
    ASSERT_EQ(set.code, 0) << set;
  }

  void SwitchLink(const std::string& target, const std::string& name) {
    ::rbln::testing::ReplaceSymlink(target, StorePath(name));
  }

  // What the link `name` holds; "" (and a test failure) when it is none.
  std::string LinkAt(const std::string& name) {
    EXPECT_TRUE(fs::is_symlink(StorePath(name))) << name;
    std::error_code ec;
    return fs::read_symlink(StorePath(name), ec).string();
  }

  // A string field of a JSON object ("" when missing).
  static std::string Text(const rapidjson::Value& object, const char* field) {
    return object.HasMember(field) && object[field].IsString()
               ? object[field].GetString()
               : "";
  }
};

TEST_F(LinkTest, GetSetFitDescribeAndListWorkThroughALink) {
  // Get: the bare count of v2, as optimum-rbln-cli prints it; --json names
  // both.
  Outcome get = Cli("--get-kvcache-num-blocks --model-id ./current");
  ASSERT_EQ(get.code, 0) << get;
  EXPECT_EQ(get.out, absl::StrCat(CountOnDisk(StorePath("v2")), "\n"));
  get = Cli("--get-kvcache-num-blocks --model-id current --json");
  ASSERT_EQ(get.code, 0) << get;
  rapidjson::Document doc = ParseJson(get);
  EXPECT_EQ(Text(doc, "artifact"), "current");
  EXPECT_EQ(Text(doc, "link_target"), "v2");
  get = Cli("--get-kvcache-num-blocks --model-id v1 --json");
  EXPECT_EQ(Text(ParseJson(get), "link_target"), "");

  Outcome describe = Cli("--describe --model-id ./current");
  ASSERT_EQ(describe.code, 0) << describe;
  EXPECT_THAT(describe.out, HasSubstr("artifact:    current -> v2\n"));
  describe = Cli("--describe --model-id ./current --json");
  ASSERT_EQ(describe.code, 0) << describe;
  EXPECT_EQ(Text(ParseJson(describe), "link_target"), "v2");

  // Set: v2's directory replaced, the link as it was, v1 untouched.
  const auto v1_before = HashTree(StorePath("v1"));
  struct stat v2_before {};
  ASSERT_EQ(stat(StorePath("v2").c_str(), &v2_before), 0);
  Outcome set = Cli("--set-kvcache-num-blocks 10 --model-id ./current");
  ASSERT_EQ(set.code, 0) << set;
  EXPECT_THAT(set.err,
              HasSubstr("kvcache_num_blocks: 16 -> 10 (current -> v2)\n"));
  EXPECT_EQ(CountOnDisk(StorePath("v2")), 10u);
  struct stat v2_after {};
  ASSERT_EQ(stat(StorePath("v2").c_str(), &v2_after), 0);
  EXPECT_NE(v2_after.st_ino, v2_before.st_ino)
      << "v2's directory was not replaced";
  EXPECT_EQ(LinkAt("current"), "v2");
  EXPECT_EQ(HashTree(StorePath("v1")), v1_before);
  EXPECT_EQ(Cli("--get-kvcache-num-blocks --model-id ./current").out, "10\n");

  // Fit, with --json.
  Outcome fit =
      Cli("--set-memory-budget 0.5 --model-id ./current --json --dry-run");
  ASSERT_EQ(fit.code, 0) << fit;
  doc = ParseJson(fit);
  EXPECT_EQ(Text(doc, "artifact"), "current");
  EXPECT_EQ(Text(doc, "link_target"), "v2");
  fit = Cli("--set-memory-budget 0.5 --model-id ./current --json");
  ASSERT_EQ(fit.code, 0) << fit;
  EXPECT_EQ(CountOnDisk(StorePath("v2")),
            JsonU64(ParseJson(fit), "new_num_blocks"));
  EXPECT_EQ(LinkAt("current"), "v2");

  // List: the link, with its target, beside the versions.
  Outcome list = Cli("--list");
  ASSERT_EQ(list.code, 0) << list;
  EXPECT_THAT(list.out, ContainsRegex("\ncurrent -> v2 +[0-9]+ +RBLN-CA12"));
  EXPECT_THAT(list.out, ContainsRegex("\nv1 +12 +RBLN-CA12"));
  // JSON Lines: one object per artifact, each with its link_target.
  list = Cli("--list --json");
  ASSERT_EQ(list.code, 0) << list;
  std::map<std::string, std::string> targets;
  for (const rapidjson::Document& a : ParseJsonLines(list)) {
    ASSERT_TRUE(a.HasMember("link_target")) << list;
    targets[Text(a, "artifact")] = Text(a, "link_target");
  }
  EXPECT_EQ(targets, (std::map<std::string, std::string>{
                         {"current", "v2"}, {"v1", ""}, {"v2", ""}}));
  // A page of one at a time (the link on its own page), and a prefix.
  targets.clear();
  v1::ListArtifactsRequest request;
  request.set_page_size(1);
  do {
    v1::ListArtifactsResponse page;
    const grpc::Status status =
        stub_->ListArtifacts(Context().get(), request, &page);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_LE(page.artifacts_size(), 1);
    for (const v1::ArtifactSummary& a : page.artifacts()) {
      targets[a.artifact()] = a.link_target();
    }
    request.set_page_token(page.next_page_token());
  } while (!request.page_token().empty());
  EXPECT_EQ(targets, (std::map<std::string, std::string>{
                         {"current", "v2"}, {"v1", ""}, {"v2", ""}}));
  list = Cli("--list --prefix cur");
  ASSERT_EQ(list.code, 0) << list;
  EXPECT_THAT(list.out, ContainsRegex("\ncurrent -> v2 +[0-9]+ +RBLN-CA12"));
  EXPECT_THAT(list.out, Not(ContainsRegex("\nv[12] ")));

  // Switching the link switches what is read, at once.
  SwitchLink("v1", "current");
  EXPECT_EQ(Cli("--get-kvcache-num-blocks --model-id ./current").out, "12\n");
}

TEST_F(LinkTest, ALinkSwitchedWhileTheWriteWaitsForItsLockAborts) {
  // A maintenance tool holds v2's lock: the write through current waits on
  // the target's name.
  HeldArtifactLock lock(store_, "v2");
  ASSERT_TRUE(lock.held());
  const auto before = HashTree(store_ + "/v1");
  const auto v2_before = HashTree(store_ + "/v2");
  grpc::Status status;
  v1::ResizeResponse reply;
  std::thread writer([&] {
    v1::SetKvcacheNumBlocksRequest request;
    request.set_artifact("current");
    request.set_num_blocks(10);
    request.mutable_options()->set_operation_id("link-switch");
    status = stub_->SetKvcacheNumBlocks(Context(60).get(), request, &reply);
  });
  bool waiting = false;
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (!waiting && std::chrono::steady_clock::now() < deadline) {
    v1::GetWriteProgressRequest request;
    request.set_operation_id("link-switch");
    v1::GetWriteProgressResponse progress;
    waiting =
        stub_->GetWriteProgress(Context().get(), request, &progress).ok() &&
        progress.state() == v1::WRITE_STATE_WAITING;
    if (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  SwitchLink("v1", "current");
  lock.Release();
  writer.join();
  ASSERT_TRUE(waiting) << "the write never waited for v2's lock";
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ABORTED)
      << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("current was a symbolic link to v2 when the write "
                        "began, but it now names v1; nothing was changed"));
  EXPECT_EQ(HashTree(store_ + "/v1"), before);
  EXPECT_EQ(HashTree(store_ + "/v2"), v2_before);
  EXPECT_EQ(LinkAt("current"), "v1");
}

TEST_F(LinkTest, EveryOtherLinkIsRefusedSayingWhatIsWrong) {
  ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", root_.Join("outside")));
  fs::create_directories(StorePath("team"));
  fs::create_directories(StorePath("empty"));
  ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", StorePath("team/v3")));
  fs::create_directory_symlink(root_.Join("outside"), StorePath("escape"));
  fs::create_directory_symlink("../outside", StorePath("climbing"));
  fs::create_directory_symlink("team/v3", StorePath("deeper"));
  fs::create_directory_symlink("current", StorePath("latest"));
  fs::create_directory_symlink("empty", StorePath("hollow"));
  fs::create_directory_symlink("team", StorePath("crew"));
  fs::create_directory_symlink("v9", StorePath("ghost"));
  const auto store_before = HashTree(store_);
  const auto outside_before = HashTree(root_.Join("outside"));
  const struct {
    const char* name;
    const char* code;
    const char* what;
  } cases[] = {
      {"escape", "PERMISSION_DENIED", "an absolute path"},
      {"climbing", "PERMISSION_DENIED", "climbs out of its directory"},
      {"deeper", "PERMISSION_DENIED", "not a name in the same directory"},
      {"latest", "PERMISSION_DENIED", "itself a symbolic link"},
      {"hollow", "PERMISSION_DENIED", "not an artifact"},
      {"crew/v3", "PERMISSION_DENIED", "is not followed here"},
      {"ghost", "NOT_FOUND", "which does not exist"},
  };
  for (const auto& c : cases) {
    for (const std::string operation :
         {"--get-kvcache-num-blocks", "--describe",
          "--set-kvcache-num-blocks 10", "--set-memory-budget 0.5",
          "--set-kvcache-num-blocks 10 --dry-run"}) {
      SCOPED_TRACE(absl::StrCat(operation, " ", c.name));
      Outcome o = Cli(absl::StrCat(operation, " --model-id ./", c.name));
      EXPECT_EQ(o.code, 1) << o;
      EXPECT_THAT(o.err, HasSubstr(c.code)) << o;
      EXPECT_THAT(o.err, HasSubstr("symbolic link")) << o;
      EXPECT_THAT(o.err, HasSubstr(c.what)) << o;
    }
  }
  // An output is never a link, nor written through one.
  for (const std::string output :
       {"./current --replace", "./current", "./crew/new"}) {
    Outcome o = Cli(
        "--set-kvcache-num-blocks 10 --model-id ./v1 --output-dir " + output);
    EXPECT_EQ(o.code, 1) << output << "\n" << o;
    EXPECT_THAT(o.err, HasSubstr("PERMISSION_DENIED")) << o;
    EXPECT_THAT(o.err, HasSubstr("symbolic link")) << o;
  }
  EXPECT_EQ(HashTree(store_), store_before);
  EXPECT_EQ(HashTree(root_.Join("outside")), outside_before);
  EXPECT_EQ(LinkAt("current"), "v2");

  // --list passes them over, saying why; the one it follows is listed.
  Outcome list = Cli("--list");
  ASSERT_EQ(list.code, 0) << list;
  EXPECT_THAT(list.out, ContainsRegex("\ncurrent -> v2 +16 "));
  EXPECT_THAT(list.out,
              HasSubstr("escape: a symbolic link to '" + root_.Join("outside") +
                        "', an absolute path"));
  EXPECT_THAT(list.out, HasSubstr("ghost: a symbolic link to 'v9', which "
                                  "does not exist"));
  EXPECT_THAT(list.out, HasSubstr("crew: a symbolic link to 'team', a "
                                  "directory that is not an artifact"));
}

}  // namespace
}  // namespace rbln::e2e
