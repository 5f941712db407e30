// DirWatch: whether any directory a cache holds may have changed, asked of
// the kernel with one system call, so that a lookup need not look at each
// directory's name again (docs/performance.md, "The directory check").
//
// One inotify instance for the process. A caller watches every directory
// from a root down to a directory it holds (WatchPath) and keeps the Watches
// while it holds it. Generation() moves whenever something watched may have
// changed: an entry created, removed, renamed or written to in a watched
// directory, its attributes or times changed, the directory itself moved or
// removed, the kernel's event queue overflowing, or the process's mount
// table changing.
//
// Why it is sound: the kernel queues an inotify event before the system call
// that made the change returns, and Generation() asks the queue itself, so
// it never misses a change that finished before it was called (a call
// reads at most 64 KiB of events; with more queued, the rest counts as a
// change until a call has read to the queue's end). A caller
// that reads g = Generation(), then adds its watches, then looks at the
// directory (fstatat), and finds Generation() == g afterwards, may trust
// what it saw for as long as Generation() returns g. No inotify event
// reports a mount, so Generation() also polls /proc/thread-self/mountinfo,
// which the kernel marks on every change of the mount table: in the same system
// call (poll, with no wait), through a descriptor of the calling thread's
// own (a poll consumes the mark for the descriptor polled). When that shows
// a mark, or on a thread's first call (a mount before its descriptor was
// opened marks nothing on it), a shared descriptor polled only under the
// lock, by the call that then moves the generation, says whether the mount
// was counted already.
//
// What it does not see: a change of a directory's inode flags (chattr) or
// of its access time alone, which queue no event in the mask (neither
// changes what the directory holds). Another trap the caller handles: after
// the generation moved, it must add its watches again along its path as it
// is now, since a directory on the way may have been replaced by one that
// nothing watches.
//
// WatchPath returns null where inotify would not see every change: on file
// systems other than the local ones (ext2/3/4, XFS, Btrfs, tmpfs; another
// client's change on a network file system queues no event), when the
// user's watches are used up (/proc/sys/fs/inotify/max_user_watches), or
// when /proc is not mounted. The caller then looks at the directory on every
// lookup, as without this class.
//
// Thread-safe.
#ifndef RBLN_CORE_OS_DIR_WATCH_H_
#define RBLN_CORE_OS_DIR_WATCH_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace rbln {

class DirWatch {
 public:
  // Watches of the directories along one path; let go when destroyed. A
  // directory watched by several holders stays watched until the last one
  // lets it go.
  class Watches {
   public:
    ~Watches();
    Watches(const Watches&) = delete;
    Watches& operator=(const Watches&) = delete;

   private:
    friend class DirWatch;
    explicit Watches(DirWatch* owner) : owner_(owner) {}

    DirWatch* const owner_;
    // Watch descriptor and the id of the watch it named when taken: once a
    // watch is gone its number may name another (the kernel hands numbers
    // out cyclically, so only after 2^31 more watches).
    std::vector<std::pair<int, uint64_t>> refs_;
  };

  // The process's; null when inotify cannot be had here.
  static DirWatch* Get();

  // A number that moves whenever something watched may have changed; 0
  // when that cannot be told now (trust nothing). One poll when nothing
  // changed.
  uint64_t Generation();

  // Watches the directory open as `root_fd` and every directory of `rel`
  // (a relative path; "" for the root itself) beneath it, reached without
  // following symbolic links. Null where inotify would not see every change
  // (above), or when a component is not a directory.
  std::unique_ptr<Watches> WatchPath(int root_fd, absl::string_view rel);

  // Directories watched now (for tests).
  size_t watched() const;

  ~DirWatch() = delete;  // the process's, never destroyed

 private:
  struct Watch {
    uint64_t id = 0;
    int holders = 0;
  };

  DirWatch(int inotify_fd, int mountinfo_fd);
  // Adds a watch on the directory open as `fd` to *refs.
  bool Add(int fd, std::vector<std::pair<int, uint64_t>>* refs);
  void Release(const std::vector<std::pair<int, uint64_t>>& refs);
  // Reads the queued events; moves the generation when one concerns a
  // watch held, or the mount table changed (`mounts`).
  void Drain(bool mounts) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int inotify_fd_;
  // Of the mount table, polled under mu_ only (Generation()).
  const int mountinfo_fd_;
  mutable absl::Mutex mu_;
  // Even while stable; odd while Drain runs (Generation then waits for mu_).
  std::atomic<uint64_t> generation_{2};
  absl::flat_hash_map<int, Watch> watches_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace rbln

#endif  // RBLN_CORE_OS_DIR_WATCH_H_
