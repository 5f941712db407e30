#include "core/device/probe_provider.h"

#include <atomic>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/core_metrics.h"
#include "core/device/device_spec.h"
#include "core/device/rbln_smi.h"
#include "core/os/subprocess.h"
#include "core/status_macros.h"
#include "core/text.h"
#include "spdlog/spdlog.h"

namespace rbln {
namespace {

// The tools tried, in order, when none is configured: rbln-stat is the name
// of older driver releases.
constexpr const char* kDefaultTools[] = {"rbln-smi", "rbln-stat"};

// rbln-smi prints available DRAM to one decimal of its unit (15.7GiB for
// 15.72 GiB); more than this relative difference from the spec is not
// rounding.
constexpr uint64_t kTotalToleranceDivisor = 100;  // 1%

// One run of the tool.
struct Probe {
  std::string tool;  // the program run (as configured when not found)
  absl::StatusOr<std::vector<ProbedDevice>> devices;
  // False when no tool is configured and none is on the search path: an
  // ordinary host without NPUs, not worth a warning on every reply.
  bool warn = true;
};

// "/dev/rbln0" for the "rbln0" that rbln-smi prints.
std::string NodePath(absl::string_view node) {
  if (node.empty()) return "";  // -j may not say
  if (node.find('/') != absl::string_view::npos) return std::string(node);
  return absl::StrCat("/dev/", node);
}

// "RBLN-CA12 rbln0, RBLN-CA12 rbln1".
std::string ListDevices(const std::vector<const ProbedDevice*>& devices) {
  return absl::StrJoin(devices, ", ",
                       [](std::string* out, const ProbedDevice* d) {
                         absl::StrAppend(out, d->name, " ", d->device_node);
                       });
}

// A warning when the tool's total is more than rounding away from what the
// spec says the device can hold: the spec's figure is still used (it is
// exact for every device it knows), but the operator should know.
std::optional<std::string> TotalMismatch(const ProbedDevice& device,
                                         const DeviceSpec& spec) {
  const uint64_t expected = spec.AvailablePerNode();
  const uint64_t difference = device.total_bytes > expected
                                  ? device.total_bytes - expected
                                  : expected - device.total_bytes;
  if (difference <= expected / kTotalToleranceDivisor) return std::nullopt;
  return absl::StrCat(
      device.device_node, " (", device.name, ") shows ",
      FormatGib(device.total_bytes), " of DRAM but the spec table gives ",
      spec.family, "* ", FormatGib(expected),
      "; the spec table's figure is used (set an override of the device DRAM "
      "to use another)");
}

// What came of a probe, for the metrics.
ProbeResult ResultOf(const Probe& probe) {
  if (probe.devices.ok()) return ProbeResult::kOk;
  if (!probe.warn) return ProbeResult::kNoTool;
  switch (probe.devices.status().code()) {
    case absl::StatusCode::kDeadlineExceeded:
      return ProbeResult::kTimeout;
    case absl::StatusCode::kInvalidArgument:  // Run(): not a device table
      return ProbeResult::kUnreadable;
    default:
      return ProbeResult::kFailed;
  }
}

std::string FallbackWarning(const Probe& probe) {
  return absl::StrCat(
      "device probe failed, so the DRAM figures come from the spec table: ",
      probe.devices.status().message());
}

// A one-line summary, to log a probe only when its answer changes.
std::string Summary(const Probe& probe) {
  if (!probe.devices.ok()) return std::string(probe.devices.status().message());
  std::vector<const ProbedDevice*> all;
  for (const ProbedDevice& d : *probe.devices) all.push_back(&d);
  return absl::StrCat(probe.tool, " found ", ListDevices(all));
}

class ProbeProvider : public DramProvider {
 public:
  explicit ProbeProvider(ProbeOptions options)
      : options_(std::move(options)), spec_table_(NewSpecTableProvider()) {
    if (!options_.clock) options_.clock = &absl::Now;
  }

  absl::StatusOr<DramChoice> ForNpu(absl::string_view npu) override {
    const Probe probe = Latest();
    std::string host_npu;
    if (npu.empty()) {
      // optimum-rbln takes the host's device 0 for an artifact that names
      // no NPU: here the probe's lowest-index device.
      if (!probe.devices.ok() || probe.devices->empty()) {
        return NoNpuNamed(
            !probe.devices.ok()
                ? absl::StrCat("the device probe did not answer (",
                               probe.devices.status().message(), ")")
                : absl::StrCat(probe.tool, " found no device"));
      }
      const ProbedDevice* lowest = &probe.devices->front();
      for (const ProbedDevice& device : *probe.devices) {
        if (device.index < lowest->index) lowest = &device;
      }
      host_npu = lowest->name;
      npu = host_npu;
    }
    // The artifact's target decides the spec, whatever the host has.
    RBLN_ASSIGN_OR_RETURN(DramChoice choice, spec_table_->ForNpu(npu));
    if (!host_npu.empty()) {
      choice.source = absl::StrCat(choice.source, "; NPU ", host_npu,
                                   " from the probe's lowest-index device, "
                                   "as optimum-rbln resolves it (the "
                                   "artifact names none)");
    }
    if (!probe.devices.ok()) {
      if (probe.warn) choice.warnings.push_back(FallbackWarning(probe));
      return choice;
    }
    std::vector<const ProbedDevice*> same_family;
    std::vector<const ProbedDevice*> other_family;
    for (const ProbedDevice& device : *probe.devices) {
      absl::StatusOr<DeviceSpec> spec = LookupDeviceSpec(device.name);
      if (spec.ok() && spec->family == choice.spec.family) {
        same_family.push_back(&device);
        if (std::optional<std::string> warning =
                TotalMismatch(device, choice.spec)) {
          choice.warnings.push_back(*std::move(warning));
        }
      } else {
        other_family.push_back(&device);
      }
    }
    if (!other_family.empty()) {
      choice.warnings.push_back(absl::StrCat(
          "the artifact targets ", npu, " (", choice.spec.family, "*) but ",
          probe.tool, " shows ", ListDevices(other_family),
          same_family.empty()
              ? "; no device on this host can run it, so the figures come "
                "from the spec table"
              : ", which cannot run it"));
    }
    if (same_family.empty()) {
      absl::StrAppend(&choice.source, " (", probe.tool, " found no ",
                      choice.spec.family, "* device)");
      return choice;
    }
    choice.source =
        absl::StrCat("probe: ", probe.tool, " found ", ListDevices(same_family),
                     "; exact figures from the ", choice.source);
    return choice;
  }

  DeviceReport Report() override {
    const Probe probe = Latest();
    if (!probe.devices.ok()) {
      DeviceReport report = spec_table_->Report();
      if (probe.warn) {
        report.source =
            absl::StrCat("spec table (the probe of ", probe.tool, " failed)");
        report.warnings.push_back(FallbackWarning(probe));
      } else {
        report.source = "spec table (no rbln-smi or rbln-stat on PATH)";
      }
      return report;
    }
    DeviceReport report;
    report.source =
        absl::StrCat("probe: ", probe.tool, " (refreshed at most every ",
                     FormatSeconds(options_.cache_ttl),
                     "; available DRAM from the spec table by NPU name)");
    for (const ProbedDevice& device : *probe.devices) {
      DeviceEntry entry;
      entry.index = device.index;
      entry.name = device.name;
      entry.device_node = NodePath(device.device_node);
      entry.used_bytes = device.used_bytes;
      entry.source = "probe";
      absl::StatusOr<DeviceSpec> spec = LookupDeviceSpec(device.name);
      if (spec.ok()) {
        entry.family = spec->family;
        entry.total_bytes = spec->total_bytes_per_node;
        entry.available_bytes = spec->AvailablePerNode();
        entry.chiplets = spec->chiplets_per_node;
        if (std::optional<std::string> warning = TotalMismatch(device, *spec)) {
          report.warnings.push_back(*std::move(warning));
        }
      } else {
        // The tool's total is what such a device can hold; its chiplets
        // are unknown (0).
        entry.total_bytes = device.total_bytes;
        entry.available_bytes = device.total_bytes;
        entry.chiplets = 0;
        report.warnings.push_back(absl::StrCat(
            device.device_node, " is an ", device.name,
            ", which the spec table does not know; artifacts for it need an "
            "override of the device DRAM"));
      }
      report.devices.push_back(std::move(entry));
    }
    return report;
  }

  // Moves with every probe (at most once per cache_ttl); 0 once the last
  // one is stale, since the next ForNpu probes again. Without the lock,
  // which a probe holds for seconds and every Describe would contend for:
  // the probe that replaces the answer clears the generation first, then
  // sets when the new one goes stale, then the new generation (each
  // generation is new), so an equal generation read before and after the
  // time goes with it.
  uint64_t AnswersGeneration() override {
    const uint64_t generation = generation_.load();
    if (generation == 0) return 0;
    const absl::Time stale_at = absl::FromUnixNanos(stale_at_ns_.load());
    if (generation_.load() != generation) return 0;
    return options_.clock() < stale_at ? generation : 0;
  }

  absl::StatusOr<std::vector<ProbedDevice>> ProbeNow() override {
    Probe probe;
    {
      absl::MutexLock lock(&mu_);
      probe = Refresh();
    }
    if (probe.devices.ok()) return *std::move(probe.devices);
    return NotALiveProbe(
        probe.warn
            ? absl::StrCat("the spec table (the probe of ", probe.tool,
                           " failed: ", probe.devices.status().message(), ")")
            : "the spec table (no rbln-smi or rbln-stat on PATH)");
  }

  bool AnswersWithoutWaiting() override {
    if (!mu_.TryLock()) return false;  // a probe is running
    const bool fresh = IsFresh();
    mu_.Unlock();
    return fresh;
  }

 private:
  bool IsFresh() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cached_.has_value() &&
           options_.clock() - probed_at_ < options_.cache_ttl;
  }

  // The cached probe, or a fresh one when it is older than the TTL.
  Probe Latest() {
    absl::MutexLock lock(&mu_);
    if (IsFresh()) return *cached_;
    return Refresh();
  }

  // Runs the tool afresh and makes its answer the cached one.
  Probe Refresh() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Probe fresh = Run();
    CountProbe(ResultOf(fresh));
    const std::string summary = Summary(fresh);
    if (!cached_.has_value() || Summary(*cached_) != summary) {
      if (fresh.devices.ok() || !fresh.warn) {
        spdlog::info("device probe: {}", summary);
      } else {
        spdlog::warn("device probe failed; using the spec table: {}", summary);
      }
    }
    generation_.store(0);
    cached_ = fresh;
    probed_at_ = options_.clock();
    stale_at_ns_.store(absl::ToUnixNanos(probed_at_ + options_.cache_ttl));
    generation_.store(++probes_);
    return fresh;
  }

  // The program to run, in probe.tool; on failure probe.devices says why.
  bool ResolveTool(Probe& probe) const {
    const char* env_path = std::getenv("PATH");
    const std::string search_path =
        options_.search_path.value_or(env_path != nullptr ? env_path : "");
    if (options_.tool.empty()) {
      for (const char* name : kDefaultTools) {
        absl::StatusOr<std::string> found =
            FindExecutableOnPath(name, search_path);
        if (found.ok()) {
          probe.tool = *found;
          return true;
        }
      }
      probe.devices = absl::NotFoundError(absl::StrCat(
          "neither rbln-smi nor rbln-stat is on PATH (", search_path, ")"));
      probe.warn = false;
      return false;
    }
    if (options_.tool.find('/') != std::string::npos) {
      probe.tool = options_.tool;
      return true;
    }
    absl::StatusOr<std::string> found =
        FindExecutableOnPath(options_.tool, search_path);
    probe.tool = found.ok() ? *found : options_.tool;
    if (!found.ok()) probe.devices = found.status();
    return found.ok();
  }

  // `TOOL -j` first. Its JSON is read as JSON only; output that is a device
  // table (a tool that ignores -j) is read as one without running the tool
  // again. A non-zero exit, or output that is neither, means -j is not
  // understood: then `TOOL` plainly, and its table, as before -j. A tool
  // that hangs or floods is not run twice.
  Probe Run() const {
    Probe probe;
    if (!ResolveTool(probe)) return probe;
    const RunProcessOptions run{.timeout = options_.timeout};
    absl::StatusOr<ProcessResult> json = RunProcess({probe.tool, "-j"}, run);
    if (!json.ok()) {
      probe.devices = json.status();
      return probe;
    }
    if (json->exit_status == 0) {
      if (LooksLikeRblnSmiJson(json->stdout_text)) {
        probe.devices = ParseRblnSmiJson(json->stdout_text);
        return Unreadable(std::move(probe), " -j");
      }
      probe.devices = ParseRblnSmi(json->stdout_text);
      if (probe.devices.ok()) return probe;
    }
    absl::StatusOr<std::string> output = RunProcessForOutput({probe.tool}, run);
    if (!output.ok()) {
      probe.devices = output.status();
      return probe;
    }
    probe.devices = ParseRblnSmi(*output);
    return Unreadable(std::move(probe), "");
  }

  // A parse failure says whose output it was.
  static Probe Unreadable(Probe probe, absl::string_view arguments) {
    if (!probe.devices.ok()) {
      probe.devices = absl::InvalidArgumentError(
          absl::StrCat("cannot read the output of ", probe.tool, arguments,
                       ": ", probe.devices.status().message()));
    }
    return probe;
  }

  ProbeOptions options_;
  const std::unique_ptr<DramProvider> spec_table_;

  absl::Mutex mu_;
  std::optional<Probe> cached_ ABSL_GUARDED_BY(mu_);
  absl::Time probed_at_ ABSL_GUARDED_BY(mu_);
  uint64_t probes_ ABSL_GUARDED_BY(mu_) = 0;
  // cached_'s generation and when it goes stale (AnswersGeneration).
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> stale_at_ns_{0};
};

}  // namespace

std::unique_ptr<DramProvider> NewProbeProvider(ProbeOptions options) {
  return std::make_unique<ProbeProvider>(std::move(options));
}

}  // namespace rbln
