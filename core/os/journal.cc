#include "core/os/journal.h"

#include <dirent.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>

#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace rbln {
namespace {

// Whether the ext2/3/4 file system on the block device `dev` writes a
// journal (ext2, and ext4 made without one, share ext4's magic number).
// jbd2 lists each journal it runs in /proc/fs/jbd2 as "<device>-<inode>";
// where /sys or /proc cannot tell (a container), the answer is no. Not
// remembered: a loop device may carry another file system tomorrow, and a
// few reads are nothing next to the fsync they may spare.
bool Ext4HasJournal(dev_t dev) {
  std::ifstream uevent(
      absl::StrCat("/sys/dev/block/", major(dev), ":", minor(dev), "/uevent"));
  for (std::string line; std::getline(uevent, line);) {
    absl::string_view name = line;
    if (!absl::ConsumePrefix(&name, "DEVNAME=") || name.empty()) continue;
    DIR* jbd2 = opendir("/proc/fs/jbd2");
    if (jbd2 == nullptr) return false;
    const std::string prefix = absl::StrCat(name, "-");
    bool journal = false;
    while (const dirent* entry = readdir(jbd2)) {
      if (absl::StartsWith(entry->d_name, prefix)) journal = true;
    }
    closedir(jbd2);
    return journal;
  }
  return false;
}

}  // namespace

bool JournalCarriesOwnership(int fd) {
  struct statfs fs {};
  if (fstatfs(fd, &fs) != 0) return false;
  if (fs.f_type == XFS_SUPER_MAGIC || fs.f_type == TMPFS_MAGIC) return true;
  struct stat st {};
  return fs.f_type == EXT4_SUPER_MAGIC && fstat(fd, &st) == 0 &&
         Ext4HasJournal(st.st_dev);
}

}  // namespace rbln
