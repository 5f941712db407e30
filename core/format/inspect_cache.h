// InspectCache: what a codec answered for a `.rbln` file, kept while the file
// stays the same, so that repeated Describe calls and dry runs do not load
// it again (an external codec can take seconds per file).
//
// An entry is keyed by the file's device and inode and holds the codec's name
// and the file's identity (size, mtime, ctime) when it was inspected; a
// lookup with a different identity misses (and the caller re-inspects), so a
// file changed by a write, a truncate or a rename is not served stale. Writes
// through a shared writable mapping that change no time (one already open
// for writing, or on a tmpfs) are the caller's to rule out:
// Artifact::Open does not use this cache for a file that may change unseen
// (Freshness::MayChangeUnseen, core/os/freshness.h).
// Our own commits replace files by rename (a new inode) and so invalidate
// their entries as a matter of course; they also erase the entries of the
// files they replaced, which would otherwise stay until the bound pushed them
// out. rbln_config.json is not cached here (the artifact cache,
// artifact_cache.h, keeps parsed configs while their files stay the same).
//
// Racy files, as in the artifact cache: a file rewritten at the same size
// within one tick of the clock its file system stamps times from keeps its
// identity. So facts are kept only for a file that last changed at least a
// tick before its inspection began; one changed later is inspected again at
// each open until it has been still for that long. The tick is taken from
// the file's times: where both are whole seconds, the file system stamps
// seconds (FAT stamps 2 s; ext4 with 128-byte inodes and many NFS servers
// 1 s), and the window is kWholeSecondsRacyWindow; otherwise `racy_window`
// (Linux stamps from its coarse clock: a jiffy, 1 to 10 ms). Shorter than
// the artifact cache's 2 s, so that an artifact described soon after it was
// copied in is not loaded again by an external codec, which can take
// seconds per file. A zero `racy_window` keeps every file (tests). On a
// network file system the server stamps the times: a server clock behind
// ours by more than the window defeats the rule (as it does the artifact
// cache's).
//
// Bounded: least recently used entries go once the facts held exceed
// `max_bytes` (an estimate of their size in memory).
//
// Thread-safe.
#ifndef RBLN_CORE_FORMAT_INSPECT_CACHE_H_
#define RBLN_CORE_FORMAT_INSPECT_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/format/codec.h"
#include "core/lru_by_bytes.h"
#include "core/os/env.h"

namespace rbln {

// What tells that a file is still the one inspected.
struct FileIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;

  static FileIdentity Of(const FileStat& st) {
    return {st.device, st.inode, st.size, st.mtime_ns, st.ctime_ns};
  }
  bool operator==(const FileIdentity& o) const {
    return device == o.device && inode == o.inode && size == o.size &&
           mtime_ns == o.mtime_ns && ctime_ns == o.ctime_ns;
  }
  // Whether the file's data or status changed at or after `time`.
  bool ChangedSince(absl::Time time) const {
    const int64_t ns = absl::ToUnixNanos(time);
    return mtime_ns >= ns || ctime_ns >= ns;
  }
};

class InspectCache {
 public:
  static constexpr uint64_t kDefaultMaxBytes = uint64_t{64} << 20;
  // Twice the longest jiffy (HZ=100), for times with a fraction of a second.
  static constexpr absl::Duration kDefaultRacyWindow = absl::Milliseconds(20);
  // For times in whole seconds: FAT's 2 s tick, and then some.
  static constexpr absl::Duration kWholeSecondsRacyWindow = absl::Seconds(3);

  explicit InspectCache(uint64_t max_bytes = kDefaultMaxBytes,
                        absl::Duration racy_window = kDefaultRacyWindow)
      : racy_window_(racy_window), entries_(max_bytes) {}

  // The facts `codec` gave for the file `id` names, or null.
  std::shared_ptr<const ContainerFacts> Find(const std::string& codec,
                                             const FileIdentity& id);
  // Keeps the facts `codec` gave for `id`, from an inspection that began
  // at `inspect_start` (CLOCK_REALTIME, which a local file system stamps
  // file times from), unless the file is racy (above).
  void Insert(const std::string& codec, const FileIdentity& id,
              std::shared_ptr<const ContainerFacts> facts,
              absl::Time inspect_start);
  // Drops what is held for the file `id` names (its device and inode).
  void Erase(const FileIdentity& id);
  // Drops everything.
  void Clear();

  size_t size() const;
  uint64_t hits() const;
  uint64_t misses() const;

 private:
  struct Entry {
    std::string codec;
    FileIdentity id;
    std::shared_ptr<const ContainerFacts> facts;
  };
  using Key = std::pair<uint64_t, uint64_t>;  // (device, inode)

  const absl::Duration racy_window_;
  mutable absl::Mutex mu_;
  LruByBytes<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace rbln

#endif  // RBLN_CORE_FORMAT_INSPECT_CACHE_H_
