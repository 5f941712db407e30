// The daemon's malloc settings, made once at the start of main().
//
// glibc's malloc gives each thread that allocates under contention an arena
// of its own, up to 8 per core, and an arena keeps the memory it once held:
// gRPC's and the pool's threads made most of the daemon's resident memory
// growth under load that way (docs/performance.md). Two arenas serve a
// daemon that spends its time in system calls.
#ifndef RBLN_SERVER_ALLOCATOR_H_
#define RBLN_SERVER_ALLOCATOR_H_

namespace rbln {

// Arenas the daemon allows itself unless told otherwise.
inline constexpr int kMallocArenas = 2;

// Limits malloc to kMallocArenas arenas, unless the environment already
// sets malloc's tuning (MALLOC_ARENA_MAX, or GLIBC_TUNABLES), which then
// wins. Returns whether it set the limit.
bool ConfigureMalloc();

}  // namespace rbln

#endif  // RBLN_SERVER_ALLOCATOR_H_
