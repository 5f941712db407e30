// Listing a root of names (the store, or a read-only root): walking its
// directories from the top down, and finding the artifacts in them, for
// ArtifactStore::ListPage (and List and ListAll, one page of everything);
// recovery walks the store the same way (core/store/recovery.h).
//
// A page is found in byte order of the root-relative names and resumes
// after a name without walking what lies before it: each directory is read
// and ordered as the walk reaches it, and only the directories on the way
// to the resume name, and after it, are read (docs/performance.md,
// "Listing"). Nothing is kept between pages.
//
// Thread-safe (no state of their own): a walk may run beside writes, and
// sees what changes meanwhile or not.
#ifndef RBLN_CORE_STORE_LISTING_H_
#define RBLN_CORE_STORE_LISTING_H_

#include <functional>
#include <map>
#include <optional>
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

// Where a listing continues: after the root-relative position `after` of
// the root numbered `root` ("" for that root's beginning). Positions
// compare as bytes; a directory passed over is at its name plus "/", so
// that what follows it in byte order comes after it.
struct ListPosition {
  size_t root = 0;
  std::string after;
};

// One entry of a listing: an artifact, or an entry passed over.
struct ListedEntry {
  std::string rel;   // root-relative name
  std::string name;  // canonical name (QualifiedArtifactName)
  // Why it was passed over; unset for an artifact.
  std::optional<std::string> skipped_reason;
  // Of an artifact that is a symbolic link the store follows
  // (core/store/artifact_link.h), the canonical name of its target; else
  // empty.
  std::string link_target;
  ListPosition next;  // where a listing continues after this entry
};

// Moves `entries` into `listing`: artifacts (with their links' targets) and
// entries passed over.
void AppendToListing(std::vector<ListedEntry> entries, StoreListing* listing);

// What one page of one root lists: entries after `after`, whose position
// starts with `prefix` (both root-relative), at most `limit` of them.
struct RootPageQuery {
  std::string after;
  std::string prefix;
  size_t limit = 0;
};

// Appends the entries of `root` (numbered `number` in ListedEntry::next)
// that `query` selects to `entries`, in byte order of their positions, as
// ListRoot finds them; returns whether more follow in this root (the page
// filled before the walk ended). The root's own error is returned.
absl::StatusOr<bool> ListRootPage(const NamedRoot& root, size_t number,
                                  Env* env, bool read_only,
                                  const RootPageQuery& query,
                                  std::vector<ListedEntry>* entries);

}  // namespace rbln

#endif  // RBLN_CORE_STORE_LISTING_H_
