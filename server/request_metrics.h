// Requests by method and code, and their latency, for the metrics
// (docs/metrics.md): a gRPC server interceptor, so that every method of the
// server is counted (the ArtifactService, health checking, reflection), and
// every outcome, including the errors that gRPC itself answers. A call to a
// method that no service has is counted under service and method "unknown",
// not under the name its caller made up.
//
// Thread-safe: gRPC creates one interceptor per call, on any thread.
#ifndef RBLN_SERVER_REQUEST_METRICS_H_
#define RBLN_SERVER_REQUEST_METRICS_H_

#include <memory>

#include "grpcpp/support/server_interceptor.h"

namespace rbln {

// Registers rbln_artifactd_requests_total and
// rbln_artifactd_request_duration_seconds in metrics::Registry::Default()
// (the first call only) and returns an interceptor factory that counts into
// them; give it to ServerBuilder::experimental().SetInterceptorCreators.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewRequestMetricsFactory();

}  // namespace rbln

#endif  // RBLN_SERVER_REQUEST_METRICS_H_
