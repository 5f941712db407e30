// The live device probe (docs/device-dram.md): a DramProvider that runs
// `rbln-smi -j` (or the older `rbln-stat`) and reads its JSON, or, when -j is
// not understood, runs the tool plainly and reads its device table
// (core/device/rbln_smi.h); it falls back to the spec table whenever the
// probe cannot answer.
//
// What it answers:
//  * ForNpu(npu): the artifact's target NPU decides the spec. Devices of that
//    family found by the probe confirm it, and the figures are the spec
//    table's exact ones (rbln-smi prints "15.7GiB", rounded; an RBLN-CA12
//    holds exactly 16 GiB - 288 MiB). The source names the probe and the
//    tool. Devices of another family are a warning. An NPU the spec table
//    does not know is NOT_FOUND, as for the spec table alone.
//  * Report(): the probed devices (index, name, node, total/used/available,
//    chiplets from the spec, source "probe").
//  * A missing, failing, hanging (past the timeout: killed) or garbled tool:
//    the spec table's answer plus a warning saying what went wrong. No tool
//    configured and none on the search path is an ordinary host without
//    NPUs: the spec table, without a warning.
//
//  * ProbeNow(): the devices as a new probe sees them now, for a `free`
//    budget; that probe's answer replaces the cached one.
//
// One probe's answer serves every caller for `cache_ttl`; a probe runs on
// one thread at a time and concurrent callers wait for it and share its
// answer, so a busy daemon runs the tool at most once per `cache_ttl`.
//
// Thread-safe.
#ifndef RBLN_CORE_DEVICE_PROBE_PROVIDER_H_
#define RBLN_CORE_DEVICE_PROBE_PROVIDER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "core/device/dram.h"

namespace rbln {

struct ProbeOptions {
  // The tool to run. Empty: "rbln-smi" on the search path, else "rbln-stat".
  // A name without '/' is looked up on the search path.
  std::string tool;
  // $PATH-style directories for the look-ups; nullopt: $PATH at probe time,
  // so that a tool installed after the daemon started is found.
  std::optional<std::string> search_path;
  // Past it the tool is killed and the probe counts as failed.
  absl::Duration timeout = absl::Seconds(5);
  // How long one probe's answer (success or failure) serves; zero: probe on
  // every call.
  absl::Duration cache_ttl = absl::Seconds(5);
  // The clock that ages the cache; empty: absl::Now.
  std::function<absl::Time()> clock;
};

std::unique_ptr<DramProvider> NewProbeProvider(ProbeOptions options);

}  // namespace rbln

#endif  // RBLN_CORE_DEVICE_PROBE_PROVIDER_H_
