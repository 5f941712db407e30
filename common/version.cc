#include "common/version.h"

#include "absl/strings/str_cat.h"
// Generated in the build tree (cmake/BuildCommit.cmake); only this file
// includes it, so a new commit recompiles only this file.
#include "rbln_build_commit.h"

namespace rbln {

absl::string_view ProjectVersion() { return RBLN_PROJECT_VERSION; }

absl::string_view BuildCommit() { return RBLN_BUILD_COMMIT; }

std::string VersionLine(absl::string_view program) {
  return absl::StrCat(program, " ", ProjectVersion(), " (commit ",
                      BuildCommit(), ")");
}

}  // namespace rbln
