// Journal detection: whether a file system carries an owner or mode change
// to disk without an fsync of its own, which the POSIX Env asks before it
// fsyncs what SetOwnership changed (docs/commit-protocol.md, step 3).
//
// Thread-safe; looks at /sys and /proc afresh on every call.
#ifndef RBLN_CORE_OS_JOURNAL_H_
#define RBLN_CORE_OS_JOURNAL_H_

namespace rbln {

// Whether the file system of `fd` makes an owner or mode change durable
// with the next fsync of any inode changed after it. Callers set ownership
// after the data's fdatasync, and every commit ends with changes to the
// directories and their fsyncs (docs/commit-protocol.md). XFS, and ext4
// with a journal, write one log in order, so those carry the change (tmpfs
// keeps nothing anyway). Btrfs logs each fsynced inode alone, ext4 without
// a journal writes only the inode fsynced, and other file systems are not
// known to: there SetOwnership fsyncs what it changed.
bool JournalCarriesOwnership(int fd);

}  // namespace rbln

#endif  // RBLN_CORE_OS_JOURNAL_H_
