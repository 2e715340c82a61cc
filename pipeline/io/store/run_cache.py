"""What one run reads of an input file more than once, read once and kept until the run ends
(`RunCache`): each Parquet file's footer (row counts, heap statistics, columns, schema), each
object's size and etag, each file's format, and each small object of a store whole (a CSV's
header, emptiness check, row estimate, text checks and rows). In an object store every read
is a round trip of its own: 400 small files took 12 requests a file. The files are taken not
to change during the run.

`pipeline.run.run_job` makes one for the run and passes it to the readers (a `cache`
parameter, `PositionsJob.read_cache`), which hand it on to the threads they start; a reader
given none reads as it would the first time. Keeping only ever spares reads: every reader
works without it. Safe to share between threads; once closed (the run is over: a checksum
thread of a failed run may still be at work) it keeps nothing and finds nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

__all__ = ["RunCache"]


class RunCache:
    """One run's kept values, each of a kind ("footer", "object", "metadata", "format") and
    counted at the bytes it holds in memory, at most `budget` bytes at once; past that,
    reads are made as without a cache. Without `whole_objects`, no object is kept whole (an
    engine whose own tasks read the rows: `Engine.keeps_whole_objects`)."""

    budget = 64 << 20
    """Bytes kept at once (estimated in memory), unless the constructor is given another."""

    def __init__(self, budget: int | None = None, *, whole_objects: bool = True) -> None:
        if budget is not None:
            self.budget = budget
        self._lock = threading.Lock()
        self._values: dict[tuple[str, Hashable], tuple[Any, int]] = {}
        self._bytes = 0
        self._open = True
        self._refused = frozenset() if whole_objects else frozenset({"object"})

    def __enter__(self) -> RunCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Forget every value and keep none from now on (the run is over)."""
        with self._lock:
            self._open, self._values, self._bytes = False, {}, 0

    def has_room(self, kind: str, size: int) -> bool:
        """Whether a value of this kind and `size` bytes would be kept now."""
        with self._lock:
            return (self._open and kind not in self._refused
                    and self._bytes + size <= self.budget)

    def get(self, kind: str, key: Hashable) -> Any | None:
        with self._lock:
            found = self._values.get((kind, key))
        return None if found is None else found[0]

    def put(self, kind: str, key: Hashable, value: Any, size: int) -> bool:
        """Keep `value`, which holds about `size` bytes in memory; whether it was kept."""
        with self._lock:
            if not self._open or kind in self._refused or self._bytes + size > self.budget:
                return False
            old = self._values.get((kind, key))
            self._bytes += size - (old[1] if old else 0)
            self._values[(kind, key)] = (value, size)
            return True

    def drop(self, kind: str, key: Hashable | None = None) -> None:
        """Forget a kept value (its bytes no longer count) once its last reader has it;
        without `key`, every value of that kind."""
        with self._lock:
            keys = ([k for k in self._values if k[0] == kind] if key is None
                    else [(kind, key)])
            for found in keys:
                if found in self._values:
                    self._bytes -= self._values.pop(found)[1]
