// The end-to-end tests' view of the real programs: rbln-artifactd,
// rbln-artifact and rbln-artifact-synth run as separate processes, every
// wait bounded so that a hang fails a test instead of stalling the suite;
// readers of what they print and write; and DaemonTest, the fixture of a
// test with one daemon over a store of its own.
//
// Failures are reported to the running test (gtest's ADD_FAILURE and
// ASSERT: call a void function that can fail under ASSERT_NO_FATAL_FAILURE).
// Not thread-safe: a test's main thread calls it.
#ifndef RBLN_TESTS_DAEMON_TESTING_H_
#define RBLN_TESTS_DAEMON_TESTING_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/testing/test_util.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/test_certificates.h"

namespace rbln {
class FileLock;
}  // namespace rbln

namespace rbln::e2e {

// Generous bounds that only turn hangs into failures.
inline constexpr auto kStartTimeout = std::chrono::seconds(30);
inline constexpr auto kExitTimeout = std::chrono::seconds(60);
// The prefix that bounds a shell command.
inline constexpr char kCommandTimeout[] = "timeout -k 5 60";

// --- Processes ---

// `text` as one word of a POSIX shell command.
std::string ShellQuote(absl::string_view text);

// The file's bytes, or "" when it does not exist.
std::string ReadIfExists(const std::string& path);

// Starts `argv` (argv[0] a path) in `cwd`, stdin /dev/null, stdout and
// stderr to the given files. Returns the pid, or -1 (with a test failure)
// when it cannot be spawned.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& cwd,
            const std::string& stdout_path, const std::string& stderr_path);

// Waits for `pid` to exit, at most `timeout`; then kills it (and fails the
// test). Returns the wait status, or nullopt when it had to be killed.
std::optional<int> WaitBounded(pid_t pid, std::chrono::seconds timeout);

// "exit N", "signal N" or "wait status N".
std::string DescribeWaitStatus(int status);

// One run of a command: exit code, stdout and stderr apart.
struct Outcome {
  int code = -1;
  std::string out;
  std::string err;
};

std::ostream& operator<<(std::ostream& os, const Outcome& o);

// Runs `command` through the shell with stderr captured apart, in
// `stderr_path` (core/testing's RunCommand merges what reaches the outer
// shell's stderr into stdout).
Outcome RunShell(const std::string& command, const std::string& stderr_path);

// The built `program` ARGS (unquoted: split by the shell), run in `cwd`,
// bounded by kCommandTimeout, as RunShell.
Outcome RunProgram(const std::string& program, const std::string& args,
                   const std::string& cwd, const std::string& stderr_path);

// rbln-artifact --server `server` ARGS, as RunProgram.
Outcome RunClient(const std::string& server, const std::string& args,
                  const std::string& cwd, const std::string& stderr_path);

// rbln-artifact-synth --preset `preset` --payload-bytes 64KiB --out `out_dir`
// `extra_flags`; a fatal failure unless it exits 0.
void Synthesize(const std::string& preset, const std::string& out_dir,
                const std::vector<std::string>& extra_flags = {});

// --- Addresses ---

// True when something accepts a connection at `address` (unix:PATH or
// IPV4:PORT).
bool Accepts(const std::string& address);

// A socket bound to a free loopback TCP port (port 0), listening when
// `listen_too` (anything on a port, for "port in use" cases); *port gets the
// port. -1, with a test failure, when that cannot be done.
int BindFreeLoopbackPort(bool listen_too, int* port);

// A TCP port that was free a moment ago (bound to port 0, then released).
int PickFreePort();

// --- The daemon ---

// A running rbln-artifactd with its logs in files; pid -1 when none runs.
struct Daemon {
  pid_t pid = -1;
  std::string address;
  std::string stdout_path;
  std::string stderr_path;

  // Both log files, labelled: for failure messages.
  std::string Logs() const;
};

// Starts rbln-artifactd `flags` in `work_dir` (its logs there too) and waits
// until `address` accepts connections. A daemon that exits or does not come
// up within kStartTimeout is a fatal failure with its logs.
void StartDaemonWithFlags(const std::string& work_dir,
                          const std::string& address,
                          const std::vector<std::string>& flags,
                          Daemon* daemon);

// rbln-artifactd --store `store` --listen `address` --log-level warn
// `extra_flags`, as StartDaemonWithFlags.
void StartDaemon(const std::string& work_dir, const std::string& store,
                 const std::string& address,
                 const std::vector<std::string>& extra_flags, Daemon* daemon);

// SIGTERM, then the daemon must exit with status 0 (graceful shutdown)
// within kExitTimeout and, for a Unix socket, remove it. Nothing when none
// runs; afterwards none does.
void StopDaemon(Daemon* daemon);

// Whether `daemon`'s stderr comes to hold `text` (a bounded wait: 5 s); a
// test failure with its logs when it does not.
bool AwaitLog(const Daemon& daemon, const std::string& text);

// rbln-artifactd flags: TLS with client certificates of `certs`' CA, and
// cn:operator an operator.
std::vector<std::string> OperatorTlsDaemonFlags(const Certificates& certs);

// rbln-artifact flags (shell-quoted) of the operator client of `certs`.
std::string OperatorTlsClientArgs(const Certificates& certs);

// --- What the programs write ---

// An artifact's cross-process lock, held as a maintenance tool holds it:
// writers of the artifact wait until it is released. A test failure when it
// cannot be taken at once.
class HeldArtifactLock {
 public:
  HeldArtifactLock(const std::string& store, const std::string& name);
  ~HeldArtifactLock();
  HeldArtifactLock(const HeldArtifactLock&) = delete;
  HeldArtifactLock& operator=(const HeldArtifactLock&) = delete;

  bool held() const { return lock_ != nullptr; }
  void Release();

 private:
  std::unique_ptr<FileLock> lock_;
};

// The current count of the artifact in `dir`, opened with its payload
// verified; 0, with a test failure, when it does not open.
uint64_t CountOnDisk(const std::string& dir);

// A uint64 field of a JSON object. rbln-artifact --json prints numbers
// (tests/cli_exit_test.cc checks that); proto3 JSON's strings are accepted
// too, for other printers. 0, with a test failure, when it is missing.
uint64_t JsonU64(const rapidjson::Value& object, const char* field);

// Parses stdout as one JSON object (fails the test otherwise).
rapidjson::Document ParseJson(const Outcome& outcome);

// Parses stdout as JSON Lines, one object a line (fails the test
// otherwise): rbln-artifact --list --json.
std::vector<rapidjson::Document> ParseJsonLines(const Outcome& outcome);

// --- The fixture ---

// A test of one rbln-artifactd over a store of its own: a fresh root
// directory; the store `<root>/store`, which SetUp makes; the daemon's
// address, `unix:<root>/d.sock` unless the test sets another before Start;
// and the daemon, which TearDown stops as StopDaemon does (so its exit
// status is checked). A fixture that overrides SetUp or TearDown calls these
// too.
class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // <store>/<name>.
  std::string StorePath(absl::string_view name) const;

  // From the next Start on, the daemon serves TLS with `certs`
  // (OperatorTlsDaemonFlags), and the client presents the operator's
  // certificate to a TCP server (OperatorTlsClientArgs). `certs` outlives
  // the test.
  void UseOperatorTls(const Certificates& certs);

  // rbln-artifactd --store <store> --listen <address_> --log-level warn
  // `flags` (and the TLS flags of UseOperatorTls), as StartDaemon.
  void Start(const std::vector<std::string>& flags = {});
  // rbln-artifactd with `flags` alone (the test names the store and the
  // listeners), up once `address` accepts, as StartDaemonWithFlags.
  void StartWithFlags(const std::string& address,
                      const std::vector<std::string>& flags);
  // Stops the daemon, as StopDaemon.
  void Stop();
  // Stop, then Start(flags): one daemon per store.
  void Restart(const std::vector<std::string>& flags = {});

  // rbln-artifact --server <address_> ARGS (split by the shell), run in the
  // store.
  Outcome Cli(const std::string& args);
  // rbln-artifact --server `server` ARGS, run in `cwd`; with UseOperatorTls
  // and a TCP `server`, the operator's flags come before ARGS.
  Outcome CliAt(const std::string& server, const std::string& args,
                const std::string& cwd);
  // The built `program` ARGS, run in the root to its exit (bounded), each
  // run's stderr in a file of its own: for runs meant to be refused.
  Outcome Run(const std::string& program, const std::string& args);

  ::rbln::testing::TempDir root_;
  const std::string store_ = root_.Join("store");
  std::string address_ = "unix:" + root_.Join("d.sock");
  Daemon daemon_;

 private:
  const Certificates* tls_ = nullptr;
  int runs_ = 0;
};

// DaemonTest with certificates made once for the test suite (making them
// runs openssl a dozen times), in certs_ from SetUpTestSuite to
// TearDownTestSuite.
class TlsDaemonTest : public DaemonTest {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();

  static Certificates* certs_;
};

}  // namespace rbln::e2e

#endif  // RBLN_TESTS_DAEMON_TESTING_H_
