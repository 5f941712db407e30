// Synthetic compiled artifacts for tests, demos and benchmarks:
// rbln_config.json in optimum-rbln's schema, one container per graph
// (prefill, decoder_batch_<b>; docs/rbln-container.md) and the usual
// companions (config.json, generation_config.json, tokenizer files), with
// memory numbers that follow from the model's shapes as docs/memory-model.md
// ("Synthetic artifacts") gives them, so that tests can check them by hand.
//
// Thread-safe: no shared state.
#ifndef RBLN_TOOLS_SYNTH_H_
#define RBLN_TOOLS_SYNTH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/os/env.h"

namespace rbln {

struct SynthSpec {
  std::string cls_name = "RBLNLlamaForCausalLM";
  std::string model_type = "llama";
  uint32_t num_layers = 2;
  uint32_t num_kv_heads = 2;
  uint32_t head_dim = 64;
  std::string dtype = "float16";  // float16, bfloat16, float32
  uint64_t max_seq_len = 2048;
  uint64_t block_size = 256;
  uint64_t batch_size = 2;
  std::string attn_impl = "flash_attn";  // or eager
  std::string npu = "RBLN-CA12";
  uint32_t num_devices = 1;
  std::vector<uint64_t> decoder_batch_sizes;  // empty: {batch_size}
  std::vector<uint32_t> sliding_window_layers;
  uint64_t sliding_window = 4096;
  uint64_t weight_bytes = uint64_t{64} << 20;
  uint64_t payload_bytes = uint64_t{256} << 10;  // over all containers
  uint64_t kvcache_num_blocks = 0;               // 0: fit at 100% of the device
};

// Names accepted by PresetSpec, in a stable order.
std::vector<std::string> PresetNames();

// tiny, llama3-8b-ca12-tp4, llama3-70b-cr-tp2, gemma-hybrid-ca12.
// NOT_FOUND lists the known names.
absl::StatusOr<SynthSpec> PresetSpec(absl::string_view name);

// dtype name -> bytes per element. INVALID_ARGUMENT for unknown names.
absl::StatusOr<uint32_t> DtypeBytes(absl::string_view dtype);

// Bytes of one KV tensor per block per node for `spec`.
absl::StatusOr<uint64_t> KvBytesPerBlockPerNode(const SynthSpec& spec);

struct SynthResult {
  uint64_t kvcache_num_blocks = 0;  // the compiled (and current) count
  uint64_t num_full_blocks = 0;
  std::vector<std::string> files;  // written, relative to the directory
};

// Writes the artifact into `out_dir`, which is created with its missing
// parents, like mkdir -p (an existing `out_dir` is refused). INVALID_ARGUMENT
// for impossible dimensions or an NPU the spec table does not know,
// FAILED_PRECONDITION when the model does not fit the device even at the
// minimum block count.
absl::StatusOr<SynthResult> WriteSyntheticArtifact(Env* env,
                                                   const SynthSpec& spec,
                                                   const std::string& out_dir);

}  // namespace rbln

#endif  // RBLN_TOOLS_SYNTH_H_
