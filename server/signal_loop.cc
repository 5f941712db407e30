#include "server/signal_loop.h"

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <ctime>

namespace rbln {
namespace {

sigset_t StopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  return signals;
}

}  // namespace

void BlockStopSignals() {
  const sigset_t signals = StopSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

int WaitForStopSignal(unsigned int tick_seconds,
                      const std::function<void()>& reload,
                      const std::function<void()>& tick) {
  const sigset_t signals = StopSignals();
  int signal_number = 0;
  while (true) {
    if (tick_seconds > 0) {
      const timespec period = {.tv_sec = tick_seconds, .tv_nsec = 0};
      signal_number = sigtimedwait(&signals, nullptr, &period);
      if (signal_number < 0) {
        if (errno == EAGAIN) tick();
        continue;
      }
    } else if (sigwait(&signals, &signal_number) != 0) {
      break;
    }
    if (signal_number != SIGHUP) break;
    reload();
  }
  return signal_number;
}

}  // namespace rbln
