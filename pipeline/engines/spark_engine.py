"""The Spark engine: the polars engine's per-batch steps, run per partition on a cluster.

Division of labour. Every row-level rule comes from `transforms` and `kernels`, run inside the
tasks by `spark_tasks`; Spark only moves rows, counts, joins, sorts and writes.

* Driver (the job skeleton, `pipeline.run`): rules, the rule index, the positions form and the
  SG tables (`pipeline.tables.TableCache`). Here, on the driver: a schema probe of each
  Parquet file, a Spark aggregation of the largest heap per table (the tables grow to it;
  skipped when Parquet statistics presized every table for any heap the files hold), and
  one broadcast of the `TableSet` (on Spark Connect, which has no broadcasts, it is pickled
  into the tasks' closures: `spark_connect`).
* Executors, per Arrow batch (`mapInArrow`): normalise, validate and attach exactly as the
  polars engine does, then `evaluate.evaluate` (wide) or `kernels.sg_per_heap` (long). Wide
  rows whose tables are ready before the read are evaluated in the reading pass itself.
* Shuffles only where all rows of a key must meet: the sort of the verdicts (wide: keys given
  twice are found next to each other in it, so finding duplicates costs no shuffle of its
  own; rows read in key order already, as sorted exports are, are not sorted again:
  `spark_ordering`), tainted positions and the per-position `bit_xor` (long), and the final
  sorts. Whole key groups that need polars logic (`split_duplicates`, `long_to_wide`) are
  hash-partitioned by key and handed to that logic one partition at a time.

Spark jobs are few on purpose: each action (a collect, a count, a cached frame's first use,
a write) is a job with a fixed cost, and one that reads the positions again costs as much as
the read. Key types that the files' schemas decide (integer Parquet columns) need no job.

Reading, and row numbers (`row` in rejects; the default `position_id`): `spark_reading`.
The verdicts' key order and duplicate keys: `spark_ordering`.

Outputs: `verdicts.parquet` and `rejects.parquet` are directories of Parquet part files written
by Spark, sorted across parts (read the directory with `pl.read_parquet` / `pl.scan_parquet`);
`sg_tables.parquet` and `summary.parquet` are single files written on the driver. Input paths
must be readable by the driver and every executor (local mode, or a shared file system); URLs
are found by the driver and read by the tasks (`hdfs://`: by Spark, `spark_hadoop`).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from pipeline import kernels, keys
from pipeline.config import Config, hidden_master
from pipeline.engines.base import PositionsJob
from pipeline.engines.spark_connect import connect_session, is_connect, lost_server
from pipeline.engines.spark_hadoop import hadoop_filesystems
from pipeline.engines.spark_ordering import (
    SparkOrdering,
    polars_frame,
    tallied_counts,
    verdict,
)
from pipeline.engines.spark_reading import pairs, struct
from pipeline.engines.spark_session import (
    SESSION_CONF,
    Session,
    failures_named,
    jobs_ended_on_failure,
    session,
)
from pipeline.engines.spark_tasks import (
    BOOL,
    KEYS,
    LONG,
    REJECT_SCHEMA,
    STRING,
    attach_task,
    beyond_task,
    evaluate_task,
    moves_task,
    reject_task,
    sg_task,
    taint_task,
    verdict_task,
)
from pipeline.errors import WriteFailure
from pipeline.events import RunEvent
from pipeline.io.outputs.commit import ZSTD_LEVEL
from pipeline.io.outputs.failures import storage_failure, writing
from pipeline.io.store import object_store
from pipeline.io.store.locations import Location
from pipeline.transforms import outputs
from pipeline.transforms.ordering import LOC_SHIFT
from pipeline.transforms.schema import input_column_names

log = logging.getLogger(__name__)


@dataclass
class _Job(SparkOrdering):
    """The evaluation of one run's positions on Spark: tables, verdicts (their duplicates
    and order: `spark_ordering`), long form, the write."""

    # -- tables --

    def largest(self, valid: DataFrame, by_file: bool) -> list[np.ndarray]:
        """The largest heap each table is asked about (-1: none), per file or overall."""
        group = ["_file", "table"] if by_file else ["table"]
        found = valid.groupBy(*group).agg(F.max(F.array_max("heaps")).alias("m")).collect()
        out = [np.full(len(self.cache.distinct), -1, np.int64)
               for _ in (self.paths if by_file else [None])]
        for r in found:
            if r["m"] is not None:
                out[r["_file"] if by_file else 0][r["table"]] = r["m"]
        return out

    def tables(self, valid: DataFrame, by_file: bool) -> Any:
        """Grow the tables as the polars engine does (there batch by batch, here file by file:
        the same for files of up to batches.BATCH_ROWS rows), then broadcast them once. Tables
        presized from Parquet statistics to cover every heap need no look at the rows (a
        Spark job fewer)."""
        return self.broadcast(self.cache.grown_for(lambda: self.largest(valid, by_file)))

    # -- wide form --

    def wide(self, norm: DataFrame) -> tuple[DataFrame, DataFrame]:
        wm = self.config.winning_moves
        moves = [("move_heap", LONG), ("move_take", LONG)] if wm else []
        if "nim_sum" in norm.columns:  # evaluated as it was read (read_schema)
            evaluated = norm
        else:
            norm = norm.drop("_rid_int", "_pid_int")
            tables = self.tables(norm.filter(F.col("_reason").isNull()), by_file=True)
            evaluated = self.persist(self.map(
                norm, evaluate_task, struct(*pairs(norm.schema, ("heaps",)),
                                              *self.evaluated_fields(), ("_rid_int", BOOL),
                                              ("_pid_int", BOOL)),
                tables=tables, winning_moves=wm))
        valid = evaluated.filter(F.col("_reason").isNull())
        types = self.key_types(valid)
        verdicts = valid.select(
            *[F.col(k).cast(types[k]) for k in KEYS], "nim_sum", verdict().alias("verdict"),
            *[m for m, _ in moves],
            (F.col("_file").cast(LONG) * (1 << LOC_SHIFT) + F.col("_row")).alias("_loc"))
        if "nim_sum" in norm.columns and (self.rejected_rows == 0 or self.reads is not None):
            # none rejected by the reading tasks' tally, or not known yet (`straight`)
            return self.duplicates(verdicts, None, types)
        rejected = self.map(evaluated.filter(F.col("_reason").isNotNull()), reject_task,
                            REJECT_SCHEMA)
        return self.duplicates(verdicts, rejected, types)

    # -- long form --

    def long(self, norm: DataFrame) -> tuple[DataFrame, DataFrame]:
        wm = self.config.winning_moves
        types = self.key_types(norm)
        rows = norm.select("_file", "_source", "_row", *[F.col(k).cast(types[k]) for k in KEYS],
                           "heaps", "_column", "_reason", "table")
        bad = rows.filter(F.col("_reason").isNotNull())
        good = rows.filter(F.col("_reason").isNull())
        rejects = []
        tainted = self.persist(bad.select(*KEYS).distinct())
        if not tainted.isEmpty():  # positions with a bad row: rejected whole
            whole = bad.unionByName(good.join(tainted, KEYS, "left_semi"))
            rejects.append(self.map(self.by_key(whole), taint_task, REJECT_SCHEMA))
            good = good.join(tainted, KEYS, "left_anti")
        attached = self.persist(self.map(good, attach_task, rows.schema, index=self.index))
        rejects.append(self.map(attached.filter(F.col("_reason").isNotNull()), reject_task,
                                REJECT_SCHEMA))
        valid = attached.filter(F.col("_reason").isNull())
        presized = self.cache.covers_input()
        tables = self.tables(valid, by_file=False)
        positions = self.persist(self.nim_sums(valid, tables))
        beyond = positions.filter(F.col("_min_sg") == kernels.BEYOND_TABLE).select(*KEYS)
        if presized and not beyond.isEmpty():  # footers' statistics that understate the heaps
            log.info("positions: heaps beyond the tables the footers' statistics sized; "
                     "growing the tables")
            for largest in self.largest(valid, by_file=False):
                self.cache.ensure(largest)
            tables = self.broadcast(self.cache.table_set())
            self.release(positions)
            positions = self.persist(self.nim_sums(valid, tables))
            beyond = positions.filter(F.col("_min_sg") == kernels.BEYOND_TABLE).select(*KEYS)
        if not beyond.isEmpty():  # a heap beyond an unproven table: rejected whole
            rows_beyond = self.by_key(valid.join(beyond, KEYS, "left_semi"))
            rejects.append(self.map(rows_beyond, beyond_task, REJECT_SCHEMA, tables=tables,
                                    index=self.index, winning_moves=wm))
        ok = positions.filter(F.col("_min_sg") != kernels.BEYOND_TABLE)
        if wm:
            verdicts = self.map(ok.select(*KEYS, "heaps", "table"), moves_task,
                                struct(*[(k, types[k]) for k in KEYS], ("nim_sum", LONG),
                                        ("verdict", STRING), ("move_heap", LONG),
                                        ("move_take", LONG)),
                                tables=tables)
        else:
            verdicts = self.map(ok.select(*KEYS, "nim_sum"), verdict_task,
                                struct(*[(k, types[k]) for k in KEYS], ("nim_sum", LONG),
                                        ("verdict", STRING)))
        return verdicts, functools.reduce(DataFrame.unionByName, rejects)

    def nim_sums(self, valid: DataFrame, tables: Any) -> DataFrame:
        """Long form: each position's nim_sum, smallest SG value (BEYOND_TABLE: a heap
        beyond its table), table and, with winning moves, heaps in input order."""
        with_sg = self.map(valid, sg_task, struct(*pairs(valid.schema), ("heap", LONG),
                                                    ("_sg", LONG)), tables=tables)
        aggregates = [F.bit_xor("_sg").alias("nim_sum"), F.min("_sg").alias("_min_sg"),
                      F.max("table").alias("table")]
        if self.config.winning_moves:  # heaps in input order, for the winning move
            cells = F.array_sort(F.collect_list(F.struct("_file", "_row", "heap")))
            aggregates.append(F.transform(cells, lambda c: c["heap"]).alias("heaps"))
        return with_sg.groupBy(*KEYS).agg(*aggregates)

    # -- the whole evaluation --

    def evaluated(self, target: Path, on_read: Callable[[list[int]], None]
                  ) -> tuple[DataFrame, DataFrame, list[int], pl.DataFrame | None]:
        """Verdicts and rejects of the positions, the rows of each file (given to `on_read`
        once known), and the W/L per rule set of verdicts already written to `target` (None:
        not yet written). Rows read straight to the sort (`read`) are written as they are
        sorted; if they need the cached path after all (`straight`), they are read again."""
        norm, rows = self.read()
        if rows is None:
            done = self.straight(norm, target)
            if done is not None:
                on_read(done[2])
                return done
            norm, rows = self.read(straight=False)
        on_read(rows)
        norm = self.number_rows(norm, rows)
        verdicts, rejects = self.wide(norm) if self.form == "wide" else self.long(norm)
        written = None
        if self.write_tally is not None:
            written = self.write_tallied(verdicts, target)
            if written is None:
                verdicts, rejects = self.untallied()
        return verdicts, rejects, rows, written

    def straight(self, norm: DataFrame, target: Path
                 ) -> tuple[DataFrame, DataFrame, list[int], pl.DataFrame] | None:
        """Rows read straight to the sort, evaluated, sorted, tallied and written to `target`
        in one job. None, with nothing left at `target` and the read's state reset, if they
        need the cached path: a key given twice, more rejected rows than the reading tasks
        carry, a rejected row with a verdict's key (`split_duplicates` takes both), or a
        heap beyond the tables built before the read (`SparkWork.read` grows them)."""
        verdicts, rejects = self.wide(norm)
        written = self.write_tallied(verdicts, target)
        read = self.straight_read()
        if written is not None and read.rejected_rows is not None and not self.grow_to:
            if not read.rejected:
                return verdicts, rejects, read.rows, written
            rejected = outputs.reject_rows(read.rejected_rows, "positions")
            if not self.has_verdict_keys(rejected, target):
                self.rejected_rows, self.none_rejected = read.rejected, False
                return verdicts, spark_rejects(self.spark, rejected), read.rows, written
        log.info("positions: %s; reading them again, cached",
                 "a key given twice, or out of order" if written is None
                 else "heaps beyond the tables" if self.grow_to
                 else "more rejected rows than the tasks carry" if read.rejected_rows is None
                 else "a rejected row has a verdict's key")
        if target.exists():
            shutil.rmtree(target)
        self.reads = self.key_stats = self.write_tally = self.deferred = None
        self.verdicts_sorted = self.none_rejected = False
        return None

    def has_verdict_keys(self, rejected: pl.DataFrame, target: Path) -> bool:
        """Does a rejected row (rejects schema) have the key of a verdict written to
        `target`? Its key is cast as `split_duplicates` casts it (integer keys)."""
        casted = rejected.select(keys.rejected_key_as(k, pl.Int64).alias(k)
                                 for k in KEYS).drop_nulls().unique()
        if casted.is_empty():
            return False
        wanted = self.spark.createDataFrame(casted.to_arrow(),
                                            struct(*[(k, LONG) for k in KEYS]))
        written = self.spark.read.parquet(str(target)).select(*KEYS)
        return not written.join(wanted, KEYS, "left_semi").isEmpty()

    # -- output --

    def write_tallied(self, verdicts: DataFrame, target: Path) -> pl.DataFrame | None:
        """Write verdicts that `tally_task` tallies on their way (`duplicates`): their W/L
        per rule set, or None, with nothing left at `target`, if they hold a key twice."""
        self.write(verdicts, target)
        counts = tallied_counts(self.write_tally.value, {k: verdicts.schema[k].dataType
                                                   for k in KEYS})
        self.write_tally.value = {}  # the session keeps every accumulator: not the tallies
        if counts is None:
            log.info("verdicts: a key is given more than once (or out of order); splitting "
                     "the duplicates off")
            shutil.rmtree(target)
        return counts

    @staticmethod
    def write(df: DataFrame, target: Path) -> None:
        """A Parquet directory that polars reads as one table: part files only (Spark's
        _SUCCESS marker and .crc checksums would break a directory scan)."""
        try:
            df.write.option("compression", "zstd").option(
                "parquet.compression.codec.zstd.level", str(ZSTD_LEVEL)).parquet(str(target))
        except Exception as exc:  # the write runs the job: only storage errors are ours here
            failure = storage_failure(target.name, exc) or _unwritable(target.name, exc)
            if failure is None:
                raise
            raise failure from None
        with writing(target.name):
            for name in os.listdir(target):
                if not name.startswith("part-"):
                    os.remove(target / name)


def _unwritable(name: str, exc: BaseException) -> WriteFailure | None:
    """A write whose directories Spark (its executors, a Connect server: other processes,
    maybe on other machines, than the one that made the staging directory) could not make,
    as one line naming the output file and the directory; None for other failures."""
    found = re.search(r"Mkdirs failed to create (\S+)|Parent path is not a directory: (\S+)",
                      str(exc))
    if found is None:
        return None
    cause = (f"Spark could not create {found[1] or found[2] + '/...'} (its executors, or a "
             "Spark Connect server, must be able to write --out at the same path)")
    return WriteFailure(f"{name}: {cause} while writing it", f"writing {name}", cause, False,
                        path=name)


def spark_rejects(spark: SparkSession, rejects: pl.DataFrame) -> DataFrame:
    """Rejected rows the driver holds (the rejects schema) as a Spark frame of REJECT_SCHEMA."""
    arrow = rejects.select(REJECT_SCHEMA.fieldNames()).to_arrow()
    return spark.createDataFrame(arrow.cast(to_arrow_schema(REJECT_SCHEMA)), REJECT_SCHEMA)


def _where(spark: SparkSession) -> str:
    """The master a session runs on, or the Spark Connect server it talks to."""
    if is_connect(spark):
        return f"{hidden_master(spark.conf.get('spark.master') or '')} (through Spark Connect)"
    return hidden_master(spark.sparkContext.master)


def _input_column_names(config: Config, form: str) -> Any:
    """The rejects' `column` renamed as `schema.with_input_column_names` renames it."""
    renamed = F.col("column")
    for canonical, name in input_column_names(config.columns, form).items():
        renamed = F.when(F.col("column") == canonical, F.lit(name)).otherwise(renamed)
    return renamed


class SparkEngine:
    """Positions evaluated by Spark: in a session snim-batch starts (`spark.master`, or the
    one spark-submit made), which it stops after the write."""

    name = "spark"
    keeps_whole_objects = False  # the driver fetches no object whole: the tasks read the rows
    _early: Session | None = None  # the session open_inputs started (and stops)

    @contextmanager
    def open_inputs(self, config: Config) -> Iterator[None]:
        """For hdfs:// positions, the session starts before they are looked for: the driver
        finds and probes them through its JVM (`spark_hadoop`); it lasts the run."""
        location = Location.parse(config.positions, Path.cwd())
        if location.scheme != "hdfs":
            yield
            return
        if config.spark.remote:  # no JVM in this process
            raise object_store.hdfs_refused(location)
        run = session(config.spark.master, dict(config.spark.conf),
                      quiet_jvm=not log.isEnabledFor(logging.DEBUG))
        with run.held():
            try:
                with failures_named(run), object_store.through_hadoop(
                        hadoop_filesystems(run.spark)):
                    self._early = run
                    yield
            finally:
                self._early = None

    @contextmanager
    def evaluate(self, job: PositionsJob) -> Iterator[SparkEvaluation]:
        config = job.config
        if self._early is not None:  # open_inputs started it, and stops it
            run = replace(self._early, owned=False)
        elif config.spark.remote:
            settings = {**SESSION_CONF, **config.spark.conf}
            run = Session(connect_session(config.spark.remote, settings), owned=True,
                          local=False, driver_memory=None)
        else:
            run = session(config.spark.master, dict(config.spark.conf),
                          quiet_jvm=not log.isEnabledFor(logging.DEBUG))
        spark = run.spark
        work = _Job(spark, config, job.paths, job.form, job.index, job.cache, run,
                    read_cache=job.read_cache)
        with run.held():
            try:
                with failures_named(run), lost_server(config.spark.remote), \
                        jobs_ended_on_failure(spark):
                    job.on_event(RunEvent.note(f"positions: Spark {spark.version} at "
                                               f"{_where(spark)}", "positions"))
                    def on_read(rows: list[int]) -> None:
                        job.on_event(RunEvent.progress(
                            "positions", sum(rows), sum(rows),
                            f"positions: {sum(rows):,} rows read ({len(job.paths)} files)"))

                    verdicts, rejects, rows_per_file, written = work.evaluated(
                        job.staging / "verdicts.parquet", on_read)
                    rejects = rejects.withColumn("column",
                                                 _input_column_names(config, job.form))
                    if not work.verdicts_sorted:
                        verdicts = work.persist(verdicts)
                    yield SparkEvaluation(work, verdicts, work.persist(rejects),
                                          rows_per_file, written)
                    work.close()
            except BaseException:
                if not run.owned:  # a session that lives on: free what it cached
                    try:
                        work.close()
                    except Exception as exc:  # noqa: BLE001 - the run's own error is raised
                        log.debug("freeing Spark's cached frames: %s", exc)
                raise


@dataclass
class SparkEvaluation:
    """Verdicts (or, once written, their counts) and the positions' rejects as Spark frames;
    counts come back to the driver as one row per rule set."""

    work: _Job
    verdicts: DataFrame
    rejects: DataFrame
    rows_per_file: list[int]
    """Each file's rows as Spark's tasks read them (hdfs:// files have no count of their
    own to reconcile them with: Spark's is the only one)."""
    written: pl.DataFrame | None = None
    """W and L per rule set of verdicts already written to the staging directory (as they
    were tallied: `write_tallied`); None: `write` writes them."""
    _counts: tuple[pl.DataFrame, pl.DataFrame, int] | None = field(default=None, repr=False)

    @property
    def _none_rejected(self) -> bool:
        """No position row is rejected, known without a job: none was as read, and the
        verdicts were written tallied, with no key given twice."""
        return self.written is not None and self.work.none_rejected

    def _count(self) -> tuple[pl.DataFrame, pl.DataFrame, int]:
        if self._counts is None and self._none_rejected:
            assert self.written is not None
            no_rows = pl.DataFrame(schema={"rule_set_id": pl.String, "rejected": pl.Int64})
            self._counts = (self.written.cast({"W": pl.Int64, "L": pl.Int64}), no_rows, 0)
        if self._counts is None:
            verdicts = self.written if self.written is not None else polars_frame(
                self.verdicts.groupBy("rule_set_id").agg(
                    F.count_if(F.col("verdict") == "W").alias("W"),
                    F.count_if(F.col("verdict") == "L").alias("L")))
            rejected = polars_frame(self.rejects.groupBy("rule_set_id").agg(
                F.count(F.lit(1)).alias("rejected")))
            self._counts = (verdicts.cast({"W": pl.Int64, "L": pl.Int64}),
                            rejected.filter(pl.col("rule_set_id").is_not_null())
                            .cast({"rejected": pl.Int64}),
                            int(rejected["rejected"].sum()))
        return self._counts

    @property
    def rows_read(self) -> int:
        return sum(self.rows_per_file)

    @property
    def rows_rejected(self) -> int:
        return self._count()[2]

    def counts(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        verdicts, rejected, _ = self._count()
        return verdicts, rejected

    def _with_rules(self, rule_rejects: pl.DataFrame) -> DataFrame:
        rules = spark_rejects(self.work.spark, rule_rejects)
        return (rules.unionByName(self.rejects)
                .orderBy(F.col("table").desc(), F.col("source"), F.col("row")))

    def first_rejects(self, rule_rejects: pl.DataFrame, n: int) -> pl.DataFrame:
        if self._none_rejected and rule_rejects.is_empty():
            return rule_rejects
        return polars_frame(self._with_rules(rule_rejects).limit(n))

    def write(self, rule_rejects: pl.DataFrame, staging: Path) -> None:
        if self.written is None:
            ordered = (self.verdicts if self.work.verdicts_sorted
                       else self.verdicts.orderBy(*KEYS))
            self.work.write(ordered, staging / "verdicts.parquet")
        self.work.write(self._with_rules(rule_rejects), staging / "rejects.parquet")
