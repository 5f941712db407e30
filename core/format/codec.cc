#include "core/format/codec.h"

#include <cstdint>
#include <limits>

namespace rbln {

uint64_t ContainerFacts::OtherBytes(size_t bucket) const {
  uint64_t total = 0;
  for (const AllocationFacts& allocation : other) {
    const uint64_t bytes = bucket < allocation.bytes.size()
                               ? allocation.bytes[bucket]
                               : uint64_t{0};
    if (bytes > std::numeric_limits<uint64_t>::max() - total) {
      return std::numeric_limits<uint64_t>::max();
    }
    total += bytes;
  }
  return total;
}

}  // namespace rbln
