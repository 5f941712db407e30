#include "server/socket_access.h"

#include <grp.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/text.h"

namespace rbln {
namespace {

bool AllDigits(absl::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

// getgrnam_r's buffer starts here and doubles on ERANGE up to the cap: a
// group with thousands of members needs more than sysconf's hint.
constexpr size_t kGroupBufferStart = 4096;
constexpr size_t kGroupBufferMax = 1 << 20;

}  // namespace

absl::StatusOr<mode_t> ParseSocketMode(absl::string_view text) {
  const bool octal_digits = !text.empty() && text.size() <= 4 &&
                            std::all_of(text.begin(), text.end(), [](char c) {
                              return c >= '0' && c <= '7';
                            });
  if (!octal_digits) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected an octal mode such as 0660, got '", Echo(text), "'"));
  }
  mode_t mode = 0;
  for (char c : text) mode = mode * 8 + static_cast<mode_t>(c - '0');
  if (mode > 0777) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", Echo(text),
        "' has bits beyond the permissions (at most 0777; no setuid, setgid "
        "or sticky bit)"));
  }
  return mode;
}

absl::StatusOr<gid_t> ResolveGroup(absl::string_view text) {
  if (text.empty()) return absl::InvalidArgumentError("the group is empty");
  const std::string name(text);
  std::vector<char> buffer(kGroupBufferStart);
  while (true) {
    group entry{};
    group* found = nullptr;
    const int error =
        getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found);
    if (error == ERANGE && buffer.size() < kGroupBufferMax) {
      buffer.resize(buffer.size() * 2);
      continue;
    }
    if (found != nullptr) return found->gr_gid;
    if (error != 0 && error != ENOENT && error != ESRCH) {
      return absl::UnavailableError(absl::StrCat(
          "cannot look up group '", Echo(text), "': ", strerror(error)));
    }
    break;
  }
  uint32_t number = 0;
  if (AllDigits(text) && absl::SimpleAtoi(text, &number)) {
    return static_cast<gid_t>(number);
  }
  return absl::NotFoundError(absl::StrCat("unknown group '", Echo(text),
                                          "' (give a group name or number)"));
}

}  // namespace rbln
