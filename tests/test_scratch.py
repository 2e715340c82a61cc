"""io.outputs.scratch: the merged verdicts' Parquet file, written a slice at a time from
dictionary codes, reads as the plain text table it stands for, in encodings every Parquet
reader decodes."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from pipeline.errors import WriteFailure
from pipeline.io.outputs.scratch import spill

RULE_IDS = pa.array(["a", "b", "c", "d", "e"], pa.large_string())
VERDICTS = pa.array(["L", "W"], pa.large_string())


def _slice(codes: list[int], low: int, high: int, pids: list[str], nims: list[int]
           ) -> pa.Table:
    """A merged slice as `ordering.merged_slice` makes it: rule ids as codes of the ids from
    `low` to `high` (some unused), verdicts as codes of L and W."""
    return pa.table({
        "rule_set_id": pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()),
                                                      RULE_IDS.slice(low, high - low)),
        "position_id": pa.array(pids, pa.large_string()),
        "nim_sum": pa.array(nims, pa.int64()),
        "verdict": pa.DictionaryArray.from_arrays(
            pa.array([int(n != 0) for n in nims], pa.uint8()), VERDICTS)})


def test_merged_slices_read_as_the_text_table_with_each_row_groups_own_statistics(
        tmp_path: Path) -> None:
    slices = [_slice([1, 1, 2], 0, 4, ["p1", "p2", "p0"], [0, 3, 1]),  # ids a..d, b and c used
              _slice([0, 2], 2, 5, ["p9", "p3"], [2, 0])]  # ids c..e, c and e used
    with spill(tmp_path) as scratch:
        with scratch.parquet("v.parquet", "verdicts.parquet") as write:
            for table in slices:
                write(table)
        written = scratch.path("v.parquet").read_bytes()
    path = tmp_path / "verdicts.parquet"
    path.write_bytes(written)

    expected = pl.DataFrame({"rule_set_id": ["b", "b", "c", "c", "e"],
                             "position_id": ["p1", "p2", "p0", "p9", "p3"],
                             "nim_sum": [0, 3, 1, 2, 0],
                             "verdict": ["L", "W", "W", "W", "L"]})
    assert_frame_equal(pl.read_parquet(path), expected)
    assert pq.read_table(path).equals(expected.to_arrow())
    assert duckdb.sql(f"select * from read_parquet('{path}')").pl().equals(expected)

    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups == 2
    stats = [(meta.row_group(i).column(0).statistics.min,
              meta.row_group(i).column(0).statistics.max,
              meta.row_group(i).column(1).statistics.min,
              meta.row_group(i).column(1).statistics.max) for i in range(2)]
    assert stats == [("b", "c", "p0", "p2"), ("c", "e", "p3", "p9")]  # not the unused ids
    # PLAIN and dictionary pages only: Spark's vectorized reader refused DELTA_LENGTH_BYTE_ARRAY
    # before 3.4, Iceberg's and Velox's before 2026
    for i in range(2):
        for c in range(4):
            assert set(meta.row_group(i).column(c).encodings) <= {
                "PLAIN", "RLE", "RLE_DICTIONARY", "PLAIN_DICTIONARY"}, (i, c)


@pytest.mark.parametrize("encoders", [1, 2, 3])
def test_frames_encoded_at_once_are_joined_in_the_order_given(tmp_path: Path,
                                                              encoders: int) -> None:
    frames = [pl.DataFrame({"k": list(range(i * 10, i * 10 + i)), "t": [f"v{i}"] * i},
                           schema={"k": pl.Int64, "t": pl.String})
              for i in range(9)]  # the first is empty
    with spill(tmp_path) as scratch:
        with scratch.parquet("v.parquet", "verdicts.parquet", encoders) as write:
            for frame in frames:
                write(frame)
        read = pl.read_parquet(scratch.path("v.parquet"))
        groups = pq.read_metadata(scratch.path("v.parquet")).num_row_groups
    assert_frame_equal(read, pl.concat(frames))
    assert groups == 9  # the empty frame too: an empty row group, as pyarrow writes one


def test_a_frame_that_cannot_join_the_file_fails_its_write_naming_the_output(
        tmp_path: Path) -> None:
    with spill(tmp_path) as scratch, pytest.raises(WriteFailure) as caught:
        with scratch.parquet("v.parquet", "verdicts.parquet") as write:
            write(pl.DataFrame({"k": [1]}))
            write(pl.DataFrame({"other": ["x"]}))
            write(pl.DataFrame({"k": [2]}))
    assert str(caught.value).startswith("verdicts.parquet: its schema or metadata differ")
    assert not (tmp_path / ".spill").exists()


def test_a_later_segments_file_is_named_without_a_leading_minus(tmp_path: Path) -> None:
    """A run's later segments are parts numbered below zero; a message naming "-1-0.arrows"
    read as an option."""
    frame = pl.DataFrame({"k": [1, 2]})
    with spill(tmp_path) as scratch:
        scratch.write(-1, frame)
        scratch.write(2, frame)
        scratch.close()
        names = sorted(p.name for p in (tmp_path / ".spill").iterdir())
        assert_frame_equal(pl.concat(scratch.read(-1)), frame)
    assert names == ["2-0.arrows", "s1-0.arrows"]
