// rbln-artifact-synth: writes a synthetic compiled artifact (see synth.h) for
// tests, demos and benchmarks.
//
//   rbln-artifact-synth --preset llama3-8b-ca12-tp4 --out ./store/llama
//   rbln-artifact-synth --preset tiny --layers 4 --payload-bytes 1GiB --out x
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "core/budget.h"
#include "core/env.h"
#include "tools/synth.h"

namespace {

// Accepts a plain byte count or one with a unit, with the budget grammar's
// units (10GB, 512MiB).
std::string ParseByteSize(const std::string& text, uint64_t* out) {
  absl::StatusOr<rbln::MemoryBudget> parsed = rbln::MemoryBudget::Parse(text);
  if (text == "0") {
    *out = 0;
    return "";
  }
  if (!parsed.ok() || parsed->is_fraction()) {
    return "expected a byte count like 1048576, 64MiB or 1GB, got '" + text +
           "'";
  }
  *out = parsed->bytes();
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Writes a synthetic compiled NPU artifact (rbln_config.json, one .rbln "
      "container per graph, companion files) whose memory numbers follow from "
      "the model's shapes. Start from a preset; any dimension flag overrides "
      "it."};
  std::string preset = "tiny";
  std::string out;
  app.add_option("--preset", preset,
                 "Preset: " + absl::StrJoin(rbln::PresetNames(), ", "))
      ->capture_default_str();
  app.add_option("--out", out, "Directory to create (must not exist)")
      ->required();

  // Overrides, applied on top of the preset when given.
  rbln::SynthSpec o;
  std::string payload, weights;
  std::vector<uint64_t> decoder_batches;
  std::vector<uint32_t> sliding_layers;
  auto* layers = app.add_option("--layers", o.num_layers, "Decoder layers");
  auto* kv_heads = app.add_option("--kv-heads", o.num_kv_heads, "KV heads");
  auto* head_dim = app.add_option("--head-dim", o.head_dim, "Head dimension");
  auto* dtype =
      app.add_option("--dtype", o.dtype, "float16, bfloat16 or float32");
  auto* max_seq_len =
      app.add_option("--max-seq-len", o.max_seq_len, "max_seq_len (L)");
  auto* block_size = app.add_option("--block-size", o.block_size,
                                    "kvcache_block_size / partition len (S)");
  auto* batch = app.add_option("--batch-size", o.batch_size, "batch_size (B)");
  auto* attn =
      app.add_option("--attn-impl", o.attn_impl, "eager or flash_attn");
  auto* npu = app.add_option("--npu", o.npu, "Target NPU, e.g. RBLN-CA12");
  auto* devices = app.add_option("--num-devices", o.num_devices,
                                 "Devices (tensor parallel size)");
  auto* decoders = app.add_option("--decoder-batch-sizes", decoder_batches,
                                  "Batch sizes of the decoder graphs")
                       ->delimiter(',');
  auto* sliding = app.add_option("--sliding-window-layers", sliding_layers,
                                 "Layers with fixed sliding-window KV tensors")
                      ->delimiter(',');
  auto* window = app.add_option("--sliding-window", o.sliding_window,
                                "Sliding window length in tokens");
  auto* weights_opt = app.add_option(
      "--weight-bytes", weights, "Device memory for weights over all devices");
  auto* payload_opt = app.add_option(
      "--payload-bytes", payload,
      "Payload bytes written over all .rbln files (real bytes, not holes)");
  auto* blocks = app.add_option(
      "--kvcache-num-blocks", o.kvcache_num_blocks,
      "Compiled block count (default: what fits 100% of the device)");
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<rbln::SynthSpec> base = rbln::PresetSpec(preset);
  if (!base.ok()) {
    fprintf(stderr, "rbln-artifact-synth: %s\n",
            std::string(base.status().message()).c_str());
    return 2;
  }
  rbln::SynthSpec spec = *base;
  if (*layers) spec.num_layers = o.num_layers;
  if (*kv_heads) spec.num_kv_heads = o.num_kv_heads;
  if (*head_dim) spec.head_dim = o.head_dim;
  if (*dtype) spec.dtype = o.dtype;
  if (*max_seq_len) spec.max_seq_len = o.max_seq_len;
  if (*block_size) spec.block_size = o.block_size;
  if (*batch) spec.batch_size = o.batch_size;
  if (*attn) spec.attn_impl = o.attn_impl;
  if (*npu) spec.npu = o.npu;
  if (*devices) spec.num_devices = o.num_devices;
  if (*decoders) spec.decoder_batch_sizes = decoder_batches;
  if (*sliding) spec.sliding_window_layers = sliding_layers;
  if (*window) spec.sliding_window = o.sliding_window;
  if (*blocks) spec.kvcache_num_blocks = o.kvcache_num_blocks;
  for (auto [opt, text, field] :
       {std::tuple{weights_opt, &weights, &spec.weight_bytes},
        std::tuple{payload_opt, &payload, &spec.payload_bytes}}) {
    if (!*opt) continue;
    std::string error = ParseByteSize(*text, field);
    if (!error.empty()) {
      fprintf(stderr, "rbln-artifact-synth: %s: %s\n", opt->get_name().c_str(),
              error.c_str());
      return 2;
    }
  }

  absl::StatusOr<rbln::SynthResult> result =
      rbln::WriteSyntheticArtifact(rbln::Env::Default(), spec, out);
  if (!result.ok()) {
    fprintf(stderr, "rbln-artifact-synth: %s\n",
            std::string(result.status().message()).c_str());
    return 1;
  }
  printf("wrote %s: kvcache_num_blocks %llu of %llu full, files: %s\n",
         out.c_str(),
         static_cast<unsigned long long>(result->kvcache_num_blocks),
         static_cast<unsigned long long>(result->num_full_blocks),
         absl::StrJoin(result->files, ", ").c_str());
  return 0;
}
