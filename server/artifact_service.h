// ArtifactServiceImpl: the gRPC face of the core library. Handlers only
// translate: request -> ArtifactStore / DramProvider call -> reply, and
// absl::Status -> grpc::Status (the canonical codes are the same numbers;
// the facts core attaches to a status, core/error_facts.h, become the
// ErrorDetail in its google.rpc.Status details).
// Every error a handler returns carries the trailing metadata of
// rbln/artifact/v1/reply_metadata.h, so that clients can tell it from a
// transport failure (an OK reply is always the handler's, and unmarked).
// Every request is logged as one line naming its caller and role
// (request_log.h), with what callers sent quoted and escaped; every status
// message is cut to kMaxStatusMessageBytes (proto_conversions.h).
//
// Thread-safe: gRPC calls handlers concurrently.
#ifndef RBLN_SERVER_ARTIFACT_SERVICE_H_
#define RBLN_SERVER_ARTIFACT_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/device/dram.h"
#include "core/resize/plan_cache.h"
#include "core/store/store.h"
#include "core/thread_pool.h"
#include "rbln/artifact/v1/artifact_service.grpc.pb.h"
#include "server/auth.h"
#include "server/describe_replies.h"
#include "server/read_reactor.h"
#include "server/request_log.h"

namespace rbln {

namespace v1 = ::rbln::artifact::v1;

// What GetServerInfo reports that only the daemon knows (daemon.h).
struct ServerFacts {
  // Every address served, "unix:PATH" or "HOST:PORT" (--listen, then any
  // other listener).
  std::vector<std::string> listeners;
  // What reads and rewrites the containers ("built-in").
  std::string codec;
};

// Get and Describe, the calls orchestrators poll, are gRPC callback methods:
// answered on the gRPC thread that received them when the artifact cache
// (core/format/artifact_cache.h) holds the answer, else on a small pool of
// the service's own, so that a read that waits for the disk or a codec never
// holds up gRPC's threads (a read that finds kMaxQueuedReads waiting for the
// pool is refused). Describe is a raw one: its replies are sent as bytes
// made once (describe_replies.h). The other calls are synchronous.
using ArtifactServiceBase =
    v1::ArtifactService::WithCallbackMethod_GetKvcacheNumBlocks<
        v1::ArtifactService::WithRawCallbackMethod_DescribeArtifact<
            v1::ArtifactService::Service>>;

class ArtifactServiceImpl final : public ArtifactServiceBase {
 public:
  // Reads that must touch the disk at once, beyond which they queue.
  static constexpr int kReaderThreads = 4;
  // Reads that may wait for a reader thread, beyond which they are refused
  // with RESOURCE_EXHAUSTED. Every read the cache cannot answer queues (a
  // verify_payload Describe never can), so a flood of them would hold
  // memory without bound (a waiting read keeps its call: some KiB) and make
  // every later read wait behind it. 256 is more than an orchestrator asks
  // at once of a large store after a restart (a read per artifact, the
  // cache empty), and a few MiB at most.
  static constexpr size_t kMaxQueuedReads = 256;

  // `store`, `dram` and `auth` must outlive the service. At most
  // `max_concurrent_writes` writes run at once; more get UNAVAILABLE. Every
  // call is identified by `auth`; Set and Fit other than dry runs need an
  // operator (CheckMayWrite). `facts` are reported by GetServerInfo.
  ArtifactServiceImpl(ArtifactStore* store, DramProvider* dram,
                      const Authenticator* auth, int max_concurrent_writes,
                      ServerFacts facts);

  grpc::ServerUnaryReactor* GetKvcacheNumBlocks(
      grpc::CallbackServerContext* context,
      const v1::GetKvcacheNumBlocksRequest* req,
      v1::GetKvcacheNumBlocksResponse* resp) override;
  grpc::Status SetKvcacheNumBlocks(grpc::ServerContext* context,
                                   const v1::SetKvcacheNumBlocksRequest* req,
                                   v1::ResizeResponse* resp) override;
  grpc::Status FitMemoryBudget(grpc::ServerContext* context,
                               const v1::FitMemoryBudgetRequest* req,
                               v1::ResizeResponse* resp) override;
  // A DescribeArtifactRequest in, a DescribeArtifactResponse out.
  grpc::ServerUnaryReactor* DescribeArtifact(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* reply) override;
  grpc::Status ListArtifacts(grpc::ServerContext* context,
                             const v1::ListArtifactsRequest* req,
                             v1::ListArtifactsResponse* resp) override;
  grpc::Status GetDeviceInfo(grpc::ServerContext* context,
                             const v1::GetDeviceInfoRequest* req,
                             v1::GetDeviceInfoResponse* resp) override;
  grpc::Status GetWriteProgress(grpc::ServerContext* context,
                                const v1::GetWriteProgressRequest* req,
                                v1::GetWriteProgressResponse* resp) override;
  // server/fit_together.cc.
  grpc::Status FitTogether(grpc::ServerContext* context,
                           const v1::FitTogetherRequest* req,
                           v1::FitTogetherResponse* resp) override;
  grpc::Status GetServerInfo(grpc::ServerContext* context,
                             const v1::GetServerInfoRequest* req,
                             v1::GetServerInfoResponse* resp) override;

  // Shutdown, second step (the first is grpc::Server::Shutdown, which takes
  // no new calls): every write not yet at its commit point stops, changing
  // nothing, and its caller gets UNAVAILABLE "shutting down; nothing was
  // changed". Writes past the commit point finish with their real result.
  void CancelUncommittedWrites();
  // Writes running now.
  int active_writes() const;
  // One line per request still running ("SetKvcacheNumBlocks
  // artifact=\"a\" for 12.3 s"), for the log of a forced exit.
  std::vector<std::string> DescribeRunning() const;
  // Describe's kept replies (their count and hits, for tests).
  const DescribeReplies& describe_replies() const { return describe_replies_; }

 private:
  struct Progress {
    uint64_t done = 0;
    uint64_t total = 0;
    bool waiting = false;  // for another writer's lock
  };
  struct Outcome {
    absl::StatusCode code = absl::StatusCode::kOk;
    std::string message;
    bool written = false;
  };
  using ReadMode = ArtifactStore::ReadMode;
  // Serves a callback read: `handler(ReadMode::kCachedOnly, reactor)` on this
  // thread, and when it returns nullopt (it would have to read or wait),
  // `handler(ReadMode::kMayRead, reactor)` on readers_, which must answer.
  // When kMaxQueuedReads reads already wait there, the call is refused
  // instead (Refuse, logged as `method` of `artifact`). The handler keeps
  // its request log in `reactor` (ReadReactor::StartLog).
  template <typename Handler>
  grpc::ServerUnaryReactor* ServeRead(grpc::CallbackServerContext* context,
                                      absl::string_view method,
                                      const std::string& artifact,
                                      Handler handler);
  // `why` (not OK) for a call refused before its handler runs (a read that
  // found kMaxQueuedReads waiting, a request that does not parse), logged
  // with its caller and marked like every reply.
  grpc::Status Refuse(grpc::ServerContextBase* context,
                      absl::string_view method, const std::string& artifact,
                      const absl::Status& why);
  std::optional<grpc::Status> Get(grpc::ServerContextBase* context,
                                  const v1::GetKvcacheNumBlocksRequest& req,
                                  v1::GetKvcacheNumBlocksResponse* resp,
                                  ReadMode mode, ReadReactor* reactor);
  std::optional<grpc::Status> Describe(grpc::ServerContextBase* context,
                                       const v1::DescribeArtifactRequest& req,
                                       grpc::ByteBuffer* reply, ReadMode mode,
                                       ReadReactor* reactor);
  // Describe's reply for `read` asked by `name` (a link to `link_target`,
  // or ""; the two determine it, as `read` is that target's), for the
  // device as it is now: one kept for the same device choice, else made
  // (and kept when `mode` is kCachedOnly) under the device `generation`
  // read before.
  grpc::Slice DescribeReply(const std::shared_ptr<const Artifact>& read,
                            const std::string& name,
                            const std::string& link_target, uint64_t generation,
                            ReadMode mode);

  // Runs a Set or Fit: admission, progress tracking, the store call, and the
  // reply.
  absl::Status Write(grpc::ServerContext* context, const Caller& caller,
                     WriteRequest request, const v1::WriteOptions& options,
                     v1::ResizeResponse* resp);
  // Admits a write (the limit, a free operation id); Finish undoes it and
  // records the outcome under the id.
  absl::Status AdmitWrite(const std::string& op_id, bool counted);
  void FinishWrite(const std::string& op_id, bool counted,
                   const absl::StatusOr<WriteResult>& result);

  // Identifies the caller of `context` into `log`; with `writes`, also
  // checks that it may write (NOT_AN_OPERATOR naming `artifact`). Without,
  // `artifact` (when named) must be named as the caller's transport allows
  // (no absolute path over TCP), and a reader on the Unix socket must be
  // able to read it itself (CheckReadsItself): the daemon is no confused
  // deputy. Returns the caller.
  absl::StatusOr<Caller> Authorize(grpc::ServerContextBase* context,
                                   RequestLog& log, bool writes,
                                   absl::string_view artifact = "") const;
  // PERMISSION_DENIED (NOT_READABLE_BY_CALLER) when `caller` is a
  // non-operator Unix peer whose uid and groups could not read the artifact
  // `name` themselves: search on every directory from its root down, read
  // and search on its own.
  absl::Status CheckReadsItself(const Caller& caller,
                                absl::string_view name) const;

  // Adds a listed entry to a ListArtifacts page (an artifact's summary, or
  // the entry passed over; one more not_readable when `caller` could not
  // read it itself); returns the bytes it added.
  size_t FillListed(const Caller& caller, const ListedEntry& entry,
                    v1::ListArtifactsResponse* resp);

  // The store-relative name for logs (the request's text when invalid).
  std::string LogName(const std::string& requested) const;
  // The same for a name the read resolved already (ArtifactStore::Locate).
  static const std::string& LogName(
      const absl::StatusOr<std::shared_ptr<const ArtifactStore::Located>>& at,
      const std::string& requested);

  ArtifactStore* const store_;
  DramProvider* const dram_;
  const Authenticator* const auth_;
  const int max_concurrent_writes_;
  const ServerFacts facts_;
  std::atomic<bool> stopping_{false};
  // Describe's memory plans, made once per artifact read and device.
  PlanCache plans_;
  // Describe's replies, serialized once per artifact read, name and device.
  DescribeReplies describe_replies_;
  // Every request being handled, the newest first.
  RunningRequests running_;

  mutable absl::Mutex mu_;
  int active_writes_ ABSL_GUARDED_BY(mu_) = 0;
  // Running writes by operation id.
  absl::flat_hash_map<std::string, Progress> progress_ ABSL_GUARDED_BY(mu_);
  // Outcomes of the last kKeptOutcomes finished ids, oldest first.
  absl::flat_hash_map<std::string, Outcome> outcomes_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> outcome_order_ ABSL_GUARDED_BY(mu_);

  // Reads that could not be answered from the cache (ServeRead). Declared
  // after what they use, so that it is destroyed (joined) first.
  ThreadPool readers_{kReaderThreads};
};

}  // namespace rbln

#endif  // RBLN_SERVER_ARTIFACT_SERVICE_H_
