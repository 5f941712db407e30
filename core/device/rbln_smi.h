// Parsers of what `rbln-smi` prints: its JSON (`rbln-smi -j`, below) and the
// device table that it (and the older `rbln-stat`) prints with no arguments:
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
// `rbln-smi -j` prints one JSON object (tests/testdata/rbln-smi/
// rbln-smi-json-ca12.json): `devices[]` with `npu` (the index), `name`,
// `device` (the node, "rbln0") and `memory.used` / `memory.total` in bytes,
// and `contexts[]`, one process's allocation on one device each (`npu`,
// `pid`, `process`, `memalloc`). Numbers are decimal strings; a JSON
// integer is read too. Every field is optional except a device's memory
// figures; other fields are ignored.
//
// The input is another program's output: anything unexpected is an error
// that says what was wrong, never a guess.
//
// Thread-safe: a pure function.
#ifndef RBLN_CORE_DEVICE_RBLN_SMI_H_
#define RBLN_CORE_DEVICE_RBLN_SMI_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rbln {

// One process's allocation on a device (`rbln-smi -j`'s contexts[]), for
// messages: which processes hold the memory in use.
struct ProbedContext {
  uint64_t pid = 0;
  std::string process;  // "python3"; empty when not printed
  uint64_t bytes = 0;   // memalloc; 0 when not printed
};

struct ProbedDevice {
  int index = 0;            // the NPU column, or `npu`
  std::string name;         // "RBLN-CA12"; empty when -j does not say
  std::string device_node;  // as printed: "rbln0"; empty when -j does not say
  uint64_t used_bytes = 0;
  // From the table: as printed, so rounded to one decimal: "15.7GiB" is
  // floor(15.7 * 2^30) bytes, not the exact 16 GiB - 288 MiB. From -j: exact.
  uint64_t total_bytes = 0;
  // From -j's contexts[] with this device's index, in the order printed;
  // always empty from the table.
  std::vector<ProbedContext> contexts;
};

// The devices of the table, in the order printed. INVALID_ARGUMENT when
// there is no device table header, the table is truncated (a row cut short,
// no closing border), a cell cannot be read (an unknown unit "12.5XB"), or
// the table lists no device.
absl::StatusOr<std::vector<ProbedDevice>> ParseRblnSmi(absl::string_view text);

// The largest `rbln-smi -j` output read (the probe's output cap), and the
// most devices and contexts: a host holds a few NPUs and each process one
// context per device, so anything past these is not a real answer.
inline constexpr size_t kMaxRblnSmiJsonBytes = size_t{1} << 20;
inline constexpr size_t kMaxRblnSmiDevices = 256;
inline constexpr size_t kMaxRblnSmiContexts = 4096;

// Whether `text` is meant as JSON: its first byte other than white space is
// '{'. A tool that does not know -j prints its table or a usage message
// instead, which the probe then reads as a table (core/device/
// probe_provider.h); output that starts as JSON is read as JSON only.
bool LooksLikeRblnSmiJson(absl::string_view text);

// The devices of `rbln-smi -j`'s output, in the order printed.
// INVALID_ARGUMENT saying what was wrong when `text` is not one JSON object
// (with the offset of a syntax error), is larger than
// kMaxRblnSmiJsonBytes, lists no device or more than kMaxRblnSmiDevices (or
// more than kMaxRblnSmiContexts contexts), lists an index twice, has a
// device without memory.used or memory.total (naming it), or has a field of
// an unexpected type or a number that is not a decimal byte count fitting in
// 64 bits. A context naming a device that devices[] does not list is
// ignored (contexts only inform messages).
absl::StatusOr<std::vector<ProbedDevice>> ParseRblnSmiJson(
    absl::string_view text);

}  // namespace rbln

#endif  // RBLN_CORE_DEVICE_RBLN_SMI_H_
