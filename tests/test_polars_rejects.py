"""The polars engine's rejected rows past their share of memory (`HeldRejects`): spilled
source by source, written back in the rejects table's order, with what the run needs of them
(counts per rule set, the keys that may name a verdict's) kept on the way. Expected values
are worked out here in plain Python (a sort of tuples, a Counter), not by the module."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from pipeline.engines.polars_rejects import HeldRejects, naming_keys
from pipeline.io.outputs.scratch import Spill
from pipeline.transforms.schema import REJECT_SCHEMA

UNKNOWN = "unknown_rule_set"


def _rejects(source: str, rows: list[int], rule: str = "r1", code: str = "out_of_range",
             table: str = "positions") -> pl.DataFrame:
    return pl.DataFrame({
        "table": [table] * len(rows), "source": [source] * len(rows), "row": rows,
        "rule_set_id": [rule] * len(rows), "position_id": [f"p{r}" for r in rows],
        "column": ["heaps"] * len(rows), "reason_code": [code] * len(rows),
        "reason": [f"why {source} {r}" for r in rows]}, schema=REJECT_SCHEMA)


def _held(tmp_path: Path, budget: int | None = 1) -> HeldRejects:
    def open_scratch() -> Spill:
        (tmp_path / "scratch").mkdir(parents=True)
        return Spill(tmp_path / "scratch", "lz4")

    return HeldRejects(budget, open_scratch,
                       lambda f: f.with_columns(pl.col("column").replace({"heaps": "HEAPS"})))


def _keys(held: HeldRejects) -> list[tuple]:
    """The keys the duplicate check is given: spilled, then held."""
    return [row for chunk in held.key_chunks() for row in chunk.rows()]


def _table_order(frames: list[pl.DataFrame]) -> list[tuple]:
    """The rows as the rejects table orders them: the rules' first, then by source, row."""
    rows = [r for f in frames for r in f.rows()]
    return sorted(rows, key=lambda r: (r[0] != "rules", r[1], r[2]))


def _renamed(rows: list[tuple]) -> list[tuple]:
    return [(*r[:5], "HEAPS" if r[5] == "heaps" else r[5], *r[6:]) for r in rows]


@pytest.mark.parametrize("in_row_order", [True, False])
def test_spilled_rejects_are_written_in_the_tables_order(tmp_path, in_row_order):
    """Three sources added in another order than their names', each a few times (in row order
    as wide batches come, or not, as long form's parts), with duplicates' rows falling between
    and after the spilled ones and a source that only duplicates name. The duplicates come
    in key order, not row order, a merged slice at a time: each slice's spill past the budget
    (here every one) is a chunk of its own, merged by row into its source's rows."""
    added = [_rejects("z.csv", [1, 4, 9]), _rejects("a/b.parquet", [2, 3]),
             _rejects("z.csv", [10, 12] if in_row_order else [0, 2]),
             _rejects("a-b.csv", [7]), _rejects("a/b.parquet", [8, 30])]
    duplicates = [_rejects("z.csv", [40, 5], code="duplicate_key"),
                  pl.concat([_rejects("m.csv", [3], code="duplicate_key"),
                             _rejects("z.csv", [11], code="duplicate_key")]),
                  _rejects("z.csv", [6, 2 if in_row_order else 3], code="duplicate_key")]
    rules = _rejects("rules.csv", [2, 1], table="rules")
    held = _held(tmp_path)
    for frame in added:
        held.add(frame)
    for frame in duplicates:
        held.add_duplicates(frame)
    assert held.spilled and held.rows == 16 and held.spilled_rows == 16
    assert len(held.duplicate_parts["z.csv"]) == 3
    expected = _renamed(_table_order([rules, *added, *duplicates]))
    for n in (1, 4, 10):  # without writing the table (a fail run's error names them)
        assert held.first(held.rename(rules), n).rows() == expected[:n]
    written = pl.read_parquet(held.sorted_file(held.rename(rules)))
    assert written.rows() == expected
    assert pq.read_schema(held.sorted_file(rules)).names == list(REJECT_SCHEMA)


def test_a_sources_chunks_out_of_row_order_are_merged_a_batch_at_a_time(tmp_path, monkeypatch):
    """Long form split by key spills a source's rejects in chunks of no row order: each
    chunk that starts before its stream's last row starts a stream, and the streams are
    merged by row a record batch of each at a time. They were read whole and sorted at once
    (QA: 9.5M rejects of one file, 5.66 GiB at --memory-limit 256MiB)."""
    import random

    from pipeline.engines import polars_rejects

    monkeypatch.setattr(polars_rejects, "MERGE_ROWS", 2)
    rows = list(range(24))
    random.Random(5).shuffle(rows)
    merged, written = _held(tmp_path / "a"), _held(tmp_path / "b")  # each chunk spilled
    for i in range(0, 24, 4):
        merged.add(_rejects("z.csv", rows[i:i + 4]))
        written.add(_rejects("z.csv", rows[i:i + 4]))
    part = merged.parts["z.csv"]
    assert 1 < len(part.streams) <= 6
    frames = list(merged._source_rows("z.csv", part, []))
    assert [r for f in frames for r in f["row"]] == list(range(24))
    assert max(f.height for f in frames) <= 2 * len(part.streams) < 24
    rules = _rejects("rules.csv", [1], table="rules")
    assert pl.read_parquet(written.sorted_file(written.rename(rules))).rows() == _renamed(
        _table_order([rules, _rejects("z.csv", rows)]))


def test_rejects_within_their_share_stay_in_memory(tmp_path):
    held = _held(tmp_path, budget=None)
    held.add(_rejects("b.csv", [3, 1]))
    held.add(_rejects("a.csv", [2]))
    held.add_duplicates(_rejects("a.csv", [5], code="duplicate_key"))
    assert not held.spilled and not (tmp_path / "scratch").exists()
    assert held.frame().rows() == _renamed([r for f in (
        _rejects("b.csv", [3, 1]), _rejects("a.csv", [2]),
        _rejects("a.csv", [5], code="duplicate_key")) for r in f.rows()])


@pytest.mark.parametrize("budget", [1, None])
def test_counts_per_rule_set_cover_spilled_held_and_duplicate_rows(tmp_path, budget):
    held = _held(tmp_path, budget)
    added = [_rejects("a.csv", [1, 2], rule="r1"), _rejects("a.csv", [3], rule="r2"),
             _rejects("a.csv", [4, 5, 6], rule="r9", code=UNKNOWN)]
    for frame in added:
        held.add(frame)
    held.add_duplicates(_rejects("b.csv", [1], rule="r2", code="duplicate_key"))
    counts = dict(held.rejected_by_rule().rows())
    assert counts == dict(Counter({"r1": 2, "r2": 2, "r9": 3}))


def test_only_keys_that_may_name_a_verdict_are_kept(tmp_path):
    """An unknown or invalid rule set has no verdicts, nor has a row without both keys: the
    duplicate check needs none of them (most of a night whose rules file is wrong)."""
    frame = pl.concat([_rejects("a.csv", [1], rule="r1"),
                       _rejects("a.csv", [2], rule="r7", code=UNKNOWN),
                       _rejects("a.csv", [3], rule="r8", code="invalid_rule_set"),
                       _rejects("a.csv", [4], rule="r1").with_columns(
                           pl.lit(None, pl.String).alias("position_id"))])
    assert naming_keys(frame).rows() == [("r1", "p1")]
    held = _held(tmp_path)
    held.add(frame)
    held.add(_rejects("b.csv", [6], rule="r2"))
    assert sorted(_keys(held)) == [("r1", "p1"), ("r2", "p6")]


def test_discarded_rejects_leave_no_scratch_file(tmp_path):
    """The long-form path that finds its rows out of order reads the input again: the
    rejects spilled until then are dropped, and counted no more."""
    held = _held(tmp_path)
    held.add(_rejects("a.csv", [1, 2]))
    held.add(_rejects("b.csv", [1]))
    assert list((tmp_path / "scratch").iterdir())
    held.discard()
    assert not list((tmp_path / "scratch").iterdir())
    assert held.rows == 0 and _keys(held) == []
    held.add(_rejects("c.csv", [4]))
    assert pl.read_parquet(held.sorted_file(_rejects("r.csv", [], table="rules"))).rows() == \
        _renamed(_rejects("c.csv", [4]).rows())


def test_the_table_is_written_in_row_groups_of_a_bounded_size(tmp_path, monkeypatch):
    """A batch's rejects are one spilled chunk: written whole, they were one row group,
    encoded in memory two at a time."""
    monkeypatch.setattr("pipeline.engines.polars_rejects.WRITE_ROWS", 3)
    held = _held(tmp_path)
    held.add(_rejects("a.csv", list(range(7))))
    held.add(_rejects("b.csv", [1, 2]))
    path = held.sorted_file(_rejects("r.csv", [0], table="rules"))
    groups = pq.ParquetFile(path).metadata
    assert [groups.row_group(i).num_rows for i in range(groups.num_row_groups)] == [3, 3, 3, 1]
