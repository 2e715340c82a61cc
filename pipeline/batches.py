"""Reading the job's inputs for any engine: rules files into one validated table, positions
files into normalised batches with reasons, in file order with exact row numbers."""

from __future__ import annotations

import csv
import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

import numpy as np
import polars as pl

from pipeline import kernels, keys
from pipeline.config import Config
from pipeline.errors import InputError
from pipeline.io.inputs import InputFile, RawTable, Source
from pipeline.io.readers import (
    columns_of,
    iter_batches,
    read_parquet_group,
    read_tables,
    small_parquet_groups,
)
from pipeline.transforms import normalize, schema

BATCH_ROWS = 1 << 20
T = TypeVar("T")
_END = object()


def read_rules(config: Config) -> tuple[pl.DataFrame, list[InputFile]]:
    """All rules files, normalised and validated (reasons on bad rows)."""
    frames, files = [], []
    for raw in read_tables(config.rules, "rules", config.out, config.storage_options):
        source = str(raw.file.path)
        frame = normalize.normalize_rules(raw.frame, raw.row, source, config.columns)
        frames.append(_with_bad_lines(frame, raw, {"rule_set_id": config.columns.rule_set_id}))
        files.append(raw.file)
    frames = keys.unify_key_types(frames, "rule_set_id")
    rules = pl.concat(frames, how="vertical_relaxed")
    return normalize.reject_duplicate_rules(rules), files


def _with_bad_lines(frame: pl.DataFrame, raw: RawTable, key_columns: dict[str, str]
                    ) -> pl.DataFrame:
    """Add the CSV lines the reader skipped (wrong field count) as rejected rows, with their
    key columns as given (`key_columns` maps output name -> input column) so that their rule set or
    position is accounted for too."""
    if not raw.bad_lines:
        return frame
    header = raw.frame.columns
    fields = [next(csv.reader([text]), []) for _, _, text in raw.bad_lines]

    def field(values: list[str], column: str) -> str | None:
        at = header.index(column) if column in header else -1
        value = values[at].strip() if 0 <= at < len(values) else ""
        return value or None

    bad = pl.DataFrame({
        "_source": [str(raw.file.path)] * len(raw.bad_lines),
        "_row": [r for r, _, _ in raw.bad_lines],
        "_reason": [why for _, why, _ in raw.bad_lines],
        **{name: [field(v, column) for v in fields] for name, column in key_columns.items()},
    }, schema={"_source": pl.String, "_row": pl.Int64, "_reason": pl.String,
               **{name: pl.String for name in key_columns}})
    if any(frame[name].dtype != pl.String for name in key_columns if name in frame.columns):
        frame = frame.with_columns(pl.col(name).cast(pl.String) for name in key_columns
                                   if name in frame.columns)
    return pl.concat([frame, bad], how="diagonal_relaxed").sort("_row")


def positions_form(paths: list[Source], config: Config) -> str:
    """The positions form, which every file must share."""
    forms = {p: schema.detect_form(columns_of(p), config.columns, str(p)) for p in paths}
    first = forms[paths[0]]
    for path, form in forms.items():
        if form != first:
            raise InputError(f"{path}: is in {form} form but {paths[0]} is in {first} form; "
                             "use one form per run")
    return first


def position_batches(paths: list[Source], config: Config, form: str,
                     read_together: bool = False) -> Iterator[tuple[int, pl.DataFrame]]:
    """(file index, normalised batch with reasons) for every batch of every positions file.
    With `read_together`, small files are normalised together as one batch, each row's file
    index in an Int32 `_file` column (a file costs some milliseconds to open, read and
    normalise on its own): runs of small local Parquet files of one schema are read by one
    scan, and other small files (CSV, object stores) of the same columns, read one by one,
    are joined before they are normalised."""
    file_start = 0  # rows of the earlier files, which number default position ids on
    key_columns = {"rule_set_id": config.columns.rule_set_id,
                   "position_id": config.columns.position_id}
    runs, rows_of = (small_parquet_groups(paths, _small_rows(), BATCH_ROWS) if read_together
                     else ([[i] for i in range(len(paths))], {}))
    held: list[tuple[int, RawTable]] = []  # small files' rows, to be normalised together

    def release() -> Iterator[tuple[int, pl.DataFrame]]:
        nonlocal file_start
        files = [index for index, _ in held]
        together = _normalised_together([paths[i] for i in files],
                                        [raw.frame for _, raw in held], config, form,
                                        file_start) if len(held) > 1 else None
        if together is not None:
            yield files[0], together.with_columns(pl.col("_file") + files[0])
            file_start += together.height
        else:
            for index, raw in held:
                yield index, _normalised(raw, paths[index], config, form, file_start,
                                         key_columns)
                file_start += raw.frame.height
        held.clear()

    for run in runs:
        if len(run) > 1:
            yield from release()  # their rows number the default ids before this run's
            together = _read_together([paths[i] for i in run], [rows_of[i] for i in run],
                                      config, form, file_start)
            if together is not None:
                frame, rows = together
                yield run[0], frame.with_columns(pl.col("_file") + run[0])
                file_start += rows
                continue
        for index in run:
            rows_here = 0  # default ids number on from the file's start in all its batches
            batches = _file_batches(paths[index], read_together)
            while True:
                try:
                    item = next(batches, None)
                except InputError:  # the held files come first, with any error of their own
                    yield from release()
                    raise
                if item is None:
                    break
                raw, whole_file = item
                joinable = whole_file and _small_and_clean(raw)
                if held and (not joinable or raw.frame.schema != held[0][1].frame.schema
                             or sum(r.frame.height for _, r in held) + raw.frame.height
                             > BATCH_ROWS):
                    yield from release()
                if joinable:
                    held.append((index, raw))
                    continue
                yield index, _normalised(raw, paths[index], config, form, file_start,
                                         key_columns)
                rows_here += raw.frame.height + len(raw.bad_lines)
            file_start += rows_here
    yield from release()


def _file_batches(path: Source, look_ahead: bool) -> Iterator[tuple[RawTable, bool]]:
    """The file's batches as read, each with whether it is known to be the file's only one:
    looked ahead for only with `look_ahead`, and when the first batch could be joined with
    other files'; no batch is held past its turn."""
    batches = iter_batches(path, BATCH_ROWS)
    first = next(batches, None)
    if first is None:
        return
    second = next(batches, None) if look_ahead and _small_and_clean(first) else None
    only = look_ahead and second is None and _small_and_clean(first)
    yield first, only
    del first
    if second is not None:
        yield second, False
        del second
    for raw in batches:
        yield raw, False


def _small_and_clean(raw: RawTable) -> bool:
    """A file's only batch that may be normalised with others: small, no line skipped, its
    rows numbered from 0 in order (so that the joined rows map back to their files)."""
    n = raw.frame.height
    return (n < _small_rows() and not raw.bad_lines and raw.row.shape[0] == n
            and bool(np.array_equal(raw.row, np.arange(n))))


def _normalised(raw: RawTable, path: Source, config: Config, form: str, file_start: int,
                key_columns: dict[str, str]) -> pl.DataFrame:
    frame = normalize.normalize_positions(raw.frame, raw.row, str(path), config.columns, form,
                                          file_start)
    return _with_bad_lines(frame, raw, key_columns)


def _normalised_together(paths: list[Source], frames: list[pl.DataFrame], config: Config,
                         form: str, file_start: int) -> pl.DataFrame | None:
    """Whole small files' rows (one schema, every row read) normalised as one batch, as each
    would be on its own (`_by_file`). None if normalising them raises: each file is then
    normalised on its own, for an error that names it."""
    try:
        frame = normalize.normalize_positions(
            pl.concat(frames, rechunk=True), np.arange(sum(f.height for f in frames)),
            str(paths[0]), config.columns, form, file_start)
    except InputError:
        return None
    return _by_file(frame, paths, np.array([f.height for f in frames], dtype=np.int64))


def _read_together(paths: list[Source], rows: list[int], config: Config, form: str,
                   file_start: int) -> tuple[pl.DataFrame, int] | None:
    """Small Parquet files of one schema (`rows` each, from their footers) read by one scan
    and normalised as one batch (`_by_file`); with the rows read. None when the one scan
    fails (each file is then read on its own, for its own error)."""
    raw = read_parquet_group(paths)  # type: ignore[arg-type]
    if raw is None:
        return None
    counts = np.array(rows, dtype=np.int64)
    if int(counts.sum()) != raw.height:
        return None
    frame = normalize.normalize_positions(raw, np.arange(raw.height, dtype=np.int64),
                                          str(paths[0]), config.columns, form, file_start)
    return _by_file(frame, paths, counts), raw.height


def _by_file(frame: pl.DataFrame, paths: list[Source], counts: np.ndarray) -> pl.DataFrame:
    """Rows of several files (`counts` each, in order) normalised as one batch, their rows
    numbered across the files (the default position ids, and the rows normalising tells
    apart), given back to their files: rows numbered within their file, `_source` their
    file, `_file` its index within `paths`."""
    across = frame["_row"].to_numpy()
    file = np.repeat(np.arange(len(paths), dtype=np.int32), counts)[across]
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    sources = pl.Series([str(p) for p in paths], dtype=pl.String)
    return frame.with_columns(sources.gather(file).alias("_source"),
                              pl.Series("_row", across - starts[file], dtype=pl.Int64),
                              pl.Series("_file", file, dtype=pl.Int32))


SMALL_BATCH_ROWS = 1 << 16


def _small_rows() -> int:
    """Batches (files) smaller than this are joined with their neighbours."""
    return min(SMALL_BATCH_ROWS, BATCH_ROWS // 16)


def coalesced(batches: Iterator[tuple[int, pl.DataFrame]]
              ) -> Iterator[tuple[int, pl.DataFrame]]:
    """`batches` with consecutive small ones (small files, or a file's last rows: under
    SMALL_BATCH_ROWS rows, and a sixteenth of BATCH_ROWS) of the same columns and types
    joined, up to BATCH_ROWS rows, each row's file index in an Int32 `_file` column; (the
    first one's file index, batch). Every step after the read costs per batch: 400 files of
    5,000 positions spent most of their time there. Other batches, and a small one alone,
    pass as they come."""
    small_rows, rows = _small_rows(), BATCH_ROWS
    held: list[tuple[int, pl.DataFrame]] = []

    def joined() -> Iterator[tuple[int, pl.DataFrame]]:
        if len(held) == 1:
            yield held[0]
        elif held:
            yield held[0][0], pl.concat(
                [frame.with_columns(pl.lit(index, pl.Int32).alias("_file"))
                 for index, frame in held], rechunk=True)  # one chunk: one kernel call
        held.clear()

    held_rows = 0
    for index, frame in batches:
        small = frame.height < small_rows and "_file" not in frame.columns
        if held and (not small or frame.schema != held[0][1].schema
                     or held_rows + frame.height > rows):
            yield from joined()
            held_rows = 0
        if small:
            held.append((index, frame))
            held_rows += frame.height
        else:
            yield index, frame
    yield from joined()


def read_ahead(items: Iterator[T], name: str = "read_ahead") -> Iterator[T]:
    """`items`, each produced by a thread while the consumer works on the one before, so that
    reading and normalising the next batch (polars and numba, both without the GIL) overlaps
    evaluating this one. Errors are raised where the consumer would have met them; leaving
    early stops the thread after the item it is on and closes `items`. Where the kernels
    may not run in two threads at once (`kernels.overlap_allowed`), the items come from this
    thread instead."""
    if not kernels.overlap_allowed():
        yield from items
        return
    handoff: queue.Queue = queue.Queue(maxsize=1)
    leaving = threading.Event()

    def offer(entry: tuple) -> bool:
        while not leaving.is_set():
            try:
                handoff.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer((item, None)):
                    return
            offer((_END, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            offer((_END, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=produce, name=name, daemon=True)
    worker.start()
    try:
        while True:
            item, error = handoff.get()
            if item is _END:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        leaving.set()
        worker.join()
