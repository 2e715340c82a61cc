"""Whether the kernels may run in two Python threads at once (read-ahead, tables built while
positions are read)."""

from __future__ import annotations

import functools

import numba
import numpy as np

from pipeline.kernels.sorting import scatter


@functools.cache
def overlap_allowed() -> bool:
    """numba's tbb and omp threading layers run parallel kernels from several threads at
    once; its built-in workqueue layer (what numba falls back to where neither TBB nor an
    OpenMP runtime is installed, or NUMBA_THREADING_LAYER=workqueue) aborts the whole
    process when that happens, so callers then do one thing at a time."""
    scatter(np.zeros(1, np.int64), np.zeros(1, np.int64))  # numba picks its layer here
    return numba.threading_layer() != "workqueue"
