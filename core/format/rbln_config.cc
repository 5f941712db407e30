#include "core/format/rbln_config.h"

#include <rapidjson/document.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/format/strict_json.h"
#include "core/status_macros.h"
#include "core/text.h"

namespace rbln {
namespace {

using rapidjson::Value;

constexpr char kNumBlocksKey[] = "kvcache_num_blocks";

// A getter reads one JSON value as a T; `field` names it in messages.
template <typename T>
using Getter = absl::StatusOr<T> (*)(const Value& value,
                                     const std::string& field,
                                     absl::string_view path);

absl::Status FieldError(absl::string_view field, absl::string_view path,
                        absl::string_view what) {
  return absl::FailedPreconditionError(
      absl::StrCat("field '", field, "' in ", path, ": ", what));
}

absl::Status TypeError(absl::string_view field, absl::string_view path,
                       absl::string_view expected, const Value& found) {
  return FieldError(field, path,
                    absl::StrCat("expected ", expected, ", found ",
                                 DescribeJsonValue(found)));
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

// Member `key` of `obj` (labelled `parent.key`) read by `get`; nullopt when
// absent or null.
template <typename T>
absl::StatusOr<std::optional<T>> GetOptional(const Value& obj,
                                             absl::string_view parent,
                                             const char* key,
                                             absl::string_view path,
                                             Getter<T> get) {
  const Value* value = FindNonNull(obj, key);
  if (value == nullptr) return std::optional<T>();
  RBLN_ASSIGN_OR_RETURN(T result, get(*value, MemberLabel(parent, key), path));
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
  RBLN_ASSIGN_OR_RETURN(
      std::optional<std::string> layer_type,
      GetOptional(value, field, "layer_type", path, GetString));
  meta.layer_type = layer_type.value_or("");
  if (!meta.layer_type.empty() && meta.layer_type != "full_attention" &&
      meta.layer_type != "sliding_attention" &&
      meta.layer_type != "linear_attention") {
    return FieldError(
        absl::StrCat(field, ".layer_type"), path,
        absl::StrCat(
            "tensor \"", Echo(meta.name), "\" has layer_type \"",
            Echo(meta.layer_type),
            "\", which optimum-rbln does not know (it knows "
            "full_attention, sliding_attention and linear_attention); "
            "the artifact was likely compiled by a newer optimum-rbln, "
            "so this tool cannot tell whether the tensor resizes"));
  }
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

// A setting's value and the first field that gave it.
template <typename T>
struct Resolved {
  T value;
  std::string field;
};

// The value every candidate holds; nullopt when there is none.
template <typename T>
absl::StatusOr<std::optional<Resolved<T>>> Agree(
    const std::vector<Candidate>& candidates, absl::string_view path,
    Getter<T> get) {
  std::optional<Resolved<T>> agreed;
  for (const Candidate& candidate : candidates) {
    RBLN_ASSIGN_OR_RETURN(T value,
                          get(*candidate.value, candidate.field, path));
    if (!agreed.has_value()) {
      agreed = Resolved<T>{std::move(value), candidate.field};
    } else if (value != agreed->value) {
      return FieldError(
          candidate.field, path,
          absl::StrCat(Show(value), " disagrees with '", agreed->field,
                       "' = ", Show(agreed->value)));
    }
  }
  return agreed;
}

// An object that may settle num_devices and npu: the decoder's, and for a
// submodule then the parent's. `label` prefixes its fields in messages.
struct SettingScope {
  const Value* object;
  std::string label;
  std::vector<const Value*> compile_cfgs;
};

absl::StatusOr<SettingScope> MakeSettingScope(const Value& object,
                                              std::string label,
                                              absl::string_view path) {
  const std::string field = MemberLabel(label, "_compile_cfgs");
  RBLN_ASSIGN_OR_RETURN(
      std::vector<const Value*> compile_cfgs,
      GetArray<const Value*>(FindNonNull(object, "_compile_cfgs"), field, path,
                             GetObject));
  return SettingScope{&object, std::move(label), std::move(compile_cfgs)};
}

// Resolves a setting from the first scope that has it: in each, its own
// members (`keys` in order, which must agree), else its `_compile_cfgs`
// entries (which must agree).
template <typename T>
absl::StatusOr<std::optional<Resolved<T>>> ResolveSetting(
    const std::vector<SettingScope>& scopes,
    std::initializer_list<const char*> keys, absl::string_view path,
    Getter<T> get) {
  for (const SettingScope& scope : scopes) {
    std::vector<Candidate> own;
    AddCandidates(*scope.object, scope.label, keys, &own);
    if (!own.empty()) return Agree(own, path, get);
    std::vector<Candidate> nested;
    for (size_t i = 0; i < scope.compile_cfgs.size(); ++i) {
      AddCandidates(
          *scope.compile_cfgs[i],
          MemberLabel(scope.label, absl::StrCat("_compile_cfgs[", i, "]")),
          keys, &nested);
    }
    if (!nested.empty()) return Agree(nested, path, get);
  }
  return std::optional<Resolved<T>>();
}

// The longest file name Linux takes (NAME_MAX).
constexpr size_t kMaxSubmoduleNameBytes = 255;

// The submodule's key becomes a directory the daemon opens beneath the
// artifact's, so it must be one plain name: never a way up or across.
absl::Status CheckSubmoduleName(absl::string_view name,
                                absl::string_view path) {
  absl::string_view why;
  if (name.empty()) {
    why = "is empty";
  } else if (name == "." || name == "..") {
    why = "is a relative directory reference";
  } else if (name.find_first_of(absl::string_view("/\\\0", 3)) !=
             absl::string_view::npos) {
    why = "holds '/', '\\' or NUL";
  } else if (name.size() > kMaxSubmoduleNameBytes) {
    why = "is longer than 255 bytes";
  } else {
    return absl::OkStatus();
  }
  return FieldError(
      Echo(name), path,
      absl::StrCat("this submodule key holds ", kNumBlocksKey, " but ", why,
                   "; it names the subfolder holding the submodule's files, "
                   "so it must be one plain directory name as optimum-rbln "
                   "writes (e.g. \"language_model\"); fix the key or "
                   "re-export the model"));
}

// Where the decoder's settings are: the top level or one submodule.
struct Decoder {
  const Value* object;
  std::string submodule;  // "" at the top level
};

// Finds the object holding kvcache_num_blocks, refusing legacy configs,
// more than one decoder, and a submodule key that is not a plain name.
absl::StatusOr<Decoder> FindDecoder(const Value& root, absl::string_view path) {
  if (root.HasMember("_meta")) {
    return FieldError(
        "_meta", path,
        "legacy rbln_config.json from an old optimum-rbln; re-export "
        "(recompile) the model with a current optimum-rbln");
  }
  if (root.HasMember(kNumBlocksKey)) return Decoder{&root, ""};
  std::vector<std::pair<std::string, const Value*>> found;
  for (const auto& member : root.GetObject()) {
    if (member.value.IsObject() && member.value.HasMember(kNumBlocksKey)) {
      found.emplace_back(
          std::string(member.name.GetString(), member.name.GetStringLength()),
          &member.value);
    }
  }
  if (found.empty()) return FieldError(kNumBlocksKey, path, "missing");
  if (found.size() > 1) {
    // A hostile file may hold thousands; a few name the problem.
    constexpr size_t kMaxNamed = 8;
    std::vector<std::string> names;
    for (size_t i = 0; i < found.size() && i < kMaxNamed; ++i) {
      names.push_back(absl::StrCat("'", Echo(found[i].first), "'"));
    }
    const std::string last =
        found.size() > kMaxNamed
            ? absl::StrCat(found.size() - kMaxNamed, " more")
            : names.back();
    if (found.size() <= kMaxNamed) names.pop_back();
    return absl::UnimplementedError(absl::StrCat(
        "field '", kNumBlocksKey, "' in ", path,
        ": artifact keeps decoders under ", absl::StrJoin(names, ", "), " and ",
        last, "; an artifact with more than one decoder is not supported"));
  }
  RBLN_RETURN_IF_ERROR(CheckSubmoduleName(found[0].first, path));
  return Decoder{found[0].second, std::move(found[0].first)};
}

// The metas list of `decoder` and the key it is under ("" when neither).
absl::StatusOr<std::pair<const Value*, std::string>> FindMetas(
    const Decoder& decoder, absl::string_view path) {
  constexpr const char* kKeys[] = {"kvcache_metas", "cache_metas"};
  const Value* old_list = FindNonNull(*decoder.object, kKeys[0]);
  const Value* new_list = FindNonNull(*decoder.object, kKeys[1]);
  if (old_list != nullptr && new_list != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " has both '", MemberLabel(decoder.submodule, kKeys[0]),
        "' and '", MemberLabel(decoder.submodule, kKeys[1]),
        "' (optimum-rbln 0.12 renamed the first to the second); keep one"));
  }
  if (new_list != nullptr) return std::pair(new_list, std::string(kKeys[1]));
  if (old_list != nullptr) return std::pair(old_list, std::string(kKeys[0]));
  return std::pair<const Value*, std::string>(nullptr, "");
}

// Finds the bytes of the number at `key_path` (a member of the root object,
// a member of that member, ...) in the text the reader parses from `in`
// (numbers arrive as raw text, kParseNumbersAsStringsFlag, and the stream
// stands just past one when it arrives, so its source range is known
// exactly). A key of the same name anywhere off that path is ignored.
class CountLocator
    : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, CountLocator> {
 public:
  CountLocator(const rapidjson::MemoryStream* in,
               std::vector<std::string> key_path)
      : in_(in), key_path_(std::move(key_path)) {}

  bool Key(const char* s, rapidjson::SizeType n, bool /*copy*/) {
    // The open containers are the root and the members matched so far.
    const size_t depth = on_path_.size();
    next_on_path_ = on_path_.back() && depth <= key_path_.size() &&
                    absl::string_view(s, n) == key_path_[depth - 1];
    return true;
  }
  bool RawNumber(const char* /*s*/, rapidjson::SizeType n, bool /*copy*/) {
    if (next_on_path_ && on_path_.size() == key_path_.size()) {
      end_ = in_->Tell();
      begin_ = end_ - n;
    }
    return Scalar();
  }
  bool StartObject() { return Start(on_path_.empty() || next_on_path_); }
  bool StartArray() { return Start(false); }
  bool EndObject(rapidjson::SizeType) { return End(); }
  bool EndArray(rapidjson::SizeType) { return End(); }
  bool Default() { return Scalar(); }

  // [begin, end) of the count's number text; begin == end when the value is
  // not a number.
  size_t begin() const { return begin_; }
  size_t end() const { return end_; }

 private:
  bool Scalar() {
    next_on_path_ = false;
    return true;
  }
  bool Start(bool on_path) {
    next_on_path_ = false;
    on_path_.push_back(on_path);
    return true;
  }
  bool End() {
    on_path_.pop_back();
    return true;
  }

  const rapidjson::MemoryStream* const in_;
  const std::vector<std::string> key_path_;
  // Per open container: whether it is the root or a member on key_path_.
  std::vector<bool> on_path_;
  bool next_on_path_ = false;
  size_t begin_ = 0;
  size_t end_ = 0;
};

// kvcache_num_blocks, max_seq_len, batch_size, the attention and the block
// size, and the arithmetic they must allow.
absl::Status ReadBlockGeometry(const Decoder& decoder, absl::string_view path,
                               RblnConfig* config) {
  const Value& dec = *decoder.object;
  const std::string& prefix = decoder.submodule;
  RBLN_ASSIGN_OR_RETURN(
      config->kvcache_num_blocks,
      GetRequired(dec, prefix, kNumBlocksKey, path, GetPositiveInteger));
  if (config->kvcache_num_blocks > kMaxNumBlocks) {
    return FieldError(
        MemberLabel(prefix, kNumBlocksKey), path,
        absl::StrCat(config->kvcache_num_blocks, " is above the hard limit of ",
                     kMaxNumBlocks, " (2^31 - 1) blocks"));
  }
  RBLN_ASSIGN_OR_RETURN(
      config->max_seq_len,
      GetRequired(dec, prefix, "max_seq_len", path, GetPositiveInteger));
  RBLN_ASSIGN_OR_RETURN(
      config->batch_size,
      GetRequired(dec, prefix, "batch_size", path, GetPositiveInteger));

  RBLN_ASSIGN_OR_RETURN(std::optional<uint64_t> partition_len,
                        GetOptional(dec, prefix, "kvcache_partition_len", path,
                                    GetPositiveInteger));
  RBLN_ASSIGN_OR_RETURN(std::optional<std::string> attn_impl,
                        GetOptional(dec, prefix, "attn_impl", path, GetString));
  if (!attn_impl.has_value()) {
    config->attn_impl = partition_len.has_value() ? "flash_attn" : "eager";
  } else if (*attn_impl == "eager" || *attn_impl == "flash_attn") {
    config->attn_impl = *attn_impl;
  } else {
    return TypeError(MemberLabel(prefix, "attn_impl"), path,
                     "\"eager\", \"flash_attn\" or null", dec["attn_impl"]);
  }

  RBLN_ASSIGN_OR_RETURN(
      std::optional<uint64_t> block_size,
      GetOptional(dec, prefix, "kvcache_block_size", path, GetPositiveInteger));
  absl::string_view block_size_field = "kvcache_block_size";
  if (!block_size.has_value() && config->attn_impl == "flash_attn") {
    block_size = partition_len;
    block_size_field = "kvcache_partition_len";
  }
  if (!block_size.has_value()) {
    return FieldError(MemberLabel(prefix, "kvcache_block_size"), path,
                      config->attn_impl == "flash_attn"
                          ? "missing, and so is kvcache_partition_len"
                          : "missing");
  }
  config->kvcache_block_size = *block_size;
  if (config->max_seq_len % config->kvcache_block_size != 0) {
    return FieldError(
        MemberLabel(prefix, "max_seq_len"), path,
        absl::StrCat(config->max_seq_len,
                     " is not a multiple of the block size ",
                     config->kvcache_block_size, " (", block_size_field, ")"));
  }
  if (config->max_seq_len / config->kvcache_block_size >
      std::numeric_limits<uint64_t>::max() / config->batch_size) {
    return FieldError(MemberLabel(prefix, "batch_size"), path,
                      "max_seq_len / block size * batch_size overflows");
  }
  return absl::OkStatus();
}

// The KV-cache metas (under either key), phases and decoder_batch_sizes.
absl::Status ReadLists(const Decoder& decoder, absl::string_view path,
                       RblnConfig* config) {
  const Value& dec = *decoder.object;
  const std::string& prefix = decoder.submodule;
  RBLN_ASSIGN_OR_RETURN(auto metas, FindMetas(decoder, path));
  config->metas_key = std::move(metas.second);
  RBLN_ASSIGN_OR_RETURN(
      config->kvcache_metas,
      GetArray<KvcacheMeta>(metas.first, MemberLabel(prefix, config->metas_key),
                            path, GetKvcacheMeta));
  RBLN_ASSIGN_OR_RETURN(
      config->phases,
      GetArray<std::string>(FindNonNull(dec, "phases"),
                            MemberLabel(prefix, "phases"), path, GetString));
  RBLN_ASSIGN_OR_RETURN(
      config->decoder_batch_sizes,
      GetArray<uint64_t>(FindNonNull(dec, "decoder_batch_sizes"),
                         MemberLabel(prefix, "decoder_batch_sizes"), path,
                         GetPositiveInteger));
  return absl::OkStatus();
}

// num_devices and npu, from the decoder's settings, else its parent's.
absl::Status ReadDeviceSettings(const Value& root, const Decoder& decoder,
                                absl::string_view path, RblnConfig* config) {
  const Value& dec = *decoder.object;
  const std::string& prefix = decoder.submodule;
  std::vector<SettingScope> scopes;
  RBLN_ASSIGN_OR_RETURN(SettingScope own, MakeSettingScope(dec, prefix, path));
  scopes.push_back(std::move(own));
  if (!prefix.empty()) {
    RBLN_ASSIGN_OR_RETURN(SettingScope parent,
                          MakeSettingScope(root, "", path));
    scopes.push_back(std::move(parent));
  }
  RBLN_ASSIGN_OR_RETURN(
      std::optional<Resolved<uint32_t>> num_devices,
      ResolveSetting(scopes, {"num_devices", "tensor_parallel_size"}, path,
                     GetDeviceCount));
  if (num_devices.has_value()) config->num_devices = num_devices->value;
  RBLN_ASSIGN_OR_RETURN(std::optional<Resolved<std::string>> npu,
                        ResolveSetting(scopes, {"npu"}, path, GetString));
  if (npu.has_value()) {
    config->npu = npu->value;
    config->npu_field = npu->field;
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t RblnConfig::NumFullBlocks() const {
  if (kvcache_block_size == 0) return 0;
  return max_seq_len / kvcache_block_size * batch_size;
}

uint64_t RblnConfig::NumMinBlocks() const {
  if (attn_impl != "flash_attn") return batch_size;
  if (kvcache_block_size == 0) return 0;
  // min(max(L / S, B) + 1, full) without overflowing the + 1.
  const uint64_t in_use =
      std::max(max_seq_len / kvcache_block_size, batch_size);
  const uint64_t full = NumFullBlocks();
  return in_use < full ? in_use + 1 : full;
}

bool KvcacheMeta::Resizable() const {
  return is_auto && (layer_type.empty() || layer_type == "full_attention");
}

absl::StatusOr<RblnConfig> ParseRblnConfig(absl::string_view json,
                                           absl::string_view path) {
  rapidjson::Document doc;
  RBLN_RETURN_IF_ERROR(ParseJsonObject(json, path, &doc));
  const Value& root = doc;
  RBLN_ASSIGN_OR_RETURN(Decoder decoder, FindDecoder(root, path));

  RblnConfig config;
  config.decoder_submodule = decoder.submodule;
  RBLN_ASSIGN_OR_RETURN(std::optional<std::string> cls_name,
                        GetOptional(root, "", "cls_name", path, GetString));
  config.cls_name = cls_name.value_or("");
  RBLN_RETURN_IF_ERROR(ReadBlockGeometry(decoder, path, &config));
  RBLN_RETURN_IF_ERROR(ReadLists(decoder, path, &config));
  RBLN_RETURN_IF_ERROR(ReadDeviceSettings(root, decoder, path, &config));
  return config;
}

absl::Status RequireCacheMetas(const RblnConfig& config,
                               absl::string_view path) {
  const std::string new_key =
      MemberLabel(config.decoder_submodule, "cache_metas");
  const std::string old_key =
      MemberLabel(config.decoder_submodule, "kvcache_metas");
  if (config.metas_key.empty()) {
    return FieldError(
        new_key, path,
        absl::StrCat("missing, and so is '", old_key,
                     "': the config does not list the KV-cache tensors, so "
                     "nothing says which can be resized; re-export the model "
                     "with an optimum-rbln that writes them"));
  }
  if (config.kvcache_metas.empty()) {
    return FieldError(
        MemberLabel(config.decoder_submodule, config.metas_key), path,
        absl::StrCat("empty: the config lists no KV-cache tensors, so nothing "
                     "says which can be resized ('",
                     new_key, "' or '", old_key,
                     "' must name them); re-export the model with an "
                     "optimum-rbln that writes them"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RewriteKvcacheNumBlocks(absl::string_view json,
                                                    uint64_t num_blocks,
                                                    absl::string_view path) {
  std::vector<std::string> key_path;
  {
    rapidjson::Document doc;
    RBLN_RETURN_IF_ERROR(ParseJsonObject(json, path, &doc));
    RBLN_ASSIGN_OR_RETURN(Decoder decoder, FindDecoder(doc, path));
    // A count the parser would refuse is not silently replaced.
    RBLN_RETURN_IF_ERROR(GetRequired(*decoder.object, decoder.submodule,
                                     kNumBlocksKey, path, GetPositiveInteger)
                             .status());
    if (!decoder.submodule.empty()) key_path.push_back(decoder.submodule);
    key_path.push_back(kNumBlocksKey);
  }
  rapidjson::MemoryStream in(json.data(), json.size());
  CountLocator locator(&in, std::move(key_path));
  rapidjson::Reader reader;
  rapidjson::ParseResult result =
      reader.Parse<kStrictJsonParseFlags | rapidjson::kParseIterativeFlag |
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
