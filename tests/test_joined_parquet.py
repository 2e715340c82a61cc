"""io.outputs.joined_parquet: Parquet parts encoded apart, joined under one footer, read as
the table they were cut from, by pyarrow, polars and DuckDB; its Thrift codec writes back
pyarrow's own footers byte for byte."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from pipeline.io.outputs.joined_parquet import JoinedParquet, JoinError, _dump_struct, _read_struct


def _table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "key": pa.array([f"k{i:06d}" for i in range(n)], pa.large_string()),
        "value": pa.array(rng.integers(-(1 << 40), 1 << 40, n)),
        "maybe": pa.array([None if i % 3 == 0 else float(i) / 7 for i in range(n)]),
        "flag": pa.array([None if i % 5 == 0 else i % 2 == 0 for i in range(n)]),
        "small": pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, 2, n), pa.uint8()),
                                                pa.array(["L", "W"], pa.large_string())),
        # logical types, and more fields than a footer's one-byte headers count (a footer's
        # bytes past 0x7f once read as negative numbers from a pa.Buffer's view)
        "unsigned": pa.array(rng.integers(0, 1 << 32, n), pa.uint32()),
        "tiny": pa.array(rng.integers(-128, 128, n), pa.int8()),
        "when": pa.array(rng.integers(0, 1 << 50, n), pa.timestamp("us")),
        "day": pa.array(rng.integers(0, 30000, n).astype(np.int32), pa.date32()),
        "ids": pa.array([[i, i + 1][:i % 3] for i in range(n)], pa.list_(pa.int64())),
        "all_null": pa.nulls(n, pa.int64())})


def _parquet(table: pa.Table, **options) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **options)
    return sink.getvalue()


class _ShortWrites(io.RawIOBase):
    """A file that writes at most 1000 bytes a call, as an unbuffered file may."""

    def __init__(self, path: Path):
        self.file = open(path, "wb", buffering=0)  # noqa: SIM115

    def write(self, data) -> int:
        return self.file.write(memoryview(data)[:1000])

    def close(self) -> None:
        self.file.close()


def _joined(parts: list[bytes], path: Path) -> JoinedParquet:
    sink = _ShortWrites(path)
    joined = JoinedParquet(sink)
    for part in parts:
        joined.append(pa.py_buffer(part))  # as the encoders give them
    joined.finish()
    sink.close()
    return joined


@pytest.mark.parametrize("options", [
    {}, {"compression": "zstd", "write_page_index": True}, {"use_dictionary": False},
    {"compression": "zstd", "write_statistics": False, "data_page_version": "2.0"},
    {"compression": "snappy", "sorting_columns": [pq.SortingColumn(0)]}])
def test_the_codec_writes_pyarrows_footer_back_byte_for_byte(options) -> None:
    written = _parquet(_table(3000), row_group_size=700, **options)
    length = struct.unpack("<I", written[-8:-4])[0]
    footer = written[-8 - length:-8]
    fields, end = _read_struct(memoryview(footer), 0)
    assert end == length
    assert _dump_struct(fields) == footer


@settings(max_examples=20, deadline=None)
@given(cuts=st.lists(st.integers(0, 900), max_size=5), group=st.integers(50, 400))
def test_parts_joined_read_as_the_table_they_were_cut_from(tmp_path_factory, cuts,
                                                           group) -> None:
    table = _table(900, seed=len(cuts))
    bounds = [0, *sorted(cuts), 900]
    parts = [_parquet(table.slice(a, b - a), compression="zstd", row_group_size=group)
             for a, b in zip(bounds, bounds[1:])]
    path = tmp_path_factory.mktemp("joined") / "joined.parquet"
    joined = _joined(parts, path)
    whole = pq.read_table(io.BytesIO(_parquet(table)))  # the table as Parquet gives it back

    assert pq.read_table(path).equals(whole)
    assert pq.read_schema(path).equals(whole.schema)  # the logical types kept
    assert_frame_equal(pl.read_parquet(path), pl.from_arrow(whole))
    rows, total = duckdb.sql(f"select count(*), sum(value) from read_parquet('{path}')").fetchone()
    assert (rows, total) == (900, int(np.sum(table["value"].to_numpy())))

    meta = pq.ParquetFile(path).metadata
    assert (meta.num_rows, meta.num_row_groups) == (900, joined.row_groups)
    start = 0
    for i in range(meta.num_row_groups):  # each group where the footer says, with its stats
        got = pq.ParquetFile(path).read_row_group(i)
        assert got.equals(whole.slice(start, got.num_rows))
        stats = meta.row_group(i).column(0).statistics
        if got.num_rows:
            assert (stats.min, stats.max) == (got["key"][0].as_py(), got["key"][-1].as_py())
        start += got.num_rows
    assert start == 900


def test_many_parts_make_one_footer_of_all_their_row_groups(tmp_path: Path) -> None:
    """40 parts: a row group list past 15 items (a longer list header) and field ids past
    one-byte deltas, as a 100M night's 26 slices need."""
    table = _table(400)
    parts = [_parquet(table.slice(i * 10, 10), compression="zstd") for i in range(40)]
    joined = _joined(parts, tmp_path / "joined.parquet")
    meta = pq.read_metadata(tmp_path / "joined.parquet")
    assert (meta.num_rows, meta.num_row_groups, joined.row_groups) == (400, 40, 40)
    assert pq.read_table(tmp_path / "joined.parquet").equals(
        pq.read_table(io.BytesIO(_parquet(table))))
    assert [pq.ParquetFile(tmp_path / "joined.parquet").read_row_group(i)["key"][0].as_py()
            for i in (0, 17, 39)] == ["k000000", "k000170", "k000390"]


def test_a_part_of_another_schema_is_refused(tmp_path: Path) -> None:
    with open(tmp_path / "x.parquet", "wb") as sink:
        joined = JoinedParquet(sink)
        joined.append(_parquet(_table(10)))
        with pytest.raises(JoinError, match="differ"):
            joined.append(_parquet(_table(10).drop_columns(["flag"])))
        with pytest.raises(JoinError, match="not a Parquet file"):
            joined.append(b"PAR1 not really")


def test_a_part_with_a_page_index_or_a_cut_footer_is_refused(tmp_path: Path) -> None:
    whole = _parquet(_table(10))
    length = struct.unpack("<I", whole[-8:-4])[0]
    cut = whole[:-8 - length] + whole[-8 - length:-8 - length // 2] + struct.pack(
        "<I", length - length // 2) + b"PAR1"
    with open(tmp_path / "x.parquet", "wb") as sink:
        joined = JoinedParquet(sink)
        with pytest.raises(JoinError, match="page index"):
            joined.append(_parquet(_table(10), write_page_index=True))
        with pytest.raises(JoinError, match="footer"):
            joined.append(cut)


def test_no_part_is_no_file(tmp_path: Path) -> None:
    with open(tmp_path / "x.parquet", "wb") as sink, pytest.raises(JoinError, match="no part"):
        JoinedParquet(sink).finish()
