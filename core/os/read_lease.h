// ReadLease: a Linux read lease (fcntl F_SETLEASE, F_RDLCK) on one regular
// file, so that a cache can trust what it read from the file without looking
// at it again (docs/performance.md, "Read leases").
//
// While a read lease is held, no process has the file open for writing: the
// kernel refuses the lease when one has, and an open for writing (or a
// truncate) by anyone makes the opener wait until the holder lets the lease
// go. This process lets it go from a thread of its own: that thread marks the
// lease broken, then releases it, so that a lookup that starts after the
// writer's open returned sees intact() false. Every kRemovedFileCheckPeriod
// the thread also lets go of a lease whose file's last name was removed (so
// that a cached artifact never keeps a deleted file's blocks allocated) or
// whose file changed in a way that breaks no lease: a read-only open with
// O_TRUNC, and changes of mode, owner or times alone. All go at once when
// the kernel's signal queue overflows.
//
// The kernel breaks a lease by itself once its holder has not let it go
// within /proc/sys/fs/lease-break-time (45 s by default; a stopped
// process): so a lease counts as intact only until half that time after the
// lease thread last found no signal waiting, and not at all when that time
// is under 4 s.
//
// What a lease does not see: renames and removals of the file's name (the
// directory's own times show them), and a file mounted over its name. Under
// a directory watch (core/os/dir_watch.h), the POSIX Freshness
// (core/os/freshness.h) trusts a lease only in a
// generation in which it looked at the file again, and every one of these,
// and the changes that break no lease, move the generation.
//
// Taking one needs the file's ownership or CAP_LEASE, a local file system
// (ext2/3/4, XFS, Btrfs, tmpfs: a network file system's other clients would
// not break it), and the file not open for writing anywhere. When any of this
// is missing, or kMaxReadLeases are held, Take returns null and the caller
// looks at the file as before. Leases use one real-time signal
// (kReadLeaseSignal) and SIGIO; a process that blocks them in every thread
// (as the daemon does) gets them all on the lease thread.
//
// Thread-safe.
#ifndef RBLN_CORE_OS_READ_LEASE_H_
#define RBLN_CORE_OS_READ_LEASE_H_

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/time.h"

namespace rbln {

// Files leased at once by the process: one descriptor each, few next to the
// descriptors a daemon may open (1024 by default; held directories take up
// to kMaxHeldDirs more, core/os/freshness.h).
inline constexpr int kMaxReadLeases = 256;

// How often the lease thread checks that leased files still have a name.
inline constexpr absl::Duration kRemovedFileCheckPeriod = absl::Seconds(5);

// SIGRTMIN + 4: glibc keeps the first real-time signals for itself.
int ReadLeaseSignal();

// Blocks the lease signals in the calling thread, so that the threads it
// starts do not take them; a program calls it before starting any thread.
void BlockReadLeaseSignals();

// Leases held now by this process.
int ReadLeasesHeld();

class ReadLease {
 public:
  // A lease on `name` (one component) in the directory open as `dir_fd`,
  // when that name is still the regular file with `device` and `inode` and
  // the lease can be had; *now is then the file's status once leased (what a
  // cache should record). Else null, and *written (when given) tells
  // whether that is because the file is open for writing somewhere: a
  // writer's descriptor, a shared writable mapping (which keeps the file
  // open for writing after its descriptor is closed), or another process's
  // write lease. Such a file can change without its size or times changing
  // (writes through the mapping), so a cache should not keep what it read.
  static std::unique_ptr<ReadLease> Take(int dir_fd, const std::string& name,
                                         uint64_t device, uint64_t inode,
                                         struct stat* now,
                                         bool* written = nullptr);

  // Whether the regular file open (read-only) as `fd` is open for writing
  // anywhere, as Take's *written tells: a read lease is taken and at once
  // let go (a writer's open meanwhile waits for no more than that). False
  // where no lease can be had (see above), or the file is
  // not open for writing. Needs no room among kMaxReadLeases.
  static bool WrittenElsewhere(int fd);

  ~ReadLease();
  ReadLease(const ReadLease&) = delete;
  ReadLease& operator=(const ReadLease&) = delete;

  // Still held: the file has not been opened for writing, truncated or
  // removed since Take.
  bool intact() const;
  // Let go by the lease thread: opened for writing or truncated (or, found
  // by its periodic look, removed or changed in a way that breaks no
  // lease) since Take. Unlike !intact(), not while the lease thread is
  // only late (then the file's status is to be looked at instead).
  bool broken() const;

  struct State;

 private:
  explicit ReadLease(std::unique_ptr<State> state);

  const std::unique_ptr<State> state_;
};

}  // namespace rbln

#endif  // RBLN_CORE_OS_READ_LEASE_H_
