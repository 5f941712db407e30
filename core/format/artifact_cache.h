// ArtifactCache: parsed artifacts (Artifact::Open) and summaries
// (ReadArtifactSummary) kept while every file they were read from stays the
// same, so that Get, Describe and List neither read nor parse anything again
// (docs/performance.md).
//
// An entry records the identity (device, inode, size, mtime, ctime) of the
// artifact's directory, of its rbln_config.json and of every graph file it
// read, and for a multimodal artifact of the submodule's directory and its
// files. A lookup checks them again with one Freshness::StatEntriesAgain per
// directory (core/os/freshness.h: one fstatat per file, none for a file it
// holds a read lease on) and misses on any difference. A directory's
// mtime and ctime change whenever an entry is added, removed or renamed in it,
// so a graph or companion that appears or goes misses too; our commits swap in
// a new directory (a new inode), and the store also erases the entries of
// what it wrote.
//
// Read by name, recorded by name after the read: a directory above the
// artifact exchanged with another meanwhile would pair one directory's
// contents with the other's identity. So a result is kept only when its
// directory's name, and its submodule directory's, still name the
// directories (device and inode) whose status the read took before reading
// from them. Two exchanges within one read (there and back) would still
// pass (docs/security.md, "Known limits").
//
// Racy files: file systems take times from a coarse clock (milliseconds; a
// second or two on some), so a file rewritten twice within one tick, at the
// same size, would keep its identity. A result is kept only when every file
// it was read from last changed at least `racy_window` before the read began
// (as git treats "racily clean" index entries): a file changed later is read
// again on each request until it has been still for that long. The clock is
// assumed not to step back by more than that.
//
// Not cached: a read that checks payload checksums (verify_payload), one that
// fails, and one that found a file it read open for writing somewhere, or on
// a tmpfs (Artifact::may_change_unseen, ArtifactSummary::may_change_unseen;
// a shared writable mapping changes a file without changing its status). An
// entry whose read lease is broken since (a writer's open, a truncate) is a
// miss (DirStats::written), not just looked at again.
//
// Bounded: least recently used entries go once the estimated memory of what
// is held exceeds `max_bytes`. Thread-safe; the file-system calls are made
// outside its lock.
#ifndef RBLN_CORE_FORMAT_ARTIFACT_CACHE_H_
#define RBLN_CORE_FORMAT_ARTIFACT_CACHE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/format/artifact.h"
#include "core/lru_by_bytes.h"
#include "core/os/env.h"
#include "core/os/freshness.h"

namespace rbln {

class ArtifactCache {
 public:
  // About 20 KiB an artifact with a few-KiB config: some hundreds of
  // artifacts, a small part of the daemon's memory.
  static constexpr uint64_t kDefaultMaxBytes = uint64_t{8} << 20;
  // Longer than any local file system's timestamp granularity (ext4, XFS
  // and tmpfs stamp in nanoseconds from a clock of a few milliseconds; FAT
  // in 2 seconds).
  static constexpr absl::Duration kDefaultRacyWindow = absl::Seconds(2);

  explicit ArtifactCache(uint64_t max_bytes = kDefaultMaxBytes,
                         absl::Duration racy_window = kDefaultRacyWindow)
      : racy_window_(racy_window), entries_(max_bytes) {}

  // Entries are kept per Freshness (one per root: the paths they take are
  // resolved beneath it), which checks the files they were read from.

  // The artifact read from `dir` (as `freshness` resolves it), when it is
  // held and every file it was read from is unchanged; else null.
  std::shared_ptr<const Artifact> FindArtifact(Freshness* freshness,
                                               const std::string& dir);
  // Keeps `artifact`, opened from the paths `freshness` checks by a read
  // that began at
  // `read_start`, unless a file it came from changed too recently (see the
  // file comment) or cannot be looked at.
  void InsertArtifact(Freshness* freshness,
                      std::shared_ptr<const Artifact> artifact,
                      absl::Time read_start);

  // The same for ReadArtifactSummary(env, dir, freshness).
  std::shared_ptr<const ArtifactSummary> FindSummary(Freshness* freshness,
                                                     const std::string& dir);
  void InsertSummary(Freshness* freshness, const std::string& dir,
                     std::shared_ptr<const ArtifactSummary> summary,
                     absl::Time read_start);

  // Drops what is held for `dir` (after a write there).
  void Erase(Freshness* freshness, const std::string& dir);
  // Drops every entry, and with them the directories and read leases they
  // hold open, so that a file system they are on can be unmounted; a read
  // that began before this call keeps nothing either (told by its
  // read_start: as the racy rule, this assumes the clock does not step
  // back). Returns how many entries went.
  size_t Clear();

  size_t size() const;
  uint64_t hits() const;
  uint64_t misses() const;

 private:
  // What a result was read from: directories, each with the entries read
  // in it, and what each looked like then.
  struct Sources {
    std::vector<std::string> dirs;
    std::vector<std::vector<std::string>> names;
    std::vector<DirStats> seen;
    // Each directory kept open where the Freshness could (else null), so that a
    // lookup costs one fstatat per file and one for the directory's name.
    std::vector<std::unique_ptr<HeldDir>> held;
  };
  enum class Kind { kArtifact, kSummary };
  struct Key {
    const Freshness* freshness;
    std::string dir;
    Kind kind;
  };
  // A key to look up by, without copying the directory's name.
  struct KeyRef {
    KeyRef(const Freshness* freshness, absl::string_view dir, Kind kind)
        : freshness(freshness), dir(dir), kind(kind) {}
    KeyRef(const Key& key)  // NOLINT: a Key is looked up as its KeyRef
        : KeyRef(key.freshness, key.dir, key.kind) {}
    const Freshness* freshness;
    absl::string_view dir;
    Kind kind;
  };
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(const KeyRef& key) const {
      return absl::HashOf(key.freshness, key.dir, key.kind);
    }
  };
  struct KeyEq {
    using is_transparent = void;
    bool operator()(const KeyRef& a, const KeyRef& b) const {
      return a.freshness == b.freshness && a.kind == b.kind && a.dir == b.dir;
    }
  };
  struct Entry {
    std::shared_ptr<const Sources> sources;
    std::shared_ptr<const Artifact> artifact;
    std::shared_ptr<const ArtifactSummary> summary;
  };

  // The entry for `key` when its sources are unchanged (counted as a hit),
  // else nullopt (a miss).
  std::optional<Entry> Find(Freshness* freshness, const KeyRef& key);
  // Looks at `sources` (dirs and names set) and keeps `entry` under `key`
  // when none of them is racy and each directory is still the one whose
  // status the read took before reading from it (`read_dirs`, one per
  // directory of `sources`).
  // `bytes`: an estimate of the memory the result holds.
  void Insert(Freshness* freshness, Key key, Sources sources, Entry entry,
              uint64_t bytes, absl::Span<const FileStat> read_dirs,
              absl::Time read_start);

  const absl::Duration racy_window_;
  mutable absl::Mutex mu_;
  LruByBytes<Key, Entry, KeyHash, KeyEq> entries_ ABSL_GUARDED_BY(mu_);
  // The last Clear: a read that began before it is not kept.
  absl::Time cleared_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::atomic<uint64_t> hits_ = 0;
  std::atomic<uint64_t> misses_ = 0;
};

}  // namespace rbln

#endif  // RBLN_CORE_FORMAT_ARTIFACT_CACHE_H_
