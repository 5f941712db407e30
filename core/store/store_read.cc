// ArtifactStore's reads (core/store/store.h): artifacts and summaries
// through the artifact cache, under the artifact's reader lock, and the
// listings of the store and the read-only roots (core/store/listing.h).
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "core/core_metrics.h"
#include "core/error_facts.h"
#include "core/status_macros.h"
#include "core/store/listing.h"
#include "core/store/store.h"

namespace rbln {
namespace {

// What `read` returns, read under the reader lock of the artifact `name`
// (so that no exchange swaps the directory mid-read), shared; an error
// names the artifact.
template <typename T, typename Read>
absl::StatusOr<std::shared_ptr<const T>> ReadLocked(ArtifactLockTable& locks,
                                                    const std::string& name,
                                                    const Read& read) {
  absl::StatusOr<T> result;
  {
    std::shared_ptr<ArtifactLockEntry> entry = locks.Entry(name);
    absl::ReaderMutexLock lock(&entry->rw);
    result = read();
  }
  if (!result.ok()) return NameArtifactInFacts(result.status(), name);
  return std::make_shared<const T>(*std::move(result));
}

// A lookup that may not read (ReadMode::kCachedOnly) counts only when it
// hits: on a miss its caller reads next, and that lookup counts, so that one
// read counts once.
void CountCacheMiss(ArtifactStore::ReadMode mode) {
  if (mode != ArtifactStore::ReadMode::kCachedOnly) {
    CountArtifactCacheLookup(CacheLookup::kMiss);
  }
}

// The root-relative prefix that selects, in `root`, the canonical names
// starting with `prefix`; none when no name of the root can.
std::optional<std::string> PrefixIn(const NamedRoot& root,
                                    absl::string_view prefix) {
  const std::string qualifier = QualifiedArtifactName(root, "");
  if (absl::StartsWith(prefix, qualifier)) {
    return std::string(prefix.substr(qualifier.size()));
  }
  if (absl::StartsWith(qualifier, prefix)) return "";
  return std::nullopt;
}

}  // namespace

ArtifactOptions ArtifactStore::WithCodecs(const Located& at,
                                          ArtifactOptions options) {
  options.external_codec = options_.external_codec;
  options.inspect_cache = &inspect_cache_;
  options.freshness = at.freshness;
  return options;
}

template <typename Find>
absl::StatusOr<std::invoke_result_t<Find, const ArtifactStore::Located&>>
ArtifactStore::FindFollowing(const Located& at, const Find& find, ReadMode mode,
                             std::optional<Located>* target,
                             std::string* link_target) {
  if (link_target != nullptr) link_target->clear();
  // What the cache holds by the name asked is no link: a link is looked
  // for (one more call) only where the cache does not answer.
  auto found = find(at);
  if (found != nullptr || mode == ReadMode::kCachedOnly) return found;
  RBLN_ASSIGN_OR_RETURN(*target, FollowLink(at));
  if (!target->has_value()) return found;
  if (link_target != nullptr) *link_target = (*target)->name;
  return find(**target);
}

absl::StatusOr<Artifact> ArtifactStore::Read(absl::string_view name,
                                             ArtifactOptions options) {
  RBLN_ASSIGN_OR_RETURN(std::shared_ptr<const Artifact> artifact,
                        ReadShared(name, std::move(options)));
  return *artifact;
}

absl::StatusOr<std::shared_ptr<const Artifact>> ArtifactStore::ReadShared(
    absl::string_view name, ArtifactOptions options, ReadMode mode,
    std::string* link_target) {
  RBLN_ASSIGN_OR_RETURN(std::shared_ptr<const Located> at, Locate(name));
  return ReadShared(*at, std::move(options), mode, link_target);
}

absl::StatusOr<std::shared_ptr<const Artifact>> ArtifactStore::ReadShared(
    const Located& asked, ArtifactOptions options, ReadMode mode,
    std::string* link_target) {
  const bool cached = !options.verify_payload;
  std::optional<Located> target;
  RBLN_ASSIGN_OR_RETURN(
      std::shared_ptr<const Artifact> artifact,
      FindFollowing(
          asked,
          [&](const Located& at) -> std::shared_ptr<const Artifact> {
            if (!cached) return nullptr;
            return artifact_cache_.FindArtifact(at.freshness, at.path);
          },
          mode, &target, link_target));
  if (artifact != nullptr) {
    CountArtifactCacheLookup(CacheLookup::kHit);
    return artifact;
  }
  if (cached) CountCacheMiss(mode);
  if (mode == ReadMode::kCachedOnly) return nullptr;
  const Located& at = target.has_value() ? *target : asked;
  const absl::Time start = absl::Now();
  RBLN_ASSIGN_OR_RETURN(std::shared_ptr<const Artifact> shared,
                        ReadLocked<Artifact>(locks_, at.name, [&] {
                          return Artifact::Open(
                              at.env, at.path,
                              WithCodecs(at, std::move(options)));
                        }));
  if (cached && mode == ReadMode::kMayRead) {
    artifact_cache_.InsertArtifact(at.freshness, shared, start);
  }
  return shared;
}

absl::StatusOr<std::shared_ptr<const ArtifactSummary>>
ArtifactStore::ReadSummary(absl::string_view name, ReadMode mode,
                           std::string* link_target) {
  RBLN_ASSIGN_OR_RETURN(std::shared_ptr<const Located> at, Locate(name));
  return ReadSummary(*at, mode, link_target);
}

absl::StatusOr<std::shared_ptr<const ArtifactSummary>>
ArtifactStore::ReadSummary(const Located& asked, ReadMode mode,
                           std::string* link_target) {
  std::optional<Located> target;
  RBLN_ASSIGN_OR_RETURN(std::shared_ptr<const ArtifactSummary> summary,
                        FindFollowing(
                            asked,
                            [&](const Located& at) {
                              return artifact_cache_.FindSummary(at.freshness,
                                                                 at.path);
                            },
                            mode, &target, link_target));
  if (summary != nullptr) {
    CountArtifactCacheLookup(CacheLookup::kHit);
    return summary;
  }
  CountCacheMiss(mode);
  if (mode == ReadMode::kCachedOnly) return nullptr;
  const Located& at = target.has_value() ? *target : asked;
  const absl::Time start = absl::Now();
  RBLN_ASSIGN_OR_RETURN(std::shared_ptr<const ArtifactSummary> shared,
                        ReadLocked<ArtifactSummary>(locks_, at.name, [&] {
                          return ReadArtifactSummary(at.env, at.path,
                                                     at.freshness);
                        }));
  if (mode == ReadMode::kMayRead) {
    artifact_cache_.InsertSummary(at.freshness, at.path, shared, start);
  }
  return shared;
}

absl::StatusOr<std::vector<std::string>> ArtifactStore::List() {
  StoreListing listing;
  RBLN_RETURN_IF_ERROR(ListRoot(names_[0], env_, false, &listing));
  return std::move(listing.names);
}

absl::StatusOr<StoreListing> ArtifactStore::ListAll() {
  RBLN_ASSIGN_OR_RETURN(ListedPage page,
                        ListPage({}, "", std::numeric_limits<size_t>::max()));
  StoreListing listing;
  AppendToListing(std::move(page.entries), &listing);
  return listing;
}

absl::StatusOr<ArtifactStore::ListedPage> ArtifactStore::ListPage(
    const ListPosition& from, absl::string_view prefix, size_t limit) {
  ListedPage page;
  for (size_t root = from.root; root < names_.size(); ++root) {
    std::optional<std::string> rel_prefix = PrefixIn(names_[root], prefix);
    if (!rel_prefix.has_value()) continue;
    const RootPageQuery query = {.after = root == from.root ? from.after : "",
                                 .prefix = *std::move(rel_prefix),
                                 .limit = limit - page.entries.size()};
    if (query.limit == 0) {
      page.more = true;
      break;
    }
    absl::StatusOr<bool> more =
        ListRootPage(names_[root], root, LocateRel(root, "").env, root > 0,
                     query, &page.entries);
    if (!more.ok()) {
      if (root == 0) return more.status();
      // A read-only root that cannot be read (unmounted, permissions
      // changed) is one skipped entry, not a failed listing.
      if (query.after.empty() && query.prefix.empty()) {
        page.entries.push_back(
            {.name = LocateRel(root, "").name,
             .skipped_reason = std::string(more.status().message()),
             .next = {root + 1, ""}});
      }
      continue;
    }
    if (*more) {
      page.more = true;
      break;
    }
  }
  return page;
}

}  // namespace rbln
