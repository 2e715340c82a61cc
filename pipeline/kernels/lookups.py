"""Grundy values looked up in the flat table layout, XORed per position, and winning moves.

Rule kinds are small integers here (KIND_*); every kernel that looks up a Grundy value takes
the flat table layout built by `grundy.TableSet`: one concatenated `values` array and, per
table, `base` (offset into values), `length` (values stored), `pre`/`per` (proven preperiod
and period, per == 0 when none), and `kind`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from pipeline.kernels.prefetch import prefetch

KIND_SUBTRACTION = 0
KIND_NIM = 1
KIND_HALF = 2

BEYOND_TABLE = -1

AHEAD_ROWS = 16  # positions whose table values are prefetched ahead of their lookups
AHEAD_HEAPS = 32  # the same for single heaps (long form)


@njit(cache=True, inline="always")
def half_sg(h):
    """Take-at-most-half: drop the trailing one-bits of h, then halve."""
    while h & 1:
        h >>= 1
    return h >> 1


@njit(cache=True, inline="always")
def sg_of(h, t, values, base, length, pre, per, kind):
    """Grundy value of heap h under table t, or BEYOND_TABLE when it is not known."""
    kd = kind[t]
    if kd == KIND_NIM:
        return h
    if kd == KIND_HALF:
        return half_sg(h)
    if h < length[t]:
        return np.int64(values[base[t] + h])
    p = per[t]
    if p > 0:
        return np.int64(values[base[t] + pre[t] + (h - pre[t]) % p])
    return BEYOND_TABLE


@njit(cache=True, parallel=True, nogil=True)
def nim_sums_wide(offsets, heaps, table_of_row, values, base, length, pre, per, kind):
    """XOR of Grundy values per position of a list column (Arrow offsets + flat heaps).

    Returns (nim_sum, bad_heap): bad_heap is -1 for an evaluated row, else the 0-based index of
    the first heap whose value lies beyond its table (no proven period). The table's parameters
    are hoisted out of the heap loop: a branchy per-heap lookup was 5x slower. Rows run on
    all threads. The values of row i + AHEAD_ROWS are prefetched: a lookup is a random read in
    megabytes of tables, which waited on memory for most of the kernel's time.
    """
    n = offsets.shape[0] - 1
    nim = np.zeros(n, np.int64)
    bad = np.full(n, -1, np.int64)
    for i in prange(n):
        if i + AHEAD_ROWS < n:
            _prefetch_row(offsets, heaps, table_of_row[i + AHEAD_ROWS], i + AHEAD_ROWS,
                          values, base, length, kind)
        t = table_of_row[i]
        kd = kind[t]
        start = offsets[i]
        stop = offsets[i + 1]
        acc = np.int64(0)
        if kd == KIND_SUBTRACTION:
            b = base[t]
            n_vals = length[t]
            q = pre[t]
            p = per[t]
            for j in range(start, stop):
                h = heaps[j]
                if h < n_vals:
                    acc ^= np.int64(values[b + h])
                elif p > 0:
                    acc ^= np.int64(values[b + q + (h - q) % p])
                else:
                    bad[i] = j - start
                    acc = 0
                    break
        elif kd == KIND_NIM:
            for j in range(start, stop):
                acc ^= heaps[j]
        else:
            for j in range(start, stop):
                acc ^= half_sg(heaps[j])
        nim[i] = acc
    return nim, bad


@njit(cache=True, inline="always")
def _prefetch_value(h, t, values, base, length, kind):
    """Prefetch the table value that heap h looks up under table t, when it is stored."""
    if t >= 0 and kind[t] == KIND_SUBTRACTION and 0 <= h < length[t]:
        prefetch(values, base[t] + h)


@njit(cache=True, inline="always")
def _prefetch_row(offsets, heaps, t, i, values, base, length, kind):
    """Prefetch the table values that row i's heaps will look up."""
    for j in range(offsets[i], offsets[i + 1]):
        _prefetch_value(heaps[j], t, values, base, length, kind)


@njit(cache=True, nogil=True)
def sg_per_heap(heaps, table_of_row, values, base, length, pre, per, kind):
    """Grundy value of each heap (long form); BEYOND_TABLE where it is not known. Heap
    i + AHEAD_HEAPS's value is prefetched, as in nim_sums_wide."""
    n = heaps.shape[0]
    out = np.empty(n, np.int64)
    for i in range(n):
        if i + AHEAD_HEAPS < n:
            _prefetch_value(heaps[i + AHEAD_HEAPS], table_of_row[i + AHEAD_HEAPS], values,
                            base, length, kind)
        out[i] = sg_of(heaps[i], table_of_row[i], values, base, length, pre, per, kind)
    return out


@njit(cache=True)
def winning_move(heaps, nim_sum, t, moves, moves_base, moves_len, values, base, length, pre,
                 per, kind):
    """One winning move (heap index, stones taken) for a position with nim_sum != 0.

    Chooses the first heap whose Grundy value g has g ^ nim_sum < g; returns (-1, -1) when no
    legal move reaches nim-sum 0 (which theory rules out for a correct table).
    """
    for i in range(heaps.shape[0]):
        h = heaps[i]
        g = sg_of(h, t, values, base, length, pre, per, kind)
        target = g ^ nim_sum
        if target >= g:
            continue
        kd = kind[t]
        if kd == KIND_NIM:
            return i, h - target
        if kd == KIND_HALF:
            lo = h - h // 2
            for j in range(63):
                ones = (np.int64(1) << j) - 1
                if target > ((np.int64(1) << (62 - j)) - 1):
                    break
                y = (target << (j + 1)) | ones
                if y > h - 1:
                    break
                if y >= lo:
                    return i, h - y
            continue
        s = _subtraction_move(h, target, moves[moves_base[t]:moves_base[t] + moves_len[t]],
                              values, base[t], length[t], pre[t], per[t])
        if s > 0:
            return i, s
    return -1, -1


@njit(cache=True, inline="always")
def _subtraction_move(h, target, moves, values, b, n_vals, q, p):
    """The smallest move s with SG(h - s) == target (0 if none), with the table's parameters
    hoisted out of the loop as in nim_sums_wide (sg_of's kind and range checks per move made
    winning moves 5x slower than the XOR)."""
    for j in range(moves.shape[0]):
        s = moves[j]
        if s > h:
            break
        x = h - s
        if x < n_vals:
            g = np.int64(values[b + x])
        elif p > 0:
            g = np.int64(values[b + q + (x - q) % p])
        else:
            continue
        if g == target:
            return s
    return 0


@njit(cache=True, parallel=True, nogil=True)
def winning_moves_wide(offsets, heaps, table_of_row, nim, moves, moves_base, moves_len, values,
                       base, length, pre, per, kind):
    """winning_move for every W row of a list column; (-1, -1) for L rows. Prefetches as
    nim_sums_wide does."""
    n = offsets.shape[0] - 1
    move_heap = np.full(n, -1, np.int64)
    move_take = np.full(n, -1, np.int64)
    for i in prange(n):
        if i + AHEAD_ROWS < n and nim[i + AHEAD_ROWS] != 0:
            _prefetch_row(offsets, heaps, table_of_row[i + AHEAD_ROWS], i + AHEAD_ROWS,
                          values, base, length, kind)
        if nim[i] == 0:
            continue
        a, b = winning_move(heaps[offsets[i]:offsets[i + 1]], nim[i], table_of_row[i], moves,
                            moves_base, moves_len, values, base, length, pre, per, kind)
        move_heap[i] = a
        move_take[i] = b
    return move_heap, move_take


@njit(cache=True, nogil=True)
def max_heap_per_table(offsets, heaps, table_of_row, n_tables):
    """Largest heap each table is asked about (-1 where none), over rows with table >= 0."""
    out = np.full(n_tables, -1, np.int64)
    for i in range(offsets.shape[0] - 1):
        t = table_of_row[i]
        if t < 0:
            continue
        m = out[t]
        for j in range(offsets[i], offsets[i + 1]):
            if heaps[j] > m:
                m = heaps[j]
        out[t] = m
    return out
