#include "core/format/rbln_config.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/text.h"

namespace rbln {
namespace {

using rapidjson::Value;

// NaN and Infinity are accepted because Python's json.dump writes them.
constexpr unsigned kParseFlags =
    rapidjson::kParseValidateEncodingFlag | rapidjson::kParseNanAndInfFlag;

constexpr char kNumBlocksKey[] = "kvcache_num_blocks";

// Objects and arrays inside one another. Real configs nest 4 or 5 deep; the
// bound keeps a hostile file's nesting from costing memory or time, and the
// parser is iterative so that no depth can reach the stack.
constexpr size_t kMaxJsonDepth = 64;

// A getter reads one JSON value as a T; `field` names it in messages.
template <typename T>
using Getter = absl::StatusOr<T> (*)(const Value& value,
                                     const std::string& field,
                                     absl::string_view path);

std::string Describe(const Value& value) {
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

absl::Status FieldError(absl::string_view field, absl::string_view path,
                        absl::string_view what) {
  return absl::FailedPreconditionError(
      absl::StrCat("field '", field, "' in ", path, ": ", what));
}

absl::Status TypeError(absl::string_view field, absl::string_view path,
                       absl::string_view expected, const Value& found) {
  return FieldError(
      field, path,
      absl::StrCat("expected ", expected, ", found ", Describe(found)));
}

absl::StatusOr<uint64_t> GetPositiveInteger(const Value& value,
                                            const std::string& field,
                                            absl::string_view path) {
  if (!value.IsUint64() || value.GetUint64() == 0) {
    return TypeError(field, path, "a positive integer", value);
  }
  return value.GetUint64();
}

absl::StatusOr<int64_t> GetInteger(const Value& value, const std::string& field,
                                   absl::string_view path) {
  if (!value.IsInt64()) return TypeError(field, path, "an integer", value);
  return value.GetInt64();
}

absl::StatusOr<uint32_t> GetDeviceCount(const Value& value,
                                        const std::string& field,
                                        absl::string_view path) {
  if (!value.IsUint() || value.GetUint() == 0 ||
      value.GetUint() > kMaxNumDevices) {
    return TypeError(field, path,
                     absl::StrCat("an integer from 1 to ", kMaxNumDevices),
                     value);
  }
  return value.GetUint();
}

absl::StatusOr<std::string> GetString(const Value& value,
                                      const std::string& field,
                                      absl::string_view path) {
  if (!value.IsString()) return TypeError(field, path, "a string", value);
  return std::string(value.GetString(), value.GetStringLength());
}

absl::StatusOr<bool> GetBool(const Value& value, const std::string& field,
                             absl::string_view path) {
  if (!value.IsBool()) return TypeError(field, path, "a boolean", value);
  return value.GetBool();
}

absl::StatusOr<const Value*> GetObject(const Value& value,
                                       const std::string& field,
                                       absl::string_view path) {
  if (!value.IsObject()) return TypeError(field, path, "an object", value);
  return &value;
}

std::string MemberLabel(absl::string_view parent, absl::string_view key) {
  return parent.empty() ? std::string(key) : absl::StrCat(parent, ".", key);
}

// The member `key` of `obj`, or nullptr when it is absent or null.
const Value* FindNonNull(const Value& obj, const char* key) {
  auto it = obj.FindMember(key);
  if (it == obj.MemberEnd() || it->value.IsNull()) return nullptr;
  return &it->value;
}

// Member `key` of `obj` (labelled `parent.key`) read by `get`; a missing
// member is an error, a present null is a type error.
template <typename T>
absl::StatusOr<T> GetRequired(const Value& obj, absl::string_view parent,
                              const char* key, absl::string_view path,
                              Getter<T> get) {
  std::string field = MemberLabel(parent, key);
  auto it = obj.FindMember(key);
  if (it == obj.MemberEnd()) return FieldError(field, path, "missing");
  return get(it->value, field, path);
}

// Member `key` of `obj` read by `get`; nullopt when absent or null.
template <typename T>
absl::StatusOr<std::optional<T>> GetOptional(const Value& obj, const char* key,
                                             absl::string_view path,
                                             Getter<T> get) {
  const Value* value = FindNonNull(obj, key);
  if (value == nullptr) return std::optional<T>();
  RBLN_ASSIGN_OR_RETURN(T result, get(*value, key, path));
  return std::optional<T>(std::move(result));
}

// Elements of `array` read by `get`; empty when `array` is nullptr.
template <typename T>
absl::StatusOr<std::vector<T>> GetArray(const Value* array,
                                        absl::string_view field,
                                        absl::string_view path, Getter<T> get) {
  std::vector<T> result;
  if (array == nullptr) return result;
  if (!array->IsArray()) return TypeError(field, path, "an array", *array);
  for (rapidjson::SizeType i = 0; i < array->Size(); ++i) {
    RBLN_ASSIGN_OR_RETURN(
        T element, get((*array)[i], absl::StrCat(field, "[", i, "]"), path));
    result.push_back(std::move(element));
  }
  return result;
}

absl::StatusOr<std::vector<int64_t>> GetShape(const Value& value,
                                              const std::string& field,
                                              absl::string_view path) {
  return GetArray<int64_t>(&value, field, path, GetInteger);
}

absl::StatusOr<KvcacheMeta> GetKvcacheMeta(const Value& value,
                                           const std::string& field,
                                           absl::string_view path) {
  if (!value.IsObject()) return TypeError(field, path, "an object", value);
  KvcacheMeta meta;
  RBLN_ASSIGN_OR_RETURN(meta.name,
                        GetRequired(value, field, "name", path, GetString));
  RBLN_ASSIGN_OR_RETURN(
      meta.layer_index,
      GetRequired(value, field, "layer_index", path, GetInteger));
  RBLN_ASSIGN_OR_RETURN(meta.shape,
                        GetRequired(value, field, "shape", path, GetShape));
  RBLN_ASSIGN_OR_RETURN(meta.layer_type, GetRequired(value, field, "layer_type",
                                                     path, GetString));
  RBLN_ASSIGN_OR_RETURN(meta.is_auto,
                        GetRequired(value, field, "is_auto", path, GetBool));
  RBLN_ASSIGN_OR_RETURN(meta.dtype,
                        GetRequired(value, field, "dtype", path, GetString));
  return meta;
}

std::string Show(uint32_t value) { return absl::StrCat(value); }
std::string Show(const std::string& value) {
  return absl::StrCat("\"", Echo(value), "\"");
}

// A setting that may appear under several keys and in several places, e.g.
// `_compile_cfgs[1].num_devices`.
struct Candidate {
  std::string field;
  const Value* value;
};

void AddCandidates(const Value& obj, absl::string_view parent,
                   std::initializer_list<const char*> keys,
                   std::vector<Candidate>* out) {
  for (const char* key : keys) {
    if (const Value* value = FindNonNull(obj, key)) {
      out->push_back({MemberLabel(parent, key), value});
    }
  }
}

// The value every candidate holds; nullopt when there is none.
template <typename T>
absl::StatusOr<std::optional<T>> Agree(const std::vector<Candidate>& candidates,
                                       absl::string_view path, Getter<T> get) {
  std::optional<T> agreed;
  const Candidate* first = nullptr;
  for (const Candidate& candidate : candidates) {
    RBLN_ASSIGN_OR_RETURN(T value,
                          get(*candidate.value, candidate.field, path));
    if (first == nullptr) {
      agreed = std::move(value);
      first = &candidate;
    } else if (value != *agreed) {
      return FieldError(candidate.field, path,
                        absl::StrCat(Show(value), " disagrees with '",
                                     first->field, "' = ", Show(*agreed)));
    }
  }
  return agreed;
}

// Resolves a setting from the top level (`keys` in order, which must agree),
// else from the `_compile_cfgs` entries (which must agree).
template <typename T>
absl::StatusOr<std::optional<T>> ResolveSetting(
    const Value& root, const std::vector<const Value*>& compile_cfgs,
    std::initializer_list<const char*> keys, absl::string_view path,
    Getter<T> get) {
  std::vector<Candidate> top;
  AddCandidates(root, "", keys, &top);
  if (!top.empty()) return Agree(top, path, get);
  std::vector<Candidate> nested;
  for (size_t i = 0; i < compile_cfgs.size(); ++i) {
    AddCandidates(*compile_cfgs[i], absl::StrCat("_compile_cfgs[", i, "]"),
                  keys, &nested);
  }
  return Agree(nested, path, get);
}

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

// Parses `json` into `doc`, which must hold an object. Iterative (the
// parser's stack is on the heap), after StructureCheck.
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
        reader.Parse<kParseFlags | rapidjson::kParseIterativeFlag>(in, check);
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
  doc->Parse<kParseFlags | rapidjson::kParseIterativeFlag>(json.data(),
                                                           json.size());
  if (doc->HasParseError()) {
    return JsonSyntaxError(json, path, doc->GetParseError(),
                           doc->GetErrorOffset());
  }
  if (!doc->IsObject()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected a JSON object at the top level, found ",
                     Describe(*doc)));
  }
  return absl::OkStatus();
}

// Rejects configs whose kvcache_num_blocks we cannot address at the top
// level: legacy ones and multimodal ones that keep the decoder in a submodule.
absl::Status CheckDecoderAtTopLevel(const Value& root, absl::string_view path) {
  if (root.HasMember("_meta")) {
    return FieldError(
        "_meta", path,
        "legacy rbln_config.json from an old optimum-rbln; re-export "
        "(recompile) the model with a current optimum-rbln");
  }
  if (root.HasMember(kNumBlocksKey)) return absl::OkStatus();
  for (const auto& member : root.GetObject()) {
    if (member.value.IsObject() && member.value.HasMember(kNumBlocksKey)) {
      return absl::UnimplementedError(
          absl::StrCat("field '", kNumBlocksKey, "' in ", path,
                       ": artifact keeps its decoder under submodule '",
                       absl::string_view(member.name.GetString(),
                                         member.name.GetStringLength()),
                       "'; submodules are not supported yet"));
    }
  }
  return FieldError(kNumBlocksKey, path, "missing");
}

// Finds the bytes of the top-level `kvcache_num_blocks` value in the text
// the reader parses from `in` (numbers arrive as raw text,
// kParseNumbersAsStringsFlag, and the stream stands just past one when it
// arrives, so its source range is known exactly).
class CountLocator
    : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, CountLocator> {
 public:
  explicit CountLocator(const rapidjson::MemoryStream* in) : in_(in) {}

  bool Key(const char* s, rapidjson::SizeType n, bool /*copy*/) {
    next_is_count_ = depth_ == 1 && absl::string_view(s, n) == kNumBlocksKey;
    return true;
  }
  bool RawNumber(const char* /*s*/, rapidjson::SizeType n, bool /*copy*/) {
    if (next_is_count_) {
      end_ = in_->Tell();
      begin_ = end_ - n;
    }
    return Scalar();
  }
  bool StartObject() { return Start(); }
  bool StartArray() { return Start(); }
  bool EndObject(rapidjson::SizeType) { return End(); }
  bool EndArray(rapidjson::SizeType) { return End(); }
  bool Default() { return Scalar(); }

  // [begin, end) of the count's number text; begin == end when the value is
  // not a number.
  size_t begin() const { return begin_; }
  size_t end() const { return end_; }

 private:
  bool Scalar() {
    next_is_count_ = false;
    return true;
  }
  bool Start() {
    next_is_count_ = false;
    ++depth_;
    return true;
  }
  bool End() {
    --depth_;
    return true;
  }

  const rapidjson::MemoryStream* const in_;
  int depth_ = 0;
  bool next_is_count_ = false;
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace

uint64_t RblnConfig::NumFullBlocks() const {
  if (kvcache_block_size == 0) return 0;
  return max_seq_len / kvcache_block_size * batch_size;
}

uint64_t RblnConfig::NumMinBlocks() const {
  if (attn_impl != "flash_attn") return batch_size;
  if (kvcache_block_size == 0) return 0;
  // min(L / S + 1, full) without overflowing L / S + 1.
  uint64_t per_sequence = max_seq_len / kvcache_block_size;
  uint64_t full = NumFullBlocks();
  return per_sequence < full ? per_sequence + 1 : full;
}

absl::StatusOr<RblnConfig> ParseRblnConfig(absl::string_view json,
                                           absl::string_view path) {
  rapidjson::Document doc;
  RBLN_RETURN_IF_ERROR(ParseJsonObject(json, path, &doc));
  RBLN_RETURN_IF_ERROR(CheckDecoderAtTopLevel(doc, path));
  const Value& root = doc;

  RblnConfig config;
  RBLN_ASSIGN_OR_RETURN(std::optional<std::string> cls_name,
                        GetOptional(root, "cls_name", path, GetString));
  config.cls_name = cls_name.value_or("");
  RBLN_ASSIGN_OR_RETURN(
      config.kvcache_num_blocks,
      GetRequired(root, "", kNumBlocksKey, path, GetPositiveInteger));
  if (config.kvcache_num_blocks > kMaxNumBlocks) {
    return FieldError(
        kNumBlocksKey, path,
        absl::StrCat(config.kvcache_num_blocks, " is above the hard limit of ",
                     kMaxNumBlocks, " (2^31 - 1) blocks"));
  }
  RBLN_ASSIGN_OR_RETURN(
      config.max_seq_len,
      GetRequired(root, "", "max_seq_len", path, GetPositiveInteger));
  RBLN_ASSIGN_OR_RETURN(
      config.batch_size,
      GetRequired(root, "", "batch_size", path, GetPositiveInteger));

  RBLN_ASSIGN_OR_RETURN(
      std::optional<uint64_t> partition_len,
      GetOptional(root, "kvcache_partition_len", path, GetPositiveInteger));
  RBLN_ASSIGN_OR_RETURN(std::optional<std::string> attn_impl,
                        GetOptional(root, "attn_impl", path, GetString));
  if (!attn_impl.has_value()) {
    config.attn_impl = partition_len.has_value() ? "flash_attn" : "eager";
  } else if (*attn_impl == "eager" || *attn_impl == "flash_attn") {
    config.attn_impl = *attn_impl;
  } else {
    return TypeError("attn_impl", path, "\"eager\", \"flash_attn\" or null",
                     root["attn_impl"]);
  }

  RBLN_ASSIGN_OR_RETURN(
      std::optional<uint64_t> block_size,
      GetOptional(root, "kvcache_block_size", path, GetPositiveInteger));
  absl::string_view block_size_field = "kvcache_block_size";
  if (!block_size.has_value() && config.attn_impl == "flash_attn") {
    block_size = partition_len;
    block_size_field = "kvcache_partition_len";
  }
  if (!block_size.has_value()) {
    return FieldError("kvcache_block_size", path,
                      config.attn_impl == "flash_attn"
                          ? "missing, and so is kvcache_partition_len"
                          : "missing");
  }
  config.kvcache_block_size = *block_size;
  if (config.max_seq_len % config.kvcache_block_size != 0) {
    return FieldError(
        "max_seq_len", path,
        absl::StrCat(config.max_seq_len,
                     " is not a multiple of the block size ",
                     config.kvcache_block_size, " (", block_size_field, ")"));
  }
  if (config.max_seq_len / config.kvcache_block_size >
      std::numeric_limits<uint64_t>::max() / config.batch_size) {
    return FieldError("batch_size", path,
                      "max_seq_len / block size * batch_size overflows");
  }

  RBLN_ASSIGN_OR_RETURN(
      config.kvcache_metas,
      GetArray<KvcacheMeta>(FindNonNull(root, "kvcache_metas"), "kvcache_metas",
                            path, GetKvcacheMeta));
  RBLN_ASSIGN_OR_RETURN(config.phases,
                        GetArray<std::string>(FindNonNull(root, "phases"),
                                              "phases", path, GetString));
  RBLN_ASSIGN_OR_RETURN(
      config.decoder_batch_sizes,
      GetArray<uint64_t>(FindNonNull(root, "decoder_batch_sizes"),
                         "decoder_batch_sizes", path, GetPositiveInteger));

  RBLN_ASSIGN_OR_RETURN(
      std::vector<const Value*> compile_cfgs,
      GetArray<const Value*>(FindNonNull(root, "_compile_cfgs"),
                             "_compile_cfgs", path, GetObject));
  RBLN_ASSIGN_OR_RETURN(std::optional<uint32_t> num_devices,
                        ResolveSetting(root, compile_cfgs,
                                       {"num_devices", "tensor_parallel_size"},
                                       path, GetDeviceCount));
  config.num_devices = num_devices.value_or(1);
  RBLN_ASSIGN_OR_RETURN(
      std::optional<std::string> npu,
      ResolveSetting(root, compile_cfgs, {"npu"}, path, GetString));
  config.npu = npu.value_or("");
  return config;
}

absl::StatusOr<std::string> RewriteKvcacheNumBlocks(absl::string_view json,
                                                    uint64_t num_blocks,
                                                    absl::string_view path) {
  {
    rapidjson::Document doc;
    RBLN_RETURN_IF_ERROR(ParseJsonObject(json, path, &doc));
    RBLN_RETURN_IF_ERROR(CheckDecoderAtTopLevel(doc, path));
    // A count the parser would refuse is not silently replaced.
    RBLN_RETURN_IF_ERROR(
        GetRequired(doc, "", kNumBlocksKey, path, GetPositiveInteger).status());
  }
  rapidjson::MemoryStream in(json.data(), json.size());
  CountLocator locator(&in);
  rapidjson::Reader reader;
  rapidjson::ParseResult result =
      reader.Parse<kParseFlags | rapidjson::kParseIterativeFlag |
                   rapidjson::kParseNumbersAsStringsFlag>(in, locator);
  const absl::string_view digits =
      json.substr(locator.begin(), locator.end() - locator.begin());
  if (result.IsError() || digits.empty() ||
      digits.find_first_not_of("0123456789") != absl::string_view::npos) {
    // The same text parsed above with the same flags, its count an integer.
    return absl::InternalError(
        absl::StrCat(path, ": could not find the digits of ", kNumBlocksKey,
                     " after a successful parse"));
  }
  return absl::StrCat(json.substr(0, locator.begin()), num_blocks,
                      json.substr(locator.end()));
}

}  // namespace rbln
