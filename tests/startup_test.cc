// A newcomer's first hour (issue 11), end to end: the real rbln-artifactd,
// rbln-artifact and rbln-artifact-synth given the mistakes people make at
// start-up, checked for the documented exit code and a message that says
// what to do. Every process is bounded (daemon_testing.h): a daemon that
// starts when it should have refused is killed and fails the test.
//
// Exit codes checked here: rbln-artifactd 64 usage, 69 a resource in use,
// 78 configuration (sysexits.h); rbln-artifact and rbln-artifact-synth 2
// usage.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon_testing.h"

namespace rbln::e2e {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kExUsage = 64;
constexpr int kExUnavailable = 69;
constexpr int kExConfig = 78;
constexpr int kClientUsage = 2;

class StartupTest : public DaemonTest {
 protected:
  // rbln-artifactd --store STORE --log-level warn ARGS.
  Outcome RunDaemon(const std::string& args) {
    return Run("rbln-artifactd", absl::StrCat("--store ", ShellQuote(store_),
                                              " --log-level warn ", args));
  }

  // rbln-artifact against a socket where no daemon listens: everything
  // checked here is refused before any connection.
  Outcome Client(const std::string& args) {
    return Run("rbln-artifact",
               absl::StrCat("--server ", ShellQuote(UnixAddress("none.sock")),
                            " ", args));
  }

  // Each of `values` for `flag` is a usage error naming the flag's `range`
  // ("from 0 to 86400").
  void ExpectOutOfRange(const std::string& flag, const std::string& range,
                        std::initializer_list<const char*> values) {
    for (const char* value : values) {
      Outcome o =
          RunDaemon(absl::StrCat("--listen ", ShellQuote(UnixAddress("d.sock")),
                                 " ", flag, " ", value));
      EXPECT_EQ(o.code, kExUsage) << o;
      EXPECT_THAT(o.err, HasSubstr(absl::StrCat("rbln-artifactd: ", flag,
                                                " needs a number ", range,
                                                ", got '", value, "'")));
    }
  }

  std::string UnixAddress(const std::string& name) const {
    return absl::StrCat("unix:", root_.Join(name));
  }

  std::string WriteConfig(const std::string& text) {
    const std::string path = root_.Join("rbln-artifactd.toml");
    std::ofstream(path) << text;
    return path;
  }
};

// --- rbln-artifactd: usage (64) ---

TEST_F(StartupTest, BarePortIsRefusedBeforeGrpcSeesIt) {
  Outcome o = RunDaemon("--listen 50051");
  EXPECT_EQ(o.code, kExUsage) << o;
  EXPECT_THAT(o.err,
              HasSubstr("rbln-artifactd: --listen: expected unix:PATH, "
                        "HOST:PORT or an absolute path (a Unix socket), got "
                        "'50051' (did you mean 0.0.0.0:50051 or "
                        "localhost:50051?)"));
  // No gRPC log line, no guess about directories.
  EXPECT_THAT(o.err, AllOf(Not(HasSubstr("directory")), Not(HasSubstr(".cc:"))))
      << o;
}

TEST_F(StartupTest, UnknownDaemonFlagGetsASuggestion) {
  Outcome o = Run("rbln-artifactd",
                  absl::StrCat("--stor ", ShellQuote(store_), " --listen ",
                               ShellQuote(UnixAddress("d.sock"))));
  EXPECT_EQ(o.code, kExUsage) << o;
  EXPECT_THAT(o.err, HasSubstr("rbln-artifactd: unknown flag --stor (did you "
                               "mean --store?)"));
  EXPECT_THAT(o.err, Not(HasSubstr("The following")));
}

TEST_F(StartupTest, DuplicateDaemonFlag) {
  Outcome o =
      RunDaemon(absl::StrCat("--store ", ShellQuote(store_), " --listen ",
                             ShellQuote(UnixAddress("d.sock"))));
  EXPECT_EQ(o.code, kExUsage) << o;
  EXPECT_THAT(o.err, HasSubstr("rbln-artifactd: --store given twice; give it "
                               "once"));
}

TEST_F(StartupTest, DeviceDramWithoutAUnitIsRefused) {
  Outcome o = RunDaemon(absl::StrCat(
      "--listen ", ShellQuote(UnixAddress("d.sock")), " --device-dram 16"));
  EXPECT_EQ(o.code, kExUsage) << o;
  EXPECT_THAT(o.err, HasSubstr("rbln-artifactd: --device-dram: device DRAM "
                               "\"16\" is a bare number below 1 GiB (did you "
                               "mean 16GiB? write 16B for bytes)"));
}

TEST_F(StartupTest, BadOldVersionGraceIsRefused) {
  ExpectOutOfRange("--old-version-grace-seconds", "from 0 to 86400",
                   {"-1", "soon", "30s", "1e9"});
}

// "nan" parses as a number and passes a range check; a time must be finite.
TEST_F(StartupTest, NanTimesAreRefused) {
  for (const char* flag :
       {"--probe-timeout-seconds", "--shutdown-grace-seconds",
        "--old-version-grace-seconds", "--log-linger-ms"}) {
    Outcome o = RunDaemon(absl::StrCat(
        "--listen ", ShellQuote(UnixAddress("d.sock")), " ", flag, " nan"));
    EXPECT_EQ(o.code, kExUsage) << o;
    EXPECT_THAT(o.err, HasSubstr(absl::StrCat("rbln-artifactd: ", flag,
                                              ": needs a finite number, got "
                                              "NaN")));
  }
  ExpectOutOfRange("--log-linger-ms", "from 0 to 60000",
                   {"-1", "60001", "soon"});
}

TEST_F(StartupTest, HelpDocumentsTheExitCodes) {
  Outcome o = Run("rbln-artifactd", "--help");
  EXPECT_EQ(o.code, 0) << o;
  EXPECT_THAT(o.out, HasSubstr("Exit codes:"));
  for (const char* code : {"  64  ", "  69  ", "  78  "}) {
    EXPECT_THAT(o.out, HasSubstr(code));
  }
}

// --- rbln-artifactd: configuration (78) ---

TEST_F(StartupTest, UnknownConfigEntryNamesTheLine) {
  const std::string config = WriteConfig(absl::StrCat(
      "store = \"", store_, "\"\nlisen = \"", UnixAddress("d.sock"), "\"\n"));
  Outcome o = Run("rbln-artifactd", "--config " + ShellQuote(config));
  EXPECT_EQ(o.code, kExConfig) << o;
  EXPECT_THAT(o.err, HasSubstr(absl::StrCat(
                         "rbln-artifactd: cannot read --config ", config,
                         ": line 2: unknown entry 'lisen' (did you mean "
                         "listen?)")));
  EXPECT_THAT(o.err, Not(HasSubstr("INI")));
}

TEST_F(StartupTest, BadValueInTheConfigFileIsAConfigError) {
  const std::string config = WriteConfig(
      absl::StrCat("store = \"", store_, "\"\nlisten = \"",
                   UnixAddress("d.sock"), "\"\ndevice-dram = \"16\"\n"));
  Outcome o = Run("rbln-artifactd", "--config " + ShellQuote(config));
  EXPECT_EQ(o.code, kExConfig) << o;
  EXPECT_THAT(o.err, HasSubstr(absl::StrCat("cannot read --config ", config,
                                            ": line 3: device-dram: ")));
  EXPECT_THAT(o.err, HasSubstr("did you mean 16GiB?"));

  const std::string numeric = WriteConfig(absl::StrCat(
      "store = \"", store_, "\"\nprobe-timeout-seconds = \"soon\"\n"));
  o = Run("rbln-artifactd", "--config " + ShellQuote(numeric));
  EXPECT_EQ(o.code, kExConfig) << o;
  EXPECT_THAT(o.err, HasSubstr(absl::StrCat("cannot read --config ", numeric,
                                            ": line 2: ")));

  const std::string grace = WriteConfig(absl::StrCat(
      "store = \"", store_, "\"\nlisten = \"", UnixAddress("d.sock"),
      "\"\nold-version-grace-seconds = -1\n"));
  o = Run("rbln-artifactd", "--config " + ShellQuote(grace));
  EXPECT_EQ(o.code, kExConfig) << o;
  EXPECT_THAT(o.err, HasSubstr(absl::StrCat(
                         "cannot read --config ", grace,
                         ": line 3: --old-version-grace-seconds needs a number "
                         "from 0 to 86400, got '-1'")));
}

TEST_F(StartupTest, ACodecThatCannotStartIsAConfigError) {
  const std::string codec =
      absl::StrCat("/usr/bin/python3 ",
                   ShellQuote(testing::CopyForOtherUsers(
                       testing::SourcePath("tests/codecs/test_codec.py"))));
  Outcome o = RunDaemon(
      absl::StrCat("--codec-timeout-seconds 1 --codec-command ",
                   ShellQuote(absl::StrCat(codec, " --mode no-hello"))));
  EXPECT_EQ(o.code, kExConfig) << o;
  EXPECT_THAT(o.err, HasSubstr("did not answer hello within 1 s "
                               "(--codec-timeout-seconds)"));

  o = RunDaemon(absl::StrCat("--codec-user no-such-user-x --codec-command ",
                             ShellQuote(codec)));
  EXPECT_EQ(o.code, kExConfig) << o;
  EXPECT_THAT(o.err, HasSubstr("--codec-user 'no-such-user-x': no such user"));

  o = RunDaemon(absl::StrCat("--codec-command ", ShellQuote("python3 'x")));
  EXPECT_EQ(o.code, kExUsage) << o;
  EXPECT_THAT(o.err, HasSubstr("--codec-command: cannot split"));

  o = RunDaemon("--codec-workers 0");
  EXPECT_EQ(o.code, kExUsage) << o;
  EXPECT_THAT(o.err, HasSubstr("--codec-workers"));
}

// Issue 44, item 1: a containment mode named that this host does not allow
// stops the start; auto takes the next that works.
TEST_F(StartupTest, AContainmentModeTheHostDoesNotAllowIsAConfigError) {
  Outcome o = RunDaemon("--codec-containment jail");
  EXPECT_EQ(o.code, kExUsage) << o;
  EXPECT_THAT(o.err, HasSubstr("--codec-containment"));
  if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0) {
    GTEST_SKIP() << "needs root and setpriv(1) to start a daemon without "
                    "CAP_SYS_ADMIN";
  }
  const std::string codec =
      absl::StrCat("/usr/bin/python3 ",
                   ShellQuote(testing::CopyForOtherUsers(
                       testing::SourcePath("tests/codecs/test_codec.py"))));
  const std::string without_sys_admin = absl::StrCat(
      "cd ", ShellQuote(root_.path()),
      " && timeout 60 setpriv --bounding-set=-sys_admin ",
      ShellQuote(testing::BinaryPath("rbln-artifactd")), " --store ",
      ShellQuote(store_), " --listen ", ShellQuote(UnixAddress("c.sock")),
      " --rbln-smi none --codec-command ", ShellQuote(codec));
  o = RunShell(absl::StrCat(without_sys_admin, " --codec-containment pidns"),
               root_.Join("pidns.err"));
  EXPECT_EQ(o.code, kExConfig) << o;
  EXPECT_THAT(o.err, HasSubstr("--codec-containment pidns: a PID namespace "
                               "cannot be made here"));
  EXPECT_THAT(o.err, HasSubstr("it needs CAP_SYS_ADMIN"));
}

TEST_F(StartupTest, MissingConfigFile) {
  const std::string config = root_.Join("absent.toml");
  Outcome o = Run("rbln-artifactd", "--config " + ShellQuote(config));
  EXPECT_EQ(o.code, kExConfig) << o;
  EXPECT_THAT(o.err, HasSubstr(absl::StrCat("cannot read --config ", config)));
}

TEST_F(StartupTest, MissingSocketDirectoryIsReportedAsSuch) {
  const std::string address = UnixAddress("no/such/dir/d.sock");
  Outcome o = RunDaemon("--listen " + ShellQuote(address));
  EXPECT_EQ(o.code, kExConfig) << o;
  EXPECT_THAT(o.err, HasSubstr(absl::StrCat(
                         "cannot listen on ", address, ": the directory ",
                         root_.Join("no/such/dir"), " does not exist")));
}

// docs/daemon.md's example config file, with this test's paths, starts a
// daemon on both of its addresses.
TEST_F(StartupTest, TheReadmeExampleConfigWorks) {
  const std::string unix_address = UnixAddress("d.sock");
  const std::string tcp_address = absl::StrCat("127.0.0.1:", PickFreePort());
  const std::string config = WriteConfig(absl::StrCat(
      "# /etc/rbln-artifactd.toml\n"
      "store = \"",
      store_, "\"\nlisten = [\"", unix_address, "\", \"", tcp_address,
      "\"]\n"
      "rbln-smi = \"/usr/bin/rbln-smi\"\n"
      "probe-timeout-seconds = 5\n"
      "# device-dram = \"16GiB\"      # an override: the probe is then not "
      "used\n"));
  StartWithFlags(unix_address, {"--config", config, "--log-level", "warn"});
  EXPECT_TRUE(Accepts(tcp_address)) << daemon_.Logs();
}

// --- rbln-artifactd: a resource in use (69) ---

TEST_F(StartupTest, PortInUseNamesThePort) {
  // Anything listening on the port, without SO_REUSEPORT.
  int port = 0;
  const int fd = BindFreeLoopbackPort(/*listen_too=*/true, &port);
  ASSERT_GE(fd, 0);

  Outcome o = RunDaemon(absl::StrCat("--listen 127.0.0.1:", port));
  close(fd);
  EXPECT_EQ(o.code, kExUnavailable) << o;
  EXPECT_THAT(o.err, HasSubstr(absl::StrCat("rbln-artifactd: port ", port,
                                            " is in use (--listen "
                                            "127.0.0.1:",
                                            port, ")")));
}

TEST_F(StartupTest, SecondDaemonOnTheSamePortIsRefused) {
  address_ = absl::StrCat("127.0.0.1:", PickFreePort());
  Start();
  const std::string other_store = root_.Join("other");
  std::filesystem::create_directory(other_store);
  Outcome o = Run("rbln-artifactd",
                  absl::StrCat("--store ", ShellQuote(other_store),
                               " --log-level warn --listen ", address_));
  EXPECT_EQ(o.code, kExUnavailable) << o;
  EXPECT_THAT(o.err, HasSubstr("is in use"));
}

TEST_F(StartupTest, SecondDaemonOnTheSameStoreIsRefused) {
  address_ = UnixAddress("first.sock");
  Start();
  Outcome o = RunDaemon(
      absl::StrCat("--listen ", ShellQuote(UnixAddress("second.sock"))));
  EXPECT_EQ(o.code, kExUnavailable) << o;
  EXPECT_THAT(o.err, HasSubstr(absl::StrCat("is in use by another process "
                                            "(pid ",
                                            daemon_.pid)));
}

TEST_F(StartupTest, SecondDaemonOnTheSameSocketIsRefused) {
  Start();
  const std::string other_store = root_.Join("other");
  std::filesystem::create_directory(other_store);
  Outcome o =
      Run("rbln-artifactd",
          absl::StrCat("--store ", ShellQuote(other_store),
                       " --log-level warn --listen ", ShellQuote(address_)));
  EXPECT_EQ(o.code, kExUnavailable) << o;
  EXPECT_THAT(o.err, HasSubstr("another server already listens on"));
}

// --- rbln-artifact: usage (2), with no daemon running ---

TEST_F(StartupTest, ClientRefusesAmbiguousAndBadBudgetsWithHints) {
  const std::pair<std::string, std::string> cases[] = {
      {"80", "did you mean 80%? write 80B for bytes"},
      {"1.5", "did you mean 1.5%?"},
      {"0", "is zero: budgets are positive"},
      {"10G", "did you mean 10GB?"},
      {"-1", "is negative: budgets are positive"},
      {"1",
       "`1` is one byte to optimum-rbln-cli; write 1.0 or 100% for all "
       "of the DRAM, or 1B"},
  };
  for (const auto& [budget, hint] : cases) {
    SCOPED_TRACE(budget);
    Outcome o =
        Client(absl::StrCat("--set-memory-budget ", budget, " --model-id ./a"));
    EXPECT_EQ(o.code, kClientUsage) << o;
    EXPECT_THAT(o.err, HasSubstr(absl::StrCat(
                           "rbln-artifact: --set-memory-budget: memory budget "
                           "\"",
                           budget, "\"")));
    EXPECT_THAT(o.err, HasSubstr(hint));
    // Refused before connecting: nothing about reaching a daemon.
    EXPECT_THAT(o.err, Not(HasSubstr("cannot reach"))) << o;
    EXPECT_THAT(o.err, Not(HasSubstr("path"))) << o;
  }
}

TEST_F(StartupTest, ClientTyposDuplicatesAndNonIntegers) {
  Outcome o = Client("--set-kvcache-num-block 64 --model-id ./a");
  EXPECT_EQ(o.code, kClientUsage) << o;
  EXPECT_THAT(o.err, HasSubstr("rbln-artifact: unknown flag "
                               "--set-kvcache-num-block (did you mean "
                               "--set-kvcache-num-blocks?)"));

  o = Client("--get-kvcache-num-blocks --model-id ./a --model-id ./b");
  EXPECT_EQ(o.code, kClientUsage) << o;
  EXPECT_THAT(o.err, HasSubstr("--model-id given twice; give it once"));

  o = Client("--set-kvcache-num-blocks .8 --model-id ./a");
  EXPECT_EQ(o.code, kClientUsage) << o;
  EXPECT_THAT(o.err, HasSubstr("N must be a positive integer, got '.8'"));

  o = Client("--list one two");
  EXPECT_EQ(o.code, kClientUsage) << o;
  EXPECT_THAT(o.err, HasSubstr("unexpected arguments 'one' 'two'"));
}

// --- rbln-artifact-synth ---

TEST_F(StartupTest, SynthCreatesMissingParents) {
  Outcome o = Run("rbln-artifact-synth",
                  "--preset tiny --payload-bytes 64KiB --out ./new/store/tiny");
  EXPECT_EQ(o.code, 0) << o;
  EXPECT_TRUE(
      std::filesystem::exists(root_.Join("new/store/tiny/prefill.rbln")))
      << o;
  // The directory itself must still be new.
  o = Run("rbln-artifact-synth", "--preset tiny --out ./new/store/tiny");
  EXPECT_EQ(o.code, 1) << o;
  EXPECT_THAT(o.err, HasSubstr("rbln-artifact-synth: "));
}

TEST_F(StartupTest, SynthBadFlagNamesTheProgram) {
  Outcome o = Run("rbln-artifact-synth", "--preset tiny --layer 4 --out ./x");
  EXPECT_EQ(o.code, kClientUsage) << o;
  EXPECT_THAT(o.err, HasSubstr("rbln-artifact-synth: unknown flag --layer "
                               "(did you mean --layers?)"));
  EXPECT_FALSE(std::filesystem::exists(root_.Join("x")));
}

}  // namespace
}  // namespace rbln::e2e
