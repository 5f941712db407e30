#include "core/os/subprocess.h"

#include <signal.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Short enough to keep the suite fast; the scripts that must time out sleep
// far longer.
constexpr absl::Duration kShortTimeout = absl::Milliseconds(300);

class SubprocessTest : public ::testing::Test {
 protected:
  // Writes an executable /bin/sh script and returns its path.
  std::string Script(absl::string_view name, absl::string_view body,
                     mode_t mode = 0755) {
    const std::string path = dir_.Join(name);
    testing::WriteFileOrDie(path, absl::StrCat("#!/bin/sh\n", body, "\n"));
    EXPECT_EQ(chmod(path.c_str(), mode), 0);
    return path;
  }

  RunProcessOptions Short() const {
    RunProcessOptions options;
    options.timeout = kShortTimeout;
    return options;
  }

  testing::TempDir dir_;
};

TEST_F(SubprocessTest, ReturnsStdoutStderrAndExitStatus) {
  const std::string script =
      Script("both", "echo out; echo err >&2; echo more; exit 0");
  absl::StatusOr<ProcessResult> result = RunProcess({script}, {});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_status, 0);
  EXPECT_EQ(result->stdout_text, "out\nmore\n");
  EXPECT_EQ(result->stderr_text, "err\n");
}

TEST_F(SubprocessTest, ArgumentsAreNotInterpretedByAShell) {
  const std::string script = Script("args", "printf '%s|' \"$@\"");
  absl::StatusOr<ProcessResult> result =
      RunProcess({script, "a b", "$(echo no)", "; exit 9"}, {});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_status, 0);
  EXPECT_EQ(result->stdout_text, "a b|$(echo no)|; exit 9|");
}

TEST_F(SubprocessTest, StdinIsEmpty) {
  const std::string script = Script("reads", "cat; echo done");
  absl::StatusOr<ProcessResult> result = RunProcess({script}, {});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->stdout_text, "done\n");
}

TEST_F(SubprocessTest, NonZeroExitIsAResultAndAnErrorForOutputCallers) {
  const std::string script =
      Script("fails",
             "echo partial; echo; echo '  no NPU driver loaded  ' >&2; "
             "echo second line >&2; exit 3");
  absl::StatusOr<ProcessResult> result = RunProcess({script}, {});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_status, 3);
  EXPECT_EQ(result->stdout_text, "partial\n\n");

  absl::StatusOr<std::string> output = RunProcessForOutput({script}, {});
  ASSERT_FALSE(output.ok());
  EXPECT_EQ(output.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(
      std::string(output.status().message()),
      absl::StrCat(script, " exited with status 3: no NPU driver loaded"));
}

TEST_F(SubprocessTest, SuccessfulOutputForOutputCallers) {
  const std::string script = Script("ok", "echo hello");
  absl::StatusOr<std::string> output = RunProcessForOutput({script}, {});
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_EQ(*output, "hello\n");
}

TEST_F(SubprocessTest, HangingProgramIsKilledAtTheTimeout) {
  const std::string script = Script("hangs", "echo started; sleep 30");
  absl::StatusOr<ProcessResult> result = RunProcess({script}, Short());
  // Reaching this line at all is the point: the call returned.
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(std::string(result.status().message()),
            absl::StrCat(script, " did not answer within 0.3 s; killed it"));
}

TEST_F(SubprocessTest, TimeoutKillsWhatTheProgramStarted) {
  // A background child keeps the output pipe open after its parent dies; it
  // must be killed with it, not left running.
  const std::string pid_file = dir_.Join("child.pid");
  const std::string script = Script(
      "forks", absl::StrCat("sleep 30 & echo $! > ", pid_file, "; wait"));
  // Time enough for the script to record its child even on a loaded machine.
  RunProcessOptions options;
  options.timeout = absl::Seconds(1);
  absl::StatusOr<ProcessResult> result = RunProcess({script}, options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(std::filesystem::exists(pid_file));
  int child = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      absl::StripAsciiWhitespace(testing::ReadFileOrDie(pid_file)), &child));
  // The orphan is reaped by init some time after SIGKILL; until then it may
  // show as a zombie, which is dead too.
  bool dead = false;
  for (int i = 0; i < 500 && !dead; ++i) {
    const std::string stat_path = absl::StrCat("/proc/", child, "/stat");
    std::FILE* f = std::fopen(stat_path.c_str(), "r");
    if (f == nullptr) {
      dead = true;
      break;
    }
    int pid = 0;
    char comm[256] = {};
    char state = '?';
    const int fields = std::fscanf(f, "%d %255s %c", &pid, comm, &state);
    std::fclose(f);
    dead = fields == 3 && (state == 'Z' || state == 'X');
    if (!dead) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(dead) << "the script's child " << child << " still runs";
  if (!dead) kill(child, SIGKILL);
}

TEST_F(SubprocessTest, ClosingOutputThenHangingStillTimesOut) {
  const std::string script = Script("closes", "exec >&- 2>&-; sleep 30");
  absl::StatusOr<ProcessResult> result = RunProcess({script}, Short());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(SubprocessTest, MissingProgramIsNotFound) {
  const std::string missing = dir_.Join("no-such-rbln-smi");
  absl::StatusOr<ProcessResult> result = RunProcess({missing}, {});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(result.status().message()),
            absl::StrCat(missing, " not found"));

  absl::StatusOr<ProcessResult> by_name =
      RunProcess({"no-such-program-on-path-1f3a"}, {});
  ASSERT_FALSE(by_name.ok());
  EXPECT_EQ(by_name.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(by_name.status().message()),
              HasSubstr("not found on PATH"));
}

TEST_F(SubprocessTest, NonExecutableFileIsPermissionDenied) {
  const std::string script = Script("plain", "echo hi", 0644);
  absl::StatusOr<ProcessResult> result = RunProcess({script}, {});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr(script));
}

TEST_F(SubprocessTest, OutputBeyondTheLimitIsRefused) {
  const std::string script =
      Script("chatty", "head -c 100000 /dev/zero; sleep 30");
  RunProcessOptions options;  // the limit, not the timeout, must stop it
  options.max_output_bytes = 4096;
  absl::StatusOr<ProcessResult> result = RunProcess({script}, options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("more than 4096 bytes"));
}

TEST_F(SubprocessTest, DeathBySignalIsReported) {
  const std::string script = Script("crashes", "kill -SEGV $$");
  absl::StatusOr<ProcessResult> result = RunProcess({script}, {});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr(absl::StrCat("killed by signal ", SIGSEGV)));
}

TEST_F(SubprocessTest, StartsWithDefaultSignalsEvenWhenTheCallerBlocksThem) {
  // The daemon blocks SIGTERM for its shutdown thread; a probe must still die
  // of it. The script reports its own blocked-signal mask.
  sigset_t block;
  sigset_t old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &block, &old), 0);
  const std::string script = Script("mask", "grep '^SigBlk' /proc/self/status");
  absl::StatusOr<ProcessResult> result = RunProcess({script}, {});
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(result->stdout_text, StartsWith("SigBlk:\t0000000000000000"));
}

TEST_F(SubprocessTest, FindExecutableOnPathTakesTheFirstExecutableMatch) {
  testing::TempDir first;
  testing::TempDir second;
  testing::WriteFileOrDie(first.Join("tool"), "not executable");
  testing::WriteFileOrDie(second.Join("tool"), "#!/bin/sh\n");
  ASSERT_EQ(chmod(second.Join("tool").c_str(), 0755), 0);
  absl::StatusOr<std::string> found = FindExecutableOnPath(
      "tool", absl::StrCat(first.path(), ":", second.path()));
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, second.Join("tool"));

  absl::StatusOr<std::string> missing =
      FindExecutableOnPath("other", first.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("other not found"));
}

TEST(FormatSecondsTest, WritesSecondsPlainly) {
  EXPECT_EQ(FormatSeconds(absl::Seconds(5)), "5 s");
  EXPECT_EQ(FormatSeconds(absl::Milliseconds(300)), "0.3 s");
}

}  // namespace
}  // namespace rbln
