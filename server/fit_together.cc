// ArtifactServiceImpl::FitTogether (artifact_service.proto): the request
// checked and translated for ArtifactStore::FitTogether, and its result
// into the reply.
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/text.h"
#include "server/artifact_service.h"
#include "server/proto_conversions.h"
#include "server/request_log.h"

namespace rbln {
namespace {

// Test-only: set in the daemon's environment to N, it ends the process
// (exit kExitKilledForTest) right after the N-th commit of a FitTogether.
constexpr char kCrashAfterGroupCommitsEnv[] =
    "RBLN_ARTIFACTD_TEST_CRASH_AFTER_GROUP_COMMITS";
constexpr int kExitKilledForTest = 137;

// The request as the store takes it; INVALID_ARGUMENT for what the RPC
// refuses.
absl::StatusOr<GroupRequest> ToGroupRequest(const v1::FitTogetherRequest& req) {
  const v1::WriteOptions& options = req.options();
  if (!options.output_dir().empty() || options.replace() ||
      options.has_expected_current() || options.force() || options.verify() ||
      !options.operation_id().empty()) {
    return absl::InvalidArgumentError(
        "FitTogether takes only dry_run among the write options: each "
        "member is written in place, with expected_num_blocks as its "
        "compare-and-set");
  }
  GroupRequest request;
  for (uint32_t device : req.devices()) {
    if (device > static_cast<uint32_t>(kMaxDeviceIndex)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device ", device, " is past the largest index, ", kMaxDeviceIndex));
    }
    request.devices.push_back(static_cast<int>(device));
  }
  request.describe_only = req.describe_only();
  request.dry_run = options.dry_run();
  if (!req.budget().empty()) {
    absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse(req.budget());
    if (!budget.ok()) return budget.status();
    request.budget = *budget;
  } else if (!req.describe_only()) {
    return absl::InvalidArgumentError(
        "give the group's budget (as for FitMemoryBudget: \"0.9\", \"90%\", "
        "\"12GB\")");
  }
  for (const v1::Member& member : req.members()) {
    request.members.push_back(
        {.name = member.artifact(),
         .weight = member.weight() == 0 ? 1 : member.weight(),
         .expected_num_blocks =
             member.has_expected_num_blocks()
                 ? std::optional<uint64_t>(member.expected_num_blocks())
                 : std::nullopt});
  }
  return request;
}

void FillGroupReply(const GroupResult& result, v1::FitTogetherResponse* resp) {
  for (const GroupMemberResult& member : result.members) {
    v1::MemberResult* out = resp->add_members();
    out->set_artifact(WireName(member.name));
    out->set_previous_num_blocks(member.previous_num_blocks);
    out->set_new_num_blocks(member.new_num_blocks);
    out->set_num_min_blocks(member.num_min_blocks);
    out->set_num_full_blocks(member.num_full_blocks);
    out->set_written(member.written);
    out->set_already_at_target(member.already_at_target);
    out->set_limiting_bucket(member.limiting_bucket);
  }
  for (const GroupBucket& bucket : result.buckets) {
    v1::GroupBucket* out = resp->add_buckets();
    out->set_node(bucket.node);
    out->set_chiplet(bucket.chiplet);
    out->set_budget_bytes(bucket.budget_bytes);
    for (uint64_t used : bucket.used_bytes) out->add_used_bytes(used);
    out->set_headroom_bytes(bucket.headroom_bytes);
  }
  for (const std::string& warning : result.warnings) {
    resp->add_warnings(WireText(warning));
  }
  resp->set_fits(result.fits);
}

}  // namespace

grpc::Status ArtifactServiceImpl::FitTogether(grpc::ServerContext* context,
                                              const v1::FitTogetherRequest* req,
                                              v1::FitTogetherResponse* resp) {
  const std::string first =
      req->members().empty() ? "" : req->members(0).artifact();
  RequestLog log(&running_, context, "FitTogether", LogName(first));
  const bool writes = !req->describe_only() && !req->options().dry_run();
  absl::StatusOr<Caller> caller = Authorize(context, log, writes);
  if (!caller.ok()) return log.Finish(caller.status());
  absl::StatusOr<GroupRequest> request = ToGroupRequest(*req);
  if (!request.ok()) return log.Finish(request.status());
  for (const GroupMemberRequest& member : request->members) {
    absl::Status named =
        CheckNameForPeer(caller->remote, member.name, "artifact");
    if (named.ok() && !writes) named = CheckReadsItself(*caller, member.name);
    if (!named.ok()) return log.Finish(named);
  }
  request->is_cancelled = [this, context]() {
    return context->IsCancelled() || stopping_.load();
  };
  // For tests of a crash part way through a group (tests/group_crash_test.py):
  // the process ends, as if killed, right after that many commits.
  if (const char* crash = std::getenv(kCrashAfterGroupCommitsEnv)) {
    const size_t after = std::strtoul(crash, nullptr, 10);
    request->after_commit = [after](size_t committed) {
      if (committed == after) _exit(kExitKilledForTest);
    };
  }
  // A write of several artifacts counts as one against the limit.
  if (writes) {
    if (absl::Status admitted = AdmitWrite("", true); !admitted.ok()) {
      return log.Finish(admitted);
    }
  }
  absl::StatusOr<GroupResult> result = store_->FitTogether(*request);
  if (writes) FinishWrite("", true, absl::StatusOr<WriteResult>(WriteResult{}));
  if (!result.ok()) return log.Finish(result.status());
  FillGroupReply(*result, resp);
  resp->set_dry_run(req->options().dry_run());
  resp->set_describe_only(req->describe_only());
  return log.Finish(absl::OkStatus());
}

}  // namespace rbln
