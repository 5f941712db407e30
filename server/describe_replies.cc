#include "server/describe_replies.h"

#include <utility>

namespace rbln {

std::optional<grpc::Slice> DescribeReplies::Find(
    const std::shared_ptr<const Artifact>& artifact, const std::string& name,
    const absl::StatusOr<DramChoice>& device) const {
  absl::MutexLock lock(&mu_);
  auto it = replies_.find(artifact.get());
  // The same address may be a later artifact's once the first is gone.
  if (it == replies_.end() || it->second.artifact.lock() != artifact ||
      it->second.name != name || it->second.device != device) {
    return std::nullopt;
  }
  return it->second.reply;
}

void DescribeReplies::Insert(const std::shared_ptr<const Artifact>& artifact,
                             const std::string& name,
                             const absl::StatusOr<DramChoice>& device,
                             grpc::Slice reply) {
  absl::MutexLock lock(&mu_);
  if (replies_.size() >= kMaxReplies && !replies_.contains(artifact.get())) {
    replies_.clear();
  }
  replies_.insert_or_assign(artifact.get(),
                            Held{artifact, name, device, std::move(reply)});
}

size_t DescribeReplies::size() const {
  absl::MutexLock lock(&mu_);
  return replies_.size();
}

}  // namespace rbln
