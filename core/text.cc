#include "core/text.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace rbln {

namespace {

std::string EscapeAndCut(absl::string_view s, size_t max_bytes) {
  const absl::string_view shown = s.substr(0, max_bytes);
  std::string out = absl::CHexEscape(shown);
  if (s.size() > shown.size()) {
    absl::StrAppend(&out, "... (", s.size() - shown.size(), " more bytes)");
  }
  return out;
}

}  // namespace

std::string Echo(absl::string_view s) { return EscapeAndCut(s, kMaxEchoBytes); }

std::string TruncateMessage(absl::string_view message, size_t max_bytes) {
  constexpr absl::string_view kCut = "... (cut)";
  if (message.size() <= max_bytes) return std::string(message);
  if (max_bytes <= kCut.size()) return std::string(kCut.substr(0, max_bytes));
  return absl::StrCat(message.substr(0, max_bytes - kCut.size()), kCut);
}

std::string LogValue(absl::string_view s, size_t max_bytes) {
  return absl::StrCat("\"", EscapeAndCut(s, max_bytes), "\"");
}

}  // namespace rbln
