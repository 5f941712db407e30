#include "client/requests.h"

#include <string>

namespace rbln::client {
namespace {

namespace v1 = ::rbln::artifact::v1;

v1::WriteOptions BuildWriteOptions(const CliOptions& options,
                                   absl::string_view operation_id) {
  v1::WriteOptions w;
  w.set_output_dir(options.output_dir);
  w.set_replace(options.replace);
  w.set_dry_run(options.dry_run);
  w.set_verify(options.verify);
  w.set_force(options.force);
  if (options.expected_current.has_value()) {
    w.set_expected_current(*options.expected_current);
  }
  w.set_operation_id(std::string(operation_id));
  return w;
}

}  // namespace

v1::GetKvcacheNumBlocksRequest BuildGetRequest(const CliOptions& options) {
  v1::GetKvcacheNumBlocksRequest request;
  request.set_artifact(options.model_id);
  return request;
}

v1::SetKvcacheNumBlocksRequest BuildSetRequest(const CliOptions& options,
                                               absl::string_view operation_id) {
  v1::SetKvcacheNumBlocksRequest request;
  request.set_artifact(options.model_id);
  request.set_num_blocks(options.num_blocks);
  for (const std::string& other : options.beside) request.add_beside(other);
  *request.mutable_options() = BuildWriteOptions(options, operation_id);
  return request;
}

v1::FitMemoryBudgetRequest BuildFitRequest(const CliOptions& options,
                                           absl::string_view operation_id) {
  v1::FitMemoryBudgetRequest request;
  request.set_artifact(options.model_id);
  request.set_budget(options.budget);
  for (int device : options.devices) request.add_devices(device);
  for (const std::string& other : options.beside) request.add_beside(other);
  *request.mutable_options() = BuildWriteOptions(options, operation_id);
  return request;
}

v1::FitTogetherRequest BuildFitTogetherRequest(const CliOptions& options) {
  v1::FitTogetherRequest request;
  for (size_t i = 0; i < options.colocate.size(); ++i) {
    v1::Member* member = request.add_members();
    member->set_artifact(options.colocate[i]);
    member->set_weight(i < options.weights.size() ? options.weights[i] : 1);
  }
  request.set_budget(options.budget);
  for (int device : options.devices) request.add_devices(device);
  request.set_describe_only(options.operation == Operation::kDescribe);
  request.mutable_options()->set_dry_run(options.dry_run);
  return request;
}

v1::DescribeArtifactRequest BuildDescribeRequest(const CliOptions& options) {
  v1::DescribeArtifactRequest request;
  request.set_artifact(options.model_id);
  request.set_verify_payload(options.verify);
  return request;
}

}  // namespace rbln::client
