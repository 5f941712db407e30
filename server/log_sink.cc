#include "server/log_sink.h"

#include <errno.h>
#include <unistd.h>

#include <utility>

#include "spdlog/pattern_formatter.h"

namespace rbln {
namespace {

// Writes `text` whole unless the descriptor fails; a failure drops the rest
// (see the header).
void WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

BatchingLogSink::BatchingLogSink(Options options)
    : options_(options),
      formatter_(std::make_unique<spdlog::pattern_formatter>()),
      thread_([this] { Run(); }) {}

BatchingLogSink::~BatchingLogSink() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  {
    absl::MutexLock lock(&linger_mu_);
    linger_over_ = true;
  }
  thread_.join();
  WriteWaiting();
}

void BatchingLogSink::log(const spdlog::details::log_msg& msg) {
  bool now = false;
  {
    absl::MutexLock lock(&mu_);
    // spdlog's formatters keep state (the cached time): one at a time.
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    waiting_.append(line.data(), line.size());
    now = msg.level >= options_.write_through ||
          options_.linger <= absl::ZeroDuration() ||
          waiting_.size() >= options_.max_batch_bytes;
  }
  if (now) WriteWaiting();
}

void BatchingLogSink::flush() { WriteWaiting(); }

void BatchingLogSink::set_pattern(const std::string& pattern) {
  set_formatter(std::make_unique<spdlog::pattern_formatter>(pattern));
}

void BatchingLogSink::set_formatter(
    std::unique_ptr<spdlog::formatter> formatter) {
  absl::MutexLock lock(&mu_);
  formatter_ = std::move(formatter);
}

void BatchingLogSink::WriteWaiting() {
  absl::MutexLock writing(&writers_);
  // The two buffers trade places, so that neither is allocated again.
  writing_.clear();
  {
    absl::MutexLock lock(&mu_);
    writing_.swap(waiting_);
  }
  WriteAll(options_.fd, writing_);
}

void BatchingLogSink::Run() {
  const auto something_waits = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !waiting_.empty();
  };
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&something_waits));
      if (stopping_) return;
    }
    // Not holding mu_: the lines of the requests running meanwhile join
    // this write without waking anyone.
    {
      absl::MutexLock lock(&linger_mu_);
      linger_mu_.AwaitWithTimeout(absl::Condition(&linger_over_),
                                  options_.linger);
    }
    WriteWaiting();
  }
}

}  // namespace rbln
