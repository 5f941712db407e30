// How `rbln-artifact` reports a command that did not succeed: its exit code,
// the text on stderr, and with --json the error object on stdout. Every
// failure of the client, its command line, the connection or the call is
// made into a Failure here.
//
// Thread-safe: pure functions.
#ifndef RBLN_CLIENT_FAILURE_H_
#define RBLN_CLIENT_FAILURE_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/options.h"
#include "rbln/artifact/v1/artifact_service.pb.h"

namespace rbln::client {

// Process exit codes (documented in --help and README.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // the daemon refused or failed
inline constexpr int kExitUsage = 2;   // bad command line; nothing was sent
inline constexpr int kExitUnreachable = 3;  // no daemon at the address
// Not allowed to connect to the socket, or the daemon said UNAUTHENTICATED.
inline constexpr int kExitDenied = 4;
// The call ended without the daemon's reply (it died or closed the
// connection, or no reply in time): a write's outcome is unknown.
inline constexpr int kExitInterrupted = 5;

// A command that did not succeed, as the client reports it.
struct Failure {
  // Code and message of the JSON error object.
  absl::Status status;
  int exit_code = kExitFailed;
  // What stderr shows (ends with a newline).
  std::string text;
  // What the client knows for sure (the artifact it asked about, whether a
  // write's outcome is known, the reason of the daemon's ErrorDetail...),
  // the JSON error object's "details".
  std::vector<std::pair<std::string, std::string>> details;
  // Counts from the daemon's ErrorDetail ("current_num_blocks"...), JSON
  // numbers among the "details".
  std::vector<std::pair<std::string, uint64_t>> counts;
};

// The client itself failed (exit 1): FormatError's text.
Failure ClientFailure(const absl::Status& status);
// A usage error (exit 2, INVALID_ARGUMENT): FormatUsageError's text.
Failure UsageFailure(absl::string_view message);
// Nothing listens at `server` (exit 3, UNAVAILABLE): FormatUnreachable's
// text.
Failure UnreachableFailure(absl::string_view server);

// A socket file's owner and group (names, else numbers) and mode bits.
struct SocketFile {
  std::string owner;
  std::string group;
  uint32_t mode = 0;
};
// Connecting to the Unix socket at `path` failed with EACCES or EPERM (exit
// 4, PERMISSION_DENIED): says who the caller (`uid`) is and whom the socket
// admits; without `file` (it could not be examined), that a directory on its
// path is closed to the caller.
Failure SocketDeniedFailure(absl::string_view path, uint32_t uid,
                            const std::optional<SocketFile>& file);

// A call of `options`' operation ended with `status` (not OK). `replied`:
// the status carries the daemon's reply mark (rbln/artifact/v1/
// reply_metadata.h), so the daemon's handler returned it (exit 1, or 4 for
// UNAUTHENTICATED). Without the mark, a code that gRPC gives a broken call
// (UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED, INTERNAL, UNKNOWN,
// RESOURCE_EXHAUSTED) means the call was interrupted (exit 5), and the
// message says what is known of the outcome: for a write, that the artifact
// is unchanged or fully at the new count; for a read or a dry run, that
// nothing changed. Other codes are a server's answer even unmarked (gRPC's
// UNIMPLEMENTED, an older daemon). `detail`, when the status carried one
// (the grpc-status-details-bin trailer, artifact_service.proto), adds its
// reason and counts to the details; the text stays the daemon's message.
Failure CallFailure(const CliOptions& options, const absl::Status& status,
                    bool replied,
                    const rbln::artifact::v1::ErrorDetail* detail = nullptr);

// Prints `failure.text` on `err` and, with `json`, FormatJsonError on `out`;
// returns failure.exit_code.
int ReportFailure(const Failure& failure, bool json, std::ostream& out,
                  std::ostream& err);
// {"error": {"code": "ABORTED", "code_number": 10, "message": "...",
// "details": {"reason": "CAS_MISMATCH", "current_num_blocks": 32, ...}}} on
// one line.
std::string FormatJsonError(const Failure& failure);

// Diagnostics (stderr).
// "rbln-artifact: error (CODE_NAME): message".
std::string FormatError(const absl::Status& status);
// The daemon is not listening at `server`: says so and how to start it.
std::string FormatUnreachable(absl::string_view server);
// The line printed for a usage error found after parsing, in the same form as
// the parser's own: "rbln-artifact: MESSAGE\nRun with --help ...\n".
std::string FormatUsageError(absl::string_view message);

}  // namespace rbln::client

#endif  // RBLN_CLIENT_FAILURE_H_
