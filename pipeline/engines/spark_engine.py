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
  `key_ordered`), tainted positions and the per-position `bit_xor` (long), and the final
  sorts. Whole key groups that need polars logic (`split_duplicates`, `long_to_wide`) are
  hash-partitioned by key and handed to that logic one partition at a time.

Spark jobs are few on purpose: each action (a collect, a count, a cached frame's first use,
a write) is a job with a fixed cost, and one that reads the positions again costs as much as
the read. Key types that the files' schemas decide (integer Parquet columns) need no job.

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException, PythonException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from pipeline import kernels
from pipeline.config import Config
from pipeline.engines import PositionsJob
from pipeline.engines.spark_connect import connect_session, is_connect, lost_server, ship
from pipeline.engines.spark_hadoop import hadoop_filesystems
from pipeline.engines.spark_session import (
    SESSION_CONF,
    Session,
    failure,
    failures_named,
    session,
)
from pipeline.engines.spark_tasks import (
    BOOL,
    DATA,
    FATAL,
    INT,
    KEYS,
    LONG,
    NORM_SCHEMA,
    PATH,
    REJECT_SCHEMA,
    ROW,
    STRING,
    SUMMARY,
    Batches,
    ParquetFile,
    attach_task,
    beyond_task,
    cast_keys_task,
    csv_task,
    evaluate_task,
    moves_task,
    order_task,
    parquet_task,
    plan_units,
    real_path,
    reject_task,
    repeated_task,
    row_groups_task,
    sg_task,
    split_task,
    taint_task,
    verdict_task,
)
from pipeline.engines.spark_urls import hadoop_url, read_problem
from pipeline.errors import InputError, SnimError, UsageError, first_line
from pipeline.io import object_store
from pipeline.io.commit import ZSTD_LEVEL
from pipeline.io.failures import storage_failure, writing
from pipeline.io.inputs import Source, format_of
from pipeline.io.locations import Location
from pipeline.io.readers import columns_of, parquet_source
from pipeline.tables import TableCache
from pipeline.transforms import normalize
from pipeline.transforms.ordering import LOC_SHIFT
from pipeline.transforms.schema import input_column_names

log = logging.getLogger(__name__)
ORDER_PROBE_ROWS = 1 << 16  # first verdict rows that must be in key order for a full check
def _hadoop_literal(path: str) -> str:
    """`path` with the characters Hadoop's glob expands escaped: the input files are already
    resolved, and Spark would read `pos[1].parquet` as pos1.parquet (turning globbing off
    with its `__globPaths__` option still read such files more than once)."""
    return re.sub(r"([\\\[\]{}*?])", r"\\\1", path)


def _schema(*fields: tuple[str, T.DataType]) -> T.StructType:
    return T.StructType([T.StructField(name, dtype) for name, dtype in fields])


def _pairs(schema: T.StructType, drop: tuple[str, ...] = ()) -> list[tuple[str, T.DataType]]:
    return [(f.name, f.dataType) for f in schema.fields if f.name not in drop]


def _nulls(schema: T.StructType, drop: tuple[str, ...] = ()) -> list[Any]:
    return [F.lit(None).cast(f.dataType).alias(f.name) for f in schema.fields
            if f.name not in drop]


@dataclass
class _Job:
    spark: SparkSession
    config: Config
    paths: list[Source]
    form: str
    index: pl.DataFrame
    cache: TableCache
    run: Session | None = None
    cached: list[DataFrame] = field(default_factory=list)
    broadcasts: list[Any] = field(default_factory=list)
    schemas: list[ParquetFile] | None = None  # every file's, when all are Parquet (read)
    verdicts_sorted: bool = False  # the verdicts are a cached frame in key order already

    # -- plumbing --

    def map(self, df: DataFrame, task: Callable[..., Batches], schema: T.StructType,
            **kwargs: Any) -> DataFrame:
        return df.mapInArrow(functools.partial(task, schema=schema, **kwargs), schema)

    def persist(self, df: DataFrame) -> DataFrame:
        self.cached.append(df.persist())
        return df

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

    def read(self) -> tuple[DataFrame, list[int]]:
        """Normalised rows of every positions file (NORM_SCHEMA) and the rows of each file.

        Raises the InputError the polars engine would raise first (files in order)."""
        formats = [format_of(p) for p in self.paths]
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
        return norm.filter(F.col("_kind") == DATA).drop("_kind"), rows

    def tally(self, norm: DataFrame, probed: dict[int, ParquetFile | str]
              ) -> tuple[dict[int, str], list[int]]:
        """The first error of each file that could not be read (the one at its lowest row,
        as a sequential read meets it), and the rows of every file: from the footers when all
        are Parquet (one pass over the FATAL rows, no shuffle), else counted by Spark. This
        job fills the cache of `norm`."""
        fatal = F.col("_kind") == FATAL
        if len(probed) == len(self.paths):
            found = norm.filter(fatal).select("_file", "_row", "_reason").collect()
            failed: dict[int, str] = {}
            for r in sorted(found, key=lambda r: (r["_file"], r["_row"]), reverse=True):
                failed[r["_file"]] = r["_reason"]
            rows = [sum(f.row_groups) if isinstance(f := probed[i], ParquetFile) else 0
                    for i in range(len(self.paths))]
            return failed, rows
        # min_by hashes (first() would sort every row); DATA rows give it only nulls to skip
        why = F.min_by(F.when(fatal, F.col("_reason")), F.when(fatal, F.col("_row")))
        stats = norm.groupBy("_file", "_kind").agg(F.count(F.lit(1)).alias("n"),
                                                   why.alias("why")).collect()
        rows = [0] * len(self.paths)
        for r in stats:
            rows[r["_file"]] = r["n"]
        return {r["_file"]: r["why"] for r in stats if r["_kind"] == FATAL}, rows

    def read_units(self, files: list[ParquetFile], schema: T.StructType,
                   early: dict[str, Any]) -> DataFrame:
        """Parquet files the tasks read themselves (`row_groups_task`): a frame of unit
        numbers (`plan_units`, from the footers the driver read), one partition each, then
        coalesced to one partition per core: each task reads its units one after the other,
        and the stages after the read run a task per core, not one per unit (about 1.5 s
        less on m_int, local[2])."""
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
            with pq.ParquetFile(parquet_source(path)) as footer:
                meta = footer.metadata
                groups = tuple(meta.row_group(g).num_rows for g in range(meta.num_row_groups))
                empty = pl.from_arrow(footer.schema_arrow.empty_table())
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
                    if self.config.columns.position_id not in columns_of(p)]
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
            return _schema(*fields), {}
        wm = self.config.winning_moves
        tables = self.broadcast(self.cache.table_set())
        dropped = ("heaps", "table", *(("_rid_int", "_pid_int") if types else ()))
        return (_schema(*[f for f in fields if f[0] not in dropped], *self.evaluated_fields()),
                {"tables": tables, "winning_moves": wm})

    def evaluated_fields(self) -> list[tuple[str, T.DataType]]:
        """The columns `evaluate_task` adds (the verdict and `_loc` follow from them)."""
        moves = [("move_heap", LONG), ("move_take", LONG)] if self.config.winning_moves else []
        return [("nim_sum", LONG), *moves]

    def static_key_types(self) -> dict[str, T.DataType] | None:
        """Int64 keys when every input is Parquet with integer key columns (a missing
        position_id numbers the rows): then no row can make a key text."""
        cols = self.config.columns
        if self.schemas is not None and all(
                f.dtypes[cols.rule_set_id].is_integer()
                and (f.default_pid or f.dtypes[cols.position_id].is_integer())
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
        if not self.cache.covers_input():
            for need in self.largest(valid, by_file):
                self.cache.ensure(need)
        return self.broadcast(self.cache.table_set())

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
                norm, evaluate_task, _schema(*_pairs(norm.schema, ("heaps",)),
                                              *self.evaluated_fields(), ("_rid_int", BOOL),
                                              ("_pid_int", BOOL)),
                tables=tables, winning_moves=wm))
        valid = evaluated.filter(F.col("_reason").isNull())
        types = self.key_types(valid)
        verdicts = valid.select(
            *[F.col(k).cast(types[k]) for k in KEYS], "nim_sum", _verdict().alias("verdict"),
            *[m for m, _ in moves],
            (F.col("_file").cast(LONG) * (1 << LOC_SHIFT) + F.col("_row")).alias("_loc"))
        rejected = self.map(evaluated.filter(F.col("_reason").isNotNull()), reject_task,
                            REJECT_SCHEMA)
        return self.duplicates(verdicts, rejected, types)

    def duplicates(self, verdicts: DataFrame, rejected: DataFrame,
                   types: dict[str, T.DataType]) -> tuple[DataFrame, DataFrame]:
        """`ordering.split_duplicates`, run on the key groups that can hold duplicates (a
        key twice among the verdicts, or also among the rejected rows): the other verdict
        rows do not move."""
        casted = self.map(
            rejected.filter(F.col("rule_set_id").isNotNull() & F.col("position_id").isNotNull()),
            cast_keys_task,
            _schema(*_pairs(REJECT_SCHEMA), *[(f"_k_{k}", types[k]) for k in KEYS]),
            dtypes={k: pl.Int64 if t == LONG else pl.String for k, t in types.items()})
        casted = casted.filter(F.col("_k_rule_set_id").isNotNull()
                               & F.col("_k_position_id").isNotNull())
        also = self.persist(casted.select(*[F.col(f"_k_{k}").alias(k) for k in KEYS])
                            .distinct())
        key_schema = _schema(*[(k, types[k]) for k in KEYS])
        ordered, suspects = self.key_ordered(verdicts.drop("_loc", "verdict"), key_schema)
        if not also.isEmpty():  # rare: a rejected row's key, which a verdict may also have
            suspects = suspects.unionByName(also.join(ordered.select(*KEYS), KEYS, "left_semi"))
        suspects = self.persist(suspects)
        columns = [c for c in verdicts.columns]
        if suspects.isEmpty():  # the usual case: the verdicts are sorted already
            self.verdicts_sorted = True
            return ordered.select(*[_verdict().alias(c) if c == "verdict" else c
                                    for c in columns if c != "_loc"]), rejected
        verdict_side = verdicts.join(suspects, KEYS, "left_semi").select(
            F.lit(0).alias("_side"), *columns,
            *_nulls(REJECT_SCHEMA, drop=tuple(KEYS)),
            *[F.lit(None).cast(STRING).alias(f"_r_{k}") for k in KEYS])
        reject_side = casted.join(
            suspects.select(*[F.col(k).alias(f"_k_{k}") for k in KEYS]),
            [f"_k_{k}" for k in KEYS], "left_semi").select(
            F.lit(1).alias("_side"), *[F.col(f"_k_{k}").alias(k) for k in KEYS],
            *_nulls(verdicts.schema, drop=tuple(KEYS)),
            *[F.col(f.name) for f in REJECT_SCHEMA.fields if f.name not in KEYS],
            *[F.col(k).alias(f"_r_{k}") for k in KEYS])
        groups = self.persist(self.by_key(verdict_side.unionByName(reject_side)))
        kwargs = {"sources": [str(p) for p in self.paths], "columns": columns}
        clean = self.map(groups, split_task, _schema(*_pairs(verdicts.schema, ("_loc",))),
                         keep="clean", **kwargs)
        dups = self.map(groups, split_task, REJECT_SCHEMA, keep="duplicates", **kwargs)
        kept = verdicts.join(suspects, KEYS, "left_anti").drop("_loc")
        return kept.unionByName(clean), rejected.unionByName(dups)

    def key_ordered(self, verdicts: DataFrame, key_schema: T.StructType
                    ) -> tuple[DataFrame, DataFrame]:
        """(`verdicts` in key order, every key they hold more than once). Rows that come in
        key order already (sorted exports, read in file order) keep their partitions: one
        pass over the cached keys tells, and finds the repeated keys, so the sort (a
        sampling job, a shuffle of every row and a cache) is skipped; any other input is
        sorted, and its repeated keys are found next to each other in the sorted frame.
        The first rows (`ORDER_PROBE_ROWS`, on the driver) decide whether that pass is worth
        making: most input is not in key order, and the pass costs a third of the sort."""
        head = _polars(verdicts.select(*KEYS).limit(ORDER_PROBE_ROWS))
        if head.equals(head.sort(KEYS, maintain_order=True)):
            in_order = self.in_key_order(verdicts, key_schema)
            if in_order is not None:
                return verdicts, in_order
        else:
            log.info("verdicts: not in key order (the first rows); sorting them")
        ordered = self.persist(self.sorted(verdicts, {f.name: f.dataType
                                                      for f in key_schema.fields}))
        return ordered, self.map(ordered.select(*KEYS), repeated_task, key_schema)

    def in_key_order(self, verdicts: DataFrame, key_schema: T.StructType
                     ) -> DataFrame | None:
        """The keys `verdicts` hold more than once, if its partitions are each in key order
        and in order among themselves (`order_task`, one pass); None if they are not."""
        checked = self.persist(self.map(
            verdicts.select(F.spark_partition_id().alias("_part"), *KEYS), order_task,
            _schema(("_kind", INT), ("_part", INT), ("_sorted", BOOL), *_pairs(key_schema),
                    *[(f"_last_{f.name}", f.dataType) for f in key_schema.fields])))
        parts = sorted(checked.filter(F.col("_kind") == SUMMARY).drop("_kind").collect())
        bounds = [((p["rule_set_id"], p["position_id"]),
                   (p["_last_rule_set_id"], p["_last_position_id"])) for p in parts]
        if all(p["_sorted"] for p in parts) and all(
                bounds[i][1] <= bounds[i + 1][0] for i in range(len(bounds) - 1)):
            log.info("verdicts: in key order as read (%d partitions); no sort", len(parts))
            repeated = checked.filter(F.col("_kind") == DATA).select(*KEYS)
            across = [bounds[i][1] for i in range(len(bounds) - 1)
                      if bounds[i][1] == bounds[i + 1][0]]
            if across:  # a key that ends one partition and starts the next
                repeated = repeated.unionByName(self.spark.createDataFrame(across, key_schema))
            return repeated
        return None

    def sorted(self, verdicts: DataFrame, types: dict[str, T.DataType]) -> DataFrame:
        """`verdicts` in key order. Integer keys whose ranges allow it are sorted on one long,
        (rule_set_id - min) * span + (position_id - min), which orders them as the two keys
        do: Spark then sorts by radix on that long alone, where two keys that share their
        first value (most rows share a rule set) would be compared row against row."""
        if any(types[k] != LONG for k in KEYS):
            return verdicts.orderBy(*KEYS)
        lo_r, hi_r, lo_p, hi_p = verdicts.agg(
            F.min("rule_set_id"), F.max("rule_set_id"), F.min("position_id"),
            F.max("position_id")).collect()[0]
        if lo_r is None or (hi_r - lo_r + 1) * (hi_p - lo_p + 1) >= 1 << 63:
            return verdicts.orderBy(*KEYS)
        order = ((F.col("rule_set_id") - F.lit(lo_r)) * F.lit(hi_p - lo_p + 1)
                 + (F.col("position_id") - F.lit(lo_p)))
        return verdicts.orderBy(order)

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
        tables = self.tables(valid, by_file=False)
        with_sg = self.map(valid, sg_task, _schema(*_pairs(rows.schema), ("heap", LONG),
                                                    ("_sg", LONG)), tables=tables)
        aggregates = [F.bit_xor("_sg").alias("nim_sum"), F.min("_sg").alias("_min_sg"),
                      F.max("table").alias("table")]
        if wm:  # heaps in input order, for the winning move
            cells = F.array_sort(F.collect_list(F.struct("_file", "_row", "heap")))
            aggregates.append(F.transform(cells, lambda c: c["heap"]).alias("heaps"))
        positions = self.persist(with_sg.groupBy(*KEYS).agg(*aggregates))
        beyond = positions.filter(F.col("_min_sg") == kernels.BEYOND_TABLE).select(*KEYS)
        if not beyond.isEmpty():  # a heap beyond an unproven table: rejected whole
            rows_beyond = self.by_key(valid.join(beyond, KEYS, "left_semi"))
            rejects.append(self.map(rows_beyond, beyond_task, REJECT_SCHEMA, tables=tables,
                                    index=self.index, winning_moves=wm))
        ok = positions.filter(F.col("_min_sg") != kernels.BEYOND_TABLE)
        if wm:
            verdicts = self.map(ok.select(*KEYS, "heaps", "table"), moves_task,
                                _schema(*[(k, types[k]) for k in KEYS], ("nim_sum", LONG),
                                        ("verdict", STRING), ("move_heap", LONG),
                                        ("move_take", LONG)),
                                tables=tables)
        else:
            verdicts = self.map(ok.select(*KEYS, "nim_sum"), verdict_task,
                                _schema(*[(k, types[k]) for k in KEYS], ("nim_sum", LONG),
                                        ("verdict", STRING)))
        return verdicts, functools.reduce(DataFrame.unionByName, rejects)

    # -- output --

    @staticmethod
    def write(df: DataFrame, target: Path) -> None:
        """A Parquet directory that polars reads as one table: part files only (Spark's
        _SUCCESS marker and .crc checksums would break a directory scan)."""
        try:
            df.write.option("compression", "zstd").option(
                "parquet.compression.codec.zstd.level", str(ZSTD_LEVEL)).parquet(str(target))
        except Exception as exc:  # the write runs the job: only storage errors are ours here
            failure = storage_failure(target.name, exc)
            if failure is None:
                raise
            raise failure from None
        with writing(target.name):
            for name in os.listdir(target):
                if not name.startswith("part-"):
                    os.remove(target / name)


def _python_reads(source: Source) -> bool:
    """Can a Python task open this file (a local path, or an object the polars engine reads)?
    hdfs:// is reached only through Spark's JVM."""
    return not isinstance(source, Location) or source.scheme in ("s3", "gs", "az")


def _verdict() -> Any:
    """`evaluate.with_verdict`'s verdict: W iff the nim-sum is not 0."""
    return F.when(F.col("nim_sum") != 0, "W").when(F.col("nim_sum") == 0, "L")


def _polars(df: DataFrame) -> pl.DataFrame:
    frame = pl.from_arrow(df.toArrow())
    assert isinstance(frame, pl.DataFrame)
    return frame


def _where(spark: SparkSession) -> str:
    """The master a session runs on, or the Spark Connect server it talks to."""
    if is_connect(spark):
        return f"{spark.conf.get('spark.master')} (through Spark Connect)"
    return spark.sparkContext.master


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
        failed = True
        try:
            with failures_named(run), object_store.through_hadoop(
                    hadoop_filesystems(run.spark)):
                self._early = run
                yield
            failed = False
        finally:
            self._early = None
            run.stop(failed)

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
        work = _Job(spark, config, job.paths, job.form, job.index, job.cache, run)
        failed = True
        try:
            with failures_named(run), lost_server(config.spark.remote):
                job.note(f"positions: Spark {spark.version} at {_where(spark)}")
                norm, rows_per_file = work.read()
                job.note(f"positions: {sum(rows_per_file):,} rows read ({len(job.paths)} files)")
                norm = work.number_rows(norm, rows_per_file)
                verdicts, rejects = work.wide(norm) if job.form == "wide" else work.long(norm)
                rejects = rejects.withColumn("column", _input_column_names(config, job.form))
                if not work.verdicts_sorted:
                    verdicts = work.persist(verdicts)
                yield SparkEvaluation(work, verdicts, work.persist(rejects), sum(rows_per_file))
                work.close()
            failed = False
        finally:
            if failed and not run.owned:  # a session that lives on: free what it cached
                try:
                    work.close()
                except Exception as exc:  # noqa: BLE001 - the run's own error is raised
                    log.debug("freeing Spark's cached frames: %s", exc)
            run.stop(failed)


@dataclass
class SparkEvaluation:
    """Verdicts and the positions' rejects as cached Spark frames; counts come back to the
    driver as one row per rule set."""

    work: _Job
    verdicts: DataFrame
    rejects: DataFrame
    rows_read: int
    _counts: tuple[pl.DataFrame, pl.DataFrame, int] | None = field(default=None, repr=False)

    def _count(self) -> tuple[pl.DataFrame, pl.DataFrame, int]:
        if self._counts is None:
            verdicts = _polars(self.verdicts.groupBy("rule_set_id").agg(
                F.count_if(F.col("verdict") == "W").alias("W"),
                F.count_if(F.col("verdict") == "L").alias("L")))
            rejected = _polars(self.rejects.groupBy("rule_set_id").agg(
                F.count(F.lit(1)).alias("rejected")))
            self._counts = (verdicts.cast({"W": pl.Int64, "L": pl.Int64}),
                            rejected.filter(pl.col("rule_set_id").is_not_null())
                            .cast({"rejected": pl.Int64}),
                            int(rejected["rejected"].sum()))
        return self._counts

    @property
    def rows_rejected(self) -> int:
        return self._count()[2]

    def counts(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        verdicts, rejected, _ = self._count()
        return verdicts, rejected

    def _with_rules(self, rule_rejects: pl.DataFrame) -> DataFrame:
        spark = self.work.spark
        rules = spark.createDataFrame(
            rule_rejects.to_arrow().cast(to_arrow_schema(REJECT_SCHEMA)), REJECT_SCHEMA)
        return (rules.unionByName(self.rejects)
                .orderBy(F.col("table").desc(), F.col("source"), F.col("row")))

    def first_rejects(self, rule_rejects: pl.DataFrame, n: int) -> pl.DataFrame:
        return _polars(self._with_rules(rule_rejects).limit(n))

    def write(self, rule_rejects: pl.DataFrame, staging: Path) -> None:
        ordered = self.verdicts if self.work.verdicts_sorted else self.verdicts.orderBy(*KEYS)
        self.work.write(ordered, staging / "verdicts.parquet")
        self.work.write(self._with_rules(rule_rejects), staging / "rejects.parquet")
