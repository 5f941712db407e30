// ArtifactStore's commit engine (core/store/store.h): Write, step by step
// in the order of docs/commit-protocol.md, whose sections the comments
// below name. Its locks are core/store/locks.h's, its staging names
// core/store/staging_name.h's, and the old versions it swaps out wait in
// core/store/retired_trees.h.
#include <algorithm>
#include <cerrno>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/core_metrics.h"
#include "core/error_facts.h"
#include "core/os/path.h"
#include "core/resize/rescale.h"
#include "core/status_macros.h"
#include "core/store/artifact_link.h"
#include "core/store/intent_record.h"
#include "core/store/listing.h"
#include "core/store/locks.h"
#include "core/store/staging_name.h"
#include "core/store/store.h"
#include "core/text.h"
#include "spdlog/spdlog.h"

namespace rbln {
namespace {

// The payload bytes of all of `artifact`'s containers.
uint64_t PayloadBytes(const Artifact& artifact) {
  uint64_t total = 0;
  for (const ContainerFile& file : artifact.containers()) {
    total += file.copy_bytes();
  }
  return total;
}

// An output directory outside every root: the reason the name resolver
// gives (which tells a source outside the store to be served as a
// read-only root) is not one for an output, which only the store can hold.
absl::Status OutputOutsideStore(const absl::Status& status,
                                absl::string_view output_name,
                                absl::string_view store) {
  const std::optional<ErrorFacts> facts = GetErrorFacts(status);
  if (!absl::StartsWith(output_name, "/") || !facts.has_value() ||
      facts->reason != ErrorReason::kOutsideStore) {
    return status;
  }
  return WithErrorFacts(
      absl::PermissionDeniedError(absl::StrCat(
          "output directory ", Echo(output_name),
          " is outside the artifact store ", store,
          "; the output must be inside the store: choose a directory in ",
          store)),
      *facts);
}

absl::Status CheckCancelled(const WriteRequest& request) {
  if (IsCancelled(request.is_cancelled)) {
    return WriteCancelled("before it began");
  }
  return absl::OkStatus();
}

// A failure after the commit point: the new version is in place, so the
// write succeeded, but the parent's fsync did not make it durable yet.
void NoteUndurable(const absl::Status& status,
                   std::vector<std::string>* warnings) {
  if (status.ok()) return;
  warnings->push_back(
      absl::StrCat("the change is in place but could not be made durable (",
                   status.message(),
                   "); a power loss now could bring back the old "
                   "version"));
}

// Step 5: the old version, at the staging path since the exchange, moves
// to the retired name its intent record holds, so that an operator listing
// the directory can tell it from an interrupted commit. Where that fails it
// waits out its grace under the staging name (the record names both).
// Returns where it is.
std::string MoveToRetiredName(Env* env, const StagingIntent& intent,
                              absl::string_view name) {
  const std::string& staging = intent.staging;
  const std::string& retired = intent.retired;
  const absl::Status moved = env->RenameNoReplace(staging, retired);
  if (moved.ok()) return retired;
  spdlog::warn(
      "could not move the old version of {} to {}: {}; it waits out its "
      "grace period at {}",
      LogValue(name), LogValue(retired), LogValue(moved.message()),
      LogValue(staging));
  return staging;
}

// Where an output directory's parents stand: the nearest one that exists
// (a directory), and those below it that do not, the shallowest first.
struct OutputParents {
  FileStat existing{};
  std::vector<std::string> missing;
};

// The parents of `dest` (a path in the store `root`): what exists must be a
// directory, never a symbolic link (the confined Env refuses one on the way;
// one as the nearest parent is refused here alike).
absl::StatusOr<OutputParents> FindOutputParents(Env* env,
                                                const std::string& root,
                                                const std::string& dest,
                                                absl::string_view output_name) {
  OutputParents parents;
  std::string at(Dirname(dest));
  for (;;) {
    RBLN_ASSIGN_OR_RETURN(const std::optional<FileStat> st,
                          StatIfExists(env, at));
    if (st.has_value()) {
      if (st->type == FileType::kSymlink)
        return ErrnoToStatus("open", at, ELOOP);
      if (st->type != FileType::kDirectory) {
        return absl::FailedPreconditionError(
            absl::StrCat(at, ", a parent of output directory ", output_name,
                         ", is not a directory"));
      }
      parents.existing = *st;
      return parents;
    }
    if (at == root) {
      return absl::NotFoundError(
          absl::StrCat("artifact store ", root, " does not exist"));
    }
    parents.missing.insert(parents.missing.begin(), at);
    at = std::string(Dirname(at));
  }
}

// Removes the directories `made` (MakeOutputParents's), the deepest first;
// one that is no longer empty (another write's output went into it) stays.
void RemoveMadeParents(Env* env, const std::vector<std::string>& made) {
  for (auto dir = made.rbegin(); dir != made.rend(); ++dir) {
    const absl::Status removed = env->RemoveDir(*dir);
    if (!removed.ok() && !absl::IsNotFound(removed)) {
      spdlog::warn("could not remove {}, made for an output that failed: {}",
                   LogValue(*dir), LogValue(removed.message()));
    }
  }
}

// Creates `parents.missing`, each owned and moded as its parent is, and
// makes each entry durable. Returns the directories made here: one made
// meanwhile by someone else is theirs (and must be a directory). On error
// what was made is removed.
absl::StatusOr<std::vector<std::string>> MakeOutputParents(
    Env* env, const OutputParents& parents) {
  std::vector<std::string> made;
  FileOwnership owner = FileOwnership::Of(parents.existing);
  for (const std::string& dir : parents.missing) {
    absl::Status status = env->CreateDir(dir);
    if (absl::IsAlreadyExists(status)) {
      const absl::StatusOr<FileStat> st = env->Stat(dir);
      status = st.status();
      if (st.ok() && st->type != FileType::kDirectory) {
        status = ErrnoToStatus(
            "mkdir", dir, st->type == FileType::kSymlink ? ELOOP : ENOTDIR);
      }
      if (status.ok()) owner = FileOwnership::Of(*st);
    } else if (status.ok()) {
      made.push_back(dir);
      status = env->SetOwnership(dir, owner);
      if (status.ok()) status = env->SyncDir(std::string(Dirname(dir)));
    }
    if (!status.ok()) {
      RemoveMadeParents(env, made);
      return status;
    }
  }
  return made;
}

// A write through a link ("Versions switched by a link") replies with the
// name asked, and the target it read and wrote.
void NameThroughLink(const ArtifactStore::Located& source,
                     WriteResult* result) {
  if (source.link.empty()) return;
  result->link_target = source.name;
  result->name = source.link;
}

// An output is never written through a link, nor replaces one.
absl::Status OutputIsALink(const std::string& output_name) {
  return absl::PermissionDeniedError(absl::StrCat(
      "output directory ", Echo(output_name),
      " is a symbolic link; an output is never written through a link, nor "
      "replaces one: write to the directory it names (with replace), or "
      "choose a new directory"));
}

}  // namespace

// "Versions switched by a link": the link is read again once the write
// holds its locks, and just before an in-place exchange.
absl::Status ArtifactStore::CheckLinkUnchanged(const Located& source) const {
  if (source.link.empty()) return absl::OkStatus();
  absl::StatusOr<std::optional<std::string>> now =
      FollowArtifactLink(env_, names_[0], source.link);
  if (now.ok() && now->has_value() && **now == source.rel) {
    return absl::OkStatus();
  }
  const std::string what =
      !now.ok()           ? absl::StrCat("it can no longer be followed (",
                                         now.status().message(), ")")
      : !now->has_value() ? std::string("it is no longer a symbolic link")
                          : absl::StrCat("it now names ", Echo(**now));
  return absl::AbortedError(
      absl::StrCat(Echo(source.link), " was a symbolic link to ",
                   Echo(source.rel), " when the write began, but ", what,
                   "; nothing was changed (read it again and retry)"));
}

// "In-place resize" and "Into an output directory", step 1: the names
// checked, then the writer locks of the artifact (and of the output
// directory), taken in name order ("Locks"). A dry run takes none ("Dry
// runs").
absl::Status ArtifactStore::CheckNotInsideArtifact(
    const std::string& canonical_name) {
  for (size_t slash = canonical_name.find('/'); slash != std::string::npos;
       slash = canonical_name.find('/', slash + 1)) {
    const std::string ancestor = canonical_name.substr(0, slash);
    RBLN_ASSIGN_OR_RETURN(bool is_artifact,
                          IsArtifactDir(env_, PathOf(ancestor)));
    if (is_artifact) {
      return absl::InvalidArgumentError(absl::StrCat(
          canonical_name, " lies inside the artifact ", ancestor,
          "; artifacts cannot be nested (choose a directory outside it)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<WriteResult> ArtifactStore::Write(const WriteRequest& request) {
  if (request.target.has_value() == request.budget.has_value()) {
    return absl::InvalidArgumentError(
        "give exactly one of a target block count and a memory budget");
  }
  RBLN_ASSIGN_OR_RETURN(const std::shared_ptr<const Located> source_at,
                        Locate(request.name));
  RBLN_ASSIGN_OR_RETURN(const std::optional<Located> followed,
                        FollowLink(*source_at));
  const Located& source = followed.has_value() ? *followed : *source_at;
  const std::string& name = source.name;
  std::string output_name;
  std::vector<std::string> lock_names = {name};
  if (!request.output_name.empty()) {
    const absl::StatusOr<std::shared_ptr<const Located>> output_at =
        Locate(request.output_name);
    if (!output_at.ok()) {
      return OutputOutsideStore(output_at.status(), request.output_name, root_);
    }
    const Located& output = **output_at;
    if (output.read_only) {
      return WithErrorFacts(
          absl::PermissionDeniedError(absl::StrCat(
              "output directory ", Echo(output.name),
              " is in the read-only root ", names_[output.root].name,
              "; nothing is ever written there: choose a directory in the "
              "store ",
              root_)),
          {.reason = ErrorReason::kReadOnlyRoot, .artifact = output.name});
    }
    output_name = output.name;
    if (!source.read_only &&
        (IsWithin(output_name, name) || IsWithin(name, output_name))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output directory ", output_name,
          output_name == name ? " is the artifact itself"
                              : " overlaps the artifact " + name,
          "; omit the output directory to resize in place, or choose one "
          "outside the artifact"));
    }
    lock_names.push_back(output_name);
  } else if (request.replace) {
    return absl::InvalidArgumentError(
        "replace applies only to an output directory");
  } else if (source.read_only && !request.dry_run) {
    return WithErrorFacts(
        absl::PermissionDeniedError(absl::StrCat(
            Echo(name), " is in the read-only root ", names_[source.root].name,
            " (rbln-artifactd --read-only-root ", names_[source.root].name, "=",
            names_[source.root].dir,
            ") and cannot be changed in place; write a resized copy into the "
            "store instead: rbln-artifact ",
            request.target.has_value()
                ? absl::StrCat("--set-kvcache-num-blocks ", *request.target)
                : absl::StrCat("--set-memory-budget ",
                               request.budget->ToString()),
            " --model-id ", Echo(request.name), " --output-dir ",
            JoinPath(root_, source.rel.empty()
                                ? names_[source.root].name
                                : std::string(Basename(source.rel))))),
        {.reason = ErrorReason::kReadOnlyRoot, .artifact = name});
  }
  for (const std::string& written : lock_names) {
    if (written == name && source.read_only) continue;
    RBLN_RETURN_IF_ERROR(CheckNotInsideArtifact(written));
  }
  if (request.dry_run) {
    // A consistent snapshot is enough: no writer lease, so a dry run never
    // waits behind a long copy.
    RBLN_ASSIGN_OR_RETURN(std::shared_ptr<const Artifact> artifact,
                          ReadShared(name, {.verify_payload = request.verify}));
    WriteResult result;
    RBLN_RETURN_IF_ERROR(
        Plan(request, name, output_name, *artifact, &result).status());
    NameThroughLink(source, &result);
    return result;
  }
  // Lock files are made only for an artifact that exists and an output
  // directory that can be created: a name that resolves to nothing leaves
  // no trace in the state directory.
  RBLN_ASSIGN_OR_RETURN(const bool is_artifact,
                        IsArtifactDir(source.env, source.path));
  if (!is_artifact) {
    // Artifact::Open says precisely what is missing (unless it has just
    // appeared, and then the write goes on).
    RBLN_RETURN_IF_ERROR(NameArtifactInFacts(
        Artifact::Open(source.env, source.path, WithCodecs(source)).status(),
        source.name));
  }
  if (!output_name.empty()) {
    RBLN_RETURN_IF_ERROR(CheckOutput(output_name, request.replace).status());
  }
  RBLN_ASSIGN_OR_RETURN(
      std::unique_ptr<WriterLease> lease,
      WriterLease::Acquire(&locks_, env_, root_, lock_names,
                           options_.wait_for_artifact_locks,
                           request.is_cancelled, request.waiting));
  return WriteLocked(request, source, output_name);
}

// Step 1, under the locks: read the artifact, compare-and-set, plan, and
// check the payloads ("Integrity"); then steps 2 on, and the caches told.
absl::StatusOr<WriteResult> ArtifactStore::WriteLocked(
    const WriteRequest& request, const Located& source,
    const std::string& output_name) {
  const std::string& name = source.name;
  RBLN_RETURN_IF_ERROR(CheckCancelled(request));
  RBLN_RETURN_IF_ERROR(CheckLinkUnchanged(source));
  // Writers on this artifact are excluded by the lease, so this snapshot
  // stays current until the commit.
  absl::StatusOr<Artifact> opened =
      Artifact::Open(source.env, source.path, WithCodecs(source));
  if (!opened.ok()) return NameArtifactInFacts(opened.status(), name);
  Artifact artifact = *std::move(opened);
  WriteResult result;
  RBLN_ASSIGN_OR_RETURN(ResizePlan plan,
                        Plan(request, name, output_name, artifact, &result));
  NameThroughLink(source, &result);
  if (!(output_name.empty() && plan.is_no_op())) {
    RBLN_RETURN_IF_ERROR(VerifyBeforeCopy(source.env, artifact, request.verify,
                                          &result.warnings));
  }

  WriteResizedOptions write_options;
  write_options.source_env = source.env;
  // Whoever owns files in a read-only root (a user's cache) is not thereby
  // an owner in the store: the copy is the daemon's, with the same modes.
  write_options.copy_owner =
      source.read_only ? CopyOwner::kWriter : CopyOwner::kSource;
  write_options.is_cancelled = request.is_cancelled;
  if (request.progress) {
    const uint64_t total = PayloadBytes(artifact);
    auto done = std::make_shared<uint64_t>(0);
    write_options.on_copied = [done, total,
                               progress = request.progress](uint64_t bytes) {
      *done += bytes;
      progress(*done, total);
    };
  }
  if (output_name.empty()) {
    if (plan.is_no_op()) return result;
    RBLN_RETURN_IF_ERROR(
        CommitInPlace(artifact, plan, source, write_options, &result.warnings));
    // A new directory (inode) is there now: what is held of the old one
    // would miss anyway, and goes at once, with the codecs' facts of the
    // containers it replaced.
    artifact_cache_.Erase(source.freshness, source.path);
    for (const ContainerFile& file : artifact.containers()) {
      inspect_cache_.Erase(FileIdentity::Of(file.stat));
    }
    CountCommit(CommitKind::kInPlace);
  } else {
    RBLN_RETURN_IF_ERROR(CommitToOutput(artifact, plan, output_name,
                                        request.replace, write_options,
                                        &result.warnings));
    artifact_cache_.Erase(freshness_.get(), PathOf(output_name));
    CountCommit(CommitKind::kOutputDir);
  }
  result.written = true;
  return result;
}

absl::StatusOr<ResizePlan> ArtifactStore::Plan(const WriteRequest& request,
                                               const std::string& name,
                                               const std::string& output_name,
                                               const Artifact& artifact,
                                               WriteResult* result) {
  result->name = name;
  result->output_name = output_name;
  result->previous_num_blocks = artifact.current_num_blocks();
  if (request.expected_current.has_value() &&
      *request.expected_current != artifact.current_num_blocks()) {
    return WithErrorFacts(
        absl::AbortedError(
            absl::StrCat("kvcache_num_blocks of ", name, " is ",
                         artifact.current_num_blocks(), ", not the expected ",
                         *request.expected_current,
                         "; nothing was changed (read it again and retry)")),
        {.reason = ErrorReason::kCasMismatch,
         .artifact = name,
         .current_num_blocks = artifact.current_num_blocks()});
  }
  // No device (the artifact names no NPU this daemon knows, and no probe
  // or override says): a set is written unchecked, a budget refused.
  const absl::StatusOr<DramChoice> device = DeviceFor(artifact);
  const absl::StatusOr<DeviceSpec> spec =
      device.ok() ? absl::StatusOr<DeviceSpec>(device->spec) : device.status();
  ResizePlan plan;
  std::vector<std::string> budget_warnings;
  std::optional<MemoryReservation> reserved;
  if (!request.beside.empty()) {
    RBLN_ASSIGN_OR_RETURN(reserved, ReserveBeside(request.beside, artifact,
                                                  name, &budget_warnings));
  }
  const MemoryReservation* beside = reserved ? &*reserved : nullptr;
  if (!request.devices.empty() && !request.budget.has_value()) {
    budget_warnings.push_back(
        "the devices chosen change nothing for a block count: they place a "
        "free budget's nodes");
  }
  if (request.budget.has_value()) {
    absl::StatusOr<MemoryBudget> budget =
        spec.ok() ? ResolveFreeBudget(*request.budget, request.devices,
                                      artifact, *spec, &budget_warnings)
                  : absl::StatusOr<MemoryBudget>(*request.budget);
    if (!budget.ok()) return NameArtifactInFacts(budget.status(), name);
    absl::StatusOr<FitPlan> fit = PlanFit(artifact, *budget, spec, beside);
    if (!fit.ok()) return NameArtifactInFacts(fit.status(), name);
    result->fit = std::move(fit->fit);
    plan = std::move(fit->plan);
  } else {
    absl::StatusOr<ResizePlan> resize =
        PlanResize(artifact, *request.target, spec, beside);
    if (!resize.ok()) return NameArtifactInFacts(resize.status(), name);
    plan = *std::move(resize);
  }
  // A count the device cannot hold is written only when forced; an
  // in-place set to the count the artifact has writes nothing, and says so.
  const bool writes = !output_name.empty() || !plan.is_no_op();
  if (!request.dry_run && !request.force && writes &&
      !plan.device_refusal.ok()) {
    return NameArtifactInFacts(plan.device_refusal, name);
  }
  result->new_num_blocks = plan.target_num_blocks;
  result->fits_device = plan.fits_device;
  if (device.ok()) {
    result->dram_source = device->source;
    result->warnings = device->warnings;
  }
  result->warnings.insert(result->warnings.end(), budget_warnings.begin(),
                          budget_warnings.end());
  result->warnings.insert(result->warnings.end(), plan.warnings.begin(),
                          plan.warnings.end());
  if (!output_name.empty()) {
    RBLN_RETURN_IF_ERROR(CheckOutput(output_name, request.replace).status());
  }
  return plan;
}

absl::Status ArtifactStore::VerifyBeforeCopy(
    Env* env, const Artifact& artifact, bool requested,
    std::vector<std::string>* warnings) {
  const uint64_t payload = PayloadBytes(artifact);
  if (!requested && payload > kCheapVerifyBytes) {
    warnings->push_back(absl::StrCat(
        "payload checksums were not checked: ", (payload >> 20) + 1,
        " MiB were cloned unread (ask to verify, rbln-artifact --verify, to "
        "check them first)"));
    return absl::OkStatus();
  }
  absl::Status status = VerifyPayloads(env, artifact).status();
  if (absl::IsDataLoss(status)) {
    return absl::DataLossError(absl::StrCat(
        status.message(),
        "; the artifact is corrupt and was not copied (nothing was "
        "changed): restore it from its source or recompile"));
  }
  return status;
}

// Steps 2 and 3: the intent record written, the staging directory created
// and filled; a full disk makes old versions waiting out their grace go
// first ("A full disk and the grace period").
absl::StatusOr<StagingIntent> ArtifactStore::Stage(
    const Artifact& artifact, const ResizePlan& plan, const std::string& parent,
    absl::string_view base, const std::string& what,
    const WriteResizedOptions& write_options) {
  std::optional<StagingIntent> intent;
  // Whether a directory of ours is (or may be) at the staging path, and
  // whether one ever was.
  bool made = false;
  bool ever_made = false;
  const auto stage = [&](const WriteResizedOptions& options) {
    if (!intent.has_value()) {
      absl::StatusOr<StagingIntent> recorded =
          RecordStagingIntent(env_, root_, parent, base);
      if (!recorded.ok()) return recorded.status();
      intent = *std::move(recorded);
    }
    absl::Status status = env_->CreateDir(intent->staging);
    if (!status.ok()) return status;
    made = ever_made = true;
    status =
        WriteResizedArtifact(env_, artifact, plan, intent->staging, options);
    if (!status.ok()) made = !RemoveStagingTree(env_, intent->staging, "");
    return status;
  };
  // What the first try reported copied, so that a second one goes on from
  // there rather than past the total.
  uint64_t reported = 0;
  WriteResizedOptions first = write_options;
  if (write_options.on_copied) {
    first.on_copied = [&](uint64_t bytes) {
      reported += bytes;
      write_options.on_copied(bytes);
    };
  }
  absl::Status status = stage(first);
  if (absl::IsResourceExhausted(status)) {
    // Old versions waiting out their grace period must not be why a write
    // fails: they go at once (a reader still on one loses it), and the
    // write is tried once more.
    const size_t removed = retired_.RemoveNow();
    if (removed > 0) {
      spdlog::warn(
          "out of space writing {}: removed {} old artifact version(s) "
          "before their grace period was over; trying once more",
          LogValue(what), removed);
      uint64_t copied = 0;
      WriteResizedOptions again = write_options;
      if (write_options.on_copied) {
        again.on_copied = [&](uint64_t bytes) {
          const uint64_t before = std::max(copied, reported);
          copied += bytes;
          if (copied > before) write_options.on_copied(copied - before);
        };
      }
      status = stage(again);
    }
  }
  if (absl::IsResourceExhausted(status)) {
    uint64_t bytes = 0;
    for (const ContainerFile& file : artifact.containers()) {
      bytes += file.stat.size;
    }
    status = absl::ResourceExhaustedError(
        absl::StrCat("not enough free space to write ", what,
                     " (the containers alone "
                     "need about ",
                     (bytes >> 20) + 1,
                     " MiB on that file system); nothing "
                     "was changed: ",
                     status.message()));
  }
  if (status.ok()) return *std::move(intent);
  if (made) {
    RemoveStagingTree(env_, intent->staging, intent->record);
  } else if (intent.has_value()) {
    // Removed already, or never made: a directory that mkdir found at the
    // staging path is not ours, and only the record goes, once a removal
    // of ours is durable.
    if (!ever_made || env_->SyncDir(parent).ok()) {
      DropIntentRecord(env_, intent->record);
    }
  }
  return status;
}

// Step 4: the exchange, the commit point, checked to have swapped out the
// directory that step 1 read.
absl::Status ArtifactStore::Exchange(const std::string& name,
                                     const std::string& staging,
                                     const FileStat& expected,
                                     const std::function<bool()>& is_cancelled,
                                     bool* staging_is_theirs) {
  *staging_is_theirs = false;
  std::shared_ptr<ArtifactLockEntry> entry = locks_.Entry(name);
  // Readers hold the lock only while they read headers, but a caller that
  // gives up must not wait for them.
  while (!entry->rw.TryLock()) {
    if (IsCancelled(is_cancelled)) {
      return WriteCancelled(absl::StrCat("while readers held ", Echo(name)));
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  absl::Status status = env_->RenameExchange(staging, PathOf(name));
  if (status.ok()) {
    // What came out must be the directory this write read or checked: a
    // tree someone put there meanwhile is swapped back, never removed. (A
    // failure to look is not proof of a swap: the commit stands.)
    absl::StatusOr<FileStat> out = env_->Stat(staging);
    if (out.ok() &&
        (out->device != expected.device || out->inode != expected.inode)) {
      absl::Status back = env_->RenameExchange(staging, PathOf(name));
      *staging_is_theirs = !back.ok();
      status =
          back.ok()
              ? absl::AbortedError(absl::StrCat(
                    Echo(name),
                    " was replaced by another directory while the write ran; "
                    "nothing was changed (read it again and retry)"))
              : absl::InternalError(absl::StrCat(
                    Echo(name),
                    " was replaced by another directory while the write ran, "
                    "and swapping it back failed (",
                    back.message(), "); it is at ", Echo(staging)));
    }
  }
  entry->rw.Unlock();
  return status;
}

// "In-place resize", steps 2 to 6: stage, exchange (a link the artifact
// was reached through read again first), rename the old version and fsync
// the parent, and retire the old version for its grace period.
absl::Status ArtifactStore::CommitInPlace(
    const Artifact& artifact, const ResizePlan& plan, const Located& source,
    const WriteResizedOptions& write_options,
    std::vector<std::string>* warnings) {
  const std::string& name = source.name;
  const std::string path = PathOf(name);
  const std::string parent(Dirname(path));
  WriteResizedOptions options = write_options;
  options.link_companions = true;
  RBLN_ASSIGN_OR_RETURN(const StagingIntent intent,
                        Stage(artifact, plan, parent, Basename(path),
                              absl::StrCat("the resized ", name), options));
  const std::string& staging = intent.staging;
  bool staging_is_theirs = false;
  absl::Status status = CheckLinkUnchanged(source);
  if (status.ok()) {
    status = Exchange(name, staging, artifact.dir_stat(),
                      write_options.is_cancelled, &staging_is_theirs);
  }
  if (staging_is_theirs) {
    // The tree at the staging path is someone else's: never removed.
    DropIntentRecord(env_, intent.record);
    return status;
  }
  if (!status.ok()) {
    RemoveStagingTree(env_, staging, intent.record);
    return status;
  }
  // From here the artifact path holds the new version; `staging` the old,
  // which readers that opened the artifact before the swap may be reading
  // (through its descriptor, whatever its name).
  const std::string old_version = MoveToRetiredName(env_, intent, path);
  NoteUndurable(env_->SyncDir(parent), warnings);
  retired_.Retire(old_version, intent.record);
  return absl::OkStatus();
}

// "Into an output directory", step 2: what may be replaced, and whether
// the missing parents can be made.
absl::StatusOr<std::optional<FileStat>> ArtifactStore::CheckOutput(
    const std::string& output_name, bool replace) {
  const std::string dest = PathOf(output_name);
  RBLN_RETURN_IF_ERROR(
      FindOutputParents(env_, root_, dest, output_name).status());
  RBLN_ASSIGN_OR_RETURN(std::optional<FileStat> dest_st,
                        StatIfExists(env_, dest));
  if (!dest_st.has_value()) return std::nullopt;
  if (dest_st->type == FileType::kSymlink) return OutputIsALink(output_name);
  if (!replace) {
    return WithErrorFacts(
        absl::AlreadyExistsError(absl::StrCat(
            "output directory ", output_name,
            " already exists; choose a new directory, or replace it "
            "(rbln-artifact --replace; replace in the API)")),
        {.reason = ErrorReason::kOutputExists, .artifact = output_name});
  }
  if (dest_st->type != FileType::kDirectory) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to replace ", output_name, ": it is not a directory"));
  }
  RBLN_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, env_->ListDir(dest));
  if (!entries.empty()) {
    RBLN_ASSIGN_OR_RETURN(bool is_artifact, IsArtifactDir(env_, dest));
    if (!is_artifact) {
      return absl::FailedPreconditionError(
          absl::StrCat("refusing to replace ", output_name,
                       ": it is neither empty nor a compiled artifact"));
    }
  }
  return dest_st;
}

// "Into an output directory", steps 2 (again, under the locks) to 5: the
// missing parents made, stage, publish (a new name, or an exchange when
// replacing), fsync the parent, retire what was replaced. A failure removes
// the parents it made.
absl::Status ArtifactStore::CommitToOutput(
    const Artifact& artifact, const ResizePlan& plan,
    const std::string& output_name, bool replace,
    const WriteResizedOptions& write_options,
    std::vector<std::string>* warnings) {
  // Checked again under the lease: the destination may have appeared since.
  RBLN_ASSIGN_OR_RETURN(const std::optional<FileStat> existing,
                        CheckOutput(output_name, replace));
  const bool exists = existing.has_value();
  const std::string dest = PathOf(output_name);
  const std::string parent(Dirname(dest));
  RBLN_ASSIGN_OR_RETURN(const OutputParents parents,
                        FindOutputParents(env_, root_, dest, output_name));
  RBLN_ASSIGN_OR_RETURN(const std::vector<std::string> made,
                        MakeOutputParents(env_, parents));
  absl::StatusOr<StagingIntent> intent =
      Stage(artifact, plan, parent, Basename(dest),
            absl::StrCat("the resized copy ", output_name), write_options);
  if (!intent.ok()) {
    RemoveMadeParents(env_, made);
    return intent.status();
  }
  const std::string& staging = intent->staging;
  bool staging_is_theirs = false;
  const absl::Status status =
      exists ? Exchange(output_name, staging, *existing,
                        write_options.is_cancelled, &staging_is_theirs)
             : env_->RenameNoReplace(staging, dest);
  if (staging_is_theirs) {
    DropIntentRecord(env_, intent->record);
    return status;
  }
  if (!status.ok()) {
    RemoveStagingTree(env_, staging, intent->record);
    RemoveMadeParents(env_, made);
    if (absl::IsAlreadyExists(status)) {
      return WithErrorFacts(
          absl::AlreadyExistsError(
              absl::StrCat("output directory ", output_name,
                           " was created by someone else meanwhile; nothing "
                           "was written there")),
          {.reason = ErrorReason::kOutputExists, .artifact = output_name});
    }
    return status;
  }
  const std::string replaced =
      exists ? MoveToRetiredName(env_, *intent, dest) : "";
  const absl::Status synced = env_->SyncDir(parent);
  NoteUndurable(synced, warnings);
  if (exists) {
    retired_.Retire(replaced, intent->record);
  } else if (synced.ok()) {
    // Published under the destination's name, durably: the record names
    // nothing any more. (Kept when the fsync failed: a power loss could
    // bring the staging name back, and the next start drops it otherwise.)
    DropIntentRecord(env_, intent->record);
  }
  return absl::OkStatus();
}

}  // namespace rbln
