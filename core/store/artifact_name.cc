#include "core/store/artifact_name.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/error_facts.h"
#include "core/status_macros.h"
#include "core/text.h"

namespace rbln {
namespace {

// PERMISSION_DENIED `message`, with the facts that say so to programs: the
// name as requested (cut and escaped, as messages show it).
absl::Status OutsideStore(absl::string_view name, absl::string_view message) {
  return WithErrorFacts(
      absl::PermissionDeniedError(message),
      {.reason = ErrorReason::kOutsideStore, .artifact = Echo(name)});
}

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

// The checks on the text of any name, whatever root it is resolved in.
absl::Status CheckNameText(absl::string_view name) {
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
  return absl::OkStatus();
}

// `parts` (relative to a root) as a canonical name; "" for the root itself.
absl::StatusOr<std::string> JoinChecked(
    absl::string_view name, const std::vector<absl::string_view>& parts) {
  for (absl::string_view part : parts) {
    if (part == "..") {
      return OutsideStore(
          name, absl::StrCat("artifact name ", Echo(name),
                             " contains '..'; name a directory inside the "
                             "store"));
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
  return absl::StrJoin(parts, "/");
}

std::string DescribeRoots(absl::Span<const NamedRoot> roots) {
  std::string text = absl::StrCat("the artifact store ", Echo(roots[0].dir));
  if (roots.size() > 1) {
    std::vector<std::string> read_only;
    for (const NamedRoot& root : roots.subspan(1)) {
      read_only.push_back(absl::StrCat(root.name, "=", Echo(root.dir)));
    }
    absl::StrAppend(&text, " and the read-only roots ",
                    absl::StrJoin(read_only, ", "));
  }
  return text;
}

}  // namespace

bool IsValidRootName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxRootNameBytes || name[0] == '.') {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
           c == '_' || c == '.';
  });
}

absl::StatusOr<RootedName> ResolveArtifactName(
    absl::string_view name, absl::Span<const NamedRoot> roots) {
  RBLN_RETURN_IF_ERROR(CheckNameText(name));
  std::vector<absl::string_view> parts = Components(name);
  size_t root = 0;
  if (absl::StartsWith(name, "/")) {
    // Compared component-wise, so "//srv//a/" is "/srv/a".
    bool found = false;
    for (size_t i = 0; i < roots.size() && !found; ++i) {
      for (absl::string_view dir : {roots[i].dir, roots[i].given_dir}) {
        std::vector<absl::string_view> rel = parts;
        if (StripRoot(&rel, dir)) {
          root = i;
          parts = std::move(rel);
          found = true;
          break;
        }
      }
    }
    if (!found) {
      return OutsideStore(
          name,
          absl::StrCat(
              Echo(name), " is outside ", DescribeRoots(roots),
              "; to use artifacts where they are, serve their directory with "
              "rbln-artifactd --read-only-root [NAME=]DIR (then read them, and "
              "write resized copies into the store with --output-dir)"));
    }
  } else if (const size_t colon = name.find(':');
             colon != absl::string_view::npos && name.find('/') > colon) {
    const absl::string_view prefix = name.substr(0, colon);
    for (size_t i = 1; i < roots.size(); ++i) {
      if (roots[i].name == prefix) {
        root = i;
        parts = Components(name.substr(colon + 1));
        break;
      }
    }
  }
  RBLN_ASSIGN_OR_RETURN(std::string rel, JoinChecked(name, parts));
  if (rel.empty() && root == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        Echo(name), " is the store root, not an artifact inside it"));
  }
  return RootedName{root, std::move(rel)};
}

std::string QualifiedArtifactName(const NamedRoot& root,
                                  absl::string_view rel) {
  if (root.name.empty()) return std::string(rel);
  return absl::StrCat(root.name, ":", rel);
}

absl::StatusOr<std::string> CanonicalArtifactName(
    absl::string_view name, absl::string_view root,
    absl::string_view given_root) {
  const NamedRoot store{"", std::string(root), std::string(given_root)};
  RBLN_ASSIGN_OR_RETURN(
      RootedName rooted,
      ResolveArtifactName(name, absl::MakeConstSpan(&store, 1)));
  return std::move(rooted.rel);
}

}  // namespace rbln
