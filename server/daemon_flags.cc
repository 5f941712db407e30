#include "server/daemon_flags.h"

#include <cmath>
#include <memory>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/defaults.h"
#include "common/flag_errors.h"
#include "common/help_format.h"
#include "common/version.h"
#include "core/format/codec_launcher.h"
#include "server/auth.h"
#include "server/listen_checks.h"
#include "server/socket_access.h"

namespace rbln {
namespace {

// After the options, in 80 columns. Its "Examples:" and "Environment:" are
// headings help2man takes for sections: the man page's include file
// (man/rbln-artifactd.h2m) replaces both, and so all of this, with its own,
// which has every example here (tests/man_pages_test.py).
constexpr char kFooter[] =
    "Examples:\n"
    "  rbln-artifactd --store /srv/artifacts\n"
    "  rbln-artifactd --config /etc/rbln-artifactd/rbln-artifactd.conf\n"
    "  rbln-artifactd --listen 0.0.0.0:50051 --tls-cert tls.crt --tls-key "
    "tls.key \\\n"
    "      --tls-client-ca ca.crt --operators cn:fleet-job\n"
    "\n"
    "Available DRAM (what a budget such as 0.8 is a fraction of), the first "
    "of:\n"
    "  1. --device-dram (or device-dram in the --config file)\n"
    "  2. the probe: rbln-smi's device table, when the tool is found, with\n"
    "     the spec table's figures for each device's name\n"
    "  3. the spec table (RBLN-CA*: 16 GiB - 288 MiB, RBLN-CR*: 4 x (36 GiB -\n"
    "     1 GiB)) when no tool is found, or, with a warning in every reply,\n"
    "     when it fails, hangs or prints something unreadable\n"
    "The artifact's target NPU decides the spec; probed devices of another\n"
    "family are a warning. rbln-artifact --device-info shows what the daemon\n"
    "uses.\n"
    "\n"
    "Environment:\n"
    "  RBLN_ARTIFACTD_STORE   the default --store\n"
    "  RBLN_ARTIFACTD_SOCKET  the default --listen (a socket path), as it is\n"
    "                         rbln-artifact's default --server\n"
    "  RUNTIME_DIRECTORY      set by systemd (RuntimeDirectory=): the default\n"
    "                         socket is made there\n"
    "\n"
    "Callers: on the Unix socket uid 0 and the daemon's own uid write, others\n"
    "read; over TCP a caller is named by its certificate (cn:NAME) or token\n"
    "(token:NAME), and only --operators write.\n"
    "\n"
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

// The flags as CLI11 fills them in, before their checks; the defaults are
// DaemonConfig's.
struct RawFlags {
  explicit RawFlags(const DaemonConfig& defaults)
      : probe_timeout_s(absl::ToDoubleSeconds(defaults.probe_timeout)),
        codec_user(defaults.codec.user),
        codec_timeout_s(
            static_cast<int>(absl::ToInt64Seconds(defaults.codec.timeout))),
        codec_workers(defaults.codec.workers),
        socket_mode_text(absl::StrFormat("%04o", defaults.socket_mode)),
        log_level(spdlog::level::to_string_view(defaults.log_level).begin(),
                  spdlog::level::to_string_view(defaults.log_level).end()),
        log_linger_ms(absl::ToDoubleMilliseconds(defaults.log_linger)),
        max_writes(defaults.max_concurrent_writes),
        shutdown_grace_s(absl::ToDoubleSeconds(defaults.shutdown_grace)),
        old_version_grace_s(absl::ToDoubleSeconds(defaults.old_version_grace)),
        tls_reload_seconds(defaults.tls_reload_seconds) {}

  std::string store_dir = DefaultStoreDir();
  std::vector<std::string> listen;
  std::vector<std::string> read_only_roots;
  std::string device_dram;
  std::string rbln_smi;
  double probe_timeout_s;
  std::string codec_command;
  std::string codec_user;
  std::string codec_containment = "auto";
  int codec_timeout_s;
  int codec_workers;
  std::string socket_mode_text;
  std::string socket_group;
  std::string log_level;
  std::string log_format_text = "text";  // LogFormat::kText
  double log_linger_ms;
  int max_writes;
  double shutdown_grace_s;
  double old_version_grace_s;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  unsigned int tls_reload_seconds;
  std::string health_listen;
  bool allow_insecure_tcp = false;
  std::string tokens_file;
  std::vector<std::string> operators;
  std::string metrics_listen;
  bool no_default_operators = false;
  bool no_read_leases = false;
  bool no_dir_watch = false;
};

// "N seconds", for a default in words.
std::string Seconds(double seconds) {
  return absl::StrCat(seconds, " seconds");
}

// The store and the roots served read-only beside it.
void AddStoreFlags(CLI::App& app, RawFlags& raw) {
  const std::string group = "Store and roots";
  app.add_option("--store", raw.store_dir,
                 "The artifact store, the one directory the daemon writes; "
                 "created if missing (default: $RBLN_ARTIFACTD_STORE, else "
                 "/var/lib/rbln-artifactd for root, else "
                 "~/.local/share/rbln-artifactd, else "
                 "/tmp/rbln-artifactd-store-UID without $HOME)")
      ->option_text("DIR")
      ->group(group);
  app.add_option("--read-only-root", raw.read_only_roots,
                 "Serve the artifacts under DIR read-only, named NAME:path "
                 "(NAME: DIR's last component unless given): they can be "
                 "read, described, fitted with a dry run and copied into the "
                 "store with --output-dir, never changed; symbolic links "
                 "inside DIR are followed when they stay inside it (a Hugging "
                 "Face cache). Repeatable (default: none)")
      ->type_name("[NAME=]DIR")
      ->group(group);
}

// Where the daemon listens, and its Unix sockets' mode and group.
void AddListenFlags(CLI::App& app, RawFlags& raw) {
  const std::string group = "Listening and sockets";
  app.add_option("--listen", raw.listen,
                 "Serve on ADDR: unix:PATH, HOST:PORT or an absolute path (a "
                 "Unix socket); repeatable (default: $RBLN_ARTIFACTD_SOCKET, "
                 "else $RUNTIME_DIRECTORY/rbln-artifactd.sock under systemd, "
                 "else /run/rbln-artifactd/rbln-artifactd.sock for root, else "
                 "$XDG_RUNTIME_DIR/rbln-artifactd.sock, else "
                 "/tmp/rbln-artifactd-UID.sock)")
      ->option_text("ADDR")
      ->group(group);
  app.add_option("--socket-mode", raw.socket_mode_text,
                 absl::StrCat("Mode of the Unix sockets, octal (default: ",
                              raw.socket_mode_text, ")"))
      ->type_name("MODE")
      ->group(group);
  app.add_option("--socket-group", raw.socket_group,
                 "Group of the Unix sockets (a name or number), set once the "
                 "daemon listens: with mode 0660 its members, such as a "
                 "serving process that is not root, may connect (default: "
                 "the daemon's group)")
      ->type_name("GROUP")
      ->group(group);
  app.add_option("--health-listen", raw.health_listen,
                 "Also serve gRPC health checking (grpc.health.v1.Health, "
                 "the same status as the main listeners) and nothing else on "
                 "HOST:PORT, plaintext and to any caller: for probes without "
                 "a client certificate, such as kubelet's (default: off)")
      ->type_name("HOST:PORT")
      ->group(group);
  app.add_flag("--allow-insecure-tcp", raw.allow_insecure_tcp,
               "Allow a TCP listener on a non-loopback address without TLS, "
               "with a warning at start (default: refused)")
      ->group(group);
}

// Where the device DRAM figures come from.
void AddDeviceFlags(CLI::App& app, RawFlags& raw) {
  const std::string group = "Devices and DRAM";
  app.add_option("--device-dram", raw.device_dram,
                 "Override each device's DRAM: 16GiB, or 144GiB,4 for 4 "
                 "chiplets (GB is binary too, as in budgets: 16GB = 16GiB; a "
                 "bare number is bytes, at least 1 GiB: 17179869184); wins "
                 "over the probe and the spec table, and needs no NPU named "
                 "by the artifact (default: none)")
      ->option_text("BYTES[,CHIPLETS]")
      ->group(group);
  app.add_option("--rbln-smi", raw.rbln_smi,
                 "The device probe: PATH of rbln-smi (or rbln-stat) to run "
                 "for the host's NPUs and their DRAM; 'none' for the spec "
                 "table only (default: rbln-smi on $PATH, else rbln-stat)")
      ->type_name("PATH")
      ->group(group);
  app.add_option("--probe-timeout-seconds", raw.probe_timeout_s,
                 "How long the probe may run before it is killed and the spec "
                 "table answers instead (with a warning); 0.01 to 30, well "
                 "inside a client's deadline (default: " +
                     Seconds(raw.probe_timeout_s) + ")")
      ->option_text("SECONDS")
      ->check(CLI::Range(0.01, 30.0))
      ->group(group);
}

// The external codec.
void AddCodecFlags(CLI::App& app, RawFlags& raw) {
  const std::string group = "Codec";
  app.add_option("--codec-command", raw.codec_command,
                 "Start this external codec for .rbln files the built-in one "
                 "does not read, e.g. \"/usr/bin/python3 "
                 "/usr/libexec/rbln-artifactd/rbln_codec_rebel.py\": split "
                 "into words as a shell would (quotes, backslashes), never "
                 "expanded, run without a shell, with the daemon's "
                 "environment (default: none)")
      ->type_name("\"CMD ARGS\"")
      ->group(group);
  app.add_option("--codec-user", raw.codec_user,
                 "The user the codec runs as when the daemon can change uid "
                 "(root, or CAP_SETUID, CAP_SETGID and CAP_KILL): it can then "
                 "read only the files it is handed and write only its scratch "
                 "directory; a name or a number (default: " +
                     std::string(kCodecUser) +
                     " where this host has that user, else " +
                     kFallbackCodecUser + ")")
      ->type_name("USER")
      ->group(group);
  app.add_option("--codec-containment", raw.codec_containment,
                 "How every process a codec worker starts is ended with it: "
                 "pidns (a PID namespace of its own; needs CAP_SYS_ADMIN), "
                 "cgroup (a cgroup of its own, killed whole; needs a "
                 "delegated cgroup2 tree), subreaper (the daemon adopts and "
                 "ends what a worker leaves behind), or auto, the first of "
                 "these that works here (default: auto)")
      ->type_name("MODE")
      ->check(CLI::IsMember({"auto", "pidns", "cgroup", "subreaper"}))
      ->group(group);
  app.add_option("--codec-timeout-seconds", raw.codec_timeout_s,
                 "How long one codec request (loading a model, rescaling it) "
                 "may take, 1 to 86400; a codec that takes longer is killed "
                 "and restarted, and that request fails (default: " +
                     Seconds(raw.codec_timeout_s) + ")")
      ->option_text("SECONDS")
      ->check(CLI::Range(1, 86400))
      ->group(group);
  app.add_option(
         "--codec-workers", raw.codec_workers,
         absl::StrCat("Codec processes at most, 1 to ", kMaxCodecWorkers,
                      ", each serving one request at a time; more "
                      "requests wait for one (default: ",
                      raw.codec_workers, ")"))
      ->option_text("N")
      ->check(CLI::Range(1, kMaxCodecWorkers))
      ->group(group);
}

// Writes: how many at once, and how they end.
void AddWriteFlags(CLI::App& app, RawFlags& raw) {
  const std::string group = "Writes and shutdown";
  app.add_option("--max-concurrent-writes", raw.max_writes,
                 absl::StrCat("Writes running at once, 1 to 64; more are "
                              "refused with UNAVAILABLE (default: ",
                              raw.max_writes, ")"))
      ->option_text("N")
      ->check(CLI::Range(1, 64))
      ->group(group);
  app.add_option("--shutdown-grace-seconds", raw.shutdown_grace_s,
                 "On SIGTERM or SIGINT, how long running writes may take to "
                 "finish, 0 to 3600; then writes not yet committed are "
                 "cancelled (nothing changes) and the daemon exits within 5 s "
                 "more, even with a thread stuck in the kernel (default: " +
                     Seconds(raw.shutdown_grace_s) + ")")
      ->option_text("SECONDS")
      ->check(CLI::Range(0.0, 3600.0))
      ->group(group);
  app.add_option("--old-version-grace-seconds", raw.old_version_grace_s,
                 "After an in-place write (or one that replaces an output "
                 "directory) has replied, how long the old version stays "
                 "beside the artifact as .NAME.retired-HEX before it is "
                 "removed in the background, so that a serving process that "
                 "opened the artifact directory before the swap and reads "
                 "its files with openat() finishes on it; 0 to 86400, 0: "
                 "removed before the reply. Removed at once when a write "
                 "finds the disk full, and when the daemon stops (default: " +
                     Seconds(raw.old_version_grace_s) + ")")
      ->option_text("SECONDS")
      ->check(CLI::Range(0.0, 86400.0))
      ->group(group);
}

// TLS on the TCP listeners, and who may write.
void AddCallerFlags(CLI::App& app, RawFlags& raw) {
  const std::string group = "TLS and callers";
  app.add_option("--tls-cert", raw.tls_cert,
                 "Serve TCP listeners over TLS with this certificate chain "
                 "(PEM); needs --tls-key (default: none, plaintext)")
      ->type_name("FILE")
      ->group(group);
  app.add_option("--tls-key", raw.tls_key,
                 "The private key of --tls-cert, PEM (default: none)")
      ->type_name("FILE")
      ->group(group);
  app.add_option("--tls-client-ca", raw.tls_client_ca,
                 "Require TCP clients to present a certificate issued by "
                 "this CA (PEM); its Common Name names the caller (cn:NAME). "
                 "Needs --tls-cert (default: none, no certificate asked)")
      ->type_name("FILE")
      ->group(group);
  app.add_option("--tls-reload-seconds", raw.tls_reload_seconds,
                 "How often the TLS files are checked for a rotation, as "
                 "SIGHUP does at once; 0 to 86400, 0: only on SIGHUP. "
                 "Connections stay up, and a set that fails its checks keeps "
                 "the old one (default: " +
                     Seconds(raw.tls_reload_seconds) + ")")
      ->option_text("SECONDS")
      ->check(CLI::Range(0, 86400))
      ->group(group);
  app.add_option("--tokens", raw.tokens_file,
                 "Bearer tokens: lines of NAME SHA256-HEX-OF-TOKEN ('#' "
                 "comments); a caller with one is token:NAME, and TCP callers "
                 "without a certificate must then send one. Reloaded on "
                 "SIGHUP (default: none)")
      ->type_name("FILE")
      ->group(group);
  app.add_option("--operators", raw.operators,
                 "Callers who may write, comma-separated: cn:NAME, "
                 "token:NAME, uid:N, user:NAME, group:NAME; everyone else "
                 "reads and dry-runs. Repeatable (default: none but, on the "
                 "Unix socket, uid 0 and the daemon's own uid)")
      ->type_name("LIST")
      ->group(group);
  app.add_flag("--no-default-operators", raw.no_default_operators,
               "Unix-socket peers with uid 0 or the daemon's uid are not "
               "operators unless --operators lists them (default: they are)")
      ->group(group);
}

// The log on stderr, and the metrics.
void AddLogFlags(CLI::App& app, RawFlags& raw) {
  const std::string group = "Logging and metrics";
  app.add_option("--log-level", raw.log_level,
                 "trace, debug, info, warn, error or off (default: " +
                     raw.log_level + ")")
      ->option_text("LEVEL")
      ->group(group);
  app.add_option("--log-format", raw.log_format_text,
                 "text, or json: one JSON object a line (time in RFC 3339, "
                 "level, message, and a request's fields as keys of their "
                 "own), for log shippers (default: " +
                     raw.log_format_text + ")")
      ->option_text("FORMAT")
      ->group(group);
  app.add_option(
         "--log-linger-ms", raw.log_linger_ms,
         absl::StrCat("How long an informational log line (a read's request "
                      "line) may wait to be written together with the lines "
                      "that follow it, so that a busy daemon makes one write "
                      "for many requests; 0 to 60000, 0: every line at once. "
                      "A change's line and every warning are written before "
                      "the reply whatever this is (default: ",
                      raw.log_linger_ms, " ms)"))
      ->option_text("MS")
      ->check(CLI::Range(0.0, 60000.0))
      ->group(group);
  app.add_option("--metrics-listen", raw.metrics_listen,
                 "Serve Prometheus metrics over plain HTTP at "
                 "http://HOST:PORT/metrics (requests, commits, bytes copied, "
                 "lock waits, probes, ...; counts only, no names): bind it to "
                 "loopback or a network you trust (default: off)")
      ->type_name("HOST:PORT")
      ->group(group);
}

// The artifact cache's read leases and directory watch.
void AddCacheFlags(CLI::App& app, RawFlags& raw) {
  const std::string group = "Caches";
  app.add_flag("--no-read-leases", raw.no_read_leases,
               "Take no read leases on cached artifacts' files: every Get and "
               "Describe then stats each file again, and a writer's open of "
               "such a file never waits for this daemon (default: leases are "
               "taken)")
      ->group(group);
  app.add_flag("--no-dir-watch", raw.no_dir_watch,
               "Watch no cached artifact's directory with inotify: every Get "
               "and Describe then stats the directory's name again (default: "
               "watched)")
      ->group(group);
}

// --config, --help and --version, listed last.
void AddConfigAndHelpFlags(CLI::App& app) {
  const std::string group = "Config file and help";
  app.set_config("--config", "",
                 "Read flags from a TOML/INI file: one `name = value` line "
                 "per long flag without its dashes (store = \"/srv/a\", "
                 "listen = [\"unix:/run/a.sock\"], device-dram = \"16GiB\"); "
                 "flags on the command line win (default: none)")
      ->type_name("FILE")
      ->group(group);
  // A misspelt entry would otherwise be dropped silently, and the daemon
  // would run with a default the operator meant to change.
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.set_help_flag("-h,--help", "Print this help and exit")->group(group);
  app.set_version_flag("--version", VersionLine(kDaemonProgramName),
                       "Print the version and the git commit, and exit")
      ->group(group);
}

// Every flag of `app`, into `raw`, in the order --help lists them.
void DefineFlags(CLI::App& app, RawFlags& raw) {
  app.formatter(std::make_shared<HelpFormatter>());
  app.footer(kFooter);
  // Re-added last (AddConfigAndHelpFlags) so that it is listed there.
  app.set_help_flag();
  AddStoreFlags(app, raw);
  AddListenFlags(app, raw);
  AddDeviceFlags(app, raw);
  AddCodecFlags(app, raw);
  AddWriteFlags(app, raw);
  AddCallerFlags(app, raw);
  AddLogFlags(app, raw);
  AddCacheFlags(app, raw);
  AddConfigAndHelpFlags(app);
}

// The range checks pass NaN ("nan" parses as a number, and compares with
// nothing): a time must be finite.
std::optional<DaemonError> CheckTimes(const RawFlags& raw,
                                      const FlagSources& sources) {
  for (const auto& [flag, value] :
       {std::pair<const char*, double>{"--probe-timeout-seconds",
                                       raw.probe_timeout_s},
        {"--shutdown-grace-seconds", raw.shutdown_grace_s},
        {"--old-version-grace-seconds", raw.old_version_grace_s},
        {"--log-linger-ms", raw.log_linger_ms}}) {
    if (!std::isfinite(value)) {
      return sources.BadValue(flag, "needs a finite number, got NaN");
    }
  }
  return std::nullopt;
}

// --listen (the default when not given), --health-listen, --metrics-listen.
std::optional<DaemonError> CheckListeners(const RawFlags& raw,
                                          const FlagSources& sources,
                                          DaemonConfig* config) {
  config->default_listen = raw.listen.empty();
  config->listen =
      raw.listen.empty() ? std::vector{DefaultServerAddress()} : raw.listen;
  for (std::string& text : config->listen) {
    absl::StatusOr<ServerAddress> address = ParseServerAddress(text);
    if (!address.ok()) {
      return sources.BadValue("--listen", address.status().message());
    }
    text = GrpcTarget(*address);  // a bare path as unix:PATH
    config->addresses.push_back(*std::move(address));
  }
  if (!raw.health_listen.empty()) {
    absl::StatusOr<ServerAddress> address =
        ParseServerAddress(raw.health_listen);
    if (!address.ok()) {
      return sources.BadValue("--health-listen", address.status().message());
    }
    if (address->kind != ServerAddress::Kind::kTcp) {
      return sources.BadValue(
          "--health-listen",
          absl::StrCat("needs HOST:PORT (a TCP port for probes "
                       "such as kubelet's), got '",
                       raw.health_listen, "'"));
    }
    config->health_listen = GrpcTarget(*address);
    config->health_address = *std::move(address);
  }
  if (!raw.metrics_listen.empty()) {
    // A Unix socket is refused by MetricsHttpServer::Start, as a usage
    // error too.
    absl::StatusOr<ServerAddress> address =
        ParseServerAddress(raw.metrics_listen);
    if (!address.ok()) {
      return sources.BadValue("--metrics-listen", address.status().message());
    }
    config->metrics_listen = raw.metrics_listen;
    config->metrics_address = *std::move(address);
  }
  return std::nullopt;
}

// --socket-mode and --socket-group.
std::optional<DaemonError> CheckSockets(const RawFlags& raw,
                                        const FlagSources& sources,
                                        DaemonConfig* config) {
  absl::StatusOr<mode_t> socket_mode = ParseSocketMode(raw.socket_mode_text);
  if (!socket_mode.ok()) {
    return sources.BadValue("--socket-mode", socket_mode.status().message());
  }
  config->socket_mode = *socket_mode;
  config->socket_group = raw.socket_group;
  if (!raw.socket_group.empty()) {
    absl::StatusOr<gid_t> gid = ResolveGroup(raw.socket_group);
    if (!gid.ok()) {
      return DaemonError{kExitConfig, absl::StrCat("--socket-group: ",
                                                   gid.status().message())};
    }
    config->socket_gid = *gid;
  }
  return std::nullopt;
}

// TLS, plaintext TCP that other hosts reach, and --operators.
std::optional<DaemonError> CheckCallers(const RawFlags& raw,
                                        const FlagSources& sources,
                                        DaemonConfig* config) {
  if (raw.tls_cert.empty() != raw.tls_key.empty()) {
    return sources.BadValue(raw.tls_cert.empty() ? "--tls-key" : "--tls-cert",
                            "--tls-cert and --tls-key go together");
  }
  if (!raw.tls_client_ca.empty() && raw.tls_cert.empty()) {
    return sources.BadValue(
        "--tls-client-ca",
        "needs --tls-cert and --tls-key (client certificates are "
        "checked during the TLS handshake)");
  }
  config->tls = {
      .cert = raw.tls_cert, .key = raw.tls_key, .client_ca = raw.tls_client_ca};
  const std::vector<std::string> insecure_remote = InsecureRemoteListeners(
      config->listen, config->addresses, !raw.tls_cert.empty());
  if (!insecure_remote.empty() && !raw.allow_insecure_tcp) {
    return sources.BadValue(
        "--listen",
        absl::StrCat(absl::StrJoin(insecure_remote, ", "),
                     " is reachable from other hosts and would be plaintext: "
                     "give --tls-cert and --tls-key (docs/security.md), or "
                     "--allow-insecure-tcp on a network you trust"));
  }
  absl::StatusOr<std::vector<std::string>> operator_list =
      ParseOperators(raw.operators);
  if (!operator_list.ok()) {
    return sources.BadValue("--operators", operator_list.status().message());
  }
  config->operator_list = *std::move(operator_list);
  return std::nullopt;
}

// --log-level and --log-format.
std::optional<DaemonError> CheckLog(const RawFlags& raw,
                                    const FlagSources& sources,
                                    DaemonConfig* config) {
  config->log_level = spdlog::level::from_str(raw.log_level);
  if (config->log_level == spdlog::level::off && raw.log_level != "off") {
    return sources.BadValue(
        "--log-level", absl::StrCat("unknown level '", raw.log_level,
                                    "'; use trace, debug, info, warn, error or "
                                    "off"));
  }
  absl::StatusOr<LogFormat> log_format = ParseLogFormat(raw.log_format_text);
  if (!log_format.ok()) {
    return sources.BadValue("--log-format", log_format.status().message());
  }
  config->log_format = *log_format;
  return std::nullopt;
}

// --codec-command, --device-dram and --read-only-root.
std::optional<DaemonError> CheckCodecDeviceAndRoots(const RawFlags& raw,
                                                    const FlagSources& sources,
                                                    DaemonConfig* config) {
  if (!raw.codec_command.empty()) {
    if (absl::StatusOr<std::vector<std::string>> words =
            SplitCommandLine(raw.codec_command);
        !words.ok()) {
      return sources.BadValue("--codec-command", words.status().message());
    }
  }
  if (!raw.device_dram.empty()) {
    absl::StatusOr<DramOverride> parsed = ParseDramOverride(raw.device_dram);
    if (!parsed.ok()) {
      return sources.BadValue("--device-dram", parsed.status().message());
    }
    config->dram_override = *parsed;
  }
  for (const std::string& text : raw.read_only_roots) {
    absl::StatusOr<ReadOnlyRootSpec> root = ParseReadOnlyRoot(text);
    if (!root.ok()) {
      return sources.BadValue("--read-only-root", root.status().message());
    }
    config->read_only_roots.push_back(*std::move(root));
  }
  return std::nullopt;
}

// The values that need no check beyond CLI11's.
void CopyPlainValues(const RawFlags& raw, DaemonConfig* config) {
  config->store_dir = raw.store_dir;
  config->old_version_grace = absl::Seconds(raw.old_version_grace_s);
  config->device_dram = raw.device_dram;
  config->rbln_smi = raw.rbln_smi;
  config->probe_timeout = absl::Seconds(raw.probe_timeout_s);
  config->codec.command = raw.codec_command;
  config->codec.user = raw.codec_user;
  config->codec.containment = *ParseContainmentMode(raw.codec_containment);
  config->codec.timeout = absl::Seconds(raw.codec_timeout_s);
  config->codec.workers = raw.codec_workers;
  config->tls_reload_seconds = raw.tls_reload_seconds;
  config->allow_insecure_tcp = raw.allow_insecure_tcp;
  config->tokens_file = raw.tokens_file;
  config->operators = raw.operators;
  config->default_operators = !raw.no_default_operators;
  config->max_concurrent_writes = raw.max_writes;
  config->shutdown_grace = absl::Seconds(raw.shutdown_grace_s);
  config->log_linger = absl::Milliseconds(raw.log_linger_ms);
  config->read_leases = !raw.no_read_leases;
  config->dir_watch = !raw.no_dir_watch;
}

}  // namespace

std::optional<DaemonError> ParseDaemonFlags(
    const std::vector<std::string>& args, DaemonConfig* config,
    std::ostream& out, std::ostream& err) {
  CLI::App app{
      "Reads and changes kvcache_num_blocks of the compiled NPU model "
      "artifacts in its store, for rbln-artifact and other gRPC clients "
      "(rbln.artifact.v1.ArtifactService, with health checking and "
      "reflection).",
      kDaemonProgramName};
  *config = DaemonConfig();
  RawFlags raw(*config);
  DefineFlags(app, raw);
  if (std::optional<int> exit_code =
          ParseFlags(app, args, kDaemonProgramName,
                     {.usage = kExitUsage, .config = kExitConfig}, out, err)) {
    return DaemonError{*exit_code, ""};
  }
  // A bad value is a usage error on the command line, a configuration error
  // when it came from the --config file.
  config->sources = {
      .args = args,
      .config_file = app.get_config_ptr()->count() > 0
                         ? app.get_config_ptr()->as<std::string>()
                         : ""};
  CopyPlainValues(raw, config);
  const FlagSources& sources = config->sources;
  if (auto error = CheckTimes(raw, sources)) return error;
  if (auto error = CheckListeners(raw, sources, config)) return error;
  if (auto error = CheckSockets(raw, sources, config)) return error;
  if (auto error = CheckCallers(raw, sources, config)) return error;
  if (auto error = CheckLog(raw, sources, config)) return error;
  return CheckCodecDeviceAndRoots(raw, sources, config);
}

}  // namespace rbln
