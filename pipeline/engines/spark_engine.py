"""The Spark engine: the polars engine's steps, run per partition on a cluster (DESIGN 6).

Division of labour (all row-level logic is imported from `transforms`, `polars_engine`, `grundy`
and `kernels`; Spark only moves rows, counts, joins, sorts and writes):

* driver: rules (`polars_engine.read_rules`), the rule index, the positions form
  (`polars_engine.positions_form`), Parquet schema probes, and the SG tables
  (`polars_engine.TableCache`), built once from a Spark aggregation of the largest heaps and
  broadcast as one `TableSet`.
* executors, per Arrow batch (`mapInArrow`): normalise/validate/attach exactly like the polars
  engine, then `transforms.evaluate` (wide) or `kernels.sg_per_heap` (long).
* shuffles only where the logic needs all rows of a key together: duplicate positions (wide),
  tainted positions and the per-position `bit_xor` (long), and the final sorts.

Row numbers (the `row` of rejects, and the default `position_id` of wide files without one):

* Parquet is read by `spark.read.parquet`; each row carries `_metadata.file_path` (mapped back
  to the input file) and `_metadata.row_index` (its 0-based row in that file), so files are
  split across tasks freely. Columns are cast back to the file's own Arrow types before the
  polars steps see them (Spark widens uint8..uint32 and reads uint64 as decimal(20,0)).
* CSV row numbers need a sequential scan, and the polars engine's CSV semantics (pyarrow's
  parser, "" vs null, "line has N fields, expected M" for wrong field counts) must hold row
  for row, so each CSV file is one task that runs `polars_engine.position_batches` on it.
* Default position ids are numbered per file in the task and shifted by the rows of the earlier
  files (counted by Spark), which is how the polars engine numbers them.

Outputs: `verdicts.parquet` and `rejects.parquet` are directories of Parquet part files written
by Spark (sorted across parts; read them with `pl.read_parquet`/`pl.scan_parquet` on the
directory); `sg_tables.parquet` and `summary.parquet` are single files written on the driver.
Input paths must be readable by the driver and by every executor (local paths or a shared FS).
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.errors.exceptions.captured import CapturedException, PythonException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from pipeline import io, kernels, transforms
from pipeline.config import Config
from pipeline.engines import EngineResult, polars_engine
from pipeline.errors import InputError, SnimError

Phase = Callable[[str], AbstractContextManager[None]]
KEYS = ["rule_set_id", "position_id"]
PATH, ROW = "__snim_path", "__snim_row"
DATA, FATAL = 0, 1
LONG, STRING = T.LongType(), T.StringType()

REJECT_SCHEMA = T.StructType([
    T.StructField(name, LONG if dtype == pl.Int64 else STRING)
    for name, dtype in transforms.REJECT_SCHEMA.items()
])
# One normalised input row (or, with _kind = FATAL, one file that could not be read: _reason
# holds the message). Keys are text here; their output type is decided once all rows are seen.
NORM_SCHEMA = T.StructType([
    T.StructField("_kind", T.IntegerType()), T.StructField("_file", T.IntegerType()),
    T.StructField("_source", STRING), T.StructField("_row", LONG),
    T.StructField("rule_set_id", STRING), T.StructField("position_id", STRING),
    T.StructField("heaps", T.ArrayType(LONG)), T.StructField("_column", STRING),
    T.StructField("_reason", STRING), T.StructField("table", LONG),
    T.StructField("_rid_int", T.BooleanType()), T.StructField("_pid_int", T.BooleanType()),
])
_LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
"""


# ---- session --------------------------------------------------------------------------------

def session(master: str, conf: dict[str, str] | None = None) -> tuple[SparkSession, bool]:
    """The active SparkSession if there is one (owned=False), else a new, quiet one."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need this venv
    builder = (SparkSession.builder.master(master).appName("snim-batch")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.log.level", "ERROR"))
    if "SPARK_CONF_DIR" not in os.environ:
        log4j = Path(tempfile.gettempdir()) / "snim-batch-log4j2.properties"
        if not log4j.exists() or log4j.read_text() != _LOG4J:
            log4j.write_text(_LOG4J)
        builder = builder.config("spark.driver.extraJavaOptions",
                                 f"-Dlog4j2.configurationFile={log4j.as_uri()}")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate(), True


# ---- helpers run inside tasks -----------------------------------------------------------------

def _frame(batch: pa.RecordBatch) -> pl.DataFrame:
    frame = pl.from_arrow(batch)
    assert isinstance(frame, pl.DataFrame)
    return frame


def _whole(batches: Iterator[pa.RecordBatch]) -> pl.DataFrame | None:
    """Every batch of a partition as one frame (after a shuffle by key: whole positions)."""
    frames = [_frame(b) for b in batches]
    return pl.concat(frames) if frames else None


def _out(frame: pl.DataFrame, schema: T.StructType) -> Iterator[pa.RecordBatch]:
    """A polars frame as record batches of exactly the declared Spark schema."""
    for name in schema.fieldNames():
        if name not in frame.columns:
            frame = frame.with_columns(pl.lit(None).alias(name))
    table = frame.select(schema.fieldNames()).to_arrow().cast(to_arrow_schema(schema))
    yield from table.to_batches()


def _is_int(frame: pl.DataFrame, name: str) -> bool:
    """Would `transforms.unify_key_types` make this key Int64 (on this part of the rows)?"""
    (unified,) = transforms.unify_key_types([frame.select(name)], name)
    return unified[name].dtype == pl.Int64


def _as_norm(frame: pl.DataFrame, file_index: int) -> pl.DataFrame:
    """A normalised (and, wide, attached) frame in NORM_SCHEMA, keys as text."""
    return frame.with_columns(
        pl.lit(DATA, pl.Int32).alias("_kind"), pl.lit(file_index, pl.Int32).alias("_file"),
        pl.lit(_is_int(frame, "rule_set_id")).alias("_rid_int"),
        pl.lit(_is_int(frame, "position_id")).alias("_pid_int"),
        *[pl.col(k).cast(pl.String) for k in KEYS])


def _step(frame: pl.DataFrame, file_index: int, form: str, index: pl.DataFrame,
          schema: T.StructType) -> Iterator[pa.RecordBatch]:
    """The polars engine's per-batch step: wide batches are attached to their tables here."""
    if form == "wide":
        frame, batch_index = polars_engine._match_key_type(frame, index)
        frame = transforms.attach_tables(frame, batch_index)
    yield from _out(_as_norm(frame, file_index), schema)


def _fatal(file_index: int, message: str) -> Iterator[pa.RecordBatch]:
    yield from _out(pl.DataFrame({"_kind": [FATAL], "_file": [file_index],
                                  "_reason": [message]},
                                 schema={"_kind": pl.Int32, "_file": pl.Int32,
                                         "_reason": pl.String}), NORM_SCHEMA)


def _csv_task(batches: Iterator[pa.RecordBatch], config: Config, form: str,
              index: pl.DataFrame, schema: T.StructType) -> Iterator[pa.RecordBatch]:
    """Whole CSV files, one per input row (file index, path), read exactly as polars does."""
    for batch in batches:
        for file_index, path in zip(batch.column("file").to_pylist(),
                                    batch.column("path").to_pylist()):
            try:
                for _, frame in polars_engine.position_batches([Path(path)], config, form):
                    yield from _step(frame, file_index, form, index, schema)
            except SnimError as exc:
                yield from _fatal(file_index, str(exc))


@dataclass(frozen=True)
class _ParquetFile:
    index: int
    source: str
    dtypes: dict[str, pl.DataType]
    default_pid: bool


def _real(path_or_uri: str) -> str:
    if "://" in path_or_uri or path_or_uri.startswith("file:"):
        path_or_uri = unquote(urlparse(path_or_uri).path)
    return os.path.realpath(path_or_uri)


def _parquet_task(batches: Iterator[pa.RecordBatch], files: dict[str, _ParquetFile],
                  config: Config, form: str, index: pl.DataFrame, schema: T.StructType
                  ) -> Iterator[pa.RecordBatch]:
    """Spark's Parquet rows, per file: the file's own types back, then the polars steps."""
    by_uri: dict[str, _ParquetFile] = {}
    for batch in batches:
        frame = _frame(batch)
        for part in frame.partition_by(PATH, maintain_order=True):
            uri = part[PATH][0]
            if uri not in by_uri:
                by_uri[uri] = files[_real(uri)]
            info = by_uri[uri]
            rows = part[ROW].to_numpy().astype(np.int64)
            raw = part.drop(PATH, ROW).cast(info.dtypes)
            if info.default_pid:  # the row number in the file; shifted by the earlier files later
                raw = raw.with_columns(pl.Series(config.columns.position_id, rows))
            try:
                norm = transforms.normalize_positions(raw, rows, info.source, config.columns,
                                                      form, 0)
            except SnimError as exc:
                yield from _fatal(info.index, str(exc))
                continue
            yield from _step(norm, info.index, form, index, schema)


def _reject_task(batches: Iterator[pa.RecordBatch], schema: T.StructType
                 ) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield from _out(transforms.reject_rows(_frame(batch), "positions"), schema)


def _attach_task(batches: Iterator[pa.RecordBatch], index: pl.DataFrame,
                 schema: T.StructType) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        frame, batch_index = polars_engine._match_key_type(_frame(batch), index)
        yield from _out(transforms.attach_tables(frame, batch_index), schema)


def _evaluate_task(batches: Iterator[pa.RecordBatch], tables: Any, winning_moves: bool,
                   schema: T.StructType) -> Iterator[pa.RecordBatch]:
    """Wide: nim-sums and winning moves of a batch; the valid rows' key types as flags."""
    for batch in batches:
        evaluated = transforms.evaluate(_frame(batch), tables.value, winning_moves)
        valid = evaluated.filter(pl.col("_reason").is_null())
        evaluated = transforms.with_verdict(evaluated).with_columns(
            pl.lit(_is_int(valid, "rule_set_id")).alias("_rid_int"),
            pl.lit(_is_int(valid, "position_id")).alias("_pid_int"))
        yield from _out(evaluated, schema)


def _cast_keys_task(batches: Iterator[pa.RecordBatch], dtypes: dict[str, pl.DataType],
                    schema: T.StructType) -> Iterator[pa.RecordBatch]:
    """Rejected rows' keys cast to the verdict key types, as `split_duplicates` casts them."""
    for batch in batches:
        frame = _frame(batch)
        yield from _out(frame.with_columns(
            pl.col(k).cast(dtypes[k], strict=False).alias(f"_k_{k}") for k in KEYS), schema)


def _split_task(batches: Iterator[pa.RecordBatch], sources: list[str], keep: str,
                verdict_cols: list[str], schema: T.StructType) -> Iterator[pa.RecordBatch]:
    """`transforms.split_duplicates` on whole key groups (verdicts `_side` 0, rejects 1)."""
    rows = _whole(batches)
    if rows is None:
        return
    verdicts = rows.filter(pl.col("_side") == 0).select(*verdict_cols, "_file", "_row")
    rejects = rows.filter(pl.col("_side") == 1).select(
        *[pl.col(f"_r_{k}").alias(k) if k in KEYS else k for k in transforms.REJECT_SCHEMA])
    clean, duplicates = transforms.split_duplicates(verdicts, rejects, sources)
    yield from _out(clean if keep == "clean" else duplicates, schema)


def _by_input_order(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.sort("_file", "_row")


def _taint_task(batches: Iterator[pa.RecordBatch], schema: T.StructType
                ) -> Iterator[pa.RecordBatch]:
    """Long: whole positions with a bad row, rejected by `transforms.long_to_wide`."""
    rows = _whole(batches)
    if rows is not None:
        _, rejected = transforms.long_to_wide(_by_input_order(rows))
        yield from _out(transforms.reject_rows(rejected, "positions"), schema)


def _sg_task(batches: Iterator[pa.RecordBatch], tables: Any, schema: T.StructType
             ) -> Iterator[pa.RecordBatch]:
    """Long: the Grundy value of every heap row (BEYOND_TABLE where the table cannot say)."""
    ts = tables.value
    for batch in batches:
        frame = _frame(batch)
        heaps = frame["heaps"].list.first().to_numpy().astype(np.int64)
        table = frame["table"].to_numpy().astype(np.int64)
        sg = kernels.sg_per_heap(heaps, table, *ts.lookup_args())
        yield from _out(frame.with_columns(pl.Series("_sg", sg, dtype=pl.Int64),
                                           pl.Series("heap", heaps, dtype=pl.Int64)), schema)


def _beyond_task(batches: Iterator[pa.RecordBatch], tables: Any, index: pl.DataFrame,
                 winning_moves: bool, schema: T.StructType) -> Iterator[pa.RecordBatch]:
    """Long: whole positions with a heap beyond an unproven table, through the polars steps
    (so the reason names the first such heap in input order, as the polars engine does)."""
    rows = _whole(batches)
    if rows is None:
        return
    positions, _ = transforms.long_to_wide(_by_input_order(rows))
    positions, batch_index = polars_engine._match_key_type(positions, index)
    positions = transforms.attach_tables(positions, batch_index)
    evaluated = transforms.evaluate(positions, tables.value, winning_moves)
    rejected = transforms.expand_long_rejects(evaluated.filter(pl.col("_reason").is_not_null()))
    yield from _out(transforms.reject_rows(rejected, "positions"), schema)


def _moves_task(batches: Iterator[pa.RecordBatch], tables: Any, schema: T.StructType
                ) -> Iterator[pa.RecordBatch]:
    """Long with winning moves: positions (heaps in input order) through `evaluate`."""
    for batch in batches:
        positions = _frame(batch).with_columns(pl.lit(None, pl.String).alias("_reason"),
                                               pl.lit(None, pl.String).alias("_column"))
        evaluated = transforms.evaluate(positions, tables.value, True)
        yield from _out(transforms.verdict_rows(evaluated, True), schema)


def _verdict_task(batches: Iterator[pa.RecordBatch], schema: T.StructType
                  ) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield from _out(transforms.with_verdict(_frame(batch)), schema)


# ---- the job --------------------------------------------------------------------------------

def _fields(*pairs: tuple[str, T.DataType]) -> list[T.StructField]:
    return [T.StructField(name, dtype) for name, dtype in pairs]


def _key_type(is_int: bool) -> T.DataType:
    return LONG if is_int else STRING


def _null_safe(left: DataFrame, right: DataFrame) -> Column:
    return functools.reduce(lambda a, b: a & b,
                            [left[k].eqNullSafe(right[k]) for k in KEYS])


@dataclass
class _Job:
    spark: SparkSession
    config: Config
    paths: list[Path]
    form: str
    index: pl.DataFrame
    cache: polars_engine.TableCache
    cached: list[DataFrame] = field(default_factory=list)
    broadcasts: list[Any] = field(default_factory=list)

    # -- plumbing --

    @property
    def sources(self) -> list[str]:
        return [str(p) for p in self.paths]

    def persist(self, df: DataFrame) -> DataFrame:
        self.cached.append(df.persist())
        return df

    def broadcast(self, value: Any) -> Any:
        bc = self.spark.sparkContext.broadcast(value)
        self.broadcasts.append(bc)
        return bc

    def close(self) -> None:
        for df in self.cached:
            df.unpersist()
        for bc in self.broadcasts:
            bc.unpersist()

    def map(self, df: DataFrame, task: Callable[..., Iterator[pa.RecordBatch]],
            schema: T.StructType, **kwargs: Any) -> DataFrame:
        return df.mapInArrow(functools.partial(task, schema=schema, **kwargs), schema)

    def by_key(self, df: DataFrame) -> DataFrame:
        """All rows of a (rule_set_id, position_id) in one partition."""
        return df.repartition(*KEYS)

    # -- reading --

    def read(self) -> tuple[DataFrame, list[int]]:
        """Normalised rows of every positions file (NORM_SCHEMA) and the rows per file."""
        csv = [(i, p) for i, p in enumerate(self.paths) if _format(p) == "csv"]
        probes = self._probe_parquet([(i, p) for i, p in enumerate(self.paths)
                                      if _format(p) == "parquet"])
        first_csv = min((i for i, _ in csv), default=len(self.paths))
        errors = {i: e for i, e in probes.items() if isinstance(e, str)}
        if errors and min(errors) < first_csv:
            raise InputError(errors[min(errors)])
        parts = []
        if csv:
            files = self.spark.sparkContext.parallelize(
                [(i, str(p)) for i, p in csv], numSlices=len(csv))
            parts.append(self.map(self.spark.createDataFrame(files, "file int, path string"),
                                  _csv_task, NORM_SCHEMA, config=self.config, form=self.form,
                                  index=self.index))
        groups: dict[tuple, list[_ParquetFile]] = {}
        for info in probes.values():
            if isinstance(info, _ParquetFile):
                groups.setdefault(tuple(info.dtypes.items()), []).append(info)
        for infos in groups.values():
            raw = self.spark.read.parquet(*[f.source for f in infos]).select(
                "*", F.col("_metadata.file_path").alias(PATH),
                F.col("_metadata.row_index").alias(ROW))
            files_by_path = {_real(f.source): f for f in infos}
            parts.append(self.map(raw, _parquet_task, NORM_SCHEMA, files=files_by_path,
                                  config=self.config, form=self.form, index=self.index))
        norm = self.persist(functools.reduce(DataFrame.unionByName, parts))
        try:
            stats = norm.groupBy("_file", "_kind").agg(
                F.count(F.lit(1)).alias("n"), F.first("_reason").alias("message")).collect()
        except PythonException:
            raise
        except CapturedException as exc:
            raise InputError(f"positions input {self.config.positions}: Spark could not read "
                             f"it ({str(exc).strip().splitlines()[0][:300]})") from None
        fatal = {r["_file"]: r["message"] for r in stats if r["_kind"] == FATAL}
        fatal.update(errors)
        if fatal:
            raise InputError(fatal[min(fatal)])
        rows = [0] * len(self.paths)
        for r in stats:
            rows[r["_file"]] = r["n"]
        return norm.filter(F.col("_kind") == DATA), rows

    def _probe_parquet(self, files: list[tuple[int, Path]]) -> dict[int, _ParquetFile | str]:
        """Each Parquet file's polars types, and the type errors the polars steps would raise
        on it (found on an empty frame of its schema, so no rows are read on the driver)."""
        out: dict[int, _ParquetFile | str] = {}
        cols = self.config.columns
        for i, path in files:
            try:
                empty = pl.from_arrow(pq.read_schema(path).empty_table())
                assert isinstance(empty, pl.DataFrame)
                transforms.normalize_positions(empty, np.zeros(0, np.int64), str(path), cols,
                                               self.form, 0)
            except SnimError as exc:
                out[i] = str(exc)
                continue
            except (pa.ArrowException, OSError) as exc:
                out[i] = f"{path}: not a readable Parquet file ({exc})"
                continue
            default_pid = self.form == "wide" and cols.position_id not in empty.columns
            out[i] = _ParquetFile(i, str(path), dict(empty.schema), default_pid)
        return out

    def number_rows(self, norm: DataFrame, rows: list[int]) -> DataFrame:
        """Shift default position ids (numbered per file) by the rows of the earlier files."""
        defaults = [i for i, p in enumerate(self.paths)
                    if self.form == "wide" and self.config.columns.position_id
                    not in io.columns_of(p)]
        if not defaults:
            return norm
        offsets = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)
        shift = F.element_at(F.array(*[F.lit(int(o)) for o in offsets]), F.col("_file") + 1)
        pid = (F.col("position_id").cast(LONG) + shift).cast(STRING)
        return norm.withColumn("position_id", F.when(F.col("_file").isin(defaults), pid)
                               .otherwise(F.col("position_id")))

    def tables(self, largest: list[dict[int, int]]) -> Any:
        """Grow the SG tables as the polars engine does (batch by batch, here file by file),
        then broadcast them once."""
        n = len(self.cache.distinct)
        for per_table in largest:
            need = np.full(n, -1, dtype=np.int64)
            for t, m in per_table.items():
                need[t] = m
            self.cache.ensure(need)
        return self.broadcast(self.cache.table_set())

    def largest(self, valid: DataFrame, by_file: bool) -> list[dict[int, int]]:
        group = ["_file", "table"] if by_file else ["table"]
        rows = (valid.groupBy(*group).agg(F.max(F.array_max("heaps")).alias("m"))
                .filter(F.col("m").isNotNull()).collect())
        if not by_file:
            return [{r["table"]: r["m"] for r in rows}]
        out: list[dict[int, int]] = [{} for _ in self.paths]
        for r in rows:
            out[r["_file"]][r["table"]] = r["m"]
        return out

    # -- wide form --

    def wide(self, norm: DataFrame) -> tuple[DataFrame, DataFrame]:
        wm = self.config.winning_moves
        tables = self.tables(self.largest(norm.filter(F.col("_reason").isNull()), by_file=True))
        moves = [("move_heap", LONG), ("move_take", LONG)] if wm else []
        evaluated_schema = T.StructType(
            [f for f in NORM_SCHEMA.fields if f.name not in ("_kind", "_rid_int", "_pid_int")]
            + _fields(("nim_sum", LONG), *moves, ("verdict", STRING),
                      ("_rid_int", T.BooleanType()), ("_pid_int", T.BooleanType())))
        evaluated = self.persist(self.map(
            norm.drop("_kind", "_rid_int", "_pid_int"), _evaluate_task, evaluated_schema,
            tables=tables, winning_moves=wm))
        valid = evaluated.filter(F.col("_reason").isNull())
        flags = valid.agg(F.bool_and("_rid_int").alias("r"), F.bool_and("_pid_int").alias("p"))
        is_int = flags.collect()[0]
        rid_int, pid_int = is_int["r"] is not False, is_int["p"] is not False
        key_types = {"rule_set_id": _key_type(rid_int), "position_id": _key_type(pid_int)}
        verdict_cols = ["rule_set_id", "position_id", "nim_sum", "verdict"] + [m for m, _ in moves]
        verdicts = valid.select(*[F.col(k).cast(key_types[k]) for k in KEYS],
                                *verdict_cols[2:], "_file", "_row")
        rejected = self.map(evaluated.filter(F.col("_reason").isNotNull()), _reject_task,
                            REJECT_SCHEMA)
        verdicts, duplicates = self.duplicates(verdicts, rejected, key_types, verdict_cols)
        return verdicts.select(verdict_cols), rejected.unionByName(duplicates)

    def duplicates(self, verdicts: DataFrame, rejected: DataFrame,
                   key_types: dict[str, T.DataType], verdict_cols: list[str]
                   ) -> tuple[DataFrame, DataFrame]:
        """`transforms.split_duplicates`, run only on the key groups that can be duplicates
        (a key given twice among the verdicts, or also among the rejected rows)."""
        pl_types = {k: pl.Int64 if t == LONG else pl.String for k, t in key_types.items()}
        cast_schema = T.StructType(REJECT_SCHEMA.fields + _fields(
            *[(f"_k_{k}", key_types[k]) for k in KEYS]))
        rejected_keys = self.map(
            rejected.filter(F.col("rule_set_id").isNotNull() & F.col("position_id").isNotNull()),
            _cast_keys_task, cast_schema, dtypes=pl_types)
        rejected_keys = rejected_keys.filter(
            F.col("_k_rule_set_id").isNotNull() & F.col("_k_position_id").isNotNull())
        seen = verdicts.groupBy(*KEYS).agg(F.count(F.lit(1)).alias("_n"))
        also = rejected_keys.select(*[F.col(f"_k_{k}").alias(k) for k in KEYS]).distinct() \
            .withColumn("_r", F.lit(True))
        suspects = (seen.join(also, KEYS, "left")
                    .filter((F.col("_n") > 1) | F.col("_r").isNotNull()).select(*KEYS))
        suspects = self.persist(suspects)
        if suspects.isEmpty():
            return verdicts, self.spark.createDataFrame([], REJECT_SCHEMA)
        verdict_side = verdicts.join(suspects, KEYS, "left_semi").select(
            F.lit(0).alias("_side"), *verdicts.columns,
            *[F.lit(None).cast(STRING).alias(f"_r_{k}") for k in KEYS],
            *[F.lit(None).cast(f.dataType).alias(f.name) for f in REJECT_SCHEMA.fields
              if f.name not in KEYS])
        reject_side = rejected_keys.join(
            suspects.select(*[F.col(k).alias(f"_k_{k}") for k in KEYS]),
            [f"_k_{k}" for k in KEYS], "left_semi").select(
            F.lit(1).alias("_side"),
            *[F.col(f"_k_{k}").alias(k) for k in KEYS],
            *[F.lit(None).cast(f.dataType).alias(f.name) for f in verdicts.schema.fields
              if f.name not in KEYS],
            *[F.col(k).alias(f"_r_{k}") for k in KEYS],
            *[F.col(f.name) for f in REJECT_SCHEMA.fields if f.name not in KEYS])
        groups = self.persist(self.by_key(verdict_side.unionByName(reject_side)))
        kwargs = {"sources": self.sources, "verdict_cols": verdict_cols}
        clean = self.map(groups, _split_task, verdicts.drop("_file", "_row").schema,
                         keep="clean", **kwargs)
        dups = self.map(groups, _split_task, REJECT_SCHEMA, keep="duplicates", **kwargs)
        kept = verdicts.join(suspects, KEYS, "left_anti").drop("_file", "_row")
        return kept.unionByName(clean), dups

    # -- long form --

    def long(self, norm: DataFrame) -> tuple[DataFrame, DataFrame]:
        wm = self.config.winning_moves
        is_int = norm.agg(F.bool_and("_rid_int").alias("r"),
                          F.bool_and("_pid_int").alias("p")).collect()[0]
        key_types = {"rule_set_id": _key_type(is_int["r"] is not False),
                     "position_id": _key_type(is_int["p"] is not False)}
        rows = norm.select(
            "_file", "_source", "_row", *[F.col(k).cast(key_types[k]) for k in KEYS],
            "heaps", "_column", "_reason")
        bad = rows.filter(F.col("_reason").isNotNull())
        good = rows.filter(F.col("_reason").isNull())
        tainted = self.persist(bad.select(*KEYS).distinct())
        parts = []
        if not tainted.isEmpty():
            whole = bad.unionByName(good.join(tainted, KEYS, "left_semi"))
            parts.append(self.map(self.by_key(whole), _taint_task, REJECT_SCHEMA))
            good = good.join(tainted, KEYS, "left_anti")
        attached_schema = T.StructType(good.schema.fields + _fields(("table", LONG)))
        attached = self.persist(self.map(good, _attach_task, attached_schema, index=self.index))
        parts.append(self.map(attached.filter(F.col("_reason").isNotNull()), _reject_task,
                              REJECT_SCHEMA))
        valid = attached.filter(F.col("_reason").isNull())
        tables = self.tables(self.largest(valid, by_file=False))
        sg_schema = T.StructType(attached_schema.fields + _fields(("_sg", LONG), ("heap", LONG)))
        sg = self.map(valid, _sg_task, sg_schema, tables=tables)
        aggs = [F.bit_xor("_sg").alias("nim_sum"), F.min("_sg").alias("_min_sg"),
                F.max("table").alias("table")]
        if wm:
            aggs.append(F.transform(F.array_sort(F.collect_list(F.struct("_file", "_row",
                                                                         "heap"))),
                                    lambda c: c["heap"]).alias("heaps"))
        positions = self.persist(sg.groupBy(*KEYS).agg(*aggs))
        beyond = positions.filter(F.col("_min_sg") < 0).select(*KEYS)
        if not beyond.isEmpty():
            rows_beyond = self.by_key(valid.join(beyond, KEYS, "left_semi"))
            parts.append(self.map(rows_beyond, _beyond_task, REJECT_SCHEMA, tables=tables,
                                  index=self.index, winning_moves=wm))
        ok = positions.filter(F.col("_min_sg") >= 0)
        key_fields = _fields(*[(k, key_types[k]) for k in KEYS])
        if wm:
            schema = T.StructType(key_fields + _fields(
                ("nim_sum", LONG), ("verdict", STRING), ("move_heap", LONG),
                ("move_take", LONG)))
            verdicts = self.map(ok.select(*KEYS, "heaps", "table"), _moves_task, schema,
                                tables=tables)
        else:
            schema = T.StructType(key_fields + _fields(("nim_sum", LONG), ("verdict", STRING)))
            verdicts = self.map(ok.select(*KEYS, "nim_sum"), _verdict_task, schema)
        return verdicts, functools.reduce(DataFrame.unionByName, parts)

    # -- output --

    def write(self, df: DataFrame, target: Path) -> None:
        """A Spark-written Parquet directory that polars reads as one table (part files only:
        Spark's _SUCCESS marker and .crc checksums would confuse a directory scan)."""
        df.write.option("compression", "zstd").parquet(str(target))
        for name in os.listdir(target):
            if not name.startswith("part-"):
                os.remove(target / name)


def _format(path: Path) -> str:
    return io._format_of(path)  # suffix, else magic bytes: exactly how io reads the file


def _summary(index: pl.DataFrame, counts: pl.DataFrame, rejected: pl.DataFrame
             ) -> pl.DataFrame:
    """`transforms.summary_rows` from per-rule-set counts instead of every verdict row
    (counts: rule_set_id, W, L; rejected: rule_set_id as text, rejected)."""
    key_type = index["rule_set_id"].dtype
    ids = pl.concat([index.select(pl.col("rule_set_id").cast(pl.String)),
                     rejected.select("rule_set_id")]).unique()
    frame = (ids.join(counts.with_columns(pl.col("rule_set_id").cast(pl.String)),
                      on="rule_set_id", how="left")
             .join(rejected, on="rule_set_id", how="left")
             .with_columns(pl.col("W", "L", "rejected").fill_null(0)))
    try:
        frame = frame.with_columns(pl.col("rule_set_id").cast(key_type))
    except pl.exceptions.PolarsError:
        pass
    return frame.select(
        "rule_set_id",
        (pl.col("W") + pl.col("L")).alias("positions"),
        "W", "L", "rejected",
        pl.when(pl.col("W") + pl.col("L") > 0)
        .then(pl.col("W") / (pl.col("W") + pl.col("L"))).alias("w_rate"),
    ).sort("rule_set_id")


def _to_spark(spark: SparkSession, frame: pl.DataFrame, schema: T.StructType) -> DataFrame:
    return spark.createDataFrame(frame.to_arrow().cast(to_arrow_schema(schema)), schema=schema)


def execute(config: Config, staging: Path, phase: Phase) -> EngineResult:
    """Read, validate, tabulate, evaluate and write every output but the manifest."""
    with phase("rules"):
        rules, rule_files = polars_engine.read_rules(config)
        distinct, index = transforms.rule_index(rules)
        paths = io.resolve_inputs(config.positions, "positions")
        form = polars_engine.positions_form(paths, config)
    checksums = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checksum")
    described = [checksums.submit(io.describe, p) for p in paths]
    checksums.shutdown(wait=False)
    spark, owned = session(config.spark.master)
    job = _Job(spark, config, paths, form, index,
               polars_engine.TableCache(distinct, config.tables))
    try:
        with phase("positions"):
            norm, rows_per_file = job.read()
            norm = job.number_rows(norm, rows_per_file)
            verdicts, position_rejects = job.wide(norm) if form == "wide" else job.long(norm)
            verdicts = job.persist(verdicts)
            position_rejects = job.persist(position_rejects)
        with phase("finish"):
            rule_rejects = transforms.reject_rows(rules, "rules")
            rejects = (_to_spark(spark, rule_rejects, REJECT_SCHEMA)
                       .unionByName(position_rejects)
                       .orderBy(F.col("table").desc(), "source", "row"))
            counts = verdicts.groupBy("rule_set_id").agg(
                F.sum((F.col("verdict") == "W").cast(LONG)).alias("W"),
                F.sum((F.col("verdict") == "L").cast(LONG)).alias("L"))
            counts = pl.from_arrow(counts.toArrow())
            per_rule = pl.from_arrow(position_rejects.groupBy("rule_set_id").agg(
                F.count(F.lit(1)).alias("rejected")).toArrow())
            assert isinstance(counts, pl.DataFrame) and isinstance(per_rule, pl.DataFrame)
            summary = _summary(index, counts.cast({"W": pl.Int64, "L": pl.Int64}),
                               per_rule.filter(pl.col("rule_set_id").is_not_null())
                               .cast({"rejected": pl.Int64}))
            sg_tables = transforms.sg_table_rows(rules, distinct, job.cache.table_set(), index)
            first = pl.from_arrow(rejects.limit(10).toArrow())
            assert isinstance(first, pl.DataFrame)
            problems = [polars_engine._problem(r) for r in first.iter_rows(named=True)]
            n_verdicts, w = int(counts["W"].sum() + counts["L"].sum()), int(counts["W"].sum())
            counts_out = _counts(rules.height, rule_rejects.height, sum(rows_per_file),
                                 int(per_rule["rejected"].sum()), n_verdicts, w)
        inputs = {"rules": [f.as_dict() for f in rule_files],
                  "positions": [f.result().as_dict() for f in described]}
        rejected = counts_out["rules"]["rows_rejected"] + counts_out["positions"]["rows_rejected"]
        if not (rejected and config.on_bad_rows == "fail"):
            with phase("write"):
                job.write(verdicts.orderBy(*KEYS), staging / "verdicts.parquet")
                job.write(rejects, staging / "rejects.parquet")
                io.write_parquet(sg_tables, staging / "sg_tables.parquet")
                io.write_parquet(summary, staging / "summary.parquet")
        return EngineResult(inputs, counts_out, form, problems)
    finally:
        job.close()
        if owned:
            spark.stop()


def _counts(rules_read: int, rules_rejected: int, rows_read: int, rows_rejected: int,
            verdicts: int, w: int) -> dict[str, dict[str, int]]:
    """The manifest counts, as `polars_engine._counts` computes them from whole frames."""
    return {
        "rules": {"rows_read": rules_read, "rows_accepted": rules_read - rules_rejected,
                  "rows_rejected": rules_rejected},
        "positions": {"rows_read": rows_read, "rows_evaluated": rows_read - rows_rejected,
                      "rows_rejected": rows_rejected, "verdicts": verdicts,
                      "W": w, "L": verdicts - w},
    }
