#include "server/log_sink.h"

#include <stdio.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/civil_time.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "server/log_format.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/spdlog.h"

namespace rbln {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// A file the sink writes to, read back whole.
class LogFile {
 public:
  LogFile() : file_(tmpfile()) {}
  ~LogFile() { fclose(file_); }
  int fd() const { return fileno(file_); }
  std::vector<std::string> Lines() const {
    std::string text;
    char buffer[4096];
    for (off_t at = 0;;) {
      const ssize_t n = pread(fd(), buffer, sizeof(buffer), at);
      if (n <= 0) break;
      text.append(buffer, static_cast<size_t>(n));
      at += n;
    }
    std::vector<std::string> lines = absl::StrSplit(text, '\n');
    lines.pop_back();  // after the last newline
    return lines;
  }

 private:
  FILE* file_;
};

// The lines written within `deadline`, once there are `count`; fewer if
// they never come.
std::vector<std::string> AwaitLines(
    const LogFile& file, size_t count,
    absl::Duration deadline = absl::Seconds(10)) {
  const absl::Time end = absl::Now() + deadline;
  std::vector<std::string> lines = file.Lines();
  while (lines.size() < count && absl::Now() < end) {
    absl::SleepFor(absl::Milliseconds(1));
    lines = file.Lines();
  }
  return lines;
}

// A logger over a sink whose background thread writes after 1 ms.
struct Lingering {
  explicit Lingering(int fd)
      : sink(std::make_shared<BatchingLogSink>(BatchingLogSink::Options{
            .fd = fd, .linger = absl::Milliseconds(1)})),
        logger("test", sink) {
    logger.set_pattern("%v");
  }
  std::shared_ptr<BatchingLogSink> sink;
  spdlog::logger logger;
};

// A logger over a sink that never writes on its own within a test.
struct Logged {
  explicit Logged(int fd, size_t max_batch_bytes = size_t{64} << 10)
      : sink(std::make_shared<BatchingLogSink>(
            BatchingLogSink::Options{.fd = fd,
                                     .linger = absl::Hours(1),
                                     .max_batch_bytes = max_batch_bytes})),
        logger("test", sink) {
    logger.set_pattern("%l %v");
  }
  std::shared_ptr<BatchingLogSink> sink;
  spdlog::logger logger;
};

TEST(BatchingLogSinkTest, InfoLinesWaitAndAWarningWritesThemFirst) {
  LogFile file;
  Logged logged(file.fd());
  logged.logger.info("one");
  logged.logger.info("two");
  EXPECT_THAT(file.Lines(), IsEmpty());
  logged.logger.warn("three");
  EXPECT_THAT(file.Lines(),
              ElementsAre("info one", "info two", "warning three"));
}

TEST(BatchingLogSinkTest, FlushWritesWhatWaits) {
  LogFile file;
  Logged logged(file.fd());
  logged.logger.info("one");
  logged.logger.flush();
  EXPECT_THAT(file.Lines(), ElementsAre("info one"));
  logged.logger.flush();  // nothing more
  EXPECT_THAT(file.Lines(), ElementsAre("info one"));
}

TEST(BatchingLogSinkTest, DestructionWritesWhatWaits) {
  LogFile file;
  {
    Logged logged(file.fd());
    logged.logger.info("last words");
    EXPECT_THAT(file.Lines(), IsEmpty());
  }
  EXPECT_THAT(file.Lines(), ElementsAre("info last words"));
}

// max_batch_bytes counts the waiting lines' memory: their messages and a
// few dozen bytes each besides.
TEST(BatchingLogSinkTest, AFullBatchIsWrittenAtOnce) {
  LogFile file;
  Logged logged(file.fd(), /*max_batch_bytes=*/1024);
  const std::string text(100, 'x');
  logged.logger.info("{}", text);
  EXPECT_THAT(file.Lines(), IsEmpty());
  size_t lines = 1;
  while (file.Lines().empty()) {
    // Eleven messages of 100 bytes are more than 1 KiB by themselves.
    ASSERT_LT(lines, 11u) << "a full batch was not written";
    logged.logger.info("{}", text);
    ++lines;
  }
  // All at once, none left waiting.
  EXPECT_EQ(file.Lines().size(), lines);
}

TEST(BatchingLogSinkTest, TheBackgroundThreadWritesAfterTheLinger) {
  LogFile file;
  Lingering logged(file.fd());
  logged.logger.info("soon");
  // No flush: only the background thread can write it.
  EXPECT_THAT(AwaitLines(file, 1, absl::Seconds(30)), ElementsAre("soon"));
}

TEST(BatchingLogSinkTest, ConcurrentLinesAreWholeOnceAndInEachThreadsOrder) {
  constexpr int kThreads = 4;
  constexpr int kLines = 2000;
  LogFile file;
  {
    auto sink = std::make_shared<BatchingLogSink>(
        BatchingLogSink::Options{.fd = file.fd(),
                                 .linger = absl::Microseconds(50),
                                 .max_batch_bytes = 1024});
    spdlog::logger logger("test", sink);
    logger.set_pattern("%v");
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&logger, t] {
        for (int i = 0; i < kLines; ++i) {
          logger.log(i % 100 == 99 ? spdlog::level::warn : spdlog::level::info,
                     "thread {} line {}", t, i);
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  std::vector<int> next(kThreads, 0);
  for (const std::string& line : file.Lines()) {
    int t = -1;
    int i = -1;
    ASSERT_EQ(sscanf(line.c_str(), "thread %d line %d", &t, &i), 2) << line;
    ASSERT_EQ(line, absl::StrCat("thread ", t, " line ", i));
    ASSERT_GE(t, 0);
    ASSERT_LT(t, kThreads);
    EXPECT_EQ(i, next[t]) << line;
    next[t] = i + 1;
  }
  EXPECT_THAT(next, ElementsAre(kLines, kLines, kLines, kLines));
}

TEST(BatchingLogSinkTest, NoLingerWritesEveryLineAtOnce) {
  LogFile file;
  auto sink = std::make_shared<BatchingLogSink>(BatchingLogSink::Options{
      .fd = file.fd(), .linger = absl::ZeroDuration()});
  spdlog::logger logger("test", sink);
  logger.set_pattern("%v");
  logger.info("now");
  EXPECT_THAT(file.Lines(), ElementsAre("now"));
}

TEST(BatchingLogSinkTest, TakesTheLoggersFormatter) {
  LogFile file;
  Logged logged(file.fd());
  logged.logger.set_pattern("[%n] %v!");
  logged.logger.info("shaped");
  logged.logger.flush();
  EXPECT_THAT(file.Lines(), ElementsAre("[test] shaped!"));
}

// The sink's formatter is the logger's: a new pattern reaches a thread that
// has logged before, and lines logged by other threads.
TEST(BatchingLogSinkTest, ANewPatternReachesEveryThread) {
  LogFile file;
  Logged logged(file.fd());
  logged.logger.info("before");
  std::thread([&] { logged.logger.info("other before"); }).join();
  logged.logger.set_pattern("<%v>");
  logged.logger.info("after");
  std::thread([&] { logged.logger.info("other after"); }).join();
  logged.logger.flush();
  EXPECT_THAT(file.Lines(), ElementsAre("info before", "info other before",
                                        "<after>", "<other after>"));
}

// What waits when the pattern changes is formatted in the old one and
// written then, not left for a later line to carry out.
TEST(BatchingLogSinkTest, LinesWaitingWhenThePatternChangesAreWritten) {
  LogFile file;
  Lingering logged(file.fd());
  logged.logger.info("old");
  logged.logger.set_pattern("<%v>");
  EXPECT_THAT(AwaitLines(file, 1), ElementsAre("old"));
}

// A request's line in JSON carries its fields to the sink, which formats
// it on its own thread after the request's thread has gone.
TEST(BatchingLogSinkTest, AJsonEventIsFormattedOnTheSinksThread) {
  LogFile file;
  auto sink = std::make_shared<BatchingLogSink>(BatchingLogSink::Options{
      .fd = file.fd(), .linger = absl::Milliseconds(1)});
  auto logger = std::make_shared<spdlog::logger>("test", sink);
  const std::shared_ptr<spdlog::logger> before = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  SetLogFormat(*logger, LogFormat::kJson);
  std::thread([] {
    const std::string artifact = "team/\"llama\"";
    LogEvent(
        spdlog::level::info, {"GetKvcacheNumBlocks", " ", "OK"},
        {LogField::Word("method", "GetKvcacheNumBlocks"),
         LogField::Text("artifact", artifact),
         LogField::Number("duration_ms", 3), LogField::Bool("written", false)});
  }).join();
  const std::vector<std::string> lines = AwaitLines(file, 1);
  SetLogFormat(*logger, LogFormat::kText);
  spdlog::set_default_logger(before);
  ASSERT_EQ(lines.size(), 1u);
  rapidjson::Document line;
  line.Parse(lines[0].c_str());
  ASSERT_FALSE(line.HasParseError()) << lines[0];
  ASSERT_TRUE(line.IsObject()) << lines[0];
  for (const char* key : {"time", "level", "message", "method", "artifact"}) {
    ASSERT_TRUE(line.HasMember(key) && line[key].IsString()) << lines[0];
  }
  EXPECT_STREQ(line["level"].GetString(), "info");
  EXPECT_STREQ(line["message"].GetString(), "GetKvcacheNumBlocks OK");
  EXPECT_STREQ(line["method"].GetString(), "GetKvcacheNumBlocks");
  EXPECT_STREQ(line["artifact"].GetString(), "team/\"llama\"");
  ASSERT_TRUE(line.HasMember("duration_ms") && line["duration_ms"].IsInt64());
  EXPECT_EQ(line["duration_ms"].GetInt64(), 3);
  ASSERT_TRUE(line.HasMember("written") && line["written"].IsBool());
  EXPECT_FALSE(line["written"].GetBool());
}

// A line logged after the fact (a read's, once its reply is sent) carries
// the time it is about, not the time it was logged.
TEST(BatchingLogSinkTest, AnEventGivenATimeIsStampedWithIt) {
  LogFile file;
  auto sink = std::make_shared<BatchingLogSink>(BatchingLogSink::Options{
      .fd = file.fd(), .linger = absl::Milliseconds(1)});
  auto logger = std::make_shared<spdlog::logger>("test", sink);
  logger->set_formatter(std::make_unique<spdlog::pattern_formatter>(
      "%Y-%m-%d %H:%M:%S|%v", spdlog::pattern_time_type::utc));
  const std::shared_ptr<spdlog::logger> before = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  const absl::Time when = absl::FromCivil(
      absl::CivilSecond(2001, 2, 3, 4, 5, 6), absl::UTCTimeZone());
  LogEvent(spdlog::level::info, {"GetKvcacheNumBlocks", " ", "OK"},
           {LogField::Word("method", "GetKvcacheNumBlocks")}, when);
  LogEvent(spdlog::level::info, {"GetKvcacheNumBlocks", " ", "OK"},
           {LogField::Word("method", "DescribeArtifact")});
  const std::vector<std::string> lines = AwaitLines(file, 2);
  spdlog::set_default_logger(before);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "2001-02-03 04:05:06|method=GetKvcacheNumBlocks");
  // Without one: when it was logged.
  EXPECT_THAT(lines[1], ::testing::Not(::testing::StartsWith("2001-")));
  EXPECT_THAT(lines[1], ::testing::EndsWith("|method=DescribeArtifact"));
}

TEST(BatchingLogSinkTest, TwoSinksOnOneThreadKeepTheirPatterns) {
  LogFile first_file;
  LogFile second_file;
  Logged first(first_file.fd());
  Logged second(second_file.fd());
  second.logger.set_pattern("2:%v");
  for (int i = 0; i < 3; ++i) {
    first.logger.info("a{}", i);
    second.logger.info("b{}", i);
  }
  first.logger.flush();
  second.logger.flush();
  EXPECT_THAT(first_file.Lines(), ElementsAre("info a0", "info a1", "info a2"));
  EXPECT_THAT(second_file.Lines(), ElementsAre("2:b0", "2:b1", "2:b2"));
}

// A line longer than spdlog's inline buffer is written whole, and so is the
// short one after it.
TEST(BatchingLogSinkTest, ALongLineThenAShortOne) {
  LogFile file;
  Logged logged(file.fd(), /*max_batch_bytes=*/size_t{1} << 20);
  const std::string long_text(200 << 10, 'x');
  logged.logger.info("{}", long_text);
  logged.logger.info("short");
  logged.logger.flush();
  EXPECT_THAT(file.Lines(),
              ElementsAre(absl::StrCat("info ", long_text), "info short"));
}

}  // namespace
}  // namespace rbln
