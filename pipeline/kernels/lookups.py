"""Grundy values looked up in the flat table layout, XORed per position, and winning moves.

Rule kinds are small integers here (KIND_*); every kernel that looks up a Grundy value takes
the flat table layout built by `grundy.TableSet`: one concatenated `values` array and, per
table, `base` (offset into values), `length` (values stored), `pre`/`per` (proven preperiod
and period, per == 0 when none), and `kind`.

The kernels are compiled at install time (`_lookups.pyx`); these pass them int64 arrays
(heaps of another integer dtype are converted; the table values may be of any integer
dtype). The lookups prefetch the table values of the rows (heaps) a few ahead: a lookup is a
random read in megabytes of tables, which waited on memory for most of the kernels' time
(`benchmarks/kernel_times.py lookups`).
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels import _lookups
from pipeline.kernels._lookups import half_sg

KIND_SUBTRACTION = 0
KIND_NIM = 1
KIND_HALF = 2

BEYOND_TABLE = -1

AHEAD_ROWS = 16  # positions whose table values are prefetched ahead of their lookups
AHEAD_HEAPS = 32  # the same for single heaps (long form)


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(a, np.int64)


def _table(values, base, length, pre, per, kind) -> tuple:
    return (np.ascontiguousarray(values), _i64(base), _i64(length), _i64(pre), _i64(per),
            _i64(kind))


def sg_of(h, t, values, base, length, pre, per, kind):
    """Grundy value of heap h under table t, or BEYOND_TABLE when it is not known."""
    return _lookups.sg_of(int(h), int(t), *_table(values, base, length, pre, per, kind))


def nim_sums_wide(offsets, heaps, table_of_row, values, base, length, pre, per, kind,
                  out=None):
    """XOR of Grundy values per position of a list column (Arrow offsets + flat heaps).

    Returns (nim_sum, bad_heap): bad_heap is -1 for an evaluated row, else the 0-based index of
    the first heap whose value lies beyond its table (no proven period). The table's parameters
    are hoisted out of the heap loop: a branchy per-heap lookup was much slower. Rows run on
    all threads. The values of row i + AHEAD_ROWS are prefetched. `out`: (nim_sum, bad_heap)
    int64 arrays (contiguous, one per row) to write them into, such as the slices of a
    batch's arrays, instead of new ones.
    """
    nim_out, bad_out = (None, None) if out is None else out
    return _lookups.nim_sums_wide(_i64(offsets), _i64(heaps), _i64(table_of_row),
                                  *_table(values, base, length, pre, per, kind),
                                  nim_out=nim_out, bad_out=bad_out)


def sg_per_heap(heaps, table_of_row, values, base, length, pre, per, kind):
    """Grundy value of each heap (long form); BEYOND_TABLE where it is not known. Heap
    i + AHEAD_HEAPS's value is prefetched, as in nim_sums_wide."""
    return _lookups.sg_per_heap(_i64(heaps), _i64(table_of_row),
                                *_table(values, base, length, pre, per, kind))


def winning_move(heaps, nim_sum, t, moves, moves_base, moves_len, values, base, length, pre,
                 per, kind):
    """One winning move (heap index, stones taken) for a position with nim_sum != 0.

    Chooses the first heap whose Grundy value g has g ^ nim_sum < g; returns (-1, -1) when no
    legal move reaches nim-sum 0 (which theory rules out for a correct table). For a
    subtraction table the move is the smallest s with SG(h - s) == the target.
    """
    return _lookups.winning_move(_i64(heaps), int(nim_sum), int(t), _i64(moves),
                                 _i64(moves_base), _i64(moves_len),
                                 *_table(values, base, length, pre, per, kind))


def winning_moves_wide(offsets, heaps, table_of_row, nim, moves, moves_base, moves_len, values,
                       base, length, pre, per, kind):
    """winning_move for every W row of a list column; (-1, -1) for L rows. Prefetches as
    nim_sums_wide does."""
    return _lookups.winning_moves_wide(_i64(offsets), _i64(heaps), _i64(table_of_row),
                                       _i64(nim), _i64(moves), _i64(moves_base),
                                       _i64(moves_len),
                                       *_table(values, base, length, pre, per, kind))


def max_heap_per_table(offsets, heaps, table_of_row, n_tables):
    """Largest heap each table is asked about (-1 where none), over rows with table >= 0."""
    return _lookups.max_heap_per_table(_i64(offsets), _i64(heaps), _i64(table_of_row),
                                       int(n_tables))


__all__ = ["AHEAD_HEAPS", "AHEAD_ROWS", "BEYOND_TABLE", "KIND_HALF", "KIND_NIM",
           "KIND_SUBTRACTION", "half_sg", "max_heap_per_table", "nim_sums_wide", "sg_of",
           "sg_per_heap", "winning_move", "winning_moves_wide"]
