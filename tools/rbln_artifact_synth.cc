// rbln-artifact-synth: writes a synthetic compiled artifact (see synth.h) for
// tests, demos and benchmarks.
//
//   rbln-artifact-synth --preset llama3-8b-ca12-tp4 --out ./store/llama
//   rbln-artifact-synth --preset tiny --layers 4 --payload-bytes 1GiB --out x
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/flag_errors.h"
#include "common/help_format.h"
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

// The command line as parsed: a preset, where to write, and the overrides
// of the preset's dimensions (each applied only when its flag was given).
struct SynthFlags {
  std::string preset = "tiny";
  std::string out;
  rbln::SynthSpec overrides;  // the values of the dimension flags
  std::string payload;        // --payload-bytes as given
  std::string weights;        // --weight-bytes as given
  std::vector<uint64_t> decoder_batches;
  std::vector<uint32_t> sliding_layers;
  CLI::Option* layers = nullptr;
  CLI::Option* kv_heads = nullptr;
  CLI::Option* head_dim = nullptr;
  CLI::Option* dtype = nullptr;
  CLI::Option* max_seq_len = nullptr;
  CLI::Option* block_size = nullptr;
  CLI::Option* batch = nullptr;
  CLI::Option* attn = nullptr;
  CLI::Option* npu = nullptr;
  CLI::Option* devices = nullptr;
  CLI::Option* decoders = nullptr;
  CLI::Option* sliding = nullptr;
  CLI::Option* window = nullptr;
  CLI::Option* weights_opt = nullptr;
  CLI::Option* payload_opt = nullptr;
  CLI::Option* blocks = nullptr;
};

// After the options, in 80 columns. It starts with "Examples:", a heading
// help2man takes for a section: the man page's include file
// (man/rbln-artifact-synth.h2m) replaces that section, and so all of this,
// with its own, which has every example here (tests/man_pages_test.py).
constexpr char kFooter[] =
    "Examples:\n"
    "  rbln-artifact-synth --preset llama3-8b-ca12-tp4 --out ./store/llama\n"
    "  rbln-artifact-synth --preset tiny --layers 4 --payload-bytes 1GiB \\\n"
    "      --out ./store/big\n"
    "\n"
    "Exit codes:\n"
    "  0  the artifact was written\n"
    "  1  it could not be written (the message says why)\n"
    "  2  usage error; nothing was written";

// What to write and where.
void DefineArtifactFlags(CLI::App& app, SynthFlags& f) {
  const std::string group = "Artifact";
  app.add_option("--preset", f.preset,
                 absl::StrCat("The model to start from: ",
                              absl::StrJoin(rbln::PresetNames(), ", "),
                              " (default: ", f.preset, ")"))
      ->option_text("NAME")
      ->group(group);
  app.add_option("--out", f.out,
                 "Directory to create (must not exist; missing parent "
                 "directories are created); required")
      ->type_name("DIR")
      ->required()
      ->group(group);
}

// The dimensions, each overriding the preset's when given.
void DefineDimensionFlags(CLI::App& app, SynthFlags& f) {
  const std::string group = "Dimensions (default: the preset's)";
  rbln::SynthSpec& o = f.overrides;
  const auto add = [&](const char* name, auto& value, const char* text,
                       const char* value_name) {
    return app.add_option(name, value, text)
        ->option_text(value_name)
        ->group(group);
  };
  f.layers = add("--layers", o.num_layers, "Decoder layers", "N");
  f.kv_heads = add("--kv-heads", o.num_kv_heads, "KV heads", "N");
  f.head_dim = add("--head-dim", o.head_dim, "Head dimension", "N");
  f.dtype = add("--dtype", o.dtype, "float16, bfloat16 or float32", "DTYPE");
  f.max_seq_len = add("--max-seq-len", o.max_seq_len, "max_seq_len (L)", "N");
  f.block_size = add("--block-size", o.block_size,
                     "kvcache_block_size / partition len (S)", "N");
  f.batch = add("--batch-size", o.batch_size, "batch_size (B)", "N");
  f.attn = add("--attn-impl", o.attn_impl, "eager or flash_attn", "IMPL");
  f.npu = add("--npu", o.npu, "Target NPU, e.g. RBLN-CA12", "NAME");
  f.devices = add("--num-devices", o.num_devices,
                  "Devices (tensor parallel size)", "N");
  f.decoders =
      add("--decoder-batch-sizes", f.decoder_batches,
          "Batch sizes of the decoder graphs, comma-separated", "N,...")
          ->delimiter(',');
  f.sliding = add("--sliding-window-layers", f.sliding_layers,
                  "Layers with fixed sliding-window KV tensors, "
                  "comma-separated",
                  "N,...")
                  ->delimiter(',');
  f.window = add("--sliding-window", o.sliding_window,
                 "Sliding window length in tokens", "N");
  f.weights_opt = add("--weight-bytes", f.weights,
                      "Device memory for weights over all devices", "BYTES");
  f.payload_opt = add("--payload-bytes", f.payload,
                      "Payload bytes written over all .rbln files (real "
                      "bytes, not holes)",
                      "BYTES");
  f.blocks = add("--kvcache-num-blocks", o.kvcache_num_blocks,
                 "Compiled block count (default: what fits 100% of the "
                 "device)",
                 "N");
}

// Every flag of `app`, into `f`, in the order --help lists them.
void DefineFlags(CLI::App& app, SynthFlags& f) {
  app.formatter(std::make_shared<rbln::HelpFormatter>());
  app.footer(kFooter);
  // Re-added last so that it is listed after the dimensions.
  app.set_help_flag();
  DefineArtifactFlags(app, f);
  DefineDimensionFlags(app, f);
  const std::string help = "Help";
  app.set_help_flag("-h,--help", "Print this help and exit")->group(help);
  app.set_version_flag("--version", rbln::VersionLine(kProgramName),
                       "Print the version and the git commit, and exit")
      ->group(help);
}

// The preset with the overrides given applied; INVALID_ARGUMENT names the
// flag at fault.
absl::StatusOr<rbln::SynthSpec> BuildSpec(const SynthFlags& f) {
  absl::StatusOr<rbln::SynthSpec> base = rbln::PresetSpec(f.preset);
  if (!base.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--preset: ", base.status().message()));
  }
  const rbln::SynthSpec& o = f.overrides;
  rbln::SynthSpec spec = *base;
  if (*f.layers) spec.num_layers = o.num_layers;
  if (*f.kv_heads) spec.num_kv_heads = o.num_kv_heads;
  if (*f.head_dim) spec.head_dim = o.head_dim;
  if (*f.dtype) spec.dtype = o.dtype;
  if (*f.max_seq_len) spec.max_seq_len = o.max_seq_len;
  if (*f.block_size) spec.block_size = o.block_size;
  if (*f.batch) spec.batch_size = o.batch_size;
  if (*f.attn) spec.attn_impl = o.attn_impl;
  if (*f.npu) spec.npu = o.npu;
  if (*f.devices) spec.num_devices = o.num_devices;
  if (*f.decoders) spec.decoder_batch_sizes = f.decoder_batches;
  if (*f.sliding) spec.sliding_window_layers = f.sliding_layers;
  if (*f.window) spec.sliding_window = o.sliding_window;
  if (*f.blocks) spec.kvcache_num_blocks = o.kvcache_num_blocks;
  for (auto [opt, text, field] :
       {std::tuple{f.weights_opt, &f.weights, &spec.weight_bytes},
        std::tuple{f.payload_opt, &f.payload, &spec.payload_bytes}}) {
    if (!*opt) continue;
    absl::StatusOr<uint64_t> bytes = rbln::ParseByteCount(*text);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(opt->get_name(), ": ", bytes.status().message()));
    }
    *field = *bytes;
  }
  return spec;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Writes a synthetic compiled NPU artifact (rbln_config.json, one .rbln "
      "container per graph, companion files) whose memory numbers follow from "
      "the model's shapes. Start from a preset; any dimension flag overrides "
      "it.",
      kProgramName};
  SynthFlags flags;
  DefineFlags(app, flags);
  const std::vector<std::string> args(argv + 1, argv + argc);
  std::optional<int> exit_code = rbln::ParseFlags(
      app, args, kProgramName, {.usage = kExitUsage, .config = kExitUsage},
      std::cout, std::cerr);
  if (exit_code.has_value()) return *exit_code;

  absl::StatusOr<rbln::SynthSpec> spec = BuildSpec(flags);
  if (!spec.ok()) return Fail(kExitUsage, spec.status().message());
  absl::StatusOr<rbln::SynthResult> result =
      rbln::WriteSyntheticArtifact(rbln::Env::Default(), *spec, flags.out);
  if (!result.ok()) {
    // Impossible dimensions are the command line's fault.
    return Fail(
        absl::IsInvalidArgument(result.status()) ? kExitUsage : kExitFailed,
        result.status().message());
  }
  printf("wrote %s: kvcache_num_blocks %llu of %llu full, files: %s\n",
         flags.out.c_str(),
         static_cast<unsigned long long>(result->kvcache_num_blocks),
         static_cast<unsigned long long>(result->num_full_blocks),
         absl::StrJoin(result->files, ", ").c_str());
  return kExitOk;
}
