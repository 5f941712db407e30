// The metrics endpoint (--metrics-listen, docs/metrics.md): GET /metrics
// answers metrics::Registry's text exposition over plain HTTP, served by
// libmicrohttpd (Debian's libmicrohttpd-dev) on a thread of its own. Any
// other path is 404, any method but GET (and HEAD) on /metrics is 405.
//
// It serves counts only: no artifact names, callers or paths.
//
// Thread-safe: Start and the destructor are called once each.
#ifndef RBLN_SERVER_METRICS_HTTP_H_
#define RBLN_SERVER_METRICS_HTTP_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/server_address.h"
#include "core/metrics.h"

struct MHD_Daemon;

namespace rbln {

class MetricsHttpServer {
 public:
  // Binds `address` (kTcp; a host name binds its first address) and serves
  // `registry`, which must outlive the server. Errors, with messages that
  // name the address: UNAVAILABLE when the port is in use, INVALID_ARGUMENT
  // when the host does not resolve or `address` is not HOST:PORT,
  // FAILED_PRECONDITION when it cannot be bound otherwise (an address this
  // host does not have, a port below 1024 without the privilege).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const ServerAddress& address, const metrics::Registry* registry);
  ~MetricsHttpServer();  // stops serving; answers in progress finish first
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The port bound (the one asked for, or the kernel's choice for 0).
  uint16_t port() const { return port_; }

 private:
  explicit MetricsHttpServer(uint16_t port) : port_(port) {}

  const uint16_t port_;
  MHD_Daemon* daemon_ = nullptr;
};

}  // namespace rbln

#endif  // RBLN_SERVER_METRICS_HTTP_H_
