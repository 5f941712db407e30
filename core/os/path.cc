#include "core/os/path.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace rbln {

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

absl::string_view Basename(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

absl::string_view Dirname(absl::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos) return ".";
  return slash == 0 ? absl::string_view("/") : path.substr(0, slash);
}

bool IsWithin(absl::string_view a, absl::string_view b) {
  return a == b || (absl::StartsWith(a, b) && a[b.size()] == '/');
}

}  // namespace rbln
