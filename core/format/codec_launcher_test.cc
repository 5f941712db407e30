// SplitCommandLine, ResolveCodecUser and CodecLauncher with small shell
// commands for workers: what a launched worker is handed, and how a launch
// that cannot exec fails.
#include "core/format/codec_launcher.h"

#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(SplitCommandLineTest, SplitsAsAShellWouldWithoutExpanding) {
  absl::StatusOr<std::vector<std::string>> words = SplitCommandLine(
      R"(python3 'my codec.py' "a \"b\"" c\ d $HOME `id` * ~)");
  ASSERT_TRUE(words.ok()) << words.status();
  EXPECT_THAT(*words, ElementsAre("python3", "my codec.py", "a \"b\"", "c d",
                                  "$HOME", "`id`", "*", "~"));
}

TEST(SplitCommandLineTest, RefusesAnUnterminatedQuoteAndAnEmptyCommand) {
  absl::StatusOr<std::vector<std::string>> words =
      SplitCommandLine("python3 'codec.py");
  ASSERT_FALSE(words.ok());
  EXPECT_EQ(words.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(words.status().message(), HasSubstr("quote"));
  EXPECT_FALSE(SplitCommandLine("   ").ok());
  EXPECT_FALSE(SplitCommandLine(std::string("a\0b", 3)).ok());
}

TEST(ResolveCodecUserTest, NamesTheUserTheWorkersRunAs) {
  absl::StatusOr<CodecUser> user = ResolveCodecUser("nobody");
  ASSERT_TRUE(user.ok()) << user.status();
  if (user->drop_privileges) {
    EXPECT_EQ(user->uid, 65534u);
  } else {
    EXPECT_EQ(user->uid, geteuid());
    EXPECT_EQ(user->gid, getegid());
  }
  // A number names a user too.
  absl::StatusOr<CodecUser> by_number = ResolveCodecUser("65534");
  ASSERT_TRUE(by_number.ok()) << by_number.status();
  EXPECT_EQ(by_number->uid, user->uid);
}

TEST(ResolveCodecUserTest, AnUnknownUserIsAFailedPrecondition) {
  absl::StatusOr<CodecUser> user = ResolveCodecUser("no-such-user-x");
  EXPECT_EQ(user.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(user.status().message(),
              HasSubstr("--codec-user 'no-such-user-x': no such user"));
}

TEST(DefaultCodecUserTest, TakesThePreferredUserWhereTheHostHasIt) {
  std::string warning = "stale";
  EXPECT_EQ(DefaultCodecUser("root", &warning), "root");
  EXPECT_EQ(warning, "");
}

TEST(DefaultCodecUserTest, FallsBackToNobodyAndSaysHowToCreateTheUser) {
  std::string warning;
  EXPECT_EQ(DefaultCodecUser("no-such-user-x", &warning), kFallbackCodecUser);
  EXPECT_THAT(warning, HasSubstr("this host has no user no-such-user-x, so "
                                 "the codec runs as nobody"));
  EXPECT_THAT(warning, HasSubstr("useradd --system --no-create-home --shell "
                                 "/usr/sbin/nologin no-such-user-x"));
}

TEST(ResolveCodecUserTest, AnUnsetUserIsTheCodecsOwnWhereTheHostHasIt) {
  absl::StatusOr<CodecUser> user = ResolveCodecUser("");
  ASSERT_TRUE(user.ok()) << user.status();
  if (!user->drop_privileges) GTEST_SKIP() << "the daemon changes no uid here";
  const struct passwd* own = getpwnam(kCodecUser);
  if (own != nullptr) {
    EXPECT_EQ(user->uid, own->pw_uid);
    EXPECT_THAT(user->warnings, IsEmpty());
  } else {
    EXPECT_EQ(user->uid, 65534u);
    ASSERT_EQ(user->warnings.size(), 1u);
    EXPECT_THAT(user->warnings[0], HasSubstr("no user rbln-codec"));
  }
}

// In a child that holds no capability (as root: after becoming nobody), the
// codec is the daemon's own uid, and one warning says so and what it means.
TEST(ResolveCodecUserTest, WithoutCapabilitiesTheCodecRunsAsTheDaemon) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (geteuid() == 0 && (setgroups(0, nullptr) != 0 || setgid(65534) != 0 ||
                           setuid(65534) != 0)) {
      _exit(10);
    }
    absl::StatusOr<CodecUser> user = ResolveCodecUser("");
    if (!user.ok()) _exit(11);
    if (user->drop_privileges || user->uid != geteuid()) _exit(12);
    if (user->warnings.size() != 1) _exit(13);
    const std::string& warning = user->warnings[0];
    if (warning.find("runs as the daemon's own uid") == std::string::npos ||
        warning.find("not contained") == std::string::npos) {
      _exit(14);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "10: cannot become nobody, 11: lookup failed, 12: a uid change, "
         "13: not one warning, 14: the warning says something else";
}

// Reads what `fd` has until `expected` bytes came or a second passed.
std::string ReadSome(int fd, size_t expected) {
  std::string out;
  char buffer[256];
  while (out.size() < expected) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) break;
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

TEST(CodecLauncherTest, AWorkerSpeaksOnOneSocketAndWritesStderrToAPipe) {
  CodecLauncher launcher({"/bin/sh", "-c", "echo started >&2; exec cat"},
                         {.uid = geteuid(), .gid = getegid()});
  absl::StatusOr<CodecProcess> process = launcher.Launch();
  ASSERT_TRUE(process.ok()) << process.status();
  EXPECT_GT(process->pid, 0);
  EXPECT_EQ(getpgid(process->pid), process->pid);  // a group of its own
  EXPECT_EQ(ReadSome(process->stderr_fd.get(), 8), "started\n");
  // fd 0 and fd 1 are the same socket: cat echoes what it reads.
  ASSERT_EQ(send(process->socket.get(), "ping\n", 5, MSG_NOSIGNAL), 5);
  EXPECT_EQ(ReadSome(process->socket.get(), 5), "ping\n");
  shutdown(process->socket.get(), SHUT_RDWR);
  int status = 0;
  ASSERT_EQ(waitpid(process->pid, &status, 0), process->pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(CodecLauncherTest, AProgramThatCannotRunFailsTheLaunch) {
  CodecLauncher launcher({"/nonexistent/codec"},
                         {.uid = geteuid(), .gid = getegid()});
  absl::StatusOr<CodecProcess> process = launcher.Launch();
  ASSERT_FALSE(process.ok());
  EXPECT_EQ(process.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(process.status().message(),
              HasSubstr(absl::StrCat("cannot start /nonexistent/codec as uid ",
                                     geteuid(), ": exec failed")));
}

}  // namespace
}  // namespace rbln
