#include "core/store/recovery.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "core/core_metrics.h"
#include "core/status_macros.h"
#include "core/store/intent_record.h"
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

std::string RelJoin(absl::string_view dir, absl::string_view name) {
  return dir.empty() ? std::string(name) : JoinPath(dir, name);
}

// The shell command that removes `path`, safe to paste whatever the name:
// '...' when every byte is a plain one, else bash's $'...' with every other
// byte as \xHH (a quote or a backslash in a name cannot end the word).
std::string RemoveCommand(const std::string& path) {
  const auto plain = [](unsigned char c) {
    return absl::ascii_isalnum(c) || absl::StrContains("/._-+,:=@%~ ", c);
  };
  if (std::all_of(path.begin(), path.end(), plain)) {
    return absl::StrCat("rm -rf -- '", path, "'");
  }
  std::string quoted = "$'";
  for (unsigned char c : path) {
    if (plain(c) && c != ' ') {
      quoted.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&quoted, "\\x", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return absl::StrCat("rm -rf -- ", quoted, "'");
}

// Removes the directories one record names, then the record. The paths
// it could not remove (nor look at) go to `held`, the record stays.
void RecoverOneRecord(Env* env, const NamedRoot& store,
                      const std::string& record, RecoveredDebris* recovered,
                      absl::flat_hash_set<std::string>* held) {
  absl::StatusOr<std::string> contents =
      env->ReadFileToString(record, kMaxIntentRecordBytes);
  const ParsedIntent parsed =
      contents.ok()
          ? ParseIntentRecord(*contents)
          : ParsedIntent{.corrupt = std::string(contents.status().message())};
  if (parsed.incomplete) {
    spdlog::info(
        "recovery: removing intent record {}, cut short by a crash before "
        "it was synced (what it would name was never made)",
        LogValue(record));
    DropIntentRecord(env, record);
    return;
  }
  if (!parsed.names.has_value()) {
    spdlog::warn(
        "recovery: intent record {} is not readable ({}): left in place, "
        "and so is any directory it names",
        LogValue(record), LogValue(parsed.corrupt));
    return;
  }
  const IntentNames& names = *parsed.names;
  const std::string parent =
      names.parent.empty() ? store.dir : JoinPath(store.dir, names.parent);
  bool removed_any = false;
  bool all_gone = true;
  for (const std::string* name : {&names.staging, &names.retired}) {
    const std::string rel = RelJoin(names.parent, *name);
    const std::string path = JoinPath(parent, *name);
    absl::StatusOr<std::optional<FileStat>> st = StatIfExists(env, path);
    if (st.ok() && !st->has_value()) continue;
    if (st.ok() && (*st)->type != FileType::kDirectory) {
      // Never made by a commit, which makes directories only.
      spdlog::warn("recovery: {} is not a directory: left in place",
                   LogValue(path));
      continue;
    }
    if (st.ok()) {
      const std::string artifact =
          RelJoin(names.parent, DebrisNamed(*name).value_or(Debris{}).owner);
      spdlog::warn(
          name == &names.retired
              ? "recovery: removing old version {} of {} that a crash or kill "
                "left waiting out its grace period"
              : "recovery: removing staging directory {} left by an "
                "interrupted commit of {} (or its old version)",
          LogValue(path), LogValue(artifact));
    }
    if (st.ok() && RemoveStagingTree(env, path, "")) {
      recovered->removed.push_back(rel);
      CountRecovery();
      removed_any = true;
      continue;
    }
    if (!st.ok()) {
      spdlog::warn("recovery: could not look at {}: {}; left in place",
                   LogValue(path), LogValue(st.status().message()));
    }
    held->insert(rel);
    all_gone = false;
  }
  if (!all_gone) return;
  // The record goes once the removal is durable (as RemoveStagingTree).
  if (removed_any && !env->SyncDir(parent).ok()) return;
  DropIntentRecord(env, record);
}

// Every record in the store's intents directory.
void RecoverRecords(Env* env, const NamedRoot& store,
                    RecoveredDebris* recovered,
                    absl::flat_hash_set<std::string>* held) {
  const std::string dir =
      JoinPath(JoinPath(store.dir, kStateDirName), kIntentDirName);
  absl::StatusOr<std::vector<DirEntry>> entries = env->ListDir(dir);
  if (!entries.ok()) {
    spdlog::warn("recovery: could not read the intent records in {}: {}",
                 LogValue(dir), LogValue(entries.status().message()));
    return;
  }
  for (const DirEntry& entry : *entries) {
    const std::string path = JoinPath(dir, entry.name);
    if (entry.type != FileType::kRegular ||
        !absl::EndsWith(entry.name, ".intent")) {
      spdlog::warn("recovery: {} is not an intent record: left in place",
                   LogValue(path));
      continue;
    }
    RecoverOneRecord(env, store, path, recovered, held);
  }
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

absl::StatusOr<RecoveredDebris> RemoveDebris(Env* env, const NamedRoot& store) {
  RecoveredDebris recovered;
  absl::flat_hash_set<std::string> held;
  RecoverRecords(env, store, &recovered, &held);
  const auto visit = [&](const std::string& rel_dir,
                         const std::vector<DirEntry>& entries) {
    std::vector<std::string> descend;
    for (const DirEntry& entry : entries) {
      if (entry.type != FileType::kDirectory) continue;
      const std::string rel = RelJoin(rel_dir, entry.name);
      const std::string path = JoinPath(store.dir, rel);
      if (const std::optional<Debris> debris = DebrisNamed(entry.name)) {
        // Named by a record whose removal failed: logged already.
        if (held.contains(rel)) continue;
        // A live writer's in another process (its artifact is locked).
        absl::StatusOr<std::unique_ptr<ArtifactLock>> busy =
            ArtifactLock::Acquire(env, store.dir,
                                  RelJoin(rel_dir, debris->owner),
                                  /*wait=*/false, nullptr, nullptr);
        if (!busy.ok()) continue;
        spdlog::warn(
            "left in place: {} looks like {} directory but this daemon holds "
            "no record of making it; remove it with: {}",
            LogValue(path), debris->retired ? "a retired" : "a staging",
            RemoveCommand(path));
        recovered.left_in_place.push_back(rel);
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
