"""The kernels and threads: whether they may run in two Python threads at once (read-ahead,
tables built while positions are read), numba's one-time set-up started in a thread, and
small inputs kept to the calling thread."""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Iterator

import numba
import numpy as np

from pipeline.kernels.text import needs_strip

log = logging.getLogger(__name__)


@functools.cache
def overlap_allowed() -> bool:
    """numba's tbb and omp threading layers run parallel kernels from several threads at
    once; its built-in workqueue layer (what numba falls back to where neither TBB nor an
    OpenMP runtime is installed, or NUMBA_THREADING_LAYER=workqueue) aborts the whole
    process when that happens, so callers then do one thing at a time. Asking for the
    thread count makes numba pick its layer (a few ms) without loading any kernel."""
    numba.get_num_threads()
    return numba.threading_layer() != "workqueue"


def start_numba_meanwhile() -> None:
    """numba sets itself up at a process's first kernel call (about 0.2 s of imports and
    registries) before it loads that kernel; started in a thread of its own at the start of
    a run, the set-up overlaps reading the rules and the first positions."""
    threading.Thread(target=_first_kernel_call, name="numba_start", daemon=True).start()


def _first_kernel_call() -> None:
    offsets = np.frombuffer(np.array([0, 1], np.int64).tobytes(), np.int64)
    try:  # typed as the text kernels' Arrow buffers are, so the real call reuses the load
        needs_strip(offsets, np.frombuffer(b"a", np.uint8))
    except Exception:  # the run's own first call then raises it, where it is reported
        log.debug("numba's start in a thread failed", exc_info=True)


PARALLEL_ROWS = 1 << 18  # inputs this large are worth a parallel region


@contextlib.contextmanager
def threads_for(rows: int) -> Iterator[None]:
    """Parallel kernels called within run on one thread when `rows` is small. A parallel
    region waits for all its workers, and on a busy machine (this run's reading threads
    included) one of them can be a scheduler slice away: a 5,000-row `nim_sums_wide` took
    11 ms on two threads against 0.12 ms on one, so 400 files of 5,000 rows lost 5 s.
    numba's thread count is per calling thread, so other threads keep theirs."""
    if rows >= PARALLEL_ROWS:
        yield
        return
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(before)
