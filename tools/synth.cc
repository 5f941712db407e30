#include "tools/synth.h"

#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/device/device_spec.h"
#include "core/format/builtin_codec.h"
#include "core/format/container.h"
#include "core/format/rbln_config.h"
#include "core/resize/fit.h"
#include "core/resize/rescale.h"
#include "core/status_macros.h"

namespace rbln {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

using JsonWriter = rapidjson::PrettyWriter<rapidjson::StringBuffer>;

struct Preset {
  const char* name;
  SynthSpec (*make)();
};

SynthSpec Tiny() { return SynthSpec{}; }

// Llama-3.1-8B: 32 layers, 8 KV heads of 128, bf16, 16 GB of weights, on
// four ATOM (RBLN-CA12) devices. Memory-bound at 100% of the device.
SynthSpec Llama3_8B_CA12_TP4() {
  SynthSpec spec;
  spec.num_layers = 32;
  spec.num_kv_heads = 8;
  spec.head_dim = 128;
  spec.dtype = "bfloat16";
  spec.max_seq_len = 131072;
  spec.block_size = 16384;
  spec.batch_size = 4;
  spec.npu = "RBLN-CA12";
  spec.num_devices = 4;
  spec.decoder_batch_sizes = {1, 4};
  spec.weight_bytes = uint64_t{16'060'522'496};
  spec.payload_bytes = 4 * kMiB;
  return spec;
}

// Llama-3.1-70B: 80 layers, 8 KV heads of 128, bf16, 141 GB of weights, on
// two REBEL (RBLN-CR) devices with 4 chiplets each. Memory-bound.
SynthSpec Llama3_70B_CR_TP2() {
  SynthSpec spec;
  spec.num_layers = 80;
  spec.num_kv_heads = 8;
  spec.head_dim = 128;
  spec.dtype = "bfloat16";
  spec.max_seq_len = 131072;
  spec.block_size = 16384;
  spec.batch_size = 8;
  spec.npu = "RBLN-CR13";
  spec.num_devices = 2;
  spec.decoder_batch_sizes = {1, 8};
  spec.weight_bytes = uint64_t{141'107'412'992};
  spec.payload_bytes = 4 * kMiB;
  return spec;
}

// Gemma-2-2B-like hybrid attention: every even layer is sliding-window
// (fixed KV tensors), the others full attention (resizable).
SynthSpec GemmaHybridCA12() {
  SynthSpec spec;
  spec.cls_name = "RBLNGemma2ForCausalLM";
  spec.model_type = "gemma2";
  spec.num_layers = 26;
  spec.num_kv_heads = 4;
  spec.head_dim = 256;
  spec.dtype = "bfloat16";
  spec.max_seq_len = 8192;
  spec.block_size = 1024;
  spec.batch_size = 4;
  spec.npu = "RBLN-CA12";
  spec.num_devices = 1;
  spec.decoder_batch_sizes = {4};
  for (uint32_t layer = 0; layer < spec.num_layers; layer += 2) {
    spec.sliding_window_layers.push_back(layer);
  }
  spec.sliding_window = 4096;
  spec.weight_bytes = uint64_t{5'228'683'776};
  spec.payload_bytes = 1 * kMiB;
  return spec;
}

constexpr Preset kPresets[] = {
    {"tiny", Tiny},
    {"llama3-8b-ca12-tp4", Llama3_8B_CA12_TP4},
    {"llama3-70b-cr-tp2", Llama3_70B_CR_TP2},
    {"gemma-hybrid-ca12", GemmaHybridCA12},
};

bool IsSliding(const SynthSpec& spec, uint32_t layer) {
  return std::find(spec.sliding_window_layers.begin(),
                   spec.sliding_window_layers.end(),
                   layer) != spec.sliding_window_layers.end();
}

std::vector<uint64_t> DecoderBatchSizes(const SynthSpec& spec) {
  return spec.decoder_batch_sizes.empty()
             ? std::vector<uint64_t>{spec.batch_size}
             : spec.decoder_batch_sizes;
}

absl::Status Validate(const SynthSpec& spec) {
  auto invalid = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(parts...));
  };
  if (spec.num_layers == 0 || spec.num_kv_heads == 0 || spec.head_dim == 0 ||
      spec.batch_size == 0 || spec.num_devices == 0 || spec.block_size == 0 ||
      spec.max_seq_len == 0) {
    return invalid(
        "layers, kv-heads, head-dim, batch-size, num-devices, block-size and "
        "max-seq-len must all be at least 1");
  }
  if (spec.num_kv_heads % spec.num_devices != 0) {
    return invalid("kv-heads ", spec.num_kv_heads,
                   " do not split over num-devices ", spec.num_devices);
  }
  if (spec.max_seq_len % spec.block_size != 0) {
    return invalid("max-seq-len ", spec.max_seq_len,
                   " is not a multiple of block-size ", spec.block_size);
  }
  if (spec.attn_impl != "eager" && spec.attn_impl != "flash_attn") {
    return invalid("attn-impl must be eager or flash_attn, not ",
                   spec.attn_impl);
  }
  const std::vector<uint64_t> decoders = DecoderBatchSizes(spec);
  for (size_t i = 0; i < decoders.size(); ++i) {
    const uint64_t b = decoders[i];
    if (std::count(decoders.begin(), decoders.begin() + i, b) > 0) {
      return invalid("decoder batch size ", b, " is given twice");
    }
    if (b == 0 || b > spec.batch_size) {
      return invalid("decoder batch size ", b, " must be in [1, batch-size ",
                     spec.batch_size, "]");
    }
  }
  for (uint32_t layer : spec.sliding_window_layers) {
    if (layer >= spec.num_layers) {
      return invalid("sliding-window layer ", layer, " is not below layers ",
                     spec.num_layers);
    }
  }
  if (spec.sliding_window_layers.size() == spec.num_layers) {
    return invalid("at least one layer must be full attention");
  }
  return absl::OkStatus();
}

// One compiled graph: prefill (batch 1, chunks of 128 tokens) or a decoder
// for one batch size (one token per step).
struct Graph {
  std::string name;
  uint64_t batch;
  uint64_t seq;
  uint64_t workspace_per_node;
};

std::vector<Graph> Graphs(const SynthSpec& spec) {
  std::vector<Graph> graphs = {
      {kPrefillGraphName, 1, 128, (64 + spec.num_layers) * kMiB}};
  for (uint64_t b : DecoderBatchSizes(spec)) {
    graphs.push_back({absl::StrCat("decoder_batch_", b), b, 1, 16 * kMiB * b});
  }
  return graphs;
}

// The fields of rbln_config.json that decide the block-count bounds.
RblnConfig ShapeConfig(const SynthSpec& spec) {
  RblnConfig config;
  config.max_seq_len = spec.max_seq_len;
  config.kvcache_block_size = spec.block_size;
  config.batch_size = spec.batch_size;
  config.attn_impl = spec.attn_impl;
  return config;
}

std::string TensorName(uint32_t layer, bool key) {
  return absl::StrCat("past_key_values.", layer, key ? ".key" : ".value");
}

// `bytes_per_node` split evenly over the chiplets of every node (the
// remainder on chiplet 0).
void PlaceEvenly(uint64_t bytes_per_node, uint32_t nodes, uint32_t chiplets,
                 google::protobuf::RepeatedPtrField<v1::Placement>* out) {
  for (uint32_t node = 0; node < nodes; ++node) {
    for (uint32_t chiplet = 0; chiplet < chiplets; ++chiplet) {
      v1::Placement* p = out->Add();
      p->set_node(node);
      p->set_chiplet(chiplet);
      p->set_bytes(bytes_per_node / chiplets +
                   (chiplet == 0 ? bytes_per_node % chiplets : 0));
    }
  }
}

// Headers with resizable tensors at one block (bytes = per_block).
std::vector<v1::ContainerHeader> BuildHeaders(const SynthSpec& spec,
                                              uint32_t chiplets,
                                              uint64_t per_block,
                                              uint64_t dtype_bytes) {
  const std::vector<Graph> graphs = Graphs(spec);
  const uint64_t fixed_bytes = uint64_t{spec.num_kv_heads} / spec.num_devices *
                               spec.sliding_window * spec.head_dim *
                               dtype_bytes * spec.batch_size;
  const uint64_t per_container_payload = spec.payload_bytes / graphs.size();

  std::vector<v1::ContainerHeader> headers;
  for (size_t i = 0; i < graphs.size(); ++i) {
    v1::ContainerHeader h;
    h.set_compiled_model_name(graphs[i].name);
    h.set_npu(spec.npu);
    h.set_num_nodes(spec.num_devices);
    h.set_chiplets_per_node(chiplets);
    if (i == 0) {
      v1::Allocation* weights = h.add_allocations();
      weights->set_key("weights");
      PlaceEvenly(spec.weight_bytes / spec.num_devices, spec.num_devices,
                  chiplets, weights->mutable_placements());
    }
    v1::Allocation* ws = h.add_allocations();
    ws->set_key("workspace");
    PlaceEvenly(graphs[i].workspace_per_node, spec.num_devices, chiplets,
                ws->mutable_placements());
    for (uint32_t layer = 0; layer < spec.num_layers; ++layer) {
      const bool sliding = IsSliding(spec, layer);
      for (bool key : {true, false}) {
        v1::KvTensor* t = h.add_kv_tensors();
        t->set_name(TensorName(layer, key));
        t->set_layer_index(layer);
        t->set_resizable(!sliding);
        for (uint32_t node = 0; node < spec.num_devices; ++node) {
          v1::Placement* p = t->add_placements();
          p->set_node(node);
          p->set_chiplet(layer % chiplets);
          p->set_bytes(sliding ? fixed_bytes : per_block);
        }
      }
    }
    // The payload: a quarter program, the rest weights (prefill also takes
    // the remainder of the division).
    uint64_t share = per_container_payload;
    if (i == 0) share += spec.payload_bytes % graphs.size();
    v1::PayloadSegment* program = h.add_segments();
    program->set_name("program");
    program->set_length(share / 4);
    v1::PayloadSegment* weights = h.add_segments();
    weights->set_name("weights");
    weights->set_length(share - share / 4);
    headers.push_back(std::move(h));
  }
  return headers;
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Deterministic pseudo-random bytes: word w of a segment is
// SplitMix64(seed + w), seed derived from the graph and segment names.
PayloadFiller MakeFiller(const std::string& graph) {
  return [graph](const v1::PayloadSegment& segment, uint64_t offset,
                 absl::Span<char> out) {
    uint64_t seed = 0;
    for (char c : absl::StrCat(graph, "/", segment.name())) {
      seed = SplitMix64(seed ^ static_cast<unsigned char>(c));
    }
    // Whole words are stored at once (little-endian); only a chunk's ragged
    // ends go byte by byte.
    size_t i = 0;
    while (i < out.size()) {
      const uint64_t pos = offset + i;
      const uint64_t word = SplitMix64(seed + pos / 8);
      const size_t in_word = pos % 8;
      if (in_word == 0 && out.size() - i >= 8) {
        char bytes[8];
        for (int k = 0; k < 8; ++k)
          bytes[k] = static_cast<char>(word >> (8 * k));
        memcpy(out.data() + i, bytes, 8);
        i += 8;
        continue;
      }
      const size_t n = std::min<size_t>(8 - in_word, out.size() - i);
      for (size_t k = 0; k < n; ++k) {
        out[i + k] = static_cast<char>(word >> (8 * (in_word + k)));
      }
      i += n;
    }
  };
}

void WriteUintArray(JsonWriter& w, const std::vector<uint64_t>& values) {
  w.StartArray();
  for (uint64_t v : values) w.Uint64(v);
  w.EndArray();
}

// rbln_config.json's "_compile_cfgs": one entry per graph.
void WriteCompileCfgs(JsonWriter& w, const SynthSpec& spec) {
  w.StartArray();
  for (const Graph& graph : Graphs(spec)) {
    w.StartObject();
    w.Key("compiled_model_name");
    w.String(graph.name.c_str());
    w.Key("mod_name");
    w.String("default");
    w.Key("input_info");
    w.StartArray();
    for (const char* input : {"input_ids", "cache_position"}) {
      w.StartArray();
      w.String(input);
      WriteUintArray(w, {graph.batch, graph.seq});
      w.String(input[0] == 'i' ? "int64" : "int32");
      w.EndArray();
    }
    w.EndArray();
    w.Key("npu");
    w.String(spec.npu.c_str());
    w.Key("num_devices");
    w.Uint(spec.num_devices);
    w.EndObject();
  }
  w.EndArray();
}

// rbln_config.json's "kvcache_metas": a key and a value tensor per layer.
void WriteKvcacheMetas(JsonWriter& w, const SynthSpec& spec) {
  w.StartArray();
  for (uint32_t layer = 0; layer < spec.num_layers; ++layer) {
    const bool sliding = IsSliding(spec, layer);
    for (bool key : {true, false}) {
      w.StartObject();
      w.Key("name");
      w.String(TensorName(layer, key).c_str());
      w.Key("layer_index");
      w.Uint(layer);
      w.Key("shape");
      // Per block for full attention, per batch for sliding windows: the
      // block count itself is kvcache_num_blocks.
      if (sliding) {
        WriteUintArray(w, {spec.batch_size, spec.num_kv_heads,
                           spec.sliding_window, spec.head_dim});
      } else {
        WriteUintArray(w, {spec.num_kv_heads, spec.block_size, spec.head_dim});
      }
      w.Key("layer_type");
      w.String(sliding ? "sliding_attention" : "full_attention");
      w.Key("is_auto");
      w.Bool(!sliding);
      w.Key("dtype");
      w.String(spec.dtype.c_str());
      w.EndObject();
    }
  }
  w.EndArray();
}

std::string RblnConfigJson(const SynthSpec& spec, uint64_t num_blocks) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.SetIndent(' ', 2);
  w.StartObject();
  w.Key("cls_name");
  w.String(spec.cls_name.c_str());
  w.Key("_compile_cfgs");
  WriteCompileCfgs(w, spec);
  w.Key("_allow_no_compile_cfgs");
  w.Bool(false);
  w.Key("npu");
  w.String(spec.npu.c_str());
  w.Key("tensor_parallel_size");
  w.Uint(spec.num_devices);
  w.Key("optimum_rbln_version");
  w.String("0.9.3");
  w.Key("batch_size");
  w.Uint64(spec.batch_size);
  w.Key("max_seq_len");
  w.Uint64(spec.max_seq_len);
  w.Key("use_inputs_embeds");
  w.Bool(false);
  w.Key("use_attention_mask");
  w.Bool(false);
  w.Key("attn_impl");
  w.String(spec.attn_impl.c_str());
  w.Key("kvcache_partition_len");
  if (spec.attn_impl == "flash_attn") {
    w.Uint64(spec.block_size);
  } else {
    w.Null();
  }
  w.Key("kvcache_block_size");
  w.Uint64(spec.block_size);
  w.Key("quantization");
  w.Null();
  w.Key("prefill_chunk_size");
  w.Uint(128);
  w.Key("kvcache_num_blocks");
  w.Uint64(num_blocks);
  w.Key("decoder_batch_sizes");
  WriteUintArray(w, DecoderBatchSizes(spec));
  w.Key("phases");
  w.StartArray();
  w.String("prefill");
  w.String("decode");
  w.EndArray();
  if (!spec.sliding_window_layers.empty()) {
    w.Key("sliding_window");
    w.Uint64(spec.sliding_window);
  }
  w.Key("kvcache_metas");
  WriteKvcacheMetas(w, spec);
  w.EndObject();
  return buf.GetString();
}

std::string ModelConfigJson(const SynthSpec& spec) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.SetIndent(' ', 2);
  w.StartObject();
  w.Key("architectures");
  w.StartArray();
  w.String(spec.cls_name.substr(4).c_str());  // drop "RBLN"
  w.EndArray();
  w.Key("model_type");
  w.String(spec.model_type.c_str());
  w.Key("num_hidden_layers");
  w.Uint(spec.num_layers);
  w.Key("num_key_value_heads");
  w.Uint(spec.num_kv_heads);
  w.Key("head_dim");
  w.Uint(spec.head_dim);
  w.Key("max_position_embeddings");
  w.Uint64(spec.max_seq_len);
  w.Key("torch_dtype");
  w.String(spec.dtype.c_str());
  w.EndObject();
  return buf.GetString();
}

constexpr char kGenerationConfig[] = R"({
  "bos_token_id": 1,
  "eos_token_id": 2,
  "do_sample": true,
  "temperature": 0.6,
  "top_p": 0.9
})";

constexpr char kTokenizerJson[] = R"({
  "version": "1.0",
  "model": {
    "type": "BPE",
    "vocab": {"<s>": 1, "</s>": 2, "a": 3, "b": 4},
    "merges": ["a b"]
  }
})";

constexpr char kTokenizerConfig[] = R"({
  "bos_token": "<s>",
  "eos_token": "</s>",
  "model_max_length": 131072
})";

// Creates the missing ancestors of `dir`, like mkdir -p; `dir` itself is
// left for the caller, which refuses an existing one.
absl::Status CreateParentDirs(Env* env, const std::string& dir) {
  std::vector<std::string> missing;
  std::string parent = std::filesystem::path(dir).lexically_normal().string();
  while (true) {
    const size_t slash = parent.find_last_of('/', parent.size() - 2);
    if (slash == std::string::npos || slash == 0) break;
    parent.resize(slash);
    if (env->Stat(parent).ok()) break;
    missing.push_back(parent);
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    absl::Status made = env->CreateDir(*it);
    if (!made.ok() && !absl::IsAlreadyExists(made)) return made;
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const Preset& preset : kPresets) names.push_back(preset.name);
  return names;
}

absl::StatusOr<SynthSpec> PresetSpec(absl::string_view name) {
  for (const Preset& preset : kPresets) {
    if (name == preset.name) return preset.make();
  }
  return absl::NotFoundError(
      absl::StrCat("unknown preset '", name,
                   "'; known: ", absl::StrJoin(PresetNames(), ", ")));
}

absl::StatusOr<uint32_t> DtypeBytes(absl::string_view dtype) {
  if (dtype == "float16" || dtype == "bfloat16") return 2;
  if (dtype == "float32") return 4;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", dtype, "'; use float16, bfloat16 or float32"));
}

absl::StatusOr<uint64_t> KvBytesPerBlockPerNode(const SynthSpec& spec) {
  RBLN_RETURN_IF_ERROR(Validate(spec));
  RBLN_ASSIGN_OR_RETURN(uint32_t dtype_bytes, DtypeBytes(spec.dtype));
  return uint64_t{spec.num_kv_heads} / spec.num_devices * spec.block_size *
         spec.head_dim * dtype_bytes;
}

absl::StatusOr<SynthResult> WriteSyntheticArtifact(Env* env,
                                                   const SynthSpec& spec,
                                                   const std::string& out_dir) {
  RBLN_ASSIGN_OR_RETURN(uint64_t per_block, KvBytesPerBlockPerNode(spec));
  RBLN_ASSIGN_OR_RETURN(uint32_t dtype_bytes, DtypeBytes(spec.dtype));
  absl::StatusOr<DeviceSpec> device_or = LookupDeviceSpec(spec.npu);
  if (!device_or.ok()) {
    // The spec table's own advice names the daemon's --device-dram, which
    // this tool does not have: the NPU is all that can change here.
    return absl::InvalidArgumentError(absl::StrCat(
        "--npu: unknown NPU '", spec.npu,
        "': the spec table knows RBLN-CA* (ATOM) and RBLN-CR* (REBEL); give "
        "--npu RBLN-CA12 or --npu RBLN-CR13, say"));
  }
  const DeviceSpec device = *device_or;

  const RblnConfig shape = ShapeConfig(spec);
  SynthResult result;
  result.num_full_blocks = shape.NumFullBlocks();
  std::vector<v1::ContainerHeader> headers =
      BuildHeaders(spec, device.chiplets_per_node, per_block, dtype_bytes);

  uint64_t num_blocks = spec.kvcache_num_blocks;
  if (num_blocks == 0) {
    std::vector<ContainerFacts> facts;
    for (const v1::ContainerHeader& h : headers) {
      facts.push_back(FactsOfHeader(h));
    }
    std::vector<const ContainerFacts*> pointers;
    for (const ContainerFacts& f : facts) pointers.push_back(&f);
    std::vector<KvTensor> kv;
    for (const KvTensorFacts& t : facts[0].kv_tensors) {
      kv.push_back({t.name, t.resizable.value_or(false), t.bytes});
    }
    const MemoryModel model =
        BuildMemoryModel(pointers, kv, 1, result.num_full_blocks);
    num_blocks = FitModel(model, device.AvailablePerChiplet()).num_blocks;
    const uint64_t min_blocks = shape.NumMinBlocks();
    if (num_blocks < min_blocks) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the model does not fit ", spec.num_devices, " x ", spec.npu,
          ": only ", num_blocks, " KV-cache blocks fit, the minimum is ",
          min_blocks, "; use more devices or smaller weights"));
    }
  }
  result.kvcache_num_blocks = num_blocks;
  for (v1::ContainerHeader& h : headers) {
    RescaleFactors factors;
    for (const v1::KvTensor& t : h.kv_tensors()) {
      if (t.resizable()) factors[t.name()] = {num_blocks, 1};
    }
    RBLN_ASSIGN_OR_RETURN(h, RescaleHeader(h, factors, "synthetic"));
    h.mutable_kv_resize()->set_compiled_num_blocks(num_blocks);
  }

  RBLN_RETURN_IF_ERROR(CreateParentDirs(env, out_dir));
  RBLN_RETURN_IF_ERROR(env->CreateDir(out_dir));
  for (const v1::ContainerHeader& h : headers) {
    const std::string name =
        absl::StrCat(h.compiled_model_name(), kContainerExtension);
    RBLN_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                          env->NewWritableFile(JoinPath(out_dir, name)));
    RBLN_RETURN_IF_ERROR(
        WriteNewContainer(*file, h, MakeFiller(h.compiled_model_name())));
    RBLN_RETURN_IF_ERROR(file->Sync());
    RBLN_RETURN_IF_ERROR(file->Close());
    result.files.push_back(name);
  }
  const std::pair<const char*, std::string> others[] = {
      {kRblnConfigFileName, RblnConfigJson(spec, num_blocks)},
      {"config.json", ModelConfigJson(spec)},
      {"generation_config.json", kGenerationConfig},
      {"tokenizer.json", kTokenizerJson},
      {"tokenizer_config.json", kTokenizerConfig},
  };
  for (const auto& [name, text] : others) {
    RBLN_RETURN_IF_ERROR(
        WriteStringToNewFile(env, JoinPath(out_dir, name), text));
    result.files.push_back(name);
  }
  RBLN_RETURN_IF_ERROR(env->SyncDir(out_dir));
  return result;
}

}  // namespace rbln
