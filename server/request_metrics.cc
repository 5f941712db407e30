#include "server/request_metrics.h"

#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/metrics.h"
#include "rbln/artifact/v1/reply_metadata.h"

namespace rbln {
namespace {

using grpc::experimental::InterceptionHookPoints;

struct RequestFamilies {
  metrics::CounterFamily& requests;
  metrics::HistogramFamily& durations;
};

RequestFamilies& Families() {
  static RequestFamilies* const families = [] {
    metrics::Registry& registry = metrics::Registry::Default();
    return new RequestFamilies{
        registry.AddCounter("rbln_artifactd_requests_total",
                            "gRPC calls answered, by service, method and "
                            "status code (OK, INVALID_ARGUMENT, ...).",
                            {"service", "method", "code"}),
        registry.AddHistogram(
            "rbln_artifactd_request_duration_seconds",
            "Time from a call's start to its status, by service and method.",
            metrics::DurationBuckets(), {"service", "method"})};
  }();
  return *families;
}

// The labels of a call to a method no service of the server has.
constexpr absl::string_view kUnknown = "unknown";

// "/rbln.artifact.v1.ArtifactService/GetKvcacheNumBlocks" as its service and
// method.
std::pair<absl::string_view, absl::string_view> SplitMethod(
    absl::string_view full) {
  absl::string_view rest = full;
  if (absl::ConsumePrefix(&rest, "/")) {
    const size_t slash = rest.find('/');
    if (slash != absl::string_view::npos) {
      return {rest.substr(0, slash), rest.substr(slash + 1)};
    }
  }
  return {kUnknown, kUnknown};
}

// Whether the call reached a method of the server. gRPC hands interceptors
// whatever name a caller sent, and answers an unknown one UNIMPLEMENTED; the
// daemon's own handlers mark every error (UNIMPLEMENTED included, for a
// multimodal artifact), and the health and reflection services never answer
// UNIMPLEMENTED. Only known names become labels, so that callers cannot add
// series at will.
bool ReachedAMethod(grpc::experimental::InterceptorBatchMethods* methods,
                    grpc::StatusCode code) {
  if (code != grpc::StatusCode::UNIMPLEMENTED) return true;
  const std::multimap<std::string, std::string>* trailing =
      methods->GetSendTrailingMetadata();
  return trailing != nullptr &&
         trailing->count(rbln::artifact::v1::kReplyMetadataKey) > 0;
}

class RequestMetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit RequestMetricsInterceptor(const char* method)
      : method_(method != nullptr ? method : ""), start_(absl::Now()) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      const absl::Duration took = absl::Now() - start_;
      const grpc::StatusCode status = methods->GetSendStatus().error_code();
      const auto [service, method] = ReachedAMethod(methods, status)
                                         ? SplitMethod(method_)
                                         : std::make_pair(kUnknown, kUnknown);
      // gRPC's codes are absl's, number for number.
      const std::string code =
          absl::StatusCodeToString(static_cast<absl::StatusCode>(status));
      RequestFamilies& families = Families();
      families.requests.WithLabels({service, method, code}).Increment();
      families.durations.WithLabels({service, method})
          .Observe(absl::ToDoubleSeconds(took));
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  const absl::Time start_;
};

class RequestMetricsFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    // gRPC takes ownership of the interceptor.
    return new RequestMetricsInterceptor(info->method());
  }
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewRequestMetricsFactory() {
  Families();
  return std::make_unique<RequestMetricsFactory>();
}

}  // namespace rbln
