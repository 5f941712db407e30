// Fuzz target: DecodeHelloReply and DecodeCodecReply
// (core/format/codec_wire.h) on arbitrary bytes, as a codec worker's reply
// line reaches them. The whole input is the line, decoded as the reply to
// request 1 (hello, inspect and rescale), so the seeds are replies as codecs
// send them, with "id": 1. The input is also encoded as a request's names.
//
// Beyond what the sanitizers catch, it checks the wire encoding's contract:
//  * a refusal is INVALID_ARGUMENT (FAILED_PRECONDITION for a hello of
//    another protocol), and no reply is accepted for another request's id;
//  * a reply accepted for inspect is accepted for rescale, with the same
//    failure;
//  * accepted facts keep the bounds the daemon relies on: 1 to kMaxNumDevices
//    nodes, 1 to kMaxChipletsPerNode buckets (1 per node for "node"), every
//    list of num_buckets() byte counts below 2^63, names of 1 to 255 bytes
//    and unique, `other` sorted, an npu of at most 64 bytes, a compiled count
//    of 0 or 1 to kMaxNumBlocks, a failure's message of at most
//    kMaxCodecMessageBytes;
//  * accepted facts, written back as a reply, decode to the same facts;
//  * a request is one line, whatever it names.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/format/codec_wire.h"
#include "core/format/rbln_config.h"
#include "tests/fuzz/fuzz_check.h"

namespace rbln {
namespace {

constexpr int64_t kId = 1;
constexpr uint64_t kMaxByteCount = (uint64_t{1} << 63) - 1;

// `s` as a JSON string: quotes, backslashes and control bytes escaped, every
// other byte as it is (the decoder accepted it as UTF-8).
std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      absl::StrAppend(&out, "\\", std::string(1, c));
    } else if (byte < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", byte);
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

// [[bytes per bucket] per node].
std::string JsonBuckets(const std::vector<uint64_t>& bytes,
                        uint32_t buckets_per_node) {
  std::vector<std::string> nodes;
  for (size_t i = 0; i < bytes.size(); i += buckets_per_node) {
    nodes.push_back(
        absl::StrCat("[",
                     absl::StrJoin(bytes.begin() + i,
                                   bytes.begin() + i + buckets_per_node, ","),
                     "]"));
  }
  return absl::StrCat("[", absl::StrJoin(nodes, ","), "]");
}

// An ok inspect reply to request kId that says `facts`.
std::string InspectReply(const ContainerFacts& facts) {
  std::vector<std::string> other;
  for (const AllocationFacts& a : facts.other) {
    other.push_back(absl::StrCat(JsonString(a.key), ":",
                                 JsonBuckets(a.bytes, facts.buckets_per_node)));
  }
  std::vector<std::string> kv;
  for (const KvTensorFacts& t : facts.kv_tensors) {
    kv.push_back(absl::StrCat(JsonString(t.name), ":",
                              JsonBuckets(t.bytes, facts.buckets_per_node)));
  }
  return absl::StrCat(
      "{\"id\":", kId, ",\"ok\":true,\"granularity\":",
      facts.granularity == BucketGranularity::kNode ? "\"node\""
                                                    : "\"chiplet\"",
      ",\"num_nodes\":", facts.num_nodes,
      ",\"buckets_per_node\":", facts.buckets_per_node, ",\"other\":{",
      absl::StrJoin(other, ","), "},\"kv_tensors\":{", absl::StrJoin(kv, ","),
      "}",
      facts.npu.empty() ? "" : absl::StrCat(",\"npu\":", JsonString(facts.npu)),
      facts.compiled_num_blocks == 0 ? ""
                                     : absl::StrCat(",\"compiled_num_blocks\":",
                                                    facts.compiled_num_blocks),
      "}");
}

// `facts` as text, for comparing and showing.
std::string FactsText(const ContainerFacts& facts) {
  std::string out = absl::StrCat(
      "granularity=", static_cast<int>(facts.granularity),
      " nodes=", facts.num_nodes, " buckets=", facts.buckets_per_node,
      " npu=", absl::CHexEscape(facts.npu),
      " compiled=", facts.compiled_num_blocks);
  for (const AllocationFacts& a : facts.other) {
    absl::StrAppend(&out, " other[", absl::CHexEscape(a.key),
                    "]=", absl::StrJoin(a.bytes, ","));
  }
  for (const KvTensorFacts& t : facts.kv_tensors) {
    absl::StrAppend(&out, " kv[", absl::CHexEscape(t.name),
                    "]=", absl::StrJoin(t.bytes, ","),
                    t.resizable.has_value() ? " resizable set" : "");
  }
  return out;
}

void CheckNames(const std::vector<std::string>& names, absl::string_view what) {
  std::set<std::string> seen;
  for (const std::string& name : names) {
    RBLN_FUZZ_CHECK(!name.empty() && name.size() <= 255, what, " name of ",
                    name.size(), " bytes");
    RBLN_FUZZ_CHECK(seen.insert(name).second, what,
                    " name twice: ", absl::CHexEscape(name));
  }
}

void CheckFacts(const ContainerFacts& facts) {
  RBLN_FUZZ_CHECK(facts.num_nodes >= 1 && facts.num_nodes <= kMaxNumDevices,
                  FactsText(facts));
  RBLN_FUZZ_CHECK(facts.buckets_per_node >= 1 &&
                      facts.buckets_per_node <= kMaxChipletsPerNode,
                  FactsText(facts));
  RBLN_FUZZ_CHECK(facts.granularity == BucketGranularity::kChiplet ||
                      facts.buckets_per_node == 1,
                  FactsText(facts));
  std::vector<std::string> keys;
  std::vector<std::string> names;
  const auto check_bytes = [&](const std::vector<uint64_t>& bytes) {
    RBLN_FUZZ_CHECK(bytes.size() == facts.num_buckets(), FactsText(facts));
    for (const uint64_t b : bytes) {
      RBLN_FUZZ_CHECK(b <= kMaxByteCount, FactsText(facts));
    }
  };
  for (size_t i = 0; i < facts.other.size(); ++i) {
    RBLN_FUZZ_CHECK(i == 0 || facts.other[i - 1].key < facts.other[i].key,
                    "other not sorted: ", FactsText(facts));
    keys.push_back(facts.other[i].key);
    check_bytes(facts.other[i].bytes);
  }
  for (const KvTensorFacts& tensor : facts.kv_tensors) {
    RBLN_FUZZ_CHECK(!tensor.resizable.has_value(), FactsText(facts));
    names.push_back(tensor.name);
    check_bytes(tensor.bytes);
  }
  CheckNames(keys, "allocation key");
  CheckNames(names, "KV tensor");
  RBLN_FUZZ_CHECK(facts.npu.size() <= 64, FactsText(facts));
  RBLN_FUZZ_CHECK(facts.compiled_num_blocks <= kMaxNumBlocks, FactsText(facts));
}

void FuzzHello(absl::string_view line) {
  absl::StatusOr<CodecHello> hello = DecodeHelloReply(line, kId);
  if (!hello.ok()) {
    RBLN_FUZZ_CHECK(absl::IsInvalidArgument(hello.status()) ||
                        absl::IsFailedPrecondition(hello.status()),
                    hello.status().ToString());
    return;
  }
  RBLN_FUZZ_CHECK(hello->api == "per_chiplet" || hello->api == "per_node",
                  absl::CHexEscape(hello->api));
  RBLN_FUZZ_CHECK(
      hello->codec.size() <= 255 && hello->codec_version.size() <= 255,
      "hello strings of ", hello->codec.size(), " and ",
      hello->codec_version.size(), " bytes");
  RBLN_FUZZ_CHECK(!DecodeHelloReply(line, kId + 1).ok(),
                  "a hello accepted for two ids");
}

void FuzzReply(absl::string_view line) {
  absl::StatusOr<CodecReply> inspect =
      DecodeCodecReply(line, kId, CodecOp::kInspect);
  absl::StatusOr<CodecReply> rescale =
      DecodeCodecReply(line, kId, CodecOp::kRescale);
  for (const absl::StatusOr<CodecReply>* reply : {&inspect, &rescale}) {
    if (reply->ok()) continue;
    RBLN_FUZZ_CHECK(absl::IsInvalidArgument(reply->status()),
                    reply->status().ToString());
  }
  if (rescale.ok()) {
    RBLN_FUZZ_CHECK(!DecodeCodecReply(line, kId + 1, CodecOp::kRescale).ok(),
                    "a reply accepted for two ids");
    if (rescale->failure.has_value()) {
      RBLN_FUZZ_CHECK(rescale->failure->message.size() <= kMaxCodecMessageBytes,
                      "a message of ", rescale->failure->message.size(),
                      " bytes");
    }
  }
  if (!inspect.ok()) return;
  RBLN_FUZZ_CHECK(rescale.ok(), "accepted for inspect, not for rescale: ",
                  rescale.status().ToString());
  RBLN_FUZZ_CHECK(inspect->failure.has_value() == rescale->failure.has_value(),
                  "the two decodings disagree on ok");
  if (inspect->failure.has_value()) {
    RBLN_FUZZ_CHECK(inspect->failure->code == rescale->failure->code &&
                        inspect->failure->message == rescale->failure->message,
                    "the two decodings disagree on the failure");
    return;
  }
  const ContainerFacts& facts = inspect->facts;
  CheckFacts(facts);
  const std::string again = InspectReply(facts);
  absl::StatusOr<CodecReply> reread =
      DecodeCodecReply(again, kId, CodecOp::kInspect);
  RBLN_FUZZ_CHECK(reread.ok() && !reread->failure.has_value(),
                  "the facts written back do not decode: ",
                  reread.status().ToString(), "\n", again);
  RBLN_FUZZ_CHECK(FactsText(reread->facts) == FactsText(facts),
                  "before: ", FactsText(facts),
                  "\nafter:  ", FactsText(reread->facts));
}

void FuzzRequest(absl::string_view text) {
  const std::string name(text);
  for (const CodecOp op : {CodecOp::kInspect, CodecOp::kRescale}) {
    const std::string line =
        EncodeCodecRequest(kId, {.op = op,
                                 .file = name,
                                 .out_name = name,
                                 .factors = {{name, {2, 1}}}});
    RBLN_FUZZ_CHECK(!line.empty() && line.find('\n') == line.size() - 1,
                    "a request that is not one line: ", absl::CHexEscape(line));
  }
}

}  // namespace
}  // namespace rbln

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view line(reinterpret_cast<const char*>(data), size);
  rbln::FuzzHello(line);
  rbln::FuzzReply(line);
  rbln::FuzzRequest(line);
  return 0;
}
