// The gRPC requests of a validated `rbln-artifact` command line (whose
// paths ResolvePaths already resolved).
//
// Thread-safe: pure functions.
#ifndef RBLN_CLIENT_REQUESTS_H_
#define RBLN_CLIENT_REQUESTS_H_

#include "absl/strings/string_view.h"
#include "client/options.h"
#include "rbln/artifact/v1/artifact_service.pb.h"

namespace rbln::client {

// `operation_id` (may be empty) names the write for GetWriteProgress.
rbln::artifact::v1::GetKvcacheNumBlocksRequest BuildGetRequest(
    const CliOptions& options);
rbln::artifact::v1::SetKvcacheNumBlocksRequest BuildSetRequest(
    const CliOptions& options, absl::string_view operation_id);
rbln::artifact::v1::FitMemoryBudgetRequest BuildFitRequest(
    const CliOptions& options, absl::string_view operation_id);
// --colocate: FitTogether, for --set-memory-budget (dry_run with --dry-run)
// or --describe (describe_only).
rbln::artifact::v1::FitTogetherRequest BuildFitTogetherRequest(
    const CliOptions& options);
rbln::artifact::v1::DescribeArtifactRequest BuildDescribeRequest(
    const CliOptions& options);

}  // namespace rbln::client

#endif  // RBLN_CLIENT_REQUESTS_H_
