// ArtifactServiceImpl: the gRPC face of the core library. Handlers only
// translate: request -> ArtifactStore / DramProvider call -> reply, and
// absl::Status -> grpc::Status (the canonical codes are the same numbers).
// Every request is logged as one structured line.
//
// Thread-safe: gRPC calls handlers concurrently.
#ifndef RBLN_SERVER_ARTIFACT_SERVICE_H_
#define RBLN_SERVER_ARTIFACT_SERVICE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "core/dram.h"
#include "core/store.h"
#include "rbln/artifact/v1/artifact_service.grpc.pb.h"

namespace rbln {

namespace v1 = ::rbln::artifact::v1;

class ArtifactServiceImpl final : public v1::ArtifactService::Service {
 public:
  // `store` and `dram` must outlive the service. At most
  // `max_concurrent_writes` writes run at once; more get UNAVAILABLE.
  ArtifactServiceImpl(ArtifactStore* store, DramProvider* dram,
                      int max_concurrent_writes);

  grpc::Status GetKvcacheNumBlocks(
      grpc::ServerContext* context, const v1::GetKvcacheNumBlocksRequest* req,
      v1::GetKvcacheNumBlocksResponse* resp) override;
  grpc::Status SetKvcacheNumBlocks(grpc::ServerContext* context,
                                   const v1::SetKvcacheNumBlocksRequest* req,
                                   v1::ResizeResponse* resp) override;
  grpc::Status FitMemoryBudget(grpc::ServerContext* context,
                               const v1::FitMemoryBudgetRequest* req,
                               v1::ResizeResponse* resp) override;
  grpc::Status DescribeArtifact(grpc::ServerContext* context,
                                const v1::DescribeArtifactRequest* req,
                                v1::DescribeArtifactResponse* resp) override;
  grpc::Status ListArtifacts(grpc::ServerContext* context,
                             const v1::ListArtifactsRequest* req,
                             v1::ListArtifactsResponse* resp) override;
  grpc::Status GetDeviceInfo(grpc::ServerContext* context,
                             const v1::GetDeviceInfoRequest* req,
                             v1::GetDeviceInfoResponse* resp) override;
  grpc::Status GetWriteProgress(grpc::ServerContext* context,
                                const v1::GetWriteProgressRequest* req,
                                v1::GetWriteProgressResponse* resp) override;

 private:
  struct Progress {
    uint64_t done = 0;
    uint64_t total = 0;
  };

  // Runs a Set or Fit: admission, progress tracking, the store call, and the
  // reply.
  absl::Status Write(grpc::ServerContext* context, WriteRequest request,
                     const v1::WriteOptions& options, v1::ResizeResponse* resp);

  // The store-relative name for logs (the request's text when invalid).
  std::string LogName(const std::string& requested) const;

  ArtifactStore* const store_;
  DramProvider* const dram_;
  const int max_concurrent_writes_;

  absl::Mutex mu_;
  int active_writes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, Progress> progress_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rbln

#endif  // RBLN_SERVER_ARTIFACT_SERVICE_H_
