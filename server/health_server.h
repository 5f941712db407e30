// HealthServer: the --health-listen server, grpc.health.v1.Health (gRPC's
// default health service) and nothing else, plaintext, for probes that
// present no client certificate (kubelet's gRPC probes). Its statuses are
// set through server()->GetHealthCheckService(), as the main server's are
// (daemon.h keeps the two alike).
//
// Call grpc::EnableDefaultHealthCheckService(true) before Start. Start and
// the destructor from one thread; the health service itself is
// thread-safe.
#ifndef RBLN_SERVER_HEALTH_SERVER_H_
#define RBLN_SERVER_HEALTH_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "grpcpp/grpcpp.h"

namespace rbln {

class HealthServer {
 public:
  // nullptr when it cannot listen on `address` (a gRPC target).
  static std::unique_ptr<HealthServer> Start(const std::string& address);
  // Stops serving at once.
  ~HealthServer();
  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

  grpc::Server* server() const { return server_.get(); }

 private:
  HealthServer() = default;

  // Waits on the queue until it is shut down and empty.
  void Drain();

  std::unique_ptr<grpc::ServerCompletionQueue> queue_;
  std::unique_ptr<grpc::Server> server_;
  std::thread poller_;
};

}  // namespace rbln

#endif  // RBLN_SERVER_HEALTH_SERVER_H_
