"""What an object-store prefix gives as inputs, against a real S3 server (moto): objects that
belong to a run's or a table's own bookkeeping are never read as positions."""

from __future__ import annotations

import pytest

from pipeline.errors import InputError
from pipeline.io.inputs.discovery import resolve_inputs

CSV = b"rule_set_id,position_id,heaps\n1,0,5\n"


@pytest.fixture()
def s3_env(s3, monkeypatch: pytest.MonkeyPatch):
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    return s3


def found(spec: str) -> list[str]:
    return [str(p) for p in resolve_inputs(spec, "positions")]


def test_uploads_of_a_run_killed_before_its_first_commit_are_not_inputs(s3_env) -> None:
    """--out inside the positions prefix, first run killed while uploading: OUT/RUN_ID/ holds
    output tables and no manifest lists them yet; the next run reads only the positions."""
    client = s3_env.client()
    for key in ("in/a.csv", "in/out/20261201T194931Z-667eee/rejects.parquet",
                "in/out/20261201T194931Z-667eee/verdicts.parquet",
                "in/20261201T000000Z-abcdef/x.csv"):
        client.put_object(Bucket="bkt", Key=key, Body=CSV)
    assert found("s3://bkt/in") == ["s3://bkt/in/20261201T000000Z-abcdef/x.csv",
                                    "s3://bkt/in/a.csv"]  # a user's folder named like one
    with pytest.raises(InputError) as raised:
        found("s3://bkt/in/**/*.parquet")
    assert str(raised.value) == ("positions input s3://bkt/in/**/*.parquet: no object matches "
                                 "this pattern (skipped 2: hidden names, other types, snim-batch "
                                 "outputs or Delta tables)")


def test_delta_tables_below_a_prefix_are_skipped_and_one_named_is_refused(s3_env) -> None:
    client = s3_env.client()
    for key in ("in/a.csv", "in/tbl/part-0.parquet", "in/tbl/_delta_log/00000.json",
                "in/root/runs/run_date=2026-01-01/part-0.parquet",
                "in/root/runs/_delta_log/00000.json"):
        client.put_object(Bucket="bkt", Key=key, Body=CSV)
    assert found("s3://bkt/in") == ["s3://bkt/in/a.csv"]
    assert found("s3://bkt/in/**") == ["s3://bkt/in/a.csv"]
    with pytest.raises(InputError) as raised:
        found("s3://bkt/in/tbl")
    assert str(raised.value) == (
        "positions input s3://bkt/in/tbl: is a Delta table; its data files include rows that "
        "later commits removed, so read it with a Delta reader and pass the result as Parquet")


def test_a_glob_over_a_bucket_that_is_a_delta_table_is_refused(s3_env) -> None:
    client = s3_env.client()
    for key in ("part-0.parquet", "_delta_log/00000.json"):
        client.put_object(Bucket="bkt", Key=key, Body=CSV)
    with pytest.raises(InputError) as raised:
        found("s3://bkt/*.parquet")
    assert str(raised.value) == (
        "positions input s3://bkt/*.parquet: is a Delta table; its data files include rows "
        "that later commits removed, so read it with a Delta reader and pass the result as "
        "Parquet")


def test_a_glob_ending_in_a_slash_takes_the_objects_below_its_prefixes_only(s3_env) -> None:
    """`in/*/` over keys is what it is on disk: the "directories" it matches, not the object
    beside them (the rules file, read as positions), also through a config's resolution."""
    from pathlib import Path

    from pipeline.config import resolve_location

    client = s3_env.client()
    for key in ("in/rules.csv", "in/sub/x.csv", "in/sub/deep/y.csv", "in/other/z.parquet"):
        client.put_object(Bucket="bkt", Key=key, Body=CSV)
    below = ["s3://bkt/in/other/z.parquet", "s3://bkt/in/sub/deep/y.csv",
             "s3://bkt/in/sub/x.csv"]
    assert found("s3://bkt/in/*/") == below
    assert found(resolve_location("s3://bkt/in/*/", Path("/"))) == below
    assert found("s3://bkt/in/*") == ["s3://bkt/in/other/z.parquet", "s3://bkt/in/rules.csv",
                                      *below[1:]]


def test_compressed_objects_a_prefix_listing_skips_are_named_in_a_warning(s3_env) -> None:
    """As for a local directory: `x.csv.gz` objects below the prefix are not read, and the
    warning names them; hidden ones and other types are skipped without a word."""
    client = s3_env.client()
    for key in ("in/a.csv", "in/day/b.csv.gz", "in/c.CSV.ZST", "in/_tmp/d.csv.gz",
                "in/notes.txt"):
        client.put_object(Bucket="bkt", Key=key, Body=CSV)
    said: list[str] = []
    paths = resolve_inputs("s3://bkt/in", "positions", on_warning=said.append)
    assert [str(p) for p in paths] == ["s3://bkt/in/a.csv"]
    assert said == ["positions input s3://bkt/in: skipped 2 files named as compressed "
                    "(s3://bkt/in/c.CSV.ZST, s3://bkt/in/day/b.csv.gz): a listing reads only "
                    ".parquet, .pq and .csv files; decompress them to read their rows (or name "
                    "each as an input itself, if it is plain text)"]


def test_parquet_objects_of_any_name_below_a_prefix_are_read(s3_env) -> None:
    """As for a local directory: Athena, Hive and Trino write Parquet objects without a
    suffix (`20261208_0001_x`, `000000_0`); an object that starts as Parquet is read when
    its name has no suffix, through a pattern too. A text object named so, an empty one, a
    hidden one, one inside a snim-batch output and a copy with another suffix are not."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.table({"rule_set_id": [1], "position_id": [0], "heaps": [[5]]}), sink)
    client = s3_env.client()
    for key in ("in/20261208_0001_x", "in/day/000000_0", "in/_tmp/000000_0",
                "in/out/000000_0"):
        client.put_object(Bucket="bkt", Key=key, Body=sink.getvalue())
    client.put_object(Bucket="bkt", Key="in/out/manifest.json",
                      Body=b'{"run_id": "r", "versions": {"snim-batch": "0.1.0"}}')
    client.put_object(Bucket="bkt", Key="in/a.parquet.bak", Body=sink.getvalue())
    for key, body in (("in/a.csv", CSV), ("in/notes", CSV), ("in/empty", b"")):
        client.put_object(Bucket="bkt", Key=key, Body=body)
    assert found("s3://bkt/in") == ["s3://bkt/in/20261208_0001_x", "s3://bkt/in/a.csv",
                                    "s3://bkt/in/day/000000_0"]
    assert found("s3://bkt/in/**") == found("s3://bkt/in")
    assert found("s3://bkt/in/*_x") == ["s3://bkt/in/20261208_0001_x"]
