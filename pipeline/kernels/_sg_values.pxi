# SG values as the kernels look them up (included, not imported: Cython inlines them into
# each module that reads the tables, `_lookups` and the classic solver's `_classic`).

ctypedef fused tval:
    uint8_t
    uint16_t
    uint32_t
    int8_t
    int16_t
    int32_t
    int64_t
    uint64_t


cdef inline int64_t _half_sg(int64_t h) noexcept nogil:
    """Take-at-most-half: drop the trailing one-bits of h, then halve."""
    while h & 1:
        h >>= 1
    return h >> 1


cdef inline int64_t _sg_of(int64_t h, int64_t t, const tval* values, const int64_t* base,
                           const int64_t* length, const int64_t* pre, const int64_t* per,
                           const int64_t* kind) noexcept nogil:
    """SG(h) in table t (kind 1: nim, 2: half, else the table, periodic past its end when a
    period is proven); -1 when heap h lies beyond the table (lookups.BEYOND_TABLE)."""
    cdef int64_t kd = kind[t]
    cdef int64_t p
    if kd == 1:  # lookups.KIND_NIM
        return h
    if kd == 2:  # lookups.KIND_HALF
        return _half_sg(h)
    if h < length[t]:
        return <int64_t>values[base[t] + h]
    p = per[t]
    if p > 0:
        return <int64_t>values[base[t] + pre[t] + (h - pre[t]) % p]
    return -1
