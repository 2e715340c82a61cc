"""SG tables of subtraction games, tabulated until a window of max(S) values repeats: the
period proof (docs/ARCHITECTURE.md, "Periods and tables"). Windows are kept in an
open-addressing table of rolling hashes, each hit verified value by value.

The kernels are compiled at install time (`_tabulation.pyx`); these take any integer arrays
and pass the compiled code int64 ones (the values array is filled in place, of any integer
dtype)."""

from __future__ import annotations

import numpy as np

from pipeline.kernels import _tabulation
from pipeline.kernels._tabulation import mix64, window_power


def _i64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.int64)


def tabulate_subtraction(moves, vals, start, stop_len):
    """SG values of the subtraction game with sorted distinct positive `moves`.

    Fills vals[start:n], where vals[0:start] holds values already tabulated without a repeated
    window (a table being extended), and stops at `stop_len` values or as soon as a window of
    max(moves) values repeats, which proves exact periodicity (docs/ARCHITECTURE.md,
    "Periods"). Returns (n, preperiod, period); period is 0 when no repeat was seen within
    stop_len values. Window ends must stay below 2**32.
    """
    return _tabulation.tabulate_subtraction(_i64(moves), vals, int(start), int(stop_len))


def tabulate_many(moves, moves_base, moves_len, vals, vals_base, start, stop_len, worker_start,
                  jobs):
    """`tabulate_subtraction` for many rules at once, one thread per worker: worker w takes the
    rules jobs[worker_start[w]:worker_start[w + 1]], so the caller decides the load balance.
    Rule j's moves are moves[moves_base[j]:][:moves_len[j]] and its values go to
    vals[vals_base[j]:][:stop_len[j]], whose first start[j] are given. Returns
    (n, preperiod, period) per rule."""
    return _tabulation.tabulate_many(
        _i64(moves), _i64(moves_base), _i64(moves_len), vals, _i64(vals_base), _i64(start),
        _i64(stop_len), _i64(worker_start), _i64(jobs))


__all__ = ["mix64", "tabulate_many", "tabulate_subtraction", "window_power"]
