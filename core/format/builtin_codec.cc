#include "core/format/builtin_codec.h"

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <utility>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/core_metrics.h"
#include "core/status_macros.h"

namespace rbln {

bool LooksLikeBuiltinContainer(absl::string_view first_bytes) {
  return first_bytes.size() >= 4 && first_bytes.substr(1, 3) == "RBL";
}

ContainerFacts FactsOfContainer(const Container& container) {
  ContainerFacts facts = FactsOfHeader(container.header);
  facts.payload_bytes = container.preamble.payload_length;
  return facts;
}

ContainerFacts FactsOfHeader(const v1::ContainerHeader& header) {
  ContainerFacts facts;
  facts.granularity = BucketGranularity::kChiplet;
  facts.num_nodes = header.num_nodes();
  facts.buckets_per_node = header.chiplets_per_node();
  facts.compiled_model_name = header.compiled_model_name();
  facts.npu = header.npu();
  facts.compiled_num_blocks = header.kv_resize().compiled_num_blocks();
  // ReadContainer range-checks placements; a header made in memory is
  // checked here.
  const size_t buckets = facts.num_buckets();
  auto index = [&facts](const v1::Placement& p) {
    return size_t{p.node()} * facts.buckets_per_node + p.chiplet();
  };
  std::map<std::string, std::vector<uint64_t>> by_key;
  for (const v1::Allocation& allocation : header.allocations()) {
    std::vector<uint64_t>& bytes = by_key[allocation.key()];
    bytes.resize(buckets);
    for (const v1::Placement& p : allocation.placements()) {
      if (index(p) >= buckets) continue;
      uint64_t& slot = bytes[index(p)];
      slot = p.bytes() > std::numeric_limits<uint64_t>::max() - slot
                 ? std::numeric_limits<uint64_t>::max()
                 : slot + p.bytes();
    }
  }
  for (auto& [key, bytes] : by_key) {
    facts.other.push_back({key, std::move(bytes)});
  }
  for (const v1::KvTensor& tensor : header.kv_tensors()) {
    KvTensorFacts kv;
    kv.name = tensor.name();
    kv.resizable = tensor.resizable();
    kv.bytes.resize(buckets);
    for (const v1::Placement& p : tensor.placements()) {
      if (index(p) < buckets) kv.bytes[index(p)] += p.bytes();
    }
    facts.kv_tensors.push_back(std::move(kv));
  }
  return facts;
}

namespace {

absl::StatusOr<v1::ContainerHeader> RescaleHeaderUncounted(
    const v1::ContainerHeader& header, const RescaleFactors& factors,
    absl::string_view path) {
  v1::ContainerHeader out = header;
  size_t matched = 0;
  for (v1::KvTensor& tensor : *out.mutable_kv_tensors()) {
    auto factor = factors.find(tensor.name());
    if (factor == factors.end()) continue;
    ++matched;
    const auto [target, current] = factor->second;
    for (v1::Placement& p : *tensor.mutable_placements()) {
      if (current == 0 || p.bytes() % current != 0) {
        return absl::DataLossError(absl::StrCat(
            "corrupt artifact: KV tensor '", tensor.name(), "' in ", path,
            " holds ", p.bytes(), " bytes on node ", p.node(), " chiplet ",
            p.chiplet(), ", not a multiple of the current ", current,
            " blocks"));
      }
      const absl::uint128 bytes = absl::uint128(p.bytes() / current) * target;
      if (bytes > std::numeric_limits<uint64_t>::max()) {
        return absl::InvalidArgumentError(
            absl::StrCat(target, " blocks is too many: KV tensor '",
                         tensor.name(), "' would exceed 2^64 bytes"));
      }
      p.set_bytes(static_cast<uint64_t>(bytes));
    }
  }
  if (matched != factors.size()) {
    for (const auto& [name, factor] : factors) {
      const bool found = std::any_of(
          header.kv_tensors().begin(), header.kv_tensors().end(),
          [&name = name](const v1::KvTensor& t) { return t.name() == name; });
      if (!found) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, " has no KV tensor '", name, "' to rescale"));
      }
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<v1::ContainerHeader> RescaleHeader(
    const v1::ContainerHeader& header, const RescaleFactors& factors,
    absl::string_view path) {
  absl::StatusOr<v1::ContainerHeader> rescaled =
      RescaleHeaderUncounted(header, factors, path);
  CountContainerCall(ContainerOperation::kRescale, rescaled.status());
  return rescaled;
}

namespace {

absl::StatusOr<ContainerFacts> InspectFile(Env* env, const std::string& path) {
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                        env->NewRandomAccessFile(path));
  RBLN_ASSIGN_OR_RETURN(Container container, ReadContainer(*file));
  return FactsOfContainer(container);
}

absl::Status RescaleFile(const RescaleRequest& request) {
  RBLN_ASSIGN_OR_RETURN(
      std::unique_ptr<RandomAccessFile> src,
      request.source_env->NewRandomAccessFile(request.source_path));
  RBLN_ASSIGN_OR_RETURN(Container container, ReadContainer(*src));
  RBLN_ASSIGN_OR_RETURN(
      v1::ContainerHeader header,
      RescaleHeader(container.header, request.factors, request.source_path));
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> out,
                        request.out_env->NewWritableFile(request.out_path));
  RBLN_RETURN_IF_ERROR(WriteContainerWithHeader(
      *src, container, header, *out, [&request](uint64_t bytes) {
        return request.on_copied ? request.on_copied(bytes) : absl::OkStatus();
      }));
  RBLN_RETURN_IF_ERROR(out->Sync());
  return out->Close();
}

// Counts a call of the built-in codec: it has no worker, so it ends ok or
// with an error.
void Observe(CodecCallOp op, const absl::Status& status, absl::Time start) {
  ObserveCodecCall(CodecKind::kBuiltin, op,
                   status.ok() ? CodecOutcome::kOk : CodecOutcome::kError,
                   absl::Now() - start);
}

}  // namespace

absl::StatusOr<ContainerFacts> BuiltinCodec::Inspect(Env* env,
                                                     const std::string& path) {
  const absl::Time start = absl::Now();
  absl::StatusOr<ContainerFacts> facts = InspectFile(env, path);
  Observe(CodecCallOp::kInspect, facts.status(), start);
  return facts;
}

absl::Status BuiltinCodec::Rescale(const RescaleRequest& request) {
  const absl::Time start = absl::Now();
  absl::Status status = RescaleFile(request);
  Observe(CodecCallOp::kRescale, status, start);
  return status;
}

BuiltinCodec* BuiltinContainerCodec() {
  static BuiltinCodec* const codec = new BuiltinCodec();
  return codec;
}

}  // namespace rbln
