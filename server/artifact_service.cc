#include "server/artifact_service.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/version.h"
#include "core/budget.h"
#include "core/error_facts.h"
#include "core/status_macros.h"
#include "core/text.h"
#include "server/proto_conversions.h"

namespace rbln {
namespace {

// Operation ids are client-chosen keys of a bounded table; longer than a
// UUID with room to spare is a mistake (or an attack on memory).
constexpr size_t kMaxOperationIdBytes = 128;
// Finished writes whose outcome GetWriteProgress still reports.
constexpr size_t kKeptOutcomes = 1024;

}  // namespace

std::string ArtifactServiceImpl::LogName(const std::string& requested) const {
  absl::StatusOr<std::string> name = store_->CanonicalName(requested);
  return name.ok() ? *name : requested;
}

const std::string& ArtifactServiceImpl::LogName(
    const absl::StatusOr<std::shared_ptr<const ArtifactStore::Located>>& at,
    const std::string& requested) {
  return at.ok() ? (*at)->name : requested;
}

ArtifactServiceImpl::ArtifactServiceImpl(ArtifactStore* store,
                                         DramProvider* dram,
                                         const Authenticator* auth,
                                         int max_concurrent_writes,
                                         ServerFacts facts)
    : store_(store),
      dram_(dram),
      auth_(auth),
      max_concurrent_writes_(max_concurrent_writes),
      facts_(std::move(facts)) {}

absl::StatusOr<Caller> ArtifactServiceImpl::Authorize(
    grpc::ServerContextBase* context, RequestLog& log, bool writes,
    absl::string_view artifact) const {
  RBLN_ASSIGN_OR_RETURN(Caller caller, auth_->Identify(*context));
  log.SetCaller(caller);
  if (writes) {
    absl::Status may_write = CheckMayWrite(caller);
    if (!may_write.ok()) {
      return WithErrorFacts(may_write,
                            {.reason = ErrorReason::kNotAnOperator,
                             .artifact = LogName(std::string(artifact))});
    }
    return caller;
  }
  RBLN_RETURN_IF_ERROR(CheckNameForPeer(caller.remote, artifact, "artifact"));
  if (!artifact.empty()) {
    RBLN_RETURN_IF_ERROR(CheckReadsItself(caller, artifact));
  }
  return caller;
}

absl::Status ArtifactServiceImpl::CheckReadsItself(
    const Caller& caller, absl::string_view name) const {
  if (caller.is_operator || caller.unix_peer == nullptr) {
    return absl::OkStatus();
  }
  // A name that does not resolve is the read's own error to report.
  absl::StatusOr<std::vector<FileStat>> chain = store_->StatArtifactPath(name);
  if (!chain.ok()) return absl::OkStatus();
  // Every directory on the way must let the caller pass (search), and the
  // artifact's own directory must let it read too.
  for (size_t i = 0; i < chain->size(); ++i) {
    const FileStat& dir = (*chain)[i];
    const bool last = i + 1 == chain->size();
    if (PeerMay(*caller.unix_peer, last ? kMayRead | kMaySearch : kMaySearch,
                dir.uid, dir.gid, dir.mode)) {
      continue;
    }
    return WithErrorFacts(
        absl::PermissionDeniedError(absl::StrCat(
            caller.identity, " cannot read ", Echo(name), " itself (",
            last ? "its directory" : "a directory above it", ": owner ",
            dir.uid, ":", dir.gid, ", mode ", absl::StrFormat("%04o", dir.mode),
            "), so the daemon does not read it on its behalf; ask its owner, "
            "or "
            "for operator rights (rbln-artifactd --operators)")),
        {.reason = ErrorReason::kNotReadableByCaller,
         .artifact = LogName(std::string(name))});
  }
  return absl::OkStatus();
}

template <typename Handler>
grpc::ServerUnaryReactor* ArtifactServiceImpl::ServeRead(
    grpc::CallbackServerContext* context, absl::string_view method,
    const std::string& artifact, Handler handler) {
  auto* reactor = new ReadReactor();  // deletes itself once done
  if (std::optional<grpc::Status> status =
          handler(ReadMode::kCachedOnly, reactor)) {
    reactor->Finish(*status);
    return reactor;
  }
  reactor->DropLog();
  // grpc::Server::Shutdown waits for this call to finish, so the service
  // (and readers_) outlive it.
  const bool queued = readers_.TrySchedule(
      [reactor, handler = std::move(handler)]() mutable {
        reactor->Finish(*handler(ReadMode::kMayRead, reactor));
      },
      kMaxQueuedReads);
  if (!queued) {
    reactor->Finish(
        Refuse(context, method, artifact,
               absl::ResourceExhaustedError(absl::StrCat(
                   "too many reads are waiting for the disk (", kMaxQueuedReads,
                   " queued for the daemon's ", kReaderThreads,
                   " reader threads); retry with backoff"))));
  }
  return reactor;
}

grpc::Status ArtifactServiceImpl::Refuse(grpc::ServerContextBase* context,
                                         absl::string_view method,
                                         const std::string& artifact,
                                         const absl::Status& why) {
  RequestLog log(&running_, context, method, LogName(artifact));
  // Who floods or sends garbage is worth a log line; one who cannot be
  // identified stays caller=none (the refusal says nothing of the artifact).
  if (absl::StatusOr<Caller> caller = auth_->Identify(*context); caller.ok()) {
    log.SetCaller(*caller);
  }
  return log.Finish(why);
}

grpc::ServerUnaryReactor* ArtifactServiceImpl::GetKvcacheNumBlocks(
    grpc::CallbackServerContext* context,
    const v1::GetKvcacheNumBlocksRequest* req,
    v1::GetKvcacheNumBlocksResponse* resp) {
  return ServeRead(
      context, "GetKvcacheNumBlocks", req->artifact(),
      [this, context, req, resp](ReadMode mode, ReadReactor* reactor) {
        return Get(context, *req, resp, mode, reactor);
      });
}

std::optional<grpc::Status> ArtifactServiceImpl::Get(
    grpc::ServerContextBase* context, const v1::GetKvcacheNumBlocksRequest& req,
    v1::GetKvcacheNumBlocksResponse* resp, ReadMode mode,
    ReadReactor* reactor) {
  bool held = false;
  const absl::StatusOr<std::shared_ptr<const ArtifactStore::Located>> at =
      store_->Locate(req.artifact(), &held);
  const std::string& name = LogName(at, req.artifact());
  RequestLog& log =
      reactor->StartLog(&running_, context, "GetKvcacheNumBlocks", name);
  if (auto auth = Authorize(context, log, /*writes=*/false, req.artifact());
      !auth.ok()) {
    return log.Finish(auth.status());
  }
  if (!at.ok()) return log.Finish(at.status());
  if (!held) store_->KeepLocated(req.artifact(), *at);
  std::string link_target;
  absl::StatusOr<std::shared_ptr<const ArtifactSummary>> summary =
      store_->ReadSummary(**at, mode, &link_target);
  if (!summary.ok()) return log.Finish(summary.status());
  if (*summary == nullptr) return std::nullopt;  // not cached
  const RblnConfig& config = (*summary)->config;
  resp->set_artifact(name);  // canonical: the read succeeded
  resp->set_link_target(WireName(link_target));
  resp->set_kvcache_num_blocks(config.kvcache_num_blocks);
  resp->set_compiled_num_blocks((*summary)->compiled_num_blocks);
  resp->set_num_full_blocks(config.NumFullBlocks());
  resp->set_num_min_blocks(config.NumMinBlocks());
  return log.Finish(absl::OkStatus());
}

grpc::Status ArtifactServiceImpl::SetKvcacheNumBlocks(
    grpc::ServerContext* context, const v1::SetKvcacheNumBlocksRequest* req,
    v1::ResizeResponse* resp) {
  RequestLog log(&running_, context, "SetKvcacheNumBlocks",
                 LogName(req->artifact()));
  absl::StatusOr<Caller> caller = Authorize(
      context, log, /*writes=*/!req->options().dry_run(), req->artifact());
  if (!caller.ok()) return log.Finish(caller.status());
  WriteRequest request;
  request.name = req->artifact();
  request.target = req->num_blocks();
  request.devices.assign(req->devices().begin(), req->devices().end());
  request.beside.assign(req->beside().begin(), req->beside().end());
  absl::Status status =
      Write(context, *caller, std::move(request), req->options(), resp);
  log.SetCounts(status, resp->previous_num_blocks(), resp->new_num_blocks(),
                resp->written());
  return log.Finish(status);
}

grpc::Status ArtifactServiceImpl::FitMemoryBudget(
    grpc::ServerContext* context, const v1::FitMemoryBudgetRequest* req,
    v1::ResizeResponse* resp) {
  RequestLog log(&running_, context, "FitMemoryBudget",
                 LogName(req->artifact()));
  absl::StatusOr<Caller> caller = Authorize(
      context, log, /*writes=*/!req->options().dry_run(), req->artifact());
  if (!caller.ok()) return log.Finish(caller.status());
  absl::StatusOr<MemoryBudget> budget = MemoryBudget::Parse(req->budget());
  if (!budget.ok()) return log.Finish(budget.status());
  if (req->options().force()) {
    return log.Finish(absl::InvalidArgumentError(
        "force applies only to SetKvcacheNumBlocks: a budget's count always "
        "fits the device"));
  }
  WriteRequest request;
  request.name = req->artifact();
  request.budget = *budget;
  request.beside.assign(req->beside().begin(), req->beside().end());
  for (uint32_t device : req->devices()) {
    request.devices.push_back(static_cast<int>(std::min<uint32_t>(
        device, static_cast<uint32_t>(kMaxDeviceIndex) + 1)));
  }
  absl::Status status =
      Write(context, *caller, std::move(request), req->options(), resp);
  log.SetCounts(status, resp->previous_num_blocks(), resp->new_num_blocks(),
                resp->written());
  return log.Finish(status);
}

absl::Status ArtifactServiceImpl::AdmitWrite(const std::string& op_id,
                                             bool counted) {
  if (op_id.size() > kMaxOperationIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "operation_id of ", op_id.size(), " bytes is longer than the ",
        kMaxOperationIdBytes, " allowed; use a UUID"));
  }
  absl::MutexLock lock(&mu_);
  if (!op_id.empty() && progress_.contains(op_id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("operation_id ", Echo(op_id),
                     " is in use by a running write; choose a new id"));
  }
  if (counted && active_writes_ >= max_concurrent_writes_) {
    return absl::UnavailableError(absl::StrCat(
        "the daemon is already running its limit of ", max_concurrent_writes_,
        " concurrent write(s) (--max-concurrent-writes); retry when one "
        "has finished"));
  }
  if (counted) ++active_writes_;
  if (!op_id.empty()) {
    progress_[op_id] = {};
    outcomes_.erase(op_id);  // an id reused after its write finished
  }
  return absl::OkStatus();
}

void ArtifactServiceImpl::FinishWrite(
    const std::string& op_id, bool counted,
    const absl::StatusOr<WriteResult>& result) {
  absl::MutexLock lock(&mu_);
  if (counted) --active_writes_;
  if (op_id.empty()) return;
  progress_.erase(op_id);
  Outcome& outcome = outcomes_[op_id];
  outcome.code = result.status().code();
  outcome.message = WireText(result.status().message());
  outcome.written = result.ok() && result->written;
  outcome_order_.erase(
      std::remove(outcome_order_.begin(), outcome_order_.end(), op_id),
      outcome_order_.end());
  outcome_order_.push_back(op_id);
  while (outcome_order_.size() > kKeptOutcomes) {
    outcomes_.erase(outcome_order_.front());
    outcome_order_.pop_front();
  }
}

absl::Status ArtifactServiceImpl::Write(grpc::ServerContext* context,
                                        const Caller& caller,
                                        WriteRequest request,
                                        const v1::WriteOptions& options,
                                        v1::ResizeResponse* resp) {
  RBLN_RETURN_IF_ERROR(
      CheckNameForPeer(caller.remote, request.name, "artifact"));
  RBLN_RETURN_IF_ERROR(CheckNameForPeer(caller.remote, options.output_dir(),
                                        "output directory"));
  for (const std::string& other : request.beside) {
    RBLN_RETURN_IF_ERROR(CheckNameForPeer(caller.remote, other, "artifact"));
    if (request.dry_run) RBLN_RETURN_IF_ERROR(CheckReadsItself(caller, other));
  }
  request.output_name = options.output_dir();
  request.replace = options.replace();
  request.dry_run = options.dry_run();
  request.force = options.force();
  request.verify = options.verify();
  if (options.has_expected_current()) {
    request.expected_current = options.expected_current();
  }
  request.is_cancelled = [this, context]() {
    return context->IsCancelled() || stopping_.load();
  };
  const std::string op_id = options.operation_id();
  if (!op_id.empty()) {
    request.progress = [this, op_id](uint64_t done, uint64_t total) {
      absl::MutexLock lock(&mu_);
      Progress& progress = progress_[op_id];
      progress.done = done;
      progress.total = total;
    };
    request.waiting = [this, op_id](bool waiting) {
      absl::MutexLock lock(&mu_);
      progress_[op_id].waiting = waiting;
    };
  }
  // Dry runs write nothing and wait for no lock: they are not counted.
  const bool counted = !request.dry_run;
  RBLN_RETURN_IF_ERROR(AdmitWrite(op_id, counted));
  absl::StatusOr<WriteResult> result = store_->Write(request);
  if (absl::IsCancelled(result.status()) && stopping_.load()) {
    result = absl::UnavailableError(
        "the daemon is shutting down; nothing was changed (retry when it is "
        "back)");
  }
  FinishWrite(op_id, counted, result);
  RBLN_RETURN_IF_ERROR(result.status());
  FillResizeResponse(request, *result, store_->root(), resp);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ArtifactServiceImpl::DescribeArtifact(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* reply) {
  // Parsed from the request's one slice where it is one (a request of a
  // few bytes usually is), without the stream gRPC's generic parse sets up.
  grpc::Slice bytes;
  const bool whole = request->TrySingleSlice(&bytes).ok() ||
                     request->DumpToSingleSlice(&bytes).ok();
  v1::DescribeArtifactRequest req;
  if (!whole ||
      !req.ParseFromArray(bytes.begin(), static_cast<int>(bytes.size()))) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(Refuse(
        context, "DescribeArtifact", "",
        absl::InvalidArgumentError(
            "the request's bytes are not a DescribeArtifactRequest (a string "
            "that is not UTF-8, or not protobuf at all); use the stubs "
            "generated from proto/rbln/artifact/v1/artifact_service.proto")));
    return reactor;
  }
  const std::string artifact = req.artifact();
  // The handler keeps the request: the read may wait for a reader thread.
  return ServeRead(context, "DescribeArtifact", artifact,
                   [this, context, req = std::move(req), reply](
                       ReadMode mode, ReadReactor* reactor) {
                     return Describe(context, req, reply, mode, reactor);
                   });
}

std::optional<grpc::Status> ArtifactServiceImpl::Describe(
    grpc::ServerContextBase* context, const v1::DescribeArtifactRequest& req,
    grpc::ByteBuffer* reply, ReadMode mode, ReadReactor* reactor) {
  bool held = false;
  const absl::StatusOr<std::shared_ptr<const ArtifactStore::Located>> at =
      store_->Locate(req.artifact(), &held);
  const std::string& name = LogName(at, req.artifact());
  RequestLog& log =
      reactor->StartLog(&running_, context, "DescribeArtifact", name);
  if (auto auth = Authorize(context, log, /*writes=*/false, req.artifact());
      !auth.ok()) {
    return log.Finish(auth.status());
  }
  if (!at.ok()) return log.Finish(at.status());
  if (!held) store_->KeepLocated(req.artifact(), *at);
  std::string link_target;
  absl::StatusOr<std::shared_ptr<const Artifact>> read = store_->ReadShared(
      **at, {.verify_payload = req.verify_payload()}, mode, &link_target);
  if (!read.ok()) return log.Finish(read.status());
  if (*read == nullptr) return std::nullopt;  // not cached
  // Read before the device is asked for: a reply kept under it is made from
  // an answer at least as new.
  const uint64_t generation = store_->DeviceGeneration();
  std::optional<grpc::Slice> made =
      describe_replies_.Find(*read, name, generation);
  if (!made.has_value()) {
    // The device's provider may have to run a probe, or wait for one.
    if (mode == ReadMode::kCachedOnly && !dram_->AnswersWithoutWaiting()) {
      return std::nullopt;
    }
    made = DescribeReply(*read, name, link_target, generation, mode);
  }
  *reply = grpc::ByteBuffer(&*made, 1);
  return log.Finish(absl::OkStatus());
}

grpc::Slice ArtifactServiceImpl::DescribeReply(
    const std::shared_ptr<const Artifact>& read, const std::string& name,
    const std::string& link_target, uint64_t generation, ReadMode mode) {
  const absl::StatusOr<DramChoice> device = store_->DeviceFor(*read);
  // Kept only where the cache holds the artifact (ServeRead: this thread's
  // mode); one read from the files (a miss, a verify_payload) is a new
  // object at every call, whose reply would only take room.
  const bool keep = mode == ReadMode::kCachedOnly;
  if (std::optional<grpc::Slice> made =
          describe_replies_.Find(read, name, device)) {
    // Under the new generation, so that the next call need not ask.
    if (keep && generation != 0) {
      describe_replies_.Insert(read, name, generation, device, *made);
    }
    return *std::move(made);
  }
  const absl::StatusOr<std::shared_ptr<const MemoryPlan>> plan =
      device.ok()
          ? plans_.Plan(read, device->spec)
          : absl::StatusOr<std::shared_ptr<const MemoryPlan>>(device.status());
  v1::DescribeArtifactResponse resp;
  FillDescription(read.get(), name, link_target, device, plan, &resp);
  // What is in use and free on each device, where a live probe says.
  v1::GetDeviceInfoResponse report;
  FillDeviceInfo(dram_->Report(), &report);
  for (const v1::Device& probed : report.devices()) {
    if (probed.source() == "probe") *resp.add_devices() = probed;
  }
  grpc::Slice made(resp.SerializeAsString());
  if (keep) describe_replies_.Insert(read, name, generation, device, made);
  return made;
}

grpc::Status ArtifactServiceImpl::ListArtifacts(
    grpc::ServerContext* context, const v1::ListArtifactsRequest* req,
    v1::ListArtifactsResponse* resp) {
  RequestLog log(&running_, context, "ListArtifacts", "");
  absl::StatusOr<Caller> caller = Authorize(context, log, /*writes=*/false);
  if (!caller.ok()) return log.Finish(caller.status());
  absl::StatusOr<size_t> limit = ListPageSize(req->page_size());
  if (!limit.ok()) return log.Finish(limit.status());
  absl::StatusOr<ListPosition> from =
      ParseListPageToken(req->page_token(), store_->roots().size());
  if (!from.ok()) return log.Finish(from.status());
  absl::StatusOr<ArtifactStore::ListedPage> page =
      store_->ListPage(*from, req->prefix(), *limit);
  if (!page.ok()) return log.Finish(page.status());
  if (req->page_token().empty()) {
    FillRoots(*store_, resp->mutable_store(), resp->mutable_roots());
  }
  size_t bytes = 0;
  for (size_t i = 0; i < page->entries.size(); ++i) {
    // Cut short by bytes: the rest comes on the next page.
    if (bytes >= kMaxListReplyBytes) {
      resp->set_next_page_token(ListPageToken(page->entries[i - 1].next));
      return log.FinishReply(*resp);
    }
    bytes += FillListed(*caller, page->entries[i], resp);
  }
  if (page->more) {
    resp->set_next_page_token(ListPageToken(page->entries.back().next));
  }
  return log.FinishReply(*resp);
}

size_t ArtifactServiceImpl::FillListed(const Caller& caller,
                                       const ListedEntry& entry,
                                       v1::ListArtifactsResponse* resp) {
  const std::string& name = entry.name;
  if (entry.skipped_reason.has_value()) {
    v1::SkippedEntry* skipped = resp->add_skipped();
    skipped->set_artifact(WireName(name));
    skipped->set_reason(WireText(*entry.skipped_reason));
    return skipped->ByteSizeLong();
  }
  // A reader on the Unix socket sees only what it could read itself, and
  // how many were left out.
  if (!CheckReadsItself(caller, name).ok()) {
    resp->set_not_readable(resp->not_readable() + 1);
    return 0;
  }
  v1::ArtifactSummary* summary = resp->add_artifacts();
  // A directory name is any bytes; a reply's strings must be UTF-8.
  const std::string shown = WireName(name);
  summary->set_artifact(shown);
  if (shown != name) {
    summary->set_error(
        "its name is not UTF-8 text, or holds control characters: rename "
        "the directory to read or change it");
    return summary->ByteSizeLong();
  }
  // Read, not kept: one caller listing the store must not fill the cache.
  // The target as the read found it; as the listing did, when it failed.
  std::string link_target;
  absl::StatusOr<std::shared_ptr<const ArtifactSummary>> read =
      store_->ReadSummary(name, ReadMode::kReadWithoutKeeping, &link_target);
  if (!read.ok()) link_target = entry.link_target;
  summary->set_link_target(WireName(link_target));
  if (!read.ok()) {
    summary->set_error(
        WireText(absl::StrCat(absl::StatusCodeToString(read.status().code()),
                              ": ", read.status().message())));
    return summary->ByteSizeLong();
  }
  const ArtifactSummary& artifact = **read;
  summary->set_kvcache_num_blocks(artifact.config.kvcache_num_blocks);
  summary->set_npu(artifact.npu);
  summary->set_num_nodes(artifact.config.num_devices);
  summary->set_cls_name(artifact.config.cls_name);
  return summary->ByteSizeLong();
}

grpc::Status ArtifactServiceImpl::GetDeviceInfo(
    grpc::ServerContext* context, const v1::GetDeviceInfoRequest*,
    v1::GetDeviceInfoResponse* resp) {
  RequestLog log(&running_, context, "GetDeviceInfo", "");
  if (auto auth = Authorize(context, log, /*writes=*/false); !auth.ok()) {
    return log.Finish(auth.status());
  }
  FillDeviceInfo(dram_->Report(), resp);
  return log.FinishReply(*resp);
}

grpc::Status ArtifactServiceImpl::GetWriteProgress(
    grpc::ServerContext* context, const v1::GetWriteProgressRequest* req,
    v1::GetWriteProgressResponse* resp) {
  // Readers may watch any write; callers who cannot authenticate may not.
  if (absl::StatusOr<Caller> caller = auth_->Identify(*context); !caller.ok()) {
    return MarkedReply(context, ToGrpc(caller.status()));
  }
  absl::MutexLock lock(&mu_);
  if (auto it = progress_.find(req->operation_id()); it != progress_.end()) {
    resp->set_running(true);
    resp->set_state(it->second.waiting ? v1::WRITE_STATE_WAITING
                                       : v1::WRITE_STATE_RUNNING);
    resp->set_bytes_done(it->second.done);
    resp->set_bytes_total(it->second.total);
  } else if (auto done = outcomes_.find(req->operation_id());
             done != outcomes_.end()) {
    const Outcome& outcome = done->second;
    if (outcome.code == absl::StatusCode::kOk) {
      resp->set_state(v1::WRITE_STATE_COMMITTED);
      resp->set_written(outcome.written);
    } else {
      resp->set_state(v1::WRITE_STATE_FAILED);
      resp->set_code(static_cast<int32_t>(outcome.code));
      resp->set_message(outcome.message);
    }
  }
  return grpc::Status::OK;
}

grpc::Status ArtifactServiceImpl::GetServerInfo(
    grpc::ServerContext* context, const v1::GetServerInfoRequest*,
    v1::GetServerInfoResponse* resp) {
  RequestLog log(&running_, context, "GetServerInfo", "");
  absl::StatusOr<Caller> caller = auth_->Identify(*context);
  if (!caller.ok()) return log.Finish(caller.status());
  log.SetCaller(*caller);
  resp->set_version(std::string(ProjectVersion()));
  resp->set_commit(std::string(BuildCommit()));
  // HOST_NAME_MAX is 64 on Linux; the buffer leaves room for the NUL.
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) {
    resp->set_hostname(WireText(host));
  }
  FillRoots(*store_, resp->mutable_store(), resp->mutable_roots());
  for (const std::string& listener : facts_.listeners) {
    resp->add_listeners(WireText(listener));
  }
  resp->set_codec(facts_.codec);
  resp->set_caller(WireText(caller->identity));
  resp->set_role(std::string(caller->role()));
  return log.FinishReply(*resp);
}

void ArtifactServiceImpl::CancelUncommittedWrites() { stopping_.store(true); }

int ArtifactServiceImpl::active_writes() const {
  absl::MutexLock lock(&mu_);
  return active_writes_;
}

std::vector<std::string> ArtifactServiceImpl::DescribeRunning() const {
  const absl::Time now = absl::Now();
  std::vector<std::string> lines;
  running_.ForEach([&](const RequestLog& running) {
    if (running.finished()) return;  // answered; its reply on its way
    lines.push_back(absl::StrCat(
        running.method(),
        " artifact=", LogValue(running.artifact(), kMaxEchoBytes),
        " running_ms=", absl::ToInt64Milliseconds(now - running.start())));
  });
  std::sort(lines.begin(), lines.end());
  return lines;
}

}  // namespace rbln
