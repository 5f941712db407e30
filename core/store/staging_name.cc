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
constexpr absl::string_view kRetiredInfix = ".retired-";
constexpr size_t kRandomDigits = 16;

// `.<name><infix><16 random lowercase hex digits>`.
std::string DecoratedName(absl::string_view name, absl::string_view infix) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string suffix(kRandomDigits, '0');
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
  return absl::StrCat(".", name, infix, suffix);
}

// The <name> of an entry that is exactly DecoratedName(<name>, infix).
std::optional<std::string> UndecoratedName(absl::string_view entry,
                                           absl::string_view infix) {
  if (!absl::ConsumePrefix(&entry, ".")) return std::nullopt;
  if (entry.size() <= infix.size() + kRandomDigits) return std::nullopt;
  const absl::string_view digits = entry.substr(entry.size() - kRandomDigits);
  for (char c : digits) {
    if (!absl::ascii_isdigit(c) && !(c >= 'a' && c <= 'f')) return std::nullopt;
  }
  entry.remove_suffix(kRandomDigits);
  if (!absl::ConsumeSuffix(&entry, infix) || entry.empty()) {
    return std::nullopt;
  }
  return std::string(entry);
}

}  // namespace

std::string StagingNameFor(absl::string_view name) {
  return DecoratedName(name, kStagingInfix);
}

std::optional<std::string> StagedArtifactName(absl::string_view entry) {
  return UndecoratedName(entry, kStagingInfix);
}

std::string RetiredNameFor(absl::string_view name) {
  return DecoratedName(name, kRetiredInfix);
}

std::optional<std::string> RetiredArtifactName(absl::string_view entry) {
  return UndecoratedName(entry, kRetiredInfix);
}

}  // namespace rbln
