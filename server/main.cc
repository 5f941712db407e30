// rbln-artifactd: serves the ArtifactService over a store of compiled
// artifacts. Starts with no flags (default store and Unix socket; DRAM figures
// from rbln-smi when it is installed, else the spec table); see --help.
//
// main parses the flags into a DaemonConfig (server/daemon_flags.h), sets up
// what is the process's (the allocator, the signal mask, the log), starts the
// Daemon (server/daemon.h), and waits for signals (server/signal_loop.h).
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <systemd/sd-daemon.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/os/read_lease.h"
#include "server/allocator.h"
#include "server/daemon.h"
#include "server/daemon_config.h"
#include "server/daemon_error.h"
#include "server/daemon_flags.h"
#include "server/log_format.h"
#include "server/log_sink.h"
#include "server/signal_loop.h"
#include "spdlog/spdlog.h"

namespace {

// Ends the process with `error`: its message, if any, on stderr after the
// lines logged before it (server/log_sink.h batches them).
int Exit(const rbln::DaemonError& error) {
  if (!error.message.empty()) {
    if (spdlog::logger* logger = spdlog::default_logger_raw();
        logger != nullptr) {
      logger->flush();
    }
    fprintf(stderr, "%s: %s\n", rbln::kDaemonProgramName,
            error.message.c_str());
  }
  return error.exit_code;
}

// Logs go to stderr (the journal, under systemd) in batches
// (server/log_sink.h); stdout stays quiet.
void SetUpLogging(const rbln::DaemonConfig& config) {
  rbln::BatchingLogSink::Options options;
  options.linger = config.log_linger;
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      rbln::kDaemonProgramName,
      std::make_shared<rbln::BatchingLogSink>(options)));
  spdlog::set_level(config.log_level);
  rbln::SetLogFormat(*spdlog::default_logger(), config.log_format);
  rbln::RouteLibraryLogsToSpdlog();
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread starts (server/allocator.h).
  rbln::ConfigureMalloc();
#ifdef NDEBUG
  // Debian's Abseil is built with its Mutex deadlock detection on, which
  // keeps a process-wide lock graph updated on every lock taken
  // (docs/performance.md). Debug and sanitizer builds (the tests) keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  rbln::DaemonConfig config;
  if (std::optional<rbln::DaemonError> end = rbln::ParseDaemonFlags(
          std::vector<std::string>(argv + 1, argv + argc), &config, std::cout,
          std::cerr)) {
    return Exit(*end);
  }
  // Before gRPC is first used: every thread inherits the mask. The read
  // leases' signals go to their own thread (core/os/read_lease.h).
  rbln::BlockStopSignals();
  rbln::BlockReadLeaseSignals();
  SetUpLogging(config);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  rbln::DaemonError error;
  std::unique_ptr<rbln::Daemon> daemon =
      rbln::Daemon::Start(std::move(config), &error);
  if (daemon == nullptr) return Exit(error);
  // Type=notify (deploy/rbln-artifactd.service): the unit is started once
  // every listener accepts. Without $NOTIFY_SOCKET this does nothing.
  sd_notify(0, "READY=1");
  const int signal_number = rbln::WaitForStopSignal(
      daemon->tls_reload_seconds(), [&]() { daemon->Reload(); },
      [&]() { daemon->ReloadTls("--tls-reload-seconds"); });
  sd_notify(0, "STOPPING=1");
  if (!daemon->Stop(daemon->config().shutdown_grace,
                    absl::StrCat("signal ", signal_number))) {
    daemon->ExitForcibly();
  }
  spdlog::info("rbln-artifactd stopped");
  spdlog::default_logger()->flush();
  return 0;
}
