#include "server/health_server.h"

#include <chrono>
#include <vector>

namespace rbln {
namespace {

// Health requests carry a service name; nothing bigger is accepted on the
// health port.
constexpr int kHealthMaxRequestBytes = 4096;

// Drops the plugins that every ServerBuilder takes from gRPC's process-wide
// list (server reflection, here), so that the health port describes nothing.
class WithoutPlugins final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*
                         plugins) override {
    plugins->clear();
  }
};

}  // namespace

std::unique_ptr<HealthServer> HealthServer::Start(const std::string& address) {
  auto health = std::unique_ptr<HealthServer>(new HealthServer());
  grpc::ServerBuilder builder;
  builder.SetOption(std::make_unique<WithoutPlugins>());
  builder.AddListeningPort(address, grpc::InsecureServerCredentials());
  builder.SetMaxReceiveMessageSize(kHealthMaxRequestBytes);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // gRPC 1.51 builds a server without services only with a completion
  // queue that is polled: the default health service, a callback
  // service, is added later. No call is ever requested on this queue; a
  // thread waits on it until shutdown.
  health->queue_ = builder.AddCompletionQueue(/*is_frequently_polled=*/true);
  health->server_ = builder.BuildAndStart();
  if (health->server_ == nullptr) {
    health->queue_->Shutdown();
    health->Drain();
    return nullptr;
  }
  health->poller_ = std::thread([self = health.get()]() { self->Drain(); });
  return health;
}

HealthServer::~HealthServer() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now());
  queue_->Shutdown();
  poller_.join();
}

void HealthServer::Drain() {
  void* tag = nullptr;
  bool ok = false;
  while (queue_->Next(&tag, &ok)) {
  }
}

}  // namespace rbln
