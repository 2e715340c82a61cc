"""Verdicts of the Spark engine in key order, and their duplicate keys taken out, as
`ordering.key_sorted_verdicts` and `ordering.split_duplicates` do for the polars engine.

Rows read in key order already (sorted exports) are checked in one pass and keep their
partitions; any other input is sorted, and the keys it holds twice are found next to each
other in the sorted frame, so finding duplicates costs no shuffle of its own. Only the key
groups that can hold duplicates go through polars (`split_task`).

Sorted rows are usually checked as they are written: a pass-through task on the way to the
write (`tally_task`) tallies each partition's repeated keys and W/L counts into an
accumulator; only if that finds a key twice is the written output dropped and the rows
sorted again, cached and split (`untallied`). Where no accumulator exists (Spark Connect),
or a rejected row shares a verdict's key, the cached path runs from the start.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import polars as pl
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipeline.engines.spark_connect import is_connect
from pipeline.engines.spark_reading import (
    MAX_RANGES,
    KeyedTallies,
    KeyStats,
    SparkWork,
    nulls,
    one_long_fits,
    pairs,
    struct,
)
from pipeline.engines.spark_tasks import (
    BOOL,
    DATA,
    INT,
    KEYS,
    LONG,
    REJECT_SCHEMA,
    STRING,
    SUMMARY,
    PartitionTally,
    cast_keys_task,
    order_task,
    repeated_task,
    split_task,
    tally_task,
)

log = logging.getLogger(__name__)
ORDER_PROBE_ROWS = 1 << 16  # first verdict rows that must be in key order for a full check


@dataclass
class SparkOrdering(SparkWork):
    """Key order and duplicate keys of a run's verdicts on Spark."""

    verdicts_sorted: bool = False  # the verdicts are in key order (cached, or tallied)
    write_tally: Any = None  # the accumulator of the write's `tally_task`, when it tallies them
    deferred: tuple[DataFrame, DataFrame, dict[str, T.DataType]] | None = None
    """What `duplicates` was given when it deferred the check to the write (`untallied`)."""
    none_rejected: bool = False  # with the tally: no position row is rejected (known as read)

    def duplicates(self, verdicts: DataFrame, rejected: DataFrame | None,
                   types: dict[str, T.DataType], *, tally: bool = True
                   ) -> tuple[DataFrame, DataFrame]:
        """`ordering.split_duplicates`, run on the key groups that can hold duplicates (a
        key twice among the verdicts, or also among the rejected rows): the other verdict
        rows do not move. `rejected` None: no row was rejected (known without a job).

        Verdicts that must be sorted, and whose keys no rejected row has, are sorted as they
        are written and tallied on their way (`tally_task`): no cache of the sorted rows, no
        job of their own for the repeated keys and the counts. `tally` False, or on Spark
        Connect (no accumulators): the sorted rows are cached and checked first."""
        casted_schema = struct(*pairs(REJECT_SCHEMA), *[(f"_k_{k}", types[k]) for k in KEYS])
        none_rejected = rejected is None
        if rejected is None:  # empty frames of Spark's own (no Python task to make them)
            rejected = self.spark.range(0).select(*nulls(REJECT_SCHEMA))
            casted, also = self.spark.range(0).select(*nulls(casted_schema)), None
        else:
            casted = self.map(
                rejected.filter(F.col("rule_set_id").isNotNull()
                                & F.col("position_id").isNotNull()),
                cast_keys_task, casted_schema,
                dtypes={k: pl.Int64 if t == LONG else pl.String for k, t in types.items()})
            casted = casted.filter(F.col("_k_rule_set_id").isNotNull()
                                   & F.col("_k_position_id").isNotNull())
            also = self.persist(casted.select(*[F.col(f"_k_{k}").alias(k) for k in KEYS])
                                .distinct())
            if also.isEmpty():  # the usual case: no rejected row has a verdict's key
                also = None
        key_schema = struct(*[(k, types[k]) for k in KEYS])
        keyed = verdicts.drop("_loc", "verdict")
        columns = [c for c in verdicts.columns if c != "_loc"]
        # read straight to the sort: the footers showed the rows out of key order
        repeated = None if self.reads is not None else self.in_order_repeats(keyed, key_schema)
        if repeated is None and tally and also is None and not is_connect(self.spark):
            self.write_tally = self.spark.sparkContext.accumulator({}, KeyedTallies())
            self.deferred = (verdicts, rejected, types)
            self.none_rejected = none_rejected
            self.verdicts_sorted = True
            log.info("verdicts: sorted as they are written, their keys tallied on the way")
            sorted_keyed = self.sorted(keyed, types)
            return _with_verdict(self.map(sorted_keyed, tally_task, sorted_keyed.schema,
                                          tally=self.write_tally), columns), rejected
        ordered = keyed
        if repeated is None:
            ordered = self.persist(self.sorted(keyed, types))
            repeated = self.map(ordered.select(*KEYS), repeated_task, key_schema)
        # rare: a rejected row's key, which a verdict may also have
        suspects = repeated
        if also is not None:
            suspects = suspects.unionByName(also.join(ordered.select(*KEYS), KEYS, "left_semi"))
        suspects = self.persist(suspects)
        if suspects.isEmpty():  # the usual case: the verdicts are sorted already
            self.verdicts_sorted = True
            return _with_verdict(ordered, columns), rejected
        columns = verdicts.columns
        verdict_side = verdicts.join(suspects, KEYS, "left_semi").select(
            F.lit(0).alias("_side"), *columns,
            *nulls(REJECT_SCHEMA, drop=tuple(KEYS)),
            *[F.lit(None).cast(STRING).alias(f"_r_{k}") for k in KEYS])
        reject_side = casted.join(
            suspects.select(*[F.col(k).alias(f"_k_{k}") for k in KEYS]),
            [f"_k_{k}" for k in KEYS], "left_semi").select(
            F.lit(1).alias("_side"), *[F.col(f"_k_{k}").alias(k) for k in KEYS],
            *nulls(verdicts.schema, drop=tuple(KEYS)),
            *[F.col(f.name) for f in REJECT_SCHEMA.fields if f.name not in KEYS],
            *[F.col(k).alias(f"_r_{k}") for k in KEYS])
        groups = self.persist(self.by_key(verdict_side.unionByName(reject_side)))
        kwargs = {"sources": [str(p) for p in self.paths], "columns": columns}
        clean = self.map(groups, split_task, struct(*pairs(verdicts.schema, ("_loc",))),
                         keep="clean", **kwargs)
        dups = self.map(groups, split_task, REJECT_SCHEMA, keep="duplicates", **kwargs)
        kept = verdicts.join(suspects, KEYS, "left_anti").drop("_loc")
        return kept.unionByName(clean), rejected.unionByName(dups)

    def untallied(self) -> tuple[DataFrame, DataFrame]:
        """The verdicts and rejects again, by the path that caches the sorted rows and
        splits the duplicates off first: for a write whose tally found a key twice."""
        assert self.deferred is not None
        verdicts, rejected, types = self.deferred
        self.write_tally, self.deferred, self.verdicts_sorted = None, None, False
        self.none_rejected = False
        return self.duplicates(verdicts, rejected, types, tally=False)

    def in_order_repeats(self, verdicts: DataFrame, key_schema: T.StructType
                         ) -> DataFrame | None:
        """The keys `verdicts` hold more than once if their rows come in key order already
        (sorted exports, read in file order), found in one pass over the cached keys that
        keeps their partitions (no sort: a sampling job, a shuffle of every row); None if
        they must be sorted. The first rows (`ORDER_PROBE_ROWS`, on the driver) decide
        whether that pass is worth making: most input is not in key order, and the pass
        costs a third of the sort. The read's sample of the keys (`read_key_stats`), a
        subsequence of the rows in their order, tells it without that look when it is out
        of order itself."""
        stats = self.read_key_stats()
        if stats is not None and stats.samples != sorted(stats.samples):
            log.info("verdicts: not in key order (the read's sample); sorting them")
            return None
        head = polars_frame(verdicts.select(*KEYS).limit(ORDER_PROBE_ROWS))
        if head.equals(head.sort(KEYS, maintain_order=True)):
            return self.in_key_order(verdicts, key_schema)
        log.info("verdicts: not in key order (the first rows); sorting them")
        return None

    def in_key_order(self, verdicts: DataFrame, key_schema: T.StructType
                     ) -> DataFrame | None:
        """The keys `verdicts` hold more than once, if its partitions are each in key order
        and in order among themselves (`order_task`, one pass); None if they are not."""
        checked = self.persist(self.map(
            verdicts.select(F.spark_partition_id().alias("_part"), *KEYS), order_task,
            struct(("_kind", INT), ("_part", INT), ("_sorted", BOOL), *pairs(key_schema),
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
        stats = self.read_key_stats()
        if stats is not None:
            lo_r, hi_r = stats.lo_rule_set_id, stats.hi_rule_set_id
            lo_p, hi_p = stats.lo_position_id, stats.hi_position_id
        else:
            lo_r, hi_r, lo_p, hi_p = verdicts.agg(
                F.min("rule_set_id"), F.max("rule_set_id"), F.min("position_id"),
                F.max("position_id")).collect()[0]
        if lo_r is None or not one_long_fits(lo_r, hi_r, lo_p, hi_p):
            return verdicts.orderBy(*KEYS)
        span = hi_p - lo_p + 1
        order = _one_long(lo_r, hi_r, lo_p, hi_p)
        parts = max(1, self.slots())
        if stats is None or parts > MAX_RANGES or not hasattr(verdicts, "repartitionById"):
            return verdicts.orderBy(order)
        # the ranges of the sort's partitions from the tasks' sample, as Spark's range
        # partitioning would draw them from a sampling pass of its own
        keys = sorted((r - lo_r) * span + (p - lo_p) for r, p in stats.samples)
        bounds = sorted({keys[len(keys) * i // parts] for i in range(1, parts)})
        log.info("verdicts: sorted in %d ranges drawn from the read's sample of %d keys",
                 len(bounds) + 1, len(keys))
        part = F.lit(len(bounds))
        for i, bound in reversed(list(enumerate(bounds))):
            part = F.when(order < F.lit(bound), F.lit(i)).otherwise(part)
        return (verdicts.repartitionById(len(bounds) + 1, part)
                .sortWithinPartitions(order))

    def read_key_stats(self) -> KeyStats | None:
        """The reading tasks' bounds and sample of the valid keys, if they hold for the
        verdicts (bounds and a sample of more rows, those an evaluation after the read
        rejects, do too): not with default position ids (shifted after the read), nor on
        Spark Connect."""
        if (self.key_stats is None or is_connect(self.spark) or self.schemas is None
                or any(f.default_pid for f in self.schemas)):
            return None
        return self.key_stats


def _one_long(lo_r: int, hi_r: int, lo_p: int, hi_p: int) -> Any:
    """(rule_set_id - lo_r) * span + (position_id - lo_p), in key order for keys within the
    bounds. A key beyond them (bounds from footers a writer got wrong) is clamped, its
    position id to the end its rule set falls off: never an overflow, which Spark's ANSI mode
    raises, and never out of order with keys within them; keys beyond them may tie, and the
    write's tally finds them out of order if they are (`tallied_counts`)."""
    rid, pid = F.col("rule_set_id"), F.col("position_id")
    rid_in = F.least(F.greatest(rid, F.lit(lo_r)), F.lit(hi_r))
    pid_in = (F.when(rid > F.lit(hi_r), F.lit(hi_p)).when(rid < F.lit(lo_r), F.lit(lo_p))
              .otherwise(F.least(F.greatest(pid, F.lit(lo_p)), F.lit(hi_p))))
    return (rid_in - F.lit(lo_r)) * F.lit(hi_p - lo_p + 1) + (pid_in - F.lit(lo_p))


def tallied_counts(tallies: dict[Any, PartitionTally], types: dict[str, T.DataType]
                   ) -> pl.DataFrame | None:
    """W and L per rule set of verdicts written with `tally_task` (`tallies`: by partition
    number), or None if they hold a key twice (within a partition, or ending one and
    starting the next) or are not in key order (the sort's ranges came from wrong
    statistics)."""
    parts = [tallies[number] for number in sorted(tallies)]
    if any(p.repeated or p.backwards for p in parts) or any(
            a.last >= b.first for a, b in zip(parts, parts[1:])):
        return None
    empty = pl.DataFrame(schema={"rule_set_id": pl.Int64 if types["rule_set_id"] == LONG
                                 else pl.String, "W": pl.Int64, "L": pl.Int64})
    return (pl.concat([empty, *[p.counts.cast(empty.schema) for p in parts]])
            .group_by("rule_set_id").agg(pl.col("W", "L").sum()))


def _with_verdict(ordered: DataFrame, columns: list[str]) -> DataFrame:
    """The output's columns (`columns`), the verdict made from the nim-sum."""
    return ordered.select(*[verdict().alias(c) if c == "verdict" else c for c in columns])


def verdict() -> Any:
    """`evaluate.with_verdict`'s verdict: W iff the nim-sum is not 0."""
    return F.when(F.col("nim_sum") != 0, "W").when(F.col("nim_sum") == 0, "L")


def polars_frame(df: DataFrame) -> pl.DataFrame:
    frame = pl.from_arrow(df.toArrow())
    assert isinstance(frame, pl.DataFrame)
    return frame
