// DeviceSpec: the numbers of one NPU's DRAM (total, chiplets, what the
// system reserves), and what follows from them. The spec table that fills it
// by NPU name is core/device/device_spec.h; a probe fills it from the device
// (core/device/probe_provider.h). Plain data, in the base so that the budget
// grammar (core/budget.h) can apply itself to a device without depending on
// the device layer.
//
// Thread-safe: plain data.
#ifndef RBLN_CORE_DEVICE_MEMORY_H_
#define RBLN_CORE_DEVICE_MEMORY_H_

#include <cstdint>
#include <string>

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

  friend bool operator==(const DeviceSpec& a, const DeviceSpec& b) {
    return a.family == b.family &&
           a.total_bytes_per_node == b.total_bytes_per_node &&
           a.chiplets_per_node == b.chiplets_per_node &&
           a.reserved_bytes_per_chiplet == b.reserved_bytes_per_chiplet;
  }
};

}  // namespace rbln

#endif  // RBLN_CORE_DEVICE_MEMORY_H_
