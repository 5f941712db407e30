// What the systemd deployment relies on, with the real daemon: the example
// config file (deploy/rbln-artifactd.conf) starts it, the unit's
// capabilities keep others' owners and run the codec as its own user,
// readiness and stopping reach systemd's notification socket (Type=notify),
// and --log-format json writes one JSON object a line. And, from the files
// alone: every deployment (unit, sysusers file, image, DaemonSet) has the
// codec's user and the same capabilities.
#include <errno.h>
#include <grp.h>
#include <grpcpp/grpcpp.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "rbln/artifact/v1/artifact_service.grpc.pb.h"
#include "tests/daemon_testing.h"

namespace rbln::e2e {
namespace {

namespace v1 = ::rbln::artifact::v1;

using ::rbln::testing::ReadFileOrDie;
using ::rbln::testing::SourcePath;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kExUsage = 64;

// Sets an environment variable that spawned daemons inherit, for one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

// `text` with `from` replaced by `to`; fails the test when `from` is not in
// it (the example changed, and this test must follow).
std::string ReplaceOrFail(const std::string& text, const std::string& from,
                          const std::string& to) {
  EXPECT_THAT(text, HasSubstr(from));
  return absl::StrReplaceAll(text, {{from, to}});
}

class DeployTest : public DaemonTest {
 protected:
  // No store beforehand: the daemon makes it, as on a first start under
  // systemd.
  void SetUp() override {}

  Outcome Client(const std::string& args) {
    return CliAt(daemon_.address, args, root_.path());
  }

  // Starts the daemon as nobody with `caps` (setpriv's "+chown,+fowner") as
  // its ambient and bounding sets, as the unit does, and waits until it
  // accepts. Needs root and setpriv.
  void StartAsNobody(const std::string& caps,
                     const std::vector<std::string>& flags) {
    daemon_.address = address_;
    daemon_.stdout_path = root_.Join("daemon.out");
    daemon_.stderr_path = root_.Join("daemon.err");
    std::vector<std::string> argv = {
        "/usr/bin/setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=" + caps,
        "--ambient-caps=" + caps,
        "--bounding-set=" + caps,
        rbln::testing::CopyForOtherUsers(
            rbln::testing::BinaryPath("rbln-artifactd")),
        "--store",
        store_,
        "--listen",
        address_,
        "--rbln-smi",
        "none"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    daemon_.pid =
        Spawn(argv, root_.path(), daemon_.stdout_path, daemon_.stderr_path);
    ASSERT_GT(daemon_.pid, 0);
    const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
    while (!Accepts(address_)) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << daemon_.Logs();
      ASSERT_EQ(kill(daemon_.pid, 0), 0) << daemon_.Logs();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
};

TEST_F(DeployTest, ExampleConfigStartsTheDaemon) {
  group* own = getgrgid(getegid());
  ASSERT_NE(own, nullptr);
  const std::string socket = root_.Join("rbln-artifactd.sock");
  std::string config = ReadFileOrDie(SourcePath("deploy/rbln-artifactd.conf"));
  config = ReplaceOrFail(
      config, "listen = [\"unix:/run/rbln-artifactd/rbln-artifactd.sock\"]",
      absl::StrCat("listen = [\"unix:", socket, "\"]"));
  config = ReplaceOrFail(config, "socket-group = \"rbln-artifactd\"",
                         absl::StrCat("socket-group = \"", own->gr_name, "\""));
  const std::string path = root_.Join("rbln-artifactd.conf");
  std::ofstream(path) << config;
  // The store comes from the unit's Environment=, as under systemd.
  ScopedEnv store("RBLN_ARTIFACTD_STORE", store_);
  StartWithFlags(absl::StrCat("unix:", socket), {"--config", path});
  struct stat st;
  ASSERT_EQ(stat(socket.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(st.st_gid, own->gr_gid);
  Synthesize("tiny", absl::StrCat(store_, "/tiny"));
  Outcome get = Client("--get-kvcache-num-blocks --model-id store/tiny");
  EXPECT_EQ(get.code, 0) << get << daemon_.Logs();
  EXPECT_EQ(get.out, "16\n");
  // log-format = "text": the request log is logfmt.
  Stop();
  EXPECT_THAT(ReadIfExists(daemon_.stderr_path),
              HasSubstr("method=GetKvcacheNumBlocks artifact=\"tiny\""));
}

// The unit's AmbientCapabilities=, lower case without CAP_: "chown".
std::vector<std::string> UnitCapabilities() {
  const std::string unit =
      ReadFileOrDie(SourcePath("deploy/rbln-artifactd.service"));
  std::vector<std::string> caps;
  for (absl::string_view line : absl::StrSplit(unit, '\n')) {
    if (!absl::ConsumePrefix(&line, "AmbientCapabilities=")) continue;
    for (absl::string_view cap : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      EXPECT_TRUE(absl::ConsumePrefix(&cap, "CAP_")) << cap;
      caps.push_back(absl::AsciiStrToLower(cap));
    }
  }
  EXPECT_FALSE(caps.empty()) << "no AmbientCapabilities= in the unit";
  return caps;
}

// `caps` as setpriv takes them, leaving out `without`: "+chown,+fowner".
std::string SetprivCapabilities(const std::vector<std::string>& caps,
                                absl::string_view without = "") {
  std::vector<std::string> kept;
  for (const std::string& cap : caps) {
    if (cap != without) kept.push_back(absl::StrCat("+", cap));
  }
  return absl::StrJoin(kept, ",");
}

// The words of the first match of `pattern`'s group 1 in `file`, split at
// `separators`, lower case, without quotes and a cap_ prefix, sorted.
std::vector<std::string> CapabilityList(const std::string& file,
                                        const std::string& pattern,
                                        const char* separators) {
  const std::string text = ReadFileOrDie(SourcePath(file));
  std::smatch match;
  EXPECT_TRUE(std::regex_search(text, match, std::regex(pattern)))
      << file << " has nothing like " << pattern;
  std::vector<std::string> caps;
  for (absl::string_view word :
       absl::StrSplit(match.size() > 1 ? match[1].str() : "",
                      absl::ByAnyChar(separators), absl::SkipWhitespace())) {
    std::string cap = absl::AsciiStrToLower(absl::StripAsciiWhitespace(word));
    cap = absl::StrReplaceAll(cap, {{"\"", ""}});
    if (absl::StartsWith(cap, "cap_")) cap = cap.substr(4);
    caps.push_back(cap);
  }
  std::sort(caps.begin(), caps.end());
  return caps;
}

// The codec's own user and the capabilities to run the codec as it are in
// every deployment: the sysusers file and the image make the user; the unit,
// the image's file capabilities and the DaemonSet grant the same set (the
// image and the DaemonSet without CAP_LEASE, docs/deploying.md).
TEST(DeployFilesTest, EveryDeploymentHasTheCodecsUserAndCapabilities) {
  EXPECT_THAT(ReadFileOrDie(SourcePath("deploy/rbln-artifactd.sysusers")),
              HasSubstr("\nu rbln-codec - "));
  EXPECT_TRUE(std::regex_search(
      ReadFileOrDie(SourcePath("deploy/Dockerfile")),
      std::regex("useradd --system [^&]*--no-create-home --shell "
                 "/usr/sbin/nologin rbln-codec\n")))
      << "deploy/Dockerfile makes no rbln-codec without home or shell";
  std::vector<std::string> unit = UnitCapabilities();
  for (const char* needed : {"setuid", "setgid", "kill"}) {
    EXPECT_THAT(unit, Contains(needed)) << "the unit lacks CAP_" << needed;
  }
  unit.erase(std::remove(unit.begin(), unit.end(), "lease"), unit.end());
  std::sort(unit.begin(), unit.end());
  EXPECT_EQ(CapabilityList("deploy/Dockerfile", "setcap ([a-z_,]+)\\+ep", ","),
            unit);
  EXPECT_EQ(CapabilityList("deploy/kubernetes/daemonset.yaml",
                           "add: \\[([^\\]]*)\\]", ",\n"),
            unit);
}

// The unit's capabilities, and no others, let a daemon that is not root
// write a new version of another user's artifact and keep its owner, group
// and mode, the set-group-ID bit of a shared directory included.
TEST_F(DeployTest, TheUnitsCapabilitiesKeepOthersOwnersAndModes) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give away files";
  std::string output;
  if (rbln::testing::RunCommand("command -v setpriv", &output) != 0) {
    GTEST_SKIP() << "setpriv (util-linux) is not installed";
  }
  const uid_t owner = 4321;
  const gid_t group = 4322;
  const std::string artifact = absl::StrCat(store_, "/team/tiny");
  Synthesize("tiny", artifact);
  for (const std::string& path :
       {store_, absl::StrCat(store_, "/team"), artifact,
        absl::StrCat(artifact, "/config.json")}) {
    ASSERT_EQ(chown(path.c_str(), owner, group), 0) << path;
  }
  ASSERT_EQ(chmod(artifact.c_str(), 02775), 0);
  ASSERT_NO_FATAL_FAILURE(
      StartAsNobody(SetprivCapabilities(UnitCapabilities()), {}));
  Outcome set =
      Client("--set-kvcache-num-blocks 12 --model-id store/team/tiny");
  ASSERT_EQ(set.code, 0) << set << daemon_.Logs();
  EXPECT_EQ(CountOnDisk(artifact), 12u);
  struct stat st;
  ASSERT_EQ(stat(artifact.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, owner);
  EXPECT_EQ(st.st_gid, group);
  EXPECT_EQ(st.st_mode & 07777, 02775u) << "the set-group-ID bit was lost";
  ASSERT_EQ(stat(absl::StrCat(artifact, "/config.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, owner);
  EXPECT_EQ(st.st_gid, group);
}

// With the unit's capabilities a daemon that is not root runs its codec as
// --codec-user (here daemon, uid 1), with no warning; without CAP_KILL, which
// it would need to stop a worker of another uid, it runs the codec as itself
// and says so.
TEST_F(DeployTest, TheUnitsCapabilitiesRunTheCodecAsItsOwnUser) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to start as another user";
  std::string output;
  if (rbln::testing::RunCommand("command -v setpriv", &output) != 0) {
    GTEST_SKIP() << "setpriv (util-linux) is not installed";
  }
  const struct passwd* codec_user = getpwnam("daemon");
  if (codec_user == nullptr) GTEST_SKIP() << "this host has no user daemon";
  const std::vector<std::string> flags = {
      "--codec-user", "daemon", "--codec-command",
      absl::StrCat("/usr/bin/python3 ",
                   rbln::testing::CopyForOtherUsers(
                       SourcePath("tests/codecs/test_codec.py")))};
  const std::vector<std::string> caps = UnitCapabilities();
  ASSERT_NO_FATAL_FAILURE(StartAsNobody(SetprivCapabilities(caps), flags));
  std::string logs = daemon_.Logs();
  EXPECT_THAT(logs, HasSubstr(absl::StrCat("worker(s) as uid ",
                                           codec_user->pw_uid, ",")));
  EXPECT_THAT(logs, Not(HasSubstr("codec: warning")));
  Stop();

  ASSERT_NO_FATAL_FAILURE(
      StartAsNobody(SetprivCapabilities(caps, "kill"), flags));
  logs = daemon_.Logs();
  EXPECT_THAT(logs, HasSubstr("worker(s) as uid 65534,"));
  EXPECT_THAT(logs, HasSubstr("codec: warning: the daemon cannot change uid "
                              "(it lacks CAP_SETUID, CAP_SETGID or CAP_KILL), "
                              "so the codec runs as the daemon's own uid "
                              "65534, not as 'daemon'"));
}

// A datagram socket standing in for systemd's $NOTIFY_SOCKET.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
        << strerror(errno);
    // Only turns a daemon that never notifies into a failure, not a hang.
    timeval timeout{.tv_sec = 60, .tv_usec = 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  }
  ~NotifySocket() { close(fd_); }

  // The next message, or "" when none came.
  std::string Receive() {
    char buffer[4096];
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    return n > 0 ? std::string(buffer, n) : "";
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

TEST_F(DeployTest, NotifiesSystemdWhenServingAndWhenStopping) {
  NotifySocket notify(root_.Join("notify"));
  {
    ScopedEnv env("NOTIFY_SOCKET", notify.path());
    StartWithFlags(address_, {"--store", store_, "--listen", address_});
  }
  ASSERT_GT(daemon_.pid, 0);
  const std::string ready = notify.Receive();
  EXPECT_THAT(ready, HasSubstr("READY=1")) << daemon_.Logs();
  // Ready means serving: the socket accepts and the start-up log is out.
  EXPECT_TRUE(Accepts(address_));
  EXPECT_THAT(ReadIfExists(daemon_.stderr_path),
              HasSubstr("rbln-artifactd serving store"));
  ASSERT_EQ(kill(daemon_.pid, SIGTERM), 0);
  EXPECT_THAT(notify.Receive(), HasSubstr("STOPPING=1")) << daemon_.Logs();
  std::optional<int> status = WaitBounded(daemon_.pid, kExitTimeout);
  daemon_.pid = -1;
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
}

// Every line of `log` parsed as a JSON object (valid UTF-8 included).
std::vector<rapidjson::Document> ParseJsonLines(const std::string& log) {
  std::vector<rapidjson::Document> lines;
  for (absl::string_view line : absl::StrSplit(log, '\n', absl::SkipEmpty())) {
    rapidjson::Document doc;
    doc.Parse<rapidjson::kParseValidateEncodingFlag>(line.data(), line.size());
    EXPECT_FALSE(doc.HasParseError()) << "not a JSON line: " << line;
    EXPECT_TRUE(!doc.HasParseError() && doc.IsObject()) << line;
    if (!doc.HasParseError() && doc.IsObject()) lines.push_back(std::move(doc));
  }
  return lines;
}

std::string StringField(const rapidjson::Value& object, const char* key) {
  if (!object.HasMember(key) || !object[key].IsString()) {
    ADD_FAILURE() << "no string field " << key;
    return "";
  }
  return object[key].GetString();
}

TEST_F(DeployTest, JsonLogsOneObjectALineWithTheRequestsFields) {
  Synthesize("tiny", absl::StrCat(store_, "/tiny"));
  StartWithFlags(address_, {"--store", store_, "--listen", address_,
                            "--log-format", "json", "--rbln-smi", "none"});
  EXPECT_EQ(Client("--set-kvcache-num-blocks 12 --model-id store/tiny").code,
            0);
  // A name with a line break, a quote and a terminal escape must not break
  // the line or the object.
  Outcome bad = Client(
      "--get-kvcache-num-blocks --model-id \"$(printf 'x\\ny\"z\\033[2J')\"");
  EXPECT_EQ(bad.code, 1) << bad;
  Stop();

  const std::string log = ReadIfExists(daemon_.stderr_path);
  std::vector<rapidjson::Document> lines = ParseJsonLines(log);
  ASSERT_GE(lines.size(), 4u) << log;
  // RFC 3339 with milliseconds and an offset.
  const std::regex rfc3339(
      R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d)");
  int requests = 0;
  for (const rapidjson::Document& line : lines) {
    EXPECT_TRUE(std::regex_match(StringField(line, "time"), rfc3339))
        << StringField(line, "time");
    EXPECT_FALSE(StringField(line, "level").empty());
    EXPECT_FALSE(StringField(line, "message").empty());
    if (!line.HasMember("method")) continue;
    ++requests;
    const std::string method = StringField(line, "method");
    EXPECT_EQ(StringField(line, "message"),
              method + " " + StringField(line, "outcome"));
    ASSERT_TRUE(line.HasMember("duration_ms") && line["duration_ms"].IsInt64());
    EXPECT_EQ(StringField(line, "role"), "operator");
    EXPECT_THAT(StringField(line, "caller"), HasSubstr("user:"));
    if (method == "SetKvcacheNumBlocks") {
      EXPECT_EQ(StringField(line, "outcome"), "OK");
      EXPECT_EQ(StringField(line, "level"), "info");
      EXPECT_EQ(StringField(line, "artifact"), "tiny");
      ASSERT_TRUE(line.HasMember("new") && line["new"].IsInt64());
      EXPECT_EQ(line["new"].GetInt64(), 12);
      ASSERT_TRUE(line.HasMember("written") && line["written"].IsBool());
      EXPECT_TRUE(line["written"].GetBool());
    } else {
      EXPECT_EQ(method, "GetKvcacheNumBlocks");
      EXPECT_EQ(StringField(line, "level"), "warning");
      EXPECT_NE(StringField(line, "outcome"), "OK");
      EXPECT_FALSE(StringField(line, "error").empty());
      // Escaped as the logfmt log escapes: no raw line break in the name.
      EXPECT_EQ(StringField(line, "artifact").find('\n'), std::string::npos);
      EXPECT_THAT(StringField(line, "artifact"), HasSubstr("\\n"));
    }
  }
  EXPECT_EQ(requests, 2) << log;
  // The log is all JSON: the start-up lines too.
  EXPECT_EQ(lines.size(),
            static_cast<size_t>(std::count(log.begin(), log.end(), '\n')));
}

// A request whose string is not UTF-8 makes protobuf itself complain on
// the daemon's side ("String field ... contains invalid UTF-8 data"); that
// line, too, must be a JSON object of the log. The generated stub sends the
// bytes as they are (rbln-artifact refuses such a name before sending).
TEST_F(DeployTest, JsonLogStaysJsonWhenARequestIsNotUtf8) {
  StartWithFlags(address_, {"--store", store_, "--listen", address_,
                            "--log-format", "json", "--rbln-smi", "none"});
  auto stub = v1::ArtifactService::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  v1::GetKvcacheNumBlocksRequest request;
  request.set_artifact("store/\xff\xfe-not-utf8");
  v1::GetKvcacheNumBlocksResponse response;
  grpc::ClientContext context;
  const grpc::Status status =
      stub->GetKvcacheNumBlocks(&context, request, &response);
  EXPECT_FALSE(status.ok());
  Stop();

  const std::string log = ReadIfExists(daemon_.stderr_path);
  std::vector<rapidjson::Document> lines = ParseJsonLines(log);
  EXPECT_EQ(lines.size(),
            static_cast<size_t>(std::count(log.begin(), log.end(), '\n')))
      << log;
  EXPECT_THAT(log, ::testing::Not(HasSubstr("[libprotobuf")));
  // protobuf's own line is there, as an object of its own.
  bool protobuf_line = false;
  for (const rapidjson::Document& line : lines) {
    protobuf_line |=
        absl::StartsWith(StringField(line, "message"), "protobuf ") &&
        absl::StrContains(StringField(line, "message"), "UTF-8");
  }
  EXPECT_TRUE(protobuf_line) << log;
}

TEST_F(DeployTest, UnknownLogFormatIsAUsageError) {
  std::string output;
  const int code = rbln::testing::RunCommand(
      absl::StrCat(ShellQuote(rbln::testing::BinaryPath("rbln-artifactd")),
                   " --store ", ShellQuote(store_), " --log-format yaml"),
      &output);
  EXPECT_EQ(code, kExUsage) << output;
  EXPECT_THAT(output, HasSubstr("--log-format: unknown format yaml; use "
                                "text or json"));
}

}  // namespace
}  // namespace rbln::e2e
