// --health-listen (deploy/kubernetes/: kubelet's gRPC probes present no
// client certificate): the real rbln-artifactd whose TCP listener requires
// client certificates also serves grpc.health.v1.Health, and nothing else,
// in plaintext on a second port; its status follows the main listeners',
// NOT_SERVING from the moment a shutdown starts.
#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/artifact/v1/artifact_service.grpc.pb.h"
#include "tests/daemon_testing.h"
#include "tests/test_certificates.h"

namespace rbln::e2e {
namespace {

namespace v1 = ::rbln::artifact::v1;
using ::testing::HasSubstr;

constexpr char kHealthCheck[] = "/grpc.health.v1.Health/Check";
constexpr char kHealthWatch[] = "/grpc.health.v1.Health/Watch";
constexpr char kReflection[] =
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
constexpr char kServiceName[] = "rbln.artifact.v1.ArtifactService";
// HealthCheckResponse{status: SERVING} and {status: NOT_SERVING}, encoded.
constexpr char kServing[] = "\x08\x01";
constexpr char kNotServing[] = "\x08\x02";
// ServerReflectionRequest{list_services: ""}, encoded.
constexpr absl::string_view kListServices("\x3a\x00", 2);
// Only turns a hang into a failure.
constexpr auto kCallTimeout = std::chrono::seconds(30);

// HealthCheckRequest{service: NAME}, encoded: the health and reflection
// messages have no generated C++ classes here (Debian ships no health.proto),
// so these calls go through gRPC's generic stub with their wire bytes, as
// tests/python_client_test.py does.
std::string HealthRequest(const std::string& service) {
  if (service.empty()) return "";
  return absl::StrCat("\x0a", std::string(1, static_cast<char>(service.size())),
                      service);
}

// One call of `method` on `channel` with the serialized `request`, through
// gRPC's generic stub: it sends the request, half-closes, and then reads
// replies one at a time. Every wait is bounded by kCallTimeout.
class RawCall {
 public:
  RawCall(const std::shared_ptr<grpc::Channel>& channel,
          const std::string& method, const std::string& request)
      : stub_(channel) {
    context_.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
    call_ = stub_.PrepareCall(&context_, method, &queue_);
    call_->StartCall(Tag());
    open_ = Await();
    if (!open_) return;
    grpc::Slice slice(request);
    call_->Write(grpc::ByteBuffer(&slice, 1), Tag());
    open_ = Await();
    if (!open_) return;
    call_->WritesDone(Tag());
    open_ = Await();
  }

  ~RawCall() {
    context_.TryCancel();
    Finish();
    queue_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (queue_.Next(&tag, &ok)) {
    }
  }

  // The next reply, or nullopt once the call has ended (then Finish says
  // why).
  std::optional<std::string> Read() {
    if (!open_) return std::nullopt;
    grpc::ByteBuffer buffer;
    call_->Read(&buffer, Tag());
    if (!Await()) {
      open_ = false;
      return std::nullopt;
    }
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(buffer.Dump(&slices).ok());
    std::string bytes;
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    return bytes;
  }

  grpc::Status Finish() {
    if (!finished_) {
      call_->Finish(&status_, Tag());
      Await();
      finished_ = true;
    }
    return status_;
  }

 private:
  void* Tag() { return reinterpret_cast<void*>(++tag_); }

  // Waits for the operation just started; its ok flag.
  bool Await() {
    void* tag = nullptr;
    bool ok = false;
    const grpc::CompletionQueue::NextStatus next = queue_.AsyncNext(
        &tag, &ok, std::chrono::system_clock::now() + kCallTimeout);
    EXPECT_EQ(next, grpc::CompletionQueue::GOT_EVENT) << "a call hung";
    EXPECT_EQ(tag, reinterpret_cast<void*>(tag_));
    return next == grpc::CompletionQueue::GOT_EVENT && ok;
  }

  grpc::GenericStub stub_;
  grpc::ClientContext context_;
  grpc::CompletionQueue queue_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  grpc::Status status_;
  bool open_ = false;
  bool finished_ = false;
  intptr_t tag_ = 0;
};

// A unary call through RawCall: the status, and the reply when OK.
std::pair<grpc::Status, std::string> CallOnce(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
    const std::string& request) {
  RawCall call(channel, method, request);
  std::optional<std::string> reply = call.Read();
  return {call.Finish(), reply.value_or("")};
}

class HealthListenTest : public TlsDaemonTest {
 protected:
  void SetUp() override {
    TlsDaemonTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", StorePath("tiny")));
  }

  // The daemon with TLS and client certificates required on `listen_`,
  // and --health-listen on `health_`; up once the health port accepts (it
  // starts after the main listeners).
  void Start() {
    std::vector<std::string> flags = {
        "--store",         store_,  "--listen",    listen_,
        "--health-listen", health_, "--rbln-smi",  "none",
        "--device-dram",   "16GiB", "--log-level", "info"};
    for (const std::string& flag : OperatorTlsDaemonFlags(*certs_)) {
      flags.push_back(flag);
    }
    ASSERT_NO_FATAL_FAILURE(StartWithFlags(health_, flags));
  }

  std::shared_ptr<grpc::Channel> Plaintext(const std::string& address) {
    return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  }

  // TLS trusting the test CA, with the operator's client certificate or
  // (empty `client`) none.
  std::shared_ptr<grpc::Channel> Tls(const std::string& client) {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = ReadIfExists(certs_->Pem("ca"));
    if (!client.empty()) {
      options.pem_cert_chain = ReadIfExists(certs_->Pem(client));
      options.pem_private_key = ReadIfExists(certs_->Key(client));
    }
    return grpc::CreateChannel(listen_, grpc::SslCredentials(options));
  }

  const std::string listen_ = absl::StrCat("127.0.0.1:", PickFreePort());
  const std::string health_ = absl::StrCat("127.0.0.1:", PickFreePort());
};

TEST_F(HealthListenTest, AnswersHealthWithoutCredentials) {
  ASSERT_NO_FATAL_FAILURE(Start());
  // The main listener refuses a caller without a client certificate...
  auto [refused, nothing] = CallOnce(Tls(""), kHealthCheck, HealthRequest(""));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE)
      << refused.error_message();
  // ...and answers one with a certificate.
  auto [main_status, main_reply] =
      CallOnce(Tls("operator"), kHealthCheck, HealthRequest(kServiceName));
  EXPECT_TRUE(main_status.ok()) << main_status.error_message();
  EXPECT_EQ(main_reply, kServing);

  // The health port answers anyone, in plaintext, for the server ("") and
  // by the service's name.
  for (const std::string& service :
       {std::string(), std::string(kServiceName)}) {
    auto [status, reply] =
        CallOnce(Plaintext(health_), kHealthCheck, HealthRequest(service));
    EXPECT_TRUE(status.ok())
        << "'" << service << "': " << status.error_message();
    EXPECT_EQ(reply, kServing) << "'" << service << "'";
  }
  // A service the daemon does not serve is unknown there too.
  auto [unknown, unknown_reply] =
      CallOnce(Plaintext(health_), kHealthCheck, HealthRequest("no.Such"));
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(daemon_.Logs(), HasSubstr("health checking only"));
}

TEST_F(HealthListenTest, ServesNothingButHealth) {
  ASSERT_NO_FATAL_FAILURE(Start());
  // The ArtifactService is not there, not even for a read...
  auto stub = v1::ArtifactService::NewStub(Plaintext(health_));
  for (const bool dry_run : {true, false}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
    v1::SetKvcacheNumBlocksRequest request;
    request.set_artifact("tiny");
    request.set_num_blocks(8);
    request.mutable_options()->set_dry_run(dry_run);
    v1::ResizeResponse response;
    const grpc::Status status =
        stub->SetKvcacheNumBlocks(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED)
        << status.error_message();
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
  v1::GetKvcacheNumBlocksRequest get;
  get.set_artifact("tiny");
  v1::GetKvcacheNumBlocksResponse count;
  EXPECT_EQ(stub->GetKvcacheNumBlocks(&context, get, &count).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(CountOnDisk(store_ + "/tiny"), 16u);

  // ...nor reflection, which the main listener serves.
  auto [on_health, health_reply] =
      CallOnce(Plaintext(health_), kReflection, std::string(kListServices));
  EXPECT_EQ(on_health.error_code(), grpc::StatusCode::UNIMPLEMENTED)
      << on_health.error_message();
  auto [on_main, main_reply] =
      CallOnce(Tls("operator"), kReflection, std::string(kListServices));
  EXPECT_TRUE(on_main.ok()) << on_main.error_message();
  EXPECT_THAT(main_reply, HasSubstr(kServiceName));
}

TEST_F(HealthListenTest, SaysNotServingOnceShutdownStarts) {
  ASSERT_NO_FATAL_FAILURE(Start());
  RawCall watch(Plaintext(health_), kHealthWatch, HealthRequest(kServiceName));
  EXPECT_EQ(watch.Read(), std::optional<std::string>(kServing));
  ASSERT_EQ(kill(daemon_.pid, SIGTERM), 0);
  EXPECT_EQ(watch.Read(), std::optional<std::string>(kNotServing))
      << daemon_.Logs();
  std::optional<int> status = WaitBounded(daemon_.pid, kExitTimeout);
  daemon_.pid = -1;
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << DescribeWaitStatus(*status) << "\n"
      << daemon_.Logs();
}

// A connection that never starts HTTP/2 is closed by the daemon (after 5 s;
// gRPC's default would hold it 120 s, past this test's 60 s), so that such
// connections cannot pile up on a port that answers anyone.
TEST_F(HealthListenTest, ClosesAConnectionThatSendsNothing) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(
      static_cast<uint16_t>(std::stoi(health_.substr(health_.rfind(':') + 1))));
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
  // The server's SETTINGS come first; then, without a preface from us, the
  // end of the stream.
  bool closed = false;
  const auto give_up = std::chrono::steady_clock::now() + kExitTimeout;
  while (!closed && std::chrono::steady_clock::now() < give_up) {
    pollfd readable = {fd, POLLIN, 0};
    if (poll(&readable, 1, 1000) <= 0) continue;
    char buffer[256];
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    closed = n <= 0;
  }
  close(fd);
  EXPECT_TRUE(closed) << "the health port still holds a silent connection";
  auto [status, reply] =
      CallOnce(Plaintext(health_), kHealthCheck, HealthRequest(""));
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(reply, kServing);
}

TEST_F(HealthListenTest, RefusesAUnixSocketAndAPortInUse) {
  Outcome unix_socket = Run(
      "rbln-artifactd",
      absl::StrCat("--store ", ShellQuote(store_), " --listen ",
                   ShellQuote(root_.Join("d.sock")), " --health-listen ",
                   ShellQuote(absl::StrCat("unix:", root_.Join("h.sock")))));
  EXPECT_EQ(unix_socket.code, 64) << unix_socket;
  EXPECT_THAT(unix_socket.err, HasSubstr("--health-listen: needs HOST:PORT"))
      << unix_socket;

  // The main listener's port is taken by then.
  ASSERT_NO_FATAL_FAILURE(Start());
  Outcome in_use =
      Run("rbln-artifactd",
          absl::StrCat("--store ", ShellQuote(root_.Join("store2")),
                       " --listen ", ShellQuote(root_.Join("d2.sock")),
                       " --health-listen ", listen_));
  EXPECT_EQ(in_use.code, 69) << in_use;
  EXPECT_THAT(in_use.err, HasSubstr(absl::StrCat("is in use (--health-listen ",
                                                 listen_, ")")))
      << in_use;
}

}  // namespace
}  // namespace rbln::e2e
