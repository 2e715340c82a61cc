"""The Spark engine's per-partition steps: each runs inside a Python worker on an executor, on
the Arrow batches `mapInArrow` hands it, and calls the same transforms as the polars engine
(so every row-level rule is the polars engine's). Nothing here talks to Spark itself (a
tally is handed an accumulator and only adds to it)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import polars as pl
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from pipeline import kernels, keys
from pipeline.batches import BATCH_ROWS, position_batches
from pipeline.config import Config
from pipeline.errors import SnimError
from pipeline.io.read.files import Source
from pipeline.io.read.readers import parquet_range
from pipeline.transforms import evaluate, long_form, normalize, ordering, outputs
from pipeline.transforms.schema import REJECT_SCHEMA as REJECT_COLUMNS

Batches = Iterator[pa.RecordBatch]
KEYS = keys.KEYS
PATH, ROW = "__snim_path", "__snim_row"
DATA, FATAL = 0, 1
SUMMARY = 2  # order_task's row per partition
# A reading task's tally of what it read of a file (`_row` holds the number): its DATA rows,
# and those of them rejected. Counted as the rows leave the task, so the driver gets each
# file's rows without a pass over them (the cached rows' batches of DATA only are skipped).
READ, REJECTED = 3, 4
# With integer keys, also the smallest and the largest valid key of each batch (LOW, HIGH: each
# key's own bound) and every so many valid keys (SAMPLE, about KEY_SAMPLES per batch): the
# driver sorts the verdicts on them without Spark's sampling pass (`SparkOrdering.sorted`).
LOW, HIGH, SAMPLE = 5, 6, 7
KEY_SAMPLES = 256
# Rows evaluated as read, with tables built before the read from the footers' statistics: a
# table a heap lies beyond (statistics that understate the values) cannot grow in a task, so
# the task names the largest heap each such table was asked for (`_row`; the table in
# `nim_sum`, as rows evaluated as read have no `table` column), and the driver grows the
# tables and reads again (`SparkWork.read`).
GROW = 8
LONG, STRING, INT, BOOL = T.LongType(), T.StringType(), T.IntegerType(), T.BooleanType()

REJECT_SCHEMA = T.StructType([T.StructField(name, LONG if dtype == pl.Int64 else STRING)
                              for name, dtype in REJECT_COLUMNS.items()])
# A normalised input row, keys as text (their output type is decided once every row is seen);
# or, with _kind = FATAL, an input file that could not be read (_reason holds the message).
NORM_SCHEMA = T.StructType([
    T.StructField("_kind", INT), T.StructField("_file", INT), T.StructField("_source", STRING),
    T.StructField("_row", LONG), T.StructField("rule_set_id", STRING),
    T.StructField("position_id", STRING), T.StructField("heaps", T.ArrayType(LONG)),
    T.StructField("_column", STRING), T.StructField("_reason", STRING),
    T.StructField("table", LONG), T.StructField("_rid_int", BOOL),
    T.StructField("_pid_int", BOOL),
])


@dataclass(frozen=True)
class Shipped:
    """A value carried in a task's pickled closure, read as `.value` like a broadcast
    variable (Spark Connect has no broadcast variables)."""

    value: Any


def _frame(batch: pa.RecordBatch) -> pl.DataFrame:
    frame = pl.from_arrow(batch)
    assert isinstance(frame, pl.DataFrame)
    return frame


def _whole(batches: Batches) -> pl.DataFrame | None:
    """A partition as one frame (after a shuffle by key: whole key groups)."""
    frames = [_frame(b) for b in batches]
    return pl.concat(frames) if frames else None


def _out(frame: pl.DataFrame, schema: T.StructType) -> Batches:
    """A polars frame as record batches of exactly the declared Spark schema."""
    missing = [n for n in schema.fieldNames() if n not in frame.columns]
    if missing:
        raise RuntimeError(f"spark engine: columns {missing} missing from {frame.columns}")
    yield from (frame.select(schema.fieldNames()).to_arrow()
                .cast(to_arrow_schema(schema)).to_batches())


def _is_int(frame: pl.DataFrame, name: str) -> bool:
    """Would the run's key rule make this key Int64, judged on these rows only? (The rule is
    a conjunction over rows, so the flags of all batches AND together.)"""
    return not keys.needs_text(frame, name)


def _step(frame: pl.DataFrame, file_index: int, form: str, index: pl.DataFrame,
          schema: T.StructType, tables: Any = None, winning_moves: bool = False,
          asked: list[np.ndarray] | None = None) -> Batches:
    """The polars engine's per-batch step after normalising: wide batches are attached to
    their tables here, with the batch's own key type; long ones once they are positions.
    With `tables` (wide, tables already built) the batch is also evaluated, in the same pass
    (`_evaluated`; `asked` collects what tables its heaps needed beyond theirs). Keys leave
    as the schema types them (text until the run's type is known)."""
    if form == "wide":
        frame, batch_index = keys.match_key_type(frame, index)
        frame = evaluate.attach_tables(frame, batch_index)
    else:
        frame = frame.with_columns(pl.lit(None, pl.Int64).alias("table"))
    frame = frame.with_columns(pl.lit(DATA, pl.Int32).alias("_kind"),
                               pl.lit(file_index, pl.Int32).alias("_file"))
    if tables is not None:
        yield from _out(_evaluated(frame, tables.value, winning_moves, asked), schema)
        return
    yield from _out(frame.with_columns(
        pl.lit(_is_int(frame, "rule_set_id")).alias("_rid_int"),
        pl.lit(_is_int(frame, "position_id")).alias("_pid_int")), schema)


def _evaluated(frame: pl.DataFrame, table_set: Any, winning_moves: bool,
               asked: list[np.ndarray] | None = None) -> pl.DataFrame:
    """Wide: `evaluate.evaluate` and `with_verdict` (its nim_sum and moves; the engine
    adds the verdict), and whether the batch's valid keys are integers (flags). Only
    rejected rows keep their `_source` (the others are identified by `_file`), so that
    valid rows carry no text but their keys. `asked`: the largest heap each table was asked
    for beyond its end is appended to it (the tables stay as they are; rows beyond them
    are rejected here, and the driver decides whether to grow the tables and read again)."""

    def note(largest: np.ndarray) -> Any:
        asked.append(largest)  # type: ignore[union-attr]
        return table_set

    evaluated = evaluate.evaluate(frame, table_set, winning_moves,
                                  grow=None if asked is None else note)
    valid = evaluated.filter(pl.col("_reason").is_null())
    return evaluate.with_verdict(evaluated).with_columns(
        pl.when(pl.col("_reason").is_not_null()).then(pl.col("_source")).alias("_source"),
        pl.lit(_is_int(valid, "rule_set_id")).alias("_rid_int"),
        pl.lit(_is_int(valid, "position_id")).alias("_pid_int"))


def _fatal(file_index: int, message: str, schema: T.StructType, at: int = 0) -> Batches:
    """One FATAL row: the file that could not be read, and from which row (`at`: the first
    error of a file is the one at its lowest row, as a sequential read meets it)."""
    row = pl.DataFrame({"_kind": [FATAL], "_file": [file_index], "_reason": [message],
                        "_row": [at]},
                       schema={"_kind": pl.Int32, "_file": pl.Int32, "_reason": pl.String,
                               "_row": pl.Int64})
    yield from _out(row.with_columns(pl.lit(None).alias(n) for n in schema.fieldNames()
                                     if n not in row.columns), schema)


class Tally:
    """The DATA rows a reading task emits for one file, how many of them are rejected, and
    with integer keys their bounds and a sample of them (LOW, HIGH, SAMPLE)."""

    def __init__(self) -> None:
        self.rows = self.rejected = 0
        self.keys: list[pl.DataFrame] = []
        self.asked: list[np.ndarray] = []  # heaps beyond the tables (`_evaluated`)

    def counted(self, batches: Batches) -> Batches:
        for batch in batches:
            self.rows += batch.num_rows
            self.rejected += batch.num_rows - batch.column("_reason").null_count
            if all(batch.schema.field(k).type == pa.int64() for k in KEYS):
                self.keys.append(_key_summary(batch))
            yield batch

    def summary(self, file_index: int, schema: T.StructType) -> Batches:
        """One READ row (even of 0 rows: the file was read), one REJECTED row if any, the
        keys' rows and a GROW row for each table a heap lay beyond."""
        kinds = [READ, *([REJECTED] if self.rejected else [])]
        counts = [self.rows, *([self.rejected] if self.rejected else [])]
        rows = pl.DataFrame({"_kind": kinds, "_row": counts},
                            schema={"_kind": pl.Int32, "_row": pl.Int64})
        wanted = tables_asked(self.asked)
        grow = pl.DataFrame({"_kind": [GROW] * len(wanted), "nim_sum": list(wanted),
                             "_row": list(wanted.values())},
                            schema={"_kind": pl.Int32, "nim_sum": pl.Int64, "_row": pl.Int64})
        rows = pl.concat([rows, grow, *self.keys], how="diagonal").with_columns(
            pl.lit(file_index, pl.Int32).alias("_file"))
        yield from _out(rows.with_columns(pl.lit(None).alias(n) for n in schema.fieldNames()
                                          if n not in rows.columns), schema)


    def failed(self, file_index: int, message: str, schema: T.StructType, at: int) -> Batches:
        return _fatal(file_index, message, schema, at)


# Rejected rows the reading tasks carry to the driver in their accumulator (`StraightTally`):
# at most CARRIED_REJECTS a unit, and about CARRIED_IN_ALL in all (at least 100 a unit); a unit
# with more rejects has the run read again, cached (`SparkWork.straight_read`).
CARRIED_REJECTS, CARRIED_IN_ALL = 10_000, 100_000


def tables_asked(asked: list[np.ndarray]) -> dict[int, int]:
    """table -> the largest heap it was asked for beyond its end, over a task's batches."""
    if not asked:
        return {}
    largest = np.maximum.reduce(asked)
    return {int(t): int(largest[t]) for t in np.flatnonzero(largest >= 0)}


def carried_per_unit(units: int) -> int:
    """The rejected rows each of `units` reading tasks may carry to the driver."""
    return min(CARRIED_REJECTS, max(100, CARRIED_IN_ALL // max(1, units)))


@dataclass(frozen=True)
class UnitRead:
    """What a reading task read of one unit when its rows go straight to the sort (no cache
    of the read, no job that tallies it): added to an accumulator under the unit's number,
    so that a task Spark runs again adds the same entry, not a second one."""

    file: int
    rows: int  # DATA rows read, the rejected ones among them
    rejected: int
    rejected_rows: pl.DataFrame | None  # those rows themselves; None: more than it may carry
    fatal: tuple[int, str] | None  # the row from which the unit could not be read, and why
    asked: dict[int, int] = field(default_factory=dict)  # as the GROW rows of `Tally`


class StraightTally:
    """`Tally` for rows that go straight to the sort: only valid rows leave the task; the
    counts, the rejected rows and a unit's error go to the accumulator `reads` instead."""

    def __init__(self, reads: Any, number: int, carry: int) -> None:
        self.reads, self.number, self.carry = reads, number, carry
        self.rows = self.rejected = 0
        self.kept: list[pl.DataFrame] | None = []
        self.fatal: tuple[int, str] | None = None
        self.asked: list[np.ndarray] = []

    def counted(self, batches: Batches) -> Batches:
        for batch in batches:
            self.rows += batch.num_rows
            reasons = batch.column("_reason")
            if reasons.null_count < batch.num_rows:
                self.rejected += batch.num_rows - reasons.null_count
                if self.kept is not None and self.rejected <= self.carry:
                    self.kept.append(_frame(batch.filter(reasons.is_valid())))
                else:
                    self.kept = None
                batch = batch.filter(reasons.is_null())
            yield batch

    def failed(self, file_index: int, message: str, schema: T.StructType, at: int) -> Batches:
        self.fatal = (at, message)
        yield from ()

    def summary(self, file_index: int, schema: T.StructType) -> Batches:
        kept = None if self.kept is None else (
            pl.concat(self.kept) if self.kept else pl.DataFrame())
        self.reads.add({self.number: UnitRead(file_index, self.rows, self.rejected, kept,
                                              self.fatal, tables_asked(self.asked))})
        yield from ()


def _key_summary(batch: pa.RecordBatch) -> pl.DataFrame:
    """A batch's valid integer keys as LOW, HIGH and SAMPLE rows (`_kind` and the keys)."""
    frame = _frame(batch.select([*KEYS, "_reason"])).filter(
        pl.col("_reason").is_null()).drop("_reason")
    kind = pl.lit(SAMPLE, pl.Int32).alias("_kind")
    if not frame.height:
        return frame.select(kind, *KEYS)
    return pl.concat([
        frame.select(pl.lit(LOW, pl.Int32).alias("_kind"), pl.col(KEYS).min()),
        frame.select(pl.lit(HIGH, pl.Int32).alias("_kind"), pl.col(KEYS).max()),
        frame.gather_every(max(1, frame.height // KEY_SAMPLES)).select(kind, *KEYS)])


def csv_task(batches: Batches, config: Config, form: str, index: pl.DataFrame,
              sources: dict[int, Source], schema: T.StructType, tables: Any = None,
              winning_moves: bool = False) -> Batches:
    """Whole CSV files, one per input row (file, path), read exactly as the polars engine
    reads them (`sources`: each file's path, or its object with the run's storage options,
    read through pyarrow's file system here on the executor); a file it cannot read becomes
    one FATAL row."""
    for batch in batches:
        for file_index in batch.column("file").to_pylist():
            tally = Tally()
            try:
                for _, frame in position_batches([sources[file_index]], config, form,
                                                 parse_ahead=False):  # a task, a core
                    yield from tally.counted(_step(frame, file_index, form, index, schema,
                                                   tables, winning_moves, tally.asked))
            except SnimError as exc:
                yield from _fatal(file_index, str(exc), schema)
            yield from tally.summary(file_index, schema)


@dataclass(frozen=True)
class ParquetFile:
    """A Parquet input as its footer describes it: its column types (as polars reads them)
    and the rows of each row group."""

    index: int
    source: str
    dtypes: dict[str, pl.DataType]
    default_pid: bool
    row_groups: tuple[int, ...] = ()


@dataclass(frozen=True)
class Unit:
    """The work of one reading task: rows start .. start + rows of one Parquet file, whole
    row groups."""

    file: int
    start: int
    rows: int


def plan_units(files: list[ParquetFile], slots: int) -> list[Unit]:
    """Consecutive row groups of each file packed into units of up to a quarter of an even
    share per core (at most BATCH_ROWS rows, unless one row group holds more): enough units
    for every core when the row groups allow it, and small row groups do not each cost a
    Python call."""
    total = sum(sum(f.row_groups) for f in files)
    target = min(BATCH_ROWS, max(1, -(-total // (4 * max(1, slots)))))
    units = []
    for f in files:
        start = rows = 0
        for n in f.row_groups:
            if rows and rows + n > target:
                units.append(Unit(f.index, start, rows))
                start, rows = start + rows, 0
            rows += n
        if rows:
            units.append(Unit(f.index, start, rows))
    return units


def real_path(path_or_uri: str) -> str:
    """A file as Spark's `_metadata.file_path` names it and as the driver named it alike: a
    local file by its real path, an object by its URL without percent-escapes, an hdfs:// file
    by its path (Spark names the default file system's namenode in `hdfs:///key`)."""
    if path_or_uri.startswith("file:"):
        path_or_uri = unquote(urlparse(path_or_uri).path)
    elif path_or_uri.startswith("hdfs:"):
        return "hdfs://" + unquote(urlparse(path_or_uri).path)
    elif "://" in path_or_uri:
        return unquote(path_or_uri)
    return os.path.realpath(path_or_uri)


def parquet_task(batches: Batches, files: dict[str, ParquetFile], config: Config, form: str,
                  index: pl.DataFrame, schema: T.StructType, tables: Any = None,
                  winning_moves: bool = False) -> Batches:
    """Rows read by Spark, per file: the file's own column types back, then the polars steps
    (with `tables`, through evaluation: `_step`)."""
    by_uri: dict[str, ParquetFile] = {}
    tallies: dict[int, Tally] = {}
    for batch in batches:
        for part in _frame(batch).partition_by(PATH, maintain_order=True):
            uri = part[PATH][0]
            info = by_uri.setdefault(uri, files[real_path(uri)])
            tally = tallies.setdefault(info.index, Tally())
            rows = part[ROW].to_numpy().astype(np.int64)
            raw = part.drop(PATH, ROW).cast(info.dtypes)
            if info.default_pid:  # row number in the file; shifted by the earlier files later
                raw = raw.with_columns(pl.Series(config.columns.position_id, rows))
            try:
                frame = normalize.normalize_positions(raw, rows, info.source, config.columns,
                                                       form, 0)
            except SnimError as exc:
                yield from _fatal(info.index, str(exc), schema)
                continue
            yield from tally.counted(_step(frame, info.index, form, index, schema, tables,
                                           winning_moves, tally.asked))
    for file_index, tally in tallies.items():
        yield from tally.summary(file_index, schema)


def row_groups_task(batches: Batches, units: list[Unit], sources: dict[int, Source],
                    files: dict[int, ParquetFile], config: Config, form: str,
                    index: pl.DataFrame, schema: T.StructType, tables: Any = None,
                    winning_moves: bool = False, reads: Any = None) -> Batches:
    """Parquet rows read by the task itself, not by Spark: each input row is the number of a
    `Unit`, whose rows are read by the polars engine's reader (`parquet_range`: a local path,
    or an object with the run's storage options) and go through the polars steps (`_step`).
    Spark never handles the `heaps` column, only the narrow rows that leave. Row numbers are
    the unit's start plus the row's place in it; a unit that cannot be read is a FATAL row
    at its start. With `reads` (an accumulator), only valid rows leave: the tally goes there
    (`StraightTally`)."""
    for batch in batches:
        for number in batch.column(0).to_pylist():
            unit = units[number]
            info = files[unit.file]
            row = unit.start
            tally: Tally | StraightTally = (Tally() if reads is None
                                            else StraightTally(reads, number,
                                                               carried_per_unit(len(units))))
            try:
                for raw in parquet_range(sources[unit.file], unit.start, unit.rows,
                                         BATCH_ROWS):
                    rows = np.arange(row, row + raw.height, dtype=np.int64)
                    frame = normalize.normalize_positions(raw, rows, info.source,
                                                           config.columns, form, 0)
                    yield from tally.counted(_step(frame, info.index, form, index, schema,
                                                   tables, winning_moves, tally.asked))
                    row += raw.height
            except SnimError as exc:
                yield from tally.failed(info.index, str(exc), schema, at=row)
            yield from tally.summary(info.index, schema)


def reject_task(batches: Batches, schema: T.StructType) -> Batches:
    for batch in batches:
        yield from _out(outputs.reject_rows(_frame(batch), "positions"), schema)


def evaluate_task(batches: Batches, tables: Any, winning_moves: bool,
                   schema: T.StructType) -> Batches:
    """Wide, rows read before their tables were built: `_evaluated` per batch."""
    for batch in batches:
        yield from _out(_evaluated(_frame(batch), tables.value, winning_moves), schema)


def cast_keys_task(batches: Batches, dtypes: dict[str, pl.DataType],
                    schema: T.StructType) -> Batches:
    """Rejected rows' keys cast to the verdict key types, as `split_duplicates` casts them."""
    for batch in batches:
        yield from _out(_frame(batch).with_columns(
            keys.rejected_key_as(k, dtypes[k]).alias(f"_k_{k}") for k in KEYS), schema)


def _before(keyed: pl.DataFrame, last: pl.DataFrame | None) -> pl.DataFrame:
    """The key before each key (`last`: the previous batch's last key; none for the first)."""
    return keyed.shift(1) if last is None else pl.concat([last, keyed.head(-1)])


def _same_as_before(keyed: pl.DataFrame, before: pl.DataFrame) -> pl.Series:
    return ((keyed["rule_set_id"] == before["rule_set_id"])
            & (keyed["position_id"] == before["position_id"])).fill_null(False)


def _less_than_before(keyed: pl.DataFrame, before: pl.DataFrame) -> pl.Series:
    rid, pid = keyed["rule_set_id"], keyed["position_id"]
    return ((rid < before["rule_set_id"])
            | ((rid == before["rule_set_id"]) & (pid < before["position_id"]))).fill_null(False)


def repeated_task(batches: Batches, schema: T.StructType) -> Batches:
    """The keys equal to the key before them, in a partition sorted by key (a range
    partitioning keeps equal keys in one partition): every key given more than once."""
    last: pl.DataFrame | None = None
    for batch in batches:
        frame = _frame(batch).select(KEYS)
        if not frame.height:
            continue
        same = _same_as_before(frame, _before(frame, last))
        last = frame.tail(1)
        yield from _out(frame.filter(same), schema)


@dataclass(frozen=True)
class PartitionTally:
    """One partition of key-sorted verdicts as `tally_task` saw it pass to the write."""

    first: tuple[Any, Any]
    last: tuple[Any, Any]
    repeated: int  # keys equal to the key before them
    counts: pl.DataFrame  # rule_set_id, W, L
    backwards: int = 0  # keys before the key before them: the sort's ranges were wrong


def tally_task(batches: Batches, tally: Any, schema: T.StructType) -> Batches:
    """Verdict rows of a partition sorted by key, passed on unchanged to the write and
    tallied as they pass: the first and last key, the keys equal to the key before them
    (every key given twice: a range partitioning keeps equal keys in one partition) and W/L
    per rule set; and, as a check of the sort's ranges (drawn from footers' statistics, which
    a writer may get wrong), the keys that come before the key before them. The tally is
    added to `tally` (an accumulator) under the partition's number (the order of the part
    files), so a task that Spark runs again adds the same entry, not a second one."""
    first: pl.DataFrame | None = None
    last: pl.DataFrame | None = None
    repeated = backwards = 0
    counts = []
    for batch in batches:
        if batch.num_rows:
            frame = _frame(batch)
            keyed = frame.select(KEYS)
            before = _before(keyed, last)
            repeated += int(_same_as_before(keyed, before).sum())
            backwards += int(_less_than_before(keyed, before).sum())
            first = keyed.head(1) if first is None else first
            last = keyed.tail(1)
            counts.append(frame.group_by("rule_set_id").agg(
                (pl.col("nim_sum") != 0).sum().alias("W"),
                (pl.col("nim_sum") == 0).sum().alias("L")))
        yield batch
    if first is not None and last is not None:
        per_rule_set = pl.concat(counts).group_by("rule_set_id").agg(pl.col("W", "L").sum())
        tally.add({TaskContext.get().partitionId(): PartitionTally(
            first.row(0), last.row(0), repeated, per_rule_set, backwards)})


def order_task(batches: Batches, schema: T.StructType) -> Batches:
    """One partition's key order, in one pass over its keys (`_part` holds the partition's
    number): a row of _kind SUMMARY (first key as the keys, last key as `_last_*`, `_sorted`:
    every key at least the one before it), and a row of _kind DATA for each key equal to the
    key before it. Partitions that are each sorted, and in order, hold the verdicts in key
    order without a sort; their repeated keys are then exactly these (and any key that ends
    one partition and starts the next)."""
    first: pl.DataFrame | None = None
    last: pl.DataFrame | None = None
    in_order = True
    for batch in batches:
        frame = _frame(batch)
        if not frame.height:
            continue
        keyed = frame.select(KEYS)
        if first is None:
            first = frame.head(1)
        before = _before(keyed, last)
        same = _same_as_before(keyed, before)
        r, p = keyed["rule_set_id"], keyed["position_id"]
        r0, p0 = before["rule_set_id"], before["position_id"]
        in_order = in_order and bool(((r0 < r) | ((r0 == r) & (p0 <= p))).fill_null(True).all())
        last = keyed.tail(1)
        repeated = keyed.filter(same)
        if repeated.height:
            yield from _out(repeated.with_columns(
                pl.lit(DATA).alias("_kind"), pl.lit(frame["_part"][0]).alias("_part"),
                pl.lit(None, pl.Boolean).alias("_sorted"),
                *[pl.lit(None, keyed[k].dtype).alias(f"_last_{k}") for k in KEYS]), schema)
    if first is None or last is None:
        return
    yield from _out(first.select(
        pl.lit(SUMMARY).alias("_kind"), "_part", pl.lit(in_order).alias("_sorted"), *KEYS,
        *[pl.lit(last[k][0], last[k].dtype).alias(f"_last_{k}") for k in KEYS]), schema)


def split_task(batches: Batches, sources: list[str], columns: list[str], keep: str,
                schema: T.StructType) -> Batches:
    """`ordering.split_duplicates` on whole key groups: verdict rows have `_side` 0, the
    rejected rows with the same keys `_side` 1 (their keys as given in `_r_*`)."""
    rows = _whole(batches)
    if rows is None:
        return
    verdicts = ordering.sort_by_keys(rows.filter(pl.col("_side") == 0).select(columns))
    rejects = rows.filter(pl.col("_side") == 1).select(
        pl.col(f"_r_{n}").alias(n) if n in KEYS else pl.col(n) for n in REJECT_COLUMNS)
    clean, duplicates = ordering.split_duplicates(verdicts, rejects, sources)
    yield from _out(clean if keep == "clean" else duplicates, schema)


def _in_input_order(rows: pl.DataFrame) -> pl.DataFrame:
    """Long rows as the polars engine concatenates them: files in order, then rows."""
    return rows.sort("_file", "_row")


def taint_task(batches: Batches, schema: T.StructType) -> Batches:
    """Long: whole positions that have a bad row, rejected by `long_form.long_to_wide`."""
    rows = _whole(batches)
    if rows is not None:
        _, rejected = long_form.long_to_wide(_in_input_order(rows))
        yield from _out(outputs.reject_rows(rejected, "positions"), schema)


def attach_task(batches: Batches, index: pl.DataFrame, schema: T.StructType) -> Batches:
    """Long: the table of each (clean) row; the same for every row of a position."""
    for batch in batches:
        frame, batch_index = keys.match_key_type(_frame(batch).drop("table"), index)
        yield from _out(evaluate.attach_tables(frame, batch_index), schema)


def sg_task(batches: Batches, tables: Any, schema: T.StructType) -> Batches:
    """Long: each heap's Grundy value (kernels.BEYOND_TABLE where its table cannot say)."""
    for batch in batches:
        frame = _frame(batch)
        heap = frame["heaps"].list.first().to_numpy().astype(np.int64)
        table = frame["table"].to_numpy().astype(np.int64)
        sg = kernels.sg_per_heap(heap, table, *tables.value.lookup_args())
        yield from _out(frame.with_columns(pl.Series("heap", heap, dtype=pl.Int64),
                                           pl.Series("_sg", sg, dtype=pl.Int64)), schema)


def beyond_task(batches: Batches, tables: Any, index: pl.DataFrame, winning_moves: bool,
                 schema: T.StructType) -> Batches:
    """Long: whole positions with a heap beyond an unproven table, through the polars steps,
    so the reason names the first such heap in input order."""
    rows = _whole(batches)
    if rows is None:
        return
    positions, _ = long_form.long_to_wide(_in_input_order(rows).drop("table"))
    positions, batch_index = keys.match_key_type(positions, index)
    evaluated = evaluate.evaluate(evaluate.attach_tables(positions, batch_index),
                                    tables.value, winning_moves)
    rejected = long_form.expand_long_rejects(evaluated.filter(pl.col("_reason").is_not_null()))
    yield from _out(outputs.reject_rows(rejected, "positions"), schema)


def moves_task(batches: Batches, tables: Any, schema: T.StructType) -> Batches:
    """Long with winning moves: positions (heaps in input order) through `evaluate`."""
    for batch in batches:
        positions = _frame(batch).with_columns(pl.lit(None, pl.String).alias("_reason"),
                                               pl.lit(None, pl.String).alias("_column"))
        evaluated = evaluate.evaluate(positions, tables.value, True)
        yield from _out(evaluate.with_verdict(ordering.verdict_rows(evaluated, True)),
                        schema)


def verdict_task(batches: Batches, schema: T.StructType) -> Batches:
    for batch in batches:
        yield from _out(evaluate.with_verdict(_frame(batch)), schema)
