#include "server/health_server.h"

#include <chrono>
#include <vector>

namespace rbln {
namespace {

// Health requests carry a service name; nothing bigger is accepted on the
// health port.
constexpr int kHealthMaxRequestBytes = 4096;

// What one connection of the health port may hold, so that connections
// left open cannot pile up: a probe connects, checks and leaves.
struct ConnectionLimit {
  const char* arg;
  int value;
};
constexpr ConnectionLimit kHealthConnectionLimits[] = {
    // A connection that has not sent HTTP/2's preface and settings by then
    // is closed (gRPC's default waits 120 s).
    {GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, 5'000},
    // One with no call for this long is sent GOAWAY and closed.
    {GRPC_ARG_MAX_CONNECTION_IDLE_MS, 30'000},
    // Any connection is closed after this long, its calls given the grace
    // to finish (a Watch ends and is made again).
    {GRPC_ARG_MAX_CONNECTION_AGE_MS, 300'000},
    {GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, 10'000},
    // A peer that stops answering pings is dropped.
    {GRPC_ARG_KEEPALIVE_TIME_MS, 30'000},
    {GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000},
    // Calls at once on one connection: a probe makes one.
    {GRPC_ARG_MAX_CONCURRENT_STREAMS, 8},
};

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
  for (const ConnectionLimit& limit : kHealthConnectionLimits) {
    builder.AddChannelArgument(limit.arg, limit.value);
  }
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
