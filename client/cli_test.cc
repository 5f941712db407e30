#include "client/cli.h"

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/version.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"

namespace rbln::client {
namespace {

namespace v1 = ::rbln::artifact::v1;
using ::testing::AllOf;
using ::testing::ContainsRegex;
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

template <typename Message>
Message FromText(const std::string& text) {
  Message m;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &m)) << text;
  return m;
}

MATCHER_P(EqualsProto, expected, "") {
  std::string diff;
  google::protobuf::util::MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  if (differencer.Compare(arg, expected)) return true;
  *result_listener << diff;
  return false;
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
  EXPECT_THAT(p.out, HasSubstr("rbln-artifact --set-memory-budget 10GB "
                               "--model-id ./my_artifact --output-dir "
                               "./my_artifact_10gb\n"));
  EXPECT_THAT(p.out, HasSubstr("Exit codes:"));
  EXPECT_THAT(p.out, HasSubstr("  3  cannot connect to the daemon"));
  EXPECT_THAT(p.out,
              HasSubstr("  4  permission denied on the daemon's socket"));
  EXPECT_THAT(p.out, HasSubstr("  5  interrupted"));
  EXPECT_THAT(p.out, HasSubstr("above 2^53"));
  // The exclusions are summed up in the group title, not on every line.
  EXPECT_THAT(p.out, HasSubstr("Operations (exactly one)"));
  EXPECT_THAT(p.out, Not(HasSubstr("Excludes")));
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

TEST(ResolveArtifactPathTest, Cases) {
  struct Case {
    const char* path;
    const char* server;
    const char* expected;
  };
  for (const Case& c : std::vector<Case>{
           {"a", kUnix, "/store/team/a"},
           {"./a/./b/", kUnix, "/store/team/a/b"},
           {"..", kUnix, "/store"},
           {"../../x", kUnix, "/x"},
           {"../../../../x", kUnix, "/x"},
           // A ".." after a named component may cross a symbolic link: the
           // daemon judges it.
           {"a/../b", kUnix, "/store/team/a/../b"},
           {"/abs/a", kUnix, "/abs/a"},
           {"./a", "localhost:50051", "./a"},
           {"../a", "dns:///npu:50051", "../a"},
           {"/abs/a", "localhost:50051", "/abs/a"},
           // A read-only root's name is sent as given, over either transport.
           {"hf:models--x/snapshots/abc", kUnix, "hf:models--x/snapshots/abc"},
           {"models:llama", "localhost:50051", "models:llama"},
           // Not a root name: a path (a directory whose name has a colon).
           {"a/b:c", kUnix, "/store/team/a/b:c"},
           {".x:y", kUnix, "/store/team/.x:y"},
       }) {
    absl::StatusOr<std::string> got =
        ResolveArtifactPath(c.path, c.server, kCwd);
    ASSERT_TRUE(got.ok()) << c.path << ": " << got.status();
    EXPECT_EQ(*got, c.expected) << c.path << " via " << c.server;
  }
}

TEST(ResolveArtifactPathTest, RelativePathWithoutWorkingDirectoryFails) {
  absl::StatusOr<std::string> got = ResolveArtifactPath("a", kUnix, "");
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("give an absolute path"));
  // Not needed for an absolute path or over TCP.
  EXPECT_TRUE(ResolveArtifactPath("/a", kUnix, "").ok());
  EXPECT_TRUE(ResolveArtifactPath("a", "h:1", "").ok());
}

TEST(IsLocalServerTest, UnixSocketsAreLocal) {
  EXPECT_TRUE(IsLocalServer("unix:/run/x.sock"));
  EXPECT_FALSE(IsLocalServer("localhost:50051"));
  EXPECT_FALSE(IsLocalServer("[::1]:50051"));
}

// --- Output. ---

TEST(FormatTest, GetPrintsTheBareNumber) {
  v1::GetKvcacheNumBlocksResponse reply;
  reply.set_kvcache_num_blocks(128);
  reply.set_compiled_num_blocks(256);
  EXPECT_EQ(FormatGet(reply), "128\n");
}

// optimum-rbln-cli's stdout lines, exactly; what this client tells beyond
// them on stderr.
TEST(FormatTest, ResizeLinesAreOptimumRblnsOnStdout) {
  CliOptions set;
  set.operation = Operation::kSet;
  set.written_dir = "/home/me/llama";
  v1::ResizeResponse reply;
  reply.set_artifact("llama");
  reply.set_previous_num_blocks(64);
  reply.set_new_num_blocks(128);
  reply.set_written(true);
  ResizeOutput output = FormatResize(set, reply);
  EXPECT_EQ(output.out,
            "Set kvcache_num_blocks to 128 for artifact at /home/me/llama\n");
  EXPECT_EQ(output.err, "kvcache_num_blocks: 64 -> 128\n");

  CliOptions dry = set;
  dry.dry_run = true;
  output = FormatResize(dry, reply);
  EXPECT_EQ(output.out,
            "kvcache_num_blocks: 64 -> 128 (dry run: nothing written)\n");
  EXPECT_EQ(output.err, "");

  // Over TCP: the daemon's store joined with the name written.
  CliOptions remote = set;
  remote.written_dir.clear();
  reply.set_store("/var/lib/rbln-artifactd");
  reply.set_output_dir("team/llama-128");
  output = FormatResize(remote, reply);
  EXPECT_EQ(output.out,
            "Set kvcache_num_blocks to 128 for artifact at "
            "/var/lib/rbln-artifactd/team/llama-128\n");
  EXPECT_EQ(output.err,
            "kvcache_num_blocks: 64 -> 128 (written to team/llama-128)\n");

  v1::ResizeResponse unchanged;
  unchanged.set_previous_num_blocks(64);
  unchanged.set_new_num_blocks(64);
  unchanged.set_written(false);
  output = FormatResize(set, unchanged);
  EXPECT_EQ(output.out,
            "Set kvcache_num_blocks to 64 for artifact at /home/me/llama\n");
  EXPECT_EQ(output.err,
            "kvcache_num_blocks: 64 -> 64 (unchanged: nothing was written)\n");
}

TEST(FormatTest, ABudgetPrintsItsLineAsGivenFirst) {
  CliOptions fit;
  fit.operation = Operation::kFitBudget;
  fit.budget = "10GB";
  fit.written_dir = "/srv/a";
  v1::ResizeResponse reply;
  reply.set_previous_num_blocks(16);
  reply.set_new_num_blocks(35);
  reply.set_written(true);
  EXPECT_EQ(FormatResize(fit, reply).out,
            "memory_budget 10GB fits kvcache_num_blocks=35\n"
            "Set kvcache_num_blocks to 35 for artifact at /srv/a\n");
  fit.dry_run = true;
  EXPECT_EQ(FormatResize(fit, reply).out,
            "memory_budget 10GB fits kvcache_num_blocks=35\n"
            "kvcache_num_blocks: 16 -> 35 (dry run: nothing written)\n");
}

TEST(PathTest, PythonAbsolutePathIsPathlibs) {
  const struct {
    const char* path;
    const char* expected;
  } cases[] = {
      {"llama", "/home/me/llama"},
      {"./llama", "/home/me/llama"},
      {"a/./b/", "/home/me/a/b"},
      {"a//b", "/home/me/a/b"},
      {".", "/home/me"},
      {"../x", "/home/me/../x"},
      {"a/../b", "/home/me/a/../b"},
      {"/srv/./x/", "/srv/x"},
      {"/", "/"},
      {"//srv/x", "//srv/x"},
      {"///srv/x", "/srv/x"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.path);
    EXPECT_EQ(PythonAbsolutePath(c.path, "/home/me"), c.expected);
  }
  EXPECT_EQ(PythonAbsolutePath("x", "/"), "/x");
}

TEST(FormatTest, FitNamesTheBudgetAndTheLimitingBucket) {
  v1::ResizeResponse reply = FromText<v1::ResizeResponse>(R"pb(
    previous_num_blocks: 16
    new_num_blocks: 35
    written: true
    fit {
      budget: "80%"
      budget_per_chiplet: 13509110579
      num_full_blocks: 64
      buckets {
        node: 0
        chiplet: 0
        available_bytes: 13509110579
        other_bytes: 3221225472
        kv_bytes: 9395240960
        kv_bytes_per_block: 268435456
        headroom_bytes: 892644147
      }
      buckets {
        node: 1
        chiplet: 0
        available_bytes: 13509110579
        other_bytes: 4026531840
        kv_bytes: 9395240960
        kv_bytes_per_block: 268435456
        headroom_bytes: 87337779
      }
      limiting_bucket: 1
      dram_source: "spec table"
    }
  )pb");
  CliOptions fit;
  fit.operation = Operation::kFitBudget;
  fit.budget = "0.8";
  std::vector<std::string> lines =
      absl::StrSplit(FormatResize(fit, reply).err, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "kvcache_num_blocks: 16 -> 35");
  EXPECT_EQ(lines[1],
            "budget 80%: 12.58 GiB per chiplet; limited by node 1 chiplet 0: "
            "other 3.75 GiB, KV 8.75 GiB at 35 blocks, 0.25 "
            "GiB per block, headroom 0.08 GiB");
  EXPECT_EQ(lines[2], "DRAM: spec table");

  reply.mutable_fit()->set_limiting_bucket(-1);
  reply.set_new_num_blocks(64);
  fit.dry_run = true;
  EXPECT_THAT(FormatResize(fit, reply).err,
              HasSubstr("the full count of 64 blocks fits\n"));
}

TEST(FormatTest, DescribeTable) {
  v1::DescribeArtifactResponse reply =
      FromText<v1::DescribeArtifactResponse>(R"pb(
        artifact: "team/llama"
        cls_name: "RBLNLlamaForCausalLM"
        npu: "RBLN-CA12"
        num_nodes: 2
        chiplets_per_node: 1
        attn_impl: "flash_attn"
        max_seq_len: 8192
        kvcache_block_size: 4096
        batch_size: 1
        kvcache_num_blocks: 2
        compiled_num_blocks: 2
        num_full_blocks: 2
        num_min_blocks: 2
        resizable_kv_tensors: 64
        fixed_kv_tensors: 0
        graphs {
          compiled_model_name: "prefill"
          file_name: "prefill.rbln"
          file_bytes: 1073741824
        }
        graphs {
          compiled_model_name: "decoder_batch_1"
          file_name: "decoder_batch_1.rbln"
          file_bytes: 1073741824
        }
        buckets {
          node: 0
          chiplet: 0
          available_bytes: 16877879296
          other_bytes: 4294967296
          kv_bytes: 2147483648
          kv_bytes_per_block: 1073741824
          headroom_bytes: 10435428352
        }
        buckets {
          node: 1
          chiplet: 0
          available_bytes: 16877879296
          other_bytes: 16106127360
          kv_bytes: 2147483648
          kv_bytes_per_block: 1073741824
          headroom_bytes: -1375731712
        }
        max_fitting_num_blocks: 9
        dram_source: "spec table"
      )pb");
  std::string text = FormatDescribe(reply);
  EXPECT_THAT(text, HasSubstr("artifact:    team/llama\n"));
  EXPECT_THAT(text, HasSubstr("npu:         RBLN-CA12, 2 nodes x 1 chiplet "
                              "(DRAM: spec table)\n"));
  EXPECT_THAT(text, HasSubstr("current 2, compiled 2, full 2, min 2, max "
                              "fitting 9\n"));
  EXPECT_THAT(text, HasSubstr("RBLNLlamaForCausalLM, flash_attn, max_seq_len "
                              "8192, block size 4096, batch 1"));
  EXPECT_THAT(text, HasSubstr("prefill, decoder_batch_1 (2.00 GiB in files)"));
  EXPECT_THAT(text, HasSubstr("KV at 2 blocks"));
  EXPECT_THAT(
      text,
      HasSubstr(
          "NODE  CHIPLET  AVAILABLE  OTHER    KV  PER BLOCK  HEADROOM\n"
          "   0        0      15.72   4.00  2.00       1.00      9.72\n"
          "   1        0      15.72  15.00  2.00       1.00     -1.28\n"));
}

TEST(FormatTest, ListTableShowsErrorsOnlyWhenThereAreSome) {
  v1::ListArtifactsResponse reply = FromText<v1::ListArtifactsResponse>(R"pb(
    store: "/var/lib/rbln-artifactd"
    artifacts {
      artifact: "llama"
      kvcache_num_blocks: 16
      npu: "RBLN-CA12"
      num_nodes: 4
      cls_name: "RBLNLlamaForCausalLM"
    }
  )pb");
  EXPECT_EQ(FormatList(reply),
            "store: /var/lib/rbln-artifactd\n"
            "ARTIFACT  BLOCKS  NPU        NODES  CLASS\n"
            "llama         16  RBLN-CA12      4  RBLNLlamaForCausalLM\n");
  v1::ArtifactSummary* broken = reply.add_artifacts();
  broken->set_artifact("old");
  broken->set_error("legacy rbln_config.json (_meta)");
  EXPECT_THAT(FormatList(reply),
              AllOf(HasSubstr("CLASS                 ERROR\n"),
                    HasSubstr("old            -  -              -  -       "
                              "              legacy rbln_config.json (_meta)"
                              "\n")));
  EXPECT_EQ(FormatList(v1::ListArtifactsResponse()),
            "store: \n(no artifacts)\n");
}

TEST(FormatTest, ListShowsReadOnlyRootsAndWhatWasSkipped) {
  v1::ListArtifactsResponse reply = FromText<v1::ListArtifactsResponse>(R"pb(
    store: "/srv/store"
    roots { dir: "/srv/store" }
    roots { name: "hf" dir: "/data/hub" read_only: true }
    artifacts {
      artifact: "hf:models--x/snapshots/abc"
      kvcache_num_blocks: 16
      npu: "RBLN-CA12"
      num_nodes: 1
      cls_name: "RBLNLlamaForCausalLM"
    }
    skipped { artifact: "linked" reason: "a symbolic link" }
  )pb");
  EXPECT_EQ(FormatList(reply),
            "store: /srv/store\n"
            "read-only root hf: /data/hub (artifacts named hf:PATH)\n"
            "ARTIFACT                    BLOCKS  NPU        NODES  CLASS\n"
            "hf:models--x/snapshots/abc      16  RBLN-CA12      1  "
            "RBLNLlamaForCausalLM\n"
            "skipped 1:\n"
            "  linked: a symbolic link\n");
  reply.clear_artifacts();
  EXPECT_THAT(FormatList(reply),
              HasSubstr("(no artifacts)\nskipped 1:\n  linked: a symbolic "
                        "link\n"));
  reply.set_not_readable(2);
  EXPECT_THAT(FormatList(reply),
              HasSubstr("  linked: a symbolic link\nleft out 2 artifact(s) "
                        "you cannot read yourself"));
}

TEST(FormatTest, DeviceTable) {
  v1::GetDeviceInfoResponse reply = FromText<v1::GetDeviceInfoResponse>(R"pb(
    source: "spec table (no rbln-smi)"
    devices {
      index: -1
      name: "RBLN-CA12"
      family: "RBLN-CA"
      total_bytes: 16877879296
      available_bytes: 16877879296
      chiplets: 1
      source: "spec"
    }
    devices {
      index: 0
      name: "RBLN-CR03"
      family: "RBLN-CR"
      device_node: "/dev/rbln0"
      total_bytes: 150323855360
      used_bytes: 1073741824
      available_bytes: 149250113536
      chiplets: 4
      source: "probe"
    }
  )pb");
  std::string text = FormatDeviceInfo(reply);
  EXPECT_THAT(text, HasSubstr("source: spec table (no rbln-smi)\n"));
  EXPECT_THAT(text, HasSubstr("INDEX  NAME       FAMILY   DEVICE      "
                              "TOTAL GiB  USED GiB  AVAILABLE GiB  CHIPLETS  "
                              "SOURCE\n"));
  EXPECT_THAT(text, HasSubstr("    -  RBLN-CA12  RBLN-CA  -               "
                              "15.72      0.00          15.72         1  "
                              "spec\n"));
  EXPECT_THAT(text, HasSubstr("    0  RBLN-CR03  RBLN-CR  /dev/rbln0     "
                              "140.00      1.00         139.00         4  "
                              "probe\n"));

  // A probed device the spec table does not know has no chiplet count.
  v1::Device* unknown = reply.add_devices();
  unknown->set_index(1);
  unknown->set_name("RBLN-XZ1");
  unknown->set_chiplets(0);
  unknown->set_source("probe");
  EXPECT_THAT(FormatDeviceInfo(reply),
              ContainsRegex("\n +1  RBLN-XZ1 .* - +probe\n"));
}

TEST(HelpTest, VersionPrintsTheProjectVersionAndCommit) {
  Parsed p = Parse({"--version"});
  EXPECT_FALSE(p.result.options.has_value());
  EXPECT_EQ(p.result.exit_code, kExitOk);
  EXPECT_EQ(p.err, "");
  EXPECT_EQ(p.out, absl::StrCat("rbln-artifact ", RBLN_EXPECTED_VERSION,
                                " (commit ", rbln::BuildCommit(), ")\n"));
}

TEST(FormatTest, ServerInfo) {
  auto reply = FromText<v1::GetServerInfoResponse>(R"pb(
    version: "0.1.0"
    commit: "1a2b3c4d5e6f"
    hostname: "npu-7"
    store: "/var/lib/rbln-artifactd"
    roots { name: "" dir: "/var/lib/rbln-artifactd" read_only: false }
    roots { name: "models" dir: "/srv/models" read_only: true }
    listeners: "unix:/run/rbln-artifactd.sock"
    listeners: "0.0.0.0:50051"
    codec: "built-in"
    caller: "cn:fleet-job"
    role: "reader"
  )pb");
  EXPECT_EQ(FormatServerInfo(reply),
            "rbln-artifactd 0.1.0 (commit 1a2b3c4d5e6f) on npu-7\n"
            "store: /var/lib/rbln-artifactd\n"
            "read-only root models: /srv/models (artifacts named "
            "models:PATH)\n"
            "listeners: unix:/run/rbln-artifactd.sock, 0.0.0.0:50051\n"
            "codec: built-in\n"
            "you are: cn:fleet-job (reader)\n");
}

TEST(FormatTest, JsonParsesBackWithProtoNamesAndDefaults) {
  v1::ResizeResponse reply;
  reply.set_artifact("llama");
  reply.set_previous_num_blocks(16);
  reply.set_new_num_blocks(16);
  reply.add_warnings("above the compiled count");
  absl::StatusOr<std::string> json = FormatJson(reply);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->back(), '\n');
  EXPECT_EQ(std::count(json->begin(), json->end(), '\n'), 1);
  EXPECT_THAT(*json, HasSubstr("\"previous_num_blocks\""));
  EXPECT_THAT(*json, HasSubstr("\"written\":false"));  // a default, printed
  v1::ResizeResponse back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(*json, &back).ok());
  EXPECT_THAT(back, EqualsProto(reply));
}

rapidjson::Document ParseJsonLine(const std::string& text) {
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_EQ(text.back(), '\n');
  rapidjson::Document doc;
  doc.Parse(text.c_str());
  EXPECT_FALSE(doc.HasParseError()) << text;
  EXPECT_TRUE(doc.IsObject()) << text;
  return doc;
}

TEST(FormatTest, JsonPrints64BitIntegersAsNumbers) {
  v1::DescribeArtifactResponse reply;
  reply.set_artifact("12345");  // a string of digits stays a string
  reply.set_kvcache_num_blocks(128);
  reply.set_num_nodes(4);
  v1::GraphInfo* graph = reply.add_graphs();
  // 2^53 + 1: a double cannot hold it; the literal is still exact.
  graph->set_file_bytes((uint64_t{1} << 53) + 1);
  graph->set_payload_bytes(uint64_t{18446744073709551615u});
  v1::BucketPlan* bucket = reply.add_buckets();
  bucket->set_headroom_bytes(-(int64_t{1} << 40));
  absl::StatusOr<std::string> json = FormatJson(reply);
  ASSERT_TRUE(json.ok()) << json.status();
  rapidjson::Document doc = ParseJsonLine(*json);
  ASSERT_TRUE(doc["artifact"].IsString());
  EXPECT_STREQ(doc["artifact"].GetString(), "12345");
  ASSERT_TRUE(doc["kvcache_num_blocks"].IsUint64()) << *json;
  EXPECT_EQ(doc["kvcache_num_blocks"].GetUint64(), 128u);
  EXPECT_TRUE(doc["compiled_num_blocks"].IsUint64()) << *json;  // default 0
  EXPECT_TRUE(doc["num_nodes"].IsUint());
  const rapidjson::Value& g = doc["graphs"][0];
  ASSERT_TRUE(g["file_bytes"].IsUint64()) << *json;
  EXPECT_EQ(g["file_bytes"].GetUint64(), (uint64_t{1} << 53) + 1);
  EXPECT_THAT(*json, HasSubstr("\"file_bytes\":9007199254740993"));
  EXPECT_THAT(*json, HasSubstr("\"payload_bytes\":18446744073709551615"));
  const rapidjson::Value& b = doc["buckets"][0];
  ASSERT_TRUE(b["headroom_bytes"].IsInt64()) << *json;
  EXPECT_EQ(b["headroom_bytes"].GetInt64(), -(int64_t{1} << 40));
  // Still proto3 JSON: protobuf reads it back.
  v1::DescribeArtifactResponse back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(*json, &back).ok());
  EXPECT_THAT(back, EqualsProto(reply));
}

TEST(FailureTest, JsonErrorObject) {
  Failure failure{
      .status = absl::AbortedError("current count is 32, \"expected\" 64\n"),
      .exit_code = kExitFailed,
      .details = {{"artifact", "/srv/store/llama"}}};
  rapidjson::Document doc = ParseJsonLine(FormatJsonError(failure));
  ASSERT_TRUE(doc.HasMember("error"));
  const rapidjson::Value& error = doc["error"];
  EXPECT_STREQ(error["code"].GetString(), "ABORTED");
  EXPECT_EQ(error["code_number"].GetInt(), 10);
  EXPECT_STREQ(error["message"].GetString(),
               "current count is 32, \"expected\" 64\n");
  ASSERT_TRUE(error["details"].IsObject());
  EXPECT_STREQ(error["details"]["artifact"].GetString(), "/srv/store/llama");

  std::ostringstream out, err;
  failure.text = "shown\n";
  EXPECT_EQ(ReportFailure(failure, /*json=*/false, out, err), kExitFailed);
  EXPECT_EQ(out.str(), "");
  EXPECT_EQ(err.str(), "shown\n");
  EXPECT_EQ(ReportFailure(failure, /*json=*/true, out, err), kExitFailed);
  EXPECT_EQ(out.str(), FormatJsonError(failure));
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

CliOptions Writer(const std::string& output_dir = "") {
  CliOptions o;
  o.operation = Operation::kSet;
  o.model_id = "/srv/store/llama";
  o.output_dir = output_dir;
  return o;
}

std::string Detail(const Failure& failure, absl::string_view key) {
  for (const auto& [k, v] : failure.details) {
    if (k == key) return v;
  }
  return "(none)";
}

TEST(FailureTest, StatusesTheDaemonReturnedExitOneOrFour) {
  Failure aborted = CallFailure(Writer(), absl::AbortedError("count is 32"),
                                /*replied=*/true);
  EXPECT_EQ(aborted.exit_code, kExitFailed);
  EXPECT_EQ(aborted.text, "rbln-artifact: error (ABORTED): count is 32\n");
  EXPECT_EQ(Detail(aborted, "artifact"), "/srv/store/llama");
  EXPECT_EQ(Detail(aborted, "outcome"), "(none)");

  // The daemon's own UNAVAILABLE (shutting down) is a known outcome.
  Failure stopping = CallFailure(
      Writer(), absl::UnavailableError("shutting down; nothing was changed"),
      /*replied=*/true);
  EXPECT_EQ(stopping.exit_code, kExitFailed);
  EXPECT_THAT(stopping.text, HasSubstr("nothing was changed"));

  EXPECT_EQ(
      CallFailure(Writer(), absl::UnauthenticatedError("who?"), true).exit_code,
      kExitDenied);
  // A path outside the store is the store's refusal, not the caller's.
  EXPECT_EQ(CallFailure(Writer(), absl::PermissionDeniedError("outside"), true)
                .exit_code,
            kExitFailed);
}

TEST(FailureTest, ErrorDetailAddsReasonAndCountsAsJsonNumbers) {
  rbln::artifact::v1::ErrorDetail detail;
  detail.set_reason(rbln::artifact::v1::ErrorDetail::BELOW_MIN_BLOCKS);
  detail.set_artifact("llama");
  detail.set_current_num_blocks(32);
  detail.set_num_min_blocks(17);
  detail.set_num_full_blocks(64);
  const absl::Status below =
      absl::InvalidArgumentError("kvcache_num_blocks 3 is below the minimum");
  Failure failure = CallFailure(Writer(), below, /*replied=*/true, &detail);
  // People see the daemon's message, as without a detail.
  EXPECT_EQ(failure.text, CallFailure(Writer(), below, true).text);
  rapidjson::Document doc = ParseJsonLine(FormatJsonError(failure));
  const rapidjson::Value& details = doc["error"]["details"];
  EXPECT_STREQ(details["reason"].GetString(), "BELOW_MIN_BLOCKS");
  EXPECT_STREQ(details["artifact"].GetString(), "/srv/store/llama");
  ASSERT_TRUE(details["current_num_blocks"].IsUint64());
  EXPECT_EQ(details["current_num_blocks"].GetUint64(), 32u);
  EXPECT_EQ(details["num_min_blocks"].GetUint64(), 17u);
  EXPECT_EQ(details["num_full_blocks"].GetUint64(), 64u);

  // Counts the detail leaves unset are absent, not zero.
  rbln::artifact::v1::ErrorDetail cas;
  cas.set_reason(rbln::artifact::v1::ErrorDetail::CAS_MISMATCH);
  cas.set_current_num_blocks(0);
  rapidjson::Document cas_doc = ParseJsonLine(FormatJsonError(
      CallFailure(Writer(), absl::AbortedError("stale"), true, &cas)));
  const rapidjson::Value& cas_details = cas_doc["error"]["details"];
  EXPECT_STREQ(cas_details["reason"].GetString(), "CAS_MISMATCH");
  EXPECT_EQ(cas_details["current_num_blocks"].GetUint64(), 0u);
  EXPECT_FALSE(cas_details.HasMember("num_min_blocks"));
  EXPECT_FALSE(cas_details.HasMember("num_full_blocks"));
  EXPECT_FALSE(cas_details.HasMember("max_fitting_num_blocks"));

  // A count the device cannot hold says the largest that fits.
  rbln::artifact::v1::ErrorDetail exceeds;
  exceeds.set_reason(rbln::artifact::v1::ErrorDetail::EXCEEDS_DEVICE);
  exceeds.set_max_fitting_num_blocks(23);
  rapidjson::Document exceeds_doc = ParseJsonLine(FormatJsonError(CallFailure(
      Writer(), absl::FailedPreconditionError("too big"), true, &exceeds)));
  const rapidjson::Value& exceeds_details = exceeds_doc["error"]["details"];
  EXPECT_STREQ(exceeds_details["reason"].GetString(), "EXCEEDS_DEVICE");
  EXPECT_EQ(exceeds_details["max_fitting_num_blocks"].GetUint64(), 23u);
}

TEST(FailureTest, AlreadyExistsNamesReplace) {
  const absl::Status exists = absl::AlreadyExistsError(
      "output directory copy already exists; choose a new directory");
  Failure copy = CallFailure(Writer("/srv/store/copy"), exists, true);
  EXPECT_EQ(copy.exit_code, kExitFailed);
  EXPECT_THAT(copy.text, HasSubstr("exists; choose a new directory; add "
                                   "--replace to replace it\n"));
  EXPECT_THAT(copy.status.message(), HasSubstr("add --replace"));
  EXPECT_EQ(Detail(copy, "output_dir"), "/srv/store/copy");
  // Without --output-dir (an operation id in use) there is nothing to replace.
  EXPECT_THAT(CallFailure(Writer(), exists, true).text,
              Not(HasSubstr("--replace")));
}

TEST(FailureTest, InterruptedWriteSaysTheOutcomeIsUnknown) {
  const absl::Status closed = absl::UnavailableError("Socket closed");
  Failure in_place = CallFailure(Writer(), closed, /*replied=*/false);
  EXPECT_EQ(in_place.exit_code, kExitInterrupted);
  EXPECT_EQ(in_place.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(in_place.text,
            "rbln-artifact: error (UNAVAILABLE): the daemon closed the "
            "connection during the write; the artifact is either unchanged "
            "or fully at the new count; check with --get-kvcache-num-blocks "
            "--model-id /srv/store/llama (gRPC: UNAVAILABLE: Socket "
            "closed)\n");
  EXPECT_EQ(Detail(in_place, "outcome"), "unknown");

  Failure copy = CallFailure(Writer("/srv/store/copy"), closed, false);
  EXPECT_THAT(copy.text, HasSubstr("the output directory is either as it was "
                                   "or holds the complete resized copy; check "
                                   "with --get-kvcache-num-blocks --model-id "
                                   "/srv/store/copy (gRPC: "));
  Failure late = CallFailure(
      Writer(), absl::DeadlineExceededError("Deadline Exceeded"), false);
  EXPECT_EQ(late.exit_code, kExitInterrupted);
  EXPECT_THAT(late.text, HasSubstr("no reply from the daemon in time during "
                                   "the write"));
  // Unmarked, but no transport gives these: a server's answer.
  for (const absl::Status& answer : {absl::UnimplementedError("unknown method"),
                                     absl::AbortedError("count is 32")}) {
    Failure failure = CallFailure(Writer(), answer, /*replied=*/false);
    EXPECT_EQ(failure.exit_code, kExitFailed) << answer;
    EXPECT_EQ(failure.text, FormatError(answer));
  }
}

TEST(FailureTest, InterruptedReadChangedNothing) {
  CliOptions get;
  get.operation = Operation::kGet;
  get.model_id = "/srv/store/llama";
  Failure read = CallFailure(get, absl::UnavailableError("Socket closed"),
                             /*replied=*/false);
  EXPECT_EQ(read.exit_code, kExitInterrupted);
  EXPECT_THAT(read.text, HasSubstr("the daemon closed the connection before "
                                   "replying; nothing was changed (a read "
                                   "changes nothing); retry (gRPC: "
                                   "UNAVAILABLE: Socket closed)\n"));
  EXPECT_EQ(Detail(read, "outcome"), "unchanged");
  CliOptions dry_run = Writer();
  dry_run.dry_run = true;
  EXPECT_THAT(CallFailure(dry_run, absl::CancelledError("gone"), false).text,
              HasSubstr("(a dry run changes nothing)"));
}

TEST(FailureTest, ConnectionFailures) {
  Failure unreachable = UnreachableFailure("unix:/run/x.sock");
  EXPECT_EQ(unreachable.exit_code, kExitUnreachable);
  EXPECT_EQ(unreachable.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(unreachable.text, FormatUnreachable("unix:/run/x.sock"));
  EXPECT_EQ(Detail(unreachable, "server"), "unix:/run/x.sock");

  Failure denied = SocketDeniedFailure(
      "/run/x.sock", 65534,
      SocketFile{.owner = "root", .group = "rbln", .mode = 0140660});
  EXPECT_EQ(denied.exit_code, kExitDenied);
  EXPECT_EQ(denied.status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(denied.text,
            "rbln-artifact: permission denied on the socket /run/x.sock (you "
            "are uid 65534; the socket is root:rbln 0660); ask for its group "
            "or run as its owner\n");
  EXPECT_THAT(SocketDeniedFailure("/run/x.sock", 1000, std::nullopt).text,
              HasSubstr("(you are uid 1000; a directory on its path is closed "
                        "to you)"));
}

TEST(FormatTest, WaitingForLockNamesWhatIsWritten) {
  EXPECT_EQ(FormatWaitingForLock(Writer()),
            "waiting for another write to /srv/store/llama to finish\u2026\n");
  EXPECT_EQ(FormatWaitingForLock(Writer("/srv/store/copy")),
            "waiting for another write to /srv/store/llama or /srv/store/copy "
            "to finish\u2026\n");
}

TEST(FormatTest, Diagnostics) {
  google::protobuf::RepeatedPtrField<std::string> warnings;
  *warnings.Add() = "128 is above the compiled count 64";
  *warnings.Add() = "does not fit";
  EXPECT_EQ(FormatWarnings(warnings),
            "warning: 128 is above the compiled count 64\n"
            "warning: does not fit\n");
  EXPECT_EQ(
      FormatError(absl::FailedPreconditionError("budget fits 1 block")),
      "rbln-artifact: error (FAILED_PRECONDITION): budget fits 1 block\n");
  EXPECT_THAT(
      FormatUnreachable("unix:/run/rbln-artifactd/rbln-artifactd.sock"),
      HasSubstr("rbln-artifact: cannot reach rbln-artifactd at "
                "unix:/run/rbln-artifactd/rbln-artifactd.sock. Start it with: "
                "rbln-artifactd --store DIR --listen "
                "unix:/run/rbln-artifactd/rbln-artifactd.sock\n"));
}

TEST(FormatTest, ProgressBar) {
  uint64_t gib = uint64_t{1} << 30;
  EXPECT_EQ(FormatProgressBar(0, 2 * gib),
            "\r[..............................]   0%  0.00 / 2.00 GiB");
  EXPECT_EQ(FormatProgressBar(gib, 0),
            "\r[..............................]   0%  1.00 / 0.00 GiB");
  EXPECT_EQ(FormatProgressBar(gib, 2 * gib),
            "\r[###############...............]  50%  1.00 / 2.00 GiB");
  EXPECT_EQ(FormatProgressBar(3 * gib, 2 * gib),
            "\r[##############################] 100%  3.00 / 2.00 GiB");
}

}  // namespace
}  // namespace rbln::client
