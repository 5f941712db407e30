#include "server/socket_access.h"

#include <grp.h>
#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;

TEST(ParseSocketModeTest, OctalPermissionBits) {
  EXPECT_EQ(ParseSocketMode("0660").value(), 0660u);
  EXPECT_EQ(ParseSocketMode("660").value(), 0660u);
  EXPECT_EQ(ParseSocketMode("0600").value(), 0600u);
  EXPECT_EQ(ParseSocketMode("777").value(), 0777u);
}

TEST(ParseSocketModeTest, RefusesWhatIsNotAPermissionMode) {
  for (const char* text :
       {"", "rw-rw----", "0668", "0o660", "-660", "01777", "4755", "66000"}) {
    SCOPED_TRACE(text);
    absl::StatusOr<mode_t> mode = ParseSocketMode(text);
    ASSERT_FALSE(mode.ok());
    EXPECT_EQ(mode.status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_THAT(ParseSocketMode("x").status().message(),
              HasSubstr("octal mode such as 0660"));
  EXPECT_THAT(ParseSocketMode("1777").status().message(),
              HasSubstr("at most 0777"));
}

TEST(ResolveGroupTest, NamesAndNumbers) {
  // Group 0 is "root" on every Linux system.
  group* root = getgrgid(0);
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(ResolveGroup(root->gr_name).value(), 0u);
  EXPECT_EQ(ResolveGroup("0").value(), 0u);
  EXPECT_EQ(ResolveGroup("4242").value(), 4242u);
}

TEST(ResolveGroupTest, UnknownNameIsNotFoundAndNamed) {
  absl::StatusOr<gid_t> gid = ResolveGroup("no-such-group-rbln");
  ASSERT_FALSE(gid.ok());
  EXPECT_EQ(gid.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gid.status().message(),
              HasSubstr("unknown group 'no-such-group-rbln'"));
}

}  // namespace
}  // namespace rbln
