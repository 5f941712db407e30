// DaemonTest with the daemon's generated gRPC stub, for tests that send what
// the client would not send (tests/hostile_test.cc) or read what it does not
// show (tests/remote_callers_test.cc). Apart from tests/daemon_testing.h, so
// that the tests that do not call the daemon through its stub link no gRPC.
#ifndef RBLN_TESTS_DAEMON_STUB_TESTING_H_
#define RBLN_TESTS_DAEMON_STUB_TESTING_H_

#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "rbln/artifact/v1/artifact_service.grpc.pb.h"
#include "tests/daemon_testing.h"

namespace rbln::e2e {

// stub_ talks to the daemon at address_ in plaintext from Start (or
// ConnectStub) on; TearDown drops it before the daemon stops.
class StubDaemonTest : public DaemonTest {
 protected:
  void TearDown() override;

  // The daemon with the spec table (--rbln-smi none) and `extra`, as
  // DaemonTest::Start, then ConnectStub.
  void Start(const std::vector<std::string>& extra = {});
  // A new stub_ on address_.
  void ConnectStub();
  // A call's context, its deadline `seconds` away: only turns a hang into a
  // failure.
  std::unique_ptr<grpc::ClientContext> Context(int seconds = 20);

  std::unique_ptr<::rbln::artifact::v1::ArtifactService::Stub> stub_;
};

}  // namespace rbln::e2e

#endif  // RBLN_TESTS_DAEMON_STUB_TESTING_H_
