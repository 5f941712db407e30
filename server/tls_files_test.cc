// The checks a rotated TLS set must pass before gRPC sees it, and the
// private copies gRPC's watcher follows (server/tls_files.h). The rotation
// of a running daemon is tested end to end in tests/auth_test.cc.
#include "server/tls_files.h"

#include <sys/stat.h>

#include <string>

#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_certificates.h"

namespace rbln {
namespace {

using ::rbln::e2e::Certificates;
using ::rbln::testing::ReadFileOrDie;
using ::rbln::testing::TempDir;
using ::rbln::testing::WriteFileOrDie;
using ::testing::HasSubstr;

class TlsFilesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { certs_ = new Certificates(); }
  static void TearDownTestSuite() {
    delete certs_;
    certs_ = nullptr;
  }

  static TlsFilePaths Server() {
    return {.cert = certs_->Pem("server"),
            .key = certs_->Key("server"),
            .client_ca = certs_->Pem("ca")};
  }

  static Certificates* certs_;
  TempDir tmp_;
};

Certificates* TlsFilesTest::certs_ = nullptr;

TEST_F(TlsFilesTest, AMatchingSetLoads) {
  absl::StatusOr<TlsMaterial> material = LoadTlsMaterial(Server());
  ASSERT_TRUE(material.ok()) << material.status();
  EXPECT_EQ(material->cert_chain, ReadFileOrDie(certs_->Pem("server")));
  EXPECT_EQ(material->key, ReadFileOrDie(certs_->Key("server")));
  EXPECT_EQ(material->client_ca, ReadFileOrDie(certs_->Pem("ca")));
}

TEST_F(TlsFilesTest, EachBadFileIsNamed) {
  TlsFilePaths paths = Server();
  paths.key = certs_->Key("rotated");
  absl::StatusOr<TlsMaterial> mismatch = LoadTlsMaterial(paths);
  EXPECT_THAT(mismatch.status().message(),
              HasSubstr("does not belong to the certificate"));

  paths = Server();
  paths.cert = tmp_.Join("missing.pem");
  EXPECT_THAT(LoadTlsMaterial(paths).status().message(),
              HasSubstr("cannot read --tls-cert " + paths.cert));

  paths = Server();
  paths.client_ca = tmp_.Join("empty.pem");
  WriteFileOrDie(paths.client_ca, "not a certificate\n");
  EXPECT_THAT(LoadTlsMaterial(paths).status().message(),
              HasSubstr("--tls-client-ca " + paths.client_ca +
                        " holds no PEM certificate"));

  paths = Server();
  paths.key = certs_->Pem("server");  // a certificate where the key belongs
  EXPECT_THAT(LoadTlsMaterial(paths).status().message(),
              HasSubstr("--tls-key " + paths.key + " holds no private key"));
}

TEST_F(TlsFilesTest, ReloadSwitchesTheCopiesOnlyForAGoodNewSet) {
  const std::string dir = tmp_.Join("tls");
  absl::StatusOr<TlsMaterial> first = LoadTlsMaterial(Server());
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<TlsFileMirror>> mirror =
      TlsFileMirror::Create(dir, *first);
  ASSERT_TRUE(mirror.ok()) << mirror.status();
  struct stat st {};
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(stat((dir + "/current/key.pem").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(ReadFileOrDie(dir + "/current/cert.pem"), first->cert_chain);

  // Unchanged files: nothing to do.
  absl::StatusOr<bool> same = (*mirror)->Reload(Server());
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_FALSE(*same);

  // A mismatched pair changes nothing.
  TlsFilePaths rotated = Server();
  rotated.cert = certs_->Pem("rotated");
  EXPECT_FALSE((*mirror)->Reload(rotated).ok());
  EXPECT_EQ(ReadFileOrDie(dir + "/current/cert.pem"), first->cert_chain);

  // Dropping the client CA needs a restart.
  TlsFilePaths no_ca = Server();
  no_ca.client_ca.clear();
  EXPECT_THAT((*mirror)->Reload(no_ca).status().message(),
              HasSubstr("restart"));

  rotated.key = certs_->Key("rotated");
  for (int round = 0; round < 3; ++round) {  // older copies are removed
    absl::StatusOr<bool> changed =
        (*mirror)->Reload(round % 2 == 0 ? rotated : Server());
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_TRUE(*changed);
  }
  EXPECT_EQ(ReadFileOrDie(dir + "/current/cert.pem"),
            ReadFileOrDie(certs_->Pem("rotated")));
  EXPECT_EQ(ReadFileOrDie(dir + "/current/key.pem"),
            ReadFileOrDie(certs_->Key("rotated")));
  int generations = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    generations += entry.path().filename().string().rfind("gen-", 0) == 0;
  }
  EXPECT_EQ(generations, 2);
}

}  // namespace
}  // namespace rbln
