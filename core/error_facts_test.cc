#include "core/error_facts.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::Optional;

TEST(ErrorFactsTest, RoundTripsEveryFactThroughThePayload) {
  ErrorFacts facts;
  facts.reason = ErrorReason::kBelowMinBlocks;
  facts.artifact = "team/llama\n\"odd\"";
  facts.current_num_blocks = 16;
  facts.num_min_blocks = 9;
  facts.num_full_blocks = 0xffffffffffffffffull;
  const absl::Status status =
      WithErrorFacts(absl::InvalidArgumentError("below"), facts);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "below");
  EXPECT_THAT(GetErrorFacts(status), Optional(facts));
}

TEST(ErrorFactsTest, AbsentCountsStayAbsent) {
  ErrorFacts facts;
  facts.reason = ErrorReason::kCasMismatch;
  facts.current_num_blocks = 0;
  std::optional<ErrorFacts> read =
      GetErrorFacts(WithErrorFacts(absl::AbortedError("cas"), facts));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->reason, ErrorReason::kCasMismatch);
  EXPECT_THAT(read->current_num_blocks, Optional(0u));
  EXPECT_FALSE(read->num_min_blocks.has_value());
  EXPECT_FALSE(read->num_full_blocks.has_value());
  EXPECT_EQ(read->artifact, "");
}

TEST(ErrorFactsTest, NoFactsOnAPlainStatusAndNoneOnOk) {
  EXPECT_FALSE(GetErrorFacts(absl::NotFoundError("x")).has_value());
  const absl::Status ok = WithErrorFacts(absl::OkStatus(), {});
  EXPECT_TRUE(ok.ok());
  EXPECT_FALSE(GetErrorFacts(ok).has_value());
}

TEST(ErrorFactsTest, MalformedPayloadIsNoFacts) {
  absl::Status status = absl::AbortedError("x");
  status.SetPayload(kErrorFactsTypeUrl, absl::Cord("reason=NO_SUCH\n"));
  EXPECT_FALSE(GetErrorFacts(status).has_value());
  status.SetPayload(kErrorFactsTypeUrl,
                    absl::Cord("reason=CAS_MISMATCH\ncurrent_num_blocks=-1\n"));
  EXPECT_FALSE(GetErrorFacts(status).has_value());
  status.SetPayload(kErrorFactsTypeUrl, absl::Cord("artifact=a\n"));
  EXPECT_FALSE(GetErrorFacts(status).has_value());
}

TEST(ErrorFactsTest, NameArtifactFillsOnlyAnEmptyName) {
  const absl::Status unnamed = WithErrorFacts(
      absl::NotFoundError("x"), {.reason = ErrorReason::kArtifactNotFound});
  std::optional<ErrorFacts> named =
      GetErrorFacts(NameArtifactInFacts(unnamed, "llama"));
  ASSERT_TRUE(named.has_value());
  EXPECT_EQ(named->artifact, "llama");
  EXPECT_EQ(GetErrorFacts(NameArtifactInFacts(
                              NameArtifactInFacts(unnamed, "first"), "second"))
                ->artifact,
            "first");
  EXPECT_FALSE(
      GetErrorFacts(NameArtifactInFacts(absl::NotFoundError("y"), "llama"))
          .has_value());
}

TEST(ErrorFactsTest, ReasonNamesAreTheProtoEnumNames) {
  EXPECT_EQ(ErrorReasonName(ErrorReason::kBelowMinBlocks), "BELOW_MIN_BLOCKS");
  EXPECT_EQ(ErrorReasonName(ErrorReason::kCasMismatch), "CAS_MISMATCH");
  EXPECT_EQ(ErrorReasonName(ErrorReason::kOutputExists), "OUTPUT_EXISTS");
  EXPECT_EQ(ErrorReasonName(ErrorReason::kOutsideStore), "OUTSIDE_STORE");
}

}  // namespace
}  // namespace rbln
