// DescribeReplies: DescribeArtifact's replies, serialized, for the artifacts
// the artifact cache holds. A reply is a function of three things: the
// artifact object read (core/format/artifact_cache.h hands out the same
// object while the files are unchanged), the canonical name it was asked by,
// and the device choice it is planned for. So a reply made for the same three
// is sent again as it is, instead of building a message of some 30 fields,
// serializing it and freeing it on every call: about a tenth of Check's rate
// in bench/run's row 5 (docs/performance.md).
//
// Bounded like PlanCache (core/resize/plan_cache.h): one reply per artifact
// object, kMaxReplies in all, none of them keeping its artifact alive.
// Thread-safe.
#ifndef RBLN_SERVER_DESCRIBE_REPLIES_H_
#define RBLN_SERVER_DESCRIBE_REPLIES_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/device/dram.h"
#include "core/format/artifact.h"
#include "grpcpp/support/slice.h"

namespace rbln {

class DescribeReplies {
 public:
  // More artifacts than a host serves; a reply is under a KiB.
  static constexpr size_t kMaxReplies = 1024;

  // The reply made for these three, if one is held.
  std::optional<grpc::Slice> Find(
      const std::shared_ptr<const Artifact>& artifact, const std::string& name,
      const absl::StatusOr<DramChoice>& device) const;
  // Holds `reply` for these three, in place of the artifact's last one.
  void Insert(const std::shared_ptr<const Artifact>& artifact,
              const std::string& name, const absl::StatusOr<DramChoice>& device,
              grpc::Slice reply);

  size_t size() const;

 private:
  struct Held {
    std::weak_ptr<const Artifact> artifact;
    std::string name;
    absl::StatusOr<DramChoice> device;
    grpc::Slice reply;
  };

  mutable absl::Mutex mu_;
  absl::flat_hash_map<const Artifact*, Held> replies_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rbln

#endif  // RBLN_SERVER_DESCRIBE_REPLIES_H_
