#include "core/store/listing.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <queue>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/format/rbln_config.h"
#include "core/status_macros.h"
#include "core/store/artifact_link.h"
#include "core/text.h"
#include "spdlog/spdlog.h"

namespace rbln {
namespace {

// The absolute path of `rel` in `root`.
std::string PathIn(const NamedRoot& root, const std::string& rel) {
  return rel.empty() ? root.dir : JoinPath(root.dir, rel);
}

// What an entry of a directory turned out to be.
enum class EntryKind { kNone, kArtifact, kSkipped, kDirectory };

// An entry of a directory, classified, at its position (its name, or for a
// directory to look into its name plus "/").
struct Classified {
  std::string position;
  std::string rel;
  EntryKind kind = EntryKind::kNone;
  std::string reason;  // kSkipped's
  // A kArtifact that is a link the store follows: its target's canonical
  // name.
  std::string link_target;
};

// Orders a min-heap by position.
struct LaterPosition {
  bool operator()(const Classified& a, const Classified& b) const {
    return a.position > b.position;
  }
};

// ListRootPage's walk: one page of a root, into `entries`.
class PageWalker {
 public:
  PageWalker(const NamedRoot& root, size_t number, Env* env, bool read_only,
             const RootPageQuery& query, std::vector<ListedEntry>* entries)
      : root_(root),
        number_(number),
        env_(env),
        read_only_(read_only),
        query_(query),
        entries_(entries) {}

  absl::StatusOr<bool> Walk() {
    // A read-only root may be one artifact itself.
    if (read_only_) {
      if (Classify("", FileType::kDirectory).kind == EntryKind::kArtifact) {
        if (query_.after.empty() && query_.prefix.empty()) {
          entries_->push_back({.rel = "",
                               .name = QualifiedArtifactName(root_, ""),
                               .next = {number_ + 1, ""}});
        }
        return false;
      }
    }
    RBLN_ASSIGN_OR_RETURN(std::vector<DirEntry> top,
                          env_->ListDir(PathIn(root_, "")));
    VisitDir("", top, 0);
    return more_;
  }

 private:
  // Whether anything at or below `position` may be on the page: after
  // query_.after (or on the way to it), and on the way to or under
  // query_.prefix.
  bool MayHold(const std::string& position) const {
    const bool after =
        position > query_.after || absl::StartsWith(query_.after, position);
    return after && (absl::StartsWith(position, query_.prefix) ||
                     absl::StartsWith(query_.prefix, position));
  }
  bool Selects(const std::string& position) const {
    return position > query_.after && absl::StartsWith(position, query_.prefix);
  }

  // Visits the entries of the directory `rel` in byte order of their
  // positions; false once the page is full. A name's position is the name
  // or the name plus "/", so entries are classified in byte order of their
  // names, and taken once no entry not yet classified can come before.
  bool VisitDir(const std::string& rel, const std::vector<DirEntry>& dir,
                int depth) {
    std::vector<std::pair<std::string, FileType>> names;
    for (const DirEntry& entry : dir) {
      if (absl::StartsWith(entry.name, ".")) continue;
      if (entry.type != FileType::kDirectory &&
          entry.type != FileType::kSymlink) {
        continue;
      }
      std::string child = rel.empty() ? entry.name : JoinPath(rel, entry.name);
      if (MayHold(absl::StrCat(child, "/"))) {
        names.emplace_back(std::move(child), entry.type);
      }
    }
    std::sort(names.begin(), names.end());
    std::priority_queue<Classified, std::vector<Classified>, LaterPosition>
        ready;
    size_t next = 0;
    while (true) {
      while (next < names.size() &&
             (ready.empty() || ready.top().position > names[next].first)) {
        ready.push(Classify(names[next].first, names[next].second));
        ++next;
      }
      if (ready.empty()) return true;
      Classified entry = ready.top();
      ready.pop();
      if (!Visit(std::move(entry), depth)) return false;
    }
  }

  // Takes an entry, or looks into a directory; false once the page is full.
  bool Visit(Classified entry, int depth) {
    if (entry.kind != EntryKind::kDirectory) return Take(std::move(entry));
    if (!MayHold(entry.position)) return true;
    if (depth + 1 >= kMaxStoreDepth) {
      entry.kind = EntryKind::kSkipped;
      entry.reason =
          absl::StrCat("deeper than ", kMaxStoreDepth, " directories");
      return Take(std::move(entry));
    }
    absl::StatusOr<std::vector<DirEntry>> dir =
        env_->ListDir(PathIn(root_, entry.rel));
    if (!dir.ok()) {
      // One bad directory below the root (removed meanwhile, unreadable,
      // too deep a path) must not hide the rest.
      entry.kind = EntryKind::kSkipped;
      entry.reason = absl::StrCat("cannot be read: ", dir.status().message());
      return Take(std::move(entry));
    }
    return VisitDir(entry.rel, *dir, depth + 1);
  }

  // Adds an artifact or an entry passed over when the page selects it;
  // false (and more_) when the page is full.
  bool Take(Classified entry) {
    if (entry.kind == EntryKind::kNone || !Selects(entry.position)) {
      return true;
    }
    if (entries_->size() >= first_ + query_.limit) {
      more_ = true;
      return false;
    }
    ListedEntry listed = {.rel = entry.rel,
                          .name = QualifiedArtifactName(root_, entry.rel),
                          .link_target = std::move(entry.link_target),
                          .next = {number_, entry.position}};
    if (entry.kind == EntryKind::kSkipped) {
      spdlog::warn("skipping {}: {}", LogValue(listed.name),
                   LogValue(entry.reason));
      listed.skipped_reason = std::move(entry.reason);
    }
    entries_->push_back(std::move(listed));
    return true;
  }

  // What the entry `rel` of type `type` is: an artifact (or a link to one
  // that is followed), a directory to look into, an entry passed over (a
  // link not followed, what cannot be told), or nothing to list.
  Classified Classify(const std::string& rel, FileType type) {
    Classified entry = {.position = rel, .rel = rel};
    if (type == FileType::kSymlink) {
      if (!read_only_) return ClassifyStoreLink(std::move(entry));
      // In a read-only root a link is followed if it stays inside.
      absl::StatusOr<FileStat> target = env_->Stat(PathIn(root_, rel));
      if (!target.ok()) {
        return Skipped(std::move(entry),
                       std::string(target.status().message()));
      }
      if (target->type != FileType::kDirectory) return entry;
    }
    absl::StatusOr<std::optional<FileStat>> config =
        StatIfExists(env_, JoinPath(PathIn(root_, rel), kRblnConfigFileName));
    if (!config.ok()) {
      return Skipped(std::move(entry), std::string(config.status().message()));
    }
    if (config->has_value() && (*config)->type == FileType::kSymlink) {
      return Skipped(std::move(entry),
                     absl::StrCat(kRblnConfigFileName,
                                  " is a symbolic link; the store follows "
                                  "none (copy the file in, or serve the "
                                  "artifact with --read-only-root)"));
    }
    if (config->has_value() && (*config)->type == FileType::kRegular) {
      entry.kind = EntryKind::kArtifact;
    } else if (type == FileType::kSymlink) {
      return Skipped(std::move(entry),
                     "a symbolic link to a directory that is not an "
                     "artifact; links are not walked into");
    } else {
      entry.kind = EntryKind::kDirectory;
      entry.position = absl::StrCat(rel, "/");
    }
    return entry;
  }

  // A symbolic link in the store: an artifact, with its target, when the
  // store follows it (core/store/artifact_link.h), else passed over.
  Classified ClassifyStoreLink(Classified entry) {
    absl::StatusOr<std::optional<std::string>> target =
        FollowArtifactLink(env_, root_, entry.rel);
    if (!target.ok()) {
      // The reason, without the name that the listing shows beside it.
      absl::string_view reason = target.status().message();
      absl::ConsumePrefix(&reason, absl::StrCat(Echo(entry.rel), " is "));
      return Skipped(std::move(entry), std::string(reason));
    }
    if (!target->has_value()) return entry;  // replaced meanwhile
    entry.kind = EntryKind::kArtifact;
    entry.link_target = **std::move(target);
    return entry;
  }

  static Classified Skipped(Classified entry, std::string reason) {
    entry.kind = EntryKind::kSkipped;
    entry.reason = std::move(reason);
    return entry;
  }

  const NamedRoot& root_;
  const size_t number_;
  Env* const env_;
  const bool read_only_;
  const RootPageQuery& query_;
  std::vector<ListedEntry>* const entries_;
  const size_t first_ = entries_->size();
  bool more_ = false;
};

}  // namespace

absl::StatusOr<bool> IsArtifactDir(Env* env, const std::string& path) {
  RBLN_ASSIGN_OR_RETURN(std::optional<FileStat> st,
                        StatIfExists(env, JoinPath(path, kRblnConfigFileName)));
  return st.has_value() && st->type == FileType::kRegular;
}

absl::Status WalkRoot(const NamedRoot& root, Env* env,
                      const StoreVisitor& visit,
                      std::vector<StoreListing::Skipped>* skipped) {
  auto skip = [&](const std::string& rel, std::string reason) {
    const std::string name = QualifiedArtifactName(root, rel);
    spdlog::warn("skipping {}: {}", LogValue(name), LogValue(reason));
    if (skipped != nullptr) skipped->push_back({name, std::move(reason)});
  };
  std::vector<std::pair<std::string, int>> pending = {{"", 0}};
  while (!pending.empty()) {
    const auto [rel, depth] = std::move(pending.back());
    pending.pop_back();
    absl::StatusOr<std::vector<DirEntry>> entries =
        env->ListDir(PathIn(root, rel));
    if (!entries.ok()) {
      // The root must be readable; one bad directory below it (removed
      // meanwhile, unreadable, too deep a path) must not hide the rest.
      if (rel.empty()) return entries.status();
      skip(rel, absl::StrCat("cannot be read: ", entries.status().message()));
      continue;
    }
    for (std::string& child : visit(rel, *entries)) {
      if (depth + 1 >= kMaxStoreDepth) {
        skip(child,
             absl::StrCat("deeper than ", kMaxStoreDepth, " directories"));
        continue;
      }
      pending.emplace_back(std::move(child), depth + 1);
    }
  }
  return absl::OkStatus();
}

absl::Status ListRoot(const NamedRoot& root, Env* env, bool read_only,
                      StoreListing* listing) {
  std::vector<ListedEntry> entries;
  RBLN_RETURN_IF_ERROR(
      ListRootPage(root, 0, env, read_only,
                   {.limit = std::numeric_limits<size_t>::max()}, &entries)
          .status());
  AppendToListing(std::move(entries), listing);
  return absl::OkStatus();
}

void AppendToListing(std::vector<ListedEntry> entries, StoreListing* listing) {
  for (ListedEntry& entry : entries) {
    if (entry.skipped_reason.has_value()) {
      listing->skipped.push_back(
          {std::move(entry.name), *std::move(entry.skipped_reason)});
      continue;
    }
    if (!entry.link_target.empty()) {
      listing->link_targets[entry.name] = std::move(entry.link_target);
    }
    listing->names.push_back(std::move(entry.name));
  }
}

absl::StatusOr<bool> ListRootPage(const NamedRoot& root, size_t number,
                                  Env* env, bool read_only,
                                  const RootPageQuery& query,
                                  std::vector<ListedEntry>* entries) {
  return PageWalker(root, number, env, read_only, query, entries).Walk();
}

}  // namespace rbln
