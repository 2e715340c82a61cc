"""The kernels and threads: how many threads the parallel kernels use, small inputs kept to
the calling thread, and whether kernels may run in two Python threads at once.

The kernels are compiled ahead of time with OpenMP (`_threads.pyx`): there is no set-up at a
process's first kernel call, and parallel kernels may be called from several threads at
once (each calling thread has its own thread count)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from pipeline.kernels._threads import get_num_threads, set_num_threads


def _one_thread_after_fork() -> None:
    """In a child of fork(), the thread that forked keeps the parent's OpenMP state but not
    its worker threads: its next parallel region would wait for them forever (GNU OpenMP).
    Its kernels run on one thread instead; threads the child starts get workers of their
    own."""
    set_num_threads(1)


os.register_at_fork(after_in_child=_one_thread_after_fork)


def overlap_allowed() -> bool:
    """Whether kernels may run in two threads at once (read-ahead, tables built while
    positions are read): always, with OpenMP (each calling thread gets its own team)."""
    return True


PARALLEL_ROWS = 1 << 18  # inputs this large are worth a parallel region


@contextlib.contextmanager
def threads_for(rows: int) -> Iterator[None]:
    """Parallel kernels called within run on one thread when `rows` is small. A parallel
    region waits for all its workers, and on a busy machine (this run's reading threads
    included) one of them can be a scheduler slice away, far longer than a small call's
    work (docs/performance.md).
    The thread count is per calling thread, so other threads keep theirs."""
    if rows >= PARALLEL_ROWS:
        yield
        return
    before = get_num_threads()
    set_num_threads(1)
    try:
        yield
    finally:
        set_num_threads(before)
