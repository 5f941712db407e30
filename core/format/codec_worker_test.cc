// CodecWorker over small shell commands: lines both ways, what a worker sends
// unasked, its stderr, deadlines, cancellation and its end.
#include "core/format/codec_worker.h"

#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/format/codec_wire.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

class CodecWorkerTest : public ::testing::Test {
 protected:
  // A worker running `script` under /bin/sh, as the test's user.
  std::unique_ptr<CodecWorker> StartOrDie(const std::string& script) {
    launcher_ = std::make_unique<CodecLauncher>(
        std::vector<std::string>{"/bin/sh", "-c", script},
        CodecUser{.uid = geteuid(), .gid = getegid()});
    absl::StatusOr<CodecProcess> process = launcher_->Launch();
    EXPECT_TRUE(process.ok()) << process.status();
    if (!process.ok()) return nullptr;
    absl::StatusOr<std::unique_ptr<CodecWorker>> worker =
        CodecWorker::Start(*std::move(process), [this](absl::string_view line) {
          absl::MutexLock lock(&mu_);
          log_.emplace_back(line);
        });
    EXPECT_TRUE(worker.ok()) << worker.status();
    return worker.ok() ? *std::move(worker) : nullptr;
  }

  std::vector<std::string> Log() {
    absl::MutexLock lock(&mu_);
    return log_;
  }

  static absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

  std::unique_ptr<CodecLauncher> launcher_;
  absl::Mutex mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
  absl::Status cancel_status_;
};

TEST_F(CodecWorkerTest, SendsAndReadsLinesAndLogsStderr) {
  std::unique_ptr<CodecWorker> worker =
      StartOrDie("echo 'a word\tfor stderr' >&2; exec cat");
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(worker->NextId(), 1);
  EXPECT_EQ(worker->NextId(), 2);
  ASSERT_EQ(worker->Send("ping\n", {}, Soon(), nullptr, &cancel_status_),
            CodecWorker::Io::kOk);
  std::string line;
  ASSERT_EQ(worker->ReadLine(&line, Soon(), nullptr, &cancel_status_),
            CodecWorker::Io::kOk);
  EXPECT_EQ(line, "ping");
  EXPECT_EQ(worker->extra(), "");
  EXPECT_TRUE(worker->StillIdle());

  worker->CloseSocket();
  EXPECT_EQ(worker->ExitDescription(), "exited with status 0");
  EXPECT_EQ(worker->LastStderrLines(/*ended=*/true), "a word\\tfor stderr");
  const std::string logged =
      absl::StrCat("codec[", worker->pid(), "]: a word\\tfor stderr");
  EXPECT_THAT(Log(), ::testing::ElementsAre(logged));
}

TEST_F(CodecWorkerTest, KeepsWhatFollowsTheLineAndSeesAWorkerSpeakUnasked) {
  std::unique_ptr<CodecWorker> worker =
      StartOrDie("read x; printf 'one\\ntwo\\n'; exec cat");
  ASSERT_NE(worker, nullptr);
  ASSERT_EQ(worker->Send("go\n", {}, Soon(), nullptr, &cancel_status_),
            CodecWorker::Io::kOk);
  std::string line;
  ASSERT_EQ(worker->ReadLine(&line, Soon(), nullptr, &cancel_status_),
            CodecWorker::Io::kOk);
  EXPECT_EQ(line, "one");
  EXPECT_EQ(worker->extra(), "two\n");
}

TEST_F(CodecWorkerTest, AnIdleWorkerThatExitedIsNoLongerFit) {
  std::unique_ptr<CodecWorker> worker = StartOrDie("echo bye >&2; exit 3");
  ASSERT_NE(worker, nullptr);
  std::string line;
  EXPECT_EQ(worker->ReadLine(&line, Soon(), nullptr, &cancel_status_),
            CodecWorker::Io::kClosed);
  EXPECT_FALSE(worker->StillIdle());
  EXPECT_EQ(worker->ExitDescription(), "exited with status 3");
  EXPECT_EQ(worker->LastStderrLines(/*ended=*/true), "bye");
}

TEST_F(CodecWorkerTest, ADeadlineOrACancellationEndsTheWait) {
  std::unique_ptr<CodecWorker> worker = StartOrDie("exec sleep 60");
  ASSERT_NE(worker, nullptr);
  std::string line;
  EXPECT_EQ(worker->ReadLine(&line, absl::Now() + absl::Milliseconds(50),
                             nullptr, &cancel_status_),
            CodecWorker::Io::kTimeout);
  EXPECT_EQ(worker->ReadLine(
                &line, Soon(),
                [] { return absl::CancelledError("the caller went away"); },
                &cancel_status_),
            CodecWorker::Io::kCancelled);
  EXPECT_EQ(cancel_status_, absl::CancelledError("the caller went away"));
  worker->Kill();
  EXPECT_THAT(worker->ExitDescription(), StartsWith("killed (signal 9"));
  EXPECT_EQ(worker->LastStderrLines(/*ended=*/true), "(none)");
}

TEST_F(CodecWorkerTest, ALineLongerThanTheBoundIsTooLong) {
  std::unique_ptr<CodecWorker> worker =
      StartOrDie("head -c 17000000 /dev/zero | tr '\\0' a; exec cat");
  ASSERT_NE(worker, nullptr);
  std::string line;
  EXPECT_EQ(worker->ReadLine(&line, Soon(), nullptr, &cancel_status_),
            CodecWorker::Io::kTooLong);
  EXPECT_GT(line.size(), CodecWorker::kMaxReplyBytes);
}

TEST_F(CodecWorkerTest, StderrLinesAreCutAndTheLastFewKept) {
  std::unique_ptr<CodecWorker> worker = StartOrDie(
      "for i in 1 2 3 4 5 6 7 8 9 10; do echo line$i >&2; done;"
      "head -c 5000 /dev/zero | tr '\\0' x >&2; echo >&2; exit 0");
  ASSERT_NE(worker, nullptr);
  std::string line;
  EXPECT_EQ(worker->ReadLine(&line, Soon(), nullptr, &cancel_status_),
            CodecWorker::Io::kClosed);
  const std::string last = worker->LastStderrLines(/*ended=*/true);
  EXPECT_THAT(last, StartsWith("line4 | line5"));
  EXPECT_THAT(last, HasSubstr("... (cut)"));
  EXPECT_LE(last.size(), kMaxCodecMessageBytes);
}

}  // namespace
}  // namespace rbln
