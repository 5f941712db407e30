// The version of this build, for --version of every program and the
// daemon's GetServerInfo: the project version CMake was given
// (project(... VERSION) in CMakeLists.txt) and the git commit the sources
// were built from, read at build time by cmake/BuildCommit.cmake.
//
// Thread-safe: constants.
#ifndef RBLN_COMMON_VERSION_H_
#define RBLN_COMMON_VERSION_H_

#include <string>

#include "absl/strings/string_view.h"

namespace rbln {

// "0.1.0".
absl::string_view ProjectVersion();
// The commit's abbreviated hash ("1a2b3c4d5e6f"), with "-dirty" when
// tracked files had uncommitted changes; "unknown" for a build outside a
// git checkout (or -DRBLN_BUILD_COMMIT=... when configured with one).
absl::string_view BuildCommit();
// "rbln-artifactd 0.1.0 (commit 1a2b3c4d5e6f)": what --version prints.
std::string VersionLine(absl::string_view program);

}  // namespace rbln

#endif  // RBLN_COMMON_VERSION_H_
