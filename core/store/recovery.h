// Recovery when a store is opened (docs/commit-protocol.md, "Recovery"):
// removes what a crash or a kill left behind, the staging directories of
// interrupted commits, the old versions that were waiting out their grace
// (under their retired names), and the lock files of killed writers.
//
// ArtifactStore::Open calls these with the store's LOCK held, so that no
// other daemon writes meanwhile; a maintenance tool's write is told by its
// artifact lock, and left alone.
#ifndef RBLN_CORE_STORE_RECOVERY_H_
#define RBLN_CORE_STORE_RECOVERY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/os/env.h"
#include "core/store/artifact_name.h"

namespace rbln {

// Removes the lock files in `dir` that nobody holds (left by a writer that
// was killed), as their holder would have.
void RemoveStaleLockFiles(Env* env, const std::string& dir);

// Removes every directory named exactly as a staging or a retired directory
// (core/store/staging_name.h) under the store `store` (at most
// kMaxStoreDepth deep, never inside an artifact or a hidden directory),
// unless its artifact's lock is held (a live writer in another process).
// Returns the store-relative paths removed.
absl::StatusOr<std::vector<std::string>> RemoveDebris(Env* env,
                                                      const NamedRoot& store);

}  // namespace rbln

#endif  // RBLN_CORE_STORE_RECOVERY_H_
