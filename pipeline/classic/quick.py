"""`solve` in one compiled call, without numpy (`_classic.solve_quick`): an input that is
valid and whose tables one round of `grundy.TableBudget.build` builds within the limits (every
input of the classic problem's sizes) is parsed, tabulated and answered there, on all threads.
Any other input gets None, and `solving.solve_classic`'s general path answers it or words its
error, as it always has. The `snim-batch solve` entry point (`executable`) calls it before it
imports the CLI: typer's and numpy's imports would take about as long as such an input."""

from __future__ import annotations

import os

from pipeline.classic import _classic
from pipeline.limits import (
    DEFAULT_RULE_OPS,
    DEFAULT_RUN_OPS,
    DEFAULT_TABLE_LEN,
    MAX_HEAP,
    MAX_TABLE_LEN,
    PROOF_OPS,
)

_BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark, skipped as `reading` skips it


def solve_quick(data: bytes | bytearray | memoryview | str, cap: int = DEFAULT_TABLE_LEN,
                max_rule_ops: int = DEFAULT_RULE_OPS,
                max_run_ops: int = DEFAULT_RUN_OPS) -> bytes | None:
    """`solve_classic(data, cap, max_rule_ops, max_run_ops)` as bytes, or None where that
    must answer (see the module docstring)."""
    try:
        view = memoryview(data.encode() if isinstance(data, str) else data).cast("B")
    except (TypeError, ValueError):  # not bytes: `solve_classic` says what it is
        return None
    if view[:len(_BOM)] == _BOM:
        view = view[len(_BOM):]
    # all tables together: `solve_classic` bounds them by work only (MAX_HEAP values)
    return _classic.solve_quick(view, MAX_TABLE_LEN, cap, max_rule_ops, MAX_HEAP, max_run_ops,
                                PROOF_OPS, _threads())


def _threads() -> int:
    """The kernels' threads (OpenMP's count), less one for each core that other processes
    are running on now, at least one: a parallel region waits for its slowest thread, and
    where every core is taken a second thread waits for a scheduler slice (the figures are
    in benchmarks/results/issue36-start.md)."""
    cpus = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count() or 1)
    return max(1, min(_classic.max_threads(), cpus - _busy_cores()))


def _busy_cores() -> int:
    """Tasks running now besides this one (Linux: /proc/loadavg's runnable count); elsewhere
    the load average of the last minute, rounded down; 0 when neither is known."""
    try:
        with open("/proc/loadavg") as fh:
            return max(0, int(fh.read().split()[3].split("/")[0]) - 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.getloadavg()[0])
    except (AttributeError, OSError):
        return 0
