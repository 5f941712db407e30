// rbln-artifactd: serves the ArtifactService over a store of compiled
// artifacts. Starts with no flags (default store and Unix socket; DRAM figures
// from rbln-smi when it is installed, else the spec table); see --help.
//
// main parses the flags into a DaemonConfig (server/daemon_flags.h), sets up
// what is the process's (the allocator, the signal mask, the log), starts the
// Daemon (server/daemon.h), and waits for signals (server/signal_loop.h).
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <sys/resource.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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

// Raises the soft limit on open files to the hard one: every connection of
// the metrics port (server/metrics_http.cc) and of gRPC, every held
// directory and leased file of the caches, costs a descriptor, and the
// soft limit systemd gives (1024) is below what they may hold together.
void RaiseOpenFileLimit() {
  struct rlimit limit {};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 ||
      limit.rlim_cur >= limit.rlim_max) {
    return;
  }
  const rlim_t soft = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    spdlog::warn("cannot raise the open-file limit from {}: {}", soft,
                 strerror(errno));
  }
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
  RaiseOpenFileLimit();
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
  const absl::Time signalled = absl::Now();
  if (!daemon->Stop(daemon->config().shutdown_grace,
                    absl::StrCat("signal ", signal_number))) {
    daemon->ExitForcibly();
  }
  // Stop closed the listeners, removed the sockets and closed the store (its
  // old versions removed, its intent records gone): what is left is memory
  // and descriptors, which the kernel takes back at once however much the
  // daemon holds, where freeing it piece by piece (gRPC's threads, caches,
  // held directories, leases) can take seconds.
  spdlog::info("rbln-artifactd stopped: exiting {} ms after signal {}",
               absl::ToInt64Milliseconds(absl::Now() - signalled),
               signal_number);
  spdlog::default_logger()->flush();
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // Sanitizer builds free everything, so that their leak check runs.
  return 0;
#else
  fflush(stdout);
  _exit(0);
#endif
}
