// The codec protocol's wire encoding (docs/codec-protocol.md): the requests
// as the page shows them, its replies decoded, and every way a reply can fail
// to be protocol.
#include "core/format/codec_wire.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The inspect reply of docs/codec-protocol.md, on one line.
constexpr char kInspectReply[] =
    R"({"id":2,"ok":true,"granularity":"chiplet","num_nodes":1,)"
    R"("buckets_per_node":2,"other":{"weights":[[4404019200,4404019200]],)"
    R"("program":[[12582912,12582912]]},"kv_tensors":{)"
    R"("key_value_cache_0":[[4194304,4194304]],)"
    R"("key_value_cache_1":[[4194304,4194304]]}})";

// An ok inspect reply to request 2 with `fields` (after "ok").
std::string InspectReply(absl::string_view fields) {
  return absl::StrCat(R"({"id":2,"ok":true,)", fields, "}");
}

// An inspect reply of one node of two chiplets with `kv` as its kv_tensors.
std::string InspectWithKv(absl::string_view kv) {
  return InspectReply(absl::StrCat(
      R"("granularity":"chiplet","num_nodes":1,"buckets_per_node":2,)",
      R"("other":{},"kv_tensors":)", kv));
}

std::string DecodeError(absl::string_view line, int64_t id = 2,
                        CodecOp op = CodecOp::kInspect) {
  absl::StatusOr<CodecReply> reply = DecodeCodecReply(line, id, op);
  if (reply.ok()) return "decoded";
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument)
      << reply.status();
  return std::string(reply.status().message());
}

TEST(CodecWireTest, EncodesRequestsAsTheProtocolPageShowsThem) {
  EXPECT_EQ(EncodeHelloRequest(1),
            "{\"id\":1,\"op\":\"hello\",\"protocol\":1}\n");
  EXPECT_EQ(
      EncodeCodecRequest(2, {.op = CodecOp::kInspect, .file = "prefill.rbln"}),
      "{\"id\":2,\"op\":\"inspect\",\"file\":\"prefill.rbln\","
      "\"fds\":[\"source\"]}\n");
  EXPECT_EQ(
      EncodeCodecRequest(3, {.op = CodecOp::kRescale,
                             .file = "prefill.rbln",
                             .out_name = "prefill.rbln",
                             .factors = {{"key_value_cache_0", {48, 32}},
                                         {"key_value_cache_1", {48, 32}}}}),
      "{\"id\":3,\"op\":\"rescale\",\"file\":\"prefill.rbln\",\"out_name\":"
      "\"prefill.rbln\",\"factors\":{\"key_value_cache_0\":[48,32],"
      "\"key_value_cache_1\":[48,32]},\"fds\":[\"source\",\"out_dir\"]}\n");
}

TEST(CodecWireTest, ARequestIsOneLineWhateverItNames) {
  const std::string line =
      EncodeCodecRequest(7, {.op = CodecOp::kRescale,
                             .file = "a\nb\"c",
                             .out_name = "x\n",
                             .factors = {{"kv\n0", {2, 1}}}});
  EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
  EXPECT_THAT(line, HasSubstr(R"("file":"a\nb\"c")"));
}

TEST(CodecWireTest, DecodesAHello) {
  absl::StatusOr<CodecHello> hello =
      DecodeHelloReply(R"({"id":1,"ok":true,"protocol":1,"codec":"rebel",)"
                       R"("codec_version":"0.0.0+fake","api":"per_chiplet",)"
                       R"("can_rescale":true,"uid":65534})",
                       1);
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_EQ(hello->codec, "rebel");
  EXPECT_EQ(hello->codec_version, "0.0.0+fake");
  EXPECT_EQ(hello->api, "per_chiplet");
  EXPECT_TRUE(hello->can_rescale);
  EXPECT_EQ(hello->uid, 65534);
}

TEST(CodecWireTest, RefusesAHelloThatIsNotProtocolOne) {
  const std::string fields =
      R"("codec":"c","codec_version":"1","api":"per_node","can_rescale":false)";
  absl::StatusOr<CodecHello> other = DecodeHelloReply(
      absl::StrCat(R"({"id":1,"ok":true,"protocol":2,)", fields, "}"), 1);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.status().message(), HasSubstr("speaks protocol 2"));
  for (const std::string& line :
       {std::string("hello"), std::string("[1]"),
        absl::StrCat(R"({"id":2,"ok":true,"protocol":1,)", fields, "}"),
        absl::StrCat(R"({"id":1,"ok":false,"protocol":1,)", fields, "}"),
        absl::StrCat(R"({"id":1,"protocol":1,)", fields, "}")}) {
    absl::StatusOr<CodecHello> hello = DecodeHelloReply(line, 1);
    EXPECT_EQ(hello.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(hello.status().message(),
                HasSubstr(R"("id": 1 and "ok": true)"))
        << line;
  }
  EXPECT_THAT(DecodeHelloReply(R"({"id":1,"ok":true,"protocol":1,"codec":"c",)"
                               R"("codec_version":"1","api":"per_gpu",)"
                               R"("can_rescale":true})",
                               1)
                  .status()
                  .message(),
              HasSubstr("\"api\""));
  EXPECT_THAT(DecodeHelloReply(R"({"id":1,"ok":true,"protocol":1,"codec":"c",)"
                               R"("codec_version":"1","api":"per_node"})",
                               1)
                  .status()
                  .message(),
              HasSubstr("can_rescale"));
}

TEST(CodecWireTest, DecodesTheInspectReplyOfTheProtocolPage) {
  absl::StatusOr<CodecReply> reply =
      DecodeCodecReply(kInspectReply, 2, CodecOp::kInspect);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_FALSE(reply->failure.has_value());
  const ContainerFacts& facts = reply->facts;
  EXPECT_EQ(facts.granularity, BucketGranularity::kChiplet);
  EXPECT_EQ(facts.num_nodes, 1u);
  EXPECT_EQ(facts.buckets_per_node, 2u);
  ASSERT_EQ(facts.other.size(), 2u);  // sorted by key
  EXPECT_EQ(facts.other[0].key, "program");
  EXPECT_THAT(facts.other[0].bytes, ElementsAre(12582912, 12582912));
  EXPECT_EQ(facts.other[1].key, "weights");
  ASSERT_EQ(facts.kv_tensors.size(), 2u);  // in the reply's order
  EXPECT_EQ(facts.kv_tensors[0].name, "key_value_cache_0");
  EXPECT_THAT(facts.kv_tensors[1].bytes, ElementsAre(4194304, 4194304));
  EXPECT_FALSE(facts.kv_tensors[0].resizable.has_value());
  EXPECT_EQ(facts.npu, "");
  EXPECT_EQ(facts.compiled_num_blocks, 0u);
}

TEST(CodecWireTest, ReadsTheOptionalFactsAndTheNodeGranularity) {
  absl::StatusOr<CodecReply> reply = DecodeCodecReply(
      InspectReply(R"("granularity":"node","num_nodes":2,)"
                   R"("buckets_per_node":1,"other":{"w":[[1],[2]]},)"
                   R"("kv_tensors":{"kv":[[3],[4]]},"npu":"RBLN-CA12",)"
                   R"("compiled_num_blocks":64)"),
      2, CodecOp::kInspect);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->facts.granularity, BucketGranularity::kNode);
  EXPECT_THAT(reply->facts.kv_tensors[0].bytes, ElementsAre(3, 4));
  EXPECT_EQ(reply->facts.npu, "RBLN-CA12");
  EXPECT_EQ(reply->facts.compiled_num_blocks, 64u);
}

TEST(CodecWireTest, DecodesEachErrorCode) {
  const struct {
    const char* code;
    CodecErrorCode expected;
  } kCases[] = {{"BAD_REQUEST", CodecErrorCode::kBadRequest},
                {"UNREADABLE", CodecErrorCode::kUnreadable},
                {"OLDER_COMPILER", CodecErrorCode::kOlderCompiler},
                {"FAILED", CodecErrorCode::kFailed}};
  for (const auto& c : kCases) {
    absl::StatusOr<CodecReply> reply = DecodeCodecReply(
        absl::StrCat(R"({"id":3,"ok":false,"error":{"code":")", c.code,
                     R"(","message":"what\nwent wrong"}})"),
        3, CodecOp::kRescale);
    ASSERT_TRUE(reply.ok()) << c.code << ": " << reply.status();
    ASSERT_TRUE(reply->failure.has_value());
    EXPECT_EQ(reply->failure->code, c.expected);
    EXPECT_EQ(reply->failure->message, "what\\nwent wrong");
  }
  EXPECT_THAT(DecodeError(R"({"id":2,"ok":false,"error":{"code":"OOPS",)"
                          R"("message":"m"}})"),
              HasSubstr("unknown error code"));
  EXPECT_THAT(DecodeError(R"({"id":2,"ok":false,"error":{"code":"FAILED"}})"),
              HasSubstr("without a string"));
}

TEST(CodecWireTest, CutsALongErrorMessage) {
  absl::StatusOr<CodecReply> reply = DecodeCodecReply(
      absl::StrCat(R"({"id":2,"ok":false,"error":{"code":"FAILED","message":")",
                   std::string(5000, 'x'), R"("}})"),
      2, CodecOp::kInspect);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_LE(reply->failure->message.size(), kMaxCodecMessageBytes);
}

TEST(CodecWireTest, AnOkRescaleNeedsNothingMore) {
  EXPECT_TRUE(
      DecodeCodecReply(R"({"id":3,"ok":true})", 3, CodecOp::kRescale).ok());
  EXPECT_EQ(DecodeError(R"({"id":3,"ok":true})", 3), "no \"granularity\"");
}

TEST(CodecWireTest, RefusesWhatIsNotAReplyToTheRequest) {
  EXPECT_EQ(DecodeError("not json"), "not a JSON object");
  EXPECT_EQ(DecodeError("[2]"), "not a JSON object");
  EXPECT_EQ(DecodeError("{\"id\":2,\"ok\":true,\xff}"), "not a JSON object");
  EXPECT_EQ(DecodeError(kInspectReply, 3), "not the id 3 of the request");
  EXPECT_EQ(DecodeError(R"({"id":"2","ok":true})"),
            "not the id 2 of the request");
  EXPECT_EQ(DecodeError(R"({"id":2,"ok":1})"), "no boolean \"ok\"");
}

TEST(CodecWireTest, RefusesFactsOutOfShapeOrBounds) {
  const std::string counts =
      R"("granularity":"chiplet","num_nodes":1,"buckets_per_node":2,)";
  EXPECT_THAT(DecodeError(InspectWithKv(R"({"kv":[[1,2],[3,4]]})")),
              HasSubstr("not a list of 1 lists"));
  EXPECT_THAT(DecodeError(InspectWithKv(R"({"kv":[[1]]})")),
              HasSubstr("not 2 numbers"));
  EXPECT_THAT(DecodeError(InspectWithKv(R"({"kv":[[1,-1]]})")),
              HasSubstr("0 .. 2^63-1"));
  EXPECT_THAT(DecodeError(InspectWithKv(R"({"kv":[[1,9223372036854775808]]})")),
              HasSubstr("0 .. 2^63-1"));
  EXPECT_THAT(DecodeError(InspectWithKv(R"({"kv":[[1,1]],"kv":[[1,1]]})")),
              HasSubstr("a name given twice"));
  EXPECT_THAT(DecodeError(InspectWithKv(R"({"":[[1,1]]})")),
              HasSubstr("a name of 0 bytes"));
  EXPECT_THAT(DecodeError(InspectWithKv(absl::StrCat(
                  R"({")", std::string(256, 'k'), R"(":[[1,1]]})"))),
              HasSubstr("a name of 256 bytes"));
  EXPECT_THAT(DecodeError(InspectReply(R"("granularity":"node","num_nodes":1,)"
                                       R"("buckets_per_node":2,"other":{},)"
                                       R"("kv_tensors":{})")),
              HasSubstr("buckets_per_node other than 1"));
  EXPECT_THAT(
      DecodeError(InspectReply(R"("granularity":"chiplet",)"
                               R"("num_nodes":0,"buckets_per_node":1)")),
      HasSubstr("\"num_nodes\" is not an integer in 1 .. 256"));
  EXPECT_THAT(DecodeError(InspectReply(absl::StrCat(
                  counts, R"("other":{},"kv_tensors":{},"npu":"")"))),
              HasSubstr("\"npu\""));
  EXPECT_THAT(
      DecodeError(InspectReply(absl::StrCat(
          counts, R"("other":{},"kv_tensors":{},"compiled_num_blocks":0)"))),
      HasSubstr("\"compiled_num_blocks\""));
  EXPECT_THAT(DecodeError(InspectReply(absl::StrCat(counts, R"("other":[])"))),
              HasSubstr("no object \"other\""));
}

}  // namespace
}  // namespace rbln
