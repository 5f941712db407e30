// Conversions from the core's results to the API's messages
// (rbln/artifact/v1/artifact_service.proto) and from absl::Status to
// grpc::Status, for ArtifactServiceImpl's handlers (server/artifact_service.h).
// Every string taken from outside or from disk goes out as WireText: valid
// UTF-8, cut to a known length.
//
// Thread-safe: pure functions, except MarkedReply, which adds to `context`.
#ifndef RBLN_SERVER_PROTO_CONVERSIONS_H_
#define RBLN_SERVER_PROTO_CONVERSIONS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/dram.h"
#include "core/error_facts.h"
#include "core/format/artifact.h"
#include "core/resize/fit.h"
#include "core/store/store.h"
#include "grpcpp/grpcpp.h"
#include "rbln/artifact/v1/artifact_service.pb.h"

namespace rbln {

namespace v1 = ::rbln::artifact::v1;

// A name or directory as a reply may carry it (any bytes on disk; UTF-8 text
// on the wire), with room for escapes beyond the longest path.
std::string WireName(absl::string_view name);

// The ErrorDetail of core's facts (core/error_facts.h): the reasons have the
// same names in both.
v1::ErrorDetail ToErrorDetail(const ErrorFacts& facts);

// `status` as gRPC's: the same code, the message cut to fit the status
// metadata, and the ErrorDetail of its facts, when it has any, in the
// google.rpc.Status details.
// INVALID_ARGUMENT for an absolute `name` (`what`: "artifact", "output
// directory") from a `remote` caller: over TCP a caller is on another host
// and names artifacts relative to the store (or NAME:path).
absl::Status CheckNameForPeer(bool remote, absl::string_view name,
                              absl::string_view what);
grpc::Status ToGrpc(const absl::Status& status);

// Marks a failed reply as the handler's own (rbln/artifact/v1/
// reply_metadata.h): without the mark, a client takes a non-OK status for a
// transport failure. OK is never the transport's, so it goes unmarked.
grpc::Status MarkedReply(grpc::ServerContextBase* context,
                         const grpc::Status& status);

void FillBucket(const BucketFit& b, v1::BucketPlan* out);

// The store's root and its roots (the store first, then the read-only
// ones), as ListArtifacts and GetServerInfo report them.
void FillRoots(const ArtifactStore& store, std::string* store_root,
               google::protobuf::RepeatedPtrField<v1::StoreRoot>* roots);

// ListArtifacts' pages (rbln/artifact/v1/artifact_service.proto): the
// number of entries when the request names none, and the most a page holds
// (AIP-158 clamps a larger page_size to such a maximum).
inline constexpr size_t kDefaultListPageSize = 1000;
inline constexpr size_t kMaxListPageSize = 10000;
// What a page's artifacts and skipped entries may take before the page is
// cut short: a quarter of gRPC's default 4 MiB message limit, so that the
// entry that crosses it (a name is at most a few KiB, escaped) cannot bring
// the reply near the limit.
inline constexpr size_t kMaxListReplyBytes = 1 << 20;

// The entries a page holds for the request's page_size: INVALID_ARGUMENT
// when negative.
absl::StatusOr<size_t> ListPageSize(int32_t page_size);

// A page token, opaque to callers, for a listing that continues at `next`.
std::string ListPageToken(const ListPosition& next);
// Where the page of `token` begins (the beginning for ""), in a store of
// `roots` roots: INVALID_ARGUMENT for a token this daemon would not give.
absl::StatusOr<ListPosition> ParseListPageToken(absl::string_view token,
                                                size_t roots);

// Describe's reply for `artifact`, read as `name` (a symbolic link to
// `link_target`, or ""), on `device`, with `plan` (the device's error when
// there is no device). Nothing else may go into it: the reply is kept and
// sent again while these are the same (describe_replies.h).
void FillDescription(
    const Artifact* artifact, const std::string& name,
    const std::string& link_target, const absl::StatusOr<DramChoice>& device,
    const absl::StatusOr<std::shared_ptr<const MemoryPlan>>& plan,
    v1::DescribeArtifactResponse* resp);

// The reply of a Set or Fit that ran as `request` and ended in `result`
// (the store's root is `store_root`).
void FillResizeResponse(const WriteRequest& request, const WriteResult& result,
                        const std::string& store_root,
                        v1::ResizeResponse* resp);

// GetDeviceInfo's reply for `report`.
void FillDeviceInfo(const DeviceReport& report,
                    v1::GetDeviceInfoResponse* resp);

}  // namespace rbln

#endif  // RBLN_SERVER_PROTO_CONVERSIONS_H_
