"""The first bytes of an input file and its size (`read_start`): what tells its format and
holds a CSV file's header."""

from __future__ import annotations

import os

from pipeline.errors import InputError
from pipeline.io.read.files import Source
from pipeline.io.store import object_store
from pipeline.io.store.locations import Location
from pipeline.io.store.run_cache import RunCache

SMALL_OBJECT = 1 << 22  # objects a run fetches whole at once (`_object_start`)


def read_start(path: Source, count: int, *, cache: RunCache | None = None
               ) -> tuple[bytes, int]:
    """The first `count` bytes of an input file, and its size."""
    if isinstance(path, Location):
        return _object_start(path, count, cache)
    try:
        with path.open("rb") as fh:
            return fh.read(count), os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})", path=path) from None


def _object_start(location: Location, count: int, cache: RunCache | None
                  ) -> tuple[bytes, int]:
    """`read_start` of an object in a store. With the run's `cache`, an object of at most
    SMALL_OBJECT bytes is fetched whole the first time, if the cache has room for it, and
    kept: its header, emptiness, row estimate, text checks and rows then cost two requests
    (a HEAD and a GET), not eleven."""
    if cache is None:
        return object_store.read_head(location, count)
    whole = cache.get("object", location)
    if whole is None:
        whole, size = object_store.read_head(
            location, count, lambda size: size <= SMALL_OBJECT and cache.has_room("object", size),
            cache=cache)
        if len(whole) < size or not cache.put("object", location, whole, size):
            return whole[:count], size
    return whole[:count], len(whole)
