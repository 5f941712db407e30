#include "core/format/rbln_config.h"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kPath[] = "/a/rbln_config.json";

// A valid eager config: L / S = 8, B = 4.
constexpr char kMinimal[] = R"({
  "kvcache_num_blocks": 8,
  "max_seq_len": 8192,
  "batch_size": 4,
  "kvcache_block_size": 1024
})";

constexpr char kMetaEntry[] = R"({
  "name": "past_key_values_0",
  "layer_index": 0,
  "shape": [8, 8, 1024, 128],
  "layer_type": "full_attention",
  "is_auto": true,
  "dtype": "float16"
})";

std::string ReadTestdata(absl::string_view name) {
  return testing::ReadFileOrDie(
      testing::TestdataPath(absl::StrCat("rbln_config/", name)));
}

// `json` with member `key` set to the JSON text `value`, or removed when
// `value` is empty.
std::string WithMember(absl::string_view json, const char* key,
                       absl::string_view value) {
  rapidjson::Document doc;
  doc.Parse(json.data(), json.size());
  EXPECT_FALSE(doc.HasParseError()) << json;
  doc.RemoveMember(key);
  if (!value.empty()) {
    rapidjson::Document member(&doc.GetAllocator());
    member.Parse(value.data(), value.size());
    EXPECT_FALSE(member.HasParseError()) << value;
    doc.AddMember(rapidjson::Value(key, doc.GetAllocator()),
                  rapidjson::Value(member, doc.GetAllocator()),
                  doc.GetAllocator());
  }
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  doc.Accept(writer);
  return buffer.GetString();
}

absl::StatusOr<RblnConfig> Parse(absl::string_view json) {
  return ParseRblnConfig(json, kPath);
}

// The error has `code` and a message naming `field` and the path.
void ExpectError(const absl::Status& status, absl::StatusCode code,
                 absl::string_view field) {
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("'", field, "'")));
  EXPECT_THAT(status.message(), HasSubstr(kPath));
}

// ---------------------------------------------------------------------------
// Golden file: a realistic optimum-rbln rbln_config.json, written by
// Python's json.dump(indent=2), and the same with kvcache_num_blocks = 77.

constexpr char kGolden[] = "llama_ca12_tp4.json";
constexpr char kGolden77[] = "llama_ca12_tp4.rewritten_77.json";

TEST(RblnConfigGoldenTest, ParsesEveryField) {
  absl::StatusOr<RblnConfig> config = Parse(ReadTestdata(kGolden));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->cls_name, "RBLNLlamaForCausalLM");
  EXPECT_EQ(config->kvcache_num_blocks, 20u);
  EXPECT_EQ(config->kvcache_block_size, 16384u);
  EXPECT_EQ(config->max_seq_len, 131072u);
  EXPECT_EQ(config->batch_size, 4u);
  EXPECT_EQ(config->attn_impl, "flash_attn");
  EXPECT_THAT(config->phases, ElementsAre("prefill", "decode"));
  EXPECT_THAT(config->decoder_batch_sizes, ElementsAre(4u, 1u));
  EXPECT_EQ(config->num_devices, 4u);   // from _compile_cfgs
  EXPECT_EQ(config->npu, "RBLN-CA12");  // from _compile_cfgs
  ASSERT_EQ(config->kvcache_metas.size(), 4u);
  const KvcacheMeta& meta = config->kvcache_metas[3];
  EXPECT_EQ(meta.name, "past_key_values_3");
  EXPECT_EQ(meta.layer_index, 1);
  EXPECT_THAT(meta.shape, ElementsAre(20, 8, 16384, 128));
  EXPECT_EQ(meta.layer_type, "full_attention");
  EXPECT_TRUE(meta.is_auto);
  EXPECT_EQ(meta.dtype, "float16");
  EXPECT_EQ(config->NumFullBlocks(), 32u);  // (131072 / 16384) * 4
  EXPECT_EQ(config->NumMinBlocks(), 9u);    // min(8 + 1, 32)
}

TEST(RblnConfigGoldenTest, RewriteMatchesPythonByteForByte) {
  absl::StatusOr<std::string> out =
      RewriteKvcacheNumBlocks(ReadTestdata(kGolden), 77, kPath);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, ReadTestdata(kGolden77));
}

TEST(RblnConfigGoldenTest, RewriteToTheSameCountIsIdentity) {
  std::string input = ReadTestdata(kGolden);
  absl::StatusOr<std::string> out = RewriteKvcacheNumBlocks(input, 20, kPath);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, input);
}

TEST(RblnConfigGoldenTest, RewriteChangesOnlyTheCount) {
  std::string input = ReadTestdata(kGolden);
  absl::StatusOr<std::string> out = RewriteKvcacheNumBlocks(input, 77, kPath);
  ASSERT_TRUE(out.ok()) << out.status();
  absl::StatusOr<RblnConfig> before = Parse(input);
  absl::StatusOr<RblnConfig> after = Parse(*out);
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->kvcache_num_blocks, 77u);
  EXPECT_EQ(after->cls_name, before->cls_name);
  EXPECT_EQ(after->kvcache_block_size, before->kvcache_block_size);
  EXPECT_EQ(after->max_seq_len, before->max_seq_len);
  EXPECT_EQ(after->batch_size, before->batch_size);
  EXPECT_EQ(after->attn_impl, before->attn_impl);
  EXPECT_EQ(after->phases, before->phases);
  EXPECT_EQ(after->decoder_batch_sizes, before->decoder_batch_sizes);
  EXPECT_EQ(after->num_devices, before->num_devices);
  EXPECT_EQ(after->npu, before->npu);
  ASSERT_EQ(after->kvcache_metas.size(), before->kvcache_metas.size());
  for (size_t i = 0; i < after->kvcache_metas.size(); ++i) {
    const KvcacheMeta& a = after->kvcache_metas[i];
    const KvcacheMeta& b = before->kvcache_metas[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.layer_index, b.layer_index);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(a.layer_type, b.layer_type);
    EXPECT_EQ(a.is_auto, b.is_auto);
    EXPECT_EQ(a.dtype, b.dtype);
  }

  // The DOMs differ in the top-level count only; the nested
  // draft_model.kvcache_num_blocks keeps its value.
  rapidjson::Document old_doc, new_doc;
  old_doc.Parse(input.data(), input.size());
  new_doc.Parse(out->data(), out->size());
  ASSERT_FALSE(old_doc.HasParseError());
  ASSERT_FALSE(new_doc.HasParseError());
  EXPECT_EQ(new_doc["draft_model"]["kvcache_num_blocks"].GetUint64(), 8u);
  new_doc["kvcache_num_blocks"].SetUint64(20);
  EXPECT_TRUE(new_doc == old_doc);
}

TEST(RblnConfigGoldenTest, TrailingNewlineIsKept) {
  absl::StatusOr<std::string> out =
      RewriteKvcacheNumBlocks(ReadTestdata(kGolden) + "\n", 77, kPath);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, ReadTestdata(kGolden77) + "\n");
}

// ---------------------------------------------------------------------------
// Rewrite: format and error paths.

TEST(RewriteKvcacheNumBlocksTest, ChangesOnlyTheDigitsOfTheCount) {
  // Compact objects, escapes of every kind, number spellings, non-finite
  // numbers, a nested count of the same name and no trailing newline: all
  // stay byte for byte.
  constexpr char kInput[] =
      "{\"a\":[1,{},[],[2,[3]]],\"kvcache_num_blocks\":3,"
      "\"b\":{\"c\":\"\xc3\xa9\\u00E9\\n\\/"
      "\",\"d\":[{\"kvcache_num_blocks\":1}]},"
      "\"e\":-0.0, \"x\": 1E5, \"y\": [NaN, -Infinity], "
      "\"z\": 18446744073709551616}";
  absl::StatusOr<std::string> out = RewriteKvcacheNumBlocks(kInput, 12, kPath);
  ASSERT_TRUE(out.ok()) << out.status();
  std::string expected = kInput;
  expected.replace(expected.find("\"kvcache_num_blocks\":3") + 21, 1, "12");
  EXPECT_EQ(*out, expected);
}

TEST(RewriteKvcacheNumBlocksTest, ACountThatIsNotAPositiveIntegerIsRefused) {
  for (const char* input :
       {R"({"kvcache_num_blocks": [1, {"kvcache_num_blocks": [2]}], "k": 3})",
        R"({"kvcache_num_blocks": "16"})", R"({"kvcache_num_blocks": 16.0})",
        R"({"kvcache_num_blocks": 1E1})", R"({"kvcache_num_blocks": -4})"}) {
    SCOPED_TRACE(input);
    ExpectError(RewriteKvcacheNumBlocks(input, 5, kPath).status(),
                absl::StatusCode::kFailedPrecondition, "kvcache_num_blocks");
  }
}

TEST(RewriteKvcacheNumBlocksTest, UnparsableInputIsInvalidArgument) {
  absl::StatusOr<std::string> out = RewriteKvcacheNumBlocks(
      "{\"kvcache_num_blocks\": 1\n \"x\": 2}", 5, kPath);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr(kPath));
  EXPECT_THAT(out.status().message(),
              HasSubstr("Missing a comma or '}' after an object member."));
  EXPECT_THAT(out.status().message(), HasSubstr("offset 26, line 2, column 2"));
}

TEST(RewriteKvcacheNumBlocksTest, NulByteIsInvalidArgument) {
  std::string input = "{\"kvcache_num_blocks\": 1}";
  input += '\0';
  input += "garbage";
  absl::StatusOr<std::string> out = RewriteKvcacheNumBlocks(input, 5, kPath);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("NUL byte at offset 25"));
}

TEST(RewriteKvcacheNumBlocksTest, MissingCountIsFailedPrecondition) {
  absl::StatusOr<std::string> out =
      RewriteKvcacheNumBlocks(R"({"x": {"y": 1}})", 5, kPath);
  ExpectError(out.status(), absl::StatusCode::kFailedPrecondition,
              "kvcache_num_blocks");
}

TEST(RewriteKvcacheNumBlocksTest, SubmoduleCountIsSplicedAtDepthTwoOnly) {
  // A multimodal config as optimum-rbln's json.dump(indent=2) writes it, but
  // with CRLF line ends, no trailing newline, a one-line nested object, raw
  // and escaped non-ASCII, an escaped slash, and decoy counts before and
  // after the real one: in the parent's _compile_cfgs[0], deeper in
  // vision_tower, under a "language_model" key one level down, in the
  // submodule's own _compile_cfgs[0] and in an object inside it, and deeper
  // in a member after it.
  constexpr char kTemplate[] =
      "{\r\n"
      "  \"cls_name\": \"RBLNLlavaNextForConditionalGeneration\",\r\n"
      "  \"_compile_cfgs\": [{\"kvcache_num_blocks\": 7, \"npu\": "
      "\"RBLN-CA12\"}],\r\n"
      "  \"vision_tower\": {\"cls_name\": \"RBLNCLIPVisionModel\", "
      "\"encoder\": {\"kvcache_num_blocks\": 9}, \"language_model\": "
      "{\"kvcache_num_blocks\": 11}},\r\n"
      "  \"note\": \"caf\xc3\xa9 caf\\u00e9 a\\/b\",\r\n"
      "  \"language_model\": {\r\n"
      "    \"cls_name\": \"RBLNMistralForCausalLM\",\r\n"
      "    \"_compile_cfgs\": [{\"kvcache_num_blocks\": 13}],\r\n"
      "    \"kvcache_num_blocks\": @COUNT@,\r\n"
      "    \"max_seq_len\": 32768,\r\n"
      "    \"batch_size\": 1,\r\n"
      "    \"kvcache_block_size\": 32768,\r\n"
      "    \"inner\": {\"x\": \"\\u00e9\\/\", \"y\": [1.0e2, -0.0], "
      "\"kvcache_num_blocks\": 17}\r\n"
      "  },\r\n"
      "  \"tail\": {\"x\": {\"kvcache_num_blocks\": 19}}\r\n"
      "}";
  const auto with_count = [&](absl::string_view count) {
    std::string text = kTemplate;
    text.replace(text.find("@COUNT@"), 7, std::string(count));
    return text;
  };
  const std::string input = with_count("16");
  absl::StatusOr<RblnConfig> config = Parse(input);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->decoder_submodule, "language_model");
  EXPECT_EQ(config->kvcache_num_blocks, 16u);

  absl::StatusOr<std::string> out = RewriteKvcacheNumBlocks(input, 1234, kPath);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, with_count("1234"));
  out = RewriteKvcacheNumBlocks(input, 16, kPath);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, input);
}

TEST(RewriteKvcacheNumBlocksTest, SubmoduleKeyIsMatchedAsJsonReadsIt) {
  // "language\u005fmodel" is the key language_model to every JSON reader.
  constexpr char kInput[] =
      R"({"visual": {"a": 1}, "language\u005fmodel": {"kvcache_num_blocks": 4}})";
  absl::StatusOr<std::string> out = RewriteKvcacheNumBlocks(kInput, 50, kPath);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(
      *out,
      R"({"visual": {"a": 1}, "language\u005fmodel": {"kvcache_num_blocks": 50}})");
}

TEST(RewriteKvcacheNumBlocksTest, ASubmoduleCountThatIsNotAPositiveInteger) {
  for (const char* count : {"1.0e2", "16.0", "\"16\"", "0", "null"}) {
    SCOPED_TRACE(count);
    std::string input =
        absl::StrCat(R"({"language_model": {"kvcache_num_blocks": )", count,
                     R"(}, "vision_tower": {}})");
    ExpectError(RewriteKvcacheNumBlocks(input, 5, kPath).status(),
                absl::StatusCode::kFailedPrecondition,
                "language_model.kvcache_num_blocks");
  }
}

TEST(RewriteKvcacheNumBlocksTest, TwoDecodersAreUnimplemented) {
  absl::StatusOr<std::string> out = RewriteKvcacheNumBlocks(
      R"({"a": {"kvcache_num_blocks": 4}, "b": {"kvcache_num_blocks": 4}})", 5,
      kPath);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(out.status().message(), HasSubstr("under 'a' and 'b'"));
}

TEST(RewriteKvcacheNumBlocksTest, LegacyConfigIsFailedPrecondition) {
  absl::StatusOr<std::string> out = RewriteKvcacheNumBlocks(
      R"({"_meta": {}, "kvcache_num_blocks": 4})", 5, kPath);
  ExpectError(out.status(), absl::StatusCode::kFailedPrecondition, "_meta");
}

// ---------------------------------------------------------------------------
// Parse: error paths.

TEST(ParseRblnConfigTest, MinimalConfigParses) {
  absl::StatusOr<RblnConfig> config = Parse(kMinimal);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->cls_name, "");
  EXPECT_EQ(config->attn_impl, "eager");
  EXPECT_TRUE(config->kvcache_metas.empty());
  EXPECT_TRUE(config->phases.empty());
  EXPECT_TRUE(config->decoder_batch_sizes.empty());
  EXPECT_EQ(config->num_devices, 1u);
  EXPECT_EQ(config->npu, "");
}

TEST(ParseRblnConfigTest, NotJsonIsInvalidArgument) {
  absl::Status status = Parse("{\"max_seq_len\": }").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(kPath));
  EXPECT_THAT(status.message(), HasSubstr("Invalid value."));
  EXPECT_THAT(status.message(), HasSubstr("offset 16"));
}

TEST(ParseRblnConfigTest, NotAnObjectIsInvalidArgument) {
  absl::Status status = Parse("[1, 2]").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(kPath));
  EXPECT_THAT(status.message(), HasSubstr("found an array"));
}

TEST(ParseRblnConfigTest, LegacyConfigAsksToRecompile) {
  absl::Status status =
      Parse(WithMember(kMinimal, "_meta", R"({"version": "0.1.0"})")).status();
  ExpectError(status, absl::StatusCode::kFailedPrecondition, "_meta");
  EXPECT_THAT(status.message(), HasSubstr("current optimum-rbln"));
}

// ---------------------------------------------------------------------------
// Parse: a decoder in a submodule (multimodal artifacts).

// A parent config with `decoder` under "language_model" and an encoder
// submodule that holds no count.
std::string Multimodal(absl::string_view decoder) {
  std::string json =
      WithMember(R"({"cls_name": "RBLNLlavaNextForConditionalGeneration"})",
                 "vision_tower",
                 R"({"cls_name": "RBLNCLIPVisionModel", "batch_size": 3})");
  return WithMember(json, "language_model", decoder);
}

TEST(SubmoduleRblnConfigTest, FieldsComeFromTheNestedObject) {
  std::string decoder =
      WithMember(kMinimal, "cls_name", R"("RBLNMistralForCausalLM")");
  decoder = WithMember(decoder, "attn_impl", R"("flash_attn")");
  decoder = WithMember(decoder, "phases", R"(["prefill", "decode"])");
  decoder =
      WithMember(decoder, "cache_metas", absl::StrCat("[", kMetaEntry, "]"));
  std::string json = Multimodal(decoder);
  // Top-level values the decoder does not use.
  json = WithMember(json, "max_seq_len", "7");
  json = WithMember(json, "phases", R"(["image"])");
  absl::StatusOr<RblnConfig> config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->decoder_submodule, "language_model");
  EXPECT_EQ(config->cls_name, "RBLNLlavaNextForConditionalGeneration");
  EXPECT_EQ(config->kvcache_num_blocks, 8u);
  EXPECT_EQ(config->max_seq_len, 8192u);
  EXPECT_EQ(config->batch_size, 4u);
  EXPECT_EQ(config->kvcache_block_size, 1024u);
  EXPECT_EQ(config->attn_impl, "flash_attn");
  EXPECT_THAT(config->phases, ElementsAre("prefill", "decode"));
  EXPECT_EQ(config->metas_key, "cache_metas");
  ASSERT_EQ(config->kvcache_metas.size(), 1u);
  EXPECT_EQ(config->kvcache_metas[0].name, "past_key_values_0");
  EXPECT_EQ(config->num_devices, 1u);
  EXPECT_EQ(config->npu, "");
}

TEST(SubmoduleRblnConfigTest, FlatConfigHasNoSubmodule) {
  absl::StatusOr<RblnConfig> config = Parse(kMinimal);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->decoder_submodule, "");
  // A top-level count wins over a member object holding one.
  config = Parse(WithMember(kMinimal, "language_model", kMinimal));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->decoder_submodule, "");
}

TEST(SubmoduleRblnConfigTest, FieldErrorsNameTheSubmodule) {
  std::string json = Multimodal(WithMember(kMinimal, "max_seq_len", R"("x")"));
  ExpectError(Parse(json).status(), absl::StatusCode::kFailedPrecondition,
              "language_model.max_seq_len");
  json = Multimodal(WithMember(kMinimal, "batch_size", ""));
  ExpectError(Parse(json).status(), absl::StatusCode::kFailedPrecondition,
              "language_model.batch_size");
  json = Multimodal(WithMember(kMinimal, "_compile_cfgs", R"([{"npu": 1}])"));
  ExpectError(Parse(json).status(), absl::StatusCode::kFailedPrecondition,
              "language_model._compile_cfgs[0].npu");
  json = Multimodal(WithMember(kMinimal, "kvcache_num_blocks", "2147483648"));
  ExpectError(Parse(json).status(), absl::StatusCode::kFailedPrecondition,
              "language_model.kvcache_num_blocks");
}

TEST(SubmoduleRblnConfigTest, NumDevicesAndNpuFallBackToTheParent) {
  struct Case {
    const char* decoder_key;  // set in the submodule's object, or ""
    const char* decoder_value;
    const char* parent_key;  // set in the parent, or ""
    const char* parent_value;
    uint32_t num_devices;
    const char* npu;
  };
  for (const Case& c : std::vector<Case>{
           // The submodule's own members, then its own _compile_cfgs...
           {"tensor_parallel_size", "4", "num_devices", "8", 4, ""},
           {"_compile_cfgs", R"([{"num_devices": 2, "npu": "RBLN-CA12"}])",
            "_compile_cfgs", R"([{"num_devices": 8, "npu": "RBLN-CR03"}])", 2,
            "RBLN-CA12"},
           {"npu", R"("RBLN-CA12")", "npu", R"("RBLN-CR03")", 1, "RBLN-CA12"},
           // ...then the parent's members, then the parent's _compile_cfgs...
           {"", "", "tensor_parallel_size", "8", 8, ""},
           {"", "", "npu", R"("RBLN-CR03")", 1, "RBLN-CR03"},
           {"_compile_cfgs", "[{}]", "_compile_cfgs",
            R"([{"tensor_parallel_size": 4, "npu": "RBLN-CA02"}])", 4,
            "RBLN-CA02"},
           // ...then 1 and "".
           {"_compile_cfgs", "[{}]", "_compile_cfgs", "[{}]", 1, ""},
       }) {
    SCOPED_TRACE(absl::StrCat(c.decoder_key, "=", c.decoder_value, " / ",
                              c.parent_key, "=", c.parent_value));
    std::string decoder = kMinimal;
    if (*c.decoder_key != '\0') {
      decoder = WithMember(decoder, c.decoder_key, c.decoder_value);
    }
    std::string json = Multimodal(decoder);
    if (*c.parent_key != '\0') {
      json = WithMember(json, c.parent_key, c.parent_value);
    }
    absl::StatusOr<RblnConfig> config = Parse(json);
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->num_devices, c.num_devices);
    EXPECT_EQ(config->npu, c.npu);
  }
}

TEST(SubmoduleRblnConfigTest, MoreThanOneDecoderIsUnimplemented) {
  std::string json = Multimodal(kMinimal);
  json = WithMember(json, "speech_decoder", kMinimal);
  json = WithMember(json, "text_decoder", kMinimal);
  absl::Status status = Parse(json).status();
  ExpectError(status, absl::StatusCode::kUnimplemented, "kvcache_num_blocks");
  EXPECT_THAT(status.message(),
              HasSubstr("keeps decoders under 'language_model', "
                        "'speech_decoder' and 'text_decoder'; an artifact with "
                        "more than one decoder is not supported"));
}

TEST(SubmoduleRblnConfigTest, ManyDecodersAreNamedUpToEight) {
  std::string json = "{";
  for (int i = 0; i < 1000; ++i) {
    absl::StrAppend(&json, i == 0 ? "" : ", ", "\"m", i,
                    "\": {\"kvcache_num_blocks\": 1}");
  }
  json += "}";
  absl::Status status = Parse(json).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(status.message(),
              HasSubstr("under 'm0', 'm1', 'm2', 'm3', 'm4', 'm5', 'm6', 'm7' "
                        "and 992 more; "));
}

TEST(SubmoduleRblnConfigTest, LegacyCheckComesFirst) {
  std::string json = WithMember(Multimodal(kMinimal), "_meta", "{}");
  ExpectError(Parse(json).status(), absl::StatusCode::kFailedPrecondition,
              "_meta");
}

TEST(SubmoduleRblnConfigTest, NoCountAnywhereIsMissing) {
  absl::Status status =
      Parse(
          R"({"vision_tower": {"batch_size": 1}, "x": [{"kvcache_num_blocks": 2}]})")
          .status();
  ExpectError(status, absl::StatusCode::kFailedPrecondition,
              "kvcache_num_blocks");
  EXPECT_THAT(status.message(), HasSubstr("missing"));
}

TEST(SubmoduleRblnConfigTest, AKeyThatIsNotAPlainDirectoryNameIsRefused) {
  // Each key as JSON text (escapes decoded by the reader) and as the message
  // shows it (Echo).
  struct Case {
    std::string json_key;
    std::string shown;
  };
  for (const Case& c : std::vector<Case>{
           {"", ""},
           {".", "."},
           {"..", ".."},
           {"../etc", "../etc"},
           {"/abs", "/abs"},
           {"a/b", "a/b"},
           {R"(..\\x)", R"(..\\x)"},
           {R"(lm\u0000x)", R"(lm\x00x)"},
           {std::string(256, 'a'), std::string(200, 'a')},
       }) {
    SCOPED_TRACE(c.json_key);
    const std::string json = absl::StrCat(R"({"vision_tower": {}, ")",
                                          c.json_key, R"(": )", kMinimal, "}");
    for (const absl::Status& status :
         {Parse(json).status(),
          RewriteKvcacheNumBlocks(json, 5, kPath).status()}) {
      EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
      EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("'", c.shown)));
      EXPECT_THAT(status.message(), HasSubstr("one plain directory name"));
      EXPECT_THAT(status.message(), HasSubstr(kPath));
    }
  }
  // 255 bytes is the longest name a directory can have, and is accepted.
  const std::string longest = std::string(255, 'a');
  const std::string json =
      absl::StrCat(R"({")", longest, R"(": )", kMinimal, "}");
  absl::StatusOr<RblnConfig> config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->decoder_submodule, longest);
  EXPECT_TRUE(RewriteKvcacheNumBlocks(json, 5, kPath).ok());
}

TEST(ParseRblnConfigTest, MissingRequiredFields) {
  for (const char* field : {"kvcache_num_blocks", "max_seq_len", "batch_size",
                            "kvcache_block_size"}) {
    SCOPED_TRACE(field);
    absl::Status status = Parse(WithMember(kMinimal, field, "")).status();
    ExpectError(status, absl::StatusCode::kFailedPrecondition, field);
    EXPECT_THAT(status.message(), HasSubstr("missing"));
  }
}

TEST(ParseRblnConfigTest, StringWhereIntegerExpected) {
  EXPECT_EQ(Parse(WithMember(kMinimal, "max_seq_len", R"("abc")")).status(),
            absl::FailedPreconditionError(
                "field 'max_seq_len' in /a/rbln_config.json: expected a "
                "positive integer, found string \"abc\""));
}

TEST(ParseRblnConfigTest, RequiredIntegersMustBePositiveJsonIntegers) {
  for (const char* field : {"kvcache_num_blocks", "max_seq_len", "batch_size",
                            "kvcache_block_size"}) {
    for (const char* bad : {"1.5", "1024.0", "1e3", "-4", "0", "null", "true",
                            R"("8")", "[8]", "18446744073709551616"}) {
      SCOPED_TRACE(absl::StrCat(field, " = ", bad));
      absl::Status status = Parse(WithMember(kMinimal, field, bad)).status();
      ExpectError(status, absl::StatusCode::kFailedPrecondition, field);
      // optimum-rbln writes null for an unset kvcache_block_size: absent.
      bool unset = absl::string_view(field) == "kvcache_block_size" &&
                   absl::string_view(bad) == "null";
      EXPECT_THAT(status.message(),
                  HasSubstr(unset ? "missing" : "expected a positive integer"));
    }
  }
}

TEST(ParseRblnConfigTest, MaxSeqLenMustBeAMultipleOfTheBlockSize) {
  absl::Status status =
      Parse(WithMember(kMinimal, "max_seq_len", "8000")).status();
  ExpectError(status, absl::StatusCode::kFailedPrecondition, "max_seq_len");
  EXPECT_THAT(status.message(), HasSubstr("8000"));
  EXPECT_THAT(status.message(), HasSubstr("1024 (kvcache_block_size)"));
}

TEST(ParseRblnConfigTest, FullBlockCountOverflowIsRejected) {
  std::string json = WithMember(kMinimal, "kvcache_block_size", "1");
  json = WithMember(json, "max_seq_len", "4294967296");
  json = WithMember(json, "batch_size", "4294967296");
  ExpectError(Parse(json).status(), absl::StatusCode::kFailedPrecondition,
              "batch_size");
}

TEST(ParseRblnConfigTest, UnknownAttnImplIsRejected) {
  for (const char* bad : {R"("sdpa")", "3", "[]"}) {
    SCOPED_TRACE(bad);
    absl::Status status =
        Parse(WithMember(kMinimal, "attn_impl", bad)).status();
    ExpectError(status, absl::StatusCode::kFailedPrecondition, "attn_impl");
  }
}

TEST(ParseRblnConfigTest, FlashAttnWithoutAnyBlockSize) {
  std::string json = WithMember(kMinimal, "kvcache_block_size", "");
  json = WithMember(json, "attn_impl", R"("flash_attn")");
  absl::Status status = Parse(json).status();
  ExpectError(status, absl::StatusCode::kFailedPrecondition,
              "kvcache_block_size");
  EXPECT_THAT(status.message(), HasSubstr("kvcache_partition_len"));
}

TEST(ParseRblnConfigTest, OptionalFieldsOfTheWrongType) {
  struct Case {
    const char* key;
    const char* value;
    const char* field;  // as named in the message
  };
  for (const Case& c : std::vector<Case>{
           {"cls_name", "7", "cls_name"},
           {"kvcache_partition_len", R"("16k")", "kvcache_partition_len"},
           {"phases", R"("prefill")", "phases"},
           {"phases", R"(["prefill", 2])", "phases[1]"},
           {"decoder_batch_sizes", "[4, 0]", "decoder_batch_sizes[1]"},
           {"decoder_batch_sizes", "[-1]", "decoder_batch_sizes[0]"},
           {"decoder_batch_sizes", "4", "decoder_batch_sizes"},
           {"kvcache_metas", "{}", "kvcache_metas"},
           {"kvcache_metas", "[3]", "kvcache_metas[0]"},
           {"_compile_cfgs", "{}", "_compile_cfgs"},
           {"_compile_cfgs", R"([{}, "prefill"])", "_compile_cfgs[1]"},
           {"num_devices", "0", "num_devices"},
           {"num_devices", "4294967296", "num_devices"},
           {"tensor_parallel_size", "2.5", "tensor_parallel_size"},
           {"npu", "12", "npu"},
           {"_compile_cfgs", R"([{"npu": false}])", "_compile_cfgs[0].npu"},
       }) {
    SCOPED_TRACE(absl::StrCat(c.key, " = ", c.value));
    ExpectError(Parse(WithMember(kMinimal, c.key, c.value)).status(),
                absl::StatusCode::kFailedPrecondition, c.field);
  }
}

TEST(ParseRblnConfigTest, KvcacheMetaFieldsAreRequired) {
  for (const char* key : {"name", "layer_index", "shape", "is_auto", "dtype"}) {
    SCOPED_TRACE(key);
    std::string metas = absl::StrCat("[", kMetaEntry, ", ",
                                     WithMember(kMetaEntry, key, ""), "]");
    absl::Status status =
        Parse(WithMember(kMinimal, "kvcache_metas", metas)).status();
    ExpectError(status, absl::StatusCode::kFailedPrecondition,
                absl::StrCat("kvcache_metas[1].", key));
    EXPECT_THAT(status.message(), HasSubstr("missing"));
  }
}

TEST(ParseRblnConfigTest, KvcacheMetaFieldsOfTheWrongType) {
  struct Case {
    const char* key;
    const char* value;
    const char* field;
  };
  for (const Case& c : std::vector<Case>{
           {"name", "null", "kvcache_metas[0].name"},
           {"layer_index", R"("0")", "kvcache_metas[0].layer_index"},
           {"layer_index", "0.5", "kvcache_metas[0].layer_index"},
           {"shape", "8", "kvcache_metas[0].shape"},
           {"shape", R"([8, "8"])", "kvcache_metas[0].shape[1]"},
           {"layer_type", "1", "kvcache_metas[0].layer_type"},
           {"is_auto", R"("yes")", "kvcache_metas[0].is_auto"},
           {"dtype", "16", "kvcache_metas[0].dtype"},
       }) {
    SCOPED_TRACE(absl::StrCat(c.key, " = ", c.value));
    std::string metas =
        absl::StrCat("[", WithMember(kMetaEntry, c.key, c.value), "]");
    ExpectError(Parse(WithMember(kMinimal, "kvcache_metas", metas)).status(),
                absl::StatusCode::kFailedPrecondition, c.field);
  }
}

TEST(ParseRblnConfigTest, KvcacheMetasAreRead) {
  std::string metas = absl::StrCat(
      "[", kMetaEntry, ", ",
      WithMember(WithMember(kMetaEntry, "layer_type", R"("sliding_attention")"),
                 "is_auto", "false"),
      "]");
  absl::StatusOr<RblnConfig> config =
      Parse(WithMember(kMinimal, "kvcache_metas", metas));
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->kvcache_metas.size(), 2u);
  EXPECT_TRUE(config->kvcache_metas[0].is_auto);
  EXPECT_EQ(config->kvcache_metas[1].layer_type, "sliding_attention");
  EXPECT_FALSE(config->kvcache_metas[1].is_auto);
  EXPECT_THAT(config->kvcache_metas[1].shape, ElementsAre(8, 8, 1024, 128));
}

// ---------------------------------------------------------------------------
// Parse: cache_metas (optimum-rbln 0.12) and kvcache_metas (before).

TEST(CacheMetasTest, EitherKeyIsReadAndNamed) {
  const std::string list = absl::StrCat("[", kMetaEntry, "]");
  absl::StatusOr<RblnConfig> config =
      Parse(WithMember(kMinimal, "cache_metas", list));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->metas_key, "cache_metas");
  ASSERT_EQ(config->kvcache_metas.size(), 1u);
  EXPECT_EQ(config->kvcache_metas[0].name, "past_key_values_0");

  config = Parse(WithMember(kMinimal, "kvcache_metas", list));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->metas_key, "kvcache_metas");
  ASSERT_EQ(config->kvcache_metas.size(), 1u);

  // null counts as absent, as for every optional field.
  config = Parse(WithMember(WithMember(kMinimal, "kvcache_metas", list),
                            "cache_metas", "null"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->metas_key, "kvcache_metas");

  config = Parse(kMinimal);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->metas_key, "");
}

TEST(CacheMetasTest, BothKeysAreRefused) {
  const std::string list = absl::StrCat("[", kMetaEntry, "]");
  absl::Status status =
      Parse(WithMember(WithMember(kMinimal, "kvcache_metas", list),
                       "cache_metas", list))
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              HasSubstr(absl::StrCat(kPath,
                                     " has both 'kvcache_metas' and "
                                     "'cache_metas'")));
  EXPECT_THAT(status.message(), HasSubstr("keep one"));
}

TEST(CacheMetasTest, EntryErrorsNameTheKeyTheyAreUnder) {
  const std::string list =
      absl::StrCat("[", kMetaEntry, ", ", kMetaEntry, ", ",
                   WithMember(kMetaEntry, "is_auto", R"("yes")"), "]");
  ExpectError(Parse(WithMember(kMinimal, "cache_metas", list)).status(),
              absl::StatusCode::kFailedPrecondition, "cache_metas[2].is_auto");
  ExpectError(
      Parse(WithMember(
                kMinimal, "cache_metas",
                absl::StrCat("[", WithMember(kMetaEntry, "name", ""), "]")))
          .status(),
      absl::StatusCode::kFailedPrecondition, "cache_metas[0].name");
  ExpectError(Parse(WithMember(kMinimal, "cache_metas", "{}")).status(),
              absl::StatusCode::kFailedPrecondition, "cache_metas");
}

TEST(CacheMetasTest, ResizableIsIsAutoAndFullAttentionWhateverCanResizeSays) {
  struct Case {
    const char* can_resize;  // JSON, or "" for absent
    const char* is_auto;
    const char* layer_type;  // JSON, or "" for absent
    bool resizable;
  };
  for (const Case& c : std::vector<Case>{
           // A can_resize key decides nothing, whatever it holds.
           {"true", "false", R"("sliding_attention")", false},
           {"true", "true", R"("full_attention")", true},
           {"false", "true", R"("full_attention")", true},
           {"false", "true", "", true},
           {R"("yes")", "true", "", true},
           // is_auto and full attention (absent or null: full attention).
           {"", "true", R"("full_attention")", true},
           {"", "true", "", true},
           {"null", "true", "null", true},
           {"", "false", R"("full_attention")", false},
           {"", "false", "", false},
           {"", "true", R"("sliding_attention")", false},
           {"", "true", R"("linear_attention")", false},
       }) {
    SCOPED_TRACE(absl::StrCat("can_resize=", c.can_resize, " is_auto=",
                              c.is_auto, " layer_type=", c.layer_type));
    std::string entry = WithMember(kMetaEntry, "can_resize", c.can_resize);
    entry = WithMember(entry, "is_auto", c.is_auto);
    entry = WithMember(entry, "layer_type", c.layer_type);
    absl::StatusOr<RblnConfig> config = Parse(
        WithMember(kMinimal, "cache_metas", absl::StrCat("[", entry, "]")));
    ASSERT_TRUE(config.ok()) << config.status();
    ASSERT_EQ(config->kvcache_metas.size(), 1u);
    EXPECT_EQ(config->kvcache_metas[0].Resizable(), c.resizable);
  }
}

TEST(CacheMetasTest, AnUnknownLayerTypeIsRefusedNamingTheTensorAndTheValue) {
  const std::string entry =
      WithMember(kMetaEntry, "layer_type", R"("chunked_attention")");
  absl::StatusOr<RblnConfig> config =
      Parse(WithMember(kMinimal, "cache_metas",
                       absl::StrCat("[", kMetaEntry, ", ", entry, "]")));
  ExpectError(config.status(), absl::StatusCode::kFailedPrecondition,
              "cache_metas[1].layer_type");
  EXPECT_THAT(config.status().message(), HasSubstr("\"chunked_attention\""));
  EXPECT_THAT(config.status().message(), HasSubstr("full_attention"));
  EXPECT_THAT(config.status().message(), HasSubstr("tensor \""));
}

TEST(CacheMetasTest, RequireCacheMetasNamesBothKeys) {
  absl::StatusOr<RblnConfig> config = Parse(kMinimal);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(
      RequireCacheMetas(*config, kPath),
      absl::FailedPreconditionError(
          "field 'cache_metas' in /a/rbln_config.json: missing, and so is "
          "'kvcache_metas': the config does not list the KV-cache tensors, so "
          "nothing says which can be resized; re-export the model with an "
          "optimum-rbln that writes them"));

  config = Parse(WithMember(kMinimal, "kvcache_metas", "[]"));
  ASSERT_TRUE(config.ok()) << config.status();
  absl::Status status = RequireCacheMetas(*config, kPath);
  ExpectError(status, absl::StatusCode::kFailedPrecondition, "kvcache_metas");
  EXPECT_THAT(status.message(), HasSubstr("empty"));
  EXPECT_THAT(status.message(), HasSubstr("'cache_metas'"));

  config = Parse(Multimodal(kMinimal));
  ASSERT_TRUE(config.ok()) << config.status();
  status = RequireCacheMetas(*config, kPath);
  ExpectError(status, absl::StatusCode::kFailedPrecondition,
              "language_model.cache_metas");
  EXPECT_THAT(status.message(), HasSubstr("'language_model.kvcache_metas'"));

  for (const char* key : {"cache_metas", "kvcache_metas"}) {
    config =
        Parse(WithMember(kMinimal, key, absl::StrCat("[", kMetaEntry, "]")));
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_TRUE(RequireCacheMetas(*config, kPath).ok()) << key;
  }
}

TEST(ParseRblnConfigTest, CompileCfgsMustAgreeOnNumDevices) {
  absl::Status status =
      Parse(WithMember(kMinimal, "_compile_cfgs",
                       R"([{"num_devices": 4}, {}, {"num_devices": 2}])"))
          .status();
  ExpectError(status, absl::StatusCode::kFailedPrecondition,
              "_compile_cfgs[2].num_devices");
  EXPECT_THAT(status.message(),
              HasSubstr("2 disagrees with "
                        "'_compile_cfgs[0].num_devices' = 4"));
}

TEST(ParseRblnConfigTest, CompileCfgsMustAgreeOnNpu) {
  absl::Status status =
      Parse(WithMember(kMinimal, "_compile_cfgs",
                       R"([{"npu": "RBLN-CA12"}, {"npu": "RBLN-CA02"}])"))
          .status();
  ExpectError(status, absl::StatusCode::kFailedPrecondition,
              "_compile_cfgs[1].npu");
  EXPECT_THAT(status.message(), HasSubstr("\"RBLN-CA02\""));
  EXPECT_THAT(status.message(), HasSubstr("\"RBLN-CA12\""));
}

TEST(ParseRblnConfigTest, NumDevicesAndItsAliasMustAgree) {
  std::string json = WithMember(kMinimal, "num_devices", "4");
  json = WithMember(json, "tensor_parallel_size", "8");
  absl::Status status = Parse(json).status();
  ExpectError(status, absl::StatusCode::kFailedPrecondition,
              "tensor_parallel_size");
  EXPECT_THAT(status.message(), HasSubstr("'num_devices' = 4"));
}

// ---------------------------------------------------------------------------
// Parse: fallbacks and block counts.

TEST(ParseRblnConfigTest, NumDevicesFallbacks) {
  struct Case {
    const char* key;
    const char* value;
    uint32_t expected;
  };
  constexpr char kCfgs[] =
      R"([{"npu": "RBLN-CA12"}, {"tensor_parallel_size": 8}])";
  for (const Case& c : std::vector<Case>{
           {"num_devices", "2", 2},
           {"tensor_parallel_size", "4", 4},
           {"num_devices", "null", 8},  // null: fall through to _compile_cfgs
           {"_compile_cfgs", R"([{"num_devices": 3}, {"num_devices": 3}])", 3},
           {"_compile_cfgs", R"([{}, {"tensor_parallel_size": 6}])", 6},
           {"_compile_cfgs", R"([{"num_devices": null}])", 1},
           {"_compile_cfgs", "[]", 1},
       }) {
    SCOPED_TRACE(absl::StrCat(c.key, " = ", c.value));
    std::string json = WithMember(kMinimal, "_compile_cfgs", kCfgs);
    json = WithMember(json, c.key, c.value);
    absl::StatusOr<RblnConfig> config = Parse(json);
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->num_devices, c.expected);
  }
  // Top level wins over _compile_cfgs.
  std::string json = WithMember(kMinimal, "_compile_cfgs", kCfgs);
  json = WithMember(json, "num_devices", "2");
  absl::StatusOr<RblnConfig> config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->num_devices, 2u);
}

TEST(ParseRblnConfigTest, NpuFallbacks) {
  std::string with_cfgs =
      WithMember(kMinimal, "_compile_cfgs", R"([{}, {"npu": "RBLN-CR03"}])");
  absl::StatusOr<RblnConfig> config = Parse(with_cfgs);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->npu, "RBLN-CR03");

  config = Parse(WithMember(with_cfgs, "npu", R"("RBLN-CA12")"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->npu, "RBLN-CA12");

  config = Parse(WithMember(with_cfgs, "npu", "null"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->npu, "RBLN-CR03");

  config = Parse(WithMember(kMinimal, "_compile_cfgs", R"([{"npu": null}])"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->npu, "");
}

TEST(ParseRblnConfigTest, EagerBlockCounts) {
  // L = 8192, S = 1024, B = 4.
  absl::StatusOr<RblnConfig> config =
      Parse(WithMember(kMinimal, "attn_impl", R"("eager")"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->attn_impl, "eager");
  EXPECT_EQ(config->NumFullBlocks(), 32u);  // 8 * 4
  EXPECT_EQ(config->NumMinBlocks(), 4u);    // B
}

TEST(ParseRblnConfigTest, FlashAttnBlockCounts) {
  // L = 8192, S = 1024: 8 blocks per sequence.
  std::string json = WithMember(kMinimal, "attn_impl", R"("flash_attn")");
  absl::StatusOr<RblnConfig> config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->NumFullBlocks(), 32u);  // 8 * 4
  EXPECT_EQ(config->NumMinBlocks(), 9u);    // min(8 + 1, 32)

  config = Parse(WithMember(json, "batch_size", "1"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->NumFullBlocks(), 8u);  // 8 * 1
  EXPECT_EQ(config->NumMinBlocks(), 8u);   // min(max(8, 1) + 1, 8)

  // More sequences than blocks per sequence (optimum-rbln #648): one block
  // for each batch entry, and one more.
  config = Parse(WithMember(json, "batch_size", "16"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->NumFullBlocks(), 128u);  // 8 * 16
  EXPECT_EQ(config->NumMinBlocks(), 17u);    // min(max(8, 16) + 1, 128)
}

TEST(ParseRblnConfigTest, PartitionLenStandsInForBlockSize) {
  // No kvcache_block_size; kvcache_partition_len = 2048, L = 8192.
  std::string json = WithMember(kMinimal, "kvcache_block_size", "");
  json = WithMember(json, "kvcache_partition_len", "2048");
  for (const char* attn_impl : {R"("flash_attn")", "null", ""}) {
    SCOPED_TRACE(attn_impl);
    absl::StatusOr<RblnConfig> config =
        Parse(WithMember(json, "attn_impl", attn_impl));
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->attn_impl, "flash_attn");
    EXPECT_EQ(config->kvcache_block_size, 2048u);
    EXPECT_EQ(config->NumFullBlocks(), 16u);  // (8192 / 2048) * 4
    EXPECT_EQ(config->NumMinBlocks(), 5u);    // min(4 + 1, 16)
  }

  // kvcache_block_size, when present, wins.
  absl::StatusOr<RblnConfig> config =
      Parse(WithMember(json, "kvcache_block_size", "8192"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->kvcache_block_size, 8192u);

  // Eager never uses the partition length.
  ExpectError(Parse(WithMember(json, "attn_impl", R"("eager")")).status(),
              absl::StatusCode::kFailedPrecondition, "kvcache_block_size");

  // A partition length that does not divide max_seq_len.
  absl::Status status =
      Parse(WithMember(json, "kvcache_partition_len", "3000")).status();
  ExpectError(status, absl::StatusCode::kFailedPrecondition, "max_seq_len");
  EXPECT_THAT(status.message(), HasSubstr("(kvcache_partition_len)"));
}

// --- Untrusted input: bounded, iterative, unambiguous. ---

TEST(UntrustedRblnConfigTest, DeepNestingIsRefusedWithoutRecursion) {
  // 200,000 levels overflowed the stack of a recursive parser.
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  for (const absl::Status& status :
       {Parse(deep).status(), RewriteKvcacheNumBlocks(deep, 8, kPath).status(),
        Parse(absl::StrCat(R"({"x": )", deep, "}")).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr("nests deeper than 64 levels"));
  }
  // 64 levels are fine.
  std::string nested = "0";
  for (int i = 0; i < 62; ++i) nested = absl::StrCat("[", nested, "]");
  EXPECT_TRUE(Parse(WithMember(kMinimal, "extra", nested)).ok());
}

TEST(UntrustedRblnConfigTest, DuplicateKeysAreRefusedAtAnyDepth) {
  const std::string top = absl::StrCat(R"({"kvcache_num_blocks": 999, )",
                                       std::string(kMinimal).substr(1));
  for (const absl::Status& status :
       {Parse(top).status(), RewriteKvcacheNumBlocks(top, 8, kPath).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(),
                HasSubstr("key \"kvcache_num_blocks\" appears twice"));
    EXPECT_THAT(status.message(), HasSubstr(kPath));
  }
  const absl::Status nested = Parse(WithMember(kMinimal, "_compile_cfgs",
                                               R"([{"npu": "a", "npu": "b"}])"))
                                  .status();
  EXPECT_EQ(nested.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(nested.message(), HasSubstr("\"npu\" appears twice"));
  // The same key in two different objects is fine.
  EXPECT_TRUE(
      Parse(WithMember(kMinimal, "_compile_cfgs",
                       R"([{"npu": "RBLN-CA12"}, {"npu": "RBLN-CA12"}])"))
          .ok());
}

TEST(UntrustedRblnConfigTest, AByteOrderMarkIsRefusedByBothReaders) {
  for (const std::string& prefix :
       {std::string("\xEF\xBB\xBF"), std::string("\xEF")}) {
    const std::string text = prefix + kMinimal;
    EXPECT_EQ(Parse(text).status().code(), absl::StatusCode::kInvalidArgument);
    const absl::Status rewrite =
        RewriteKvcacheNumBlocks(text, 8, kPath).status();
    EXPECT_EQ(rewrite.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(rewrite.message(), HasSubstr("byte order mark"));
  }
}

TEST(UntrustedRblnConfigTest, CountsAboveTheHardLimitAreRefused) {
  ExpectError(
      Parse(WithMember(kMinimal, "kvcache_num_blocks", "2147483648")).status(),
      absl::StatusCode::kFailedPrecondition, "kvcache_num_blocks");
  EXPECT_TRUE(
      Parse(WithMember(kMinimal, "kvcache_num_blocks", "2147483647")).ok());
}

}  // namespace
}  // namespace rbln
