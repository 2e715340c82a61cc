"""What one run reads of an input file more than once, read once and kept until the run ends:
each Parquet file's footer (row counts, heap statistics, columns, schema), each object's size
and etag, and each small object of a store whole (a CSV's header, emptiness check, row
estimate, text checks and rows). In an object store every read is a round trip of its own:
400 small files took 12 requests a file. The files are taken not to change during the run.

A run's store belongs to the thread that entered `for_the_run` and to the threads it starts
through `carried`; any other thread (another run, a library caller) keeps nothing of it, and
a thread that outlives its run (a checksum of a failed run) finds its store closed. (Where
new threads inherit their starter's context, as free-threaded Python 3.14's do, threads not
carried share it too.) Keeping only ever spares reads: every reader works without it.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

BYTES_KEPT = 64 << 20  # a run's kept values at once (estimated in memory); past it, reads as before

T = TypeVar("T")


class _Store:
    """One run's kept values, each with the bytes it counts."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: dict[tuple[str, Hashable], tuple[Any, int]] = {}
        self.bytes = 0
        self.open = True
        self.refused: set[str] = set()


_store: contextvars.ContextVar[_Store | None] = contextvars.ContextVar("kept", default=None)


@contextmanager
def for_the_run() -> Iterator[None]:
    """Keep reads within it (nested: the outer run's store goes on)."""
    outer = _store.get()
    if outer is not None and outer.open:
        yield
        return
    store = _Store()
    token = _store.set(store)
    try:
        yield
    finally:
        with store.lock:
            store.open, store.values, store.bytes = False, {}, 0
        _store.reset(token)


def carried(work: Callable[..., T]) -> Callable[..., T]:
    """`work`, to be run by another thread, with this thread's store."""
    store = _store.get()
    if store is None:
        return work

    def run(*args: Any, **kwargs: Any) -> T:
        token = _store.set(store)
        try:
            return work(*args, **kwargs)
        finally:
            _store.reset(token)

    return run


def has_room(kind: str, size: int) -> bool:
    """Whether a value of this kind and `size` bytes would be kept now."""
    store = _store.get()
    return (store is not None and store.open and kind not in store.refused
            and store.bytes + size <= BYTES_KEPT)


def get(kind: str, key: Hashable) -> Any | None:
    store = _store.get()
    found = None if store is None else store.values.get((kind, key))
    return None if found is None else found[0]


def put(kind: str, key: Hashable, value: Any, size: int) -> bool:
    """Keep `value`, which holds about `size` bytes in memory; whether it was kept."""
    store = _store.get()
    if store is None:
        return False
    with store.lock:
        if not store.open or kind in store.refused or store.bytes + size > BYTES_KEPT:
            return False
        old = store.values.get((kind, key))
        store.bytes += size - (old[1] if old else 0)
        store.values[(kind, key)] = (value, size)
        return True


def refuse(kind: str) -> None:
    """Keep no value of this kind for the rest of the run (and forget those kept)."""
    store = _store.get()
    if store is not None:
        with store.lock:
            store.refused.add(kind)
        drop(kind)


def drop(kind: str, key: Hashable | None = None) -> None:
    """Forget a kept value (its bytes no longer count) once its last reader has it; without
    `key`, every value of that kind."""
    store = _store.get()
    if store is None:
        return
    with store.lock:
        keys = [k for k in store.values if k[0] == kind] if key is None else [(kind, key)]
        for found in keys:
            if found in store.values:
                store.bytes -= store.values.pop(found)[1]
