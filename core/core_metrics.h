// The metrics that core/ counts, in metrics::Registry::Default(), and the
// one function per event that the code calls where it happens. Every metric
// and label is documented in docs/metrics.md.
//
// The first call of any function here registers all of them (with every
// fixed label value at 0), so that a scrape shows them before anything
// happened; RegisterCoreMetrics() does only that.
//
// Thread-safe; counting takes no lock.
#ifndef RBLN_CORE_CORE_METRICS_H_
#define RBLN_CORE_CORE_METRICS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace rbln {

void RegisterCoreMetrics();

// A write swapped its new version in: in place, or into an output directory.
enum class CommitKind { kInPlace, kOutputDir };
void CountCommit(CommitKind kind);

// Bytes a kernel-side copy wrote (copy_file_range, sendfile), and bytes a
// reflink shared instead (FICLONERANGE).
void CountCopiedBytes(uint64_t bytes);
void CountClonedBytes(uint64_t bytes);

// A staging directory of an interrupted commit, or an old version left
// waiting out its grace, removed at start.
void CountRecovery();

// A write waited for a lock: one that another write of the same artifact in
// this daemon held, or one that another process held (its lock file).
enum class LockHolder { kDaemon, kOtherProcess };
void ObserveLockWait(LockHolder holder, absl::Duration waited);

// One run of the DRAM probe (rbln-smi), by what came of it.
enum class ProbeResult { kOk, kNoTool, kTimeout, kUnreadable, kFailed };
void CountProbe(ProbeResult result);

// One call of the .rbln container's own code: a header decoded
// (ReadContainer), rescaled (RescaleHeader), or a container encoded
// (written anew or with a new header); `status` says whether it succeeded.
enum class ContainerOperation { kDecode, kRescale, kEncode };
void CountContainerCall(ContainerOperation operation,
                        const absl::Status& status);

// One call of a codec (core/format/codec.h), built-in or external, that
// took `took`, by how it ended: ok; error (the codec answered an error, its
// output was refused, or the call failed otherwise: the file could not be
// opened, no worker was free, the caller cancelled); timeout (the worker
// was killed for not answering in time); crash (the worker died, broke the
// protocol, or could not be started).
enum class CodecKind { kBuiltin, kExternal };
enum class CodecCallOp { kInspect, kRescale };
enum class CodecOutcome { kOk, kError, kTimeout, kCrash };
void ObserveCodecCall(CodecKind codec, CodecCallOp op, CodecOutcome outcome,
                      absl::Duration took);

// A read looked in the artifact cache (core/format/artifact_cache.h): the
// artifact or summary it asked for was held and unchanged (a hit), or it had
// to be read (a miss).
enum class CacheLookup { kHit, kMiss };
void CountArtifactCacheLookup(CacheLookup result);

// A read from the files that the artifact cache did not keep, by why: a file
// it read may change without its status showing it (open for writing
// somewhere, or on a tmpfs: Freshness::MayChangeUnseen), a file or directory
// changed within the racy window before the read, a directory's name names
// another directory now, the cache was cleared (SIGHUP) during the read, or
// what was read could not be looked at again.
enum class CacheNotKept { kChanging, kRecent, kMoved, kCleared, kGone };
void CountArtifactCacheNotKept(CacheNotKept why);

// A lookup checked that a held directory's name (core/os/freshness.h,
// HeldDir) still names it unchanged: answered by the directory watches, with
// no system call but one poll (core/os/dir_watch.h), or by looking at the
// name.
enum class DirCheck { kWatched, kLooked };
void CountDirCheck(DirCheck how);

// Old artifact versions waiting out their grace period
// (core/store/retired_trees.h) changed by `delta`: +1 for one retired, -n
// for n removed (or left to the recovery at the next start).
void AddPendingOldVersions(int64_t delta);

// Read leases held on cached files (core/os/read_lease.h) changed by `delta`,
// and one lease let go before its holder dropped it, by why: a writer
// opened or truncated the file, its last name was removed, it changed in a
// way that breaks no lease (found by the periodic check), or the kernel's
// signal queue overflowed (every lease goes).
void AddReadLeases(int64_t delta);
enum class ReadLeaseBreak { kWriter, kRemoved, kChanged, kOverflow };
void CountReadLeaseBreak(ReadLeaseBreak why);

}  // namespace rbln

#endif  // RBLN_CORE_CORE_METRICS_H_
