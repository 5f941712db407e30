// `rbln-artifact --json`: a reply, or an error object, as one line of JSON.
//
// Thread-safe: pure functions.
#ifndef RBLN_CLIENT_JSON_OUTPUT_H_
#define RBLN_CLIENT_JSON_OUTPUT_H_

#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "rapidjson/document.h"

namespace rbln::client {

// The reply as one line of JSON with proto field names and every field
// present. Unlike proto3's JSON mapping, 64-bit integers are JSON numbers,
// printed as exact integer literals even above 2^53 (where a reader that
// parses numbers as doubles, such as jq, rounds them; counts stay below 2^31
// and byte sizes far below 2^53).
absl::StatusOr<std::string> FormatJson(const google::protobuf::Message& reply);

// `doc` as one line of JSON and a newline.
std::string ToJsonLine(const rapidjson::Value& doc);

}  // namespace rbln::client

#endif  // RBLN_CLIENT_JSON_OUTPUT_H_
