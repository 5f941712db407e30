#include "server/request_metrics.h"

#include <array>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/metrics.h"

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

// "/rbln.artifact.v1.ArtifactService/GetKvcacheNumBlocks" as its service and
// method; a name of another form (gRPC's own for a method no service has)
// is all method.
std::pair<absl::string_view, absl::string_view> SplitMethod(
    absl::string_view full) {
  absl::string_view rest = full;
  if (absl::ConsumePrefix(&rest, "/")) {
    const size_t slash = rest.find('/');
    if (slash != absl::string_view::npos) {
      return {rest.substr(0, slash), rest.substr(slash + 1)};
    }
  }
  return {"", full};
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
      const auto [service, method] = SplitMethod(method_);
      // gRPC's codes are absl's, number for number.
      const std::string code = absl::StatusCodeToString(
          static_cast<absl::StatusCode>(methods->GetSendStatus().error_code()));
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
