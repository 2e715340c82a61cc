"""pipeline.transforms helpers that the run tests reach only through whole runs, checked here
against plain-Python references."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.transforms import (
    REJECT_SCHEMA,
    _heaps_from_text,
    _heaps_from_text_exactly,
    _key,
    integer_keys,
    long_to_wide_sorted,
    summary_counts,
)


def writes_itself(text: str | None) -> bool:
    """Reference: text is exactly how Python writes an Int64 value."""
    if text is None:
        return True
    try:
        value = int(text)
    except ValueError:
        return False
    return str(value) == text and -2**63 <= value < 2**63


KEY_TEXT = st.one_of(
    st.none(),
    st.integers(-2**64, 2**64).map(str),
    st.sampled_from(["-0", "07", "+5", " 5", "1_0", "x", "", "٣", "9223372036854775808"]),
)


@given(st.lists(KEY_TEXT, max_size=6), st.sampled_from(["rule_set_id", "position_id"]))
def test_integer_keys_converts_only_text_that_casts_back_to_itself(texts, key):
    other = "position_id" if key == "rule_set_id" else "rule_set_id"
    frame = pl.DataFrame({key: pl.Series(texts, dtype=pl.String),
                          other: pl.Series(range(len(texts)), dtype=pl.Int64),
                          "heaps": [[1]] * len(texts)})
    out = integer_keys(frame)
    converted = all(writes_itself(t) for t in texts)
    assert out[key].dtype == (pl.Int64 if converted else pl.String)
    assert out[key].cast(pl.String).to_list() == texts
    assert out.drop(key).equals(frame.drop(key))


HEAP_TEXT_CHARS = st.sampled_from(list("0123456789-+, \t\n\x0b[]x.") + ["\xa0", "\x1c", "٣"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(HEAP_TEXT_CHARS, max_size=12)), max_size=8))
def test_heaps_text_kernel_agrees_with_the_exact_grammar(texts):
    # The kernel covers plain ASCII lists and leaves every other row to the polars grammar;
    # together they must give what the grammar gives on its own, row for row.
    s = pl.Series("heaps", texts, dtype=pl.String)
    assert _heaps_from_text(s).to_list() == _heaps_from_text_exactly(s).to_list()


@settings(deadline=None)
@given(st.lists(st.lists(st.integers(-10**18 + 1, 10**18 - 1), max_size=5), max_size=6),
       st.sampled_from([" ", ",", ", ", "\t", " ,\n"]), st.booleans())
def test_heaps_text_reads_lists_written_with_any_separator(lists, sep, brackets):
    texts = [sep.join(map(str, heaps)) for heaps in lists]
    if brackets:
        texts = [f"[{t}]" for t in texts]
    assert _heaps_from_text(pl.Series("heaps", texts, dtype=pl.String)).to_list() == lists


KEY_CHARS = st.sampled_from(list("0123456789-+ \t") + ["\xa0", "x"])


@settings(deadline=None)
@given(st.lists(st.one_of(st.text(KEY_CHARS, max_size=5), st.integers(-10**19, 10**19).map(str),
                          st.sampled_from(["07", "-0", "0", "00", "-5", " 12 ", "+3"])),
                min_size=1, max_size=6))
def test_text_keys_read_as_stripping_then_integer_keys_would(texts):
    # The kernel reads a whole column of plain integers at once; anything else takes the
    # polars path (strip, "" is null), and integer_keys then gives the same as on the text.
    frame = pl.DataFrame({"position_id": pl.Series(texts, dtype=pl.String)})
    stripped = frame.select(pl.col("position_id").str.strip_chars().replace("", None))
    expected = integer_keys(stripped)["position_id"]
    got = integer_keys(_key(frame, "position_id", "t.csv").to_frame())["position_id"]
    assert got.dtype == expected.dtype
    assert got.to_list() == expected.to_list()


@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 3)), max_size=30), st.booleans())
def test_summary_counts_count_w_and_l_per_rule_set(rows, key_order):
    # Verdicts in key order take the run-length count; any other order the group_by.
    if key_order:
        rows = sorted(rows)
    verdicts = pl.DataFrame({"rule_set_id": [r for r, _ in rows], "nim_sum": [n for _, n in rows]},
                            schema={"rule_set_id": pl.Int64, "nim_sum": pl.UInt8})
    counts, _ = summary_counts(verdicts, pl.DataFrame(schema=REJECT_SCHEMA))
    expected = {}
    for rid, nim in rows:
        w, lost = expected.get(rid, (0, 0))
        expected[rid] = (w + (nim != 0), lost + (nim == 0))
    assert sorted(counts.rows()) == sorted((rid, w, lost) for rid, (w, lost) in expected.items())
    assert counts.schema == pl.Schema({"rule_set_id": pl.Int64, "W": pl.Int64, "L": pl.Int64})


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([3, 7, 9]), st.integers(-2, 4), st.integers(0, 50)),
                max_size=25))
def test_long_rows_grouped_by_sort_as_by_group_by(rows):
    # The counting-sort grouping must give each position exactly the heaps, in input order,
    # and the table that long_to_wide and attach_tables give (there in first-seen order).
    frame = pl.DataFrame({
        "_source": ["p.csv"] * len(rows), "_row": list(range(len(rows))),
        "rule_set_id": [r for r, _, _ in rows], "position_id": [p for _, p, _ in rows],
        "heaps": [[h] for _, _, h in rows], "_column": [None] * len(rows),
        "_reason": [None] * len(rows)},
        schema={"_source": pl.String, "_row": pl.Int64, "rule_set_id": pl.Int64,
                "position_id": pl.Int64, "heaps": pl.List(pl.Int64), "_column": pl.String,
                "_reason": pl.String})
    index = pl.DataFrame({"rule_set_id": [3, 7, 9], "table": [1, 0, 2]})
    fast = long_to_wide_sorted(frame, index)
    expected = {}
    for rid, pid, heap in rows:
        expected.setdefault((rid, pid), []).append(heap)
    table = {3: 1, 7: 0, 9: 2}
    assert fast.select("rule_set_id", "position_id", "heaps", "table").rows() == [
        (rid, pid, heaps, table[rid]) for (rid, pid), heaps in sorted(expected.items())]
    assert fast["_reason"].null_count() == fast.height


def test_long_rows_grouped_by_sort_only_when_clean_and_known():
    frame = pl.DataFrame({"_source": ["p"], "_row": [0], "rule_set_id": [5], "position_id": [1],
                          "heaps": [[2]], "_column": [None], "_reason": [None]},
                         schema_overrides={"_column": pl.String, "_reason": pl.String})
    index = pl.DataFrame({"rule_set_id": [5, 6], "table": [0, None]})
    assert long_to_wide_sorted(frame, index) is not None
    assert long_to_wide_sorted(frame.with_columns(pl.lit(6).alias("rule_set_id")), index) is None
    assert long_to_wide_sorted(frame.with_columns(pl.lit("bad").alias("_reason")), index) is None
    assert long_to_wide_sorted(frame.with_columns(pl.lit("5").alias("rule_set_id")), index) is None
