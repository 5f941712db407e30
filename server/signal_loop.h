// The daemon's signals, taken by a thread that waits for them (sigwait)
// rather than by a handler, so that stopping and reloading are ordinary
// code: SIGTERM and SIGINT stop it, SIGHUP reloads (daemon.h).
//
// BlockStopSignals first, in the thread that starts the others, before any
// thread starts (gRPC's included), so that every thread inherits the mask;
// then WaitForStopSignal, in one thread.
#ifndef RBLN_SERVER_SIGNAL_LOOP_H_
#define RBLN_SERVER_SIGNAL_LOOP_H_

#include <functional>

namespace rbln {

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and so in the
// threads it starts later).
void BlockStopSignals();

// Waits for SIGTERM or SIGINT and returns it, calling `reload` at each
// SIGHUP and, when `tick_seconds` is not 0, `tick` whenever that long
// passes without a signal. Returns the last signal taken should waiting
// fail.
int WaitForStopSignal(unsigned int tick_seconds,
                      const std::function<void()>& reload,
                      const std::function<void()>& tick);

}  // namespace rbln

#endif  // RBLN_SERVER_SIGNAL_LOOP_H_
