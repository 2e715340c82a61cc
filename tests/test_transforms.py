"""pipeline.transforms helpers that the run tests reach only through whole runs, checked here
against plain-Python references."""

from __future__ import annotations

import re
from unittest.mock import patch

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import keys
from pipeline.config import Columns
from pipeline.keys import integer_keys, key_column
from pipeline.limits import MAX_TABLE_LEN
from pipeline.transforms.buffers import string_views
from pipeline.transforms.lists import _heaps_from_text_exactly, heaps_from_text, parse_int_list
from pipeline.transforms.long_form import long_to_wide_sorted
from pipeline.transforms.normalize import (
    PAST_RULES_MOVES,
    moves_held,
    normalize_positions,
    normalize_rules,
)
from pipeline.transforms.outputs import summary_counts
from pipeline.transforms.schema import REJECT_SCHEMA


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
    assert heaps_from_text(s).to_list() == _heaps_from_text_exactly(s).to_list()


# One element of a comma-separated heaps list: a heap, or an empty element (nothing, or only
# whitespace, between two commas or at an end).
ELEMENT = st.one_of(st.integers(-10**18 + 1, 10**18 - 1).map(str),
                    st.sampled_from(["", " ", "\t", "\xa0", " \n "]))
PADDING = st.sampled_from(["", " ", "\t", "\u3000"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(ELEMENT, min_size=1, max_size=5), PADDING, st.booleans()),
                max_size=6))
def test_heaps_text_with_empty_elements_is_rejected_by_kernel_and_grammar(rows):
    # Expected from how each text was built: a comma-separated list with an empty element is
    # not a list of heaps; one without is its heaps; a lone blank element is no heaps.
    texts, expected = [], []
    for elements, pad, brackets in rows:
        text = (pad + "," + pad).join(elements)
        texts.append(f"[{text}]" if brackets else text)
        blank = [e.strip() == "" for e in elements]
        if len(elements) > 1 and any(blank):
            expected.append(None)
        else:
            expected.append([int(e) for e, b in zip(elements, blank) if not b])
    s = pl.Series("heaps", texts, dtype=pl.String)
    assert _heaps_from_text_exactly(s).to_list() == expected
    assert heaps_from_text(s).to_list() == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(HEAP_TEXT_CHARS, max_size=12), max_size=8))
def test_parse_int_list_explains_exactly_the_texts_the_grammar_rejects(texts):
    # A rejected heaps cell is explained by parse_int_list: it raises, or finds a heap outside
    # Int64, exactly where the polars grammar gives null; elsewhere both read the same heaps.
    parsed = _heaps_from_text_exactly(pl.Series("heaps", texts, dtype=pl.String)).to_list()
    for text, heaps in zip(texts, parsed):
        try:
            values = parse_int_list(text, item="heap")
        except ValueError:
            assert heaps is None, text
            continue
        in_int64 = all(-2**63 <= v < 2**63 for v in values)
        assert heaps == (values if in_int64 else None), text


def test_a_range_holds_at_most_a_million_values():
    assert parse_int_list("1..1000000", allow_ranges=True, item="move") == list(
        range(1, 1_000_001))
    assert parse_int_list("5 2..1000001", allow_ranges=True, item="move")[:3] == [5, 2, 3]
    with pytest.raises(ValueError, match=r"^range '1\.\.1000001' is too long \(over "
                                         r"1,000,000 values\)$"):
        parse_int_list("1..1000001", allow_ranges=True, item="move")


@pytest.mark.parametrize(("text", "message"), [
    ("5,,6", "heap at index 1 is empty in '5,,6'"),
    (",", "heap at index 0 is empty in ','"),
    ("[,]", "heap at index 0 is empty in '[,]'"),
    (",5", "heap at index 0 is empty in ',5'"),
    ("5,", "heap at index 1 is empty in '5,'"),
    ("[5,]", "heap at index 1 is empty in '[5,]'"),
    ("5, ,6", "heap at index 1 is empty in '5, ,6'"),
    ("5 6,,7", "heap at index 2 is empty in '5 6,,7'"),
    ("[ 5 ,\t]", "heap at index 1 is empty in '[ 5 ,\\t]'"),
    ("1 x", "'x' in '1 x' is not an integer"),
    ("[1 2", "malformed list '[1 2' (unbalanced brackets)"),
    ("1 " + "9" * 25, "heap '" + "9" * 25 + "' at index 1 is larger than 2^63-1"),
    # within uint64's 20 digits a heap is named as an integer column names it
    ("1 18446744073709551615", "heap 18446744073709551615 at index 1 is larger than 2^63-1"),
    ("+018446744073709551615", "heap 18446744073709551615 at index 0 is larger than 2^63-1"),
    # past int64's digits a negative heap is negative, not larger than anything
    ("1 -" + "9" * 20, "heap '-" + "9" * 20 + "' at index 1 is negative"),
    ("-018446744073709551615", "heap '-018446744073709551615' at index 0 is negative"),
])
def test_parse_int_list_names_the_bad_element(text, message):
    with pytest.raises(ValueError) as caught:
        parse_int_list(text, item="heap")
    assert str(caught.value) == message


@pytest.mark.parametrize(("text", "heaps"), [
    ("", []), ("[]", []), (" [ ] ", []), ("5  6", [5, 6]), ("5 , 6", [5, 6]),
    ("\t5,\n6 ", [5, 6]), ("[5, 6]", [5, 6]), ("5 6,7", [5, 6, 7]),
])
def test_whitespace_separators_and_empty_lists_stay_valid(text, heaps):
    assert parse_int_list(text, item="heap") == heaps
    assert heaps_from_text(pl.Series("heaps", [text])).to_list() == [heaps]


@pytest.mark.parametrize(("text", "message"), [
    ("2,,5", "move at index 1 is empty in '2,,5'"),
    ("1..3,", "move at index 3 is empty in '1..3,'"),
    ("..3", "malformed range '..3' in '..3' (expected \"FIRST..LAST\", two integers)"),
    ("2 4..", "malformed range '4..' in '2 4..' (expected \"FIRST..LAST\", two integers)"),
    ("5..3", "range '5..3' is empty (its first value is above its last)"),
    ("1.." + "9" * 30, "move '" + "9" * 30 + "' at index 0 is larger than 2^63-1"),
])
def test_moves_text_problems_are_rejected_rules_naming_the_element(text, message):
    raw = pl.DataFrame({"rule_set_id": [7], "kind": [None], "moves": [text]},
                       schema={"rule_set_id": pl.Int64, "kind": pl.String, "moves": pl.String})
    rules = normalize_rules(raw, np.arange(1), "r.csv", Columns())
    assert rules.select("_column", "_reason").row(0) == ("moves", message)


def test_rules_moves_past_the_runs_limit_are_rejected_from_that_row_on():
    """The rules rows' distinct moves are counted in file order, plain list text and the
    text the kernel leaves alike: the row that passes what is left, and every later row
    with moves, is rejected naming the limit; rows without moves (nim) are still rules; the
    next file gets what this one left (`moves_held`)."""
    raw = pl.DataFrame({"rule_set_id": [1, 2, 3, 4, 5, 6],
                        "kind": [None, "nim", None, None, "nim", None],
                        "moves": ["2 3 3", None, "1..3", "4", None, "[5]"]},
                       schema={"rule_set_id": pl.Int64, "kind": pl.String, "moves": pl.String})
    rules = normalize_rules(raw, np.arange(6), "r.csv", Columns(), moves_left=4)
    assert rules.select("moves", "_column").rows() == [
        ([2, 3], None), ([], None), (None, "moves"), (None, "moves"), ([], None),
        (None, "moves")]
    assert rules["_reason"].to_list() == [None, None, PAST_RULES_MOVES, PAST_RULES_MOVES, None,
                                          PAST_RULES_MOVES]
    assert PAST_RULES_MOVES.startswith("moves pass the rules' limit of 20,000,000 moves")
    assert moves_held(rules) == 2
    plain = normalize_rules(raw.head(1), np.arange(1), "r2.csv", Columns(), moves_left=1)
    assert plain.select("moves", "_reason").row(0) == (None, PAST_RULES_MOVES)  # a plain row
    fits = normalize_rules(raw, np.arange(6), "r.csv", Columns(), moves_left=7)  # exactly
    assert fits["_reason"].null_count() == 6 and moves_held(fits) == 7


_MOVE = st.one_of(st.integers(1, 30), st.sampled_from([0, -3, None, 10**7, 2**40]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 9)),
                          st.sampled_from([None, "subtraction", " Subtraction ", "nim", "bogus"]),
                          st.one_of(st.none(), st.lists(_MOVE, max_size=6))), max_size=25))
def test_list_moves_rules_are_canonical_or_rejected_row_by_row(rows):
    """A rules table whose moves are lists of integers: a row is a valid subtraction rule
    exactly when it has an id, its kind is empty or subtraction (any case, edge spaces), and
    its 1+ moves are all integers in 1..MAX_TABLE_LEN; its moves are then the sorted distinct
    values. Rows of other kinds or with problems are judged one by one, as before."""
    raw = pl.DataFrame({"rule_set_id": [r for r, _, _ in rows], "kind": [k for _, k, _ in rows],
                        "moves": [m for _, _, m in rows]},
                       schema={"rule_set_id": pl.Int64, "kind": pl.String,
                               "moves": pl.List(pl.Int64)})
    rules = normalize_rules(raw, np.arange(len(rows)), "r.parquet", Columns())
    assert rules["rule_set_id"].to_list() == [r for r, _, _ in rows]
    for (rid, kind, moves), got in zip(rows, rules.iter_rows(named=True)):
        subtraction = kind is None or kind.strip().lower() == "subtraction"
        valid = (rid is not None and subtraction and bool(moves)
                 and all(m is not None and 1 <= m <= MAX_TABLE_LEN for m in moves))
        if valid:
            assert (got["kind"], got["moves"], got["_reason"]) == (
                "subtraction", sorted(set(moves)), None)
        elif rid is None or subtraction or kind == "bogus" or moves:
            assert got["_reason"] is not None and got["moves"] is None
        else:  # nim with no moves: valid, its moves fixed
            assert (got["kind"], got["_reason"]) == (kind, None)


@st.composite
def _moves_text(draw):
    """(moves text as a CSV cell may give it, the values it lists or None when it is not a
    list of integers): separators, brackets, "+" signs, leading zeros, ranges, stray text."""
    values = draw(st.lists(_MOVE.filter(lambda m: m is not None), max_size=6))
    tokens, listed = [], []
    for v in values:
        form = draw(st.sampled_from(["plain", "plus", "zeros", "range"]))
        if form == "range" and 0 < v < 20:
            tokens.append(f"{v}..{v + 2}")
            listed += [v, v + 1, v + 2]
            continue
        tokens.append(f"+{v}" if form == "plus" and v >= 0 else
                      f"00{v}" if form == "zeros" and v >= 0 else str(v))
        listed.append(v)
    text = draw(st.sampled_from([" ", ",", ", ", "\t", " ,\u00a0"])).join(tokens)
    if draw(st.booleans()):
        text = f"[{text}]"
    broken = draw(st.sampled_from([None, None, None, "x", ",,", "["]))
    return (text + broken, None) if broken and tokens else (text, listed)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 9)),
                          st.sampled_from([None, "subtraction", " Subtraction ", "nim"]),
                          st.one_of(st.none(), _moves_text())), max_size=25))
def test_text_moves_rules_are_canonical_or_rejected_row_by_row(rows):
    """A rules table whose moves are text (CSV): the plain text a kernel parses and the text
    it leaves to the exact grammar (ranges, "+", non-ASCII spaces, problems) give the same
    rules as the row-by-row judge gives each: valid exactly when the row has an id, a
    subtraction kind and 1+ moves in 1..MAX_TABLE_LEN, its moves then sorted and distinct."""
    raw = pl.DataFrame({"rule_set_id": [r for r, _, _ in rows], "kind": [k for _, k, _ in rows],
                        "moves": [None if m is None else m[0] for _, _, m in rows]},
                       schema={"rule_set_id": pl.Int64, "kind": pl.String, "moves": pl.String})
    rules = normalize_rules(raw, np.arange(len(rows)), "r.csv", Columns())
    for (rid, kind, cell), got in zip(rows, rules.iter_rows(named=True)):
        listed = None if cell is None else cell[1]
        subtraction = kind is None or kind.strip().lower() == "subtraction"
        valid = (rid is not None and subtraction and bool(listed)
                 and all(1 <= m <= MAX_TABLE_LEN for m in listed))
        if valid:
            assert (got["kind"], got["moves"], got["_reason"]) == (
                "subtraction", sorted(set(listed)), None)
        elif rid is None or subtraction or listed is None and cell is not None or listed:
            assert got["_reason"] is not None and got["moves"] is None
        else:  # nim with no moves: valid, its moves fixed
            assert (got["kind"], got["_reason"]) == (kind.strip(), None)


def test_long_form_heap_cells_name_their_problem():
    raw = pl.DataFrame({"rule_set_id": ["1"] * 4, "position_id": ["0", "1", "2", "3"],
                        "heap": ["", " 5, ", "x" * 200, "9" * 30]})
    frame = normalize_positions(raw, np.arange(4), "p.csv", Columns(), "long", 0)
    assert frame["_reason"].to_list() == [
        "heap is empty", "heap ' 5, ' is not an integer",
        "heap 'xxxxxxxxxxxxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxxxxxxxxxxxx' is not an integer",
        "heap '" + "9" * 30 + "' is larger than 2^63-1"]


@settings(deadline=None)
@given(st.lists(st.lists(st.integers(-10**18 + 1, 10**18 - 1), max_size=5), max_size=6),
       st.sampled_from([" ", ",", ", ", "\t", " ,\n"]), st.booleans())
def test_heaps_text_reads_lists_written_with_any_separator(lists, sep, brackets):
    texts = [sep.join(map(str, heaps)) for heaps in lists]
    if brackets:
        texts = [f"[{t}]" for t in texts]
    assert heaps_from_text(pl.Series("heaps", texts, dtype=pl.String)).to_list() == lists


KEY_CHARS = st.sampled_from(list("0123456789-+ \t") + ["\xa0", "x"])


@pytest.mark.parametrize("kernel_rows", [0, 1 << 14], ids=["kernels", "polars"])
@settings(deadline=None)
@given(st.lists(st.one_of(st.text(KEY_CHARS, max_size=5), st.integers(-10**19, 10**19).map(str),
                          st.sampled_from(["07", "-0", "0", "00", "-5", " 12 ", "+3"])),
                min_size=1, max_size=6))
def test_text_keys_read_as_stripping_then_integer_keys_would(kernel_rows, texts):
    # The kernel reads a whole column of plain integers at once, polars a short one; anything
    # else is stripped ("" is null), and integer_keys then gives the same as on the text.
    frame = pl.DataFrame({"position_id": pl.Series(texts, dtype=pl.String)})
    stripped = [t.strip(" \t\xa0") or None for t in texts]
    integers = all(t is None or (re.fullmatch(r"0|-?[1-9][0-9]*", t) and -2**63 <= int(t) < 2**63)
                   for t in stripped)
    with patch.object(keys, "_KERNEL_ROWS", kernel_rows):
        got = integer_keys(key_column(frame, "position_id", "t.csv").to_frame())["position_id"]
    assert got.dtype == (pl.Int64 if integers else pl.String)
    assert got.to_list() == [t if t is None or not integers else int(t) for t in stripped]


def _w_and_l(rows: list[tuple]) -> dict:
    """{rule set: (W, L)} of (rule set, nim sum) rows, counted by hand."""
    counted: dict = {}
    for rid, nim in rows:
        w, lost = counted.get(rid, (0, 0))
        counted[rid] = (w + (nim != 0), lost + (nim == 0))
    return counted


@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 3)), max_size=30), st.booleans())
def test_summary_counts_count_w_and_l_per_rule_set(rows, key_order):
    # Verdicts in key order take the run-length count; any other order the group_by.
    if key_order:
        rows = sorted(rows)
    verdicts = pl.DataFrame({"rule_set_id": [r for r, _ in rows], "nim_sum": [n for _, n in rows]},
                            schema={"rule_set_id": pl.Int64, "nim_sum": pl.UInt8})
    counts, _ = summary_counts(verdicts, pl.DataFrame(schema=REJECT_SCHEMA))
    expected = _w_and_l(rows)
    assert sorted(counts.rows()) == sorted((rid, w, lost) for rid, (w, lost) in expected.items())
    assert counts.schema == pl.Schema({"rule_set_id": pl.Int64, "W": pl.Int64, "L": pl.Int64})


@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "bb", "c", "é"]), st.integers(0, 3)),
                max_size=30),
       st.sets(st.sampled_from(["a", "b", "bb", "c", "d", "é"])), st.booleans())
def test_summary_counts_of_text_ids_find_runs_among_the_rule_ids(rows, known, flagged):
    # Text ids in key order are found by binary search among the run's sorted rule ids (rule
    # ids no verdict has, "d", count nothing); an id that is not among them ("é" or another
    # left out of `known`) must not lose its rows: the runs are then found by reading the ids.
    rows = sorted(rows)
    rid = pl.Series("rule_set_id", [r for r, _ in rows], dtype=pl.String)
    verdicts = pl.DataFrame([rid.set_sorted() if flagged else rid,
                             pl.Series("nim_sum", [n for _, n in rows], dtype=pl.UInt8)])
    rule_ids = pl.Series(sorted(known), dtype=pl.String)
    counts, _ = summary_counts(verdicts, pl.DataFrame(schema=REJECT_SCHEMA), rule_ids)
    expected = _w_and_l(rows)
    assert counts.rows() == sorted((r, w, lost) for r, (w, lost) in expected.items())
    assert counts.schema == pl.Schema({"rule_set_id": pl.String, "W": pl.Int64, "L": pl.Int64})


@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "bb", "c", "é"]), st.integers(0, 3)),
                max_size=30),
       st.sets(st.sampled_from(["0", "bz", "d"])), st.booleans())
def test_summary_counts_of_text_ids_as_enum_codes_count_the_text(rows, unused, key_order):
    # The in-memory sort gives text rule ids as an Enum of the run's sorted rule ids (some
    # of which no verdict has): in key order its codes are cut into runs, in any other order
    # the group_by counts them; either way the counts name the text, as plain text ids would.
    if key_order:
        rows = sorted(rows)
    categories = sorted({r for r, _ in rows} | unused)
    verdicts = pl.DataFrame([
        pl.Series("rule_set_id", [r for r, _ in rows], dtype=pl.Enum(categories)),
        pl.Series("nim_sum", [n for _, n in rows], dtype=pl.UInt8)])
    counts, _ = summary_counts(verdicts, pl.DataFrame(schema=REJECT_SCHEMA))
    expected = _w_and_l(rows)
    assert sorted(counts.rows()) == sorted((r, w, lost) for r, (w, lost) in expected.items())
    assert counts.schema == pl.Schema({"rule_set_id": pl.String, "W": pl.Int64, "L": pl.Int64})


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


@given(st.lists(st.tuples(st.lists(st.text(max_size=20), max_size=6), st.integers(0, 3)),
                max_size=5))
def test_string_views_are_the_column_in_one_piece_of_views(pieces):
    # slices of several columns joined without a copy; texts are any Unicode, inline or not
    column = pl.concat([pl.Series("x", texts + ["a longer text than a view holds"] * 3).slice(cut)
                        for texts, cut in pieces] or [pl.Series("x", [], pl.String)],
                       rechunk=False)
    views, buffers = string_views(column)
    assert views.shape == (column.len(), 4)
    encoded = [t.encode() for t in column.to_list()]
    assert views[:, 0].tolist() == [len(t) for t in encoded]
    read = [bytes(v[1:].view(np.uint8)[:n]) if n <= 12
            else bytes(buffers[v[2]][v[3]:v[3] + n]) for v, n in zip(views, views[:, 0])]
    assert read == encoded
