# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled part of `tabulation` (see there): the period proof's tabulation."""

include "_common.pxi"
include "_sg_values.pxi"

from cython.parallel cimport prange

import numpy as np

include "_tabulate.pxi"


def mix64(h):
    """splitmix64 finaliser: spreads a polynomial window hash over all 64 bits."""
    return snim_mix64(<uint64_t>int(h))


def window_power(int64_t m):
    """_BASE ** (m - 1) modulo 2**64, the weight of a window's oldest value in its rolling hash,
    by repeated squaring: O(log m) for windows as long as 2**32 - 1 values."""
    return _window_power(m)


def tabulate_subtraction(const int64_t[::1] moves, tval[::1] vals, int64_t start,
                         int64_t stop_len):
    cdef int64_t result[3]
    with nogil:
        _tabulate(&moves[0], moves.shape[0], &vals[0], start, stop_len, result)
    if result[0] < 0:
        raise MemoryError("tabulate_subtraction: out of memory")
    return result[0], result[1], result[2]


def tabulate_many(const int64_t[::1] moves, const int64_t[::1] moves_base,
                  const int64_t[::1] moves_len, tval[::1] vals, const int64_t[::1] vals_base,
                  const int64_t[::1] start, const int64_t[::1] stop_len,
                  const int64_t[::1] worker_start, const int64_t[::1] jobs):
    cdef Py_ssize_t r = moves_base.shape[0]
    cdef Py_ssize_t workers = worker_start.shape[0] - 1
    out = np.zeros((r, 3), np.int64)
    cdef int64_t[:, ::1] res = out
    cdef Py_ssize_t w
    cdef int64_t q, j
    for w in prange(workers, nogil=True, schedule="static", chunksize=1):
        q = worker_start[w]
        while q < worker_start[w + 1]:
            j = jobs[q]
            _tabulate(&moves[moves_base[j]], moves_len[j], &vals[vals_base[j]], start[j],
                      stop_len[j], &res[j, 0])
            q = q + 1
    if r and out[:, 0].min() < 0:
        raise MemoryError("tabulate_many: out of memory")
    return out[:, 0].copy(), out[:, 1].copy(), out[:, 2].copy()
