#include "core/text.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace rbln {

namespace {

// Escapes `s` byte by byte until the escaped text would pass `max_bytes`.
std::string EscapeAndCut(absl::string_view s, size_t max_bytes) {
  std::string out;
  size_t used = 0;
  for (; used < s.size(); ++used) {
    const std::string piece = absl::CHexEscape(s.substr(used, 1));
    if (out.size() + piece.size() > max_bytes) break;
    out += piece;
  }
  if (used < s.size()) {
    absl::StrAppend(&out, "... (", s.size() - used, " more bytes)");
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
