// Runs one validated command against rbln-artifactd: sends the request,
// prints the reply (human or JSON), and maps the outcome to the exit code.
// For a long write it draws a progress bar on `err` while the write runs.
//
// Thread-safe: RunCommand may be called concurrently with different streams.
#ifndef RBLN_CLIENT_RUN_H_
#define RBLN_CLIENT_RUN_H_

#include <ostream>
#include <string>

#include "client/cli.h"
#include "rbln/artifact/v1/artifact_service.grpc.pb.h"

namespace rbln::client {

struct RunOptions {
  // Poll GetWriteProgress and draw a bar on `err` during a write that is not
  // a dry run (the binary sets it when stderr is a terminal).
  bool show_progress = false;
};

// Calls the operation of `options` (whose paths ResolvePaths already
// resolved) through `stub`; prints the reply on `out`, warnings and errors on
// `err`. Returns kExitOk, or kExitFailed when the daemon refused or failed the
// request (or the call did not complete).
int RunCommand(const CliOptions& options,
               rbln::artifact::v1::ArtifactService::StubInterface& stub,
               const RunOptions& run, std::ostream& out, std::ostream& err);

// A random 128-bit id in hex, for WriteOptions.operation_id.
std::string RandomOperationId();

}  // namespace rbln::client

#endif  // RBLN_CLIENT_RUN_H_
