#include "client/text_output.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "core/text.h"

namespace rbln::client {
namespace {

namespace v1 = ::rbln::artifact::v1;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string GiB(uint64_t bytes) {
  return absl::StrFormat("%.2f", static_cast<double>(bytes) / kGiB);
}

std::string SignedGiB(int64_t bytes) {
  return absl::StrFormat("%.2f", static_cast<double>(bytes) / kGiB);
}

struct Column {
  std::string header;
  bool right_aligned = false;
};

// A table with a header row; columns two spaces apart, no trailing blanks.
std::string RenderTable(const std::vector<Column>& columns,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const Column& c : columns) widths.push_back(c.header.size());
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size() && i < widths.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  auto render_row = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t i = 0; i < columns.size(); ++i) {
      const std::string& cell = i < cells.size() ? cells[i] : "";
      if (i > 0) line += "  ";
      int width = static_cast<int>(widths[i]);
      line += columns[i].right_aligned ? absl::StrFormat("%*s", width, cell)
                                       : absl::StrFormat("%-*s", width, cell);
    }
    return absl::StrCat(absl::StripTrailingAsciiWhitespace(line), "\n");
  };
  std::vector<std::string> header;
  for (const Column& c : columns) header.push_back(c.header);
  std::string text = render_row(header);
  for (const auto& row : rows) text += render_row(row);
  return text;
}

// "label:" padded so that the values of consecutive lines align.
std::string Field(absl::string_view label, absl::string_view value) {
  return absl::StrFormat("%-13s%s\n", absl::StrCat(label, ":"), value);
}

std::string FormatFit(const v1::FitDetails& fit, uint64_t num_blocks) {
  std::string line =
      absl::StrFormat("budget %s: %s GiB per chiplet", fit.budget(),
                      GiB(fit.budget_per_chiplet()));
  int limiting = fit.limiting_bucket();
  if (limiting < 0) {
    absl::StrAppend(&line, "; the full count of ", fit.num_full_blocks(),
                    " blocks fits");
  } else if (limiting < fit.buckets_size()) {
    const v1::BucketPlan& b = fit.buckets(limiting);
    absl::StrAppend(
        &line, absl::StrFormat(
                   "; limited by node %d chiplet %d: other %s GiB, KV %s "
                   "GiB at %d blocks, %s GiB per block, headroom %s GiB",
                   b.node(), b.chiplet(), GiB(b.other_bytes()),
                   GiB(b.kv_bytes()), num_blocks, GiB(b.kv_bytes_per_block()),
                   SignedGiB(b.headroom_bytes())));
  } else {
    absl::StrAppend(&line, "; limited by bucket #", limiting);
  }
  absl::StrAppend(&line, "\n");
  // A budget is a fraction of what the daemon believes a device holds; say
  // where that came from (probe, spec table or override).
  if (!fit.dram_source().empty()) {
    absl::StrAppend(&line, "DRAM: ", fit.dram_source(), "\n");
  }
  return line;
}

// "current -> v2" for an artifact named through a symbolic link the store
// follows, else its name.
std::string ArtifactWithLink(const std::string& artifact,
                             const std::string& link_target) {
  if (link_target.empty()) return artifact;
  return absl::StrCat(artifact, " -> ", link_target);
}

// "store: DIR" and a line per read-only root, for --list and --server-info.
std::string FormatRoots(
    const std::string& store,
    const google::protobuf::RepeatedPtrField<v1::StoreRoot>& roots) {
  std::string text = absl::StrCat("store: ", store, "\n");
  for (const v1::StoreRoot& root : roots) {
    if (root.read_only()) {
      absl::StrAppend(&text, "read-only root ", root.name(), ": ", root.dir(),
                      " (artifacts named ", root.name(), ":PATH)\n");
    }
  }
  return text;
}

// The line that says what --verify checked, and what it could not (graphs
// of an external codec carry no checksums); "" without --verify.
std::string FormatVerified(const v1::DescribeArtifactResponse& reply) {
  if (!reply.has_verified_segments()) return "";
  const int64_t external = std::count_if(
      reply.graphs().begin(), reply.graphs().end(), [](const v1::GraphInfo& g) {
        return !g.codec().empty() && g.codec() != "built-in";
      });
  std::string text;
  if (reply.verified_segments() > 0 || external == 0) {
    text = absl::StrCat("verified: ", reply.verified_segments(),
                        " payload segments, ", reply.verified_bytes(),
                        " bytes, every checksum matched\n");
  }
  if (external == 1) {
    text +=
        "not verified: 1 graph file of an external codec, which carries "
        "no checksums\n";
  } else if (external > 1) {
    absl::StrAppend(&text, "not verified: ", external,
                    " graph files of an external codec, which carry no "
                    "checksums\n");
  }
  return text;
}

}  // namespace

std::string FormatGet(const v1::GetKvcacheNumBlocksResponse& reply) {
  return absl::StrCat(reply.kvcache_num_blocks(), "\n");
}

ResizeOutput FormatResize(const CliOptions& options,
                          const v1::ResizeResponse& reply) {
  ResizeOutput output;
  if (options.operation == Operation::kFitBudget) {
    output.out =
        absl::StrCat("memory_budget ", options.budget,
                     " fits kvcache_num_blocks=", reply.new_num_blocks(), "\n");
  }
  const std::string change =
      absl::StrCat("kvcache_num_blocks: ", reply.previous_num_blocks(), " -> ",
                   reply.new_num_blocks());
  if (options.dry_run) {
    absl::StrAppend(&output.out, change, " (dry run: nothing written)\n");
  } else {
    const std::string dir =
        !options.written_dir.empty()
            ? options.written_dir
            : absl::StrCat(reply.store(), "/",
                           reply.output_dir().empty() ? reply.artifact()
                                                      : reply.output_dir());
    absl::StrAppend(&output.out, "Set kvcache_num_blocks to ",
                    reply.new_num_blocks(), " for artifact at ", dir, "\n");
    std::vector<std::string> notes;
    if (!reply.link_target().empty()) {
      notes.push_back(ArtifactWithLink(reply.artifact(), reply.link_target()));
    }
    if (!reply.written()) {
      notes.push_back("unchanged: nothing was written");
    } else if (!reply.output_dir().empty()) {
      notes.push_back(absl::StrCat("written to ", reply.output_dir()));
    }
    output.err = change;
    if (!notes.empty()) {
      absl::StrAppend(&output.err, " (", absl::StrJoin(notes, "; "), ")");
    }
    output.err += "\n";
  }
  if (reply.has_fit()) {
    output.err += FormatFit(reply.fit(), reply.new_num_blocks());
  }
  return output;
}

namespace {

// A byte count for a table cell: "8.91 GiB", "512.0 MiB", "4096 B".
std::string ShortBytes(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 30)) {
    return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  }
  if (bytes >= (uint64_t{1} << 20)) {
    return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  }
  return absl::StrFormat("%d B", bytes);
}

}  // namespace

std::string FormatFitTogether(const v1::FitTogetherResponse& reply) {
  const auto bucket_name = [&](int index) {
    if (index < 0 || index >= reply.buckets_size()) return std::string("-");
    const v1::GroupBucket& bucket = reply.buckets(index);
    return absl::StrFormat("node %d chiplet %d", bucket.node(),
                           bucket.chiplet());
  };
  std::string text =
      absl::StrFormat("%-40s %9s %9s %6s %6s  %s\n", "artifact", "previous",
                      "new", "min", "full", "stopped by");
  for (const v1::MemberResult& member : reply.members()) {
    std::string note = reply.describe_only()
                           ? std::string("-")
                           : bucket_name(member.limiting_bucket());
    if (!reply.describe_only() && member.limiting_bucket() < 0) {
      note = "its full count";
    }
    if (member.written()) absl::StrAppend(&note, " (written)");
    if (member.already_at_target() && !reply.describe_only()) {
      absl::StrAppend(&note, " (already there)");
    }
    absl::StrAppend(
        &text, absl::StrFormat("%-40s %9d %9d %6d %6d  %s\n", member.artifact(),
                               member.previous_num_blocks(),
                               member.new_num_blocks(), member.num_min_blocks(),
                               member.num_full_blocks(), note));
  }
  absl::StrAppend(&text, "\n",
                  absl::StrFormat("%-20s %12s", "bucket", "budget"));
  for (int i = 0; i < reply.members_size(); ++i) {
    absl::StrAppend(&text, absl::StrFormat(" %12s", absl::StrCat("#", i + 1)));
  }
  absl::StrAppend(&text, absl::StrFormat(" %12s %12s\n", "sum", "headroom"));
  for (int i = 0; i < reply.buckets_size(); ++i) {
    const v1::GroupBucket& bucket = reply.buckets(i);
    uint64_t sum = 0;
    absl::StrAppend(&text, absl::StrFormat("%-20s %12s", bucket_name(i),
                                           ShortBytes(bucket.budget_bytes())));
    for (uint64_t used : bucket.used_bytes()) {
      sum += used;
      absl::StrAppend(&text, absl::StrFormat(" %12s", ShortBytes(used)));
    }
    const int64_t room = bucket.headroom_bytes();
    absl::StrAppend(
        &text,
        absl::StrFormat(" %12s %12s\n", ShortBytes(sum),
                        absl::StrCat(room < 0 ? "-" : "",
                                     ShortBytes(room < 0 ? -room : room))));
  }
  if (reply.describe_only()) {
    absl::StrAppend(&text, reply.fits()
                               ? "the group fits the budget at its current "
                                 "counts\n"
                               : "the group does NOT fit the budget at its "
                                 "current counts: a bucket's headroom is "
                                 "negative\n");
  } else if (reply.dry_run()) {
    absl::StrAppend(&text, "dry run: nothing written\n");
  }
  return text;
}

std::string FormatDescribe(const v1::DescribeArtifactResponse& reply) {
  std::string text = Field(
      "artifact", ArtifactWithLink(reply.artifact(), reply.link_target()));
  text += Field(
      "model",
      absl::StrFormat("%s, %s, max_seq_len %d, block size %d, batch %d",
                      reply.cls_name(), reply.attn_impl(), reply.max_seq_len(),
                      reply.kvcache_block_size(), reply.batch_size()));
  std::string npu = absl::StrFormat(
      "%s, %d node%s", reply.npu().empty() ? "NPU unknown" : reply.npu(),
      reply.num_nodes(), reply.num_nodes() == 1 ? "" : "s");
  if (reply.memory_per_node()) {
    absl::StrAppend(&npu, ", memory reported per node (older compiler)");
  } else {
    absl::StrAppend(&npu, " x ", reply.chiplets_per_node(), " chiplet",
                    reply.chiplets_per_node() == 1 ? "" : "s");
  }
  if (!reply.dram_source().empty()) {
    absl::StrAppend(&npu, " (DRAM: ", reply.dram_source(), ")");
  }
  text += Field("npu", npu);
  if (!reply.submodule().empty()) {
    text += Field("decoder", absl::StrCat("submodule '", reply.submodule(),
                                          "' (", reply.submodule(), "/)"));
  }
  text += Field("kv blocks",
                absl::StrFormat(
                    "current %d, compiled %s, full %d, min %d, max fitting %d",
                    reply.kvcache_num_blocks(),
                    reply.compiled_num_blocks() == 0
                        ? std::string("unknown")
                        : absl::StrCat(reply.compiled_num_blocks()),
                    reply.num_full_blocks(), reply.num_min_blocks(),
                    reply.max_fitting_num_blocks()));
  text += Field("kv tensors", absl::StrFormat("%d resizable, %d fixed",
                                              reply.resizable_kv_tensors(),
                                              reply.fixed_kv_tensors()));
  std::vector<std::string> graphs;
  std::vector<std::string> codecs;
  uint64_t file_bytes = 0;
  for (const v1::GraphInfo& g : reply.graphs()) {
    graphs.push_back(g.compiled_model_name());
    file_bytes += g.file_bytes();
    if (!g.codec().empty() &&
        std::find(codecs.begin(), codecs.end(), g.codec()) == codecs.end()) {
      codecs.push_back(g.codec());
    }
  }
  std::string graph_text = absl::StrFormat(
      "%s (%s GiB in files", absl::StrJoin(graphs, ", "), GiB(file_bytes));
  if (!codecs.empty()) {
    absl::StrAppend(&graph_text, "; codec ", absl::StrJoin(codecs, ", "));
  }
  text += Field("graphs", graph_text + ")");
  absl::StrAppend(&text,
                  reply.memory_per_node()
                      ? "\nmemory per node in GiB, KV at "
                      : "\nmemory per node and chiplet in GiB, KV at ",
                  reply.kvcache_num_blocks(), " blocks:\n");
  std::vector<std::vector<std::string>> rows;
  for (const v1::BucketPlan& b : reply.buckets()) {
    rows.push_back({absl::StrCat(b.node()), absl::StrCat(b.chiplet()),
                    GiB(b.available_bytes()), GiB(b.other_bytes()),
                    GiB(b.kv_bytes()), GiB(b.kv_bytes_per_block()),
                    SignedGiB(b.headroom_bytes())});
  }
  text += RenderTable({{"NODE", true},
                       {"CHIPLET", true},
                       {"AVAILABLE", true},
                       {"OTHER", true},
                       {"KV", true},
                       {"PER BLOCK", true},
                       {"HEADROOM", true}},
                      rows);
  if (!reply.devices().empty()) {
    std::vector<std::string> devices;
    for (const v1::Device& d : reply.devices()) {
      devices.push_back(absl::StrCat(
          d.device_node().empty() ? absl::StrCat("npu ", d.index())
                                  : d.device_node(),
          " ", GiB(d.used_bytes()), " used, ", GiB(d.free_bytes()), " free"));
    }
    absl::StrAppend(&text, "\n",
                    Field("devices now (GiB)", absl::StrJoin(devices, "; ")));
  }
  return text + FormatVerified(reply);
}

void ListTotals::Add(const v1::ListArtifactsResponse& page) {
  any_artifacts = any_artifacts || page.artifacts_size() > 0;
  skipped.insert(skipped.end(), page.skipped().begin(), page.skipped().end());
  not_readable += page.not_readable();
}

std::string FormatListPage(const v1::ListArtifactsResponse& page, bool first) {
  std::string text = first ? FormatRoots(page.store(), page.roots()) : "";
  if (page.artifacts_size() == 0) return text;
  bool any_error = std::any_of(
      page.artifacts().begin(), page.artifacts().end(),
      [](const v1::ArtifactSummary& a) { return !a.error().empty(); });
  std::vector<Column> columns = {
      {"ARTIFACT"}, {"BLOCKS", true}, {"NPU"}, {"NODES", true}, {"CLASS"}};
  if (any_error) columns.push_back({"ERROR"});
  std::vector<std::vector<std::string>> rows;
  for (const v1::ArtifactSummary& a : page.artifacts()) {
    const std::string name = ArtifactWithLink(a.artifact(), a.link_target());
    if (!a.error().empty()) {
      rows.push_back({name, "-", "-", "-", "-", a.error()});
      continue;
    }
    rows.push_back({name, absl::StrCat(a.kvcache_num_blocks()), a.npu(),
                    absl::StrCat(a.num_nodes()), a.cls_name()});
  }
  std::string table = RenderTable(columns, rows);
  if (!first) table.erase(0, table.find('\n') + 1);
  return text + table;
}

std::string FormatListEnd(const ListTotals& totals) {
  std::string text = totals.any_artifacts ? "" : "(no artifacts)\n";
  if (!totals.skipped.empty()) {
    absl::StrAppend(&text, "skipped ", totals.skipped.size(), ":\n");
    for (const v1::SkippedEntry& entry : totals.skipped) {
      absl::StrAppend(&text, "  ", entry.artifact(), ": ", entry.reason(),
                      "\n");
    }
  }
  if (totals.not_readable > 0) {
    absl::StrAppend(&text, "left out ", totals.not_readable,
                    " artifact(s) you cannot read yourself (ask their owner, "
                    "or for operator rights: rbln-artifactd --operators)\n");
  }
  return text;
}

std::string FormatList(const v1::ListArtifactsResponse& reply) {
  ListTotals totals;
  totals.Add(reply);
  return FormatListPage(reply, true) + FormatListEnd(totals);
}

std::string FormatDeviceInfo(const v1::GetDeviceInfoResponse& reply) {
  std::string text = absl::StrCat("source: ", reply.source(), "\n");
  if (reply.devices_size() == 0) return text + "(no devices)\n";
  std::vector<std::vector<std::string>> rows;
  for (const v1::Device& d : reply.devices()) {
    rows.push_back(
        {d.index() < 0 ? "-" : absl::StrCat(d.index()), d.name(), d.family(),
         d.device_node().empty() ? "-" : d.device_node(), GiB(d.total_bytes()),
         GiB(d.used_bytes()), GiB(d.available_bytes()),
         // 0: a probed device the spec table does not know.
         d.chiplets() == 0 ? "-" : absl::StrCat(d.chiplets()), d.source()});
  }
  return text + RenderTable({{"INDEX", true},
                             {"NAME"},
                             {"FAMILY"},
                             {"DEVICE"},
                             {"TOTAL GiB", true},
                             {"USED GiB", true},
                             {"AVAILABLE GiB", true},
                             {"CHIPLETS", true},
                             {"SOURCE"}},
                            rows);
}

std::string FormatServerInfo(const v1::GetServerInfoResponse& reply) {
  return absl::StrCat(
      "rbln-artifactd ", reply.version(), " (commit ", reply.commit(), ") on ",
      reply.hostname().empty() ? "an unnamed host" : reply.hostname(), "\n",
      FormatRoots(reply.store(), reply.roots()),
      "listeners: ", absl::StrJoin(reply.listeners(), ", "), "\n",
      "codec: ", reply.codec(), "\n", "you are: ", reply.caller(), " (",
      reply.role(), ")\n");
}

std::string FormatWarnings(
    const google::protobuf::RepeatedPtrField<std::string>& warnings) {
  std::string text;
  for (const std::string& w : warnings)
    absl::StrAppend(&text, "warning: ", w, "\n");
  return text;
}

std::string FormatWaitingForLock(const CliOptions& options) {
  std::string names = options.model_id;
  if (!options.output_dir.empty()) {
    absl::StrAppend(&names, " or ", options.output_dir);
  }
  return absl::StrCat("waiting for another write to ", names,
                      " to finish\u2026\n");
}

std::string FormatProgressBar(uint64_t bytes_done, uint64_t bytes_total) {
  constexpr int kWidth = 30;
  double fraction =
      bytes_total == 0
          ? 0.0
          : std::min(1.0, static_cast<double>(bytes_done) / bytes_total);
  int filled = static_cast<int>(fraction * kWidth);
  return absl::StrFormat(
      "\r[%s%s] %3d%%  %s / %s GiB", std::string(filled, '#'),
      std::string(kWidth - filled, '.'), static_cast<int>(fraction * 100),
      GiB(bytes_done), GiB(bytes_total));
}

}  // namespace rbln::client
