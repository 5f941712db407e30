#include "client/text_output.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "client/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln::client {
namespace {

namespace v1 = ::rbln::artifact::v1;
using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(FormatTest, GetPrintsTheBareNumber) {
  v1::GetKvcacheNumBlocksResponse reply;
  reply.set_kvcache_num_blocks(128);
  reply.set_compiled_num_blocks(256);
  EXPECT_EQ(FormatGet(reply), "128\n");
}

// optimum-rbln-cli's stdout lines, exactly; what this client tells beyond
// them on stderr.
TEST(FormatTest, ResizeLinesAreOptimumRblnsOnStdout) {
  CliOptions set;
  set.operation = Operation::kSet;
  set.written_dir = "/home/me/llama";
  v1::ResizeResponse reply;
  reply.set_artifact("llama");
  reply.set_previous_num_blocks(64);
  reply.set_new_num_blocks(128);
  reply.set_written(true);
  ResizeOutput output = FormatResize(set, reply);
  EXPECT_EQ(output.out,
            "Set kvcache_num_blocks to 128 for artifact at /home/me/llama\n");
  EXPECT_EQ(output.err, "kvcache_num_blocks: 64 -> 128\n");

  CliOptions dry = set;
  dry.dry_run = true;
  output = FormatResize(dry, reply);
  EXPECT_EQ(output.out,
            "kvcache_num_blocks: 64 -> 128 (dry run: nothing written)\n");
  EXPECT_EQ(output.err, "");

  // Over TCP: the daemon's store joined with the name written.
  CliOptions remote = set;
  remote.written_dir.clear();
  reply.set_store("/var/lib/rbln-artifactd");
  reply.set_output_dir("team/llama-128");
  output = FormatResize(remote, reply);
  EXPECT_EQ(output.out,
            "Set kvcache_num_blocks to 128 for artifact at "
            "/var/lib/rbln-artifactd/team/llama-128\n");
  EXPECT_EQ(output.err,
            "kvcache_num_blocks: 64 -> 128 (written to team/llama-128)\n");

  v1::ResizeResponse unchanged;
  unchanged.set_previous_num_blocks(64);
  unchanged.set_new_num_blocks(64);
  unchanged.set_written(false);
  output = FormatResize(set, unchanged);
  EXPECT_EQ(output.out,
            "Set kvcache_num_blocks to 64 for artifact at /home/me/llama\n");
  EXPECT_EQ(output.err,
            "kvcache_num_blocks: 64 -> 64 (unchanged: nothing was written)\n");
}

TEST(FormatTest, ABudgetPrintsItsLineAsGivenFirst) {
  CliOptions fit;
  fit.operation = Operation::kFitBudget;
  fit.budget = "10GB";
  fit.written_dir = "/srv/a";
  v1::ResizeResponse reply;
  reply.set_previous_num_blocks(16);
  reply.set_new_num_blocks(35);
  reply.set_written(true);
  EXPECT_EQ(FormatResize(fit, reply).out,
            "memory_budget 10GB fits kvcache_num_blocks=35\n"
            "Set kvcache_num_blocks to 35 for artifact at /srv/a\n");
  fit.dry_run = true;
  EXPECT_EQ(FormatResize(fit, reply).out,
            "memory_budget 10GB fits kvcache_num_blocks=35\n"
            "kvcache_num_blocks: 16 -> 35 (dry run: nothing written)\n");
}

TEST(FormatTest, FitNamesTheBudgetAndTheLimitingBucket) {
  v1::ResizeResponse reply = FromText<v1::ResizeResponse>(R"pb(
    previous_num_blocks: 16
    new_num_blocks: 35
    written: true
    fit {
      budget: "80%"
      budget_per_chiplet: 13509110579
      num_full_blocks: 64
      buckets {
        node: 0
        chiplet: 0
        available_bytes: 13509110579
        other_bytes: 3221225472
        kv_bytes: 9395240960
        kv_bytes_per_block: 268435456
        headroom_bytes: 892644147
      }
      buckets {
        node: 1
        chiplet: 0
        available_bytes: 13509110579
        other_bytes: 4026531840
        kv_bytes: 9395240960
        kv_bytes_per_block: 268435456
        headroom_bytes: 87337779
      }
      limiting_bucket: 1
      dram_source: "spec table"
    }
  )pb");
  CliOptions fit;
  fit.operation = Operation::kFitBudget;
  fit.budget = "0.8";
  std::vector<std::string> lines =
      absl::StrSplit(FormatResize(fit, reply).err, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "kvcache_num_blocks: 16 -> 35");
  EXPECT_EQ(lines[1],
            "budget 80%: 12.58 GiB per chiplet; limited by node 1 chiplet 0: "
            "other 3.75 GiB, KV 8.75 GiB at 35 blocks, 0.25 "
            "GiB per block, headroom 0.08 GiB");
  EXPECT_EQ(lines[2], "DRAM: spec table");

  reply.mutable_fit()->set_limiting_bucket(-1);
  reply.set_new_num_blocks(64);
  fit.dry_run = true;
  EXPECT_THAT(FormatResize(fit, reply).err,
              HasSubstr("the full count of 64 blocks fits\n"));
}

TEST(FormatTest, DescribeTable) {
  v1::DescribeArtifactResponse reply =
      FromText<v1::DescribeArtifactResponse>(R"pb(
        artifact: "team/llama"
        cls_name: "RBLNLlamaForCausalLM"
        npu: "RBLN-CA12"
        num_nodes: 2
        chiplets_per_node: 1
        attn_impl: "flash_attn"
        max_seq_len: 8192
        kvcache_block_size: 4096
        batch_size: 1
        kvcache_num_blocks: 2
        compiled_num_blocks: 2
        num_full_blocks: 2
        num_min_blocks: 2
        resizable_kv_tensors: 64
        fixed_kv_tensors: 0
        graphs {
          compiled_model_name: "prefill"
          file_name: "prefill.rbln"
          file_bytes: 1073741824
        }
        graphs {
          compiled_model_name: "decoder_batch_1"
          file_name: "decoder_batch_1.rbln"
          file_bytes: 1073741824
        }
        buckets {
          node: 0
          chiplet: 0
          available_bytes: 16877879296
          other_bytes: 4294967296
          kv_bytes: 2147483648
          kv_bytes_per_block: 1073741824
          headroom_bytes: 10435428352
        }
        buckets {
          node: 1
          chiplet: 0
          available_bytes: 16877879296
          other_bytes: 16106127360
          kv_bytes: 2147483648
          kv_bytes_per_block: 1073741824
          headroom_bytes: -1375731712
        }
        max_fitting_num_blocks: 9
        dram_source: "spec table"
      )pb");
  std::string text = FormatDescribe(reply);
  EXPECT_THAT(text, HasSubstr("artifact:    team/llama\n"));
  EXPECT_THAT(text, HasSubstr("npu:         RBLN-CA12, 2 nodes x 1 chiplet "
                              "(DRAM: spec table)\n"));
  EXPECT_THAT(text, HasSubstr("current 2, compiled 2, full 2, min 2, max "
                              "fitting 9\n"));
  EXPECT_THAT(text, HasSubstr("RBLNLlamaForCausalLM, flash_attn, max_seq_len "
                              "8192, block size 4096, batch 1"));
  EXPECT_THAT(text, HasSubstr("prefill, decoder_batch_1 (2.00 GiB in files)"));
  EXPECT_THAT(text, HasSubstr("KV at 2 blocks"));
  EXPECT_THAT(
      text,
      HasSubstr(
          "NODE  CHIPLET  AVAILABLE  OTHER    KV  PER BLOCK  HEADROOM\n"
          "   0        0      15.72   4.00  2.00       1.00      9.72\n"
          "   1        0      15.72  15.00  2.00       1.00     -1.28\n"));
}

TEST(FormatTest, DescribeVerifySaysWhatItVerified) {
  v1::DescribeArtifactResponse reply =
      FromText<v1::DescribeArtifactResponse>(R"pb(
        artifact: "llama"
        graphs { compiled_model_name: "prefill" codec: "built-in" }
        graphs { compiled_model_name: "decoder_batch_1" codec: "built-in" }
      )pb");
  // Without --verify, nothing is said of checksums.
  EXPECT_THAT(FormatDescribe(reply), Not(HasSubstr("verified")));

  reply.set_verified_segments(1234);
  reply.set_verified_bytes(17179869184);
  std::string text = FormatDescribe(reply);
  // Plain integers, no separators, and the last line.
  EXPECT_TRUE(absl::EndsWith(text,
                             "\nverified: 1234 payload segments, 17179869184 "
                             "bytes, every checksum matched\n"))
      << text;
  EXPECT_THAT(text, Not(HasSubstr("not verified")));

  // Graphs of an external codec carry no checksums: counted apart, and
  // named as not verified.
  reply.mutable_graphs(1)->set_codec("external (rbln_codec_rebel.py)");
  reply.set_verified_segments(2);
  reply.set_verified_bytes(4096);
  text = FormatDescribe(reply);
  EXPECT_THAT(text, HasSubstr("\nverified: 2 payload segments, 4096 bytes, "
                              "every checksum matched\n"));
  EXPECT_TRUE(absl::EndsWith(text,
                             "\nnot verified: 1 graph file of an external "
                             "codec, which carries no checksums\n"))
      << text;

  // Every graph external: nothing was verified, and it does not claim so.
  reply.mutable_graphs(0)->set_codec("external (rbln_codec_rebel.py)");
  reply.set_verified_segments(0);
  reply.set_verified_bytes(0);
  text = FormatDescribe(reply);
  EXPECT_THAT(text, Not(HasSubstr("every checksum matched")));
  EXPECT_TRUE(absl::EndsWith(text,
                             "\nnot verified: 2 graph files of an external "
                             "codec, which carry no checksums\n"))
      << text;
}

TEST(FormatTest, ListTableShowsErrorsOnlyWhenThereAreSome) {
  v1::ListArtifactsResponse reply = FromText<v1::ListArtifactsResponse>(R"pb(
    store: "/var/lib/rbln-artifactd"
    artifacts {
      artifact: "llama"
      kvcache_num_blocks: 16
      npu: "RBLN-CA12"
      num_nodes: 4
      cls_name: "RBLNLlamaForCausalLM"
    }
  )pb");
  EXPECT_EQ(FormatList(reply),
            "store: /var/lib/rbln-artifactd\n"
            "ARTIFACT  BLOCKS  NPU        NODES  CLASS\n"
            "llama         16  RBLN-CA12      4  RBLNLlamaForCausalLM\n");
  v1::ArtifactSummary* broken = reply.add_artifacts();
  broken->set_artifact("old");
  broken->set_error("legacy rbln_config.json (_meta)");
  EXPECT_THAT(FormatList(reply),
              AllOf(HasSubstr("CLASS                 ERROR\n"),
                    HasSubstr("old            -  -              -  -       "
                              "              legacy rbln_config.json (_meta)"
                              "\n")));
  EXPECT_EQ(FormatList(v1::ListArtifactsResponse()),
            "store: \n(no artifacts)\n");
}

TEST(FormatTest, ListShowsReadOnlyRootsAndWhatWasSkipped) {
  v1::ListArtifactsResponse reply = FromText<v1::ListArtifactsResponse>(R"pb(
    store: "/srv/store"
    roots { dir: "/srv/store" }
    roots { name: "hf" dir: "/data/hub" read_only: true }
    artifacts {
      artifact: "hf:models--x/snapshots/abc"
      kvcache_num_blocks: 16
      npu: "RBLN-CA12"
      num_nodes: 1
      cls_name: "RBLNLlamaForCausalLM"
    }
    skipped { artifact: "linked" reason: "a symbolic link" }
  )pb");
  EXPECT_EQ(FormatList(reply),
            "store: /srv/store\n"
            "read-only root hf: /data/hub (artifacts named hf:PATH)\n"
            "ARTIFACT                    BLOCKS  NPU        NODES  CLASS\n"
            "hf:models--x/snapshots/abc      16  RBLN-CA12      1  "
            "RBLNLlamaForCausalLM\n"
            "skipped 1:\n"
            "  linked: a symbolic link\n");
  reply.clear_artifacts();
  EXPECT_THAT(FormatList(reply),
              HasSubstr("(no artifacts)\nskipped 1:\n  linked: a symbolic "
                        "link\n"));
  reply.set_not_readable(2);
  EXPECT_THAT(FormatList(reply),
              HasSubstr("  linked: a symbolic link\nleft out 2 artifact(s) "
                        "you cannot read yourself"));
}

// A version link (docs/cli.md, "Version links"): the name asked, then the
// target; stdout's lines stay optimum-rbln-cli's.
TEST(FormatTest, AVersionLinkIsShownAsNameArrowTarget) {
  CliOptions set;
  set.operation = Operation::kSet;
  set.written_dir = "/srv/store/current";
  v1::ResizeResponse reply;
  reply.set_artifact("current");
  reply.set_link_target("v2");
  reply.set_previous_num_blocks(16);
  reply.set_new_num_blocks(10);
  reply.set_written(true);
  ResizeOutput output = FormatResize(set, reply);
  EXPECT_EQ(output.out,
            "Set kvcache_num_blocks to 10 for artifact at "
            "/srv/store/current\n");
  EXPECT_EQ(output.err, "kvcache_num_blocks: 16 -> 10 (current -> v2)\n");
  reply.set_written(false);
  EXPECT_EQ(FormatResize(set, reply).err,
            "kvcache_num_blocks: 16 -> 10 (current -> v2; unchanged: nothing "
            "was written)\n");
  reply.set_written(true);
  reply.set_output_dir("copy");
  EXPECT_EQ(FormatResize(set, reply).err,
            "kvcache_num_blocks: 16 -> 10 (current -> v2; written to copy)\n");

  v1::DescribeArtifactResponse described;
  described.set_artifact("current");
  described.set_link_target("v2");
  EXPECT_THAT(FormatDescribe(described),
              HasSubstr("artifact:    current -> v2\n"));

  v1::ListArtifactsResponse list;
  v1::ArtifactSummary* linked = list.add_artifacts();
  linked->set_artifact("current");
  linked->set_link_target("v2");
  linked->set_kvcache_num_blocks(10);
  list.add_artifacts()->set_artifact("v2");
  const std::string text = FormatList(list);
  EXPECT_THAT(text, ContainsRegex("\ncurrent -> v2 +10 "));
  EXPECT_THAT(text, ContainsRegex("\nv2 +0 "));
}

TEST(FormatTest, DeviceTable) {
  v1::GetDeviceInfoResponse reply = FromText<v1::GetDeviceInfoResponse>(R"pb(
    source: "spec table (no rbln-smi)"
    devices {
      index: -1
      name: "RBLN-CA12"
      family: "RBLN-CA"
      total_bytes: 16877879296
      available_bytes: 16877879296
      chiplets: 1
      source: "spec"
    }
    devices {
      index: 0
      name: "RBLN-CR03"
      family: "RBLN-CR"
      device_node: "/dev/rbln0"
      total_bytes: 150323855360
      used_bytes: 1073741824
      available_bytes: 149250113536
      chiplets: 4
      source: "probe"
    }
  )pb");
  std::string text = FormatDeviceInfo(reply);
  EXPECT_THAT(text, HasSubstr("source: spec table (no rbln-smi)\n"));
  EXPECT_THAT(text, HasSubstr("INDEX  NAME       FAMILY   DEVICE      "
                              "TOTAL GiB  USED GiB  AVAILABLE GiB  CHIPLETS  "
                              "SOURCE\n"));
  EXPECT_THAT(text, HasSubstr("    -  RBLN-CA12  RBLN-CA  -               "
                              "15.72      0.00          15.72         1  "
                              "spec\n"));
  EXPECT_THAT(text, HasSubstr("    0  RBLN-CR03  RBLN-CR  /dev/rbln0     "
                              "140.00      1.00         139.00         4  "
                              "probe\n"));

  // A probed device the spec table does not know has no chiplet count.
  v1::Device* unknown = reply.add_devices();
  unknown->set_index(1);
  unknown->set_name("RBLN-XZ1");
  unknown->set_chiplets(0);
  unknown->set_source("probe");
  EXPECT_THAT(FormatDeviceInfo(reply),
              ContainsRegex("\n +1  RBLN-XZ1 .* - +probe\n"));
}

TEST(FormatTest, ServerInfo) {
  auto reply = FromText<v1::GetServerInfoResponse>(R"pb(
    version: "0.1.0"
    commit: "1a2b3c4d5e6f"
    hostname: "npu-7"
    store: "/var/lib/rbln-artifactd"
    roots { name: "" dir: "/var/lib/rbln-artifactd" read_only: false }
    roots { name: "models" dir: "/srv/models" read_only: true }
    listeners: "unix:/run/rbln-artifactd.sock"
    listeners: "0.0.0.0:50051"
    codec: "built-in"
    caller: "cn:fleet-job"
    role: "reader"
  )pb");
  EXPECT_EQ(FormatServerInfo(reply),
            "rbln-artifactd 0.1.0 (commit 1a2b3c4d5e6f) on npu-7\n"
            "store: /var/lib/rbln-artifactd\n"
            "read-only root models: /srv/models (artifacts named "
            "models:PATH)\n"
            "listeners: unix:/run/rbln-artifactd.sock, 0.0.0.0:50051\n"
            "codec: built-in\n"
            "you are: cn:fleet-job (reader)\n");
}

TEST(FormatTest, WaitingForLockNamesWhatIsWritten) {
  EXPECT_EQ(FormatWaitingForLock(Writer()),
            "waiting for another write to /srv/store/llama to finish\u2026\n");
  EXPECT_EQ(FormatWaitingForLock(Writer("/srv/store/copy")),
            "waiting for another write to /srv/store/llama or /srv/store/copy "
            "to finish\u2026\n");
}

TEST(FormatTest, Diagnostics) {
  google::protobuf::RepeatedPtrField<std::string> warnings;
  *warnings.Add() = "128 is above the compiled count 64";
  *warnings.Add() = "does not fit";
  EXPECT_EQ(FormatWarnings(warnings),
            "warning: 128 is above the compiled count 64\n"
            "warning: does not fit\n");
}

TEST(FormatTest, ProgressBar) {
  uint64_t gib = uint64_t{1} << 30;
  EXPECT_EQ(FormatProgressBar(0, 2 * gib),
            "\r[..............................]   0%  0.00 / 2.00 GiB");
  EXPECT_EQ(FormatProgressBar(gib, 0),
            "\r[..............................]   0%  1.00 / 0.00 GiB");
  EXPECT_EQ(FormatProgressBar(gib, 2 * gib),
            "\r[###############...............]  50%  1.00 / 2.00 GiB");
  EXPECT_EQ(FormatProgressBar(3 * gib, 2 * gib),
            "\r[##############################] 100%  3.00 / 2.00 GiB");
}

}  // namespace
}  // namespace rbln::client
