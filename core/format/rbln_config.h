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
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
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

// One KV-cache tensor of the decoder, an entry of `kvcache_metas` (written by
// optimum-rbln before 0.12) or `cache_metas` (0.12 on; the same fields). A
// `can_resize` key, which some files carry, is ignored: it decides nothing.
struct KvcacheMeta {
  std::string name;
  int64_t layer_index = 0;
  std::vector<int64_t> shape;
  // "full_attention", "sliding_attention" or "linear_attention"; "" when
  // absent or null (older configs), which is full attention. Any other value
  // is refused when the config is parsed.
  std::string layer_type;
  bool is_auto = true;
  std::string dtype;

  // Whether a change of kvcache_num_blocks resizes this tensor, by
  // optimum-rbln's rule (cache_utils.py): `is_auto` and full attention
  // (layer_type "" or "full_attention"); sliding and linear attention are
  // fixed.
  bool Resizable() const;
};

// The decoder's settings. For a multimodal artifact (decoder_submodule set)
// every field but cls_name comes from the submodule's nested object.
struct RblnConfig {
  std::string cls_name;                    // top level's, "" when absent
  uint64_t kvcache_num_blocks = 0;         // current count c
  uint64_t kvcache_block_size = 0;         // S (or kvcache_partition_len)
  uint64_t max_seq_len = 0;                // L
  uint64_t batch_size = 0;                 // B
  std::string attn_impl;                   // "eager" or "flash_attn"
  std::vector<KvcacheMeta> kvcache_metas;  // empty when absent
  // The key kvcache_metas was read from: "kvcache_metas", "cache_metas", or
  // "" when the config has neither.
  std::string metas_key;
  std::vector<std::string> phases;            // empty when absent
  std::vector<uint64_t> decoder_batch_sizes;  // empty when absent
  uint32_t num_devices = 1;
  std::string npu;  // "" when the config does not say (use the .rbln header)
  // The field npu was read from ("npu", "_compile_cfgs[0].npu",
  // "language_model.npu", ...); "" when npu is "".
  std::string npu_field;
  // "" for a flat artifact; else the key of the parent object member that
  // holds the decoder's config (e.g. "language_model"), which is also the
  // subfolder holding the decoder's files: one plain directory name.
  std::string decoder_submodule;

  // (L / S) * B
  uint64_t NumFullBlocks() const;
  // flash_attn: min(max(L / S, B) + 1, NumFullBlocks()) (optimum-rbln
  // #648); otherwise B.
  uint64_t NumMinBlocks() const;
};

// Parses rbln_config.json text. `path` is used only in messages.
//
// The decoder's settings are read from the top level when it holds
// `kvcache_num_blocks`; otherwise from the one object member that does (a
// multimodal artifact as optimum-rbln saves it: the parent's config holds the
// submodule's whole config under the submodule's name, e.g.
// `"language_model": {...}`, and the submodule's files are in the subfolder
// of that name). Field names in messages then carry the prefix
// ("language_model.max_seq_len").
//
// Errors (each naming the field and `path`):
//  * not JSON / not an object, nested deeper than 64 levels, or a key twice
//    in one object: INVALID_ARGUMENT with the reason and offset (parsing is
//    iterative: no input reaches the stack);
//  * a legacy config (top-level `_meta`): FAILED_PRECONDITION, recompile;
//  * no `kvcache_num_blocks` at the top level and more than one object
//    member holding one: UNIMPLEMENTED naming them all;
//  * the submodule's key is not one plain directory name (empty, "." or
//    "..", holding '/', '\\' or NUL, longer than 255 bytes):
//    FAILED_PRECONDITION naming it;
//  * both `kvcache_metas` and `cache_metas`: FAILED_PRECONDITION;
//  * a needed field missing or of the wrong type or out of range:
//    FAILED_PRECONDITION ("field 'max_seq_len' in /x/rbln_config.json: ...").
// Needed: kvcache_num_blocks (1 ..= kMaxNumBlocks), max_seq_len, batch_size (>=
// 1), and kvcache_block_size or, when absent and attn_impl is flash_attn,
// kvcache_partition_len; max_seq_len must be a multiple of the block size.
// attn_impl: "eager" or "flash_attn"; when absent or null it is flash_attn
// if kvcache_partition_len is set, else eager.
// kvcache_metas: from `kvcache_metas` or `cache_metas`, whichever is there
// (entries need name, layer_index, shape, is_auto, dtype; layer_type is
// optional, and a value other than full_attention, sliding_attention or
// linear_attention is FAILED_PRECONDITION naming the tensor and the value). Not
// needed here: see RequireCacheMetas. num_devices: `num_devices`, else
// `tensor_parallel_size`, else
// `_compile_cfgs[i].num_devices` / `tensor_parallel_size` (the decoder's
// object first, then, for a submodule, the parent's), else 1.
// npu: `npu`, else `_compile_cfgs[i].npu` (the same order), else "".
absl::StatusOr<RblnConfig> ParseRblnConfig(absl::string_view json,
                                           absl::string_view path);

// OK when `config` lists its KV-cache tensors (a non-empty `cache_metas` or
// `kvcache_metas`); else FAILED_PRECONDITION naming both keys and saying what
// to do. For callers that must know which tensors a resize may change; a
// reader of the count alone does not need it.
absl::Status RequireCacheMetas(const RblnConfig& config,
                               absl::string_view path);

// Returns the text with the digits of the decoder's `kvcache_num_blocks` (the
// top level's, or `<decoder_submodule>.kvcache_num_blocks`, as
// ParseRblnConfig finds it; a key of that name anywhere else is left alone)
// replaced by `num_blocks` and every other byte as it was (keys, order,
// string escapes, indentation, line ends, a trailing newline or none): tools
// that hash or diff configs see only the change made. Errors as
// ParseRblnConfig for unparsable input, a decoder it cannot locate, or a
// count that is not a positive integer literal (`16.0` and `1e2` are
// refused).
absl::StatusOr<std::string> RewriteKvcacheNumBlocks(absl::string_view json,
                                                    uint64_t num_blocks,
                                                    absl::string_view path);

}  // namespace rbln

#endif  // RBLN_CORE_FORMAT_RBLN_CONFIG_H_
