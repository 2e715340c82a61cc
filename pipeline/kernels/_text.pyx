# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled part of `text` (see there): Arrow (int64 offsets, uint8 bytes) text cells."""

include "_common.pxi"
include "_views.pxi"

from libc.string cimport memcpy

cdef extern from *:
    int __builtin_ctzll(unsigned long long) nogil


import numpy as np


cdef inline int64_t _leading_digits(const uint8_t* data, int64_t* value) noexcept nogil:
    """How many of the 8 bytes at `data` are ASCII digits before the first that is not, and
    (when fewer than 8) the number they spell in `value`: one load and no branch per digit,
    where a loop over the digits mispredicts its exit at the end of every number. Digits are
    the bytes whose high nibble is 3 before and after adding 6; a carry out of a byte (only
    from a byte above 0xF9, not a digit) reaches only the bytes after it, past the digits."""
    cdef uint64_t word
    memcpy(&word, data, 8)  # little-endian: the first byte is the lowest
    cdef uint64_t high = 0xF0F0F0F0F0F0F0F0ULL
    cdef uint64_t threes = 0x3030303030303030ULL
    cdef uint64_t other = (((word & high) ^ threes)
                           | (((word + 0x0606060606060606ULL) & high) ^ threes))
    if other == 0:
        return 8
    cdef int64_t n = __builtin_ctzll(other) >> 3
    if n == 0:
        return 0
    cdef uint64_t d = (word & 0x0F0F0F0F0F0F0F0FULL) << (8 * (8 - n))  # "000" + the digits
    d = (d * 2561ULL) >> 8
    d = ((d & 0x00FF00FF00FF00FFULL) * 6553601ULL) >> 16
    d = ((d & 0x0000FFFF0000FFFFULL) * 42949672960001ULL) >> 32
    value[0] = <int64_t>d
    return n


cdef int64_t _scan_heap_text(const uint8_t* data, int64_t a, int64_t b, int64_t* values,
                             int64_t at, bint store) noexcept nogil:
    """Heaps in data[a:b] ("5 12", "5,12", "[5, 12]"): how many, stored from values[at] when
    `store`; -1 when the text is anything else (a "+", a long number, non-ASCII, a stray
    bracket, a comma with no heap before or after it)."""
    cdef int64_t count = 0
    cdef bint after_heap = False  # a heap since the last comma: a comma here separates
    cdef int64_t i, start, value, digits
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
        if i + 8 <= b:  # a number of up to 7 digits read whole from the next 8 bytes
            digits = _leading_digits(data + i, &value)
            i += digits
        if i == start or i - start == 8:
            i = start
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


# Text cells in either layout: Arrow's (offsets, bytes), or its string views (polars' own:
# a cell of at most 12 bytes inline in its 16-byte view, a longer one in a data buffer), read
# where they lie, without the copy into offsets and bytes that exporting views makes.
cdef struct Cells:
    Py_ssize_t n
    const int64_t* offsets  # NULL: views
    const uint8_t* data
    const int32_t* views  # n x 4: length, prefix, buffer, start
    const uint8_t** buffers


cdef uint8_t _NOTHING = 0


cdef inline const uint8_t* _cell(const Cells* c, Py_ssize_t i, int64_t* length) noexcept nogil:
    cdef const int32_t* view
    if c.offsets != NULL:
        length[0] = c.offsets[i + 1] - c.offsets[i]
        return c.data + c.offsets[i]
    view = c.views + 4 * i
    length[0] = view[0]
    if view[0] <= 12:
        return (<const uint8_t*>view) + 4
    return c.buffers[view[2]] + <uint32_t>view[3]


cdef class _Layout:
    """`Cells` over numpy arrays kept alive (and checked: the kernels trust every cell)."""
    cdef Cells cells
    cdef object keep
    cdef const uint8_t** starts

    def __cinit__(self, text):
        cdef const int64_t[::1] offsets
        cdef const uint8_t[::1] data
        cdef const int32_t[:, ::1] views
        self.starts = NULL
        if len(text) == 3:  # ("views", views, buffers)
            views = np.ascontiguousarray(text[1], np.int32).reshape(-1, 4)
            buffers = [np.ascontiguousarray(b, np.uint8) for b in text[2]]
            self.keep = (views, buffers)
            self.starts = _view_buffers(views, buffers, "text cells")
            self.cells.n = views.shape[0]
            self.cells.offsets = NULL
            self.cells.data = NULL
            self.cells.views = &views[0, 0] if views.shape[0] else NULL
            self.cells.buffers = self.starts
        else:
            offsets = np.ascontiguousarray(text[0], np.int64)
            data = np.ascontiguousarray(text[1], np.uint8)
            self.keep = (offsets, data)
            if offsets.shape[0] < 1 or (offsets.shape[0] > 1 and (
                    offsets[0] < 0 or offsets[offsets.shape[0] - 1] > data.shape[0])):
                raise ValueError("offsets do not match the bytes")
            self.cells.n = offsets.shape[0] - 1
            self.cells.offsets = &offsets[0]
            self.cells.data = &data[0] if data.shape[0] else &_NOTHING
            self.cells.views = NULL
            self.cells.buffers = NULL

    def __dealloc__(self):
        free(self.starts)

    cdef int64_t total_bytes(self):
        cdef int64_t total = 0
        cdef int64_t length
        cdef Py_ssize_t i
        if self.cells.offsets != NULL:
            return self.cells.offsets[self.cells.n] - self.cells.offsets[0]
        for i in range(self.cells.n):
            _cell(&self.cells, i, &length)
            total += length
        return total


def heap_text_lists(text):
    """(found per row: heaps or -1, list offsets, values), in one pass in row order: each
    row's heaps go where the rows before left off, into room for as many as its bytes could
    hold ((bytes + 1) / 2: a digit and a separator each), allocated, not touched, up front.
    `text`: (offsets, bytes) or ("views", views, buffers)."""
    cdef _Layout layout = _Layout(text)
    cdef Cells* c = &layout.cells
    cdef Py_ssize_t n = c.n
    found_arr = np.empty(n, np.int64)
    cdef int64_t[::1] found = found_arr
    counts_arr = np.empty(n + 1, np.int64)
    cdef int64_t[::1] counts = counts_arr
    values_arr = np.empty((layout.total_bytes() + n) // 2 + 1, np.int64)
    cdef int64_t[::1] values = values_arr
    cdef int64_t* vp = &values[0]
    cdef int64_t at = 0
    cdef int64_t f, length
    cdef const uint8_t* cell
    cdef Py_ssize_t i
    counts[0] = 0
    with nogil:
        for i in range(n):
            cell = _cell(c, i, &length)
            f = _scan_heap_text(cell, 0, length, vp, at, True)
            found[i] = f
            if f > 0:
                at += f
            counts[i + 1] = at
    # the room past `at` was never touched, so holds no memory: a copy of the heaps out of it
    # would only cost fresh pages and their zeroing
    return found_arr, counts_arr, values_arr[:at]


def int_text_values(text):
    cdef _Layout layout = _Layout(text)
    cdef Cells* c = &layout.cells
    cdef Py_ssize_t n = c.n
    values_arr = np.empty(n, np.int64)
    cdef int64_t[::1] values = values_arr
    cdef Py_ssize_t i
    cdef int64_t a, b, j, d, value
    cdef const uint8_t* data
    cdef bint negative
    cdef bint ok = True
    with nogil:
        for i in range(n):
            data = _cell(c, i, &b)
            a = 0
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


def needs_strip(text):
    cdef _Layout layout = _Layout(text)
    cdef Cells* c = &layout.cells
    cdef Py_ssize_t i
    cdef int64_t b
    cdef const uint8_t* data
    cdef bint found = False
    with nogil:
        for i in range(c.n):
            data = _cell(c, i, &b)
            if (b == 0 or is_space(data[0]) or data[0] >= 128 or is_space(data[b - 1])
                    or data[b - 1] >= 128):
                found = True
                break
    return found
