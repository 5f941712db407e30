// Staging names: `.<name>.staging-<16 lowercase hex digits>`, the sibling
// where a commit builds an artifact's new version and where the old one
// waits out its grace (docs/commit-protocol.md). Recovery removes what bears
// such a name exactly, and nothing else.
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

}  // namespace rbln

#endif  // RBLN_CORE_STORE_STAGING_NAME_H_
