#include "core/format/strict_json.h"

#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/text.h"

namespace rbln {
namespace {

// "(offset N, line L, column C)" of byte `offset` of `json`.
std::string Position(absl::string_view json, size_t offset) {
  absl::string_view before = json.substr(0, offset);
  size_t line = 1 + std::count(before.begin(), before.end(), '\n');
  size_t line_start = before.rfind('\n');
  size_t column =
      offset - (line_start == absl::string_view::npos ? 0 : line_start + 1) + 1;
  return absl::StrCat("(offset ", offset, ", line ", line, ", column ", column,
                      ")");
}

// A first pass over untrusted JSON that builds nothing: it bounds the
// nesting depth and refuses a key repeated within one object, which Python's
// json (what optimum-rbln and vLLM read the file with) would resolve to its
// last value while a reader keeping the first would see another config.
class StructureCheck
    : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, StructureCheck> {
 public:
  bool StartObject() {
    keys_.emplace_back();
    return Enter();
  }
  bool EndObject(rapidjson::SizeType) {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool StartArray() { return Enter(); }
  bool EndArray(rapidjson::SizeType) {
    --depth_;
    return true;
  }
  bool Key(const char* s, rapidjson::SizeType n, bool /*copy*/) {
    if (keys_.back().emplace(s, n).second) return true;
    duplicate_key_ = std::string(s, n);
    return false;
  }
  bool Default() { return true; }

  bool too_deep() const { return depth_ > kMaxJsonDepth; }
  const std::optional<std::string>& duplicate_key() const {
    return duplicate_key_;
  }

 private:
  bool Enter() { return ++depth_ <= kMaxJsonDepth; }

  size_t depth_ = 0;
  std::vector<absl::flat_hash_set<std::string>> keys_;
  std::optional<std::string> duplicate_key_;
};

absl::Status JsonSyntaxError(absl::string_view json, absl::string_view path,
                             rapidjson::ParseErrorCode code, size_t offset) {
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": not valid JSON: ", rapidjson::GetParseError_En(code), " ",
      Position(json, offset)));
}

}  // namespace

// After StructureCheck, the parse that builds the document; both iterative
// (the parser's stack is on the heap).
absl::Status ParseJsonObject(absl::string_view json, absl::string_view path,
                             rapidjson::Document* doc) {
  // Python's json refuses a byte order mark; RapidJSON's DOM reader would
  // skip it (and stray bytes of one), so it is refused before either reads.
  if (absl::StartsWith(json, "\xEF")) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": not valid JSON: starts with a UTF-8 byte order mark (or a byte of "
        "one), which Python's json refuses; save the file without it"));
  }
  // RapidJSON's input streams read NUL as end of input.
  if (size_t nul = json.find('\0'); nul != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not valid JSON: NUL byte at offset ", nul));
  }
  {
    StructureCheck check;
    rapidjson::Reader reader;
    rapidjson::MemoryStream in(json.data(), json.size());
    rapidjson::ParseResult result =
        reader.Parse<kStrictJsonParseFlags | rapidjson::kParseIterativeFlag>(
            in, check);
    if (check.too_deep()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": JSON nests deeper than ", kMaxJsonDepth,
                       " levels ", Position(json, result.Offset()),
                       "; an rbln_config.json nests a few levels at most"));
    }
    if (check.duplicate_key().has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": key \"", Echo(*check.duplicate_key()),
          "\" appears twice in one object ", Position(json, result.Offset()),
          "; readers disagree on which value counts (Python keeps the last), "
          "so remove one"));
    }
    if (result.IsError()) {
      return JsonSyntaxError(json, path, result.Code(), result.Offset());
    }
  }
  doc->Parse<kStrictJsonParseFlags | rapidjson::kParseIterativeFlag>(
      json.data(), json.size());
  if (doc->HasParseError()) {
    return JsonSyntaxError(json, path, doc->GetParseError(),
                           doc->GetErrorOffset());
  }
  if (!doc->IsObject()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected a JSON object at the top level, found ",
                     DescribeJsonValue(*doc)));
  }
  return absl::OkStatus();
}

std::string DescribeJsonValue(const rapidjson::Value& value) {
  switch (value.GetType()) {
    case rapidjson::kNullType:
      return "null";
    case rapidjson::kFalseType:
      return "boolean false";
    case rapidjson::kTrueType:
      return "boolean true";
    case rapidjson::kObjectType:
      return "an object";
    case rapidjson::kArrayType:
      return "an array";
    case rapidjson::kStringType: {
      constexpr size_t kMaxShown = 64;
      absl::string_view s(value.GetString(), value.GetStringLength());
      return absl::StrCat("string \"", absl::CHexEscape(s.substr(0, kMaxShown)),
                          s.size() > kMaxShown ? "\"..." : "\"");
    }
    case rapidjson::kNumberType:
      if (value.IsInt64()) return absl::StrCat("number ", value.GetInt64());
      if (value.IsUint64()) return absl::StrCat("number ", value.GetUint64());
      return absl::StrCat("number ", value.GetDouble());
  }
  return "an unknown value";
}

}  // namespace rbln
