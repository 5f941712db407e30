// `rbln-artifact --json`: a reply, or an error object, as one line of JSON.
//
// Thread-safe: pure functions.
#ifndef RBLN_CLIENT_JSON_OUTPUT_H_
#define RBLN_CLIENT_JSON_OUTPUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "rapidjson/document.h"
#include "rbln/artifact/v1/artifact_service.pb.h"

namespace rbln::client {

// The reply as one line of JSON with proto field names and every field
// present. Unlike proto3's JSON mapping, 64-bit integers are JSON numbers,
// printed as exact integer literals even above 2^53 (where a reader that
// parses numbers as doubles, such as jq, rounds them; counts stay below 2^31
// and byte sizes far below 2^53).
absl::StatusOr<std::string> FormatJson(const google::protobuf::Message& reply);

// `--list --json`, JSON Lines as the pages come: one object per artifact of
// `page` (the fields of ArtifactSummary); once the last page is in, one per
// entry skipped (its artifact and skipped_reason), then {"not_readable": N}
// when N > 0.
absl::StatusOr<std::string> FormatListPageJson(
    const rbln::artifact::v1::ListArtifactsResponse& page);
std::string FormatListEndJson(
    const std::vector<rbln::artifact::v1::SkippedEntry>& skipped,
    uint64_t not_readable);

// `doc` as one line of JSON and a newline.
std::string ToJsonLine(const rapidjson::Value& doc);

}  // namespace rbln::client

#endif  // RBLN_CLIENT_JSON_OUTPUT_H_
