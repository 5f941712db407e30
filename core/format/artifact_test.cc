#include "core/format/artifact.h"

#include <stdio.h>

#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "core/os/env.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/synth.h"

namespace rbln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ArtifactTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.Join("tiny");
    ASSERT_TRUE(WriteSyntheticArtifact(env_, SynthSpec{}, dir_).ok());
  }

  absl::Status OpenStatus(const ArtifactOptions& options = {}) {
    return Artifact::Open(env_, dir_, options).status();
  }

  // Rewrites the header of `file` in place through `edit`.
  void EditHeader(const std::string& file,
                  const std::function<void(v1::ContainerHeader*)>& edit) {
    const std::string path = JoinPath(dir_, file);
    auto src = env_->NewRandomAccessFile(path);
    ASSERT_TRUE(src.ok());
    absl::StatusOr<Container> container = ReadContainer(**src);
    ASSERT_TRUE(container.ok()) << container.status();
    v1::ContainerHeader header = container->header;
    edit(&header);
    auto out = env_->NewWritableFile(path + ".new");
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(
        WriteContainerWithHeader(**src, *container, header, **out).ok());
    ASSERT_TRUE((*out)->Close().ok());
    ASSERT_TRUE(env_->Rename(path + ".new", path).ok());
  }

  void EditConfig(absl::string_view from, absl::string_view to) {
    const std::string path = JoinPath(dir_, kRblnConfigFileName);
    const std::string text = testing::ReadFileOrDie(path);
    ASSERT_NE(text.find(std::string(from)), std::string::npos) << from;
    testing::WriteFileOrDie(path, absl::StrReplaceAll(text, {{from, to}}));
  }

  Env* env_ = Env::Default();
  testing::TempDir tmp_;
  std::string dir_;
};

TEST_F(ArtifactTest, OpensASynthesizedArtifact) {
  absl::StatusOr<Artifact> a =
      Artifact::Open(env_, dir_, {.verify_payload = true});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->current_num_blocks(), 16u);
  EXPECT_EQ(a->compiled_num_blocks(), 16u);
  EXPECT_EQ(a->npu(), "RBLN-CA12");
  EXPECT_EQ(a->num_nodes(), 1u);
  EXPECT_EQ(a->buckets_per_node(), 1u);
  ASSERT_EQ(a->containers().size(), 2u);
  EXPECT_EQ(a->containers()[0].file_name, "decoder_batch_2.rbln");
  EXPECT_EQ(a->prefill().file_name, "prefill.rbln");
  EXPECT_THAT(a->companion_files(),
              ElementsAre("config.json", "generation_config.json",
                          "tokenizer.json", "tokenizer_config.json"));
}

TEST_F(ArtifactTest, MissingDirectoryOrConfigIsNotFound) {
  absl::Status s = Artifact::Open(env_, tmp_.Join("nope")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("nope"));
  ASSERT_EQ(remove(JoinPath(dir_, kRblnConfigFileName).c_str()), 0);
  s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("no rbln_config.json"));
}

TEST_F(ArtifactTest, MissingPrefillIsRefused) {
  ASSERT_EQ(remove(JoinPath(dir_, "prefill.rbln").c_str()), 0);
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("no prefill graph"));
}

TEST_F(ArtifactTest, NoContainersIsRefused) {
  ASSERT_EQ(remove(JoinPath(dir_, "prefill.rbln").c_str()), 0);
  ASSERT_EQ(remove(JoinPath(dir_, "decoder_batch_2.rbln").c_str()), 0);
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("no compiled graphs"));
}

TEST_F(ArtifactTest, FileNameMustMatchTheCompiledGraph) {
  ASSERT_EQ(rename(JoinPath(dir_, "decoder_batch_2.rbln").c_str(),
                   JoinPath(dir_, "decoder_batch_3.rbln").c_str()),
            0);
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("decoder_batch_3.rbln"));
}

TEST_F(ArtifactTest, DisagreeingTensorNamesNameTheFile) {
  EditHeader("decoder_batch_2.rbln", [](v1::ContainerHeader* h) {
    h->mutable_kv_tensors(1)->set_name("past_key_values.0.v");
  });
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("decoder_batch_2.rbln"));
  EXPECT_THAT(s.message(), HasSubstr("past_key_values.0.v"));
}

TEST_F(ArtifactTest, DisagreeingTensorBytesAreRefused) {
  // A torn resize: one graph at 16 blocks, the other at 8.
  EditHeader("decoder_batch_2.rbln", [](v1::ContainerHeader* h) {
    for (v1::KvTensor& t : *h->mutable_kv_tensors()) {
      t.mutable_placements(0)->set_bytes(t.placements(0).bytes() / 2);
    }
  });
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("inconsistent artifact"));
}

TEST_F(ArtifactTest, DisagreeingCompiledCountsAreRefused) {
  EditHeader("decoder_batch_2.rbln", [](v1::ContainerHeader* h) {
    h->mutable_kv_resize()->set_compiled_num_blocks(12);
  });
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("compiled with 12"));
}

TEST_F(ArtifactTest, NoResizableTensorIsRefused) {
  for (const char* file : {"prefill.rbln", "decoder_batch_2.rbln"}) {
    EditHeader(file, [](v1::ContainerHeader* h) {
      for (v1::KvTensor& t : *h->mutable_kv_tensors()) t.set_resizable(false);
    });
  }
  EditConfig("\"is_auto\": true", "\"is_auto\": false");
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("no resizable KV-cache tensor"));
}

TEST_F(ArtifactTest, ConfigAndContainerDisagreeingOnResizabilityIsRefused) {
  for (const char* file : {"prefill.rbln", "decoder_batch_2.rbln"}) {
    EditHeader(file, [](v1::ContainerHeader* h) {
      for (v1::KvTensor& t : *h->mutable_kv_tensors()) t.set_resizable(false);
    });
  }
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("was compiled with it fixed"));
}

TEST_F(ArtifactTest, CountThatDoesNotDivideTheBytesIsCorruption) {
  // 64 KiB * 16 is not a multiple of 7.
  EditConfig("\"kvcache_num_blocks\": 16", "\"kvcache_num_blocks\": 7");
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("not a multiple of kvcache_num_blocks 7"));
}

TEST_F(ArtifactTest, ConfigMustAgreeWithTheContainers) {
  EditConfig("\"tensor_parallel_size\": 1", "\"tensor_parallel_size\": 2");
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("num_devices 2"));
}

TEST_F(ArtifactTest, ConfigNpuMustAgree) {
  EditConfig("\"npu\": \"RBLN-CA12\",\n  \"tensor",
             "\"npu\": \"RBLN-CR13\",\n  \"tensor");
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("RBLN-CR13"));
}

// Where the NPU came from, in optimum-rbln's order, then the header.
TEST_F(ArtifactTest, TheNpuSaysWhereItCameFrom) {
  absl::StatusOr<Artifact> a = Artifact::Open(env_, dir_);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->npu_source(), "rbln_config.json's npu");

  EditConfig("\"npu\": \"RBLN-CA12\",\n  \"tensor", "\"tensor");
  a = Artifact::Open(env_, dir_);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->npu(), "RBLN-CA12");
  EXPECT_EQ(a->npu_source(), "rbln_config.json's _compile_cfgs[0].npu");

  // An upstream re-save can leave _compile_cfgs[i].npu null.
  EditConfig("\"npu\": \"RBLN-CA12\"", "\"npu\": null");
  a = Artifact::Open(env_, dir_);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->npu(), "RBLN-CA12");
  EXPECT_EQ(a->npu_source(), "prefill.rbln's header");

  EditHeader("prefill.rbln", [](v1::ContainerHeader* h) { h->clear_npu(); });
  EditHeader("decoder_batch_2.rbln",
             [](v1::ContainerHeader* h) { h->clear_npu(); });
  a = Artifact::Open(env_, dir_);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->npu(), "");
  EXPECT_EQ(a->npu_source(), "");
}

TEST_F(ArtifactTest, KvcacheMetasMustNameTheTensors) {
  EditConfig("\"name\": \"past_key_values.1.value\"",
             "\"name\": \"past_key_values.9.value\"");
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("kvcache_metas"));
}

TEST_F(ArtifactTest, VerifyPayloadCountsEverySegmentOfEveryGraph) {
  absl::StatusOr<Artifact> plain = Artifact::Open(env_, dir_);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->verified_payload().has_value());  // not asked for

  absl::StatusOr<Artifact> a =
      Artifact::Open(env_, dir_, {.verify_payload = true});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->verified_payload().has_value());
  uint64_t segments = 0;
  uint64_t bytes = 0;
  for (const ContainerFile& file : a->containers()) {
    const Container container = testing::ContainerOf(file);
    segments += container.header.segments_size();
    for (const v1::PayloadSegment& segment : container.header.segments()) {
      bytes += segment.length();
    }
  }
  ASSERT_GT(a->containers().size(), 1u);
  EXPECT_GT(segments, a->containers().size() - 1);
  EXPECT_EQ(a->verified_payload()->segments, segments);
  EXPECT_EQ(a->verified_payload()->bytes, bytes);
  absl::StatusOr<VerifiedPayload> again = VerifyPayloads(env_, *a);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->segments, segments);
  EXPECT_EQ(again->bytes, bytes);
}

TEST_F(ArtifactTest, VerifyPayloadCatchesAFlippedPayloadByte) {
  const std::string path = JoinPath(dir_, "prefill.rbln");
  std::string bytes = testing::ReadFileOrDie(path);
  bytes[bytes.size() - 10] ^= 0x01;
  testing::WriteFileOrDie(path, bytes);
  EXPECT_TRUE(OpenStatus().ok());  // headers only
  absl::Status s = OpenStatus({.verify_payload = true});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("prefill.rbln"));
}

TEST_F(ArtifactTest, TheInspectCacheServesUnchangedFilesWithoutReadingThem) {
  // No racy window: the files were written just now.
  InspectCache cache(InspectCache::kDefaultMaxBytes, absl::ZeroDuration());
  ASSERT_TRUE(OpenStatus({.inspect_cache = &cache}).ok());
  EXPECT_EQ(cache.hits(), 0u);
  EXPECT_EQ(cache.size(), 2u);  // prefill and decoder_batch_2
  ASSERT_TRUE(OpenStatus({.inspect_cache = &cache}).ok());
  EXPECT_EQ(cache.hits(), 2u);
  // A changed file is read again (and a corrupt one is then refused).
  const std::string path = JoinPath(dir_, "prefill.rbln");
  std::string bytes = testing::ReadFileOrDie(path);
  bytes[20] ^= 0x01;  // inside the preamble's fields
  testing::WriteFileOrDie(path, bytes);
  EXPECT_EQ(OpenStatus({.inspect_cache = &cache}).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(cache.hits(), 3u);  // decoder_batch_2 only
}

// Graphs written within the racy window before an open are inspected again
// at each open (a same-size rewrite within one tick of a coarse clock would
// keep their identity); the test above keeps them with no window.
TEST_F(ArtifactTest, TheInspectCacheKeepsNoGraphChangedWithinTheRacyWindow) {
  // The fixture wrote them well within the hour.
  InspectCache cache(InspectCache::kDefaultMaxBytes, absl::Hours(1));
  ASSERT_TRUE(OpenStatus({.inspect_cache = &cache}).ok());
  ASSERT_TRUE(OpenStatus({.inspect_cache = &cache}).ok());
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.hits(), 0u);
  EXPECT_EQ(cache.misses(), 4u);  // two graphs, twice
}

TEST_F(ArtifactTest, AFileNoCodecReadsSaysHowToConfigureOne) {
  testing::WriteFileOrDie(JoinPath(dir_, "prefill.rbln"),
                          "RBLN-FAKE-REBEL 1\n{}\n");
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("prefill.rbln"));
  EXPECT_THAT(s.message(), HasSubstr("--codec-command"));
  // Get needs no codec: the count, with the compiled count unknown.
  testing::WriteFileOrDie(JoinPath(dir_, "decoder_batch_2.rbln"), "x");
  absl::StatusOr<ArtifactSummary> summary = ReadArtifactSummary(env_, dir_);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->config.kvcache_num_blocks, 16u);
  EXPECT_EQ(summary->compiled_num_blocks, 0u);
  EXPECT_EQ(summary->npu, "RBLN-CA12");  // the config's
}

TEST_F(ArtifactTest, GetReadsTheCompiledCountFromABuiltinHeader) {
  absl::StatusOr<ArtifactSummary> summary = ReadArtifactSummary(env_, dir_);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->compiled_num_blocks, 16u);
}

TEST_F(ArtifactTest, AConfigWithoutTheTensorListIsRefusedNamingBothKeys) {
  EditConfig("\"kvcache_metas\"", "\"unused_metas\"");
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("cache_metas"));
  EXPECT_THAT(s.message(), HasSubstr("kvcache_metas"));
  EXPECT_TRUE(ReadArtifactSummary(env_, dir_).ok());  // Get still answers
}

// optimum-rbln's layout for a vision-language model: the decoder's config
// nested in the parent's, its graphs in language_model/.
TEST_F(ArtifactTest, ADecoderInASubmoduleIsReadFromItsDirectory) {
  const std::string top = tmp_.Join("llava");
  ASSERT_TRUE(env_->CreateDir(top).ok());
  ASSERT_TRUE(env_->Rename(dir_, JoinPath(top, "language_model")).ok());
  const std::string sub_config =
      testing::ReadFileOrDie(JoinPath(top, "language_model/rbln_config.json"));
  testing::WriteFileOrDie(
      JoinPath(top, kRblnConfigFileName),
      absl::StrCat("{\"cls_name\": \"RBLNLlavaForConditionalGenerationConfig\","
                   " \"vision_tower\": {\"batch_size\": 1},"
                   " \"language_model\": ",
                   sub_config, "}"));
  ASSERT_TRUE(env_->CreateDir(JoinPath(top, "vision_tower")).ok());
  testing::WriteFileOrDie(JoinPath(top, "vision_tower/compiled_model.rbln"),
                          "not read");
  absl::StatusOr<Artifact> a = Artifact::Open(env_, top);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->submodule(), "language_model");
  EXPECT_EQ(a->graph_dir(), JoinPath(top, "language_model"));
  EXPECT_EQ(a->prefill().path, JoinPath(top, "language_model/prefill.rbln"));
  EXPECT_THAT(a->companion_files(), ElementsAre("vision_tower"));
  EXPECT_TRUE(a->submodule_config_text().has_value());

  // The two copies of the count must agree.
  testing::WriteFileOrDie(
      JoinPath(top, "language_model/rbln_config.json"),
      absl::StrReplaceAll(sub_config, {{"\"kvcache_num_blocks\": 16",
                                        "\"kvcache_num_blocks\": 8"}}));
  absl::Status s = Artifact::Open(env_, top).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("disagree"));
}

}  // namespace
}  // namespace rbln
