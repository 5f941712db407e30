// rbln-artifactd's exit codes (sysexits.h; listed in --help and docs/daemon.md)
// and DaemonError, a failure to start that carries the code its process
// ends with, from the flags (daemon_flags.h) to main.
//
// Thread-safe: constants and a plain struct.
#ifndef RBLN_SERVER_DAEMON_ERROR_H_
#define RBLN_SERVER_DAEMON_ERROR_H_

#include <sysexits.h>

#include <string>

namespace rbln {

inline constexpr int kExitUsage = EX_USAGE;  // 64: a bad command line
inline constexpr int kExitUnavailable =
    EX_UNAVAILABLE;                            // 69: a resource in use
inline constexpr int kExitConfig = EX_CONFIG;  // 78: bad configuration
// Requests did not end within the grace period plus kForcedExitSeconds
// (daemon.h).
inline constexpr int kExitForced = 1;

struct DaemonError {
  int exit_code = 0;
  // For stderr, after "rbln-artifactd: "; empty when printed already (the
  // flag parser's own errors, --help, --version).
  std::string message;
};

}  // namespace rbln

#endif  // RBLN_SERVER_DAEMON_ERROR_H_
