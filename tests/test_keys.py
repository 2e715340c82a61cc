"""pipeline.keys: the one key-type rule, its fast paths checked against plain Python."""

from __future__ import annotations

import re
from unittest.mock import patch

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import keys
from pipeline.keys import integer_keys, key_column, ranks, sorted_ids

EDGY = st.text(alphabet=st.sampled_from(["a", "7", "-", " ", "\t", "\n", "\xa0", "é", "\u2003",
                                         "0", "\x1c"]), max_size=6)


@pytest.mark.parametrize("kernel_rows", [0, 1 << 14], ids=["kernels", "polars"])
@settings(max_examples=300, deadline=None)
@given(st.lists(EDGY, min_size=1, max_size=30))
def test_text_keys_are_stripped_and_empty_is_null_whatever_the_path(kernel_rows, texts):
    """Text that is not all integers is taken as given when no value has an edge to strip,
    and stripped (Unicode whitespace, as str.strip does for these) otherwise; long columns
    are read by the kernels, short ones (a rules table) by polars."""
    with patch.object(keys, "_KERNEL_ROWS", kernel_rows):
        got = key_column(pl.DataFrame({"k": texts}), "k", "t.csv")
    stripped = [t.strip(" \t\n\xa0\u2003\x0b\x0c\r\x85") for t in texts]
    integers = all(re.fullmatch(r"0|-?[1-9][0-9]*", t) for t in stripped)
    if kernel_rows:  # the kernel reads ASCII-spaced integers only; integer_keys does the rest
        assert (got.dtype == pl.Int64) == integers  # as Int64 writes them: "7", not "07"
    if got.dtype == pl.Int64:
        assert got.to_list() == [int(t) for t in stripped]
        assert all(str(int(t)) == t for t in stripped)
    else:
        assert got.to_list() == [t or None for t in stripped]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.from_regex(r"-?[0-9]{1,3}", fullmatch=True),
                          st.sampled_from(["x", "7a", "b1"])), min_size=1, max_size=100))
def test_integer_keys_decides_on_every_value_not_only_the_first(values):
    """A column is Int64 only when every value reads back as written; the look at its first
    values that lets UUIDs skip the scan never changes that."""
    frame = pl.DataFrame({"position_id": values}, schema={"position_id": pl.String})
    got = integer_keys(frame)["position_id"]
    every = all(v is None or reads_back(v) for v in values)
    assert (got.dtype == pl.Int64) == every
    if every:
        assert got.to_list() == [None if v is None else int(v) for v in values]


def reads_back(text: str) -> bool:
    try:
        return str(int(text)) == text
    except ValueError:
        return False


@settings(deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-5, 40)), max_size=60),
       st.sets(st.integers(-5, 40), max_size=20))
def test_integer_ranks_are_indexes_among_the_sorted_ids(values, ids):
    order = sorted(ids)
    got = ranks(pl.Series(values, dtype=pl.Int64), sorted_ids(pl.Series(list(ids), dtype=pl.Int64)))
    assert got.tolist() == [order.index(v) if v in ids else -1 for v in values]


INT64 = st.integers(-(2**63), 2**63 - 1)
EDGES = st.sampled_from([-(2**63), -(2**63) + 1, -1, 0, 1, 2**62, 2**63 - 2, 2**63 - 1])


@settings(deadline=None)
@given(st.lists(st.one_of(st.none(), EDGES, INT64), max_size=40),
       st.sets(st.one_of(EDGES, INT64), max_size=12))
def test_integer_ranks_hold_at_both_ends_of_int64(values, ids):
    """Ids whose range spans 2^63 or more (a table index would overflow), and values far
    below the smallest id (their distance to it wraps around in int64 arithmetic)."""
    order = sorted(ids)
    got = ranks(pl.Series(values, dtype=pl.Int64), sorted_ids(pl.Series(list(ids), dtype=pl.Int64)))
    assert got.tolist() == [order.index(v) if v in ids else -1 for v in values]


@settings(deadline=None)
@given(st.lists(st.one_of(st.none(), st.sampled_from(["rs1", "rs10", "rs2", "é", "", "x y"])),
                max_size=60),
       st.sets(st.sampled_from(["rs1", "rs10", "rs2", "é", "x y", "zz"]), max_size=6))
def test_text_ranks_follow_byte_order(values, ids):
    order = sorted(ids, key=str.encode)
    got = ranks(pl.Series(values, dtype=pl.String), sorted_ids(pl.Series(list(ids),
                                                                         dtype=pl.String)))
    assert got.tolist() == [order.index(v) if v in ids else -1 for v in values]


def test_ranks_of_another_type_are_absent():
    assert ranks(pl.Series(["1"]), pl.Series([1])).tolist() == [-1]


@pytest.mark.parametrize(("series", "dtype", "values"), [
    (pl.Series([2**64 - 1, None, 2**63, 7], dtype=pl.UInt64), pl.String,
     ["18446744073709551615", None, "9223372036854775808", "7"]),  # as CSV's digits would be
    (pl.Series([2**63 - 1, None, 0], dtype=pl.UInt64), pl.Int64, [2**63 - 1, None, 0]),
    (pl.Series([-(2**31), 5], dtype=pl.Int32), pl.Int64, [-(2**31), 5]),
    (pl.Series([None, None], dtype=pl.Null), pl.Int64, [None, None]),
    (pl.Series([], dtype=pl.Null), pl.Int64, []),
    (pl.Series(["7", "-3", "7"], dtype=pl.Categorical), pl.Int64, [7, -3, 7]),
    (pl.Series(["07", "a", "07"], dtype=pl.Enum(["a", "07"])), pl.String, ["07", "a", "07"]),
], ids=["uint64-beyond-int64", "uint64-within", "int32", "null", "null-empty", "categorical",
        "enum"])
def test_key_column_types(series, dtype, values):
    """Each Arrow type a key may come in reads as the values it holds, by the one rule: an
    integer column is Int64 unless a value is beyond int64 (then text, as those digits in CSV
    are); an all-null column decides nothing (Int64 nulls); dictionary text is its text."""
    got = key_column(pl.DataFrame({"k": series}), "k", "t.parquet")
    assert got.dtype == dtype
    assert got.to_list() == values
