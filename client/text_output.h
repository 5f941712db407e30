// What `rbln-artifact` prints for a reply without --json: optimum-rbln-cli's
// lines where it has them, tables and fields for the rest, and the warnings
// and progress shown on stderr.
//
// Thread-safe: pure functions.
#ifndef RBLN_CLIENT_TEXT_OUTPUT_H_
#define RBLN_CLIENT_TEXT_OUTPUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "client/options.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "rbln/artifact/v1/artifact_service.pb.h"

namespace rbln::client {

// Replies (stdout).
// The bare count and a newline, as optimum-rbln-cli prints it.
std::string FormatGet(const rbln::artifact::v1::GetKvcacheNumBlocksResponse&);
// What a write prints. On stdout exactly optimum-rbln-cli's lines, so that
// a script parsing them works unchanged: for a budget "memory_budget B fits
// kvcache_num_blocks=T" (B as given), then "Set kvcache_num_blocks to T for
// artifact at DIR" (DIR: options.written_dir, else the reply's store joined
// with the name written); a dry run prints "kvcache_num_blocks: P -> T (dry
// run: nothing written)" instead of the Set line. On stderr what this client
// tells beyond that: "kvcache_num_blocks: P -> T" with a suffix for a
// symbolic link followed ("current -> v2"), no-ops and output directories
// (not for a dry run: that line is on stdout), and for a budget the budget
// and the bucket that limited the count, and where the DRAM figures came
// from.
struct ResizeOutput {
  std::string out;
  std::string err;
};
ResizeOutput FormatResize(const CliOptions& options,
                          const rbln::artifact::v1::ResizeResponse& reply);
// The artifact's facts and its memory table; after --verify, last, the line
// "verified: N payload segments, B bytes, every checksum matched" and one
// naming the graph files of an external codec, which carry no checksums.
// Describe and --list show an artifact named through a symbolic link the
// store follows as "current -> v2".
// FitTogether's reply (--colocate): a table of the members (counts, and
// the bucket that stopped each) and one of the buckets (budget, each
// member's use, the sum, the headroom), and for --describe whether the
// group fits at its current counts.
std::string FormatFitTogether(
    const rbln::artifact::v1::FitTogetherResponse& reply);
std::string FormatDescribe(
    const rbln::artifact::v1::DescribeArtifactResponse& reply);
// `--list`, printed page by page as the pages come: the roots (first page)
// and a table of each page's artifacts (the header on the first page only;
// columns are aligned within a page), then, once the last page is in, what
// every page skipped and how many artifacts were left out. FormatList is
// one page that is also the last.
struct ListTotals {
  bool any_artifacts = false;
  std::vector<rbln::artifact::v1::SkippedEntry> skipped;
  uint64_t not_readable = 0;
  // Adds what `page` reports to the totals.
  void Add(const rbln::artifact::v1::ListArtifactsResponse& page);
};
std::string FormatListPage(
    const rbln::artifact::v1::ListArtifactsResponse& page, bool first);
std::string FormatListEnd(const ListTotals& totals);
std::string FormatList(const rbln::artifact::v1::ListArtifactsResponse& reply);
std::string FormatDeviceInfo(
    const rbln::artifact::v1::GetDeviceInfoResponse& reply);
// "rbln-artifactd 0.1.0 (commit …) on HOST", then the store, the read-only
// roots, the listeners, the codec and the caller with its role.
std::string FormatServerInfo(
    const rbln::artifact::v1::GetServerInfoResponse& reply);

// Diagnostics (stderr).
// One "warning: ..." line per warning.
std::string FormatWarnings(
    const google::protobuf::RepeatedPtrField<std::string>& warnings);
// "\r[#####.....]  45%  1.20 / 2.60 GiB" (no newline: redrawn in place).
std::string FormatProgressBar(uint64_t bytes_done, uint64_t bytes_total);
// "waiting for another write to NAME to finish…", for a write of `options`
// that waits for another writer's lock (NAME: --model-id, and --output-dir
// when given, either of which may be the one locked).
std::string FormatWaitingForLock(const CliOptions& options);

}  // namespace rbln::client

#endif  // RBLN_CLIENT_TEXT_OUTPUT_H_
