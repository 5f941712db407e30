#include "core/text.h"

#include <array>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rbln {

namespace {

// absl::CHexEscape of each byte on its own, made once: escaping appends
// these instead of escaping (and allocating) byte by byte.
const std::array<std::string, 256>& ByteEscapes() {
  static const std::array<std::string, 256>* const escapes = [] {
    auto* table = new std::array<std::string, 256>;
    for (int c = 0; c < 256; ++c) {
      const char byte = static_cast<char>(c);
      (*table)[c] = absl::CHexEscape(absl::string_view(&byte, 1));
    }
    return table;
  }();
  return *escapes;
}

// Appends `s` to `out`, escaped byte by byte, until the escaped text would
// pass `max_bytes`.
void AppendEscapedAndCut(absl::string_view s, size_t max_bytes,
                         std::string* out) {
  const std::array<std::string, 256>& escapes = ByteEscapes();
  size_t used = 0;
  size_t written = 0;
  // Bytes that stand for themselves are appended a run at a time.
  size_t run = 0;
  for (; used < s.size(); ++used) {
    const std::string& piece = escapes[static_cast<unsigned char>(s[used])];
    if (written + piece.size() > max_bytes) break;
    written += piece.size();
    if (piece.size() == 1) continue;
    out->append(s.data() + run, used - run);
    out->append(piece);
    run = used + 1;
  }
  out->append(s.data() + run, used - run);
  if (used < s.size()) {
    absl::StrAppend(out, "... (", s.size() - used, " more bytes)");
  }
}

std::string EscapeAndCut(absl::string_view s, size_t max_bytes) {
  std::string out;
  AppendEscapedAndCut(s, max_bytes, &out);
  return out;
}

}  // namespace

std::string Echo(absl::string_view s) { return EscapeAndCut(s, kMaxEchoBytes); }

namespace {

// The length of the valid UTF-8 sequence of two or more bytes at the start
// of `s`, or 0 (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF).
size_t Utf8SequenceLength(absl::string_view s) {
  const auto byte = [&s](size_t i) -> unsigned {
    return i < s.size() ? static_cast<unsigned char>(s[i]) : 0;
  };
  const auto cont = [&](size_t i, unsigned lo = 0x80, unsigned hi = 0xbf) {
    return byte(i) >= lo && byte(i) <= hi;
  };
  const unsigned b0 = byte(0);
  if (b0 >= 0xc2 && b0 <= 0xdf) return cont(1) ? 2 : 0;
  if (b0 >= 0xe0 && b0 <= 0xef) {
    const bool second = b0 == 0xe0   ? cont(1, 0xa0)
                        : b0 == 0xed ? cont(1, 0x80, 0x9f)
                                     : cont(1);
    return second && cont(2) ? 3 : 0;
  }
  if (b0 >= 0xf0 && b0 <= 0xf4) {
    const bool second = b0 == 0xf0   ? cont(1, 0x90)
                        : b0 == 0xf4 ? cont(1, 0x80, 0x8f)
                                     : cont(1);
    return second && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

}  // namespace

std::string WireText(absl::string_view text, size_t max_bytes) {
  constexpr absl::string_view kCut = "... (cut)";
  // Whole characters (or escapes), never split by the cut.
  std::vector<std::string> pieces;
  size_t total = 0;
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    size_t length = c >= 0x80 ? Utf8SequenceLength(text.substr(i)) : 0;
    if (c >= 0x20 && c < 0x7f) {
      pieces.emplace_back(1, static_cast<char>(c));
      length = 1;
    } else if (length > 0) {
      pieces.emplace_back(text.substr(i, length));
    } else {
      pieces.push_back(absl::CHexEscape(text.substr(i, 1)));
      length = 1;
    }
    total += pieces.back().size();
    i += length;
  }
  std::string out;
  if (total <= max_bytes) {
    for (const std::string& piece : pieces) out += piece;
    return out;
  }
  if (max_bytes < kCut.size()) return std::string(kCut.substr(0, max_bytes));
  for (const std::string& piece : pieces) {
    if (out.size() + piece.size() + kCut.size() > max_bytes) break;
    out += piece;
  }
  return absl::StrCat(out, kCut);
}

std::string LogValue(absl::string_view s, size_t max_bytes) {
  std::string out;
  AppendLogValue(s, max_bytes, &out);
  return out;
}

void AppendLogValue(absl::string_view s, size_t max_bytes, std::string* out) {
  out->push_back('"');
  AppendEscapedAndCut(s, max_bytes, out);
  out->push_back('"');
}

std::string FormatGib(uint64_t bytes) {
  return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (1 << 30));
}

std::string FormatBytes(uint64_t bytes) {
  return absl::StrCat(bytes, " bytes (", FormatGib(bytes), ")");
}

}  // namespace rbln
