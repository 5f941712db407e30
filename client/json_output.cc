#include "client/json_output.h"

#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace rbln::client {
namespace {

// proto3's JSON mapping prints 64-bit integers as strings; makes those of
// `object` (a message of type `type`, as printed) numbers, recursively.
void Int64FieldsToNumbers(const google::protobuf::Descriptor& type,
                          rapidjson::Value& object);

void Int64ValueToNumber(const google::protobuf::FieldDescriptor& field,
                        rapidjson::Value& value) {
  using google::protobuf::FieldDescriptor;
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t n = 0;
      if (value.IsString() && absl::SimpleAtoi(value.GetString(), &n)) {
        value.SetInt64(n);
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t n = 0;
      if (value.IsString() && absl::SimpleAtoi(value.GetString(), &n)) {
        value.SetUint64(n);
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      // Well-known types have JSON forms of their own (Timestamp, ...).
      if (!absl::StartsWith(field.message_type()->full_name(),
                            "google.protobuf.")) {
        Int64FieldsToNumbers(*field.message_type(), value);
      }
      break;
    default:
      break;
  }
}

void Int64FieldsToNumbers(const google::protobuf::Descriptor& type,
                          rapidjson::Value& object) {
  if (!object.IsObject()) return;
  for (int i = 0; i < type.field_count(); ++i) {
    const google::protobuf::FieldDescriptor& field = *type.field(i);
    const std::string name(field.name());
    auto member = object.FindMember(name.c_str());
    if (member == object.MemberEnd()) continue;
    rapidjson::Value& value = member->value;
    if (field.is_map()) {
      if (!value.IsObject()) continue;
      const auto& map_value = *field.message_type()->map_value();
      for (auto& entry : value.GetObject()) {
        Int64ValueToNumber(map_value, entry.value);
      }
    } else if (field.is_repeated()) {
      if (!value.IsArray()) continue;
      for (rapidjson::Value& element : value.GetArray()) {
        Int64ValueToNumber(field, element);
      }
    } else {
      Int64ValueToNumber(field, value);
    }
  }
}

}  // namespace

absl::StatusOr<std::string> FormatJson(const google::protobuf::Message& reply) {
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  print.always_print_primitive_fields = true;
  std::string json;
  auto status =
      google::protobuf::util::MessageToJsonString(reply, &json, print);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot print the reply as JSON: ", status.ToString()));
  }
  rapidjson::Document doc;
  if (doc.Parse<rapidjson::kParseFullPrecisionFlag>(json.c_str())
          .HasParseError()) {
    return absl::InternalError(
        "cannot print the reply as JSON: protobuf printed what RapidJSON "
        "rejects");
  }
  Int64FieldsToNumbers(*reply.GetDescriptor(), doc);
  return ToJsonLine(doc);
}

std::string ToJsonLine(const rapidjson::Value& doc) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  doc.Accept(writer);
  return absl::StrCat(absl::string_view(buffer.GetString(), buffer.GetSize()),
                      "\n");
}

absl::StatusOr<std::string> FormatListPageJson(
    const rbln::artifact::v1::ListArtifactsResponse& page) {
  std::string lines;
  for (const rbln::artifact::v1::ArtifactSummary& artifact : page.artifacts()) {
    absl::StatusOr<std::string> line = FormatJson(artifact);
    if (!line.ok()) return line.status();
    lines += *line;
  }
  return lines;
}

std::string FormatListEndJson(
    const std::vector<rbln::artifact::v1::SkippedEntry>& skipped,
    uint64_t not_readable) {
  std::string lines;
  for (const rbln::artifact::v1::SkippedEntry& entry : skipped) {
    rapidjson::Document doc(rapidjson::kObjectType);
    auto& alloc = doc.GetAllocator();
    doc.AddMember("artifact",
                  rapidjson::Value(entry.artifact().data(),
                                   entry.artifact().size(), alloc),
                  alloc);
    doc.AddMember(
        "skipped_reason",
        rapidjson::Value(entry.reason().data(), entry.reason().size(), alloc),
        alloc);
    lines += ToJsonLine(doc);
  }
  if (not_readable > 0) {
    rapidjson::Document doc(rapidjson::kObjectType);
    doc.AddMember("not_readable", not_readable, doc.GetAllocator());
    lines += ToJsonLine(doc);
  }
  return lines;
}

}  // namespace rbln::client
