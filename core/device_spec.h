// The NPU spec table (docs/memory-model.md): total DRAM, chiplets and the
// memory the system reserves, by NPU family. It is the embedded default source
// of "available DRAM"; it needs no device and works on any machine.
//
// Thread-safe: pure functions over constant data.
#ifndef RBLN_CORE_DEVICE_SPEC_H_
#define RBLN_CORE_DEVICE_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rbln {

struct DeviceSpec {
  std::string family;  // "RBLN-CA" (ATOM) or "RBLN-CR" (REBEL)
  uint64_t total_bytes_per_node = 0;
  uint32_t chiplets_per_node = 1;
  uint64_t reserved_bytes_per_chiplet = 0;

  // What one chiplet can hold: total / chiplets - reserved.
  uint64_t AvailablePerChiplet() const {
    return total_bytes_per_node / chiplets_per_node -
           reserved_bytes_per_chiplet;
  }
  // What one node (device) can hold: chiplets * AvailablePerChiplet().
  uint64_t AvailablePerNode() const {
    return AvailablePerChiplet() * chiplets_per_node;
  }
};

// The spec of an NPU by name: "RBLN-CA*" (e.g. RBLN-CA12) or "RBLN-CR*"
// (e.g. RBLN-CR13), case-insensitive. Unknown names: NOT_FOUND naming the
// families that are known.
absl::StatusOr<DeviceSpec> LookupDeviceSpec(absl::string_view npu_name);

}  // namespace rbln

#endif  // RBLN_CORE_DEVICE_SPEC_H_
