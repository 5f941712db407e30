#include "core/store/intent_record.h"

#include <memory>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/store/locks.h"
#include "core/store/staging_name.h"
#include "core/text.h"
#include "spdlog/spdlog.h"

namespace rbln {
namespace {

constexpr absl::string_view kHeader = "rbln-artifactd intent 1";
constexpr absl::string_view kEnd = "end\n";
// Staging names are random; two alike in one state directory would take
// more tries than this only if the kernel's random bits were broken.
constexpr int kMaxNameTries = 4;

std::string RecordContents(absl::string_view parent_rel,
                           absl::string_view staging,
                           absl::string_view retired) {
  return absl::StrCat(kHeader, "\nparent ", absl::CEscape(parent_rel),
                      "\nstaging ", absl::CEscape(staging), "\nretired ",
                      absl::CEscape(retired), "\n", kEnd);
}

// The value of the line `key value`, unescaped, or nullopt.
std::optional<std::string> Field(absl::string_view line,
                                 absl::string_view key) {
  if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, " ")) {
    return std::nullopt;
  }
  std::string value;
  if (!absl::CUnescape(line, &value)) return std::nullopt;
  return value;
}

// A store-relative directory a commit may stage in: no empty, `.` or `..`
// component, not absolute, and not the state directory.
bool IsStoreRelativeDir(absl::string_view rel) {
  if (rel.empty()) return true;
  if (absl::StrContains(rel, absl::string_view("\0", 1))) return false;
  const std::vector<absl::string_view> parts = absl::StrSplit(rel, '/');
  for (absl::string_view part : parts) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return parts.front() != kStateDirName;
}

}  // namespace

absl::StatusOr<StagingIntent> RecordStagingIntent(Env* env,
                                                  absl::string_view store_root,
                                                  const std::string& parent,
                                                  absl::string_view base) {
  absl::string_view rel = parent;
  if (rel != store_root && (!absl::ConsumePrefix(&rel, store_root) ||
                            !absl::ConsumePrefix(&rel, "/"))) {
    return absl::InternalError(absl::StrCat(
        "staging parent ", Echo(parent), " is not in the store ", store_root));
  }
  if (rel == store_root) rel = "";
  const std::string dir =
      absl::StrCat(store_root, "/", kStateDirName, "/", kIntentDirName);
  for (int tries = 1;; ++tries) {
    const std::string staging = StagingNameFor(base);
    const std::string retired = RetiredNameFor(base);
    StagingIntent intent{
        .record = JoinPath(dir, absl::StrCat(absl::string_view(staging).substr(
                                                 staging.size() - 16),
                                             ".intent")),
        .staging = JoinPath(parent, staging),
        .retired = JoinPath(parent, retired)};
    absl::StatusOr<std::unique_ptr<WritableFile>> file =
        env->NewWritableFile(intent.record);
    if (absl::IsAlreadyExists(file.status()) && tries < kMaxNameTries) {
      continue;
    }
    if (!file.ok()) return file.status();
    absl::Status status =
        (*file)->WriteAt(0, RecordContents(rel, staging, retired));
    if (status.ok()) status = (*file)->Sync();
    const absl::Status closed = (*file)->Close();
    if (status.ok()) status = closed;
    // The record's name must be durable too before the directory it names
    // may exist.
    if (status.ok()) status = env->SyncDir(dir);
    if (!status.ok()) {
      DropIntentRecord(env, intent.record);
      return status;
    }
    return intent;
  }
}

void DropIntentRecord(Env* env, const std::string& record) {
  if (record.empty()) return;
  const absl::Status removed = env->RemoveFile(record);
  if (!removed.ok() && !absl::IsNotFound(removed)) {
    spdlog::warn(
        "could not remove the intent record {}: {}; the next start removes "
        "it",
        LogValue(record), LogValue(removed.message()));
  }
}

ParsedIntent ParseIntentRecord(absl::string_view contents) {
  ParsedIntent parsed;
  if (!absl::ConsumeSuffix(&contents, kEnd)) {
    // Written in one piece and then synced: a record without its last line
    // lost what was not synced, and its directory was never made.
    parsed.incomplete = true;
    return parsed;
  }
  const std::vector<absl::string_view> lines =
      absl::StrSplit(contents, absl::MaxSplits('\n', 4));
  if (lines.size() != 5 || lines[0] != kHeader || !lines[4].empty()) {
    parsed.corrupt = "not a record of this daemon's version";
    return parsed;
  }
  std::optional<std::string> parent = Field(lines[1], "parent");
  std::optional<std::string> staging = Field(lines[2], "staging");
  std::optional<std::string> retired = Field(lines[3], "retired");
  if (!parent || !staging || !retired) {
    parsed.corrupt = "a field is missing or badly escaped";
    return parsed;
  }
  const std::optional<std::string> staged = StagedArtifactName(*staging);
  if (!IsStoreRelativeDir(*parent) || !staged.has_value() ||
      RetiredArtifactName(*retired) != staged ||
      absl::StrContains(*staged, '/') ||
      absl::StrContains(*staged, absl::string_view("\0", 1))) {
    parsed.corrupt = "it names no staging directory in the store";
    return parsed;
  }
  parsed.names =
      IntentNames{*std::move(parent), *std::move(staging), *std::move(retired)};
  return parsed;
}

}  // namespace rbln
