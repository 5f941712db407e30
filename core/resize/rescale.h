// Rescale: planning and writing a KV-cache resize (docs/memory-model.md).
//
// A resize from the current count c to a target t changes, in every container,
// each resizable KV tensor's bytes on each (node, chiplet) to bytes * t / c
// exactly, and rbln_config.json's kvcache_num_blocks to t. Fixed tensors,
// other allocations and the payload stay as they are.
//
// Planning is pure (no I/O) and applies the guards:
//   t < num_min_blocks                                  error
//   t > current count, t > compiled count, t > full     warning
//   t does not fit the device's whole available DRAM    fits_device false,
//       a warning, and device_refusal for the writer to return unless forced
//   no device to check against                          a warning
// Writing (WriteResizedArtifact) produces a complete artifact in a directory;
// making that atomic is the commit engine's job.
//
// Thread-safe: no shared state.
#ifndef RBLN_CORE_RESIZE_RESCALE_H_
#define RBLN_CORE_RESIZE_RESCALE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/budget.h"
#include "core/device/device_spec.h"
#include "core/format/artifact.h"
#include "core/os/env.h"
#include "core/resize/fit.h"

namespace rbln {

struct ResizePlan {
  uint64_t current_num_blocks = 0;
  uint64_t target_num_blocks = 0;
  std::vector<std::string> warnings;
  // {resizable tensor: (target, current)}, for every graph's codec.
  RescaleFactors factors;
  // rbln_config.json with the new count, and for a multimodal artifact the
  // submodule's own rbln_config.json (when it has one).
  std::string new_config_text;
  std::optional<std::string> new_submodule_config_text;
  // Whether the target fits the device's available DRAM on every bucket;
  // nullopt when it could not be checked (a warning says why).
  std::optional<bool> fits_device;
  // The largest count up to the full count that fits the device, when
  // checked.
  uint64_t max_fitting_num_blocks = 0;
  // When fits_device is false: FAILED_PRECONDITION (EXCEEDS_DEVICE) naming
  // the bucket, the bytes needed and available and the largest count that
  // fits, for a write to return unless forced. OK otherwise.
  absl::Status device_refusal;

  bool is_no_op() const { return current_num_blocks == target_num_blocks; }
};

// OK when `after` (a codec's rescaled copy, inspected again) is `before`
// rescaled by `factors`: the same buckets and other allocations, each named
// tensor's bytes exactly bytes / current * target, the others unchanged.
// INTERNAL naming `path` and `codec` otherwise.
absl::Status CheckRescaled(const ContainerFacts& before,
                           const ContainerFacts& after,
                           const RescaleFactors& factors,
                           absl::string_view path, absl::string_view codec);

// Plans a resize of `artifact` to `target` blocks, checked against `device`
// (or, when it is an error, not checked: the error says why, in a warning).
// FAILED_PRECONDITION when a graph's codec cannot rescale (an older
// compiler); INVALID_ARGUMENT when the target is below the minimum (naming
// the minimum and the rule with its numbers) or overflows; warnings (in the
// plan) for the soft guards, with the numbers.
// `reserved` (may be null): memory of other artifacts on the same devices,
// which the check against the device counts.
absl::StatusOr<ResizePlan> PlanResize(
    const Artifact& artifact, uint64_t target,
    const absl::StatusOr<DeviceSpec>& device,
    const MemoryReservation* reserved = nullptr);

struct FitPlan {
  FitResult fit;
  ResizePlan plan;
};

// Fits `artifact` to `budget` (FitMemoryBudget) and plans a resize to the
// result. `device`'s error when there is no device (a budget needs one);
// FAILED_PRECONDITION when fewer than num_min_blocks fit, naming how many
// fit, the minimum, and the bucket that limits it.
absl::StatusOr<FitPlan> PlanFit(const Artifact& artifact,
                                const MemoryBudget& budget,
                                const absl::StatusOr<DeviceSpec>& device,
                                const MemoryReservation* reserved = nullptr);

// CANCELLED: "the write was cancelled (deadline passed, caller gone or
// daemon stopping) <when>; nothing was changed". Every cancelled write says
// it this way, `when` telling at which step.
absl::Status WriteCancelled(absl::string_view when);
// Whether `is_cancelled` (may be empty: never) says that the write was
// cancelled.
inline bool IsCancelled(const std::function<bool()>& is_cancelled) {
  return is_cancelled && is_cancelled();
}

struct WriteResizedOptions {
  // Reads the artifact's files (a read-only root's Env); null: the Env the
  // result is written through.
  Env* source_env = nullptr;
  // Who the files written belong to (kWriter for a copy out of a read-only
  // root); their permission bits are the source's.
  CopyOwner copy_owner = CopyOwner::kSource;
  // Hard-link companion files instead of copying them (falling back to a
  // copy where linking fails, e.g. across file systems). Safe because no
  // file of an artifact is ever modified in place.
  bool link_companions = false;
  // Called with the payload bytes of each chunk copied (for progress).
  std::function<void(uint64_t bytes)> on_copied;
  // Checked before each file, after each chunk of payload copied, and once
  // all is written: when it returns true the write stops with CANCELLED.
  std::function<bool()> is_cancelled;
};

// Graphs WriteResizedArtifact writes at once.
inline constexpr size_t kParallelGraphs = 4;

// Writes the resized artifact into `out_dir`, an existing empty directory, in
// the artifact's layout: each graph rescaled by its codec (the built-in one
// copies the payload inside the kernel), the new rbln_config.json (and the
// submodule's), and every companion file and directory (symbolic links are
// refused). Everything written, `out_dir` included, is fsynced
// when this returns OK. The graphs are written by up to kParallelGraphs
// threads at once: `options.on_copied` is called by one at a time,
// `options.is_cancelled` from any. On error the caller removes `out_dir`.
absl::Status WriteResizedArtifact(Env* env, const Artifact& artifact,
                                  const ResizePlan& plan,
                                  const std::string& out_dir,
                                  const WriteResizedOptions& options = {});

}  // namespace rbln

#endif  // RBLN_CORE_RESIZE_RESCALE_H_
