# Shared by the kernel modules (included, not imported): integer types and the C helpers
# of _native.h.
from libc.stdint cimport (int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                          uint64_t)
from libc.stdlib cimport free, malloc, realloc

cdef extern from "_native.h" nogil:
    void snim_prefetch(const void *p)
    uint64_t snim_mix64(uint64_t h)

ctypedef fused any_int:
    int8_t
    int16_t
    int32_t
    int64_t
    uint8_t
    uint16_t
    uint32_t
    uint64_t


cdef inline bint is_space(int64_t c) noexcept nogil:
    return c == 32 or (9 <= c <= 13)
