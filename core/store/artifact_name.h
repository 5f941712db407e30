// Artifact names: how a caller's text becomes a store-relative name, by
// lexical rules alone (the file system is consulted later, and only through
// a confined Env, see env.h).
//
// A name is a path relative to the store root ("a", "team/llama"), an
// absolute path inside the store (under the root as resolved or as it was
// given) or inside a read-only root, or "NAME:path" in the read-only root
// NAME. Repeated and trailing slashes and "." components are dropped.
// Refused:
//   * more than kMaxArtifactNameBytes bytes, a component of more than
//     kMaxNameComponentBytes, a NUL byte or another control character, an
//     empty name, the root itself: INVALID_ARGUMENT;
//   * "..", a component starting with '.', an absolute path outside the
//     store: PERMISSION_DENIED.
// Messages repeat the name only through Echo (core/text.h).
//
// Thread-safe: pure functions.
#ifndef RBLN_CORE_STORE_ARTIFACT_NAME_H_
#define RBLN_CORE_STORE_ARTIFACT_NAME_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace rbln {

// PATH_MAX less its terminating NUL: no longer name can be opened anyway.
inline constexpr size_t kMaxArtifactNameBytes = 4095;
// NAME_MAX (255) less the decoration of a staging or retired name
// (".<name>.staging-<16 hex>", ".<name>.retired-<16 hex>": 1 + 9 + 16
// bytes, core/store/staging_name.h), with room to spare.
inline constexpr size_t kMaxNameComponentBytes = 200;

// The canonical store-relative name ("team/llama") for `name`. `root` is the
// store root as resolved (absolute, no trailing slash); `given_root`, when
// not empty, the root as the operator gave it (it may pass through a
// symbolic link above the store).
absl::StatusOr<std::string> CanonicalArtifactName(absl::string_view name,
                                                  absl::string_view root,
                                                  absl::string_view given_root);

// A directory names are resolved in: the store (name "") or a read-only
// root, whose artifacts are named "NAME:path".
struct NamedRoot {
  std::string name;
  std::string dir;        // resolved, absolute, no trailing slash
  std::string given_dir;  // as the operator gave it, or ""
};

// Root names: letters, digits, '-', '_' and '.', not starting with '.', at
// most this long.
inline constexpr size_t kMaxRootNameBytes = 64;
bool IsValidRootName(absl::string_view name);

// Where a name resolves: roots[root], at `rel` ("" for a read-only root's
// directory itself, which may be an artifact).
struct RootedName {
  size_t root = 0;
  std::string rel;
};

// Resolves `name` among `roots` (roots[0] the store, the rest read-only):
//   * an absolute path: in the root whose directory (as resolved or as
//     given) it lies in; outside all of them PERMISSION_DENIED, naming the
//     roots and the flag that adds one (--read-only-root);
//   * "NAME:path", NAME a read-only root's name and no '/' before the
//     colon: that root ("NAME:" alone is the root's directory);
//   * anything else: relative to the store.
// The path is then checked by the rules above.
absl::StatusOr<RootedName> ResolveArtifactName(
    absl::string_view name, absl::Span<const NamedRoot> roots);

// How replies and listings name `rel` in `root`: "team/llama" in the store,
// "hf:models--x/snapshots/abc" in the read-only root "hf".
std::string QualifiedArtifactName(const NamedRoot& root, absl::string_view rel);

}  // namespace rbln

#endif  // RBLN_CORE_STORE_ARTIFACT_NAME_H_
