// rbln-bench-core: Google Benchmark of pure parts of core/ (bench/run, rows
// 9 and fit-together; docs/performance.md):
//  * FitModel over a memory model of N nodes x 4 chiplets with 160 KV
//    tensors (a 64-node artifact at the top), and over a growing tensor count;
//  * ReadContainer of a synthetic prefill container (tools/synth.h) whose
//    header grows with the layer count;
//  * FitGroup of N artifacts on 64 nodes x 4 chiplets, and its baseline, the
//    N single fits (FitModel) of the same artifacts under the same budget.
// Each reports its complexity in the size it varies (--benchmark_format=json).
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "core/format/container.h"
#include "core/os/env.h"
#include "core/resize/fit.h"
#include "core/resize/group_fit.h"
#include "tools/synth.h"

namespace rbln::bench {
namespace {

constexpr uint32_t kChipletsPerNode = 4;
constexpr uint64_t kPerBlockBytes = uint64_t{64} << 10;
constexpr uint64_t kBudgetPerChiplet = uint64_t{12} << 30;

// Tensor t sits on chiplet t % 4 of every node, as rbln-artifact-synth
// places layers.
MemoryModel SyntheticModel(uint32_t nodes, uint32_t kv_tensors) {
  MemoryModel model;
  model.num_nodes = nodes;
  model.chiplets_per_node = kChipletsPerNode;
  model.num_full_blocks = 1 << 20;
  for (uint32_t node = 0; node < nodes; ++node) {
    for (uint32_t chiplet = 0; chiplet < kChipletsPerNode; ++chiplet) {
      MemoryBucket bucket{
          .node = node, .chiplet = chiplet, .other_bytes = uint64_t{2} << 30};
      for (uint32_t t = chiplet; t < kv_tensors; t += kChipletsPerNode) {
        bucket.kv_per_block.push_back(kPerBlockBytes + t);
      }
      model.buckets.push_back(std::move(bucket));
    }
  }
  return model;
}

void BM_FitModelNodes(benchmark::State& state) {
  const MemoryModel model =
      SyntheticModel(static_cast<uint32_t>(state.range(0)), 160);
  for (auto _ : state) {
    benchmark::DoNotOptimize(FitModel(model, kBudgetPerChiplet));
  }
  state.SetComplexityN(state.range(0));
}
BENCHMARK(BM_FitModelNodes)
    ->RangeMultiplier(4)
    ->Range(1, 64)
    ->Complexity(benchmark::oAuto);

void BM_FitModelTensors(benchmark::State& state) {
  const MemoryModel model =
      SyntheticModel(64, static_cast<uint32_t>(state.range(0)));
  for (auto _ : state) {
    benchmark::DoNotOptimize(FitModel(model, kBudgetPerChiplet));
  }
  state.SetComplexityN(state.range(0));
}
BENCHMARK(BM_FitModelTensors)
    ->RangeMultiplier(4)
    ->Range(16, 640)
    ->Complexity(benchmark::oAuto);

// FitGroup's artifacts: 64 nodes x 4 chiplets each, all different so that
// their shares differ. Member i (up to 31) has 2.5 to 4.5 MiB of KV per block
// (one tensor, two for odd i; not multiples of the 2 MiB alignment), thousands
// of full blocks, weight 1 to 3, and more other bytes on later nodes; alone,
// none fits kBudgetPerChiplet at its full count, so every single fit
// searches. Together at 16 blocks each even 32 fit, so progressive filling
// adds thousands of blocks.
constexpr uint32_t kGroupNodes = 64;
constexpr uint64_t kGroupMinBlocks = 16;

MemoryModel GroupMemberModel(uint32_t i) {
  MemoryModel model;
  model.num_nodes = kGroupNodes;
  model.chiplets_per_node = kChipletsPerNode;
  model.num_full_blocks = 5000 + 1500 * (i % 4) + 37 * i;
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  for (uint32_t node = 0; node < kGroupNodes; ++node) {
    for (uint32_t chiplet = 0; chiplet < kChipletsPerNode; ++chiplet) {
      MemoryBucket bucket{.node = node,
                          .chiplet = chiplet,
                          .other_bytes = 64 * kMiB + (i % 5) * 16 * kMiB +
                                         node * (uint64_t{256} << 10)};
      bucket.kv_per_block.push_back(5 * kMiB / 2 + i * (uint64_t{32} << 10));
      if (i % 2 == 1) bucket.kv_per_block.push_back(kMiB + chiplet * 4096);
      model.buckets.push_back(std::move(bucket));
    }
  }
  return model;
}

std::vector<MemoryModel> GroupModels(int64_t count) {
  std::vector<MemoryModel> models;
  for (uint32_t i = 0; i < count; ++i) models.push_back(GroupMemberModel(i));
  return models;
}

// Progressive filling takes one step per block added (and one refused step
// per member), each choosing among the N members and checking the buckets
// of the one chosen: the complexity is fitted against blocks added x (N +
// buckets), and the blocks added are a counter beside the time.
void BM_FitGroup(benchmark::State& state) {
  const std::vector<MemoryModel> models = GroupModels(state.range(0));
  std::vector<GroupMember> members;
  for (size_t i = 0; i < models.size(); ++i) {
    members.push_back({.name = absl::StrCat("m", i),
                       .model = &models[i],
                       .num_min_blocks = kGroupMinBlocks,
                       .weight = static_cast<uint32_t>(1 + i % 3)});
  }
  const std::vector<uint64_t> budget(kGroupNodes, kBudgetPerChiplet);
  uint64_t added = 0;
  for (auto _ : state) {
    auto plan = FitGroup(members, budget);
    if (!plan.ok()) {
      state.SkipWithError(plan.status().ToString().c_str());
      return;
    }
    added = 0;
    for (uint64_t count : plan->num_blocks) added += count - kGroupMinBlocks;
    benchmark::DoNotOptimize(plan);
  }
  const int64_t buckets = kGroupNodes * kChipletsPerNode;
  state.counters["blocks_added"] = static_cast<double>(added);
  state.counters["buckets"] = static_cast<double>(buckets);
  state.SetComplexityN(static_cast<int64_t>(added) *
                       (state.range(0) + buckets));
}
BENCHMARK(BM_FitGroup)->Arg(2)->Arg(8)->Arg(32)->Complexity(benchmark::oN);

// The baseline: each member fitted alone, N FitModel calls.
void BM_SingleFits(benchmark::State& state) {
  const std::vector<MemoryModel> models = GroupModels(state.range(0));
  for (auto _ : state) {
    for (const MemoryModel& model : models) {
      benchmark::DoNotOptimize(FitModel(model, kBudgetPerChiplet));
    }
  }
  state.SetComplexityN(state.range(0));
}
BENCHMARK(BM_SingleFits)->Arg(2)->Arg(8)->Arg(32)->Complexity(benchmark::oN);

// The prefill container of a synthetic artifact with `layers` layers (2 KV
// tensors each), written once per size under $TMPDIR.
std::string PrefillContainer(uint32_t layers) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      absl::StrCat("rbln-bench-core-", getpid(), "-", layers);
  std::filesystem::remove_all(dir);
  SynthSpec spec;
  spec.num_layers = layers;
  auto written = WriteSyntheticArtifact(Env::Default(), spec, dir.string());
  if (!written.ok()) {
    std::fprintf(stderr, "rbln-bench-core: synthesizing %u layers: %s\n",
                 layers, written.status().ToString().c_str());
    std::exit(1);
  }
  for (const std::string& file : written->files) {
    if (absl::StrContains(file, "prefill") &&
        absl::EndsWith(file, kContainerExtension)) {
      return (dir / file).string();
    }
  }
  std::fprintf(stderr, "rbln-bench-core: no prefill container in %s\n",
               dir.c_str());
  std::exit(1);
}

void BM_ReadContainerHeader(benchmark::State& state) {
  const std::string path =
      PrefillContainer(static_cast<uint32_t>(state.range(0)));
  auto file = Env::Default()->NewRandomAccessFile(path);
  if (!file.ok()) {
    state.SkipWithError(file.status().ToString().c_str());
    return;
  }
  uint64_t header_bytes = 0;
  for (auto _ : state) {
    auto container = ReadContainer(**file);
    if (!container.ok()) {
      state.SkipWithError(container.status().ToString().c_str());
      break;
    }
    header_bytes = container->preamble.header_length;
    benchmark::DoNotOptimize(container);
  }
  state.counters["header_bytes"] = static_cast<double>(header_bytes);
  state.SetComplexityN(state.range(0));
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}
BENCHMARK(BM_ReadContainerHeader)
    ->RangeMultiplier(4)
    ->Range(2, 128)
    ->Complexity(benchmark::oAuto);

}  // namespace
}  // namespace rbln::bench

BENCHMARK_MAIN();
