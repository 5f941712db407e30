// rbln-artifactd: serves the ArtifactService over a store of compiled
// artifacts. Starts with no flags (default store and Unix socket; DRAM figures
// from rbln-smi when it is installed, else the spec table); see --help.
#include <arpa/inet.h>
#include <grp.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <netdb.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sysexits.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/defaults.h"
#include "common/flag_errors.h"
#include "common/server_address.h"
#include "common/version.h"
#include "core/core_metrics.h"
#include "core/device/dram.h"
#include "core/device/probe_provider.h"
#include "core/format/external_codec.h"
#include "core/os/dir_watch.h"
#include "core/os/env.h"
#include "core/os/read_lease.h"
#include "core/os/subprocess.h"
#include "core/store/store.h"
#include "server/allocator.h"
#include "server/artifact_service.h"
#include "server/auth.h"
#include "server/log_format.h"
#include "server/log_sink.h"
#include "server/metrics_http.h"
#include "server/request_metrics.h"
#include "server/socket_access.h"
#include "server/tls_files.h"
#include "server/unix_listener.h"
#include "spdlog/spdlog.h"

namespace {

constexpr char kProgramName[] = "rbln-artifactd";

// Exit codes (sysexits.h), documented in --help and the README.
constexpr int kExitUsage = EX_USAGE;              // 64: a bad command line
constexpr int kExitUnavailable = EX_UNAVAILABLE;  // 69: a resource in use
constexpr int kExitConfig = EX_CONFIG;            // 78: bad configuration

constexpr char kExitCodesHelp[] =
    "Exit codes:\n"
    "  0   stopped cleanly (SIGTERM or SIGINT)\n"
    "  1   requests did not end within the grace period plus 5 s\n"
    "  64  usage error on the command line (EX_USAGE)\n"
    "  69  a resource is in use: a TCP port (--listen, --metrics-listen), a\n"
    "      live Unix socket of another server, or the store's LOCK held by\n"
    "      another daemon (EX_UNAVAILABLE)\n"
    "  78  configuration error: a --config file that cannot be read or has a\n"
    "      bad value, a store that cannot be opened, a socket directory that\n"
    "      is missing, an unknown --socket-group, a --codec-command that does\n"
    "      not start (EX_CONFIG)";

// True when something accepts connections on the Unix socket at `path`
// (another daemon): binding would silently take its address away.
bool UnixSocketIsLive(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return false;
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool live =
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return live;
}

// After the grace period: gRPC cancels the calls still running this much
// later (so that writes past their commit point can still reply), and the
// process exits by force at kForcedExitSeconds.
constexpr int kGrpcCancelSeconds = 3;
constexpr int kForcedExitSeconds = 5;
constexpr int kExitForced = 1;

void RemoveUnixSockets(const std::vector<std::string>& listen) {
  for (const std::string& address : listen) {
    if (absl::StartsWith(address, "unix:")) unlink(address.substr(5).c_str());
  }
}

// Gives the Unix socket files of `addresses` to `gid`; the first failure,
// else nullopt.
std::optional<std::string> ChownUnixSockets(
    const std::vector<rbln::ServerAddress>& addresses, gid_t gid) {
  for (const rbln::ServerAddress& address : addresses) {
    if (address.kind != rbln::ServerAddress::Kind::kUnix) continue;
    if (chown(address.path.c_str(), static_cast<uid_t>(-1), gid) != 0) {
      return absl::StrCat("cannot give ", address.path, " to group ", gid, ": ",
                          strerror(errno));
    }
  }
  return std::nullopt;
}

int Fail(int code, const std::string& message) {
  // Lines logged before it go out first (server/log_sink.h batches them).
  if (spdlog::logger* logger = spdlog::default_logger_raw();
      logger != nullptr) {
    logger->flush();
  }
  fprintf(stderr, "%s: %s\n", kProgramName, message.c_str());
  return code;
}

// True when another process holds the store's LOCK (a second daemon).
bool StoreLockIsHeld(const std::string& store_dir) {
  absl::StatusOr<std::unique_ptr<rbln::FileLock>> lock =
      rbln::Env::Default()->LockFile(
          rbln::JoinPath(rbln::JoinPath(store_dir, rbln::kStateDirName),
                         "LOCK"),
          /*exclusive=*/true, /*wait=*/false);
  return absl::IsUnavailable(lock.status());
}

// Why `address` cannot be bound, found by binding it as gRPC would (with
// SO_REUSEADDR, without SO_REUSEPORT): 0 when every resolved address could
// be, EADDRINUSE when one is in use, else the error of the last one (gRPC
// serves when any of a name's addresses can be bound). -1: the host does
// not resolve.
int TcpBindError(const rbln::ServerAddress& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(address.port);
  if (getaddrinfo(address.host.c_str(), port.c_str(), &hints, &found) != 0) {
    return -1;
  }
  int last_error = 0;
  bool any_bound = false;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const int fd =
        socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = errno;
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      any_bound = true;
    } else {
      last_error = errno;
      if (last_error == EADDRINUSE) {
        close(fd);
        freeaddrinfo(found);
        return EADDRINUSE;
      }
    }
    close(fd);
  }
  freeaddrinfo(found);
  return any_bound ? 0 : last_error;
}

// Start-up checks of the --listen addresses that gRPC would report only as
// a log line: an exit code and message, or nullopt when all looks bindable.
std::optional<std::pair<int, std::string>> CheckListenAddress(
    const std::string& text, const rbln::ServerAddress& address,
    int bad_value_code, const std::string& flag = "--listen") {
  using Kind = rbln::ServerAddress::Kind;
  if (address.kind == Kind::kUnix) {
    if (UnixSocketIsLive(address.path)) {
      return std::make_pair(
          kExitUnavailable,
          absl::StrCat("another server already listens on ", text,
                       "; stop it or choose another ", flag));
    }
    std::error_code ec;
    const std::filesystem::path dir =
        std::filesystem::path(address.path).parent_path();
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
      return std::make_pair(
          kExitConfig,
          absl::StrCat("cannot listen on ", text, ": the directory ",
                       dir.string(),
                       " does not exist; create it or choose another path"));
    }
    return std::nullopt;
  }
  if (address.kind != Kind::kTcp) return std::nullopt;
  const int error = TcpBindError(address);
  if (error == 0) return std::nullopt;
  if (error == EADDRINUSE) {
    return std::make_pair(
        kExitUnavailable,
        absl::StrCat("port ", address.port, " is in use (", flag, " ", text,
                     "): another program listens on it; stop it or choose "
                     "another port"));
  }
  if (error < 0) {
    return std::make_pair(
        bad_value_code,
        absl::StrCat(flag, " ", text, ": cannot resolve '", address.host, "'"));
  }
  return std::make_pair(kExitConfig, absl::StrCat("cannot listen on ", text,
                                                  ": ", strerror(error)));
}

// True for a host that only this machine can reach: "localhost",
// 127.0.0.0/8, ::1. A name that resolves to loopback is not trusted to keep
// doing so.
bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 &&
         IN6_IS_ADDR_LOOPBACK(&v6);
}

// `--rbln-smi none`: no probe, the spec table only (a host whose rbln-smi
// misbehaves, or a reproducible setup).
constexpr char kNoProbe[] = "none";
// How long one probe's answer serves: device lists change rarely, and a
// busy daemon must not run rbln-smi for every request.
constexpr absl::Duration kProbeCacheTtl = absl::Seconds(5);

// The DRAM provider in the documented order of choice: override, else the
// live probe (which falls back to the spec table), else the spec table.
// Returns the provider and a line for the start-up log.
absl::StatusOr<std::pair<std::unique_ptr<rbln::DramProvider>, std::string>>
ChooseDramProvider(const std::string& device_dram, const std::string& rbln_smi,
                   double probe_timeout_s) {
  if (!device_dram.empty()) {
    absl::StatusOr<rbln::DramOverride> parsed =
        rbln::ParseDramOverride(device_dram);
    if (!parsed.ok()) return parsed.status();
    return std::make_pair(rbln::NewOverrideProvider(*parsed),
                          absl::StrCat("override --device-dram ", device_dram,
                                       rbln_smi.empty() || rbln_smi == kNoProbe
                                           ? ""
                                           : " (--rbln-smi is not used)"));
  }
  if (rbln_smi == kNoProbe) {
    return std::make_pair(rbln::NewSpecTableProvider(),
                          std::string("spec table (--rbln-smi none)"));
  }
  rbln::ProbeOptions probe;
  probe.tool = rbln_smi;
  probe.timeout = absl::Seconds(probe_timeout_s);
  probe.cache_ttl = kProbeCacheTtl;
  std::string description = absl::StrCat(
      "probe ",
      rbln_smi.empty() ? "rbln-smi (else rbln-stat) on PATH" : rbln_smi,
      " with a ", rbln::FormatSeconds(probe.timeout),
      " timeout, else the spec table");
  return std::make_pair(rbln::NewProbeProvider(std::move(probe)),
                        std::move(description));
}

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

// The --health-listen server: grpc.health.v1.Health (gRPC's default health
// service) and nothing else, plaintext, for probes that present no client
// certificate (kubelet's gRPC probes). Stops when destroyed.
class HealthServer {
 public:
  // nullptr when it cannot listen on `address`.
  static std::unique_ptr<HealthServer> Start(const std::string& address) {
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

  ~HealthServer() {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now());
    queue_->Shutdown();
    poller_.join();
  }

  grpc::Server* server() const { return server_.get(); }

 private:
  HealthServer() = default;

  // Waits on the queue until it is shut down and empty.
  void Drain() {
    void* tag = nullptr;
    bool ok = false;
    while (queue_->Next(&tag, &ok)) {
    }
  }

  std::unique_ptr<grpc::ServerCompletionQueue> queue_;
  std::unique_ptr<grpc::Server> server_;
  std::thread poller_;
};

}  // namespace

int main(int argc, char** argv) {
  // Before any thread starts (server/allocator.h).
  rbln::ConfigureMalloc();
#ifdef NDEBUG
  // Debian's Abseil is built with its Mutex deadlock detection on, which
  // keeps a process-wide lock graph updated on every lock taken: a cost on
  // each request (docs/performance.md). Debug and sanitizer builds (the
  // tests) keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  CLI::App app{
      "rbln-artifactd: reads and changes kvcache_num_blocks of compiled NPU "
      "artifacts in a store, for rbln-artifact and other gRPC clients "
      "(rbln.artifact.v1.ArtifactService, with health checking and "
      "reflection).",
      kProgramName};
  app.set_version_flag("--version", rbln::VersionLine(kProgramName),
                       "Print the version and the git commit, and exit");
  std::string store_dir = rbln::DefaultStoreDir();
  std::vector<std::string> listen;
  std::string device_dram;
  std::string rbln_smi;
  double probe_timeout_s = 5;
  std::string log_level = "info";
  int max_writes = 4;
  double shutdown_grace_s = 60;
  std::string socket_mode_text = "0660";
  std::string socket_group;
  std::string codec_command;
  std::string codec_user = "nobody";
  int codec_timeout_s = 120;
  int codec_workers = 2;
  app.add_option("--store", store_dir,
                 "Artifact store directory (created if missing)")
      ->capture_default_str();
  app.add_option("--listen", listen,
                 "Address to serve: unix:PATH, HOST:PORT or an absolute "
                 "path (a Unix socket); repeatable "
                 "(default " +
                     rbln::DefaultServerAddress() + ")");
  app.set_config("--config", "",
                 "Read flags from a TOML/INI file: one `name = value` line "
                 "per long flag without its dashes (store = \"/srv/a\", "
                 "listen = [\"unix:/run/a.sock\"], device-dram = \"16GiB\"); "
                 "flags on the command line win")
      ->type_name("FILE");
  // A misspelt entry would otherwise be dropped silently, and the daemon
  // would run with a default the operator meant to change.
  app.allow_config_extras(CLI::config_extras_mode::error);
  std::vector<std::string> read_only_roots;
  app.add_option("--read-only-root", read_only_roots,
                 "Serve the artifacts under DIR read-only, named NAME:path "
                 "(NAME defaults to DIR's last component): they can be read, "
                 "described, fitted with a dry run and copied into the store "
                 "with --output-dir, never changed; symbolic links inside DIR "
                 "are followed when they stay inside it (a Hugging Face "
                 "cache). Repeatable")
      ->type_name("[NAME=]DIR");
  app.add_option("--device-dram", device_dram,
                 "Override the device DRAM: BYTES[,CHIPLETS] per device, e.g. "
                 "16GiB or 144GiB,4 (GB is binary too, as in budgets: 16GB = "
                 "16GiB; a bare number is bytes, and must be at least 1 GiB: "
                 "17179869184); wins over the probe and the spec table, and "
                 "needs no NPU named by the artifact");
  app.add_option("--rbln-smi", rbln_smi,
                 "The device probe: PATH of rbln-smi (or rbln-stat) to run "
                 "for the host's NPUs and their DRAM; 'none' for the spec "
                 "table only (default: rbln-smi on PATH, else rbln-stat)")
      ->type_name("PATH");
  app.add_option("--probe-timeout-seconds", probe_timeout_s,
                 "How long the probe may run before it is killed and the spec "
                 "table answers instead (with a warning); at most 30, well "
                 "inside a client's deadline")
      ->check(CLI::Range(0.01, 30.0))
      ->capture_default_str();
  app.add_option("--codec-command", codec_command,
                 "Start this external codec for .rbln files the built-in one "
                 "does not read (docs/real-artifacts.md), e.g. "
                 "\"/usr/bin/python3 /usr/libexec/rbln-artifactd/"
                 "rbln_codec_rebel.py\": split into words as a shell would "
                 "(quotes, backslashes), never expanded, run without a "
                 "shell, with the daemon's environment")
      ->type_name("\"CMD ARGS\"");
  app.add_option("--codec-user", codec_user,
                 "The user the codec runs as when the daemon is root (it can "
                 "then read only the files it is handed and write only its "
                 "scratch directory); a name or a number")
      ->type_name("USER")
      ->capture_default_str();
  app.add_option("--codec-timeout-seconds", codec_timeout_s,
                 "How long one codec request (loading a model, rescaling it) "
                 "may take; a codec that takes longer is killed and "
                 "restarted, and that request fails")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  app.add_option("--codec-workers", codec_workers,
                 "Codec processes at most, each serving one request at a "
                 "time; more requests wait for one")
      ->check(CLI::Range(1, rbln::kMaxCodecWorkers))
      ->capture_default_str();
  app.add_option("--socket-mode", socket_mode_text,
                 "Mode of the Unix sockets, octal")
      ->type_name("MODE")
      ->capture_default_str();
  app.add_option("--socket-group", socket_group,
                 "Group of the Unix sockets (a name or number), set once the "
                 "daemon listens: with the default mode 0660 its members, "
                 "such as a serving process that is not root, may connect")
      ->type_name("GROUP");
  app.add_option("--log-level", log_level,
                 "trace, debug, info, warn, error or off")
      ->capture_default_str();
  std::string log_format_text = "text";
  app.add_option("--log-format", log_format_text,
                 "text, or json: one JSON object a line (time in RFC 3339, "
                 "level, message, and a request's fields as keys of their "
                 "own), for log shippers")
      ->capture_default_str();
  double log_linger_ms =
      absl::ToDoubleMilliseconds(rbln::BatchingLogSink::Options().linger);
  app.add_option("--log-linger-ms", log_linger_ms,
                 "How long an informational log line (a read's request "
                 "line) may wait to be written together with the lines "
                 "that follow it, so that a busy daemon makes one write for "
                 "many requests; a change's line and every warning are "
                 "written before the reply whatever this is. 0: every line "
                 "at once")
      ->check(CLI::Range(0.0, 60000.0))
      ->capture_default_str();
  app.add_option("--max-concurrent-writes", max_writes,
                 "Writes running at once; more are refused with UNAVAILABLE")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--shutdown-grace-seconds", shutdown_grace_s,
                 "On SIGTERM/SIGINT, how long running writes may take to "
                 "finish; then writes not yet committed are cancelled "
                 "(nothing changes) and the daemon exits within 5 s more, "
                 "even with a thread stuck in the kernel")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  double old_version_grace_s =
      absl::ToDoubleSeconds(rbln::kDefaultOldVersionGrace);
  app.add_option("--old-version-grace-seconds", old_version_grace_s,
                 "After an in-place write (or one that replaces an output "
                 "directory) has replied, how long the old version stays "
                 "beside the artifact under its staging name before it is "
                 "removed in the background, so that a serving process that "
                 "opened the artifact directory before the swap and reads "
                 "its files with openat() finishes on it "
                 "(docs/commit-protocol.md); 0: removed before the reply. "
                 "Removed at once when a write finds the disk full, and "
                 "when the daemon stops")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  bool allow_insecure_tcp = false;
  std::string tokens_file;
  std::vector<std::string> operators;
  bool no_default_operators = false;
  bool no_read_leases = false;
  bool no_dir_watch = false;
  app.add_option("--tls-cert", tls_cert,
                 "Serve TCP listeners over TLS with this certificate chain "
                 "(PEM); needs --tls-key")
      ->type_name("FILE");
  app.add_option("--tls-key", tls_key, "The private key of --tls-cert (PEM)")
      ->type_name("FILE");
  app.add_option("--tls-client-ca", tls_client_ca,
                 "Require TCP clients to present a certificate issued by "
                 "this CA (PEM); its Common Name names the caller (cn:NAME). "
                 "Needs --tls-cert")
      ->type_name("FILE");
  unsigned int tls_reload_seconds = 60;
  app.add_option("--tls-reload-seconds", tls_reload_seconds,
                 "How often the TLS files are checked for a rotation, as "
                 "SIGHUP does at once (0: only on SIGHUP); connections stay "
                 "up, and a set that fails its checks keeps the old one")
      ->check(CLI::Range(0, 86400))
      ->capture_default_str();
  std::string health_listen;
  app.add_option("--health-listen", health_listen,
                 "Also serve gRPC health checking (grpc.health.v1.Health, "
                 "the same status as the main listeners) and nothing else on "
                 "HOST:PORT, plaintext and to any caller: for probes without "
                 "a client certificate, such as kubelet's")
      ->type_name("HOST:PORT");
  app.add_flag("--allow-insecure-tcp", allow_insecure_tcp,
               "Allow a TCP listener on a non-loopback address without TLS "
               "(a warning at start); refused otherwise");
  app.add_option("--tokens", tokens_file,
                 "Bearer tokens: lines of NAME SHA256-HEX-OF-TOKEN ('#' "
                 "comments); a caller with one is token:NAME. TCP callers "
                 "without a certificate must then send one. Reloaded on "
                 "SIGHUP")
      ->type_name("FILE");
  app.add_option("--operators", operators,
                 "Callers who may write, comma-separated: cn:NAME, "
                 "token:NAME, uid:N, user:NAME, group:NAME (everyone else "
                 "reads and dry-runs); on the Unix socket uid 0 and the "
                 "daemon's own uid are operators too")
      ->type_name("LIST");
  std::string metrics_listen;
  app.add_option("--metrics-listen", metrics_listen,
                 "Serve Prometheus metrics over plain HTTP at "
                 "http://HOST:PORT/metrics (requests, commits, bytes copied, "
                 "lock waits, probes, ...; counts only, no names): bind it to "
                 "loopback or a network you trust. Off by default")
      ->type_name("HOST:PORT");
  app.add_flag("--no-default-operators", no_default_operators,
               "Unix-socket peers with uid 0 or the daemon's uid are not "
               "operators unless --operators lists them");
  app.add_flag("--no-read-leases", no_read_leases,
               "Take no read leases on cached artifacts' files: every Get and "
               "Describe then stats each file again, and a writer's open of "
               "such a file never waits for this daemon "
               "(docs/performance.md)");
  app.add_flag("--no-dir-watch", no_dir_watch,
               "Watch no cached artifact's directory with inotify: every Get "
               "and Describe then stats the directory's name again "
               "(docs/performance.md)");
  app.footer(
      "Available DRAM (what a budget like 0.8 is a fraction of), in order of "
      "choice:\n  1. --device-dram (or device-dram in the --config file)\n  "
      "2. the live probe: rbln-smi's device table, when the tool is found; "
      "figures from the spec table by the device's name, exactly\n  3. the "
      "spec table (RBLN-CA*: 16 GiB - 288 MiB, RBLN-CR*: 4 x (36 GiB - 1 "
      "GiB)) when no tool is found, or, with a warning in every reply, when "
      "it fails, hangs or prints something unreadable.\nThe artifact's "
      "target NPU decides the spec; probed devices of another family are a "
      "warning. rbln-artifact --device-info shows what the daemon uses.\n"
      "Environment: RBLN_ARTIFACTD_STORE changes the default --store; "
      "RBLN_ARTIFACTD_SOCKET (a path) the default --listen, as it does "
      "rbln-artifact's default --server (where RBLN_ARTIFACTD_ADDRESS wins "
      "over it). Without it the socket is "
      "$RUNTIME_DIRECTORY/rbln-artifactd.sock "
      "under systemd (RuntimeDirectory=), else "
      "/run/rbln-artifactd/rbln-artifactd.sock for root, else "
      "$XDG_RUNTIME_DIR/rbln-artifactd.sock, else "
      "/tmp/rbln-artifactd-UID.sock.\nExample:\n  rbln-artifactd --store "
      "/srv/artifacts --listen unix:/run/rbln-artifactd/rbln-artifactd.sock "
      "--listen "
      "0.0.0.0:50051 --tls-cert tls.crt --tls-key tls.key --tls-client-ca "
      "ca.crt --operators cn:fleet-job\n"
      "Callers: on the Unix socket uid 0 and the daemon's uid write, others "
      "read; over TCP callers are named by certificate (cn:NAME) or token "
      "(token:NAME) and only --operators write; see docs/security.md.\n" +
      std::string(kExitCodesHelp));
  const std::vector<std::string> args(argv + 1, argv + argc);
  std::optional<int> exit_code = rbln::ParseFlags(
      app, args, kProgramName, {.usage = kExitUsage, .config = kExitConfig},
      std::cout, std::cerr);
  if (exit_code.has_value()) return *exit_code;
  // A bad value is a usage error on the command line, a configuration error
  // when it came from the --config file.
  const std::string config_file = app.get_config_ptr()->count() > 0
                                      ? app.get_config_ptr()->as<std::string>()
                                      : "";
  const auto bad_value = [&](const std::string& flag,
                             absl::string_view message) {
    if (rbln::GivenOnCommandLine(args, flag) || config_file.empty()) {
      return Fail(kExitUsage, absl::StrCat(flag, ": ", message));
    }
    return Fail(kExitConfig, rbln::FormatConfigError(
                                 config_file, flag.substr(2),
                                 absl::StrCat(flag.substr(2), ": ", message)));
  };
  // The range checks pass NaN ("nan" parses as a number, and compares with
  // nothing): a time must be finite.
  for (const auto& [flag, value] :
       {std::pair<const char*, double>{"--probe-timeout-seconds",
                                       probe_timeout_s},
        {"--shutdown-grace-seconds", shutdown_grace_s},
        {"--old-version-grace-seconds", old_version_grace_s},
        {"--log-linger-ms", log_linger_ms}}) {
    if (!std::isfinite(value)) {
      return bad_value(flag, "needs a finite number, got NaN");
    }
  }
  const int listen_value_code =
      rbln::GivenOnCommandLine(args, "--listen") || config_file.empty()
          ? kExitUsage
          : kExitConfig;
  if (listen.empty()) {
    listen.push_back(rbln::DefaultServerAddress());
    // Root's default socket lives in a directory that systemd makes for the
    // unit (RuntimeDirectory=); started by hand, the daemon makes it.
    if (listen[0] == absl::StrCat("unix:", rbln::kSystemSocket)) {
      const std::string dir =
          std::filesystem::path(rbln::kSystemSocket).parent_path();
      if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
        return Fail(kExitConfig,
                    absl::StrCat("cannot create ", dir, ": ", strerror(errno),
                                 "; create it or give --listen"));
      }
    }
  }
  std::vector<rbln::ServerAddress> addresses;
  for (std::string& text : listen) {
    absl::StatusOr<rbln::ServerAddress> address =
        rbln::ParseServerAddress(text);
    if (!address.ok()) return bad_value("--listen", address.status().message());
    text = rbln::GrpcTarget(*address);  // a bare path as unix:PATH
    addresses.push_back(*std::move(address));
  }

  std::optional<rbln::ServerAddress> health_address;
  if (!health_listen.empty()) {
    absl::StatusOr<rbln::ServerAddress> address =
        rbln::ParseServerAddress(health_listen);
    if (!address.ok()) {
      return bad_value("--health-listen", address.status().message());
    }
    if (address->kind != rbln::ServerAddress::Kind::kTcp) {
      return bad_value("--health-listen",
                       absl::StrCat("needs HOST:PORT (a TCP port for probes "
                                    "such as kubelet's), got '",
                                    health_listen, "'"));
    }
    health_listen = rbln::GrpcTarget(*address);
    health_address = *std::move(address);
  }

  std::optional<rbln::ServerAddress> metrics_address;
  if (!metrics_listen.empty()) {
    // A Unix socket is refused by MetricsHttpServer::Start, as a usage
    // error too.
    absl::StatusOr<rbln::ServerAddress> address =
        rbln::ParseServerAddress(metrics_listen);
    if (!address.ok()) {
      return bad_value("--metrics-listen", address.status().message());
    }
    metrics_address = *std::move(address);
  }

  absl::StatusOr<mode_t> socket_mode = rbln::ParseSocketMode(socket_mode_text);
  if (!socket_mode.ok()) {
    return bad_value("--socket-mode", socket_mode.status().message());
  }
  std::optional<gid_t> socket_gid;
  if (!socket_group.empty()) {
    absl::StatusOr<gid_t> gid = rbln::ResolveGroup(socket_group);
    if (!gid.ok()) {
      return Fail(kExitConfig,
                  absl::StrCat("--socket-group: ", gid.status().message()));
    }
    socket_gid = *gid;
  }
  if (tls_cert.empty() != tls_key.empty()) {
    return bad_value(tls_cert.empty() ? "--tls-key" : "--tls-cert",
                     "--tls-cert and --tls-key go together");
  }
  if (!tls_client_ca.empty() && tls_cert.empty()) {
    return bad_value("--tls-client-ca",
                     "needs --tls-cert and --tls-key (client certificates are "
                     "checked during the TLS handshake)");
  }
  const bool tls = !tls_cert.empty();
  std::vector<std::string> insecure_remote;
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (addresses[i].kind == rbln::ServerAddress::Kind::kTcp && !tls &&
        !IsLoopbackHost(addresses[i].host)) {
      insecure_remote.push_back(listen[i]);
    }
  }
  if (!insecure_remote.empty() && !allow_insecure_tcp) {
    return bad_value(
        "--listen",
        absl::StrCat(absl::StrJoin(insecure_remote, ", "),
                     " is reachable from other hosts and would be plaintext: "
                     "give --tls-cert and --tls-key (docs/security.md), or "
                     "--allow-insecure-tcp on a network you trust"));
  }
  absl::StatusOr<std::vector<std::string>> operator_list =
      rbln::ParseOperators(operators);
  if (!operator_list.ok()) {
    return bad_value("--operators", operator_list.status().message());
  }
  // A user or group this host does not know matches nobody: most likely a
  // typo, logged once the log is set up.
  std::vector<std::string> unknown_operators;
  for (const std::string& identity : *operator_list) {
    absl::string_view name = identity;
    if ((absl::ConsumePrefix(&name, "user:") &&
         getpwnam(std::string(name).c_str()) == nullptr) ||
        (absl::ConsumePrefix(&name, "group:") &&
         getgrnam(std::string(name).c_str()) == nullptr)) {
      unknown_operators.push_back(identity);
    }
  }
  // SIGTERM/SIGINT (and SIGHUP) go to a dedicated thread (sigwait), so that
  // shutdown is ordinary code rather than a signal handler. Blocked before
  // gRPC is first used: its threads inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // The read leases' signals, for their own thread (core/os/read_lease.h).
  rbln::BlockReadLeaseSignals();
  rbln::SetReadLeasesEnabled(!no_read_leases);
  rbln::DirWatch::SetEnabled(!no_dir_watch);

  // The TLS files are checked here, so that a bad set is a start-up error;
  // the copies gRPC serves from are made once the store is open
  // (server/tls_files.h).
  const rbln::TlsFilePaths tls_paths{
      .cert = tls_cert, .key = tls_key, .client_ca = tls_client_ca};
  std::optional<rbln::TlsMaterial> tls_material;
  if (tls) {
    absl::StatusOr<rbln::TlsMaterial> loaded = rbln::LoadTlsMaterial(tls_paths);
    if (!loaded.ok()) {
      return Fail(kExitConfig, std::string(loaded.status().message()));
    }
    tls_material = *std::move(loaded);
  }
  absl::StatusOr<std::unique_ptr<rbln::Authenticator>> auth =
      rbln::Authenticator::Create(
          {.operators = *std::move(operator_list),
           .default_operators = !no_default_operators,
           .daemon_uid = geteuid(),
           .tokens_file = tokens_file,
           .client_certificates = !tls_client_ca.empty()});
  if (!auth.ok()) {
    return Fail(kExitConfig,
                absl::StrCat("--tokens: ", auth.status().message()));
  }

  spdlog::level::level_enum level = spdlog::level::from_str(log_level);
  if (level == spdlog::level::off && log_level != "off") {
    return bad_value("--log-level",
                     absl::StrCat("unknown level '", log_level,
                                  "'; use trace, debug, info, warn, error or "
                                  "off"));
  }
  absl::StatusOr<rbln::LogFormat> log_format =
      rbln::ParseLogFormat(log_format_text);
  if (!log_format.ok()) {
    return bad_value("--log-format", log_format.status().message());
  }
  // Logs go to stderr (the journal, under systemd) in batches
  // (server/log_sink.h); stdout stays quiet.
  rbln::BatchingLogSink::Options log_options;
  log_options.linger = absl::Milliseconds(log_linger_ms);
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "rbln-artifactd", std::make_shared<rbln::BatchingLogSink>(log_options)));
  spdlog::set_level(level);
  rbln::SetLogFormat(*spdlog::default_logger(), *log_format);
  rbln::RouteLibraryLogsToSpdlog();
  // Before anything listens, so that the warning is in the log by the time
  // a caller can connect.
  for (const std::string& identity : unknown_operators) {
    spdlog::warn(
        "--operators {}: no such {} on this host, so it matches nobody "
        "(getent passwd / getent group list them)",
        identity, absl::StartsWith(identity, "user:") ? "user" : "group");
  }
  for (const std::string& address : insecure_remote) {
    spdlog::warn(
        "--allow-insecure-tcp: {} is plaintext and reachable from other "
        "hosts; anyone who reaches it can read, and tokens would travel in "
        "clear",
        address);
  }
  // Made here, so that its thread starts with the signals above blocked.
  if (!no_dir_watch && rbln::DirWatch::Get() == nullptr) {
    spdlog::warn(
        "no inotify instance could be had (/proc/sys/fs/inotify/"
        "max_user_instances, or no /proc): every Get and Describe stats its "
        "artifact's directory again");
  }
  if (metrics_address.has_value() &&
      metrics_address->kind == rbln::ServerAddress::Kind::kTcp &&
      !IsLoopbackHost(metrics_address->host)) {
    spdlog::warn(
        "--metrics-listen: {} serves counts in plain HTTP to anyone who "
        "reaches it; bind it to loopback or keep it to a network you trust",
        metrics_listen);
  }

  // The external codec starts before anything listens: one that cannot
  // start is a configuration error. It outlives the store that uses it.
  std::unique_ptr<rbln::ExternalCodec> external_codec;
  if (!codec_command.empty()) {
    if (absl::StatusOr<std::vector<std::string>> words =
            rbln::SplitCommandLine(codec_command);
        !words.ok()) {
      return bad_value("--codec-command", words.status().message());
    }
    absl::StatusOr<std::unique_ptr<rbln::ExternalCodec>> started =
        rbln::ExternalCodec::Start({.command = codec_command,
                                    .user = codec_user,
                                    .timeout = absl::Seconds(codec_timeout_s),
                                    .workers = codec_workers,
                                    .log = [](absl::string_view line) {
                                      spdlog::info("{}", std::string(line));
                                    }});
    if (!started.ok()) {
      return Fail(kExitConfig, std::string(started.status().message()));
    }
    external_codec = *std::move(started);
    const rbln::CodecHello& hello = external_codec->hello();
    spdlog::info(
        "codec {}: {} {}, api {}, {}; up to {} worker(s) as uid {}, "
        "{} s per request",
        external_codec->name(), hello.codec, hello.codec_version, hello.api,
        hello.can_rescale ? "can rescale" : "cannot rescale (older compiler)",
        codec_workers, external_codec->worker_uid(), codec_timeout_s);
  }

  auto chosen = ChooseDramProvider(device_dram, rbln_smi, probe_timeout_s);
  if (!chosen.ok()) {
    return bad_value("--device-dram", chosen.status().message());
  }
  std::unique_ptr<rbln::DramProvider> dram = std::move(chosen->first);

  std::error_code ec;
  std::filesystem::create_directories(store_dir, ec);
  rbln::StoreOptions store_options;
  for (const std::string& text : read_only_roots) {
    absl::StatusOr<rbln::ReadOnlyRootSpec> root = rbln::ParseReadOnlyRoot(text);
    if (!root.ok()) {
      return bad_value("--read-only-root", root.status().message());
    }
    store_options.read_only_roots.push_back(*std::move(root));
  }
  store_options.external_codec = external_codec.get();
  store_options.old_version_grace = absl::Seconds(old_version_grace_s);
  store_options.device_provider = dram.get();
  absl::StatusOr<std::unique_ptr<rbln::ArtifactStore>> store =
      rbln::ArtifactStore::Open(store_dir, std::move(store_options));
  if (!store.ok()) {
    // The LOCK held by another daemon is a resource in use; anything else
    // (not a directory, wrong owner, no permission) is the configuration.
    return Fail(StoreLockIsHeld(store_dir) ? kExitUnavailable : kExitConfig,
                std::string(store.status().message()));
  }

  for (size_t i = 0; i < listen.size(); ++i) {
    auto problem =
        CheckListenAddress(listen[i], addresses[i], listen_value_code);
    if (problem.has_value()) return Fail(problem->first, problem->second);
  }
  const int health_value_code =
      rbln::GivenOnCommandLine(args, "--health-listen") || config_file.empty()
          ? kExitUsage
          : kExitConfig;
  if (health_address.has_value()) {
    auto problem = CheckListenAddress(health_listen, *health_address,
                                      health_value_code, "--health-listen");
    if (problem.has_value()) return Fail(problem->first, problem->second);
  }

  std::shared_ptr<grpc::ServerCredentials> tcp_credentials =
      grpc::InsecureServerCredentials();
  std::unique_ptr<rbln::TlsFileMirror> tls_mirror;
  if (tls_material.has_value()) {
    absl::StatusOr<std::unique_ptr<rbln::TlsFileMirror>> mirror =
        rbln::TlsFileMirror::Create(
            absl::StrCat((*store)->root(), "/", rbln::kStateDirName, "/tls"),
            *tls_material);
    if (!mirror.ok()) {
      return Fail(kExitConfig, std::string(mirror.status().message()));
    }
    tls_mirror = *std::move(mirror);
    grpc::experimental::TlsServerCredentialsOptions tls_options(
        tls_mirror->NewProvider());
    tls_options.watch_identity_key_cert_pairs();
    if (!tls_client_ca.empty()) {
      tls_options.watch_root_certs();
      tls_options.set_cert_request_type(
          GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    } else {
      tls_options.set_cert_request_type(
          GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    }
    tcp_credentials = grpc::experimental::TlsServerCredentials(tls_options);
  }

  // The codec: core/format/container.h's own reader and writer of .rbln files.
  // Metrics before the gRPC server, so that a port in use stops the start
  // before anything is served.
  rbln::RegisterCoreMetrics();
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(rbln::NewRequestMetricsFactory());
  std::unique_ptr<rbln::MetricsHttpServer> metrics_server;
  if (metrics_address.has_value()) {
    absl::StatusOr<std::unique_ptr<rbln::MetricsHttpServer>> started =
        rbln::MetricsHttpServer::Start(*metrics_address,
                                       &rbln::metrics::Registry::Default());
    if (!started.ok()) {
      const absl::Status& error = started.status();
      if (absl::IsInvalidArgument(error)) {
        return bad_value("--metrics-listen", error.message());
      }
      return Fail(absl::IsUnavailable(error) ? kExitUnavailable : kExitConfig,
                  absl::StrCat("--metrics-listen: ", error.message()));
    }
    metrics_server = *std::move(started);
  }

  std::vector<std::string> served = listen;
  if (health_address.has_value()) {
    served.push_back(absl::StrCat(health_listen, " (health only)"));
  }
  if (metrics_address.has_value()) {
    served.push_back(absl::StrCat("http://", metrics_listen, "/metrics"));
  }
  std::string codec_facts = "built-in";
  if (external_codec != nullptr) {
    const rbln::CodecHello& hello = external_codec->hello();
    codec_facts = absl::StrCat(
        "built-in, and ", external_codec->name(),
        " for other files: ", hello.codec, " ", hello.codec_version, ", api ",
        hello.api,
        hello.can_rescale ? "" : ", cannot rescale (older compiler)");
  }
  rbln::ArtifactServiceImpl service(
      store->get(), dram.get(), auth->get(), max_writes,
      {.listeners = served, .codec = std::move(codec_facts)});
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Unix sockets are accepted by the daemon itself (unix_listener.h), so
  // that each peer's uid reaches the handlers.
  std::vector<std::unique_ptr<rbln::UnixListener>> unix_listeners;
  for (size_t i = 0; i < listen.size(); ++i) {
    if (addresses[i].kind == rbln::ServerAddress::Kind::kTcp) {
      builder.AddListeningPort(listen[i], tcp_credentials);
    }
  }
  builder.RegisterService(&service);
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  builder.SetMaxReceiveMessageSize(4 << 20);
  // A second daemon must not share a TCP port with the first (SO_REUSEPORT
  // would split the connections between them).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  grpc::ResourceQuota quota("rbln-artifactd");
  quota.SetMaxThreads(64);
  builder.SetResourceQuota(quota);
  // The Unix socket is created with --socket-mode (owner/group-only by
  // default).
  const mode_t old_umask = umask(~*socket_mode & 0777);
  for (size_t i = 0; i < listen.size(); ++i) {
    if (addresses[i].kind == rbln::ServerAddress::Kind::kTcp) continue;
    absl::StatusOr<std::unique_ptr<rbln::UnixListener>> listener =
        rbln::UnixListener::Bind(addresses[i]);
    if (!listener.ok()) {
      umask(old_umask);
      return Fail(kExitUnavailable,
                  absl::StrCat("cannot listen on ", listen[i], ": ",
                               listener.status().message()));
    }
    unix_listeners.push_back(*std::move(listener));
  }
  umask(old_umask);
  // The group is set before any connection is accepted, so that a member
  // never meets the socket still in root's group.
  if (socket_gid.has_value()) {
    const std::optional<std::string> failed =
        ChownUnixSockets(addresses, *socket_gid);
    if (failed.has_value()) {
      unix_listeners.clear();
      RemoveUnixSockets(listen);
      return Fail(kExitConfig,
                  absl::StrCat("--socket-group ", socket_group, ": ", *failed));
    }
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    // gRPC says only that it failed (in a log line): find out which address
    // and why by binding them again, as the checks above did (something may
    // have taken a port since). Our own Unix sockets go first, so that
    // they do not look like another server's.
    unix_listeners.clear();
    RemoveUnixSockets(listen);
    for (size_t i = 0; i < listen.size(); ++i) {
      auto problem =
          CheckListenAddress(listen[i], addresses[i], listen_value_code);
      if (problem.has_value()) return Fail(problem->first, problem->second);
    }
    return Fail(kExitUnavailable,
                absl::StrCat("cannot listen on ", absl::StrJoin(listen, ", "),
                             " (gRPC refused; its log line above says why)"));
  }
  for (size_t i = 0, next = 0; i < listen.size(); ++i) {
    if (addresses[i].kind == rbln::ServerAddress::Kind::kTcp) continue;
    absl::Status started =
        unix_listeners[next++]->Start(server.get(), (*auth)->unix_peers());
    if (!started.ok()) {
      RemoveUnixSockets(listen);
      return Fail(kExitUnavailable, absl::StrCat("cannot listen on ", listen[i],
                                                 ": ", started.message()));
    }
  }
  // The health port starts once the service is served, so that it never
  // answers SERVING for a daemon that cannot serve.
  std::unique_ptr<HealthServer> health_server;
  if (health_address.has_value()) {
    health_server = HealthServer::Start(health_listen);
    if (health_server == nullptr) {
      unix_listeners.clear();
      server->Shutdown();
      RemoveUnixSockets(listen);
      auto problem = CheckListenAddress(health_listen, *health_address,
                                        health_value_code, "--health-listen");
      if (problem.has_value()) return Fail(problem->first, problem->second);
      return Fail(
          kExitUnavailable,
          absl::StrCat("cannot listen on --health-listen ", health_listen,
                       " (gRPC refused; its log line above says why)"));
    }
  }
  // The health port answers as the main listeners do.
  const auto set_health = [&](auto... name_and_serving) {
    for (grpc::Server* s :
         {server.get(), health_server ? health_server->server() : nullptr}) {
      if (s != nullptr) {
        s->GetHealthCheckService()->SetServingStatus(name_and_serving...);
      }
    }
  };
  // Health by service name too ("" is SERVING from the start), for probes
  // that name the service.
  set_health(rbln::v1::ArtifactService::service_full_name(), true);
  if (health_server != nullptr) {
    spdlog::info(
        "health checking only (grpc.health.v1.Health) on {}, plaintext, to "
        "any caller",
        health_listen);
  }
  spdlog::info("rbln-artifactd serving store {} on {} (pid {}); DRAM: {}",
               (*store)->root(), absl::StrJoin(listen, ", "), getpid(),
               chosen->second);
  if (metrics_server != nullptr) {
    spdlog::info("metrics at http://{}:{}/metrics",
                 metrics_address->host.find(':') == std::string::npos
                     ? metrics_address->host
                     : absl::StrCat("[", metrics_address->host, "]"),
                 metrics_server->port());
  }
  for (const rbln::StoreRootInfo& root : (*store)->roots()) {
    if (root.read_only) {
      spdlog::info("read-only root {}: {}", root.name, root.dir);
    }
  }
  const bool any_tcp = std::any_of(
      addresses.begin(), addresses.end(),
      [](const auto& a) { return a.kind == rbln::ServerAddress::Kind::kTcp; });
  spdlog::info(
      "callers: {}{}{}; operators: {}{}",
      !any_tcp ? "on the Unix socket only"
      : tls    ? "TCP over TLS"
               : "TCP in plaintext",
      tls_client_ca.empty() ? "" : " with client certificates required",
      tokens_file.empty() ? "" : ", bearer tokens from --tokens",
      no_default_operators ? ""
                           : "uid 0 and the daemon's uid on the Unix "
                             "socket, ",
      operators.empty() ? "no others" : absl::StrJoin(operators, ","));
  // Type=notify (deploy/rbln-artifactd.service): the unit is started once
  // every listener accepts. Without $NOTIFY_SOCKET this does nothing.
  // Ready means serving, with the start-up lines out.
  spdlog::default_logger()->flush();
  sd_notify(0, "READY=1");

  // Shutdown (docs/security.md): at the signal no new calls are taken; the
  // running writes get the grace period; then every write not yet at its
  // commit point is cancelled (nothing changes, its caller is told so),
  // gRPC cancels what is left a little later, and should a thread still be
  // stuck (in the kernel, say) the process logs what was running and ends
  // by grace + kForcedExitSeconds.
  std::atomic<bool> stopped{false};
  // Rotation: SIGHUP reads the tokens and the TLS files again, and the TLS
  // files are also looked at every --tls-reload-seconds. A set that fails
  // its checks is logged (once per distinct reason) and the old one stays.
  std::string last_tls_error;
  const auto reload_tls = [&](const std::string& why) {
    if (tls_mirror == nullptr) return;
    absl::StatusOr<bool> changed = tls_mirror->Reload(tls_paths);
    if (!changed.ok()) {
      const std::string error(changed.status().message());
      if (error != last_tls_error) {
        spdlog::error("{}: kept the old TLS files: {}", why, error);
      }
      last_tls_error = error;
      return;
    }
    last_tls_error.clear();
    if (*changed) {
      spdlog::info("{}: reloaded the TLS files {}", why,
                   absl::StrJoin({tls_cert, tls_key, tls_client_ca}, " ",
                                 [](std::string* out, const std::string& f) {
                                   if (!f.empty()) out->append(f);
                                 }));
    }
  };
  std::thread waiter([&]() {
    int signal_number = 0;
    while (true) {
      if (tls_mirror != nullptr && tls_reload_seconds > 0) {
        const timespec period = {.tv_sec = tls_reload_seconds, .tv_nsec = 0};
        signal_number = sigtimedwait(&signals, nullptr, &period);
        if (signal_number < 0) {
          if (errno == EAGAIN) reload_tls("--tls-reload-seconds");
          continue;
        }
      } else if (sigwait(&signals, &signal_number) != 0) {
        break;
      }
      if (signal_number != SIGHUP) break;
      // What the read cache holds open goes, so that a file system inside
      // the store can be unmounted (docs/deploying.md).
      spdlog::info(
          "SIGHUP: dropped {} cached reads and the directories and read "
          "leases they held open",
          (*store)->DropCachedReads());
      if (!tokens_file.empty()) {
        absl::Status reloaded = (*auth)->ReloadTokens();
        if (reloaded.ok()) {
          spdlog::info("SIGHUP: reloaded {}", tokens_file);
        } else {
          spdlog::error("SIGHUP: kept the old tokens: {}",
                        std::string(reloaded.message()));
        }
      }
      reload_tls("SIGHUP");
    }
    sd_notify(0, "STOPPING=1");
    // No new connections on the Unix sockets either.
    for (auto& listener : unix_listeners) listener->Stop();
    const absl::Time start = absl::Now();
    // Every service, "" included, says NOT_SERVING from now on.
    set_health(false);
    const absl::Duration grace = absl::Seconds(shutdown_grace_s);
    spdlog::info(
        "signal {}: no new requests; letting running writes finish "
        "(at most {})",
        signal_number, rbln::FormatSeconds(grace));
    std::thread stopper([&]() {
      server->Shutdown(absl::ToChronoTime(start + grace +
                                          absl::Seconds(kGrpcCancelSeconds)));
    });
    while (service.active_writes() > 0 && absl::Now() < start + grace) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (service.active_writes() > 0) {
      spdlog::warn(
          "grace period over: cancelling {} write(s) not yet committed",
          service.active_writes());
    }
    service.CancelUncommittedWrites();
    const absl::Time limit = start + grace + absl::Seconds(kForcedExitSeconds);
    while (!stopped.load() && absl::Now() < limit) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (stopped.load()) {
      stopper.join();
      return;
    }
    // Should logging itself block (a stuck journal pipe), SIGALRM's default
    // action still ends the process.
    alarm(2);
    for (const std::string& line : service.DescribeRunning()) {
      spdlog::error("still running at the forced exit: {}", line);
    }
    spdlog::error(
        "rbln-artifactd: requests did not end within the grace period plus "
        "{} s (a thread is stuck, likely in the kernel); exiting now",
        kForcedExitSeconds);
    spdlog::default_logger()->flush();
    RemoveUnixSockets(listen);
    _exit(kExitForced);
  });
  server->Wait();
  stopped.store(true);
  waiter.join();
  health_server.reset();
  RemoveUnixSockets(listen);
  // Closing the store removes the old versions still waiting out their
  // grace period, and logs that it does: before the last line. No call is
  // left to use it (server->Wait() has returned).
  store->reset();
  spdlog::info("rbln-artifactd stopped");
  spdlog::default_logger()->flush();
  return 0;
}
