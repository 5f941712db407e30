#include "core/resize/plan_cache.h"

#include <utility>

namespace rbln {

absl::StatusOr<std::shared_ptr<const MemoryPlan>> PlanCache::Plan(
    const std::shared_ptr<const Artifact>& artifact, const DeviceSpec& device) {
  {
    absl::MutexLock lock(&mu_);
    auto it = plans_.find(artifact.get());
    // The same address may be a later artifact's once the first is gone.
    if (it != plans_.end() && it->second.artifact.lock() == artifact &&
        it->second.device == device) {
      return it->second.plan;
    }
  }
  absl::StatusOr<std::shared_ptr<const MemoryPlan>> plan;
  if (absl::StatusOr<MemoryPlan> made = PlanMemory(*artifact, device);
      made.ok()) {
    plan = std::make_shared<const MemoryPlan>(*std::move(made));
  } else {
    plan = made.status();
  }
  absl::MutexLock lock(&mu_);
  if (plans_.size() >= kMaxPlans) plans_.clear();
  plans_[artifact.get()] = Held{artifact, device, plan};
  return plan;
}

size_t PlanCache::size() const {
  absl::MutexLock lock(&mu_);
  return plans_.size();
}

}  // namespace rbln
