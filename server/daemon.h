// Daemon: rbln-artifactd serving, started from a DaemonConfig
// (daemon_config.h): the store open, the external codec and the device
// provider chosen, the ArtifactService on every listener (Unix sockets
// accepted by the daemon itself, unix_listener.h; TCP through gRPC, with
// TLS when configured), and the health and metrics listeners. A test can
// start one in-process.
//
// Start logs through spdlog's default logger, which main sets up first.
// Reload and Stop are called from one thread (main's signal loop,
// signal_loop.h), not concurrently with each other; the service itself
// serves from gRPC's threads.
#ifndef RBLN_SERVER_DAEMON_H_
#define RBLN_SERVER_DAEMON_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/device/dram.h"
#include "core/format/external_codec.h"
#include "core/store/store.h"
#include "grpcpp/grpcpp.h"
#include "server/artifact_service.h"
#include "server/auth.h"
#include "server/daemon_config.h"
#include "server/daemon_error.h"
#include "server/health_server.h"
#include "server/metrics_http.h"
#include "server/tls_files.h"
#include "server/unix_listener.h"

namespace rbln {

class Daemon {
 public:
  // After the grace period of Stop: gRPC cancels the calls still running
  // this much later (so that writes past their commit point can still
  // reply), and Stop gives up at kForcedExitSeconds.
  static constexpr int kGrpcCancelSeconds = 3;
  static constexpr int kForcedExitSeconds = 5;
  // At shutdown, how long no call must have run before the client
  // connections are closed: a reply is sent just after its handler ends.
  static constexpr absl::Duration kQuietBeforeClose = absl::Milliseconds(250);

  // Serves `config`, its start-up lines logged, once every listener
  // accepts; a relative Unix socket path is bound, reported and removed as
  // made absolute against the working directory at start. nullptr, with
  // `error` set, when it cannot start; nothing is left listening then.
  static std::unique_ptr<Daemon> Start(DaemonConfig config, DaemonError* error);
  // Stops with no grace period unless Stop ran.
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // SIGHUP: drops the cached reads (and the directories and read leases
  // they hold open), and reads the tokens and the TLS files again.
  void Reload();
  // Reads the TLS files again when they changed (logged as `why`); a set
  // that fails its checks is logged, once per reason, and the old one stays.
  void ReloadTls(absl::string_view why);
  // How often the TLS files are to be looked at (ReloadTls): 0 for never
  // (no TLS, or --tls-reload-seconds 0).
  unsigned int tls_reload_seconds() const;

  // Takes no new calls (health says NOT_SERVING, logged with `why`); lets
  // running writes finish for `grace`, then cancels those not yet at their
  // commit point, and gRPC cancels what is left kGrpcCancelSeconds later;
  // client connections are closed as soon as no call runs.
  // True once every call has ended and the listeners, the sockets and the
  // store are closed; false when calls still run at grace +
  // kForcedExitSeconds (a thread stuck in the kernel): then nothing may be
  // destroyed, and the caller ends the process with ExitForcibly.
  bool Stop(absl::Duration grace, absl::string_view why);
  // Logs what still runs, removes the Unix sockets and ends the process
  // with kExitForced.
  [[noreturn]] void ExitForcibly();

  const DaemonConfig& config() const { return config_; }

 private:
  explicit Daemon(DaemonConfig config) : config_(std::move(config)) {}

  // The steps of Start, in order.
  std::optional<DaemonError> Prepare();
  void WarnOfConfig();
  std::optional<DaemonError> StartCodec();
  std::optional<DaemonError> OpenStore();
  std::optional<DaemonError> CheckListenAddresses() const;
  std::optional<DaemonError> CheckHealthAddress() const;
  std::optional<DaemonError> MakeTcpCredentials(
      const std::optional<TlsMaterial>& tls_material);
  std::optional<DaemonError> StartMetricsServer();
  void MakeService();
  std::optional<DaemonError> BindUnixSockets();
  std::optional<DaemonError> Serve();
  std::optional<DaemonError> StartHealthServer();
  void LogServing() const;
  // Stop's last step: waits until gRPC has ended every call, or `limit`.
  void CloseConnectionsWhenIdle(absl::Time limit);

  // Sets a health status (gRPC's SetServingStatus arguments) on the main
  // server and the health server alike.
  template <typename... Args>
  void SetHealth(Args... name_and_serving);

  const DaemonConfig config_;
  // Start's choice of DRAM provider, for its log line.
  std::string dram_description_;
  std::shared_ptr<grpc::ServerCredentials> tcp_credentials_;
  std::string last_tls_error_;
  bool serving_ = false;
  bool stopped_ = false;
  // Set once gRPC's server has ended every call (Stop).
  std::atomic<bool> ended_{false};
  // Set by Stop's thread just before it calls grpc::Server::Shutdown.
  std::atomic<bool> shutdown_called_{false};

  // Destroyed in the reverse order: the servers first, the codec (which
  // outlives the store that uses it) last.
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<ExternalCodec> external_codec_;
  std::unique_ptr<DramProvider> dram_;
  std::unique_ptr<ArtifactStore> store_;
  std::unique_ptr<TlsFileMirror> tls_mirror_;
  std::unique_ptr<MetricsHttpServer> metrics_server_;
  std::unique_ptr<ArtifactServiceImpl> service_;
  std::vector<std::unique_ptr<UnixListener>> unix_listeners_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HealthServer> health_server_;
};

}  // namespace rbln

#endif  // RBLN_SERVER_DAEMON_H_
