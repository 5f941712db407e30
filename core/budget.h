// MemoryBudget: the `--set-memory-budget` argument (docs/memory-model.md).
//
// Grammar (surrounding white space ignored, units case-insensitive):
//   fraction  "0.8", ".8", "1", "1.0"  a decimal in (0, 1]
//   percent   "80%", "100%", "12.5%"   a decimal in (0, 100] then '%'
//   bytes     "10737418240"            a whole number >= 1 MiB (1048576)
//                                      with no unit
//             "10GB", "10 GiB", "80B"  a decimal and a unit:
//             B, KB, MB, GB, TB (powers of 1000), KiB, MiB, GiB, TiB (1024)
// A number above 1 with no unit is refused when it is below 1 MiB ("80":
// did you mean 80%? write 80B for bytes) or has a fractional part ("1.5"):
// both are ambiguous. No signs, exponents, NaN or infinities; at most 18
// fractional digits; byte counts must fit in 64 bits. A unit one letter short
// ("10G", "10Gi") is refused with the units it may have meant.
//
// Values are exact: a fraction is kept as numerator/denominator (a power of
// ten) and byte counts are whole numbers (a fractional byte count is rounded
// down), so budgets are computed to the byte with no floating point.
//
// Thread-safe: an immutable value type.
#ifndef RBLN_CORE_BUDGET_H_
#define RBLN_CORE_BUDGET_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device_memory.h"

namespace rbln {

class MemoryBudget {
 public:
  // Parses the grammar above. INVALID_ARGUMENT with a message that quotes the
  // input, says what was wrong and lists what is accepted.
  static absl::StatusOr<MemoryBudget> Parse(absl::string_view text);

  // numerator/denominator of the available DRAM; requires
  // 0 < numerator <= denominator.
  static MemoryBudget Fraction(uint64_t numerator, uint64_t denominator);
  // Bytes per device (node).
  static MemoryBudget Bytes(uint64_t bytes);

  bool is_fraction() const { return is_fraction_; }
  uint64_t numerator() const { return numerator_; }
  uint64_t denominator() const { return denominator_; }
  uint64_t bytes() const { return bytes_; }

  // The budget of one chiplet of `device`:
  //   fraction f: floor(f * device.AvailablePerChiplet())
  //   bytes X:    floor(X / device.chiplets_per_node)
  // A byte budget above device.AvailablePerNode() is INVALID_ARGUMENT naming
  // both numbers.
  absl::StatusOr<uint64_t> PerChipletBytes(const DeviceSpec& device) const;

  // The budget of one whole node of `device` (for memory reported per node):
  //   fraction f: floor(f * device.AvailablePerNode())
  //   bytes X:    X
  // with the same check as PerChipletBytes.
  absl::StatusOr<uint64_t> PerNodeBytes(const DeviceSpec& device) const;

  // A canonical human form: "80%" for fractions (up to 18 decimals, trailing
  // zeros removed), "10000000000 bytes" for byte budgets.
  std::string ToString() const;

 private:
  MemoryBudget() = default;
  uint64_t FractionOf(uint64_t available) const;
  absl::Status CheckBytesFit(const DeviceSpec& device) const;

  bool is_fraction_ = true;
  uint64_t numerator_ = 1;
  uint64_t denominator_ = 1;
  uint64_t bytes_ = 0;
};

// A size as device tools print it: a decimal and a unit of the grammar above
// ("2.4GB", "15.7GiB", "0.0B", "512 KiB"), the fractional byte rounded down.
// Unlike a budget, zero is a size and a unit is required. INVALID_ARGUMENT
// quotes the input and says what was wrong (e.g. an unknown unit "XB").
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

// A byte count as a flag takes it (--payload-bytes, --device-dram): a bare
// whole number of bytes ("65536"), or a size with a unit as ParseByteSize
// reads it. `bare`, when given, tells which it was, for callers that refuse
// small bare numbers as a forgotten unit.
absl::StatusOr<uint64_t> ParseByteCount(absl::string_view text,
                                        bool* bare = nullptr);

}  // namespace rbln

#endif  // RBLN_CORE_BUDGET_H_
