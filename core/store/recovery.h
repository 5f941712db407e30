// Recovery when a store is opened (docs/commit-protocol.md, "Recovery"):
// removes what a crash or a kill left behind, the staging directories of
// interrupted commits and the old versions that were waiting out their
// grace (under their retired names), as far as the daemon's intent records
// name them, and the lock files of killed writers.
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

// What recovery did with the staging and retired directories of a store.
struct RecoveredDebris {
  // Store-relative paths of the directories removed: those an intent
  // record named (core/store/intent_record.h).
  std::vector<std::string> removed;
  // Store-relative paths of directories named exactly as a staging or a
  // retired directory (core/store/staging_name.h) that no record names:
  // left in place, and each logged once with the command that removes it.
  std::vector<std::string> left_in_place;
};

// Removes the directories that the intent records of the store `store`
// name, and then the records; a record that cannot be read or parsed is
// logged and left, and so is a directory that cannot be removed (with its
// record). Then walks the store once (at most kMaxStoreDepth deep, never
// inside an artifact or a hidden directory) for directories named as
// staging or retired directories that no record names, unless their
// artifact's lock is held (a live writer in another process): each is
// reported, never removed.
absl::StatusOr<RecoveredDebris> RemoveDebris(Env* env, const NamedRoot& store);

}  // namespace rbln

#endif  // RBLN_CORE_STORE_RECOVERY_H_
