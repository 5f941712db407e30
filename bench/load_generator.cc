// rbln-bench-load: a closed-loop load generator for bench/run (docs/
// performance.md, row 5). It keeps --in-flight unary calls of one method
// outstanding on one channel for --seconds, and prints one JSON object: for
// each method, its calls, errors, calls per second, and the p50 and p99
// latency in microseconds, in all and slice by slice.
//
// Given several methods (--method get,health) it runs them in turn on the
// same channel, a slice of --seconds each, --rounds times over, and then the
// first method once more, so that every slice of the others lies between
// two of the first: a virtual machine's speed drifts from one second to the
// next, and bench/run takes each slice's ratio against the two around it.
// Each slice waits for its last call before the next begins. With
// --warmup-rounds, as many rounds run first on the same channel and are not
// counted. With --cpu-of
// PID, each slice also reports that process's CPU time per call (its
// threads' time on a CPU, from /proc/PID/task/*/schedstat).
//
// Every method goes through its generated stub: GetKvcacheNumBlocks and
// DescribeArtifact through the daemon's, grpc.health.v1.Health/Check, the
// baseline, through one generated from bench/proto/grpc/health/v1/
// health.proto (Debian ships no health.proto). All use gRPC's callback API,
// so the client's own cost is the same for every method but for the bytes
// of its request and reply.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "rbln/artifact/v1/artifact_service.grpc.pb.h"

namespace rbln::bench {
namespace {

namespace v1 = ::rbln::artifact::v1;
using Clock = std::chrono::steady_clock;

// One outstanding call at a time; Start issues the next call when the one
// before has completed, so a slot's members are never touched concurrently.
class Slot {
 public:
  using Issue = std::function<void(grpc::ClientContext*,
                                   std::function<void(grpc::Status)>)>;

  Slot(Issue issue, Clock::time_point deadline, std::function<void()> done)
      : issue_(std::move(issue)), deadline_(deadline), done_(std::move(done)) {}

  void Start() {
    context_ = std::make_unique<grpc::ClientContext>();
    // A daemon that stops answering fails the run instead of hanging it.
    context_->set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(30));
    started_ = Clock::now();
    issue_(context_.get(), [this](grpc::Status status) {
      const auto now = Clock::now();
      if (status.ok()) {
        latencies_us_.push_back(
            std::chrono::duration_cast<std::chrono::microseconds>(now -
                                                                  started_)
                .count());
      } else {
        ++errors_;
        last_error_ = status.error_message();
      }
      if (now < deadline_) {
        Start();
      } else {
        done_();
      }
    });
  }

  std::vector<int64_t> TakeLatencies() { return std::move(latencies_us_); }
  uint64_t errors() const { return errors_; }
  const std::string& last_error() const { return last_error_; }

 private:
  Issue issue_;
  Clock::time_point deadline_;
  std::function<void()> done_;
  std::unique_ptr<grpc::ClientContext> context_;
  Clock::time_point started_;
  std::vector<int64_t> latencies_us_;
  uint64_t errors_ = 0;
  std::string last_error_;
};

// A slot's call of one method: `call(context, reply, done)` starts it, with
// a new reply that lives until the call's callback has run.
template <typename Reply, typename Call>
Slot::Issue IssueInto(Call call) {
  return [call](grpc::ClientContext* context,
                std::function<void(grpc::Status)> done) {
    auto reply = std::make_shared<Reply>();
    call(context, reply.get(),
         [reply, done = std::move(done)](grpc::Status status) {
           done(std::move(status));
         });
  };
}

int64_t Percentile(const std::vector<int64_t>& sorted, double fraction) {
  if (sorted.empty()) return 0;
  const size_t index = std::min(
      sorted.size() - 1, static_cast<size_t>(fraction * (sorted.size() - 1)));
  return sorted[index];
}

// The CPU time of process `pid`'s threads so far, in nanoseconds, by
// thread: the first field of each /proc/PID/task/TID/schedstat. Where the
// kernel keeps no schedstat, one entry (0) for the whole process: utime +
// stime of /proc/PID/stat, in clock ticks (10 ms).
using CpuTimes = std::map<std::string, uint64_t>;

CpuTimes CpuByThread(int pid) {
  namespace fs = std::filesystem;
  const fs::path proc = fs::path("/proc") / std::to_string(pid);
  CpuTimes times;
  if (!fs::exists(proc / "schedstat")) {
    std::ifstream stat(proc / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)),
                     std::istreambuf_iterator<char>());
    if (text.find(')') == std::string::npos) return times;  // no such process
    // After the command's closing parenthesis: state is field 3, utime and
    // stime are fields 14 and 15 (proc(5)).
    std::istringstream fields(text.substr(text.rfind(')') + 1));
    std::string field;
    uint64_t ticks = 0;
    for (int i = 3; i <= 15 && fields >> field; ++i) {
      if (i >= 14) ticks += std::stoull(field);
    }
    times["0"] = ticks * 1000000000 / sysconf(_SC_CLK_TCK);
    return times;
  }
  std::error_code error;
  for (fs::directory_iterator it(proc / "task", error), end;
       !error && it != end; it.increment(error)) {
    std::ifstream schedstat(it->path() / "schedstat");
    uint64_t ns = 0;
    if (schedstat >> ns) times[it->path().filename()] = ns;
  }
  return times;
}

// The CPU time the threads spent between two readings, in seconds: a
// thread that began meanwhile counts whole, one that ended meanwhile not at
// all (its time is gone with it), so the sum never goes negative.
double CpuSecondsBetween(const CpuTimes& before, const CpuTimes& after) {
  uint64_t ns = 0;
  for (const auto& [thread, now] : after) {
    const auto then = before.find(thread);
    const uint64_t base = then == before.end() ? 0 : then->second;
    if (now > base) ns += now - base;
  }
  return ns / 1e9;
}

// What one slice (or all slices of a method) measured.
struct Tally {
  std::vector<int64_t> latencies_us;
  uint64_t errors = 0;
  double seconds = 0;
  double cpu_seconds = -1;  // without --cpu-of
  std::string last_error;

  // Adds `other`'s calls; Sort() before Write().
  void Add(const Tally& other) {
    latencies_us.insert(latencies_us.end(), other.latencies_us.begin(),
                        other.latencies_us.end());
    errors += other.errors;
    seconds += other.seconds;
    if (other.cpu_seconds >= 0) {
      cpu_seconds = std::max(0.0, cpu_seconds) + other.cpu_seconds;
    }
    if (!other.last_error.empty()) last_error = other.last_error;
  }

  void Sort() { std::sort(latencies_us.begin(), latencies_us.end()); }

  void Write(rapidjson::Writer<rapidjson::StringBuffer>& json) const {
    const size_t calls = latencies_us.size();
    json.Key("calls");
    json.Uint64(calls);
    json.Key("errors");
    json.Uint64(errors);
    json.Key("seconds");
    json.Double(seconds);
    json.Key("per_second");
    json.Double(seconds > 0 ? calls / seconds : 0);
    json.Key("p50_us");
    json.Int64(Percentile(latencies_us, 0.50));
    json.Key("p99_us");
    json.Int64(Percentile(latencies_us, 0.99));
    if (cpu_seconds >= 0) {
      json.Key("daemon_cpu_us_per_call");
      json.Double(cpu_seconds * 1e6 / std::max<size_t>(1, calls));
    }
  }
};

// Keeps `in_flight` calls of `issue` outstanding until `seconds` have
// passed, then waits for the last to complete. The slots go to `done` and
// are destroyed when the next slice begins, not here: a slot's last
// callback may still be returning on a gRPC thread (it touches nothing of
// the slot after done_(), and gRPC keeps its own reference to the call, so
// this is only a margin).
Tally RunSlice(const Slot::Issue& issue, int in_flight, double seconds,
               int cpu_of, std::vector<std::unique_ptr<Slot>>* done) {
  done->clear();
  std::mutex mutex;
  std::condition_variable finished;
  int running = in_flight;
  const CpuTimes cpu_before = cpu_of > 0 ? CpuByThread(cpu_of) : CpuTimes();
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(seconds));
  std::vector<std::unique_ptr<Slot>> slots;
  for (int i = 0; i < in_flight; ++i) {
    slots.push_back(std::make_unique<Slot>(issue, deadline, [&] {
      std::lock_guard<std::mutex> lock(mutex);
      if (--running == 0) finished.notify_all();
    }));
  }
  for (auto& slot : slots) slot->Start();
  {
    std::unique_lock<std::mutex> lock(mutex);
    finished.wait(lock, [&] { return running == 0; });
  }
  Tally tally;
  tally.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (cpu_of > 0) {
    tally.cpu_seconds = CpuSecondsBetween(cpu_before, CpuByThread(cpu_of));
  }
  for (auto& slot : slots) {
    std::vector<int64_t> latencies = slot->TakeLatencies();
    tally.latencies_us.insert(tally.latencies_us.end(), latencies.begin(),
                              latencies.end());
    tally.errors += slot->errors();
    if (!slot->last_error().empty()) tally.last_error = slot->last_error();
    done->push_back(std::move(slot));
  }
  tally.Sort();
  return tally;
}

// The command line.
struct LoadFlags {
  std::string target;
  std::vector<std::string> methods = {"get"};
  std::string artifact;
  int in_flight = 1;
  double seconds = 5;
  int rounds = 1;
  int warmup_rounds = 0;
  int cpu_of = 0;
};

void DefineFlags(CLI::App& app, LoadFlags& f) {
  app.add_option("--target", f.target, "unix:PATH or HOST:PORT")->required();
  app.add_option("--method", f.methods,
                 "get, describe or health; several, comma-separated, run in "
                 "turn")
      ->delimiter(',')
      ->check(CLI::IsMember({"get", "describe", "health"}));
  app.add_option("--artifact", f.artifact, "Artifact name (get, describe)");
  app.add_option("--in-flight", f.in_flight, "Calls outstanding at once")
      ->check(CLI::Range(1, 4096));
  app.add_option("--seconds", f.seconds,
                 "How long to keep calling (each slice, with several methods)")
      ->check(CLI::Range(0.01, 3600.0));
  app.add_option("--rounds", f.rounds,
                 "How many times to run the methods in turn (then the first "
                 "once more, when there are several)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--warmup-rounds", f.warmup_rounds,
                 "Rounds run first on the same channel and not counted (the "
                 "connection's first calls, the daemon's first reads)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--cpu-of", f.cpu_of,
                 "A process (the daemon) whose CPU time per call to report")
      ->check(CLI::PositiveNumber);
}

// The checks CLI11 cannot express; false (with the message printed) when
// one fails.
bool CheckFlags(const LoadFlags& f) {
  for (size_t i = 0; i < f.methods.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (f.methods[i] == f.methods[j]) {
        std::fprintf(stderr,
                     "rbln-bench-load: --method names %s twice; name each "
                     "method once\n",
                     f.methods[i].c_str());
        return false;
      }
    }
  }
  if (f.cpu_of > 0 && CpuByThread(f.cpu_of).empty()) {
    std::fprintf(stderr,
                 "rbln-bench-load: --cpu-of %d: no such process, or its "
                 "/proc entry cannot be read\n",
                 f.cpu_of);
    return false;
  }
  for (const std::string& method : f.methods) {
    if (method != "health" && f.artifact.empty()) {
      std::fprintf(stderr,
                   "rbln-bench-load: --method %s needs --artifact NAME\n",
                   method.c_str());
      return false;
    }
  }
  return true;
}

// The result as one line of JSON on stdout.
void PrintResult(int in_flight, const std::map<std::string, Tally>& totals,
                 const std::vector<std::pair<std::string, Tally>>& slices) {
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> json(out);
  uint64_t errors = 0;
  std::string last_error;
  json.StartObject();
  json.Key("in_flight");
  json.Int(in_flight);
  json.Key("methods");
  json.StartObject();
  for (const auto& [method, total] : totals) {
    json.Key(method.c_str());
    json.StartObject();
    total.Write(json);
    json.EndObject();
    errors += total.errors;
    if (!total.last_error.empty()) last_error = total.last_error;
  }
  json.EndObject();
  json.Key("slices");
  json.StartArray();
  for (const auto& [method, slice] : slices) {
    json.StartObject();
    json.Key("method");
    json.String(method.c_str());
    slice.Write(json);
    json.EndObject();
  }
  json.EndArray();
  json.Key("errors");
  json.Uint64(errors);
  json.Key("last_error");
  json.String(last_error.substr(0, 200).c_str());
  json.EndObject();
  std::printf("%s\n", out.GetString());
}

int Run(int argc, char** argv) {
  CLI::App app{
      "Closed-loop gRPC load on rbln-artifactd for bench/run; prints JSON"};
  LoadFlags f;
  DefineFlags(app, f);
  CLI11_PARSE(app, argc, argv);
  if (!CheckFlags(f)) return 2;

  auto channel =
      grpc::CreateChannel(f.target, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 std::chrono::seconds(10))) {
    std::fprintf(stderr,
                 "rbln-bench-load: cannot connect to %s within 10 s; is "
                 "rbln-artifactd listening there?\n",
                 f.target.c_str());
    return 1;
  }
  auto stub = v1::ArtifactService::NewStub(channel);
  auto health = grpc::health::v1::Health::NewStub(channel);
  v1::GetKvcacheNumBlocksRequest get_request;
  get_request.set_artifact(f.artifact);
  v1::DescribeArtifactRequest describe_request;
  describe_request.set_artifact(f.artifact);
  // The whole server's health: an empty service name.
  const grpc::health::v1::HealthCheckRequest health_request;

  const auto issue_of = [&](const std::string& method) -> Slot::Issue {
    if (method == "get") {
      return IssueInto<v1::GetKvcacheNumBlocksResponse>(
          [&](grpc::ClientContext* context, auto* reply, auto done) {
            stub->async()->GetKvcacheNumBlocks(context, &get_request, reply,
                                               std::move(done));
          });
    }
    if (method == "describe") {
      return IssueInto<v1::DescribeArtifactResponse>(
          [&](grpc::ClientContext* context, auto* reply, auto done) {
            stub->async()->DescribeArtifact(context, &describe_request, reply,
                                            std::move(done));
          });
    }
    return IssueInto<grpc::health::v1::HealthCheckResponse>(
        [&](grpc::ClientContext* context, auto* reply, auto done) {
          health->async()->Check(context, &health_request, reply,
                                 std::move(done));
        });
  };

  // Each method in turn, `rounds` times over, then the first once more.
  const auto order_of = [&](int times) {
    std::vector<std::string> order;
    for (int round = 0; round < times; ++round) {
      order.insert(order.end(), f.methods.begin(), f.methods.end());
    }
    if (f.methods.size() > 1) order.push_back(f.methods.front());
    return order;
  };
  std::vector<std::unique_ptr<Slot>> done;
  if (f.warmup_rounds > 0) {
    for (const std::string& method : order_of(f.warmup_rounds)) {
      RunSlice(issue_of(method), f.in_flight, f.seconds, 0, &done);
    }
  }
  std::vector<std::pair<std::string, Tally>> slices;
  std::map<std::string, Tally> totals;
  for (const std::string& method : order_of(f.rounds)) {
    Tally slice =
        RunSlice(issue_of(method), f.in_flight, f.seconds, f.cpu_of, &done);
    totals[method].Add(slice);
    slices.emplace_back(method, std::move(slice));
  }
  for (auto& [method, total] : totals) total.Sort();
  PrintResult(f.in_flight, totals, slices);
  return 0;
}

}  // namespace
}  // namespace rbln::bench

int main(int argc, char** argv) { return rbln::bench::Run(argc, argv); }
