"""SortedRejectedKeys: rejected keys handed to each round of the merge of sorted runs, checked
against a plain-Python reference (every rejected key that, read by the key rule, is a key of
the round; repeats kept)."""

from __future__ import annotations

import itertools
from collections import Counter

import polars as pl
import pyarrow as pa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipeline.engines.rejected_keys import SortedRejectedKeys
from pipeline.io.outputs.scratch import Spill

RULE_IDS = ["a", "b", "c", "d"]
INTS = [-2**63, -2**63 + 1, -7, 0, 1, 2, 12, 2**63 - 2, 2**63 - 1]
TEXTS = ["", "\x00", "a", "ab", "abc", "b", "p1", "p10", "p2", "é", "e\u0301", "😀", "\uffff"]


def _rounds(keys: list[tuple[int, object]], cuts: list[int], spread: list[int]
            ) -> list[list[pa.Table]]:
    """Verdict keys (sorted, repeats allowed) cut into rounds at key boundaries, each round's
    rows dealt to up to three takes, each sorted, as `ordering.merge_round` gives them."""
    distinct = sorted(set(keys))
    bounds = sorted({0, len(distinct), *(c % (len(distinct) + 1) for c in cuts)})
    rounds = []
    for lo, hi in itertools.pairwise(bounds):
        in_round = set(distinct[lo:hi])
        rows = [k for k in keys if k in in_round]
        takes: list[list[tuple[int, object]]] = [[], [], []]
        for i, row in enumerate(rows):
            takes[spread[i % len(spread)] % 3].append(row)
        rounds.append([pa.table({"_bucket": pa.array([b for b, _ in t], pa.int32()),
                                 "position_id": [p for _, p in t]}) for t in takes])
    return rounds


def _reference(rejected: list[tuple[str | None, str | None]], rule_ids: list[str],
               round_keys: set[tuple[int, object]], pid_int: bool) -> Counter:
    named: Counter = Counter()
    for rid, pid in rejected:
        if rid not in rule_ids or pid is None:
            continue
        if pid_int:
            if not (pid == "0" or (pid[:1] == "-" and pid[1:2] not in ("", "0")
                                   and pid[1:].isdigit())
                    or (pid[:1] in "123456789" and pid.isdigit())):
                continue  # "07", "+7", "7.0" are no integer key
            key = (rule_ids.index(rid), int(pid))
        else:
            key = (rule_ids.index(rid), pid)
        if key in round_keys:
            named[(rid, key[1])] += 1
    return named


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(pid_int=True, verdict_pids=[8], verdict_buckets=[0], rejected=[("a", 8), ("b", 3)],
         chunk=2, budget=10**6, table_rows=5, cuts=[], spread=[0])  # the key 2**63 - 1
@given(pid_int=st.booleans(),
       verdict_pids=st.lists(st.integers(0, len(INTS) - 1), min_size=1, max_size=40),
       verdict_buckets=st.lists(st.integers(0, 3), min_size=1, max_size=40),
       rejected=st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", "zz", None]),
                                   st.one_of(st.none(), st.integers(0, len(INTS) - 1),
                                             st.sampled_from(["07", "+3", "-0", "x"]))),
                         max_size=60),
       chunk=st.integers(1, 7), budget=st.sampled_from([1, 200, 10**6]),
       table_rows=st.integers(1, 5), cuts=st.lists(st.integers(0, 40), max_size=6),
       spread=st.lists(st.integers(0, 2), min_size=1, max_size=5))
def test_each_round_gets_the_rejected_keys_that_are_its_keys(
        tmp_path_factory, pid_int, verdict_pids, verdict_buckets, rejected, chunk, budget,
        table_rows, cuts, spread):
    """Rejected keys in chunks, spilled as runs of their own (budget 1: every chunk; 200:
    some; 10**6: none), read in tables of a few rows; the merge's rounds of random widths:
    each round gets exactly the rejected keys that are its keys, repeats kept, in the
    verdicts' types, whatever runs or tables they were in. Ids at int64's ends, text ids
    that are prefixes of others, empty, or outside the ASCII range."""
    values = INTS if pid_int else TEXTS

    def given(p: int | str | None) -> str | None:
        return p if p is None or isinstance(p, str) else str(values[p % len(values)])

    keys = sorted((b, values[p % len(values)]) for b, p in zip(verdict_buckets, verdict_pids))
    rejected = [(r, given(p)) for r, p in rejected]
    pid_type = pl.Int64 if pid_int else pl.String
    chunks = [pl.DataFrame(rejected[i:i + chunk], schema={"rule_set_id": pl.String,
                                                          "position_id": pl.String},
                           orient="row") for i in range(0, len(rejected), chunk)]
    scratch = Spill(tmp_path_factory.mktemp("scratch"), "uncompressed")
    parts = itertools.count(1)
    sorted_keys = SortedRejectedKeys.sort(chunks, pl.Series(RULE_IDS), pid_type, budget,
                                          table_rows, scratch, lambda: -next(parts))
    for takes in _rounds(keys, cuts, spread):
        round_keys = {(t["_bucket"][i].as_py(), t["position_id"][i].as_py())
                      for t in takes for i in range(t.num_rows)}
        named = sorted_keys.naming(takes)
        assert named.schema == pl.Schema({"rule_set_id": pl.String, "position_id": pid_type})
        assert Counter(named.rows()) == _reference(rejected, RULE_IDS, round_keys, pid_int)


def test_integer_rule_ids_and_a_key_past_every_round(tmp_path):
    """Integer rule ids (text "2" is the rule set 2, "02" none); a rejected key after the
    last round's keys is read by none."""
    (tmp_path / "scratch").mkdir()
    scratch = Spill(tmp_path / "scratch", "uncompressed")
    parts = itertools.count(1)
    chunks = [pl.DataFrame({"rule_set_id": ["2", "02", "5", "5"],
                            "position_id": ["8", "8", "1", "99"]})]
    sorted_keys = SortedRejectedKeys.sort(chunks, pl.Series([2, 5]), pl.Int64, 1, 2, scratch,
                                          lambda: -next(parts))
    first = pa.table({"_bucket": pa.array([0, 1], pa.int32()), "position_id": [8, 1]})
    assert sorted_keys.naming([first]).rows() == [(2, 8), (5, 1)]
    second = pa.table({"_bucket": pa.array([1], pa.int32()), "position_id": [50]})
    assert sorted_keys.naming([second]).height == 0
    assert sorted_keys.naming([second.slice(0, 0)]).height == 0
