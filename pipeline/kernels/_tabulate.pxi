# The period proof's tabulation of one subtraction game (`_tabulate`, see `tabulation`),
# included by the modules that tabulate, after _common.pxi and _sg_values.pxi.

from libc.stdlib cimport calloc

cdef uint64_t _BASE = 0x100000001B3
cdef uint64_t _U32 = 0xFFFFFFFF

cdef uint64_t _window_power(int64_t m) noexcept nogil:
    cdef uint64_t result = 1
    cdef uint64_t factor = _BASE
    cdef int64_t e = m - 1
    while e > 0:
        if e & 1:
            result *= factor
        factor *= factor
        e >>= 1
    return result


cdef inline bint _windows_equal(const tval* vals, int64_t a, int64_t b, int64_t m) noexcept nogil:
    cdef int64_t i
    for i in range(m):
        if vals[a - m + i] != vals[b - m + i]:
            return False
    return True


cdef int64_t _probe(const uint64_t* slots, uint64_t n_slots, const tval* vals, int64_t y,
                    int64_t m, uint64_t mixed) noexcept nogil:
    """Find window W_y (ending before index y) in the open-addressing table: the earlier end x
    with W_x == W_y (verified value by value), or the negated free slot index - 1."""
    cdef uint64_t mask = n_slots - 1
    cdef uint64_t idx = mixed & mask
    cdef uint64_t tag = mixed >> 32
    cdef uint64_t s
    cdef int64_t x
    while True:
        s = slots[idx]
        if s == 0:
            return -<int64_t>idx - 1
        if (s >> 32) == tag:
            x = <int64_t>(s & _U32)
            if _windows_equal(vals, x, y, m):
                return x
        idx = (idx + 1) & mask


cdef uint64_t* _rebuild(const tval* vals, int64_t m, int64_t y_end, int64_t n_slots,
                        uint64_t bpow) noexcept nogil:
    """Windows W_m .. W_{y_end - 1} in a fresh table of n_slots slots (NULL: out of memory)."""
    cdef uint64_t* slots = <uint64_t*>calloc(n_slots, sizeof(uint64_t))
    cdef uint64_t h = 0
    cdef uint64_t mixed
    cdef int64_t i, y, r
    if slots == NULL:
        return NULL
    for i in range(m):
        h = h * _BASE + <uint64_t>vals[i] + 1
    for y in range(m, y_end):
        if y > m:
            h = (h - (<uint64_t>vals[y - 1 - m] + 1) * bpow) * _BASE
            h += <uint64_t>vals[y - 1] + 1
        mixed = snim_mix64(h)
        r = _probe(slots, n_slots, vals, y, m, mixed)
        slots[-(r + 1)] = ((mixed >> 32) << 32) | <uint64_t>y
    return slots


cdef void _tabulate(const int64_t* moves, int64_t k, tval* vals, int64_t start,
                    int64_t stop_len, int64_t* result) noexcept nogil:
    """tabulate_subtraction into result[0:3]; result[0] = -1 when out of memory."""
    cdef int64_t m = moves[k - 1]
    cdef int64_t* marks = <int64_t*>calloc(k + 2, sizeof(int64_t))
    cdef uint64_t bpow = _window_power(m)
    cdef uint64_t h = 0
    cdef uint64_t mixed
    cdef int64_t i, x, s, g, y, r, stamp
    cdef int64_t used = max(0, start - m + 1)
    cdef int64_t n_slots = 1 << 12
    cdef uint64_t* slots
    result[0] = -1
    if marks == NULL:
        return
    for i in range(max(0, start - m), start):
        h = h * _BASE + <uint64_t>vals[i] + 1
    while used * 10 > n_slots * 7:
        n_slots *= 2
    if used:
        slots = _rebuild(vals, m, start + 1, n_slots, bpow)
    else:
        slots = <uint64_t*>calloc(n_slots, sizeof(uint64_t))
    if slots == NULL:
        free(marks)
        return
    for x in range(start, stop_len):
        stamp = x + 1
        for i in range(k):
            s = moves[i]
            if s > x:
                break
            marks[vals[x - s]] = stamp
        g = 0
        while marks[g] == stamp:
            g += 1
        vals[x] = <tval>g
        y = x + 1
        if y < m:
            h = h * _BASE + <uint64_t>g + 1
            continue
        if y == m:
            h = h * _BASE + <uint64_t>g + 1
        else:
            h = (h - (<uint64_t>vals[x - m] + 1) * bpow) * _BASE
            h += <uint64_t>g + 1
        mixed = snim_mix64(h)
        r = _probe(slots, n_slots, vals, y, m, mixed)
        if r >= 0:
            result[0] = y
            result[1] = r - m
            result[2] = y - r
            free(slots)
            free(marks)
            return
        slots[-(r + 1)] = ((mixed >> 32) << 32) | <uint64_t>y
        used += 1
        if used * 10 > n_slots * 7:
            n_slots *= 2
            free(slots)
            slots = _rebuild(vals, m, y + 1, n_slots, bpow)
            if slots == NULL:
                free(marks)
                return
    result[0] = stop_len
    result[1] = 0
    result[2] = 0
    free(slots)
    free(marks)
