"""Text cells as Arrow (offsets, bytes): lists of heaps ("5 12", "[5, 12]") and integer keys,
read on the fast path; whatever these do not cover the caller parses the exact, slow way."""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, inline="always")
def _is_space(c):
    return c == 32 or 9 <= c <= 13


@njit(cache=True, inline="always")
def _scan_heap_text(data, a, b, values, at, store):
    """Heaps in data[a:b] ("5 12", "5,12", "[5, 12]"): how many, stored from values[at] when
    `store`; -1 when the text is anything else (a "+", a long number, non-ASCII, a stray
    bracket, a comma with no heap before or after it), which the caller parses the slow,
    exact way."""
    while a < b and _is_space(data[a]):
        a += 1
    while b > a and _is_space(data[b - 1]):
        b -= 1
    if a < b and data[a] == 91:  # "["
        if data[b - 1] != 93:  # "]"
            return -1
        a += 1
        b -= 1
    count = 0
    after_heap = False  # a heap since the last comma: a comma here separates, not empties
    i = a
    while i < b:
        c = data[i]
        if c == 44:  # ","
            if not after_heap:
                return -1
            after_heap = False
            i += 1
            continue
        if _is_space(c):
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
        if i == start or i - start > 18 or (i < b and data[i] != 44 and not _is_space(data[i])):
            return -1
        if store:
            values[at + count] = -value if negative else value
        count += 1
        after_heap = True
    if count and not after_heap:  # a trailing comma
        return -1
    return count


@njit(cache=True, parallel=True, nogil=True)
def heap_text_lists(offsets, data):
    """Parse each string data[offsets[i]:offsets[i+1]] as a list of heaps: (list offsets,
    values, rows the plain grammar does not cover, which hold an empty list here)."""
    n = offsets.shape[0] - 1
    found = np.empty(n, np.int64)
    none = np.zeros(0, np.int64)
    for i in prange(n):
        found[i] = _scan_heap_text(data, offsets[i], offsets[i + 1], none, 0, False)
    counts = np.empty(n + 1, np.int64)
    counts[0] = 0
    for i in range(n):
        counts[i + 1] = counts[i] + max(found[i], 0)
    values = np.empty(counts[n], np.int64)
    for i in prange(n):
        if found[i] > 0:
            _scan_heap_text(data, offsets[i], offsets[i + 1], values, counts[i], True)
    return counts, values, np.nonzero(found < 0)[0]


@njit(cache=True, nogil=True)
def int_text_values(offsets, data):
    """Each string data[offsets[i]:offsets[i+1]], less ASCII spaces around it, as an integer
    written exactly as Int64 writes it ("-" only, no leading zero, no "-0"; at most 18
    digits): (values, True), or (values so far, False) at the first string that is not."""
    n = offsets.shape[0] - 1
    values = np.empty(n, np.int64)
    for i in range(n):
        a, b = offsets[i], offsets[i + 1]
        while a < b and _is_space(data[a]):
            a += 1
        while b > a and _is_space(data[b - 1]):
            b -= 1
        negative = a < b and data[a] == 45
        if negative:
            a += 1
        if a == b or b - a > 18 or (data[a] == 48 and (b - a > 1 or negative)):
            return values, False
        value = 0
        for j in range(a, b):
            d = data[j] - 48
            if d < 0 or d > 9:
                return values, False
            value = value * 10 + d
        values[i] = -value if negative else value
    return values, True


@njit(cache=True, nogil=True)
def needs_strip(offsets, data):
    """Whether any string data[offsets[i]:offsets[i+1]] is empty or may start or end with
    whitespace (an ASCII space or any non-ASCII byte, which the exact strip then judges)."""
    for i in range(offsets.shape[0] - 1):
        a, b = offsets[i], offsets[i + 1]
        if a == b or _is_space(data[a]) or data[a] >= 128 or _is_space(data[b - 1]) \
                or data[b - 1] >= 128:
            return True
    return False
