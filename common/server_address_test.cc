#include "common/server_address.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;
using Kind = ServerAddress::Kind;

TEST(ParseServerAddressTest, AcceptsTheDocumentedForms) {
  absl::StatusOr<ServerAddress> a = ParseServerAddress("unix:/run/d.sock");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->kind, Kind::kUnix);
  EXPECT_EQ(a->path, "/run/d.sock");

  a = ParseServerAddress("unix-abstract:rbln");
  EXPECT_THAT(a.status().message(),
              HasSubstr("abstract Unix socket has no permissions"));

  a = ParseServerAddress("0.0.0.0:50051");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->kind, Kind::kTcp);
  EXPECT_EQ(a->host, "0.0.0.0");
  EXPECT_EQ(a->port, 50051);

  a = ParseServerAddress("npu-host:1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "npu-host");
  EXPECT_EQ(a->port, 1);

  a = ParseServerAddress("[::1]:65535");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "::1");
  EXPECT_EQ(a->port, 65535);
}

TEST(ParseServerAddressTest, BareAbsolutePathIsAUnixSocket) {
  absl::StatusOr<ServerAddress> a = ParseServerAddress("/run/d.sock");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->kind, Kind::kUnix);
  EXPECT_EQ(a->path, "/run/d.sock");
  EXPECT_EQ(GrpcTarget(*a), "unix:/run/d.sock");
}

TEST(GrpcTargetTest, RoundTripsEveryForm) {
  for (const std::string text :
       {"unix:/run/d.sock", "0.0.0.0:50051", "npu-host:1", "[::1]:65535"}) {
    absl::StatusOr<ServerAddress> a = ParseServerAddress(text);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(GrpcTarget(*a), text);
  }
}

TEST(ParseServerAddressTest, RefusesWithWhatWasLikelyMeant) {
  const std::pair<std::string, std::string> cases[] = {
      {"50051", "did you mean 0.0.0.0:50051 or localhost:50051?"},
      {"localhost", "a host needs a port, e.g. localhost:50051"},
      {"d.sock", "did you mean unix:d.sock?"},
      {"./d.sock", "a Unix socket's path is absolute"},
      {"unix:", "a Unix socket needs a path"},
      {"", "it is empty"},
      {":50051", "did you mean 0.0.0.0:50051 or localhost:50051?"},
      {"host:0", "the port is a number from 1 to 65535"},
      {"host:65536", "the port is a number from 1 to 65535"},
      {"host:http", "the port is a number from 1 to 65535"},
      {"::1:50051", "an IPv6 host goes in brackets"},
      {"[::1:50051", "an IPv6 host goes in brackets"},
      {"http://localhost:50051", "no scheme: give HOST:PORT without 'http://'"},
      {"dns:///localhost:50051", "without 'dns:'"},
      {"unix", "did you mean unix:/run/rbln-artifactd/rbln-artifactd.sock?"},
      {":50051x", "no host, and the port is not a number"},
      {"unix:/" + std::string(107, 'a'), "at most 107 bytes, this one has 108"},
      {"/" + std::string(107, 'a'), "at most 107 bytes"},
  };
  for (const auto& [text, hint] : cases) {
    SCOPED_TRACE(text);
    absl::StatusOr<ServerAddress> a = ParseServerAddress(text);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(
        a.status().message(),
        HasSubstr("expected unix:PATH, HOST:PORT or an absolute path (a "
                  "Unix socket), got '" +
                  text + "'"));
    EXPECT_THAT(a.status().message(), HasSubstr(hint));
  }
}

}  // namespace
}  // namespace rbln
