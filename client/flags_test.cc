#include "client/flags.h"

#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/failure.h"
#include "client/paths.h"
#include "client/requests.h"
#include "client/test_util.h"
#include "common/help_format.h"
#include "common/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"

namespace rbln::client {
namespace {

namespace v1 = ::rbln::artifact::v1;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kUnix[] = "unix:/run/test-artifactd.sock";
constexpr char kCwd[] = "/store/team";

struct Parsed {
  ParsedCommandLine result;
  std::string out;
  std::string err;
};

Parsed Parse(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  Parsed p;
  p.result = ParseCommandLine(args, kUnix, out, err);
  p.out = out.str();
  p.err = err.str();
  return p;
}

CliOptions ParseOk(const std::vector<std::string>& args) {
  Parsed p = Parse(args);
  EXPECT_TRUE(p.result.options.has_value()) << p.err;
  EXPECT_EQ(p.err, "");
  return p.result.options.value_or(CliOptions());
}

TEST(ColocateTest, NamesWeightsAndTheOperationReachTheRequest) {
  CliOptions options = ParseOk({"--colocate", "a", "team/b", "--weights", "3,1",
                                "--set-memory-budget", "90%", "--dry-run"});
  EXPECT_EQ(options.operation, Operation::kFitBudget);
  EXPECT_EQ(options.colocate, (std::vector<std::string>{"a", "team/b"}));
  EXPECT_EQ(options.weights, (std::vector<uint32_t>{3, 1}));
  EXPECT_TRUE(options.dry_run);
  options = ParseOk({"--describe", "--colocate", "a", "b"});
  EXPECT_EQ(options.operation, Operation::kDescribe);
  EXPECT_TRUE(options.weights.empty());
}

// --- Usage errors: refused before any connection, exit 2, flags named. ---

struct UsageCase {
  std::vector<std::string> args;
  std::vector<std::string> message_parts;  // all must appear on stderr
};

class UsageErrorTest : public ::testing::TestWithParam<UsageCase> {};

TEST_P(UsageErrorTest, RefusedWithExitTwoAndNamesTheFlags) {
  Parsed p = Parse(GetParam().args);
  EXPECT_FALSE(p.result.options.has_value());
  EXPECT_EQ(p.result.exit_code, kExitUsage);
  EXPECT_EQ(p.out, "");
  EXPECT_THAT(p.err, HasSubstr("rbln-artifact: "));
  EXPECT_THAT(p.err, HasSubstr("Run with --help"));
  for (const std::string& part : GetParam().message_parts) {
    EXPECT_THAT(p.err, HasSubstr(part));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Flags, UsageErrorTest,
    ::testing::Values(
        // --colocate and what does not go with it (issue 46).
        UsageCase{{"--colocate", "a", "b", "--get-kvcache-num-blocks"},
                  {"--colocate goes with --set-memory-budget BUDGET or "
                   "--describe"}},
        UsageCase{{"--colocate", "a", "b", "--set-kvcache-num-blocks", "8"},
                  {"--colocate goes with"}},
        UsageCase{{"--colocate", "a", "b", "--set-memory-budget", "0.9",
                   "--model-id", "c"},
                  {"--model-id does not go with --colocate"}},
        UsageCase{{"--colocate", "a", "b", "--set-memory-budget", "0.9",
                   "--output-dir", "c"},
                  {"--output-dir does not go with --colocate"}},
        UsageCase{{"--colocate", "a", "b", "--set-memory-budget", "0.9",
                   "--expect", "3"},
                  {"--expect does not go with --colocate"}},
        UsageCase{{"--colocate", "a", "a", "--set-memory-budget", "0.9"},
                  {"--colocate names a twice"}},
        UsageCase{{"--colocate", "a", "b", "--weights", "2,1,1",
                   "--set-memory-budget", "0.9"},
                  {"--weights gives 3 weight(s) for the 2 artifact(s)"}},
        UsageCase{{"--colocate", "a", "b", "--weights", "2,0",
                   "--set-memory-budget", "0.9"},
                  {"--weights: '0' is not a whole number from 1 to 1000"}},
        UsageCase{{"--weights", "2,1", "--set-memory-budget", "0.9",
                   "--model-id", "a"},
                  {"--weights goes only with --colocate"}},
        UsageCase{{"--beside", "c", "--describe", "--model-id", "a"},
                  {"--beside goes only with --set-memory-budget or "
                   "--set-kvcache-num-blocks"}},
        UsageCase{{"--colocate", "a", "b", "--beside", "c",
                   "--set-memory-budget", "0.9"},
                  {"--beside does not go with --colocate"}},
        UsageCase{{"--devices", "1,1", "--set-memory-budget", "free",
                   "--model-id", "a"},
                  {"--devices: "}},
        // No operation.
        UsageCase{{}, {"choose one operation"}},
        UsageCase{{"--model-id", "a"}, {"choose one operation"}},
        UsageCase{{"--output-dir", "o", "--model-id", "a"},
                  {"choose one operation"}},
        // Two operations (CLI11 excludes).
        UsageCase{{"--get-kvcache-num-blocks", "--set-kvcache-num-blocks", "8",
                   "--model-id", "a"},
                  {"--get-kvcache-num-blocks does not go with "
                   "--set-kvcache-num-blocks"}},
        UsageCase{{"--set-kvcache-num-blocks", "8", "--set-memory-budget",
                   "0.8", "--model-id", "a"},
                  {"--set-kvcache-num-blocks does not go with "
                   "--set-memory-budget"}},
        UsageCase{{"--get-kvcache-num-blocks", "--set-memory-budget", "0.8",
                   "--model-id", "a"},
                  {"--get-kvcache-num-blocks", "--set-memory-budget"}},
        UsageCase{{"--describe", "--list"}, {"--describe", "--list"}},
        UsageCase{{"--list", "--device-info"}, {"--list", "--device-info"}},
        UsageCase{{"--server-info", "--list"}, {"--server-info", "--list"}},
        UsageCase{{"--server-info", "--model-id", "a"},
                  {"--model-id does not go with --server-info"}},
        UsageCase{{"--get-kvcache-num-blocks", "--describe", "--model-id", "a"},
                  {"--get-kvcache-num-blocks", "--describe"}},
        // --model-id missing, or given where it means nothing.
        UsageCase{{"--get-kvcache-num-blocks"},
                  {"--get-kvcache-num-blocks needs --model-id"}},
        UsageCase{{"--set-kvcache-num-blocks", "8"},
                  {"--set-kvcache-num-blocks needs --model-id"}},
        UsageCase{{"--set-memory-budget", "0.8"},
                  {"--set-memory-budget needs --model-id"}},
        UsageCase{{"--describe"}, {"--describe needs --model-id"}},
        UsageCase{{"--list", "--model-id", "a"},
                  {"--model-id does not go with --list"}},
        UsageCase{{"--device-info", "--model-id", "a"},
                  {"--model-id does not go with --device-info"}},
        UsageCase{{"--get-kvcache-num-blocks", "--model-id", ""},
                  {"--model-id must not be empty"}},
        // Names the daemon could not parse (proto3 strings are UTF-8).
        UsageCase{
            {"--get-kvcache-num-blocks", "--model-id", "a\xff"},
            {"--model-id is not valid UTF-8 (a\\xff)", "rename the directory"}},
        UsageCase{{"--set-kvcache-num-blocks", "8", "--model-id", "a",
                   "--output-dir", "b\xc3"},
                  {"--output-dir is not valid UTF-8 (b\\xc3)"}},
        UsageCase{{"--set-kvcache-num-blocks", "8", "--model-id", "a",
                   "--output-dir", "\xed\xa0\x80"},  // a surrogate
                  {"--output-dir is not valid UTF-8"}},
        // Writer-only flags without a writer.
        UsageCase{{"--get-kvcache-num-blocks", "--model-id", "a",
                   "--output-dir", "b"},
                  {"--output-dir goes only with --set-kvcache-num-blocks or "
                   "--set-memory-budget",
                   "not with --get-kvcache-num-blocks"}},
        UsageCase{{"--describe", "--model-id", "a", "--dry-run"},
                  {"--dry-run goes only with", "not with --describe"}},
        UsageCase{{"--list", "--replace"}, {"--replace goes only with"}},
        UsageCase{{"--device-info", "--expect", "3"},
                  {"--expect goes only with"}},
        UsageCase{
            {"--set-kvcache-num-blocks", "8", "--model-id", "a", "--replace"},
            {"--replace needs --output-dir"}},
        UsageCase{{"--set-kvcache-num-blocks", "8", "--model-id", "a",
                   "--output-dir", ""},
                  {"--output-dir must not be empty"}},
        UsageCase{{"--get-kvcache-num-blocks", "--model-id", "a", "--verify"},
                  {"--verify goes only with --describe"}},
        // N must be a positive integer.
        UsageCase{{"--set-kvcache-num-blocks", "0", "--model-id", "a"},
                  {"--set-kvcache-num-blocks",
                   "N must be a positive integer, got '0'"}},
        UsageCase{{"--set-kvcache-num-blocks", "abc", "--model-id", "a"},
                  {"--set-kvcache-num-blocks",
                   "N must be a positive integer, got 'abc'"}},
        UsageCase{{"--set-kvcache-num-blocks", "-4", "--model-id", "a"},
                  {"--set-kvcache-num-blocks"}},
        UsageCase{{"--set-kvcache-num-blocks", "1.5", "--model-id", "a"},
                  {"got '1.5'"}},
        UsageCase{{"--set-kvcache-num-blocks", "99999999999999999999",
                   "--model-id", "a"},
                  {"N must be a positive integer"}},
        UsageCase{{"--set-kvcache-num-blocks", "--model-id", "a"},
                  {"--set-kvcache-num-blocks"}},
        UsageCase{
            {"--set-memory-budget", "0.8", "--model-id", "a", "--expect", "0"},
            {"--expect", "N must be a positive integer, got '0'"}},
        UsageCase{{"--set-memory-budget", "", "--model-id", "a"},
                  {"--set-memory-budget must not be empty"}},
        // Server address, unknown flags, stray arguments.
        UsageCase{{"--list", "--server", "localhost"},
                  {"--server: expected unix:PATH, HOST:PORT or an absolute "
                   "path (a Unix socket), got 'localhost' (a host needs a "
                   "port, e.g. localhost:50051)"}},
        UsageCase{{"--list", "--server", "50051"},
                  {"did you mean 0.0.0.0:50051 or localhost:50051?"}},
        UsageCase{{"--list", "--server", "unix:"}, {"--server"}},
        UsageCase{{"--list", "--get"},
                  {"unknown flag --get (did you mean "
                   "--get-kvcache-num-blocks?)"}},
        UsageCase{{"--list", "stray"}, {"unexpected argument 'stray'"}},
        // Typos get the flag that was meant, whatever else is missing.
        UsageCase{{"--set-kvcache-num-block", "64", "--model-id", "a"},
                  {"rbln-artifact: unknown flag --set-kvcache-num-block (did "
                   "you mean --set-kvcache-num-blocks?)\n"}},
        UsageCase{{"--get-kvcache-num-blocks", "--modle-id", "a"},
                  {"unknown flag --modle-id (did you mean --model-id?)"}},
        UsageCase{{"--list", "--jsno"},
                  {"unknown flag --jsno (did you mean --json?)"}},
        // Stray words are listed in the order given.
        UsageCase{{"--list", "one", "two", "three"},
                  {"unexpected arguments 'one' 'two' 'three'"}},
        // A flag given twice.
        UsageCase{
            {"--get-kvcache-num-blocks", "--model-id", "a", "--model-id", "b"},
            {"rbln-artifact: --model-id given twice; give it once\n"}},
        // N and budgets in their own words.
        UsageCase{{"--set-kvcache-num-blocks", ".8", "--model-id", "a"},
                  {"N must be a positive integer, got '.8'"}},
        UsageCase{{"--set-memory-budget", "80", "--model-id", "a"},
                  {"--set-memory-budget: memory budget \"80\"",
                   "did you mean 80%? write 80B for bytes"}},
        UsageCase{{"--set-memory-budget", "1.5", "--model-id", "a"},
                  {"\"1.5\" is ambiguous", "did you mean 1.5%?"}},
        UsageCase{{"--set-memory-budget", "0", "--model-id", "a"},
                  {"\"0\" is zero: budgets are positive"}},
        UsageCase{{"--set-memory-budget", "10G", "--model-id", "a"},
                  {"did you mean 10GB?"}},
        UsageCase{{"--set-memory-budget", "-1", "--model-id", "a"},
                  {"\"-1\" is negative: budgets are positive"}},
        UsageCase{{"--set-memory-budget", "--dry-run", "--model-id", "a"},
                  {"--set-memory-budget needs a value, got '--dry-run'"}}));

// A budget is never a path: no advice about paths for one that starts with
// '-'.
TEST(UsageErrorTest, NegativeBudgetGetsNoPathAdvice) {
  Parsed p = Parse({"--set-memory-budget", "-1", "--model-id", "a"});
  EXPECT_EQ(p.result.exit_code, kExitUsage);
  EXPECT_THAT(p.err, Not(HasSubstr("./-1")));
  EXPECT_THAT(p.err, Not(HasSubstr("path")));
}

TEST(ParseTest, BudgetsTheGrammarAcceptsAreSentAsTyped) {
  for (const char* budget : {"0.8", ".8", "80%", "80B", "10GiB", "1048576"}) {
    SCOPED_TRACE(budget);
    CliOptions o = ParseOk({"--set-memory-budget", budget, "--model-id", "a"});
    EXPECT_EQ(o.operation, Operation::kFitBudget);
    EXPECT_EQ(o.budget, budget);
  }
}

// --- Help. ---

TEST(HelpTest, DocumentsEveryFlagTheExamplesAndExitCodes) {
  Parsed p = Parse({"--help"});
  EXPECT_FALSE(p.result.options.has_value());
  EXPECT_EQ(p.result.exit_code, kExitOk);
  EXPECT_EQ(p.err, "");
  for (const char* flag :
       {"--get-kvcache-num-blocks", "--set-kvcache-num-blocks N",
        "--set-memory-budget BUDGET", "--model-id DIR", "--output-dir DIR",
        "--server ADDR", "--json", "--dry-run", "--replace", "--expect N",
        "--describe", "--list", "--device-info", "--server-info", "--verify",
        "--version", "--help"}) {
    EXPECT_THAT(p.out, HasSubstr(flag));
  }
  EXPECT_THAT(p.out, HasSubstr(kUnix));  // the default server
  EXPECT_THAT(p.out,
              HasSubstr("rbln-artifact --get-kvcache-num-blocks --model-id "
                        "./my_artifact\n"));
  EXPECT_THAT(p.out, HasSubstr("rbln-artifact --set-kvcache-num-blocks 16 "
                               "--model-id ./my_artifact\n"));
  EXPECT_THAT(p.out, HasSubstr("rbln-artifact --set-memory-budget 0.8 "
                               "--model-id ./my_artifact\n"));
  // Continued on a second line, to stay in 80 columns.
  EXPECT_THAT(p.out, HasSubstr("rbln-artifact --set-memory-budget 10GB "
                               "--model-id ./my_artifact \\\n"
                               "      --output-dir ./my_artifact_10gb\n"));
  EXPECT_THAT(p.out, HasSubstr("Exit codes:"));
  EXPECT_THAT(p.out, HasSubstr("  3  cannot connect to the daemon"));
  EXPECT_THAT(p.out,
              HasSubstr("  4  permission denied on the daemon's socket"));
  EXPECT_THAT(p.out, HasSubstr("  5  interrupted"));
  EXPECT_THAT(p.out, HasSubstr("above 2^53"));
  // The exclusions are summed up in the group title, not on every line.
  EXPECT_THAT(p.out, HasSubstr("Operations (exactly one)"));
  EXPECT_THAT(p.out, Not(HasSubstr("Excludes")));
  for (absl::string_view line : absl::StrSplit(p.out, '\n')) {
    EXPECT_LE(line.size(), kHelpWidth) << line;
  }
}

// --- Valid command lines and the requests they make. ---

TEST(ParseTest, DefaultsToTheGivenServer) {
  CliOptions o = ParseOk({"--list"});
  EXPECT_EQ(o.operation, Operation::kList);
  EXPECT_EQ(o.server, kUnix);
  EXPECT_FALSE(o.json);
}

TEST(ParseTest, GetOverUnixSocketMakesTheModelIdAbsolute) {
  CliOptions o = ParseOk(
      {"--get-kvcache-num-blocks", "--model-id", "./my_artifact", "--json"});
  EXPECT_EQ(o.operation, Operation::kGet);
  EXPECT_TRUE(o.json);
  absl::StatusOr<CliOptions> resolved = ResolvePaths(o, kCwd);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_THAT(BuildGetRequest(*resolved),
              EqualsProto(FromText<v1::GetKvcacheNumBlocksRequest>(
                  R"pb(artifact: "/store/team/my_artifact")pb")));
}

TEST(ParseTest, SetOverUnixSocketResolvesBothPaths) {
  CliOptions o =
      ParseOk({"--set-kvcache-num-blocks", "128", "--model-id", "llama/",
               "--output-dir", "../out//llama-128", "--replace", "--expect",
               "64", "--server", "unix:/tmp/d.sock"});
  EXPECT_EQ(o.operation, Operation::kSet);
  absl::StatusOr<CliOptions> resolved = ResolvePaths(o, kCwd);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_THAT(BuildSetRequest(*resolved, "op-1"),
              EqualsProto(FromText<v1::SetKvcacheNumBlocksRequest>(R"pb(
                artifact: "/store/team/llama"
                num_blocks: 128
                options {
                  output_dir: "/store/out/llama-128"
                  replace: true
                  expected_current: 64
                  operation_id: "op-1"
                }
              )pb")));
}

// Counts are decimal, as Python's int() reads them: a leading zero is not
// octal (CLI11's own conversion would make 012 ten).
TEST(ParseTest, CountsWithLeadingZerosAreDecimal) {
  CliOptions o = ParseOk({"--set-kvcache-num-blocks", "012", "--expect", "0013",
                          "--model-id", "a"});
  EXPECT_EQ(o.num_blocks, 12u);
  EXPECT_EQ(o.expected_current, std::optional<uint64_t>(13));
  o = ParseOk({"--set-kvcache-num-blocks", "09", "--model-id", "a"});
  EXPECT_EQ(o.num_blocks, 9u);
}

TEST(ParseTest, FitOverTcpKeepsPathsAsGiven) {
  CliOptions o = ParseOk({"--set-memory-budget", "10GB", "--model-id",
                          "./my_artifact", "--output-dir", "./my_artifact_10gb",
                          "--dry-run", "--server", "npu-host:50051"});
  EXPECT_EQ(o.operation, Operation::kFitBudget);
  absl::StatusOr<CliOptions> resolved = ResolvePaths(o, kCwd);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  v1::FitMemoryBudgetRequest request = BuildFitRequest(*resolved, "");
  EXPECT_THAT(request, EqualsProto(FromText<v1::FitMemoryBudgetRequest>(R"pb(
                artifact: "./my_artifact"
                budget: "10GB"
                options { output_dir: "./my_artifact_10gb" dry_run: true }
              )pb")));
  // No compare-and-set unless asked.
  EXPECT_FALSE(request.options().has_expected_current());
}

TEST(ParseTest, TlsAndTokenFlagsGoWithATcpServer) {
  CliOptions o = ParseOk({"--list", "--server", "npu-host:50051", "--tls-ca",
                          "ca.pem", "--tls-cert", "me.pem", "--tls-key",
                          "me.key", "--token-file", "ci.token"});
  EXPECT_TRUE(o.UsesTls());
  EXPECT_EQ(o.tls_ca, "ca.pem");
  EXPECT_EQ(o.tls_cert, "me.pem");
  EXPECT_EQ(o.tls_key, "me.key");
  EXPECT_EQ(o.token_file, "ci.token");
  EXPECT_FALSE(ParseOk({"--list", "--server", "npu-host:50051"}).UsesTls());

  const std::vector<std::pair<std::vector<std::string>, std::string>> refused =
      {{{"--list", "--tls-ca", "ca.pem"}, "go only with a TCP --server"},
       {{"--list", "--token-file", "t"}, "go only with a TCP --server"},
       {{"--list", "--server", "h:1", "--tls-ca", "ca.pem", "--tls-cert",
         "me.pem"},
        "--tls-cert and --tls-key go together"},
       {{"--list", "--server", "h:1", "--token-file", "t"},
        "--token-file needs --tls-ca"}};
  for (const auto& [args, message] : refused) {
    Parsed p = Parse(args);
    EXPECT_FALSE(p.result.options.has_value()) << message;
    EXPECT_EQ(p.result.exit_code, kExitUsage);
    EXPECT_THAT(p.err, HasSubstr(message));
  }
}

TEST(ParseTest, AbsolutePathsAreSentAsGiven) {
  CliOptions o =
      ParseOk({"--describe", "--verify", "--model-id", "/srv/store/a/../b"});
  absl::StatusOr<CliOptions> resolved = ResolvePaths(o, kCwd);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_THAT(BuildDescribeRequest(*resolved),
              EqualsProto(FromText<v1::DescribeArtifactRequest>(R"pb(
                artifact: "/srv/store/a/../b"
                verify_payload: true
              )pb")));
}

TEST(ParseTest, EveryOperationAlone) {
  EXPECT_EQ(ParseOk({"--device-info"}).operation, Operation::kDeviceInfo);
  EXPECT_EQ(ParseOk({"--server-info", "--json"}).operation,
            Operation::kServerInfo);
  EXPECT_EQ(ParseOk({"--list", "--json"}).operation, Operation::kList);
  EXPECT_EQ(ParseOk({"--describe", "--model-id", "a"}).operation,
            Operation::kDescribe);
}

TEST(HelpTest, VersionPrintsTheProjectVersionAndCommit) {
  Parsed p = Parse({"--version"});
  EXPECT_FALSE(p.result.options.has_value());
  EXPECT_EQ(p.result.exit_code, kExitOk);
  EXPECT_EQ(p.err, "");
  EXPECT_EQ(p.out, absl::StrCat("rbln-artifact ", RBLN_EXPECTED_VERSION,
                                " (commit ", rbln::BuildCommit(), ")\n"));
}

TEST(FailureTest, UsageErrorsPrintTheErrorObjectWithJson) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"--json", "--get-kvcache-num-blocks"},  // ours
           {"--json", "--no-such-flag"},            // CLI11's
           {"--json", "--set-kvcache-num-blocks", "0", "--model-id", "a"}}) {
    Parsed p = Parse(args);
    EXPECT_EQ(p.result.exit_code, kExitUsage);
    EXPECT_THAT(p.err, HasSubstr("Run with --help"));
    rapidjson::Document doc = ParseJsonLine(p.out);
    ASSERT_TRUE(doc.HasMember("error")) << p.out;
    EXPECT_STREQ(doc["error"]["code"].GetString(), "INVALID_ARGUMENT");
    EXPECT_EQ(doc["error"]["code_number"].GetInt(), 3);
    // The message is the one on stderr, without the program name.
    ASSERT_TRUE(doc["error"]["message"].IsString());
    const std::string message = doc["error"]["message"].GetString();
    EXPECT_FALSE(message.empty());
    EXPECT_THAT(p.err, HasSubstr("rbln-artifact: " + message + "\n"));
  }
  // Help is no error.
  EXPECT_THAT(Parse({"--json", "--help"}).out, Not(HasSubstr("{\"error\":{")));
}

}  // namespace
}  // namespace rbln::client
