// Path names as text: joining a directory and a name, and splitting a path
// at its last '/'. Lexical only: nothing here looks at the file system, so
// a symbolic link or ".." is taken as written.
//
// Thread-safe (pure functions).
#ifndef RBLN_CORE_OS_PATH_H_
#define RBLN_CORE_OS_PATH_H_

#include <string>

#include "absl/strings/string_view.h"

namespace rbln {

// Joins two path pieces with exactly one '/' ("" + name is name).
std::string JoinPath(absl::string_view dir, absl::string_view name);

// What follows the last '/' of `path` (all of it when it has none; "" when
// it ends with '/').
absl::string_view Basename(absl::string_view path);

// What precedes the last '/' of `path`, as POSIX dirname(3) has it: "/" for
// a name in the root ("/x"), "." for a path without a '/'.
absl::string_view Dirname(absl::string_view path);

// Whether the path `a` is `b` or lies below it, component by component
// ("a/bc" is not within "a/b").
bool IsWithin(absl::string_view a, absl::string_view b);

}  // namespace rbln

#endif  // RBLN_CORE_OS_PATH_H_
