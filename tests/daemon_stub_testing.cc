#include "tests/daemon_stub_testing.h"

#include <chrono>

namespace rbln::e2e {

void StubDaemonTest::TearDown() {
  stub_.reset();
  DaemonTest::TearDown();
}

void StubDaemonTest::Start(const std::vector<std::string>& extra) {
  std::vector<std::string> flags = {"--rbln-smi", "none"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  ASSERT_NO_FATAL_FAILURE(DaemonTest::Start(flags));
  ConnectStub();
}

void StubDaemonTest::ConnectStub() {
  stub_ = ::rbln::artifact::v1::ArtifactService::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
}

std::unique_ptr<grpc::ClientContext> StubDaemonTest::Context(int seconds) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(seconds));
  return context;
}

}  // namespace rbln::e2e
