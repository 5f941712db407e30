// DescribeReplies: what makes a kept reply found, and its bound.
#include "server/describe_replies.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device/device_spec.h"
#include "core/os/env.h"
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
  replies.Insert(artifact_, "a", 0, device_, grpc::Slice(std::string("reply")));
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
  replies.Insert(artifact_, "a", 0, absl::UnavailableError("no device"),
                 grpc::Slice(std::string("no plan")));
  EXPECT_EQ(
      Text(replies.Find(artifact_, "a", absl::UnavailableError("no device"))),
      "no plan");
  EXPECT_EQ(Text(replies.Find(artifact_, "a", device_)), "(none)");
  EXPECT_EQ(replies.size(), 1u);
}

TEST_F(DescribeRepliesTest, AGenerationFindsTheReplyMadeUnderIt) {
  DescribeReplies replies;
  replies.Insert(artifact_, "a", 7, device_, grpc::Slice(std::string("at 7")));
  EXPECT_EQ(Text(replies.Find(artifact_, "a", uint64_t{7})), "at 7");
  // Another generation, or none (0: the provider cannot say), is no match;
  // nor is another name or another artifact object.
  EXPECT_EQ(Text(replies.Find(artifact_, "a", uint64_t{8})), "(none)");
  EXPECT_EQ(Text(replies.Find(artifact_, "a", uint64_t{0})), "(none)");
  EXPECT_EQ(Text(replies.Find(artifact_, "b", uint64_t{7})), "(none)");
  auto copy = std::make_shared<const Artifact>(*artifact_);
  EXPECT_EQ(Text(replies.Find(copy, "a", uint64_t{7})), "(none)");
  // The device it was made for still finds it.
  EXPECT_EQ(Text(replies.Find(artifact_, "a", device_)), "at 7");
  // One made without a generation is found by its device only.
  replies.Insert(artifact_, "a", 0, device_, grpc::Slice(std::string("at 0")));
  EXPECT_EQ(Text(replies.Find(artifact_, "a", uint64_t{7})), "(none)");
  EXPECT_EQ(Text(replies.Find(artifact_, "a", device_)), "at 0");
  EXPECT_EQ(replies.hits(), 3u);
}

TEST_F(DescribeRepliesTest, ALaterArtifactAtTheSameAddressIsNotGivenIt) {
  DescribeReplies replies;
  // Two owners of one address, as when an artifact is freed and the next
  // one is made where it was.
  auto storage = std::make_shared<const Artifact>(*artifact_);
  auto first = std::make_shared<int>(0);
  std::shared_ptr<const Artifact> old(first, storage.get());
  replies.Insert(old, "a", 0, device_, grpc::Slice(std::string("old")));
  EXPECT_EQ(Text(replies.Find(old, "a", device_)), "old");
  old.reset();
  first.reset();
  auto second = std::make_shared<int>(0);
  std::shared_ptr<const Artifact> later(second, storage.get());
  ASSERT_EQ(later.get(), storage.get());
  EXPECT_EQ(Text(replies.Find(later, "a", device_)), "(none)");
  EXPECT_EQ(replies.hits(), 1u);
}

TEST_F(DescribeRepliesTest, StaysWithinItsBytesDroppingTheLeastRecentlyUsed) {
  DescribeReplies replies;
  const std::string reply(64 << 10, 'r');
  std::vector<std::shared_ptr<const Artifact>> held;
  for (uint64_t i = 0; i < 2 * DescribeReplies::kMaxBytes / reply.size(); ++i) {
    held.push_back(std::make_shared<const Artifact>(*artifact_));
    replies.Insert(held.back(), "a", 0, device_, grpc::Slice(reply));
    // The first stays the most recently used.
    EXPECT_EQ(Text(replies.Find(held.front(), "a", device_)).size(),
              reply.size());
    ASSERT_LE(replies.bytes(), DescribeReplies::kMaxBytes);
  }
  EXPECT_LT(replies.size(), held.size());
  EXPECT_EQ(Text(replies.Find(held.back(), "a", device_)).size(), reply.size());
  EXPECT_EQ(Text(replies.Find(held[1], "a", device_)), "(none)");
  // A reply beyond the whole bound is not kept.
  const std::string huge(DescribeReplies::kMaxBytes + 1, 'h');
  replies.Insert(held[1], "a", 0, device_, grpc::Slice(huge));
  EXPECT_EQ(Text(replies.Find(held[1], "a", device_)), "(none)");
}

}  // namespace
}  // namespace rbln
