// ArtifactStore::FitTogether (core/store/store.h): several artifacts sized
// together on one device group (core/resize/group_fit.h) and written.
#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/device/free_budget.h"
#include "core/error_facts.h"
#include "core/status_macros.h"
#include "core/store/store.h"
#include "core/text.h"

namespace rbln {
namespace {

// What one bucket of the group may hold: the budget's share of a device's
// bucket, or the whole bucket without a budget.
absl::StatusOr<uint64_t> BudgetPerBucket(
    const std::optional<MemoryBudget>& budget, const MemoryModel& model,
    const DeviceSpec& device) {
  if (!budget.has_value()) {
    return AvailablePerBucket(model.granularity, device);
  }
  return model.granularity == BucketGranularity::kNode
             ? budget->PerNodeBytes(device)
             : budget->PerChipletBytes(device);
}

// FitGroup's error when the minimums do not fit, with its facts.
absl::Status GroupDoesNotFit(absl::Status status, const GroupPlan& short_plan) {
  for (const GroupBucket& bucket : short_plan.buckets) {
    if (bucket.headroom_bytes >= 0) continue;
    return WithErrorFacts(
        std::move(status),
        {.reason = ErrorReason::kGroupDoesNotFit,
         .node = bucket.node,
         .chiplet = bucket.chiplet,
         .bytes_short = static_cast<uint64_t>(-bucket.headroom_bytes)});
  }
  return status;
}

}  // namespace

absl::StatusOr<std::vector<ArtifactStore::GroupMemberState>>
ArtifactStore::LoadGroup(const GroupRequest& request) {
  if (request.members.empty()) {
    return absl::InvalidArgumentError("no artifacts to size together");
  }
  std::vector<GroupMemberState> group;
  std::map<std::string, std::string> asked_as;  // canonical -> as asked
  for (const GroupMemberRequest& member : request.members) {
    if (member.weight < kMinGroupWeight || member.weight > kMaxGroupWeight) {
      return absl::InvalidArgumentError(
          absl::StrCat("the weight of ", Echo(member.name), " is ",
                       member.weight, "; give a whole number from ",
                       kMinGroupWeight, " to ", kMaxGroupWeight));
    }
    RBLN_ASSIGN_OR_RETURN(std::shared_ptr<const Located> asked,
                          Locate(member.name));
    RBLN_ASSIGN_OR_RETURN(std::optional<Located> target, FollowLink(*asked));
    GroupMemberState state{.at = target.has_value() ? *target : *asked,
                           .weight = member.weight};
    const auto [seen, inserted] = asked_as.emplace(state.at.name, member.name);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat(Echo(seen->second), " and ", Echo(member.name),
                       " are the same artifact (", Echo(state.at.name),
                       "): give each artifact of the group once"));
    }
    if (state.at.read_only && !request.dry_run && !request.describe_only) {
      return WithErrorFacts(
          absl::PermissionDeniedError(absl::StrCat(
              Echo(state.at.name),
              " is in a read-only root and cannot be changed in place; size "
              "the group with --dry-run, or copy it into the store first")),
          {.reason = ErrorReason::kReadOnlyRoot, .artifact = state.at.name});
    }
    RBLN_ASSIGN_OR_RETURN(state.artifact, ReadShared(state.at));
    const uint64_t current = state.artifact->current_num_blocks();
    if (member.expected_num_blocks.has_value() &&
        *member.expected_num_blocks != current) {
      return WithErrorFacts(
          absl::AbortedError(absl::StrCat(
              "kvcache_num_blocks of ", state.at.name, " is ", current,
              ", not the expected ", *member.expected_num_blocks,
              "; nothing was changed (read it again and retry)")),
          {.reason = ErrorReason::kCasMismatch,
           .artifact = state.at.name,
           .current_num_blocks = current});
    }
    absl::StatusOr<DramChoice> device = DeviceFor(*state.artifact);
    if (!device.ok())
      return NameArtifactInFacts(device.status(), state.at.name);
    state.device = *std::move(device);
    RBLN_RETURN_IF_ERROR(CheckChiplets(*state.artifact, state.device.spec));
    if (!group.empty() &&
        group.front().device.spec.family != state.device.spec.family) {
      return absl::FailedPreconditionError(absl::StrCat(
          state.at.name, " is compiled for ", state.device.spec.family, " and ",
          group.front().at.name, " for ", group.front().device.spec.family,
          ": artifacts of different NPU families cannot share a device"));
    }
    state.model = BuildMemoryModel(*state.artifact);
    group.push_back(std::move(state));
  }
  return group;
}

absl::StatusOr<GroupResult> ArtifactStore::FitTogether(
    const GroupRequest& request) {
  RBLN_ASSIGN_OR_RETURN(const std::vector<GroupMemberState> group,
                        LoadGroup(request));
  std::vector<GroupMember> members;
  std::vector<uint64_t> counts;
  uint32_t nodes = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    const GroupMemberState& state = group[i];
    members.push_back(
        {.name = state.at.name,
         .model = &state.model,
         .num_min_blocks = state.artifact->config().NumMinBlocks(),
         .current_num_blocks = state.artifact->current_num_blocks(),
         .weight = state.weight});
    counts.push_back(state.artifact->current_num_blocks());
    nodes = std::max(nodes, state.model.num_nodes);
  }
  RBLN_RETURN_IF_ERROR(CheckLinedUp(members));
  std::vector<std::string> warnings = group.front().device.warnings;
  RBLN_ASSIGN_OR_RETURN(const std::vector<uint64_t> budget,
                        GroupBudget(request, group.front(), nodes, &warnings));
  GroupPlan plan;
  if (request.describe_only) {
    plan = DescribeGroup(members, counts, budget);
  } else {
    GroupPlan short_plan;
    absl::StatusOr<GroupPlan> fitted = FitGroup(members, budget, &short_plan);
    if (!fitted.ok()) return GroupDoesNotFit(fitted.status(), short_plan);
    plan = *std::move(fitted);
  }
  GroupResult result;
  for (size_t i = 0; i < group.size(); ++i) {
    result.members.push_back(
        {.name = group[i].at.name,
         .previous_num_blocks = counts[i],
         .new_num_blocks = plan.num_blocks[i],
         .num_min_blocks = members[i].num_min_blocks,
         .num_full_blocks = group[i].model.num_full_blocks,
         .already_at_target = plan.num_blocks[i] == counts[i],
         .limiting_bucket = plan.limiting_bucket[i]});
  }
  for (const GroupBucket& bucket : plan.buckets) {
    result.fits = result.fits && bucket.headroom_bytes >= 0;
  }
  result.buckets = std::move(plan.buckets);
  result.warnings = std::move(warnings);
  if (request.describe_only || request.dry_run) return result;
  return ApplyGroup(request, group, std::move(result));
}

absl::StatusOr<MemoryReservation> ArtifactStore::ReserveBeside(
    const std::vector<std::string>& beside, const Artifact& artifact,
    const std::string& name, std::vector<std::string>* warnings) {
  // The artifact itself is not read again: a write holds its lock.
  GroupRequest request;
  request.dry_run = true;  // read only
  for (const std::string& other : beside) request.members.push_back({other});
  RBLN_ASSIGN_OR_RETURN(const std::vector<GroupMemberState> group,
                        LoadGroup(request));
  const MemoryModel own = BuildMemoryModel(artifact);
  std::vector<GroupMember> members = {{.name = name, .model = &own}};
  absl::StatusOr<DramChoice> device = DeviceFor(artifact);
  MemoryReservation reserved;
  for (const GroupMemberState& state : group) {
    if (state.at.name == name) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--beside names ", Echo(name),
          ", the artifact being sized: give the others on its devices"));
    }
    if (device.ok() && state.device.spec.family != device->spec.family) {
      return absl::FailedPreconditionError(absl::StrCat(
          state.at.name, " is compiled for ", state.device.spec.family, " and ",
          name, " for ", device->spec.family,
          ": artifacts of different NPU families cannot share a device"));
    }
    members.push_back({.name = state.at.name, .model = &state.model});
    const uint64_t count = state.artifact->current_num_blocks();
    Reserve(state.model, count, &reserved);
    reserved.names.push_back(
        absl::StrCat(state.at.name, " (", count, " blocks)"));
  }
  RBLN_RETURN_IF_ERROR(CheckLinedUp(members));
  warnings->push_back(absl::StrCat(
      "sized beside ", absl::StrJoin(reserved.names, ", "),
      ": their whole memory at their current counts is reserved first, and "
      "counted as other allocations"));
  return reserved;
}

absl::StatusOr<MemoryBudget> ArtifactStore::ResolveFreeBudget(
    const MemoryBudget& budget, const std::vector<int>& devices,
    const Artifact& artifact, const DeviceSpec& spec,
    std::vector<std::string>* warnings) {
  if (!budget.is_free()) return budget;
  RBLN_ASSIGN_OR_RETURN(const std::vector<ProbedDevice> live,
                        device_provider()->ProbeNow());
  RBLN_ASSIGN_OR_RETURN(
      const std::vector<FreeNodeBudget> free,
      FreeBudgetPerBucket(budget, spec, live, devices,
                          static_cast<int>(artifact.config().num_devices)));
  uint64_t least = std::numeric_limits<uint64_t>::max();
  std::vector<std::string> figures;
  for (const FreeNodeBudget& node : free) {
    least = std::min(least, node.node_bytes);
    figures.push_back(absl::StrCat(
        "device ", node.device_index, ": ", node.node_bytes, " of ",
        node.available_bytes - std::min(node.available_bytes, node.used_bytes),
        " bytes free"));
  }
  warnings->push_back(absl::StrCat(
      "budget ", budget.ToString(), " is what is free now on each device (",
      absl::StrJoin(figures, "; "),
      "), which counts every loaded model, this one too if it is loaded; the "
      "fit takes the least of them for every node"));
  return MemoryBudget::Bytes(least);
}

absl::StatusOr<std::vector<uint64_t>> ArtifactStore::GroupBudget(
    const GroupRequest& request, const GroupMemberState& first, uint32_t nodes,
    std::vector<std::string>* warnings) {
  if (!request.budget.has_value() || !request.budget->is_free()) {
    if (!request.devices.empty()) {
      warnings->push_back(
          "the devices chosen matter only for a free budget: with any other "
          "every node has the same budget");
    }
    RBLN_ASSIGN_OR_RETURN(
        const uint64_t per_bucket,
        BudgetPerBucket(request.budget, first.model, first.device.spec));
    return std::vector<uint64_t>(nodes, per_bucket);
  }
  // What is in use now, probed afresh (not the probe's cache).
  RBLN_ASSIGN_OR_RETURN(const std::vector<ProbedDevice> live,
                        device_provider()->ProbeNow());
  RBLN_ASSIGN_OR_RETURN(
      const std::vector<FreeNodeBudget> free,
      FreeBudgetPerBucket(*request.budget, first.device.spec, live,
                          request.devices, static_cast<int>(nodes)));
  std::vector<uint64_t> budget;
  for (const FreeNodeBudget& node : free) {
    budget.push_back(first.model.granularity == BucketGranularity::kNode
                         ? node.node_bytes
                         : node.per_chiplet_bytes);
  }
  return budget;
}

absl::StatusOr<GroupResult> ArtifactStore::ApplyGroup(
    const GroupRequest& request, const std::vector<GroupMemberState>& group,
    GroupResult result) {
  std::vector<std::string> names;
  std::vector<size_t> order;
  for (size_t i = 0; i < group.size(); ++i) {
    names.push_back(group[i].at.name);
    if (!result.members[i].already_at_target) order.push_back(i);
  }
  // Shrinks first, so that the device is never over its budget part way.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto grows = [&](size_t i) {
      return result.members[i].new_num_blocks >
             result.members[i].previous_num_blocks;
    };
    return !grows(a) && grows(b);
  });
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<WriterLease> lease,
                        WriterLease::Acquire(&locks_, env_, root_, names,
                                             options_.wait_for_artifact_locks,
                                             request.is_cancelled, nullptr));
  std::vector<std::string> written;
  for (size_t i : order) {
    GroupMemberResult& member = result.members[i];
    const WriteRequest write = {.name = member.name,
                                .target = member.new_num_blocks,
                                .expected_current = member.previous_num_blocks,
                                .is_cancelled = request.is_cancelled};
    absl::StatusOr<WriteResult> done = WriteLocked(write, group[i].at, "");
    if (!done.ok() && written.empty()) return done.status();
    if (!done.ok()) {
      return WithErrorFacts(
          absl::AbortedError(absl::StrCat(
              "the group was written in part: ", absl::StrJoin(written, ", "),
              " written, then ", member.name, " failed (",
              done.status().message(),
              "), and the rest were left; run it again to plan and finish "
              "it")),
          {.reason = ErrorReason::kGroupPartial,
           .artifact = member.name,
           .written_artifacts = written});
    }
    member.written = true;
    written.push_back(member.name);
    if (request.after_commit) request.after_commit(written.size());
  }
  return result;
}

}  // namespace rbln
