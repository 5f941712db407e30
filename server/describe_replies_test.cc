#include "server/describe_replies.h"

#include <memory>
#include <string>

#include "core/device/device_spec.h"
#include "core/env.h"
#include "core/testing/test_util.h"
#include "gtest/gtest.h"
#include "tools/synth.h"

namespace rbln {
namespace {

std::string Text(const std::optional<grpc::Slice>& slice) {
  if (!slice.has_value()) return "(none)";
  return std::string(reinterpret_cast<const char*>(slice->begin()),
                     slice->size());
}

class DescribeRepliesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        WriteSyntheticArtifact(Env::Default(), SynthSpec(), tmp_.Join("a"))
            .ok());
    absl::StatusOr<Artifact> opened =
        Artifact::Open(Env::Default(), tmp_.Join("a"));
    ASSERT_TRUE(opened.ok()) << opened.status();
    artifact_ = std::make_shared<const Artifact>(*std::move(opened));
    absl::StatusOr<DeviceSpec> spec = LookupDeviceSpec("RBLN-CA12");
    ASSERT_TRUE(spec.ok()) << spec.status();
    device_ = DramChoice{*spec, "spec table", {}};
  }

  testing::TempDir tmp_;
  std::shared_ptr<const Artifact> artifact_;
  absl::StatusOr<DramChoice> device_;
};

TEST_F(DescribeRepliesTest, FindsTheReplyOfTheSameArtifactNameAndDevice) {
  DescribeReplies replies;
  EXPECT_EQ(Text(replies.Find(artifact_, "a", device_)), "(none)");
  replies.Insert(artifact_, "a", device_, grpc::Slice(std::string("reply")));
  EXPECT_EQ(Text(replies.Find(artifact_, "a", device_)), "reply");

  // Any of the three different: none.
  EXPECT_EQ(Text(replies.Find(artifact_, "b", device_)), "(none)");
  absl::StatusOr<DramChoice> other = device_;
  other->source = "rbln-smi";
  EXPECT_EQ(Text(replies.Find(artifact_, "a", other)), "(none)");
  other = device_;
  other->warnings.push_back("a warning");
  EXPECT_EQ(Text(replies.Find(artifact_, "a", other)), "(none)");
  other = device_;
  other->spec.total_bytes_per_node /= 2;
  EXPECT_EQ(Text(replies.Find(artifact_, "a", other)), "(none)");
  EXPECT_EQ(
      Text(replies.Find(artifact_, "a", absl::UnavailableError("no device"))),
      "(none)");
  // An equal artifact that is another object (read again): none.
  auto copy = std::make_shared<const Artifact>(*artifact_);
  EXPECT_EQ(Text(replies.Find(copy, "a", device_)), "(none)");

  // A device error is an input like any other.
  replies.Insert(artifact_, "a", absl::UnavailableError("no device"),
                 grpc::Slice(std::string("no plan")));
  EXPECT_EQ(
      Text(replies.Find(artifact_, "a", absl::UnavailableError("no device"))),
      "no plan");
  EXPECT_EQ(Text(replies.Find(artifact_, "a", device_)), "(none)");
  EXPECT_EQ(replies.size(), 1u);
}

TEST_F(DescribeRepliesTest, KeepsNoArtifactAliveAndStaysBounded) {
  DescribeReplies replies;
  std::weak_ptr<const Artifact> gone;
  {
    auto copy = std::make_shared<const Artifact>(*artifact_);
    gone = copy;
    replies.Insert(copy, "a", device_, grpc::Slice(std::string("old")));
  }
  EXPECT_TRUE(gone.expired());
  // Whatever object takes its address next is not given its reply.
  for (int i = 0; i < 8; ++i) {
    auto next = std::make_shared<const Artifact>(*artifact_);
    EXPECT_EQ(Text(replies.Find(next, "a", device_)), "(none)");
  }

  std::vector<std::shared_ptr<const Artifact>> held;
  for (size_t i = 0; i < DescribeReplies::kMaxReplies + 10; ++i) {
    held.push_back(std::make_shared<const Artifact>(*artifact_));
    replies.Insert(held.back(), "a", device_, grpc::Slice(std::string("r")));
    ASSERT_LE(replies.size(), DescribeReplies::kMaxReplies);
  }
  EXPECT_EQ(Text(replies.Find(held.back(), "a", device_)), "r");
}

}  // namespace
}  // namespace rbln
