// Recovery never removes by name alone (core/store/recovery.h): what no
// intent record names is left in place and reported; records that are cut
// short, corrupt or name what a commit never makes. The removal of recorded
// debris is in store_test.cc ("Recovery").
#include "core/store/recovery.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/os/env.h"
#include "core/store/intent_record.h"
#include "core/store/locks.h"
#include "core/store/staging_name.h"
#include "core/store/store.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ringbuffer_sink.h"
#include "spdlog/spdlog.h"
#include "tools/synth.h"

namespace rbln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// The lines logged while it lives.
class LogCapture {
 public:
  LogCapture()
      : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1024)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  // The lines that hold `text`.
  std::vector<std::string> LinesWith(absl::string_view text) const {
    std::vector<std::string> found;
    for (const std::string& line : sink_->last_formatted()) {
      if (absl::StrContains(line, text)) found.push_back(line);
    }
    return found;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

class RecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char* resolved = realpath(tmp_.path().c_str(), nullptr);
    ASSERT_NE(resolved, nullptr);
    root_ = resolved;
    free(resolved);
    SynthSpec spec;
    spec.decoder_batch_sizes = {1};
    for (const char* name : {"team/x", "c"}) {
      std::filesystem::create_directories(JoinPath(root_, name));
      std::filesystem::remove(JoinPath(root_, name));
      ASSERT_TRUE(
          WriteSyntheticArtifact(Env::Default(), spec, JoinPath(root_, name))
              .ok());
    }
    ASSERT_NO_FATAL_FAILURE(Reopen());
  }

  void Reopen() {
    store_.reset();
    absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
        ArtifactStore::Open(root_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  std::string Abs(absl::string_view rel) const { return JoinPath(root_, rel); }
  std::string RecordPath(absl::string_view name) const {
    return JoinPath(JoinPath(Abs(kStateDirName), kIntentDirName), name);
  }
  bool Exists(absl::string_view rel) const { return ExistsAt(Abs(rel)); }
  static bool ExistsAt(const std::string& path) {
    return Env::Default()->Stat(path).ok();
  }

  testing::TempDir tmp_;
  std::string root_;
  std::unique_ptr<ArtifactStore> store_;
};

TEST_F(RecoveryTest, ADirectoryRenamedToAStagingNameSurvivesAndIsReported) {
  // Someone renames an artifact, and another, to names a commit would give.
  const std::string staging = "team/.x.staging-0123456789abcdef";
  const std::string retired = ".c.retired-fedcba9876543210";
  store_.reset();
  std::filesystem::rename(Abs("team/x"), Abs(staging));
  std::filesystem::rename(Abs("c"), Abs(retired));
  const auto before = testing::HashTree(Abs(staging));
  for (int start = 0; start < 2; ++start) {
    SCOPED_TRACE(absl::StrCat("start ", start));
    LogCapture log;
    ASSERT_NO_FATAL_FAILURE(Reopen());
    EXPECT_THAT(store_->recovered(), IsEmpty());
    EXPECT_THAT(store_->left_in_place(), ElementsAre(retired, staging));
    EXPECT_EQ(testing::HashTree(Abs(staging)), before);
    EXPECT_TRUE(Exists(retired));
    // Once each, at every start, with the command that removes it.
    const std::vector<std::string> lines = log.LinesWith("left in place: ");
    ASSERT_EQ(lines.size(), 2u) << ::testing::PrintToString(lines);
    EXPECT_THAT(lines[0], HasSubstr(absl::StrCat(
                              "left in place: \"", Abs(retired),
                              "\" looks like a retired directory but this "
                              "daemon holds no record of making it; remove "
                              "it with: rm -rf -- '",
                              Abs(retired), "'")));
    EXPECT_THAT(lines[1],
                HasSubstr(absl::StrCat("\"", Abs(staging),
                                       "\" looks like a staging directory")));
    EXPECT_THAT(lines[1],
                HasSubstr(absl::StrCat("rm -rf -- '", Abs(staging), "'")));
  }
}

// A name chosen to break out of the suggested command's quotes: the
// command quotes it so that pasting it removes that directory, and runs
// nothing else.
TEST_F(RecoveryTest, TheRemoveCommandQuotesAHostileName) {
  const std::string hostile = ".x'; touch PWNED; #\\.staging-0123456789abcdef";
  store_.reset();
  std::filesystem::create_directory(Abs(hostile));
  LogCapture log;
  ASSERT_NO_FATAL_FAILURE(Reopen());
  const std::vector<std::string> lines = log.LinesWith("left in place: ");
  ASSERT_EQ(lines.size(), 1u) << ::testing::PrintToString(lines);
  const size_t at = lines[0].find("rm -rf -- ");
  ASSERT_NE(at, std::string::npos) << lines[0];
  std::string command = lines[0].substr(at);
  while (!command.empty() && (command.back() == '\n')) command.pop_back();
  const std::string script = tmp_.Join("paste.sh");
  testing::WriteFileOrDie(script, command + "\n");
  const std::string shell =
      absl::StrCat("cd '", root_, "' && /bin/bash '", script, "'");
  ASSERT_EQ(std::system(shell.c_str()), 0) << command;
  EXPECT_FALSE(Exists(hostile)) << command;
  EXPECT_FALSE(Exists("PWNED")) << command;
}

TEST_F(RecoveryTest, ARecordNamesOnlyADirectoryAndOnlyInTheStore) {
  store_.reset();
  // A record cut short by a crash before its fsync: dropped, it named
  // nothing that was made.
  testing::WriteFileOrDie(RecordPath("0000000000000001.intent"),
                          "rbln-artifactd intent 1\nparent \nstag");
  testing::WriteFileOrDie(RecordPath("0000000000000002.intent"), "");
  // Complete, but naming what no commit makes: reported and kept, and so
  // is the directory.
  const std::string outside =
      "rbln-artifactd intent 1\nparent ..\nstaging "
      ".c.staging-0123456789abcdef\nretired "
      ".c.retired-0123456789abcdef\nend\n";
  testing::WriteFileOrDie(RecordPath("0000000000000003.intent"), outside);
  std::filesystem::create_directory(Abs(".c.staging-0123456789abcdef"));
  // A record naming a regular file: the file stays (a commit makes only
  // directories), the record goes.
  absl::StatusOr<StagingIntent> file_named =
      RecordStagingIntent(Env::Default(), root_, root_, "c");
  ASSERT_TRUE(file_named.ok()) << file_named.status();
  testing::WriteFileOrDie(file_named->staging, "not a directory");
  // A record too long to be one of ours.
  testing::WriteFileOrDie(RecordPath("0000000000000004.intent"),
                          std::string(kMaxIntentRecordBytes + 1, 'x'));

  LogCapture log;
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_THAT(store_->recovered(), IsEmpty());
  EXPECT_FALSE(ExistsAt(RecordPath("0000000000000001.intent")));
  EXPECT_FALSE(ExistsAt(RecordPath("0000000000000002.intent")));
  EXPECT_TRUE(ExistsAt(RecordPath("0000000000000003.intent")));
  EXPECT_TRUE(ExistsAt(RecordPath("0000000000000004.intent")));
  EXPECT_FALSE(ExistsAt(file_named->record));
  EXPECT_TRUE(ExistsAt(file_named->staging));
  EXPECT_TRUE(Exists(".c.staging-0123456789abcdef"));
  EXPECT_THAT(store_->left_in_place(),
              ElementsAre(".c.staging-0123456789abcdef"));
  EXPECT_EQ(log.LinesWith("is not readable").size(), 2u);
}

TEST_F(RecoveryTest, ParsesOnlyWhatItWrites) {
  EXPECT_TRUE(ParseIntentRecord("").incomplete);
  EXPECT_TRUE(
      ParseIntentRecord("rbln-artifactd intent 1\nparent a\n").incomplete);
  const ParsedIntent ok = ParseIntentRecord(
      "rbln-artifactd intent 1\nparent team/sub\\n\nstaging "
      ".x.staging-0123456789abcdef\nretired .x.retired-00000000000000ff\n"
      "end\n");
  ASSERT_TRUE(ok.names.has_value()) << ok.corrupt;
  EXPECT_EQ(ok.names->parent, "team/sub\n");
  EXPECT_EQ(ok.names->staging, ".x.staging-0123456789abcdef");
  EXPECT_EQ(ok.names->retired, ".x.retired-00000000000000ff");
  for (const char* bad : {
           // Another artifact's retired name.
           "rbln-artifactd intent 1\nparent \nstaging "
           ".x.staging-0123456789abcdef\nretired .y.retired-0123456789abcdef"
           "\nend\n",
           // The state directory, an absolute path, a `..`.
           "rbln-artifactd intent 1\nparent .rbln-artifactd/locks\nstaging "
           ".x.staging-0123456789abcdef\nretired .x.retired-0123456789abcdef"
           "\nend\n",
           "rbln-artifactd intent 1\nparent /etc\nstaging "
           ".x.staging-0123456789abcdef\nretired .x.retired-0123456789abcdef"
           "\nend\n",
           "rbln-artifactd intent 1\nparent a/../..\nstaging "
           ".x.staging-0123456789abcdef\nretired .x.retired-0123456789abcdef"
           "\nend\n",
           // Not a staging name.
           "rbln-artifactd intent 1\nparent \nstaging x\nretired "
           ".x.retired-0123456789abcdef\nend\n",
           "rbln-artifactd intent 2\nend\n",
       }) {
    const ParsedIntent parsed = ParseIntentRecord(bad);
    EXPECT_FALSE(parsed.names.has_value()) << bad;
    EXPECT_FALSE(parsed.incomplete) << bad;
    EXPECT_FALSE(parsed.corrupt.empty()) << bad;
  }
}

}  // namespace
}  // namespace rbln
