#include "core/artifact_name.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/text.h"

namespace rbln {
namespace {

// The non-empty, non-"." components of `path`.
std::vector<absl::string_view> Components(absl::string_view path) {
  std::vector<absl::string_view> parts;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part != ".") parts.push_back(part);
  }
  return parts;
}

// When `parts` starts with the components of `root`, the rest; else false.
bool StripRoot(std::vector<absl::string_view>* parts, absl::string_view root) {
  if (root.empty()) return false;
  const std::vector<absl::string_view> root_parts = Components(root);
  if (parts->size() < root_parts.size()) return false;
  for (size_t i = 0; i < root_parts.size(); ++i) {
    if ((*parts)[i] != root_parts[i]) return false;
  }
  parts->erase(parts->begin(), parts->begin() + root_parts.size());
  return true;
}

}  // namespace

absl::StatusOr<std::string> CanonicalArtifactName(
    absl::string_view name, absl::string_view root,
    absl::string_view given_root) {
  if (name.size() > kMaxArtifactNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "artifact name of ", name.size(), " bytes is longer than the ",
        kMaxArtifactNameBytes, " a path may have (PATH_MAX): ", Echo(name)));
  }
  if (name.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("artifact name contains a NUL byte: ", Echo(name)));
  }
  // A line break or a terminal escape in a directory name only ever
  // misleads whoever reads a listing or a log.
  for (char c : name) {
    if (absl::ascii_iscntrl(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "artifact name contains a control character: ", Echo(name),
          "; rename the directory"));
    }
  }
  if (name.empty()) {
    return absl::InvalidArgumentError(
        "no artifact named: give a directory inside the store");
  }
  std::vector<absl::string_view> parts = Components(name);
  if (absl::StartsWith(name, "/")) {
    // Compared component-wise, so "//srv//a/" is "/srv/a".
    std::vector<absl::string_view> rel = parts;
    if (!StripRoot(&rel, root)) {
      rel = parts;
      if (!StripRoot(&rel, given_root)) {
        return absl::PermissionDeniedError(absl::StrCat(
            Echo(name), " is outside the artifact store ", Echo(root),
            "; only artifacts inside the store can be read or changed"));
      }
    }
    parts = std::move(rel);
  }
  for (absl::string_view part : parts) {
    if (part == "..") {
      return absl::PermissionDeniedError(
          absl::StrCat("artifact name ", Echo(name),
                       " contains '..'; name a directory inside the store"));
    }
    if (absl::StartsWith(part, ".")) {
      return absl::PermissionDeniedError(absl::StrCat(
          "artifact name ", Echo(name), " has a hidden component '", Echo(part),
          "'; names starting with '.' are reserved for the daemon"));
    }
    if (part.size() > kMaxNameComponentBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "artifact name ", Echo(name), " has a component of ", part.size(),
          " bytes; each directory name may have at most ",
          kMaxNameComponentBytes,
          " (NAME_MAX is 255, and staging names need room)"));
    }
  }
  if (parts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        Echo(name), " is the store root, not an artifact inside it"));
  }
  return absl::StrJoin(parts, "/");
}

}  // namespace rbln
