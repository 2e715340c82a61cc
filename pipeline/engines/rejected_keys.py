"""Rejected rows' keys beside verdicts merged from sorted runs (`polars_engine._SortedRuns`):
sorted into the merge's key order, in runs of their own spilled to scratch past a share of
memory, and handed to each merged slice as far as its last key, only those that are one of
its keys. The duplicate check of a slice (`ordering.merged_slice`) then sees the few keys
that matter to it, not every rejected key of the night joined with every slice."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import polars as pl
import pyarrow as pa

from pipeline import keys
from pipeline.io.outputs.scratch import Spill
from pipeline.transforms import ordering

__all__ = ["SortedRejectedKeys"]

Key = tuple[int, int | str]


class SortedRejectedKeys:
    """Rejected keys as (`_bucket`, position_id) in the merge's key order, in one or more
    sorted runs read forward as the merge goes (`naming`)."""

    def __init__(self, runs: list[Iterator[pa.Table]], rule_ids: pl.Series,
                 pid_type: pl.DataType):
        self.runs = runs
        self.rule_ids = rule_ids
        self.pid_type = pid_type
        self.pending: list[pa.Table | None] = [None] * len(runs)

    @classmethod
    def sort(cls, chunks: Iterable[pl.DataFrame], rule_ids: pl.Series, pid_type: pl.DataType,
             budget: int, table_rows: int, scratch: Spill, new_part: Callable[[], int]
             ) -> SortedRejectedKeys:
        """The keys (text, as `HeldRejects.keys_for_duplicates` gives them) of `chunks` in
        the verdicts' types: those naming no rule set of `rule_ids`, or that the key rules read
        as no key of that type ("07" is not the position 7), are not any verdict's and are
        left out. Held up to `budget` bytes, then sorted and written to scratch as a run in
        tables of `table_rows` rows (`new_part` numbers it); the last run stays in memory."""
        index = pl.DataFrame({"rule_set_id": rule_ids,
                              "_bucket": pl.int_range(rule_ids.len(), dtype=pl.Int64,
                                                      eager=True)})
        held: list[pl.DataFrame] = []
        held_bytes = 0
        runs: list[Iterator[pa.Table]] = []

        def sorted_held() -> pa.Table:
            table = pl.concat(held).sort("_bucket", "position_id").to_arrow()
            held.clear()
            return table

        for chunk in chunks:
            typed = (chunk.select(keys.rejected_key_as("rule_set_id", rule_ids.dtype),
                                  keys.rejected_key_as("position_id", pid_type))
                     .drop_nulls().join(index, on="rule_set_id", how="inner")
                     .select("_bucket", "position_id"))
            if not typed.height:
                continue
            held.append(typed)
            held_bytes += typed.estimated_size()
            if held_bytes > budget:
                part = new_part()
                for table in sorted_held().to_batches(max_chunksize=table_rows):
                    scratch.write(part, pa.Table.from_batches([table]))
                scratch.close_part(part)
                runs.append(scratch.stream(part))
                held_bytes = 0
        if held:
            runs.append(pa.Table.from_batches([b]) for b in
                        sorted_held().to_batches(max_chunksize=table_rows))
        return cls(runs, rule_ids, pid_type)

    def naming(self, takes: list[pa.Table]) -> pl.DataFrame:
        """Of the keys up to the last key of `takes` (a round of `ordering.merge_round`, of
        which each key's every row is in this round; a later round's keys are all past it),
        those that are a key of `takes`, with repeats: (rule_set_id, position_id) in the
        verdicts' types, for `ordering.merged_slice`. The keys read up to it are not read
        again."""
        lasts = [ordering.key_at(t, t.num_rows - 1) for t in takes if t.num_rows]
        pieces = [_bucket_and_id(p) for p in self._through(max(lasts))] if lasts else []
        named = pl.DataFrame(schema={"_bucket": pl.Int64, "position_id": self.pid_type})
        if pieces:  # one join of them all: a join a piece encoded the slice's keys each time
            named = pl.concat(pieces).join(
                pl.concat([_bucket_and_id(t) for t in takes if t.num_rows]),
                on=["_bucket", "position_id"], how="semi")
        return pl.DataFrame([self.rule_ids.gather(named["_bucket"]).alias("rule_set_id"),
                             named["position_id"]])

    def _through(self, last: Key) -> Iterator[pa.Table]:
        """Every run's next tables' rows up to `last`, taken out of them."""
        for i, run in enumerate(self.runs):
            while True:
                table = self.pending[i]
                if table is None:
                    table = next(run, None)
                    if table is None:
                        break
                n = ordering.rows_below(table, last, through=True)
                if n:
                    yield table.slice(0, n)
                if n < table.num_rows:
                    self.pending[i] = table.slice(n)
                    break
                self.pending[i] = None


def _bucket_and_id(table: pa.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table.select(["_bucket", "position_id"]))
    assert isinstance(frame, pl.DataFrame)
    return frame.with_columns(pl.col("_bucket").cast(pl.Int64))
