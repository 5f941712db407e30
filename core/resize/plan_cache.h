// PlanCache: the last memory plan (PlanMemory) of each artifact, so that
// Describe calls that poll an unchanged artifact do not fit it again.
//
// A plan is kept for the artifact object it was made from and the device
// it was made for. The artifact cache (core/format/artifact_cache.h) hands
// out the same object for as long as the artifact's files stay the same, so
// a changed artifact is a new object, and its plan is made again. A plan is
// only held while its artifact object lives (a weak reference tells), and at
// most kMaxPlans at once: past that, all are dropped and made again as asked.
//
// Thread-safe.
#ifndef RBLN_CORE_RESIZE_PLAN_CACHE_H_
#define RBLN_CORE_RESIZE_PLAN_CACHE_H_

#include <cstddef>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/device_memory.h"
#include "core/format/artifact.h"
#include "core/resize/fit.h"

namespace rbln {

class PlanCache {
 public:
  // Some hundreds of bytes a plan; more artifacts than a host serves.
  static constexpr size_t kMaxPlans = 1024;

  // PlanMemory(*artifact, device), made once per artifact object and device.
  absl::StatusOr<std::shared_ptr<const MemoryPlan>> Plan(
      const std::shared_ptr<const Artifact>& artifact,
      const DeviceSpec& device);

  size_t size() const;

 private:
  struct Held {
    std::weak_ptr<const Artifact> artifact;
    DeviceSpec device;
    absl::StatusOr<std::shared_ptr<const MemoryPlan>> plan;
  };

  mutable absl::Mutex mu_;
  absl::flat_hash_map<const Artifact*, Held> plans_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rbln

#endif  // RBLN_CORE_RESIZE_PLAN_CACHE_H_
