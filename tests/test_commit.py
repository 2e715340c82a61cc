"""`io.outputs.commit`'s Parquet writers: what readers see of the tables they write."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import invoke, small_job_verdicts, write_small_job
from polars.testing import assert_frame_equal

from pipeline.io.outputs.commit import sink_parquet

VERDICTS = pl.Enum(["L", "W"])


def test_an_enum_column_is_written_as_plain_text(tmp_path: Path) -> None:
    """The verdict column is written from Enum codes (no hashing of each row's text) and
    declared text: every reader sees a string column, as if it had been written as one."""
    frame = pl.DataFrame({"k": [3, 1, 2], "v": ["W", "L", "W"], "t": ["a", None, "c"]})
    coded = frame.with_columns(pl.col("v").cast(VERDICTS))
    sink_parquet(coded.lazy(), tmp_path / "coded.parquet")
    frame.write_parquet(tmp_path / "text.parquet")
    assert_frame_equal(pl.read_parquet(tmp_path / "coded.parquet"), frame)
    assert pq.read_schema(tmp_path / "coded.parquet") == pq.read_schema(tmp_path / "text.parquet")
    assert pq.read_table(tmp_path / "coded.parquet").column("v").type == pa.large_string()
    column = pq.ParquetFile(tmp_path / "coded.parquet").schema.column(1)
    assert (column.physical_type, str(column.logical_type)) == ("BYTE_ARRAY", "String")


@pytest.mark.parametrize(("ids", "rule_ids", "coded"), [
    (["a", "a", "b", "d", "d", "d"], ["a", "b", "c", "d"], True),  # "c" has no verdict
    ([], ["a", "b"], True),
    (["a", "b", "e"], ["a", "b", "c", "d"], False),  # "e" is not a rule id: left as text
    (["b", "a"], ["a", "b"], False),  # not in key order
])
def test_text_rule_ids_written_from_codes_are_the_same_text(tmp_path: Path, ids, rule_ids,
                                                           coded) -> None:
    from pipeline.transforms.outputs import rule_ids_as_codes

    frame = pl.DataFrame({"rule_set_id": pl.Series(ids, dtype=pl.String),
                          "position_id": list(range(len(ids)))})
    if ids == sorted(ids):
        frame = frame.with_columns(pl.col("rule_set_id").set_sorted())
    out = rule_ids_as_codes(frame, pl.Series(rule_ids, dtype=pl.String))
    assert isinstance(out["rule_set_id"].dtype, pl.Enum) == coded
    sink_parquet(out.lazy(), tmp_path / "coded.parquet")
    frame.write_parquet(tmp_path / "text.parquet")
    assert_frame_equal(pl.read_parquet(tmp_path / "coded.parquet"), frame)
    assert pq.read_schema(tmp_path / "coded.parquet") == pq.read_schema(tmp_path / "text.parquet")
    assert pq.read_table(tmp_path / "coded.parquet").column(0).to_pylist() == ids


def test_a_frame_without_enum_columns_is_written_as_it_is(tmp_path: Path) -> None:
    frame = pl.DataFrame({"k": [1, 2], "v": ["x", "y"]})
    sink_parquet(frame.lazy(), tmp_path / "a.parquet")
    frame.write_parquet(tmp_path / "b.parquet")
    assert pq.read_schema(tmp_path / "a.parquet") == pq.read_schema(tmp_path / "b.parquet")


@pytest.mark.parametrize("spilled", [False, True])
def test_a_runs_verdict_column_reads_as_text_everywhere(tmp_path: Path, monkeypatch,
                                                        spilled: bool) -> None:
    """In memory (polars' writer) and merged from sorted runs (pyarrow's): the same table,
    its verdict column text."""
    write_small_job(tmp_path)
    limit = []
    if spilled:
        monkeypatch.setattr("pipeline.batches.BATCH_ROWS", 4)
        limit = ["--memory-limit", "1"]
    code, err = invoke(["run", "--rules", "rules.csv", "--positions", "positions.csv",
                        "--out", "out", *limit, "--verbose"], tmp_path)
    assert code == 0, err
    assert ("rows spilled" in err) == spilled, err
    path = tmp_path / "out" / "verdicts.parquet"
    assert pl.read_parquet(path).schema["verdict"] == pl.String
    assert pq.read_table(path).schema.field("verdict").type == pa.large_string()
    verdicts = pl.read_parquet(path)
    assert {tuple(key): v for *key, v in verdicts.select(
        "rule_set_id", "position_id", "verdict").iter_rows()} == small_job_verdicts()


def test_dictionary_columns_written_with_declared_text_read_as_text(tmp_path: Path) -> None:
    """pyarrow's writer given a verdict column as codes of ["L", "W"] (the merge's slices)
    and the metadata `declared_text` makes: the file reads as the text table would."""
    from pipeline.io.outputs.commit import declared_text

    text = pa.table({"k": pa.array([1, 2, 3]), "p": pa.array(["a", "b", None], pa.large_string()),
                     "verdict": pa.array(["W", "L", "W"], pa.large_string())})
    coded = text.set_column(2, "verdict", pa.DictionaryArray.from_arrays(
        pa.array([1, 0, 1], pa.uint8()), pa.array(["L", "W"], pa.large_string())))
    assert declared_text(text.schema) is None
    with pq.ParquetWriter(tmp_path / "coded.parquet", coded.schema,
                          store_schema=False) as writer:
        writer.add_key_value_metadata(declared_text(coded.schema))
        writer.write_table(coded)
    pq.write_table(text, tmp_path / "text.parquet")
    read = [pq.read_table(tmp_path / name) for name in ("coded.parquet", "text.parquet")]
    assert read[0].equals(read[1])
    assert_frame_equal(pl.read_parquet(tmp_path / "coded.parquet"),
                       pl.read_parquet(tmp_path / "text.parquet"))
