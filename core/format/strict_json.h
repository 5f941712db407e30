// JSON text from a file (rbln_config.json), read strictly: as Python's json
// module reads it, which is what optimum-rbln and vLLM read the file with,
// so that the daemon never sees another config than they do. The text is
// untrusted: its nesting is bounded and the parser is iterative, so no input
// reaches the stack.
//
// Thread-safe: pure functions. For core/format/ only (it exposes RapidJSON).
#ifndef RBLN_CORE_FORMAT_STRICT_JSON_H_
#define RBLN_CORE_FORMAT_STRICT_JSON_H_

#include <rapidjson/document.h>
#include <rapidjson/reader.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rbln {

// RapidJSON's flags for such text. NaN and Infinity are accepted because
// Python's json.dump writes them.
inline constexpr unsigned kStrictJsonParseFlags =
    rapidjson::kParseValidateEncodingFlag | rapidjson::kParseNanAndInfFlag;

// Objects and arrays inside one another. Real configs nest 4 or 5 deep; the
// bound keeps a hostile file's nesting from costing memory or time.
inline constexpr size_t kMaxJsonDepth = 64;

// Parses `json` (the file at `path`, for messages) into `doc`, which must
// hold an object. INVALID_ARGUMENT, with the offset, line and column, for
// what Python's json would refuse (a byte order mark, invalid UTF-8, bad
// syntax), a NUL byte, nesting deeper than kMaxJsonDepth, a key repeated
// within one object (Python keeps the last value, other readers the first),
// or a top level that is not an object.
absl::Status ParseJsonObject(absl::string_view json, absl::string_view path,
                             rapidjson::Document* doc);

// `value` for an error message: its type, and its value when short
// ("number 3", "string \"abc\"", "an object").
std::string DescribeJsonValue(const rapidjson::Value& value);

}  // namespace rbln

#endif  // RBLN_CORE_FORMAT_STRICT_JSON_H_
