#include "server/proto_conversions.h"

#include <string>

#include "absl/status/status.h"
#include "core/error_facts.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

TEST(ProtoConversionsTest, OkIsOk) {
  EXPECT_TRUE(ToGrpc(absl::OkStatus()).ok());
}

TEST(ProtoConversionsTest, AStatusWithoutFactsKeepsItsCodeAndMessage) {
  const grpc::Status status = ToGrpc(absl::NotFoundError("no 'x' here"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), "no 'x' here");
  EXPECT_TRUE(status.error_details().empty());
}

TEST(ProtoConversionsTest, FactsBecomeTheErrorDetail) {
  const absl::Status with_facts =
      WithErrorFacts(absl::FailedPreconditionError("too big"),
                     {.reason = ErrorReason::kExceedsDevice,
                      .artifact = "team/llama",
                      .current_num_blocks = 10,
                      .max_fitting_num_blocks = 8});
  const grpc::Status status = ToGrpc(with_facts);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  google::rpc::Status details;
  ASSERT_TRUE(details.ParseFromString(status.error_details()));
  EXPECT_EQ(details.message(), "too big");
  ASSERT_EQ(details.details_size(), 1);
  v1::ErrorDetail detail;
  ASSERT_TRUE(details.details(0).UnpackTo(&detail));
  EXPECT_EQ(detail.reason(), v1::ErrorDetail::EXCEEDS_DEVICE);
  EXPECT_EQ(detail.artifact(), "team/llama");
  EXPECT_EQ(detail.current_num_blocks(), 10);
  EXPECT_FALSE(detail.has_num_min_blocks());
  EXPECT_EQ(detail.max_fitting_num_blocks(), 8);
}

TEST(ProtoConversionsTest, NamesThatAreNotUtf8AreEscaped) {
  const std::string name = WireName("a\xff");
  EXPECT_NE(name, "a\xff");
  v1::StoreRoot root;
  root.set_dir(name);  // a proto3 string field takes only UTF-8
  EXPECT_TRUE(root.IsInitialized());
}

TEST(ProtoConversionsTest, DeviceInfo) {
  DeviceReport report;
  report.source = "spec";
  report.warnings = {"no probe"};
  report.devices.push_back({.index = 0,
                            .name = "RBLN-CA12",
                            .total_bytes = 16,
                            .available_bytes = 12,
                            .chiplets = 1,
                            .source = "spec"});
  v1::GetDeviceInfoResponse resp;
  FillDeviceInfo(report, &resp);
  EXPECT_EQ(resp.source(), "spec");
  ASSERT_EQ(resp.warnings_size(), 1);
  ASSERT_EQ(resp.devices_size(), 1);
  EXPECT_EQ(resp.devices(0).name(), "RBLN-CA12");
  EXPECT_EQ(resp.devices(0).total_bytes(), 16);
  EXPECT_EQ(resp.devices(0).available_bytes(), 12);
}

TEST(ProtoConversionsTest, Bucket) {
  const BucketFit fit{.node = 1,
                      .chiplet = 2,
                      .budget_bytes = 100,
                      .device_available_bytes = 150,
                      .other_bytes = 10,
                      .kv_bytes = 80,
                      .kv_bytes_per_block = 8,
                      .headroom_bytes = 10};
  v1::BucketPlan plan;
  FillBucket(fit, &plan);
  EXPECT_EQ(plan.node(), 1);
  EXPECT_EQ(plan.chiplet(), 2);
  EXPECT_EQ(plan.available_bytes(), 100);  // the budget, kept a release
  EXPECT_EQ(plan.budget_bytes(), 100);
  EXPECT_EQ(plan.device_available_bytes(), 150);
  EXPECT_EQ(plan.other_bytes(), 10);
  EXPECT_EQ(plan.kv_bytes(), 80);
  EXPECT_EQ(plan.kv_bytes_per_block(), 8);
  EXPECT_EQ(plan.headroom_bytes(), 10);
}

// A write through a version link names the link as asked and its target;
// without one, link_target stays empty.
TEST(ProtoConversionsTest, ResizeNamesALinkAndItsTarget) {
  WriteRequest request;
  request.target = 10;
  WriteResult result;
  result.name = "current";
  result.link_target = "v2";
  v1::ResizeResponse resp;
  FillResizeResponse(request, result, "/srv/store", &resp);
  EXPECT_EQ(resp.artifact(), "current");
  EXPECT_EQ(resp.link_target(), "v2");
  result.name = "v2";
  result.link_target.clear();
  resp.Clear();
  FillResizeResponse(request, result, "/srv/store", &resp);
  EXPECT_EQ(resp.artifact(), "v2");
  EXPECT_EQ(resp.link_target(), "");
}

}  // namespace
}  // namespace rbln
