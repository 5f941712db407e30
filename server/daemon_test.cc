// The daemon in-process: started from a DaemonConfig, serving on a Unix
// socket, reloaded and stopped; and the exit codes of a start that fails.
#include "server/daemon.h"

#include <sys/stat.h>

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "core/os/env.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rbln/artifact/v1/artifact_service.grpc.pb.h"
#include "server/testing/captured_log.h"
#include "tools/synth.h"

namespace rbln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class DaemonTest : public ::testing::Test {
 protected:
  // A daemon of the store `store` (under tmp_) on the socket `socket`.
  DaemonConfig Config(const std::string& store, const std::string& socket) {
    DaemonConfig config;
    config.store_dir = tmp_.Join(store);
    config.listen = {"unix:" + tmp_.Join(socket)};
    config.addresses = {
        {.kind = ServerAddress::Kind::kUnix, .path = tmp_.Join(socket)}};
    config.rbln_smi = "none";  // the spec table: no probe
    return config;
  }

  rbln::testing::TempDir tmp_;
  rbln::testing::CapturedLog log_;
};

TEST_F(DaemonTest, ServesReloadsAndStops) {
  ASSERT_TRUE(WriteSyntheticArtifact(Env::Default(), SynthSpec(),
                                     tmp_.Join("store/tiny"))
                  .ok());
  DaemonError error;
  std::unique_ptr<Daemon> daemon =
      Daemon::Start(Config("store", "d.sock"), &error);
  ASSERT_NE(daemon, nullptr) << error.exit_code << " " << error.message;
  EXPECT_THAT(log_.str(), HasSubstr("rbln-artifactd serving store"));

  const std::string target = "unix:" + tmp_.Join("d.sock");
  auto stub = v1::ArtifactService::NewStub(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    v1::GetKvcacheNumBlocksRequest req;
    req.set_artifact("tiny");
    v1::GetKvcacheNumBlocksResponse resp;
    const grpc::Status status = stub->GetKvcacheNumBlocks(&context, req, &resp);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(resp.artifact(), "tiny");
  }
  {
    grpc::ClientContext context;
    v1::GetServerInfoResponse resp;
    ASSERT_TRUE(stub->GetServerInfo(&context, {}, &resp).ok());
    EXPECT_THAT(resp.listeners(), ElementsAre(target));
    EXPECT_EQ(resp.codec(), "built-in");
  }

  daemon->Reload();
  EXPECT_THAT(log_.str(), HasSubstr("SIGHUP: dropped "));
  EXPECT_EQ(daemon->tls_reload_seconds(), 0);  // no TLS

  EXPECT_TRUE(daemon->Stop(absl::Seconds(1), "test"));
  EXPECT_THAT(log_.str(), HasSubstr("test: no new requests"));
  struct stat st;
  EXPECT_NE(lstat(tmp_.Join("d.sock").c_str(), &st), 0);
}

TEST_F(DaemonTest, AStoreAnotherDaemonHoldsIsInUse) {
  DaemonError error;
  std::unique_ptr<Daemon> first =
      Daemon::Start(Config("store", "1.sock"), &error);
  ASSERT_NE(first, nullptr) << error.message;
  EXPECT_EQ(Daemon::Start(Config("store", "2.sock"), &error), nullptr);
  EXPECT_EQ(error.exit_code, kExitUnavailable);
  struct stat st;
  EXPECT_NE(lstat(tmp_.Join("2.sock").c_str(), &st), 0);
}

TEST_F(DaemonTest, ASocketAnotherDaemonListensOnIsInUse) {
  DaemonError error;
  std::unique_ptr<Daemon> first = Daemon::Start(Config("a", "d.sock"), &error);
  ASSERT_NE(first, nullptr) << error.message;
  EXPECT_EQ(Daemon::Start(Config("b", "d.sock"), &error), nullptr);
  EXPECT_EQ(error.exit_code, kExitUnavailable);
  EXPECT_THAT(error.message, HasSubstr("another server already listens on"));
}

TEST_F(DaemonTest, ASocketInAMissingDirectoryIsAConfigError) {
  DaemonError error;
  EXPECT_EQ(Daemon::Start(Config("store", "no/d.sock"), &error), nullptr);
  EXPECT_EQ(error.exit_code, kExitConfig);
  EXPECT_THAT(error.message, HasSubstr("does not exist"));
}

}  // namespace
}  // namespace rbln
