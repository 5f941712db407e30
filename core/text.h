// Text that came from outside (a caller's request, a file in the store) on
// its way into an error message or a log line: cut to a known length and
// escaped, so that a hostile name can neither bloat a gRPC status past what
// fits in its metadata nor forge a log line.
//
// Thread-safe: pure functions.
#ifndef RBLN_CORE_TEXT_H_
#define RBLN_CORE_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace rbln {

// How much of a caller's input an error message repeats. Enough to recognise
// any real name; a status must stay far below gRPC's 8 KiB metadata limit.
inline constexpr size_t kMaxEchoBytes = 200;
// Every status message the server sends is cut to fit in this many bytes.
inline constexpr size_t kMaxStatusMessageBytes = 1000;

// `s` for an error message: printable ASCII as it is, everything else as a C
// escape (\n, \x00, \xc3), cut where the escaped text would pass
// kMaxEchoBytes, with "... (N more bytes)" telling how much was left out.
std::string Echo(absl::string_view s);

// `text` made fit for a reply (a status message or a string field): valid
// UTF-8 whatever it holds (proto3 strings must be, or clients fail to parse
// the reply), control characters and invalid bytes written as C escapes (no
// terminal escape sequence or line break reaches a client), and cut on a
// character boundary to at most `max_bytes`, ending in "... (cut)". Paths
// from the file system reach messages unescaped before this.
std::string WireText(absl::string_view text,
                     size_t max_bytes = kMaxStatusMessageBytes);

// A logfmt value: always in double quotes, with \" \\ and every byte outside
// printable ASCII escaped, so that one request is one line whatever it names;
// cut at `max_bytes` of escaped text as Echo cuts.
std::string LogValue(absl::string_view s,
                     size_t max_bytes = kMaxStatusMessageBytes);
// The same, appended to `out` (a log line being built).
void AppendLogValue(absl::string_view s, size_t max_bytes, std::string* out);

// "15.72 GiB": a byte count as messages and sources print it, to two
// decimals.
std::string FormatGib(uint64_t bytes);
// "16877879296 bytes (15.72 GiB)": exact, and readable.
std::string FormatBytes(uint64_t bytes);

}  // namespace rbln

#endif  // RBLN_CORE_TEXT_H_
