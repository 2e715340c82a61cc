"""pipeline.ordering: batches -> key-ordered verdicts minus duplicate keys, checked against a
plain-Python reference (sorted() and a Counter) on random batches."""

from __future__ import annotations

import re
from collections import Counter

import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from pipeline.transforms import ordering
from pipeline.transforms.evaluate import with_verdict
from pipeline.transforms.schema import REJECT_SCHEMA

COLUMNS = ["rule_set_id", "position_id", "nim_sum"]


KEY_TEXT = {
    "int": (None, None),
    "text-ids": (lambda r: f"rule-{r}", None),
    # position ids sharing their first 12 bytes, and of several lengths: the text sort has to
    # look past its first 8-byte chunk and order a prefix before the longer text
    "text-both": (lambda r: f"rule-{r}", lambda p: "position-id-" + "9" * (p % 3) + str(p)),
    "uuid-like": (lambda r: "r" * (r % 3) + str(r), lambda p: f"{p * 7919 % 97:02x}-{p}"),
}


def evaluated(rows, first_row, gaps, keys="int"):
    """An evaluated batch: rows (rid, pid, nim), input rows numbered from first_row, with a
    skipped input row after each index in gaps; ids written as text as `keys` says."""
    numbers, r = [], first_row
    for i in range(len(rows)):
        numbers.append(r)
        r += 2 if i in gaps else 1
    rid_text, pid_text = KEY_TEXT[keys]
    return pl.DataFrame({
        "rule_set_id": [rid if rid_text is None else rid_text(rid) for rid, _, _ in rows],
        "position_id": [pid if pid_text is None else pid_text(pid) for _, pid, _ in rows],
        "nim_sum": [nim for _, _, nim in rows], "_row": numbers,
    }, schema={"rule_set_id": pl.Int64 if rid_text is None else pl.String,
               "position_id": pl.Int64 if pid_text is None else pl.String,
               "nim_sum": pl.Int64, "_row": pl.Int64})


def typed(values: list) -> list:
    """The key rule, in plain Python: a key whose every value is an integer, or text spelling
    one as it reads back (no leading zero, plus sign or "-0"), is an integer key (the general
    path re-types the keys of what it sorts, so that positions' integer ids met with text rule
    ids come back as integers)."""
    def canonical(v):
        return isinstance(v, int) or re.fullmatch(r"0|-?[1-9][0-9]*", v) is not None
    return [int(v) for v in values] if values and all(canonical(v) for v in values) else values


def reference(batches, sources, retyped=False):
    """(sorted verdict rows, duplicate reject rows) in plain Python; `retyped`: keys typed
    by the key rule over all rows, as the general path does."""
    rows = [(rid, pid, nim, file, row) for file, frame in batches
            for rid, pid, nim, row in frame.select(*COLUMNS, "_row").iter_rows()]
    if retyped and rows:
        rids, pids = typed([r[0] for r in rows]), typed([r[1] for r in rows])
        rows = [(rid, pid, *rest) for (_, _, *rest), rid, pid in zip(rows, rids, pids)]
    times = Counter((rid, pid) for rid, pid, *_ in rows)
    clean = sorted((r for r in rows if times[r[:2]] == 1), key=lambda r: r[:2])
    dups = sorted(
        ("positions", sources[file], row, str(rid), str(pid), "position_id", "duplicate_key",
         f"position_id {pid} appears {times[(rid, pid)]} times for rule_set_id {rid}")
        for rid, pid, nim, file, row in rows if times[(rid, pid)] > 1)
    return [r[:3] for r in clean], dups


batch_rows = st.lists(st.tuples(st.integers(1, 6), st.integers(0, 15), st.integers(0, 9)),
                      max_size=25)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.tuples(batch_rows, st.sets(st.integers(0, 25))), min_size=1,
                        max_size=4),
       fast=st.booleans(), keys=st.sampled_from(sorted(KEY_TEXT)), in_order=st.booleans(),
       typed_by_rows=st.booleans())
@example(batches=[([(3, 0, 0), (6, 1, 0)], set())], fast=True, keys="uuid-like", in_order=False,
         typed_by_rows=True)  # rule ids "3" and "6": text in the index, integers here
@example(batches=[([(1, 4, 0), (3, 5, 1)], set()), ([(1, 2, 0), (2, 9, 3)], set())], fast=True,
         keys="int", in_order=False, typed_by_rows=True)  # each batch sorted, not the two
@example(batches=[([(1, 4, 0), (2, 5, 1)], set()), ([(2, 5, 2), (2, 9, 3)], set())], fast=True,
         keys="int", in_order=False, typed_by_rows=True)  # a key repeated across batches
def test_key_sorted_verdicts_match_reference(batches, fast, keys, in_order, typed_by_rows):
    """`in_order`: the rows come sorted by key across all batches, repeated keys next to
    each other (a sorted export), which the fast path takes without sorting.
    `typed_by_rows` (wide form): the key rule over these rows types the keys, whichever path
    sorts them; without it (long form), narrow parts keep the type their batches gave."""
    sources = ["a.parquet", "b.parquet"]
    if in_order:
        rows = sorted(r for rows, _ in batches for r in rows)
        cuts = [0, *sorted(sum(len(b) for b, _ in batches[:i]) for i in range(1, len(batches))),
                len(rows)]
        batches = [(rows[a:b], gaps) for (a, b), (_, gaps) in zip(zip(cuts, cuts[1:]), batches)]
    rid_text = KEY_TEXT[keys][0]
    rule_ids = pl.Series([r if rid_text is None else rid_text(r) for r in range(1, 7)]).sort()
    frames = [(i % 2, evaluated(rows, 100 * i, gaps, keys))
              for i, (rows, gaps) in enumerate(batches)]
    parts = [ordering.verdict_part(frame, file, rule_ids if fast else None, COLUMNS)
             for file, frame in frames]
    assert all(("_bucket" in p.frame.columns) == fast for p in parts)
    verdicts, dups = ordering.key_sorted_verdicts(parts, rule_ids if fast else None,
                                                  pl.DataFrame(schema=REJECT_SCHEMA), sources,
                                                  typed_by_rows)
    clean, expected_dups = reference(frames, sources, retyped=typed_by_rows or not fast)
    assert parts == []
    assert verdicts.columns == COLUMNS
    assert [tuple(r) for r in verdicts.iter_rows()] == clean
    assert sorted(dups.iter_rows()) == expected_dups


def test_mixed_parts_fall_back_to_polars_sort():
    """A batch whose ids are not all known keeps rule_set_id; the others' ranks are mapped
    back, and the result is the same as the all-known case."""
    rule_ids = pl.Series([3, 7], dtype=pl.Int64)
    a = evaluated([(7, 2, 1), (3, 5, 0)], 0, set())
    b = evaluated([(9, 1, 4), (3, 1, 2), (7, 2, 6)], 10, {0})
    parts = [ordering.verdict_part(a, 0, rule_ids, COLUMNS),
             ordering.verdict_part(b, 1, rule_ids, COLUMNS)]
    assert "_bucket" in parts[0].frame.columns and "_bucket" not in parts[1].frame.columns
    verdicts, dups = ordering.key_sorted_verdicts(parts, rule_ids,
                                                  pl.DataFrame(schema=REJECT_SCHEMA),
                                                  ["x.csv", "y.csv"])
    assert_frame_equal(verdicts.with_columns(pl.col("nim_sum").cast(pl.Int64)), pl.DataFrame(
        {"rule_set_id": [3, 3, 9], "position_id": [1, 5, 1], "nim_sum": [2, 0, 4]}))
    assert sorted(dups.select("source", "row").iter_rows()) == [("x.csv", 0), ("y.csv", 13)]


@pytest.mark.parametrize("keys", ["int", "text-ids", "text-both"])
def test_a_rejected_twin_takes_its_verdict_out(keys):
    # also when the sort gives text rule ids as codes of the run's ids: the rejects' text ids
    # are met as those codes ("rule-9", no rule id of the run, twins nothing)
    rid_of, pid_of = (f or (lambda v: v) for f in KEY_TEXT[keys])
    rid_text, pid_text = (lambda r: str(rid_of(r))), (lambda p: str(pid_of(p)))
    rule_ids = pl.Series([1, 2]) if keys == "int" else pl.Series([rid_text(1), rid_text(2)])
    parts = [ordering.verdict_part(evaluated([(1, 4, 3), (1, 5, 0), (2, 4, 1)], 0, set(),
                                             keys), 0, rule_ids, COLUMNS)]
    rejected = pl.DataFrame([("positions", "p.csv", 7, rid_text(1), pid_text(4), "heaps",
                              "other", "bad"),
                             ("positions", "p.csv", 8, rid_text(9), pid_text(5), "heaps",
                              "other", "bad")], schema=REJECT_SCHEMA, orient="row")
    verdicts, dups = ordering.key_sorted_verdicts(parts, rule_ids, rejected, ["p.csv"])
    assert verdicts.rows() == [(rid_of(r), pid_of(p), n) for r, p, n in [(1, 5, 0), (2, 4, 1)]]
    assert dups.select("row", "rule_set_id", "reason").rows() == [
        (0, rid_text(1), f"position_id {pid_text(4)} appears 2 times for rule_set_id "
                         f"{rid_text(1)}")]


def test_moves_and_nim_sums_stay_narrow_until_written_then_are_int64_with_nulls():
    rule_ids = pl.Series([1, 2], dtype=pl.Int64)
    frame = evaluated([(2, 0, 0), (1, 3, 5), (1, 1, 300)], 0, set()).with_columns(
        pl.Series("move_heap", [None, 0, 1], dtype=pl.Int64),
        pl.Series("move_take", [None, 2**40, 7], dtype=pl.Int64))
    columns = [*COLUMNS, "move_heap", "move_take"]
    part = ordering.verdict_part(frame, 0, rule_ids, columns)
    assert [part.frame[c].dtype for c in columns[2:]] == [pl.UInt16, pl.Int8, pl.Int64]
    verdicts, _ = ordering.key_sorted_verdicts([part], rule_ids,
                                               pl.DataFrame(schema=REJECT_SCHEMA), ["p"])
    assert_frame_equal(with_verdict(verdicts.lazy()).collect(), pl.DataFrame({
        "rule_set_id": [1, 1, 2], "position_id": [1, 3, 0], "nim_sum": [300, 5, 0],
        "verdict": ["W", "W", "L"], "move_heap": [1, 0, None], "move_take": [7, 2**40, None]}))


def test_rejected_keys_in_chunks_find_the_same_duplicates():
    """The rejected rows' keys given a chunk at a time (spilled), only those naming a
    verdict's key kept: the same verdicts and duplicate rejects as all keys at once. Key
    (1, 7) is a verdict's and two rejected rows', in two chunks: "appears 3 times"."""
    from pipeline.transforms.ordering import split_duplicates

    ordered = pl.DataFrame({"rule_set_id": [1, 1, 2], "position_id": [5, 7, 7],
                            "nim_sum": [0, 3, 1], "_loc": [0, 1, 2]})
    chunks = [pl.DataFrame({"rule_set_id": ["1", "9", None], "position_id": ["7", "7", "5"]}),
              pl.DataFrame({"rule_set_id": ["1", "2"], "position_id": ["7", "07"]})]
    whole = split_duplicates(ordered, pl.concat(chunks), ["f.csv"])
    chunked = split_duplicates(ordered, iter(chunks), ["f.csv"])
    for got, want in zip(chunked, whole):
        assert got.equals(want)
    verdicts, rejects = chunked
    assert verdicts.rows() == [(1, 5, 0), (2, 7, 1)]  # "07" is not the key 7
    assert rejects["reason"].to_list() == [
        "position_id 7 appears 3 times for rule_set_id 1"]
