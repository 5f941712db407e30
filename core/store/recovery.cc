#include "core/store/recovery.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "core/core_metrics.h"
#include "core/status_macros.h"
#include "core/store/listing.h"
#include "core/store/locks.h"
#include "core/store/retired_trees.h"
#include "core/store/staging_name.h"
#include "core/text.h"
#include "spdlog/spdlog.h"

namespace rbln {
namespace {

// What a commit may leave beside an artifact directory: the staging
// directory of an interrupted commit, or an old version that was waiting out
// its grace (core/store/staging_name.h).
struct Debris {
  std::string owner;  // the artifact's last component
  bool retired = false;
};

std::optional<Debris> DebrisNamed(absl::string_view entry) {
  if (std::optional<std::string> owner = StagedArtifactName(entry)) {
    return Debris{*std::move(owner), false};
  }
  if (std::optional<std::string> owner = RetiredArtifactName(entry)) {
    return Debris{*std::move(owner), true};
  }
  return std::nullopt;
}

}  // namespace

void RemoveStaleLockFiles(Env* env, const std::string& dir) {
  absl::StatusOr<std::vector<DirEntry>> entries = env->ListDir(dir);
  if (!entries.ok()) return;
  for (const DirEntry& entry : *entries) {
    const std::string path = JoinPath(dir, entry.name);
    // A lock file left by a writer that was killed; one that a maintenance
    // tool holds now stays.
    absl::StatusOr<std::unique_ptr<FileLock>> stale =
        env->LockFile(path, /*exclusive=*/true, /*wait=*/false);
    if (!stale.ok()) continue;
    absl::Status removed = env->RemoveFile(path);
    if (!removed.ok()) {
      spdlog::warn("could not remove stale lock file {}: {}", LogValue(path),
                   LogValue(removed.message()));
    }
  }
}

absl::StatusOr<std::vector<std::string>> RemoveDebris(Env* env,
                                                      const NamedRoot& store) {
  std::vector<std::string> recovered;
  const auto visit = [&](const std::string& rel_dir,
                         const std::vector<DirEntry>& entries) {
    std::vector<std::string> descend;
    for (const DirEntry& entry : entries) {
      if (entry.type != FileType::kDirectory) continue;
      const std::string rel =
          rel_dir.empty() ? entry.name : JoinPath(rel_dir, entry.name);
      const std::string path = JoinPath(store.dir, rel);
      if (const std::optional<Debris> debris = DebrisNamed(entry.name)) {
        const std::string artifact =
            rel_dir.empty() ? debris->owner : JoinPath(rel_dir, debris->owner);
        // Debris of an artifact that is locked belongs to a live writer in
        // another process: not debris.
        absl::StatusOr<std::unique_ptr<ArtifactLock>> busy =
            ArtifactLock::Acquire(env, store.dir, artifact, /*wait=*/false,
                                  nullptr, nullptr);
        if (!busy.ok()) continue;
        if (debris->retired) {
          spdlog::warn(
              "recovery: removing old version {} of {} that a crash or kill "
              "left waiting out its grace period",
              LogValue(path), LogValue(artifact));
        } else {
          // An old version too, when a crash came between the exchange and
          // its move to a retired name.
          spdlog::warn(
              "recovery: removing staging directory {} left by an "
              "interrupted commit of {}",
              LogValue(path), LogValue(artifact));
        }
        RemoveStagingTree(env, path);
        recovered.push_back(rel);
        CountRecovery();
        continue;
      }
      if (absl::StartsWith(entry.name, ".")) continue;
      if (IsArtifactDir(env, path).value_or(false)) continue;
      descend.push_back(rel);
    }
    return descend;
  };
  RBLN_RETURN_IF_ERROR(WalkRoot(store, env, visit, nullptr));
  return recovered;
}

}  // namespace rbln
