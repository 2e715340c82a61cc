"""Rule sets to tables, heaps to nim-sums and winning moves, nim-sums to verdicts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import polars as pl

from pipeline import kernels, keys
from pipeline.grundy import TableSet, counted_values
from pipeline.transforms.buffers import HeapChunks, gathered_rows, heap_buffers, row_slices
from pipeline.transforms.schema import shown_text

FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)


@dataclass(frozen=True)
class RankedIndex:
    """A rule index's ids in key order (`keys.sorted_ids`) and the table of each (-1 for
    none): what `attach_tables` ranks a batch's rule ids against, built once for all the
    batches that share the index rather than once each."""

    ids: pl.Series
    tables: np.ndarray
    enum: pl.Enum | None  # text ids: the Enum that ranks them (`keys.ranks`)

    @classmethod
    def of(cls, index: pl.DataFrame) -> RankedIndex:
        ids = keys.sorted_ids(index["rule_set_id"])
        return cls(ids, tables_of_ranks(ids, index),
                   pl.Enum(ids) if ids.dtype == pl.String else None)

    @property
    def all_valid(self) -> bool:
        """Every id names a rule set with a table."""
        return not self.tables.size or self.tables.min() >= 0


def attach_tables(positions: pl.DataFrame, index: pl.DataFrame,
                  ranked: RankedIndex | None = None) -> pl.DataFrame:
    """Add `table` to each position; unknown or invalid rule sets become reasons. `ranked`:
    `RankedIndex.of(index)`, when the caller keeps it for many batches."""
    fast = _tables_by_rank(positions, ranked or RankedIndex.of(index))
    if fast is not None:
        return fast
    joined = positions.join(index, on="rule_set_id", how="left", maintain_order="left")
    newly_bad = pl.col("_reason").is_null() & pl.col("table").is_null()
    return joined.with_columns(
        pl.when(newly_bad).then(pl.coalesce(
            "rule_problem",
            pl.format("unknown rule_set_id {} (not in the rules table)",
                      shown_text(pl.col("rule_set_id"))),
        )).otherwise(pl.col("_reason")).alias("_reason"),
        pl.when(newly_bad).then(pl.lit("rule_set_id")).otherwise(pl.col("_column"))
        .alias("_column"),
    ).drop("rule_problem")


def valid_ranks(rid: pl.Series, index: pl.DataFrame
                ) -> tuple[pl.Series, np.ndarray, np.ndarray] | None:
    """For ids that all name a valid rule set: (the valid ids in key order, their tables,
    each id's rank among them); else None, for the hash join and its reasons."""
    if rid.dtype != index["rule_set_id"].dtype or rid.null_count():
        return None
    ordered = index.filter(pl.col("table").is_not_null()).sort("rule_set_id")
    ids = ordered["rule_set_id"]
    found = keys.ranks(rid, ids)
    if found.size and found.min() < 0:
        return None
    return ids, ordered["table"].to_numpy().astype(np.int64), found


def _tables_by_rank(positions: pl.DataFrame, ranked: RankedIndex) -> pl.DataFrame | None:
    """The common case without a hash join: ids that all name a valid rule set. Each row's
    rank among all the index's ids in key order (`keys.sorted_ids`) is kept as `_bucket`,
    which `ordering.verdict_part` takes for the same ids instead of ranking them again (a
    hash per row for text ids)."""
    rid = positions["rule_set_id"]
    if rid.dtype != ranked.ids.dtype or rid.null_count():
        return None
    bucket = keys.ranks(rid, ranked.ids, ranked.enum, np.int32)
    if bucket.size and bucket.min() < 0:
        return None
    tables = ranked.tables[bucket]
    if not ranked.all_valid and tables.size and tables.min() < 0:
        return None
    return positions.with_columns(pl.Series("table", tables, dtype=pl.Int64),
                                  pl.Series("_bucket", bucket))


def tables_of_ranks(ids: pl.Series, index: pl.DataFrame) -> np.ndarray:
    """The table of each of `ids` (`keys.sorted_ids` of the index's), -1 for none: so a
    rank among them gives its row's table by one gather."""
    return pl.DataFrame({"rule_set_id": ids}).join(
        index.select("rule_set_id", "table"), on="rule_set_id", how="left",
        maintain_order="left")["table"].fill_null(-1).to_numpy().astype(np.int64)


def largest_heaps(positions: pl.DataFrame, n_tables: int,
                  buffers: HeapChunks | None = None) -> np.ndarray:
    """Per table, the largest heap that valid positions look up in it (-1 where none)."""
    table_of_row = positions.select(
        pl.when(pl.col("_reason").is_null()).then(pl.col("table")).otherwise(-1)
        .fill_null(-1).cast(pl.Int64)).to_series().to_numpy()
    largest = np.full(n_tables, -1, np.int64)
    for rows, offsets, values in row_slices(buffers or heap_buffers(positions)):
        np.maximum(largest, kernels.max_heap_per_table(offsets, values, table_of_row[rows],
                                                       n_tables), out=largest)
    return largest


def evaluate(positions: pl.DataFrame, tables: TableSet, winning_moves: bool,
             buffers: HeapChunks | None = None,
             grow: Callable[[np.ndarray], TableSet] | None = None) -> pl.DataFrame:
    """nim_sum (and a winning move) for valid positions; a heap beyond its table (no proven
    period within the cap) becomes the row's reason.

    `grow` (every table's largest heap asked for -> the tables grown to it, as
    `TableCache.ensure`): the rows found beyond their tables are looked at again after it,
    so that only those rows are searched for the heaps the tables must grow to, not every
    row before the lookups (their maxima are those of all rows: a table is asked beyond its
    end exactly by the rows whose heaps lie there)."""
    if positions["_reason"].null_count() == positions.height:
        valid = positions
        buffers = buffers or heap_buffers(valid)
    else:
        valid = positions.filter(pl.col("_reason").is_null())
        buffers = heap_buffers(valid)
    table_of_row = valid["table"].to_numpy().astype(np.int64, copy=False)
    table_of_row.flags.writeable = False  # one kernel signature whatever the chunks
    slices = row_slices(buffers)
    looked_up = []
    nim_all, bad_all = np.empty(valid.height, np.int64), np.empty(valid.height, np.int64)
    for rows, offsets, values in slices:  # each chunk's rows into its slice: no concatenation
        with kernels.threads_for(offsets.shape[0] - 1):
            looked_up.append(kernels.nim_sums_wide(offsets, values, table_of_row[rows],
                                                   *tables.lookup_args(),
                                                   out=(nim_all[rows], bad_all[rows])))
    beyond = _any_beyond(bad_all)  # the chunks' `bad` are views of it
    if grow is not None and beyond:
        tables = _grown_again(grow, tables, slices, table_of_row, looked_up)
        beyond = _any_beyond(bad_all)
    columns = [pl.Series("nim_sum", nim_all, dtype=pl.Int64)]
    if winning_moves:
        parts = []
        for (rows, offsets, values), (chunk_nim, _) in zip(slices, looked_up):
            with kernels.threads_for(offsets.shape[0] - 1):
                parts.append(kernels.winning_moves_wide(offsets, values, table_of_row[rows],
                                                        chunk_nim, *tables.move_args()))
        if len(parts) == 1:  # one Arrow chunk, as a batch read from one file is: no copy
            moves = parts[0]
        else:
            moves = ([np.concatenate(c) for c in zip(*parts)] if parts
                     else [np.zeros(0, np.int64)] * 2)
        columns += [pl.Series("move_heap", moves[0]).replace(-1, None),
                    pl.Series("move_take", moves[1]).replace(-1, None)]
    if beyond:
        out = _beyond_table_reasons(valid.with_columns(*columns, pl.Series("_bad", bad_all)),
                                    tables).drop("_bad")
    else:
        out = valid.with_columns(*columns)
    if valid is positions:
        return out
    return pl.concat([out, positions.filter(pl.col("_reason").is_not_null())],
                     how="diagonal_relaxed")


def _any_beyond(bad: np.ndarray) -> bool:
    """Whether a row has a heap beyond its table (`bad` >= 0): one pass, no array of
    flags."""
    return bool(bad.shape[0]) and int(bad.max()) >= 0


def _grown_again(grow: Callable[[np.ndarray], TableSet], tables: TableSet,
                 slices: list[tuple[slice, np.ndarray, np.ndarray]], table_of_row: np.ndarray,
                 looked_up: list[tuple[np.ndarray, np.ndarray]]) -> TableSet:
    """The tables grown, once for the whole batch as a pass over every heap would have
    grown them (the room and work limits grant in the order tables ask), for the rows with
    a heap beyond theirs (`bad` >= 0); those rows' nim and bad recomputed, in place."""
    beyond = []
    largest = np.full(len(tables.tables), -1, np.int64)
    for (rows, offsets, values), (_, bad) in zip(slices, looked_up):
        at = np.flatnonzero(bad >= 0)
        row_offsets, row_values = gathered_rows(offsets, values, at)
        row_tables = table_of_row[rows][at]
        row_tables.flags.writeable = False  # as the views the kernels' loaded code expects
        np.maximum(largest, kernels.max_heap_per_table(row_offsets, row_values, row_tables,
                                                       largest.shape[0]), out=largest)
        beyond.append((at, row_offsets, row_values, row_tables))
    grown = grow(largest)
    if grown is not tables:
        for (nim, bad), (at, row_offsets, row_values, row_tables) in zip(looked_up, beyond):
            if at.shape[0]:
                nim[at], bad[at] = kernels.nim_sums_wide(row_offsets, row_values, row_tables,
                                                         *grown.lookup_args())
    return grown


def _beyond_table_reasons(out: pl.DataFrame, tables: TableSet) -> pl.DataFrame:
    """Reasons for rows whose heap `_bad` lies beyond a table with no proven period."""
    labels = pl.DataFrame({
        "table": pl.Series(range(len(tables.tables)), dtype=pl.Int64),
        "_label": pl.Series([t.rule.label for t in tables.tables], dtype=pl.String),
        "_tabulated": pl.Series([f"{counted_values(t.table_len)} tabulated), and no period "
                                 f"was proven within {'it' if t.table_len == 1 else 'them'}"
                                 for t in tables.tables], dtype=pl.String),
        "_limit": pl.Series([t.stopped_by or "tables.max_table_len" for t in tables.tables],
                            dtype=pl.String),
    })
    beyond = pl.col("_bad") >= 0
    bad_heap = pl.col("heaps").list.get(pl.col("_bad").clip(0, None), null_on_oob=True)
    return out.join(labels, on="table", how="left", maintain_order="left").with_columns(
        pl.when(beyond).then(pl.format(
            "heap {} at index {} needs SG values of {} beyond {} ({}",
            bad_heap, pl.col("_bad"), pl.col("_label"), pl.col("_limit"), pl.col("_tabulated"),
        )).otherwise(pl.col("_reason")).alias("_reason"),
        pl.when(beyond).then(pl.lit("heaps")).otherwise(pl.col("_column")).alias("_column"),
    ).drop("_label", "_tabulated", "_limit")


VERDICTS = pl.Enum(["L", "W"])


def with_verdict(verdicts: FrameT, dictionary: bool = False) -> FrameT:
    """Add `verdict` (W iff nim_sum != 0) after nim_sum; nim_sum and the move columns become
    Int64, a negative move null (the sort keeps them narrow, with -1 for no move); lazy in,
    lazy out. `dictionary`: the verdict as `VERDICTS` codes, which a Parquet writer encodes
    without hashing each row's text (`commit.sink_parquet` declares it text)."""
    names = verdicts.collect_schema().names()
    at = names.index("nim_sum") + 1
    kind = VERDICTS if dictionary else pl.String
    verdict = pl.when(pl.col("nim_sum") != 0).then(pl.lit("W", kind)).otherwise(
        pl.lit("L", kind))
    moves = [pl.when(pl.col(name) >= 0).then(pl.col(name).cast(pl.Int64)).alias(name)
             for name in ("move_heap", "move_take") if name in names]
    return verdicts.select(*names[:at - 1], pl.col("nim_sum").cast(pl.Int64),
                           verdict.alias("verdict"), *names[at:]).with_columns(moves)
