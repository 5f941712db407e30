#include "core/format/artifact.h"

#include <algorithm>
#include <cerrno>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/error_facts.h"
#include "core/status_macros.h"

namespace rbln {
namespace {

// NOT_FOUND `status`, with the facts that say so to programs (the store
// names the artifact).
absl::Status NotAnArtifact(absl::Status status) {
  return WithErrorFacts(std::move(status),
                        {.reason = ErrorReason::kArtifactNotFound});
}

// A KV tensor as (resizable, sorted (node, chiplet, bytes)): two containers
// agree on a tensor when these are equal.
using PlacementKey = std::tuple<uint32_t, uint32_t, uint64_t>;
struct TensorShape {
  bool resizable;
  std::vector<PlacementKey> placements;
  bool operator==(const TensorShape& other) const {
    return resizable == other.resizable && placements == other.placements;
  }
};

std::map<std::string, TensorShape> KvTensorShapes(
    const v1::ContainerHeader& header) {
  std::map<std::string, TensorShape> shapes;
  for (const v1::KvTensor& tensor : header.kv_tensors()) {
    TensorShape& shape = shapes[tensor.name()];
    shape.resizable = tensor.resizable();
    for (const v1::Placement& p : tensor.placements()) {
      shape.placements.emplace_back(p.node(), p.chiplet(), p.bytes());
    }
    std::sort(shape.placements.begin(), shape.placements.end());
  }
  return shapes;
}

std::string DescribeShape(const TensorShape& shape) {
  std::vector<std::string> parts;
  for (const auto& [node, chiplet, bytes] : shape.placements) {
    parts.push_back(absl::StrCat("node ", node, " chiplet ", chiplet, ": ",
                                 bytes, " bytes"));
  }
  return absl::StrCat(shape.resizable ? "resizable" : "fixed", " (",
                      absl::StrJoin(parts, ", "), ")");
}

}  // namespace

absl::StatusOr<Artifact> Artifact::Open(Env* env, const std::string& dir,
                                        const ArtifactOptions& options) {
  Artifact artifact;
  artifact.dir_ = dir;

  absl::StatusOr<FileStat> dir_stat = env->Stat(dir);
  if (absl::IsNotFound(dir_stat.status())) {
    return NotAnArtifact(
        absl::NotFoundError(absl::StrCat("no artifact directory at ", dir)));
  }
  RBLN_RETURN_IF_ERROR(dir_stat.status());
  if (dir_stat->type == FileType::kSymlink) {
    return ErrnoToStatus("open", dir, ELOOP);
  }
  if (dir_stat->type != FileType::kDirectory) {
    return NotAnArtifact(absl::NotFoundError(
        absl::StrCat("no artifact directory at ", dir, " (not a directory)")));
  }
  artifact.dir_stat_ = *dir_stat;
  const std::string config_path = JoinPath(dir, kRblnConfigFileName);
  absl::StatusOr<std::string> text =
      env->ReadFileToString(config_path, kMaxConfigBytes);
  if (absl::IsNotFound(text.status())) {
    return NotAnArtifact(absl::NotFoundError(absl::StrCat(
        dir, " is not a compiled artifact: it has no ", kRblnConfigFileName)));
  }
  RBLN_RETURN_IF_ERROR(text.status());
  artifact.config_text_ = *std::move(text);
  RBLN_ASSIGN_OR_RETURN(artifact.config_,
                        ParseRblnConfig(artifact.config_text_, config_path));

  RBLN_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, env->ListDir(dir));
  for (const DirEntry& entry : entries) {
    if (entry.name == kRblnConfigFileName) continue;
    if (!absl::EndsWith(entry.name, kContainerExtension)) {
      artifact.companions_.push_back(entry.name);
      continue;
    }
    const std::string path = JoinPath(dir, entry.name);
    // Refuses anything but a regular file, saying what it is.
    RBLN_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                          env->NewRandomAccessFile(path));
    RBLN_ASSIGN_OR_RETURN(Container container, ReadContainer(*file));
    if (options.verify_payload) {
      RBLN_RETURN_IF_ERROR(VerifyPayload(*file, container));
    }
    const std::string expected_name = absl::StrCat(
        container.header.compiled_model_name(), kContainerExtension);
    if (entry.name != expected_name) {
      return absl::DataLossError(
          absl::StrCat(path, " holds compiled graph '",
                       container.header.compiled_model_name(),
                       "', expected a file named ", expected_name));
    }
    artifact.containers_.push_back({entry.name, std::move(container)});
  }
  if (artifact.containers_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " has no compiled graphs (*.rbln): nothing to resize"));
  }
  const auto prefill = std::find_if(
      artifact.containers_.begin(), artifact.containers_.end(),
      [](const ContainerFile& f) {
        return f.container.header.compiled_model_name() == kPrefillGraphName;
      });
  if (prefill == artifact.containers_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir,
                     " has no prefill graph (prefill.rbln); only decoder-only "
                     "artifacts with a prefill graph can be resized"));
  }
  artifact.prefill_index_ =
      static_cast<size_t>(prefill - artifact.containers_.begin());
  artifact.npu_ = artifact.config_.npu.empty()
                      ? artifact.prefill().container.header.npu()
                      : artifact.config_.npu;
  RBLN_RETURN_IF_ERROR(artifact.CheckAgreement());
  return artifact;
}

absl::Status Artifact::CheckAgreement() const {
  const ContainerFile& reference = prefill();
  const v1::ContainerHeader& ref = reference.container.header;
  const std::map<std::string, TensorShape> ref_shapes = KvTensorShapes(ref);
  const std::string ref_path = JoinPath(dir_, reference.file_name);

  for (const ContainerFile& file : containers_) {
    const v1::ContainerHeader& header = file.container.header;
    const std::string path = JoinPath(dir_, file.file_name);
    if (!absl::EqualsIgnoreCase(header.npu(), ref.npu()) ||
        header.num_nodes() != ref.num_nodes() ||
        header.chiplets_per_node() != ref.chiplets_per_node()) {
      return absl::DataLossError(absl::StrCat(
          "inconsistent artifact: ", path, " targets ", header.npu(), " with ",
          header.num_nodes(), " node(s) x ", header.chiplets_per_node(),
          " chiplet(s) but ", ref_path, " targets ", ref.npu(), " with ",
          ref.num_nodes(), " x ", ref.chiplets_per_node()));
    }
    if (header.kv_resize().compiled_num_blocks() !=
        ref.kv_resize().compiled_num_blocks()) {
      return absl::DataLossError(absl::StrCat(
          "inconsistent artifact: ", path, " was compiled with ",
          header.kv_resize().compiled_num_blocks(), " KV-cache blocks but ",
          ref_path, " with ", ref.kv_resize().compiled_num_blocks()));
    }
    const std::map<std::string, TensorShape> shapes = KvTensorShapes(header);
    for (const auto& [name, shape] : shapes) {
      auto it = ref_shapes.find(name);
      if (it == ref_shapes.end()) {
        return absl::DataLossError(absl::StrCat(
            "inconsistent artifact: ", path, " declares KV tensor '", name,
            "' that ", ref_path, " does not"));
      }
      if (!(it->second == shape)) {
        return absl::DataLossError(
            absl::StrCat("inconsistent artifact: KV tensor '", name, "' is ",
                         DescribeShape(shape), " in ", path, " but ",
                         DescribeShape(it->second), " in ", ref_path));
      }
    }
    for (const auto& [name, shape] : ref_shapes) {
      if (shapes.count(name) == 0) {
        return absl::DataLossError(
            absl::StrCat("inconsistent artifact: ", path, " lacks KV tensor '",
                         name, "' that ", ref_path, " declares"));
      }
    }
  }

  const std::string config_path = JoinPath(dir_, kRblnConfigFileName);
  if (config_.num_devices != ref.num_nodes()) {
    return absl::FailedPreconditionError(absl::StrCat(
        config_path, " says num_devices ", config_.num_devices, " but ",
        ref_path, " was compiled for ", ref.num_nodes(), " node(s)"));
  }
  if (!config_.npu.empty() && !absl::EqualsIgnoreCase(config_.npu, ref.npu())) {
    return absl::FailedPreconditionError(
        absl::StrCat(config_path, " says npu ", config_.npu, " but ", ref_path,
                     " was compiled for ", ref.npu()));
  }
  if (!config_.kvcache_metas.empty()) {
    std::set<std::string> meta_names;
    for (const KvcacheMeta& meta : config_.kvcache_metas) {
      meta_names.insert(meta.name);
    }
    for (const auto& [name, shape] : ref_shapes) {
      if (meta_names.count(name) == 0) {
        return absl::FailedPreconditionError(
            absl::StrCat(ref_path, " declares KV tensor '", name,
                         "' that kvcache_metas in ", config_path, " lacks"));
      }
      meta_names.erase(name);
    }
    if (!meta_names.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "kvcache_metas in ", config_path, " lists KV tensor '",
          *meta_names.begin(), "' that ", ref_path, " does not declare"));
    }
  }

  const uint64_t current = config_.kvcache_num_blocks;
  bool any_resizable = false;
  for (const v1::KvTensor& tensor : ref.kv_tensors()) {
    if (!tensor.resizable()) continue;
    any_resizable = true;
    for (const v1::Placement& p : tensor.placements()) {
      if (p.bytes() % current != 0) {
        return absl::DataLossError(absl::StrCat(
            "corrupt artifact: KV tensor '", tensor.name(), "' in ", ref_path,
            " holds ", p.bytes(), " bytes on node ", p.node(), " chiplet ",
            p.chiplet(), ", not a multiple of kvcache_num_blocks ", current,
            " in ", config_path));
      }
    }
  }
  if (!any_resizable) {
    return absl::FailedPreconditionError(absl::StrCat(
        ref_path,
        " has no resizable KV-cache tensor (its block count was fixed at "
        "compile time); recompile with an automatic kvcache_num_blocks"));
  }
  return absl::OkStatus();
}

uint32_t Artifact::num_nodes() const {
  return prefill().container.header.num_nodes();
}

uint32_t Artifact::chiplets_per_node() const {
  return prefill().container.header.chiplets_per_node();
}

uint64_t Artifact::compiled_num_blocks() const {
  return prefill().container.header.kv_resize().compiled_num_blocks();
}

}  // namespace rbln
