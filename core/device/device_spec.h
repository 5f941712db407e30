// The NPU spec table (docs/memory-model.md): total DRAM, chiplets and the
// memory the system reserves, by NPU family. It is the embedded default source
// of "available DRAM"; it needs no device and works on any machine.
//
// Thread-safe: pure functions over constant data.
#ifndef RBLN_CORE_DEVICE_DEVICE_SPEC_H_
#define RBLN_CORE_DEVICE_DEVICE_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device_memory.h"

namespace rbln {

// The spec of an NPU by name: "RBLN-CA*" (e.g. RBLN-CA12) or "RBLN-CR*"
// (e.g. RBLN-CR13), case-insensitive. Unknown names: NOT_FOUND naming the
// families that are known.
absl::StatusOr<DeviceSpec> LookupDeviceSpec(absl::string_view npu_name);

}  // namespace rbln

#endif  // RBLN_CORE_DEVICE_DEVICE_SPEC_H_
