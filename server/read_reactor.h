// ReadReactor: the reactor of a callback read (GetKvcacheNumBlocks,
// DescribeArtifact; server/artifact_service.h), which keeps the read's
// RequestLog until the reply has been sent, so that the line of an answered
// read is logged then (OnDone) and the caller does not wait for it
// (docs/performance.md). A caller that does not read its reply holds its
// line back until the call ends (its deadline, a cancel, its connection's
// close, the daemon's stop); the line says when the read was answered.
//
// Used as gRPC uses a reactor: the handler's thread, then the one that sent
// the reply; it deletes itself once done.
#ifndef RBLN_SERVER_READ_REACTOR_H_
#define RBLN_SERVER_READ_REACTOR_H_

#include <optional>

#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "server/request_log.h"

namespace rbln {

class ReadReactor final : public grpc::ServerUnaryReactor {
 public:
  // The log of this attempt at the read; an earlier attempt's, which found
  // nothing cached, goes without a line.
  RequestLog& StartLog(RunningRequests* running,
                       grpc::ServerContextBase* context,
                       absl::string_view method, absl::string_view artifact) {
    log_.reset();  // off the running list before the new one joins
    RequestLog& log = log_.emplace(running, context, method, artifact);
    log.LogOnceSent();
    return log;
  }
  void DropLog() { log_.reset(); }

  void OnDone() override {
    if (log_.has_value()) log_->WriteLine();
    delete this;
  }
  void OnCancel() override {}
  // Lets gRPC call OnDone on the thread that sent the reply, as it calls
  // its own DefaultReactor's, instead of handing it to its executor thread
  // (gRPC 1.51 names this hook "not API"; grpcpp/support/server_callback.h).
  // OnDone only logs an info line (errors are logged before the reply): it
  // takes the log sink's lock, and writes to stderr only when its line fills
  // a batch, or at --log-linger-ms 0, as a handler on this thread would.
  bool InternalInlineable() override { return true; }

 private:
  std::optional<RequestLog> log_;
};

}  // namespace rbln

#endif  // RBLN_SERVER_READ_REACTOR_H_
