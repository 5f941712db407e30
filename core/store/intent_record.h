// The daemon's record of the staging directories it makes
// (docs/commit-protocol.md, "Intent records"): recovery removes a staging or
// retired directory only when such a record names it, never by its name
// alone.
//
// One record per commit, a small file in `<store>/.rbln-artifactd/intents/`,
// created (O_EXCL), written and fsynced, and its directory fsynced, before
// the staging directory exists. It names the directory's parent (relative to
// the store) and both names the directory will have: its staging name and
// the retired name the old version moves to after an exchange. It is
// removed only once neither name holds a directory any more (the removal
// of the tree synced first), or once the directory was published under the
// destination's name. A record does not hold the directory's inode: the
// names are random (core/store/staging_name.h) and made by mkdir, which
// fails on an existing name, inside directories that only the store's
// writers may change.
//
// Thread-safe (every call goes through the Env).
#ifndef RBLN_CORE_STORE_INTENT_RECORD_H_
#define RBLN_CORE_STORE_INTENT_RECORD_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/os/env.h"

namespace rbln {

// The records' directory, under the state directory (core/store/locks.h).
inline constexpr char kIntentDirName[] = "intents";

// A record is at most this long: a parent path of PATH_MAX bytes, each
// escaped to at most four, and two names of at most 255 bytes fit with room
// to spare. A longer file is not one this daemon wrote, and is not read.
inline constexpr uint64_t kMaxIntentRecordBytes = 64 << 10;

// Where the staging directory of one commit goes, and its record.
struct StagingIntent {
  std::string record;   // absolute path of the record file
  std::string staging;  // absolute path of the staging directory
  std::string retired;  // absolute path of its retired name, beside it
};

// Writes, and makes durable, the record of a staging directory for the
// entry `base` of `parent` (an absolute directory path in the store whose
// root is `store_root`), choosing its staging and retired names. Nothing
// is left behind on failure.
absl::StatusOr<StagingIntent> RecordStagingIntent(Env* env,
                                                  absl::string_view store_root,
                                                  const std::string& parent,
                                                  absl::string_view base);

// Removes a record ("" does nothing); a failure is logged, and the record
// is then dropped by the next start's recovery (what it names is gone).
void DropIntentRecord(Env* env, const std::string& record);

// What a record names, parsed.
struct IntentNames {
  std::string parent;   // store-relative, "" for the root
  std::string staging;  // an exact staging name
  std::string retired;  // an exact retired name, of the same artifact
};

// The outcome of reading a record: complete and valid (names), written
// only in part (a crash came before its fsync, so what it would name was
// never made), or anything else (corrupt, with the reason).
struct ParsedIntent {
  std::optional<IntentNames> names;
  bool incomplete = false;
  std::string corrupt;
};
ParsedIntent ParseIntentRecord(absl::string_view contents);

}  // namespace rbln

#endif  // RBLN_CORE_STORE_INTENT_RECORD_H_
