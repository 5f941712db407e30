// The metrics endpoint end to end (docs/metrics.md): the real rbln-artifactd
// with --metrics-listen, scraped with curl as Prometheus would, around calls
// that the real rbln-artifact makes; and the start-up refusals of the flag.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/daemon_testing.h"

namespace rbln::e2e {
namespace {

using ::rbln::testing::ReadFileOrDie;
using ::rbln::testing::WriteFileOrDie;
using ::testing::HasSubstr;

constexpr int kExUsage = 64;
constexpr int kExUnavailable = 69;

constexpr char kService[] = "rbln.artifact.v1.ArtifactService";

// One scrape: every sample line as series -> value.
using Samples = std::map<std::string, double>;

// "rbln_artifactd_requests_total{service=...,method=M,code=C}".
std::string RequestSeries(const std::string& method, const std::string& code) {
  return absl::StrCat("rbln_artifactd_requests_total{service=\"", kService,
                      "\",method=\"", method, "\",code=\"", code, "\"}");
}

// A TCP connection from `source` (an address of 127.0.0.0/8) to
// 127.0.0.1:`port`, connecting without waiting; -1 when none can be made.
int ConnectFrom(const std::string& source, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source.c_str(), &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0 &&
       errno != EINPROGRESS)) {
    close(fd);
    return -1;
  }
  return fd;
}

// Connections that begin a request and never finish it (what holds a
// server's connection slots longest), closed when it goes.
class IdleConnections {
 public:
  ~IdleConnections() { Close(); }

  // `count` connections from `sources` in turn to 127.0.0.1:`port`, each
  // sending the first line of a request; false when a descriptor is
  // missing.
  bool Open(const std::vector<std::string>& sources, int count, int port) {
    for (int i = 0; i < count; ++i) {
      const int fd = ConnectFrom(sources[i % sources.size()], port);
      if (fd < 0) return false;
      fds_.push_back(fd);
    }
    constexpr absl::string_view kFirstLine = "GET /metrics HTTP/1.1\r\n";
    for (int fd : fds_) {
      // Fails on one the daemon closed, or not yet connected: either way
      // it stays idle.
      (void)!send(fd, kFirstLine.data(), kFirstLine.size(),
                  MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    return true;
  }

  void Close() {
    for (int fd : fds_) close(fd);
    fds_.clear();
  }

 private:
  std::vector<int> fds_;
};

// Raises this process's soft limit on open files to the hard one (the
// daemon, started after, inherits it); the hard limit.
rlim_t RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  return limit.rlim_max;
}

class MetricsEndpointTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", StorePath("tiny")));
  }

  void Start(std::vector<std::string> extra = {}) {
    // A broken rbln-smi: a write's fit runs the probe, which fails (and the
    // spec table answers).
    const std::string smi = root_.Join("rbln-smi");
    WriteFileOrDie(smi, "#!/bin/sh\necho 'no device' >&2\nexit 3\n");
    ASSERT_EQ(chmod(smi.c_str(), 0755), 0);
    metrics_ = absl::StrCat("127.0.0.1:", PickFreePort());
    std::vector<std::string> args = {"--metrics-listen", metrics_, "--rbln-smi",
                                     smi};
    args.insert(args.end(), extra.begin(), extra.end());
    DaemonTest::Start(args);
  }

  // rbln-artifactd with --metrics-listen HOST:PORT on a port something
  // else listens on (*port); its outcome.
  Outcome StartOnABusyMetricsPort(const std::string& host, int* port) {
    const int fd = BindFreeLoopbackPort(/*listen_too=*/true, port);
    EXPECT_GE(fd, 0);
    Outcome o = Run("rbln-artifactd",
                    absl::StrCat("--store ", ShellQuote(store_), " --listen ",
                                 ShellQuote(address_), " --metrics-listen ",
                                 host, ":", *port));
    if (fd >= 0) close(fd);
    return o;
  }

  // curl `args` against the metrics address (path and all in `args`).
  Outcome Curl(const std::string& args) {
    return RunShell(
        absl::StrCat(kCommandTimeout, " curl -sS --max-time 10 ", args),
        root_.Join("curl.err"));
  }

  // GET /metrics, parsed; a fatal failure unless curl got a 200.
  void Scrape(Samples* samples) {
    Outcome o = Curl(absl::StrCat("--fail http://", metrics_, "/metrics"));
    ASSERT_EQ(o.code, 0) << o << daemon_.Logs();
    samples->clear();
    for (absl::string_view line : absl::StrSplit(o.out, '\n')) {
      if (line.empty() || absl::StartsWith(line, "#")) continue;
      const size_t space = line.rfind(' ');
      ASSERT_NE(space, absl::string_view::npos) << line;
      double value = 0;
      ASSERT_TRUE(absl::SimpleAtod(line.substr(space + 1), &value)) << line;
      (*samples)[std::string(line.substr(0, space))] = value;
    }
  }

  static double Value(const Samples& samples, const std::string& series) {
    auto it = samples.find(series);
    return it == samples.end() ? 0 : it->second;
  }

  std::string metrics_;
};

TEST_F(MetricsEndpointTest, CountersMoveWithRequestsAndCommits) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Samples before;
  ASSERT_NO_FATAL_FAILURE(Scrape(&before));
  // Exported before anything happened.
  ASSERT_EQ(before.count("rbln_artifactd_commits_total{kind=\"in_place\"}"),
            1u);
  ASSERT_EQ(before.count("rbln_artifactd_copied_bytes_total"), 1u);

  Outcome get = Cli("--get-kvcache-num-blocks --model-id ./tiny --json");
  ASSERT_EQ(get.code, 0) << get;
  const rapidjson::Document reply = ParseJson(get);
  const uint64_t current = JsonU64(reply, "kvcache_num_blocks");
  const uint64_t min_blocks = JsonU64(reply, "num_min_blocks");
  ASSERT_GT(min_blocks, 1u) << get;
  // A real change (a no-op commits nothing), then one below the minimum,
  // which the daemon refuses with INVALID_ARGUMENT.
  const uint64_t target = current != min_blocks ? min_blocks : min_blocks + 1;
  Outcome set = Cli(
      absl::StrCat("--set-kvcache-num-blocks ", target, " --model-id ./tiny"));
  ASSERT_EQ(set.code, 0) << set;
  Outcome below = Cli(absl::StrCat("--set-kvcache-num-blocks ", min_blocks - 1,
                                   " --model-id ./tiny"));
  ASSERT_EQ(below.code, 1) << below;
  ASSERT_THAT(below.err, HasSubstr("INVALID_ARGUMENT"));

  Samples after;
  ASSERT_NO_FATAL_FAILURE(Scrape(&after));
  const auto moved = [&](const std::string& series) {
    return Value(after, series) - Value(before, series);
  };
  EXPECT_EQ(moved(RequestSeries("GetKvcacheNumBlocks", "OK")), 1);
  EXPECT_EQ(moved(RequestSeries("SetKvcacheNumBlocks", "OK")), 1);
  EXPECT_EQ(moved(RequestSeries("SetKvcacheNumBlocks", "INVALID_ARGUMENT")), 1);
  EXPECT_EQ(moved(absl::StrCat(
                "rbln_artifactd_request_duration_seconds_count{service=\"",
                kService, "\",method=\"SetKvcacheNumBlocks\"}")),
            2);
  EXPECT_EQ(moved("rbln_artifactd_commits_total{kind=\"in_place\"}"), 1);
  EXPECT_EQ(moved("rbln_artifactd_commits_total{kind=\"output_dir\"}"), 0);
  // The tiny artifact's containers hold 64 KiB payloads: the write copied
  // (or, on a file system with reflinks, cloned) at least one.
  EXPECT_GE(moved("rbln_artifactd_copied_bytes_total") +
                moved("rbln_artifactd_cloned_bytes_total"),
            64 * 1024);
  EXPECT_GT(moved("rbln_artifactd_container_calls_total{operation=\"decode\","
                  "result=\"ok\"}"),
            0);
  EXPECT_GT(moved("rbln_artifactd_container_calls_total{operation=\"rescale\","
                  "result=\"ok\"}"),
            0);
  // The codec behind them: the built-in one, each call counted and timed.
  const auto codec = [](const std::string& op, const std::string& outcome) {
    return absl::StrCat(
        "rbln_artifactd_codec_calls_total{codec=\"built-in\",op=\"", op,
        "\",outcome=\"", outcome, "\"}");
  };
  EXPECT_GT(moved(codec("inspect", "ok")), 0);
  EXPECT_GT(moved(codec("rescale", "ok")), 0);
  EXPECT_EQ(moved(codec("rescale", "error")), 0);
  EXPECT_EQ(moved("rbln_artifactd_codec_call_seconds_count{codec=\"built-in\","
                  "op=\"rescale\"}"),
            moved(codec("rescale", "ok")));
  // The external codec's series are there, at 0, without one.
  EXPECT_EQ(after.count("rbln_artifactd_codec_calls_total{codec=\"external\","
                        "op=\"inspect\",outcome=\"timeout\"}"),
            1u);
  EXPECT_GT(moved("rbln_artifactd_probe_runs_total{result=\"failed\"}"), 0)
      << daemon_.Logs();
  EXPECT_EQ(moved("rbln_artifactd_probe_runs_total{result=\"ok\"}"), 0);
}

// Once an artifact's files have been still for the artifact cache's racy
// window (2 s), the first Get reads and keeps it (a miss) and the next is
// answered from the cache (a hit).
TEST_F(MetricsEndpointTest, TheSecondGetOfAStillArtifactIsACacheHit) {
  ASSERT_NO_FATAL_FAILURE(Start());
  std::this_thread::sleep_for(std::chrono::milliseconds(2300));
  Samples before;
  ASSERT_NO_FATAL_FAILURE(Scrape(&before));
  for (int i = 0; i < 2; ++i) {
    Outcome get = Cli("--get-kvcache-num-blocks --model-id ./tiny");
    ASSERT_EQ(get.code, 0) << get;
  }
  Samples after;
  ASSERT_NO_FATAL_FAILURE(Scrape(&after));
  const auto moved = [&](const std::string& result) {
    const std::string series = absl::StrCat(
        "rbln_artifactd_artifact_cache_lookups_total{result=\"", result, "\"}");
    return Value(after, series) - Value(before, series);
  };
  EXPECT_EQ(moved("miss"), 1);
  EXPECT_EQ(moved("hit"), 1);
  EXPECT_EQ(before.count("rbln_artifactd_old_versions_pending"), 1u);
}

// A cached Get holds read leases on the files it was read from (the config
// and the prefill graph; core/os/read_lease.h); another process's edit waits
// for the daemon to let its lease go, and the next Get reads the edit.
TEST_F(MetricsEndpointTest, AnEditByAnotherProcessBreaksTheCachesLease) {
  ASSERT_NO_FATAL_FAILURE(Start());
  std::this_thread::sleep_for(std::chrono::milliseconds(2300));
  Outcome get = Cli("--get-kvcache-num-blocks --json --model-id ./tiny");
  ASSERT_EQ(get.code, 0) << get;
  const uint64_t before = JsonU64(ParseJson(get), "kvcache_num_blocks");
  Samples leased;
  ASSERT_NO_FATAL_FAILURE(Scrape(&leased));
  EXPECT_EQ(Value(leased, "rbln_artifactd_read_leases"), 2) << daemon_.Logs();

  const std::string config = store_ + "/tiny/rbln_config.json";
  const std::string text = ReadFileOrDie(config);
  const std::string from = absl::StrCat("\"kvcache_num_blocks\": ", before);
  const uint64_t edited = before % 10 == 0 ? before + 1 : before - 1;
  ASSERT_NE(text.find(from), std::string::npos) << text;
  WriteFileOrDie(
      config,
      absl::StrReplaceAll(
          text, {{from, absl::StrCat("\"kvcache_num_blocks\": ", edited)}}));
  get = Cli("--get-kvcache-num-blocks --json --model-id ./tiny");
  ASSERT_EQ(get.code, 0) << get;
  EXPECT_EQ(JsonU64(ParseJson(get), "kvcache_num_blocks"), edited);
  Samples after;
  ASSERT_NO_FATAL_FAILURE(Scrape(&after));
  const std::string writer =
      "rbln_artifactd_read_lease_breaks_total{why=\"writer\"}";
  EXPECT_GE(Value(after, writer) - Value(leased, writer), 1);
}

TEST_F(MetricsEndpointTest, NoReadLeasesTakesNone) {
  ASSERT_NO_FATAL_FAILURE(Start({"--no-read-leases"}));
  std::this_thread::sleep_for(std::chrono::milliseconds(2300));
  for (int i = 0; i < 2; ++i) {
    Outcome get = Cli("--get-kvcache-num-blocks --model-id ./tiny");
    ASSERT_EQ(get.code, 0) << get;
  }
  Samples after;
  ASSERT_NO_FATAL_FAILURE(Scrape(&after));
  EXPECT_EQ(after.count("rbln_artifactd_read_leases"), 1u);
  EXPECT_EQ(Value(after, "rbln_artifactd_read_leases"), 0);
  EXPECT_EQ(
      Value(after,
            "rbln_artifactd_artifact_cache_lookups_total{result=\"hit\"}"),
      1);
}

// A cached Get checks its directory by the inotify watch
// (core/os/dir_watch.h): after the first hit, which adds the watches, without
// looking at its name; a change in the store makes the next one look.
TEST_F(MetricsEndpointTest, CachedGetsAreCheckedByTheDirectoryWatch) {
  ASSERT_NO_FATAL_FAILURE(Start());
  std::this_thread::sleep_for(std::chrono::milliseconds(2300));
  const std::string looked = "rbln_artifactd_dir_checks_total{how=\"looked\"}";
  const std::string watched =
      "rbln_artifactd_dir_checks_total{how=\"watched\"}";
  // A miss that caches it, and a hit that adds the watches.
  for (int i = 0; i < 2; ++i) {
    Outcome get = Cli("--get-kvcache-num-blocks --model-id ./tiny");
    ASSERT_EQ(get.code, 0) << get;
  }
  // Any mount on the host moves the watch's generation (another test may
  // mount meanwhile): a window with one is measured again.
  const int mounts = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(mounts, 0);
  const auto mounted = [mounts] {
    struct pollfd mark = {mounts, POLLPRI, 0};
    return poll(&mark, 1, 0) != 0;
  };
  Samples before, quiet;
  bool without_mounts = false;
  for (int attempt = 0; attempt < 10 && !without_mounts; ++attempt) {
    mounted();
    // One Get first, which counts a mount made before the window.
    Outcome warm = Cli("--get-kvcache-num-blocks --model-id ./tiny");
    ASSERT_EQ(warm.code, 0) << warm;
    ASSERT_NO_FATAL_FAILURE(Scrape(&before));
    for (int i = 0; i < 2; ++i) {
      Outcome get = Cli("--get-kvcache-num-blocks --model-id ./tiny");
      ASSERT_EQ(get.code, 0) << get;
    }
    ASSERT_NO_FATAL_FAILURE(Scrape(&quiet));
    without_mounts = !mounted();
  }
  close(mounts);
  if (!without_mounts) GTEST_SKIP() << "the host mounted something all along";
  EXPECT_EQ(Value(quiet, looked) - Value(before, looked), 0) << daemon_.Logs();
  EXPECT_GE(Value(quiet, watched) - Value(before, watched), 2);

  ASSERT_EQ(mkdir((store_ + "/not-an-artifact").c_str(), 0755), 0);
  Outcome get = Cli("--get-kvcache-num-blocks --model-id ./tiny");
  ASSERT_EQ(get.code, 0) << get;
  Samples changed;
  ASSERT_NO_FATAL_FAILURE(Scrape(&changed));
  EXPECT_GE(Value(changed, looked) - Value(quiet, looked), 1);
}

TEST_F(MetricsEndpointTest, NoDirWatchLooksEveryTime) {
  ASSERT_NO_FATAL_FAILURE(Start({"--no-dir-watch"}));
  std::this_thread::sleep_for(std::chrono::milliseconds(2300));
  for (int i = 0; i < 4; ++i) {
    Outcome get = Cli("--get-kvcache-num-blocks --model-id ./tiny");
    ASSERT_EQ(get.code, 0) << get;
  }
  Samples after;
  ASSERT_NO_FATAL_FAILURE(Scrape(&after));
  EXPECT_EQ(Value(after, "rbln_artifactd_dir_checks_total{how=\"watched\"}"),
            0);
  EXPECT_GE(Value(after, "rbln_artifactd_dir_checks_total{how=\"looked\"}"), 3);
}

// gRPC hands interceptors any method name a caller sends; such names must
// not become labels (each would be a new series).
TEST_F(MetricsEndpointTest, UnknownMethodsShareOneLabel) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Samples before;
  ASSERT_NO_FATAL_FAILURE(Scrape(&before));
  // Python's grpcio (a Debian package, deploy/install-deps.sh) calls any
  // name.
  Outcome o = RunShell(
      absl::StrCat(kCommandTimeout, " /usr/bin/python3 -c ",
                   ShellQuote(absl::StrCat(
                       "import grpc\n"
                       "channel = grpc.insecure_channel('",
                       address_,
                       "')\n"
                       "for name in ['/no.such.Service/Nope', '/weird']:\n"
                       "    try:\n"
                       "        channel.unary_unary(name)(b'', timeout=30)\n"
                       "    except grpc.RpcError as e:\n"
                       "        print(e.code().name)\n"))),
      root_.Join("python.err"));
  ASSERT_EQ(o.code, 0) << o;
  ASSERT_EQ(o.out, "UNIMPLEMENTED\nUNIMPLEMENTED\n") << o;
  Samples after;
  ASSERT_NO_FATAL_FAILURE(Scrape(&after));
  const std::string unknown =
      "rbln_artifactd_requests_total{service=\"unknown\",method=\"unknown\","
      "code=\"UNIMPLEMENTED\"}";
  EXPECT_EQ(Value(after, unknown) - Value(before, unknown), 2);
  for (const auto& [series, value] : after) {
    EXPECT_THAT(series, ::testing::Not(HasSubstr("no.such.Service")));
    EXPECT_THAT(series, ::testing::Not(HasSubstr("weird")));
  }
}

TEST_F(MetricsEndpointTest, OnlyGetOfMetricsIsServed) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string base = absl::StrCat("http://", metrics_);
  const std::string status = " -o /dev/null -w '%{http_code} %{content_type}'";
  Outcome ok = Curl(absl::StrCat(base, "/metrics", status));
  EXPECT_EQ(ok.out, "200 text/plain; version=0.0.4; charset=utf-8") << ok;
  Outcome elsewhere = Curl(absl::StrCat(base, "/", status));
  EXPECT_THAT(elsewhere.out, ::testing::StartsWith("404 ")) << elsewhere;
  Outcome post =
      Curl(absl::StrCat("-X POST -d x=1 ", base, "/metrics -D - -o /dev/null"));
  EXPECT_THAT(post.out, HasSubstr(" 405 ")) << post;
  EXPECT_THAT(post.out, HasSubstr("Allow: GET, HEAD")) << post;
  // A request line or header block past the connection's 8 KiB is refused.
  const std::string long_text(9000, 'a');
  Outcome long_url = Curl(absl::StrCat(base, "/metrics?", long_text,
                                       " -o /dev/null -w '%{http_code}'"));
  EXPECT_EQ(long_url.out, "414") << long_url;
  Outcome long_header =
      Curl(absl::StrCat("-H 'X-Long: ", long_text, "' ", base,
                        "/metrics -o /dev/null -w '%{http_code}'"));
  EXPECT_EQ(long_header.out, "431") << long_header;
  // Loopback: no warning.
  EXPECT_THAT(ReadIfExists(daemon_.stderr_path),
              ::testing::Not(HasSubstr("serves counts in plain HTTP")));
}

// The port cannot be starved (docs/security.md): 2,000 connections from one
// address that never finish their request do not keep a scrape from
// another address out (each address may hold 8 at once), and once 3,000
// such connections from 400 addresses (past the 512 of all addresses
// together) are closed, a scrape is answered again. Liveness only: the
// scrapes' deadlines are generous.
TEST_F(MetricsEndpointTest, IdleConnectionsDoNotStarveTheScrape) {
  // 2,000 + 3,000 held at once by this process, and some to spare; scaled
  // down together where the hard limit is lower.
  constexpr int kIdle = 2000;
  constexpr int kBurst = 3000;
  constexpr rlim_t kWanted = 5200;
  const rlim_t hard = RaiseOpenFileLimit();
  ASSERT_GT(hard, 1000u) << "the open-file limit is too low for this test";
  const double scale =
      std::min(1.0, static_cast<double>(hard - 200) / (kWanted - 200));
  const int idle = static_cast<int>(kIdle * scale);
  const int burst = static_cast<int>(kBurst * scale);
  if (scale < 1) {
    std::cerr << "open-file hard limit " << hard << " < " << kWanted << ": "
              << idle << " idle connections and a burst of " << burst
              << " instead of " << kIdle << " and " << kBurst << "\n";
  }
  ASSERT_NO_FATAL_FAILURE(Start());
  const int port = std::stoi(metrics_.substr(metrics_.rfind(':') + 1));
  const std::string scrape = absl::StrCat(
      kCommandTimeout, " curl -sS --fail --max-time 30 --interface 127.0.0.2",
      " -o /dev/null -w '%{http_code}' http://", metrics_, "/metrics");

  IdleConnections one_address;
  ASSERT_TRUE(one_address.Open({"127.0.0.1"}, idle, port));
  Outcome during = RunShell(scrape, root_.Join("curl.err"));
  EXPECT_EQ(during.out, "200") << during << daemon_.Logs();

  // 7 or 8 from each of 400 addresses: within each address's limit, so
  // that together they pass the limit of all.
  std::vector<std::string> sources;
  for (int i = 0; i < 400; ++i) {
    sources.push_back(absl::StrCat("127.0.", 1 + i / 200, ".", 1 + i % 200));
  }
  IdleConnections many_addresses;
  ASSERT_TRUE(many_addresses.Open(sources, burst, port));
  many_addresses.Close();
  Outcome after = RunShell(scrape, root_.Join("curl.err"));
  EXPECT_EQ(after.out, "200") << after << daemon_.Logs();
}

TEST_F(MetricsEndpointTest, PortInUseStopsTheStartWith69) {
  int port = 0;
  Outcome o = StartOnABusyMetricsPort("127.0.0.1", &port);
  EXPECT_EQ(o.code, kExUnavailable) << o;
  EXPECT_THAT(o.err,
              HasSubstr(absl::StrCat("rbln-artifactd: --metrics-listen: port ",
                                     port, " is in use")));
  // Nothing was served: the gRPC socket was never created.
  EXPECT_FALSE(std::filesystem::exists(address_.substr(5)));
}

// A metrics port other hosts may reach is warned about in the log before
// anything listens: here the port is taken, so the start fails after the
// warning.
TEST_F(MetricsEndpointTest, NonLoopbackAddressIsWarnedAbout) {
  int port = 0;
  Outcome o = StartOnABusyMetricsPort("0.0.0.0", &port);
  EXPECT_EQ(o.code, kExUnavailable) << o;
  EXPECT_THAT(o.err, HasSubstr(absl::StrCat(
                         "--metrics-listen: 0.0.0.0:", port,
                         " serves counts in plain HTTP to anyone who "
                         "reaches it")));
  EXPECT_FALSE(std::filesystem::exists(address_.substr(5)));
}

TEST_F(MetricsEndpointTest, UnixSocketIsAUsageError) {
  Outcome o = Run("rbln-artifactd",
                  absl::StrCat("--store ", ShellQuote(store_), " --listen ",
                               ShellQuote(address_),
                               " --metrics-listen unix:/tmp/metrics.sock"));
  EXPECT_EQ(o.code, kExUsage) << o;
  EXPECT_THAT(o.err, HasSubstr("--metrics-listen: takes HOST:PORT"));
}

}  // namespace
}  // namespace rbln::e2e
