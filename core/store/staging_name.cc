#include "core/store/staging_name.h"

#include <sys/random.h>

#include <cstdint>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace rbln {
namespace {

constexpr absl::string_view kStagingInfix = ".staging-";
constexpr size_t kStagingRandomDigits = 16;

}  // namespace

std::string StagingNameFor(absl::string_view name) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string suffix(kStagingRandomDigits, '0');
  // From the kernel each time: a name someone could predict could be
  // created first, in their place.
  uint64_t bits = 0;
  if (getrandom(&bits, sizeof(bits), 0) != sizeof(bits)) {
    thread_local std::mt19937_64 fallback(std::random_device{}());
    bits = fallback();
  }
  for (char& c : suffix) {
    c = kHex[bits & 0xf];
    bits >>= 4;
  }
  return absl::StrCat(".", name, kStagingInfix, suffix);
}

std::optional<std::string> StagedArtifactName(absl::string_view entry) {
  if (!absl::ConsumePrefix(&entry, ".")) return std::nullopt;
  if (entry.size() <= kStagingInfix.size() + kStagingRandomDigits) {
    return std::nullopt;
  }
  const absl::string_view digits =
      entry.substr(entry.size() - kStagingRandomDigits);
  for (char c : digits) {
    if (!absl::ascii_isdigit(c) && !(c >= 'a' && c <= 'f')) return std::nullopt;
  }
  entry.remove_suffix(kStagingRandomDigits);
  if (!absl::ConsumeSuffix(&entry, kStagingInfix) || entry.empty()) {
    return std::nullopt;
  }
  return std::string(entry);
}

}  // namespace rbln
