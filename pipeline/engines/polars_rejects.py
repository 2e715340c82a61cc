"""The positions' rejected rows of a polars-engine run (`HeldRejects`): held in memory up to a
share of the memory setting, then spilled to scratch source by source, and written in the
rejects table's order (the rules' rows, then by source and row) a source's slice at a time,
so that a night whose input is mostly rejected (a wrong or truncated rules file) needs no
memory in proportion to its rejects. The rejects of keys given more than once come last, in
key order, a merged slice at a time: past the share they go to scratch in chunks of their own,
each sorted by row, merged by row into their sources' rows as the table is written (a night
whose input file was delivered twice has as many of them as the file has rows). A run that
never passes the share keeps them in memory, as one frame, and writes them as before.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from pipeline.engines.base import RejectsPastTolerance
from pipeline.io.outputs.scratch import Spill
from pipeline.transforms import ordering, outputs
from pipeline.transforms.reasons import ReasonCode
from pipeline.transforms.schema import REJECT_SCHEMA

__all__ = ["HeldRejects", "naming_keys"]

MERGE_ROWS = 65_536
"""Rows of the record batches a source's spilled chunk is written in: what the merge of its
streams holds of each."""
KEYS_PART = 1 << 30  # the scratch part of the spilled rows' `naming_keys` (no source's number)
DUPLICATE_PARTS = 1 << 31  # the first scratch part of spilled duplicates' chunks (one per source)
DUPLICATE_READ = 1 << 13  # rows per record batch of a duplicates chunk: one of each is held
WRITE_ROWS = 1 << 17  # rows per row group of a spilled night's rejects table (the last fewer)
FOUND_KEPT = 10  # rejects kept as they are found, and of each source's spilled rows the first

_NOT_A_VERDICTS_RULE = [ReasonCode.unknown_rule_set.value, ReasonCode.invalid_rule_set.value]


def naming_keys(rejects: pl.DataFrame) -> pl.DataFrame:
    """The keys (rule_set_id, position_id) of rejected rows that may name a verdict's key, for
    the duplicate check (`ordering.split_duplicates`): both keys given, and a rule set that has
    verdicts (an unknown or invalid rule set has none, and is most of a night whose rules file
    is wrong)."""
    return rejects.filter(pl.col("rule_set_id").is_not_null()
                          & pl.col("position_id").is_not_null()
                          & ~pl.col("reason_code").is_in(_NOT_A_VERDICTS_RULE)
                          ).select("rule_set_id", "position_id")


@dataclass
class _Part:
    """A source's rejects in scratch: the Spill parts of its streams, each of chunks in row
    order (each chunk is sorted by row; a chunk that starts before the last one of the
    stream ended starts a stream of its own), merged by row when written back."""

    number: int
    streams: list[int] = field(default_factory=list)
    last_row: int = -1
    """The last row of its last stream."""
    first: pl.DataFrame | None = None
    """Its FOUND_KEPT rows of the lowest row numbers, for `HeldRejects.first`."""


class HeldRejects:
    """The positions' rejected rows (REJECT_SCHEMA, `column` as the transforms name it) of one
    evaluation, in the order the batches made them. Past `budget` bytes held (None: never)
    they go to scratch (`open_scratch`, called once, at the first spill), each source's rows
    sorted by row; what the run needs of them besides (their count, their counts per rule
    set, the keys that may name a verdict's) is kept as they go. `rename`: the `column` as
    the user's input names it, applied where they are taken out. `stop_past`: once more rows
    than that are added (None: never), `stop_if_past` raises `RejectsPastTolerance`; the
    engine calls it before each next batch, so that a run whose last batch passes it reads
    on to its exact count."""

    def __init__(self, budget: int | None, open_scratch: Callable[[], Spill],
                 rename: Callable[[pl.DataFrame], pl.DataFrame], stop_past: int | None = None):
        self.budget = budget
        self.stop_past = stop_past
        self.found = pl.DataFrame(schema=REJECT_SCHEMA)
        self.open_scratch = open_scratch
        self.rename = rename
        self.scratch: Spill | None = None
        self.held: list[pl.DataFrame] = []
        self.held_bytes = 0
        self.rows = 0
        self.parts: dict[str, _Part] = {}
        self.spilled_rows = 0
        self.by_rule: list[pl.DataFrame] = []  # of the rows spilled: rejected per rule set
        self.duplicates: list[pl.DataFrame] = []  # held
        self.duplicate_bytes = 0
        self.duplicate_parts: dict[str, list[int]] = {}  # source -> its spilled chunks
        self.first_duplicates = pl.DataFrame(schema=REJECT_SCHEMA)
        self._part_numbers = itertools.count(DUPLICATE_PARTS)
        self._sorted: Path | None = None

    @property
    def spilled(self) -> bool:
        return self.scratch is not None

    def add(self, rejects: pl.DataFrame, batch_rows: int | None = None) -> None:
        """A batch's rejects (of `batch_rows`, if known: a few rows of a large batch have
        their keys copied, `_compacted`)."""
        if not rejects.height:
            return
        if batch_rows is not None and rejects.height * 2 < batch_rows:
            rejects = rejects.with_columns(_compacted(rejects.select("rule_set_id",
                                                                     "position_id")))
        self.held.append(rejects)
        self.held_bytes += rejects.estimated_size()
        self.rows += rejects.height
        if self.stop_past is not None:  # a fail run's: the first ones found, in table order
            self.found = _first_found(self.found, rejects)
        if self.budget is not None and self.held_bytes > self.budget:
            self._spill()

    def stop_if_past(self) -> None:
        if self.stop_past is not None and self.rows > self.stop_past:
            raise RejectsPastTolerance(self.rows, self.rename(self.found))

    def counter(self) -> CountedRejects:
        """A count of rejects under the same tolerance, none of them held (`CountedRejects`)."""
        return CountedRejects(self.stop_past, self.rename)

    def add_duplicates(self, duplicates: pl.DataFrame) -> None:
        """Rejects of keys given more than once, found once every verdict is in (the merge of
        sorted runs gives them a slice at a time): held up to `budget` bytes, then spilled
        (`_spill_duplicates`)."""
        if not duplicates.height:
            return
        self.rows += duplicates.height
        self.first_duplicates = _compacted(pl.concat([self.first_duplicates, duplicates])
                                           .bottom_k(FOUND_KEPT, by=["source", "row"])
                                           .sort("source", "row"))  # not views of each
        size = duplicates.estimated_size()
        if self.budget is not None and self.duplicate_bytes + size > self.budget:
            self._spill_duplicates([*self.duplicates, duplicates])  # as they are: no copy
            self.duplicates, self.duplicate_bytes = [], 0
        else:
            self.duplicates.append(_compacted(duplicates))  # not views of their slice
            self.duplicate_bytes += size

    def _spill_duplicates(self, frames: list[pl.DataFrame]) -> None:
        """Duplicates to scratch: each source's rows sorted by row into a part of their own,
        in record batches of DUPLICATE_READ rows (`_in_order` merges a source's parts by
        row, holding one batch of each), a source at a time (the final sort of a night
        given twice hands over millions at once)."""
        if self.scratch is None:
            self.scratch = self.open_scratch()
        frame = pl.concat(frames)
        self.by_rule.append(_compacted(outputs.rejected_by_rule(frame)))
        order = frame.select(pl.arg_sort_by("source", "row", maintain_order=True)).to_series()
        sources = frame.group_by("source").len().sort("source")  # the order's runs of rows
        at = 0
        for source, rows in sources.iter_rows():
            part = next(self._part_numbers)
            self.duplicate_parts.setdefault(str(source), []).append(part)
            taken = order.slice(at, rows)
            table = frame.drop("table", "source").select(pl.all().gather(taken)).to_arrow()
            at += rows
            for batch in table.to_batches(max_chunksize=DUPLICATE_READ):
                self.scratch.write(part, pa.Table.from_batches([batch]))
            self.scratch.close_part(part)
            del table
        self.spilled_rows += frame.height

    def keys_for_duplicates(self) -> pl.DataFrame | Iterator[pl.DataFrame]:
        """Every reject's `naming_keys` for the duplicate check: one frame when none spilled
        (joined with the verdicts as they are), else chunks (`key_chunks`), each matched
        against the verdicts on its own (`ordering.split_duplicates`)."""
        if self.scratch is None:
            return pl.concat([ordering.KEYS_ONLY, *(naming_keys(f) for f in self.held)])
        return self.key_chunks()

    def key_chunks(self) -> Iterator[pl.DataFrame]:
        """Every reject's `naming_keys`, a chunk at a time: those spilled, read back from
        scratch (once: the files go as they are read), then those held."""
        if self.scratch is not None:
            self.scratch.close_part(KEYS_PART)
            yield from (pl.DataFrame(t) for t in self.scratch.stream(KEYS_PART))
        yield from (naming_keys(f) for f in self.held)

    def frame(self) -> pl.DataFrame:
        """Every reject, in memory (a run that spilled none), renamed."""
        return self.rename(pl.concat([pl.DataFrame(schema=REJECT_SCHEMA), *self.held,
                                      *self.duplicates]))

    def rejected_by_rule(self) -> pl.DataFrame:
        """(rule_set_id as text, rejected) over every reject, as `outputs.rejected_by_rule`."""
        counts = [*self.by_rule, outputs.rejected_by_rule(
            pl.concat([pl.DataFrame(schema=REJECT_SCHEMA), *self.held, *self.duplicates]))]
        return (pl.concat(counts).group_by("rule_set_id")
                .agg(pl.col("rejected").sum().cast(pl.Int64)))

    def discard(self) -> None:
        """Forget every reject so far (the caller evaluates the input again another way)."""
        if self.scratch is not None:
            for part in [*(n for p in self.parts.values() for n in p.streams), KEYS_PART,
                         *itertools.chain(*self.duplicate_parts.values())]:
                self.scratch.drop(part)
        self.held, self.held_bytes, self.rows, self.spilled_rows = [], 0, 0, 0
        self.found = self.found.clear()
        self.parts, self.by_rule = {}, []
        self.duplicates, self.duplicate_bytes, self.duplicate_parts = [], 0, {}
        self.first_duplicates = self.first_duplicates.clear()

    def _spill(self) -> None:
        if self.scratch is None:
            self.scratch = self.open_scratch()
        frame = pl.concat(self.held)
        self.held, self.held_bytes = [], 0
        self.by_rule.append(_compacted(outputs.rejected_by_rule(frame)))
        keys = naming_keys(frame)
        if keys.height:
            self.scratch.write(KEYS_PART, keys)
        for (source,), rows in frame.group_by("source", maintain_order=True):
            part = self.parts.setdefault(str(source), _Part(len(self.parts)))
            rows = rows.sort("row", maintain_order=True)
            first, last = rows["row"][0], rows["row"][-1]
            if not part.streams or first is None or last is None or first < part.last_row:
                part.streams.append(part.number if not part.streams
                                    else next(self._part_numbers))
                part.last_row = -1
            part.last_row = max(part.last_row, last if last is not None else -1)
            part.first = _compacted(rows.head(FOUND_KEPT) if part.first is None else pl.concat(
                [part.first, rows.head(FOUND_KEPT)]).sort("row", maintain_order=True
                                                        ).head(FOUND_KEPT))
            # the part is the source, and every row is a position's: neither is written; one
            # stream open at a time (sources come one after another in wide form)
            stream = part.streams[-1]
            for piece in rows.drop("table", "source").iter_slices(MERGE_ROWS):
                self.scratch.write(stream, piece)  # a batch at a time for the merge
            self.scratch.close_part(stream)
        self.spilled_rows += frame.height

    def first(self, rule_rejects: pl.DataFrame, n: int) -> pl.DataFrame:
        """The first `n` rows of the rejects table (n at most FOUND_KEPT) without writing it:
        a fail run over its tolerance writes nothing. A source's first rows are among its
        spilled part's first ones, its rows still held and its duplicates' first rows."""
        heads = [p.first for p in self.parts.values() if p.first is not None]
        candidates = pl.concat([rule_rejects, *(self.rename(f) for f in [
            *heads, *self.held, self.first_duplicates])], how="vertical_relaxed")
        return outputs.sort_rejects(candidates).head(min(n, FOUND_KEPT))

    def sorted_file(self, rule_rejects: pl.DataFrame) -> Path:
        """The rejects table of a run that spilled (the rules' rejects first), written once into
        scratch in its order, a source at a time (`outputs.sort_rejects`' order)."""
        if self._sorted is None:
            assert self.scratch is not None, "sorted_file is for a run whose rejects spilled"
            if self.held:
                self._spill()  # every source's rows in one place, in order
            self.scratch.close()
            with self.scratch.parquet("rejects.parquet", "rejects.parquet") as write:
                for frame in _row_groups(self._in_order(rule_rejects)):
                    write(frame)
            self._sorted = self.scratch.path("rejects.parquet")
        return self._sorted

    def _in_order(self, rule_rejects: pl.DataFrame) -> Iterator[pl.DataFrame]:
        yield outputs.sort_rejects(rule_rejects)
        held = {str(source): rows.sort("row", maintain_order=True) for (source,), rows
                in pl.concat([pl.DataFrame(schema=REJECT_SCHEMA), *self.duplicates]
                             ).group_by("source")}
        for source in sorted(set(self.parts) | set(held) | set(self.duplicate_parts)):
            duplicates = [self._restored(source, n) for n in self.duplicate_parts.get(source, [])]
            if source in held:
                duplicates.append(iter([held[source]]))
            for frame in self._source_rows(source, self.parts.get(source), duplicates):
                yield self.rename(frame)

    def _restored(self, source: str, part: int) -> Iterator[pl.DataFrame]:
        """A scratch part's frames with the table and source columns they were written
        without."""
        assert self.scratch is not None
        return (pl.DataFrame(t).select(pl.lit("positions").alias("table"),
                                       pl.lit(source).alias("source"), pl.all())
                for t in self.scratch.stream(part))

    def _source_rows(self, source: str, part: _Part | None,
                     duplicates: list[Iterator[pl.DataFrame]]) -> Iterator[pl.DataFrame]:
        """One source's rejects in row order: its spilled streams (one when its chunks came
        in row order; long form split by key makes many) merged by row with its duplicates'
        chunks (each in row order), a record batch of each held at a time."""
        streams = [] if part is None else [self._restored(source, n) for n in part.streams]
        yield from _merged_by_row([*streams, *duplicates])


def _merged_by_row(streams: list[Iterator[pl.DataFrame]]) -> Iterator[pl.DataFrame]:
    """Frames of several streams, each in ascending row order (rows none of them shares), as
    one stream in row order: each round takes every row buffered up to the smallest last row
    buffered, which no row still unread comes before."""
    buffers: list[pl.DataFrame | None] = [None] * len(streams)
    while True:
        for i, stream in enumerate(streams):
            while buffers[i] is None or not buffers[i].height:  # type: ignore[union-attr]
                buffers[i] = next(stream, None)
                if buffers[i] is None:
                    break
        held = [b for b in buffers if b is not None]
        if not held:
            return
        cutoff = min(b["row"][-1] for b in held)
        taken = []
        for i, b in enumerate(buffers):
            if b is not None:
                n = int(np.searchsorted(b["row"].to_numpy(), cutoff, side="right"))
                taken.append(b.slice(0, n))
                buffers[i] = b.slice(n) if n < b.height else None
        yield pl.concat(taken, how="vertical_relaxed").sort("row", maintain_order=True)


class CountedRejects:
    """A fail run's rejected rows counted as they are found, not held: their number and the
    first FOUND_KEPT of them, for `RejectsPastTolerance` once past `stop_past` (None:
    never). `rename` as `HeldRejects`'s."""

    def __init__(self, stop_past: int | None, rename: Callable[[pl.DataFrame], pl.DataFrame]):
        self.stop_past = stop_past
        self.rename = rename
        self.rows = 0
        self.found = pl.DataFrame(schema=REJECT_SCHEMA)

    def add(self, rows: int, first: pl.DataFrame) -> None:
        """`rows` more rejected rows, `first` their first FOUND_KEPT (or more) as reject rows."""
        self.rows += rows
        self.found = _first_found(self.found, first)

    def stop_if_past(self) -> None:
        if self.stop_past is not None and self.rows > self.stop_past:
            raise RejectsPastTolerance(self.rows, self.rename(self.found))


def _first_found(found: pl.DataFrame, rejects: pl.DataFrame) -> pl.DataFrame:
    """The FOUND_KEPT rejects of the lowest (source, row) among both, copied out."""
    return _compacted(pl.concat([found, rejects]).bottom_k(
        FOUND_KEPT, by=["source", "row"]).sort("source", "row"))


def _compacted(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` in buffers of its own: polars' text columns are views into the buffers of the
    frame they were filtered from (a batch's ids, for a few of its rows), which stay in
    memory, uncounted by `estimated_size`, as long as the few rows are held (a night of 40M
    positions mostly rejected grew by all its ids); through Arrow's large strings and back
    they are copied out."""
    return pl.DataFrame(frame.to_arrow())


def _row_groups(frames: Iterator[pl.DataFrame]) -> Iterator[pl.DataFrame]:
    """The frames cut and joined into row groups of WRITE_ROWS rows (the last one fewer):
    a whole batch's rejects in one would be encoded in memory, two at a time."""
    pending: list[pl.DataFrame] = []
    rows = 0
    for frame in frames:
        while frame.height:
            take = frame.slice(0, WRITE_ROWS - rows)
            frame = frame.slice(take.height)
            pending.append(take)
            rows += take.height
            if rows == WRITE_ROWS:
                yield pl.concat(pending).cast(REJECT_SCHEMA)
                pending, rows = [], 0
    if pending:
        yield pl.concat(pending).cast(REJECT_SCHEMA)
