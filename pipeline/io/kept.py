"""What one run reads of an input file more than once, read once and kept until the run ends:
each Parquet file's footer (row counts, heap statistics, columns, schema) and each small
object of a store whole (a CSV's header, emptiness check, row estimate, text checks and rows).
In an object store every read is a round trip of its own: 400 small files took 12 requests
a file. The files are taken not to change during the run; outside a run nothing is kept.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any

BYTES_KEPT = 64 << 20  # whole objects kept at once; past it, each file is read as before

_lock = threading.Lock()
_kept: dict[tuple[str, Hashable], tuple[Any, int]] | None = None
_bytes = 0


@contextmanager
def for_the_run() -> Iterator[None]:
    """Keep reads within it (nested: the outer run's keeping goes on)."""
    global _kept, _bytes
    if _kept is not None:
        yield
        return
    _kept, _bytes = {}, 0
    try:
        yield
    finally:
        with _lock:
            _kept, _bytes = None, 0


def active() -> bool:
    return _kept is not None


def get(kind: str, key: Hashable) -> Any | None:
    kept = _kept
    found = None if kept is None else kept.get((kind, key))
    return None if found is None else found[0]


def put(kind: str, key: Hashable, value: Any, size: int = 0) -> bool:
    """Keep `value` (of `size` bytes that count against BYTES_KEPT); whether it was kept."""
    global _bytes
    with _lock:
        if _kept is None or _bytes + size > BYTES_KEPT:
            return False
        old = _kept.get((kind, key))
        _bytes += size - (old[1] if old else 0)
        _kept[(kind, key)] = (value, size)
        return True


def drop(kind: str, key: Hashable) -> None:
    """Forget a kept value (its bytes no longer count) once its last reader has it."""
    global _bytes
    with _lock:
        if _kept is not None and (kind, key) in _kept:
            _bytes -= _kept.pop((kind, key))[1]
