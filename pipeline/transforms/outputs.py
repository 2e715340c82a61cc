"""The output tables besides verdicts: rejects, sg_tables and summary."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

import numpy as np
import polars as pl

from pipeline import kernels
from pipeline.grundy import Rule, SGTable, TableSet
from pipeline.keys import rejected_key_as, repeated_ids
from pipeline.transforms.reasons import reason_code
from pipeline.transforms.schema import HEAPS, REJECT_SCHEMA, with_source_text


def reject_rows(frame: pl.DataFrame, table: str) -> pl.DataFrame:
    """Rows with a reason, in the rejects schema (keys as text, as given; `reason_code` read
    off the reason, `source` without `.` and `..` segments: `schema.source_text`)."""
    bad = frame.filter(pl.col("_reason").is_not_null())
    if bad.height:
        bad = bad.with_columns(with_source_text(bad["_source"]).alias("_source"))
    exprs = {
        "table": pl.lit(table),
        "source": pl.col("_source"),
        "row": pl.col("_row"),
        "rule_set_id": pl.col("rule_set_id").cast(pl.String),
        "position_id": (pl.col("position_id").cast(pl.String) if "position_id" in bad.columns
                        else pl.lit(None, pl.String)),
        "column": pl.col("_column"),
        "reason_code": reason_code(pl.col("_reason")),
        "reason": pl.col("_reason"),
    }
    return bad.select(**exprs).cast(REJECT_SCHEMA)


def sort_rejects(rejects: pl.DataFrame) -> pl.DataFrame:
    return rejects.sort("table", "source", "row", descending=[True, False, False])


class PeriodStatus(str, Enum):
    """Why `sg_tables.period` is what it is (docs/outputs.md, The tables: sg_tables)."""

    proven = "proven"
    """A repeat of max(S) consecutive values was found: preperiod and period are exact."""
    closed_form = "closed_form"
    """`nim` or `half`: SG(x) is a formula of x, with no table and no period."""
    table_stopped_by_limit = "table_stopped_by_limit"
    """A `tables.*` limit (`stopped_by`) stopped the table before a period was proven."""
    not_found_within_budget = "not_found_within_budget"
    """No limit stopped the table, but no period showed within the values the data needed
    and the `tables.period_probe_ops` spent past them."""


PERIOD_STATUS_MEANING = {
    PeriodStatus.proven: "a repeat of max(S) consecutive values proves the preperiod and "
                         "period exactly",
    PeriodStatus.closed_form: "nim or half: SG(x) is a formula of x; no table, no period",
    PeriodStatus.table_stopped_by_limit: "the tables.* limit in stopped_by stopped the table "
                                         "before a period showed; heaps past table_len are "
                                         "rejected",
    PeriodStatus.not_found_within_budget: "no period showed within the values the data "
                                          "needed and tables.period_probe_ops spent past "
                                          "them; every heap of the data was looked up",
}
"""What each `PeriodStatus` means, as the report explains it."""


def period_status(table: SGTable) -> PeriodStatus:
    if table.rule.kind != "subtraction":
        return PeriodStatus.closed_form
    if table.period is not None:
        return PeriodStatus.proven
    if table.stopped_by is not None:
        return PeriodStatus.table_stopped_by_limit
    return PeriodStatus.not_found_within_budget


def run_key_type(index: pl.DataFrame, verdict_counts: pl.DataFrame) -> pl.DataType:
    """The rule_set_id type of every output but the rejects: text when the rules' keys
    (`index`) or the verdicts' are text, else Int64 (`keys.py` decides each)."""
    types = {index["rule_set_id"].dtype, verdict_counts["rule_set_id"].dtype}
    return pl.String if pl.String in types else pl.Int64


def sg_table_rows(rules: pl.DataFrame, distinct: Sequence[Rule], tables: TableSet,
                  index: pl.DataFrame, key_type: pl.DataType = pl.String) -> pl.DataFrame:
    """One row per distinct rule: kind, canonical moves, the rule_set_ids sharing it (a list
    of `key_type`, the type summary and verdicts give rule_set_id), periods and why a
    period is what it is, the values tabulated and the limit that stopped the table (the
    one, with that length, that the rule's rejected rows name)."""
    ids = (index.filter(pl.col("table").is_not_null())
           .group_by("table").agg(pl.col("rule_set_id").cast(key_type).sort()
                                  .alias("rule_set_ids")))
    built = {t.rule: t for t in tables.tables}
    found = [built.get(r) for r in distinct]  # a rule's hash reads all its moves: once each
    frame = pl.DataFrame({
        "table": pl.Series(range(len(distinct)), dtype=pl.Int64),
        "kind": pl.Series([r.kind for r in distinct], dtype=pl.String),
        "moves": pl.Series([list(r.moves) for r in distinct], dtype=HEAPS),
        "preperiod": pl.Series([None if t is None else t.preperiod for t in found],
                               dtype=pl.Int64),
        "period": pl.Series([None if t is None else t.period for t in found], dtype=pl.Int64),
        "period_status": pl.Series([None if t is None else period_status(t).value
                                    for t in found], dtype=pl.String),
        "table_len": pl.Series([0 if t is None else t.table_len for t in found],
                               dtype=pl.Int64),
        "stopped_by": pl.Series([None if t is None else t.stopped_by for t in found],
                                dtype=pl.String),
    })
    return frame.join(ids, on="table", how="left").select(
        "kind", "moves", "rule_set_ids", "preperiod", "period", "period_status", "table_len",
        "stopped_by"
    ).sort("kind", "moves")


def summary_counts(verdicts: pl.DataFrame, rejects: pl.DataFrame,
                   rule_ids: pl.Series | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per rule set: (rule_set_id, W, L) from verdicts and (rule_set_id as text, rejected)
    from the positions' rejects. `rule_ids`: the run's rule ids, sorted (`keys.sorted_ids`),
    among which text ids in key order are found by binary search."""
    counts = _run_counts(verdicts, rule_ids)
    if counts is None:
        counts = verdicts.group_by("rule_set_id").agg(
            (pl.col("nim_sum") != 0).sum().cast(pl.Int64).alias("W"),
            (pl.col("nim_sum") == 0).sum().cast(pl.Int64).alias("L"))
        if isinstance(counts["rule_set_id"].dtype, pl.Enum):  # text ids as codes, unsorted
            counts = counts.with_columns(pl.col("rule_set_id").cast(pl.String))
    return counts, rejected_by_rule(rejects)


def rejected_by_rule(rejects: pl.DataFrame) -> pl.DataFrame:
    """(rule_set_id as text, rejected): the positions' rejected rows per rule set named."""
    return (rejects.filter((pl.col("table") == "positions") & pl.col("rule_set_id").is_not_null())
            .group_by("rule_set_id").agg(pl.len().cast(pl.Int64).alias("rejected")))


def _run_counts(verdicts: pl.DataFrame, rule_ids: pl.Series | None) -> pl.DataFrame | None:
    """(rule_set_id, W, L) from runs of equal ids, when the ids are sorted (verdicts in key
    order): no hash group_by over every verdict. Integer ids, and text ids as the Enum codes
    the sort gives them (`keys.ids_at`), are cut into runs by a kernel; other text ids
    by a binary search for each of `rule_ids` (when every row's id is one of them) or else
    where each differs from the one before it."""
    rid = verdicts["rule_set_id"]
    if isinstance(rid.dtype, pl.Enum) and not rid.null_count() and rid.is_sorted():
        with kernels.threads_for(rid.len()):
            codes, sizes, losing = kernels.run_counts(rid.to_physical().to_numpy(),
                                                      verdicts["nim_sum"].to_numpy())
        return pl.DataFrame({"rule_set_id": rid.dtype.categories.gather(codes),
                             "W": sizes - losing, "L": losing},
                            schema={"rule_set_id": pl.String, "W": pl.Int64, "L": pl.Int64})
    if rid.dtype not in (pl.Int64, pl.String) or rid.null_count() or not rid.is_sorted():
        return None
    nim = verdicts["nim_sum"].to_numpy()
    if rid.dtype == pl.Int64:
        with kernels.threads_for(rid.len()):
            ids, sizes, losing = kernels.run_counts(rid.to_numpy(), nim)
        return pl.DataFrame({"rule_set_id": ids, "W": sizes - losing, "L": losing},
                            schema={"rule_set_id": pl.Int64, "W": pl.Int64, "L": pl.Int64})
    starts = _searched_starts(rid, rule_ids)
    if starts is None:
        starts = np.flatnonzero((rid != rid.shift(1)).fill_null(True).to_numpy())
    sizes = np.diff(np.append(starts, rid.len())).astype(np.int64)
    losing = (np.add.reduceat(nim == 0, starts, dtype=np.int64) if starts.shape[0]
              else np.zeros(0, np.int64))
    return pl.DataFrame({"rule_set_id": rid.gather(starts), "W": sizes - losing, "L": losing},
                        schema={"rule_set_id": pl.String, "W": pl.Int64, "L": pl.Int64})


def rule_ids_as_codes(verdicts: pl.DataFrame, rule_ids: pl.Series | None) -> pl.DataFrame:
    """Verdicts in key order whose text rule ids are all among `rule_ids` (sorted, as
    `keys.sorted_ids`) with rule_set_id as an Enum of them: the same text to a reader, which
    the Parquet writer encodes from the codes (`commit.sink_parquet` declares the column
    text) instead of hashing every row's id to find its dictionary. Else as they are."""
    rid = verdicts["rule_set_id"]
    if rid.dtype != pl.String or rid.null_count() or not rid.is_sorted():
        return verdicts
    runs = _id_runs(rid, rule_ids)
    if runs is None:
        return verdicts
    assert rule_ids is not None
    first, end = runs
    return verdicts.with_columns(repeated_ids(rule_ids, end - first))


def _searched_starts(rid: pl.Series, rule_ids: pl.Series | None) -> np.ndarray | None:
    """Where each id's run starts in sorted text ids `rid`, found among sorted `rule_ids`;
    None unless the runs found cover every row (an id outside `rule_ids`)."""
    runs = _id_runs(rid, rule_ids)
    if runs is None:
        return None
    first, end = runs
    return first[end > first]


def _id_runs(rid: pl.Series, rule_ids: pl.Series | None) -> tuple[np.ndarray, np.ndarray] | None:
    """Where each of sorted `rule_ids` starts and ends in sorted ids `rid` (an empty run for
    an id it does not hold), by binary search; None unless the runs cover every row (an id
    outside `rule_ids`)."""
    if (rule_ids is None or rule_ids.dtype != rid.dtype or rule_ids.null_count()
            or not rule_ids.is_sorted()):
        return None
    first = rid.search_sorted(rule_ids, "left").to_numpy().astype(np.int64)
    end = rid.search_sorted(rule_ids, "right").to_numpy().astype(np.int64)
    if int((end - first).sum()) != rid.len():
        return None
    return first, end


def summary_rows(index: pl.DataFrame, counts: pl.DataFrame, rejected: pl.DataFrame
                 ) -> pl.DataFrame:
    """Per rule set: positions evaluated (W + L), W, L, rejected input rows, and W rate, from
    `summary_counts` (or an engine's own aggregation of the same shape). rule_set_id is of
    the run's key type (`run_key_type`), as in verdicts and sg_tables: a rejected row whose
    rule_set_id is no key of that type (text such as "abc" or "07" in a run of integer
    keys) belongs to no rule set here, as a row without one (rejects.parquet keeps it)."""
    key_type = run_key_type(index, counts)
    rejected = rejected.select(rejected_key_as("rule_set_id", key_type), "rejected"
                               ).drop_nulls("rule_set_id").group_by("rule_set_id").agg(
        pl.col("rejected").sum())
    ids = pl.concat([index.select(pl.col("rule_set_id").cast(key_type)),
                     rejected.select("rule_set_id")]).unique()
    frame = (ids.join(counts.with_columns(pl.col("rule_set_id").cast(key_type)),
                      on="rule_set_id", how="left")
             .join(rejected, on="rule_set_id", how="left")
             .with_columns(pl.col("W", "L", "rejected").fill_null(0)))
    return frame.select(
        "rule_set_id",
        (pl.col("W") + pl.col("L")).alias("positions"),
        "W", "L", "rejected",
        pl.when(pl.col("W") + pl.col("L") > 0)
        .then(pl.col("W") / (pl.col("W") + pl.col("L"))).alias("w_rate"),
    ).sort("rule_set_id")
