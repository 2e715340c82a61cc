"""Reading the job's inputs for any engine: rules files into one validated table, positions
files into normalised batches with reasons, in file order with exact row numbers."""

from __future__ import annotations

import csv
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import numpy as np
import polars as pl
import pyarrow as pa

from pipeline import kernels, keys
from pipeline.config import Config
from pipeline.errors import InputError
from pipeline.io.read.files import InputFile, RawTable, Source
from pipeline.io.read.formats import format_of
from pipeline.io.read.readers import (
    columns_of_each,
    iter_batches,
    read_parquet_group,
    read_tables,
    small_parquet_footer,
)
from pipeline.io.store.run_cache import RunCache
from pipeline.limits import MAX_RULES_MOVES
from pipeline.transforms import normalize, schema

BATCH_ROWS = 1 << 20
T = TypeVar("T")
_END = object()


def read_rules(config: Config, *, cache: RunCache | None = None,
               on_warning: Callable[[str], None] | None = None
               ) -> tuple[pl.DataFrame, list[InputFile], list[int]]:
    """All rules files, normalised and validated (reasons on bad rows); the files, and the
    rows read of each (lines the reader skipped included: they are rejected rows). `cache`:
    the run's (`RunCache`), as for every reader here; `on_warning`: `resolve_inputs`'."""
    frames, files = [], []
    moves_left = MAX_RULES_MOVES
    for raw in read_tables(config.rules, "rules", config.out, config.storage_options,
                           cache=cache, on_warning=on_warning):
        source = str(raw.file.path)
        frame = normalize.normalize_rules(raw.frame, raw.row, source, config.columns,
                                          moves_left)
        moves_left -= normalize.moves_held(frame)
        frames.append(_with_bad_lines(frame, raw, {"rule_set_id": config.columns.rule_set_id}))
        files.append(raw.file)
    rows = [frame.height for frame in frames]
    frames = keys.unify_key_types(frames, "rule_set_id")
    rules = pl.concat(frames, how="vertical_relaxed")
    if rules.height:  # the reasons that name a rules row name its file as `source` does
        rules = rules.with_columns(schema.with_source_text(rules["_source"]).alias("_source"))
    return normalize.reject_duplicate_rules(rules), files, rows


def _with_bad_lines(frame: pl.DataFrame, raw: RawTable, key_columns: dict[str, str],
                    first_position_id: int | None = None) -> pl.DataFrame:
    """Add the CSV lines the reader skipped (wrong field count) as rejected rows, with their
    key columns as given (`key_columns` maps output name -> input column) so that their rule set or
    position is accounted for too. `first_position_id`: where the file has no position_id
    column, the id its row 0 gets (`normalize_positions`), so that a skipped line's position
    is named as its valid neighbours' are."""
    if not raw.bad_lines:
        return frame
    header = raw.frame.columns
    fields = [next(csv.reader([text]), []) for _, _, text in raw.bad_lines]

    def field(values: list[str], name: str, column: str, row: int) -> str | None:
        if column not in header and name == "position_id" and first_position_id is not None:
            return str(row + first_position_id)
        at = header.index(column) if column in header else -1
        value = values[at].strip() if 0 <= at < len(values) else ""
        return value or None

    bad = pl.DataFrame({
        "_source": [str(raw.file.path)] * len(raw.bad_lines),
        "_row": [r for r, _, _ in raw.bad_lines],
        "_reason": [why for _, why, _ in raw.bad_lines],
        **{name: [field(v, name, column, r) for v, (r, _, _) in zip(fields, raw.bad_lines)]
           for name, column in key_columns.items()},
    }, schema={"_source": pl.String, "_row": pl.Int64, "_reason": pl.String,
               **{name: pl.String for name in key_columns}})
    if any(frame[name].dtype != pl.String for name in key_columns if name in frame.columns):
        frame = frame.with_columns(pl.col(name).cast(pl.String) for name in key_columns
                                   if name in frame.columns)
    return pl.concat([frame, bad], how="diagonal_relaxed").sort("_row")


def positions_form(paths: list[Source], config: Config, *, cache: RunCache | None = None
                   ) -> str:
    """The positions form, which every file must share."""
    forms = {p: schema.detect_form(columns, config.columns, str(p))
             for p, columns in zip(paths, columns_of_each(paths, cache=cache))}
    first = forms[paths[0]]
    for path, form in forms.items():
        if form != first:
            raise InputError(f"{path}: is in {form} form but {paths[0]} is in {first} form; "
                             "use one form per run", path=path)
    return first


def position_batches(paths: list[Source], config: Config, form: str,
                     read_together: bool = False, parse_ahead: bool = True, *,
                     cache: RunCache | None = None) -> Iterator[tuple[int, pl.DataFrame]]:
    """(file index, normalised batch with reasons) for every batch of every positions file.
    With `parse_ahead`, large CSV files are parsed by a thread of their own (`_parsed_ahead`;
    off where a task may use one core only, as a Spark task).
    With `read_together`, small files are normalised together as one batch, each row's file
    index in an Int32 `_file` column (a file costs some milliseconds to open, read and
    normalise on its own): runs of small Parquet files of one schema are read by one scan,
    and small CSV files of the same columns, read one by one, are joined before they are
    normalised."""
    key_columns = {"rule_set_id": config.columns.rule_set_id,
                   "position_id": config.columns.position_id}
    footers: dict[int, tuple[pa.Schema, int] | None] = {
        i: small_parquet_footer(path, _small_rows(), cache=cache) if read_together else None
        for i, path in enumerate(paths)}
    scans = consecutive_runs(range(len(paths)), footers.get, BATCH_ROWS)
    starts = _FileStarts()

    def read() -> Iterator[tuple[list[int], RawTable | None, bool]]:
        """(files, batch, whether it is its file's only one): a batch of a file read on its
        own, or (files, None, False) for a run of Parquet files that one scan reads, when
        its turn comes. CSV files are parsed by a thread of their own, a batch ahead of
        the one being normalised (`_parsed_ahead`)."""
        for scan in scans:
            if len(scan) > 1:
                yield scan, None, False
                continue
            for raw, only in _file_batches(paths[scan[0]], read_together, cache=cache):
                yield scan, raw, only

    def alone(index: int, raw: RawTable) -> pl.DataFrame:
        first = starts.of(index)
        frame = normalize.normalize_positions(raw.frame, raw.row, str(paths[index]),
                                              config.columns, form, first)
        starts.add(index, raw.frame.height + len(raw.bad_lines))
        return _with_bad_lines(frame, raw, key_columns, first)

    def joinable(item: tuple[list[int], RawTable | None, bool]) -> tuple[pa.Schema, int] | None:
        _, raw, only = item
        return (raw.frame.schema, raw.frame.height) if raw is not None and only else None

    raw_batches = _parsed_ahead(read(), paths, cache) if parse_ahead else read()
    for run in consecutive_runs(raw_batches, joinable, BATCH_ROWS):
        files = [scan[0] for scan, _, _ in run]
        raws = [raw for _, raw, _ in run if raw is not None]
        if not raws:  # a run of small Parquet files, read by one scan
            files = run[0][0]
            counts = [footers[i][1] for i in files]  # type: ignore[index]
            frame = _read_together([paths[i] for i in files], counts, config, form,
                                   starts.of(files[0]))
            if frame is None:  # each file read on its own, for its own error
                for index in files:
                    for raw in iter_batches(paths[index], BATCH_ROWS, cache=cache):
                        yield index, alone(index, raw)
                continue
        else:
            frame = (_normalised_together([paths[i] for i in files], [r.frame for r in raws],
                                          config, form, starts.of(files[0]))
                     if len(raws) > 1 else None)
            if frame is None:
                for index, raw in zip(files, raws):
                    yield index, alone(index, raw)
                continue
            counts = [r.frame.height for r in raws]
        for index, rows in zip(files, counts):
            starts.add(index, rows)
        yield files[0], frame.with_columns(pl.col("_file") + files[0])


class _FileStarts:
    """Where each file's rows start among the rows of all files (default position ids
    number on across the files, skipped lines included), for files met in order."""

    def __init__(self) -> None:
        self.file, self.start, self.rows = -1, 0, 0

    def of(self, index: int) -> int:
        if index != self.file:
            self.start += self.rows
            self.file, self.rows = index, 0
        return self.start

    def add(self, index: int, rows: int) -> None:
        self.of(index)
        self.rows += rows


def consecutive_runs(items: Iterable[T], joinable: Callable[[T], tuple[object, int] | None],
                     most_rows: int) -> Iterator[list[T]]:
    """`items` in runs: consecutive joinable ones (`joinable` gives their schema and rows,
    None for an item to keep alone) of one schema and `most_rows` rows at most in all, and
    every other item as a run of its own. An error from `items` is raised after the run
    held before it, so that its items come first, as they would one at a time."""
    held: list[T] = []
    held_schema: object = None
    held_rows = 0
    try:
        for item in items:
            found = joinable(item)
            if held and (found is None or found[0] != held_schema
                         or held_rows + found[1] > most_rows):
                yield held
                held, held_rows = [], 0
            if found is None:
                yield [item]
                continue
            held.append(item)
            held_schema = found[0]
            held_rows += found[1]
    except Exception:
        if held:
            yield held
        raise
    if held:
        yield held


def _parsed_ahead(items: Iterator[tuple[list[int], RawTable | None, bool]],
                  paths: list[Source], cache: RunCache | None
                  ) -> Iterator[tuple[list[int], RawTable | None, bool]]:
    """`read`'s items, made by a `parse_ahead` thread while the caller normalises the batch
    before, when every file is CSV and the first batch is not small: pyarrow's CSV
    reader runs on one thread (it numbers bad lines), the slowest step of reading large CSV
    files. Thousands of small files gained nothing from the thread and lost time handing
    their batches over; other input is read by polars and pyarrow on all cores already.
    The thread runs serial kernels only (`csv_scan`), so three threads may run kernels at
    once without two parallel ones among them. It holds up to two raw batches more."""
    try:
        first = next(items, None) if all(
            format_of(path, cache=cache) == "csv" for path in paths) else None
        if first is None:
            yield from items
            return
        yield first
        raw = first[1]
        if raw is not None and raw.frame.height >= _small_rows():
            items = read_ahead(items, name="parse_ahead")
        yield from items
    finally:
        items.close()


def _file_batches(path: Source, look_ahead: bool, cache: RunCache | None = None
                  ) -> Iterator[tuple[RawTable, bool]]:
    """The file's batches as read, each with whether it is known to be the file's only one:
    looked ahead for only with `look_ahead`, and when the first batch could be joined with
    other files'; no batch is held past its turn."""
    batches = iter_batches(path, BATCH_ROWS, cache=cache)
    first = next(batches, None)
    if first is None:
        return
    small = look_ahead and _small_and_clean(first)
    second = next(batches, None) if small else None
    only = small and second is None
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
                   file_start: int) -> pl.DataFrame | None:
    """Small Parquet files of one schema (`rows` each, from their footers) read by one scan
    and normalised as one batch (`_by_file`). None when the one scan fails (each file is
    then read on its own, for its own error)."""
    raw = read_parquet_group(paths)
    counts = np.array(rows, dtype=np.int64)
    if raw is None or int(counts.sum()) != raw.height:
        return None
    frame = normalize.normalize_positions(raw, np.arange(raw.height, dtype=np.int64),
                                          str(paths[0]), config.columns, form, file_start)
    return _by_file(frame, paths, counts)


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
    small_rows = _small_rows()

    def joinable(item: tuple[int, pl.DataFrame]) -> tuple[pl.Schema, int] | None:
        frame = item[1]
        small = frame.height < small_rows and "_file" not in frame.columns
        return (frame.schema, frame.height) if small else None

    for run in consecutive_runs(batches, joinable, BATCH_ROWS):
        if len(run) == 1:
            yield run[0]
        else:
            yield run[0][0], pl.concat(
                [frame.with_columns(pl.lit(index, pl.Int32).alias("_file"))
                 for index, frame in run], rechunk=True)  # one chunk: one kernel call


def read_ahead(items: Iterator[T], name: str = "read_ahead") -> Iterator[T]:
    """`items`, each produced by a thread while the consumer works on the one before, so that
    reading and normalising the next batch (polars and the kernels, both without the GIL) overlaps
    evaluating this one. Errors are raised where the consumer would have met them; leaving
    early stops the thread after the item it is on and closes `items`. Where the kernels
    may not run in two threads at once (`kernels.overlap_allowed`), the items come from this
    thread instead."""
    if not kernels.overlap_allowed():
        yield from items
        return
    handoff: queue.Queue = queue.Queue(maxsize=1)
    leaving = threading.Event()
    done_with_items = threading.Event()

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
            if leaving.is_set():  # the consumer left while this thread started
                return
            for item in items:
                if not offer((item, None)):
                    return
            offer((_END, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            offer((_END, exc))
        finally:
            try:
                close = getattr(items, "close", None)
                if close is not None:
                    close()
            finally:
                done_with_items.set()

    worker = threading.Thread(target=produce, name=name, daemon=True)
    try:
        try:
            worker.start()  # a stop raised in it comes after the thread started
        except RuntimeError:  # no thread could start: nothing to wait for
            done_with_items.set()
            raise
        while True:
            item, error = handoff.get()
            if item is _END:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        leaving.set()
        if threading.current_thread() is not worker:  # (a collection run on it closes this)
            _wait_through_stops(done_with_items)


def _wait_through_stops(done: threading.Event) -> None:
    """Wait for `done`, also when a stop signal is raised meanwhile (then raised once it is
    set): until the read-ahead thread is done it may be inside the items it reads, and a
    caller that closed them next met "generator already executing" instead of the stop.
    Not `Thread.join`: on Python 3.11 one interrupted by a stop marks the thread ended while
    it still runs. The cost: a stop waits for the item the thread is reading (a batch), as
    one raised before this wait always did."""
    stop: BaseException | None = None
    while not done.is_set():
        try:
            done.wait()
        except BaseException as exc:  # noqa: BLE001 - a stop, raised once the thread is done
            stop = stop or exc
    if stop is not None:
        raise stop
