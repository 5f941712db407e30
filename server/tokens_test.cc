// The --tokens file, --operators values and the table of Unix peers
// (auth.h); the end-to-end checks of identities and roles are in
// tests/auth_test.cc.
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/auth.h"

namespace rbln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Optional;

TEST(UnixPeerTable, ANumberReusedByANewConnectionHasOnlyItsCredentials) {
  UnixPeerTable table;
  EXPECT_EQ(table.Find(7), nullptr);  // never added: no default
  table.Add(7, {.uid = 1000, .gid = 1000, .groups = {1000, 50}});
  table.Add(8, {.uid = 0, .gid = 0, .groups = {}});
  std::shared_ptr<const UnixPeer> first = table.Find(7);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->uid, 1000u);
  EXPECT_THAT(first->groups, ElementsAre(1000u, 50u));
  // Connection 7 closed and its number went to the next one accepted.
  table.Add(7, {.uid = 1001, .gid = 1001, .groups = {}});
  std::shared_ptr<const UnixPeer> second = table.Find(7);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->uid, 1001u);
  EXPECT_TRUE(second->groups.empty());
  EXPECT_EQ(first->uid, 1000u);  // what a running call holds stays its own
  EXPECT_EQ(table.Find(8)->uid, 0u);
}

TEST(PeerMayRead, OwnerGroupOrOthersBitsDecide) {
  const UnixPeer alice{.uid = 1000, .gid = 1000, .groups = {1000, 50}};
  EXPECT_TRUE(PeerMayRead(alice, 1000, 0, 0700));   // owner
  EXPECT_FALSE(PeerMayRead(alice, 1000, 0, 0300));  // owner, no read
  EXPECT_FALSE(PeerMayRead(alice, 1000, 0, 0077));  // owner bits rule
  EXPECT_TRUE(PeerMayRead(alice, 0, 50, 0750));     // a supplementary group
  EXPECT_TRUE(PeerMayRead(alice, 0, 1000, 0750));   // the primary group
  EXPECT_FALSE(PeerMayRead(alice, 0, 50, 0700));
  EXPECT_FALSE(PeerMayRead(alice, 0, 50, 0740));  // read without search
  EXPECT_TRUE(PeerMayRead(alice, 0, 0, 0755));    // others
  EXPECT_FALSE(PeerMayRead(alice, 0, 0, 0750));
  EXPECT_TRUE(PeerMayRead({.uid = 0}, 1000, 1000, 0700));  // root
}

std::string HexSha256(absl::string_view text) {
  const TokenTable::Digest digest = Sha256(text);
  return absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(digest.data()), digest.size()));
}

TEST(Sha256, MatchesTheKnownDigest) {
  // sha256sum of "abc" (FIPS 180-2's example).
  EXPECT_EQ(HexSha256("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(TokenTable, FindsTheNameOfAListedToken) {
  absl::StatusOr<TokenTable> table =
      TokenTable::Parse("# ci and a person\n\n  ci " + HexSha256("s3cret") +
                        "  \nalice\t" + HexSha256("other") + "\n");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->size(), 2u);
  EXPECT_THAT(table->Find("s3cret"), Optional(std::string("ci")));
  EXPECT_THAT(table->Find("other"), Optional(std::string("alice")));
  EXPECT_EQ(table->Find("s3cret "), std::nullopt);
  EXPECT_EQ(table->Find(""), std::nullopt);
}

TEST(TokenTable, RefusesMalformedLinesNamingThem) {
  absl::StatusOr<TokenTable> table =
      TokenTable::Parse("ci " + HexSha256("x") + "\nbob s3cret\n");
  ASSERT_FALSE(table.ok());
  EXPECT_THAT(table.status().message(), HasSubstr("line 2"));
  EXPECT_THAT(table.status().message(), HasSubstr("64 hex digits"));
  EXPECT_FALSE(TokenTable::Parse("onlyaname\n").ok());
}

TEST(ParseOperators, SplitsCommasAndChecksEachIdentity) {
  absl::StatusOr<std::vector<std::string>> parsed =
      ParseOperators({"cn:fleet-job,uid:0", "group:rbln-ops, token:ci"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(*parsed, ElementsAre("cn:fleet-job", "uid:0", "group:rbln-ops",
                                   "token:ci"));
  for (const char* bad : {"alice", "uid:abc", "cn:", "host:x"}) {
    absl::StatusOr<std::vector<std::string>> refused = ParseOperators({bad});
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_THAT(refused.status().message(), HasSubstr("cn:NAME")) << bad;
  }
}

TEST(CheckMayWrite, NamesTheCallerAndTheFlag) {
  EXPECT_TRUE(CheckMayWrite({.identity = "cn:ops", .is_operator = true}).ok());
  absl::Status denied = CheckMayWrite({.identity = "cn:reader"});
  EXPECT_TRUE(absl::IsPermissionDenied(denied));
  EXPECT_THAT(denied.message(),
              HasSubstr("cn:reader may only read; an operator may write: add "
                        "it to rbln-artifactd --operators"));
}

}  // namespace
}  // namespace rbln
