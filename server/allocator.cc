#include "server/allocator.h"

#include <malloc.h>

#include <cstdlib>

namespace rbln {

bool ConfigureMalloc() {
  if (std::getenv("MALLOC_ARENA_MAX") != nullptr ||
      std::getenv("GLIBC_TUNABLES") != nullptr) {
    return false;
  }
  return mallopt(M_ARENA_MAX, kMallocArenas) == 1;
}

}  // namespace rbln
