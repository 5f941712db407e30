#include "core/os/journal.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/vfs.h>

#include "core/os/unique_fd.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

TEST(JournalCarriesOwnershipTest, ATmpfsKeepsNothingToCarry) {
  UniqueFd shm(open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  struct statfs fs;
  if (shm.get() < 0 || fstatfs(shm.get(), &fs) != 0 ||
      fs.f_type != TMPFS_MAGIC) {
    GTEST_SKIP() << "no tmpfs at /dev/shm";
  }
  EXPECT_TRUE(JournalCarriesOwnership(shm.get()));
}

TEST(JournalCarriesOwnershipTest, AFileSystemNotKnownToDoesNot) {
  // procfs, as any file system not known to write one log in order.
  UniqueFd proc(open("/proc/self", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_GE(proc.get(), 0);
  EXPECT_FALSE(JournalCarriesOwnership(proc.get()));
  // Nor where the file system cannot be asked.
  EXPECT_FALSE(JournalCarriesOwnership(-1));
}

}  // namespace
}  // namespace rbln
