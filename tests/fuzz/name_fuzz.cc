// Fuzz target: CanonicalArtifactName (core/store/artifact_name.h) on arbitrary
// names, as a caller's request would reach it, with the store resolved at
// /srv/store and given as /data/store.
//
// Beyond what the sanitizers catch, it checks:
//  * a canonical name is relative, not empty, at most kMaxArtifactNameBytes,
//    and has no NUL, no empty component, no component starting with '.'
//    (so none is "." or ".."; "a..b" is an ordinary name) and none longer
//    than kMaxNameComponentBytes;
//  * it is a fixed point: canonicalising it again gives it back, and so does
//    canonicalising it as an absolute path under either root;
//  * every error message fits in kMaxStatusMessageBytes (core/text.h), so
//    that a hostile name cannot make the status outgrow gRPC's metadata.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/store/artifact_name.h"
#include "core/text.h"
#include "tests/fuzz/fuzz_check.h"

namespace rbln {
namespace {

constexpr absl::string_view kRoot = "/srv/store";
constexpr absl::string_view kGivenRoot = "/data/store";

absl::StatusOr<std::string> Canonicalise(absl::string_view name) {
  absl::StatusOr<std::string> canonical =
      CanonicalArtifactName(name, kRoot, kGivenRoot);
  RBLN_FUZZ_CHECK(canonical.ok() || canonical.status().message().size() <=
                                        kMaxStatusMessageBytes,
                  "a message of ", canonical.status().message().size(),
                  " bytes for ", Echo(name), ": ",
                  canonical.status().message());
  return canonical;
}

void CheckCanonical(absl::string_view name, const std::string& canonical) {
  const std::string shown = absl::StrCat(Echo(name), " -> ", Echo(canonical));
  RBLN_FUZZ_CHECK(!canonical.empty() && canonical.front() != '/' &&
                      canonical.size() <= kMaxArtifactNameBytes &&
                      !absl::StrContains(canonical, '\0'),
                  shown);
  const std::vector<absl::string_view> parts = absl::StrSplit(canonical, '/');
  for (absl::string_view part : parts) {
    RBLN_FUZZ_CHECK(!part.empty() && part.front() != '.' &&
                        part.size() <= kMaxNameComponentBytes,
                    shown);
  }
  for (absl::string_view root : {absl::string_view(), kRoot, kGivenRoot}) {
    const std::string again =
        root.empty() ? canonical : absl::StrCat(root, "/", canonical);
    if (again.size() > kMaxArtifactNameBytes) continue;
    absl::StatusOr<std::string> fixed = Canonicalise(again);
    RBLN_FUZZ_CHECK(fixed.ok() && *fixed == canonical, shown, "; ", Echo(again),
                    " -> ",
                    fixed.ok() ? Echo(*fixed) : fixed.status().ToString());
  }
}

void FuzzName(absl::string_view name) {
  absl::StatusOr<std::string> canonical = Canonicalise(name);
  if (canonical.ok()) CheckCanonical(name, *canonical);
}

}  // namespace
}  // namespace rbln

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rbln::FuzzName(absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
