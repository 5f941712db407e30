#include "core/budget.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/types/span.h"
#include "core/device/device_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kCa12PerChiplet = 16 * kGiB - 288 * kMiB;  // 16877879296
constexpr uint64_t kCr13PerChiplet = 35 * kGiB;               // 37580963840

void ExpectSameBudget(const MemoryBudget& actual,
                      const MemoryBudget& expected) {
  EXPECT_EQ(actual.is_fraction(), expected.is_fraction());
  EXPECT_EQ(actual.is_free(), expected.is_free());
  if (expected.is_fraction() || expected.is_free()) {
    EXPECT_EQ(actual.numerator(), expected.numerator());
    EXPECT_EQ(actual.denominator(), expected.denominator());
  } else {
    EXPECT_EQ(actual.bytes(), expected.bytes());
  }
}

struct AcceptCase {
  std::string text;
  MemoryBudget expected;
};

TEST(MemoryBudgetParseTest, AcceptsTheGrammar) {
  const AcceptCase cases[] = {
      // Fractions keep the smallest power-of-ten denominator.
      {"0.8", MemoryBudget::Fraction(8, 10)},
      {"0.80", MemoryBudget::Fraction(8, 10)},
      {"1.0", MemoryBudget::Fraction(1, 1)},
      {" 0.5 ", MemoryBudget::Fraction(5, 10)},
      // A leading point, as Python reads it.
      {".8", MemoryBudget::Fraction(8, 10)},
      {".125", MemoryBudget::Fraction(125, 1000)},
      {"\t0.125\n", MemoryBudget::Fraction(125, 1000)},
      {"0.000000000000000001", MemoryBudget::Fraction(1, 1000000000000000000)},
      // Percentages are the same fractions.
      {"80%", MemoryBudget::Fraction(8, 10)},
      {"100%", MemoryBudget::Fraction(1, 1)},
      {"100.0%", MemoryBudget::Fraction(1, 1)},
      {"12.5%", MemoryBudget::Fraction(125, 1000)},
      {"0.0000000000000001%", MemoryBudget::Fraction(1, 1000000000000000000)},
      {"12.50000000000000000%", MemoryBudget::Fraction(125, 1000)},
      // Bytes, with units exact and fractional bytes rounded down. KB, MB,
      // GB, TB are binary, as optimum-rbln-cli reads them.
      {"10GB", MemoryBudget::Bytes(10737418240)},
      {"10 GB", MemoryBudget::Bytes(10737418240)},
      {"10gb", MemoryBudget::Bytes(10737418240)},
      {"10GiB", MemoryBudget::Bytes(10737418240)},
      {"10gib", MemoryBudget::Bytes(10737418240)},
      {"10 GIB", MemoryBudget::Bytes(10737418240)},
      {"10737418240", MemoryBudget::Bytes(10737418240)},
      // A bare whole number is bytes from 1 MiB up; below, "B" says bytes.
      {"1048576", MemoryBudget::Bytes(1048576)},
      {"80B", MemoryBudget::Bytes(80)},
      {"2b", MemoryBudget::Bytes(2)},
      {".5KiB", MemoryBudget::Bytes(512)},
      {"1.5TB", MemoryBudget::Bytes(1649267441664)},
      {"512MiB", MemoryBudget::Bytes(536870912)},
      {"1.5KiB", MemoryBudget::Bytes(1536)},
      {"0.001KB", MemoryBudget::Bytes(1)},
      {"1KB", MemoryBudget::Bytes(1024)},
      {"1B", MemoryBudget::Bytes(1)},
      {"1.9B", MemoryBudget::Bytes(1)},
      {"1.0000000001GiB", MemoryBudget::Bytes(1073741824)},
      {"1mb", MemoryBudget::Bytes(1048576)},
      {"16777215TB", MemoryBudget::Bytes(uint64_t{16777215} << 40)},
      {"18446744073709551615", MemoryBudget::Bytes(UINT64_MAX)},
      {"18446744073709551615B", MemoryBudget::Bytes(UINT64_MAX)},
      {"16777215TiB", MemoryBudget::Bytes(uint64_t{16777215} << 40)},
  };
  for (const AcceptCase& c : cases) {
    SCOPED_TRACE(absl::StrCat("input \"", c.text, "\""));
    absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse(c.text);
    ASSERT_TRUE(budget.ok()) << budget.status();
    ExpectSameBudget(*budget, c.expected);
  }
}

struct RefuseCase {
  std::string text;
  std::string problem;
};

// Each of `cases` is refused with INVALID_ARGUMENT quoting the text, saying
// its problem, and listing what is accepted (`accepted`).
void ExpectEachRefused(absl::Span<const RefuseCase> cases,
                       absl::string_view accepted) {
  for (const RefuseCase& c : cases) {
    SCOPED_TRACE(absl::StrCat("input \"", c.text, "\""));
    absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse(c.text);
    ASSERT_FALSE(budget.ok());
    EXPECT_EQ(budget.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(budget.status().message());
    EXPECT_THAT(message, HasSubstr(absl::StrCat("\"", c.text, "\"")));
    EXPECT_THAT(message, HasSubstr(c.problem));
    EXPECT_THAT(message, HasSubstr(accepted));
  }
}

TEST(MemoryBudgetParseTest, RefusesWithAnExplanation) {
  const RefuseCase cases[] = {
      {"", "is empty"},
      {"   ", "is empty"},
      {"0", "is zero: budgets are positive"},
      {"0.0", "is zero"},
      {"0%", "is zero"},
      {"0GB", "is zero"},
      {"0B", "is zero"},
      {"0.1B", "rounds down to 0 bytes"},
      {"-1", "is negative: budgets are positive"},
      {" -0.5", "is negative"},
      {"+0.5", "has a sign"},
      // A bare 1 (or 01) is one byte to optimum-rbln-cli.
      {"1",
       "`1` is one byte to optimum-rbln-cli; write 1.0 or 100% for all "
       "of the DRAM, or 1B"},
      {" 01 ", "`01` is one byte to optimum-rbln-cli"},
      {"1.5", "is ambiguous"},
      {"2.0", "is ambiguous"},
      // Bare numbers above 1 and below 1 MiB.
      {"2", "is a bare number above 1 and below 1 MiB"},
      {"80", "did you mean 80%? write 80B for bytes"},
      {"100", "did you mean 100%? write 100B for bytes"},
      {"1048575", "write 1048575B for bytes"},
      {"101%", "is above 100%"},
      {"100.5%", "is above 100%"},
      {"99999999999999999999%", "is above 100%"},
      {"abc", "is not a number"},
      {"NaN", "is not a number"},
      {"inf", "is not a number"},
      {"%", "is not a number"},
      {"GB", "is not a number"},
      {".", "is not a number"},
      {".%", "is not a number"},
      {"..5", "is not a number"},
      {"1e400", "uses an exponent"},
      {"1e3", "uses an exponent"},
      {"1E3GB", "uses an exponent"},
      {"0.8.1", "is not a well-formed decimal number"},
      {"5.", "is not a well-formed decimal number"},
      {"1 0GB", "is not a well-formed decimal number"},
      {"10XB", "has an unknown unit \"XB\""},
      // Near misses of a unit.
      {"10G", "unknown unit \"G\" (did you mean 10GB?)"},
      {"1.5t", "(did you mean 1.5TB?)"},
      {"512Mi", "(did you mean 512MiB?)"},
      {"4096 bytes", "(did you mean 4096B?)"},
      {"10  GB", "has an unknown unit \" GB\""},
      {"0XB", "has an unknown unit"},
      {"18446744073709551616", "is too large"},
      {"18446744073709551616B", "is too large"},
      {"16777216TiB", "is too large"},
      {"0.1234567890123456789", "has 19 fractional digits"},
      {"12.34567890123456789%", "fractional digits in a percentage"},
  };
  ExpectEachRefused(cases,
                    "like 0.8, a percentage in (0, 100] like 80%, or bytes "
                    "with a unit like 10GB");
}

TEST(MemoryBudgetParseTest, AmbiguousNumbersOnlySuggestPercentagesUpTo100) {
  absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse("1.5");
  ASSERT_FALSE(budget.ok());
  EXPECT_THAT(budget.status().message(),
              HasSubstr("(did you mean 1.5%? write bytes with a unit, like "
                        "1.5GiB)"));
  budget = MemoryBudget::Parse("512");
  ASSERT_FALSE(budget.ok());
  EXPECT_THAT(budget.status().message(), HasSubstr("(write 512B for bytes)"));
  EXPECT_THAT(budget.status().message(), Not(HasSubstr("512%")));
}

TEST(MemoryBudgetParseTest, UnknownUnitListsTheAcceptedUnits) {
  absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse("10XB");
  ASSERT_FALSE(budget.ok());
  EXPECT_THAT(budget.status().message(),
              HasSubstr("units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"));
  EXPECT_THAT(budget.status().message(),
              HasSubstr("binary, as optimum-rbln-cli reads them: 10GB = "
                        "10GiB = 10 x 2^30 bytes"));
}

TEST(MemoryBudgetParseTest, BinaryAndIecUnitsAreTheSameBudget) {
  for (const auto& [binary, iec] :
       {std::pair{"1KB", "1KiB"}, std::pair{"512MB", "512MiB"},
        std::pair{"10GB", "10GiB"}, std::pair{"2TB", "2TiB"}}) {
    SCOPED_TRACE(binary);
    absl::StatusOr<MemoryBudget> a = MemoryBudget::Parse(binary);
    absl::StatusOr<MemoryBudget> b = MemoryBudget::Parse(iec);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->bytes(), b->bytes());
  }
}

TEST(MemoryBudgetParseTest, QuotesControlCharactersEscaped) {
  absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse("1\"\n0");
  ASSERT_FALSE(budget.ok());
  EXPECT_THAT(budget.status().message(), HasSubstr("\"1\\\"\\n0\""));
}

struct PerChipletCase {
  std::string npu;
  std::string budget;
  uint64_t expected;
};

TEST(MemoryBudgetPerChipletTest, ComputesExactBudgets) {
  const PerChipletCase cases[] = {
      // RBLN-CA12: 1 chiplet of 16877879296 bytes.
      {"RBLN-CA12", "0.8", 13502303436},  // 13502303436.8 rounded down
      {"RBLN-CA12", "80%", 13502303436},
      {"RBLN-CA12", "1.0", kCa12PerChiplet},
      {"RBLN-CA12", "100%", kCa12PerChiplet},
      {"RBLN-CA12", "0.000000000000000001", 0},  // 1.7e-8 bytes
      {"RBLN-CA12", "10GB", 10737418240},
      {"RBLN-CA12", "10GiB", 10737418240},
      {"RBLN-CA12", "16877879296", kCa12PerChiplet},
      // RBLN-CR13: 4 chiplets of 37580963840 bytes; a fraction applies to
      // the device's 150323855360, as optimum-rbln applies it, and is
      // split over the chiplets.
      {"RBLN-CR13", "0.8", 30064771072},
      {"RBLN-CR13", "80%", 30064771072},
      {"RBLN-CR13", "1.0", kCr13PerChiplet},
      {"RBLN-CR13", "12.5%", 4697620480},
      {"RBLN-CR13", "10GB", 2684354560},
      {"RBLN-CR13", "10GiB", 2684354560},
      {"RBLN-CR13", "10000000003", 2500000000},  // 2500000000.75
      {"RBLN-CR13", "140GiB", kCr13PerChiplet},

  };
  for (const PerChipletCase& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.npu, " budget \"", c.budget, "\""));
    absl::StatusOr<DeviceSpec> device = LookupDeviceSpec(c.npu);
    ASSERT_TRUE(device.ok()) << device.status();
    absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse(c.budget);
    ASSERT_TRUE(budget.ok()) << budget.status();
    absl::StatusOr<uint64_t> bytes = budget->PerChipletBytes(*device);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, c.expected);
  }
}

TEST(MemoryBudgetPerChipletTest, AFractionIsAppliedAsOptimumRblnAppliesIt) {
  // int(available * f) in double precision, f as Python's float() reads
  // the text (divided by 100.0 for a percentage).
  for (const char* text :
       {"0.7", "0.9", "0.333", "33.3%", "0.123456789", "99.99%", ".1", "0.5"}) {
    SCOPED_TRACE(text);
    absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse(text);
    ASSERT_TRUE(budget.ok()) << budget.status();
    const std::string number(absl::StripSuffix(text, "%"));
    double f = std::stod(number);
    if (absl::EndsWith(text, "%")) f /= 100.0;
    EXPECT_EQ(budget->fraction_value(), f);
    for (const char* npu : {"RBLN-CA12", "RBLN-CR13"}) {
      absl::StatusOr<DeviceSpec> device = LookupDeviceSpec(npu);
      ASSERT_TRUE(device.ok());
      const uint64_t total = static_cast<uint64_t>(
          static_cast<double>(device->AvailablePerNode()) * f);
      EXPECT_EQ(*budget->PerNodeBytes(*device), total);
      EXPECT_EQ(*budget->PerChipletBytes(*device),
                total / device->chiplets_per_node);
    }
  }
}

TEST(MemoryBudgetPerChipletTest, AFractionMayGiveAByteLessThanExactly) {
  // 10^10 bytes (an --device-dram override) * 0.1551 is just below
  // 1551000000 in double precision: optimum-rbln's int() gives one byte
  // less than the exact product, and so does this.
  const DeviceSpec device{"override", 10000000000, 1, 0};
  absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse("0.1551");
  ASSERT_TRUE(budget.ok());
  EXPECT_EQ(*budget->PerChipletBytes(device), 1550999999u);
}

TEST(MemoryBudgetPerChipletTest, AFractionOfAHugeDeviceStaysWithinIt) {
  // 2^64 - 1 bytes rounds up to 2^64 as a double; the budget is the device.
  const DeviceSpec device{"override", UINT64_MAX, 1, 0};
  for (const char* text : {"1.0", "100%", "0.999999999999999999"}) {
    SCOPED_TRACE(text);
    absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse(text);
    ASSERT_TRUE(budget.ok()) << budget.status();
    EXPECT_EQ(*budget->PerNodeBytes(device), UINT64_MAX);
  }
  absl::StatusOr<MemoryBudget> half = MemoryBudget::Parse("0.5");
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(*half->PerNodeBytes(device), uint64_t{1} << 63);
}

TEST(MemoryBudgetPerChipletTest, FractionsThatDoNotTerminateRoundDown) {
  absl::StatusOr<DeviceSpec> device = LookupDeviceSpec("RBLN-CA12");
  ASSERT_TRUE(device.ok());
  absl::StatusOr<uint64_t> bytes =
      MemoryBudget::Fraction(1, 3).PerChipletBytes(*device);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, 5625959765u);  // 16877879296 / 3 = 5625959765.33
}

TEST(MemoryBudgetPerChipletTest, RefusesBytesAboveTheDevice) {
  struct Case {
    std::string npu;
    std::string budget;
    std::string budget_bytes;
    std::string device_bytes;
  };
  const Case cases[] = {
      {"RBLN-CA12", "16GiB", "17179869184 bytes (16.00 GiB)",
       "16877879296 bytes (15.72 GiB)"},
      // 16GB is 16 GiB too: above an RBLN-CA's 15.72 GiB.
      {"RBLN-CA12", "16GB", "17179869184 bytes (16.00 GiB)",
       "16877879296 bytes (15.72 GiB)"},
      {"RBLN-CR13", "141GiB", "151397597184 bytes (141.00 GiB)",
       "150323855360 bytes (140.00 GiB)"},
      {"RBLN-CR13", "150323855361", "150323855361 bytes", "150323855360 bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.npu, " budget \"", c.budget, "\""));
    absl::StatusOr<DeviceSpec> device = LookupDeviceSpec(c.npu);
    ASSERT_TRUE(device.ok()) << device.status();
    absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse(c.budget);
    ASSERT_TRUE(budget.ok()) << budget.status();
    absl::StatusOr<uint64_t> bytes = budget->PerChipletBytes(*device);
    ASSERT_FALSE(bytes.ok());
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(bytes.status().message(), HasSubstr(c.budget_bytes));
    EXPECT_THAT(bytes.status().message(), HasSubstr(c.device_bytes));
  }
}

TEST(MemoryBudgetToStringTest, FractionsPrintAsPercentagesAndRoundTrip) {
  const std::pair<std::string, std::string> cases[] = {
      {"0.8", "80%"},
      {"80%", "80%"},
      {"1.0", "100%"},
      {"100%", "100%"},
      {"12.5%", "12.5%"},
      {"0.125", "12.5%"},
      {"0.333", "33.3%"},
      {"0.000000000000000001", "0.0000000000000001%"},
      {"0.123456789012345678", "12.3456789012345678%"},
  };
  for (const auto& [text, expected] : cases) {
    SCOPED_TRACE(absl::StrCat("input \"", text, "\""));
    absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse(text);
    ASSERT_TRUE(budget.ok()) << budget.status();
    EXPECT_EQ(budget->ToString(), expected);
    absl::StatusOr<MemoryBudget> again = MemoryBudget::Parse(expected);
    ASSERT_TRUE(again.ok()) << again.status();
    ExpectSameBudget(*again, *budget);
  }
}

TEST(MemoryBudgetToStringTest, NonTerminatingFractionsTruncate) {
  EXPECT_EQ(MemoryBudget::Fraction(1, 3).ToString(), "33.3333333333333333%");
  EXPECT_EQ(MemoryBudget::Fraction(2, 3).ToString(), "66.6666666666666666%");
  EXPECT_EQ(MemoryBudget::Fraction(3, 8).ToString(), "37.5%");
}

TEST(MemoryBudgetToStringTest, BytesPrintAsAWholeCount) {
  for (const char* text : {"10GB", "10737418240", "1.5TB"}) {
    SCOPED_TRACE(absl::StrCat("input \"", text, "\""));
    absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse(text);
    ASSERT_TRUE(budget.ok()) << budget.status();
    EXPECT_EQ(budget->ToString(), absl::StrCat(budget->bytes(), " bytes"));
    // "<n> bytes" is not in the grammar; "<n>B" is its parseable twin.
    absl::StatusOr<MemoryBudget> again =
        MemoryBudget::Parse(absl::StrCat(budget->bytes(), "B"));
    ASSERT_TRUE(again.ok()) << again.status();
    ExpectSameBudget(*again, *budget);
  }
  EXPECT_EQ(MemoryBudget::Bytes(10000000000).ToString(), "10000000000 bytes");
}

TEST(MemoryBudgetFreeTest, ParsesFreeAndFreePercent) {
  const AcceptCase cases[] = {
      {"free", MemoryBudget::Free(1, 1)},
      {" FREE ", MemoryBudget::Free(1, 1)},
      {"free-100%", MemoryBudget::Free(1, 1)},
      {"free-90%", MemoryBudget::Free(9, 10)},
      {"Free-12.5%", MemoryBudget::Free(125, 1000)},
      {"free-0.0000000000000001%", MemoryBudget::Free(1, 1000000000000000000)},
  };
  for (const AcceptCase& c : cases) {
    SCOPED_TRACE(absl::StrCat("input \"", c.text, "\""));
    absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse(c.text);
    ASSERT_TRUE(budget.ok()) << budget.status();
    EXPECT_TRUE(budget->is_free());
    EXPECT_FALSE(budget->is_fraction());
    EXPECT_EQ(budget->bytes(), 0u);
    ExpectSameBudget(*budget, c.expected);
  }
  // The fraction as a percentage budget keeps it, exact and as a double.
  absl::StatusOr<MemoryBudget> free90 = MemoryBudget::Parse("free-90%");
  ASSERT_TRUE(free90.ok()) << free90.status();
  EXPECT_EQ(free90->fraction_value(), 90.0 / 100);
  EXPECT_EQ(MemoryBudget::Parse("free")->fraction_value(), 1.0);
  // The same text without "free-" is a fraction of the available DRAM.
  EXPECT_FALSE(MemoryBudget::Parse("90%")->is_free());
}

TEST(MemoryBudgetFreeTest, RefusesOtherFormsSayingTheForm) {
  const RefuseCase cases[] = {
      {"free-", "has a percentage that is empty"},
      {"free-90", "has no % after the percentage"},
      {"free-0%", "has a percentage that is zero"},
      {"free-101%", "has a percentage that is above 100%"},
      {"free-90GB", "has no % after the percentage"},
      {"free-0.8", "has no % after the percentage"},
      {"free--5%", "has a sign"},
      {"free-1e2%", "uses an exponent"},
      {"free-12.34567890123456789%", "fractional digits in a percentage"},
      {"free90%", "expected nothing or -P% after free"},
      {"free 90%", "expected nothing or -P% after free"},
      {"freedom", "expected nothing or -P% after free"},
  };
  ExpectEachRefused(cases, "free-P% with P in (0, 100], like free-90%");
  // Every other refusal names the free forms among what is accepted.
  EXPECT_THAT(MemoryBudget::Parse("80").status().message(),
              HasSubstr("or free or free-90%"));
}

TEST(MemoryBudgetFreeTest, NeedsTheProbesFiguresToBecomeBytes) {
  absl::StatusOr<DeviceSpec> device = LookupDeviceSpec("RBLN-CA12");
  ASSERT_TRUE(device.ok()) << device.status();
  for (const char* text : {"free", "free-90%"}) {
    SCOPED_TRACE(text);
    absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse(text);
    ASSERT_TRUE(budget.ok()) << budget.status();
    for (const absl::StatusOr<uint64_t>& bytes :
         {budget->PerNodeBytes(*device), budget->PerChipletBytes(*device)}) {
      EXPECT_EQ(bytes.status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_THAT(bytes.status().message(),
                  HasSubstr(absl::StrCat("a ", text,
                                         " budget needs the live device "
                                         "probe's figures")));
    }
  }
}

TEST(MemoryBudgetFreeTest, PrintsAsParsedAndRoundTrips) {
  const std::pair<std::string, std::string> cases[] = {
      {"free", "free"},
      {"FREE-100%", "free"},
      {"free-90%", "free-90%"},
      {"free-12.50%", "free-12.5%"},
  };
  for (const auto& [text, expected] : cases) {
    SCOPED_TRACE(absl::StrCat("input \"", text, "\""));
    absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse(text);
    ASSERT_TRUE(budget.ok()) << budget.status();
    EXPECT_EQ(budget->ToString(), expected);
    absl::StatusOr<MemoryBudget> again = MemoryBudget::Parse(expected);
    ASSERT_TRUE(again.ok()) << again.status();
    ExpectSameBudget(*again, *budget);
  }
  EXPECT_EQ(MemoryBudget::Free(1, 3).ToString(), "free-33.3333333333333333%");
}

TEST(ParseByteSizeTest, ReadsRblnSmiSizesAsItPrintsThem) {
  const struct {
    const char* text;
    uint64_t bytes;
  } cases[] = {
      {"2.4GB", 2400000000},
      {"15.7GiB", 157 * kGiB / 10},  // floor(15.7 * 2^30)
      {"140.0GiB", 140 * kGiB},
      {"0.0B", 0},
      {"0B", 0},
      {" 512 KiB ", 512 * 1024},
      {"1.5kb", 1500},
      {"0.5B", 0},  // the fractional byte rounds down
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    absl::StatusOr<uint64_t> bytes = ParseByteSize(c.text, ByteUnits::kDecimal);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, c.bytes);
  }
}

TEST(ParseByteSizeTest, BinaryUnitsAreOptimumRblnsOwn) {
  EXPECT_EQ(*ParseByteSize("2GB", ByteUnits::kBinary), 2 * kGiB);
  EXPECT_EQ(*ParseByteSize("2GiB", ByteUnits::kBinary), 2 * kGiB);
  EXPECT_EQ(*ParseByteSize("1.5kb", ByteUnits::kBinary), 1536u);
  EXPECT_EQ(*ParseByteSize("3MB", ByteUnits::kDecimal), 3000000u);
}

TEST(ParseByteSizeTest, RefusesWithAnExplanation) {
  const struct {
    const char* text;
    const char* problem;
  } cases[] = {
      {"12.5XB", "\"12.5XB\" has an unknown unit \"XB\""},
      {"15.7G", "(did you mean 15.7GB?)"},
      {"12", "has no unit"},
      {"", "is empty"},
      {"-1GB", "has a sign"},
      {"N/A", "is not a number"},
      {"1e3B", "uses an exponent"},
      {"99999999999TB", "is too large"},
      {"80%", "unknown unit \"%\""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    absl::StatusOr<uint64_t> bytes = ParseByteSize(c.text, ByteUnits::kDecimal);
    ASSERT_FALSE(bytes.ok());
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(bytes.status().message()), HasSubstr(c.problem));
  }
}

TEST(ParseByteCountTest, BareCountsAreBytesAndUnitsAreSizes) {
  const struct {
    const char* text;
    uint64_t bytes;
    bool bare;
  } cases[] = {
      {"0", 0, true},
      {"80", 80, true},
      {" 65536 ", 65536, true},
      {"18446744073709551615", UINT64_MAX, true},
      {"64KiB", 64 * 1024, false},
      {"1.5GB", 1610612736, false},
      {".5KiB", 512, false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    bool bare = !c.bare;
    absl::StatusOr<uint64_t> bytes = ParseByteCount(c.text, &bare);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, c.bytes);
    EXPECT_EQ(bare, c.bare);
  }
  for (const char* text : {"0.5", "18446744073709551616", "10G", "-1", ""}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(ParseByteCount(text).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_THAT(ParseByteCount("10G").status().message(),
              HasSubstr("did you mean 10GB?"));
}

TEST(ParseDeviceListTest, ReadsIndexesInOrder) {
  const std::pair<std::string, std::vector<int>> cases[] = {
      {"2,3", {2, 3}},           {"3,2", {3, 2}}, {"0", {0}},
      {" 1 , 0 ,2 ", {1, 0, 2}}, {"255", {255}},  {"007", {7}},
  };
  for (const auto& [text, expected] : cases) {
    SCOPED_TRACE(absl::StrCat("input \"", text, "\""));
    absl::StatusOr<std::vector<int>> devices = ParseDeviceList(text);
    ASSERT_TRUE(devices.ok()) << devices.status();
    EXPECT_EQ(*devices, expected);
  }
}

TEST(ParseDeviceListTest, RefusesJunkEmptyItemsAndDuplicates) {
  const RefuseCase cases[] = {
      {"", "is empty"},
      {" ", "is empty"},
      {"2,,3", "has an empty item"},
      {"2,", "has an empty item"},
      {",2", "has an empty item"},
      {"rbln2", "has \"rbln2\", which is not an NPU index"},
      {"-1", "has \"-1\", which is not an NPU index"},
      {"+1", "which is not an NPU index"},
      {"2.0", "which is not an NPU index"},
      {"2 3", "which is not an NPU index"},
      {"0x2", "which is not an NPU index"},
      {"256", "has an index past 255"},
      {"99999999999999999999999", "has an index past 255"},
      {"2,3,2", "names device 2 twice"},
      {"02,2", "names device 2 twice"},
  };
  for (const RefuseCase& c : cases) {
    SCOPED_TRACE(absl::StrCat("input \"", c.text, "\""));
    absl::StatusOr<std::vector<int>> devices = ParseDeviceList(c.text);
    ASSERT_FALSE(devices.ok());
    EXPECT_EQ(devices.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(devices.status().message());
    EXPECT_THAT(message, HasSubstr(absl::StrCat("\"", c.text, "\"")));
    EXPECT_THAT(message, HasSubstr(c.problem));
    EXPECT_THAT(message, HasSubstr("like 2,3"));
  }
}

}  // namespace
}  // namespace rbln
