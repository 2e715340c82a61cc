"""The Spark engine's reading of the positions, and the plumbing its jobs share.

Row numbers (`row` in rejects; the default `position_id` of wide files without one):

* Parquet that Python can open (a local path, an s3/gs/az object) is read by the tasks
  themselves: the driver reads every footer (`_probe`), cuts the files into units of whole row
  groups (`plan_units`), and each task reads its units with the polars engine's reader
  (`row_groups_task`); a row's number is its unit's first row plus its place in the unit.
  Spark then never handles the `heaps` column (handing a list column from its reader to
  Python cost more than the Python steps themselves), and a corrupt row group is the polars
  engine's error. When every input is Parquet, the rows of each file come from the footers.
* Parquet on `hdfs://`, which only the JVM reaches, is read by `spark.read.parquet`; each row
  carries `_metadata.file_path` (mapped back to its input file) and `_metadata.row_index`
  (its 0-based row in that file). Columns are cast back to the file's own types before the
  polars steps see them (Spark widens uint8..uint32 and reads uint64 as decimal(20,0)).
* CSV: the polars engine's CSV semantics (pyarrow's parser; "" is not null; a line with the
  wrong field count is the reject "line has N fields, expected M") must hold row for row, and
  row numbers need a sequential scan anyway, so each CSV file is one task that runs
  `batches.position_batches` on it.
* Default position ids are numbered per file inside the task, then shifted by the number of
  rows of the earlier files (counted by Spark): the polars engine's numbering.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException, PythonException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipeline import keys
from pipeline.config import Config
from pipeline.engines.spark_connect import is_connect, ship
from pipeline.engines.spark_session import Session, failure
from pipeline.engines.spark_tasks import (
    DATA,
    FATAL,
    GROW,
    HIGH,
    KEYS,
    LONG,
    LOW,
    NORM_SCHEMA,
    PATH,
    READ,
    REJECTED,
    ROW,
    SAMPLE,
    STRING,
    Batches,
    ParquetFile,
    csv_task,
    parquet_task,
    plan_units,
    real_path,
    row_groups_task,
)
from pipeline.engines.spark_urls import hadoop_url, read_problem
from pipeline.errors import InputError, SnimError, UsageError, first_line
from pipeline.io.read.files import Source
from pipeline.io.read.footers import parquet_footer, row_group_facts
from pipeline.io.read.formats import format_of
from pipeline.io.read.readers import as_read, columns_of
from pipeline.io.store.locations import Location
from pipeline.io.store.run_cache import RunCache
from pipeline.tables import TableCache
from pipeline.transforms import normalize

log = logging.getLogger(__name__)


def _hadoop_literal(path: str) -> str:
    """`path` with the characters Hadoop's glob expands escaped: the input files are already
    resolved, and Spark would read `pos[1].parquet` as pos1.parquet (turning globbing off
    with its `__globPaths__` option still read such files more than once)."""
    return re.sub(r"([\\\[\]{}*?])", r"\\\1", path)


def struct(*fields: tuple[str, T.DataType]) -> T.StructType:
    return T.StructType([T.StructField(name, dtype) for name, dtype in fields])


def pairs(schema: T.StructType, drop: tuple[str, ...] = ()) -> list[tuple[str, T.DataType]]:
    return [(f.name, f.dataType) for f in schema.fields if f.name not in drop]


def nulls(schema: T.StructType, drop: tuple[str, ...] = ()) -> list[Any]:
    return [F.lit(None).cast(f.dataType).alias(f.name) for f in schema.fields
            if f.name not in drop]


@dataclass(frozen=True)
class KeyStats:
    """The valid integer keys as the reading tasks saw them (before default position ids
    are shifted by the earlier files' rows): each key's bounds, and a sample of keys."""

    lo_rule_set_id: int
    hi_rule_set_id: int
    lo_position_id: int
    hi_position_id: int
    samples: list[tuple[int, int]]


class KeyedTallies:
    """An accumulator's param (AccumulatorParam) for tallies keyed by what they tally (a
    unit, a partition): a task Spark runs again replaces its entry instead of adding twice."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, tallies: dict, more: dict) -> dict:  # noqa: N802 - Spark's name
        tallies.update(more)
        return tallies


FOOTER_SAMPLES = 4096  # keys drawn from the footers' statistics for the sort's ranges
MAX_RANGES = 64  # sort partitions placed by a CASE over their bounds; more: Spark's orderBy


def one_long_fits(lo_r: int, hi_r: int, lo_p: int, hi_p: int) -> bool:
    """Do integer keys within these bounds sort on one long (`SparkOrdering.sorted`)?"""
    return (hi_r - lo_r + 1) * (hi_p - lo_p + 1) < 1 << 63


def footer_key_stats(groups: list[tuple[int, tuple[int, int], tuple[int, int]]]
                     ) -> KeyStats | None:
    """Key bounds and a sample for the sort's ranges from the row groups' statistics (rows,
    (min, max) of rule_set_id, of position_id; files in order), if they prove the rows out
    of key order; None if the rows may be in key order, which the read checks instead of
    sorting (`in_order_repeats`). The sample takes each row group's keys as spread evenly
    over its ranges (seeded: a run is repeatable)."""
    if any(lo > hi for _, *ranges in groups for lo, hi in ranges) or not any(
            _after(a, b) for a, b in zip(groups, groups[1:])):
        return None  # statistics that contradict themselves, or rows maybe in key order
    rng = np.random.default_rng(0)
    total = sum(n for n, _, _ in groups)
    samples: list[tuple[int, int]] = []
    for n, (r_lo, r_hi), (p_lo, p_hi) in groups:
        k = max(1, FOOTER_SAMPLES * n // total)
        samples += zip(rng.integers(r_lo, r_hi, k, endpoint=True).tolist(),
                       rng.integers(p_lo, p_hi, k, endpoint=True).tolist())
    return KeyStats(min(r[0] for _, r, _ in groups), max(r[1] for _, r, _ in groups),
                    min(p[0] for _, _, p in groups), max(p[1] for _, _, p in groups), samples)


def _after(first: tuple[int, tuple[int, int], tuple[int, int]],
           then: tuple[int, tuple[int, int], tuple[int, int]]) -> bool:
    """Does a key of row group `first` provably come after a key of the next one, `then`?
    Each holds a key with its largest (smallest) rule set; with the same rule set, every
    position id of `first` after every one of `then` tells it too."""
    _, (_, first_r_hi), (first_p_lo, _) = first
    _, (then_r_lo, _), (_, then_p_hi) = then
    return first_r_hi > then_r_lo or (first_r_hi == then_r_lo and first_p_lo > then_p_hi)


@dataclass(frozen=True)
class StraightRead:
    """What the reading tasks tallied of a read straight to the sort (`SparkWork.read`)."""

    rows: list[int]  # of each file
    rejected: int
    rejected_rows: pl.DataFrame | None  # None: more than the tasks carry (`carried_per_unit`)


@dataclass
class SparkWork:
    """One run's Spark session and inputs, the plumbing its jobs share (tasks mapped over
    frames, cached frames and broadcasts released at the end), and the reading of the
    positions; `spark_engine._Job` adds the evaluation."""

    spark: SparkSession
    config: Config
    paths: list[Source]
    form: str
    index: pl.DataFrame
    cache: TableCache
    run: Session | None = None
    read_cache: RunCache | None = None  # the run's, for what the driver reads of the files
    cached: list[DataFrame] = field(default_factory=list)
    broadcasts: list[Any] = field(default_factory=list)
    schemas: list[ParquetFile] | None = None  # every file's, when all are Parquet (read)
    rejected_rows: int | None = None  # input rows rejected as read (known after `read`)
    key_stats: KeyStats | None = None  # the valid integer keys as read (after `read`)
    reads: Any = None  # the reading tasks' accumulator, when the read goes straight to the sort
    # table -> the largest heap asked of it beyond the tables built before the read (GROW);
    # once grown for them (`read`), `regrown`: the next read's rows beyond are rejected
    grow_to: dict[int, int] = field(default_factory=dict)
    regrown: bool = False

    # -- plumbing --

    def map(self, df: DataFrame, task: Callable[..., Batches], schema: T.StructType,
            **kwargs: Any) -> DataFrame:
        return df.mapInArrow(functools.partial(task, schema=schema, **kwargs), schema)

    def persist(self, df: DataFrame) -> DataFrame:
        self.cached.append(df.persist())
        return df

    def release(self, df: DataFrame) -> None:
        """Unpersist a frame `persist` cached, before the run ends."""
        self.cached.remove(df)
        df.unpersist()

    def broadcast(self, value: Any) -> Any:
        """`value` for the tasks (as `.value`): a broadcast variable, or on Spark Connect, which
        has none, the value pickled into the tasks' closures."""
        if is_connect(self.spark):
            return ship(value)
        self.broadcasts.append(self.spark.sparkContext.broadcast(value))
        return self.broadcasts[-1]

    def close(self) -> None:
        for df in self.cached:
            df.unpersist()
        for bc in self.broadcasts:
            bc.unpersist()

    @staticmethod
    def by_key(df: DataFrame) -> DataFrame:
        """Every row of a (rule_set_id, position_id) in the same partition."""
        return df.repartition(*KEYS)

    # -- reading --

    def read(self, straight: bool = True) -> tuple[DataFrame, list[int] | None]:
        """Normalised rows of every positions file (NORM_SCHEMA) and the rows of each file.

        Raises the InputError the polars engine would raise first (files in order).

        Wide rows evaluated as read (`read_schema`) with tables that some heap lies beyond
        after all (footers whose statistics understate the heaps): the tables grow to what
        the reading tasks asked (GROW) and the files are read again, once, so that no row is
        rejected that the polars engine would keep.

        `straight`, and the rows can go straight from the reading tasks to the sort
        (`straight_key_stats`): the valid rows only, not cached, and None for the rows of
        each file: the tasks tally them, their rejected rows and errors into `reads`, known
        once a job has read them (`straight_read`)."""
        if self.grow_to:
            log.info("positions: %d tables grown past the heaps the footers' statistics "
                     "gave; reading again", len(self.grow_to))
            largest = np.full(len(self.cache.distinct), -1, np.int64)
            largest[list(self.grow_to)] = list(self.grow_to.values())
            self.cache.ensure(largest)
            self.grow_to, self.regrown = {}, True
        formats = [format_of(p, cache=self.read_cache) for p in self.paths]
        csv = [i for i, f in enumerate(formats) if f == "csv"]
        probed = {i: self._probe(i) for i, f in enumerate(formats) if f == "parquet"}
        errors = {i: p for i, p in probed.items() if isinstance(p, str)}
        if errors and min(errors) < min(csv, default=len(self.paths)):
            raise InputError(errors[min(errors)])
        self.schemas = None if csv or errors else list(probed.values())  # type: ignore[arg-type]
        schema, early = self.read_schema()
        parts = []
        on_hdfs = next((self.paths[i] for i in csv if isinstance(self.paths[i], Location)
                        and self.paths[i].scheme == "hdfs"), None)
        if on_hdfs is not None:
            raise UsageError(f"positions input {on_hdfs}: the Spark engine reads CSV in Python "
                             "tasks, which cannot reach hdfs:// (only Spark's JVM can); "
                             "convert it to Parquet, or put it on a shared path or an object "
                             "store")
        if csv:
            files = self.spark.createDataFrame([(i, str(self.paths[i])) for i in csv],
                                               "file int, path string").repartition(len(csv))
            parts.append(self.map(files,
                                  csv_task, schema, config=self.config, form=self.form,
                                  index=self.index, sources={i: self.paths[i] for i in csv},
                                  **early))
        mine = [f for f in probed.values()
                if isinstance(f, ParquetFile) and _python_reads(self.paths[f.index])]
        stats = (self.straight_key_stats(mine) if straight and self.schemas is not None
                 and len(mine) == len(self.paths) and "tables" in early else None)
        if stats is not None:
            log.info("positions: out of key order (the footers); read straight into the sort")
            self.key_stats = stats
            self.reads = self.spark.sparkContext.accumulator({}, KeyedTallies())
            rows = self.read_units(mine, schema, {**early, "reads": self.reads})
            return rows.drop("_kind"), None
        if mine:
            parts.append(self.read_units(mine, schema, early))
        groups: dict[tuple, list[ParquetFile]] = {}
        for info in probed.values():
            if isinstance(info, ParquetFile) and not _python_reads(self.paths[info.index]):
                groups.setdefault(tuple(info.dtypes.items()), []).append(info)
        for infos in groups.values():  # one read per schema: Spark reads one schema at a time
            raw = self._read_parquet([self.paths[f.index] for f in infos]).select(
                "*", F.col("_metadata.file_path").alias(PATH),
                F.col("_metadata.row_index").alias(ROW))
            parts.append(self.map(raw, parquet_task, schema,
                                  files={real_path(hadoop_url(self.paths[f.index])): f
                                         for f in infos},
                                  config=self.config, form=self.form, index=self.index, **early))
        if not parts:
            raise InputError(errors[min(errors)])
        norm = self.persist(functools.reduce(DataFrame.unionByName, parts))
        try:
            failed, rows = self.tally(norm, probed)
        except PythonException:
            raise
        except PySparkException as exc:  # e.g. a corrupt Parquet page Spark read
            if self.run is not None and failure(exc, self.run) is not None:
                raise  # memory, a lost executor: not the input's fault
            raise InputError(f"positions input {self.config.positions}: Spark could not read "
                             f"it ({first_line(exc)})") from None
        problems = {**failed, **errors}
        if problems:
            raise InputError(problems[min(problems)])
        if self.grow_to:
            self.release(norm)
            return self.read(straight=False)
        return norm.filter(F.col("_kind") == DATA).drop("_kind"), rows

    def straight_key_stats(self, files: list[ParquetFile]) -> KeyStats | None:
        """The keys' bounds and a sample from the footers, when the read can go straight to
        the sort: wide rows evaluated as read, integer keys of the files' own (no default
        position ids) with statistics in every row group, out of key order by those
        (`footer_key_stats`), and accumulators (not on Spark Connect); else None."""
        if (is_connect(self.spark) or self.form != "wide" or self.static_key_types() is None
                or any(f.default_pid for f in files) or self.slots() > MAX_RANGES
                or not hasattr(DataFrame, "repartitionById")):
            return None  # (without the ranges, Spark's sort would sample the rows: a read)
        names = [self.config.columns.rule_set_id, self.config.columns.position_id]
        groups = []
        for f in files:
            try:
                _, ranges = row_group_facts(self.paths[f.index], names, cache=self.read_cache)
            except (pa.ArrowException, OSError):
                return None
            if ranges is None:
                return None
            for n, found in zip(f.row_groups, ranges):
                rid, pid = found[names[0]], found[names[1]]
                if n and (rid is None or pid is None):
                    return None
                if n:
                    groups.append((n, rid, pid))
        stats = footer_key_stats(groups) if groups else None
        if stats is None or not one_long_fits(stats.lo_rule_set_id, stats.hi_rule_set_id,
                                              stats.lo_position_id, stats.hi_position_id):
            return None
        return stats

    def straight_read(self) -> StraightRead:
        """The reading tasks' tally of a read straight to the sort, once a job ran it:
        raises the InputError the polars engine would raise first (files in order)."""
        rows = [0] * len(self.paths)
        failed: dict[int, tuple[int, str]] = {}
        rejected, frames, carried = 0, [], True
        units = self.reads.value
        self.reads.value = {}  # the session keeps every accumulator: not its rows
        for number in sorted(units):
            unit = units[number]
            rows[unit.file] += unit.rows
            rejected += unit.rejected
            if unit.rejected_rows is None:
                carried = False
            elif unit.rejected:
                frames.append(unit.rejected_rows)
            if unit.fatal is not None and (unit.file not in failed
                                           or unit.fatal[0] < failed[unit.file][0]):
                failed[unit.file] = unit.fatal
            self.asked_beyond(unit.asked)
        if failed:
            raise InputError(failed[min(failed)][1])
        kept = pl.concat(frames, how="vertical_relaxed") if frames else pl.DataFrame()
        return StraightRead(rows, rejected, kept if carried else None)

    def asked_beyond(self, asked: dict[int, int]) -> None:
        """Note what tables a reading task asked beyond their ends (GROW), to grow them and
        read again; not after that read (a limit stopped them: those rows are rejected)."""
        if not self.regrown:
            for table, heap in asked.items():
                self.grow_to[table] = max(heap, self.grow_to.get(table, -1))

    def tally(self, norm: DataFrame, probed: dict[int, ParquetFile | str]
              ) -> tuple[dict[int, str], list[int]]:
        """The first error of each file that could not be read (the one at its lowest row,
        as a sequential read meets it), and the rows Spark's tasks read of every file,
        counted from the rows themselves as they left the tasks (READ rows; not the footers:
        the run reconciles these counts with what each file holds); also the rows rejected
        (`rejected_rows`). One job, which fills the cache of `norm`; it reads back only the
        tasks' few non-DATA rows (the cache skips its batches of DATA rows)."""
        stats = norm.filter(F.col("_kind") > DATA).select(
            "_kind", "_file", "_row", "_reason", *KEYS,
            F.col("nim_sum") if "nim_sum" in norm.columns else F.lit(None).alias("nim_sum")
        ).collect()
        rows = [0] * len(self.paths)
        failed: dict[int, tuple[int, str]] = {}
        self.rejected_rows = 0
        low, high, samples = [], [], []
        for r in stats:
            if r["_kind"] == READ:
                rows[r["_file"]] += r["_row"]
            elif r["_kind"] == REJECTED:
                self.rejected_rows += r["_row"]
            elif r["_kind"] == FATAL and (r["_file"] not in failed
                                          or r["_row"] < failed[r["_file"]][0]):
                failed[r["_file"]] = (r["_row"], r["_reason"])
            elif r["_kind"] in (LOW, HIGH, SAMPLE):
                {LOW: low, HIGH: high, SAMPLE: samples}[r["_kind"]].append(
                    (r["rule_set_id"], r["position_id"]))
            elif r["_kind"] == GROW:
                self.asked_beyond({r["nim_sum"]: r["_row"]})
        if low:  # integer keys, some valid
            self.key_stats = KeyStats(min(r for r, _ in low), max(r for r, _ in high),
                                      min(p for _, p in low), max(p for _, p in high),
                                      samples)
        return {file: why for file, (_, why) in failed.items()}, rows

    def read_units(self, files: list[ParquetFile], schema: T.StructType,
                   early: dict[str, Any]) -> DataFrame:
        """Parquet files the tasks read themselves (`row_groups_task`): a frame of unit
        numbers (`plan_units`, from the footers the driver read), one partition each, then
        coalesced to one partition per core: each task reads its units one after the other,
        and the stages after the read run a task per core, not one per unit (each task has
        a fixed cost)."""
        units = plan_units(files, self.slots())
        numbers = self.spark.range(0, len(units), 1, max(1, len(units)))
        rows = self.map(numbers, row_groups_task, schema, units=units,
                        sources={f.index: self.paths[f.index] for f in files},
                        files={f.index: f for f in files}, config=self.config, form=self.form,
                        index=self.index, **early)
        return rows.coalesce(self.slots())

    def slots(self) -> int:
        """The tasks the session runs at once (Spark Connect: its default parallelism, if
        the server says)."""
        if is_connect(self.spark):
            return int(self.spark.conf.get("spark.default.parallelism", None) or 8)
        return self.spark.sparkContext.defaultParallelism

    def _read_parquet(self, sources: list[Source]) -> DataFrame:
        """Spark's reader over these files (local paths, or objects through Spark's own
        connectors: `spark_urls`); a connector Spark lacks, or an object it cannot open, is
        one line naming the input."""
        urls = [hadoop_url(s) for s in sources]
        try:
            frame = self.spark.read.parquet(*[_hadoop_literal(u) for u in urls])
            frame.columns  # noqa: B018 - Spark Connect opens the files only when asked
            return frame
        except (PySparkException, Py4JJavaError) as exc:
            text = str(exc)
            named = next((s for s, u in zip(sources, urls) if u in text), sources[0])
            raise read_problem(self.spark, named, exc) from None

    def _probe(self, i: int) -> ParquetFile | str:
        """A Parquet file's column types (as the polars engine reads them) and the whole-file
        errors its normalising would raise, found on an empty frame of its schema, and the
        rows of each row group (an object's footer is read by range on the driver, never the
        whole object)."""
        path = self.paths[i]
        try:
            footer = parquet_footer(path, cache=self.read_cache)
            groups = footer.row_groups
            empty = pl.from_arrow(as_read(footer.schema, path).empty_table())
            assert isinstance(empty, pl.DataFrame)
            normalize.normalize_positions(empty, np.zeros(0, np.int64), str(path),
                                           self.config.columns, self.form, 0)
        except SnimError as exc:
            return str(exc)
        except (pa.ArrowException, OSError) as exc:
            return f"{path}: not a readable Parquet file ({first_line(exc)})"
        default_pid = self.form == "wide" and self.config.columns.position_id not in empty.columns
        return ParquetFile(i, str(path), dict(empty.schema), default_pid, groups)

    def number_rows(self, norm: DataFrame, rows: list[int]) -> DataFrame:
        """Shift default position ids (numbered from 0 in each file) by the earlier files'
        rows, as the polars engine numbers them across files."""
        if self.form != "wide":
            return norm
        defaults = [i for i, p in enumerate(self.paths)
                    if self.config.columns.position_id not in columns_of(
                        p, cache=self.read_cache)]
        if not defaults:
            return norm
        offsets = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)
        shift = F.element_at(F.array(*[F.lit(int(o)) for o in offsets]), F.col("_file") + 1)
        shifted = (F.col("position_id").cast(LONG) + shift).cast(
            norm.schema["position_id"].dataType)
        return norm.withColumn("position_id", F.when(F.col("_file").isin(defaults), shifted)
                               .otherwise(F.col("position_id")))

    def read_schema(self) -> tuple[T.StructType, dict[str, Any]]:
        """What the reading tasks emit (NORM_SCHEMA), and what they are given for it. Keys
        are Int64 already when the files' schemas decide it (`static_key_types`). Wide rows
        whose tables are all built before the read (presized from Parquet statistics:
        `TableCache.covers_input`) are evaluated in the same pass, as `evaluate_task` would:
        one Python pass over the rows instead of two, and no heaps kept in Spark."""
        types = self.static_key_types()
        fields = [(f.name, (types or {}).get(f.name, f.dataType)) for f in NORM_SCHEMA.fields]
        if self.form != "wide" or not self.cache.covers_input():
            return struct(*fields), {}
        wm = self.config.winning_moves
        tables = self.broadcast(self.cache.table_set())
        dropped = ("heaps", "table", *(("_rid_int", "_pid_int") if types else ()))
        return (struct(*[f for f in fields if f[0] not in dropped], *self.evaluated_fields()),
                {"tables": tables, "winning_moves": wm})

    def evaluated_fields(self) -> list[tuple[str, T.DataType]]:
        """The columns `evaluate_task` adds (the verdict and `_loc` follow from them)."""
        moves = [("move_heap", LONG), ("move_take", LONG)] if self.config.winning_moves else []
        return [("nim_sum", LONG), *moves]

    def static_key_types(self) -> dict[str, T.DataType] | None:
        """Int64 keys when every input is Parquet with key columns of a type that is always
        Int64 (`keys.always_integer`; a missing position_id numbers the rows): then no row
        can make a key text."""
        cols = self.config.columns
        if self.schemas is not None and all(
                keys.always_integer(f.dtypes[cols.rule_set_id])
                and (f.default_pid or keys.always_integer(f.dtypes[cols.position_id]))
                for f in self.schemas):
            return {"rule_set_id": LONG, "position_id": LONG}
        return None

    def key_types(self, rows: DataFrame) -> dict[str, T.DataType]:
        """The output type of each key (`keys.py`'s rule over every row of `rows`); a Spark
        job only when the files' schemas do not decide it (`static_key_types`)."""
        known = self.static_key_types()
        if known is not None:
            return known
        flags = rows.agg(F.bool_and("_rid_int").alias("r"),
                         F.bool_and("_pid_int").alias("p")).collect()[0]
        return {"rule_set_id": LONG if flags["r"] is not False else STRING,
                "position_id": LONG if flags["p"] is not False else STRING}


def _python_reads(source: Source) -> bool:
    """Can a Python task open this file (a local path, or an object the polars engine reads)?
    hdfs:// is reached only through Spark's JVM."""
    return not isinstance(source, Location) or source.scheme in ("s3", "gs", "az")
