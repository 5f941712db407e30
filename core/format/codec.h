// The codec boundary (docs/codec-protocol.md): what the daemon needs of one
// compiled graph file (`*.rbln`), whatever its format. A codec answers two
// questions:
//
//  * inspect: the file's memory facts, per bucket ((node, chiplet), or the
//    whole node for compilers that report memory per node only): the bytes
//    of every allocation that is not a KV tensor, by key, and each KV
//    tensor's bytes at the artifact's current count, unaligned;
//  * rescale: write a resized copy of the file at a path it is given, from
//    factors {tensor: (target, current)}, each named tensor's buffers
//    becoming exactly bytes * target / current.
//
// The fit, the plan, Describe and the commit engine see only this interface.
// The built-in codec is this project's container (core/format/container.h);
// an external codec is a worker process that drives the vendor's own API
// (core/format/external_codec.h).
//
// Thread-safe: implementations must allow concurrent calls.
#ifndef RBLN_CORE_FORMAT_CODEC_H_
#define RBLN_CORE_FORMAT_CODEC_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/os/env.h"

namespace rbln {

// How the memory of a node is divided into buckets: per chiplet (an
// allocation pinned to a chiplet must fit in it), or one bucket holding the
// whole node (older compilers report memory per node only).
enum class BucketGranularity { kChiplet, kNode };

// One KV tensor of a file.
struct KvTensorFacts {
  std::string name;
  // Bytes on each bucket at the artifact's current count, unaligned,
  // indexed node * buckets_per_node + bucket.
  std::vector<uint64_t> bytes;
  // Whether its block count can change, when the file itself says so (the
  // built-in container does); unset when only rbln_config.json can tell.
  std::optional<bool> resizable;
};

// One allocation key that is not a KV tensor ("weights", "program", ...).
struct AllocationFacts {
  std::string key;
  std::vector<uint64_t> bytes;  // per bucket, as KvTensorFacts::bytes
};

struct ContainerFacts {
  BucketGranularity granularity = BucketGranularity::kChiplet;
  uint32_t num_nodes = 0;
  // Buckets per node: the chiplets per node, or 1 for kNode.
  uint32_t buckets_per_node = 0;
  std::vector<AllocationFacts> other;  // sorted by key
  std::vector<KvTensorFacts> kv_tensors;
  // What only some codecs know: the graph's name ("prefill"), the target
  // NPU, the count it was compiled with, the payload's size; empty or 0
  // when unknown.
  std::string compiled_model_name;
  std::string npu;
  uint64_t compiled_num_blocks = 0;
  // The bytes of program and weights the file carries; 0 when unknown.
  uint64_t payload_bytes = 0;

  size_t num_buckets() const {
    return size_t{num_nodes} * size_t{buckets_per_node};
  }
  // The bytes of every allocation that is not a KV tensor on `bucket`,
  // saturating at UINT64_MAX.
  uint64_t OtherBytes(size_t bucket) const;
};

// {tensor name: (target, current)}: each named tensor's bytes on every
// bucket become bytes * target / current; tensors not named stay.
using RescaleFactors = std::map<std::string, std::pair<uint64_t, uint64_t>>;

struct RescaleRequest {
  // The file to rescale, read through `source_env`.
  Env* source_env = nullptr;
  std::string source_path;
  // The facts Inspect returned for it.
  const ContainerFacts* facts = nullptr;
  RescaleFactors factors;
  // The new file to write through `out_env`: it does not exist yet, and its
  // directory is a staging directory of the commit engine.
  Env* out_env = nullptr;
  std::string out_path;
  // Called with the payload bytes of each chunk copied; a status other than
  // OK stops the write and is returned (cancellation). May be null.
  std::function<absl::Status(uint64_t bytes)> on_copied;
};

class ContainerCodec {
 public:
  virtual ~ContainerCodec() = default;

  // For messages and logs: "built-in", "external (rbln_codec_rebel.py)".
  virtual std::string name() const = 0;

  // Reads the facts of `path` (a regular file, read through `env`). An error
  // names the file and says what was wrong.
  virtual absl::StatusOr<ContainerFacts> Inspect(Env* env,
                                                 const std::string& path) = 0;

  // Whether Rescale can work at all: an external codec's compiler may be too
  // old to rescale (Inspect works either way).
  virtual bool CanRescale() const { return true; }

  // Writes the rescaled copy at request.out_path, complete and synced, when
  // it returns OK; the caller gives it its owner and mode. On error the
  // caller removes whatever is at out_path (the staging directory).
  virtual absl::Status Rescale(const RescaleRequest& request) = 0;
};

}  // namespace rbln

#endif  // RBLN_CORE_FORMAT_CODEC_H_
