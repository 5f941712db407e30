#include "server/proto_conversions.h"

#include <algorithm>
#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/store/artifact_name.h"
#include "core/text.h"
#include "google/rpc/status.pb.h"
#include "rbln/artifact/v1/reply_metadata.h"

namespace rbln {

std::string WireName(absl::string_view name) {
  return WireText(name, kMaxArtifactNameBytes + 64);
}

v1::ErrorDetail ToErrorDetail(const ErrorFacts& facts) {
  v1::ErrorDetail detail;
  v1::ErrorDetail::Reason reason = v1::ErrorDetail::REASON_UNSPECIFIED;
  v1::ErrorDetail::Reason_Parse(std::string(ErrorReasonName(facts.reason)),
                                &reason);
  detail.set_reason(reason);
  detail.set_artifact(WireName(facts.artifact));
  if (facts.current_num_blocks.has_value()) {
    detail.set_current_num_blocks(*facts.current_num_blocks);
  }
  if (facts.num_min_blocks.has_value()) {
    detail.set_num_min_blocks(*facts.num_min_blocks);
  }
  if (facts.num_full_blocks.has_value()) {
    detail.set_num_full_blocks(*facts.num_full_blocks);
  }
  if (facts.max_fitting_num_blocks.has_value()) {
    detail.set_max_fitting_num_blocks(*facts.max_fitting_num_blocks);
  }
  for (const std::string& written : facts.written_artifacts) {
    detail.add_written_artifacts(WireName(written));
  }
  if (facts.node.has_value()) {
    detail.set_node(static_cast<uint32_t>(*facts.node));
  }
  if (facts.chiplet.has_value()) {
    detail.set_chiplet(static_cast<uint32_t>(*facts.chiplet));
  }
  if (facts.bytes_short.has_value()) detail.set_bytes_short(*facts.bytes_short);
  return detail;
}

// Over TCP a caller is on another host: it names artifacts relative to the
// store, or NAME:path in a read-only root; an absolute path means the
// daemon's file system, which only local callers (the Unix socket) share.
absl::Status CheckNameForPeer(bool remote, absl::string_view name,
                              absl::string_view what) {
  if (!remote || !absl::StartsWith(name, "/")) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " ", Echo(name),
      " is an absolute path; over TCP name it by its path in the store "
      "('team/llama') or as NAME:path in a read-only root (absolute paths are "
      "for callers on the daemon's host, over its Unix socket)"));
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl's canonical codes are gRPC's, number for number. The message is
  // cut so that it always fits in the status metadata.
  const auto code = static_cast<grpc::StatusCode>(status.code());
  const std::string message = WireText(status.message());
  std::optional<ErrorFacts> facts = GetErrorFacts(status);
  if (!facts.has_value()) return grpc::Status(code, message);
  // The richer error model: gRPC sends these bytes as the
  // grpc-status-details-bin trailer.
  google::rpc::Status details;
  details.set_code(static_cast<int32_t>(status.code()));
  details.set_message(message);
  details.add_details()->PackFrom(ToErrorDetail(*facts));
  return grpc::Status(code, message, details.SerializeAsString());
}

grpc::Status MarkedReply(grpc::ServerContextBase* context,
                         const grpc::Status& status) {
  if (status.ok()) return status;
  context->AddTrailingMetadata(v1::kReplyMetadataKey, v1::kReplyMetadataValue);
  return status;
}

void FillBucket(const BucketFit& b, v1::BucketPlan* out) {
  out->set_node(b.node);
  out->set_chiplet(b.chiplet);
  out->set_available_bytes(b.budget_bytes);
  out->set_budget_bytes(b.budget_bytes);
  out->set_device_available_bytes(b.device_available_bytes);
  out->set_other_bytes(b.other_bytes);
  out->set_kv_bytes(b.kv_bytes);
  out->set_kv_bytes_per_block(b.kv_bytes_per_block);
  out->set_headroom_bytes(b.headroom_bytes);
}

void FillRoots(const ArtifactStore& store, std::string* store_root,
               google::protobuf::RepeatedPtrField<v1::StoreRoot>* roots) {
  *store_root = store.root();
  for (const StoreRootInfo& info : store.roots()) {
    v1::StoreRoot* root = roots->Add();
    root->set_name(info.name);
    root->set_dir(WireName(info.dir));
    root->set_read_only(info.read_only);
  }
}

void FillDescription(
    const Artifact* artifact, const std::string& name,
    const std::string& link_target, const absl::StatusOr<DramChoice>& device,
    const absl::StatusOr<std::shared_ptr<const MemoryPlan>>& plan,
    v1::DescribeArtifactResponse* resp) {
  const RblnConfig& config = artifact->config();
  resp->set_artifact(name);  // canonical: the read succeeded
  resp->set_link_target(WireName(link_target));
  resp->set_cls_name(config.cls_name);
  resp->set_npu(artifact->npu());
  resp->set_num_nodes(artifact->num_nodes());
  resp->set_chiplets_per_node(artifact->buckets_per_node());
  resp->set_memory_per_node(artifact->granularity() ==
                            BucketGranularity::kNode);
  resp->set_submodule(artifact->submodule());
  resp->set_attn_impl(config.attn_impl);
  resp->set_max_seq_len(config.max_seq_len);
  resp->set_kvcache_block_size(config.kvcache_block_size);
  resp->set_batch_size(config.batch_size);
  resp->set_kvcache_num_blocks(artifact->current_num_blocks());
  resp->set_compiled_num_blocks(artifact->compiled_num_blocks());
  resp->set_num_full_blocks(config.NumFullBlocks());
  resp->set_num_min_blocks(config.NumMinBlocks());
  for (const KvTensor& t : artifact->kv_tensors()) {
    if (t.resizable) {
      resp->set_resizable_kv_tensors(resp->resizable_kv_tensors() + 1);
    } else {
      resp->set_fixed_kv_tensors(resp->fixed_kv_tensors() + 1);
    }
  }
  if (const std::optional<VerifiedPayload>& verified =
          artifact->verified_payload();
      verified.has_value()) {
    resp->set_verified_segments(verified->segments);
    resp->set_verified_bytes(verified->bytes);
  }
  for (const ContainerFile& file : artifact->containers()) {
    v1::GraphInfo* graph = resp->add_graphs();
    graph->set_compiled_model_name(file.graph_name());
    graph->set_file_name(file.file_name);
    graph->set_payload_bytes(file.facts->payload_bytes);
    graph->set_file_bytes(file.stat.size);
    graph->set_codec(file.codec->name());
  }
  if (!artifact->submodule().empty()) {
    resp->add_warnings(WireText(absl::StrCat(
        "the memory plan and fits count the decoder's graphs only (",
        artifact->submodule(),
        "/), as optimum-rbln's fit does; the artifact's other graphs (other "
        "submodules, top-level graphs) need device memory too when they "
        "share the device")));
  }
  if (device.ok()) {
    resp->set_dram_source(device->source);
    for (const std::string& warning : device->warnings) {
      resp->add_warnings(WireText(warning));
    }
  }
  if (!plan.ok()) {
    resp->add_warnings(
        WireText(absl::StrCat("no memory plan: ", plan.status().message())));
    return;
  }
  for (const BucketFit& b : (*plan)->buckets) {
    FillBucket(b, resp->add_buckets());
  }
  resp->set_max_fitting_num_blocks((*plan)->max_fitting_num_blocks);
}

void FillResizeResponse(const WriteRequest& request, const WriteResult& result,
                        const std::string& store_root,
                        v1::ResizeResponse* resp) {
  resp->set_artifact(result.name);
  resp->set_link_target(WireName(result.link_target));
  resp->set_output_dir(result.output_name);
  resp->set_previous_num_blocks(result.previous_num_blocks);
  resp->set_new_num_blocks(result.new_num_blocks);
  resp->set_written(result.written);
  resp->set_dry_run(request.dry_run);
  if (result.fits_device.has_value()) {
    resp->set_fits_device(*result.fits_device);
  }
  resp->set_store(store_root);
  for (const std::string& warning : result.warnings) {
    resp->add_warnings(WireText(warning));
  }
  if (result.fit.has_value() && request.budget.has_value()) {
    const FitResult& fit = *result.fit;
    v1::FitDetails* details = resp->mutable_fit();
    details->set_budget(request.budget->ToString());
    details->set_budget_per_chiplet(fit.budget_per_chiplet);
    details->set_num_full_blocks(fit.num_full_blocks);
    for (const BucketFit& b : fit.buckets) {
      FillBucket(b, details->add_buckets());
    }
    details->set_limiting_bucket(fit.limiting_bucket);
    details->set_dram_source(result.dram_source);
  }
}

void FillDeviceInfo(const DeviceReport& report,
                    v1::GetDeviceInfoResponse* resp) {
  resp->set_source(report.source);
  for (const std::string& warning : report.warnings)
    resp->add_warnings(WireText(warning));
  for (const DeviceEntry& d : report.devices) {
    v1::Device* device = resp->add_devices();
    device->set_index(d.index);
    device->set_name(d.name);
    device->set_family(d.family);
    device->set_device_node(d.device_node);
    device->set_total_bytes(d.total_bytes);
    device->set_used_bytes(d.used_bytes);
    device->set_available_bytes(d.available_bytes);
    device->set_chiplets(d.chiplets);
    device->set_source(d.source);
    device->set_free_bytes(d.available_bytes > d.used_bytes
                               ? d.available_bytes - d.used_bytes
                               : 0);
  }
}

absl::StatusOr<size_t> ListPageSize(int32_t page_size) {
  if (page_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size is ", page_size,
                     ": give a positive number of entries, or 0 for ",
                     kDefaultListPageSize));
  }
  if (page_size == 0) return kDefaultListPageSize;
  return std::min(static_cast<size_t>(page_size), kMaxListPageSize);
}

namespace {
// What a token holds, before base64: this, the root's number, ':' and the
// position in it.
constexpr absl::string_view kListTokenVersion = "L1:";
}  // namespace

std::string ListPageToken(const ListPosition& next) {
  return absl::WebSafeBase64Escape(
      absl::StrCat(kListTokenVersion, next.root, ":", next.after));
}

absl::StatusOr<ListPosition> ParseListPageToken(absl::string_view token,
                                                size_t roots) {
  if (token.empty()) return ListPosition{};
  std::string text;
  ListPosition position;
  absl::string_view rest;
  size_t colon = absl::string_view::npos;
  const bool parsed = absl::WebSafeBase64Unescape(token, &text) &&
                      absl::ConsumePrefix(&(rest = text), kListTokenVersion) &&
                      (colon = rest.find(':')) != absl::string_view::npos &&
                      absl::SimpleAtoi(rest.substr(0, colon), &position.root) &&
                      position.root <= roots;
  if (!parsed) {
    return absl::InvalidArgumentError(
        "page_token is not one this daemon gave: pass next_page_token of "
        "the previous reply unchanged, or none for the first page");
  }
  position.after = std::string(rest.substr(colon + 1));
  return position;
}

}  // namespace rbln
