// Artifact: a compiled model directory as optimum-rbln saves it
// (rbln_config.json, one `.rbln` file per compiled graph, and companion files
// we never change), flat or with the decoder in a submodule's subfolder
// (docs/memory-model.md), opened and checked for the agreement that page
// lists. The graphs are read through codecs (core/format/codec.h);
// opening inspects every graph (through the inspect cache when one is given)
// and reads no payload unless ArtifactOptions::verify_payload is set. An
// Artifact is a snapshot: it does not notice later changes to the directory.
// ReadArtifactSummary reads rbln_config.json alone (Get and List need no
// codec).
//
// Thread-safe after construction (immutable).
#ifndef RBLN_CORE_FORMAT_ARTIFACT_H_
#define RBLN_CORE_FORMAT_ARTIFACT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/format/codec.h"
#include "core/format/container.h"
#include "core/format/inspect_cache.h"
#include "core/format/rbln_config.h"
#include "core/os/env.h"
#include "core/os/freshness.h"

namespace rbln {

inline constexpr char kPrefillGraphName[] = "prefill";
// rbln_config.json larger than this is refused (real ones are a few KiB; a
// multimodal one some tens of KiB).
inline constexpr uint64_t kMaxConfigBytes = 1 << 20;

struct ContainerFile {
  std::string file_name;  // "prefill.rbln"
  std::string path;       // in Artifact::graph_dir()
  FileStat stat{};
  // The codec that read it (and that rescales it), and what it said.
  ContainerCodec* codec = nullptr;
  std::shared_ptr<const ContainerFacts> facts;

  // The graph's name: the file name without ".rbln".
  std::string graph_name() const;
  // The bytes a rescale copies: the payload when the codec knows it, else
  // the whole file.
  uint64_t copy_bytes() const {
    return facts->payload_bytes != 0 ? facts->payload_bytes : stat.size;
  }
};

// A KV tensor of the artifact (prefill's), resizable or fixed as the config
// (and, for the built-in container, the file) says.
struct KvTensor {
  std::string name;
  bool resizable = false;
  std::vector<uint64_t> bytes;  // per bucket, at the current count
};

struct ArtifactOptions {
  // Also stream every payload of a built-in container and check its segment
  // checksums (an external codec's files have none to check).
  bool verify_payload = false;
  // Reads files the built-in codec does not recognise; null: such a file is
  // an error that says how to configure one.
  ContainerCodec* external_codec = nullptr;
  // Where inspect results are kept between requests; null: none.
  InspectCache* inspect_cache = nullptr;
  // Tells which files may change unseen (Freshness::MayChangeUnseen; the
  // Freshness of the paths `env` takes); null: none is taken to.
  Freshness* freshness = nullptr;
};

class Artifact {
 public:
  // Opens `dir` and checks, with an error naming the file at fault:
  //  * rbln_config.json parses (ParseRblnConfig), lists the KV tensors
  //    (RequireCacheMetas), and its graph directory holds at least one
  //    `*.rbln` (NOT_FOUND when `dir` or the config is missing);
  //  * for a multimodal artifact, the submodule's own rbln_config.json (when
  //    present) agrees with the nested count;
  //  * every graph is read by a codec; a built-in container's
  //    compiled_model_name matches its file name;
  //  * a `prefill` graph exists (FAILED_PRECONDITION);
  //  * all graphs agree on granularity, node and bucket counts, NPU and
  //    compiled count (where known), and declare the same KV tensors with the
  //    same bytes as prefill (DATA_LOSS);
  //  * the config agrees: num_devices equals the node count, its npu (when
  //    given) the graphs', its KV tensor list the tensors' names and (for the
  //    built-in container) resizability (FAILED_PRECONDITION);
  //  * at least one KV tensor is resizable (FAILED_PRECONDITION) and every
  //    resizable tensor's bytes divide by the current count (DATA_LOSS).
  static absl::StatusOr<Artifact> Open(Env* env, const std::string& dir,
                                       const ArtifactOptions& options = {});

  const std::string& dir() const { return dir_; }
  // The directory as it was opened (its device and inode name it).
  const FileStat& dir_stat() const { return dir_stat_; }
  // The decoder's config (for a multimodal artifact, the nested one).
  const RblnConfig& config() const { return config_; }
  // The exact text of rbln_config.json (the top directory's) as read.
  const std::string& config_text() const { return config_text_; }
  // "" for a flat artifact, else the submodule holding the decoder.
  const std::string& submodule() const { return config_.decoder_submodule; }
  // Where the graphs are: dir(), or dir()/submodule().
  const std::string& graph_dir() const { return graph_dir_; }
  // graph_dir() as the graphs were read from it (ArtifactCache compares it).
  const FileStat& graph_dir_stat() const { return graph_dir_stat_; }
  // A file this was read from may change without its status changing
  // (Freshness::MayChangeUnseen: open for writing somewhere when it was
  // read, or on a tmpfs), so ArtifactCache does not keep this, and such
  // graphs were inspected without the inspect cache.
  bool may_change_unseen() const { return may_change_unseen_; }
  // The submodule's own rbln_config.json, when it has one.
  const std::optional<std::string>& submodule_config_text() const {
    return submodule_config_text_;
  }
  // Sorted by file name.
  const std::vector<ContainerFile>& containers() const { return containers_; }
  const ContainerFile& prefill() const { return containers_[prefill_index_]; }
  // prefill's KV tensors, in its order.
  const std::vector<KvTensor>& kv_tensors() const { return kv_tensors_; }
  // Entries of dir() that are neither rbln_config.json, nor a graph, nor the
  // submodule's directory (config.json, tokenizer files, another
  // submodule's directory, ...), sorted.
  const std::vector<std::string>& companion_files() const {
    return companions_;
  }
  // Entries of graph_dir() other than graphs and its rbln_config.json, for a
  // multimodal artifact; empty for a flat one.
  const std::vector<std::string>& submodule_companion_files() const {
    return submodule_companions_;
  }

  // The target NPU: the config's when it names one (`npu`, else
  // `_compile_cfgs[i].npu`), else the prefill graph's header when a codec
  // knows it, else "" (the device provider may then resolve it from the
  // host, core/device/dram.h).
  const std::string& npu() const { return npu_; }
  // Where npu() came from, for people: "rbln_config.json's npu",
  // "rbln_config.json's _compile_cfgs[0].npu", "prefill.rbln's header";
  // "" when npu() is "".
  const std::string& npu_source() const { return npu_source_; }
  uint32_t num_nodes() const;
  BucketGranularity granularity() const;
  // Buckets per node: chiplets per node, or 1 for BucketGranularity::kNode.
  uint32_t buckets_per_node() const;
  uint64_t current_num_blocks() const { return config_.kvcache_num_blocks; }
  // The count the graphs were compiled with; 0 when no codec can tell.
  uint64_t compiled_num_blocks() const;
  // What ArtifactOptions::verify_payload checked when this was opened
  // (VerifyPayloads); nullopt when it was not asked for.
  const std::optional<VerifiedPayload>& verified_payload() const {
    return verified_payload_;
  }

 private:
  Artifact() = default;
  // Reads and inspects every graph, then takes the prefill graph's facts.
  absl::Status ReadGraphs(Env* env, const ArtifactOptions& options);
  // A submodule layout: the top directory's companions and the decoder's own
  // copy of its config, which must agree on kvcache_num_blocks.
  // `freshness` as ArtifactOptions::freshness.
  absl::Status ReadSubmodule(Env* env, Freshness* freshness);
  // Inspects each `.rbln` file of graph_dir_ through its codec (and the
  // inspect cache); every other file is a companion.
  absl::Status InspectGraphs(Env* env, const ArtifactOptions& options);
  // Finds the prefill graph, the NPU and where it was read, and the KV
  // tensors with rbln_config.json's word on which are resizable.
  absl::Status TakePrefillFacts();
  // Every graph agrees with the prefill graph, the config with the prefill
  // graph, and the resizable tensors divide by the current block count.
  absl::Status CheckAgreement() const;
  absl::Status CheckGraphsAgree() const;
  absl::Status CheckConfigAgrees() const;
  absl::Status CheckBlocksDivide() const;
  // rbln_config.json's path for messages, with the submodule's key.
  std::string ConfigPathForMessages() const;

  std::string dir_;
  FileStat dir_stat_{};
  RblnConfig config_;
  std::string config_text_;
  std::string graph_dir_;
  FileStat graph_dir_stat_{};
  bool may_change_unseen_ = false;
  std::optional<std::string> submodule_config_text_;
  std::vector<ContainerFile> containers_;
  size_t prefill_index_ = 0;
  std::vector<KvTensor> kv_tensors_;
  std::vector<std::string> companions_;
  std::vector<std::string> submodule_companions_;
  std::string npu_;
  std::string npu_source_;
  std::optional<VerifiedPayload> verified_payload_;
};

// What Get and List report: rbln_config.json alone, plus what the built-in
// codec can read cheaply from the prefill graph's header.
struct ArtifactSummary {
  RblnConfig config;
  // The config's npu, else the built-in prefill header's, else "".
  std::string npu;
  // From the built-in prefill header; 0 when unknown (no such header).
  uint64_t compiled_num_blocks = 0;
  // The directory's status when the read began, and the graph directory's
  // (the same but for a submodule) before its graphs were read: ArtifactCache
  // compares them.
  FileStat dir_stat{};
  FileStat graph_dir_stat{};
  // As Artifact::may_change_unseen.
  bool may_change_unseen = false;
};

// Reads `dir`'s rbln_config.json (NOT_FOUND when `dir` or the config is
// missing; the config's own errors as ParseRblnConfig). Never fails because
// of a graph file: what cannot be read from one is reported unknown.
// `freshness` (may be null) tells may_change_unseen, as
// ArtifactOptions::freshness does.
absl::StatusOr<ArtifactSummary> ReadArtifactSummary(
    Env* env, const std::string& dir, Freshness* freshness = nullptr);

// Streams the payload of every built-in container of `artifact` through `env`
// and checks its segment checksums (VerifyPayload); returns the segments and
// bytes checked, summed. Files of an external codec have no checksums to
// check: they are skipped, and not counted.
absl::StatusOr<VerifiedPayload> VerifyPayloads(Env* env,
                                               const Artifact& artifact);

}  // namespace rbln

#endif  // RBLN_CORE_FORMAT_ARTIFACT_H_
