#include "client/cli.h"

#include <algorithm>
#include <memory>
#include <sstream>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/defaults.h"
#include "common/flag_errors.h"
#include "common/server_address.h"
#include "common/version.h"
#include "core/budget.h"
#include "core/store/artifact_name.h"
#include "core/text.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "rapidjson/document.h"
#include "rapidjson/memorystream.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace rbln::client {
namespace {

namespace v1 = ::rbln::artifact::v1;

constexpr char kProgramName[] = "rbln-artifact";

constexpr char kDescription[] =
    "Reads and changes kvcache_num_blocks of compiled NPU model artifacts "
    "held by the rbln-artifactd daemon, without recompiling them. The flags "
    "are those of optimum-rbln-cli.";

constexpr char kFooter[] =
    "Examples:\n"
    "  rbln-artifact --get-kvcache-num-blocks --model-id ./my_artifact\n"
    "  rbln-artifact --set-kvcache-num-blocks 16 --model-id ./my_artifact\n"
    "  rbln-artifact --set-memory-budget 0.8 --model-id ./my_artifact\n"
    "  rbln-artifact --set-memory-budget 10GB --model-id ./my_artifact "
    "--output-dir ./my_artifact_10gb\n"
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

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string GiB(uint64_t bytes) {
  return absl::StrFormat("%.2f", static_cast<double>(bytes) / kGiB);
}

std::string SignedGiB(int64_t bytes) {
  return absl::StrFormat("%.2f", static_cast<double>(bytes) / kGiB);
}

// Help text fits 80 columns: option names in the first kHelpNameWidth,
// descriptions wrapped in the rest.
constexpr int kHelpWidth = 80;
constexpr int kHelpNameWidth = 30;

// `text` with its spaces replaced by newlines where a line would pass `width`.
std::string Wrap(absl::string_view text, size_t width) {
  std::string wrapped;
  size_t line = 0;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (line > 0 && line + 1 + word.size() > width) {
      wrapped += "\n";
      line = 0;
    } else if (line > 0) {
      wrapped += " ";
      ++line;
    }
    absl::StrAppend(&wrapped, word);
    line += word.size();
  }
  return wrapped;
}

std::string OptionHelp(absl::string_view text) {
  return Wrap(text, kHelpWidth - kHelpNameWidth);
}

// Help lines show an option's value name only: the mutual exclusions are
// summed up in the group titles instead of repeated on every line. Groups are
// one blank line apart.
class HelpFormatter : public CLI::Formatter {
 public:
  HelpFormatter() { column_width(kHelpNameWidth); }

  std::string make_description(const CLI::App* app) const override {
    return CLI::Formatter::make_description(app) + "\n";
  }
  std::string make_usage(const CLI::App* app, std::string name) const override {
    return CLI::Formatter::make_usage(app, std::move(name)) + "\n";
  }
  std::string make_group(std::string group, bool is_positional,
                         std::vector<const CLI::Option*> opts) const override {
    std::string text = group + ":\n";
    for (const CLI::Option* opt : opts) text += make_option(opt, is_positional);
    return text;
  }
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (opt->get_type_size() == 0) return "";
    return " " + opt->get_type_name();
  }
};

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
  CLI::Option* model_id_opt = nullptr;
  CLI::Option* output_dir_opt = nullptr;
  CLI::Option* replace_opt = nullptr;
  CLI::Option* dry_run_opt = nullptr;
  CLI::Option* expect_opt = nullptr;
  CLI::Option* force_opt = nullptr;
  CLI::Option* verify_opt = nullptr;
  CLI::Option* server_opt = nullptr;
};

void DefineFlags(CLI::App& app, RawFlags& f, absl::string_view default_server) {
  app.formatter(std::make_shared<HelpFormatter>());
  app.footer(kFooter);
  // Re-added last so that it is listed after the operations.
  app.set_help_flag();

  const std::string ops = "Operations (exactly one)";
  f.get_opt =
      app.add_flag("--get-kvcache-num-blocks", f.get,
                   OptionHelp("Print the artifact's kvcache_num_blocks"))
          ->group(ops);
  f.set_opt =
      app.add_option("--set-kvcache-num-blocks", f.set,
                     OptionHelp("Resize the KV cache of every *.rbln of the "
                                "artifact to N blocks"))
          ->type_name("N")
          ->check(CheckPositiveInteger)
          ->group(ops);
  f.budget_opt =
      app.add_option("--set-memory-budget", f.budget,
                     OptionHelp("Resize to the largest block count that fits "
                                "BUDGET: a fraction of the NPU's available "
                                "DRAM (0.8, 1.0), a percentage (80%), or bytes "
                                "per device (10GB, 10GiB, 80B; KB, MB, GB, TB "
                                "are binary as in optimum-rbln-cli, so 10GB = "
                                "10GiB; a bare number is bytes only from "
                                "1048576 up, and a bare 1 is refused: it is "
                                "one byte to optimum-rbln-cli)"))
          ->type_name("BUDGET")
          ->group(ops);
  f.describe_opt =
      app.add_flag("--describe", f.describe,
                   OptionHelp("Print the artifact's memory plan per node "
                              "and chiplet"))
          ->group(ops);
  f.list_opt =
      app.add_flag("--list", f.list,
                   OptionHelp(
                       "List the artifacts in the daemon's store and read-only "
                       "roots, and what was skipped and why"))
          ->group(ops);
  f.device_info_opt =
      app.add_flag(
             "--device-info", f.device_info,
             OptionHelp(
                 "Print the NPU devices and DRAM figures the daemon uses, "
                 "and their source"))
          ->group(ops);
  f.server_info_opt =
      app.add_flag("--server-info", f.server_info,
                   OptionHelp("Print what the daemon is: its version and "
                              "commit, host, store and read-only roots, "
                              "listeners and codec, and who you are to it"))
          ->group(ops);
  std::vector<CLI::Option*> operations = {
      f.get_opt,  f.set_opt,         f.budget_opt,     f.describe_opt,
      f.list_opt, f.device_info_opt, f.server_info_opt};
  for (size_t i = 0; i < operations.size(); ++i) {
    for (size_t j = i + 1; j < operations.size(); ++j) {
      operations[i]->excludes(operations[j]);
    }
  }

  const std::string artifact = "Artifact";
  f.model_id_opt =
      app.add_option("--model-id", f.model_id,
                     OptionHelp("The compiled artifact directory (needed by "
                                "every operation but --list, --device-info "
                                "and --server-info)"))
          ->type_name("DIR")
          ->group(artifact);
  f.verify_opt =
      app.add_flag("--verify", f.verify,
                   OptionHelp("With --describe: also read every payload and "
                              "verify its checksums. With a write: verify "
                              "them before copying, and refuse a corrupt "
                              "artifact (payloads up to 64 MiB are always "
                              "checked; slow for big artifacts)"))
          ->group(artifact);

  const std::string writing =
      "Writing (with --set-kvcache-num-blocks or --set-memory-budget)";
  f.output_dir_opt =
      app.add_option("-o,--output-dir", f.output_dir,
                     OptionHelp("Write a full resized copy to DIR (a new "
                                "directory) and leave the source untouched"))
          ->type_name("DIR")
          ->group(writing);
  f.replace_opt =
      app.add_flag("--replace", f.replace,
                   OptionHelp("With --output-dir: replace an existing DIR "
                              "atomically"))
          ->group(writing);
  f.dry_run_opt =
      app.add_flag("--dry-run", f.dry_run,
                   OptionHelp("Compute and report the new count and "
                              "warnings; write nothing"))
          ->group(writing);
  f.expect_opt =
      app.add_option("--expect", f.expect,
                     OptionHelp("Compare-and-set: change nothing (exit 1) "
                                "unless the current count is N"))
          ->type_name("N")
          ->check(CheckPositiveInteger)
          ->group(writing);
  f.force_opt =
      app.add_flag("--force", f.force,
                   OptionHelp("With --set-kvcache-num-blocks: write a count "
                              "that does not fit the device's available DRAM "
                              "(refused otherwise), with a warning; never "
                              "below the minimum, past --expect or "
                              "--replace"))
          ->group(writing);

  const std::string other = "Connection and output";
  f.server = std::string(default_server);
  f.server_opt =
      app.add_option("--server", f.server,
                     OptionHelp(absl::StrCat(
                         "Daemon address: unix:PATH, HOST:PORT or "
                         "an absolute path (a Unix socket); default: ",
                         default_server, " ($", kAddressEnv, ", else $",
                         kSocketEnv, ", else built in)")))
          ->type_name("ADDR")
          ->group(other);
  app.add_option("--tls-ca", f.tls_ca,
                 OptionHelp("Connect over TLS, trusting the daemon's "
                            "certificate if this CA (PEM) issued it; TCP "
                            "--server only"))
      ->type_name("FILE")
      ->group(other);
  app.add_option("--tls-cert", f.tls_cert,
                 OptionHelp("This client's certificate (PEM), for a daemon "
                            "that requires one (--tls-client-ca); with "
                            "--tls-key"))
      ->type_name("FILE")
      ->group(other);
  app.add_option("--tls-key", f.tls_key,
                 OptionHelp("The private key of --tls-cert (PEM)"))
      ->type_name("FILE")
      ->group(other);
  app.add_option("--token-file", f.token_file,
                 OptionHelp("Send the bearer token on this file's first "
                            "line (the daemon's --tokens holds its SHA-256); "
                            "needs --tls-ca"))
      ->type_name("FILE")
      ->group(other);
  app.add_flag("--json", f.json,
               OptionHelp("Print the daemon's reply as one line of JSON "
                          "(proto field names, every field present but an "
                          "optional one left unset, 64-bit integers as "
                          "numbers); on error an \"error\" object (below)"))
      ->group(other);
  app.set_help_flag("-h,--help", "Print this help and exit")->group(other);
  app.set_version_flag("--version", VersionLine(kProgramName),
                       "Print this client's version and git commit, and "
                       "exit (--server-info: the daemon's)")
      ->group(other);
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

// The checks CLI11 cannot express (beyond the operations' exclusions).
absl::StatusOr<CliOptions> Validate(const RawFlags& f) {
  CliOptions o;
  std::string op_flag;
  const std::pair<const CLI::Option*, Operation> operations[] = {
      {f.get_opt, Operation::kGet},
      {f.set_opt, Operation::kSet},
      {f.budget_opt, Operation::kFitBudget},
      {f.describe_opt, Operation::kDescribe},
      {f.list_opt, Operation::kList},
      {f.device_info_opt, Operation::kDeviceInfo},
      {f.server_info_opt, Operation::kServerInfo}};
  for (const auto& [opt, operation] : operations) {
    if (opt->count() > 0) {
      o.operation = operation;
      op_flag = opt->get_name();
      break;
    }
  }
  if (op_flag.empty()) {
    return UsageError(
        "choose one operation: --get-kvcache-num-blocks, "
        "--set-kvcache-num-blocks N, --set-memory-budget BUDGET, --describe, "
        "--list, --device-info or --server-info");
  }

  bool names_artifact = o.operation != Operation::kList &&
                        o.operation != Operation::kDeviceInfo &&
                        o.operation != Operation::kServerInfo;
  if (names_artifact && f.model_id_opt->count() == 0) {
    return UsageError(absl::StrCat(op_flag, " needs --model-id DIR"));
  }
  if (!names_artifact && f.model_id_opt->count() > 0) {
    return UsageError(absl::StrCat("--model-id does not go with ", op_flag));
  }
  if (!IsWriter(o.operation)) {
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
  if (f.replace_opt->count() > 0 && f.output_dir_opt->count() == 0) {
    return UsageError("--replace needs --output-dir DIR");
  }
  if (f.force_opt->count() > 0 && o.operation != Operation::kSet) {
    return UsageError(absl::StrCat(
        "--force goes only with --set-kvcache-num-blocks, not with ", op_flag,
        o.operation == Operation::kFitBudget
            ? " (the count a budget fits always fits the device)"
            : ""));
  }
  if (f.verify_opt->count() > 0 && o.operation != Operation::kDescribe &&
      !IsWriter(o.operation)) {
    return UsageError(absl::StrCat(
        "--verify goes only with --describe, --set-kvcache-num-blocks or "
        "--set-memory-budget, not with ",
        op_flag));
  }
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
  if (o.operation == Operation::kFitBudget && f.budget.empty()) {
    return UsageError("--set-memory-budget must not be empty");
  }
  // The daemon parses the budget again; checking it here answers a typo
  // without a daemon, in the same words.
  if (o.operation == Operation::kFitBudget) {
    absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse(f.budget);
    if (!budget.ok()) {
      return UsageError(
          absl::StrCat("--set-memory-budget: ", budget.status().message()));
    }
  }
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

  o.server = GrpcTarget(*server);
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
  o.json = f.json;
  return o;
}

v1::WriteOptions BuildWriteOptions(const CliOptions& options,
                                   absl::string_view operation_id) {
  v1::WriteOptions w;
  w.set_output_dir(options.output_dir);
  w.set_replace(options.replace);
  w.set_dry_run(options.dry_run);
  w.set_verify(options.verify);
  w.set_force(options.force);
  if (options.expected_current.has_value()) {
    w.set_expected_current(*options.expected_current);
  }
  w.set_operation_id(std::string(operation_id));
  return w;
}

struct Column {
  std::string header;
  bool right_aligned = false;
};

// A table with a header row; columns two spaces apart, no trailing blanks.
std::string RenderTable(const std::vector<Column>& columns,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const Column& c : columns) widths.push_back(c.header.size());
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size() && i < widths.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  auto render_row = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t i = 0; i < columns.size(); ++i) {
      const std::string& cell = i < cells.size() ? cells[i] : "";
      if (i > 0) line += "  ";
      int width = static_cast<int>(widths[i]);
      line += columns[i].right_aligned ? absl::StrFormat("%*s", width, cell)
                                       : absl::StrFormat("%-*s", width, cell);
    }
    return absl::StrCat(absl::StripTrailingAsciiWhitespace(line), "\n");
  };
  std::vector<std::string> header;
  for (const Column& c : columns) header.push_back(c.header);
  std::string text = render_row(header);
  for (const auto& row : rows) text += render_row(row);
  return text;
}

// "label:" padded so that the values of consecutive lines align.
std::string Field(absl::string_view label, absl::string_view value) {
  return absl::StrFormat("%-13s%s\n", absl::StrCat(label, ":"), value);
}

std::string FormatFit(const v1::FitDetails& fit, uint64_t num_blocks) {
  std::string line =
      absl::StrFormat("budget %s: %s GiB per chiplet", fit.budget(),
                      GiB(fit.budget_per_chiplet()));
  int limiting = fit.limiting_bucket();
  if (limiting < 0) {
    absl::StrAppend(&line, "; the full count of ", fit.num_full_blocks(),
                    " blocks fits");
  } else if (limiting < fit.buckets_size()) {
    const v1::BucketPlan& b = fit.buckets(limiting);
    absl::StrAppend(
        &line, absl::StrFormat(
                   "; limited by node %d chiplet %d: other %s GiB, KV %s "
                   "GiB at %d blocks, %s GiB per block, headroom %s GiB",
                   b.node(), b.chiplet(), GiB(b.other_bytes()),
                   GiB(b.kv_bytes()), num_blocks, GiB(b.kv_bytes_per_block()),
                   SignedGiB(b.headroom_bytes())));
  } else {
    absl::StrAppend(&line, "; limited by bucket #", limiting);
  }
  absl::StrAppend(&line, "\n");
  // A budget is a fraction of what the daemon believes a device holds; say
  // where that came from (probe, spec table or override).
  if (!fit.dram_source().empty()) {
    absl::StrAppend(&line, "DRAM: ", fit.dram_source(), "\n");
  }
  return line;
}

// proto3's JSON mapping prints 64-bit integers as strings; makes those of
// `object` (a message of type `type`, as printed) numbers, recursively.
void Int64FieldsToNumbers(const google::protobuf::Descriptor& type,
                          rapidjson::Value& object);

void Int64ValueToNumber(const google::protobuf::FieldDescriptor& field,
                        rapidjson::Value& value) {
  using google::protobuf::FieldDescriptor;
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t n = 0;
      if (value.IsString() && absl::SimpleAtoi(value.GetString(), &n)) {
        value.SetInt64(n);
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t n = 0;
      if (value.IsString() && absl::SimpleAtoi(value.GetString(), &n)) {
        value.SetUint64(n);
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      // Well-known types have JSON forms of their own (Timestamp, ...).
      if (!absl::StartsWith(field.message_type()->full_name(),
                            "google.protobuf.")) {
        Int64FieldsToNumbers(*field.message_type(), value);
      }
      break;
    default:
      break;
  }
}

void Int64FieldsToNumbers(const google::protobuf::Descriptor& type,
                          rapidjson::Value& object) {
  if (!object.IsObject()) return;
  for (int i = 0; i < type.field_count(); ++i) {
    const google::protobuf::FieldDescriptor& field = *type.field(i);
    const std::string name(field.name());
    auto member = object.FindMember(name.c_str());
    if (member == object.MemberEnd()) continue;
    rapidjson::Value& value = member->value;
    if (field.is_map()) {
      if (!value.IsObject()) continue;
      const auto& map_value = *field.message_type()->map_value();
      for (auto& entry : value.GetObject()) {
        Int64ValueToNumber(map_value, entry.value);
      }
    } else if (field.is_repeated()) {
      if (!value.IsArray()) continue;
      for (rapidjson::Value& element : value.GetArray()) {
        Int64ValueToNumber(field, element);
      }
    } else {
      Int64ValueToNumber(field, value);
    }
  }
}

// `doc` as one line of JSON and a newline.
std::string ToJsonLine(const rapidjson::Value& doc) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  doc.Accept(writer);
  return absl::StrCat(absl::string_view(buffer.GetString(), buffer.GetSize()),
                      "\n");
}

}  // namespace

bool IsWriter(Operation operation) {
  return operation == Operation::kSet || operation == Operation::kFitBudget;
}

ParsedCommandLine ParseCommandLine(const std::vector<std::string>& args,
                                   absl::string_view default_server,
                                   std::ostream& out, std::ostream& err) {
  CLI::App app(Wrap(kDescription, kHelpWidth), kProgramName);
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

std::string FormatUsageError(absl::string_view message) {
  return FormatFlagError(kProgramName, message);
}

bool IsLocalServer(absl::string_view server) {
  return absl::StartsWith(server, "unix:");
}

bool IsRootQualifiedName(absl::string_view path) {
  const size_t colon = path.find(':');
  return colon != absl::string_view::npos && colon < path.find('/') &&
         rbln::IsValidRootName(path.substr(0, colon));
}

absl::StatusOr<std::string> ResolveArtifactPath(absl::string_view path,
                                                absl::string_view server,
                                                absl::string_view cwd) {
  if (!IsLocalServer(server) || absl::StartsWith(path, "/") ||
      IsRootQualifiedName(path)) {
    return std::string(path);
  }
  if (!absl::StartsWith(cwd, "/")) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot make '", path,
        "' absolute: the working directory is unknown; give an absolute path"));
  }
  std::vector<std::string> parts = absl::StrSplit(cwd, '/', absl::SkipEmpty());
  // The working directory is physical, so ".." right after it is its parent.
  // Later ".." may follow a symbolic link: they are left for the daemon to
  // judge.
  bool leading = true;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == ".." && leading) {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    leading = false;
    parts.emplace_back(part);
  }
  return absl::StrCat("/", absl::StrJoin(parts, "/"));
}

std::string PythonAbsolutePath(absl::string_view path, absl::string_view cwd) {
  // POSIX, and so pathlib, keeps a root of exactly two slashes.
  const bool double_root =
      absl::StartsWith(path, "//") && !absl::StartsWith(path, "///");
  std::vector<absl::string_view> parts;
  if (!absl::StartsWith(path, "/")) {
    parts = absl::StrSplit(cwd, '/', absl::SkipEmpty());
  }
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part != ".") parts.push_back(part);
  }
  return absl::StrCat(double_root ? "//" : "/", absl::StrJoin(parts, "/"));
}

absl::StatusOr<CliOptions> ResolvePaths(CliOptions options,
                                        absl::string_view cwd) {
  if (IsWriter(options.operation) && IsLocalServer(options.server)) {
    options.written_dir = PythonAbsolutePath(
        options.output_dir.empty() ? options.model_id : options.output_dir,
        cwd);
  }
  if (!options.model_id.empty()) {
    absl::StatusOr<std::string> model_id =
        ResolveArtifactPath(options.model_id, options.server, cwd);
    if (!model_id.ok()) return model_id.status();
    options.model_id = *std::move(model_id);
  }
  if (!options.output_dir.empty()) {
    absl::StatusOr<std::string> output_dir =
        ResolveArtifactPath(options.output_dir, options.server, cwd);
    if (!output_dir.ok()) return output_dir.status();
    options.output_dir = *std::move(output_dir);
  }
  return options;
}

v1::GetKvcacheNumBlocksRequest BuildGetRequest(const CliOptions& options) {
  v1::GetKvcacheNumBlocksRequest request;
  request.set_artifact(options.model_id);
  return request;
}

v1::SetKvcacheNumBlocksRequest BuildSetRequest(const CliOptions& options,
                                               absl::string_view operation_id) {
  v1::SetKvcacheNumBlocksRequest request;
  request.set_artifact(options.model_id);
  request.set_num_blocks(options.num_blocks);
  *request.mutable_options() = BuildWriteOptions(options, operation_id);
  return request;
}

v1::FitMemoryBudgetRequest BuildFitRequest(const CliOptions& options,
                                           absl::string_view operation_id) {
  v1::FitMemoryBudgetRequest request;
  request.set_artifact(options.model_id);
  request.set_budget(options.budget);
  *request.mutable_options() = BuildWriteOptions(options, operation_id);
  return request;
}

v1::DescribeArtifactRequest BuildDescribeRequest(const CliOptions& options) {
  v1::DescribeArtifactRequest request;
  request.set_artifact(options.model_id);
  request.set_verify_payload(options.verify);
  return request;
}

std::string FormatGet(const v1::GetKvcacheNumBlocksResponse& reply) {
  return absl::StrCat(reply.kvcache_num_blocks(), "\n");
}

ResizeOutput FormatResize(const CliOptions& options,
                          const v1::ResizeResponse& reply) {
  ResizeOutput output;
  if (options.operation == Operation::kFitBudget) {
    output.out =
        absl::StrCat("memory_budget ", options.budget,
                     " fits kvcache_num_blocks=", reply.new_num_blocks(), "\n");
  }
  const std::string change =
      absl::StrCat("kvcache_num_blocks: ", reply.previous_num_blocks(), " -> ",
                   reply.new_num_blocks());
  if (options.dry_run) {
    absl::StrAppend(&output.out, change, " (dry run: nothing written)\n");
  } else {
    const std::string dir =
        !options.written_dir.empty()
            ? options.written_dir
            : absl::StrCat(reply.store(), "/",
                           reply.output_dir().empty() ? reply.artifact()
                                                      : reply.output_dir());
    absl::StrAppend(&output.out, "Set kvcache_num_blocks to ",
                    reply.new_num_blocks(), " for artifact at ", dir, "\n");
    output.err = change;
    if (!reply.written()) {
      absl::StrAppend(&output.err, " (unchanged: nothing was written)");
    } else if (!reply.output_dir().empty()) {
      absl::StrAppend(&output.err, " (written to ", reply.output_dir(), ")");
    }
    output.err += "\n";
  }
  if (reply.has_fit()) {
    output.err += FormatFit(reply.fit(), reply.new_num_blocks());
  }
  return output;
}

std::string FormatDescribe(const v1::DescribeArtifactResponse& reply) {
  std::string text = Field("artifact", reply.artifact());
  text += Field(
      "model",
      absl::StrFormat("%s, %s, max_seq_len %d, block size %d, batch %d",
                      reply.cls_name(), reply.attn_impl(), reply.max_seq_len(),
                      reply.kvcache_block_size(), reply.batch_size()));
  std::string npu = absl::StrFormat(
      "%s, %d node%s", reply.npu().empty() ? "NPU unknown" : reply.npu(),
      reply.num_nodes(), reply.num_nodes() == 1 ? "" : "s");
  if (reply.memory_per_node()) {
    absl::StrAppend(&npu, ", memory reported per node (older compiler)");
  } else {
    absl::StrAppend(&npu, " x ", reply.chiplets_per_node(), " chiplet",
                    reply.chiplets_per_node() == 1 ? "" : "s");
  }
  if (!reply.dram_source().empty()) {
    absl::StrAppend(&npu, " (DRAM: ", reply.dram_source(), ")");
  }
  text += Field("npu", npu);
  if (!reply.submodule().empty()) {
    text += Field("decoder", absl::StrCat("submodule '", reply.submodule(),
                                          "' (", reply.submodule(), "/)"));
  }
  text += Field("kv blocks",
                absl::StrFormat(
                    "current %d, compiled %s, full %d, min %d, max fitting %d",
                    reply.kvcache_num_blocks(),
                    reply.compiled_num_blocks() == 0
                        ? std::string("unknown")
                        : absl::StrCat(reply.compiled_num_blocks()),
                    reply.num_full_blocks(), reply.num_min_blocks(),
                    reply.max_fitting_num_blocks()));
  text += Field("kv tensors", absl::StrFormat("%d resizable, %d fixed",
                                              reply.resizable_kv_tensors(),
                                              reply.fixed_kv_tensors()));
  std::vector<std::string> graphs;
  std::vector<std::string> codecs;
  uint64_t file_bytes = 0;
  for (const v1::GraphInfo& g : reply.graphs()) {
    graphs.push_back(g.compiled_model_name());
    file_bytes += g.file_bytes();
    if (!g.codec().empty() &&
        std::find(codecs.begin(), codecs.end(), g.codec()) == codecs.end()) {
      codecs.push_back(g.codec());
    }
  }
  std::string graph_text = absl::StrFormat(
      "%s (%s GiB in files", absl::StrJoin(graphs, ", "), GiB(file_bytes));
  if (!codecs.empty()) {
    absl::StrAppend(&graph_text, "; codec ", absl::StrJoin(codecs, ", "));
  }
  text += Field("graphs", graph_text + ")");
  absl::StrAppend(&text,
                  reply.memory_per_node()
                      ? "\nmemory per node in GiB, KV at "
                      : "\nmemory per node and chiplet in GiB, KV at ",
                  reply.kvcache_num_blocks(), " blocks:\n");
  std::vector<std::vector<std::string>> rows;
  for (const v1::BucketPlan& b : reply.buckets()) {
    rows.push_back({absl::StrCat(b.node()), absl::StrCat(b.chiplet()),
                    GiB(b.available_bytes()), GiB(b.other_bytes()),
                    GiB(b.kv_bytes()), GiB(b.kv_bytes_per_block()),
                    SignedGiB(b.headroom_bytes())});
  }
  text += RenderTable({{"NODE", true},
                       {"CHIPLET", true},
                       {"AVAILABLE", true},
                       {"OTHER", true},
                       {"KV", true},
                       {"PER BLOCK", true},
                       {"HEADROOM", true}},
                      rows);
  return text;
}

namespace {

// "store: DIR" and a line per read-only root, for --list and --server-info.
std::string FormatRoots(
    const std::string& store,
    const google::protobuf::RepeatedPtrField<v1::StoreRoot>& roots) {
  std::string text = absl::StrCat("store: ", store, "\n");
  for (const v1::StoreRoot& root : roots) {
    if (root.read_only()) {
      absl::StrAppend(&text, "read-only root ", root.name(), ": ", root.dir(),
                      " (artifacts named ", root.name(), ":PATH)\n");
    }
  }
  return text;
}

}  // namespace

std::string FormatList(const v1::ListArtifactsResponse& reply) {
  std::string text = FormatRoots(reply.store(), reply.roots());
  std::string skipped;
  if (reply.skipped_size() > 0) {
    skipped = absl::StrCat("skipped ", reply.skipped_size(), ":\n");
    for (const v1::SkippedEntry& entry : reply.skipped()) {
      absl::StrAppend(&skipped, "  ", entry.artifact(), ": ", entry.reason(),
                      "\n");
    }
  }
  if (reply.not_readable() > 0) {
    absl::StrAppend(&skipped, "left out ", reply.not_readable(),
                    " artifact(s) you cannot read yourself (ask their owner, "
                    "or for operator rights: rbln-artifactd --operators)\n");
  }
  if (reply.artifacts_size() == 0) return text + "(no artifacts)\n" + skipped;
  bool any_error = std::any_of(
      reply.artifacts().begin(), reply.artifacts().end(),
      [](const v1::ArtifactSummary& a) { return !a.error().empty(); });
  std::vector<Column> columns = {
      {"ARTIFACT"}, {"BLOCKS", true}, {"NPU"}, {"NODES", true}, {"CLASS"}};
  if (any_error) columns.push_back({"ERROR"});
  std::vector<std::vector<std::string>> rows;
  for (const v1::ArtifactSummary& a : reply.artifacts()) {
    if (!a.error().empty()) {
      rows.push_back({a.artifact(), "-", "-", "-", "-", a.error()});
      continue;
    }
    rows.push_back({a.artifact(), absl::StrCat(a.kvcache_num_blocks()), a.npu(),
                    absl::StrCat(a.num_nodes()), a.cls_name()});
  }
  return text + RenderTable(columns, rows) + skipped;
}

std::string FormatDeviceInfo(const v1::GetDeviceInfoResponse& reply) {
  std::string text = absl::StrCat("source: ", reply.source(), "\n");
  if (reply.devices_size() == 0) return text + "(no devices)\n";
  std::vector<std::vector<std::string>> rows;
  for (const v1::Device& d : reply.devices()) {
    rows.push_back(
        {d.index() < 0 ? "-" : absl::StrCat(d.index()), d.name(), d.family(),
         d.device_node().empty() ? "-" : d.device_node(), GiB(d.total_bytes()),
         GiB(d.used_bytes()), GiB(d.available_bytes()),
         // 0: a probed device the spec table does not know.
         d.chiplets() == 0 ? "-" : absl::StrCat(d.chiplets()), d.source()});
  }
  return text + RenderTable({{"INDEX", true},
                             {"NAME"},
                             {"FAMILY"},
                             {"DEVICE"},
                             {"TOTAL GiB", true},
                             {"USED GiB", true},
                             {"AVAILABLE GiB", true},
                             {"CHIPLETS", true},
                             {"SOURCE"}},
                            rows);
}

std::string FormatServerInfo(const v1::GetServerInfoResponse& reply) {
  return absl::StrCat(
      "rbln-artifactd ", reply.version(), " (commit ", reply.commit(), ") on ",
      reply.hostname().empty() ? "an unnamed host" : reply.hostname(), "\n",
      FormatRoots(reply.store(), reply.roots()),
      "listeners: ", absl::StrJoin(reply.listeners(), ", "), "\n",
      "codec: ", reply.codec(), "\n", "you are: ", reply.caller(), " (",
      reply.role(), ")\n");
}

absl::StatusOr<std::string> FormatJson(const google::protobuf::Message& reply) {
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  print.always_print_primitive_fields = true;
  std::string json;
  auto status =
      google::protobuf::util::MessageToJsonString(reply, &json, print);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot print the reply as JSON: ", status.ToString()));
  }
  rapidjson::Document doc;
  if (doc.Parse<rapidjson::kParseFullPrecisionFlag>(json.c_str())
          .HasParseError()) {
    return absl::InternalError(
        "cannot print the reply as JSON: protobuf printed what RapidJSON "
        "rejects");
  }
  Int64FieldsToNumbers(*reply.GetDescriptor(), doc);
  return ToJsonLine(doc);
}

Failure ClientFailure(const absl::Status& status) {
  return {
      .status = status, .exit_code = kExitFailed, .text = FormatError(status)};
}

Failure UsageFailure(absl::string_view message) {
  return {.status = absl::InvalidArgumentError(message),
          .exit_code = kExitUsage,
          .text = FormatUsageError(message)};
}

Failure UnreachableFailure(absl::string_view server) {
  return {.status = absl::UnavailableError(absl::StrCat(
              "cannot reach rbln-artifactd at ", server, " (not running?)")),
          .exit_code = kExitUnreachable,
          .text = FormatUnreachable(server),
          .details = {{"server", std::string(server)}}};
}

Failure SocketDeniedFailure(absl::string_view path, uint32_t uid,
                            const std::optional<SocketFile>& file) {
  const std::string whom =
      file.has_value()
          ? absl::StrFormat("the socket is %s:%s %04o", file->owner,
                            file->group, file->mode & 07777)
          : "a directory on its path is closed to you";
  const std::string message =
      absl::StrCat("permission denied on the socket ", path, " (you are uid ",
                   uid, "; ", whom, "); ask for its group or run as its owner");
  return {.status = absl::PermissionDeniedError(message),
          .exit_code = kExitDenied,
          .text = absl::StrCat(kProgramName, ": ", message, "\n"),
          .details = {{"server", absl::StrCat("unix:", path)}}};
}

// Codes that gRPC itself gives a call that broke off (the connection closed,
// a deadline passed, a frame too big or garbled); any other code is a
// server's answer, marked or not (an older daemon, gRPC's UNIMPLEMENTED).
bool TransportMayCause(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kResourceExhausted:
      return true;
    default:
      return false;
  }
}

// The reason and counts of the daemon's ErrorDetail, into `failure`.
void AddErrorDetail(const rbln::artifact::v1::ErrorDetail& detail,
                    Failure* failure) {
  using Detail = rbln::artifact::v1::ErrorDetail;
  failure->details.emplace_back("reason", Detail::Reason_Name(detail.reason()));
  if (detail.has_current_num_blocks()) {
    failure->counts.emplace_back("current_num_blocks",
                                 detail.current_num_blocks());
  }
  if (detail.has_num_min_blocks()) {
    failure->counts.emplace_back("num_min_blocks", detail.num_min_blocks());
  }
  if (detail.has_num_full_blocks()) {
    failure->counts.emplace_back("num_full_blocks", detail.num_full_blocks());
  }
  if (detail.has_max_fitting_num_blocks()) {
    failure->counts.emplace_back("max_fitting_num_blocks",
                                 detail.max_fitting_num_blocks());
  }
}

Failure CallFailure(const CliOptions& options, const absl::Status& status,
                    bool replied,
                    const rbln::artifact::v1::ErrorDetail* detail) {
  replied = replied || !TransportMayCause(status.code());
  Failure failure;
  if (!options.model_id.empty()) {
    failure.details.emplace_back("artifact", options.model_id);
  }
  if (!options.output_dir.empty()) {
    failure.details.emplace_back("output_dir", options.output_dir);
  }
  if (detail != nullptr) AddErrorDetail(*detail, &failure);
  if (replied) {
    std::string message(status.message());
    // The daemon speaks of its API ("replace"); name the flag.
    if (absl::IsAlreadyExists(status) && !options.output_dir.empty() &&
        !options.replace && !absl::StrContains(message, "--replace")) {
      absl::StrAppend(&message, "; add --replace to replace it");
    }
    failure.status = absl::Status(status.code(), message);
    failure.exit_code =
        absl::IsUnauthenticated(status) ? kExitDenied : kExitFailed;
    failure.text = FormatError(failure.status);
    return failure;
  }
  const std::string cause = absl::StrCat(
      absl::StatusCodeToString(status.code()), ": ", status.message());
  const bool late = absl::IsDeadlineExceeded(status);
  const bool changes = IsWriter(options.operation) && !options.dry_run;
  std::string message;
  if (changes) {
    const std::string what =
        options.output_dir.empty()
            ? "the artifact is either unchanged or fully at the new count"
            : "the output directory is either as it was or holds the "
              "complete resized copy";
    const std::string check =
        options.output_dir.empty() ? options.model_id : options.output_dir;
    message =
        absl::StrCat(late ? "no reply from the daemon in time during the write"
                          : "the daemon closed the connection during the write",
                     "; ", what,
                     "; check with --get-kvcache-num-blocks "
                     "--model-id ",
                     check, " (gRPC: ", cause, ")");
    failure.details.emplace_back("outcome", "unknown");
  } else {
    message =
        absl::StrCat(late ? "no reply from the daemon in time"
                          : "the daemon closed the connection before replying",
                     "; nothing was changed (",
                     IsWriter(options.operation) ? "a dry run" : "a read",
                     " changes nothing); retry (gRPC: ", cause, ")");
    failure.details.emplace_back("outcome", "unchanged");
  }
  failure.status = absl::Status(status.code(), message);
  failure.exit_code = kExitInterrupted;
  failure.text = FormatError(failure.status);
  return failure;
}

int ReportFailure(const Failure& failure, bool json, std::ostream& out,
                  std::ostream& err) {
  err << failure.text;
  if (json) out << FormatJsonError(failure);
  return failure.exit_code;
}

std::string FormatJsonError(const Failure& failure) {
  rapidjson::Document doc(rapidjson::kObjectType);
  auto& alloc = doc.GetAllocator();
  auto text = [&alloc](absl::string_view s) {
    return rapidjson::Value(s.data(),
                            static_cast<rapidjson::SizeType>(s.size()), alloc);
  };
  rapidjson::Value details(rapidjson::kObjectType);
  for (const auto& [key, value] : failure.details) {
    details.AddMember(text(key), text(value), alloc);
  }
  for (const auto& [key, value] : failure.counts) {
    details.AddMember(text(key), rapidjson::Value(value), alloc);
  }
  rapidjson::Value error(rapidjson::kObjectType);
  error.AddMember("code", text(absl::StatusCodeToString(failure.status.code())),
                  alloc);
  error.AddMember("code_number", static_cast<int>(failure.status.code()),
                  alloc);
  error.AddMember("message", text(failure.status.message()), alloc);
  error.AddMember("details", details, alloc);
  doc.AddMember("error", error, alloc);
  return ToJsonLine(doc);
}

std::string FormatWarnings(
    const google::protobuf::RepeatedPtrField<std::string>& warnings) {
  std::string text;
  for (const std::string& w : warnings)
    absl::StrAppend(&text, "warning: ", w, "\n");
  return text;
}

std::string FormatError(const absl::Status& status) {
  return absl::StrCat(kProgramName, ": error (",
                      absl::StatusCodeToString(status.code()),
                      "): ", status.message(), "\n");
}

std::string FormatUnreachable(absl::string_view server) {
  return absl::StrCat(kProgramName, ": cannot reach rbln-artifactd at ", server,
                      ". Start it with: rbln-artifactd --store DIR --listen ",
                      server,
                      "\n(or give --server ADDR of a running daemon)\n");
}

std::string FormatWaitingForLock(const CliOptions& options) {
  std::string names = options.model_id;
  if (!options.output_dir.empty()) {
    absl::StrAppend(&names, " or ", options.output_dir);
  }
  return absl::StrCat("waiting for another write to ", names,
                      " to finish\u2026\n");
}

std::string FormatProgressBar(uint64_t bytes_done, uint64_t bytes_total) {
  constexpr int kWidth = 30;
  double fraction =
      bytes_total == 0
          ? 0.0
          : std::min(1.0, static_cast<double>(bytes_done) / bytes_total);
  int filled = static_cast<int>(fraction * kWidth);
  return absl::StrFormat(
      "\r[%s%s] %3d%%  %s / %s GiB", std::string(filled, '#'),
      std::string(kWidth - filled, '.'), static_cast<int>(fraction * 100),
      GiB(bytes_done), GiB(bytes_total));
}

}  // namespace rbln::client
