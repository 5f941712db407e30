// Versions end to end (issue 12): every program's --version prints the
// project version CMake was given and the git commit it was built from, and
// the real rbln-artifactd answers GetServerInfo (rbln-artifact
// --server-info) with the same, its store, read-only roots, listeners and
// codec, to any caller that authenticates: an operator on the Unix socket
// and an anonymous reader over TCP alike.
#include <pwd.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/daemon_testing.h"

namespace rbln::e2e {
namespace {

using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr const char* kPrograms[] = {"rbln-artifactd", "rbln-artifact",
                                     "rbln-artifact-synth"};

// The strings of a JSON array.
std::vector<std::string> Strings(const rapidjson::Value& array) {
  std::vector<std::string> strings;
  if (!array.IsArray()) {
    ADD_FAILURE() << "not a JSON array";
    return strings;
  }
  for (const rapidjson::Value& v : array.GetArray()) {
    strings.push_back(v.IsString() ? v.GetString() : "(not a string)");
  }
  return strings;
}

class ServerInfoTest : public DaemonTest {
 protected:
  // The commit part of `program`'s --version line; fails the test unless
  // the line is "PROGRAM VERSION (commit C)".
  std::string CommitOf(const std::string& program) {
    Outcome o = Run(program, "--version");
    EXPECT_EQ(o.code, 0) << o;
    EXPECT_EQ(o.err, "");
    absl::string_view line = o.out;
    const std::string prefix =
        absl::StrCat(program, " ", RBLN_EXPECTED_VERSION, " (commit ");
    if (!absl::ConsumePrefix(&line, prefix) ||
        !absl::ConsumeSuffix(&line, ")\n")) {
      ADD_FAILURE() << program << " --version: expected '" << prefix
                    << "...)', got " << o;
      return "";
    }
    return std::string(line);
  }
};

TEST_F(ServerInfoTest, EveryProgramPrintsTheVersionAndTheCommit) {
  const std::string commit = CommitOf("rbln-artifactd");
  EXPECT_THAT(commit, MatchesRegex("[0-9a-f]{12,40}(-dirty)?|unknown"));
  for (const char* program : kPrograms) {
    EXPECT_EQ(CommitOf(program), commit) << program;
  }
  // The commit is the checkout's HEAD when the sources are one.
  std::string head;
  if (rbln::testing::RunCommand(
          absl::StrCat("git -c safe.directory='*' -C ",
                       ShellQuote(rbln::testing::SourcePath("")),
                       " rev-parse --short=12 HEAD 2>/dev/null"),
          &head) == 0) {
    EXPECT_TRUE(absl::StartsWith(commit, absl::StripAsciiWhitespace(head)))
        << "--version says commit " << commit << ", the checkout is at "
        << head;
  }
}

TEST_F(ServerInfoTest, VersionNeedsNoOtherFlags) {
  // rbln-artifact-synth's --out is required, yet --version alone answers.
  Outcome o = Run("rbln-artifact-synth", "--version --preset nope");
  EXPECT_EQ(o.code, 0) << o;
  EXPECT_THAT(o.out, HasSubstr("rbln-artifact-synth "));
}

TEST_F(ServerInfoTest, DaemonReportsVersionStoreRootsListenersAndCodec) {
  const std::string models = root_.Join("models");
  ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", models + "/tiny"));
  const std::string tcp_address = absl::StrCat("127.0.0.1:", PickFreePort());
  ASSERT_NO_FATAL_FAILURE(StartWithFlags(
      address_, {"--store", store_, "--listen", address_, "--listen",
                 tcp_address, "--read-only-root", "models=" + models,
                 "--rbln-smi", "none", "--log-level", "info"}));
  const std::string commit = CommitOf("rbln-artifactd");

  // An operator on the Unix socket (the daemon's own uid).
  Outcome o = CliAt(address_, "--server-info --json", root_.path());
  ASSERT_EQ(o.code, 0) << o << daemon_.Logs();
  rapidjson::Document reply = ParseJson(o);
  ASSERT_TRUE(reply.IsObject());
  EXPECT_STREQ(reply["version"].GetString(), RBLN_EXPECTED_VERSION);
  EXPECT_EQ(reply["commit"].GetString(), commit);
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  EXPECT_STREQ(reply["hostname"].GetString(), host);
  const std::string canonical_store =
      std::filesystem::canonical(store_).string();
  EXPECT_EQ(reply["store"].GetString(), canonical_store);
  const rapidjson::Value& roots = reply["roots"];
  ASSERT_TRUE(roots.IsArray() && roots.Size() == 2) << o;
  EXPECT_STREQ(roots[0]["name"].GetString(), "");
  EXPECT_FALSE(roots[0]["read_only"].GetBool());
  EXPECT_STREQ(roots[1]["name"].GetString(), "models");
  EXPECT_EQ(roots[1]["dir"].GetString(),
            std::filesystem::canonical(models).string());
  EXPECT_TRUE(roots[1]["read_only"].GetBool());
  EXPECT_THAT(Strings(reply["listeners"]), ElementsAre(address_, tcp_address));
  EXPECT_STREQ(reply["codec"].GetString(), "built-in");
  const passwd* me = getpwuid(geteuid());
  const std::string identity = me != nullptr
                                   ? absl::StrCat("user:", me->pw_name)
                                   : absl::StrCat("uid:", geteuid());
  EXPECT_EQ(reply["caller"].GetString(), identity);
  EXPECT_STREQ(reply["role"].GetString(), "operator");

  // An anonymous reader over TCP may ask too; the human form.
  o = CliAt(tcp_address, "--server-info", root_.path());
  ASSERT_EQ(o.code, 0) << o << daemon_.Logs();
  EXPECT_THAT(
      o.out, HasSubstr(absl::StrCat("rbln-artifactd ", RBLN_EXPECTED_VERSION,
                                    " (commit ", commit, ") on ", host, "\n")));
  EXPECT_THAT(o.out, HasSubstr(absl::StrCat("store: ", canonical_store, "\n")));
  EXPECT_THAT(o.out, HasSubstr("read-only root models: "));
  EXPECT_THAT(o.out, HasSubstr(absl::StrCat("listeners: ", address_, ", ",
                                            tcp_address, "\n")));
  EXPECT_THAT(o.out, HasSubstr("codec: built-in\n"));
  EXPECT_THAT(o.out, HasSubstr("you are: anonymous (reader)\n"));

  // Both calls are in the request log, with their callers.
  Stop();
  EXPECT_THAT(daemon_.Logs(),
              ContainsRegex("method=GetServerInfo .*caller=\"?anonymous\"? "
                            "role=reader outcome=OK"));
}

TEST_F(ServerInfoTest, RelativeListenersAreReportedAbsolute) {
  // The daemon runs in root_: its socket paths are made absolute against
  // it (as getcwd(3) reports it) before anything binds or reports them.
  const std::string dir = std::filesystem::canonical(root_.path()).string();
  const std::string first = absl::StrCat("unix:", dir, "/rel.sock");
  const std::string second = absl::StrCat("unix:", dir, "/sub/x.sock");
  std::filesystem::create_directory(root_.Join("sub"));
  ASSERT_NO_FATAL_FAILURE(StartWithFlags(
      first,
      {"--store", store_, "--listen", "unix:rel.sock", "--listen",
       "unix:./sub/./x.sock", "--rbln-smi", "none", "--log-level", "info"}));
  Outcome o = CliAt(second, "--server-info --json", root_.path());
  ASSERT_EQ(o.code, 0) << o << daemon_.Logs();
  EXPECT_THAT(Strings(ParseJson(o)["listeners"]), ElementsAre(first, second));
  o = CliAt(first, "--server-info", "/");
  ASSERT_EQ(o.code, 0) << o;
  EXPECT_THAT(
      o.out, HasSubstr(absl::StrCat("listeners: ", first, ", ", second, "\n")));
  // The start-up line names them so too; the sockets go at the stop.
  Stop();
  EXPECT_THAT(daemon_.Logs(), HasSubstr(absl::StrCat(first, ", ", second)));
  EXPECT_FALSE(std::filesystem::exists(dir + "/rel.sock"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/sub/x.sock"));
}

}  // namespace
}  // namespace rbln::e2e
