"""What each input file holds, counted from the source itself rather than by the reader that
reads its rows, and the check that the run read every one of them.

A Parquet file's rows are its footer's count; a CSV file's are its records as a scan of its
bytes finds them (`csv_records`), less the header. The run checks these against the rows its
engine read before it commits (`reconcile`), so that whatever cuts a read short (a stop signal
that ends a library's scan, a reader's bug, a short read from a store) fails the run instead
of committing fewer rows than the inputs hold.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from pipeline.errors import ReconcileError, SnimError
from pipeline.io.read.csv_records import CsvRecords
from pipeline.io.read.files import InputFile
from pipeline.io.read.footers import parquet_footer
from pipeline.io.read.readers import _parquet_error
from pipeline.io.store import object_store
from pipeline.io.store.locations import Location
from pipeline.io.store.run_cache import RunCache

__all__ = ["counted_at_once", "reconcile", "rows_in_source"]

_PART = 1 << 22


def rows_in_source(file: InputFile, *, cache: RunCache | None = None) -> int | None:
    """The rows `file` holds, counted from the file itself (or from what the run's `cache`
    keeps of it); None for hdfs://, which only Spark's JVM reaches (Spark's own reader
    counts those)."""
    if isinstance(file.path, Location) and file.path.scheme == "hdfs":
        return None
    if file.format == "parquet":
        try:
            return parquet_footer(file.path, cache=cache).num_rows
        except (pa.ArrowException, OSError) as exc:
            raise _parquet_error(file.path, exc) from None
    if isinstance(file.path, Location):
        return _object_csv_rows(file.path, cache)
    return file.csv_rows


def counted_at_once(file: InputFile, *, cache: RunCache | None = None) -> bool:
    """Whether `rows_in_source(file)` costs no read of the file: an object in a store whose
    footer (Parquet) or whole bytes (a small CSV object) the run keeps in its `cache`.
    Others are counted by a pass of their own (a local file's, with its checksum), best run
    in the background."""
    if not isinstance(file.path, Location) or cache is None:
        return False
    return cache.get("footer" if file.format == "parquet" else "object", file.path) is not None


def _object_csv_rows(location: Location, cache: RunCache | None) -> int:
    """A CSV object's records: from its bytes as the run fetched them whole, else from a
    stream of its own (not the reader's)."""
    records = CsvRecords()
    whole = None if cache is None else cache.get("object", location)
    if whole is not None:
        records.feed(whole)
        return records.rows()
    with object_store.open_stream(location) as stream:
        while True:
            try:
                part = stream.read(_PART)
            except OSError as exc:
                raise object_store.store_error(location, exc) from None
            if not part:
                return records.rows()
            records.feed(part)


def reconcile(files: Sequence[InputFile], in_source: Sequence[int | None],
              read: Sequence[int], what: str) -> list[dict[str, int | None]]:
    """Each file's rows in the source against the rows the run read from it: one entry per
    file for the manifest (`rows_in_source`, `rows_read`). Raises ReconcileError for the
    first file whose counts differ (a file Spark reads from hdfs:// has no count of its
    own, None, and is not compared)."""
    if len(read) != len(files):
        raise SnimError(f"{what}: rows were counted for {len(read)} files, but "
                        f"{len(files)} were read")
    for file, source, got in zip(files, in_source, read):
        if source is not None and source != got:
            raise ReconcileError(
                f"{file.path}: the file holds {source:,} {what} rows but the run read "
                f"{got:,}", str(file.path), source, got, written=False,
                hint=" (a read was cut short: rerun)")
    return [{"rows_in_source": source, "rows_read": got}
            for source, got in zip(in_source, read)]
