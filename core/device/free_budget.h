// A `free` budget made bytes (docs/device-dram.md, "Free budgets"): per
// node of a group, what the live probe says is free on the device the node
// sits on, times the budget's P%, split evenly over the device's chiplets.
//
// "Available DRAM" is what it is everywhere in the daemon for a probed
// device (DramProvider::ForNpu, core/device/dram.h): the spec table's exact
// figure for the artifact's target NPU, spec.AvailablePerNode() (16 GiB -
// 288 MiB for RBLN-CA), not the total the tool prints. "In use" is the
// probe's memory.used for the device, which counts every loaded model (this
// one too, if it is loaded): a free budget sizes a model that is not loaded
// yet.
//
// Thread-safe: pure functions.
#ifndef RBLN_CORE_DEVICE_FREE_BUDGET_H_
#define RBLN_CORE_DEVICE_FREE_BUDGET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/budget.h"
#include "core/device/rbln_smi.h"
#include "core/device_memory.h"

namespace rbln {

// The budget of one node of the group.
struct FreeNodeBudget {
  int device_index = 0;     // the probed device the node sits on
  std::string device_node;  // as the probe printed it ("rbln2"), may be empty
  uint64_t available_bytes = 0;  // spec.AvailablePerNode()
  uint64_t used_bytes = 0;       // what the probe says is in use now
  // floor(max(available - used, 0) * P), P the budget's exact fraction.
  uint64_t node_bytes = 0;
  // node_bytes / spec.chiplets_per_node, rounded down: the budget of each
  // (node, chiplet) bucket. A graph whose memory is reported per node only
  // (one bucket per node, docs/memory-model.md) takes node_bytes instead.
  uint64_t per_chiplet_bytes = 0;
  // Who holds what is in use, when the probe says (`rbln-smi -j`).
  std::vector<ProbedContext> holders;
};

// Node i of the group sits on device i of the group's device list:
// `chosen` (device indexes, as --devices gives them; see ParseDeviceList in
// core/budget.h) or, when it is empty, the probed devices in index order;
// a list longer than `num_nodes` gives its first ones. Returns one
// FreeNodeBudget per node, in node order.
//
// Errors:
//  * INVALID_ARGUMENT: `budget` is not a free budget, `num_nodes` < 1, the
//    spec has no chiplets; `chosen` names a device the probe did not find
//    (the message lists those it found) or one device twice; `chosen` has
//    fewer devices than the group has nodes ("the group has 4 nodes but
//    only 2 devices were chosen").
//  * FAILED_PRECONDITION: the probe found fewer devices than the group has
//    nodes (with no `chosen`), or a device the group would sit on is of
//    another NPU family than `spec` (or one the spec table does not know):
//    the artifact cannot run there and its free memory says nothing of the
//    devices it can, so this is an error, not a warning (the message says
//    to choose devices with --devices).
absl::StatusOr<std::vector<FreeNodeBudget>> FreeBudgetPerBucket(
    const MemoryBudget& budget, const DeviceSpec& spec,
    absl::Span<const ProbedDevice> devices, absl::Span<const int> chosen,
    int num_nodes);

}  // namespace rbln

#endif  // RBLN_CORE_DEVICE_FREE_BUDGET_H_
