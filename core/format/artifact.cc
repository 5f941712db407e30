#include "core/format/artifact.h"

#include <algorithm>
#include <cerrno>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "core/error_facts.h"
#include "core/format/builtin_codec.h"
#include "core/format/container.h"
#include "core/status_macros.h"

namespace rbln {
namespace {

// NOT_FOUND `status`, with the facts that say so to programs (the store
// names the artifact).
absl::Status NotAnArtifact(absl::Status status) {
  return WithErrorFacts(std::move(status),
                        {.reason = ErrorReason::kArtifactNotFound});
}

// The directory and its rbln_config.json, read and parsed.
struct OpenedConfig {
  FileStat dir_stat{};
  std::string text;
  RblnConfig config;
  std::string graph_dir;
  // Before the graphs are read; zero when it cannot be looked at.
  FileStat graph_dir_stat{};
  // rbln_config.json may change unseen (Freshness::MayChangeUnseen).
  bool may_change_unseen = false;
};

// Whether `path` may change unseen, where `freshness` (may be null) tells.
bool MayChangeUnseen(Freshness* freshness, const std::string& path) {
  return freshness != nullptr && freshness->MayChangeUnseen(path);
}

absl::StatusOr<OpenedConfig> OpenConfig(Env* env, const std::string& dir,
                                        Freshness* freshness) {
  OpenedConfig opened;
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
  opened.dir_stat = *dir_stat;
  const std::string config_path = JoinPath(dir, kRblnConfigFileName);
  // Asked before the read: a writer that comes later must fault a page of
  // its mapping in to write, which sets the file's times (but on a tmpfs,
  // which MayChangeUnseen answers for), and ArtifactCache's racy rule sees
  // them.
  opened.may_change_unseen = MayChangeUnseen(freshness, config_path);
  absl::StatusOr<std::string> text =
      env->ReadFileToString(config_path, kMaxConfigBytes);
  if (absl::IsNotFound(text.status())) {
    return NotAnArtifact(absl::NotFoundError(absl::StrCat(
        dir, " is not a compiled artifact: it has no ", kRblnConfigFileName)));
  }
  RBLN_RETURN_IF_ERROR(text.status());
  opened.text = *std::move(text);
  RBLN_ASSIGN_OR_RETURN(opened.config,
                        ParseRblnConfig(opened.text, config_path));
  if (opened.config.decoder_submodule.empty()) {
    opened.graph_dir = dir;
    opened.graph_dir_stat = opened.dir_stat;
  } else {
    opened.graph_dir = JoinPath(dir, opened.config.decoder_submodule);
    absl::StatusOr<FileStat> graph_dir_stat = env->Stat(opened.graph_dir);
    if (graph_dir_stat.ok()) opened.graph_dir_stat = *graph_dir_stat;
  }
  return opened;
}

// The first bytes of `file`, enough to tell the built-in container.
absl::StatusOr<std::string> FirstBytes(const RandomAccessFile& file) {
  std::string bytes(kCodecSniffBytes, '\0');
  RBLN_ASSIGN_OR_RETURN(
      size_t n, file.ReadAt(0, absl::MakeSpan(bytes.data(), bytes.size())));
  bytes.resize(n);
  return bytes;
}

// The same of `path`, opened through `env`.
absl::StatusOr<std::string> Sniff(Env* env, const std::string& path) {
  // Refuses anything but a regular file, saying what it is.
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                        env->NewRandomAccessFile(path));
  return FirstBytes(*file);
}

// The codec for a file that starts with `first_bytes`.
absl::StatusOr<ContainerCodec*> ChooseCodec(const std::string& path,
                                            absl::string_view first_bytes,
                                            ContainerCodec* external) {
  if (LooksLikeBuiltinContainer(first_bytes)) return BuiltinContainerCodec();
  if (external != nullptr) return external;
  return absl::FailedPreconditionError(absl::StrCat(
      path, " is not an .rbln container of this project (it starts with \"",
      absl::CHexEscape(first_bytes),
      "\"), and no external codec is configured to read it. For a model "
      "compiled by rebel-compiler, start rbln-artifactd with --codec-command "
      "running the rebel adapter (rbln_codec_rebel.py) on a host where "
      "rebel-compiler is installed; see docs/real-artifacts.md"));
}

// Inspects `path` with `codec`, through `cache` when given: a file whose
// identity is unchanged since it was inspected is not read again.
absl::StatusOr<std::shared_ptr<const ContainerFacts>> InspectCached(
    Env* env, const std::string& path, const FileStat& before,
    ContainerCodec* codec, InspectCache* cache) {
  const std::string codec_name = codec->name();
  const FileIdentity id = FileIdentity::Of(before);
  if (cache != nullptr) {
    if (auto facts = cache->Find(codec_name, id)) return facts;
  }
  const absl::Time start = absl::Now();
  RBLN_ASSIGN_OR_RETURN(ContainerFacts facts, codec->Inspect(env, path));
  auto shared = std::make_shared<const ContainerFacts>(std::move(facts));
  if (cache != nullptr) {
    // Kept only when the file did not change while it was read.
    absl::StatusOr<FileStat> after = env->Stat(path);
    if (after.ok() && FileIdentity::Of(*after) == id) {
      cache->Insert(codec_name, id, shared, start);
    }
  }
  return shared;
}

std::string DescribeBytes(const std::vector<uint64_t>& bytes,
                          uint32_t buckets_per_node, BucketGranularity g) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < bytes.size(); ++i) {
    parts.push_back(g == BucketGranularity::kNode
                        ? absl::StrCat("node ", i, ": ", bytes[i])
                        : absl::StrCat("node ", i / buckets_per_node,
                                       " chiplet ", i % buckets_per_node, ": ",
                                       bytes[i]));
  }
  return absl::StrCat("(", absl::StrJoin(parts, ", "), " bytes)");
}

const char* GranularityName(BucketGranularity g) {
  return g == BucketGranularity::kNode ? "per node" : "per chiplet";
}

}  // namespace

std::string ContainerFile::graph_name() const {
  return std::string(
      absl::StripSuffix(absl::string_view(file_name), kContainerExtension));
}

absl::StatusOr<Artifact> Artifact::Open(Env* env, const std::string& dir,
                                        const ArtifactOptions& options) {
  Artifact artifact;
  artifact.dir_ = dir;
  RBLN_ASSIGN_OR_RETURN(OpenedConfig opened,
                        OpenConfig(env, dir, options.freshness));
  artifact.dir_stat_ = opened.dir_stat;
  artifact.graph_dir_stat_ = opened.graph_dir_stat;
  artifact.may_change_unseen_ = opened.may_change_unseen;
  artifact.config_text_ = std::move(opened.text);
  artifact.config_ = std::move(opened.config);
  artifact.graph_dir_ = std::move(opened.graph_dir);
  RBLN_RETURN_IF_ERROR(
      RequireCacheMetas(artifact.config_, JoinPath(dir, kRblnConfigFileName)));
  RBLN_RETURN_IF_ERROR(artifact.ReadGraphs(env, options));
  RBLN_RETURN_IF_ERROR(artifact.CheckAgreement());
  return artifact;
}

absl::Status Artifact::ReadGraphs(Env* env, const ArtifactOptions& options) {
  if (!config_.decoder_submodule.empty()) {
    RBLN_RETURN_IF_ERROR(ReadSubmodule(env, options.freshness));
  }
  RBLN_RETURN_IF_ERROR(InspectGraphs(env, options));
  if (options.verify_payload) {
    RBLN_ASSIGN_OR_RETURN(verified_payload_, VerifyPayloads(env, *this));
  }
  return TakePrefillFacts();
}

absl::Status Artifact::ReadSubmodule(Env* env, Freshness* freshness) {
  const std::string& sub = config_.decoder_submodule;
  // The top directory: everything but the config and the decoder's
  // directory is a companion (other submodules included).
  RBLN_ASSIGN_OR_RETURN(std::vector<DirEntry> top, env->ListDir(dir_));
  bool found = false;
  for (const DirEntry& entry : top) {
    if (entry.name == kRblnConfigFileName) continue;
    if (entry.name == sub) {
      found = entry.type == FileType::kDirectory;
      continue;
    }
    companions_.push_back(entry.name);
  }
  if (!found) {
    return absl::FailedPreconditionError(absl::StrCat(
        JoinPath(dir_, kRblnConfigFileName), " keeps its decoder under '", sub,
        "', but ", graph_dir_,
        " is not a directory; optimum-rbln saves a submodule's graphs "
        "there: copy the whole saved directory"));
  }
  const std::string sub_config = JoinPath(graph_dir_, kRblnConfigFileName);
  may_change_unseen_ =
      MayChangeUnseen(freshness, sub_config) || may_change_unseen_;
  absl::StatusOr<std::string> text =
      env->ReadFileToString(sub_config, kMaxConfigBytes);
  if (text.ok()) {
    RBLN_ASSIGN_OR_RETURN(RblnConfig own, ParseRblnConfig(*text, sub_config));
    if (own.kvcache_num_blocks != config_.kvcache_num_blocks) {
      return absl::FailedPreconditionError(absl::StrCat(
          sub_config, " says kvcache_num_blocks ", own.kvcache_num_blocks,
          " but '", sub, "' in ", JoinPath(dir_, kRblnConfigFileName), " says ",
          config_.kvcache_num_blocks,
          "; the two copies disagree (was one edited by hand?): make them "
          "equal, or save the model again"));
    }
    submodule_config_text_ = *std::move(text);
  } else if (!absl::IsNotFound(text.status())) {
    return text.status();
  }
  return absl::OkStatus();
}

absl::Status Artifact::InspectGraphs(Env* env, const ArtifactOptions& options) {
  const std::string& sub = config_.decoder_submodule;
  RBLN_ASSIGN_OR_RETURN(std::vector<DirEntry> entries,
                        env->ListDir(graph_dir_));
  for (const DirEntry& entry : entries) {
    if (entry.name == kRblnConfigFileName) continue;
    if (!absl::EndsWith(entry.name, kContainerExtension)) {
      (sub.empty() ? companions_ : submodule_companions_).push_back(entry.name);
      continue;
    }
    ContainerFile file;
    file.file_name = entry.name;
    file.path = JoinPath(graph_dir_, entry.name);
    RBLN_ASSIGN_OR_RETURN(file.stat, env->Stat(file.path));
    // Such a file may change under an unchanged identity: what the inspect
    // cache holds for it is not to be trusted, nor kept.
    const bool unseen = MayChangeUnseen(options.freshness, file.path);
    may_change_unseen_ = unseen || may_change_unseen_;
    RBLN_ASSIGN_OR_RETURN(std::string first_bytes, Sniff(env, file.path));
    RBLN_ASSIGN_OR_RETURN(file.codec, ChooseCodec(file.path, first_bytes,
                                                  options.external_codec));
    RBLN_ASSIGN_OR_RETURN(
        file.facts, InspectCached(env, file.path, file.stat, file.codec,
                                  unseen ? nullptr : options.inspect_cache));
    const std::string& graph = file.facts->compiled_model_name;
    if (!graph.empty() && graph != file.graph_name()) {
      return absl::DataLossError(absl::StrCat(
          file.path, " holds compiled graph '", graph,
          "', expected a file named ", graph, kContainerExtension));
    }
    containers_.push_back(std::move(file));
  }
  return absl::OkStatus();
}

absl::Status Artifact::TakePrefillFacts() {
  if (containers_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        graph_dir_, " has no compiled graphs (*.rbln): nothing to resize"));
  }
  const auto prefill = std::find_if(
      containers_.begin(), containers_.end(), [](const ContainerFile& f) {
        return f.graph_name() == kPrefillGraphName;
      });
  if (prefill == containers_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat(graph_dir_,
                     " has no prefill graph (prefill.rbln); only decoder-only "
                     "artifacts with a prefill graph can be resized"));
  }
  prefill_index_ = static_cast<size_t>(prefill - containers_.begin());
  const ContainerFacts& facts = *this->prefill().facts;
  if (!config_.npu.empty()) {
    npu_ = config_.npu;
    npu_source_ = absl::StrCat(kRblnConfigFileName, "'s ", config_.npu_field);
  } else if (!facts.npu.empty()) {
    npu_ = facts.npu;
    npu_source_ = absl::StrCat(this->prefill().file_name, "'s header");
  }
  std::map<std::string, bool> resizable;
  for (const KvcacheMeta& meta : config_.kvcache_metas) {
    resizable[meta.name] = meta.Resizable();
  }
  for (const KvTensorFacts& tensor : facts.kv_tensors) {
    auto it = resizable.find(tensor.name);
    kv_tensors_.push_back(
        {tensor.name,
         it != resizable.end() ? it->second : tensor.resizable.value_or(false),
         tensor.bytes});
  }
  return absl::OkStatus();
}

absl::Status Artifact::CheckAgreement() const {
  RBLN_RETURN_IF_ERROR(CheckGraphsAgree());
  RBLN_RETURN_IF_ERROR(CheckConfigAgrees());
  return CheckBlocksDivide();
}

std::string Artifact::ConfigPathForMessages() const {
  return JoinPath(dir_, kRblnConfigFileName) +
         (config_.decoder_submodule.empty()
              ? ""
              : absl::StrCat(" ('", config_.decoder_submodule, "')"));
}

absl::Status Artifact::CheckGraphsAgree() const {
  const ContainerFile& reference = prefill();
  const ContainerFacts& ref = *reference.facts;
  const std::string& ref_path = reference.path;
  std::map<std::string, const KvTensorFacts*> ref_tensors;
  for (const KvTensorFacts& t : ref.kv_tensors) ref_tensors[t.name] = &t;

  for (const ContainerFile& file : containers_) {
    const ContainerFacts& facts = *file.facts;
    const std::string& path = file.path;
    const bool npu_differs = !facts.npu.empty() && !ref.npu.empty() &&
                             !absl::EqualsIgnoreCase(facts.npu, ref.npu);
    if (npu_differs || facts.granularity != ref.granularity ||
        facts.num_nodes != ref.num_nodes ||
        facts.buckets_per_node != ref.buckets_per_node) {
      return absl::DataLossError(absl::StrCat(
          "inconsistent artifact: ", path, " targets ",
          facts.npu.empty() ? "its NPU" : facts.npu, " with ", facts.num_nodes,
          " node(s) x ", facts.buckets_per_node, " bucket(s) ",
          GranularityName(facts.granularity), " but ", ref_path, " targets ",
          ref.npu.empty() ? "its NPU" : ref.npu, " with ", ref.num_nodes, " x ",
          ref.buckets_per_node, " ", GranularityName(ref.granularity)));
    }
    if (facts.compiled_num_blocks != 0 && ref.compiled_num_blocks != 0 &&
        facts.compiled_num_blocks != ref.compiled_num_blocks) {
      return absl::DataLossError(
          absl::StrCat("inconsistent artifact: ", path, " was compiled with ",
                       facts.compiled_num_blocks, " KV-cache blocks but ",
                       ref_path, " with ", ref.compiled_num_blocks));
    }
    std::set<std::string> seen;
    for (const KvTensorFacts& tensor : facts.kv_tensors) {
      seen.insert(tensor.name);
      auto it = ref_tensors.find(tensor.name);
      if (it == ref_tensors.end()) {
        return absl::DataLossError(absl::StrCat(
            "inconsistent artifact: ", path, " declares KV tensor '",
            tensor.name, "' that ", ref_path, " does not"));
      }
      const KvTensorFacts& r = *it->second;
      const bool flag_differs = tensor.resizable.has_value() &&
                                r.resizable.has_value() &&
                                *tensor.resizable != *r.resizable;
      if (tensor.bytes != r.bytes || flag_differs) {
        return absl::DataLossError(absl::StrCat(
            "inconsistent artifact: KV tensor '", tensor.name, "' is ",
            tensor.resizable.value_or(true) ? "" : "fixed ",
            DescribeBytes(tensor.bytes, facts.buckets_per_node,
                          facts.granularity),
            " in ", path, " but ", r.resizable.value_or(true) ? "" : "fixed ",
            DescribeBytes(r.bytes, ref.buckets_per_node, ref.granularity),
            " in ", ref_path));
      }
    }
    for (const auto& [name, tensor] : ref_tensors) {
      if (seen.count(name) == 0) {
        return absl::DataLossError(
            absl::StrCat("inconsistent artifact: ", path, " lacks KV tensor '",
                         name, "' that ", ref_path, " declares"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Artifact::CheckConfigAgrees() const {
  const ContainerFacts& ref = *prefill().facts;
  const std::string& ref_path = prefill().path;
  const std::string config_path = ConfigPathForMessages();
  if (config_.num_devices != ref.num_nodes) {
    return absl::FailedPreconditionError(absl::StrCat(
        config_path, " says num_devices ", config_.num_devices, " but ",
        ref_path, " was compiled for ", ref.num_nodes, " node(s)"));
  }
  if (!config_.npu.empty() && !ref.npu.empty() &&
      !absl::EqualsIgnoreCase(config_.npu, ref.npu)) {
    return absl::FailedPreconditionError(
        absl::StrCat(config_path, " says npu ", config_.npu, " but ", ref_path,
                     " was compiled for ", ref.npu));
  }
  const std::string& metas = config_.metas_key;
  std::map<std::string, const KvcacheMeta*> listed;
  for (const KvcacheMeta& meta : config_.kvcache_metas) {
    listed[meta.name] = &meta;
  }
  for (const KvTensorFacts& tensor : ref.kv_tensors) {
    auto it = listed.find(tensor.name);
    if (it == listed.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat(ref_path, " declares KV tensor '", tensor.name,
                       "' that ", metas, " in ", config_path, " lacks"));
    }
    if (tensor.resizable.has_value() &&
        *tensor.resizable != it->second->Resizable()) {
      return absl::FailedPreconditionError(absl::StrCat(
          metas, " in ", config_path, " makes KV tensor '", tensor.name, "' ",
          it->second->Resizable() ? "resizable" : "fixed", " but ", ref_path,
          " was compiled with it ", *tensor.resizable ? "resizable" : "fixed",
          "; the config does not belong to these graphs: save the model "
          "again"));
    }
    listed.erase(it);
  }
  if (!listed.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        metas, " in ", config_path, " lists KV tensor '", listed.begin()->first,
        "' that ", ref_path, " does not declare"));
  }
  return absl::OkStatus();
}

absl::Status Artifact::CheckBlocksDivide() const {
  const ContainerFacts& ref = *prefill().facts;
  const std::string& ref_path = prefill().path;
  const std::string config_path = ConfigPathForMessages();
  const uint64_t current = config_.kvcache_num_blocks;
  bool any_resizable = false;
  for (const KvTensor& tensor : kv_tensors_) {
    if (!tensor.resizable) continue;
    any_resizable = true;
    for (size_t b = 0; b < tensor.bytes.size(); ++b) {
      if (tensor.bytes[b] % current != 0) {
        return absl::DataLossError(absl::StrCat(
            "corrupt artifact: KV tensor '", tensor.name, "' in ", ref_path,
            " holds ", tensor.bytes[b], " bytes on node ",
            b / ref.buckets_per_node,
            ref.granularity == BucketGranularity::kNode
                ? std::string()
                : absl::StrCat(" chiplet ", b % ref.buckets_per_node),
            ", not a multiple of kvcache_num_blocks ", current, " in ",
            config_path));
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

uint32_t Artifact::num_nodes() const { return prefill().facts->num_nodes; }

BucketGranularity Artifact::granularity() const {
  return prefill().facts->granularity;
}

uint32_t Artifact::buckets_per_node() const {
  return prefill().facts->buckets_per_node;
}

uint64_t Artifact::compiled_num_blocks() const {
  return prefill().facts->compiled_num_blocks;
}

absl::StatusOr<ArtifactSummary> ReadArtifactSummary(Env* env,
                                                    const std::string& dir,
                                                    Freshness* freshness) {
  RBLN_ASSIGN_OR_RETURN(OpenedConfig opened, OpenConfig(env, dir, freshness));
  ArtifactSummary summary;
  summary.dir_stat = opened.dir_stat;
  summary.graph_dir_stat = opened.graph_dir_stat;
  summary.may_change_unseen = opened.may_change_unseen;
  summary.config = std::move(opened.config);
  summary.npu = summary.config.npu;
  // A graph file that is a symbolic link or a special file is refused as
  // Open refuses it (nothing is followed or opened); what a regular one
  // holds is the codec's business, and never an error here.
  absl::StatusOr<std::vector<DirEntry>> entries =
      env->ListDir(opened.graph_dir);
  if (entries.ok()) {
    for (const DirEntry& entry : *entries) {
      if (entry.type == FileType::kRegular ||
          entry.type == FileType::kDirectory ||
          !absl::EndsWith(entry.name, kContainerExtension)) {
        continue;
      }
      RBLN_RETURN_IF_ERROR(
          env->NewRandomAccessFile(JoinPath(opened.graph_dir, entry.name))
              .status());
    }
  }
  // The built-in prefill header, when there is one: a few KiB to read.
  const std::string prefill = JoinPath(
      opened.graph_dir, absl::StrCat(kPrefillGraphName, kContainerExtension));
  summary.may_change_unseen =
      MayChangeUnseen(freshness, prefill) || summary.may_change_unseen;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      env->NewRandomAccessFile(prefill);
  if (!file.ok()) return summary;
  absl::StatusOr<std::string> first_bytes = FirstBytes(**file);
  if (!first_bytes.ok() || !LooksLikeBuiltinContainer(*first_bytes)) {
    return summary;
  }
  absl::StatusOr<Container> container = ReadContainer(**file);
  if (!container.ok()) return summary;
  summary.compiled_num_blocks =
      container->header.kv_resize().compiled_num_blocks();
  if (summary.npu.empty()) summary.npu = container->header.npu();
  return summary;
}

absl::StatusOr<VerifiedPayload> VerifyPayloads(Env* env,
                                               const Artifact& artifact) {
  VerifiedPayload verified;
  for (const ContainerFile& file : artifact.containers()) {
    if (file.codec != BuiltinContainerCodec()) continue;
    RBLN_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> in,
                          env->NewRandomAccessFile(file.path));
    RBLN_ASSIGN_OR_RETURN(Container container, ReadContainer(*in));
    RBLN_ASSIGN_OR_RETURN(const VerifiedPayload one,
                          VerifyPayload(*in, container));
    verified += one;
  }
  return verified;
}

}  // namespace rbln
