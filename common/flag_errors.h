// Command-line errors in this project's words, for its three programs
// (rbln-artifact, rbln-artifactd, rbln-artifact-synth): the option parser's
// (CLI11's) errors, with its own exit codes (103..114) and wording, become one
// line that names the program and what to do, with the flag that was meant
// when one is close ("--set-kvcache-num-block": did you mean
// --set-kvcache-num-blocks?), and the program's documented exit code.
//
// Thread-safe: pure functions over the parser they are given.
#ifndef RBLN_COMMON_FLAG_ERRORS_H_
#define RBLN_COMMON_FLAG_ERRORS_H_

#include <cstddef>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/string_view.h"

namespace rbln {

// How a program exits for the two kinds of command-line error.
struct FlagExitCodes {
  int usage = 2;   // a bad command line
  int config = 2;  // a --config file that cannot be read, or a bad value in it
};

// A parse error, translated.
struct FlagError {
  bool from_config = false;  // the --config file is at fault, not argv
  std::string message;       // without the program name or a newline
};

// The Damerau-Levenshtein distance (optimal string alignment: insertions,
// deletions, substitutions and swaps of neighbours each count 1).
size_t EditDistance(absl::string_view a, absl::string_view b);

// The long flag of `app` ("--name") nearest to `given` (a flag, with or
// without its dashes and "=value"), or "" when none is close: within 2 edits,
// and within a third of the flag's length, so that short words do not
// match everything.
std::string SuggestFlag(const CLI::App& app, absl::string_view given);

// True when `flag` ("--store") appears in `args` as given ("--store DIR" or
// "--store=DIR"), as opposed to coming from a --config file.
bool GivenOnCommandLine(const std::vector<std::string>& args,
                        absl::string_view flag);

// Translates `error`, thrown by app.parse() of `args` (in the order given).
FlagError DescribeParseError(const CLI::App& app, const CLI::ParseError& error,
                             const std::vector<std::string>& args);

// "cannot read --config FILE: line N: PROBLEM" for an entry `key` of the
// config file `file` (the line left out when no line sets it): for values
// that are checked after parsing, in the words DescribeParseError uses.
std::string FormatConfigError(absl::string_view file, absl::string_view key,
                              absl::string_view problem);

// "PROGRAM: MESSAGE\nRun with --help for more information.\n"
std::string FormatFlagError(absl::string_view program,
                            absl::string_view message);

// Parses `args` (without the program name, in the order given) with `app`.
// nullopt: parsed, go on. Otherwise the exit code: 0 after printing the help
// to `out` (--help), else codes.usage or codes.config after printing
// FormatFlagError to `err`.
std::optional<int> ParseFlags(CLI::App& app,
                              const std::vector<std::string>& args,
                              absl::string_view program, FlagExitCodes codes,
                              std::ostream& out, std::ostream& err);

}  // namespace rbln

#endif  // RBLN_COMMON_FLAG_ERRORS_H_
