#include "core/format/codec_wire.h"

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/format/rbln_config.h"
#include "core/status_macros.h"
#include "core/text.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace rbln {
namespace {

// Tensor and allocation key names: no real name comes near it.
constexpr size_t kMaxNameBytes = 255;
// Allocation keys or KV tensors in one reply: real models have some hundreds
// of KV tensors (two per layer) and a handful of keys.
constexpr size_t kMaxNamedEntries = 4096;
constexpr size_t kMaxNpuBytes = 64;
// Values in the protocol are non-negative and below 2^63.
constexpr uint64_t kMaxProtocolInteger = (uint64_t{1} << 63) - 1;

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

void WriteString(JsonWriter& writer, absl::string_view s) {
  writer.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

std::string BuildRequest(int64_t id, absl::string_view op,
                         const std::function<void(JsonWriter&)>& fields,
                         const std::vector<const char*>& fd_names) {
  rapidjson::StringBuffer buffer;
  JsonWriter writer(buffer);
  writer.StartObject();
  writer.Key("id");
  writer.Int64(id);
  writer.Key("op");
  WriteString(writer, op);
  if (fields) fields(writer);
  if (!fd_names.empty()) {
    writer.Key("fds");
    writer.StartArray();
    for (const char* name : fd_names) writer.String(name);
    writer.EndArray();
  }
  writer.EndObject();
  return absl::StrCat(buffer.GetString(), "\n");
}

// The error a reply is not protocol for, or OK.
absl::Status NotProtocol(absl::string_view why) {
  return absl::InvalidArgumentError(why);
}

// A name of a tensor or an allocation key: non-empty, at most kMaxNameBytes.
absl::Status CheckName(absl::string_view field, absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) {
    return NotProtocol(absl::StrCat(field, ": a name of ", name.size(),
                                    " bytes (1 to ", kMaxNameBytes, ")"));
  }
  return absl::OkStatus();
}

// [[bytes per bucket] per node], of exactly `num_nodes` x `per_node`.
absl::StatusOr<std::vector<uint64_t>> ParseBuckets(
    const rapidjson::Value& value, uint32_t num_nodes, uint32_t per_node,
    absl::string_view where) {
  if (!value.IsArray() || value.Size() != num_nodes) {
    return NotProtocol(absl::StrCat(where, ": not a list of ", num_nodes,
                                    " lists (one per node)"));
  }
  std::vector<uint64_t> bytes;
  bytes.reserve(size_t{num_nodes} * per_node);
  for (const rapidjson::Value& node : value.GetArray()) {
    if (!node.IsArray() || node.Size() != per_node) {
      return NotProtocol(absl::StrCat(where, ": a node's list is not ",
                                      per_node, " numbers (one per bucket)"));
    }
    for (const rapidjson::Value& n : node.GetArray()) {
      if (!n.IsUint64() || n.GetUint64() > kMaxProtocolInteger) {
        return NotProtocol(absl::StrCat(
            where, ": a byte count that is not an integer in 0 .. 2^63-1"));
      }
      bytes.push_back(n.GetUint64());
    }
  }
  return bytes;
}

// {name: [[bytes]]} with unique, bounded names.
absl::Status ParseNamedBuckets(
    const rapidjson::Value& reply, const char* field, uint32_t num_nodes,
    uint32_t per_node,
    const std::function<void(std::string, std::vector<uint64_t>)>& add) {
  const auto it = reply.FindMember(field);
  if (it == reply.MemberEnd() || !it->value.IsObject()) {
    return NotProtocol(absl::StrCat("no object \"", field, "\""));
  }
  if (it->value.MemberCount() > kMaxNamedEntries) {
    return NotProtocol(
        absl::StrCat(field, ": more than ", kMaxNamedEntries, " entries"));
  }
  absl::flat_hash_set<absl::string_view> seen;
  for (const auto& member : it->value.GetObject()) {
    const absl::string_view name(member.name.GetString(),
                                 member.name.GetStringLength());
    RBLN_RETURN_IF_ERROR(CheckName(field, name));
    if (!seen.insert(name).second) {
      return NotProtocol(absl::StrCat(field, ": a name given twice"));
    }
    RBLN_ASSIGN_OR_RETURN(std::vector<uint64_t> bytes,
                          ParseBuckets(member.value, num_nodes, per_node,
                                       absl::StrCat(field, ".", Echo(name))));
    add(std::string(name), std::move(bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ParseCount(const rapidjson::Value& reply,
                                    const char* field, uint32_t max) {
  const auto it = reply.FindMember(field);
  if (it == reply.MemberEnd() || !it->value.IsUint() ||
      it->value.GetUint() < 1 || it->value.GetUint() > max) {
    return NotProtocol(
        absl::StrCat("\"", field, "\" is not an integer in 1 .. ", max));
  }
  return it->value.GetUint();
}

absl::StatusOr<ContainerFacts> ParseInspectReply(
    const rapidjson::Value& reply) {
  ContainerFacts facts;
  const auto granularity = reply.FindMember("granularity");
  if (granularity == reply.MemberEnd() || !granularity->value.IsString()) {
    return NotProtocol("no \"granularity\"");
  }
  const absl::string_view g(granularity->value.GetString(),
                            granularity->value.GetStringLength());
  if (g == "chiplet") {
    facts.granularity = BucketGranularity::kChiplet;
  } else if (g == "node") {
    facts.granularity = BucketGranularity::kNode;
  } else {
    return NotProtocol("\"granularity\" is neither \"chiplet\" nor \"node\"");
  }
  RBLN_ASSIGN_OR_RETURN(facts.num_nodes,
                        ParseCount(reply, "num_nodes", kMaxNumDevices));
  RBLN_ASSIGN_OR_RETURN(
      facts.buckets_per_node,
      ParseCount(reply, "buckets_per_node", kMaxChipletsPerNode));
  if (facts.granularity == BucketGranularity::kNode &&
      facts.buckets_per_node != 1) {
    return NotProtocol(
        "granularity \"node\" with buckets_per_node other than 1");
  }
  RBLN_RETURN_IF_ERROR(ParseNamedBuckets(
      reply, "other", facts.num_nodes, facts.buckets_per_node,
      [&](std::string key, std::vector<uint64_t> bytes) {
        facts.other.push_back({std::move(key), std::move(bytes)});
      }));
  std::sort(facts.other.begin(), facts.other.end(),
            [](const AllocationFacts& a, const AllocationFacts& b) {
              return a.key < b.key;
            });
  RBLN_RETURN_IF_ERROR(ParseNamedBuckets(
      reply, "kv_tensors", facts.num_nodes, facts.buckets_per_node,
      [&](std::string name, std::vector<uint64_t> bytes) {
        facts.kv_tensors.push_back({std::move(name), std::move(bytes), {}});
      }));
  if (const auto npu = reply.FindMember("npu"); npu != reply.MemberEnd()) {
    if (!npu->value.IsString() || npu->value.GetStringLength() == 0 ||
        npu->value.GetStringLength() > kMaxNpuBytes) {
      return NotProtocol(absl::StrCat("\"npu\" is not a name of 1 to ",
                                      kMaxNpuBytes, " bytes"));
    }
    facts.npu = npu->value.GetString();
  }
  if (const auto blocks = reply.FindMember("compiled_num_blocks");
      blocks != reply.MemberEnd()) {
    if (!blocks->value.IsUint64() || blocks->value.GetUint64() < 1 ||
        blocks->value.GetUint64() > kMaxNumBlocks) {
      return NotProtocol(absl::StrCat(
          "\"compiled_num_blocks\" is not an integer in 1 .. ", kMaxNumBlocks));
    }
    facts.compiled_num_blocks = blocks->value.GetUint64();
  }
  return facts;
}

// A string field of a hello, bounded.
absl::StatusOr<std::string> HelloString(const rapidjson::Value& reply,
                                        const char* field) {
  const auto it = reply.FindMember(field);
  if (it == reply.MemberEnd() || !it->value.IsString() ||
      it->value.GetStringLength() > kMaxNameBytes) {
    return NotProtocol(absl::StrCat("no string \"", field, "\""));
  }
  return std::string(it->value.GetString(), it->value.GetStringLength());
}

absl::StatusOr<CodecHello> ParseHelloReply(const rapidjson::Value& reply) {
  const auto protocol = reply.FindMember("protocol");
  if (protocol == reply.MemberEnd() || !protocol->value.IsInt()) {
    return NotProtocol("no \"protocol\"");
  }
  if (protocol->value.GetInt() != kCodecProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "it speaks protocol ", protocol->value.GetInt(),
        "; this daemon speaks protocol ", kCodecProtocolVersion,
        " (docs/codec-protocol.md): install the codec that came with it"));
  }
  CodecHello hello;
  RBLN_ASSIGN_OR_RETURN(hello.codec, HelloString(reply, "codec"));
  RBLN_ASSIGN_OR_RETURN(hello.codec_version,
                        HelloString(reply, "codec_version"));
  RBLN_ASSIGN_OR_RETURN(hello.api, HelloString(reply, "api"));
  if (hello.api != "per_chiplet" && hello.api != "per_node") {
    return NotProtocol("\"api\" is neither \"per_chiplet\" nor \"per_node\"");
  }
  const auto can_rescale = reply.FindMember("can_rescale");
  if (can_rescale == reply.MemberEnd() || !can_rescale->value.IsBool()) {
    return NotProtocol("no boolean \"can_rescale\"");
  }
  hello.can_rescale = can_rescale->value.GetBool();
  if (const auto uid = reply.FindMember("uid");
      uid != reply.MemberEnd() && uid->value.IsInt64()) {
    hello.uid = uid->value.GetInt64();
  }
  return hello;
}

// Parses `line` as one JSON object; the iterative parser, so that a deeply
// nested reply costs heap, not stack.
bool ParseObject(absl::string_view line, rapidjson::Document* doc) {
  doc->Parse<rapidjson::kParseValidateEncodingFlag |
             rapidjson::kParseIterativeFlag>(line.data(), line.size());
  return !doc->HasParseError() && doc->IsObject();
}

bool HasId(const rapidjson::Value& reply, int64_t id) {
  return reply.HasMember("id") && reply["id"].IsInt64() &&
         reply["id"].GetInt64() == id;
}

// The "error" of a reply with "ok": false.
absl::StatusOr<CodecFailure> ParseFailure(const rapidjson::Value& reply) {
  const auto error = reply.FindMember("error");
  if (error == reply.MemberEnd() || !error->value.IsObject() ||
      !error->value.HasMember("code") || !error->value["code"].IsString() ||
      !error->value.HasMember("message") ||
      !error->value["message"].IsString()) {
    return NotProtocol("an error without a string \"code\" and \"message\"");
  }
  const std::string code = error->value["code"].GetString();
  CodecFailure failure;
  if (code == "UNREADABLE") {
    failure.code = CodecErrorCode::kUnreadable;
  } else if (code == "OLDER_COMPILER") {
    failure.code = CodecErrorCode::kOlderCompiler;
  } else if (code == "BAD_REQUEST") {
    failure.code = CodecErrorCode::kBadRequest;
  } else if (code == "FAILED") {
    failure.code = CodecErrorCode::kFailed;
  } else {
    return NotProtocol("an unknown error code");
  }
  failure.message =
      WireText(absl::string_view(error->value["message"].GetString(),
                                 error->value["message"].GetStringLength()),
               kMaxCodecMessageBytes);
  return failure;
}

}  // namespace

absl::string_view CodecOpName(CodecOp op) {
  switch (op) {
    case CodecOp::kInspect:
      return "inspect";
    case CodecOp::kRescale:
      return "rescale";
  }
  return "unknown";
}

std::string EncodeHelloRequest(int64_t id) {
  return BuildRequest(id, "hello",
                      [](JsonWriter& writer) {
                        writer.Key("protocol");
                        writer.Int(kCodecProtocolVersion);
                      },
                      {});
}

std::string EncodeCodecRequest(int64_t id, const CodecRequest& request) {
  if (request.op == CodecOp::kInspect) {
    return BuildRequest(id, CodecOpName(request.op),
                        [&](JsonWriter& writer) {
                          writer.Key("file");
                          WriteString(writer, request.file);
                        },
                        {"source"});
  }
  return BuildRequest(id, CodecOpName(request.op),
                      [&](JsonWriter& writer) {
                        writer.Key("file");
                        WriteString(writer, request.file);
                        writer.Key("out_name");
                        WriteString(writer, request.out_name);
                        writer.Key("factors");
                        writer.StartObject();
                        for (const auto& [tensor, factor] : request.factors) {
                          writer.Key(
                              tensor.data(),
                              static_cast<rapidjson::SizeType>(tensor.size()));
                          writer.StartArray();
                          writer.Uint64(factor.first);
                          writer.Uint64(factor.second);
                          writer.EndArray();
                        }
                        writer.EndObject();
                      },
                      {"source", "out_dir"});
}

absl::StatusOr<CodecHello> DecodeHelloReply(absl::string_view line,
                                            int64_t id) {
  rapidjson::Document doc;
  if (!ParseObject(line, &doc) || !HasId(doc, id) || !doc.HasMember("ok") ||
      !doc["ok"].IsBool() || !doc["ok"].GetBool()) {
    return NotProtocol(absl::StrCat("its answer is not a JSON object with ",
                                    "\"id\": ", id, " and \"ok\": true"));
  }
  return ParseHelloReply(doc);
}

absl::StatusOr<CodecReply> DecodeCodecReply(absl::string_view line, int64_t id,
                                            CodecOp op) {
  rapidjson::Document doc;
  if (!ParseObject(line, &doc)) return NotProtocol("not a JSON object");
  if (!HasId(doc, id)) {
    return NotProtocol(absl::StrCat("not the id ", id, " of the request"));
  }
  if (!doc.HasMember("ok") || !doc["ok"].IsBool()) {
    return NotProtocol("no boolean \"ok\"");
  }
  CodecReply reply;
  if (!doc["ok"].GetBool()) {
    RBLN_ASSIGN_OR_RETURN(reply.failure, ParseFailure(doc));
    return reply;
  }
  if (op == CodecOp::kInspect) {
    RBLN_ASSIGN_OR_RETURN(reply.facts, ParseInspectReply(doc));
  }
  return reply;
}

}  // namespace rbln
