#include "client/flags.h"

#include <algorithm>
#include <memory>
#include <sstream>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/defaults.h"
#include "common/flag_errors.h"
#include "common/help_format.h"
#include "common/server_address.h"
#include "common/version.h"
#include "core/budget.h"
#include "core/text.h"
#include "rapidjson/encodings.h"
#include "rapidjson/memorystream.h"

namespace rbln::client {
namespace {

constexpr char kDescription[] =
    "Reads and changes kvcache_num_blocks of compiled NPU model artifacts "
    "held by the rbln-artifactd daemon, without recompiling them. The flags "
    "are those of optimum-rbln-cli.";

// After the options, in 80 columns. It starts with "Examples:", a heading
// help2man takes for a section: the man page's include file
// (man/rbln-artifact.h2m) replaces that section, and so all of this, with
// its own, which has every example here (tests/man_pages_test.py).
constexpr char kFooter[] =
    "Examples:\n"
    "  rbln-artifact --get-kvcache-num-blocks --model-id ./my_artifact\n"
    "  rbln-artifact --set-kvcache-num-blocks 16 --model-id ./my_artifact\n"
    "  rbln-artifact --set-memory-budget 0.8 --model-id ./my_artifact\n"
    "  rbln-artifact --set-memory-budget 10GB --model-id ./my_artifact \\\n"
    "      --output-dir ./my_artifact_10gb\n"
    "\n"
    "Paths: over a Unix socket a relative --model-id or --output-dir is\n"
    "resolved against the current directory; over TCP it is relative to the\n"
    "daemon's store. Either way it must lie inside the daemon's store or one\n"
    "of its read-only roots; NAME:PATH names PATH in the read-only root NAME\n"
    "(rbln-artifactd --read-only-root NAME=DIR), which is read and copied\n"
    "with --output-dir, never changed.\n"
    "\n"
    "Environment: RBLN_ARTIFACTD_ADDRESS (unix:PATH, HOST:PORT or an\n"
    "absolute socket path) sets the default --server; RBLN_ARTIFACTD_SOCKET\n"
    "(a socket path) is its older alias. Without them: the system daemon's\n"
    "/run/rbln-artifactd/rbln-artifactd.sock when it exists (or for root),\n"
    "else $XDG_RUNTIME_DIR/rbln-artifactd.sock, else\n"
    "/tmp/rbln-artifactd-UID.sock.\n"
    "\n"
    "--json: the reply as one line of JSON; 64-bit counts and byte sizes are\n"
    "JSON numbers (exact integer literals, even above 2^53, where readers\n"
    "that use doubles, like jq, round them). On any error (usage errors too)\n"
    "stdout gets one line {\"error\": {\"code\": \"ABORTED\", "
    "\"code_number\":\n"
    "10, \"message\": \"...\", \"details\": {...}}} and stderr the message.\n"
    "\n"
    "Exit codes:\n"
    "  0  success\n"
    "  1  the daemon refused or failed the request (its message is printed)\n"
    "  2  usage error; nothing was sent\n"
    "  3  cannot connect to the daemon (not running at the address)\n"
    "  4  permission denied on the daemon's socket, or not authenticated\n"
    "  5  interrupted: the connection closed before the daemon replied. A\n"
    "     write then either changed nothing or completed (check with\n"
    "     --get-kvcache-num-blocks); a read or dry run changed nothing (retry)";

// `text` as a decimal integer >= 1 that fits in 64 bits, as Python's int()
// reads it ("012" is 12: CLI11's own conversion would read it as octal).
std::optional<uint64_t> PositiveInteger(const std::string& text) {
  uint64_t value = 0;
  bool digits_only =
      !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
        return absl::ascii_isdigit(static_cast<unsigned char>(c));
      });
  if (!digits_only || !absl::SimpleAtoi(text, &value) || value == 0) {
    return std::nullopt;
  }
  return value;
}

// CLI11 validator of PositiveInteger.
std::string CheckPositiveInteger(const std::string& text) {
  if (PositiveInteger(text).has_value()) return "";
  return absl::StrCat("N must be a positive integer, got '", text, "'");
}

// The flags as parsed, before validation.
struct RawFlags {
  bool get = false;
  std::string set;  // PositiveInteger's text
  std::string budget;
  bool describe = false;
  bool list = false;
  bool device_info = false;
  bool server_info = false;
  std::string prefix;
  std::vector<std::string> colocate;
  std::string weights;
  std::string devices;
  std::vector<std::string> beside;
  std::string model_id;
  std::string output_dir;
  bool replace = false;
  bool dry_run = false;
  bool force = false;
  std::string expect;  // PositiveInteger's text
  bool verify = false;
  std::string server;
  bool json = false;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string token_file;

  CLI::Option* get_opt = nullptr;
  CLI::Option* set_opt = nullptr;
  CLI::Option* budget_opt = nullptr;
  CLI::Option* describe_opt = nullptr;
  CLI::Option* list_opt = nullptr;
  CLI::Option* device_info_opt = nullptr;
  CLI::Option* server_info_opt = nullptr;
  CLI::Option* prefix_opt = nullptr;
  CLI::Option* colocate_opt = nullptr;
  CLI::Option* weights_opt = nullptr;
  CLI::Option* devices_opt = nullptr;
  CLI::Option* beside_opt = nullptr;
  CLI::Option* model_id_opt = nullptr;
  CLI::Option* output_dir_opt = nullptr;
  CLI::Option* replace_opt = nullptr;
  CLI::Option* dry_run_opt = nullptr;
  CLI::Option* expect_opt = nullptr;
  CLI::Option* force_opt = nullptr;
  CLI::Option* verify_opt = nullptr;
  CLI::Option* server_opt = nullptr;
};

// The operations, one of which a command line must choose.
void DefineOperationFlags(CLI::App& app, RawFlags& f) {
  const std::string ops = "Operations (exactly one)";
  f.get_opt = app.add_flag("--get-kvcache-num-blocks", f.get,
                           "Print the artifact's kvcache_num_blocks")
                  ->group(ops);
  f.set_opt = app.add_option("--set-kvcache-num-blocks", f.set,
                             "Resize the KV cache of every *.rbln of the "
                             "artifact to N blocks")
                  ->type_name("N")
                  ->check(CheckPositiveInteger)
                  ->group(ops);
  f.budget_opt = app.add_option("--set-memory-budget", f.budget,
                                "Resize to the largest block count that fits "
                                "BUDGET: a fraction of the NPU's available "
                                "DRAM (0.8, 1.0), a percentage (80%), or bytes "
                                "per device (10GB, 10GiB, 80B; KB, MB, GB, TB "
                                "are binary as in optimum-rbln-cli, so 10GB = "
                                "10GiB; a bare number is bytes only from "
                                "1048576 up, and a bare 1 is refused: it is "
                                "one byte to optimum-rbln-cli), or free / "
                                "free-90%: what is free on each device now, "
                                "as rbln-smi says (every loaded model counts, "
                                "this one too if loaded)")
                     ->type_name("BUDGET")
                     ->group(ops);
  f.describe_opt = app.add_flag("--describe", f.describe,
                                "Print the artifact's memory plan per node "
                                "and chiplet")
                       ->group(ops);
  f.list_opt =
      app.add_flag("--list", f.list,
                   "List the artifacts in the daemon's store and read-only "
                   "roots, and what was skipped and why, page by page; with "
                   "--json as JSON Lines (one object per artifact, then per "
                   "skipped entry, then not_readable)")
          ->group(ops);
  f.prefix_opt =
      app.add_option("--prefix", f.prefix,
                     "With --list: only the artifacts whose names start with "
                     "P (plain text: team3 also matches team30/x; team3/ is "
                     "the folder)")
          ->type_name("P")
          ->group(ops);
  f.device_info_opt =
      app.add_flag("--device-info", f.device_info,
                   "Print the NPU devices and DRAM figures the daemon uses, "
                   "and their source")
          ->group(ops);
  f.server_info_opt = app.add_flag("--server-info", f.server_info,
                                   "Print what the daemon is: its version and "
                                   "commit, host, store and read-only roots, "
                                   "listeners and codec, and who you are to it")
                          ->group(ops);
  std::vector<CLI::Option*> operations = {
      f.get_opt,  f.set_opt,         f.budget_opt,     f.describe_opt,
      f.list_opt, f.device_info_opt, f.server_info_opt};
  for (size_t i = 0; i < operations.size(); ++i) {
    for (size_t j = i + 1; j < operations.size(); ++j) {
      operations[i]->excludes(operations[j]);
    }
  }
}

// Several artifacts on one device group.
void DefineGroupFlags(CLI::App& app, RawFlags& f) {
  const std::string group = "Sharing a device";
  f.colocate_opt =
      app.add_option("--colocate", f.colocate,
                     "With --set-memory-budget: size these artifacts "
                     "together, so that all of them fit the budget at once "
                     "(node i of each on device i), and write them; with "
                     "--describe: their shared plan at the current counts")
          ->type_name("DIR...")
          ->expected(1, -1)
          ->group(group);
  f.weights_opt =
      app.add_option("--weights", f.weights,
                     "With --colocate: each artifact's weight in the shares, "
                     "whole numbers from 1 to 1000, one per artifact "
                     "(default: 1 each)")
          ->type_name("W,W,...")
          ->group(group);
  f.devices_opt =
      app.add_option("--devices", f.devices,
                     "With a free budget (--set-memory-budget free or "
                     "free-90%): which of the probed devices the nodes sit "
                     "on, node i on the i-th (default: in index order)")
          ->type_name("I,J,...")
          ->group(group);
  f.beside_opt =
      app.add_option("--beside", f.beside,
                     "With --set-memory-budget or --set-kvcache-num-blocks: "
                     "another artifact on the same devices, whose whole "
                     "memory at its current count is reserved first; "
                     "repeatable")
          ->type_name("DIR")
          ->take_all()
          ->group(group);
}

// What names the artifact and how it is read.
void DefineArtifactFlags(CLI::App& app, RawFlags& f) {
  const std::string artifact = "Artifact";
  f.model_id_opt = app.add_option("--model-id", f.model_id,
                                  "The compiled artifact directory (needed by "
                                  "every operation but --list, --device-info "
                                  "and --server-info)")
                       ->type_name("DIR")
                       ->group(artifact);
  f.verify_opt = app.add_flag("--verify", f.verify,
                              "With --describe: also read every payload and "
                              "verify its checksums. With a write: verify "
                              "them before copying, and refuse a corrupt "
                              "artifact (payloads up to 64 MiB are always "
                              "checked; slow for big artifacts)")
                     ->group(artifact);
}

// How a write goes.
void DefineWritingFlags(CLI::App& app, RawFlags& f) {
  const std::string writing =
      "Writing (with --set-kvcache-num-blocks or --set-memory-budget)";
  f.output_dir_opt = app.add_option("-o,--output-dir", f.output_dir,
                                    "Write a full resized copy to DIR (a new "
                                    "directory) and leave the source untouched")
                         ->type_name("DIR")
                         ->group(writing);
  f.replace_opt = app.add_flag("--replace", f.replace,
                               "With --output-dir: replace an existing DIR "
                               "atomically")
                      ->group(writing);
  f.dry_run_opt = app.add_flag("--dry-run", f.dry_run,
                               "Compute and report the new count and "
                               "warnings; write nothing")
                      ->group(writing);
  f.expect_opt = app.add_option("--expect", f.expect,
                                "Compare-and-set: change nothing (exit 1) "
                                "unless the current count is N")
                     ->type_name("N")
                     ->check(CheckPositiveInteger)
                     ->group(writing);
  f.force_opt = app.add_flag("--force", f.force,
                             "With --set-kvcache-num-blocks: write a count "
                             "that does not fit the device's available DRAM "
                             "(refused otherwise), with a warning; never "
                             "below the minimum, past --expect or "
                             "--replace")
                    ->group(writing);
}

// The daemon's address, TLS and token, the output form, help and version.
void DefineConnectionFlags(CLI::App& app, RawFlags& f,
                           absl::string_view default_server) {
  const std::string other = "Connection and output";
  f.server = std::string(default_server);
  f.server_opt =
      app.add_option("--server", f.server,
                     absl::StrCat("Daemon address: unix:PATH, HOST:PORT or "
                                  "an absolute path (a Unix socket); default: ",
                                  default_server, " ($", kAddressEnv,
                                  ", else $", kSocketEnv, ", else built in)"))
          ->type_name("ADDR")
          ->group(other);
  app.add_option("--tls-ca", f.tls_ca,
                 "Connect over TLS, trusting the daemon's "
                 "certificate if this CA (PEM) issued it; TCP "
                 "--server only")
      ->type_name("FILE")
      ->group(other);
  app.add_option("--tls-cert", f.tls_cert,
                 "This client's certificate (PEM), for a daemon "
                 "that requires one (--tls-client-ca); with "
                 "--tls-key")
      ->type_name("FILE")
      ->group(other);
  app.add_option("--tls-key", f.tls_key, "The private key of --tls-cert (PEM)")
      ->type_name("FILE")
      ->group(other);
  app.add_option("--token-file", f.token_file,
                 "Send the bearer token on this file's first "
                 "line (the daemon's --tokens holds its SHA-256); "
                 "needs --tls-ca")
      ->type_name("FILE")
      ->group(other);
  app.add_flag("--json", f.json,
               "Print the daemon's reply as one line of JSON "
               "(proto field names, every field present but an "
               "optional one left unset, 64-bit integers as "
               "numbers); on error an \"error\" object (below)")
      ->group(other);
  app.set_help_flag("-h,--help", "Print this help and exit")->group(other);
  app.set_version_flag("--version", VersionLine(kProgramName),
                       "Print this client's version and git commit, and "
                       "exit (--server-info: the daemon's)")
      ->group(other);
}

// Every flag of `app`, into `f`, in the order --help lists them.
void DefineFlags(CLI::App& app, RawFlags& f, absl::string_view default_server) {
  app.formatter(std::make_shared<HelpFormatter>());
  app.footer(kFooter);
  // Re-added last so that it is listed after the operations.
  app.set_help_flag();
  DefineOperationFlags(app, f);
  DefineArtifactFlags(app, f);
  DefineWritingFlags(app, f);
  DefineGroupFlags(app, f);
  DefineConnectionFlags(app, f, default_server);
}

absl::Status UsageError(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

// Whether `s` is UTF-8 (RFC 3629: no overlong forms, no surrogates), by
// rapidjson's validator.
bool IsUtf8(absl::string_view s) {
  rapidjson::MemoryStream in(s.data(), s.size());
  struct Discard {
    void Put(char) {}
  } out;
  while (in.Tell() < s.size()) {
    if (!rapidjson::UTF8<>::Validate(in, out)) return false;
  }
  return true;
}

// The operation a command line chose, and the flag that chose it.
struct ChosenOperation {
  Operation operation = Operation::kGet;
  std::string flag;
};

// CLI11 lets at most one operation through; this asks for one.
absl::StatusOr<ChosenOperation> ChooseOperation(const RawFlags& f) {
  const std::pair<const CLI::Option*, Operation> operations[] = {
      {f.get_opt, Operation::kGet},
      {f.set_opt, Operation::kSet},
      {f.budget_opt, Operation::kFitBudget},
      {f.describe_opt, Operation::kDescribe},
      {f.list_opt, Operation::kList},
      {f.device_info_opt, Operation::kDeviceInfo},
      {f.server_info_opt, Operation::kServerInfo}};
  for (const auto& [opt, operation] : operations) {
    if (opt->count() > 0) return ChosenOperation{operation, opt->get_name()};
  }
  return UsageError(
      "choose one operation: --get-kvcache-num-blocks, "
      "--set-kvcache-num-blocks N, --set-memory-budget BUDGET, --describe, "
      "--list, --device-info or --server-info");
}

// --colocate and what goes with it; the weights into `weights`.
absl::Status CheckColocate(const RawFlags& f, const ChosenOperation& op,
                           std::vector<uint32_t>* weights) {
  if (f.colocate_opt->count() == 0) {
    if (f.weights_opt->count() > 0) {
      return UsageError("--weights goes only with --colocate");
    }
    return absl::OkStatus();
  }
  if (op.operation != Operation::kFitBudget &&
      op.operation != Operation::kDescribe) {
    return UsageError(absl::StrCat(
        "--colocate goes with --set-memory-budget BUDGET or --describe, not "
        "with ",
        op.flag));
  }
  for (const CLI::Option* opt :
       {f.model_id_opt, f.output_dir_opt, f.replace_opt, f.expect_opt,
        f.force_opt, f.verify_opt, f.beside_opt}) {
    if (opt->count() > 0) {
      return UsageError(absl::StrCat(
          opt->get_name(), " does not go with --colocate",
          opt == f.expect_opt ? " (each artifact is written with "
                                "compare-and-set on the count it was "
                                "planned from)"
                              : ""));
    }
  }
  for (size_t i = 0; i < f.colocate.size(); ++i) {
    if (f.colocate[i].empty() || absl::StartsWith(f.colocate[i], "-")) {
      return UsageError(
          absl::StrCat("--colocate needs artifact directories, "
                       "got '",
                       f.colocate[i], "'"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (f.colocate[i] == f.colocate[j]) {
        return UsageError(absl::StrCat("--colocate names ", f.colocate[i],
                                       " twice; give each artifact once"));
      }
    }
  }
  if (f.weights_opt->count() == 0) return absl::OkStatus();
  for (absl::string_view text : absl::StrSplit(f.weights, ',')) {
    uint32_t weight = 0;
    if (!absl::SimpleAtoi(text, &weight) || weight < 1 || weight > 1000) {
      return UsageError(absl::StrCat(
          "--weights: '", text,
          "' is not a whole number from 1 to 1000 (write them as 2,1,1)"));
    }
    weights->push_back(weight);
  }
  if (weights->size() != f.colocate.size()) {
    return UsageError(absl::StrCat(
        "--weights gives ", weights->size(), " weight(s) for the ",
        f.colocate.size(), " artifact(s) of --colocate: give one each"));
  }
  return absl::OkStatus();
}

// The flags that go only with some operations go with the one chosen.
absl::Status CheckFlagsGoWith(const RawFlags& f, const ChosenOperation& op) {
  const Operation operation = op.operation;
  const std::string& op_flag = op.flag;
  bool names_artifact = operation != Operation::kList &&
                        operation != Operation::kDeviceInfo &&
                        operation != Operation::kServerInfo;
  if (names_artifact && f.model_id_opt->count() == 0 &&
      f.colocate_opt->count() == 0) {
    return UsageError(absl::StrCat(op_flag, " needs --model-id DIR"));
  }
  if (!names_artifact && f.model_id_opt->count() > 0) {
    return UsageError(absl::StrCat("--model-id does not go with ", op_flag));
  }
  if (!IsWriter(operation)) {
    for (const CLI::Option* opt :
         {f.output_dir_opt, f.replace_opt, f.dry_run_opt, f.expect_opt}) {
      if (opt->count() > 0) {
        return UsageError(absl::StrCat(
            opt->get_name(),
            " goes only with --set-kvcache-num-blocks or --set-memory-budget, "
            "not with ",
            op_flag));
      }
    }
  }
  if (f.prefix_opt->count() > 0 && operation != Operation::kList) {
    return UsageError(
        absl::StrCat("--prefix goes only with --list, not with ", op_flag));
  }
  if (f.replace_opt->count() > 0 && f.output_dir_opt->count() == 0) {
    return UsageError("--replace needs --output-dir DIR");
  }
  if (f.force_opt->count() > 0 && operation != Operation::kSet) {
    return UsageError(absl::StrCat(
        "--force goes only with --set-kvcache-num-blocks, not with ", op_flag,
        operation == Operation::kFitBudget
            ? " (the count a budget fits always fits the device)"
            : ""));
  }
  if (f.verify_opt->count() > 0 && operation != Operation::kDescribe &&
      !IsWriter(operation)) {
    return UsageError(absl::StrCat(
        "--verify goes only with --describe, --set-kvcache-num-blocks or "
        "--set-memory-budget, not with ",
        op_flag));
  }
  return absl::OkStatus();
}

// --model-id and --output-dir are paths the daemon can take, and a budget is
// one the grammar reads.
absl::Status CheckValues(const RawFlags& f, Operation operation) {
  // CLI11 takes the next argument as a value even when it is a flag, so
  // "--output-dir --dry-run" would write to "./--dry-run"; argparse (and so
  // optimum-rbln-cli) refuses that, and so do we.
  for (const auto& [opt, value] :
       {std::pair{f.model_id_opt, &f.model_id},
        std::pair{f.output_dir_opt, &f.output_dir}}) {
    if (opt->count() > 0 && absl::StartsWith(*value, "-")) {
      return UsageError(absl::StrCat(opt->get_name(), " needs a value, got '",
                                     *value, "' (a flag?); write ./", *value,
                                     " for a path that starts with '-'"));
    }
  }
  // A budget is never a path: "--set-memory-budget --dry-run" lost its
  // value, and "-1" is a number the grammar refuses.
  if (f.budget_opt->count() > 0 && absl::StartsWith(f.budget, "--")) {
    return UsageError(absl::StrCat("--set-memory-budget needs a value, got '",
                                   f.budget, "' (a flag?)"));
  }
  if (f.model_id_opt->count() > 0 && f.model_id.empty()) {
    return UsageError("--model-id must not be empty");
  }
  if (f.output_dir_opt->count() > 0 && f.output_dir.empty()) {
    return UsageError("--output-dir must not be empty");
  }
  // The request's strings are proto3 strings: the daemon could not even
  // parse a request with other bytes, and would refuse it without naming
  // the flag (docs/security.md). Say so here instead, with the bytes
  // escaped.
  for (const auto& [opt, value] :
       {std::pair{f.model_id_opt, &f.model_id},
        std::pair{f.output_dir_opt, &f.output_dir}}) {
    if (opt->count() > 0 && !IsUtf8(*value)) {
      return UsageError(absl::StrCat(
          opt->get_name(), " is not valid UTF-8 (", Echo(*value),
          "); the daemon takes UTF-8 names only: rename the directory, or "
          "use a symbolic link with a UTF-8 name"));
    }
  }
  if (operation == Operation::kFitBudget && f.budget.empty()) {
    return UsageError("--set-memory-budget must not be empty");
  }
  // The daemon parses the budget again; checking it here answers a typo
  // without a daemon, in the same words.
  if (operation == Operation::kFitBudget) {
    absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse(f.budget);
    if (!budget.ok()) {
      return UsageError(
          absl::StrCat("--set-memory-budget: ", budget.status().message()));
    }
  }
  return absl::OkStatus();
}

// The daemon's address as gRPC takes it, with TLS and a token only where
// they can be used.
absl::StatusOr<std::string> CheckConnection(const RawFlags& f) {
  absl::StatusOr<ServerAddress> server = ParseServerAddress(f.server);
  if (!server.ok()) {
    // The built-in default is always valid: a bad one came from the
    // environment.
    return UsageError(
        absl::StrCat(f.server_opt->count() > 0
                         ? "--server"
                         : absl::StrCat("the default address (from $",
                                        kAddressEnv, " or $", kSocketEnv, ")"),
                     ": ", server.status().message()));
  }

  const bool tls_flags = !f.tls_ca.empty() || !f.tls_cert.empty() ||
                         !f.tls_key.empty() || !f.token_file.empty();
  if (tls_flags && server->kind != ServerAddress::Kind::kTcp) {
    return UsageError(
        "--tls-ca, --tls-cert, --tls-key and --token-file go only with a TCP "
        "--server HOST:PORT; on a Unix socket the daemon knows the caller by "
        "its uid");
  }
  if (f.tls_cert.empty() != f.tls_key.empty()) {
    return UsageError("--tls-cert and --tls-key go together");
  }
  if (!f.token_file.empty() && f.tls_ca.empty()) {
    return UsageError(
        "--token-file needs --tls-ca FILE: a token is sent only over TLS");
  }
  return GrpcTarget(*server);
}

// The checks CLI11 cannot express (beyond the operations' exclusions).
absl::StatusOr<CliOptions> Validate(const RawFlags& f) {
  absl::StatusOr<ChosenOperation> chosen = ChooseOperation(f);
  if (!chosen.ok()) return chosen.status();
  std::vector<uint32_t> weights;
  std::vector<int> devices;
  absl::Status checked = CheckColocate(f, *chosen, &weights);
  if (checked.ok() && f.beside_opt->count() > 0 &&
      !IsWriter(chosen->operation)) {
    checked = UsageError(
        absl::StrCat("--beside goes only with --set-memory-budget or "
                     "--set-kvcache-num-blocks, not with ",
                     chosen->flag));
  }
  if (checked.ok() && f.devices_opt->count() > 0) {
    if (chosen->operation != Operation::kFitBudget) {
      checked = UsageError(absl::StrCat(
          "--devices goes only with --set-memory-budget, not with ",
          chosen->flag));
    } else if (absl::StatusOr<std::vector<int>> list =
                   ParseDeviceList(f.devices);
               !list.ok()) {
      checked =
          UsageError(absl::StrCat("--devices: ", list.status().message()));
    } else {
      devices = *std::move(list);
    }
  }
  if (checked.ok()) checked = CheckFlagsGoWith(f, *chosen);
  if (checked.ok()) checked = CheckValues(f, chosen->operation);
  if (!checked.ok()) return checked;
  absl::StatusOr<std::string> server = CheckConnection(f);
  if (!server.ok()) return server.status();

  CliOptions o;
  o.operation = chosen->operation;
  o.server = *std::move(server);
  o.tls_ca = f.tls_ca;
  o.tls_cert = f.tls_cert;
  o.tls_key = f.tls_key;
  o.token_file = f.token_file;
  o.model_id = f.model_id;
  if (f.set_opt->count() > 0) o.num_blocks = *PositiveInteger(f.set);
  o.budget = f.budget;
  o.output_dir = f.output_dir;
  o.replace = f.replace;
  o.dry_run = f.dry_run;
  o.force = f.force;
  if (f.expect_opt->count() > 0) {
    o.expected_current = PositiveInteger(f.expect);
  }
  o.verify = f.verify;
  o.prefix = f.prefix;
  o.colocate = f.colocate;
  o.weights = std::move(weights);
  o.devices = std::move(devices);
  o.beside = f.beside;
  o.json = f.json;
  return o;
}

}  // namespace

ParsedCommandLine ParseCommandLine(const std::vector<std::string>& args,
                                   absl::string_view default_server,
                                   std::ostream& out, std::ostream& err) {
  CLI::App app(kDescription, kProgramName);
  RawFlags flags;
  DefineFlags(app, flags, default_server);
  ParsedCommandLine result;
  // The parse may fail before --json is known: its presence decides.
  const bool json = std::find(args.begin(), args.end(), "--json") != args.end();
  std::ostringstream parse_err;
  std::optional<int> exit_code =
      ParseFlags(app, args, kProgramName,
                 {.usage = kExitUsage, .config = kExitUsage}, out, parse_err);
  err << parse_err.str();
  if (exit_code.has_value()) {
    result.exit_code = *exit_code == 0 ? kExitOk : *exit_code;
    if (json && *exit_code != 0) {
      // The message alone: without the program name and the --help line.
      const std::string text = parse_err.str();
      absl::string_view message = text;
      absl::ConsumePrefix(&message, absl::StrCat(kProgramName, ": "));
      message = message.substr(0, message.find('\n'));
      out << FormatJsonError(UsageFailure(message));
    }
    return result;
  }
  absl::StatusOr<CliOptions> options = Validate(flags);
  if (!options.ok()) {
    result.exit_code =
        ReportFailure(UsageFailure(options.status().message()), json, out, err);
    return result;
  }
  result.options = *std::move(options);
  return result;
}

}  // namespace rbln::client
