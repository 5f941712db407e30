#include "server/signal_loop.h"

#include <pthread.h>
#include <signal.h>

#include "gtest/gtest.h"

namespace rbln {
namespace {

// Each signal goes to this thread only (pthread_kill), blocked here, so that
// no other thread of the test takes it.
TEST(SignalLoopTest, ReloadsAtSighupAndReturnsTheStopSignal) {
  BlockStopSignals();
  pthread_kill(pthread_self(), SIGHUP);
  int reloads = 0;
  const int stop = WaitForStopSignal(
      /*tick_seconds=*/0,
      [&]() {
        ++reloads;
        if (reloads == 1) pthread_kill(pthread_self(), SIGINT);
      },
      []() { FAIL() << "no tick was asked for"; });
  EXPECT_EQ(stop, SIGINT);
  EXPECT_EQ(reloads, 1);
}

TEST(SignalLoopTest, TicksWhileNoSignalComes) {
  BlockStopSignals();
  int ticks = 0;
  const int stop = WaitForStopSignal(
      /*tick_seconds=*/1, []() { FAIL() << "no SIGHUP was sent"; },
      [&]() {
        if (++ticks == 2) pthread_kill(pthread_self(), SIGTERM);
      });
  EXPECT_EQ(stop, SIGTERM);
  EXPECT_EQ(ticks, 2);
}

}  // namespace
}  // namespace rbln
