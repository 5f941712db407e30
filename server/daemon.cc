#include "server/daemon.h"

#include <grp.h>
#include <grpc/grpc.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/defaults.h"
#include "core/core_metrics.h"
#include "core/device/probe_provider.h"
#include "core/os/dir_watch.h"
#include "core/os/env.h"
#include "core/os/read_lease.h"
#include "core/os/subprocess.h"
#include "server/listen_checks.h"
#include "server/request_metrics.h"
#include "spdlog/spdlog.h"

namespace rbln {
namespace {

// `--rbln-smi none`: no probe, the spec table only (a host whose rbln-smi
// misbehaves, or a reproducible setup).
constexpr char kNoProbe[] = "none";
// How long one probe's answer serves: device lists change rarely, and a
// busy daemon must not run rbln-smi for every request.
constexpr absl::Duration kProbeCacheTtl = absl::Seconds(5);

// The DRAM provider in the documented order of choice: override, else the
// live probe (which falls back to the spec table), else the spec table.
// Returns the provider and a line for the start-up log.
std::pair<std::unique_ptr<DramProvider>, std::string> ChooseDramProvider(
    const DaemonConfig& config) {
  const std::string& rbln_smi = config.rbln_smi;
  if (config.dram_override.has_value()) {
    return std::make_pair(
        NewOverrideProvider(*config.dram_override),
        absl::StrCat("override --device-dram ", config.device_dram,
                     rbln_smi.empty() || rbln_smi == kNoProbe
                         ? ""
                         : " (--rbln-smi is not used)"));
  }
  if (rbln_smi == kNoProbe) {
    return std::make_pair(NewSpecTableProvider(),
                          std::string("spec table (--rbln-smi none)"));
  }
  ProbeOptions probe;
  probe.tool = rbln_smi;
  probe.timeout = config.probe_timeout;
  probe.cache_ttl = kProbeCacheTtl;
  std::string description = absl::StrCat(
      "probe ",
      rbln_smi.empty() ? "rbln-smi (else rbln-stat) on PATH" : rbln_smi,
      " with a ", FormatSeconds(probe.timeout),
      " timeout, else the spec table");
  return std::make_pair(NewProbeProvider(std::move(probe)),
                        std::move(description));
}

// True when another process holds the store's LOCK (a second daemon).
bool StoreLockIsHeld(const std::string& store_dir) {
  absl::StatusOr<std::unique_ptr<FileLock>> lock = Env::Default()->LockFile(
      JoinPath(JoinPath(store_dir, kStateDirName), "LOCK"),
      /*exclusive=*/true, /*wait=*/false);
  return absl::IsUnavailable(lock.status());
}

// What GetServerInfo reports of the codecs.
std::string CodecFacts(const ExternalCodec* external_codec) {
  if (external_codec == nullptr) return "built-in";
  const CodecHello& hello = external_codec->hello();
  return absl::StrCat(
      "built-in, and ", external_codec->name(),
      " for other files: ", hello.codec, " ", hello.codec_version, ", api ",
      hello.api, hello.can_rescale ? "" : ", cannot rescale (older compiler)");
}

// --listen's relative Unix socket paths made absolute against the working
// directory, before anything binds or reports them.
std::optional<DaemonError> MakeListenPathsAbsolute(DaemonConfig* config) {
  const bool relative =
      std::any_of(config->addresses.begin(), config->addresses.end(),
                  [](const ServerAddress& address) {
                    return address.kind == ServerAddress::Kind::kUnix &&
                           !absl::StartsWith(address.path, "/");
                  });
  if (!relative) return std::nullopt;
  std::error_code ec;
  const std::filesystem::path cwd = std::filesystem::current_path(ec);
  if (ec) {
    return DaemonError{
        kExitConfig,
        absl::StrCat("--listen: cannot make a relative socket path absolute: "
                     "the working directory is unknown (",
                     ec.message(), "); give an absolute path")};
  }
  const absl::Status made =
      MakeUnixPathsAbsolute(cwd.string(), &config->listen, &config->addresses);
  if (!made.ok()) return config->sources.BadValue("--listen", made.message());
  return std::nullopt;
}

}  // namespace

std::unique_ptr<Daemon> Daemon::Start(DaemonConfig config, DaemonError* error) {
  if (std::optional<DaemonError> failed = MakeListenPathsAbsolute(&config)) {
    *error = *std::move(failed);
    return nullptr;
  }
  auto daemon = std::unique_ptr<Daemon>(new Daemon(std::move(config)));
  std::optional<DaemonError> failed = daemon->Prepare();
  if (!failed.has_value()) failed = daemon->Serve();
  if (failed.has_value()) {
    *error = *std::move(failed);
    return nullptr;
  }
  daemon->serving_ = true;
  daemon->LogServing();
  return daemon;
}

Daemon::~Daemon() {
  if (serving_ && !stopped_) Stop(absl::ZeroDuration(), "destroyed");
}

std::optional<DaemonError> Daemon::Prepare() {
  // Root's default socket lives in a directory that systemd makes for the
  // unit (RuntimeDirectory=); started by hand, the daemon makes it.
  if (config_.default_listen &&
      config_.listen[0] == absl::StrCat("unix:", kSystemSocket)) {
    const std::string dir = std::filesystem::path(kSystemSocket).parent_path();
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return DaemonError{
          kExitConfig,
          absl::StrCat("cannot create ", dir, ": ", strerror(errno),
                       "; create it or give --listen")};
    }
  }
  // The TLS files are checked here, so that a bad set is a start-up error;
  // the copies gRPC serves from are made once the store is open
  // (server/tls_files.h).
  std::optional<TlsMaterial> tls_material;
  if (!config_.tls.cert.empty()) {
    absl::StatusOr<TlsMaterial> loaded = LoadTlsMaterial(config_.tls);
    if (!loaded.ok()) {
      return DaemonError{kExitConfig, std::string(loaded.status().message())};
    }
    tls_material = *std::move(loaded);
  }
  absl::StatusOr<std::unique_ptr<Authenticator>> auth = Authenticator::Create(
      {.operators = config_.operator_list,
       .default_operators = config_.default_operators,
       .daemon_uid = geteuid(),
       .tokens_file = config_.tokens_file,
       .client_certificates = !config_.tls.client_ca.empty()});
  if (!auth.ok()) {
    return DaemonError{kExitConfig,
                       absl::StrCat("--tokens: ", auth.status().message())};
  }
  auth_ = *std::move(auth);
  WarnOfConfig();
  if (auto error = StartCodec()) return error;
  if (auto error = OpenStore()) return error;
  if (auto error = CheckListenAddresses()) return error;
  if (auto error = CheckHealthAddress()) return error;
  return MakeTcpCredentials(tls_material);
}

// Before anything listens, so that the warnings are in the log by the time
// a caller can connect.
void Daemon::WarnOfConfig() {
  // A user or group this host does not know matches nobody: most likely a
  // typo.
  for (const std::string& identity : config_.operator_list) {
    absl::string_view name = identity;
    if ((absl::ConsumePrefix(&name, "user:") &&
         getpwnam(std::string(name).c_str()) == nullptr) ||
        (absl::ConsumePrefix(&name, "group:") &&
         getgrnam(std::string(name).c_str()) == nullptr)) {
      spdlog::warn(
          "--operators {}: no such {} on this host, so it matches nobody "
          "(getent passwd / getent group list them)",
          identity, absl::StartsWith(identity, "user:") ? "user" : "group");
    }
  }
  for (const std::string& address : InsecureRemoteListeners(
           config_.listen, config_.addresses, !config_.tls.cert.empty())) {
    spdlog::warn(
        "--allow-insecure-tcp: {} is plaintext and reachable from other "
        "hosts; anyone who reaches it can read, and tokens would travel in "
        "clear",
        address);
  }
  // Made here, so that its thread starts with the signals blocked
  // (signal_loop.h).
  if (config_.dir_watch && DirWatch::Get() == nullptr) {
    spdlog::warn(
        "no inotify instance could be had (/proc/sys/fs/inotify/"
        "max_user_instances, or no /proc): every Get and Describe stats its "
        "artifact's directory again");
  }
  if (config_.metrics_address.has_value() &&
      config_.metrics_address->kind == ServerAddress::Kind::kTcp &&
      !IsLoopbackHost(config_.metrics_address->host)) {
    spdlog::warn(
        "--metrics-listen: {} serves counts in plain HTTP to anyone who "
        "reaches it; bind it to loopback or keep it to a network you trust",
        config_.metrics_listen);
  }
}

// The external codec starts before anything listens: one that cannot start
// is a configuration error. It outlives the store that uses it.
std::optional<DaemonError> Daemon::StartCodec() {
  if (config_.codec.command.empty()) return std::nullopt;
  ExternalCodecOptions options = config_.codec;
  options.log = [](absl::string_view line) {
    spdlog::info("{}", std::string(line));
  };
  absl::StatusOr<std::unique_ptr<ExternalCodec>> started =
      ExternalCodec::Start(std::move(options));
  if (!started.ok()) {
    return DaemonError{kExitConfig, std::string(started.status().message())};
  }
  external_codec_ = *std::move(started);
  const CodecHello& hello = external_codec_->hello();
  spdlog::info(
      "codec {}: {} {}, api {}, {}; up to {} worker(s) as uid {}, "
      "{} s per request",
      external_codec_->name(), hello.codec, hello.codec_version, hello.api,
      hello.can_rescale ? "can rescale" : "cannot rescale (older compiler)",
      config_.codec.workers, external_codec_->worker_uid(),
      absl::ToInt64Seconds(config_.codec.timeout));
  spdlog::info(
      "codec containment: {}",
      std::string(ContainmentModeName(external_codec_->containment())));
  return std::nullopt;
}

std::optional<DaemonError> Daemon::OpenStore() {
  auto [dram, description] = ChooseDramProvider(config_);
  dram_ = std::move(dram);
  dram_description_ = std::move(description);
  std::error_code ec;
  std::filesystem::create_directories(config_.store_dir, ec);
  StoreOptions store_options;
  store_options.read_only_roots = config_.read_only_roots;
  store_options.external_codec = external_codec_.get();
  store_options.old_version_grace = config_.old_version_grace;
  store_options.device_provider = dram_.get();
  store_options.freshness = {.read_leases = config_.read_leases,
                             .dir_watch = config_.dir_watch};
  absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
      ArtifactStore::Open(config_.store_dir, std::move(store_options));
  if (!store.ok()) {
    // The LOCK held by another daemon is a resource in use; anything else
    // (not a directory, wrong owner, no permission) is the configuration.
    return DaemonError{
        StoreLockIsHeld(config_.store_dir) ? kExitUnavailable : kExitConfig,
        std::string(store.status().message())};
  }
  store_ = *std::move(store);
  return std::nullopt;
}

std::optional<DaemonError> Daemon::CheckListenAddresses() const {
  const std::vector<std::string>& listen = config_.listen;
  for (size_t i = 0; i < listen.size(); ++i) {
    if (auto problem =
            CheckListenAddress(listen[i], config_.addresses[i],
                               config_.sources.BadValueCode("--listen"))) {
      return problem;
    }
  }
  return std::nullopt;
}

std::optional<DaemonError> Daemon::CheckHealthAddress() const {
  if (!config_.health_address.has_value()) return std::nullopt;
  return CheckListenAddress(config_.health_listen, *config_.health_address,
                            config_.sources.BadValueCode("--health-listen"),
                            "--health-listen");
}

std::optional<DaemonError> Daemon::MakeTcpCredentials(
    const std::optional<TlsMaterial>& tls_material) {
  tcp_credentials_ = grpc::InsecureServerCredentials();
  if (!tls_material.has_value()) return std::nullopt;
  absl::StatusOr<std::unique_ptr<TlsFileMirror>> mirror = TlsFileMirror::Create(
      absl::StrCat(store_->root(), "/", kStateDirName, "/tls"), *tls_material);
  if (!mirror.ok()) {
    return DaemonError{kExitConfig, std::string(mirror.status().message())};
  }
  tls_mirror_ = *std::move(mirror);
  grpc::experimental::TlsServerCredentialsOptions tls_options(
      tls_mirror_->NewProvider());
  tls_options.watch_identity_key_cert_pairs();
  if (!config_.tls.client_ca.empty()) {
    tls_options.watch_root_certs();
    tls_options.set_cert_request_type(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    tls_options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  tcp_credentials_ = grpc::experimental::TlsServerCredentials(tls_options);
  return std::nullopt;
}

std::optional<DaemonError> Daemon::StartMetricsServer() {
  if (!config_.metrics_address.has_value()) return std::nullopt;
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> started =
      MetricsHttpServer::Start(*config_.metrics_address,
                               &metrics::Registry::Default());
  if (!started.ok()) {
    const absl::Status& error = started.status();
    if (absl::IsInvalidArgument(error)) {
      return config_.sources.BadValue("--metrics-listen", error.message());
    }
    return DaemonError{
        absl::IsUnavailable(error) ? kExitUnavailable : kExitConfig,
        absl::StrCat("--metrics-listen: ", error.message())};
  }
  metrics_server_ = *std::move(started);
  return std::nullopt;
}

void Daemon::MakeService() {
  std::vector<std::string> served = config_.listen;
  if (config_.health_address.has_value()) {
    served.push_back(absl::StrCat(config_.health_listen, " (health only)"));
  }
  if (config_.metrics_address.has_value()) {
    served.push_back(
        absl::StrCat("http://", config_.metrics_listen, "/metrics"));
  }
  service_ = std::make_unique<ArtifactServiceImpl>(
      store_.get(), dram_.get(), auth_.get(), config_.max_concurrent_writes,
      ServerFacts{.listeners = served,
                  .codec = CodecFacts(external_codec_.get())});
}

// The Unix sockets are created with --socket-mode (owner/group-only by
// default), and given --socket-group before any connection is accepted, so
// that a member never meets a socket still in root's group.
std::optional<DaemonError> Daemon::BindUnixSockets() {
  const std::vector<std::string>& listen = config_.listen;
  const mode_t old_umask = umask(~config_.socket_mode & 0777);
  for (size_t i = 0; i < listen.size(); ++i) {
    if (config_.addresses[i].kind == ServerAddress::Kind::kTcp) continue;
    absl::StatusOr<std::unique_ptr<UnixListener>> listener =
        UnixListener::Bind(config_.addresses[i]);
    if (!listener.ok()) {
      umask(old_umask);
      return DaemonError{kExitUnavailable,
                         absl::StrCat("cannot listen on ", listen[i], ": ",
                                      listener.status().message())};
    }
    unix_listeners_.push_back(*std::move(listener));
  }
  umask(old_umask);
  if (config_.socket_gid.has_value()) {
    const std::optional<std::string> failed =
        ChownUnixSockets(config_.addresses, *config_.socket_gid);
    if (failed.has_value()) {
      unix_listeners_.clear();
      RemoveUnixSockets(listen);
      return DaemonError{
          kExitConfig,
          absl::StrCat("--socket-group ", config_.socket_group, ": ", *failed)};
    }
  }
  return std::nullopt;
}

std::optional<DaemonError> Daemon::Serve() {
  const std::vector<std::string>& listen = config_.listen;
  // Metrics before the gRPC server, so that a port in use stops the start
  // before anything is served.
  RegisterCoreMetrics();
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(NewRequestMetricsFactory());
  if (auto error = StartMetricsServer()) return error;
  MakeService();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // Unix sockets are accepted by the daemon itself (unix_listener.h), so
  // that each peer's uid reaches the handlers.
  for (size_t i = 0; i < listen.size(); ++i) {
    if (config_.addresses[i].kind == ServerAddress::Kind::kTcp) {
      builder.AddListeningPort(listen[i], tcp_credentials_);
    }
  }
  builder.RegisterService(service_.get());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  builder.SetMaxReceiveMessageSize(4 << 20);
  // A second daemon must not share a TCP port with the first (SO_REUSEPORT
  // would split the connections between them).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  grpc::ResourceQuota quota("rbln-artifactd");
  quota.SetMaxThreads(64);
  builder.SetResourceQuota(quota);
  if (auto error = BindUnixSockets()) return error;
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) {
    // gRPC says only that it failed (in a log line): find out which address
    // and why by binding them again, as the checks above did (something may
    // have taken a port since). Our own Unix sockets go first, so that
    // they do not look like another server's.
    unix_listeners_.clear();
    RemoveUnixSockets(listen);
    if (auto problem = CheckListenAddresses()) return problem;
    return DaemonError{
        kExitUnavailable,
        absl::StrCat("cannot listen on ", absl::StrJoin(listen, ", "),
                     " (gRPC refused; its log line above says why)")};
  }
  for (size_t i = 0, next = 0; i < listen.size(); ++i) {
    if (config_.addresses[i].kind == ServerAddress::Kind::kTcp) continue;
    absl::Status started =
        unix_listeners_[next++]->Start(server_.get(), auth_->unix_peers());
    if (!started.ok()) {
      RemoveUnixSockets(listen);
      return DaemonError{kExitUnavailable,
                         absl::StrCat("cannot listen on ", listen[i], ": ",
                                      started.message())};
    }
  }
  return StartHealthServer();
}

// The health port starts once the service is served, so that it never
// answers SERVING for a daemon that cannot serve.
std::optional<DaemonError> Daemon::StartHealthServer() {
  if (config_.health_address.has_value()) {
    health_server_ = HealthServer::Start(config_.health_listen);
    if (health_server_ == nullptr) {
      unix_listeners_.clear();
      server_->Shutdown();
      RemoveUnixSockets(config_.listen);
      if (auto problem = CheckHealthAddress()) return problem;
      return DaemonError{
          kExitUnavailable,
          absl::StrCat("cannot listen on --health-listen ",
                       config_.health_listen,
                       " (gRPC refused; its log line above says why)")};
    }
  }
  // Health by service name too ("" is SERVING from the start), for probes
  // that name the service.
  SetHealth(v1::ArtifactService::service_full_name(), true);
  return std::nullopt;
}

template <typename... Args>
void Daemon::SetHealth(Args... name_and_serving) {
  for (grpc::Server* s :
       {server_.get(),
        health_server_ != nullptr ? health_server_->server() : nullptr}) {
    if (s != nullptr) {
      s->GetHealthCheckService()->SetServingStatus(name_and_serving...);
    }
  }
}

void Daemon::LogServing() const {
  if (health_server_ != nullptr) {
    spdlog::info(
        "health checking only (grpc.health.v1.Health) on {}, plaintext, to "
        "any caller",
        config_.health_listen);
  }
  spdlog::info("rbln-artifactd serving store {} on {} (pid {}); DRAM: {}",
               store_->root(), absl::StrJoin(config_.listen, ", "), getpid(),
               dram_description_);
  if (metrics_server_ != nullptr) {
    const std::string& host = config_.metrics_address->host;
    spdlog::info("metrics at http://{}:{}/metrics",
                 host.find(':') == std::string::npos
                     ? host
                     : absl::StrCat("[", host, "]"),
                 metrics_server_->port());
  }
  for (const StoreRootInfo& root : store_->roots()) {
    if (root.read_only) {
      spdlog::info("read-only root {}: {}", root.name, root.dir);
    }
  }
  const bool any_tcp = std::any_of(
      config_.addresses.begin(), config_.addresses.end(),
      [](const auto& a) { return a.kind == ServerAddress::Kind::kTcp; });
  spdlog::info(
      "callers: {}{}{}; operators: {}{}",
      !any_tcp                    ? "on the Unix socket only"
      : !config_.tls.cert.empty() ? "TCP over TLS"
                                  : "TCP in plaintext",
      config_.tls.client_ca.empty() ? "" : " with client certificates required",
      config_.tokens_file.empty() ? "" : ", bearer tokens from --tokens",
      config_.default_operators ? "uid 0 and the daemon's uid on the Unix "
                                  "socket, "
                                : "",
      config_.operators.empty() ? "no others"
                                : absl::StrJoin(config_.operators, ","));
  // Ready means serving, with the start-up lines out.
  spdlog::default_logger()->flush();
}

void Daemon::Reload() {
  // What the read cache holds open goes, so that a file system inside the
  // store can be unmounted (docs/deploying.md).
  spdlog::info(
      "SIGHUP: dropped {} cached reads and the directories and read "
      "leases they held open",
      store_->DropCachedReads());
  if (!config_.tokens_file.empty()) {
    absl::Status reloaded = auth_->ReloadTokens();
    if (reloaded.ok()) {
      spdlog::info("SIGHUP: reloaded {}", config_.tokens_file);
    } else {
      spdlog::error("SIGHUP: kept the old tokens: {}",
                    std::string(reloaded.message()));
    }
  }
  ReloadTls("SIGHUP");
}

void Daemon::ReloadTls(absl::string_view why) {
  if (tls_mirror_ == nullptr) return;
  absl::StatusOr<bool> changed = tls_mirror_->Reload(config_.tls);
  if (!changed.ok()) {
    const std::string error(changed.status().message());
    if (error != last_tls_error_) {
      spdlog::error("{}: kept the old TLS files: {}", std::string(why), error);
    }
    last_tls_error_ = error;
    return;
  }
  last_tls_error_.clear();
  if (*changed) {
    spdlog::info("{}: reloaded the TLS files {}", std::string(why),
                 absl::StrJoin(
                     {config_.tls.cert, config_.tls.key, config_.tls.client_ca},
                     " ", [](std::string* out, const std::string& f) {
                       if (!f.empty()) out->append(f);
                     }));
  }
}

unsigned int Daemon::tls_reload_seconds() const {
  return tls_mirror_ != nullptr ? config_.tls_reload_seconds : 0;
}

// Shutdown (docs/security.md).
bool Daemon::Stop(absl::Duration grace, absl::string_view why) {
  // No new connections on the Unix sockets either.
  for (auto& listener : unix_listeners_) listener->Stop();
  const absl::Time start = absl::Now();
  // Every service, "" included, says NOT_SERVING from now on.
  SetHealth(false);
  spdlog::info(
      "{}: no new requests; letting running writes finish (at most {})",
      std::string(why), FormatSeconds(grace));
  std::thread stopper(
      [this, deadline = start + grace + absl::Seconds(kGrpcCancelSeconds)]() {
        shutdown_called_.store(true);
        server_->Shutdown(absl::ToChronoTime(deadline));
        server_->Wait();
        ended_.store(true);
      });
  while (service_->active_writes() > 0 && absl::Now() < start + grace) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (service_->active_writes() > 0) {
    spdlog::warn("grace period over: cancelling {} write(s) not yet committed",
                 service_->active_writes());
  }
  service_->CancelUncommittedWrites();
  CloseConnectionsWhenIdle(start + grace + absl::Seconds(kForcedExitSeconds));
  if (!ended_.load()) {
    stopper.detach();  // stuck in gRPC's Shutdown, as its calls are
    return false;
  }
  stopper.join();
  stopped_ = true;
  health_server_.reset();
  RemoveUnixSockets(config_.listen);
  // Closing the store removes the old versions still waiting out their
  // grace period, and logs that it does. No call is left to use it.
  store_.reset();
  return true;
}

void Daemon::CloseConnectionsWhenIdle(absl::Time limit) {
  // gRPC's Shutdown ends only once every client connection is gone, and an
  // idle client may take seconds to answer its GOAWAY: once no call has run
  // for kQuietBeforeClose (the last replies sent), or kGrpcCancelSeconds
  // from now, connections are closed, and again every round for one that
  // raced with the Shutdown's start.
  const absl::Time calls_end = absl::Now() + absl::Seconds(kGrpcCancelSeconds);
  absl::Time quiet_since = absl::Now();
  while (!ended_.load() && absl::Now() < limit) {
    const absl::Time now = absl::Now();
    if (!service_->DescribeRunning().empty()) quiet_since = now;
    if (shutdown_called_.load() &&
        (now >= calls_end || now - quiet_since >= kQuietBeforeClose)) {
      grpc_server_cancel_all_calls(server_->c_server());
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

void Daemon::ExitForcibly() {
  // Should logging itself block (a stuck journal pipe), SIGALRM's default
  // action still ends the process.
  alarm(2);
  for (const std::string& line : service_->DescribeRunning()) {
    spdlog::error("still running at the forced exit: {}", line);
  }
  spdlog::error(
      "rbln-artifactd: requests did not end within the grace period plus "
      "{} s (a thread is stuck, likely in the kernel); exiting now",
      kForcedExitSeconds);
  spdlog::default_logger()->flush();
  RemoveUnixSockets(config_.listen);
  _exit(kExitForced);
}

}  // namespace rbln
