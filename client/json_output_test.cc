#include "client/json_output.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "client/test_util.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "rbln/artifact/v1/artifact_service.pb.h"

namespace rbln::client {
namespace {

namespace v1 = ::rbln::artifact::v1;
using ::testing::HasSubstr;

TEST(FormatTest, JsonParsesBackWithProtoNamesAndDefaults) {
  v1::ResizeResponse reply;
  reply.set_artifact("llama");
  reply.set_previous_num_blocks(16);
  reply.set_new_num_blocks(16);
  reply.add_warnings("above the compiled count");
  absl::StatusOr<std::string> json = FormatJson(reply);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->back(), '\n');
  EXPECT_EQ(std::count(json->begin(), json->end(), '\n'), 1);
  EXPECT_THAT(*json, HasSubstr("\"previous_num_blocks\""));
  EXPECT_THAT(*json, HasSubstr("\"written\":false"));  // a default, printed
  v1::ResizeResponse back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(*json, &back).ok());
  EXPECT_THAT(back, EqualsProto(reply));
}

TEST(FormatTest, JsonHasTheVerifiedCountsOnlyAfterVerify) {
  v1::DescribeArtifactResponse reply;
  reply.set_artifact("llama");
  absl::StatusOr<std::string> json = FormatJson(reply);
  ASSERT_TRUE(json.ok()) << json.status();
  rapidjson::Document doc = ParseJsonLine(*json);
  EXPECT_FALSE(doc.HasMember("verified_segments")) << *json;
  EXPECT_FALSE(doc.HasMember("verified_bytes")) << *json;

  reply.set_verified_segments(0);  // set, even as 0: every graph external
  reply.set_verified_bytes(uint64_t{1} << 60);
  json = FormatJson(reply);
  ASSERT_TRUE(json.ok()) << json.status();
  doc = ParseJsonLine(*json);
  ASSERT_TRUE(doc.HasMember("verified_segments")) << *json;
  ASSERT_TRUE(doc["verified_segments"].IsUint64()) << *json;
  EXPECT_EQ(doc["verified_segments"].GetUint64(), 0u);
  ASSERT_TRUE(doc["verified_bytes"].IsUint64()) << *json;
  EXPECT_EQ(doc["verified_bytes"].GetUint64(), uint64_t{1} << 60);
}

TEST(FormatTest, JsonPrints64BitIntegersAsNumbers) {
  v1::DescribeArtifactResponse reply;
  reply.set_artifact("12345");  // a string of digits stays a string
  reply.set_kvcache_num_blocks(128);
  reply.set_num_nodes(4);
  v1::GraphInfo* graph = reply.add_graphs();
  // 2^53 + 1: a double cannot hold it; the literal is still exact.
  graph->set_file_bytes((uint64_t{1} << 53) + 1);
  graph->set_payload_bytes(uint64_t{18446744073709551615u});
  v1::BucketPlan* bucket = reply.add_buckets();
  bucket->set_headroom_bytes(-(int64_t{1} << 40));
  absl::StatusOr<std::string> json = FormatJson(reply);
  ASSERT_TRUE(json.ok()) << json.status();
  rapidjson::Document doc = ParseJsonLine(*json);
  ASSERT_TRUE(doc["artifact"].IsString());
  EXPECT_STREQ(doc["artifact"].GetString(), "12345");
  ASSERT_TRUE(doc["kvcache_num_blocks"].IsUint64()) << *json;
  EXPECT_EQ(doc["kvcache_num_blocks"].GetUint64(), 128u);
  EXPECT_TRUE(doc["compiled_num_blocks"].IsUint64()) << *json;  // default 0
  EXPECT_TRUE(doc["num_nodes"].IsUint());
  const rapidjson::Value& g = doc["graphs"][0];
  ASSERT_TRUE(g["file_bytes"].IsUint64()) << *json;
  EXPECT_EQ(g["file_bytes"].GetUint64(), (uint64_t{1} << 53) + 1);
  EXPECT_THAT(*json, HasSubstr("\"file_bytes\":9007199254740993"));
  EXPECT_THAT(*json, HasSubstr("\"payload_bytes\":18446744073709551615"));
  const rapidjson::Value& b = doc["buckets"][0];
  ASSERT_TRUE(b["headroom_bytes"].IsInt64()) << *json;
  EXPECT_EQ(b["headroom_bytes"].GetInt64(), -(int64_t{1} << 40));
  // Still proto3 JSON: protobuf reads it back.
  v1::DescribeArtifactResponse back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(*json, &back).ok());
  EXPECT_THAT(back, EqualsProto(reply));
}

}  // namespace
}  // namespace rbln::client
