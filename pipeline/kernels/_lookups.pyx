# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled part of `lookups` (see there). Every array is int64 but the table values, of any
integer dtype."""

include "_common.pxi"
include "_sg_values.pxi"

from cython.parallel cimport prange

import numpy as np

cdef enum:
    KIND_SUBTRACTION = 0
    KIND_NIM = 1
    KIND_HALF = 2
    BEYOND_TABLE = -1
    AHEAD_ROWS = 16  # as lookups.AHEAD_ROWS
    AHEAD_HEAPS = 32

def half_sg(int64_t h):
    """Take-at-most-half: drop the trailing one-bits of h, then halve."""
    return _half_sg(h)


def sg_of(int64_t h, int64_t t, const tval[::1] values, const int64_t[::1] base,
          const int64_t[::1] length, const int64_t[::1] pre, const int64_t[::1] per,
          const int64_t[::1] kind):
    """Grundy value of heap h under table t, or BEYOND_TABLE when it is not known."""
    return _sg_of(h, t, &values[0], &base[0], &length[0], &pre[0], &per[0], &kind[0])


cdef inline void _prefetch_value(int64_t h, int64_t t, const tval* values, const int64_t* base,
                                 const int64_t* length, const int64_t* kind) noexcept nogil:
    if t >= 0 and kind[t] == KIND_SUBTRACTION and 0 <= h < length[t]:
        snim_prefetch(&values[base[t] + h])


cdef inline void _prefetch_row(const int64_t* offsets, const int64_t* heaps, int64_t t,
                               int64_t i, const tval* values, const int64_t* base,
                               const int64_t* length, const int64_t* kind) noexcept nogil:
    cdef int64_t j
    for j in range(offsets[i], offsets[i + 1]):
        _prefetch_value(heaps[j], t, values, base, length, kind)


cdef inline int64_t _row_nim(const int64_t* offsets, const int64_t* heaps, int64_t i, int64_t t,
                             const tval* values, const int64_t* base, const int64_t* length,
                             const int64_t* pre, const int64_t* per, const int64_t* kind,
                             int64_t* bad) noexcept nogil:
    cdef int64_t kd = kind[t]
    cdef int64_t start = offsets[i]
    cdef int64_t stop = offsets[i + 1]
    cdef int64_t acc = 0
    cdef int64_t j, h, b, n_vals, q, p
    if kd == KIND_SUBTRACTION:
        b = base[t]
        n_vals = length[t]
        q = pre[t]
        p = per[t]
        for j in range(start, stop):
            h = heaps[j]
            if h < n_vals:
                acc ^= <int64_t>values[b + h]
            elif p > 0:
                acc ^= <int64_t>values[b + q + (h - q) % p]
            else:
                bad[i] = j - start
                return 0
    elif kd == KIND_NIM:
        for j in range(start, stop):
            acc ^= heaps[j]
    else:
        for j in range(start, stop):
            acc ^= _half_sg(heaps[j])
    return acc


def nim_sums_wide(const int64_t[::1] offsets, const int64_t[::1] heaps,
                  const int64_t[::1] table_of_row, const tval[::1] values,
                  const int64_t[::1] base, const int64_t[::1] length, const int64_t[::1] pre,
                  const int64_t[::1] per, const int64_t[::1] kind, nim_out=None, bad_out=None):
    cdef Py_ssize_t n = offsets.shape[0] - 1
    # every row written below, in the parallel loop
    nim_arr = np.empty(n, np.int64) if nim_out is None else nim_out
    bad_arr = np.empty(n, np.int64) if bad_out is None else bad_out
    cdef int64_t[::1] nim = nim_arr
    cdef int64_t[::1] bad = bad_arr
    if nim.shape[0] != n or bad.shape[0] != n:
        raise ValueError("nim_sums_wide: outputs do not match the rows")
    cdef const int64_t* o = &offsets[0]
    cdef const int64_t* hp = &heaps[0]
    cdef const int64_t* tor = &table_of_row[0]
    cdef const tval* v = &values[0]
    cdef const int64_t* bs = &base[0]
    cdef const int64_t* ln = &length[0]
    cdef const int64_t* pr = &pre[0]
    cdef const int64_t* pe = &per[0]
    cdef const int64_t* kd = &kind[0]
    cdef int64_t* bd = &bad[0]
    cdef Py_ssize_t i
    for i in prange(n, nogil=True, schedule="static"):
        if i + AHEAD_ROWS < n:
            _prefetch_row(o, hp, tor[i + AHEAD_ROWS], i + AHEAD_ROWS, v, bs, ln, kd)
        bd[i] = -1
        nim[i] = _row_nim(o, hp, i, tor[i], v, bs, ln, pr, pe, kd, bd)
    return nim_arr, bad_arr


def sg_per_heap(const int64_t[::1] heaps, const int64_t[::1] table_of_row,
                const tval[::1] values, const int64_t[::1] base, const int64_t[::1] length,
                const int64_t[::1] pre, const int64_t[::1] per, const int64_t[::1] kind):
    cdef Py_ssize_t n = heaps.shape[0]
    out_arr = np.empty(n, np.int64)
    cdef int64_t[::1] out = out_arr
    cdef Py_ssize_t i
    with nogil:
        for i in range(n):
            if i + AHEAD_HEAPS < n:
                _prefetch_value(heaps[i + AHEAD_HEAPS], table_of_row[i + AHEAD_HEAPS],
                                &values[0], &base[0], &length[0], &kind[0])
            out[i] = _sg_of(heaps[i], table_of_row[i], &values[0], &base[0], &length[0],
                            &pre[0], &per[0], &kind[0])
    return out_arr


cdef inline int64_t _subtraction_move(int64_t h, int64_t target, const int64_t* moves,
                                      int64_t n_moves, const tval* values, int64_t b,
                                      int64_t n_vals, int64_t q, int64_t p) noexcept nogil:
    cdef int64_t j, s, x, g
    for j in range(n_moves):
        s = moves[j]
        if s > h:
            break
        x = h - s
        if x < n_vals:
            g = <int64_t>values[b + x]
        elif p > 0:
            g = <int64_t>values[b + q + (x - q) % p]
        else:
            continue
        if g == target:
            return s
    return 0


cdef void _winning_move(const int64_t* heaps, int64_t nh, int64_t nim_sum, int64_t t,
                        const int64_t* moves, const int64_t* moves_base,
                        const int64_t* moves_len, const tval* values, const int64_t* base,
                        const int64_t* length, const int64_t* pre, const int64_t* per,
                        const int64_t* kind, int64_t* out) noexcept nogil:
    cdef int64_t i, h, g, target, kd, lo, j, ones, y, s
    cdef bint found
    for i in range(nh):
        h = heaps[i]
        g = _sg_of(h, t, values, base, length, pre, per, kind)
        target = g ^ nim_sum
        if target >= g:
            continue
        kd = kind[t]
        if kd == KIND_NIM:
            out[0] = i
            out[1] = h - target
            return
        if kd == KIND_HALF:
            lo = h - h // 2
            found = False
            for j in range(63):
                ones = ((<int64_t>1) << j) - 1
                if target > (((<int64_t>1) << (62 - j)) - 1):
                    break
                y = (target << (j + 1)) | ones
                if y > h - 1:
                    break
                if y >= lo:
                    out[0] = i
                    out[1] = h - y
                    return
            continue
        s = _subtraction_move(h, target, &moves[moves_base[t]], moves_len[t], values, base[t],
                              length[t], pre[t], per[t])
        if s > 0:
            out[0] = i
            out[1] = s
            return
    out[0] = -1
    out[1] = -1


def winning_move(const int64_t[::1] heaps, int64_t nim_sum, int64_t t,
                 const int64_t[::1] moves, const int64_t[::1] moves_base,
                 const int64_t[::1] moves_len, const tval[::1] values, const int64_t[::1] base,
                 const int64_t[::1] length, const int64_t[::1] pre, const int64_t[::1] per,
                 const int64_t[::1] kind):
    cdef int64_t out[2]
    _winning_move(&heaps[0], heaps.shape[0], nim_sum, t, &moves[0], &moves_base[0],
                  &moves_len[0], &values[0], &base[0], &length[0], &pre[0], &per[0],
                  &kind[0], out)
    return out[0], out[1]


def winning_moves_wide(const int64_t[::1] offsets, const int64_t[::1] heaps,
                       const int64_t[::1] table_of_row, const int64_t[::1] nim,
                       const int64_t[::1] moves, const int64_t[::1] moves_base,
                       const int64_t[::1] moves_len, const tval[::1] values,
                       const int64_t[::1] base, const int64_t[::1] length,
                       const int64_t[::1] pre, const int64_t[::1] per,
                       const int64_t[::1] kind):
    cdef Py_ssize_t n = offsets.shape[0] - 1
    heap_arr = np.full(n, -1, np.int64)
    take_arr = np.full(n, -1, np.int64)
    cdef int64_t[::1] move_heap = heap_arr
    cdef int64_t[::1] move_take = take_arr
    cdef const int64_t* o = &offsets[0]
    cdef const int64_t* hp = &heaps[0]
    cdef const int64_t* tor = &table_of_row[0]
    cdef const int64_t* nm = &nim[0]
    cdef const int64_t* mv = &moves[0]
    cdef const int64_t* mb = &moves_base[0]
    cdef const int64_t* ml = &moves_len[0]
    cdef const tval* v = &values[0]
    cdef const int64_t* bs = &base[0]
    cdef const int64_t* ln = &length[0]
    cdef const int64_t* pr = &pre[0]
    cdef const int64_t* pe = &per[0]
    cdef const int64_t* kd = &kind[0]
    cdef int64_t* mh = &move_heap[0]
    cdef int64_t* mt = &move_take[0]
    cdef Py_ssize_t i
    for i in prange(n, nogil=True, schedule="static"):
        if i + AHEAD_ROWS < n and nm[i + AHEAD_ROWS] != 0:
            _prefetch_row(o, hp, tor[i + AHEAD_ROWS], i + AHEAD_ROWS, v, bs, ln, kd)
        if nm[i] != 0:
            _move_of_row(o, hp, i, tor[i], nm[i], mv, mb, ml, v, bs, ln, pr, pe, kd, mh, mt)
    return heap_arr, take_arr


cdef inline void _move_of_row(const int64_t* offsets, const int64_t* heaps, Py_ssize_t i,
                              int64_t t, int64_t nim_sum, const int64_t* moves,
                              const int64_t* moves_base, const int64_t* moves_len,
                              const tval* values, const int64_t* base, const int64_t* length,
                              const int64_t* pre, const int64_t* per, const int64_t* kind,
                              int64_t* move_heap, int64_t* move_take) noexcept nogil:
    cdef int64_t out[2]
    _winning_move(&heaps[offsets[i]], offsets[i + 1] - offsets[i], nim_sum, t, moves,
                  moves_base, moves_len, values, base, length, pre, per, kind, out)
    move_heap[i] = out[0]
    move_take[i] = out[1]


def max_heap_per_table(const int64_t[::1] offsets, const int64_t[::1] heaps,
                       const int64_t[::1] table_of_row, int64_t n_tables):
    out_arr = np.full(n_tables, -1, np.int64)
    cdef int64_t[::1] out = out_arr
    cdef Py_ssize_t i
    cdef int64_t t, m, j
    with nogil:
        for i in range(offsets.shape[0] - 1):
            t = table_of_row[i]
            if t < 0:
                continue
            m = out[t]
            for j in range(offsets[i], offsets[i + 1]):
                if heaps[j] > m:
                    m = heaps[j]
            out[t] = m
    return out_arr
