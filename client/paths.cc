#include "client/paths.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/store/artifact_name.h"

namespace rbln::client {

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
  for (std::string& member : options.beside) {
    absl::StatusOr<std::string> resolved =
        ResolveArtifactPath(member, options.server, cwd);
    if (!resolved.ok()) return resolved.status();
    member = *std::move(resolved);
  }
  for (std::string& member : options.colocate) {
    absl::StatusOr<std::string> resolved =
        ResolveArtifactPath(member, options.server, cwd);
    if (!resolved.ok()) return resolved.status();
    member = *std::move(resolved);
  }
  return options;
}

}  // namespace rbln::client
