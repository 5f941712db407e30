// Where "available DRAM" comes from (docs/device-dram.md). A budget of 0.8
// means 80% of what the chosen provider says one device can hold, so the daemon
// reports the source with every answer.
//
// Providers, in the daemon's order of choice:
//   1. an explicit override (`--device-dram BYTES[,CHIPLETS]`, on the command
//      line or in the config file; for simulation and tests),
//   2. the live probe of the host's NPUs through rbln-smi
//      (core/device/probe_provider.h), which falls back to
//   3. the spec table (the embedded default; works on any machine).
//
// Implementations are thread-safe.
#ifndef RBLN_CORE_DEVICE_DRAM_H_
#define RBLN_CORE_DEVICE_DRAM_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/device_spec.h"
#include "core/device/rbln_smi.h"

namespace rbln {

// The device figures chosen for an artifact's target NPU.
struct DramChoice {
  DeviceSpec spec;
  std::string source;  // e.g. "spec table: RBLN-CA (16 GiB - 288 MiB)"
  std::vector<std::string> warnings;

  // Every field: Describe's kept replies are keyed on the choice
  // (server/describe_replies.h).
  friend bool operator==(const DramChoice& a, const DramChoice& b) {
    return a.spec == b.spec && a.source == b.source && a.warnings == b.warnings;
  }
};

struct DeviceEntry {
  int index = -1;  // -1: not a probed device
  std::string name;
  std::string family;
  std::string device_node;
  uint64_t total_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t available_bytes = 0;
  uint32_t chiplets = 1;
  std::string source;  // "probe", "spec", "override"
};

struct DeviceReport {
  std::vector<DeviceEntry> devices;
  std::string source;
  std::vector<std::string> warnings;
};

class DramProvider {
 public:
  virtual ~DramProvider() = default;
  // The figures for an artifact compiled for `npu`. An empty `npu` (the
  // artifact names none): the override's figures, or those of the NPU of
  // the probe's lowest-index device (as optimum-rbln resolves it from the
  // host's device 0), the source saying so; else FAILED_PRECONDITION
  // (NoNpuNamed).
  virtual absl::StatusOr<DramChoice> ForNpu(absl::string_view npu) = 0;
  // What the provider sees, for GetDeviceInfo.
  virtual DeviceReport Report() = 0;
  // Whether ForNpu would answer now, without waiting for a device probe
  // (its own or another caller's): a caller on a thread that must not block
  // asks first.
  virtual bool AnswersWithoutWaiting() { return true; }
  // A number that stays the same for as long as ForNpu's answers do, so
  // that a caller may keep what it made from an answer (Describe's reply,
  // server/describe_replies.h) and use it again without asking; 0 when the
  // provider cannot say so now (ask ForNpu). Never waits.
  virtual uint64_t AnswersGeneration() { return 0; }
  // What the live probe sees now, for a `free` budget
  // (core/device/free_budget.h): the probe runs afresh, whatever its cache
  // holds, and its answer becomes the cached one. May wait for the tool (up
  // to its timeout). Providers that are not a live probe, and a probe that
  // fails (its figures are then the spec table's), answer
  // FAILED_PRECONDITION (NotALiveProbe).
  virtual absl::StatusOr<std::vector<ProbedDevice>> ProbeNow();
};

// FAILED_PRECONDITION: the DRAM figures come from `source` ("the spec table
// (no device probe)"), not a live probe, so a `free` budget cannot be
// computed; says to give a byte budget or reserve the other models with
// --beside.
absl::Status NotALiveProbe(absl::string_view source);

// FAILED_PRECONDITION: the artifact names no NPU and `why_no_host_npu`
// ("the probe is off"), so there are no figures; says to give
// --device-dram.
absl::Status NoNpuNamed(absl::string_view why_no_host_npu);

// The spec table of §2 by NPU name.
std::unique_ptr<DramProvider> NewSpecTableProvider();

struct DramOverride {
  uint64_t bytes_per_node = 0;
  std::optional<uint32_t> chiplets;  // default: the NPU's from the spec table
};

// Parses "BYTES[,CHIPLETS]" where BYTES is a size with a unit ("16GiB",
// "512MiB", units as in core/budget.h) or a bare byte count of at least
// 1 GiB ("17179869184"): a bare "16" is refused with "did you mean 16GiB?".
// INVALID_ARGUMENT says what is accepted.
absl::StatusOr<DramOverride> ParseDramOverride(absl::string_view text);

// Every device holds exactly `dram.bytes_per_node`, split evenly over its
// chiplets, nothing reserved.
std::unique_ptr<DramProvider> NewOverrideProvider(DramOverride dram);

}  // namespace rbln

#endif  // RBLN_CORE_DEVICE_DRAM_H_
