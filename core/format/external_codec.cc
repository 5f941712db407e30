#include "core/format/external_codec.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/os/path.h"
#include "core/os/subprocess.h"
#include "core/status_macros.h"
#include "core/text.h"

namespace rbln {
namespace {

// On the daemon's shutdown, the workers have this long to exit in all.
constexpr absl::Duration kShutdownGrace = absl::Seconds(2);
// Restart backoff after a worker was lost: doubling from kBackoffStart up to
// kBackoffMax while workers keep failing, so that a codec that crashes at
// once cannot make the daemon spin.
constexpr absl::Duration kBackoffStart = absl::Milliseconds(100);
constexpr absl::Duration kBackoffMax = absl::Seconds(5);

// The name of a codec for messages: the first argument naming an existing
// file (an interpreter's script), else the program.
std::string CodecName(const std::vector<std::string>& argv) {
  for (size_t i = 1; i < argv.size(); ++i) {
    struct stat st;
    if (!argv[i].empty() && argv[i][0] != '-' &&
        stat(argv[i].c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      return std::string(Basename(argv[i]));
    }
  }
  return std::string(Basename(argv[0]));
}

// `what` ("SOURCE: the codec (NAME)") wrote exactly `out_name` in `scratch`.
absl::Status CheckScratchListing(Env* env, const std::string& scratch,
                                 const std::string& out_name,
                                 absl::string_view what) {
  RBLN_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, env->ListDir(scratch));
  std::vector<std::string> others;
  bool written = false;
  for (const DirEntry& entry : entries) {
    if (entry.name == out_name) {
      written = true;
    } else {
      others.push_back(entry.name);
    }
  }
  if (!others.empty()) {
    return absl::InternalError(
        absl::StrCat(what, " wrote ", Echo(absl::StrJoin(others, ", ")),
                     " in its scratch directory, other than ", Echo(out_name),
                     "; nothing was kept"));
  }
  if (!written) {
    return absl::InternalError(
        absl::StrCat(what, " answered ok but did not write ", Echo(out_name)));
  }
  return absl::OkStatus();
}

// The output `what` wrote, in its scratch directory: one
// regular file with one link, owned by the codec's `uid`.
absl::Status CheckOutput(const FileStat& st, const std::string& out_name,
                         uid_t uid, absl::string_view what) {
  if (st.type != FileType::kRegular) {
    return absl::InternalError(
        absl::StrCat(what, " wrote ", Echo(out_name),
                     " as something other than a regular file"));
  }
  if (st.nlink != 1) {
    return absl::InternalError(absl::StrCat(what, " wrote ", Echo(out_name),
                                            " with ", st.nlink,
                                            " hard links (one expected)"));
  }
  if (st.uid != uid) {
    return absl::InternalError(absl::StrCat(what, " left ", Echo(out_name),
                                            " owned by uid ", st.uid,
                                            ", not its own uid ", uid));
  }
  return absl::OkStatus();
}

// The daemon's own copy of the file `what` wrote at `from`, made at `to`
// (a reflink where the file system shares extents, else a kernel-side
// copy) and synced: a descriptor the codec kept, or a file it shares, cannot
// reach what is committed. The file copied is the one checked: the
// descriptor opened, not the name. Its size goes to `*size`.
absl::Status CopyCodecOutput(Env* env, const std::string& from,
                             const std::string& to, uid_t uid,
                             absl::string_view what, uint64_t* size) {
  const std::string out_name(Basename(from));
  RBLN_ASSIGN_OR_RETURN(FileStat named, env->Stat(from));
  RBLN_RETURN_IF_ERROR(CheckOutput(named, out_name, uid, what));
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> source,
                        env->NewRandomAccessFile(from));
  struct stat opened {};
  if (fstat(source->native_handle(), &opened) != 0) {
    return ErrnoToStatus("stat", from, errno);
  }
  if (opened.st_ino != named.inode || opened.st_dev != named.device) {
    return absl::InternalError(absl::StrCat(what, " replaced ", Echo(out_name),
                                            " while it was being checked"));
  }
  named.nlink = opened.st_nlink;
  named.uid = opened.st_uid;
  RBLN_RETURN_IF_ERROR(CheckOutput(named, out_name, uid, what));
  *size = static_cast<uint64_t>(opened.st_size);
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> copy,
                        env->NewWritableFile(to));
  RBLN_RETURN_IF_ERROR(copy->CopyRangeFrom(*source, 0, *size, 0));
  // Another worker of the codec's uid could write it while it is copied.
  struct stat after {};
  if (fstat(source->native_handle(), &after) != 0) {
    return ErrnoToStatus("stat", from, errno);
  }
  if (after.st_size != opened.st_size ||
      after.st_mtim.tv_sec != opened.st_mtim.tv_sec ||
      after.st_mtim.tv_nsec != opened.st_mtim.tv_nsec ||
      after.st_ctim.tv_sec != opened.st_ctim.tv_sec ||
      after.st_ctim.tv_nsec != opened.st_ctim.tv_nsec) {
    return absl::InternalError(absl::StrCat(what, " changed ", Echo(out_name),
                                            " while it was being copied"));
  }
  RBLN_RETURN_IF_ERROR(copy->Sync());
  return copy->Close();
}

}  // namespace

// One request on a worker of the pool.
struct ExternalCodec::Call {
  CodecRequest request;
  absl::string_view path;  // the file, for messages
  // The descriptors the request hands over, in the order it names them.
  std::vector<int> fds;
  // Polled while the worker works; a status other than OK kills the worker
  // and is returned. May be empty.
  std::function<absl::Status()> cancelled;
  // Stop the worker once it has answered (after a rescale: so that no
  // descriptor it kept on its output outlives the call).
  bool retire = false;
  // Set to kTimeout or kCrash when the call fails so; left as it is for
  // any other end. May be null.
  CodecOutcome* failure = nullptr;
};

ExternalCodec::ExternalCodec(const ExternalCodecOptions& options,
                             std::vector<std::string> argv, std::string name,
                             CodecUser user, Containment containment)
    : options_(options),
      name_(std::move(name)),
      uid_(user.uid),
      gid_(user.gid),
      containment_(containment.mode),
      launcher_(std::make_unique<CodecLauncher>(std::move(argv), user,
                                                std::move(containment))) {}

absl::StatusOr<std::unique_ptr<ExternalCodec>> ExternalCodec::Start(
    const ExternalCodecOptions& options) {
  const std::string flag =
      absl::StrCat("--codec-command '", Echo(options.command), "'");
  if (options.workers < 1 || options.workers > kMaxCodecWorkers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--codec-workers ", options.workers, ": give 1 to ", kMaxCodecWorkers));
  }
  if (options.timeout < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        "--codec-timeout-seconds: give at least 1 second");
  }
  absl::StatusOr<std::vector<std::string>> argv =
      SplitCommandLine(options.command);
  if (!argv.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--codec-command: ", argv.status().message()));
  }
  if (argv->front().find('/') == std::string::npos) {
    const char* path = getenv("PATH");
    absl::StatusOr<std::string> found =
        FindExecutableOnPath(argv->front(), path != nullptr ? path : "");
    if (!found.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(flag, ": ", found.status().message(),
                       "; give the program's full path"));
    }
    argv->front() = *found;
  } else if (access(argv->front().c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, ": ", Echo(argv->front()),
                     " is not an executable file (", strerror(errno), ")"));
  }
  RBLN_ASSIGN_OR_RETURN(const CodecUser user, ResolveCodecUser(options.user));
  absl::StatusOr<Containment> containment =
      PrepareContainment(options.containment);
  if (!containment.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--codec-containment ", ContainmentModeName(options.containment), ": ",
        containment.status().message(),
        "; give another mode, or auto (the first that works here)"));
  }
  const std::string name = absl::StrCat("external (", CodecName(*argv), ")");
  std::unique_ptr<ExternalCodec> codec(new ExternalCodec(
      options, *std::move(argv), name, user, *std::move(containment)));
  for (const std::string& warning : user.warnings) codec->Log(warning);
  absl::StatusOr<std::unique_ptr<CodecWorker>> first =
      codec->StartWorker(&codec->hello_);
  if (!first.ok()) {
    return absl::Status(first.status().code(),
                        absl::StrCat(flag, " ", first.status().message()));
  }
  absl::MutexLock lock(&codec->mu_);
  codec->idle_.push_back(*std::move(first));
  codec->live_ = 1;
  return codec;
}

ExternalCodec::~ExternalCodec() {
  std::vector<std::unique_ptr<CodecWorker>> workers;
  {
    absl::MutexLock lock(&mu_);
    workers = std::move(idle_);
  }
  for (const std::unique_ptr<CodecWorker>& worker : workers)
    worker->CloseSocket();
  const absl::Time deadline = absl::Now() + kShutdownGrace;
  for (const std::unique_ptr<CodecWorker>& worker : workers) {
    if (!worker->ExitedBy(deadline)) {
      Log(absl::StrCat("codec[", worker->pid(),
                       "]: did not exit at end of input; killed"));
    }
  }
  workers.clear();  // kills and reaps what is left
  launcher_.reset();
}

std::string ExternalCodec::name() const { return name_; }

int64_t ExternalCodec::workers_started() const {
  absl::MutexLock lock(&mu_);
  return started_;
}

void ExternalCodec::Log(absl::string_view line) const {
  if (options_.log) options_.log(line);
}

absl::StatusOr<std::unique_ptr<CodecWorker>> ExternalCodec::StartWorker(
    CodecHello* hello) {
  RBLN_ASSIGN_OR_RETURN(CodecProcess process, launcher_->Launch());
  const pid_t pid = process.pid;
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<CodecWorker> worker,
                        CodecWorker::Start(std::move(process), options_.log));
  {
    absl::MutexLock lock(&mu_);
    ++started_;
  }
  Log(absl::StrCat("codec[", pid, "]: started as uid ", uid_, ": ",
                   Echo(options_.command)));
  RBLN_RETURN_IF_ERROR(Greet(*worker, hello));
  return worker;
}

absl::Status ExternalCodec::Greet(CodecWorker& worker, CodecHello* hello) {
  const int64_t id = worker.NextId();
  const std::string line = EncodeHelloRequest(id);
  const absl::Time deadline = absl::Now() + options_.timeout;
  absl::Status unused;
  std::string reply;
  CodecWorker::Io io = worker.Send(line, {}, deadline, nullptr, &unused);
  if (io == CodecWorker::Io::kOk) {
    io = worker.ReadLine(&reply, deadline, nullptr, &unused);
  }
  const std::string within = absl::StrCat("did not answer hello within ",
                                          FormatSeconds(options_.timeout));
  switch (io) {
    case CodecWorker::Io::kOk:
      break;
    case CodecWorker::Io::kTimeout:
      worker.Kill();
      return absl::FailedPreconditionError(absl::StrCat(
          within, " (--codec-timeout-seconds); its last stderr lines: ",
          worker.LastStderrLines(true)));
    case CodecWorker::Io::kClosed: {
      const std::string how = worker.ExitDescription();
      return absl::FailedPreconditionError(absl::StrCat(
          within, ": it ", how,
          "; its last stderr lines: ", worker.LastStderrLines(true)));
    }
    default:
      worker.Kill();
      return absl::FailedPreconditionError(absl::StrCat(
          within, ": ",
          io == CodecWorker::Io::kTooLong ? "a line longer than 16 MiB"
                                          : worker.last_error()));
  }
  absl::StatusOr<CodecHello> parsed = DecodeHelloReply(reply, id);
  if (!parsed.ok()) {
    worker.Kill();
    return absl::FailedPreconditionError(absl::StrCat(
        "did not answer hello as protocol ", kCodecProtocolVersion, ": ",
        parsed.status().message(), ": ", Echo(reply),
        "; its last stderr lines: ", worker.LastStderrLines(false)));
  }
  if (hello != nullptr) *hello = *std::move(parsed);
  return absl::OkStatus();
}

bool ExternalCodec::CanAcquire() const {
  return !idle_.empty() || live_ < options_.workers;
}

absl::StatusOr<std::unique_ptr<CodecWorker>> ExternalCodec::Acquire(
    CodecOutcome* failure) {
  absl::Duration backoff;
  while (true) {
    std::unique_ptr<CodecWorker> stale;
    {
      absl::MutexLock lock(&mu_);
      if (!mu_.AwaitWithTimeout(
              absl::Condition(this, &ExternalCodec::CanAcquire),
              options_.timeout)) {
        return absl::UnavailableError(absl::StrCat(
            "all ", options_.workers, " codec worker(s) stayed busy for ",
            FormatSeconds(options_.timeout),
            " (--codec-timeout-seconds); nothing was changed: try again, or "
            "raise --codec-workers"));
      }
      if (idle_.empty()) {
        ++live_;
        backoff = std::max(next_start_ - absl::Now(), absl::ZeroDuration());
        break;
      }
      std::unique_ptr<CodecWorker> worker = std::move(idle_.back());
      idle_.pop_back();
      if (worker->StillIdle()) return worker;
      --live_;
      stale = std::move(worker);
    }
    // It exited (or spoke unasked) while idle: replace it.
    Log(absl::StrCat("codec[", stale->pid(), "]: ", stale->ExitDescription(),
                     " while idle; a new worker replaces it"));
  }
  absl::SleepFor(backoff);
  absl::StatusOr<std::unique_ptr<CodecWorker>> worker = StartWorker(nullptr);
  if (!worker.ok()) {
    Release(nullptr, false);
    if (failure != nullptr) *failure = CodecOutcome::kCrash;
    return absl::UnavailableError(absl::StrCat(
        "the codec could not be restarted: ", worker.status().message()));
  }
  return worker;
}

void ExternalCodec::Release(std::unique_ptr<CodecWorker> worker, bool healthy) {
  if (!healthy && worker != nullptr) {
    worker->Kill();
    Log(absl::StrCat("codec[", worker->pid(),
                     "]: stopped; the next request "
                     "starts a new worker"));
    worker.reset();
  }
  absl::MutexLock lock(&mu_);
  if (healthy) {
    failures_ = 0;
    idle_.push_back(std::move(worker));
    return;
  }
  --live_;
  ++failures_;
  absl::Duration backoff = kBackoffStart;
  for (int i = 1; i < failures_ && backoff < kBackoffMax; ++i) backoff *= 2;
  next_start_ = absl::Now() + std::min(backoff, kBackoffMax);
}

absl::Status ExternalCodec::Done(std::unique_ptr<CodecWorker> worker,
                                 bool retire) {
  if (!retire) {
    Release(std::move(worker), true);
    return absl::OkStatus();
  }
  absl::Status stopped = worker->Stop();
  if (!stopped.ok()) {
    Log(absl::StrCat("codec[", worker->pid(), "]: ", stopped.message()));
  }
  worker.reset();
  absl::MutexLock lock(&mu_);
  --live_;
  return stopped;
}

absl::StatusOr<CodecReply> ExternalCodec::Exchange(const Call& call) {
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<CodecWorker> worker,
                        Acquire(call.failure));
  const int64_t id = worker->NextId();
  const std::string line = EncodeCodecRequest(id, call.request);
  const absl::Time deadline = absl::Now() + options_.timeout;
  absl::Status cancel_status;
  std::string reply;
  CodecWorker::Io io =
      worker->Send(line, call.fds, deadline, call.cancelled, &cancel_status);
  if (io == CodecWorker::Io::kOk) {
    io = worker->ReadLine(&reply, deadline, call.cancelled, &cancel_status);
  }
  const auto fail_as = [&call](CodecOutcome outcome) {
    if (call.failure != nullptr) *call.failure = outcome;
  };
  const auto garbage = [&](absl::string_view why) {
    fail_as(CodecOutcome::kCrash);
    const std::string message = absl::StrCat(
        "the codec answered ", CodecOpName(call.request.op), " of ", call.path,
        " with something that is not protocol (", why, "): ", Echo(reply),
        "; it was stopped and will be restarted");
    Release(std::move(worker), false);
    return absl::InternalError(message);
  };
  if (io == CodecWorker::Io::kTooLong) {
    reply.resize(kMaxEchoBytes);
    return garbage("a line longer than 16 MiB");
  }
  if (io == CodecWorker::Io::kTimeout) fail_as(CodecOutcome::kTimeout);
  if (io == CodecWorker::Io::kClosed || io == CodecWorker::Io::kError) {
    fail_as(CodecOutcome::kCrash);
  }
  if (io != CodecWorker::Io::kOk) {
    absl::Status status =
        TransportError(*worker, io, call, std::move(cancel_status));
    Release(std::move(worker), false);
    return status;
  }
  if (!worker->extra().empty()) return garbage("more than one line");
  absl::StatusOr<CodecReply> decoded =
      DecodeCodecReply(reply, id, call.request.op);
  if (!decoded.ok()) return garbage(decoded.status().message());
  if (decoded->failure.has_value()) {
    absl::Status status = FailureStatus(*decoded->failure, call.path);
    Done(std::move(worker), call.retire).IgnoreError();
    return status;
  }
  // What a call's processes wrote counts only once they are all gone.
  if (absl::Status stopped = Done(std::move(worker), call.retire);
      !stopped.ok()) {
    return absl::InternalError(
        absl::StrCat(call.path, ": the codec (", name_, ") answered, but ",
                     stopped.message(), "; nothing it wrote was kept"));
  }
  return decoded;
}

absl::Status ExternalCodec::TransportError(CodecWorker& worker,
                                           CodecWorker::Io io, const Call& call,
                                           absl::Status cancel_status) {
  const absl::string_view op = CodecOpName(call.request.op);
  switch (io) {
    case CodecWorker::Io::kTimeout:
      return absl::DeadlineExceededError(absl::StrCat(
          "the codec did not answer ", op, " for ", call.path, " within ",
          FormatSeconds(options_.timeout),
          " (--codec-timeout-seconds); it was stopped and will be restarted"));
    case CodecWorker::Io::kClosed: {
      const std::string how = worker.ExitDescription();
      return absl::UnavailableError(absl::StrCat(
          "the codec ", how, " during ", op, " of ", call.path,
          "; its last stderr lines: ", worker.LastStderrLines(true),
          "; it will be restarted"));
    }
    case CodecWorker::Io::kCancelled:
      return cancel_status;
    default:
      return absl::InternalError(absl::StrCat(
          "talking to the codec about ", call.path, " failed: ",
          worker.last_error(), "; it was stopped and will be restarted"));
  }
}

absl::Status ExternalCodec::FailureStatus(const CodecFailure& failure,
                                          absl::string_view path) const {
  switch (failure.code) {
    case CodecErrorCode::kUnreadable:
      return absl::DataLossError(absl::StrCat(
          path, ": the codec (", name_, ") cannot read it: ", failure.message));
    case CodecErrorCode::kOlderCompiler:
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": ", failure.message));
    case CodecErrorCode::kBadRequest:
    case CodecErrorCode::kFailed:
      break;
  }
  return absl::InternalError(
      absl::StrCat(path, ": the codec failed: ", failure.message));
}

absl::StatusOr<ContainerFacts> ExternalCodec::Inspect(Env* env,
                                                      const std::string& path) {
  const absl::Time start = absl::Now();
  CodecOutcome failure = CodecOutcome::kError;
  absl::StatusOr<ContainerFacts> facts = InspectUncounted(env, path, &failure);
  ObserveCodecCall(CodecKind::kExternal, CodecCallOp::kInspect,
                   facts.ok() ? CodecOutcome::kOk : failure,
                   absl::Now() - start);
  return facts;
}

absl::StatusOr<ContainerFacts> ExternalCodec::InspectUncounted(
    Env* env, const std::string& path, CodecOutcome* failure) {
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> source,
                        env->NewRandomAccessFile(path));
  const Call call{
      .request = {.op = CodecOp::kInspect, .file = std::string(Basename(path))},
      .path = path,
      .fds = {source->native_handle()},
      .cancelled = nullptr,
      .failure = failure,
  };
  RBLN_ASSIGN_OR_RETURN(CodecReply reply, Exchange(call));
  return std::move(reply.facts);
}

absl::Status ExternalCodec::Rescale(const RescaleRequest& request) {
  const absl::Time start = absl::Now();
  CodecOutcome failure = CodecOutcome::kError;
  const absl::Status status = RescaleUncounted(request, &failure);
  ObserveCodecCall(CodecKind::kExternal, CodecCallOp::kRescale,
                   status.ok() ? CodecOutcome::kOk : failure,
                   absl::Now() - start);
  return status;
}

absl::Status ExternalCodec::RescaleUncounted(const RescaleRequest& request,
                                             CodecOutcome* failure) {
  Env* out_env = request.out_env;
  const std::string& out_path = request.out_path;
  const std::string out_name(Basename(out_path));
  if (out_name.empty() || out_name == "." || out_name == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat(out_path, ": not a file path to write the rescaled copy"));
  }
  const std::string scratch =
      JoinPath(Dirname(out_path), absl::StrCat(".codec-", out_name));
  RBLN_ASSIGN_OR_RETURN(
      std::unique_ptr<RandomAccessFile> source,
      request.source_env->NewRandomAccessFile(request.source_path));
  // A scratch directory left by a daemon that died mid-rescale.
  if (out_env->Stat(scratch).ok()) {
    RBLN_RETURN_IF_ERROR(RemoveTree(out_env, scratch));
  }
  RBLN_RETURN_IF_ERROR(out_env->CreateDir(scratch));
  bool made = false;
  const absl::Status status =
      RescaleInScratch(request, *source, scratch, out_name, failure, &made);
  if (!status.ok()) {
    if (out_env->Stat(scratch).ok()) RemoveTree(out_env, scratch).IgnoreError();
    if (made) RemoveTree(out_env, out_path).IgnoreError();
  }
  return status;
}

absl::Status ExternalCodec::RescaleInScratch(const RescaleRequest& request,
                                             const RandomAccessFile& source,
                                             const std::string& scratch,
                                             const std::string& out_name,
                                             CodecOutcome* failure,
                                             bool* made) {
  Env* out_env = request.out_env;
  // The codec's uid may write there, and nothing else of the store.
  RBLN_RETURN_IF_ERROR(out_env->SetOwnership(scratch, {uid_, gid_, 0700}));
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<Directory> dir,
                        out_env->OpenDirectory(scratch));
  const Call call{
      .request = {.op = CodecOp::kRescale,
                  .file = std::string(Basename(request.source_path)),
                  .out_name = out_name,
                  .factors = request.factors},
      .path = request.source_path,
      .fds = {source.native_handle(), dir->native_handle()},
      .cancelled =
          [&]() {
            return request.on_copied ? request.on_copied(0) : absl::OkStatus();
          },
      .retire = true,
      .failure = failure,
  };
  RBLN_RETURN_IF_ERROR(Exchange(call).status());
  dir.reset();

  // The codec's output is checked once its processes are gone: the listing
  // in its directory, then the file, as it is copied.
  const std::string what =
      absl::StrCat(request.source_path, ": the codec (", name_, ")");
  RBLN_RETURN_IF_ERROR(CheckScratchListing(out_env, scratch, out_name, what));
  uint64_t size = 0;
  *made = true;  // from here on, a failure removes what is at out_path
  RBLN_RETURN_IF_ERROR(CopyCodecOutput(out_env, JoinPath(scratch, out_name),
                                       request.out_path, uid_, what, &size));
  // The daemon's, with the source's permission bits but never set-id ones
  // (the codec reads it again before the caller gives it the source's
  // owner and mode: ResizeRequest's copy_owner).
  RBLN_ASSIGN_OR_RETURN(FileStat source_stat,
                        request.source_env->Stat(request.source_path));
  RBLN_RETURN_IF_ERROR(out_env->SetOwnership(
      request.out_path, {geteuid(), getegid(), source_stat.mode & 0777}));
  RBLN_RETURN_IF_ERROR(RemoveTree(out_env, scratch));
  if (request.on_copied) RBLN_RETURN_IF_ERROR(request.on_copied(size));
  return absl::OkStatus();
}

}  // namespace rbln
