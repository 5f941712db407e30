#include "core/format/artifact_cache.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/core_metrics.h"
#include "core/format/container.h"
#include "core/format/inspect_cache.h"

namespace rbln {
namespace {

// `now`, looked at again, shows the directory and files `seen` did, and no
// lease on those files was broken since (DirStats::written).
bool SameDir(const DirStats& now, const DirStats& seen) {
  if (now.written || !SameVersion(now.dir, seen.dir) ||
      now.entries.size() != seen.entries.size()) {
    return false;
  }
  for (size_t i = 0; i < now.entries.size(); ++i) {
    if (!SameVersion(now.entries[i], seen.entries[i])) return false;
  }
  return true;
}

// Changed at or after `threshold` (or in the future).
bool IsRacy(const FileStat& st, absl::Time threshold) {
  return FileIdentity::Of(st).ChangedSince(threshold);
}

std::string GraphFileName(absl::string_view graph) {
  return absl::StrCat(graph, kContainerExtension);
}

// An estimate of the memory a config holds once parsed.
uint64_t ConfigBytes(const RblnConfig& config) {
  uint64_t bytes = sizeof(RblnConfig) + config.cls_name.size() +
                   config.attn_impl.size() + config.metas_key.size() +
                   config.npu.size() + config.decoder_submodule.size();
  for (const KvcacheMeta& meta : config.kvcache_metas) {
    bytes += sizeof(meta) + meta.name.size() + meta.layer_type.size() +
             meta.dtype.size() + meta.shape.size() * sizeof(int64_t);
  }
  for (const std::string& phase : config.phases) bytes += 32 + phase.size();
  return bytes + config.decoder_batch_sizes.size() * sizeof(uint64_t);
}

// The same for an artifact; the codecs' facts are shared with the inspect
// cache, which counts them.
uint64_t ArtifactBytes(const Artifact& artifact) {
  uint64_t bytes = sizeof(Artifact) + ConfigBytes(artifact.config()) +
                   artifact.config_text().size() + artifact.dir().size() +
                   artifact.graph_dir().size();
  if (artifact.submodule_config_text().has_value()) {
    bytes += artifact.submodule_config_text()->size();
  }
  for (const ContainerFile& file : artifact.containers()) {
    bytes += sizeof(file) + file.file_name.size() + file.path.size();
  }
  for (const KvTensor& tensor : artifact.kv_tensors()) {
    bytes += sizeof(tensor) + tensor.name.size() +
             tensor.bytes.size() * sizeof(uint64_t);
  }
  for (const std::string& name : artifact.companion_files()) {
    bytes += 32 + name.size();
  }
  for (const std::string& name : artifact.submodule_companion_files()) {
    bytes += 32 + name.size();
  }
  return bytes;
}

uint64_t SourcesBytes(const std::vector<std::string>& dirs,
                      const std::vector<std::vector<std::string>>& names) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < dirs.size(); ++i) {
    bytes += sizeof(DirStats) + 32 + dirs[i].size();
    for (const std::string& name : names[i]) {
      bytes += sizeof(FileStat) + 48 + name.size();
    }
  }
  return bytes;
}

}  // namespace

std::shared_ptr<const Artifact> ArtifactCache::FindArtifact(
    Freshness* freshness, const std::string& dir) {
  std::optional<Entry> entry =
      Find(freshness, KeyRef(freshness, dir, Kind::kArtifact));
  return entry.has_value() ? entry->artifact : nullptr;
}

void ArtifactCache::InsertArtifact(Freshness* freshness,
                                   std::shared_ptr<const Artifact> artifact,
                                   absl::Time read_start) {
  if (artifact->may_change_unseen()) {
    CountArtifactCacheNotKept(CacheNotKept::kChanging);
    return;
  }
  Sources sources;
  std::vector<std::string> graphs = {kRblnConfigFileName};
  for (const ContainerFile& file : artifact->containers()) {
    graphs.push_back(file.file_name);
  }
  if (artifact->submodule().empty()) {
    sources.dirs = {artifact->dir()};
    sources.names = {std::move(graphs)};
  } else {
    sources.dirs = {artifact->dir(), artifact->graph_dir()};
    sources.names = {{kRblnConfigFileName}, std::move(graphs)};
  }
  const uint64_t bytes = ArtifactBytes(*artifact);
  const FileStat read_dirs[] = {artifact->dir_stat(),
                                artifact->graph_dir_stat()};
  Key key{freshness, artifact->dir(), Kind::kArtifact};
  Entry entry;
  entry.artifact = std::move(artifact);
  Insert(freshness, std::move(key), std::move(sources), std::move(entry), bytes,
         read_dirs, read_start);
}

std::shared_ptr<const ArtifactSummary> ArtifactCache::FindSummary(
    Freshness* freshness, const std::string& dir) {
  std::optional<Entry> entry =
      Find(freshness, KeyRef(freshness, dir, Kind::kSummary));
  return entry.has_value() ? entry->summary : nullptr;
}

void ArtifactCache::InsertSummary(
    Freshness* freshness, const std::string& dir,
    std::shared_ptr<const ArtifactSummary> summary, absl::Time read_start) {
  if (summary->may_change_unseen) {
    CountArtifactCacheNotKept(CacheNotKept::kChanging);
    return;
  }
  // What ReadArtifactSummary reads: the config, and the prefill graph's
  // header (the graph directory's listing is covered by its own times).
  Sources sources;
  const std::string prefill = GraphFileName(kPrefillGraphName);
  const std::string& sub = summary->config.decoder_submodule;
  if (sub.empty()) {
    sources.dirs = {dir};
    sources.names = {{kRblnConfigFileName, prefill}};
  } else {
    sources.dirs = {dir, JoinPath(dir, sub)};
    sources.names = {{kRblnConfigFileName}, {prefill}};
  }
  const uint64_t bytes = sizeof(ArtifactSummary) +
                         ConfigBytes(summary->config) + summary->npu.size();
  const FileStat read_dirs[] = {summary->dir_stat, summary->graph_dir_stat};
  Entry entry;
  entry.summary = std::move(summary);
  Insert(freshness, Key{freshness, dir, Kind::kSummary}, std::move(sources),
         std::move(entry), bytes, read_dirs, read_start);
}

std::optional<ArtifactCache::Entry> ArtifactCache::Find(Freshness* freshness,
                                                        const KeyRef& key) {
  std::optional<Entry> entry;
  {
    absl::MutexLock lock(&mu_);
    // Marked as used before it is checked: one that turns out stale is
    // erased below.
    const Entry* held = entries_.Use(key);
    if (held == nullptr) {
      misses_.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    entry = *held;
  }
  const Sources& sources = *entry->sources;
  bool same = true;
  for (size_t i = 0; same && i < sources.dirs.size(); ++i) {
    const HeldDir* held = sources.held[i].get();
    absl::StatusOr<DirStats> now =
        held != nullptr
            ? freshness->StatEntriesAgain(*held, sources.dirs[i],
                                          sources.names[i])
            : freshness->StatEntries(sources.dirs[i], sources.names[i]);
    same = now.ok() && SameDir(*now, sources.seen[i]);
  }
  if (same) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    return entry;
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  std::vector<Entry> dropped;  // destroyed after the lock, as in Insert
  absl::MutexLock lock(&mu_);
  // Only the entry looked at goes: another may have replaced it.
  const Entry* held = entries_.Find(key);
  if (held != nullptr && held->sources == entry->sources) {
    entries_.Erase(key, &dropped);
  }
  return std::nullopt;
}

void ArtifactCache::Insert(Freshness* freshness, Key key, Sources sources,
                           Entry entry, uint64_t bytes,
                           absl::Span<const FileStat> read_dirs,
                           absl::Time read_start) {
  const absl::Time threshold = read_start - racy_window_;
  const auto not_kept = [](CacheNotKept why) {
    CountArtifactCacheNotKept(why);
  };
  for (size_t i = 0; i < sources.dirs.size(); ++i) {
    std::unique_ptr<HeldDir> held;
    absl::StatusOr<DirStats> seen =
        freshness->StatAndHoldEntries(sources.dirs[i], sources.names[i], &held);
    if (!seen.ok()) return not_kept(CacheNotKept::kGone);
    if (seen->written) return not_kept(CacheNotKept::kChanging);
    if (IsRacy(seen->dir, threshold)) return not_kept(CacheNotKept::kRecent);
    // Another directory under the name now: what was read may be either's.
    if (seen->dir.device != read_dirs[i].device ||
        seen->dir.inode != read_dirs[i].inode) {
      return not_kept(CacheNotKept::kMoved);
    }
    for (const std::optional<FileStat>& st : seen->entries) {
      if (st.has_value() && IsRacy(*st, threshold)) {
        return not_kept(CacheNotKept::kRecent);
      }
    }
    sources.seen.push_back(*std::move(seen));
    sources.held.push_back(std::move(held));
  }
  bytes += key.dir.size() + SourcesBytes(sources.dirs, sources.names);
  entry.sources = std::make_shared<const Sources>(std::move(sources));
  // Destroyed after the lock is let go: closing a held file whose name is
  // gone frees its blocks, which takes long for a large one.
  std::vector<Entry> dropped;
  absl::MutexLock lock(&mu_);
  if (read_start <= cleared_at_) {
    dropped.push_back(std::move(entry));
    CountArtifactCacheNotKept(CacheNotKept::kCleared);
    return;
  }
  entries_.Insert(std::move(key), std::move(entry), bytes, &dropped);
}

void ArtifactCache::Erase(Freshness* freshness, const std::string& dir) {
  std::vector<Entry> dropped;  // as in Insert
  absl::MutexLock lock(&mu_);
  for (Kind kind : {Kind::kArtifact, Kind::kSummary}) {
    entries_.Erase(KeyRef(freshness, dir, kind), &dropped);
  }
}

size_t ArtifactCache::Clear() {
  std::vector<Entry> dropped;  // as in Insert
  absl::MutexLock lock(&mu_);
  cleared_at_ = absl::Now();
  dropped.reserve(entries_.size());
  entries_.Clear(&dropped);
  return dropped.size();
}

size_t ArtifactCache::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

uint64_t ArtifactCache::hits() const {
  return hits_.load(std::memory_order_relaxed);
}

uint64_t ArtifactCache::misses() const {
  return misses_.load(std::memory_order_relaxed);
}

}  // namespace rbln
