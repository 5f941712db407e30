// What rbln-artifact prints on success, byte for byte: on stdout exactly the
// lines optimum-rbln-cli prints (cli.py's _handle_kvcache_num_blocks), so
// that a script parsing them works unchanged, and on stderr what this client
// tells beyond them. The real daemon on a real Unix socket (paths as the
// caller named them, made absolute as Python's Path.absolute() does; over
// TCP, tests/e2e_test.cc's E2eTcpTest), and the tiny preset, whose numbers
// are fixed.
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon_testing.h"

namespace rbln::e2e {
namespace {

using ::rbln::testing::HashTree;

// The DRAM line of a fit of the tiny preset (RBLN-CA12) on the spec table.
constexpr char kDramLine[] =
    "DRAM: spec table: RBLN-CA* has 15.72 GiB available per device (1 "
    "chiplet(s) of 15.72 GiB); NPU RBLN-CA12 from rbln_config.json's npu\n";

// "tiny" (16 blocks, the full count; minimum 9) in a store served on a Unix
// socket, the client run from the store's parent.
class OptimumOutputTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(Synthesize("tiny", StorePath("tiny")));
    ASSERT_NO_FATAL_FAILURE(Start({"--rbln-smi", "none"}));
  }

  Outcome Cli(const std::string& args) {
    return CliAt(address_, args, root_.path());
  }

  // Runs `args` and expects exit 0 and exactly `out` and `err`.
  void Expect(const std::string& args, const std::string& out,
              const std::string& err) {
    SCOPED_TRACE(args);
    Outcome o = Cli(args);
    EXPECT_EQ(o.code, 0) << o;
    EXPECT_EQ(o.out, out);
    EXPECT_EQ(o.err, err);
  }
};

TEST_F(OptimumOutputTest, EachCaseByteForByte) {
  const std::string tiny = store_ + "/tiny";
  // A set, named with "." components and a trailing slash: dropped, as
  // Path.absolute() prints it.
  Expect(
      "--set-kvcache-num-blocks 12 --model-id ./store/./tiny/",
      absl::StrCat("Set kvcache_num_blocks to 12 for artifact at ", tiny, "\n"),
      "kvcache_num_blocks: 16 -> 12\n");
  EXPECT_EQ(CountOnDisk(tiny), 12u);

  // The count it already has: the Set line, and on stderr that nothing was
  // written.
  const auto before = HashTree(tiny);
  Expect(
      "--set-kvcache-num-blocks 12 --model-id store/tiny",
      absl::StrCat("Set kvcache_num_blocks to 12 for artifact at ", tiny, "\n"),
      "kvcache_num_blocks: 12 -> 12 (unchanged: nothing was written)\n");
  EXPECT_EQ(HashTree(tiny), before);

  // A dry run of a set: only the change, on stdout.
  Expect("--set-kvcache-num-blocks 9 --model-id store/tiny --dry-run",
         "kvcache_num_blocks: 12 -> 9 (dry run: nothing written)\n", "");

  // A dry run of a budget: the budget line (as given), then the change.
  Expect("--set-memory-budget 10GB --model-id store/tiny --dry-run",
         "memory_budget 10GB fits kvcache_num_blocks=16\n"
         "kvcache_num_blocks: 12 -> 16 (dry run: nothing written)\n",
         absl::StrCat("warning: kvcache_num_blocks 16 is above the current "
                      "count 12, which was sized to fit device DRAM; the "
                      "model may fail to allocate at runtime\n"
                      "budget 10737418240 bytes: 10.00 GiB per chiplet; the "
                      "full count of 16 blocks fits\n",
                      kDramLine));
  EXPECT_EQ(HashTree(tiny), before);

  // A budget into a new directory, named with "..": kept, as pathlib keeps
  // it; -o is --output-dir.
  const std::string root_name =
      std::filesystem::path(root_.path()).filename().string();
  Expect(absl::StrCat("--set-memory-budget 80% --model-id store/tiny -o ../",
                      root_name, "/store/c"),
         absl::StrCat("memory_budget 80% fits kvcache_num_blocks=16\n"
                      "Set kvcache_num_blocks to 16 for artifact at ",
                      root_.path(), "/../", root_name, "/store/c\n"),
         absl::StrCat("warning: kvcache_num_blocks 16 is above the current "
                      "count 12, which was sized to fit device DRAM; the "
                      "model may fail to allocate at runtime\n"
                      "kvcache_num_blocks: 12 -> 16 (written to c)\n"
                      "budget 80%: 12.57 GiB per chiplet; the full count of "
                      "16 blocks fits\n",
                      kDramLine));
  EXPECT_EQ(CountOnDisk(store_ + "/c"), 16u);
  EXPECT_EQ(HashTree(tiny), before);

  // A budget in place, the artifact named by an absolute path.
  Expect(absl::StrCat("--set-memory-budget 0.5 --model-id ", tiny),
         absl::StrCat("memory_budget 0.5 fits kvcache_num_blocks=16\n"
                      "Set kvcache_num_blocks to 16 for artifact at ",
                      tiny, "\n"),
         absl::StrCat("warning: kvcache_num_blocks 16 is above the current "
                      "count 12, which was sized to fit device DRAM; the "
                      "model may fail to allocate at runtime\n"
                      "kvcache_num_blocks: 12 -> 16\n"
                      "budget 50%: 7.86 GiB per chiplet; the full count of "
                      "16 blocks fits\n",
                      kDramLine));
  EXPECT_EQ(CountOnDisk(tiny), 16u);
}

}  // namespace
}  // namespace rbln::e2e
