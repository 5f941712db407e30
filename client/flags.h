// The command line of `rbln-artifact`: its flags (those of optimum-rbln-cli,
// plus a few of its own), their help text, and their validation into a
// CliOptions. Nothing here talks to a server, so all of it is tested without
// one.
//
// Thread-safe: pure functions.
#ifndef RBLN_CLIENT_FLAGS_H_
#define RBLN_CLIENT_FLAGS_H_

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "client/failure.h"
#include "client/options.h"

namespace rbln::client {

// What ParseCommandLine decided: options to run, or an exit code when there
// is nothing to run (--help printed: kExitOk; a usage error: kExitUsage).
struct ParsedCommandLine {
  std::optional<CliOptions> options;
  int exit_code = kExitOk;
};

// Parses and validates `args` (without the program name). Help goes to `out`,
// usage errors (naming the offending flags) to `err`, and, when `--json` is
// among `args`, also as a JSON error object (FormatJsonError) to `out`.
// `default_server` is what --server defaults to (rbln::DefaultServerAddress()
// in the binary).
ParsedCommandLine ParseCommandLine(const std::vector<std::string>& args,
                                   absl::string_view default_server,
                                   std::ostream& out, std::ostream& err);

}  // namespace rbln::client

#endif  // RBLN_CLIENT_FLAGS_H_
