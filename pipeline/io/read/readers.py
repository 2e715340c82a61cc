"""Reading input files: Parquet through polars, CSV through `csv_reader`, in batches or
whole; what the footers say without reading rows."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import NamedTuple, TypeVar

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.errors import InputError, SnimError, brief_repr, first_line, truncated
from pipeline.io.inputs.discovery import resolve_inputs
from pipeline.io.read.csv_reader import csv_batches, csv_row_estimate, read_header
from pipeline.io.read.files import InputFile, RawTable, Source
from pipeline.io.read.footers import parquet_footer, parquet_source
from pipeline.io.read.formats import compression_of, describe, format_of
from pipeline.io.read.starts import read_start
from pipeline.io.store import object_store
from pipeline.io.store.locations import Location
from pipeline.io.store.run_cache import RunCache


def _parquet_error(path: Source, exc: BaseException, rows_read: int = 0) -> SnimError:
    """The error for a Parquet file that could not be read; `rows_read`: the rows read whole
    before the failure, which the message names when there were any (a corrupt page in a
    later row group: the rows before it are fine)."""
    if isinstance(path, Location):
        problem = object_store.store_problem(path, exc)
        if problem is not None:
            return problem
    if isinstance(exc, PermissionError):
        return InputError(f"{path}: cannot read ({os.strerror(exc.errno or 13)})", path=path)
    if not rows_read:
        compressed = _compressed_whole(path)
        if compressed is not None:
            return InputError(f"{path}: a {compressed}-compressed file, not Parquet: inputs "
                              "are read uncompressed (Parquet with its own compressed pages); "
                              "decompress it first", path=path)
    where = f" from row {rows_read} on" if rows_read else ""
    detail = ("its pages do not decode as its footer describes them: the file is damaged, "
              "or written in a way the Parquet reader cannot take"
              if type(exc).__name__ == "PanicException" else first_line(exc))
    return InputError(f"{path}: not a readable Parquet file{where} ({detail})",
                      path=path, row=rows_read or None)


def _compressed_whole(path: Source) -> str | None:
    """The compression a file that fails as Parquet was compressed whole with (`p.parquet`
    holding a gzip stream), None if none or its start cannot be read."""
    try:
        return compression_of(read_start(path, 8)[0])
    except (OSError, SnimError):
        return None


def _has_view(kind: pa.DataType) -> bool:
    """Whether an Arrow type is or holds a list view (list_view, large_list_view), which
    polars' Parquet reader cannot take: it panics on the file's Arrow schema, whatever the
    column (a panic prints a backtrace before it is caught)."""
    if pa.types.is_list_view(kind) or pa.types.is_large_list_view(kind):
        return True
    if pa.types.is_dictionary(kind):
        return _has_view(kind.value_type)
    return any(_has_view(kind.field(i).type) for i in range(kind.num_fields))


def _views(schema: pa.Schema, path: Source) -> list[str]:
    """The columns of `schema` that are list views, read as lists (`_arrow_batches`); a list
    view inside another type is an InputError naming the column."""
    views = []
    for field in schema:
        if not _has_view(field.type):
            continue
        kind = field.type
        if not ((pa.types.is_list_view(kind) or pa.types.is_large_list_view(kind))
                and not _has_view(kind.value_type)):
            raise InputError(f"{path}: column {brief_repr(field.name)} has the Arrow type "
                             f"{truncated(str(field.type), 80)}, a list view inside another type, "
                             "which cannot be read; write it with list types", path=path)
        views.append(field.name)
    return views


def as_read(schema: pa.Schema, path: Source) -> pa.Schema:
    """A Parquet file's Arrow schema as its rows are read: list views as large lists
    (`_views`: the InputError for one that cannot be read)."""
    views = _views(schema, path)
    return pa.schema([pa.field(f.name, pa.large_list(f.type.value_field))
                      if f.name in views else f for f in schema]) if views else schema


def _as_list(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A list view column as the large list of the same values (pyarrow's own cast gets
    null entries wrong)."""
    import pyarrow.compute as pc  # only here: else every run's start pays its import

    chunks = []
    for view in column.chunks:
        sizes = pc.fill_null(pc.list_value_length(view), 0).to_numpy(zero_copy_only=False)
        offsets = np.zeros(len(view) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        chunks.append(pa.LargeListArray.from_arrays(
            pa.array(offsets), view.flatten(), mask=view.is_null() if view.null_count else None))
    return pa.chunked_array(chunks, pa.large_list(column.type.value_field))


def _arrow_batches(path: Source, views: list[str], start: int, count: int | None,
                   batch_rows: int, cache: RunCache | None = None) -> Iterator[pl.DataFrame]:
    """Rows start .. start + count (None: to the end) of a Parquet file with list view
    columns (`_views`), read by pyarrow, those columns as lists, in frames of at most
    `batch_rows` rows: what polars' reader gives for other files."""
    source = parquet_source(path, cache=cache)
    try:
        with pq.ParquetFile(source) as file:
            groups, first = [], 0
            for g in range(file.metadata.num_row_groups):
                rows = file.metadata.row_group(g).num_rows
                if first + rows > start and (count is None or first < start + count):
                    groups.append(g)
                first += rows
            skip = start - sum(file.metadata.row_group(g).num_rows
                               for g in range(groups[0] if groups else 0))
            left = count
            for batch in file.iter_batches(batch_size=min(batch_rows, 1 << 20),
                                           row_groups=groups):
                table = pa.Table.from_batches([batch])
                if skip:
                    table, skip = table.slice(skip), max(0, skip - table.num_rows)
                if left is not None:
                    table = table.slice(0, left)
                    left -= table.num_rows
                for name in views:
                    table = table.set_column(table.schema.get_field_index(name), name,
                                             _as_list(table.column(name)))
                if table.num_rows:
                    frame = pl.from_arrow(table)
                    assert isinstance(frame, pl.DataFrame)
                    yield frame
                if left == 0:
                    return
    finally:
        if not isinstance(source, Path):
            source.close()


def _parquet_batches(file: InputFile, batch_rows: int, cache: RunCache | None
                     ) -> Iterator[RawTable]:
    """A local file of row groups of at most a batch in slices of whole groups (`_slices`),
    any other through polars' streaming reader (faster than pyarrow's iter_batches here),
    after pyarrow has checked the footer so that a file that is not Parquet gets a plain
    message; a file with list view columns, which polars cannot read, through pyarrow
    (`_arrow_batches`)."""
    try:
        footer = parquet_footer(file.path, cache=cache)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _parquet_error(file.path, exc) from None
    views = _views(footer.schema, file.path)
    schema = as_read(footer.schema, file.path)
    start = 0
    try:
        for frame in (_arrow_batches(file.path, views, 0, None, batch_rows, cache) if views else
                      _slices(file.path, slice_bounds(footer.row_groups, batch_rows))
                      if isinstance(file.path, Path)
                      and max(footer.row_groups, default=0) <= batch_rows else
                      _scan(file.path).collect_batches(chunk_size=batch_rows)):
            rows = np.arange(start, start + frame.height, dtype=np.int64)
            start += frame.height
            yield RawTable(file, frame, rows, [])
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as exc:  # corrupt pages can surface as a pyo3 PanicException
        raise _parquet_error(file.path, exc, start) from None
    if start == 0:
        empty = pl.from_arrow(pa.Table.from_batches([], schema))  # empty_table imports pandas
        assert isinstance(empty, pl.DataFrame)
        yield RawTable(file, empty, np.zeros(0, np.int64), [])


SLICES_AHEAD = 2
"""Slices of a local Parquet file decoded at once (`_slices`): polars decodes one slice's list
column on one core, so two at a time keep both of a small machine's cores reading."""


class Slice(NamedTuple):
    """Rows `start` .. `start + rows` of a Parquet file: its row groups `groups`, whole."""

    start: int
    rows: int
    groups: range


def slice_bounds(row_groups: Sequence[int], batch_rows: int) -> list[Slice]:
    """The slices `_slices` reads: whole consecutive row groups, as many as fit in
    `batch_rows` (a group larger than that on its own). A slice that ends inside a row group
    makes polars decode that group's pages for the rows of the next slice too: with
    1,000,000-row groups, slices of 2^20 rows decoded every group twice, in part."""
    slices: list[Slice] = []
    start = rows = first = 0
    for group, size in enumerate(row_groups):
        if rows and rows + size > batch_rows:
            slices.append(Slice(start, rows, range(first, group)))
            start, rows, first = start + rows, 0, group
        rows += size
    if rows:
        slices.append(Slice(start, rows, range(first, len(row_groups))))
    return slices


def _slices(path: Path, slices: list[Slice]) -> Iterator[pl.DataFrame]:
    """A local file's rows slice by slice (`slice_bounds`), each slice read on its own by
    polars, `SLICES_AHEAD` of them decoded at once and handed over in order: a
    bounded read-ahead. `collect_batches` streams, but its engine decoded as fast as it
    could, far ahead of a consumer that evaluates each batch, and all that memory was fresh
    pages (benchmarks/results). For files whose row groups are at most a batch: a slice of a
    larger group decodes more of it than it keeps."""
    scan = _scan(path)
    if not slices:  # no rows: the file's columns, empty
        yield scan.collect()
        return
    if len(slices) == 1:  # a rules table, a small file: no thread to start
        yield _read_slice(scan, slices[0])
        return
    pieces = iter(slices)
    pool = ThreadPoolExecutor(max_workers=SLICES_AHEAD, thread_name_prefix="slices")
    try:
        pending = [pool.submit(_read_slice, scan, piece)
                   for piece in itertools.islice(pieces, SLICES_AHEAD)]
        while pending:
            frame = pending.pop(0).result()
            pending += [pool.submit(_read_slice, scan, piece)
                        for piece in itertools.islice(pieces, 1)]
            yield frame
    finally:  # left early or failed: the slices decoding are waited for, no more started
        pool.shutdown(wait=True, cancel_futures=True)


def _read_slice(scan: pl.LazyFrame, piece: Slice) -> pl.DataFrame:
    return scan.slice(piece.start, piece.rows).collect()


def _scan(path: Source) -> pl.LazyFrame:
    if isinstance(path, Location):
        return pl.scan_parquet(object_store.client_url(path), glob=False,
                               storage_options=object_store.polars_options(path))
    return pl.scan_parquet(path, glob=False)


def parquet_range(path: Source, start: int, count: int, batch_rows: int = 1 << 20
                  ) -> Iterator[pl.DataFrame]:
    """Rows start .. start + count of a Parquet file, in batches of at most `batch_rows`, read
    by the same reader as `iter_batches` (which reads only the row groups the range touches),
    with the same InputError for a file it cannot read."""
    try:
        views = _views(parquet_footer(path).schema, path)
        if views:
            yield from _arrow_batches(path, views, start, count, batch_rows)
            return
        yield from _scan(path).slice(start, count).collect_batches(chunk_size=batch_rows)
    except (KeyboardInterrupt, SystemExit, GeneratorExit, SnimError):
        raise
    except BaseException as exc:  # corrupt pages can surface as a pyo3 PanicException
        raise _parquet_error(path, exc) from None


def heap_upper_bound(paths: list[Source], column: str, *, cache: RunCache | None = None
                     ) -> int | None:
    """Largest value of a Parquet list column's leaves over all files, from the row-group
    statistics alone (no data read); None when any file is CSV or lacks the statistics."""
    bound = -1
    for path in paths:
        if format_of(path, cache=cache) != "parquet":
            return None
        try:
            largest = parquet_footer(path, cache=cache).largest.get(column)
        except (pa.ArrowException, OSError, SnimError):
            return None
        if largest is None:
            return None
        bound = max(bound, largest)
    return bound


def row_estimate(paths: list[Source], *, cache: RunCache | None = None) -> int:
    """Rows in the input files: exact for Parquet (from the footers); for CSV, the records of
    its first 4 MiB scaled to its size (it only sizes the long-form parts; ids grow longer
    down a file, so this tends to count high, which keeps parts small)."""
    rows = 0
    for path in paths:
        if format_of(path, cache=cache) != "parquet":
            rows += csv_row_estimate(path, cache=cache)
            continue
        try:
            rows += parquet_footer(path, cache=cache).num_rows
        except (pa.ArrowException, OSError) as exc:
            raise _parquet_error(path, exc) from None
    return rows


def iter_batches(path: Source, batch_rows: int = 1 << 20, *, cache: RunCache | None = None
                 ) -> Iterator[RawTable]:
    """One file in batches of at most `batch_rows` rows (CSV: exactly that many but the last),
    so memory holds one batch, not the file."""
    file = describe(path, cache=cache)
    if file.format == "parquet":
        yield from _parquet_batches(file, batch_rows, cache)
        return
    yield from csv_batches(file, batch_rows, cache=cache)


def small_parquet_footer(path: Source, most_rows: int, *, cache: RunCache | None = None
                         ) -> tuple[pa.Schema, int] | None:
    """(Arrow schema, rows) of a Parquet file of fewer than `most_rows` rows, from its
    footer alone, for `read_parquet_group`; None for any other file, or one whose footer
    cannot be read (its own read then names what is wrong)."""
    if format_of(path, cache=cache) != "parquet":
        return None
    try:
        footer = parquet_footer(path, cache=cache)
    except (pa.ArrowException, OSError, SnimError):
        return None
    rows = footer.num_rows
    if any(_has_view(field.type) for field in footer.schema):
        return None  # read on its own, by pyarrow (`_parquet_batches`)
    return (footer.schema, rows) if rows < most_rows else None


def read_parquet_group(paths: list[Source]) -> pl.DataFrame | None:
    """Several Parquet files of one schema, all local or all in one store, read by one scan
    (which fetches objects several at a time), rows in file order; None when that fails (the
    files are then read one by one, each for its own error)."""
    first = paths[0]
    try:
        if isinstance(first, Location):
            return pl.scan_parquet([object_store.client_url(p) for p in paths], glob=False,
                                   storage_options=object_store.polars_options(first)
                                   ).collect()
        return pl.scan_parquet(paths, glob=False).collect()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # noqa: BLE001 - a corrupt page can be a pyo3 PanicException
        return None


def columns_of(path: Source, *, cache: RunCache | None = None) -> list[str]:
    """Column names of an input file without reading its rows."""
    if format_of(path, cache=cache) == "parquet":
        try:
            return parquet_footer(path, cache=cache).schema.names
        except (pa.ArrowException, OSError) as exc:
            raise _parquet_error(path, exc) from None
    return read_header(path, cache=cache)[0]


FETCHES_AT_ONCE = 16  # objects of a store asked for their columns at once
T = TypeVar("T")
R = TypeVar("R")


def columns_of_each(paths: list[Source], *, cache: RunCache | None = None
                    ) -> Iterator[list[str]]:
    """`columns_of` of every file, in order, each error raised in its turn (`each_input`).
    What they fetch is kept in the run's `cache` for the reads that follow."""
    return each_input(partial(columns_of, cache=cache), paths)


def each_input(work: Callable[[T], R], inputs: list[T]) -> Iterator[R]:
    """`work` of every input (a Source, or anything with a Source `path`), in order. Objects
    in a store (not hdfs://, reached through Spark's JVM) are asked FETCHES_AT_ONCE at a
    time: one by one, each request is a round trip, tens of milliseconds to a cloud store.
    `work` gets whatever it needs (the run's cache) bound to it: the threads keep no state."""
    paths = [getattr(item, "path", item) for item in inputs]
    if sum(isinstance(p, Location) and p.scheme != "hdfs" for p in paths) < 2:
        yield from map(work, inputs)
        return
    pool = ThreadPoolExecutor(FETCHES_AT_ONCE, thread_name_prefix="inputs")
    try:
        yield from pool.map(work, inputs)
    finally:
        pool.shutdown(cancel_futures=True)


def read_table(path: Source, *, cache: RunCache | None = None) -> RawTable:
    """Read one input file whole; whole-file problems raise InputError naming the file."""
    batches = list(iter_batches(path, batch_rows=1 << 62, cache=cache))
    if len(batches) == 1:
        return batches[0]
    frame = pl.concat([b.frame for b in batches])
    return RawTable(batches[0].file, frame, np.concatenate([b.row for b in batches]),
                    [line for b in batches for line in b.bad_lines])


def read_tables(spec: str, what: str, exclude: Path | str | None = None,
                options: dict[str, str] | None = None, *, cache: RunCache | None = None,
                on_warning: Callable[[str], None] | None = None) -> list[RawTable]:
    """Every file of `spec` read whole, each checksummed as it is read (`exclude`, `options`
    and `on_warning`: as in `resolve_inputs`; `cache`: the run's). Not from hdfs://, which
    only Spark reads."""
    location = Location.parse(spec, Path.cwd())
    if location.scheme == "hdfs":
        raise object_store.hdfs_refused(location)
    tables = [read_table(p, cache=cache)
              for p in resolve_inputs(spec, what, exclude, options, on_warning)]
    for table in tables:
        table.file.sha256  # noqa: B018 - computes and caches it
    return tables
