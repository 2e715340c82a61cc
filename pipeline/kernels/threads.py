"""Whether the kernels may run in two Python threads at once (read-ahead, tables built while
positions are read)."""

from __future__ import annotations

import functools

import numba


@functools.cache
def overlap_allowed() -> bool:
    """numba's tbb and omp threading layers run parallel kernels from several threads at
    once; its built-in workqueue layer (what numba falls back to where neither TBB nor an
    OpenMP runtime is installed, or NUMBA_THREADING_LAYER=workqueue) aborts the whole
    process when that happens, so callers then do one thing at a time. Asking for the
    thread count makes numba pick its layer (a few ms) without loading any kernel."""
    numba.get_num_threads()
    return numba.threading_layer() != "workqueue"
