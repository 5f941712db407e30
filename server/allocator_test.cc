#include "server/allocator.h"

#include <stdlib.h>

#include "gtest/gtest.h"

namespace rbln {
namespace {

// The environment's malloc tuning wins over the daemon's own.
TEST(ConfigureMallocTest, SetsTheLimitUnlessTheEnvironmentTunesMalloc) {
  unsetenv("MALLOC_ARENA_MAX");
  unsetenv("GLIBC_TUNABLES");
#if defined(__SANITIZE_ADDRESS__)
  // The sanitizer's allocator replaces glibc's and takes no mallopt.
  EXPECT_FALSE(ConfigureMalloc());
#else
  EXPECT_TRUE(ConfigureMalloc());
#endif
  setenv("MALLOC_ARENA_MAX", "4", 1);
  EXPECT_FALSE(ConfigureMalloc());
  unsetenv("MALLOC_ARENA_MAX");
  setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=4", 1);
  EXPECT_FALSE(ConfigureMalloc());
  unsetenv("GLIBC_TUNABLES");
}

}  // namespace
}  // namespace rbln
