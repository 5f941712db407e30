#include "core/store/listing.h"

#include <algorithm>
#include <optional>
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

// ListRoot's walk: what it found, into `listing`.
class RootLister {
 public:
  RootLister(const NamedRoot& root, Env* env, bool read_only,
             StoreListing* listing)
      : root_(root), env_(env), read_only_(read_only), listing_(listing) {}

  absl::Status List() {
    const size_t first = listing_->names.size();
    // A read-only root may be one artifact itself.
    if (read_only_ && IsArtifact("")) {
      listing_->names.push_back(QualifiedArtifactName(root_, ""));
      return absl::OkStatus();
    }
    RBLN_RETURN_IF_ERROR(WalkRoot(
        root_, env_,
        [this](const std::string& rel, const std::vector<DirEntry>& entries) {
          return Visit(rel, entries);
        },
        &listing_->skipped));
    std::sort(listing_->names.begin() + first, listing_->names.end());
    return absl::OkStatus();
  }

 private:
  // The artifacts among `entries` of the directory `rel`, listed; returns
  // the directories to look into.
  std::vector<std::string> Visit(const std::string& rel,
                                 const std::vector<DirEntry>& entries) {
    std::vector<std::string> descend;
    for (const DirEntry& entry : entries) {
      if (absl::StartsWith(entry.name, ".")) continue;
      std::string child = rel.empty() ? entry.name : JoinPath(rel, entry.name);
      if (entry.type == FileType::kSymlink) {
        VisitLink(child);
        continue;
      }
      if (entry.type != FileType::kDirectory) continue;
      const size_t noted = listing_->skipped.size();
      if (IsArtifact(child)) {
        listing_->names.push_back(QualifiedArtifactName(root_, child));
      } else if (listing_->skipped.size() == noted) {
        descend.push_back(std::move(child));
      }
    }
    return descend;
  }

  // A symbolic link at `rel`: listed when it leads to an artifact (in the
  // store, one beside it: core/store/artifact_link.h), else passed over.
  void VisitLink(const std::string& rel) {
    if (!read_only_) {
      absl::StatusOr<std::optional<std::string>> target =
          FollowArtifactLink(env_, root_, rel);
      if (!target.ok()) {
        // The reason, without the name that the listing shows beside it.
        absl::string_view reason = target.status().message();
        absl::ConsumePrefix(&reason, absl::StrCat(Echo(rel), " is "));
        Skip(rel, std::string(reason));
        return;
      }
      if (!target->has_value()) return;  // replaced meanwhile
      const std::string name = QualifiedArtifactName(root_, rel);
      listing_->names.push_back(name);
      listing_->link_targets[name] = **target;
      return;
    }
    // In a read-only root a link is followed if it stays inside.
    absl::StatusOr<FileStat> target = env_->Stat(PathIn(root_, rel));
    if (!target.ok()) {
      Skip(rel, std::string(target.status().message()));
      return;
    }
    if (target->type != FileType::kDirectory) return;
    if (IsArtifact(rel)) {
      listing_->names.push_back(QualifiedArtifactName(root_, rel));
    } else {
      Skip(rel,
           "a symbolic link to a directory that is not an artifact; "
           "links are not walked into");
    }
  }

  // Whether `rel` is an artifact; what cannot be told is noted as skipped
  // (false), so that nothing is passed over silently.
  bool IsArtifact(const std::string& rel) {
    absl::StatusOr<std::optional<FileStat>> config =
        StatIfExists(env_, JoinPath(PathIn(root_, rel), kRblnConfigFileName));
    if (!config.ok()) {
      Skip(rel, std::string(config.status().message()));
      return false;
    }
    if (config->has_value() && (*config)->type == FileType::kSymlink) {
      Skip(rel, absl::StrCat(kRblnConfigFileName,
                             " is a symbolic link; the store follows "
                             "none (copy the file in, or serve the "
                             "artifact with --read-only-root)"));
      return false;
    }
    return config->has_value() && (*config)->type == FileType::kRegular;
  }

  void Skip(const std::string& rel, std::string reason) {
    listing_->skipped.push_back(
        {QualifiedArtifactName(root_, rel), std::move(reason)});
  }

  const NamedRoot& root_;
  Env* const env_;
  const bool read_only_;
  StoreListing* const listing_;
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
  return RootLister(root, env, read_only, listing).List();
}

}  // namespace rbln
