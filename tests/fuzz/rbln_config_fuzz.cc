// Fuzz target: ParseRblnConfig and RewriteKvcacheNumBlocks
// (core/format/rbln_config.h) on arbitrary text, as a file in the store would
// reach them. The whole input is the JSON text, so the seeds are plain
// rbln_config.json files; the requested block count is picked from a fixed
// list by the input's length, which every insertion or deletion changes.
//
// Beyond what the sanitizers catch, it checks the rewrite's contract:
//  * a config that parses can be rewritten to any count;
//  * when the rewrite succeeds, the rewritten text parses and holds the
//    requested kvcache_num_blocks, with every other field as before when the
//    original parsed (a count of 0 is refused, since the parser needs >= 1);
//  * rewriting the rewritten text to the same count changes nothing.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/format/rbln_config.h"
#include "tests/fuzz/fuzz_check.h"

namespace rbln {
namespace {

constexpr absl::string_view kPath = "/fuzz/rbln_config.json";

// The edges of the range (the parser refuses 0 and counts above
// kMaxNumBlocks), beyond it, and ordinary counts.
constexpr uint64_t kRequestedCounts[] = {1,
                                         2,
                                         77,
                                         4096,
                                         kMaxNumBlocks,
                                         kMaxNumBlocks + 1,
                                         uint64_t{1} << 53,
                                         std::numeric_limits<uint64_t>::max(),
                                         0};

// The fields a rewrite must leave alone, as text, for comparing and showing.
std::string OtherFields(const RblnConfig& c) {
  return absl::StrCat(
      "cls_name=", c.cls_name, " block_size=", c.kvcache_block_size,
      " max_seq_len=", c.max_seq_len, " batch_size=", c.batch_size,
      " attn_impl=", c.attn_impl, " metas=", c.kvcache_metas.size(),
      " phases=", c.phases.size(),
      " decoder_batch_sizes=", c.decoder_batch_sizes.size(),
      " num_devices=", c.num_devices, " npu=", c.npu,
      " metas_key=", c.metas_key, " submodule=", c.decoder_submodule);
}

void FuzzRblnConfig(absl::string_view json) {
  const uint64_t requested =
      kRequestedCounts[json.size() % std::size(kRequestedCounts)];
  absl::StatusOr<RblnConfig> original = ParseRblnConfig(json, kPath);
  absl::StatusOr<std::string> rewritten =
      RewriteKvcacheNumBlocks(json, requested, kPath);
  if (original.ok()) {
    RBLN_FUZZ_CHECK(rewritten.ok(), "a parsable config cannot be rewritten: ",
                    rewritten.status().ToString());
  }
  if (!rewritten.ok()) return;

  absl::StatusOr<RblnConfig> reparsed = ParseRblnConfig(*rewritten, kPath);
  if (requested == 0 || requested > kMaxNumBlocks) {
    RBLN_FUZZ_CHECK(!reparsed.ok(), "kvcache_num_blocks ", requested,
                    " was accepted");
  } else if (original.ok()) {
    RBLN_FUZZ_CHECK(reparsed.ok(), "the rewritten text does not parse: ",
                    reparsed.status().ToString(), "\n", *rewritten);
    RBLN_FUZZ_CHECK(reparsed->kvcache_num_blocks == requested, "asked for ",
                    requested, ", got ", reparsed->kvcache_num_blocks);
    RBLN_FUZZ_CHECK(OtherFields(*reparsed) == OtherFields(*original),
                    "before: ", OtherFields(*original),
                    "\nafter:  ", OtherFields(*reparsed));
  } else if (reparsed.ok()) {
    // The original was refused for its old count (e.g. a string) or for
    // another field; whatever now parses must hold the new count.
    RBLN_FUZZ_CHECK(reparsed->kvcache_num_blocks == requested, "asked for ",
                    requested, ", got ", reparsed->kvcache_num_blocks);
  } else {
    // The rewrite writes JSON, so the parser may refuse a field, not syntax.
    RBLN_FUZZ_CHECK(!absl::IsInvalidArgument(reparsed.status()),
                    reparsed.status().ToString(), "\n", *rewritten);
  }

  // A rewrite changes the count's digits and nothing else.
  const size_t prefix = std::mismatch(json.begin(), json.end(),
                                      rewritten->begin(), rewritten->end())
                            .first -
                        json.begin();
  const size_t suffix = std::mismatch(json.rbegin(), json.rend(),
                                      rewritten->rbegin(), rewritten->rend())
                            .first -
                        json.rbegin();
  RBLN_FUZZ_CHECK(
      prefix + suffix >= json.size() ||
          json.substr(prefix, json.size() - prefix - suffix)
                  .find_first_not_of("0123456789") == absl::string_view::npos,
      "a rewrite changed more than digits:\n", json, "\n---\n", *rewritten);
  if (requested == 0) return;  // a count of 0 is not rewritten again
  absl::StatusOr<std::string> twice =
      RewriteKvcacheNumBlocks(*rewritten, requested, kPath);
  RBLN_FUZZ_CHECK(twice.ok(), twice.status().ToString());
  RBLN_FUZZ_CHECK(*twice == *rewritten, "a second rewrite changed the text:\n",
                  *rewritten, "\n---\n", *twice);
}

}  // namespace
}  // namespace rbln

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rbln::FuzzRblnConfig(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
