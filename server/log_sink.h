// BatchingLogSink: the daemon's spdlog sink. It writes formatted lines to a
// file descriptor (stderr: the journal, under systemd) in batches, so that a
// busy daemon makes one write(2) for many requests' lines
// (docs/performance.md); a line is formatted by the thread that writes it.
//
// A line is written: at `write_through` (warn) or above, with every line
// before it, before log() returns; every line before flush() returns (the
// request log flushes a change's line before its reply); any other line
// within `linger` by a background thread, or at once when the waiting lines
// take `max_batch_bytes`; what is left when the sink is destroyed. Lines go
// out whole and in order, each in the pattern set when it was logged; a
// killed process loses the waiting lines below `write_through`.
//
// A formatter must format from the message alone (it runs later, on
// another thread), and must not log through this sink; a line's source_loc
// strings must be static. A failed write or format drops the batch: logging
// never stops the daemon. Thread-safe.
#ifndef RBLN_SERVER_LOG_SINK_H_
#define RBLN_SERVER_LOG_SINK_H_

#include <cstddef>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "spdlog/formatter.h"
#include "spdlog/sinks/sink.h"

namespace rbln {

class BatchingLogSink final : public spdlog::sinks::sink {
 public:
  struct Options {
    int fd = 2;  // not owned
    // Short enough not to be seen by a person reading the journal, long
    // enough for hundreds of requests' lines at full load: each batch wakes
    // the background thread, which then preempts a gRPC thread
    // (docs/performance.md). Zero: every line is written before log()
    // returns.
    absl::Duration linger = absl::Milliseconds(10);
    // Written at once when the waiting lines take this much memory (their
    // messages, and a few dozen bytes each besides): a write of a few pipe
    // buffers.
    size_t max_batch_bytes = size_t{64} << 10;
    spdlog::level::level_enum write_through = spdlog::level::warn;
  };

  explicit BatchingLogSink(Options options);
  BatchingLogSink() : BatchingLogSink(Options()) {}
  BatchingLogSink(const BatchingLogSink&) = delete;
  BatchingLogSink& operator=(const BatchingLogSink&) = delete;
  // Writes what is waiting; stops the background thread.
  ~BatchingLogSink() override;

  void log(const spdlog::details::log_msg& msg) override;
  void flush() override;
  void set_pattern(const std::string& pattern) override;
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override;

 private:
  // Formats what is waiting and writes it; writers_ keeps batches in order.
  void WriteWaiting() ABSL_LOCKS_EXCLUDED(mu_, writers_);
  // Formats the waiting lines in formatter_'s pattern and writes them.
  void FormatAndWrite() ABSL_EXCLUSIVE_LOCKS_REQUIRED(writers_)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Run();

  const Options options_;
  absl::Mutex writers_ ABSL_ACQUIRED_BEFORE(mu_);
  // spdlog's formatters keep state (the cached time): one at a time.
  std::unique_ptr<spdlog::formatter> formatter_ ABSL_GUARDED_BY(writers_);
  std::string formatted_ ABSL_GUARDED_BY(writers_);  // kept for its capacity
  // The lines being formatted; it trades places with waiting_, so that
  // neither is allocated again.
  std::string formatting_ ABSL_GUARDED_BY(writers_);
  absl::Mutex mu_;
  // Logged lines, unformatted: each a WaitingLine (log_sink.cc), its logger's
  // name and message.
  std::string waiting_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Ends a linger early, at destruction; a lock of its own, so that loggers
  // never evaluate the background thread's wait.
  absl::Mutex linger_mu_;
  bool linger_over_ ABSL_GUARDED_BY(linger_mu_) = false;
  std::thread thread_;
};

}  // namespace rbln

#endif  // RBLN_SERVER_LOG_SINK_H_
