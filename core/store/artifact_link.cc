#include "core/store/artifact_link.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/error_facts.h"
#include "core/status_macros.h"
#include "core/store/listing.h"
#include "core/text.h"

namespace rbln {
namespace {

// What to do about any link the store does not follow.
constexpr absl::string_view kLinkRule =
    "; the store follows a link only as the last part of an artifact's name, "
    "one hop, to an artifact directory beside it named plainly (current -> "
    "v2): point the link at one (ln -sfn v2 current), or replace it with the "
    "real directory";

// PERMISSION_DENIED: the link `link` to `target` is not followed, for `why`.
absl::Status NotFollowed(absl::string_view link, absl::string_view target,
                         absl::string_view why) {
  return absl::PermissionDeniedError(
      absl::StrCat(Echo(link), " is a symbolic link to '", Echo(target), "', ",
                   why, kLinkRule));
}

// Why a link's `target` is not a plain name in the link's own directory, or
// "" when it is one.
absl::string_view WhyNotPlain(absl::string_view target) {
  if (target.empty()) return "an empty target";
  if (target[0] == '/') return "an absolute path, which could lead anywhere";
  for (absl::string_view part : absl::StrSplit(target, '/')) {
    if (part == "..") return "a path that climbs out of its directory";
  }
  if (target.find('/') != absl::string_view::npos) {
    return "a path, not a name in the same directory";
  }
  if (target == ".") return "its own directory";
  if (target[0] == '.') {
    return "a hidden name (names starting with '.' are the daemon's)";
  }
  return "";
}

}  // namespace

absl::StatusOr<std::optional<std::string>> FollowArtifactLink(
    Env* env, const NamedRoot& store, const std::string& rel) {
  absl::StatusOr<std::optional<std::string>> read =
      env->ReadLink(rel.empty() ? store.dir : JoinPath(store.dir, rel));
  if (absl::IsNotFound(read.status())) return std::nullopt;
  RBLN_RETURN_IF_ERROR(read.status());
  if (!read->has_value()) return std::nullopt;
  const std::string link = QualifiedArtifactName(store, rel);
  const std::string& target = **read;
  if (absl::string_view why = WhyNotPlain(target); !why.empty()) {
    return NotFollowed(link, target, why);
  }
  const size_t slash = rel.rfind('/');
  std::string target_rel = slash == std::string::npos
                               ? target
                               : absl::StrCat(rel.substr(0, slash + 1), target);
  // The rules of every name (its length, no control characters).
  if (absl::StatusOr<RootedName> named =
          ResolveArtifactName(target_rel, absl::MakeConstSpan(&store, 1));
      !named.ok()) {
    return NotFollowed(link, target,
                       absl::StrCat("not a name the store takes (",
                                    named.status().message(), ")"));
  }
  const std::string path = JoinPath(store.dir, target_rel);
  absl::StatusOr<FileStat> st = env->Stat(path);
  if (absl::IsNotFound(st.status())) {
    return WithErrorFacts(
        absl::NotFoundError(absl::StrCat(
            Echo(link), " is a symbolic link to '", Echo(target),
            "', which does not exist; point the link at an artifact directory "
            "beside it (ln -sfn v2 current), or create ",
            Echo(target_rel))),
        {.reason = ErrorReason::kArtifactNotFound, .artifact = link});
  }
  RBLN_RETURN_IF_ERROR(st.status());
  if (st->type == FileType::kSymlink) {
    return NotFollowed(link, target,
                       "itself a symbolic link (a link is followed one hop "
                       "only)");
  }
  if (st->type != FileType::kDirectory) {
    return NotFollowed(link, target, "not a directory");
  }
  RBLN_ASSIGN_OR_RETURN(const bool is_artifact, IsArtifactDir(env, path));
  if (!is_artifact) {
    return NotFollowed(
        link, target,
        "a directory that is not an artifact (no rbln_config.json in it)");
  }
  return target_rel;
}

}  // namespace rbln
