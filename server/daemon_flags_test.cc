#include "server/daemon_flags.h"

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/defaults.h"
#include "common/help_format.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

struct Parsed {
  std::optional<DaemonError> error;
  DaemonConfig config;
  std::string out;
  std::string err;
};

Parsed Parse(const std::vector<std::string>& args) {
  Parsed parsed;
  std::ostringstream out;
  std::ostringstream err;
  parsed.error = ParseDaemonFlags(args, &parsed.config, out, err);
  parsed.out = out.str();
  parsed.err = err.str();
  return parsed;
}

TEST(DaemonFlagsTest, DefaultsAreTheConfigsDefaults) {
  const Parsed parsed = Parse({});
  ASSERT_FALSE(parsed.error.has_value()) << parsed.error->message;
  const DaemonConfig& config = parsed.config;
  const DaemonConfig defaults;
  EXPECT_EQ(config.store_dir, DefaultStoreDir());
  EXPECT_TRUE(config.default_listen);
  ASSERT_EQ(config.listen.size(), 1);
  EXPECT_EQ(config.listen[0], DefaultServerAddress());
  ASSERT_EQ(config.addresses.size(), 1);
  EXPECT_EQ(config.socket_mode, defaults.socket_mode);
  EXPECT_EQ(config.max_concurrent_writes, defaults.max_concurrent_writes);
  EXPECT_EQ(config.shutdown_grace, defaults.shutdown_grace);
  EXPECT_EQ(config.old_version_grace, defaults.old_version_grace);
  EXPECT_EQ(config.probe_timeout, defaults.probe_timeout);
  EXPECT_EQ(config.codec.user, defaults.codec.user);
  EXPECT_EQ(config.codec.timeout, defaults.codec.timeout);
  EXPECT_EQ(config.codec.workers, defaults.codec.workers);
  EXPECT_EQ(config.log_level, defaults.log_level);
  EXPECT_EQ(config.log_linger, defaults.log_linger);
  EXPECT_EQ(config.tls_reload_seconds, defaults.tls_reload_seconds);
  EXPECT_TRUE(config.default_operators);
  EXPECT_TRUE(config.read_leases);
  EXPECT_TRUE(config.dir_watch);
}

TEST(DaemonFlagsTest, ValuesAreParsed) {
  const Parsed parsed = Parse({"--store",
                               "/srv/a",
                               "--listen",
                               "/run/x.sock",
                               "--listen",
                               "127.0.0.1:50051",
                               "--socket-mode",
                               "0600",
                               "--device-dram",
                               "16GiB",
                               "--read-only-root",
                               "hub=/srv/hub",
                               "--shutdown-grace-seconds",
                               "2.5",
                               "--log-level",
                               "warn",
                               "--log-format",
                               "json",
                               "--no-read-leases",
                               "--no-default-operators",
                               "--operators",
                               "uid:7,cn:job"});
  ASSERT_FALSE(parsed.error.has_value()) << parsed.error->message;
  const DaemonConfig& config = parsed.config;
  EXPECT_EQ(config.store_dir, "/srv/a");
  EXPECT_FALSE(config.default_listen);
  EXPECT_EQ(config.listen,
            (std::vector<std::string>{"unix:/run/x.sock", "127.0.0.1:50051"}));
  EXPECT_EQ(config.addresses[1].kind, ServerAddress::Kind::kTcp);
  EXPECT_EQ(config.socket_mode, 0600);
  ASSERT_TRUE(config.dram_override.has_value());
  ASSERT_EQ(config.read_only_roots.size(), 1);
  EXPECT_EQ(config.read_only_roots[0].name, "hub");
  EXPECT_EQ(config.shutdown_grace, absl::Milliseconds(2500));
  EXPECT_EQ(config.log_level, spdlog::level::warn);
  EXPECT_EQ(config.log_format, LogFormat::kJson);
  EXPECT_FALSE(config.read_leases);
  EXPECT_FALSE(config.default_operators);
  EXPECT_EQ(config.operator_list,
            (std::vector<std::string>{"uid:7", "cn:job"}));
}

TEST(DaemonFlagsTest, HelpAndVersionEndTheProcessCleanly) {
  const Parsed help = Parse({"--help"});
  ASSERT_TRUE(help.error.has_value());
  EXPECT_EQ(help.error->exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("--shutdown-grace-seconds"));
  EXPECT_THAT(help.out, HasSubstr("78  configuration error"));
  const Parsed version = Parse({"--version"});
  ASSERT_TRUE(version.error.has_value());
  EXPECT_EQ(version.error->exit_code, 0);
  EXPECT_THAT(version.out, StartsWith("rbln-artifactd"));
}

// The option entries of `help` before its footer: each option line with
// the description lines that follow it, keyed by the option's name as listed
// ("--store", "-h,--help").
std::vector<std::pair<std::string, std::string>> HelpEntries(
    absl::string_view help) {
  help = help.substr(0, help.find("\nExamples:\n"));
  std::vector<std::pair<std::string, std::string>> entries;
  for (absl::string_view line : absl::StrSplit(help, '\n')) {
    if (absl::StartsWith(line, "  -")) {
      absl::string_view name = line.substr(2);
      name = name.substr(0, name.find(' '));
      entries.emplace_back(std::string(name), std::string(line));
    } else if (!entries.empty() && absl::StartsWith(line, "      ")) {
      absl::StrAppend(&entries.back().second, " ",
                      absl::StripLeadingAsciiWhitespace(line));
    }
  }
  return entries;
}

TEST(DaemonFlagsTest, HelpFitsEightyColumnsAndGivesEachDefaultInWords) {
  const Parsed help = Parse({"--help"});
  for (absl::string_view line : absl::StrSplit(help.out, '\n')) {
    EXPECT_LE(line.size(), kHelpWidth) << line;
  }
  const auto entries = HelpEntries(help.out);
  EXPECT_GE(entries.size(), 30);
  for (const auto& [name, text] : entries) {
    if (name == "-h,--help" || name == "--version") continue;
    EXPECT_THAT(text, HasSubstr("(default: ")) << name;
  }
  EXPECT_THAT(help.out, HasSubstr("(default: 120 seconds)"));
  EXPECT_THAT(help.out, HasSubstr("1 to 86400"));
  // No CLI11 type, check or default annotation, and no repository path.
  for (const char* noise : {" INT", " UINT", " FLOAT", " TEXT", "INT:", " in [",
                            "=120", "docs/", "deploy/", "tests/"}) {
    EXPECT_THAT(help.out, Not(HasSubstr(noise)));
  }
}

TEST(DaemonFlagsTest, HelpGroupsTheFlagsByPurpose) {
  const Parsed help = Parse({"--help"});
  size_t at = 0;
  for (const char* title :
       {"\nStore and roots:\n  --store DIR ",
        "\nListening and sockets:\n  --listen ADDR ",
        "\nDevices and DRAM:\n  --device-dram BYTES[,CHIPLETS]\n",
        "\nCodec:\n  --codec-command \"CMD ARGS\" ",
        "\nWrites and shutdown:\n  --max-concurrent-writes N ",
        "\nTLS and callers:\n  --tls-cert FILE ",
        "\nLogging and metrics:\n  --log-level LEVEL ",
        "\nCaches:\n  --no-read-leases ",
        "\nConfig file and help:\n  --config FILE ", "\nExamples:\n",
        "\nAvailable DRAM", "\nEnvironment:\n",
        "\nCallers:", "\nExit codes:\n"}) {
    const size_t found = help.out.find(title, at);
    EXPECT_NE(found, std::string::npos) << title << " in order";
    if (found != std::string::npos) at = found;
  }
}

TEST(DaemonFlagsTest, ParserErrorsArePrintedByTheParser) {
  const Parsed parsed = Parse({"--shutdown-grace-second", "3"});
  ASSERT_TRUE(parsed.error.has_value());
  EXPECT_EQ(parsed.error->exit_code, kExitUsage);
  EXPECT_EQ(parsed.error->message, "");
  EXPECT_THAT(parsed.err, HasSubstr("--shutdown-grace-seconds"));
}

TEST(DaemonFlagsTest, BadValuesOnTheCommandLineAreUsageErrors) {
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--log-level", "loud"}, "--log-level: unknown level 'loud'"},
      {{"--shutdown-grace-seconds", "nan"},
       "--shutdown-grace-seconds: needs a finite number, got NaN"},
      {{"--tls-key", "k.pem"}, "--tls-key: --tls-cert and --tls-key go"},
      {{"--tls-client-ca", "ca.pem"}, "--tls-client-ca: needs --tls-cert"},
      {{"--listen", "0.0.0.0:50051"},
       "--listen: 0.0.0.0:50051 is reachable from other hosts"},
      {{"--health-listen", "/run/h.sock"}, "--health-listen: needs HOST:PORT"},
      {{"--device-dram", "lots"}, "--device-dram: "},
      {{"--read-only-root", "="}, "--read-only-root: "},
      {{"--codec-command", "\"unclosed"}, "--codec-command: "},
  };
  for (const auto& c : cases) {
    const Parsed parsed = Parse(c.args);
    ASSERT_TRUE(parsed.error.has_value()) << c.args[0];
    EXPECT_EQ(parsed.error->exit_code, kExitUsage) << c.args[0];
    EXPECT_THAT(parsed.error->message, StartsWith(c.message));
  }
}

TEST(DaemonFlagsTest, BadValuesInTheConfigFileAreConfigErrors) {
  rbln::testing::TempDir tmp;
  const std::string file = tmp.Join("d.toml");
  rbln::testing::WriteFileOrDie(file, "log-level = \"loud\"\n");
  const Parsed parsed = Parse({"--config", file});
  ASSERT_TRUE(parsed.error.has_value());
  EXPECT_EQ(parsed.error->exit_code, kExitConfig);
  EXPECT_THAT(parsed.error->message,
              StartsWith(absl::StrCat("cannot read --config ", file)));
  EXPECT_THAT(parsed.error->message, HasSubstr("unknown level 'loud'"));
  // The same value on the command line is the command line's error.
  const Parsed both = Parse({"--config", file, "--log-level", "loud"});
  ASSERT_TRUE(both.error.has_value());
  EXPECT_EQ(both.error->exit_code, kExitUsage);
}

TEST(DaemonFlagsTest, AnUnknownSocketGroupIsAConfigError) {
  const Parsed parsed =
      Parse({"--socket-group", "no-such-group-for-rbln-artifactd"});
  ASSERT_TRUE(parsed.error.has_value());
  EXPECT_EQ(parsed.error->exit_code, kExitConfig);
  EXPECT_THAT(parsed.error->message, StartsWith("--socket-group: "));
}

TEST(DaemonFlagsTest, FlagSourcesSayWhereAValueCameFrom) {
  const FlagSources sources{.args = {"--listen", "a:1"},
                            .config_file = "/etc/d.toml"};
  EXPECT_EQ(sources.BadValueCode("--listen"), kExitUsage);
  EXPECT_EQ(sources.BadValueCode("--health-listen"), kExitConfig);
  const DaemonError error = sources.BadValue("--health-listen", "no");
  EXPECT_EQ(error.exit_code, kExitConfig);
  EXPECT_THAT(error.message, StartsWith("cannot read --config /etc/d.toml"));
  EXPECT_EQ(FlagSources{}.BadValue("--listen", "no").message, "--listen: no");
}

}  // namespace
}  // namespace rbln
