#include "tests/daemon_testing.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "core/format/artifact.h"
#include "core/os/env.h"
#include "core/store/store.h"

extern char** environ;

namespace rbln::e2e {

using ::rbln::testing::BinaryPath;
using ::rbln::testing::ReadFileOrDie;

std::string ShellQuote(absl::string_view text) {
  return absl::StrCat("'", absl::StrReplaceAll(text, {{"'", "'\\''"}}), "'");
}

std::string ReadIfExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec) ? ReadFileOrDie(path) : "";
}

pid_t Spawn(const std::vector<std::string>& argv, const std::string& cwd,
            const std::string& stdout_path, const std::string& stderr_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null",
                                   O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, stdout_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> args;
  for (const std::string& arg : argv) {
    args.push_back(const_cast<char*>(arg.c_str()));
  }
  args.push_back(nullptr);
  pid_t pid = -1;
  const int error =
      posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    ADD_FAILURE() << "posix_spawn " << args[0] << ": " << strerror(error);
    return -1;
  }
  return pid;
}

std::optional<int> WaitBounded(pid_t pid, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0) {
      ADD_FAILURE() << "waitpid " << pid << ": " << strerror(errno);
      return std::nullopt;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "process " << pid << " did not exit within "
                    << timeout.count() << " s; killing it";
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status));
  return absl::StrCat("wait status ", status);
}

std::ostream& operator<<(std::ostream& os, const Outcome& o) {
  return os << "exit " << o.code << "\n--- stdout:\n"
            << o.out << "--- stderr:\n"
            << o.err;
}

Outcome RunShell(const std::string& command, const std::string& stderr_path) {
  Outcome outcome;
  outcome.code = rbln::testing::RunCommand(
      absl::StrCat("((", command, ") 2>", ShellQuote(stderr_path), ")"),
      &outcome.out);
  outcome.err = ReadIfExists(stderr_path);
  return outcome;
}

Outcome RunProgram(const std::string& program, const std::string& args,
                   const std::string& cwd, const std::string& stderr_path) {
  return RunShell(absl::StrCat("cd ", ShellQuote(cwd), " && ", kCommandTimeout,
                               " ", ShellQuote(BinaryPath(program)), " ", args),
                  stderr_path);
}

Outcome RunClient(const std::string& server, const std::string& args,
                  const std::string& cwd, const std::string& stderr_path) {
  return RunProgram("rbln-artifact",
                    absl::StrCat("--server ", ShellQuote(server), " ", args),
                    cwd, stderr_path);
}

void Synthesize(const std::string& preset, const std::string& out_dir,
                const std::vector<std::string>& extra_flags) {
  std::string output;
  std::vector<std::string> quoted;
  for (const std::string& flag : extra_flags) {
    quoted.push_back(ShellQuote(flag));
  }
  const int code = rbln::testing::RunCommand(
      absl::StrCat(ShellQuote(BinaryPath("rbln-artifact-synth")), " --preset ",
                   preset, " --payload-bytes 64KiB --out ", ShellQuote(out_dir),
                   " ", absl::StrJoin(quoted, " ")),
      &output);
  ASSERT_EQ(code, 0) << output;
}

bool Accepts(const std::string& address) {
  int fd = -1;
  int rc = -1;
  if (absl::StartsWith(address, "unix:")) {
    const std::string path = address.substr(5);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof(addr.sun_path)) return false;
    path.copy(addr.sun_path, path.size());
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  } else {
    std::vector<std::string> parts = absl::StrSplit(address, ':');
    int port = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &port)) return false;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, parts[0].c_str(), &addr.sin_addr) != 1) {
      return false;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  }
  close(fd);
  return rc == 0;
}

int BindFreeLoopbackPort(bool listen_too, int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) ||
      (listen_too && listen(fd, 1) != 0) ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ADD_FAILURE() << "cannot bind a free port: " << strerror(errno);
    if (fd >= 0) close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

int PickFreePort() {
  int port = 0;
  const int fd = BindFreeLoopbackPort(/*listen_too=*/false, &port);
  if (fd >= 0) close(fd);
  return port;
}

std::string Daemon::Logs() const {
  return absl::StrCat("daemon stdout:\n", ReadIfExists(stdout_path),
                      "daemon stderr:\n", ReadIfExists(stderr_path));
}

void StartDaemonWithFlags(const std::string& work_dir,
                          const std::string& address,
                          const std::vector<std::string>& flags,
                          Daemon* daemon) {
  // Each daemon of the process logs to files of its own.
  static int started = 0;
  const std::string tag = absl::StrCat("daemon", started++);
  daemon->address = address;
  daemon->stdout_path = absl::StrCat(work_dir, "/", tag, ".out");
  daemon->stderr_path = absl::StrCat(work_dir, "/", tag, ".err");
  std::vector<std::string> argv = {BinaryPath("rbln-artifactd")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  daemon->pid = Spawn(argv, work_dir, daemon->stdout_path, daemon->stderr_path);
  ASSERT_GT(daemon->pid, 0);
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (!Accepts(address)) {
    int status = 0;
    if (waitpid(daemon->pid, &status, WNOHANG) == daemon->pid) {
      daemon->pid = -1;
      FAIL() << "rbln-artifactd " << absl::StrJoin(argv, " ")
             << " exited at start (" << DescribeWaitStatus(status) << ")\n"
             << daemon->Logs();
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(daemon->pid, SIGKILL);
      waitpid(daemon->pid, &status, 0);
      daemon->pid = -1;
      FAIL() << "rbln-artifactd did not accept connections on " << address
             << " within " << kStartTimeout.count() << " s\n"
             << daemon->Logs();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void StartDaemon(const std::string& work_dir, const std::string& store,
                 const std::string& address,
                 const std::vector<std::string>& extra_flags, Daemon* daemon) {
  std::vector<std::string> flags = {"--store", store,         "--listen",
                                    address,   "--log-level", "warn"};
  flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
  StartDaemonWithFlags(work_dir, address, flags, daemon);
}

void StopDaemon(Daemon* daemon) {
  if (daemon->pid <= 0) return;
  ASSERT_EQ(kill(daemon->pid, SIGTERM), 0) << strerror(errno);
  std::optional<int> status = WaitBounded(daemon->pid, kExitTimeout);
  daemon->pid = -1;
  ASSERT_TRUE(status.has_value()) << daemon->Logs();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << "rbln-artifactd after SIGTERM: " << DescribeWaitStatus(*status) << "\n"
      << daemon->Logs();
  if (absl::StartsWith(daemon->address, "unix:")) {
    EXPECT_FALSE(std::filesystem::exists(daemon->address.substr(5)))
        << "the daemon left its socket behind";
  }
}

bool AwaitLog(const Daemon& daemon, const std::string& text) {
  for (int i = 0; i < 500; ++i) {
    if (ReadIfExists(daemon.stderr_path).find(text) != std::string::npos) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "the daemon never logged \"" << text << "\"\n"
                << daemon.Logs();
  return false;
}

std::vector<std::string> OperatorTlsDaemonFlags(const Certificates& certs) {
  return {"--tls-cert",        certs.Pem("server"), "--tls-key",
          certs.Key("server"), "--tls-client-ca",   certs.Pem("ca"),
          "--operators",       "cn:operator"};
}

std::string OperatorTlsClientArgs(const Certificates& certs) {
  return absl::StrCat("--tls-ca ", ShellQuote(certs.Pem("ca")), " --tls-cert ",
                      ShellQuote(certs.Pem("operator")), " --tls-key ",
                      ShellQuote(certs.Key("operator")));
}

HeldArtifactLock::HeldArtifactLock(const std::string& store,
                                   const std::string& name) {
  absl::StatusOr<std::unique_ptr<FileLock>> lock =
      Env::Default()->LockFile(ArtifactLockPath(store, name),
                               /*exclusive=*/true, /*wait=*/false);
  EXPECT_TRUE(lock.ok()) << lock.status();
  if (lock.ok()) lock_ = *std::move(lock);
}

HeldArtifactLock::~HeldArtifactLock() = default;

void HeldArtifactLock::Release() { lock_.reset(); }

uint64_t CountOnDisk(const std::string& dir) {
  absl::StatusOr<Artifact> artifact =
      Artifact::Open(Env::Default(), dir, {.verify_payload = true});
  EXPECT_TRUE(artifact.ok()) << dir << ": " << artifact.status();
  return artifact.ok() ? artifact->current_num_blocks() : 0;
}

uint64_t JsonU64(const rapidjson::Value& object, const char* field) {
  if (!object.IsObject() || !object.HasMember(field)) {
    ADD_FAILURE() << "JSON has no field " << field;
    return 0;
  }
  const rapidjson::Value& value = object[field];
  uint64_t parsed = 0;
  if (value.IsUint64()) return value.GetUint64();
  if (value.IsString() && absl::SimpleAtoi(value.GetString(), &parsed)) {
    return parsed;
  }
  ADD_FAILURE() << "JSON field " << field << " is not an unsigned integer";
  return 0;
}

rapidjson::Document ParseJson(const Outcome& outcome) {
  rapidjson::Document doc;
  doc.Parse(outcome.out.c_str());
  EXPECT_FALSE(doc.HasParseError()) << "not JSON: " << outcome;
  EXPECT_TRUE(doc.IsObject()) << outcome;
  return doc;
}

std::vector<rapidjson::Document> ParseJsonLines(const Outcome& outcome) {
  std::vector<rapidjson::Document> docs;
  for (absl::string_view line :
       absl::StrSplit(outcome.out, '\n', absl::SkipEmpty())) {
    rapidjson::Document& doc = docs.emplace_back();
    doc.Parse(line.data(), line.size());
    EXPECT_FALSE(doc.HasParseError()) << "not JSON: " << line;
    EXPECT_TRUE(doc.IsObject()) << line;
  }
  return docs;
}

void DaemonTest::SetUp() { std::filesystem::create_directories(store_); }

void DaemonTest::TearDown() { Stop(); }

std::string DaemonTest::StorePath(absl::string_view name) const {
  return absl::StrCat(store_, "/", name);
}

void DaemonTest::UseOperatorTls(const Certificates& certs) { tls_ = &certs; }

void DaemonTest::Start(const std::vector<std::string>& flags) {
  std::vector<std::string> all = flags;
  if (tls_ != nullptr) {
    const std::vector<std::string> tls = OperatorTlsDaemonFlags(*tls_);
    all.insert(all.end(), tls.begin(), tls.end());
  }
  StartDaemon(root_.path(), store_, address_, all, &daemon_);
}

void DaemonTest::StartWithFlags(const std::string& address,
                                const std::vector<std::string>& flags) {
  StartDaemonWithFlags(root_.path(), address, flags, &daemon_);
}

void DaemonTest::Stop() { StopDaemon(&daemon_); }

void DaemonTest::Restart(const std::vector<std::string>& flags) {
  Stop();
  Start(flags);
}

Outcome DaemonTest::Cli(const std::string& args) {
  return CliAt(address_, args, store_);
}

Outcome DaemonTest::CliAt(const std::string& server, const std::string& args,
                          const std::string& cwd) {
  const bool tcp =
      !absl::StartsWith(server, "unix:") && !absl::StartsWith(server, "/");
  return RunClient(server,
                   tls_ != nullptr && tcp
                       ? absl::StrCat(OperatorTlsClientArgs(*tls_), " ", args)
                       : args,
                   cwd, root_.Join("cli.err"));
}

Certificates* TlsDaemonTest::certs_ = nullptr;

void TlsDaemonTest::SetUpTestSuite() { certs_ = new Certificates(); }

void TlsDaemonTest::TearDownTestSuite() {
  delete certs_;
  certs_ = nullptr;
}

Outcome DaemonTest::Run(const std::string& program, const std::string& args) {
  return RunProgram(program, args, root_.path(),
                    root_.Join(absl::StrCat("run", runs_++, ".err")));
}

}  // namespace rbln::e2e
