// Versions switched by a link (docs/security.md, "Versions switched by a
// link"): the one kind of symbolic link the writable store follows. The last
// component of an artifact's name may be a link, read once and followed one
// hop, whose target is a plain name (no '/', not '.' or '..', not hidden)
// of an artifact directory in the same parent: `current -> v2`. Whoever
// follows one uses the target's name from then on (locks, caches, staging,
// the exchange) and never writes, renames or removes the link. Every other
// link stays refused where the store meets it (core/os/env.h).
//
// Thread-safe: no state of its own.
#ifndef RBLN_CORE_STORE_ARTIFACT_LINK_H_
#define RBLN_CORE_STORE_ARTIFACT_LINK_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/os/env.h"
#include "core/store/artifact_name.h"

namespace rbln {

// The canonical name of the artifact that the link at `rel` in `store` (the
// writable store, read through its confined `env`) names: "team/v2" for
// "team/current -> v2". The link is read once (Env::ReadLink: readlinkat on
// its parent's descriptor). nullopt when `rel` is not a symbolic link, or
// nothing is there (what reads it says so). A link that breaks the rule
// above is PERMISSION_DENIED, and one whose target does not exist
// NOT_FOUND, the message naming the link and its target, what is wrong and
// what to do.
absl::StatusOr<std::optional<std::string>> FollowArtifactLink(
    Env* env, const NamedRoot& store, const std::string& rel);

}  // namespace rbln

#endif  // RBLN_CORE_STORE_ARTIFACT_LINK_H_
