// MemoryBudget: the `--set-memory-budget` argument (docs/memory-model.md),
// read as optimum-rbln-cli reads it wherever that gives a sensible answer.
//
// Grammar (surrounding white space ignored, units case-insensitive):
//   fraction  "0.8", ".8", "1.0"       a decimal with a point, in (0, 1]
//   percent   "80%", "100%", "12.5%"   a decimal in (0, 100] then '%'
//   bytes     "10737418240"            a whole number >= 1 MiB (1048576)
//                                      with no unit
//             "10GB", "10 GiB", "80B"  a decimal and a unit: B, and KB, MB,
//             GB, TB binary as optimum-rbln reads them (10GB = 10 * 2^30),
//             KiB, MiB, GiB, TiB the same values
//   free      "free", "free-90%"       what the live device probe says is
//                                      free on each device now, all of it or
//                                      P% of it, P a decimal in (0, 100] as
//                                      for percent ("free" is "free-100%")
// optimum-rbln-cli reads a bare whole number as bytes, so "1" (one byte, or
// "01") is refused, saying to write 1.0, 100% or 1B; a bare number above 1
// is refused when it is below 1 MiB ("80": did you mean 80%? write 80B for
// bytes) or has a fractional part ("1.5"). No signs, exponents, NaN or
// infinities; at most 18 fractional digits; byte counts must fit in 64 bits.
// A unit one letter short ("10G", "10Gi") is refused with the unit it may
// have meant. "free" is case-insensitive like the units; "free-", "free-90"
// (no '%'), "free-0%", "free-101%" and anything else after "free" are
// refused, saying the form.
//
// Values: a fraction is kept exactly (numerator/denominator, a power of ten)
// for display, and applied as optimum-rbln applies it, in double precision:
// floor(available per device * f) then divided evenly over the chiplets.
// Byte counts are whole numbers (a fractional byte count is rounded down).
// A free budget keeps its P% as a fraction the same way, but it is not a
// fraction of the device's available DRAM: it needs the live probe's figures
// of what is in use, so PerNodeBytes refuses it and the caller sizes it with
// FreeBudgetPerBucket (core/device/free_budget.h).
//
// Thread-safe: an immutable value type.
#ifndef RBLN_CORE_BUDGET_H_
#define RBLN_CORE_BUDGET_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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

  // "free-P%" (P as the percent grammar reads it): P/100 of what is free
  // now; requires 0 < numerator <= denominator. Free(1, 1) is "free".
  static MemoryBudget Free(uint64_t numerator, uint64_t denominator);

  // Exactly one of is_fraction(), is_free() and a byte budget (neither).
  bool is_fraction() const { return kind_ == Kind::kFraction; }
  bool is_free() const { return kind_ == Kind::kFree; }
  // The fraction of a fraction budget, or the P/100 of a free one (1/1 for
  // "free"); 1/1 for a byte budget.
  uint64_t numerator() const { return numerator_; }
  uint64_t denominator() const { return denominator_; }
  // 0 unless a byte budget.
  uint64_t bytes() const { return bytes_; }

  // The fraction as optimum-rbln computes it from the text: the decimal as a
  // double, divided by 100.0 for a percentage (a free budget's P too).
  double fraction_value() const { return fraction_value_; }

  // The budget of one whole node of `device`:
  //   fraction f: floor(double(device.AvailablePerNode()) * f)
  //   bytes X:    X
  // A byte budget above device.AvailablePerNode() is INVALID_ARGUMENT naming
  // both numbers. A free budget is FAILED_PRECONDITION: it needs the live
  // probe's figures (FreeBudgetPerBucket, core/device/free_budget.h).
  absl::StatusOr<uint64_t> PerNodeBytes(const DeviceSpec& device) const;

  // The budget of one chiplet of `device`: PerNodeBytes divided by
  // device.chiplets_per_node, rounded down.
  absl::StatusOr<uint64_t> PerChipletBytes(const DeviceSpec& device) const;

  // A canonical human form: "80%" for fractions (up to 18 decimals, trailing
  // zeros removed), "10000000000 bytes" for byte budgets, "free" and
  // "free-90%" for free budgets (both parse back to the same budget).
  std::string ToString() const;

 private:
  enum class Kind { kFraction, kBytes, kFree };

  MemoryBudget() = default;
  // A fraction parsed from text: exact for display, `value` for arithmetic.
  static MemoryBudget FractionOfText(std::pair<uint64_t, uint64_t> exact,
                                     double value);
  // "free" or "free-P%" (`text` is the whole input, for messages).
  static absl::StatusOr<MemoryBudget> ParseFree(absl::string_view text);
  // The fraction as a percentage: "80%", "12.5%".
  std::string PercentString() const;

  Kind kind_ = Kind::kFraction;
  uint64_t numerator_ = 1;
  uint64_t denominator_ = 1;
  double fraction_value_ = 1.0;
  uint64_t bytes_ = 0;
};

// What KB, MB, GB and TB mean (KiB, MiB, GiB, TiB are always powers of 1024).
enum class ByteUnits {
  // Powers of 1024, as optimum-rbln's parse_byte_size reads them: budgets
  // and the programs' flags.
  kBinary,
  // Powers of 1000: how rbln-smi's device table is read
  // (core/device/rbln_smi.h).
  kDecimal,
};

// A size with a unit ("2.4GB", "15.7GiB", "0.0B", "512 KiB"), the
// fractional byte rounded down. Unlike a budget, zero is a size and a unit is
// required. INVALID_ARGUMENT quotes the input and says what was wrong (e.g.
// an unknown unit "XB").
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text, ByteUnits units);

// A byte count as a flag takes it (--payload-bytes, --device-dram): a bare
// whole number of bytes ("65536"), or a size with a binary unit as
// ParseByteSize reads it. `bare`, when given, tells which it was, for callers
// that refuse small bare numbers as a forgotten unit.
absl::StatusOr<uint64_t> ParseByteCount(absl::string_view text,
                                        bool* bare = nullptr);

// The largest NPU index --devices takes: rbln-smi -j lists at most 256
// devices (core/device/rbln_smi.h).
inline constexpr int kMaxDeviceIndex = 255;

// The `--devices` list that goes with a `free` budget: which probed devices
// the nodes of a group sit on, node i on the i-th ("2,3": node 0 on device
// 2, node 1 on device 3). Comma-separated NPU indexes, each a whole decimal
// number in [0, kMaxDeviceIndex], white space around each ignored.
// INVALID_ARGUMENT, quoting the input and saying the form, for an empty
// list or item ("2,,3", "2,"), anything but digits ("rbln2", "-1", "2.0"),
// an index past kMaxDeviceIndex, or an index given twice. Here, in the
// base, so that the client and the server read it alike; core/device/
// free_budget.h checks it against the probed devices.
absl::StatusOr<std::vector<int>> ParseDeviceList(absl::string_view text);

}  // namespace rbln

#endif  // RBLN_CORE_BUDGET_H_
