#include "server/describe_replies.h"

#include <utility>
#include <vector>

namespace rbln {
namespace {

// What an entry holds, as DescribeReplies' bound counts it.
uint64_t HeldBytes(const std::string& name,
                   const absl::StatusOr<DramChoice>& device,
                   const grpc::Slice& reply) {
  // The artifact's object and control block, kept by the weak reference.
  uint64_t bytes = sizeof(Artifact) + 64 + name.size() + reply.size();
  if (device.ok()) {
    bytes +=
        sizeof(DramChoice) + device->source.size() + device->spec.family.size();
    for (const std::string& warning : device->warnings) {
      bytes += sizeof(warning) + warning.size();
    }
  } else {
    bytes += device.status().message().size();
  }
  return bytes;
}

}  // namespace

template <typename SameDevice>
std::optional<grpc::Slice> DescribeReplies::FindHeld(
    const std::shared_ptr<const Artifact>& artifact, const std::string& name,
    SameDevice same_device) {
  absl::MutexLock lock(&mu_);
  const Held* held = replies_.Find(artifact.get());
  // The same address may be a later artifact's once the first is gone.
  if (held == nullptr || held->artifact.lock() != artifact ||
      held->name != name || !same_device(*held)) {
    return std::nullopt;
  }
  replies_.Touch(artifact.get());
  ++hits_;
  return held->reply;
}

std::optional<grpc::Slice> DescribeReplies::Find(
    const std::shared_ptr<const Artifact>& artifact, const std::string& name,
    const absl::StatusOr<DramChoice>& device) {
  return FindHeld(artifact, name,
                  [&](const Held& held) { return held.device == device; });
}

std::optional<grpc::Slice> DescribeReplies::Find(
    const std::shared_ptr<const Artifact>& artifact, const std::string& name,
    uint64_t device_generation) {
  if (device_generation == 0) return std::nullopt;
  return FindHeld(artifact, name, [&](const Held& held) {
    return held.device_generation == device_generation;
  });
}

void DescribeReplies::Insert(const std::shared_ptr<const Artifact>& artifact,
                             const std::string& name,
                             uint64_t device_generation,
                             const absl::StatusOr<DramChoice>& device,
                             grpc::Slice reply) {
  const uint64_t bytes = HeldBytes(name, device, reply);
  // Destroyed after the lock is let go.
  std::vector<Held> dropped;
  absl::MutexLock lock(&mu_);
  replies_.Insert(
      artifact.get(),
      Held{artifact, name, device_generation, device, std::move(reply)}, bytes,
      &dropped);
}

size_t DescribeReplies::size() const {
  absl::MutexLock lock(&mu_);
  return replies_.size();
}

uint64_t DescribeReplies::bytes() const {
  absl::MutexLock lock(&mu_);
  return replies_.bytes();
}

uint64_t DescribeReplies::hits() const {
  absl::MutexLock lock(&mu_);
  return hits_;
}

}  // namespace rbln
