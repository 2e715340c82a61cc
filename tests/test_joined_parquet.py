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
                                                pa.array(["L", "W"], pa.large_string()))})


def _parquet(table: pa.Table, **options) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **options)
    return sink.getvalue()


def _joined(parts: list[bytes], path: Path) -> JoinedParquet:
    with open(path, "wb") as sink:
        joined = JoinedParquet(sink)
        for part in parts:
            joined.append(part)
        joined.finish()
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


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(0, 900), max_size=5), group=st.integers(50, 400),
       page_index=st.booleans())
def test_parts_joined_read_as_the_table_they_were_cut_from(tmp_path_factory, cuts, group,
                                                           page_index) -> None:
    table = _table(900, seed=len(cuts))
    bounds = [0, *sorted(cuts), 900]
    parts = [_parquet(table.slice(a, b - a), compression="zstd", row_group_size=group,
                      write_page_index=page_index) for a, b in zip(bounds, bounds[1:])]
    path = tmp_path_factory.mktemp("joined") / "joined.parquet"
    joined = _joined(parts, path)

    assert pq.read_table(path).equals(pq.read_table(io.BytesIO(_parquet(table))))
    assert_frame_equal(pl.read_parquet(path), pl.from_arrow(pq.read_table(
        io.BytesIO(_parquet(table)))))
    rows, total = duckdb.sql(f"select count(*), sum(value) from read_parquet('{path}')").fetchone()
    assert (rows, total) == (900, int(np.sum(table["value"].to_numpy())))

    meta = pq.ParquetFile(path).metadata
    assert (meta.num_rows, meta.num_row_groups) == (900, joined.row_groups)
    start = 0
    for i in range(meta.num_row_groups):  # each group where the footer says, with its stats
        got = pq.ParquetFile(path).read_row_group(i)
        assert got.equals(pq.read_table(io.BytesIO(_parquet(table))).slice(start, got.num_rows))
        stats = meta.row_group(i).column(0).statistics
        if got.num_rows:
            assert (stats.min, stats.max) == (got["key"][0].as_py(), got["key"][-1].as_py())
        start += got.num_rows
    assert start == 900


def test_a_part_of_another_schema_is_refused(tmp_path: Path) -> None:
    with open(tmp_path / "x.parquet", "wb") as sink:
        joined = JoinedParquet(sink)
        joined.append(_parquet(_table(10)))
        with pytest.raises(JoinError, match="differ"):
            joined.append(_parquet(_table(10).drop_columns(["flag"])))
        with pytest.raises(JoinError, match="not a Parquet file"):
            joined.append(b"PAR1 not really")


def test_no_part_is_no_file(tmp_path: Path) -> None:
    with open(tmp_path / "x.parquet", "wb") as sink, pytest.raises(JoinError, match="no part"):
        JoinedParquet(sink).finish()
