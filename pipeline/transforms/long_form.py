"""Long-form rows (one heap a row) -> positions, and the split of a large input into parts
that each hold every row of their positions."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from pipeline import kernels
from pipeline.keys import key_hash
from pipeline.transforms.buffers import arrow_int64, list_chunks
from pipeline.transforms.evaluate import valid_ranks
from pipeline.transforms.schema import HEAPS


def by_partition(rows: pl.DataFrame, parts: int) -> dict[int, pl.DataFrame]:
    """Long-form rows split into `parts` groups by a hash of their key, so that every row of
    a position lands in the same group (see `key_hash`)."""
    part = rows.select(((key_hash(rows, "rule_set_id") % parts
                         + key_hash(rows, "position_id") % parts) % parts).alias("_part"))
    return {int(p): frame.drop("_part") for (p,), frame in
            rows.with_columns(part.to_series()).partition_by("_part", as_dict=True).items()}


def to_scratch(rows: pl.DataFrame, file_index: int) -> pl.DataFrame:
    """Long-form rows as written to scratch files: `_source` becomes the file's index (each
    row's `_file` in a batch of files read together, else `file_index`), the one-heap lists
    their heap, and the reason columns are left out when they are empty (the usual case);
    this cuts the time to write and read them back by more than half. `from_scratch`
    restores all three."""
    file = pl.col("_file") if "_file" in rows.columns else pl.lit(file_index)
    rows = rows.drop("_source").with_columns(file.cast(pl.Int32).alias("_file"),
                                             pl.col("heaps").list.first())
    if rows["_column"].null_count() == rows["_reason"].null_count() == rows.height:
        rows = rows.drop("_column", "_reason")
    return rows


def from_scratch(rows: pl.DataFrame, sources: Sequence[str], columns: Sequence[str]
                 ) -> pl.DataFrame:
    """Undo `to_scratch`: `sources` are the file names by index, `columns` the rows' columns."""
    empty = [pl.lit(None, pl.String).alias(name) for name in ("_column", "_reason")
             if name not in rows.columns]
    source = pl.Series(list(sources), dtype=pl.String).gather(rows["_file"])
    heaps = pl.when(pl.col("heaps").is_not_null()).then(pl.concat_list("heaps")).alias("heaps")
    return rows.with_columns(source.alias("_source"), heaps, *empty).select(columns)


def long_to_wide(rows: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Collect long-form rows into positions (heaps in input order).

    A position with any bad row is rejected whole: its bad rows keep their reason, the others
    name it. Returns (positions in wide form, rejected rows).
    """
    wide_rows = (pl.col("_source").first(), pl.col("_row").first(),
                 pl.col("heaps").list.first().alias("heaps"),
                 pl.col("_row").alias("_rows"), pl.col("_source").alias("_sources"))
    no_reasons = (pl.lit(None, pl.String).alias("_column"),
                  pl.lit(None, pl.String).alias("_reason"))
    clean = (rows["_reason"].null_count() == rows.height
             and not rows["rule_set_id"].null_count() and not rows["position_id"].null_count())
    if clean:  # no row to reject, and none to taint its position
        wide = rows.group_by("rule_set_id", "position_id", maintain_order=True).agg(*wide_rows)
        return wide.with_columns(*no_reasons), rows.clear()
    rows = rows.with_row_index("_order")
    bad = pl.col("_reason").is_not_null()
    tainted = rows.with_columns(
        bad.any().over("rule_set_id", "position_id").alias("_t"),
        pl.col("_row").filter(bad).first().over("rule_set_id", "position_id").alias("_bad_row"),
        pl.col("_source").filter(bad).first().over("rule_set_id", "position_id")
        .alias("_bad_source"),
    )
    keyless = pl.col("rule_set_id").is_null() | pl.col("position_id").is_null()
    rejected = tainted.filter(pl.col("_t") | keyless).with_columns(
        pl.coalesce("_reason", _other_row_rejected("_bad_source", "_bad_row")).alias("_reason")
    ).drop("_t", "_bad_row", "_bad_source", "_order")
    good = tainted.filter(~pl.col("_t") & ~keyless)
    wide = (good.sort("_order").group_by("rule_set_id", "position_id", maintain_order=True)
            .agg(*wide_rows).with_columns(*no_reasons))
    return wide, rejected


def long_to_wide_sorted(rows: pl.DataFrame, index: pl.DataFrame) -> pl.DataFrame | None:
    """`long_to_wide` then `attach_tables` for the common case, by a counting sort instead of a
    group_by: clean rows with integer position ids whose rule set ids (integer or text) all
    name a valid rule set (else None, for the general path). Positions come out in key
    order, each with its heaps in input order (the sort is stable); they carry no input
    locations (`_source` "", `_row` -1), which only rejects would need."""
    pid = rows["position_id"]
    if (pid.dtype != pl.Int64 or pid.null_count() or rows["heaps"].null_count()
            or rows["_reason"].null_count() != rows.height):
        return None
    found = valid_ranks(rows["rule_set_id"], index)
    if found is None:
        return None
    ids, tables, bucket = found
    heaps = rows["heaps"].list.first().to_numpy()
    dest = np.empty(rows.height, np.int32 if rows.height < 2**31 else np.int64)
    sorted_pid, counts = kernels.counting_sort(bucket, ids.len(), pid.to_numpy(), dest)
    offsets, run_bucket = kernels.key_runs(counts, sorted_pid)
    with kernels.threads_for(rows.height):
        scattered = kernels.scatter(heaps, dest)
    lists = pa.LargeListArray.from_arrays(arrow_int64(offsets), arrow_int64(scattered))
    return pl.DataFrame({
        "rule_set_id": ids.gather(run_bucket), "position_id": sorted_pid[offsets[:-1]],
        "heaps": pl.Series(lists, dtype=HEAPS),
        "table": tables[run_bucket],
    }).select(pl.lit("", pl.String).alias("_source"), pl.lit(-1, pl.Int64).alias("_row"),
              "rule_set_id", "position_id", "heaps", pl.lit(None, pl.String).alias("_column"),
              pl.lit(None, pl.String).alias("_reason"), "table")


def long_to_wide_in_order(rows: pl.DataFrame, bucket: np.ndarray, ids: pl.Series,
                          tables: np.ndarray) -> pl.DataFrame | None:
    """`long_to_wide_sorted` for rows in key order (either one), whose rule set ids' ranks
    among `ids` (`keys.sorted_ids` of the index's) are `bucket` and whose ranks' tables are
    `tables` (`evaluate.tables_of_ranks`): every position's rows are then one run, so the
    runs of equal keys are the positions, in input order, without a sort or a copy of the
    heaps. Each position keeps its rank as `_bucket`, for `ordering.verdict_part`. None
    where `long_to_wide_sorted` would be (a row to reject, a rule set without a table)."""
    pid = rows["position_id"]
    if (pid.dtype != pl.Int64 or pid.null_count() or rows["heaps"].null_count()
            or rows["_reason"].null_count() != rows.height):
        return None
    p = pid.to_numpy()
    new_key = np.empty(p.shape[0], np.bool_)
    new_key[:1] = True
    np.not_equal(p[1:], p[:-1], out=new_key[1:])
    new_key[1:] |= bucket[1:] != bucket[:-1]
    starts = np.flatnonzero(new_key)
    run_bucket = bucket[starts]
    run_tables = tables[run_bucket]
    if run_tables.size and run_tables.min() < 0:
        return None
    heaps = []  # the rows' one-heap lists' values, as they lie in their buffers
    for row_offsets, values, nulls in list_chunks(rows["heaps"]):
        if nulls or not (np.diff(row_offsets) == 1).all():  # not rows `normalize` makes
            return None
        heaps.append(values[row_offsets[0]:row_offsets[-1]])
    offsets = np.append(starts, p.shape[0]).astype(np.int64)
    flat = heaps[0] if len(heaps) == 1 else np.concatenate(heaps + [np.zeros(0, np.int64)])
    lists = pa.LargeListArray.from_arrays(arrow_int64(offsets), arrow_int64(flat))
    return pl.DataFrame({
        "rule_set_id": ids.gather(run_bucket), "position_id": p[starts],
        "heaps": pl.Series(lists, dtype=HEAPS), "table": run_tables,
        "_bucket": run_bucket.astype(np.int32),
    }).select(pl.lit("", pl.String).alias("_source"), pl.lit(-1, pl.Int64).alias("_row"),
              "rule_set_id", "position_id", "heaps", pl.lit(None, pl.String).alias("_column"),
              pl.lit(None, pl.String).alias("_reason"), "table", "_bucket")


def _other_row_rejected(source: str, row: str) -> pl.Expr:
    """The reason of a long-form row whose position lost another row: which file and row."""
    return pl.format("another row of this position ({} row {}) was rejected", pl.col(source),
                     pl.col(row))


_ONE_HEAP = r"^heap -?[0-9]+ at index ([0-9]+) needs SG values "
"""A position's reason that is one heap's (`evaluate`, beyond a table): its index among the
position's heaps, so among its rows in input order."""
_TABULATED = r" \(([0-9]+) values? tabulated\)"
"""How many SG values the heap's table holds, in that reason: the heaps from there on are
beyond it."""


def expand_long_rejects(rejected_positions: pl.DataFrame) -> pl.DataFrame:
    """Position-level rejects of long-form input, back to one row per input row. A reason
    that is the rule set's (unknown, invalid) holds for every row; one that is a heap's
    (beyond its table) is said on the row of every heap beyond that table, for its own heap
    (without the index, which long form does not have), and the other rows name the first
    such row, as `long_to_wide` names a bad row."""
    reason = pl.col("_reason")
    at = reason.str.extract(_ONE_HEAP, 1).cast(pl.Int64)
    rows = rejected_positions.drop("_source", "_row").with_columns(
        at.alias("_at"), pl.int_ranges(pl.col("_rows").list.len()).alias("_i"),
        reason.str.extract(_TABULATED, 1).cast(pl.Int64).alias("_tabulated"),
        pl.col("_rows").list.get(at, null_on_oob=True).alias("_bad_row"),
        pl.col("_sources").list.get(at, null_on_oob=True).alias("_bad_source"),
    ).explode("_rows", "_sources", "_i").rename({"_rows": "_row", "_sources": "_source"})
    heap = pl.col("heaps").list.get(pl.col("_i"), null_on_oob=True)
    beyond = pl.col("_bad_row").is_not_null() & (
        (pl.col("_i") == pl.col("_at")) | (heap >= pl.col("_tabulated")).fill_null(False))
    own = pl.format("heap {} {}", heap, reason.str.replace(r"^heap -?[0-9]+ at index [0-9]+ ",
                                                           ""))
    other = pl.col("_bad_row").is_not_null() & ~beyond
    return rows.with_columns(
        pl.when(beyond).then(own).when(other).then(_other_row_rejected("_bad_source", "_bad_row"))
        .otherwise(reason).alias("_reason"),
        pl.when(other).then(pl.lit(None, pl.String)).otherwise(pl.col("_column"))
        .alias("_column"),
    ).drop("_at", "_i", "_tabulated", "_bad_row", "_bad_source")
