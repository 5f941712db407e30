// Artifact: a compiled model directory (rbln_config.json, one `.rbln`
// container per compiled graph, and companion files we never change), opened
// and checked for internal agreement (docs/memory-model.md).
//
// Opening reads rbln_config.json and the header of every container; it never
// reads a payload unless ArtifactOptions::verify_payload is set. An Artifact
// is a snapshot: it does not notice later changes to the directory.
//
// Thread-safe after construction (immutable).
#ifndef RBLN_CORE_FORMAT_ARTIFACT_H_
#define RBLN_CORE_FORMAT_ARTIFACT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/env.h"
#include "core/format/container.h"
#include "core/format/rbln_config.h"

namespace rbln {

inline constexpr char kPrefillGraphName[] = "prefill";
// rbln_config.json larger than this is refused (real ones are a few KiB; a
// multimodal one some tens of KiB).
inline constexpr uint64_t kMaxConfigBytes = 1 << 20;

struct ContainerFile {
  std::string file_name;  // "prefill.rbln"
  Container container;
};

struct ArtifactOptions {
  // Also stream every payload and check its segment checksums.
  bool verify_payload = false;
};

class Artifact {
 public:
  // Opens `dir` and checks, with an error naming the file at fault:
  //  * rbln_config.json parses (ParseRblnConfig) and at least one `*.rbln`
  //    exists (NOT_FOUND when `dir` or the config is missing);
  //  * every container reads (ReadContainer) and its file name is its
  //    compiled_model_name plus ".rbln";
  //  * a `prefill` graph exists (FAILED_PRECONDITION);
  //  * all containers agree on NPU, node and chiplet counts, compiled count,
  //    and declare the same KV tensors (name, resizable flag, bytes on each
  //    node and chiplet) as prefill.rbln (DATA_LOSS);
  //  * the config agrees: num_devices equals the node count, its npu (when
  //    given) the containers', its kvcache_metas names (when given) the KV
  //    tensor names (FAILED_PRECONDITION);
  //  * at least one KV tensor is resizable (FAILED_PRECONDITION) and every
  //    resizable tensor's bytes divide by the current count (DATA_LOSS).
  static absl::StatusOr<Artifact> Open(Env* env, const std::string& dir,
                                       const ArtifactOptions& options = {});

  const std::string& dir() const { return dir_; }
  // The directory as it was opened (its device and inode name it).
  const FileStat& dir_stat() const { return dir_stat_; }
  const RblnConfig& config() const { return config_; }
  // The exact text of rbln_config.json as read.
  const std::string& config_text() const { return config_text_; }
  // Sorted by file name.
  const std::vector<ContainerFile>& containers() const { return containers_; }
  const ContainerFile& prefill() const { return containers_[prefill_index_]; }
  // Names of the entries of dir() that are neither rbln_config.json nor a
  // container (config.json, tokenizer files, ...), sorted.
  const std::vector<std::string>& companion_files() const {
    return companions_;
  }

  // The target NPU: the config's when it names one, else the containers'.
  const std::string& npu() const { return npu_; }
  uint32_t num_nodes() const;
  uint32_t chiplets_per_node() const;
  uint64_t current_num_blocks() const { return config_.kvcache_num_blocks; }
  uint64_t compiled_num_blocks() const;

 private:
  Artifact() = default;
  absl::Status CheckAgreement() const;

  std::string dir_;
  FileStat dir_stat_{};
  RblnConfig config_;
  std::string config_text_;
  std::vector<ContainerFile> containers_;
  size_t prefill_index_ = 0;
  std::vector<std::string> companions_;
  std::string npu_;
};

}  // namespace rbln

#endif  // RBLN_CORE_FORMAT_ARTIFACT_H_
