// What the kernel tells this process about changes on a file system, and
// whether a file is still the version it saw: shared by read leases
// (core/os/read_lease.h) and directory watches (core/os/dir_watch.h).
#ifndef RBLN_CORE_OS_LOCAL_FS_H_
#define RBLN_CORE_OS_LOCAL_FS_H_

#include <sys/stat.h>
#include <sys/vfs.h>

namespace rbln {

// A local file system (ext2/3/4, XFS, Btrfs, tmpfs): every change to it
// passes through this kernel, which breaks leases and queues inotify events
// for it. A network file system's other clients' changes do not.
bool IsLocalFileSystem(const struct statfs& fs);

// The same file, unchanged: device, inode, size, mtime and ctime.
bool SameFileVersion(const struct stat& a, const struct stat& b);

}  // namespace rbln

#endif  // RBLN_CORE_OS_LOCAL_FS_H_
