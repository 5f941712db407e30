// Artifact names: how a caller's text becomes a store-relative name, by
// lexical rules alone (the file system is consulted later, and only through
// a confined Env, see env.h).
//
// A name is a path relative to the store root ("a", "team/llama") or an
// absolute path inside the store, under the root as resolved or as it was
// given. Repeated and trailing slashes and "." components are dropped.
// Refused:
//   * more than kMaxArtifactNameBytes bytes, a component of more than
//     kMaxNameComponentBytes, a NUL byte or another control character, an
//     empty name, the root itself: INVALID_ARGUMENT;
//   * "..", a component starting with '.', an absolute path outside the
//     store: PERMISSION_DENIED.
// Messages repeat the name only through Echo (core/text.h).
//
// Thread-safe: pure functions.
#ifndef RBLN_CORE_ARTIFACT_NAME_H_
#define RBLN_CORE_ARTIFACT_NAME_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rbln {

// PATH_MAX less its terminating NUL: no longer name can be opened anyway.
inline constexpr size_t kMaxArtifactNameBytes = 4095;
// NAME_MAX (255) less the staging decoration ".<name>.staging-<16 hex>"
// (1 + 9 + 16 bytes), with room to spare.
inline constexpr size_t kMaxNameComponentBytes = 200;

// The canonical store-relative name ("team/llama") for `name`. `root` is the
// store root as resolved (absolute, no trailing slash); `given_root`, when
// not empty, the root as the operator gave it (it may pass through a
// symbolic link above the store).
absl::StatusOr<std::string> CanonicalArtifactName(absl::string_view name,
                                                  absl::string_view root,
                                                  absl::string_view given_root);

}  // namespace rbln

#endif  // RBLN_CORE_ARTIFACT_NAME_H_
