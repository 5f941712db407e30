#include "client/paths.h"

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln::client {
namespace {

using ::testing::HasSubstr;

constexpr char kUnix[] = "unix:/run/test-artifactd.sock";
constexpr char kCwd[] = "/store/team";

TEST(ResolveArtifactPathTest, Cases) {
  struct Case {
    const char* path;
    const char* server;
    const char* expected;
  };
  for (const Case& c : std::vector<Case>{
           {"a", kUnix, "/store/team/a"},
           {"./a/./b/", kUnix, "/store/team/a/b"},
           {"..", kUnix, "/store"},
           {"../../x", kUnix, "/x"},
           {"../../../../x", kUnix, "/x"},
           // A ".." after a named component may cross a symbolic link: the
           // daemon judges it.
           {"a/../b", kUnix, "/store/team/a/../b"},
           {"/abs/a", kUnix, "/abs/a"},
           {"./a", "localhost:50051", "./a"},
           {"../a", "dns:///npu:50051", "../a"},
           {"/abs/a", "localhost:50051", "/abs/a"},
           // A read-only root's name is sent as given, over either transport.
           {"hf:models--x/snapshots/abc", kUnix, "hf:models--x/snapshots/abc"},
           {"models:llama", "localhost:50051", "models:llama"},
           // Not a root name: a path (a directory whose name has a colon).
           {"a/b:c", kUnix, "/store/team/a/b:c"},
           {".x:y", kUnix, "/store/team/.x:y"},
       }) {
    absl::StatusOr<std::string> got =
        ResolveArtifactPath(c.path, c.server, kCwd);
    ASSERT_TRUE(got.ok()) << c.path << ": " << got.status();
    EXPECT_EQ(*got, c.expected) << c.path << " via " << c.server;
  }
}

TEST(ResolveArtifactPathTest, RelativePathWithoutWorkingDirectoryFails) {
  absl::StatusOr<std::string> got = ResolveArtifactPath("a", kUnix, "");
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("give an absolute path"));
  // Not needed for an absolute path or over TCP.
  EXPECT_TRUE(ResolveArtifactPath("/a", kUnix, "").ok());
  EXPECT_TRUE(ResolveArtifactPath("a", "h:1", "").ok());
}

TEST(IsLocalServerTest, UnixSocketsAreLocal) {
  EXPECT_TRUE(IsLocalServer("unix:/run/x.sock"));
  EXPECT_FALSE(IsLocalServer("localhost:50051"));
  EXPECT_FALSE(IsLocalServer("[::1]:50051"));
}

TEST(PathTest, PythonAbsolutePathIsPathlibs) {
  const struct {
    const char* path;
    const char* expected;
  } cases[] = {
      {"llama", "/home/me/llama"},
      {"./llama", "/home/me/llama"},
      {"a/./b/", "/home/me/a/b"},
      {"a//b", "/home/me/a/b"},
      {".", "/home/me"},
      {"../x", "/home/me/../x"},
      {"a/../b", "/home/me/a/../b"},
      {"/srv/./x/", "/srv/x"},
      {"/", "/"},
      {"//srv/x", "//srv/x"},
      {"///srv/x", "/srv/x"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.path);
    EXPECT_EQ(PythonAbsolutePath(c.path, "/home/me"), c.expected);
  }
  EXPECT_EQ(PythonAbsolutePath("x", "/"), "/x");
}

}  // namespace
}  // namespace rbln::client
