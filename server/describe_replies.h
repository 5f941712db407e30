// DescribeReplies: DescribeArtifact's replies, serialized, for the artifacts
// the artifact cache holds. A reply is a function of three things: the
// artifact object read (core/format/artifact_cache.h hands out the same
// object while the files are unchanged), the canonical name it was asked by,
// and the device choice it is planned for. So a reply made for the same three
// is sent again as it is, instead of building a message of some 30 fields,
// serializing it and freeing it on every call (docs/performance.md). Where
// the device's provider numbers its answers (ArtifactStore::DeviceGeneration,
// not 0), the number stands for the choice: a reply is found without asking
// the provider.
//
// Bounded by bytes (kMaxBytes, LRU): each entry counts its reply, its name,
// its device choice and the artifact object's allocation, which the entry's
// weak reference keeps (not the artifact's other memory: it is freed when
// the last reader lets it go). Thread-safe.
#ifndef RBLN_SERVER_DESCRIBE_REPLIES_H_
#define RBLN_SERVER_DESCRIBE_REPLIES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/device/dram.h"
#include "core/format/artifact.h"
#include "core/lru_by_bytes.h"
#include "grpcpp/support/slice.h"

namespace rbln {

class DescribeReplies {
 public:
  // Thousands of ordinary replies (under a KiB each); a reply larger than
  // this (an artifact of thousands of nodes) is made on every call.
  static constexpr uint64_t kMaxBytes = uint64_t{4} << 20;

  // The reply made for these three, if one is held (counted as a hit).
  std::optional<grpc::Slice> Find(
      const std::shared_ptr<const Artifact>& artifact, const std::string& name,
      const absl::StatusOr<DramChoice>& device);
  // The same with the device choice's generation (not 0) in its place: the
  // reply made for a choice of that generation.
  std::optional<grpc::Slice> Find(
      const std::shared_ptr<const Artifact>& artifact, const std::string& name,
      uint64_t device_generation);
  // Holds `reply` for these three, in place of the artifact's last one;
  // `device_generation` is the generation read before `device` was asked
  // for (0: found by the choice only). Only for an artifact object the artifact
  // cache holds: any other is read again by the next call, so its reply
  // would only take room.
  void Insert(const std::shared_ptr<const Artifact>& artifact,
              const std::string& name, uint64_t device_generation,
              const absl::StatusOr<DramChoice>& device, grpc::Slice reply);

  size_t size() const;
  uint64_t bytes() const;
  uint64_t hits() const;

 private:
  struct Held {
    std::weak_ptr<const Artifact> artifact;
    std::string name;
    uint64_t device_generation;
    absl::StatusOr<DramChoice> device;
    grpc::Slice reply;
  };
  // The entry for `artifact` named `name`, touched and counted as a hit
  // when `same_device` says it was made for the device asked about.
  template <typename SameDevice>
  std::optional<grpc::Slice> FindHeld(
      const std::shared_ptr<const Artifact>& artifact, const std::string& name,
      SameDevice same_device);

  mutable absl::Mutex mu_;
  LruByBytes<const Artifact*, Held> replies_ ABSL_GUARDED_BY(mu_){kMaxBytes};
  uint64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace rbln

#endif  // RBLN_SERVER_DESCRIBE_REPLIES_H_
