// ParseRblnSmiJson (core/device/rbln_smi.h): `rbln-smi -j`'s output.

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/device/rbln_smi.h"
#include "core/text.h"

namespace rbln {
namespace {

using rapidjson::Value;

// The parse builds its stack on the heap (no input reaches the C++ stack),
// and the input is at most kMaxRblnSmiJsonBytes, which bounds the document.
constexpr unsigned kParseFlags =
    rapidjson::kParseValidateEncodingFlag | rapidjson::kParseIterativeFlag;

// A process name kept for messages: longer ones are cut (Linux's comm is 15).
constexpr size_t kMaxProcessNameBytes = 64;

// "string \"abc\"", "an object", for messages.
std::string Describe(const Value& value) {
  switch (value.GetType()) {
    case rapidjson::kNullType:
      return "null";
    case rapidjson::kFalseType:
    case rapidjson::kTrueType:
      return "a boolean";
    case rapidjson::kObjectType:
      return "an object";
    case rapidjson::kArrayType:
      return "an array";
    case rapidjson::kStringType:
      return absl::StrCat(
          "string \"",
          Echo(absl::string_view(value.GetString(), value.GetStringLength())),
          "\"");
    case rapidjson::kNumberType:
      if (value.IsUint64()) return absl::StrCat("number ", value.GetUint64());
      if (value.IsInt64()) return absl::StrCat("number ", value.GetInt64());
      return absl::StrCat("number ", value.GetDouble());
  }
  return "an unknown value";
}

// `object[key]`, or null when absent (the output's every field is optional).
const Value* Member(const Value& object, const char* key) {
  Value::ConstMemberIterator it = object.FindMember(key);
  return it == object.MemberEnd() ? nullptr : &it->value;
}

// A decimal string of digits ("5100273664") or a JSON whole number, fitting
// in 64 bits. `what` names the field for the message.
absl::StatusOr<uint64_t> ReadCount(const Value& value, absl::string_view what) {
  if (value.IsUint64()) return value.GetUint64();
  const auto refuse = [&value, what](absl::string_view problem) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", Describe(value), ", ", problem));
  };
  if (value.IsNumber()) return refuse("not a whole number of at most 64 bits");
  if (!value.IsString()) return refuse("not a decimal string");
  const absl::string_view text(value.GetString(), value.GetStringLength());
  if (text.empty()) return refuse("not a decimal number");
  uint64_t result = 0;
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return refuse("not a whole decimal number");
    }
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (result > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
      return refuse("too large for 64 bits");
    }
    result = result * 10 + digit;
  }
  return result;
}

// A string field, or nullopt when absent; an error when of another type.
absl::StatusOr<std::optional<std::string>> ReadString(const Value& object,
                                                      const char* key,
                                                      absl::string_view where) {
  const Value* value = Member(object, key);
  if (value == nullptr) return std::nullopt;
  if (!value->IsString()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".", key, " is ", Describe(*value), ", not a string"));
  }
  return std::string(value->GetString(), value->GetStringLength());
}

// "devices[1] (npu 1, RBLN-CA12 rbln1)": a device as far as it says.
std::string DeviceLabel(size_t position, const ProbedDevice& device,
                        bool has_index) {
  std::string label = absl::StrCat("devices[", position, "]");
  std::string known = has_index ? absl::StrCat("npu ", device.index) : "";
  for (const std::string* field : {&device.name, &device.device_node}) {
    if (field->empty()) continue;
    absl::StrAppend(&known, known.empty() ? "" : ", ", Echo(*field));
  }
  if (!known.empty()) absl::StrAppend(&label, " (", known, ")");
  return label;
}

// devices[position]: every field optional but the memory figures.
absl::StatusOr<ProbedDevice> ReadDevice(const Value& value, size_t position) {
  const std::string where = absl::StrCat("devices[", position, "]");
  if (!value.IsObject()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is ", Describe(value), ", not an object"));
  }
  ProbedDevice device;
  device.index = static_cast<int>(position);
  const Value* npu = Member(value, "npu");
  if (npu != nullptr) {
    absl::StatusOr<uint64_t> index = ReadCount(*npu, where + ".npu");
    if (!index.ok()) return index.status();
    if (*index >= kMaxRblnSmiDevices) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".npu is ", *index, ", past the ",
                       kMaxRblnSmiDevices, " devices a host can list"));
    }
    device.index = static_cast<int>(*index);
  }
  for (const auto& [key, field] : {std::pair{"name", &device.name},
                                   std::pair{"device", &device.device_node}}) {
    absl::StatusOr<std::optional<std::string>> text =
        ReadString(value, key, where);
    if (!text.ok()) return text.status();
    if (text->has_value()) *field = **text;
  }
  const std::string label = DeviceLabel(position, device, npu != nullptr);
  const Value* memory = Member(value, "memory");
  if (memory == nullptr || !memory->IsObject()) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, " has no memory figures (memory.used and memory.total)",
        memory == nullptr ? ""
                          : absl::StrCat(": memory is ", Describe(*memory))));
  }
  uint64_t* figures[] = {&device.used_bytes, &device.total_bytes};
  const char* keys[] = {"used", "total"};
  for (int i = 0; i < 2; ++i) {
    const Value* figure = Member(*memory, keys[i]);
    if (figure == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, " has no memory.", keys[i]));
    }
    absl::StatusOr<uint64_t> bytes =
        ReadCount(*figure, absl::StrCat(label, "'s memory.", keys[i]));
    if (!bytes.ok()) return bytes.status();
    *figures[i] = *bytes;
  }
  if (device.total_bytes == 0 || device.used_bytes > device.total_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": memory used ", device.used_bytes, " of total ",
        device.total_bytes, " is not a used size within a non-zero total"));
  }
  return device;
}

// contexts[] onto the devices they name (`by_index`: index -> position).
absl::Status ReadContexts(const Value& contexts,
                          const absl::flat_hash_map<int, size_t>& by_index,
                          std::vector<ProbedDevice>& devices) {
  if (!contexts.IsArray()) {
    return absl::InvalidArgumentError(
        absl::StrCat("contexts is ", Describe(contexts), ", not an array"));
  }
  if (contexts.Size() > kMaxRblnSmiContexts) {
    return absl::InvalidArgumentError(
        absl::StrCat("contexts lists ", contexts.Size(), " entries; at most ",
                     kMaxRblnSmiContexts, " are read"));
  }
  for (rapidjson::SizeType i = 0; i < contexts.Size(); ++i) {
    const Value& entry = contexts[i];
    const std::string where = absl::StrCat("contexts[", i, "]");
    if (!entry.IsObject()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " is ", Describe(entry), ", not an object"));
    }
    uint64_t fields[3] = {0, 0, 0};  // npu, pid, memalloc
    const char* keys[3] = {"npu", "pid", "memalloc"};
    bool present[3] = {false, false, false};
    for (int k = 0; k < 3; ++k) {
      const Value* value = Member(entry, keys[k]);
      if (value == nullptr) continue;
      absl::StatusOr<uint64_t> count =
          ReadCount(*value, absl::StrCat(where, ".", keys[k]));
      if (!count.ok()) return count.status();
      fields[k] = *count;
      present[k] = true;
    }
    absl::StatusOr<std::optional<std::string>> process =
        ReadString(entry, "process", where);
    if (!process.ok()) return process.status();
    if (!present[0] || !present[1] || fields[0] >= kMaxRblnSmiDevices) {
      continue;  // says nothing of a listed device's holders
    }
    auto it = by_index.find(static_cast<int>(fields[0]));
    if (it == by_index.end()) continue;
    ProbedContext context;
    context.pid = fields[1];
    context.bytes = fields[2];
    context.process = process->value_or("").substr(0, kMaxProcessNameBytes);
    devices[it->second].contexts.push_back(std::move(context));
  }
  return absl::OkStatus();
}

// The devices[] array of the top-level object.
absl::StatusOr<std::vector<ProbedDevice>> ReadDevices(const Value& document) {
  const Value* array = Member(document, "devices");
  if (array == nullptr) {
    return absl::InvalidArgumentError(
        "no devices: the JSON has no devices array");
  }
  if (!array->IsArray()) {
    return absl::InvalidArgumentError(
        absl::StrCat("devices is ", Describe(*array), ", not an array"));
  }
  if (array->Empty()) {
    return absl::InvalidArgumentError("no devices: devices[] lists no NPU");
  }
  if (array->Size() > kMaxRblnSmiDevices) {
    return absl::InvalidArgumentError(
        absl::StrCat("devices lists ", array->Size(), " entries; at most ",
                     kMaxRblnSmiDevices, " are read"));
  }
  std::vector<ProbedDevice> devices;
  absl::flat_hash_map<int, size_t> by_index;
  for (rapidjson::SizeType i = 0; i < array->Size(); ++i) {
    absl::StatusOr<ProbedDevice> device = ReadDevice((*array)[i], i);
    if (!device.ok()) return device.status();
    if (!by_index.emplace(device->index, devices.size()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "devices[", i, "] has npu ", device->index, ", which devices[",
          by_index[device->index], "] has too"));
    }
    devices.push_back(*std::move(device));
  }
  if (const Value* contexts = Member(document, "contexts");
      contexts != nullptr) {
    absl::Status status = ReadContexts(*contexts, by_index, devices);
    if (!status.ok()) return status;
  }
  return devices;
}

}  // namespace

bool LooksLikeRblnSmiJson(absl::string_view text) {
  text = absl::StripLeadingAsciiWhitespace(text);
  return !text.empty() && text[0] == '{';
}

absl::StatusOr<std::vector<ProbedDevice>> ParseRblnSmiJson(
    absl::string_view text) {
  if (text.size() > kMaxRblnSmiJsonBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the JSON is ", text.size(), " bytes; at most ",
                     kMaxRblnSmiJsonBytes, " are read"));
  }
  // RapidJSON's input streams read NUL as end of input.
  if (size_t nul = text.find('\0'); nul != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("not valid JSON: NUL byte at offset ", nul));
  }
  rapidjson::Document document;
  document.Parse<kParseFlags>(text.data(), text.size());
  if (document.HasParseError()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not valid JSON: ",
                     rapidjson::GetParseError_En(document.GetParseError()),
                     " (offset ", document.GetErrorOffset(), ")"));
  }
  if (!document.IsObject()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the JSON is ", Describe(document), ", not an object"));
  }
  return ReadDevices(document);
}

}  // namespace rbln
