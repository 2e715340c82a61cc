# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled part of `text` (see there): Arrow (int64 offsets, uint8 bytes) text cells."""

include "_common.pxi"


import numpy as np


cdef int64_t _scan_heap_text(const uint8_t* data, int64_t a, int64_t b, int64_t* values,
                             int64_t at, bint store) noexcept nogil:
    """Heaps in data[a:b] ("5 12", "5,12", "[5, 12]"): how many, stored from values[at] when
    `store`; -1 when the text is anything else (a "+", a long number, non-ASCII, a stray
    bracket, a comma with no heap before or after it)."""
    cdef int64_t count = 0
    cdef bint after_heap = False  # a heap since the last comma: a comma here separates
    cdef int64_t i, start, value
    cdef uint8_t c
    cdef bint negative
    while a < b and is_space(data[a]):
        a += 1
    while b > a and is_space(data[b - 1]):
        b -= 1
    if a < b and data[a] == 91:  # "["
        if data[b - 1] != 93:  # "]"
            return -1
        a += 1
        b -= 1
    i = a
    while i < b:
        c = data[i]
        if c == 44:  # ","
            if not after_heap:
                return -1
            after_heap = False
            i += 1
            continue
        if is_space(c):
            i += 1
            continue
        negative = c == 45  # "-"
        if negative:
            i += 1
        start = i
        value = 0
        while i < b and 48 <= data[i] <= 57:
            value = value * 10 + (data[i] - 48)
            i += 1
        if i == start or i - start > 18 or (i < b and data[i] != 44 and not is_space(data[i])):
            return -1
        if store:
            values[at + count] = -value if negative else value
        count += 1
        after_heap = True
    if count and not after_heap:  # a trailing comma
        return -1
    return count


def heap_text_lists(const int64_t[::1] offsets, const uint8_t[::1] data):
    """(found per row: heaps or -1, list offsets, values), in one pass in row order: each
    row's heaps go where the rows before left off, into room for as many as its bytes could
    hold ((bytes + 1) / 2: a digit and a separator each), allocated, not touched, up front."""
    cdef Py_ssize_t n = offsets.shape[0] - 1
    found_arr = np.empty(n, np.int64)
    cdef int64_t[::1] found = found_arr
    counts_arr = np.empty(n + 1, np.int64)
    cdef int64_t[::1] counts = counts_arr
    values_arr = np.empty((offsets[n] - offsets[0] + n) // 2 + 1, np.int64)
    cdef int64_t[::1] values = values_arr
    cdef const uint8_t* dp = &data[0] if data.shape[0] else NULL
    cdef int64_t* vp = &values[0]
    cdef int64_t at = 0
    cdef int64_t f
    cdef Py_ssize_t i
    counts[0] = 0
    with nogil:
        for i in range(n):
            f = _scan_heap_text(dp, offsets[i], offsets[i + 1], vp, at, True)
            found[i] = f
            if f > 0:
                at += f
            counts[i + 1] = at
    return found_arr, counts_arr, values_arr[:at]


def int_text_values(const int64_t[::1] offsets, const uint8_t[::1] data):
    cdef Py_ssize_t n = offsets.shape[0] - 1
    values_arr = np.empty(n, np.int64)
    cdef int64_t[::1] values = values_arr
    cdef Py_ssize_t i
    cdef int64_t a, b, j, d, value
    cdef bint negative
    cdef bint ok = True
    with nogil:
        for i in range(n):
            a = offsets[i]
            b = offsets[i + 1]
            while a < b and is_space(data[a]):
                a += 1
            while b > a and is_space(data[b - 1]):
                b -= 1
            negative = a < b and data[a] == 45
            if negative:
                a += 1
            if a == b or b - a > 18 or (data[a] == 48 and (b - a > 1 or negative)):
                ok = False
                break
            value = 0
            for j in range(a, b):
                d = <int64_t>data[j] - 48
                if d < 0 or d > 9:
                    ok = False
                    break
                value = value * 10 + d
            if not ok:
                break
            values[i] = -value if negative else value
    return values_arr, ok


def needs_strip(const int64_t[::1] offsets, const uint8_t[::1] data):
    cdef Py_ssize_t i
    cdef int64_t a, b
    cdef bint found = False
    with nogil:
        for i in range(offsets.shape[0] - 1):
            a = offsets[i]
            b = offsets[i + 1]
            if (a == b or is_space(data[a]) or data[a] >= 128 or is_space(data[b - 1])
                    or data[b - 1] >= 128):
                found = True
                break
    return found
