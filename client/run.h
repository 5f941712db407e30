// Runs one validated command against rbln-artifactd: sends the request,
// prints the reply (human or JSON), and maps the outcome to the exit code.
// On a terminal, while a write runs, it draws a progress bar on `err` and
// says when the write waits for another one.
//
// Thread-safe: RunCommand may be called concurrently with different streams.
#ifndef RBLN_CLIENT_RUN_H_
#define RBLN_CLIENT_RUN_H_

#include <ostream>
#include <string>

#include "absl/time/time.h"
#include "client/options.h"
#include "rbln/artifact/v1/artifact_service.grpc.pb.h"

namespace rbln::client {

struct RunOptions {
  // `err` is a terminal (the binary sets it with isatty; tests force it):
  // during a write that is not a dry run, poll GetWriteProgress, draw a
  // progress bar, and print FormatWaitingForLock once the write has waited
  // for another writer for more than kWaitNoticeAfter.
  bool terminal = false;
};

inline constexpr absl::Duration kWaitNoticeAfter = absl::Seconds(1);

// Calls the operation of `options` (whose paths ResolvePaths already
// resolved) through `stub`; prints the reply on `out`, warnings and errors on
// `err` (with --json also the error object on `out`: ReportFailure). Returns
// kExitOk, or the exit code of CallFailure (kExitFailed, kExitDenied,
// kExitInterrupted).
int RunCommand(const CliOptions& options,
               rbln::artifact::v1::ArtifactService::StubInterface& stub,
               const RunOptions& run, std::ostream& out, std::ostream& err);

// A random 128-bit id in hex, for WriteOptions.operation_id.
std::string RandomOperationId();

}  // namespace rbln::client

#endif  // RBLN_CLIENT_RUN_H_
