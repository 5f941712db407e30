#include "core/store/artifact_name.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "core/text.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kRoot[] = "/srv/store";
constexpr char kGiven[] = "/data/store";

absl::StatusOr<std::string> Canonical(absl::string_view name) {
  return CanonicalArtifactName(name, kRoot, kGiven);
}

TEST(CanonicalArtifactNameTest, NormalisesSlashesAndDots) {
  for (const char* name :
       {"team/llama", "team//llama/", "./team/./llama", "/srv/store/team/llama",
        "//srv//store/team/llama/", "/data/store/team/llama"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<std::string> canonical = Canonical(name);
    ASSERT_TRUE(canonical.ok()) << canonical.status();
    EXPECT_EQ(*canonical, "team/llama");
  }
}

TEST(CanonicalArtifactNameTest, RefusesEscapesAndReservedNames) {
  for (const char* name : {"../x", "a/../b", "/srv/storex/a", "/etc/passwd",
                           "/srv", ".hidden", "a/.staging"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(Canonical(name).status().code(),
              absl::StatusCode::kPermissionDenied);
  }
  for (const char* name : {"", "/srv/store", "/srv/store//", "."}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(Canonical(name).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(Canonical(std::string("a\0b", 3)).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (const char* name : {"a\nb", "a\x1b[2J", "tab\there", "del\x7f"}) {
    SCOPED_TRACE(name);
    const absl::Status status = Canonical(name).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("control character"));
  }
}

TEST(CanonicalArtifactNameTest, LongNamesAreInvalidWithShortMessages) {
  const absl::Status too_long = Canonical(std::string(5000, 'a')).status();
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.message(), HasSubstr("PATH_MAX"));
  EXPECT_LT(too_long.message().size(), kMaxStatusMessageBytes);
  const absl::Status component = Canonical(std::string(256, 'c')).status();
  EXPECT_EQ(component.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(component.message(), HasSubstr("NAME_MAX"));
  EXPECT_TRUE(Canonical(std::string(kMaxNameComponentBytes, 'c')).ok());
  // The longest escapes, in the message that repeats the input twice.
  const absl::Status hidden =
      Canonical("." + std::string(4094, '\xff')).status();
  EXPECT_EQ(hidden.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_LT(hidden.message().size(), kMaxStatusMessageBytes);
}

TEST(TextTest, EchoEscapesAndBoundsItsOutput) {
  EXPECT_EQ(Echo("a\nb"), "a\\nb");
  const std::string echoed = Echo(std::string(1000, '\x01'));
  EXPECT_LE(echoed.size(), kMaxEchoBytes + 32);
  EXPECT_THAT(echoed, HasSubstr("more bytes)"));
  EXPECT_EQ(LogValue("say \"hi\"\n"), "\"say \\\"hi\\\"\\n\"");
  EXPECT_EQ(WireText("short", 10), "short");
  const std::string cut = WireText(std::string(50, 'x'), 20);
  EXPECT_EQ(cut.size(), 20u);
  EXPECT_THAT(cut, HasSubstr("(cut)"));
  // Valid UTF-8 stays; invalid bytes and control characters are escaped;
  // a cut never splits a character.
  EXPECT_EQ(WireText("caf\xc3\xa9 \xff\x1b[31m\n"),
            "caf\xc3\xa9 \\xff\\x1b[31m\\n");
  const std::string wide = WireText(std::string(600, '\xc3') + "", 30);
  EXPECT_LE(wide.size(), 30u);
  std::string accents_in;
  for (int i = 0; i < 8; ++i) accents_in += "\xc3\xa9";
  const std::string accents = WireText(accents_in, 13);
  EXPECT_EQ(accents, "\xc3\xa9\xc3\xa9... (cut)");
}

TEST(TextTest, EveryByteIsEscapedAloneAsAbslEscapesIt) {
  // Byte by byte: a hex escape is never followed by an escaped hex digit
  // (CHexEscape of the whole string would write "\\x01\\x41").
  std::string all;
  std::string expected = "\"";
  for (int c = 0; c < 256; ++c) {
    const char byte = static_cast<char>(c);
    all.push_back(byte);
    expected += absl::CHexEscape(absl::string_view(&byte, 1));
  }
  expected += "\"";
  EXPECT_EQ(LogValue(all, 4 * 256), expected);
  EXPECT_EQ(Echo(std::string(1, '\x01') + "A"), "\\x01A");
  // The cut falls before the escape that would pass the bound.
  EXPECT_EQ(LogValue("ab\n", 3), "\"ab... (1 more bytes)\"");
  // … and among plain bytes after an escape.
  EXPECT_EQ(LogValue(std::string(1, '\x01') + "abc", 5),
            "\"\\x01a... (2 more bytes)\"");
  std::string appended = "x=";
  AppendLogValue("a b", 10, &appended);
  EXPECT_EQ(appended, "x=\"a b\"");
}

const NamedRoot kRoots[] = {{"", kRoot, kGiven},
                            {"hf", "/home/u/.cache/huggingface/hub", ""},
                            {"models", "/data/models", "/mnt/models"}};

absl::StatusOr<std::string> Resolved(absl::string_view name) {
  absl::StatusOr<RootedName> rooted = ResolveArtifactName(name, kRoots);
  if (!rooted.ok()) return rooted.status();
  return QualifiedArtifactName(kRoots[rooted->root], rooted->rel);
}

TEST(ResolveArtifactNameTest, FindsTheRootByPathOrName) {
  struct Case {
    const char* name;
    const char* expected;
  };
  for (const Case& c : std::vector<Case>{
           {"team/llama", "team/llama"},
           {"/srv/store/team/llama", "team/llama"},
           {"/data/store/team/llama", "team/llama"},
           {"hf:models--x/snapshots/abc", "hf:models--x/snapshots/abc"},
           {"/home/u/.cache/huggingface/hub/models--x/snapshots/abc/",
            "hf:models--x/snapshots/abc"},
           {"/mnt/models/llama", "models:llama"},
           // A read-only root may itself be an artifact.
           {"/data/models", "models:"},
           {"models:", "models:"},
           // Not a root's name: a store name with a colon in it.
           {"other:x", "other:x"},
           {"team/hf:x", "team/hf:x"},
       }) {
    absl::StatusOr<std::string> got = Resolved(c.name);
    ASSERT_TRUE(got.ok()) << c.name << ": " << got.status();
    EXPECT_EQ(*got, c.expected) << c.name;
  }
}

TEST(ResolveArtifactNameTest, OutsideEveryRootNamesThemAndTheFlag) {
  absl::StatusOr<std::string> got = Resolved("/opt/llama");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(got.status().message(),
              AllOf(HasSubstr("outside the artifact store /srv/store"),
                    HasSubstr("hf=/home/u/.cache/huggingface/hub"),
                    HasSubstr("models=/data/models"),
                    HasSubstr("--read-only-root [NAME=]DIR")));
  // The rules of names hold in every root.
  EXPECT_EQ(Resolved("hf:../x").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Resolved("models:a/.hidden").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Resolved("/srv/store").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ResolveArtifactNameTest, RootNames) {
  for (const char* name : {"hf", "models", "a.b-c_d", "A1"}) {
    EXPECT_TRUE(IsValidRootName(name)) << name;
  }
  for (const char* name : {"", ".hf", "a b", "a/b", "a:b", "é",
                           "x12345678901234567890123456789012345678901234567890"
                           "12345678901234"}) {
    EXPECT_FALSE(IsValidRootName(name)) << name;
  }
}

}  // namespace
}  // namespace rbln
