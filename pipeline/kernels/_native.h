/* Small C helpers the Cython kernels inline: a cache prefetch hint and the splitmix64
   finaliser (its constants do not fit a Cython integer literal). */
#ifndef SNIM_NATIVE_H
#define SNIM_NATIVE_H
#include <stdint.h>

/* Hint that the cache line holding *p will be read soon: read, keep in all levels. A
   prefetch never faults, so a pointer past an array only wastes the hint. */
static inline void snim_prefetch(const void *p) { __builtin_prefetch(p, 0, 3); }

/* splitmix64 finaliser: spreads a polynomial window hash over all 64 bits. */
static inline uint64_t snim_mix64(uint64_t h) {
    h ^= h >> 30;
    h *= 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 27;
    h *= 0x94D049BB133111EBULL;
    h ^= h >> 31;
    return h;
}
#endif
