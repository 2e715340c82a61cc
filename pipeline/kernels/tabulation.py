"""SG tables of subtraction games, tabulated until a window of max(S) values repeats: the
period proof (docs/ARCHITECTURE.md, "Periods and tables"). Windows are kept in an
open-addressing table of rolling hashes, each hit verified value by value."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

_U32 = np.uint64(0xFFFFFFFF)
_BASE = np.uint64(0x100000001B3)


@njit(cache=True, inline="always")
def mix64(h):
    """splitmix64 finaliser: spreads a polynomial window hash over all 64 bits."""
    h ^= h >> np.uint64(30)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(31)
    return h


@njit(cache=True)
def window_power(m):
    """_BASE ** (m - 1) modulo 2**64, the weight of a window's oldest value in its rolling hash,
    by repeated squaring: O(log m) for windows as long as 2**32 - 1 values."""
    result = np.uint64(1)
    factor = _BASE
    e = m - 1
    while e > 0:
        if e & 1:
            result *= factor
        factor *= factor
        e >>= 1
    return result


@njit(cache=True)
def _windows_equal(vals, a, b, m):
    for i in range(m):
        if vals[a - m + i] != vals[b - m + i]:
            return False
    return True


@njit(cache=True)
def _probe(slots, vals, y, m, mixed):
    """Find window W_y (ending before index y) in the open-addressing table.

    A slot packs (high 32 bits of the mixed hash) << 32 | window end. Returns the earlier end x
    with W_x == W_y (verified value by value), or the negated free slot index - 1.
    """
    mask = np.uint64(slots.shape[0] - 1)
    idx = mixed & mask
    tag = mixed >> np.uint64(32)
    while True:
        s = slots[idx]
        if s == 0:
            return -np.int64(idx) - 1
        if (s >> np.uint64(32)) == tag:
            x = np.int64(s & _U32)
            if _windows_equal(vals, x, y, m):
                return x
        idx = (idx + np.uint64(1)) & mask


@njit(cache=True)
def _rebuild(vals, m, y_end, n_slots, bpow):
    """Re-insert windows W_m .. W_{y_end - 1} into a fresh table of n_slots slots."""
    slots = np.zeros(n_slots, np.uint64)
    h = np.uint64(0)
    for i in range(m):
        h = h * _BASE + np.uint64(vals[i]) + np.uint64(1)
    for y in range(m, y_end):
        if y > m:
            h = (h - (np.uint64(vals[y - 1 - m]) + np.uint64(1)) * bpow) * _BASE
            h += np.uint64(vals[y - 1]) + np.uint64(1)
        mixed = mix64(h)
        r = _probe(slots, vals, y, m, mixed)
        slot = -(r + 1)
        slots[slot] = ((mixed >> np.uint64(32)) << np.uint64(32)) | np.uint64(y)
    return slots


@njit(cache=True, nogil=True)
def tabulate_subtraction(moves, vals, start, stop_len):
    """SG values of the subtraction game with sorted distinct positive `moves`.

    Fills vals[start:n], where vals[0:start] holds values already tabulated without a repeated
    window (a table being extended), and stops at `stop_len` values or as soon as a window of
    max(moves) values repeats, which proves exact periodicity (docs/ARCHITECTURE.md,
    "Periods"). Returns (n, preperiod, period); period is 0 when no repeat was seen within
    stop_len values. Window ends must stay below 2**32.
    """
    k = moves.shape[0]
    m = moves[k - 1]
    marks = np.zeros(k + 2, np.int64)
    bpow = window_power(m)
    h = np.uint64(0)
    for i in range(max(0, start - m), start):
        h = h * _BASE + np.uint64(vals[i]) + np.uint64(1)
    used = max(0, start - m + 1)
    n_slots = 1 << 12
    while used * 10 > n_slots * 7:
        n_slots *= 2
    slots = _rebuild(vals, m, start + 1, n_slots, bpow) if used else np.zeros(n_slots, np.uint64)
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
        vals[x] = g
        y = x + 1
        if y < m:
            h = h * _BASE + np.uint64(g) + np.uint64(1)
            continue
        if y == m:
            h = h * _BASE + np.uint64(g) + np.uint64(1)
        else:
            h = (h - (np.uint64(vals[x - m]) + np.uint64(1)) * bpow) * _BASE
            h += np.uint64(g) + np.uint64(1)
        mixed = mix64(h)
        r = _probe(slots, vals, y, m, mixed)
        if r >= 0:
            return y, r - m, y - r
        slots[-(r + 1)] = ((mixed >> np.uint64(32)) << np.uint64(32)) | np.uint64(y)
        used += 1
        if used * 10 > n_slots * 7:
            n_slots *= 2
            slots = _rebuild(vals, m, y + 1, n_slots, bpow)
    return stop_len, 0, 0


@njit(cache=True, parallel=True, nogil=True)
def tabulate_many(moves, moves_base, moves_len, vals, vals_base, start, stop_len, worker_start,
                  jobs):
    """`tabulate_subtraction` for many rules at once, one thread per worker: worker w takes the
    rules jobs[worker_start[w]:worker_start[w + 1]], so the caller decides the load balance.
    Rule j's moves are moves[moves_base[j]:][:moves_len[j]] and its values go to
    vals[vals_base[j]:][:stop_len[j]], whose first start[j] are given. Returns
    (n, preperiod, period) per rule."""
    r = moves_base.shape[0]
    n = np.zeros(r, np.int64)
    pre = np.zeros(r, np.int64)
    per = np.zeros(r, np.int64)
    for w in prange(worker_start.shape[0] - 1):
        for q in range(worker_start[w], worker_start[w + 1]):
            j = jobs[q]
            mv = moves[moves_base[j]:moves_base[j] + moves_len[j]]
            out = vals[vals_base[j]:vals_base[j] + stop_len[j]]
            n[j], pre[j], per[j] = tabulate_subtraction(mv, out, start[j], stop_len[j])
    return n, pre, per
