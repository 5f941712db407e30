// DaemonConfig: everything rbln-artifactd is started with, the flags parsed
// and checked (daemon_flags.h), for Daemon::Start (daemon.h). A test may fill
// one by hand: the defaults are the flags' defaults, except the store and
// the listeners, which it names.
//
// Thread-safe: a plain struct, and FlagSources's const methods.
#ifndef RBLN_SERVER_DAEMON_CONFIG_H_
#define RBLN_SERVER_DAEMON_CONFIG_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/server_address.h"
#include "core/device/dram.h"
#include "core/format/external_codec.h"
#include "core/store/store.h"
#include "server/daemon_error.h"
#include "server/log_format.h"
#include "server/log_sink.h"
#include "server/tls_files.h"
#include "spdlog/spdlog.h"

namespace rbln {

// Where the flags came from, so that a value found bad only at start (a
// host that does not resolve) ends the process as a bad value on the command
// line or in the --config file would.
struct FlagSources {
  std::vector<std::string> args;  // the command line, without the program
  std::string config_file;        // --config, or "" for none

  // kExitUsage when `flag` ("--listen") was given on the command line or
  // there is no --config file, else kExitConfig.
  int BadValueCode(absl::string_view flag) const;
  // `message` about `flag`'s value: "--flag: MESSAGE" (kExitUsage), or the
  // --config file's error in FormatConfigError's words (kExitConfig).
  DaemonError BadValue(absl::string_view flag, absl::string_view message) const;
};

struct DaemonConfig {
  // The store (--store) and the roots served read-only beside it.
  std::string store_dir;
  std::vector<ReadOnlyRootSpec> read_only_roots;
  absl::Duration old_version_grace = kDefaultOldVersionGrace;

  // --listen, as gRPC targets ("unix:PATH", "HOST:PORT"), and parsed: the
  // same index in both. A relative socket path is made absolute against the
  // working directory by Daemon::Start.
  std::vector<std::string> listen;
  std::vector<ServerAddress> addresses;
  // --listen was not given: Start makes the directory of the system socket
  // (common/defaults.h) when that is the default.
  bool default_listen = false;
  mode_t socket_mode = 0660;
  std::string socket_group;  // as given, for messages
  std::optional<gid_t> socket_gid;
  // --health-listen and --metrics-listen ("" and nullopt: off).
  std::string health_listen;
  std::optional<ServerAddress> health_address;
  std::string metrics_listen;
  std::optional<ServerAddress> metrics_address;

  // The device's DRAM: --device-dram as given and parsed, else the probe
  // (--rbln-smi: "" for rbln-smi on PATH, "none" for none).
  std::string device_dram;
  std::optional<DramOverride> dram_override;
  std::string rbln_smi;
  absl::Duration probe_timeout = absl::Seconds(5);

  // The external codec (--codec-*): none when `codec.command` is empty. Its
  // `log` is Start's.
  ExternalCodecOptions codec;

  // Callers: TLS on TCP when `tls.cert` is set, bearer tokens, operators.
  TlsFilePaths tls;
  unsigned int tls_reload_seconds = 60;
  bool allow_insecure_tcp = false;
  std::string tokens_file;
  std::vector<std::string> operators;      // as given, for the log
  std::vector<std::string> operator_list;  // ParseOperators's
  bool default_operators = true;

  int max_concurrent_writes = 4;
  absl::Duration shutdown_grace = absl::Seconds(60);

  spdlog::level::level_enum log_level = spdlog::level::info;
  LogFormat log_format = LogFormat::kText;
  absl::Duration log_linger = BatchingLogSink::Options().linger;

  // The artifact cache's read leases and directory watch (--no-read-leases,
  // --no-dir-watch).
  bool read_leases = true;
  bool dir_watch = true;

  FlagSources sources;
};

}  // namespace rbln

#endif  // RBLN_SERVER_DAEMON_CONFIG_H_
