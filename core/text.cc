#include "core/text.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace rbln {

std::string Echo(absl::string_view s) {
  const absl::string_view shown = s.substr(0, kMaxEchoBytes);
  std::string out = absl::CHexEscape(shown);
  if (s.size() > shown.size()) {
    absl::StrAppend(&out, "... (", s.size() - shown.size(), " more bytes)");
  }
  return out;
}

std::string TruncateMessage(absl::string_view message, size_t max_bytes) {
  constexpr absl::string_view kCut = "... (cut)";
  if (message.size() <= max_bytes) return std::string(message);
  if (max_bytes <= kCut.size()) return std::string(kCut.substr(0, max_bytes));
  return absl::StrCat(message.substr(0, max_bytes - kCut.size()), kCut);
}

std::string LogValue(absl::string_view s) {
  return absl::StrCat("\"", absl::CHexEscape(s), "\"");
}

}  // namespace rbln
