// Fuzz target: MemoryBudget::Parse and ParseByteSize (core/budget.h) on
// arbitrary text, as a caller's --set-memory-budget and a device tool's
// output would reach them.
//
// Beyond what the sanitizers catch, it checks the header's contract:
//  * a fraction has 0 < numerator <= denominator, a byte budget is > 0;
//  * ToString() of a fraction is its canonical form: it parses back to the
//    same fraction; a byte budget B parses back from "<B>B";
//  * PerChipletBytes on each spec-table family never exceeds the chiplet's
//    available DRAM for a fraction, and for bytes refuses exactly the budgets
//    above one device's available DRAM;
//  * a fraction is applied as a double in (0, 1];
//  * where both parsers accept the text (binary units), they read the same
//    byte count.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/budget.h"
#include "core/device/device_spec.h"
#include "tests/fuzz/fuzz_check.h"

namespace rbln {
namespace {

// One NPU name per family of the spec table.
constexpr absl::string_view kNpus[] = {"RBLN-CA12", "RBLN-CR13"};

void CheckRoundTrip(const MemoryBudget& budget) {
  const std::string text = budget.is_fraction() || budget.is_free()
                               ? budget.ToString()
                               : absl::StrCat(budget.bytes(), "B");
  absl::StatusOr<MemoryBudget> again = MemoryBudget::Parse(text);
  RBLN_FUZZ_CHECK(again.ok(), "\"", text, "\": ", again.status().ToString());
  RBLN_FUZZ_CHECK(again->is_fraction() == budget.is_fraction() &&
                      again->is_free() == budget.is_free() &&
                      again->numerator() == budget.numerator() &&
                      again->denominator() == budget.denominator() &&
                      again->bytes() == budget.bytes(),
                  "\"", text, "\" parses as ", again->ToString());
}

void CheckPerChiplet(const MemoryBudget& budget, const DeviceSpec& device) {
  absl::StatusOr<uint64_t> per_chiplet = budget.PerChipletBytes(device);
  if (budget.is_free()) {
    // Only the live probe's figures size it (core/device/free_budget.h).
    RBLN_FUZZ_CHECK(
        per_chiplet.status().code() == absl::StatusCode::kFailedPrecondition,
        budget.ToString(), ": ", per_chiplet.status().ToString());
    return;
  }
  if (budget.is_fraction()) {
    RBLN_FUZZ_CHECK(per_chiplet.ok(), per_chiplet.status().ToString());
    RBLN_FUZZ_CHECK(*per_chiplet <= device.AvailablePerChiplet(),
                    budget.ToString(), " gives ", *per_chiplet, " bytes");
    return;
  }
  const bool fits = budget.bytes() <= device.AvailablePerNode();
  RBLN_FUZZ_CHECK(per_chiplet.ok() == fits, budget.ToString(), " on ",
                  device.family, ": ", per_chiplet.status().ToString());
  if (fits) {
    RBLN_FUZZ_CHECK(*per_chiplet == budget.bytes() / device.chiplets_per_node,
                    budget.ToString(), " gives ", *per_chiplet, " bytes");
  }
}

void FuzzBudget(absl::string_view text) {
  absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse(text);
  absl::StatusOr<uint64_t> size = ParseByteSize(text, ByteUnits::kBinary);
  if (!budget.ok()) return;

  if (budget->is_fraction() || budget->is_free()) {
    RBLN_FUZZ_CHECK(
        budget->numerator() > 0 && budget->numerator() <= budget->denominator(),
        budget->numerator(), "/", budget->denominator());
    RBLN_FUZZ_CHECK(
        budget->fraction_value() > 0 && budget->fraction_value() <= 1,
        budget->ToString(), " is applied as ", budget->fraction_value());
  } else {
    RBLN_FUZZ_CHECK(budget->bytes() > 0, "a byte budget of 0");
  }
  CheckRoundTrip(*budget);
  for (absl::string_view npu : kNpus) {
    absl::StatusOr<DeviceSpec> device = LookupDeviceSpec(npu);
    RBLN_FUZZ_CHECK(device.ok(), device.status().ToString());
    CheckPerChiplet(*budget, *device);
  }
  if (size.ok()) {
    // ParseByteSize needs a unit, and with a unit a budget is bytes.
    RBLN_FUZZ_CHECK(!budget->is_fraction() && !budget->is_free() &&
                        budget->bytes() == *size,
                    "budget ", budget->ToString(), ", size ", *size);
  }
}

}  // namespace
}  // namespace rbln

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rbln::FuzzBudget(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
