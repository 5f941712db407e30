// rbln-bench-load: a closed-loop load generator for bench/run (docs/
// performance.md, row 5). It keeps --in-flight unary calls of one method
// outstanding on one channel for --seconds, and prints one JSON object: calls,
// errors, calls per second, and the p50 and p99 latency in microseconds.
//
// GetKvcacheNumBlocks and DescribeArtifact go through the generated stub;
// grpc.health.v1.Health/Check, the baseline, through a generic stub with an
// empty HealthCheckRequest (Debian ships no health.proto). Both use gRPC's
// callback API, so the client's own cost is the same for every method.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "rbln/artifact/v1/artifact_service.grpc.pb.h"

namespace rbln::bench {
namespace {

namespace v1 = ::rbln::artifact::v1;
using Clock = std::chrono::steady_clock;

constexpr char kHealthCheck[] = "/grpc.health.v1.Health/Check";

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

  const std::vector<int64_t>& latencies_us() const { return latencies_us_; }
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

int64_t Percentile(const std::vector<int64_t>& sorted, double fraction) {
  if (sorted.empty()) return 0;
  const size_t index = std::min(
      sorted.size() - 1, static_cast<size_t>(fraction * (sorted.size() - 1)));
  return sorted[index];
}

int Run(int argc, char** argv) {
  CLI::App app{
      "Closed-loop gRPC load on rbln-artifactd for bench/run; prints JSON"};
  std::string target;
  std::string method = "get";
  std::string artifact;
  int in_flight = 1;
  double seconds = 5;
  app.add_option("--target", target, "unix:PATH or HOST:PORT")->required();
  app.add_option("--method", method, "get, describe or health")
      ->check(CLI::IsMember({"get", "describe", "health"}));
  app.add_option("--artifact", artifact, "Artifact name (get, describe)");
  app.add_option("--in-flight", in_flight, "Calls outstanding at once")
      ->check(CLI::Range(1, 4096));
  app.add_option("--seconds", seconds, "How long to keep calling")
      ->check(CLI::Range(0.1, 3600.0));
  CLI11_PARSE(app, argc, argv);
  if (method != "health" && artifact.empty()) {
    std::fprintf(stderr, "rbln-bench-load: --method %s needs --artifact NAME\n",
                 method.c_str());
    return 2;
  }

  auto channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 std::chrono::seconds(10))) {
    std::fprintf(stderr,
                 "rbln-bench-load: cannot connect to %s within 10 s; is "
                 "rbln-artifactd listening there?\n",
                 target.c_str());
    return 1;
  }
  auto stub = v1::ArtifactService::NewStub(channel);
  grpc::GenericStub generic(channel);
  v1::GetKvcacheNumBlocksRequest get_request;
  get_request.set_artifact(artifact);
  v1::DescribeArtifactRequest describe_request;
  describe_request.set_artifact(artifact);
  // HealthCheckRequest{}: no bytes, but a message (one empty slice).
  grpc::Slice no_bytes{std::string()};
  const grpc::ByteBuffer health_request(&no_bytes, 1);

  Slot::Issue issue;
  if (method == "get") {
    issue = [&](grpc::ClientContext* context, auto done) {
      auto reply = std::make_shared<v1::GetKvcacheNumBlocksResponse>();
      stub->async()->GetKvcacheNumBlocks(
          context, &get_request, reply.get(),
          [reply, done](grpc::Status status) { done(status); });
    };
  } else if (method == "describe") {
    issue = [&](grpc::ClientContext* context, auto done) {
      auto reply = std::make_shared<v1::DescribeArtifactResponse>();
      stub->async()->DescribeArtifact(
          context, &describe_request, reply.get(),
          [reply, done](grpc::Status status) { done(status); });
    };
  } else {
    issue = [&](grpc::ClientContext* context, auto done) {
      auto reply = std::make_shared<grpc::ByteBuffer>();
      generic.UnaryCall(context, kHealthCheck, grpc::StubOptions(),
                        &health_request, reply.get(),
                        [reply, done](grpc::Status status) { done(status); });
    };
  }

  std::mutex mutex;
  std::condition_variable finished;
  int running = in_flight;
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
  const double elapsed =
      std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<int64_t> latencies;
  uint64_t errors = 0;
  std::string last_error;
  for (const auto& slot : slots) {
    latencies.insert(latencies.end(), slot->latencies_us().begin(),
                     slot->latencies_us().end());
    errors += slot->errors();
    if (!slot->last_error().empty()) last_error = slot->last_error();
  }
  std::sort(latencies.begin(), latencies.end());
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> json(out);
  json.StartObject();
  json.Key("method");
  json.String(method.c_str());
  json.Key("in_flight");
  json.Int(in_flight);
  json.Key("calls");
  json.Uint64(latencies.size());
  json.Key("errors");
  json.Uint64(errors);
  json.Key("seconds");
  json.Double(elapsed);
  json.Key("per_second");
  json.Double(latencies.size() / elapsed);
  json.Key("p50_us");
  json.Int64(Percentile(latencies, 0.50));
  json.Key("p99_us");
  json.Int64(Percentile(latencies, 0.99));
  json.Key("last_error");
  json.String(last_error.substr(0, 200).c_str());
  json.EndObject();
  std::printf("%s\n", out.GetString());
  return 0;
}

}  // namespace
}  // namespace rbln::bench

int main(int argc, char** argv) { return rbln::bench::Run(argc, argv); }
