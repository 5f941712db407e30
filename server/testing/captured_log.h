// CapturedLog: for a test, spdlog's default logger writes into a string
// while the object lives, and the logger before it is put back after.
//
// Not thread-safe against other changes of the default logger; what logs
// through it may run on any thread.
#ifndef RBLN_SERVER_TESTING_CAPTURED_LOG_H_
#define RBLN_SERVER_TESTING_CAPTURED_LOG_H_

#include <memory>
#include <sstream>
#include <string>

#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace rbln::testing {

class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    spdlog::set_default_logger(std::make_shared<spdlog::logger>(
        "test", std::make_shared<spdlog::sinks::ostream_sink_mt>(lines_)));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  // What was logged so far. Read while nothing logs.
  std::string str() const { return lines_.str(); }

 private:
  std::ostringstream lines_;
  const std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace rbln::testing

#endif  // RBLN_SERVER_TESTING_CAPTURED_LOG_H_
