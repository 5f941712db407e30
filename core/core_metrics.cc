#include "core/core_metrics.h"

#include <array>

#include "core/metrics.h"

namespace rbln {
namespace {

using metrics::Counter;
using metrics::Gauge;
using metrics::Histogram;

constexpr std::array<const char*, 5> kProbeResults = {
    "ok", "no_tool", "timeout", "unreadable", "failed"};
constexpr std::array<const char*, 4> kLeaseBreaks = {"writer", "removed",
                                                     "changed", "overflow"};
constexpr std::array<const char*, 5> kNotKept = {"changing", "recent", "moved",
                                                 "cleared", "gone"};
constexpr std::array<const char*, 3> kContainerOperations = {
    "decode", "rescale", "encode"};
constexpr std::array<const char*, 2> kCodecKinds = {"built-in", "external"};
constexpr std::array<const char*, 2> kCodecCallOps = {"inspect", "rescale"};
constexpr std::array<const char*, 4> kCodecOutcomes = {"ok", "error", "timeout",
                                                       "crash"};

struct CoreMetrics {
  Counter* commits[2];
  Counter* copied_bytes;
  Counter* cloned_bytes;
  Counter* recoveries;
  Histogram* lock_waits[2];
  Counter* probes[kProbeResults.size()];
  // [operation][0: ok, 1: error]
  Counter* container_calls[kContainerOperations.size()][2];
  // By CodecKind, CodecCallOp (and CodecOutcome).
  Counter* codec_calls[kCodecKinds.size()][kCodecCallOps.size()]
                      [kCodecOutcomes.size()];
  Histogram* codec_seconds[kCodecKinds.size()][kCodecCallOps.size()];
  Counter* cache_lookups[2];           // by CacheLookup
  Counter* not_kept[kNotKept.size()];  // by CacheNotKept
  Counter* dir_checks[2];              // by DirCheck
  Gauge* pending_old_versions;
  Gauge* read_leases;
  Counter* lease_breaks[kLeaseBreaks.size()];  // by ReadLeaseBreak
};

// Commits, copies, recoveries and lock waits.
void RegisterWriteMetrics(metrics::Registry& registry, CoreMetrics* m) {
  metrics::CounterFamily& commits = registry.AddCounter(
      "rbln_artifactd_commits_total",
      "Writes whose new version was swapped in (the commit point), by kind: "
      "in_place or output_dir.",
      {"kind"});
  m->commits[static_cast<int>(CommitKind::kInPlace)] =
      &commits.WithLabels({"in_place"});
  m->commits[static_cast<int>(CommitKind::kOutputDir)] =
      &commits.WithLabels({"output_dir"});
  m->copied_bytes =
      &registry
           .AddCounter("rbln_artifactd_copied_bytes_total",
                       "Bytes copied inside the kernel into "
                       "staged files (copy_file_range, sendfile).")
           .WithLabels({});
  m->cloned_bytes = &registry
                         .AddCounter("rbln_artifactd_cloned_bytes_total",
                                     "Bytes shared by reflink (FICLONERANGE) "
                                     "instead of copied.")
                         .WithLabels({});
  m->recoveries =
      &registry
           .AddCounter("rbln_artifactd_recoveries_total",
                       "Staging directories of interrupted commits, and old "
                       "versions left waiting out their grace, removed at "
                       "start.")
           .WithLabels({});
  metrics::HistogramFamily& lock_waits = registry.AddHistogram(
      "rbln_artifactd_lock_wait_seconds",
      "How long writes waited for an artifact's lock, by holder: daemon "
      "(another write in this daemon) or other_process (a lock file held "
      "elsewhere); _count is the number of waits.",
      metrics::DurationBuckets(), {"holder"});
  m->lock_waits[static_cast<int>(LockHolder::kDaemon)] =
      &lock_waits.WithLabels({"daemon"});
  m->lock_waits[static_cast<int>(LockHolder::kOtherProcess)] =
      &lock_waits.WithLabels({"other_process"});
}

// The DRAM probe, the container's code and the codecs.
void RegisterProbeAndCodecMetrics(metrics::Registry& registry, CoreMetrics* m) {
  metrics::CounterFamily& probes = registry.AddCounter(
      "rbln_artifactd_probe_runs_total",
      "Runs of the DRAM probe (rbln-smi), by result: ok, no_tool (none "
      "installed), timeout, unreadable (not a device table) or failed.",
      {"result"});
  for (size_t i = 0; i < kProbeResults.size(); ++i) {
    m->probes[i] = &probes.WithLabels({kProbeResults[i]});
  }
  metrics::CounterFamily& container = registry.AddCounter(
      "rbln_artifactd_container_calls_total",
      "Calls of the .rbln container's code, by operation (decode, rescale, "
      "encode) and result (ok, error).",
      {"operation", "result"});
  for (size_t i = 0; i < kContainerOperations.size(); ++i) {
    m->container_calls[i][0] =
        &container.WithLabels({kContainerOperations[i], "ok"});
    m->container_calls[i][1] =
        &container.WithLabels({kContainerOperations[i], "error"});
  }
  metrics::CounterFamily& calls = registry.AddCounter(
      "rbln_artifactd_codec_calls_total",
      "Calls of a codec, by codec (built-in, external), op (inspect, "
      "rescale) and outcome: ok, error (the codec answered an error or its "
      "output was refused), timeout (the worker was killed for its time) or "
      "crash (the worker died or broke the protocol).",
      {"codec", "op", "outcome"});
  metrics::HistogramFamily& seconds = registry.AddHistogram(
      "rbln_artifactd_codec_call_seconds",
      "How long codec calls took, by codec (built-in, external) and op "
      "(inspect, rescale), whatever their outcome.",
      metrics::DurationBuckets(), {"codec", "op"});
  for (size_t c = 0; c < kCodecKinds.size(); ++c) {
    for (size_t op = 0; op < kCodecCallOps.size(); ++op) {
      for (size_t o = 0; o < kCodecOutcomes.size(); ++o) {
        m->codec_calls[c][op][o] = &calls.WithLabels(
            {kCodecKinds[c], kCodecCallOps[op], kCodecOutcomes[o]});
      }
      m->codec_seconds[c][op] =
          &seconds.WithLabels({kCodecKinds[c], kCodecCallOps[op]});
    }
  }
}

// The artifact cache: lookups, reads not kept, directory checks.
void RegisterCacheMetrics(metrics::Registry& registry, CoreMetrics* m) {
  metrics::CounterFamily& lookups = registry.AddCounter(
      "rbln_artifactd_artifact_cache_lookups_total",
      "Reads that looked in the artifact cache, by result: hit (answered "
      "from it) or miss (read from the files).",
      {"result"});
  m->cache_lookups[static_cast<int>(CacheLookup::kHit)] =
      &lookups.WithLabels({"hit"});
  m->cache_lookups[static_cast<int>(CacheLookup::kMiss)] =
      &lookups.WithLabels({"miss"});
  metrics::CounterFamily& not_kept = registry.AddCounter(
      "rbln_artifactd_artifact_cache_not_kept_total",
      "Reads from the files that the artifact cache did not keep, by why: "
      "changing (a file may change without its status showing it: open for "
      "writing somewhere, or on a tmpfs), recent (a file changed less than 2 "
      "s before the read), moved (the directory's name names another one "
      "now), cleared (SIGHUP dropped the cache during the read) or gone (it "
      "could not be looked at again).",
      {"why"});
  for (size_t i = 0; i < kNotKept.size(); ++i) {
    m->not_kept[i] = &not_kept.WithLabels({kNotKept[i]});
  }
  metrics::CounterFamily& dir_checks = registry.AddCounter(
      "rbln_artifactd_dir_checks_total",
      "Lookups that checked a cached artifact's directory, by how: watched "
      "(inotify saw no change on its path: no stat) or looked (its name was "
      "stat'ed: something on the path changed, or it is not watched).",
      {"how"});
  m->dir_checks[static_cast<int>(DirCheck::kWatched)] =
      &dir_checks.WithLabels({"watched"});
  m->dir_checks[static_cast<int>(DirCheck::kLooked)] =
      &dir_checks.WithLabels({"looked"});
}

// Old versions waiting out their grace period.
void RegisterOldVersionMetrics(metrics::Registry& registry, CoreMetrics* m) {
  m->pending_old_versions =
      &registry
           .AddGauge("rbln_artifactd_old_versions_pending",
                     "Old artifact versions kept beside their artifact for "
                     "--old-version-grace-seconds and not yet removed.")
           .WithLabels({});
}

// Read leases held and let go.
void RegisterLeaseMetrics(metrics::Registry& registry, CoreMetrics* m) {
  m->read_leases =
      &registry
           .AddGauge("rbln_artifactd_read_leases",
                     "Read leases held on files of cached artifacts, which "
                     "spare each lookup a stat of those files.")
           .WithLabels({});
  metrics::CounterFamily& breaks = registry.AddCounter(
      "rbln_artifactd_read_lease_breaks_total",
      "Read leases let go before their cache entry went, by why: writer (a "
      "process opened the file for writing or truncated it), removed (its "
      "last name was removed), changed (a change that breaks no lease, found "
      "by the periodic check) or overflow (the kernel's signal queue was "
      "full: every lease went).",
      {"why"});
  for (size_t i = 0; i < kLeaseBreaks.size(); ++i) {
    m->lease_breaks[i] = &breaks.WithLabels({kLeaseBreaks[i]});
  }
}

// In the order a scrape shows them.
CoreMetrics Register(metrics::Registry& registry) {
  CoreMetrics m;
  RegisterWriteMetrics(registry, &m);
  RegisterProbeAndCodecMetrics(registry, &m);
  RegisterCacheMetrics(registry, &m);
  RegisterOldVersionMetrics(registry, &m);
  RegisterLeaseMetrics(registry, &m);
  return m;
}

const CoreMetrics& Metrics() {
  static const CoreMetrics metrics = Register(metrics::Registry::Default());
  return metrics;
}

}  // namespace

void RegisterCoreMetrics() { Metrics(); }

void CountCommit(CommitKind kind) {
  Metrics().commits[static_cast<int>(kind)]->Increment();
}

void CountCopiedBytes(uint64_t bytes) {
  Metrics().copied_bytes->Increment(bytes);
}

void CountClonedBytes(uint64_t bytes) {
  Metrics().cloned_bytes->Increment(bytes);
}

void CountRecovery() { Metrics().recoveries->Increment(); }

void ObserveLockWait(LockHolder holder, absl::Duration waited) {
  Metrics().lock_waits[static_cast<int>(holder)]->Observe(
      absl::ToDoubleSeconds(waited));
}

void CountProbe(ProbeResult result) {
  Metrics().probes[static_cast<int>(result)]->Increment();
}

void CountContainerCall(ContainerOperation operation,
                        const absl::Status& status) {
  Metrics()
      .container_calls[static_cast<int>(operation)][status.ok() ? 0 : 1]
      ->Increment();
}

void ObserveCodecCall(CodecKind codec, CodecCallOp op, CodecOutcome outcome,
                      absl::Duration took) {
  const CoreMetrics& m = Metrics();
  const int c = static_cast<int>(codec);
  const int o = static_cast<int>(op);
  m.codec_calls[c][o][static_cast<int>(outcome)]->Increment();
  m.codec_seconds[c][o]->Observe(absl::ToDoubleSeconds(took));
}

void CountArtifactCacheLookup(CacheLookup result) {
  Metrics().cache_lookups[static_cast<int>(result)]->Increment();
}

void CountArtifactCacheNotKept(CacheNotKept why) {
  Metrics().not_kept[static_cast<int>(why)]->Increment();
}

void CountDirCheck(DirCheck how) {
  Metrics().dir_checks[static_cast<int>(how)]->Increment();
}

void AddPendingOldVersions(int64_t delta) {
  Metrics().pending_old_versions->Add(delta);
}

void AddReadLeases(int64_t delta) { Metrics().read_leases->Add(delta); }

void CountReadLeaseBreak(ReadLeaseBreak why) {
  Metrics().lease_breaks[static_cast<int>(why)]->Increment();
}

}  // namespace rbln
