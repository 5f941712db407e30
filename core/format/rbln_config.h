// rbln_config.json (docs/memory-model.md): the fields the daemon reads, and the
// one rewrite it makes.
//
// rbln_config.json is the source of truth for the current kvcache_num_blocks;
// nothing else records it. Parsing and rewriting are pure functions over the
// file's text (the caller reads and writes the file through Env).
//
// Thread-safe: no shared state.
#ifndef RBLN_CORE_FORMAT_RBLN_CONFIG_H_
#define RBLN_CORE_FORMAT_RBLN_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rbln {

inline constexpr char kRblnConfigFileName[] = "rbln_config.json";

// The hard upper bound on kvcache_num_blocks, in requests and in
// rbln_config.json: 2^31 - 1, the largest count a runtime holding it in a
// signed 32-bit integer can take. Real counts are in the thousands; a larger
// one is refused before any byte count is computed from it.
inline constexpr uint64_t kMaxNumBlocks = (uint64_t{1} << 31) - 1;

// Hard upper bounds on the devices an artifact spans and the chiplets of
// each, in rbln_config.json and in container headers: far above any real
// machine (tensor parallelism of 8 or 16, 4 chiplets), and low enough that a
// memory model of nodes x chiplets buckets stays small whatever a file says.
inline constexpr uint32_t kMaxNumDevices = 256;
inline constexpr uint32_t kMaxChipletsPerNode = 64;

// One entry of `kvcache_metas`.
struct KvcacheMeta {
  std::string name;
  int64_t layer_index = 0;
  std::vector<int64_t> shape;
  std::string layer_type;  // e.g. "full_attention", "sliding_attention"
  bool is_auto = true;
  std::string dtype;
};

struct RblnConfig {
  std::string cls_name;                       // optional, "" when absent
  uint64_t kvcache_num_blocks = 0;            // current count c
  uint64_t kvcache_block_size = 0;            // S (or kvcache_partition_len)
  uint64_t max_seq_len = 0;                   // L
  uint64_t batch_size = 0;                    // B
  std::string attn_impl;                      // "eager" or "flash_attn"
  std::vector<KvcacheMeta> kvcache_metas;     // empty when absent
  std::vector<std::string> phases;            // empty when absent
  std::vector<uint64_t> decoder_batch_sizes;  // empty when absent
  uint32_t num_devices = 1;
  std::string npu;  // "" when the config does not say (use the .rbln header)

  // (L / S) * B
  uint64_t NumFullBlocks() const;
  // flash_attn: min(L / S + 1, NumFullBlocks()); otherwise B.
  uint64_t NumMinBlocks() const;
};

// Parses rbln_config.json text. `path` is used only in messages.
//
// Errors (each naming the field and `path`):
//  * not JSON / not an object, nested deeper than 64 levels, or a key twice
//    in one object: INVALID_ARGUMENT with the reason and offset (parsing is
//    iterative: no input reaches the stack);
//  * a legacy config (top-level `_meta`): FAILED_PRECONDITION, recompile;
//  * a multimodal config whose decoder lives under a submodule key (an object
//    member holding `kvcache_num_blocks`, e.g. `language_model`) while the top
//    level has none: UNIMPLEMENTED naming the submodule;
//  * a needed field missing or of the wrong type or out of range:
//    FAILED_PRECONDITION ("field 'max_seq_len' in /x/rbln_config.json: ...").
// Needed: kvcache_num_blocks (1 ..= kMaxNumBlocks), max_seq_len, batch_size (>=
// 1), and kvcache_block_size or, when absent and attn_impl is flash_attn,
// kvcache_partition_len; max_seq_len must be a multiple of the block size.
// attn_impl: "eager" or "flash_attn"; when absent or null it is flash_attn
// if kvcache_partition_len is set, else eager.
// num_devices: `num_devices`, else `tensor_parallel_size`, else
// `_compile_cfgs[i].num_devices` / `tensor_parallel_size`, else 1.
// npu: top-level `npu`, else `_compile_cfgs[i].npu`, else "".
absl::StatusOr<RblnConfig> ParseRblnConfig(absl::string_view json,
                                           absl::string_view path);

// Returns the text with the digits of the top-level `kvcache_num_blocks`
// replaced by `num_blocks` and every other byte as it was (keys, order,
// string escapes, indentation, a trailing newline): tools that hash or diff
// configs see only the change made. Errors as ParseRblnConfig for
// unparsable input, a missing top-level kvcache_num_blocks, or one that is
// not a positive integer.
absl::StatusOr<std::string> RewriteKvcacheNumBlocks(absl::string_view json,
                                                    uint64_t num_blocks,
                                                    absl::string_view path);

}  // namespace rbln

#endif  // RBLN_CORE_FORMAT_RBLN_CONFIG_H_
