// rbln-artifactd's command line: every flag, its help, and the checks of
// its value, parsed into a DaemonConfig (daemon_config.h). A bad value ends
// the process with the exit code it carries: kExitUsage for the command
// line's, kExitConfig for the --config file's (daemon_error.h).
//
// Thread-safe: no state of its own; it reads the user and group databases.
#ifndef RBLN_SERVER_DAEMON_FLAGS_H_
#define RBLN_SERVER_DAEMON_FLAGS_H_

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "server/daemon_config.h"
#include "server/daemon_error.h"

namespace rbln {

inline constexpr char kDaemonProgramName[] = "rbln-artifactd";

// Parses `args` (the command line without the program name, and the
// --config file it names) into `config`. nullopt: start the daemon.
// Otherwise the process ends with the error's exit code: 0 after --help or
// --version (printed to `out`), the parser's own errors printed to `err`
// already (an empty message), or a bad value whose message is for main to
// print.
std::optional<DaemonError> ParseDaemonFlags(
    const std::vector<std::string>& args, DaemonConfig* config,
    std::ostream& out, std::ostream& err);

}  // namespace rbln

#endif  // RBLN_SERVER_DAEMON_FLAGS_H_
