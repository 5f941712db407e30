#include "server/log_format.h"

#include <google/protobuf/stubs/logging.h>
#include <grpc/support/log.h>

#include <atomic>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "spdlog/pattern_formatter.h"

namespace rbln {
namespace {

// A log message that long is a bug or an attack; the journal keeps lines up
// to 48 KiB.
constexpr size_t kMaxLogMessageBytes = 32 * 1024;

std::atomic<LogFormat> g_format{LogFormat::kText};

// Marks a LogEvent's line in JSON (as its source file): its message is the
// object's members after "time" and "level", "message" and the fields,
// rendered by LogEvent. The fields travel in the message because a sink
// may format the line later, on another thread (server/log_sink.h).
constexpr char kJsonMembersSource[] = "rbln-json-members";

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

void WriteString(JsonWriter& writer, absl::string_view text) {
  writer.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
}

void WriteField(JsonWriter& writer, const LogField& field) {
  WriteString(writer, field.key);
  switch (field.kind) {
    case LogField::Kind::kWord:
      WriteString(writer, field.text);
      break;
    case LogField::Kind::kText:
      WriteString(writer, WireText(field.text, field.max_bytes));
      break;
    case LogField::Kind::kNumber:
      writer.Int64(field.number);
      break;
    case LogField::Kind::kBool:
      writer.Bool(field.boolean);
      break;
  }
}

// {"time":…,"level":…,"message":…, fields…} and a newline. RFC 3339 time in
// UTC with its offset, to the millisecond: a fleet's hosts line up.
class JsonFormatter : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg,
              spdlog::memory_buf_t& dest) override {
    rapidjson::StringBuffer buffer;
    JsonWriter writer(buffer);
    writer.StartObject();
    WriteString(writer, "time");
    WriteString(writer, absl::FormatTime("%Y-%m-%dT%H:%M:%E3S%Ez",
                                         absl::FromChrono(msg.time),
                                         absl::UTCTimeZone()));
    WriteString(writer, "level");
    const spdlog::string_view_t level =
        spdlog::level::to_string_view(msg.level);
    WriteString(writer, absl::string_view(level.data(), level.size()));
    const absl::string_view payload(msg.payload.data(), msg.payload.size());
    if (msg.source.filename == kJsonMembersSource) {
      // The object so far, without its closing brace, then the members.
      writer.EndObject();
      dest.append(buffer.GetString(),
                  buffer.GetString() + buffer.GetSize() - 1);
      dest.push_back(',');
      dest.append(payload.data(), payload.data() + payload.size());
      dest.append(absl::string_view("}\n"));
      return;
    }
    WriteString(writer, "message");
    WriteString(writer, WireText(payload, kMaxLogMessageBytes));
    writer.EndObject();
    dest.append(buffer.GetString(), buffer.GetString() + buffer.GetSize());
    dest.push_back('\n');
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

void AppendLogfmt(absl::Span<const LogField> fields, std::string* out) {
  std::string& line = *out;
  const size_t start = line.size();
  for (const LogField& field : fields) {
    if (line.size() > start) line.push_back(' ');
    line.append(field.key.data(), field.key.size());
    line.push_back('=');
    switch (field.kind) {
      case LogField::Kind::kWord:
        line.append(field.text.data(), field.text.size());
        break;
      case LogField::Kind::kText:
        AppendLogValue(field.text, field.max_bytes, &line);
        break;
      case LogField::Kind::kNumber: {
        const absl::AlphaNum number(field.number);
        line.append(number.data(), number.size());
        break;
      }
      case LogField::Kind::kBool:
        line += field.boolean ? "true" : "false";
        break;
    }
  }
}

void LogGrpcLine(gpr_log_func_args* args) {
  spdlog::level::level_enum level = spdlog::level::info;
  if (args->severity == GPR_LOG_SEVERITY_DEBUG) level = spdlog::level::debug;
  if (args->severity == GPR_LOG_SEVERITY_ERROR) level = spdlog::level::err;
  spdlog::log(level, "gRPC {}:{}: {}", args->file, args->line, args->message);
}

// protobuf's own lines (such as "String field ... contains invalid UTF-8
// data" for a caller's bad string), which it would print to stderr as
// "[libprotobuf ERROR ...]" and so break a JSON log.
void LogProtobufLine(google::protobuf::LogLevel severity, const char* file,
                     int line, const std::string& message) {
  spdlog::level::level_enum level = spdlog::level::info;
  if (severity == google::protobuf::LOGLEVEL_WARNING) {
    level = spdlog::level::warn;
  } else if (severity >= google::protobuf::LOGLEVEL_ERROR) {
    level = spdlog::level::err;
  }
  spdlog::log(level, "protobuf {}:{}: {}", file, line, message);
}

}  // namespace

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view text) {
  if (text == "text") return LogFormat::kText;
  if (text == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown format ", Echo(text), "; use text or json"));
}

void SetLogFormat(spdlog::logger& logger, LogFormat format) {
  g_format.store(format);
  if (format == LogFormat::kJson) {
    logger.set_formatter(std::make_unique<JsonFormatter>());
  } else {
    logger.set_formatter(std::make_unique<spdlog::pattern_formatter>());
  }
}

void RouteLibraryLogsToSpdlog() {
  gpr_set_log_function(LogGrpcLine);
  google::protobuf::SetLogHandler(LogProtobufLine);
}

LogField LogField::Word(absl::string_view key, absl::string_view value) {
  LogField field;
  field.key = key;
  field.kind = Kind::kWord;
  field.text = value;
  return field;
}

LogField LogField::Text(absl::string_view key, absl::string_view value,
                        size_t max_bytes) {
  LogField field;
  field.key = key;
  field.kind = Kind::kText;
  field.text = value;
  field.max_bytes = max_bytes;
  return field;
}

LogField LogField::Number(absl::string_view key, int64_t value) {
  LogField field;
  field.key = key;
  field.kind = Kind::kNumber;
  field.number = value;
  return field;
}

LogField LogField::Bool(absl::string_view key, bool value) {
  LogField field;
  field.key = key;
  field.kind = Kind::kBool;
  field.boolean = value;
  return field;
}

void LogEvent(spdlog::level::level_enum level,
              absl::Span<const absl::string_view> message,
              absl::Span<const LogField> fields, absl::Time when) {
  spdlog::logger* logger = spdlog::default_logger_raw();
  if (!logger->should_log(level)) return;
  const spdlog::log_clock::time_point time = when == absl::InfinitePast()
                                                 ? spdlog::log_clock::now()
                                                 : absl::ToChronoTime(when);
  // Every request writes a line: the thread's buffer keeps its capacity.
  thread_local std::string line;
  line.clear();
  if (g_format.load() == LogFormat::kText) {
    AppendLogfmt(fields, &line);
    logger->log(time, spdlog::source_loc{}, level,
                spdlog::string_view_t(line.data(), line.size()));
    return;
  }
  // The members "message" and the fields, without the braces around them.
  for (absl::string_view piece : message) {
    line.append(piece.data(), piece.size());
  }
  rapidjson::StringBuffer buffer;
  JsonWriter writer(buffer);
  writer.StartObject();
  WriteString(writer, "message");
  WriteString(writer, WireText(line, kMaxLogMessageBytes));
  for (const LogField& field : fields) WriteField(writer, field);
  writer.EndObject();
  const absl::string_view members(buffer.GetString() + 1, buffer.GetSize() - 2);
  logger->log(time, spdlog::source_loc{kJsonMembersSource, 0, nullptr}, level,
              spdlog::string_view_t(members.data(), members.size()));
}

}  // namespace rbln
