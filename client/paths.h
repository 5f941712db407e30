// Where an artifact path that `rbln-artifact` was given points, as sent to
// the daemon: made absolute against the working directory for a daemon on
// this host, sent as given to one across the network or to a read-only root
// ("NAME:path").
//
// Thread-safe: pure functions.
#ifndef RBLN_CLIENT_PATHS_H_
#define RBLN_CLIENT_PATHS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/options.h"

namespace rbln::client {

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

}  // namespace rbln::client

#endif  // RBLN_CLIENT_PATHS_H_
