// The daemon's log lines on stderr (the journal, under systemd), in one of
// two formats chosen at start-up (--log-format):
//
//   text: spdlog's default pattern; a request is one logfmt line
//         (method=SetKvcacheNumBlocks artifact="llama" ... duration_ms=3)
//   json: one JSON object a line, for fleet log shippers:
//         {"time":"2026-12-01T02:45:00.123+00:00","level":"info",
//          "message":"...", and a request's fields as keys of their own}
//
// Text that came from a caller is escaped in both: it cannot end a line or,
// in JSON, break the object (it is made valid UTF-8, as core/text.h's
// WireText makes replies).
//
// Thread-safe once SetLogFormat has run; call SetLogFormat before any other
// thread logs. A LogEvent's line carries its fields, rendered, in its
// message: a sink may format it on another thread (server/log_sink.h).
#ifndef RBLN_SERVER_LOG_FORMAT_H_
#define RBLN_SERVER_LOG_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/text.h"
#include "spdlog/spdlog.h"

namespace rbln {

enum class LogFormat { kText, kJson };

// "text" or "json"; anything else is an error saying what to give.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view text);

// Makes `logger` (and LogEvent) write `format`.
void SetLogFormat(spdlog::logger& logger, LogFormat format);

// Sends gRPC's own log lines (gpr_log) and protobuf's (its LogHandler)
// through spdlog, so that they take the chosen format too. Call it once,
// before other threads start (neither library's setter is thread-safe).
void RouteLibraryLogsToSpdlog();

// One field of a structured log line. It refers to its key and text, which
// must outlive the LogEvent that writes it.
struct LogField {
  enum class Kind { kWord, kText, kNumber, kBool };

  // A word of ours (a method or status name): unquoted in logfmt.
  static LogField Word(absl::string_view key, absl::string_view value);
  // Text that may come from outside: quoted and escaped, cut at `max_bytes`.
  static LogField Text(absl::string_view key, absl::string_view value,
                       size_t max_bytes = kMaxStatusMessageBytes);
  static LogField Number(absl::string_view key, int64_t value);
  static LogField Bool(absl::string_view key, bool value);

  absl::string_view key;
  Kind kind = Kind::kWord;
  absl::string_view text;  // kWord: the word; kText: the text, cut when written
  int64_t number = 0;
  bool boolean = false;
  size_t max_bytes = kMaxStatusMessageBytes;
};

// Logs `fields` at `level`: as "key=value ..." in text, as keys of the JSON
// object in json, with the pieces of `message` joined as its "message" (only
// JSON shows it: a text line is its fields). The line's time is `when`
// (InfinitePast: now).
void LogEvent(spdlog::level::level_enum level,
              absl::Span<const absl::string_view> message,
              absl::Span<const LogField> fields,
              absl::Time when = absl::InfinitePast());

}  // namespace rbln

#endif  // RBLN_SERVER_LOG_FORMAT_H_
