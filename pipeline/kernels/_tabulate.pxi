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


cdef extern from *:
    int __builtin_ctzll(unsigned long long x) nogil

cdef enum:
    _BLOCK = 64  # values computed together from the bitsets (one machine word)
    # A block costs the bitsets' way a pass over the moves per value up to its mex, the
    # textbook's a pass per position: once a value this large has come, the textbook's way
    # goes on (the mex searches grow long).
    _BITS_TOP = 32
    _MIN_PART = 4  # `_block_by_bits` parts are as wide as the smallest move, at least this
cdef int64_t _BITS_BYTES = 1 << 23  # most memory the bitsets of one table may take (a
# table of 10**4 values with 100 moves takes 130 kB; longer tables with many moves go the
# textbook's way, which needs none)


cdef inline uint64_t _reached(const uint64_t* row, int64_t n, const int64_t* at) noexcept nogil:
    """The OR of bits at[2i] * 64 + at[2i + 1] .. + 63 of a row, for i < n."""
    cdef uint64_t w = 0
    cdef int64_t i
    for i in range(n):
        w |= ((row[at[2 * i]] >> at[2 * i + 1])
              | ((row[at[2 * i] + 1] << 1) << (63 - at[2 * i + 1])))
    return w


cdef void _block_by_bits(const int64_t* moves, int64_t ks, tval* vals, int64_t x0,
                         int64_t x1, uint64_t* rows, int64_t stride, uint64_t* found,
                         int64_t* top, int64_t n, const int64_t* at) noexcept nogil:
    """`_values_by_block` a part at a time, each as wide as the smallest move (so that its
    positions reach only values before it): in a part, value v goes to the positions not yet
    given one that reach no v (by a large move: found[v], computed for the whole block as
    first needed; by one of the ks small moves: v's bitset shifted by it), for v = 0, 1, ...
    until every position has one."""
    cdef int64_t width = min(moves[0], <int64_t>_BLOCK)
    cdef int64_t before = top[0]  # the largest value before the block
    cdef int64_t n_found = 0
    cdef int64_t a = x0
    cdef int64_t a1, v, b, i, p
    cdef uint64_t todo, f, take
    cdef const uint64_t* row
    while a < x1:
        a1 = min(a + width, x1)
        todo = ~(<uint64_t>0) >> (64 - (a1 - a))
        v = 0
        while todo:
            if v == n_found:
                found[v] = _reached(rows + v * stride + 1, n, at) if v <= before else 0
                n_found += 1
            f = found[v] >> (a - x0)
            if v <= top[0]:
                row = rows + v * stride + 1
                for i in range(ks):
                    p = a - moves[i]
                    if p <= -64:
                        break
                    f |= ((row[p >> 6] >> (p & 63))
                          | ((row[(p >> 6) + 1] << 1) << (63 - (p & 63))))
            take = todo & ~f
            if take:
                rows[v * stride + 1 + (a >> 6)] |= take << (a & 63)
                top[0] = max(top[0], v)
                while take:
                    b = __builtin_ctzll(take)
                    vals[a + b] = <tval>v
                    take &= take - 1
            todo &= f
            v += 1
        a = a1


cdef void _values_by_block(const int64_t* moves, int64_t ks, int64_t hi, tval* vals,
                           int64_t x0, int64_t x1, int64_t* marks, uint64_t* rows,
                           int64_t stride, uint64_t* found, int64_t* top,
                           int64_t* at) noexcept nogil:
    """SG(x0) .. SG(x1 - 1) (a block within one bitset word) into vals. The moves from ks on
    are at least _BLOCK, so what they reach lies before x0 and is known: for each value v,
    the positions of the block that reach a v by one of them are found at once, as the OR
    of v's bitset (row v of `rows`: bit x set when SG(x) = v; a zero word before each row)
    shifted by each move, for the values v up to the block's mex only (found[v], computed as
    the mex search first needs it); moves from hi on reach nothing yet. With a smallest move
    large enough for its number of small moves, `_block_by_bits` takes parts of the block at
    once; else the moves below ks are marked one position at a time, as the textbook does.
    `top` is the largest value so far: a larger v has an empty bitset. `at` is room for
    2 (hi - ks) numbers: where each large move's bits are."""
    cdef int64_t x, i, s, g, bit, stamp, p
    cdef int64_t n_found = 0
    cdef int64_t n = hi - ks
    cdef uint64_t w
    cdef const uint64_t* row
    for i in range(n):  # bits p .. p + 63 of a row, p > -64: word p >> 6 on, from bit p & 63
        p = x0 - moves[ks + i]
        at[2 * i] = p >> 6
        at[2 * i + 1] = p & 63
    if moves[0] >= _MIN_PART and moves[0] >= 2 * ks:  # parts of the block at once
        _block_by_bits(moves, ks, vals, x0, x1, rows, stride, found, top, n, at)
        return
    for x in range(x0, x1):
        stamp = x + 1
        for i in range(ks):
            s = moves[i]
            if s > x:
                break
            marks[vals[x - s]] = stamp
        bit = x - x0
        g = 0
        while True:
            if g == n_found:
                w = 0
                if g <= top[0]:
                    w = _reached(rows + g * stride + 1, n, at)
                found[g] = w
                n_found += 1
            if (found[g] >> bit) & 1 or marks[g] == stamp:
                g += 1
            else:
                break
        vals[x] = <tval>g
        rows[g * stride + 1 + (x >> 6)] |= (<uint64_t>1) << (x & 63)
        if g > top[0]:
            top[0] = g


cdef void _tabulate(const int64_t* moves, int64_t k, tval* vals, int64_t start,
                    int64_t stop_len, int64_t* result) noexcept nogil:
    """tabulate_subtraction into result[0:3]; result[0] = -1 when out of memory.

    Values come in blocks of _BLOCK from bitsets (`_values_by_block`) when some moves are
    that large and the bitsets are small enough (else, or without memory for them, one at a
    time by the textbook's marks); the period proof then hashes them one at a time."""
    cdef int64_t m = moves[k - 1]
    cdef int64_t* marks = <int64_t*>calloc(k + 2, sizeof(int64_t))
    cdef uint64_t bpow = _window_power(m)
    cdef uint64_t h = 0
    cdef uint64_t mixed
    cdef int64_t i, x, s, g, y, r, stamp, x0, x1, ks, reach, hi
    cdef int64_t used = max(0, start - m + 1)
    cdef int64_t n_slots = 1 << 12
    cdef int64_t stride = (stop_len >> 6) + 3  # a zero word, the words, one more
    cdef int64_t top = -1
    cdef uint64_t* slots
    cdef uint64_t* rows = NULL
    cdef uint64_t* found = NULL
    cdef int64_t* at = NULL
    result[0] = -1
    if marks == NULL:
        return
    ks = 0  # the moves below _BLOCK, marked one position at a time (narrower blocks of
    # bitsets, as wide as the smallest move, measured slower than that)
    while ks < k and moves[ks] < _BLOCK:
        ks += 1
    if ks < k and (k + 1) * stride <= _BITS_BYTES // 8:  # values are at most k
        rows = <uint64_t*>calloc((k + 1) * stride, sizeof(uint64_t))
        found = <uint64_t*>malloc((k + 2) * sizeof(uint64_t))
        at = <int64_t*>malloc(2 * k * sizeof(int64_t))
        if rows == NULL or found == NULL or at == NULL:  # the textbook's way needs no more
            free(rows)
            free(found)
            free(at)
            rows = NULL
            found = NULL
            at = NULL
        else:
            for x in range(start):
                g = vals[x]
                rows[g * stride + 1 + (x >> 6)] |= (<uint64_t>1) << (x & 63)
                top = max(top, g)
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
        free(rows)
        free(found)
        free(at)
        return
    reach = 0  # the moves <= x (the textbook's way)
    hi = ks  # the moves < x0 + _BLOCK (the bitsets' way)
    x0 = start
    while x0 < stop_len:
        x1 = min((x0 | (_BLOCK - 1)) + 1, stop_len)  # blocks end at multiples of _BLOCK
        if rows != NULL and top < _BITS_TOP:
            while hi < k and moves[hi] < x0 + _BLOCK:
                hi += 1
            _values_by_block(moves, ks, hi, vals, x0, x1, marks, rows, stride, found, &top,
                             at)
        else:
            for x in range(x0, x1):
                stamp = x + 1
                while reach < k and moves[reach] <= x:
                    reach += 1
                for i in range(reach):
                    marks[vals[x - moves[i]]] = stamp
                g = 0
                while marks[g] == stamp:
                    g += 1
                vals[x] = <tval>g
        for x in range(x0, x1):
            g = vals[x]
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
                free(rows)
                free(found)
                free(at)
                return
            slots[-(r + 1)] = ((mixed >> 32) << 32) | <uint64_t>y
            used += 1
            if used * 10 > n_slots * 7:
                n_slots *= 2
                free(slots)
                slots = _rebuild(vals, m, y + 1, n_slots, bpow)
                if slots == NULL:
                    free(marks)
                    free(rows)
                    free(found)
                    free(at)
                    return
        x0 = x1
    result[0] = stop_len
    result[1] = 0
    result[2] = 0
    free(slots)
    free(marks)
    free(rows)
    free(found)
    free(at)
