#include "server/request_metrics.h"

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
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

// One method's series. FamilyBase::Child finds a child by its label values
// in an ordered map (some 1,500 instructions of string compares, on every
// call, Health/Check's included); a method's children never change, so
// each is found once here and kept.
class MethodSeries {
 public:
  MethodSeries(absl::string_view service, absl::string_view method)
      : service_(service),
        method_(method),
        duration_(Families().durations.WithLabels({service_, method_})) {}

  metrics::Histogram& duration() { return duration_; }

  metrics::Counter& requests(grpc::StatusCode status) {
    const size_t index = static_cast<size_t>(status);
    if (index >= requests_.size()) return Requests(status);
    metrics::Counter* counter =
        requests_[index].load(std::memory_order_acquire);
    if (counter == nullptr) {
      // Two calls may both look it up; both find the same child.
      counter = &Requests(status);
      requests_[index].store(counter, std::memory_order_release);
    }
    return *counter;
  }

 private:
  metrics::Counter& Requests(grpc::StatusCode status) {
    // gRPC's codes are absl's, number for number.
    const std::string code =
        absl::StatusCodeToString(static_cast<absl::StatusCode>(status));
    return Families().requests.WithLabels({service_, method_, code});
  }

  const std::string service_;
  const std::string method_;
  metrics::Histogram& duration_;
  // By status code, 0 (OK) to 16 (UNAUTHENTICATED).
  std::array<std::atomic<metrics::Counter*>, 17> requests_{};
};

// The series of every method a call reached, by its full name, and one for
// calls that reached none. Bounded by the methods the server has: a name a
// caller made up is counted as "unknown" and never kept.
MethodSeries& SeriesOf(absl::string_view full_method, bool reached) {
  static MethodSeries* const unknown = new MethodSeries(kUnknown, kUnknown);
  if (!reached) return *unknown;
  static absl::Mutex mu;
  static auto* const known ABSL_GUARDED_BY(mu) =
      new absl::flat_hash_map<std::string, std::unique_ptr<MethodSeries>>();
  {
    absl::ReaderMutexLock lock(&mu);
    if (auto it = known->find(full_method); it != known->end()) {
      return *it->second;
    }
  }
  absl::MutexLock lock(&mu);
  std::unique_ptr<MethodSeries>& series = (*known)[full_method];
  if (series == nullptr) {
    const auto [service, method] = SplitMethod(full_method);
    series = std::make_unique<MethodSeries>(service, method);
  }
  return *series;
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
      MethodSeries& series = SeriesOf(method_, ReachedAMethod(methods, status));
      series.requests(status).Increment();
      series.duration().Observe(absl::ToDoubleSeconds(took));
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
