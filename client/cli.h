// The command line of `rbln-artifact`, the thin client of rbln-artifactd
// (README.md): its flags (those of optimum-rbln-cli, plus a few of its own),
// their validation, the requests they turn into, and the text printed for the
// replies. Nothing here talks to a server (run.h does), so all of it is tested
// without one.
//
// Thread-safe: pure functions.
#ifndef RBLN_CLIENT_CLI_H_
#define RBLN_CLIENT_CLI_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "google/protobuf/repeated_ptr_field.h"
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

enum class Operation {
  kGet,         // --get-kvcache-num-blocks
  kSet,         // --set-kvcache-num-blocks N
  kFitBudget,   // --set-memory-budget BUDGET
  kDescribe,    // --describe
  kList,        // --list
  kDeviceInfo,  // --device-info
  kServerInfo,  // --server-info
};

// True for the two operations that change artifacts.
bool IsWriter(Operation operation);

// A validated command line.
struct CliOptions {
  Operation operation = Operation::kGet;
  std::string server;       // unix:PATH or HOST:PORT
  std::string model_id;     // kGet, kSet, kFitBudget, kDescribe
  uint64_t num_blocks = 0;  // kSet
  std::string budget;       // kFitBudget
  // Writers only.
  std::string output_dir;  // empty: in place
  bool replace = false;
  bool dry_run = false;
  bool force = false;  // kSet only
  std::optional<uint64_t> expected_current;
  // The directory a write changes, as optimum-rbln-cli prints it
  // (PythonAbsolutePath of --output-dir, else of --model-id), for a local
  // server; "" for a remote one (the reply's store and name say it). Set by
  // ResolvePaths.
  std::string written_dir;
  bool verify = false;  // kDescribe and writers
  bool json = false;
  // A TCP --server only (a Unix socket's peer is known by its uid). TLS is
  // on when any of the first three is given; a token needs TLS.
  std::string tls_ca;      // PEM: the CA that issued the daemon's cert
  std::string tls_cert;    // PEM: this client's certificate (with tls_key)
  std::string tls_key;     // PEM: its private key
  std::string token_file;  // the bearer token, on its first line

  bool UsesTls() const {
    return !tls_ca.empty() || !tls_cert.empty() || !tls_key.empty();
  }
};

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

// The line printed for a usage error found after parsing, in the same form as
// the parser's own: "rbln-artifact: MESSAGE\nRun with --help ...\n".
std::string FormatUsageError(absl::string_view message);

// True when `server` names a Unix socket ("unix:PATH", "unix-abstract:NAME"):
// the daemon runs on this host and shares its file system.
bool IsLocalServer(absl::string_view server);

// True for "NAME:path" where NAME is a valid read-only root name (no '/'
// before the colon): an artifact in the daemon's read-only root NAME.
bool IsRootQualifiedName(absl::string_view path);

// How an artifact path is sent: "NAME:path" is sent as given (a
// directory of that name needs "./"); to a local daemon a relative path
// is made absolute against `cwd` (a physical path, as getcwd() returns), with
// "." components dropped and leading ".." resolved against `cwd`; to a remote
// one it is sent as given (relative to the store root). Absolute paths are
// sent as given. An empty `cwd` when one is needed is an error.
absl::StatusOr<std::string> ResolveArtifactPath(absl::string_view path,
                                                absl::string_view server,
                                                absl::string_view cwd);

// `path` as Python's pathlib.Path(path).absolute() prints it, with `cwd`
// the working directory (a physical path): joined to `cwd` unless absolute,
// "." components, empty ones and a trailing '/' dropped, ".." kept.
std::string PythonAbsolutePath(absl::string_view path, absl::string_view cwd);

// `options` with --model-id and --output-dir resolved by ResolveArtifactPath,
// and written_dir set.
absl::StatusOr<CliOptions> ResolvePaths(CliOptions options,
                                        absl::string_view cwd);

// Requests. `operation_id` (may be empty) names the write for
// GetWriteProgress.
rbln::artifact::v1::GetKvcacheNumBlocksRequest BuildGetRequest(
    const CliOptions& options);
rbln::artifact::v1::SetKvcacheNumBlocksRequest BuildSetRequest(
    const CliOptions& options, absl::string_view operation_id);
rbln::artifact::v1::FitMemoryBudgetRequest BuildFitRequest(
    const CliOptions& options, absl::string_view operation_id);
rbln::artifact::v1::DescribeArtifactRequest BuildDescribeRequest(
    const CliOptions& options);

// Human output (stdout).
// The bare count and a newline, as optimum-rbln-cli prints it.
std::string FormatGet(const rbln::artifact::v1::GetKvcacheNumBlocksResponse&);
// What a write prints. On stdout exactly optimum-rbln-cli's lines, so that
// a script parsing them works unchanged: for a budget "memory_budget B fits
// kvcache_num_blocks=T" (B as given), then "Set kvcache_num_blocks to T for
// artifact at DIR" (DIR: options.written_dir, else the reply's store joined
// with the name written); a dry run prints "kvcache_num_blocks: P -> T (dry
// run: nothing written)" instead of the Set line. On stderr what this client
// tells beyond that: "kvcache_num_blocks: P -> T" with a suffix for no-ops
// and output directories (not for a dry run: that line is on stdout), and
// for a budget the budget and the bucket that limited the count, and where
// the DRAM figures came from.
struct ResizeOutput {
  std::string out;
  std::string err;
};
ResizeOutput FormatResize(const CliOptions& options,
                          const rbln::artifact::v1::ResizeResponse& reply);
std::string FormatDescribe(
    const rbln::artifact::v1::DescribeArtifactResponse& reply);
std::string FormatList(const rbln::artifact::v1::ListArtifactsResponse& reply);
std::string FormatDeviceInfo(
    const rbln::artifact::v1::GetDeviceInfoResponse& reply);
// "rbln-artifactd 0.1.0 (commit …) on HOST", then the store, the read-only
// roots, the listeners, the codec and the caller with its role.
std::string FormatServerInfo(
    const rbln::artifact::v1::GetServerInfoResponse& reply);

// Machine output (stdout): the reply as one line of JSON with proto field
// names and every field present. Unlike proto3's JSON mapping, 64-bit
// integers are JSON numbers, printed as exact integer literals even above
// 2^53 (where a reader that parses numbers as doubles, such as jq, rounds
// them; counts stay below 2^31 and byte sizes far below 2^53).
absl::StatusOr<std::string> FormatJson(const google::protobuf::Message& reply);

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
// One "warning: ..." line per warning.
std::string FormatWarnings(
    const google::protobuf::RepeatedPtrField<std::string>& warnings);
// "rbln-artifact: error (CODE_NAME): message".
std::string FormatError(const absl::Status& status);
// The daemon is not listening at `server`: says so and how to start it.
std::string FormatUnreachable(absl::string_view server);
// "\r[#####.....]  45%  1.20 / 2.60 GiB" (no newline: redrawn in place).
std::string FormatProgressBar(uint64_t bytes_done, uint64_t bytes_total);
// "waiting for another write to NAME to finish…", for a write of `options`
// that waits for another writer's lock (NAME: --model-id, and --output-dir
// when given, either of which may be the one locked).
std::string FormatWaitingForLock(const CliOptions& options);

}  // namespace rbln::client

#endif  // RBLN_CLIENT_CLI_H_
