#include "core/device/device_spec.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace rbln {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

}  // namespace

absl::StatusOr<DeviceSpec> LookupDeviceSpec(absl::string_view npu_name) {
  if (absl::StartsWithIgnoreCase(npu_name, "RBLN-CA")) {
    return DeviceSpec{"RBLN-CA", 16 * kGiB, 1, 288 * kMiB};
  }
  if (absl::StartsWithIgnoreCase(npu_name, "RBLN-CR")) {
    return DeviceSpec{"RBLN-CR", 144 * kGiB, 4, 1 * kGiB};
  }
  return absl::NotFoundError(absl::StrCat(
      "unknown NPU '", npu_name,
      "': the spec table knows RBLN-CA* (ATOM) and RBLN-CR* (REBEL); "
      "give the device's DRAM explicitly to use another"));
}

}  // namespace rbln
