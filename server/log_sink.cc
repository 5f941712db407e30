#include "server/log_sink.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <type_traits>
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

// What a line keeps of its spdlog::details::log_msg until it is formatted,
// followed in waiting_ by the logger's name and the message.
struct WaitingLine {
  spdlog::log_clock::time_point time;
  spdlog::level::level_enum level;
  size_t thread_id;
  spdlog::source_loc source;  // its strings are static (see the header)
  size_t name_size;
  size_t payload_size;
};
static_assert(std::is_trivially_copyable_v<WaitingLine>);

void AppendUnformatted(const spdlog::details::log_msg& msg, std::string* out) {
  const WaitingLine line = {msg.time,
                            msg.level,
                            msg.thread_id,
                            msg.source,
                            msg.logger_name.size(),
                            msg.payload.size()};
  out->append(reinterpret_cast<const char*>(&line), sizeof(line));
  out->append(msg.logger_name.data(), msg.logger_name.size());
  out->append(msg.payload.data(), msg.payload.size());
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
    AppendUnformatted(msg, &waiting_);
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
  absl::MutexLock writing(&writers_);
  FormatAndWrite();  // in the pattern they were logged in
  formatter_ = std::move(formatter);
}

void BatchingLogSink::FormatAndWrite() {
  {
    absl::MutexLock lock(&mu_);
    formatting_.swap(waiting_);
  }
  spdlog::memory_buf_t text;
  try {
    for (size_t at = 0; at < formatting_.size();) {
      WaitingLine line;
      memcpy(&line, formatting_.data() + at, sizeof(line));
      at += sizeof(line);
      const spdlog::string_view_t name(formatting_.data() + at, line.name_size);
      at += line.name_size;
      const spdlog::string_view_t payload(formatting_.data() + at,
                                          line.payload_size);
      at += line.payload_size;
      spdlog::details::log_msg msg(line.time, line.source, name, line.level,
                                   payload);
      msg.thread_id = line.thread_id;
      text.clear();
      formatter_->format(msg, text);
      formatted_.append(text.data(), text.size());
    }
    WriteAll(options_.fd, formatted_);
  } catch (...) {
    // Out of memory, or a formatter's error: the batch is dropped, as a
    // failed write is, and never written twice or out of order.
  }
  formatted_.clear();
  formatting_.clear();
}

void BatchingLogSink::WriteWaiting() {
  absl::MutexLock writing(&writers_);
  FormatAndWrite();
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
