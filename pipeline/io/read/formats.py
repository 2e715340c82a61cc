"""What an input file holds (Parquet or CSV, whatever its name: `format_of`), and an input
file described for the run (`describe`: its format, size, and a store's etag and version)."""

from __future__ import annotations

import os
import re

import pyarrow as pa

from pipeline.errors import InputError, SnimError
from pipeline.io.read.files import CSV_SUFFIXES, PARQUET_SUFFIXES, InputFile, Source
from pipeline.io.read.footers import parquet_footer
from pipeline.io.read.starts import read_start
from pipeline.io.store import object_store
from pipeline.io.store.locations import Location
from pipeline.io.store.run_cache import RunCache


def format_of(path: Source, *, cache: RunCache | None = None) -> str:
    """'parquet' or 'csv': what the file holds, whatever its name (`sniffed`), kept in the
    run's `cache`. An object in a store is sniffed from reads the run makes anyway: a
    `.parquet`/`.pq` object whose footer reads is Parquet; another object's start (a small
    object is fetched whole, kept for the CSV reader). A file or object that cannot be read
    is what its name says, for its reader to say what is wrong."""
    found = None if cache is None else cache.get("format", path)
    if found is not None:
        return found
    named = "parquet" if path.suffix.lower() in PARQUET_SUFFIXES else "csv"
    try:
        if isinstance(path, Location):
            found = _object_format(path, named, cache)
        else:
            with path.open("rb") as fh:
                found = sniffed(fh.read(_SNIFFED), named)
    except (OSError, SnimError):
        return named
    if cache is not None:
        cache.put("format", path, found, 100)
    return found


def _object_format(location: Location, named: str, cache: RunCache | None) -> str:
    if location.scheme == "hdfs":  # read through Spark's JVM: its name decides, as Spark's
        if location.suffix.lower() in (*PARQUET_SUFFIXES, *CSV_SUFFIXES):
            return named
        head = object_store.read_head(location, 4, cache=cache)[0]
        return "parquet" if head == b"PAR1" else "csv"
    if named == "parquet":
        try:
            parquet_footer(location, cache=cache)  # kept: the run reads it next
            return "parquet"
        except (pa.ArrowException, OSError, ValueError):
            pass
    return sniffed(read_start(location, _SNIFFED, cache=cache)[0], named)


_SNIFFED = 4096  # the bytes of a file's start that tell Parquet from CSV


_COMPRESSED = [("gzip", rb"\x1f\x8b"), ("zstd", rb"\x28\xb5\x2f\xfd"),
               ("bzip2", rb"BZh[1-9]1AY&SY"), ("xz", rb"\xfd7zXZ\x00"), ("zip", rb"PK\x03\x04"),
               ("lz4", rb"\x04\x22\x4d\x18")]


def compression_of(head: bytes) -> str | None:
    """The compression a file that starts with `head` was compressed whole with, by its
    magic bytes (an export compressed whole, which no reader here takes; a name's suffix
    decides nothing: a file is what it holds), or None."""
    return next((kind for kind, magic in _COMPRESSED if re.match(magic, head)), None)


def sniffed(head: bytes, named: str) -> str:
    """The format of a file that starts with `head`: Parquet when it starts with Parquet's
    magic bytes `PAR1` (one cut short too: its reader names what is wrong), CSV when it
    starts as text (no NUL byte, UTF-8 but maybe for a character cut at the end); else, and
    for an empty file, the format its name says (`named`), whose reader then explains."""
    if head.startswith(b"PAR1"):
        return "parquet"
    if not head or b"\0" in head:
        return named
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:
            return named
    return "csv"


def describe(path: Source, *, cache: RunCache | None = None) -> InputFile:
    """The input file at `path` as the run records it (what it holds, its size; an object's
    etag and version), what the run's `cache` holds of it taken from there."""
    if isinstance(path, Location):
        fmt = format_of(path, cache=cache)  # its first request keeps the metadata: no second
        meta = object_store.object_metadata(path, cache=cache)
        return InputFile(path, fmt, meta["size"], meta["etag"], meta["version"])
    try:
        with path.open("rb") as handle:  # unreadable files fail here, with a plain message
            found = os.fstat(handle.fileno())
        return InputFile(path, format_of(path, cache=cache), found.st_size,
                         stamp=(found.st_size, found.st_mtime_ns, found.st_dev,
                                found.st_ino))
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})", path=path) from None
