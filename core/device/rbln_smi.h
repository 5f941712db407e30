// Parser of the device table that `rbln-smi` (and the older `rbln-stat`)
// prints with no arguments:
//
//   +-----+-----------+---------+-- ... --+---------------------+-------+
//   | NPU |    Name   | Device  |   ...   |  Memory(used/total) |  Util |
//   +-----+-----------+---------+-- ... --+---------------------+-------+
//   | 0   | RBLN-CA12 | rbln0   |   ...   |   2.4GB / 15.7GiB   |  98.7 |
//   +-----+-----------+---------+-- ... --+---------------------+-------+
//
// Columns are found by the header row's names (NPU, Name, Device,
// Memory(used/total); case and spaces do not matter), so columns the tool
// adds or reorders do not break it. Device rows are the lines whose first
// cell is an integer, from the header to the border that closes the box;
// anything printed after it (the "Context Information" box) is ignored.
// Sizes are read as the table prints them (ParseByteSize with
// ByteUnits::kDecimal): KB, MB, GB are powers of 1000, KiB, MiB, GiB powers
// of 1024. (Budgets and flags read KB, MB, GB as binary, as optimum-rbln
// does; see core/budget.h.)
//
// The input is another program's output: anything unexpected is an error
// that says what was wrong, never a guess.
//
// Thread-safe: a pure function.
#ifndef RBLN_CORE_DEVICE_RBLN_SMI_H_
#define RBLN_CORE_DEVICE_RBLN_SMI_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rbln {

struct ProbedDevice {
  int index = 0;            // the NPU column
  std::string name;         // "RBLN-CA12"
  std::string device_node;  // as printed: "rbln0"
  uint64_t used_bytes = 0;
  // As printed, so rounded to one decimal: "15.7GiB" is
  // floor(15.7 * 2^30) bytes, not the exact 16 GiB - 288 MiB.
  uint64_t total_bytes = 0;
};

// The devices of the table, in the order printed. INVALID_ARGUMENT when
// there is no device table header, the table is truncated (a row cut short,
// no closing border), a cell cannot be read (an unknown unit "12.5XB"), or
// the table lists no device.
absl::StatusOr<std::vector<ProbedDevice>> ParseRblnSmi(absl::string_view text);

}  // namespace rbln

#endif  // RBLN_CORE_DEVICE_RBLN_SMI_H_
