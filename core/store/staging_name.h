// The names a commit gives the siblings of an artifact directory
// (docs/commit-protocol.md): `.<name>.staging-<16 lowercase hex digits>`,
// where it builds the artifact's new version, and
// `.<name>.retired-<16 lowercase hex digits>`, where the old version it
// swapped out waits out its grace. Recovery looks only at directories
// bearing one of these names exactly, and removes one only where an intent
// record names it (core/store/intent_record.h); no request may name one
// (they are hidden, core/store/artifact_name.h).
//
// Thread-safe (pure functions, but for the kernel's random bits).
#ifndef RBLN_CORE_STORE_STAGING_NAME_H_
#define RBLN_CORE_STORE_STAGING_NAME_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace rbln {

// A new staging name for the artifact directory named `name` (its last
// component), with random digits no one can predict.
std::string StagingNameFor(absl::string_view name);

// The artifact name a staging entry belongs to, or nullopt when `entry` is
// not exactly a staging name.
std::optional<std::string> StagedArtifactName(absl::string_view entry);

// A new retired name for an old version of the artifact directory named
// `name`, with random digits as StagingNameFor's.
std::string RetiredNameFor(absl::string_view name);

// The artifact name a retired entry belongs to, or nullopt when `entry` is
// not exactly a retired name.
std::optional<std::string> RetiredArtifactName(absl::string_view entry);

}  // namespace rbln

#endif  // RBLN_CORE_STORE_STAGING_NAME_H_
