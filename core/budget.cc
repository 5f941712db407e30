#include "core/budget.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <utility>

#include "absl/numeric/int128.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"
#include "core/text.h"

namespace rbln {
namespace {

constexpr uint64_t kMaxUint64 = std::numeric_limits<uint64_t>::max();
// A parsed fraction's denominator is a power of ten no larger than 10^18, so
// that numerator * available bytes stays inside 128 bits with room to spare;
// a percentage spends two of those digits on the "%".
constexpr int kMaxFractionDigits = 18;
constexpr int kMaxPercentDigits = kMaxFractionDigits - 2;
// A bare whole number is a byte count only from here up (1 MiB); below, it is
// ambiguous ("80" meant as 80%). Every real budget is far above it.
constexpr uint64_t kMinBareBytes = uint64_t{1} << 20;

struct Unit {
  absl::string_view name;
  uint64_t bytes;
};
// KB, MB, GB, TB as optimum-rbln's parse_byte_size reads them, in
// runtime_utils.py's _BYTE_UNITS: binary.
constexpr Unit kUnits[] = {
    {"B", 1},
    {"KB", uint64_t{1} << 10},
    {"MB", uint64_t{1} << 20},
    {"GB", uint64_t{1} << 30},
    {"TB", uint64_t{1} << 40},
    {"KiB", uint64_t{1} << 10},
    {"MiB", uint64_t{1} << 20},
    {"GiB", uint64_t{1} << 30},
    {"TiB", uint64_t{1} << 40},
};
constexpr Unit kDecimalUnits[] = {
    {"KB", uint64_t{1000}},
    {"MB", uint64_t{1000} * 1000},
    {"GB", uint64_t{1000} * 1000 * 1000},
    {"TB", uint64_t{1000} * 1000 * 1000 * 1000},
};

uint64_t Pow10(int exponent) {
  uint64_t result = 1;
  for (int i = 0; i < exponent; ++i) result *= 10;
  return result;
}

const Unit* FindUnit(absl::string_view name,
                     ByteUnits units = ByteUnits::kBinary) {
  if (units == ByteUnits::kDecimal) {
    for (const Unit& unit : kDecimalUnits) {
      if (absl::EqualsIgnoreCase(name, unit.name)) return &unit;
    }
  }
  for (const Unit& unit : kUnits) {
    if (absl::EqualsIgnoreCase(name, unit.name)) return &unit;
  }
  return nullptr;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

absl::Status InvalidBudget(absl::string_view text, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(
      "memory budget \"", Echo(text), "\" ", problem,
      "; a budget is a fraction in (0, 1] like 0.8, a percentage in (0, 100] "
      "like 80%, or bytes with a unit like 10GB (units B, KB, MB, GB, TB, "
      "KiB, MiB, GiB, TiB, case-insensitive; binary, as optimum-rbln-cli "
      "reads them: 10GB = 10GiB = 10 x 2^30 bytes), or free or free-90% for "
      "what the device probe says is free now"));
}

// The word of a free budget; the grammar's other forms start with a digit,
// a point or a sign.
constexpr absl::string_view kFreeWord = "free";

// The near misses of a unit, as people type them: "10G" for 10GB (the same
// as 10GiB), "10Gi" for 10GiB, "10bytes" for 10B. Returns " (did you mean
// ...?)" or "".
std::string UnitHint(absl::string_view number, absl::string_view unit) {
  const auto prefix = [](char c) {
    c = absl::ascii_toupper(static_cast<unsigned char>(c));
    return c == 'K' || c == 'M' || c == 'G' || c == 'T' ? c : '\0';
  };
  if (unit.size() == 1 && prefix(unit[0]) != '\0') {
    return absl::StrCat(" (did you mean ", number,
                        std::string(1, prefix(unit[0])), "B?)");
  }
  if (unit.size() == 2 && prefix(unit[0]) != '\0' &&
      absl::ascii_tolower(static_cast<unsigned char>(unit[1])) == 'i') {
    return absl::StrCat(" (did you mean ", number,
                        std::string(1, prefix(unit[0])), "iB?)");
  }
  if (absl::EqualsIgnoreCase(unit, "byte") ||
      absl::EqualsIgnoreCase(unit, "bytes")) {
    return absl::StrCat(" (did you mean ", number, "B?)");
  }
  return "";
}

std::string UnknownUnit(absl::string_view number, absl::string_view unit) {
  return absl::StrCat("has an unknown unit \"", Echo(unit), "\"",
                      UnitHint(number, unit));
}

// n / 10^scale with common factors of ten removed, so that "0.8", "0.80" and
// "80%" give the same numerator and denominator.
std::pair<uint64_t, uint64_t> ReducedDecimal(absl::uint128 n, int scale) {
  while (scale > 0 && n % 10 == 0) {
    n /= 10;
    --scale;
  }
  return {absl::Uint128Low64(n), Pow10(scale)};
}

// `number` (digits with at most one point, as ScanDecimal accepted it) as
// Python's float() reads it: the nearest double.
double NearestDouble(absl::string_view number) {
  double value = 0;
  const bool parsed = absl::SimpleAtod(number, &value);
  assert(parsed);
  (void)parsed;
  return value;
}

// A decimal number as written, before its unit: whole + fraction / 10^scale,
// exactly. Shared by the budget grammar and ParseByteSize so that both read
// numbers and units alike.
struct Decimal {
  // Saturates at 2^64 - 1 (whole_too_large) so that callers can name the
  // right problem.
  absl::uint128 whole = 0;
  bool whole_too_large = false;
  bool has_point = false;
  uint64_t fraction = 0;  // the fractional digits, trailing zeros removed
  int scale = 0;
  absl::string_view number;  // the number as written ("80", ".8")
  absl::string_view suffix;  // what follows, after at most one space

  // whole * 10^scale + fraction: below 2^64 * 10^18 < 2^128.
  absl::uint128 Scaled() const { return whole * Pow10(scale) + fraction; }
};

// Reads the number at the start of `text` (surrounding white space ignored).
// A failure's message is only the problem ("has a sign"), for the caller to
// quote the input around it.
absl::StatusOr<Decimal> ScanDecimal(absl::string_view text) {
  const auto problem = [](absl::string_view what) {
    return absl::InvalidArgumentError(what);
  };
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  if (rest.empty()) return problem("is empty");
  if (rest[0] == '+' || rest[0] == '-') return problem("has a sign");

  Decimal decimal;
  size_t i = 0;
  for (; i < rest.size() && IsDigit(rest[i]); ++i) {
    decimal.whole = decimal.whole * 10 + (rest[i] - '0');
    if (decimal.whole > kMaxUint64) {
      decimal.whole_too_large = true;
      decimal.whole = kMaxUint64;
    }
  }
  // ".8" is 0.8, as Python and optimum-rbln-cli read it.
  const bool leading_point =
      i == 0 && rest.size() > 1 && rest[0] == '.' && IsDigit(rest[1]);
  if (i == 0 && !leading_point) return problem("is not a number");
  decimal.has_point = i < rest.size() && rest[i] == '.';
  absl::string_view fraction_digits;
  if (decimal.has_point) {
    const size_t start = ++i;
    while (i < rest.size() && IsDigit(rest[i])) ++i;
    fraction_digits = rest.substr(start, i - start);
    if (fraction_digits.empty()) {
      return problem("is not a well-formed decimal number");
    }
  }
  decimal.number = rest.substr(0, i);
  rest.remove_prefix(i);
  if (!rest.empty() && (rest[0] == 'e' || rest[0] == 'E')) {
    return problem("uses an exponent");
  }
  absl::ConsumePrefix(&rest, " ");
  if (!rest.empty() && (IsDigit(rest[0]) || rest[0] == '.')) {
    return problem("is not a well-formed decimal number");
  }
  if (fraction_digits.size() > kMaxFractionDigits) {
    return problem(absl::StrCat("has ", fraction_digits.size(),
                                " fractional digits; at most ",
                                kMaxFractionDigits, " are allowed"));
  }
  while (absl::ConsumeSuffix(&fraction_digits, "0")) {
  }
  decimal.scale = static_cast<int>(fraction_digits.size());
  for (char c : fraction_digits) {
    decimal.fraction = decimal.fraction * 10 + (c - '0');
  }
  decimal.suffix = rest;
  return decimal;
}

// decimal * unit, the fractional byte rounded down. Each product stays below
// 2^64 * 2^40, well inside 128 bits.
absl::StatusOr<uint64_t> BytesOf(const Decimal& decimal, const Unit& unit) {
  const absl::uint128 fraction_bytes =
      absl::uint128(decimal.fraction) * unit.bytes / Pow10(decimal.scale);
  const absl::uint128 bytes = decimal.whole * unit.bytes + fraction_bytes;
  if (decimal.whole_too_large || bytes > kMaxUint64) {
    return absl::InvalidArgumentError(
        "is too large: a byte count must fit in 64 bits");
  }
  return absl::Uint128Low64(bytes);
}

// A percentage, as exact and as optimum-rbln computes it.
struct Percent {
  std::pair<uint64_t, uint64_t> exact;
  double value = 0;
};

// `decimal` read as a percentage in (0, 100]; a failure is only the problem
// ("is above 100%").
absl::StatusOr<Percent> PercentOf(const Decimal& decimal) {
  const absl::uint128 scaled = decimal.Scaled();
  if (scaled == 0) return absl::InvalidArgumentError("is zero");
  if (decimal.whole_too_large ||
      scaled > absl::uint128(100) * Pow10(decimal.scale)) {
    return absl::InvalidArgumentError("is above 100%");
  }
  if (decimal.scale > kMaxPercentDigits) {
    return absl::InvalidArgumentError(
        absl::StrCat("has more than ", kMaxPercentDigits,
                     " fractional digits in a percentage"));
  }
  // optimum-rbln: float(text[:-1]) / 100.
  return Percent{ReducedDecimal(scaled, decimal.scale + 2),
                 NearestDouble(decimal.number) / 100.0};
}

}  // namespace

absl::StatusOr<MemoryBudget> MemoryBudget::Parse(absl::string_view text) {
  const auto refuse = [text](absl::string_view problem) {
    return InvalidBudget(text, problem);
  };
  if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(text), "-")) {
    return refuse("is negative: budgets are positive");
  }
  if (absl::StartsWithIgnoreCase(absl::StripLeadingAsciiWhitespace(text),
                                 kFreeWord)) {
    return ParseFree(text);
  }
  absl::StatusOr<Decimal> decimal = ScanDecimal(text);
  if (!decimal.ok()) return refuse(decimal.status().message());
  const absl::string_view number = decimal->number;
  const absl::string_view rest = decimal->suffix;
  const int scale = decimal->scale;
  const absl::uint128 scaled = decimal->Scaled();
  const bool is_percent = rest == "%";
  const Unit* unit = FindUnit(rest);
  if (!rest.empty() && !is_percent && unit == nullptr) {
    return refuse(UnknownUnit(number, rest));
  }
  if (scaled == 0) return refuse("is zero: budgets are positive");

  if (is_percent) {
    absl::StatusOr<Percent> percent = PercentOf(*decimal);
    if (!percent.ok()) return refuse(percent.status().message());
    return FractionOfText(percent->exact, percent->value);
  }

  if (rest.empty()) {
    if (decimal->whole_too_large) {
      return refuse("is too large: a byte count must fit in 64 bits");
    }
    if (!decimal->has_point && decimal->whole == 1) {
      // optimum-rbln-cli parses the budget as JSON first: 1 is an int, so
      // bytes. Reading it as all of the DRAM would be a silent difference.
      return refuse(absl::StrCat(
          "is refused: `", number,
          "` is one byte to optimum-rbln-cli; write 1.0 or 100% for all of "
          "the DRAM, or 1B"));
    }
    if (scaled <= Pow10(scale)) {
      return FractionOfText(ReducedDecimal(scaled, scale),
                            NearestDouble(number));
    }
    // Above 1 and with no unit: "80" is far more often 80% than 80 bytes
    // (no model fits in a mebibyte), so only a count of at least 1 MiB is
    // read as bytes, as optimum-rbln-cli reads 10737418240.
    const std::string percent_hint =
        decimal->whole < 100 ||
                (decimal->whole == 100 && decimal->fraction == 0)
            ? absl::StrCat("did you mean ", number, "%? ")
            : "";
    if (decimal->has_point) {
      return refuse(absl::StrCat(
          "is ambiguous: a number above 1 with a fractional part and no unit "
          "is neither a fraction of the DRAM nor a whole byte count (",
          percent_hint, "write bytes with a unit, like ", number, "GiB)"));
    }
    if (decimal->whole < kMinBareBytes) {
      return refuse(absl::StrCat(
          "is a bare number above 1 and below 1 MiB (1048576), which is "
          "ambiguous (",
          percent_hint, "write ", number, "B for bytes)"));
    }
    return Bytes(absl::Uint128Low64(decimal->whole));
  }

  absl::StatusOr<uint64_t> bytes = BytesOf(*decimal, *unit);
  if (!bytes.ok()) return refuse(bytes.status().message());
  if (*bytes == 0) return refuse("rounds down to 0 bytes");
  return Bytes(*bytes);
}

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text,
                                       ByteUnits units) {
  const auto refuse = [text](absl::string_view problem) {
    return absl::InvalidArgumentError(absl::StrCat(
        "size \"", Echo(text), "\" ", problem,
        "; expected a decimal and a unit like 2.4GB or 15.7GiB (units B, KB, "
        "MB, GB, TB, KiB, MiB, GiB, TiB)"));
  };
  absl::StatusOr<Decimal> decimal = ScanDecimal(text);
  if (!decimal.ok()) return refuse(decimal.status().message());
  if (decimal->suffix.empty()) return refuse("has no unit");
  const Unit* unit = FindUnit(decimal->suffix, units);
  if (unit == nullptr) {
    return refuse(UnknownUnit(decimal->number, decimal->suffix));
  }
  absl::StatusOr<uint64_t> bytes = BytesOf(*decimal, *unit);
  if (!bytes.ok()) return refuse(bytes.status().message());
  return *bytes;
}

absl::StatusOr<uint64_t> ParseByteCount(absl::string_view text, bool* bare) {
  absl::StatusOr<Decimal> decimal = ScanDecimal(text);
  const bool is_bare =
      decimal.ok() && decimal->suffix.empty() && !decimal->has_point;
  if (bare != nullptr) *bare = is_bare;
  if (!is_bare) return ParseByteSize(text, ByteUnits::kBinary);
  if (decimal->whole_too_large) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte count \"", Echo(text),
                     "\" is too large: a byte count must fit in 64 bits"));
  }
  return absl::Uint128Low64(decimal->whole);
}

absl::StatusOr<MemoryBudget> MemoryBudget::ParseFree(absl::string_view text) {
  const auto refuse = [text](absl::string_view problem) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory budget \"", Echo(text), "\" ", problem,
        "; a free budget is free (all that the device probe says is free on "
        "each device now) or free-P% with P in (0, 100], like free-90%"));
  };
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  rest.remove_prefix(kFreeWord.size());
  if (rest.empty()) return Free(1, 1);
  if (!absl::ConsumePrefix(&rest, "-")) {
    return refuse("is not a free budget: expected nothing or -P% after free");
  }
  absl::StatusOr<Decimal> decimal = ScanDecimal(rest);
  if (!decimal.ok()) {
    return refuse(
        absl::StrCat("has a percentage that ", decimal.status().message()));
  }
  if (decimal->suffix != "%") {
    return refuse("has no % after the percentage");
  }
  absl::StatusOr<Percent> percent = PercentOf(*decimal);
  if (!percent.ok()) {
    return refuse(
        absl::StrCat("has a percentage that ", percent.status().message()));
  }
  MemoryBudget budget = FractionOfText(percent->exact, percent->value);
  budget.kind_ = Kind::kFree;
  return budget;
}

absl::StatusOr<std::vector<int>> ParseDeviceList(absl::string_view text) {
  const auto refuse = [text](absl::string_view problem) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device list \"", Echo(text), "\" ", problem,
        "; write NPU indexes separated by commas, like 2,3 (node 0 on device "
        "2, node 1 on device 3)"));
  };
  if (absl::StripAsciiWhitespace(text).empty()) return refuse("is empty");
  std::vector<int> devices;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) return refuse("has an empty item");
    int index = 0;
    for (char c : item) {
      if (!IsDigit(c) || index > kMaxDeviceIndex) {
        return refuse(
            IsDigit(c) ? absl::StrCat("has an index past ", kMaxDeviceIndex)
                       : absl::StrCat("has \"", Echo(item),
                                      "\", which is not an NPU index (a whole "
                                      "number from 0 to ",
                                      kMaxDeviceIndex, ")"));
      }
      index = index * 10 + (c - '0');
    }
    if (index > kMaxDeviceIndex) {
      return refuse(absl::StrCat("has an index past ", kMaxDeviceIndex));
    }
    if (std::find(devices.begin(), devices.end(), index) != devices.end()) {
      return refuse(absl::StrCat("names device ", index, " twice"));
    }
    devices.push_back(index);
  }
  return devices;
}

MemoryBudget MemoryBudget::Fraction(uint64_t numerator, uint64_t denominator) {
  assert(numerator > 0 && numerator <= denominator);
  MemoryBudget budget;
  budget.kind_ = Kind::kFraction;
  budget.numerator_ = numerator;
  budget.denominator_ = denominator;
  budget.fraction_value_ =
      static_cast<double>(numerator) / static_cast<double>(denominator);
  return budget;
}

MemoryBudget MemoryBudget::FractionOfText(std::pair<uint64_t, uint64_t> exact,
                                          double value) {
  MemoryBudget budget = Fraction(exact.first, exact.second);
  budget.fraction_value_ = value;
  return budget;
}

MemoryBudget MemoryBudget::Bytes(uint64_t bytes) {
  MemoryBudget budget;
  budget.kind_ = Kind::kBytes;
  budget.bytes_ = bytes;
  return budget;
}

MemoryBudget MemoryBudget::Free(uint64_t numerator, uint64_t denominator) {
  MemoryBudget budget = Fraction(numerator, denominator);
  budget.kind_ = Kind::kFree;
  return budget;
}

absl::StatusOr<uint64_t> MemoryBudget::PerChipletBytes(
    const DeviceSpec& device) const {
  RBLN_ASSIGN_OR_RETURN(uint64_t per_node, PerNodeBytes(device));
  return per_node / device.chiplets_per_node;
}

absl::StatusOr<uint64_t> MemoryBudget::PerNodeBytes(
    const DeviceSpec& device) const {
  if (is_free()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a ", ToString(),
        " budget needs the live device probe's figures of what is in use "
        "now, not only the ",
        device.family, " device's available DRAM"));
  }
  if (is_fraction()) {
    // optimum-rbln: int(available_total * fraction), in double precision.
    // Past 2^53 bytes (an --device-dram override) the double may round up
    // to the device or beyond, even to 2^64: that is the whole device.
    const uint64_t available = device.AvailablePerNode();
    const double product = static_cast<double>(available) * fraction_value_;
    if (product >= static_cast<double>(available)) return available;
    return static_cast<uint64_t>(product);
  }
  if (bytes_ > device.AvailablePerNode()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory budget of ", FormatBytes(bytes_), " exceeds the ",
        FormatBytes(device.AvailablePerNode()), " of DRAM available on one ",
        device.family,
        " device; give at most that many bytes, or a fraction like 0.8"));
  }
  return bytes_;
}

std::string MemoryBudget::ToString() const {
  switch (kind_) {
    case Kind::kBytes:
      return absl::StrCat(bytes_, " bytes");
    case Kind::kFree:
      if (numerator_ == denominator_) return std::string(kFreeWord);
      return absl::StrCat(kFreeWord, "-", PercentString());
    case Kind::kFraction:
      break;
  }
  return PercentString();
}

std::string MemoryBudget::PercentString() const {
  // The percentage scaled by 10^16, i.e. the fraction to 18 decimals
  // (truncated, which is exact for every parsed budget).
  constexpr uint64_t kPercentScale = uint64_t{10000000000000000};
  const absl::uint128 scaled =
      absl::uint128(numerator_) * (kPercentScale * 100) / denominator_;
  const uint64_t whole = absl::Uint128Low64(scaled / kPercentScale);
  const uint64_t fraction = absl::Uint128Low64(scaled % kPercentScale);
  if (fraction == 0) return absl::StrCat(whole, "%");
  // Adding the scale zero-pads the decimals to a fixed width.
  std::string decimals = absl::StrCat(kPercentScale + fraction).substr(1);
  decimals.erase(decimals.find_last_not_of('0') + 1);
  return absl::StrCat(whole, ".", decimals, "%");
}

}  // namespace rbln
