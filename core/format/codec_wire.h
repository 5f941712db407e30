// The external codec's wire encoding (docs/codec-protocol.md): the request
// lines the daemon sends a worker, and the reply lines it reads back, decoded
// and checked against the protocol. A reply is untrusted input: every count,
// size and name in it is bounded before anything follows from it.
//
// Thread-safe: pure functions, no I/O and no state (fuzzed by
// tests/fuzz/codec_reply_fuzz.cc).
#ifndef RBLN_CORE_FORMAT_CODEC_WIRE_H_
#define RBLN_CORE_FORMAT_CODEC_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/format/codec.h"

namespace rbln {

// The protocol version this daemon speaks.
inline constexpr int kCodecProtocolVersion = 1;
// A codec's text (an error message, its last stderr lines) as repeated in a
// status.
inline constexpr size_t kMaxCodecMessageBytes = 500;

// What a worker said of itself in its hello.
struct CodecHello {
  std::string codec;          // "rebel"
  std::string codec_version;  // "0.9.2", or "unknown"
  std::string api;            // "per_chiplet" or "per_node"
  bool can_rescale = false;
  // An extra field some codecs send (the test codec): the uid it runs as.
  std::optional<int64_t> uid;
};

enum class CodecOp { kInspect, kRescale };

// "inspect", "rescale".
absl::string_view CodecOpName(CodecOp op);

// One request after the hello. Its descriptors travel beside the line:
// inspect hands "source", rescale "source" and "out_dir", in that order.
struct CodecRequest {
  CodecOp op = CodecOp::kInspect;
  std::string file;        // the source's base name, for the codec's messages
  std::string out_name;    // rescale: the file to write in out_dir
  RescaleFactors factors;  // rescale: {tensor: (target, current)}
};

// The hello request of protocol kCodecProtocolVersion, as one line ending in
// "\n".
std::string EncodeHelloRequest(int64_t id);
// `request` as one line ending in "\n", naming its descriptors in "fds".
std::string EncodeCodecRequest(int64_t id, const CodecRequest& request);

// The reply to hello request `id` (`line` without its newline). Errors say
// what is not protocol: INVALID_ARGUMENT for a line that is not an ok reply
// to `id` or lacks a field of the hello; FAILED_PRECONDITION for a worker
// that speaks another protocol version.
absl::StatusOr<CodecHello> DecodeHelloReply(absl::string_view line, int64_t id);

// The error codes of a failed request.
enum class CodecErrorCode { kBadRequest, kUnreadable, kOlderCompiler, kFailed };

struct CodecFailure {
  CodecErrorCode code = CodecErrorCode::kFailed;
  // The codec's message, made fit for a status (WireText) and cut to
  // kMaxCodecMessageBytes.
  std::string message;
};

// A reply to an inspect or rescale request that is protocol.
struct CodecReply {
  // Set when the reply is "ok": false.
  std::optional<CodecFailure> failure;
  // An ok inspect's facts: kv_tensors in the reply's order, `other` sorted
  // by key, every list of num_buckets() byte counts.
  ContainerFacts facts;
};

// The reply to request `id` of `op` (`line` without its newline).
// INVALID_ARGUMENT, saying why, for a line that is not protocol: not a JSON
// object, another id, no boolean "ok", an error without a string "code" and
// "message" or with an unknown code, or an ok inspect whose facts are
// missing, malformed or out of bounds.
absl::StatusOr<CodecReply> DecodeCodecReply(absl::string_view line, int64_t id,
                                            CodecOp op);

}  // namespace rbln

#endif  // RBLN_CORE_FORMAT_CODEC_WIRE_H_
