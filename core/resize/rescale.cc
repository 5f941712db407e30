#include "core/resize/rescale.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>
#include <utility>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/core_metrics.h"
#include "core/error_facts.h"
#include "core/status_macros.h"
#include "core/text.h"
#include "core/thread_pool.h"

namespace rbln {
namespace {

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b
             ? std::numeric_limits<uint64_t>::max()
             : a + b;
}

// Why the minimum is what it is, with the numbers.
std::string MinimumRule(const RblnConfig& config) {
  if (config.attn_impl != "flash_attn") {
    return absl::StrCat("eager: one block per batch entry, batch_size ",
                        config.batch_size);
  }
  return absl::StrCat(
      "flash_attn: min(max(max_seq_len / block_size, batch_size) + 1, full "
      "blocks) = min(max(",
      config.max_seq_len, " / ", config.kvcache_block_size, ", ",
      config.batch_size, ") + 1, ", config.NumFullBlocks(), ")");
}

// Checks `target` against the whole of `device` and records the outcome in
// `plan`: fits_device, max_fitting_num_blocks, a warning, and the refusal a
// write returns unless forced. Not checked (a warning) when there is no
// device or the artifact's chiplets do not line up with its.
void CheckAgainstDevice(const Artifact& artifact, const MemoryModel& model,
                        uint64_t target,
                        const absl::StatusOr<DeviceSpec>& device,
                        ResizePlan* plan) {
  const auto not_checked = [&](absl::string_view why) {
    plan->warnings.push_back(absl::StrCat(
        "kvcache_num_blocks ", target, " was not checked against a device: ",
        why, "; the model may fail to allocate at runtime"));
  };
  if (!device.ok()) return not_checked(device.status().message());
  if (absl::Status chiplets = CheckChiplets(artifact, *device);
      !chiplets.ok()) {
    return not_checked(chiplets.message());
  }
  const uint64_t available = AvailablePerBucket(model.granularity, *device);
  plan->max_fitting_num_blocks = FitModel(model, available).num_blocks;
  plan->fits_device = Fits(model, available, target);
  if (*plan->fits_device) return;
  std::string message;
  for (const BucketFit& b : DescribeBuckets(model, available, target)) {
    if (b.headroom_bytes >= 0) continue;
    message = absl::StrCat(
        "kvcache_num_blocks ", target, " does not fit the ", device->family,
        " device: node ", b.node,
        model.granularity == BucketGranularity::kNode
            ? std::string()
            : absl::StrCat(" chiplet ", b.chiplet),
        " needs ", FormatBytes(SaturatingAdd(b.other_bytes, b.kv_bytes)),
        " (other allocations ", FormatGib(b.other_bytes), " + KV cache ",
        FormatGib(b.kv_bytes), ") of ", FormatBytes(available), " available; ",
        plan->max_fitting_num_blocks == model.num_full_blocks
            ? absl::StrCat("the full count of ", model.num_full_blocks, " fits")
            : absl::StrCat("the largest count that fits is ",
                           plan->max_fitting_num_blocks));
    break;
  }
  plan->warnings.push_back(message);
  const uint64_t min_blocks = artifact.config().NumMinBlocks();
  plan->device_refusal = WithErrorFacts(
      absl::FailedPreconditionError(absl::StrCat(
          message, "; nothing was written (",
          plan->max_fitting_num_blocks >= min_blocks
              ? absl::StrCat("choose at most ", plan->max_fitting_num_blocks,
                             " blocks, or force it")
              : absl::StrCat("not even the minimum of ", min_blocks,
                             " blocks fits this device; force it"),
          " with rbln-artifact --force, WriteOptions.force)")),
      {.reason = ErrorReason::kExceedsDevice,
       .current_num_blocks = artifact.current_num_blocks(),
       .num_min_blocks = artifact.config().NumMinBlocks(),
       .num_full_blocks = artifact.config().NumFullBlocks(),
       .max_fitting_num_blocks = plan->max_fitting_num_blocks});
}

// Companion directories nest a few levels (tokenizer/, assets/); a deeper
// tree in an artifact is refused rather than walked.
constexpr int kMaxCompanionDepth = 32;

// Copies (or links) the companion entry `name` of `from_dir` into `to_dir`,
// recursing into directories, which are fsynced.
// `from_dir` is read through `source`, `to_dir` written through `env`; a
// link needs both to be the same.
absl::Status CopyCompanion(Env* source, Env* env, const std::string& from_dir,
                           const std::string& to_dir, const std::string& name,
                           bool link, CopyOwner owner, int depth = 0) {
  const std::string from = JoinPath(from_dir, name);
  const std::string to = JoinPath(to_dir, name);
  RBLN_ASSIGN_OR_RETURN(FileStat st, source->Stat(from));
  switch (st.type) {
    case FileType::kRegular:
      // A hard link keeps the owner and mode with the inode.
      if (link && source == env && env->Link(from, to).ok()) {
        return absl::OkStatus();
      }
      return CopyFile(source, from, env, to, owner);
    case FileType::kDirectory: {
      if (depth >= kMaxCompanionDepth) {
        return absl::FailedPreconditionError(
            absl::StrCat(from, " nests directories deeper than ",
                         kMaxCompanionDepth, " levels; artifacts do not"));
      }
      RBLN_RETURN_IF_ERROR(env->CreateDir(to));
      RBLN_ASSIGN_OR_RETURN(std::vector<DirEntry> entries,
                            source->ListDir(from));
      for (const DirEntry& entry : entries) {
        RBLN_RETURN_IF_ERROR(CopyCompanion(source, env, from, to, entry.name,
                                           link, owner, depth + 1));
      }
      RBLN_RETURN_IF_ERROR(env->SetOwnership(to, OwnershipOfCopy(st, owner)));
      return env->SyncDir(to);
    }
    default:
      return absl::FailedPreconditionError(
          absl::StrCat(from,
                       " is a symbolic link or special file; artifacts may "
                       "hold only regular files and directories"));
  }
}

// OK when `dir` holds exactly the entries `names`.
absl::Status CheckOnlyWritten(Env* env, const std::string& dir,
                              std::vector<std::string> names) {
  RBLN_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, env->ListDir(dir));
  std::sort(names.begin(), names.end());
  for (const DirEntry& entry : entries) {
    if (!std::binary_search(names.begin(), names.end(), entry.name)) {
      return absl::InternalError(absl::StrCat(
          "something else wrote ", JoinPath(dir, entry.name),
          " while the resized artifact was written there (a codec running "
          "as the daemon's user?); nothing was changed"));
    }
  }
  return absl::OkStatus();
}

// WriteResizedArtifact's steps, over what they share.
class ResizedArtifactWriter {
 public:
  ResizedArtifactWriter(Env* env, const Artifact& artifact,
                        const ResizePlan& plan, const std::string& out_dir,
                        const WriteResizedOptions& options)
      : env_(env),
        source_(options.source_env != nullptr ? options.source_env : env),
        artifact_(artifact),
        plan_(plan),
        options_(options),
        out_dir_(out_dir),
        multimodal_(!artifact.submodule().empty()),
        // The decoder's graphs, in out_dir or in its submodule's directory.
        out_graph_dir_(multimodal_ ? JoinPath(out_dir, artifact.submodule())
                                   : out_dir) {}

  absl::Status Write() {
    if (multimodal_) RBLN_RETURN_IF_ERROR(env_->CreateDir(out_graph_dir_));
    RBLN_RETURN_IF_ERROR(RescaleGraphs());
    if (multimodal_) {
      if (plan_.new_submodule_config_text.has_value()) {
        RBLN_RETURN_IF_ERROR(WriteConfig(artifact_.graph_dir(), out_graph_dir_,
                                         *plan_.new_submodule_config_text));
      }
      RBLN_RETURN_IF_ERROR(CopyCompanions(artifact_.submodule_companion_files(),
                                          artifact_.graph_dir(),
                                          out_graph_dir_));
      RBLN_RETURN_IF_ERROR(
          KeepOwnership(artifact_.graph_dir(), out_graph_dir_));
      RBLN_RETURN_IF_ERROR(env_->SyncDir(out_graph_dir_));
    }
    RBLN_RETURN_IF_ERROR(
        WriteConfig(artifact_.dir(), out_dir_, plan_.new_config_text));
    RBLN_RETURN_IF_ERROR(
        CopyCompanions(artifact_.companion_files(), artifact_.dir(), out_dir_));
    RBLN_RETURN_IF_ERROR(CheckNothingElseWritten());
    // Last, as the directory's own mode may not let anyone add to it.
    RBLN_RETURN_IF_ERROR(KeepOwnership(artifact_.dir(), out_dir_));
    RBLN_RETURN_IF_ERROR(env_->SyncDir(out_dir_));
    return CheckCancelled();
  }

 private:
  absl::Status CheckCancelled() const {
    return options_.is_cancelled && options_.is_cancelled()
               ? WriteCancelled("while it was being staged")
               : absl::OkStatus();
  }

  // Every file written gets the owner and mode of the one it replaces.
  absl::Status KeepOwnership(const std::string& from,
                             const std::string& to) const {
    RBLN_ASSIGN_OR_RETURN(FileStat st, source_->Stat(from));
    return env_->SetOwnership(to, OwnershipOfCopy(st, options_.copy_owner));
  }

  absl::Status WriteConfig(const std::string& from_dir,
                           const std::string& to_dir,
                           const std::string& text) const {
    const std::string to = JoinPath(to_dir, kRblnConfigFileName);
    RBLN_RETURN_IF_ERROR(WriteStringToNewFile(env_, to, text));
    return KeepOwnership(JoinPath(from_dir, kRblnConfigFileName), to);
  }

  absl::Status CopyCompanions(const std::vector<std::string>& names,
                              const std::string& from_dir,
                              const std::string& to_dir) const {
    for (const std::string& name : names) {
      RBLN_RETURN_IF_ERROR(CheckCancelled());
      RBLN_RETURN_IF_ERROR(CopyCompanion(source_, env_, from_dir, to_dir, name,
                                         options_.link_companions,
                                         options_.copy_owner));
    }
    return absl::OkStatus();
  }

  // The graphs are written side by side, up to kParallelGraphs at once, so
  // that one graph's copy runs while another's fsync waits for the disk.
  // The first error stops the others (at their next chunk) and is the one
  // returned.
  absl::Status RescaleGraphs() {
    absl::Status first_error;
    {
      const int threads = static_cast<int>(std::min<size_t>(
          kParallelGraphs, std::max<size_t>(1, artifact_.containers().size())));
      ThreadPool pool(threads);
      for (const ContainerFile& file : artifact_.containers()) {
        pool.Schedule([&, file = &file] {
          if (failed_.load()) return;
          absl::Status status = RescaleGraph(*file);
          if (status.ok()) return;
          absl::MutexLock lock(&mu_);
          if (first_error.ok()) first_error = std::move(status);
          failed_.store(true);
        });
      }
    }  // waits for every graph
    return first_error;
  }

  absl::Status RescaleGraph(const ContainerFile& file) {
    RBLN_RETURN_IF_ERROR(CheckCancelled());
    RescaleRequest request;
    request.source_env = source_;
    request.source_path = file.path;
    request.facts = file.facts.get();
    request.factors = plan_.factors;
    request.out_env = env_;
    request.out_path = JoinPath(out_graph_dir_, file.file_name);
    request.on_copied = [this](uint64_t bytes) {
      if (failed_.load()) return WriteCancelled("after another graph failed");
      if (options_.on_copied) {
        absl::MutexLock lock(&mu_);
        options_.on_copied(bytes);
      }
      return CheckCancelled();
    };
    RBLN_RETURN_IF_ERROR(file.codec->Rescale(request));
    // What the codec wrote is read back before anything is committed.
    RBLN_ASSIGN_OR_RETURN(ContainerFacts written,
                          file.codec->Inspect(env_, request.out_path));
    RBLN_RETURN_IF_ERROR(CheckRescaled(*file.facts, written, plan_.factors,
                                       file.path, file.codec->name()));
    return KeepOwnership(file.path, request.out_path);
  }

  // Nothing but what was written here: an external codec that runs as the
  // daemon's own user could write into the staging directory, and what it
  // put there must not be committed.
  absl::Status CheckNothingElseWritten() const {
    std::vector<std::string> top(artifact_.companion_files());
    top.push_back(kRblnConfigFileName);
    std::vector<std::string> graphs(artifact_.submodule_companion_files());
    if (plan_.new_submodule_config_text.has_value()) {
      graphs.push_back(kRblnConfigFileName);
    }
    for (const ContainerFile& file : artifact_.containers()) {
      graphs.push_back(file.file_name);
    }
    if (multimodal_) {
      top.push_back(artifact_.submodule());
      RBLN_RETURN_IF_ERROR(CheckOnlyWritten(env_, out_graph_dir_, graphs));
    } else {
      top.insert(top.end(), graphs.begin(), graphs.end());
    }
    return CheckOnlyWritten(env_, out_dir_, top);
  }

  Env* const env_;
  Env* const source_;
  const Artifact& artifact_;
  const ResizePlan& plan_;
  const WriteResizedOptions& options_;
  const std::string out_dir_;
  const bool multimodal_;
  const std::string out_graph_dir_;
  absl::Mutex mu_;  // serializes options_.on_copied; guards first_error
  std::atomic<bool> failed_{false};
};

}  // namespace

absl::Status WriteCancelled(absl::string_view when) {
  return absl::CancelledError(absl::StrCat(
      "the write was cancelled (deadline passed, caller gone or daemon "
      "stopping) ",
      when, "; nothing was changed"));
}

absl::Status CheckRescaled(const ContainerFacts& before,
                           const ContainerFacts& after,
                           const RescaleFactors& factors,
                           absl::string_view path, absl::string_view codec) {
  const auto wrong = [&](const std::string& what) {
    return absl::InternalError(absl::StrCat(
        path, ": the rescaled copy the codec (", codec,
        ") wrote does not hold what was asked: ", what,
        "; nothing was changed (the codec or its compiler is at fault)"));
  };
  if (after.granularity != before.granularity ||
      after.num_nodes != before.num_nodes ||
      after.buckets_per_node != before.buckets_per_node) {
    return wrong("its nodes or chiplets differ from the source's");
  }
  if (after.other.size() != before.other.size()) {
    return wrong("its allocations other than the KV cache changed");
  }
  for (size_t i = 0; i < before.other.size(); ++i) {
    if (after.other[i].key != before.other[i].key ||
        after.other[i].bytes != before.other[i].bytes) {
      return wrong(
          absl::StrCat("allocation '", before.other[i].key, "' changed"));
    }
  }
  if (after.kv_tensors.size() != before.kv_tensors.size()) {
    return wrong("its KV tensors differ from the source's");
  }
  for (const KvTensorFacts& old : before.kv_tensors) {
    const auto now = std::find_if(
        after.kv_tensors.begin(), after.kv_tensors.end(),
        [&old](const KvTensorFacts& t) { return t.name == old.name; });
    if (now == after.kv_tensors.end()) {
      return wrong(absl::StrCat("KV tensor '", old.name, "' is missing"));
    }
    const auto factor = factors.find(old.name);
    for (size_t b = 0; b < old.bytes.size() && b < now->bytes.size(); ++b) {
      const absl::uint128 expected =
          factor == factors.end()
              ? absl::uint128(old.bytes[b])
              : absl::uint128(old.bytes[b] / factor->second.second) *
                    factor->second.first;
      if (absl::uint128(now->bytes[b]) != expected) {
        return wrong(absl::StrCat("KV tensor '", old.name, "' holds ",
                                  now->bytes[b], " bytes in bucket ", b,
                                  ", expected ", absl::Uint128Low64(expected)));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ResizePlan> PlanResize(const Artifact& artifact, uint64_t target,
                                      const absl::StatusOr<DeviceSpec>& device,
                                      const MemoryReservation* reserved) {
  for (const ContainerFile& file : artifact.containers()) {
    if (!file.codec->CanRescale()) {
      return absl::FailedPreconditionError(absl::StrCat(
          file.path, ": the codec (", file.codec->name(),
          ") reports a compiler without exp_rescale_buffer_size (an older "
          "rebel-compiler), which cannot resize the KV cache; upgrade "
          "rebel-compiler on this host (or recompile the artifact with the "
          "count you want); nothing was changed"));
    }
  }
  const RblnConfig& config = artifact.config();
  const uint64_t min_blocks = config.NumMinBlocks();
  // The counts a program needs to choose again (error_facts.h).
  const auto facts = [&](ErrorReason reason, bool with_min) {
    ErrorFacts f;
    f.reason = reason;
    f.current_num_blocks = artifact.current_num_blocks();
    if (with_min) f.num_min_blocks = min_blocks;
    f.num_full_blocks = config.NumFullBlocks();
    return f;
  };
  if (target < min_blocks) {
    return WithErrorFacts(
        absl::InvalidArgumentError(absl::StrCat(
            "kvcache_num_blocks ", target, " is below the minimum ", min_blocks,
            " for this artifact (", MinimumRule(config), "); choose at least ",
            min_blocks)),
        facts(ErrorReason::kBelowMinBlocks, /*with_min=*/true));
  }

  if (target > kMaxNumBlocks) {
    return WithErrorFacts(
        absl::InvalidArgumentError(absl::StrCat(
            "kvcache_num_blocks ", target,
            " is too many: above the hard limit of ", kMaxNumBlocks,
            " (2^31 - 1) blocks; choose a smaller count")),
        facts(ErrorReason::kTooManyBlocks, /*with_min=*/false));
  }
  // Every byte count that follows must fit: a bucket's total (its other
  // allocations and the KV cache) is reported as a signed 64-bit headroom.
  MemoryModel model = BuildMemoryModel(artifact);
  ApplyReservation(reserved, &model);
  for (const MemoryBucket& bucket : model.buckets) {
    if (SaturatingAdd(bucket.other_bytes, bucket.KvBytes(target)) >
        static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return WithErrorFacts(
          absl::InvalidArgumentError(
              absl::StrCat("kvcache_num_blocks ", target,
                           " is too many: the memory of node ", bucket.node,
                           " chiplet ", bucket.chiplet,
                           " would exceed 2^63 bytes; choose a smaller count")),
          facts(ErrorReason::kTooManyBlocks, /*with_min=*/false));
    }
  }

  ResizePlan plan;
  plan.current_num_blocks = artifact.current_num_blocks();
  plan.target_num_blocks = target;
  for (const KvTensor& tensor : artifact.kv_tensors()) {
    if (tensor.resizable) {
      plan.factors[tensor.name] = {target, plan.current_num_blocks};
    }
  }
  RBLN_ASSIGN_OR_RETURN(
      plan.new_config_text,
      RewriteKvcacheNumBlocks(artifact.config_text(), target,
                              JoinPath(artifact.dir(), kRblnConfigFileName)));
  if (artifact.submodule_config_text().has_value()) {
    RBLN_ASSIGN_OR_RETURN(
        plan.new_submodule_config_text,
        RewriteKvcacheNumBlocks(
            *artifact.submodule_config_text(), target,
            JoinPath(artifact.graph_dir(), kRblnConfigFileName)));
  }

  // optimum-rbln's warning, then ours for the compiled count.
  if (target > plan.current_num_blocks) {
    plan.warnings.push_back(absl::StrCat(
        "kvcache_num_blocks ", target, " is above the current count ",
        plan.current_num_blocks,
        ", which was sized to fit device DRAM; the model may fail to allocate "
        "at runtime"));
  }
  const uint64_t compiled = artifact.compiled_num_blocks();
  if (compiled != 0 && target > compiled) {
    plan.warnings.push_back(absl::StrCat(
        "kvcache_num_blocks ", target, " is above the compiled count ",
        compiled, "; the runtime must be able to allocate the larger cache"));
  }
  if (target > config.NumFullBlocks()) {
    plan.warnings.push_back(absl::StrCat(
        "kvcache_num_blocks ", target, " is above the ", config.NumFullBlocks(),
        " blocks that max_seq_len / block_size * batch_size can use; the "
        "extra blocks are never used"));
  }
  CheckAgainstDevice(artifact, model, target, device, &plan);
  return plan;
}

absl::StatusOr<FitPlan> PlanFit(const Artifact& artifact,
                                const MemoryBudget& budget,
                                const absl::StatusOr<DeviceSpec>& device,
                                const MemoryReservation* reserved) {
  RBLN_RETURN_IF_ERROR(device.status());
  FitPlan result;
  RBLN_ASSIGN_OR_RETURN(result.fit,
                        FitMemoryBudget(artifact, budget, *device, reserved));
  const uint64_t min_blocks = artifact.config().NumMinBlocks();
  if (result.fit.num_blocks < min_blocks) {
    std::string limit;
    if (result.fit.limiting_bucket >= 0) {
      const BucketFit& b = result.fit.buckets[result.fit.limiting_bucket];
      limit = absl::StrCat(" (node ", b.node, " chiplet ", b.chiplet, ": ",
                           FormatGib(b.budget_bytes), " budget, ",
                           FormatGib(b.other_bytes), " other allocations, ",
                           FormatGib(b.kv_bytes_per_block), " per KV block)");
    }
    return WithErrorFacts(
        absl::FailedPreconditionError(absl::StrCat(
            "memory budget ", budget.ToString(), " fits only ",
            result.fit.num_blocks, " KV-cache block(s)", limit,
            ", below the minimum ", min_blocks, " (",
            MinimumRule(artifact.config()), "); raise the budget")),
        {.reason = ErrorReason::kBudgetBelowMin,
         .current_num_blocks = artifact.current_num_blocks(),
         .num_min_blocks = min_blocks,
         .num_full_blocks = artifact.config().NumFullBlocks()});
  }
  RBLN_ASSIGN_OR_RETURN(result.plan, PlanResize(artifact, result.fit.num_blocks,
                                                device, reserved));
  return result;
}

absl::Status WriteResizedArtifact(Env* env, const Artifact& artifact,
                                  const ResizePlan& plan,
                                  const std::string& out_dir,
                                  const WriteResizedOptions& options) {
  return ResizedArtifactWriter(env, artifact, plan, out_dir, options).Write();
}

}  // namespace rbln
