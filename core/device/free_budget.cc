#include "core/device/free_budget.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/numeric/int128.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/device/device_spec.h"
#include "core/text.h"

namespace rbln {
namespace {

static_assert(kMaxDeviceIndex + 1 == kMaxRblnSmiDevices,
              "--devices takes the indexes rbln-smi -j can list");

// "2 (rbln2)", "2": a probed device for messages.
std::string Name(const ProbedDevice& device) {
  if (device.device_node.empty()) return absl::StrCat(device.index);
  return absl::StrCat(device.index, " (", Echo(device.device_node), ")");
}

// "0 (rbln0), 1 (rbln1)".
std::string ListFound(absl::Span<const ProbedDevice> devices) {
  if (devices.empty()) return "none";
  return absl::StrJoin(devices, ", ",
                       [](std::string* out, const ProbedDevice& device) {
                         out->append(Name(device));
                       });
}

// The devices the group sits on, in node order: `chosen`, or the probed
// devices in index order.
absl::StatusOr<std::vector<const ProbedDevice*>> GroupDevices(
    absl::Span<const ProbedDevice> devices, absl::Span<const int> chosen,
    int num_nodes) {
  std::vector<const ProbedDevice*> group;
  if (chosen.empty()) {
    for (const ProbedDevice& device : devices) group.push_back(&device);
    std::sort(group.begin(), group.end(),
              [](const ProbedDevice* a, const ProbedDevice* b) {
                return a->index < b->index;
              });
    if (group.size() < static_cast<size_t>(num_nodes)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the group has ", num_nodes, " nodes but only ", group.size(),
          " devices were probed (", ListFound(devices), ")"));
    }
    group.resize(num_nodes);
    return group;
  }
  absl::flat_hash_set<int> seen;
  for (int index : chosen) {
    if (!seen.insert(index).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--devices names device ", index, " twice"));
    }
    auto it = std::find_if(
        devices.begin(), devices.end(),
        [index](const ProbedDevice& device) { return device.index == index; });
    if (it == devices.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--devices names device ", index,
                       ", which the probe did not find (it found ",
                       ListFound(devices), ")"));
    }
    group.push_back(&*it);
  }
  if (group.size() < static_cast<size_t>(num_nodes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the group has ", num_nodes, " nodes but only ", group.size(),
        " devices were chosen (--devices ", absl::StrJoin(chosen, ","), ")"));
  }
  group.resize(num_nodes);
  return group;
}

// A device the artifact cannot run on refuses the budget.
absl::Status CheckFamily(const ProbedDevice& device, const DeviceSpec& spec) {
  absl::StatusOr<DeviceSpec> found = LookupDeviceSpec(device.name);
  if (found.ok() && found->family == spec.family) return absl::OkStatus();
  const std::string what =
      device.name.empty()
          ? "does not say its NPU"
          : absl::StrCat(
                "is an ", Echo(device.name),
                found.ok() ? "" : ", which the spec table does not know");
  return absl::FailedPreconditionError(absl::StrCat(
      "device ", Name(device), " ", what, ", not an ", spec.family,
      "* device: the artifact cannot run on it, so its free memory does not "
      "size it; choose the devices with --devices"));
}

}  // namespace

absl::StatusOr<std::vector<FreeNodeBudget>> FreeBudgetPerBucket(
    const MemoryBudget& budget, const DeviceSpec& spec,
    absl::Span<const ProbedDevice> devices, absl::Span<const int> chosen,
    int num_nodes) {
  if (!budget.is_free()) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory budget ", budget.ToString(), " is not free"));
  }
  if (num_nodes < 1 || spec.chiplets_per_node == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a group of ", num_nodes, " nodes of ",
                     spec.chiplets_per_node, " chiplets has no bucket"));
  }
  absl::StatusOr<std::vector<const ProbedDevice*>> group =
      GroupDevices(devices, chosen, num_nodes);
  if (!group.ok()) return group.status();
  std::vector<FreeNodeBudget> nodes;
  for (const ProbedDevice* device : *group) {
    absl::Status family = CheckFamily(*device, spec);
    if (!family.ok()) return family;
    FreeNodeBudget node;
    node.device_index = device->index;
    node.device_node = device->device_node;
    node.available_bytes = spec.AvailablePerNode();
    node.used_bytes = device->used_bytes;
    node.holders = device->contexts;
    const uint64_t free = node.available_bytes > node.used_bytes
                              ? node.available_bytes - node.used_bytes
                              : 0;
    // Exact: free * numerator / denominator < 2^64 * 10^18 < 2^128.
    node.node_bytes = absl::Uint128Low64(
        absl::uint128(free) * budget.numerator() / budget.denominator());
    node.per_chiplet_bytes = node.node_bytes / spec.chiplets_per_node;
    nodes.push_back(std::move(node));
  }
  return nodes;
}

}  // namespace rbln
