"""footer_stats: integer maxima read from a Parquet footer's bytes, against the data itself.

Footers come from pyarrow's and polars' writers (the expected maxima are the written values'
own maximum) and from a small Thrift compact encoder here (the Parquet format's field ids),
for statistics no writer makes: legacy fields only, wrong widths, a missing minimum. Bytes
that are not a footer never raise. End to end, a run on a file whose statistics pyarrow
cannot decode reads its rows instead of the process aborting.
"""

from __future__ import annotations

import io
import struct
import subprocess
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import naive_sg, write_understated_parquet
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.io.read.footer_stats import integer_maxima

EXE = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "snim-batch"

# ---- a Thrift compact encoder (field ids of parquet.thrift) ---------------------------------

BINARY, LIST, STRUCT, I64 = 8, 9, 12, 6


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n < 0x80:
            return bytes(out + bytes([n]))
        out.append(n & 0x7F | 0x80)
        n >>= 7


def _struct(fields: list[tuple[int, int, bytes]]) -> bytes:
    """Fields (id, type, encoded value) in id order, each header in the short form."""
    out, last = bytearray(), 0
    for field, kind, value in fields:
        out += bytes([(field - last) << 4 | kind]) + value
        last = field
    return bytes(out + b"\x00")


def _list_of_structs(items: list[bytes]) -> bytes:
    assert len(items) < 15
    return bytes([len(items) << 4 | STRUCT]) + b"".join(items)


def _binary(data: bytes) -> bytes:
    return _varint(len(data)) + data


def _footer(groups: list[list[dict[int, bytes] | None]],
            before: tuple[tuple[int, int, bytes], ...] = ()) -> bytes:
    """A FileMetaData with fields `before` (ids below 4) and row groups, each a list of
    columns' statistics fields (None: a column chunk without meta_data.statistics)."""
    def column(stats: dict[int, bytes] | None) -> bytes:
        meta = [] if stats is None else [(12, STRUCT, _struct(
            [(f, BINARY, _binary(v)) for f, v in sorted(stats.items())]))]
        return _struct([(2, I64, _varint(0)), (3, STRUCT, _struct(meta))])

    return _struct([*before, (4, LIST, _list_of_structs(
        [_struct([(1, LIST, _list_of_structs([column(c) for c in g]))]) for g in groups]))])


def i64(v: int) -> bytes:
    return struct.pack("<q", v)


def u64(v: int) -> bytes:
    return struct.pack("<Q", v)


# ---- statistics the format allows ------------------------------------------------------------

def test_exact_fields_are_preferred_and_the_largest_over_row_groups_wins() -> None:
    footer = _footer([[{5: i64(7), 6: i64(1), 1: i64(999), 2: i64(0)}], [{5: i64(12), 6: i64(3)}]])
    assert integer_maxima(footer, {0: (8, True)}) == {0: 12}


def test_legacy_fields_count_for_signed_columns_only() -> None:
    footer = _footer([[{1: i64(40), 2: i64(-5)}, {1: u64(2**63 + 1), 2: u64(0)}]])
    assert integer_maxima(footer, {0: (8, True), 1: (8, False)}) == {0: 40, 1: None}


def test_unsigned_maxima_are_read_unsigned_and_int32_as_four_bytes() -> None:
    footer = _footer([[{5: u64(2**63 + 1), 6: u64(0)}, {5: struct.pack("<i", -3),
                                                        6: struct.pack("<i", -9)}]])
    assert integer_maxima(footer, {0: (8, False), 1: (4, True)}) == {0: 2**63 + 1, 1: -1}


@pytest.mark.parametrize("stats", [
    {5: i64(7)[:7], 6: i64(1)},     # a maximum one byte short: what pyarrow aborts on
    {5: i64(7), 6: i64(1) + b"\0"},  # a minimum one byte long
    {5: i64(7)},                    # no minimum
    {},                             # statistics without values (all nulls)
    None,                           # no statistics
], ids=["short-max", "long-min", "no-min", "empty", "none"])
def test_a_row_group_without_usable_statistics_makes_the_column_unknown(stats) -> None:
    footer = _footer([[{5: i64(3), 6: i64(1)}, {5: i64(3), 6: i64(1)}], [stats, {5: i64(4),
                                                                                6: i64(2)}]])
    assert integer_maxima(footer, {0: (8, True), 1: (8, True)}) == {0: None, 1: 4}


def test_no_row_groups_is_minus_one_and_a_missing_column_unknown() -> None:
    assert integer_maxima(_footer([]), {0: (8, True)}) == {0: -1}
    assert integer_maxima(_footer([[{5: i64(3), 6: i64(1)}]]), {0: (8, True), 2: (8, True)}
                          ) == {0: 3, 2: None}


def test_fields_before_the_row_groups_are_skipped_by_their_encoding() -> None:
    """A list of booleans (a byte each), a map of binary to booleans (a byte each), a double
    and a struct holding a list: what a footer's other fields may hold before row groups."""
    booleans = bytes([3 << 4 | 1]) + b"\x01\x02\x01"
    mapping = _varint(2) + bytes([BINARY << 4 | 2]) + _binary(b"k1") + b"\x02" + _binary(b"k")
    mapping += b"\x01"
    nested = _struct([(1, LIST, bytes([2 << 4 | I64]) + _varint(5) + _varint(300))])
    footer = _footer([[{5: i64(21), 6: i64(1)}]], before=(
        (1, LIST, booleans), (2, 11, mapping), (3, 7, struct.pack("<d", 2.5)),
    ))
    assert integer_maxima(footer, {0: (8, True)}) == {0: 21}
    footer = _footer([[{5: i64(22), 6: i64(1)}]], before=((3, STRUCT, nested),))
    assert integer_maxima(footer, {0: (8, True)}) == {0: 22}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_bytes_that_are_not_a_footer_never_raise(data: bytes) -> None:
    found = integer_maxima(data, {0: (8, True), 1: (4, False)})
    assert set(found) == {0, 1}
    assert all(v is None or isinstance(v, int) for v in found.values())


@pytest.mark.parametrize("header", [b"\x19" * 2000, b"\x1c" * 2000, b"\x19\xf1\xff\xff\xff\x7f"],
                         ids=["nested-lists", "nested-structs", "huge-list-of-booleans"])
def test_deep_nesting_and_huge_counts_end_quickly(header: bytes) -> None:
    assert integer_maxima(header, {0: (8, True)}) == {0: None}


# ---- footers real writers make ---------------------------------------------------------------

def _thrift(table_bytes: bytes) -> bytes:
    n = int.from_bytes(table_bytes[-8:-4], "little")
    return table_bytes[-8 - n:-8]


def _column_leaves(path: io.BytesIO) -> dict[str, int]:
    meta = pq.ParquetFile(path).metadata
    return {meta.schema.column(i).path: i for i in range(meta.num_columns)}


INT_TYPES = {"int32": (pa.int32(), -2**31, 2**31 - 1), "int64": (pa.int64(), -2**63, 2**63 - 1),
             "uint32": (pa.uint32(), 0, 2**32 - 1), "uint64": (pa.uint64(), 0, 2**64 - 1)}


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_pyarrow_written_footers_give_the_datas_own_maximum(data) -> None:
    name = data.draw(st.sampled_from(sorted(INT_TYPES)))
    arrow_type, low, high = INT_TYPES[name]
    values = data.draw(st.lists(st.one_of(st.none(), st.integers(low, high)), max_size=40))
    group = data.draw(st.integers(1, 12))
    table = pa.table({"x": pa.array(values, arrow_type),
                      "t": pa.array([str(v) for v in values], pa.string())})
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=group)
    leaf = _column_leaves(sink)["x"]
    meta = pq.ParquetFile(sink).metadata
    sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
    starts = [sum(sizes[:g]) for g in range(len(sizes))]
    groups = [values[start:start + size] for start, size in zip(starts, sizes)]
    if any(all(v is None for v in g) for g in groups):
        expected = None  # a row group of nulls (or none) has no minimum or maximum
    else:
        expected = max([-1, *(v for v in values if v is not None)])
    physical = meta.schema.column(leaf).physical_type
    width = 4 if physical == "INT32" else 8
    signed = not meta.schema.column(leaf).converted_type.startswith("UINT")
    assert integer_maxima(_thrift(sink.getvalue()), {leaf: (width, signed)}) == {leaf: expected}


def test_polars_written_list_leaves_give_the_heaps_maximum() -> None:
    frame = pl.DataFrame({"heaps": [[3, 9], [], None, [4]] * 3, "id": list(range(12))},
                         schema={"heaps": pl.List(pl.Int64), "id": pl.Int64})
    sink = io.BytesIO()
    frame.write_parquet(sink, statistics=True, row_group_size=5)
    leaves = _column_leaves(sink)
    found = integer_maxima(_thrift(sink.getvalue()), {leaves["heaps.list.element"]: (8, True),
                                                       leaves["id"]: (8, True)})
    assert found == {leaves["heaps.list.element"]: 9, leaves["id"]: 11}


# ---- end to end --------------------------------------------------------------------------------

def test_a_run_on_statistics_pyarrow_cannot_decode_reads_the_rows(tmp_path: Path) -> None:
    """A position id whose footer maximum is 7 bytes long: pyarrow ends the process on it
    (exit 134, no message) if asked; the run reads the rows and decides them."""
    big = 0x0A0B0C0D0E0F1011
    pq.write_table(pa.table({"rule_set_id": pa.array([1, 1], pa.int64()),
                             "position_id": pa.array([5, big], pa.int64()),
                             "heaps": pa.array([[3], [1, 2]], pa.list_(pa.int64()))}),
                   tmp_path / "good.parquet")
    raw = (tmp_path / "good.parquet").read_bytes()
    footer = _thrift(raw)
    assert footer.count(b"\x08" + i64(big)) == 2  # max_value and the legacy max
    damaged = footer.replace(b"\x08" + i64(big), b"\x07" + i64(big)[:7])
    start = len(raw) - 8 - len(footer)
    (tmp_path / "positions.parquet").write_bytes(
        raw[:start] + damaged + struct.pack("<i", len(damaged)) + b"PAR1")
    (tmp_path / "rules.csv").write_text("rule_set_id,kind,moves\n1,subtraction,1 2\n")
    done = subprocess.run([str(EXE), "run", "--rules", "rules.csv", "--positions",
                           "positions.parquet", "--out", "out", "--quiet"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, "")
    verdicts = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")
    # moves {1, 2}: SG(x) = x mod 3; heap 3 -> 0 (L); heaps 1, 2 -> 1 ^ 2 = 3 (W)
    assert verdicts.select("position_id", "verdict").rows() == [(5, "L"), (big, "W")]


@pytest.mark.parametrize("form", ["wide", "long"])
def test_statistics_that_understate_the_heaps_do_not_reject_them(tmp_path: Path,
                                                                 form: str) -> None:
    """A writer whose statistics say the heaps end at 100 where they reach 40,000: the tables
    presized to 100 grow for the heaps the rows hold, and every row is evaluated (before,
    the rows past 100 were rejected naming a limit no table had reached). SG by the naive
    mex reference."""
    heaps = {1: [5], 2: [40_000], 3: [39_999, 3], 4: [40_000]}
    rule_of = {1: 1, 2: 1, 3: 1, 4: 2}
    if form == "wide":
        table = pa.table({"rule_set_id": [rule_of[p] for p in heaps], "position_id": list(heaps),
                          "heaps": pa.array(list(heaps.values()), pa.list_(pa.int64()))})
    else:
        rows = [(rule_of[p], p, h) for p, hs in heaps.items() for h in hs]
        table = pa.table({"rule_set_id": [r for r, _, _ in rows],
                          "position_id": [p for _, p, _ in rows],
                          "heap": pa.array([h for _, _, h in rows], pa.int64())})
    write_understated_parquet(table, tmp_path / "positions.parquet", {40_000: 100})
    moves = {1: [1000], 2: [1000, 1001]}
    (tmp_path / "rules.csv").write_text("rule_set_id,kind,moves\n" + "".join(
        f"{r},subtraction,{' '.join(map(str, m))}\n" for r, m in moves.items()))
    done = subprocess.run([str(EXE), "run", "--rules", "rules.csv", "--positions",
                           "positions.parquet", "--out", "out", "--quiet"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, "")
    sg = {r: naive_sg(m, 40_001) for r, m in moves.items()}
    want = []
    for p, hs in heaps.items():
        nim = 0
        for h in hs:
            nim ^= sg[rule_of[p]][h]
        want.append((rule_of[p], p, nim))
    verdicts = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")
    assert verdicts.select("rule_set_id", "position_id", "nim_sum").rows() == sorted(want)
