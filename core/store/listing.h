// Listing a root of names (the store, or a read-only root): walking its
// directories from the top down, and finding the artifacts in them, for
// ArtifactStore::List and ListAll; recovery walks the store the same way
// (core/store/recovery.h).
//
// Thread-safe (no state of their own): a walk may run beside writes, and
// sees what changes meanwhile or not.
#ifndef RBLN_CORE_STORE_LISTING_H_
#define RBLN_CORE_STORE_LISTING_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/os/env.h"
#include "core/store/artifact_name.h"

namespace rbln {

// How deep below a root it is searched for artifacts and debris. Real
// stores nest a few levels (team/model/variant); a deeper tree is someone's
// mistake or attack and is not walked.
inline constexpr int kMaxStoreDepth = 32;

// What a listing found and what it passed over.
struct StoreListing {
  std::vector<std::string> names;  // canonical names, sorted per root
  // Of the names that are symbolic links the store follows
  // (core/store/artifact_link.h), the canonical name of each one's target.
  std::map<std::string, std::string> link_targets;
  struct Skipped {
    std::string name;  // canonical name of the entry
    std::string reason;
  };
  std::vector<Skipped> skipped;
};

// Whether `path` is an artifact directory: it holds a regular
// rbln_config.json.
absl::StatusOr<bool> IsArtifactDir(Env* env, const std::string& path);

// Gets a directory's root-relative name ("" for the root) and entries, and
// returns the child directories (root-relative) to look into.
using StoreVisitor = std::function<std::vector<std::string>(
    const std::string& rel, const std::vector<DirEntry>& entries)>;

// Visits the directories of `root`, read through `env`, from the root down
// (at most kMaxStoreDepth deep). A directory below the root that cannot be
// read is logged and skipped, and added to `skipped` (when not null); the
// root's own error is returned.
absl::Status WalkRoot(const NamedRoot& root, Env* env,
                      const StoreVisitor& visit,
                      std::vector<StoreListing::Skipped>* skipped);

// Appends the canonical names of the artifacts of `root` (sorted), and what
// was passed over and why, to `listing`: hidden entries are skipped; a
// symbolic link in the store is listed, with its target, when the store
// follows it (core/store/artifact_link.h), else passed over; one in a
// read-only root (`read_only`) is followed to an artifact; a read-only root
// may be one artifact itself.
absl::Status ListRoot(const NamedRoot& root, Env* env, bool read_only,
                      StoreListing* listing);

}  // namespace rbln

#endif  // RBLN_CORE_STORE_LISTING_H_
