"""Inputs rewritten while a run read them. An object store serves each request from the
object as it is at that moment, so a CSV object streamed in ranges, or a Parquet object whose
footer and pages are fetched apart, that is replaced meanwhile is read as a mix of two
versions, and the verdicts are those of neither. So, once every row is read, each input is
asked again: a change since the run first described it fails the run, before anything is
written."""

from __future__ import annotations

import os
from functools import partial

from pipeline.errors import InputError
from pipeline.io.read.files import InputFile, Source
from pipeline.io.read.formats import describe
from pipeline.io.read.readers import each_input
from pipeline.io.store import object_store
from pipeline.io.store.locations import Location
from pipeline.io.store.run_cache import RunCache


def describe_before_reading(paths: list[Source], *, cache: RunCache | None = None
                            ) -> list[InputFile]:
    """Each input as the run finds it before reading its rows (a local file's size and
    modification time; an object's etag, version and size as the run first asked for them,
    kept in its `cache`), for `ensure_unchanged` to compare with once the rows are read."""
    return list(each_input(partial(describe, cache=cache), paths))


def ensure_unchanged(files: list[InputFile]) -> None:
    """Raise InputError naming the first of `files` that changed since it was described (an
    object's etag, version or size; a local file's size or modification time), or is gone."""
    for file, change in zip(files, each_input(change_of, files)):
        if change is not None:
            raise InputError(f"{file.path}: changed while this run read it ({change})",
                             path=file.path, written=False,
                             hint=" (rerun once it is written whole)")


def change_of(file: InputFile) -> str | None:
    """How `file` differs now from when it was described, or None; a store that cannot say
    (refused, unreachable) raises its error: the run cannot tell whether the object changed."""
    if isinstance(file.path, Location):
        try:
            now = object_store.object_metadata(file.path)  # no cache: as it is now
        except InputError:  # no such object, or bucket; a store failure is raised as itself
            return "it is gone now"
        for key, then in (("etag", file.etag), ("version", file.version), ("size", file.size)):
            if then is not None and now[key] != then:
                return f"{key} {then} when first read, {now[key]} now"
        return None
    try:
        found = os.stat(file.path)
    except OSError as exc:
        return f"it cannot be found now ({exc.strerror})"
    now = (found.st_size, found.st_mtime_ns, found.st_dev, found.st_ino)
    if file.stamp is not None and now != file.stamp:
        if found.st_size != file.stamp[0]:
            return f"{file.stamp[0]} bytes when first read, {found.st_size} now"
        if now[2:] != file.stamp[2:]:
            return "another file was put in its place since it was first read"
        return "modified since it was first read"
    return None
