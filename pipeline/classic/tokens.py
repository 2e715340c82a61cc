"""The token reader of the classic format, in numba: signed decimal integers separated by C
whitespace, read with a checked path (any token, verdict and value) and a fast path for
plain digits."""

from __future__ import annotations

import numpy as np
from numba import njit

_INT64_MAX = np.int64(2**63 - 1)

# Token reader verdicts.
T_INT = 0
T_EOF = 1
T_NOT_INT = 2
T_OVERFLOW = 3


@njit(cache=True, inline="always")
def is_space(c):
    return c == 32 or (c >= 9 and c <= 13)


@njit(cache=True)
def _checked_value(buf, start, end):
    """The value of the digits buf[start:end] and whether it exceeds int64."""
    v = np.int64(0)
    for i in range(start, end):
        d = np.int64(buf[i]) - 48
        if v > (_INT64_MAX - d) // 10:
            return np.int64(0), True
        v = v * 10 + d
    return v, False


@njit(cache=True, inline="always")
def next_token(buf, i):
    """Read the token at or after byte i: (verdict, value, start, end).

    Tokens are signed decimal integers separated by C whitespace (space and bytes 9-13, i.e.
    tab, newline, vertical tab, form feed, carriage return).
    `end` is the byte after the token (where the next read starts).
    """
    n = buf.shape[0]
    while i < n and is_space(buf[i]):
        i += 1
    if i >= n:
        return T_EOF, np.int64(0), i, i
    start = i
    c = buf[i]
    neg = False
    if c == 45 or c == 43:  # '-' or '+'
        neg = c == 45
        i += 1
    v = np.int64(0)
    digits = 0
    not_int = False
    overflow = False
    while i < n:
        c = buf[i]
        d = np.int64(c) - 48
        if d >= 0 and d <= 9:
            v = v * 10 + d  # may wrap past 18 digits: recomputed below
            digits += 1
        elif is_space(c):
            break
        else:
            not_int = True
        i += 1
    if digits > 18 and not not_int:
        v, overflow = _checked_value(buf, i - digits, i)
    if not_int or digits == 0:
        return T_NOT_INT, np.int64(0), start, i
    if overflow:
        return T_OVERFLOW, np.int64(0), start, i
    return T_INT, -v if neg else v, start, i


@njit(cache=True, inline="always")
def plain_int(buf, i):
    """A token of 1 to 18 plain digits at or after byte i: (ok, value, byte after it). Not ok
    for any other token or at EOF, which the checked reader then handles."""
    n = buf.shape[0]
    while i < n and is_space(buf[i]):
        i += 1
    start = i
    v = np.int64(0)
    while i < n:
        c = buf[i]
        if c < 48 or c > 57:
            break
        v = v * 10 + (np.int64(c) - 48)
        i += 1
    ok = not (i == start or i - start > 18 or (i < n and not is_space(buf[i])))
    return ok, v, i


@njit(cache=True, inline="always")
def plain_ints(buf, i, count, out, at, keep, top):
    """The fast path for heaps: read up to `count` plain tokens (see `plain_int`) from byte i,
    into out[at:] when `keep`. Returns (tokens read, byte after the last one, max(top, them))."""
    j = 0
    while j < count:
        ok, v, k = plain_int(buf, i)
        if not ok:
            break
        if keep:
            out[at + j] = v
        if v > top:
            top = v
        j += 1
        i = k
    return j, i, top
