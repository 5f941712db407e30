#include "core/resize/plan_cache.h"

#include <memory>
#include <string>

#include "core/device/device_spec.h"
#include "core/os/env.h"
#include "core/testing/test_util.h"
#include "gtest/gtest.h"
#include "tools/synth.h"

namespace rbln {
namespace {

class PlanCacheTest : public ::testing::Test {
 protected:
  std::shared_ptr<const Artifact> OpenArtifact(const SynthSpec& spec) {
    const std::string dir = tmp_.Join("a" + std::to_string(++serial_));
    EXPECT_TRUE(WriteSyntheticArtifact(Env::Default(), spec, dir).ok());
    absl::StatusOr<Artifact> artifact = Artifact::Open(Env::Default(), dir);
    EXPECT_TRUE(artifact.ok()) << artifact.status();
    return std::make_shared<const Artifact>(*std::move(artifact));
  }
  DeviceSpec Device(const char* name) {
    absl::StatusOr<DeviceSpec> device = LookupDeviceSpec(name);
    EXPECT_TRUE(device.ok());
    return *device;
  }

  testing::TempDir tmp_;
  int serial_ = 0;
};

TEST_F(PlanCacheTest, MakesThePlanOncePerArtifactAndDevice) {
  absl::StatusOr<SynthSpec> spec = PresetSpec("llama3-8b-ca12-tp4");
  ASSERT_TRUE(spec.ok());
  std::shared_ptr<const Artifact> artifact = OpenArtifact(*spec);
  const DeviceSpec device = Device("RBLN-CA12");
  PlanCache cache;

  auto first = cache.Plan(artifact, device);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<MemoryPlan> direct = PlanMemory(*artifact, device);
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ((*first)->max_fitting_num_blocks, direct->max_fitting_num_blocks);
  EXPECT_EQ((*first)->buckets.size(), direct->buckets.size());
  // The same object again: the plan held, not a new one.
  auto again = cache.Plan(artifact, device);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), first->get());

  // Another device (less DRAM): made again, and different.
  DeviceSpec smaller = device;
  smaller.total_bytes_per_node /= 2;
  auto other = cache.Plan(artifact, smaller);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->get(), first->get());
  EXPECT_LT((*other)->max_fitting_num_blocks, (*first)->max_fitting_num_blocks);

  // Another artifact object (as after a change on disk): made again.
  std::shared_ptr<const Artifact> reread =
      std::make_shared<const Artifact>(*artifact);
  auto fresh = cache.Plan(reread, device);
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(fresh->get(), first->get());
}

TEST_F(PlanCacheTest, KeepsTheRefusalToo) {
  std::shared_ptr<const Artifact> artifact = OpenArtifact(SynthSpec{});
  PlanCache cache;
  // One chiplet per node against a 4-chiplet REBEL device: refused.
  auto plan = cache.Plan(artifact, Device("RBLN-CR13"));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(cache.Plan(artifact, Device("RBLN-CR13")).status(), plan.status());
}

TEST_F(PlanCacheTest, AnArtifactGoneIsNotMistakenForOneAtItsAddress) {
  absl::StatusOr<SynthSpec> spec = PresetSpec("llama3-8b-ca12-tp4");
  ASSERT_TRUE(spec.ok());
  const DeviceSpec device = Device("RBLN-CA12");
  PlanCache cache;
  std::shared_ptr<const Artifact> artifact = OpenArtifact(*spec);
  const Artifact* address = artifact.get();
  auto first = cache.Plan(artifact, device);
  ASSERT_TRUE(first.ok());
  const MemoryPlan* first_plan = first->get();
  artifact.reset();
  // Whatever address the next one gets, its plan is its own.
  std::shared_ptr<const Artifact> next = OpenArtifact(*spec);
  auto second = cache.Plan(next, device);
  ASSERT_TRUE(second.ok());
  if (next.get() == address) {
    EXPECT_NE(second->get(), first_plan);
  }
  EXPECT_EQ(cache.size(), next.get() == address ? 1u : 2u);
}

TEST_F(PlanCacheTest, StaysBounded) {
  absl::StatusOr<SynthSpec> spec = PresetSpec("llama3-8b-ca12-tp4");
  ASSERT_TRUE(spec.ok());
  std::shared_ptr<const Artifact> artifact = OpenArtifact(*spec);
  DeviceSpec device = Device("RBLN-CA12");
  PlanCache cache;
  // Many artifact objects, all alive: the held plans never pass the bound.
  std::vector<std::shared_ptr<const Artifact>> alive;
  for (size_t i = 0; i < PlanCache::kMaxPlans + 10; ++i) {
    alive.push_back(std::make_shared<const Artifact>(*artifact));
    ASSERT_TRUE(cache.Plan(alive.back(), device).ok());
    ASSERT_LE(cache.size(), PlanCache::kMaxPlans);
  }
}

}  // namespace
}  // namespace rbln
