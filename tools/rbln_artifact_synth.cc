// rbln-artifact-synth: writes a synthetic compiled artifact (see synth.h) for
// tests, demos and benchmarks.
//
//   rbln-artifact-synth --preset llama3-8b-ca12-tp4 --out ./store/llama
//   rbln-artifact-synth --preset tiny --layers 4 --payload-bytes 1GiB --out x
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/flag_errors.h"
#include "common/version.h"
#include "core/budget.h"
#include "core/os/env.h"
#include "tools/synth.h"

namespace {

constexpr char kProgramName[] = "rbln-artifact-synth";

// Exit codes (documented in --help), as rbln-artifact's.
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;  // the artifact could not be written
constexpr int kExitUsage = 2;   // bad command line; nothing was written

int Fail(int code, absl::string_view message) {
  std::cerr << kProgramName << ": " << message << "\n";
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Writes a synthetic compiled NPU artifact (rbln_config.json, one .rbln "
      "container per graph, companion files) whose memory numbers follow from "
      "the model's shapes. Start from a preset; any dimension flag overrides "
      "it.",
      kProgramName};
  app.footer(
      "Exit codes:\n"
      "  0  the artifact was written\n"
      "  1  it could not be written (the message says why)\n"
      "  2  usage error; nothing was written");
  app.set_version_flag("--version", rbln::VersionLine(kProgramName),
                       "Print the version and the git commit, and exit");
  std::string preset = "tiny";
  std::string out;
  app.add_option("--preset", preset,
                 "Preset: " + absl::StrJoin(rbln::PresetNames(), ", "))
      ->capture_default_str();
  app.add_option("--out", out,
                 "Directory to create (must not exist; missing parent "
                 "directories are created)")
      ->type_name("DIR")
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
  const std::vector<std::string> args(argv + 1, argv + argc);
  std::optional<int> exit_code = rbln::ParseFlags(
      app, args, kProgramName, {.usage = kExitUsage, .config = kExitUsage},
      std::cout, std::cerr);
  if (exit_code.has_value()) return *exit_code;

  absl::StatusOr<rbln::SynthSpec> base = rbln::PresetSpec(preset);
  if (!base.ok()) {
    return Fail(kExitUsage,
                absl::StrCat("--preset: ", base.status().message()));
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
    absl::StatusOr<uint64_t> bytes = rbln::ParseByteCount(*text);
    if (!bytes.ok()) {
      return Fail(kExitUsage, absl::StrCat(opt->get_name(), ": ",
                                           bytes.status().message()));
    }
    *field = *bytes;
  }

  absl::StatusOr<rbln::SynthResult> result =
      rbln::WriteSyntheticArtifact(rbln::Env::Default(), spec, out);
  if (!result.ok()) {
    // Impossible dimensions are the command line's fault.
    return Fail(
        absl::IsInvalidArgument(result.status()) ? kExitUsage : kExitFailed,
        result.status().message());
  }
  printf("wrote %s: kvcache_num_blocks %llu of %llu full, files: %s\n",
         out.c_str(),
         static_cast<unsigned long long>(result->kvcache_num_blocks),
         static_cast<unsigned long long>(result->num_full_blocks),
         absl::StrJoin(result->files, ", ").c_str());
  return kExitOk;
}
