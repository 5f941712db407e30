// Helpers of the client's unit tests (*_test.cc in client/): protos from
// text and compared, JSON lines parsed back, a typical write's options.
// Test code only; failed checks are reported through gtest.
#ifndef RBLN_CLIENT_TEST_UTIL_H_
#define RBLN_CLIENT_TEST_UTIL_H_

#include <algorithm>
#include <string>

#include "client/options.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"

namespace rbln::client {

// `text` (protobuf text format) as a Message; a failed parse fails the test.
template <typename Message>
Message FromText(const std::string& text) {
  Message m;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &m)) << text;
  return m;
}

// The argument equals the proto `expected`; on mismatch, the difference.
MATCHER_P(EqualsProto, expected, "") {
  std::string diff;
  google::protobuf::util::MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  if (differencer.Compare(arg, expected)) return true;
  *result_listener << diff;
  return false;
}

// `text` as one line of JSON holding an object; anything else fails the test.
inline rapidjson::Document ParseJsonLine(const std::string& text) {
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_EQ(text.back(), '\n');
  rapidjson::Document doc;
  doc.Parse(text.c_str());
  EXPECT_FALSE(doc.HasParseError()) << text;
  EXPECT_TRUE(doc.IsObject()) << text;
  return doc;
}

// An in-place --set-kvcache-num-blocks of /srv/store/llama, or a copy of it
// to `output_dir`.
inline CliOptions Writer(const std::string& output_dir = "") {
  CliOptions o;
  o.operation = Operation::kSet;
  o.model_id = "/srv/store/llama";
  o.output_dir = output_dir;
  return o;
}

}  // namespace rbln::client

#endif  // RBLN_CLIENT_TEST_UTIL_H_
