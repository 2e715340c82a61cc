"""Object stores end to end against a real S3 API (moto in server mode): inputs read from S3
equal the same files read from disk, outputs committed to S3 by their manifest, kills at
every stage, unreachable endpoints, and gs:// / az:// error paths."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import invoke, on_small_disk, said_lines, write_csv

from pipeline import batches
from pipeline.config import config_from_dict
from pipeline.errors import ConfigError
from pipeline.generate import Spec, generate
from pipeline.io.inputs.discovery import resolve_inputs
from pipeline.io.read import csv_reader, readers, starts
from pipeline.io.store import object_store
from pipeline.io.store.locations import Location
from pipeline.io.store.run_cache import RunCache

ROOT = Path(__file__).resolve().parents[1]
OUTPUTS = ("verdicts", "rejects", "sg_tables", "summary")
SECRET = "s3cr3t-Value-9f8e7d"


# ---- helpers --------------------------------------------------------------------------------


def upload_tree(server, local: Path, prefix: str) -> None:
    client = server.client()
    for path in sorted(local.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), "bkt", f"{prefix}/{path.relative_to(local).as_posix()}")


def names(server, prefix: str = "") -> list[str]:
    """The keys below `prefix` (a listing only)."""
    found = server.client().list_objects_v2(Bucket="bkt", Prefix=prefix).get("Contents", [])
    return [o["Key"] for o in found]


def keys(server, prefix: str = "") -> dict[str, bytes]:
    """Every object below `prefix` with its bytes."""
    client = server.client()
    found = client.list_objects_v2(Bucket="bkt", Prefix=prefix).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket="bkt", Key=o["Key"])["Body"].read()
            for o in found}


def listed_files(entry: dict) -> list[tuple[str, int]]:
    """(path under OUT, size) of each file a manifest output entry lists."""
    if entry["type"] == "directory":
        return [(f"{entry['path']}/{f['name']}", f["size"]) for f in entry["files"]]
    return [(entry["path"], entry["size"])]


def remote_outputs(server, out_key: str) -> dict[str, pl.DataFrame]:
    """The four tables of a committed S3 output, found through its manifest only."""
    objects = keys(server, out_key + "/")
    manifest = json.loads(objects[f"{out_key}/manifest.json"])
    frames = {}
    for entry in manifest["outputs"]:
        stem = entry["name"].removesuffix(".parquet")
        if stem in OUTPUTS:
            frames[stem] = pl.concat([pl.read_parquet(io.BytesIO(objects[f"{out_key}/{path}"]))
                                      for path, _ in listed_files(entry)])
    return frames


def local_outputs(out: Path) -> dict[str, pl.DataFrame]:
    return {name: pl.read_parquet(out / f"{name}.parquet") for name in OUTPUTS}


def assert_whole(server, out_key: str) -> dict:
    """The output at `out_key` is complete: its manifest lists files that are all there with
    their sizes, and the verdicts hold the rows it counts. Returns the manifest."""
    objects = keys(server, out_key + "/")
    manifest = json.loads(objects[f"{out_key}/manifest.json"])
    for entry in manifest["outputs"]:
        if entry["name"] == "manifest.json":
            continue
        for path, size in listed_files(entry):
            assert len(objects[f"{out_key}/{path}"]) == size, path
    verdicts = remote_outputs(server, out_key)["verdicts"]
    assert verdicts.height == manifest["counts"]["positions"]["verdicts"]
    return manifest


def same_tables(left: dict[str, pl.DataFrame], right: dict[str, pl.DataFrame],
                sources: tuple[str, str]) -> None:
    """Equal row for row, once the rejects' `source` names the same file either way."""
    for name in OUTPUTS:
        a, b = left[name], right[name]
        if "source" in a.columns:
            a = a.with_columns(pl.col("source").str.replace(sources[0], sources[1],
                                                            literal=True))
        assert a.equals(b), name


def dataset(base: Path, form: str, fmt: str) -> Path:
    """A generated dataset in two positions files, plus one file of bad rows (a heap below
    zero, an unknown rule set, a CSV line with a missing field) so that rejects are
    compared too."""
    generate(base, Spec(4000, 20, 300, 4, 0, 4, form, fmt, 11, "int", False, 2))
    bad = base / "positions" / f"part-99999.{fmt}"
    if form == "wide":
        rows = "rule_set_id,position_id,heaps\n1,900001,3 -4\n999,900002,5\n2,900003\n3,9,1 2\n"
    else:
        rows = "rule_set_id,position_id,heap\n1,900001,-4\n999,900002,5\n2,900003\n3,900004,7\n"
    if fmt == "csv":
        bad.write_text(rows)
    else:
        frame = pl.read_csv(io.StringIO(rows.replace("2,900003\n", "")),
                            schema_overrides={"heaps": pl.String} if form == "wide" else None)
        if form == "wide":
            frame = frame.with_columns(pl.col("heaps").str.split(" ").cast(pl.List(pl.Int64)))
        frame.write_parquet(bad)
    return base


def run_cli(args: list[str], where: Path, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The real command in a new process (stdout and stderr captured)."""
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=where,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture()
def s3_env(s3, monkeypatch: pytest.MonkeyPatch):
    """The standard AWS variables pointing at the moto server, for in-process runs."""
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    return s3


# ---- inputs on S3 equal the same files on disk ----------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("form", ["wide", "long"])
@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_inputs_on_s3_give_the_outputs_of_the_same_files_on_disk(
        s3_env, tmp_path: Path, form: str, fmt: str) -> None:
    data = dataset(tmp_path / "data", form, fmt)
    upload_tree(s3_env, data, "in")
    code, err = invoke(["run", "--rules", data / f"rules.{fmt}", "--positions",
                        data / "positions", "--out", tmp_path / "local"], tmp_path)
    assert code == 3, err
    code, err = invoke(["run", "--rules", f"s3://bkt/in/rules.{fmt}", "--positions",
                        f"s3://bkt/in/positions/*.{fmt}", "--out", tmp_path / "from_s3"],
                       tmp_path)
    assert code == 3, err
    local = local_outputs(tmp_path / "local")
    assert local["rejects"].height >= 2
    same_tables(local, local_outputs(tmp_path / "from_s3"),
                (str(data / "positions"), "s3://bkt/in/positions"))
    code, err = invoke(["run", "--rules", f"s3://bkt/in/rules.{fmt}", "--positions",
                        "s3://bkt/in/positions", "--out", "s3://bkt/out"], tmp_path)
    assert code == 3, err
    same_tables(local, remote_outputs(s3_env, "out"),
                (str(data / "positions"), "s3://bkt/in/positions"))
    manifest = assert_whole(s3_env, "out")
    files = manifest["inputs"]["positions"]
    assert [f["path"] for f in files] == [
        f"s3://bkt/in/positions/part-0000{i}.{fmt}" for i in (0, 1)] + [
        f"s3://bkt/in/positions/part-99999.{fmt}"]
    heads = [s3_env.client().head_object(Bucket="bkt", Key=f["path"][len("s3://bkt/"):])
             for f in files]
    assert [(f["size"], f["etag"]) for f in files] == [
        (h["ContentLength"], h["ETag"].strip('"')) for h in heads]
    assert all("sha256" not in f for f in files)


def test_a_url_ending_in_a_slash_names_a_prefix_as_a_path_names_a_directory(
        s3_env, tmp_path: Path) -> None:
    """`s3://bkt/p/both/` where `p/both` is an object and a prefix too: the objects below
    the prefix are read, as `both/` reads a directory (before, the slash was dropped and
    the object was read); `s3://bkt/p/a.csv/` naming an object is refused, as a local
    `a.csv/` naming a file is (before, the object was read)."""
    client = s3_env.client()
    sample = ROOT / "data" / "sample"
    for key, pid in (("p/both", 1), ("p/both/e.csv", 2), ("p/a.csv", 3)):
        client.put_object(Bucket="bkt", Key=key,
                          Body=f"rule_set_id,position_id,heaps\n1,{pid},5 12\n".encode())
    read = {}
    for url in ("s3://bkt/p/both/", "s3://bkt/p/both"):
        out = tmp_path / f"out{len(read)}"
        code, err = invoke(["run", "--rules", sample / "rules.csv", "--positions", url,
                            "--out", out], tmp_path)
        assert code == 0, err
        read[url] = pl.read_parquet(out / "verdicts.parquet")["position_id"].to_list()
    assert read == {"s3://bkt/p/both/": [2], "s3://bkt/p/both": [1]}
    code, err = invoke(["run", "--rules", sample / "rules.csv", "--positions",
                        "s3://bkt/p/a.csv/", "--out", tmp_path / "out-a"], tmp_path)
    assert (code, err) == (1, "snim-batch: error: positions input s3://bkt/p/a.csv/: is an "
                              "object, not a prefix (the URL ends with /); name the object "
                              "without the /\n")


def test_an_out_that_names_an_object_is_refused_as_a_file_is(s3_env, tmp_path: Path) -> None:
    """`--out s3://bkt/night` where `night` is an object (the store's file): refused, the
    object kept, nothing written. Before, the run committed below `night/`, making the key
    an object and a prefix at once; a local --out that is a file was refused already."""
    s3_env.client().put_object(Bucket="bkt", Key="night", Body=b"a user's object")
    sample = ROOT / "data" / "sample"
    code, err = invoke(["run", "--rules", sample / "rules.csv", "--positions",
                        sample / "positions.csv", "--out", "s3://bkt/night"], tmp_path)
    assert (code, err) == (1, "snim-batch: error: s3://bkt/night: is an object, not a prefix "
                              "(a run's output is the objects below a prefix); refusing to "
                              "replace it, nothing was written\n")
    assert names(s3_env) == ["night"]


def test_local_inputs_to_s3_and_s3_output_back_to_disk(s3_env, tmp_path: Path) -> None:
    sample = ROOT / "data" / "sample"
    code, err = invoke(["run", "--rules", sample / "rules.csv", "--positions",
                        sample / "positions.csv", "--out", "s3://bkt/job/out",
                        "--result-file", tmp_path / "result.json"], tmp_path)
    assert code == 0, err
    manifest = assert_whole(s3_env, "job/out")
    # the run result holds the manifest as committed: each output's path under OUT included
    assert json.loads((tmp_path / "result.json").read_text())["manifest"] == manifest
    verdicts = remote_outputs(s3_env, "job/out")["verdicts"]
    code, err = invoke(["run", "--rules", sample / "rules.csv", "--positions",
                        sample / "positions.csv", "--out", tmp_path / "local"], tmp_path)
    assert code == 0, err
    assert local_outputs(tmp_path / "local")["verdicts"].equals(verdicts)
    assert manifest["config"]["out"] == "s3://bkt/job/out"
    run = manifest["run_id"]
    assert sorted(keys(s3_env, "job/")) == sorted(
        ["job/out/manifest.json"] + [f"job/out/{run}/{n}.parquet" for n in OUTPUTS])


def requests_since(server, start: int) -> list[str]:
    """The request lines (method and path) moto logged after byte `start` of its log."""
    server.log.seek(start)
    text = server.log.read().decode(errors="replace")
    return [m.group(1) for m in re.finditer(r'"(?:\x1b\[[0-9;]*m)*([A-Z]+ \S+) HTTP/', text)]


@pytest.mark.slow
def test_a_full_local_temporary_directory_is_named_with_tmpdir_not_the_output(
        s3_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An object-store output is staged in the local temporary directory: when that disk
    fills (a 256 KiB tmpfs as TMPDIR), the message names it and TMPDIR as the way out, not
    --out, which no other store would help; nothing is uploaded and the staging is gone."""
    n = 200_000
    rules, positions = tmp_path / "rules.csv", tmp_path / "positions.parquet"
    write_csv(rules, ["rule_set_id", "kind", "moves"], [[1, "subtraction", "1 2 7"]])
    ids = np.unique(np.random.default_rng(5).integers(0, 2**40, n))  # compress badly
    pl.DataFrame({"rule_set_id": [1] * len(ids), "position_id": ids,
                  "heaps": [[i % 97, 3] for i in range(len(ids))]}).write_parquet(positions)
    disk = tmp_path / "disk"
    monkeypatch.setenv("TMPDIR", str(disk))
    (code, err), entries = on_small_disk(tmp_path, "size=256k", [
        ["run", "--rules", str(rules), "--positions", str(positions), "--out", "s3://bkt/out"],
        ["entries"]])
    assert code == 1
    assert re.fullmatch(
        r"snim-batch: error: s3://bkt/out: no space left on device while writing \S+ in the "
        f"local temporary directory {re.escape(str(disk))}; nothing was written "
        r"\(free space or choose another TMPDIR\)\n", err), err
    assert entries == []
    assert names(s3_env, "out") == []


@pytest.mark.parametrize(("fmt", "most"), [("parquet", 5), ("csv", 3)])
def test_each_positions_object_costs_a_few_requests_a_run(s3_env, tmp_path: Path, fmt: str,
                                                          most: int) -> None:
    """A run needs a Parquet footer for row counts, heap statistics, columns and schema, and
    a CSV's start for its header, emptiness and row estimate before its rows; each read was
    a request or two of its own (12 and 11 requests a file). Within a run a footer is fetched
    once, and a small object whole; one more request, once every row is read, checks that
    the object did not change meanwhile (`changes.ensure_unchanged`)."""
    data = tmp_path / "data"
    generate(data, Spec(3000, 5, 50, 3, 0, 3, "wide", fmt, 5, "string", False, 3))
    upload_tree(s3_env, data, "in")
    s3_env.log.seek(0, os.SEEK_END)
    start = s3_env.log.tell()
    code, err = invoke(["run", "--rules", data / f"rules.{fmt}", "--positions",
                        "s3://bkt/in/positions", "--out", tmp_path / "out"], tmp_path)
    assert code == 0, err
    per_object = Counter(line.split()[1].split("?")[0]
                         for line in requests_since(s3_env, start))
    objects = [f"/bkt/in/positions/part-0000{i}.{fmt}" for i in range(3)]
    assert sorted(k for k in per_object if k.endswith(fmt)) == objects
    assert all(per_object[o] <= most for o in objects), per_object
    code, err = invoke(["run", "--rules", data / f"rules.{fmt}", "--positions",
                        data / "positions", "--out", tmp_path / "local"], tmp_path)
    assert code == 0, err
    assert local_outputs(tmp_path / "local")["verdicts"].equals(
        local_outputs(tmp_path / "out")["verdicts"])


@pytest.mark.parametrize(("small_object", "bytes_kept"), [(0, 0), (1 << 22, 9000)])
def test_objects_not_kept_whole_are_streamed_with_the_same_outcome(
        s3_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_object: int,
        bytes_kept: int) -> None:
    """Objects above SMALL_OBJECT, or past the run's budget of kept bytes (here some files
    are kept and some are not), are read as streams: same tables, same rejects."""
    data = dataset(tmp_path / "data", "wide", "csv")
    upload_tree(s3_env, data, "in")
    code, err = invoke(["run", "--rules", data / "rules.csv", "--positions",
                        data / "positions", "--out", tmp_path / "local"], tmp_path)
    assert code == 3, err
    monkeypatch.setattr(starts, "SMALL_OBJECT", small_object)
    monkeypatch.setattr(RunCache, "budget", bytes_kept)
    code, err = invoke(["run", "--rules", "s3://bkt/in/rules.csv", "--positions",
                        "s3://bkt/in/positions", "--out", tmp_path / "s3"], tmp_path)
    assert code == 3, err
    same_tables(local_outputs(tmp_path / "local"), local_outputs(tmp_path / "s3"),
                (str(data / "positions"), "s3://bkt/in/positions"))


def test_small_parquet_objects_read_by_one_scan_keep_ids_rows_and_objects(
        s3_env, tmp_path: Path) -> None:
    """Small Parquet objects of one schema are read by one scan, as local files are (the
    scan fetches several at a time): the same tables as the same files on disk, default ids
    numbered over the files, rejects naming their object and row; an object that is not
    Parquet among them is named on its own. Under nim, SG(h) = h."""
    rules = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                      [[1, "nim", ""]])
    d = tmp_path / "positions"
    d.mkdir()
    for name, heaps in {"a": [[3], [-1], [5]], "b": [[6], [7], [-2], [8]], "c": [[2]]}.items():
        pl.DataFrame({"rule_set_id": [1] * len(heaps), "heaps": heaps}).write_parquet(
            d / f"{name}.parquet")
    upload_tree(s3_env, d, "in")
    code, err = invoke(["run", "--rules", rules, "--positions", d, "--out",
                        tmp_path / "local"], tmp_path)
    assert code == 3, err
    code, err = invoke(["run", "--rules", rules, "--positions", "s3://bkt/in", "--out",
                        tmp_path / "s3"], tmp_path)
    assert code == 3, err
    same_tables(local_outputs(tmp_path / "local"), local_outputs(tmp_path / "s3"),
                (str(d), "s3://bkt/in"))
    assert local_outputs(tmp_path / "s3")["verdicts"]["position_id"].to_list() == [
        0, 2, 3, 4, 6, 7]
    config = config_from_dict({"rules": str(rules), "positions": "s3://bkt/in",
                               "out": str(tmp_path / "x")})
    paths = resolve_inputs("s3://bkt/in", "positions")
    with RunCache() as cache:
        read = list(batches.position_batches(paths, config, "wide", read_together=True,
                                             cache=cache))
    assert [(i, f["_file"].to_list()) for i, f in read] == [(0, [0, 0, 0, 1, 1, 1, 1, 2])]
    s3_env.client().put_object(Bucket="bkt", Key="in/b.parquet", Body=b"PAR1 not really")
    code, err = invoke(["run", "--rules", rules, "--positions", "s3://bkt/in", "--out",
                        tmp_path / "again"], tmp_path)
    assert code == 1 and err.startswith(
        "snim-batch: error: s3://bkt/in/b.parquet: not a readable Parquet file ("), err


def test_a_small_files_footer_probe_leaves_a_store_error_to_the_files_own_read(s3_env) -> None:
    """The probe of every file's footer before the first batch says None for an object it
    cannot reach, so that files before it keep their own errors first."""
    missing = object_store.with_client_options(
        Location.parse("s3://bkt/in/gone.parquet", Path.cwd()), {})
    with RunCache() as cache:
        assert readers.small_parquet_footer(missing, 1 << 20, cache=cache) is None


def test_an_object_is_fetched_whole_only_when_the_run_has_room(
        s3_env, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = b"a,b\n" + b"1,2\n" * 100
    s3_env.client().put_object(Bucket="bkt", Key="in/p.csv", Body=whole)
    location = object_store.with_client_options(Location.parse("s3://bkt/in/p.csv", Path.cwd()), {})
    fetched: list[int] = []
    read_head = object_store.read_head

    def counted(*args, **kwargs):  # the real read, its bytes counted
        head, size = read_head(*args, **kwargs)
        fetched.append(len(head))
        return head, size

    monkeypatch.setattr(object_store, "read_head", counted)
    for budget, kept_whole in ((256 + 403, False), (256 + 404, True)):  # size, etag: 256
        with RunCache(budget) as cache:
            assert starts.read_start(location, 4, cache=cache) == (b"a,b\n", 404)
            assert cache.get("object", location) == (whole if kept_whole else None)
        assert fetched.pop() == (404 if kept_whole else 4)
    with RunCache(whole_objects=False) as cache:  # as the Spark engine's run
        assert starts.read_start(location, 4, cache=cache) == (b"a,b\n", 404)
    assert fetched.pop() == 4
    assert starts.read_start(location, 4) == (b"a,b\n", 404)  # no cache: no object whole
    assert fetched.pop() == 4


def test_prefixes_and_globs_skip_hidden_names_outputs_and_other_types(s3_env,
                                                                      tmp_path: Path) -> None:
    client = s3_env.client()
    csv = b"rule_set_id,position_id,heaps\n1,0,5\n"
    for key in ("d/a.csv", "d/sub/b.csv", "d/_SUCCESS", "d/.hidden.csv", "d/_tmp/c.csv",
                "d/notes.txt", "d/out/x.csv"):
        client.put_object(Bucket="bkt", Key=key, Body=csv)
    client.put_object(Bucket="bkt", Key="d/out/manifest.json", Body=json.dumps(
        {"run_id": "r", "versions": {"snim-batch": "0"}, "outputs": []}).encode())
    found = lambda spec: [str(p) for p in resolve_inputs(spec, "positions")]  # noqa: E731
    assert found("s3://bkt/d") == ["s3://bkt/d/a.csv", "s3://bkt/d/sub/b.csv"]
    assert found("s3://bkt/d/") == ["s3://bkt/d/a.csv", "s3://bkt/d/sub/b.csv"]
    assert found("s3://bkt/d/*.csv") == ["s3://bkt/d/a.csv"]
    assert found("s3://bkt/d/**/*.csv") == ["s3://bkt/d/a.csv", "s3://bkt/d/sub/b.csv"]
    assert found("s3://bkt/d/.h*") == ["s3://bkt/d/.hidden.csv"]
    assert found("s3://bkt/d/notes.txt") == ["s3://bkt/d/notes.txt"]
    assert found("s3://bkt/d/out") == ["s3://bkt/d/out/x.csv"]  # named: read
    assert found("s3://bkt/d/s*") == ["s3://bkt/d/sub/b.csv"]
    assert [str(p) for p in resolve_inputs("s3://bkt/d", "positions", "s3://bkt/d/sub")] == [
        "s3://bkt/d/a.csv"]


def test_a_prefix_whose_name_holds_glob_characters_is_that_prefix(s3_env) -> None:
    """As a path on disk: a component of the pattern that exists as written is taken
    literally (it was read as a pattern that matched nothing, `night[1]` as `night1`)."""
    client = s3_env.client()
    csv = b"rule_set_id,position_id,heaps\n1,0,5\n"
    for key in ("n/night[1]/a.csv", "n/night[1]/sub/b.csv", "n/night1/c.csv",
                "n/night2/d.csv"):
        client.put_object(Bucket="bkt", Key=key, Body=csv)
    found = lambda spec: [str(p) for p in resolve_inputs(spec, "positions")]  # noqa: E731
    assert found("s3://bkt/n/night[1]") == ["s3://bkt/n/night[1]/a.csv",
                                            "s3://bkt/n/night[1]/sub/b.csv"]
    assert found("s3://bkt/n/night[1]/*.csv") == ["s3://bkt/n/night[1]/a.csv"]
    assert found("s3://bkt/n/night[1]/s*/*.csv") == ["s3://bkt/n/night[1]/sub/b.csv"]
    assert found("s3://bkt/n/night[12]") == ["s3://bkt/n/night1/c.csv",
                                             "s3://bkt/n/night2/d.csv"]  # none named so
    assert found("s3://bkt/n/night?/*.csv") == ["s3://bkt/n/night1/c.csv",
                                                "s3://bkt/n/night2/d.csv"]


# ---- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("rules", "message"), [
    ("s3://bkt/nope/rules.csv", "rules input s3://bkt/nope/rules.csv: no such object or prefix"),
    ("s3://bkt/empty", "rules input s3://bkt/empty: no .parquet, .pq or .csv objects found "
                       "below this prefix (skipped 1"),
    ("s3://bkt/in/*.parquet", "rules input s3://bkt/in/*.parquet: no object matches this "
                              "pattern"),
    ("s3://nobucket/rules.csv", "rules input s3://nobucket/rules.csv: the bucket 'nobucket' "
                                "does not exist"),
])
def test_missing_objects_exit_1_naming_the_url(s3_env, tmp_path: Path, rules: str,
                                               message: str) -> None:
    s3_env.client().put_object(Bucket="bkt", Key="empty/_SUCCESS", Body=b"")
    s3_env.client().put_object(Bucket="bkt", Key="in/r.csv", Body=b"rule_set_id\n1\n")
    code, err = invoke(["run", "--rules", rules, "--positions", "s3://bkt/in/r.csv", "--out",
                        "s3://bkt/out"], tmp_path)
    assert code == 1, err
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert list(keys(s3_env)) == ["empty/_SUCCESS", "in/r.csv"]
    assert list(tmp_path.iterdir()) == []


def test_a_bad_csv_on_s3_names_the_object_row_and_line(s3_env, tmp_path: Path) -> None:
    s3_env.client().put_object(Bucket="bkt", Key="r.csv", Body=b"rule_set_id,moves\n1,2\n")
    s3_env.client().put_object(Bucket="bkt", Key="p.csv",
                               Body=b'rule_set_id,heaps\n1,3\n1,"4\n1,5\n')
    (tmp_path / "p.csv").write_bytes(b'rule_set_id,heaps\n1,3\n1,"4\n1,5\n')
    code, err = invoke(["run", "--rules", "s3://bkt/r.csv", "--positions", "s3://bkt/p.csv",
                        "--out", "s3://bkt/out"], tmp_path)
    assert code == 1, err
    assert "s3://bkt/p.csv: line 3: a quoted field is never closed" in err


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def config_file(tmp_path: Path, options: dict[str, str], **keys: str) -> Path:
    path = tmp_path / "config.yaml"
    lines = [f"{k}: {v}" for k, v in keys.items()] + ["storage_options:"] + [
        f"  {k}: '{v}'" for k, v in options.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_closed_port_exits_1_at_once_with_one_line(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    config = config_file(tmp_path, {"aws_endpoint_url": endpoint, "aws_access_key_id": "k",
                                    "aws_secret_access_key": SECRET},
                         rules="s3://bkt/r.csv", positions="s3://bkt/p.csv",
                         out="s3://bkt/out")
    started = time.monotonic()
    result = run_cli(["run", "--config", str(config)], tmp_path, timeout=120)
    assert result.returncode == 1, result.stderr
    assert time.monotonic() - started < 30
    assert result.stderr.strip().splitlines() == [
        f"snim-batch: config: {config}",
        f"snim-batch: error: s3://bkt/out: cannot connect to the object store at {endpoint} "
        "while listing (connection refused)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


@pytest.fixture()
def black_hole():
    """A TCP port that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


@pytest.mark.parametrize("target", ["rules", "out"])
def test_an_endpoint_that_never_answers_fails_within_the_configured_timeouts(
        tmp_path: Path, black_hole: str, target: str) -> None:
    """timeout 2 s and 1 retry: two attempts of 2 s, then exit 1 (bound well under 20 s)."""
    sample = ROOT / "data" / "sample"
    where = {"rules": "s3://bkt/r.csv", "positions": str(sample / "positions.csv"),
             "out": str(tmp_path / "out")}
    where[target] = "s3://bkt/x"
    config = config_file(tmp_path, {"aws_endpoint_url": black_hole, "timeout": "2s",
                                    "connect_timeout": "1s", "max_retries": "1",
                                    "aws_access_key_id": "k", "aws_secret_access_key": SECRET},
                         **where)
    if target == "out":
        (tmp_path / "config.yaml").write_text((tmp_path / "config.yaml").read_text().replace(
            "rules: s3://bkt/r.csv", f"rules: {sample / 'rules.csv'}"))
    started = time.monotonic()
    result = run_cli(["run", "--config", str(config)], tmp_path, timeout=120)
    took = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert 2 <= took < 20, took
    said, *lines = result.stderr.strip().splitlines()
    assert said == f"snim-batch: config: {config}", result.stderr
    assert len(lines) == 1 and "did not answer" in lines[0] and black_hole in lines[0], lines
    assert "s3://bkt/x" in lines[0]
    assert SECRET not in result.stderr


def test_with_nothing_configured_the_client_defaults_bound_every_request(
        tmp_path: Path, black_hole: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """No storage_options: the clients still get CLIENT_DEFAULTS, not their libraries' own
    (which wait on a silent endpoint for ever). The defaults are shrunk here so that the
    run ends in seconds; at their real values (30 s, 2 retries) it ends in about 1.5 min."""
    for key, value in {"AWS_ENDPOINT_URL": black_hole, "AWS_ACCESS_KEY_ID": "k",
                       "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(object_store, "CLIENT_DEFAULTS", {
        "connect_timeout": "1s", "timeout": "1s", "max_retries": "1", "retry_timeout": "2s"})
    started = time.monotonic()
    code, err = invoke(["run", "--rules", "s3://bkt/r.csv", "--positions", "s3://bkt/p.csv",
                        "--out", "s3://bkt/out"], tmp_path)
    assert code == 1, err
    assert time.monotonic() - started < 30
    assert "did not answer" in err and "(timeout 1s, 1 retries)" in err
    assert SECRET not in err


def test_secrets_reach_no_output_log_or_error(s3, tmp_path: Path) -> None:
    """A secret in storage_options and one in the environment: neither appears in stdout,
    stderr (--verbose included) or the manifest, on success or failure."""
    sample = ROOT / "data" / "sample"
    s3.client().upload_file(str(sample / "rules.csv"), "bkt", "in/rules.csv")
    s3.client().upload_file(str(sample / "positions.csv"), "bkt", "in/positions.csv")
    options = {**s3.storage_options(), "aws_session_token": "tok-" + SECRET}
    config = config_file(tmp_path, options, rules="s3://bkt/in/rules.csv",
                         positions="s3://bkt/in/positions.csv", out="s3://bkt/out")
    env = {"AWS_SECRET_ACCESS_KEY": "env-" + SECRET, "AWS_ACCESS_KEY_ID": "testing"}
    ok = run_cli(["run", "--config", str(config), "--verbose"], tmp_path, env)
    assert ok.returncode == 0, ok.stderr
    manifest = keys(s3, "out/manifest.json")["out/manifest.json"].decode()
    assert json.loads(manifest)["config"]["storage_options"]["aws_secret_access_key"] == \
        "<hidden>"
    assert json.loads(manifest)["config"]["storage_options"]["aws_endpoint_url"] == \
        s3.endpoint
    bad = config_file(tmp_path, {**options, "aws_endpoint_url":
                                 f"http://127.0.0.1:{closed_port()}"},
                      rules="s3://bkt/in/rules.csv", positions="s3://bkt/in/positions.csv",
                      out="s3://bkt/out2")
    failed = run_cli(["run", "--config", str(bad), "--verbose"], tmp_path, env)
    assert failed.returncode == 1
    for text in (ok.stdout, ok.stderr, manifest, failed.stdout, failed.stderr):
        assert SECRET not in text and "testing" not in text.replace("/testing", "")


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
@pytest.mark.parametrize("given", ["aws_access_key_id", "aws_secret_access_key"])
def test_half_a_key_pair_in_storage_options_takes_the_other_from_the_environment(
        s3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, fmt: str) -> None:
    """The key id in config.yaml and the secret in the environment (or the other way round),
    as polars' reader takes them: every client of the run does (pyarrow's refused half a
    pair, an internal error; boto3's made the commit's manifest PUT fail, "could not tell
    whether this run committed"). The other half nowhere: a config error once a client is
    made (a local run's config may hold options it does not use), nothing written."""
    sample = ROOT / "data" / "sample"
    s3.client().upload_file(str(sample / "rules.csv"), "bkt", "in/rules.csv")
    options = {k: v for k, v in s3.storage_options().items()
               if k not in ("aws_access_key_id", "aws_secret_access_key")}
    options[given] = s3.storage_options()[given]
    config = config_file(tmp_path, options, rules="s3://bkt/in/rules.csv",
                         positions=str(sample / "positions.csv"), out="s3://bkt/out")
    if fmt == "delta":  # deltalake's client too
        with config.open("a") as text:
            text.write("output:\n  format: delta\n")
    other = ("AWS_SECRET_ACCESS_KEY" if given == "aws_access_key_id" else "AWS_ACCESS_KEY_ID")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    refused = run_cli(["run", "--config", str(config)], tmp_path)
    assert refused.returncode == 2, refused.stderr
    missing = ({"aws_access_key_id", "aws_secret_access_key"} - {given}).pop()
    assert refused.stderr.strip().splitlines()[-1] == (
        f"snim-batch: error: storage_options.{given} is given without "
        f"{missing} (in storage_options or {missing.upper()} in the environment): give both, "
        "or neither for the provider chain")
    assert names(s3, "out") == []
    ok = run_cli(["run", "--config", str(config)], tmp_path, {other: s3.env()[other]})
    assert ok.returncode == 0, ok.stderr
    assert ("out/manifest.json" if fmt == "parquet" else "out/runs/_delta_log/"
            "00000000000000000000.json") in names(s3, "out")


# ---- the commit -----------------------------------------------------------------------------


def test_rerun_needs_overwrite_which_replaces_and_removes_the_old_files(s3_env,
                                                                        tmp_path: Path) -> None:
    sample = ROOT / "data" / "sample"
    job = ["run", "--rules", sample / "rules.csv", "--positions", sample / "positions.csv",
           "--out", "s3://bkt/out"]
    assert invoke(job, tmp_path)[0] == 0
    first = keys(s3_env, "out/")
    code, err = invoke(job, tmp_path)
    assert code == 1
    assert "s3://bkt/out: output already exists (pass --overwrite to replace it)" in err
    assert keys(s3_env, "out/") == first
    code, err = invoke([*job, "--winning-moves", "--overwrite"], tmp_path)
    assert code == 0, err
    manifest = assert_whole(s3_env, "out")
    assert manifest["config"]["winning_moves"] is True
    run = manifest["run_id"]
    assert sorted(names(s3_env, "out")) == sorted(  # no directory marker left either
        ["out/manifest.json"] + [f"out/{run}/{n}.parquet" for n in OUTPUTS])


def test_a_failed_run_leaves_the_previous_output_as_it_was(s3_env, tmp_path: Path) -> None:
    sample = ROOT / "data" / "sample"
    assert invoke(["run", "--rules", sample / "rules.csv", "--positions",
                   sample / "positions.csv", "--out", "s3://bkt/out"], tmp_path)[0] == 0
    before = keys(s3_env)
    (tmp_path / "bad.csv").write_text("rule_set_id,heaps\n1,x\n")
    code, err = invoke(["run", "--rules", sample / "rules.csv", "--positions",
                        tmp_path / "bad.csv", "--out", "s3://bkt/out", "--overwrite",
                        "--on-bad-rows", "fail"], tmp_path)
    assert code == 1, err
    assert keys(s3_env) == before


@pytest.mark.parametrize("foreign", ["out/notes.txt", "out/manifest.json",
                                     "out/20200101T000000Z-cccccc/notes.txt"])
def test_what_is_not_provably_a_snim_batch_output_is_never_replaced(
        s3_env, tmp_path: Path, foreign: str) -> None:
    s3_env.client().put_object(Bucket="bkt", Key=foreign, Body=b"{}")
    sample = ROOT / "data" / "sample"
    code, err = invoke(["run", "--rules", sample / "rules.csv", "--positions",
                        sample / "positions.csv", "--out", "s3://bkt/out", "--overwrite"],
                       tmp_path)
    assert code == 1, err
    assert "s3://bkt/out: exists and is not provably a snim-batch output" in err
    assert list(keys(s3_env)) == [foreign]


def test_leftovers_of_dead_runs_are_removed_after_the_grace(s3_env, tmp_path: Path) -> None:
    from pipeline.io.outputs import remote_commit

    client = s3_env.client()
    for run in ("20200101T000000Z-aaaaaa", "20200101T000000Z-bbbbbb"):
        client.put_object(Bucket="bkt", Key=f"out/{run}/verdicts.parquet", Body=b"partial")
    client.put_object(Bucket="bkt", Key=f"out/{run}/rejects.parquet/part-00000.parquet",
                      Body=b"partial")  # the Spark engine's part files
    sample = ROOT / "data" / "sample"
    job = ["run", "--rules", sample / "rules.csv", "--positions", sample / "positions.csv",
           "--out", "s3://bkt/out"]
    assert invoke(job, tmp_path)[0] == 0  # young leftovers (moto's clock is now): kept
    assert "out/20200101T000000Z-aaaaaa/verdicts.parquet" in keys(s3_env)
    remote_commit.LEFTOVER_GRACE, grace = -1, remote_commit.LEFTOVER_GRACE
    try:
        assert invoke([*job, "--overwrite"], tmp_path)[0] == 0
    finally:
        remote_commit.LEFTOVER_GRACE = grace
    only_this_output(s3_env, assert_whole(s3_env, "out"))


@pytest.fixture(scope="module")
def big_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A job that takes a few seconds: 400k wide positions in Parquet (verdicts of a few MB)."""
    base = tmp_path_factory.mktemp("big")
    generate(base, Spec(400_000, 50, 100_000, 6, 0, 5, "wide", "parquet", 3, "int", False, 1))
    return base / "rules.parquet", base / "positions"


PAUSE_DRIVER = r"""
import shutil, sys, tempfile, time
from pathlib import Path

from pipeline.io.outputs import remote_commit

point, marker = sys.argv[1], Path(sys.argv[2])


def hold():
    marker.touch()
    time.sleep(600)


def holding_before(real):
    def call(*args, **kwargs):
        hold()
        return real(*args, **kwargs)
    return call


def upload_one_then_hold(staging, prefix):
    first = min(path for path in staging.rglob("*") if path.is_file())
    alone = Path(tempfile.mkdtemp())
    (alone / first.relative_to(staging)).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(first, alone / first.relative_to(staging))
    real_upload(alone, prefix)
    hold()


if point == "uploaded":  # one file is up, the others are not
    real_upload = remote_commit._upload
    remote_commit._upload = upload_one_then_hold
elif point == "committing":  # every file is up, the manifest is not
    remote_commit._commit = holding_before(remote_commit._commit)
elif point == "committed":  # the manifest is up, the old files are not deleted yet
    remote_commit._retire = holding_before(remote_commit._retire)
sys.argv = ["snim-batch", *sys.argv[3:]]
from pipeline.cli import main
main()
"""
"""The command, held (for a kill) at `point` of an object-store commit after creating the
marker file: the test's own seam into `remote_commit`, which has none for tests."""


def kill_when(args: list[str], where: Path, env: dict[str, str], ready,
              pause: tuple[str, Path] | None = None) -> int:
    """Start the command (held at `pause`: (point, marker file), see PAUSE_DRIVER), call
    `ready(progress_lines)` until it says to kill, then SIGKILL. Returns the exit status (-9
    when killed)."""
    start = ["-c", PAUSE_DRIVER, pause[0], str(pause[1])] if pause else ["-m", "pipeline.cli"]
    proc = subprocess.Popen([sys.executable, *start, *args, "--verbose"],
                            cwd=where, env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []

    def pump() -> None:
        assert proc.stderr is not None
        lines.extend(iter(proc.stderr.readline, ""))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    while proc.poll() is None and not ready(lines):
        time.sleep(0.01)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    status = proc.wait(timeout=300)
    reader.join(timeout=10)
    return status


@pytest.mark.slow
def test_sigkill_at_every_stage_leaves_the_previous_or_the_new_output_whole(
        s3, tmp_path: Path, big_job: tuple[Path, Path]) -> None:
    """Killed before its manifest is in place, a run leaves the previous output whole; killed
    after, the new one. Each kill waits for a marker: a log line, or the file a run creates
    where the test's driver holds it (PAUSE_DRIVER)."""
    rules, positions = big_job
    env = s3.env()
    job = ["run", "--rules", str(rules), "--positions", str(positions), "--out",
           "s3://bkt/out", "--overwrite"]
    first = run_cli(job, tmp_path, env)
    assert first.returncode == 0, first.stderr
    baseline = assert_whole(s3, "out")
    marker = tmp_path / "paused"

    def paused(lines: list[str]) -> bool:
        return marker.exists()

    moments = [  # (name, pause point or None, ready, the new output committed?)
        ("early", None, lambda lines: True, False),
        ("mid-positions", None, lambda lines: any("tables done" in x for x in lines), False),
        ("while uploading", "uploaded", paused, False),
        ("before the manifest", "committing", paused, False),
        ("after the manifest", "committed", paused, True),
    ]
    for name, point, ready, committed in moments:
        marker.unlink(missing_ok=True)
        status = kill_when([*job, "--winning-moves"], tmp_path, env, ready,
                           (point, marker) if point else None)
        assert status == -signal.SIGKILL, name
        manifest = assert_whole(s3, "out")
        if committed:
            assert manifest["run_id"] != baseline["run_id"], name
            assert manifest["config"]["winning_moves"] is True, name
        else:
            assert manifest == baseline, name
        if point == "uploaded":
            assert any(k.endswith(".parquet") and baseline["run_id"] not in k
                       for k in names(s3, "out/")), "nothing was uploaded before the kill"
    after = run_cli(job, tmp_path, env)  # the next run commits over what the kills left
    assert after.returncode == 0, after.stderr
    assert_whole(s3, "out")


def test_a_racing_commit_loses_with_nothing_written(s3_env, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Another run commits between this run's check and its commit: the conditional PUT
    fails, this run exits 1 and deletes what it uploaded; the other output stays."""
    from pipeline.io.outputs import remote_commit

    sample = ROOT / "data" / "sample"
    job = ["run", "--rules", sample / "rules.csv", "--positions", sample / "positions.csv",
           "--out", "s3://bkt/out"]
    real_upload = remote_commit._upload

    def upload_then_race(staging: Path, prefix: Location) -> None:
        real_upload(staging, prefix)
        monkeypatch.setattr(remote_commit, "_upload", real_upload)
        assert invoke(job, tmp_path)[0] == 0

    monkeypatch.setattr(remote_commit, "_upload", upload_then_race)
    code, err = invoke(job, tmp_path)
    assert code == 1, err
    assert "another run committed to this output while this run was writing" in err
    manifest = assert_whole(s3_env, "out")
    assert {k.split("/")[1] for k in keys(s3_env, "out/") if k.count("/") == 2} == {
        manifest["run_id"]}


MANIFEST_PUT = rb"PUT \S*/manifest\.json[ ?]"
DELETE = rb"POST \S*\?delete"


class HeldRequest:
    """A TCP proxy to the moto server that holds back the store's answer to the first request
    matching `pattern` (so the store has done it, the client is not told yet): `held` is set
    then; the answer is dropped once the client gives up on it (closes the connection), or
    passed on once `release` is set. With `cut`, the store is unreachable from then on: every
    connection is closed and no new one taken. With `requests`, every matching request itself
    is held back (the store has not seen it) until `release`, then passed on: it lands late.
    With `refuse`, every matching request is answered 403 by the proxy itself."""

    def __init__(self, server, pattern: bytes = MANIFEST_PUT, cut: bool = False,
                 requests: bool = False, refuse: bool = False) -> None:
        self.upstream = server.port
        self.pattern = re.compile(pattern)
        self.cut = cut
        self.requests = requests
        self.refuse = refuse
        self.sockets: list[socket.socket] = []
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.endpoint = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.armed = True
        self.held, self.release, self.dropped = (threading.Event() for _ in range(3))
        threading.Thread(target=self._serve, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        for sock in [self.listener, *self.sockets]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
            self.sockets += [client, upstream]
            gone, put = threading.Event(), threading.Event()
            threading.Thread(target=self._requests, args=(client, upstream, gone, put),
                             daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client, gone, put),
                             daemon=True).start()

    def _requests(self, client, upstream, gone, put) -> None:
        # a held request is kept whole: its bytes are read on (the body after the headers)
        # while it is held, and passed on at `release`, also when the client gave up on it
        # and closed the connection meanwhile (read one chunk at a time, a request cut short
        # there never landed, however late)
        kept: list[bytes] = []
        lock = threading.Lock()
        passer: threading.Thread | None = None

        def pass_on() -> None:
            self.release.wait()
            with lock, contextlib.suppress(OSError):
                upstream.sendall(b"".join(kept))
                kept.clear()

        try:
            while data := client.recv(1 << 16):
                if self.refuse and self.pattern.match(data):
                    self.held.set()
                    client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                    continue
                with lock:
                    if passer is None and self.requests and self.pattern.match(data) \
                            and not self.release.is_set():
                        self.held.set()
                        passer = threading.Thread(target=pass_on, daemon=True)
                        passer.start()
                    if passer is not None and (kept or not self.release.is_set()):
                        kept.append(data)
                        continue
                if self.armed and self.pattern.match(data):
                    self.armed = False
                    put.set()
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            if passer is not None:
                passer.join()
            gone.set()
            with contextlib.suppress(OSError):
                upstream.shutdown(socket.SHUT_WR)

    def _answers(self, upstream, client, gone, put) -> None:
        try:
            while data := upstream.recv(1 << 16):
                if put.is_set() and not data.startswith(b"HTTP/1.1 100"):
                    put.clear()
                    self.held.set()
                    if self.cut:
                        self.close()
                        return
                    while not (gone.wait(0.05) or self.release.is_set()):
                        pass
                    if gone.is_set():
                        self.dropped.set()
                        return
                client.sendall(data)
        except OSError:
            pass
        finally:
            client.close()
            upstream.close()


@pytest.fixture()
def held_put(s3):
    proxy = HeldRequest(s3)
    yield proxy
    proxy.close()


def first_output(server, tmp_path: Path, sample: Path) -> dict:
    job = ["run", "--rules", sample / "rules.csv", "--positions", sample / "positions.csv",
           "--out", "s3://bkt/out"]
    assert invoke(job, tmp_path)[0] == 0
    return assert_whole(server, "out")


def only_this_output(server, manifest: dict) -> None:
    """OUT holds the manifest and the files it lists, nothing else (no directory marker)."""
    listed = [f"out/{path}" for entry in manifest["outputs"] if entry["name"] != "manifest.json"
              for path, _ in listed_files(entry)]
    assert sorted(names(server, "out")) == sorted(["out/manifest.json", *listed])


def test_a_manifest_put_retried_after_a_timeout_commits(
        s3_env, held_put: HeldRequest, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The store takes the manifest but its answer comes after `timeout`: the client retries,
    and the conditional PUT's retry is refused (412) since the first one is in place. The run
    reads the manifest back, finds its own, and commits (the old files deleted, its own
    kept), instead of reporting a lost race and deleting the files its manifest lists."""
    sample = ROOT / "data" / "sample"
    old = first_output(s3_env, tmp_path, sample)
    config = config_file(tmp_path, {"timeout": "2s", "max_retries": "2"})
    monkeypatch.setenv("AWS_ENDPOINT_URL", held_put.endpoint)
    code, err = invoke(["run", "--config", config, "--rules", sample / "rules.csv",
                        "--positions", sample / "positions.csv", "--out", "s3://bkt/out",
                        "--overwrite", "--winning-moves"], tmp_path)
    assert held_put.dropped.is_set(), "the manifest PUT's answer was not held past the timeout"
    assert code == 0, err
    assert "another run committed" not in err
    manifest = assert_whole(s3_env, "out")
    assert manifest["run_id"] != old["run_id"] and manifest["config"]["winning_moves"] is True
    only_this_output(s3_env, manifest)


def overwrite_through(proxy: HeldRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      max_retries: int) -> tuple[int, str]:
    """Run the sample job over s3://bkt/out with --overwrite, through `proxy`, with a 2 s
    timeout and `max_retries`: (exit code, stderr)."""
    sample = ROOT / "data" / "sample"
    config = config_file(tmp_path, {"timeout": "2s", "max_retries": str(max_retries)})
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    return invoke(["run", "--config", config, "--rules", sample / "rules.csv", "--positions",
                   sample / "positions.csv", "--out", "s3://bkt/out", "--overwrite"], tmp_path)


def test_a_manifest_put_whose_outcome_cannot_be_told_keeps_every_file(
        s3_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store takes the manifest, then cannot be reached (no answer to the PUT, nor to
    reading it back): the run exits 1 saying it cannot tell whether it committed, and deletes
    nothing, so the manifest in place (this run's) lists files that are all there."""
    old = first_output(s3_env, tmp_path, ROOT / "data" / "sample")
    proxy = HeldRequest(s3_env, cut=True)
    try:
        code, err = overwrite_through(proxy, tmp_path, monkeypatch, max_retries=1)
    finally:
        proxy.close()
    assert proxy.held.is_set()
    assert code == 1, err
    err = " ".join(err.split())
    manifest = assert_whole(s3_env, "out")
    run = manifest["run_id"]
    assert run != old["run_id"]
    assert "s3://bkt/out: could not tell whether this run committed (the manifest.json PUT " \
           "failed: " in err
    assert (f"if s3://bkt/out/manifest.json names run {run}, the new output is in place (the "
            f"replaced one's files were kept); else its files under s3://bkt/out/{run}/ can "
            "be deleted") in err
    assert {k.split("/")[1] for k in names(s3_env, "out/") if k.count("/") == 2} == {
        run, old["run_id"]}


def refused_sample_run(server, pattern: bytes, out: str, tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, HeldRequest]:
    """`run` of the bundled sample to `out` through a proxy that answers 403 to every request
    matching `pattern`: its exit code, stderr, and the proxy (closed)."""
    sample = ROOT / "data" / "sample"
    proxy = HeldRequest(server, pattern, refuse=True)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    try:
        code, err = invoke(["run", "--rules", sample / "rules.csv", "--positions",
                            sample / "positions.csv", "--out", out], tmp_path)
    finally:
        proxy.close()
    return code, err, proxy


def test_credentials_that_may_not_look_the_bucket_up_still_commit(
        s3_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A policy that allows a prefix but not HeadBucket (403 to `HEAD /bkt`): a first run to
    an empty OUT is not refused as if the bucket were missing."""
    code, err, proxy = refused_sample_run(s3_env, rb"HEAD /bkt/? HTTP", "s3://bkt/fresh",
                                          tmp_path, monkeypatch)
    assert proxy.held.is_set(), "the bucket was not looked up"
    assert code == 0, err
    assert_whole(s3_env, "fresh")


def test_refused_access_to_a_prefix_above_the_output_names_the_output(
        s3_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store refuses (403) the read of a manifest one prefix above --out (which the run
    makes, to refuse an --out inside another output): the message names --out, then what it
    read; it named only that manifest, a prefix the user never gave."""
    code, err, proxy = refused_sample_run(s3_env, rb"(HEAD|GET) /bkt/nightly/manifest\.json",
                                          "s3://bkt/nightly/out", tmp_path, monkeypatch)
    assert proxy.held.is_set(), "the manifest above was not read"
    assert code == 1, err
    assert err.splitlines()[-1] == (
        "snim-batch: error: s3://bkt/nightly/out: the object store refused access while "
        "reading s3://bkt/nightly/manifest.json, to check that it is not inside a snim-batch "
        "output (check the credentials)")


def test_a_manifest_put_that_may_still_land_keeps_every_file(
        s3_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifest PUT times out before the store has seen it, and reading the manifest
    back shows the old one: the PUT may still land later (it is conditional on that very
    manifest), so the run exits 1 saying it cannot tell and deletes nothing. When the PUT
    does land, its manifest lists files that are all there."""
    old = first_output(s3_env, tmp_path, ROOT / "data" / "sample")
    proxy = HeldRequest(s3_env, requests=True)
    try:
        code, err = overwrite_through(proxy, tmp_path, monkeypatch, max_retries=0)
        assert proxy.held.is_set()
        assert code == 1, err
        assert "and may still take effect" in " ".join(err.split()), err
        assert assert_whole(s3_env, "out")["run_id"] == old["run_id"]
        proxy.release.set()  # the held PUT reaches the store now
        deadline = time.monotonic() + 60
        while json.loads(keys(s3_env, "out/manifest.json")["out/manifest.json"])[
                "run_id"] == old["run_id"] and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proxy.close()
    manifest = assert_whole(s3_env, "out")
    assert manifest["run_id"] != old["run_id"]


@pytest.mark.parametrize("pattern", [MANIFEST_PUT, DELETE], ids=["put", "delete"])
def test_a_stop_signal_from_the_manifest_put_to_the_old_files_deletion_is_held(
        s3, tmp_path: Path, pattern: bytes) -> None:
    """SIGTERM while the manifest PUT is in flight (the store has taken it), or the old
    files' deletion, does not stop the run in between: it commits and exits 0."""
    held_put = HeldRequest(s3, pattern)
    sample = ROOT / "data" / "sample"
    job = ["run", "--rules", str(sample / "rules.csv"), "--positions",
           str(sample / "positions.csv"), "--out", "s3://bkt/out"]
    assert run_cli(job, tmp_path, s3.env()).returncode == 0
    old = assert_whole(s3, "out")
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", *job, "--overwrite"],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT), **s3.env(),
                                               "AWS_ENDPOINT_URL": held_put.endpoint},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert held_put.held.wait(120), "no such request came"
        proc.send_signal(signal.SIGTERM)
        held_put.release.set()
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        held_put.close()
    assert proc.returncode == 0, err
    manifest = assert_whole(s3, "out")
    assert manifest["run_id"] != old["run_id"]
    only_this_output(s3, manifest)


def test_overwrite_refuses_an_output_holding_objects_of_the_users(s3_env,
                                                                  tmp_path: Path) -> None:
    """An object of one's own below the output's RUN_ID/ prefix, or put in place of an output
    file (another size), makes the output no longer replaceable: exit 1 naming them (sizes
    too), and nothing is deleted."""
    sample = ROOT / "data" / "sample"
    manifest = first_output(s3_env, tmp_path, sample)
    run = manifest["run_id"]
    client = s3_env.client()
    client.put_object(Bucket="bkt", Key=f"out/{run}/my_analysis.csv", Body=b"precious")
    summary = next(e for e in manifest["outputs"] if e["name"] == "summary.parquet")
    client.put_object(Bucket="bkt", Key=f"out/{run}/summary.parquet", Body=b"my own summary")
    before = keys(s3_env)
    code, err = invoke(["run", "--rules", sample / "rules.csv", "--positions",
                        sample / "positions.csv", "--out", "s3://bkt/out", "--overwrite"],
                       tmp_path)
    assert code == 1, err
    assert (f"s3://bkt/out: exists and is not provably a snim-batch output (holds what its "
            f"manifest.json does not list: {run}/my_analysis.csv; files changed size since "
            f"its manifest.json listed them: {run}/summary.parquet (14 bytes, listed with "
            f"{summary['size']})); refusing to replace it, nothing was written") in err
    assert keys(s3_env) == before


def test_what_appears_in_the_old_output_during_the_run_is_kept(
        s3_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An object added below the old output's prefix, or put in place of one of its files,
    after the check: the new output commits, the old output's other files are deleted, those
    two are kept, with a warning naming them."""
    from pipeline.io.outputs import remote_commit

    sample = ROOT / "data" / "sample"
    old = first_output(s3_env, tmp_path, sample)
    run = old["run_id"]
    real_upload = remote_commit._upload

    def upload_then_edit(staging: Path, prefix: Location) -> None:
        real_upload(staging, prefix)
        client = s3_env.client()
        client.put_object(Bucket="bkt", Key=f"out/{run}/notes.txt", Body=b"mine")
        client.put_object(Bucket="bkt", Key=f"out/{run}/summary.parquet", Body=b"edited")

    monkeypatch.setattr(remote_commit, "_upload", upload_then_edit)
    code, err = invoke(["run", "--rules", sample / "rules.csv", "--positions",
                        sample / "positions.csv", "--out", "s3://bkt/out", "--overwrite"],
                       tmp_path)
    assert code == 0, err
    summary = next(e for e in old["outputs"] if e["name"] == "summary.parquet")
    assert (f"kept what the replaced output's manifest.json does not account for: "
            f"{run}/notes.txt, {run}/summary.parquet (6 bytes, listed with "
            f"{summary['size']})") in " ".join(err.split())
    manifest = assert_whole(s3_env, "out")
    assert {k for k in names(s3_env, "out/") if run in k} == {
        f"out/{run}/notes.txt", f"out/{run}/summary.parquet"}
    assert keys(s3_env, f"out/{run}/") == {f"out/{run}/notes.txt": b"mine",
                                           f"out/{run}/summary.parquet": b"edited"}
    assert manifest["run_id"] != run
    assert manifest["retired_prefixes"] == [run]


def test_an_old_outputs_files_a_run_failed_to_delete_are_deleted_by_the_next(
        s3_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run that replaced output A could not delete A's files (killed after its commit,
    or the store refused): the next run deletes those still at their recorded size, and
    keeps a file a user put in place of one of them, even one of the same size."""
    from pipeline.io.outputs import remote_commit

    sample = ROOT / "data" / "sample"
    first = first_output(s3_env, tmp_path, sample)
    run = first["run_id"]
    real_delete = remote_commit._delete

    def no_delete_of_the_old_output(target, relatives, what):
        return None if what == "the replaced output's files" else real_delete(
            target, relatives, what)

    job = ["run", "--rules", sample / "rules.csv", "--positions", sample / "positions.csv",
           "--out", "s3://bkt/out", "--overwrite"]
    with monkeypatch.context() as patch:
        patch.setattr(remote_commit, "_delete", no_delete_of_the_old_output)
        assert invoke(job, tmp_path)[0] == 0
    left = sorted(k for k in names(s3_env, "out/") if f"/{run}/" in k)
    assert len(left) == len(first["outputs"]) - 1  # every file but the manifest
    second = assert_whole(s3_env, "out")
    assert {path: size for path, (size, _) in second["retired_files"].items()} == {
        e["path"]: e["size"] for e in first["outputs"] if e["name"] != "manifest.json"}
    summary = next(e for e in first["outputs"] if e["name"] == "summary.parquet")
    time.sleep(1.1)  # S3 keeps modification times to the second
    mine = b"x" * summary["size"]  # the same size: told apart by its modification time
    s3_env.client().put_object(Bucket="bkt", Key=f"out/{run}/summary.parquet", Body=mine)
    code, err = invoke(job, tmp_path)
    assert code == 0, err
    assert keys(s3_env, f"out/{run}/") == {f"out/{run}/summary.parquet": mine}
    assert (f"kept what is below a replaced output's prefix but not one of its files: "
            f"{run}/summary.parquet (remove it yourself)") in " ".join(err.split())
    only = assert_whole(s3_env, "out")
    assert second["run_id"] not in "".join(names(s3_env, "out/"))
    assert run in only["retired_prefixes"]


def test_what_a_run_kept_is_kept_by_every_later_run(
        s3_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run file a user put in place of an old output's file during a run is kept; a later
    run, past the leftovers' grace, neither takes it for a killed run's file and deletes it,
    nor refuses the output: it keeps it again and says so, until the user removes it."""
    from pipeline.io.outputs import remote_commit

    sample = ROOT / "data" / "sample"
    run = first_output(s3_env, tmp_path, sample)["run_id"]
    real_upload = remote_commit._upload

    def upload_then_edit(staging: Path, prefix: Location) -> None:
        real_upload(staging, prefix)
        s3_env.client().put_object(Bucket="bkt", Key=f"out/{run}/verdicts.parquet",
                                   Body=b"my own verdicts")

    job = ["run", "--rules", sample / "rules.csv", "--positions", sample / "positions.csv",
           "--out", "s3://bkt/out", "--overwrite"]
    with monkeypatch.context() as patch:
        patch.setattr(remote_commit, "_upload", upload_then_edit)
        assert invoke(job, tmp_path)[0] == 0
    second = assert_whole(s3_env, "out")["run_id"]
    monkeypatch.setattr(remote_commit, "LEFTOVER_GRACE", -1)
    for _ in range(2):
        code, err = invoke(job, tmp_path)
        assert code == 0, err
        assert (f"kept what is below a replaced output's prefix but not one of its files: "
                f"{run}/verdicts.parquet (remove it yourself)") in " ".join(err.split())
        manifest = assert_whole(s3_env, "out")
        assert keys(s3_env, f"out/{run}/") == {f"out/{run}/verdicts.parquet": b"my own verdicts"}
        assert second not in "".join(names(s3_env, "out/"))
        assert run in manifest["retired_prefixes"]
    s3_env.client().delete_object(Bucket="bkt", Key=f"out/{run}/verdicts.parquet")
    assert invoke(job, tmp_path)[0] == 0
    assert run not in assert_whole(s3_env, "out")["retired_prefixes"]


def test_a_missing_bucket_is_found_before_any_work(s3_env, tmp_path: Path) -> None:
    code, err = invoke(["run", "--rules", tmp_path / "missing.csv", "--positions",
                        tmp_path / "missing", "--out", "s3://nobucket/out"], tmp_path)
    assert code == 1
    assert err.strip() == ("snim-batch: error: s3://nobucket/out: the bucket 'nobucket' does "
                           "not exist; nothing was written")


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_local_staging_of_a_killed_run_is_removed_by_the_next(s3, tmp_path: Path) -> None:
    """A run killed before its commit leaves its local staging directory (its files staged
    for upload), named with its pid; the next run removes it, and only those of processes
    that are gone."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    sample = ROOT / "data" / "sample"
    job = ["run", "--rules", str(sample / "rules.csv"), "--positions",
           str(sample / "positions.csv"), "--out", "s3://bkt/out", "--overwrite"]
    marker = tmp_path / "paused"
    env = {**s3.env(), "TMPDIR": str(tmp)}
    assert kill_when(job, tmp_path, env, lambda lines: marker.exists(),
                     ("committing", marker)) == -signal.SIGKILL
    left = os.listdir(tmp)
    assert len(left) == 1 and re.fullmatch(r"snim-batch-\d+-\d{8}T\d{6}Z-[0-9a-f]{6}-.+",
                                           left[0]), left
    assert any((tmp / left[0]).rglob("verdicts.parquet"))
    live = tmp / f"snim-batch-{os.getpid()}-20200101T000000Z-abcdef-x"
    live.mkdir()
    other = tmp / f"snim-batch-{dead_pid()}-not-a-run"
    other.mkdir()
    done = run_cli(job, tmp_path, {**s3.env(), "TMPDIR": str(tmp)})
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(tmp)) == sorted([live.name, other.name])


# ---- gs:// and az:// ------------------------------------------------------------------------


def test_az_without_an_account_is_a_usage_error(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT"):
        monkeypatch.delenv(name, raising=False)
    code, err = invoke(["run", "--rules", "az://container/rules.csv", "--positions",
                        "az://container/p.csv", "--out", "out"], tmp_path)
    assert code == 2, err
    assert "az:// needs a storage account" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("url", ["gs://bucket/rules.csv",
                                 "abfss://c@nosuchacct.dfs.core.windows.net/rules.csv"])
def test_gs_and_az_without_reachable_credentials_exit_1_in_one_line(
        tmp_path: Path, url: str) -> None:
    config = config_file(tmp_path, {"timeout": "2s", "connect_timeout": "1s",
                                    "max_retries": "0"},
                         rules=url, positions=url, out=str(tmp_path / "out"))
    started = time.monotonic()
    result = run_cli(["run", "--config", str(config)], tmp_path, {
        "GOOGLE_APPLICATION_CREDENTIALS": "", "AZURE_STORAGE_ACCOUNT_KEY": "a2V5"},
        timeout=120)
    assert result.returncode == 1, result.stderr
    # max_retries 0: no retry_timeout (30 s by default) in the bound of 1 s + 2 s
    assert time.monotonic() - started < 20
    lines = result.stderr.strip().splitlines()
    said = said_lines(result.stderr)  # a wait of over 10 s has its progress lines before
    assert said[0] == f"snim-batch: config: {config}", result.stderr
    assert len(said) == 2 and said[1].startswith(f"snim-batch: error: {url}: "), lines
    assert said[1] == lines[-1], lines
    assert "Traceback" not in result.stderr


def test_storage_options_for_each_store() -> None:
    s3 = Location.parse("s3://b/k", Path("/"))
    options = object_store.storage_options(s3, {"aws_endpoint_url": "http://h:1",
                                                "timeout": "5s"})
    assert options == {"connect_timeout": "5s", "timeout": "5s", "max_retries": "2",
                       "retry_timeout": "30s", "aws_endpoint_url": "http://h:1",
                       "aws_allow_http": "true"}
    az = Location.parse("abfss://c@acct.dfs.core.windows.net/k", Path("/"))
    assert object_store.storage_options(az)["account_name"] == "acct"
    assert object_store.storage_options(Location.parse("/x", Path("/"))) == {}
    assert object_store.polars_options(object_store.with_client_options(s3))["max_retries"] == 2


@pytest.mark.parametrize(("options", "want"), [
    ({}, 30.0), ({"retry_timeout": "3s"}, 3.0), ({"max_retries": "1", "retry_timeout": "2m"},
                                                 120.0),
    ({"max_retries": "0"}, 0.0), ({"max_retries": "0", "retry_timeout": "5s"}, 0.0)])
def test_retries_take_retry_timeout_unless_there_are_none(options: dict, want: float) -> None:
    assert object_store.retry_seconds(options) == want


def test_a_bad_duration_is_a_config_error(tmp_path: Path) -> None:
    location = object_store.with_client_options(Location.parse("s3://b/k", Path("/")),
                                                {"timeout": "soon"})
    with pytest.raises(ConfigError, match=r"storage_options.timeout: not a duration"):
        object_store.filesystem(location)


def test_secret_values_are_redacted_from_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "envsecret123")
    text = ("GET https://a.blob.core.windows.net/c/x?sv=2020&sig=abc%2Fdef&se=2030 failed "
            "with key optsecret456 and envsecret123")
    assert object_store.redacted(text, {"account_key": "optsecret456"}) == (
        "GET https://a.blob.core.windows.net/c/x?sv=<hidden>&sig=<hidden>&se=<hidden> failed "
        "with key <hidden> and <hidden>")


# ---- CSV from a stream ----------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    b'a,b\n1,"x\ny"\n2,3\n', b'a,b\r\n1,"x""y"\r\n2,"3', b'\xef\xbb\xbfa,b\n"1\r\n2",3\n',
    b'a,b\n1,2\n3,"4\n5,6\n', b'a,b\n1,"2""\n', b'a,b\n' + b'1,2\r\n' * 7,
    b'a,b\n1,\xff\n', b'a,b\n1,2\x00\n', b'a,b\n1,"x\ny"z\n2,3\n', b'a,b\r\n"1\r\n""2"",3\r\n',
    b'a,b\n\xc3\xa9,\xe2\x82\xac\xc3\n', b'a,b\n\xe2\x82\xac\xe2\x82,1\n',
    b'a,b\n\xf0\x9f\x98\x80,\xed\xa0\x80\n', b'a,b\n1,2\n\xc3\xa9\xc3',
])
@pytest.mark.parametrize("part", [1, 2, 3, 5, 1 << 24])
def test_the_streamed_scan_equals_the_scan_of_the_whole_file(
        s3_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: bytes,
        part: int) -> None:
    """Whatever part boundaries cut (a '""', a CRLF, a BOM, a character of several bytes
    before a bad one), the scan of an object or a local file read in parts finds what the
    scan of the whole bytes at once finds, the first bad byte's offset included."""
    (tmp_path / "f.csv").write_bytes(text)
    s3_env.client().put_object(Bucket="bkt", Key="f.csv", Body=text)
    monkeypatch.setattr(csv_reader, "_PART", part)
    remote = object_store.with_client_options(Location.parse("s3://bkt/f.csv", Path("/")))
    whole = csv_reader._scan_bytes(text)
    assert csv_reader._scan_text(remote) == whole
    assert csv_reader._scan_text(tmp_path / "f.csv") == whole


def test_the_readme_polars_recipe_reads_the_committed_output(s3, tmp_path: Path) -> None:
    """docs/object-stores.md's way to read an output from its manifest, run as written (the
    bucket and prefix replaced), with only the standard AWS environment."""
    readme = (ROOT / "docs" / "object-stores.md").read_text()
    recipe = "# polars" + readme.split("```python\n# polars", 1)[1].split("```", 1)[0]
    recipe = recipe.replace("bucket/verdicts/2026-12-01", "bkt/out")
    sample = ROOT / "data" / "sample"
    job = ["run", "--rules", str(sample / "rules.csv"), "--positions",
           str(sample / "positions.csv"), "--out", "s3://bkt/out"]
    assert run_cli(job, tmp_path, s3.env()).returncode == 0
    script = tmp_path / "recipe.py"
    script.write_text(recipe + "\nverdicts.write_parquet('read.parquet')\n")
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env={**os.environ, **s3.env()},
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert pl.read_parquet(tmp_path / "read.parquet").equals(
        remote_outputs(s3, "out")["verdicts"])


# ---- the Spark engine -----------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.slow
def test_spark_reads_rules_from_s3_and_commits_to_s3_like_the_polars_engine(
        s3, tmp_path: Path) -> None:
    """Rules on S3 are read by the polars reader on the driver; the Spark engine's part-file
    directories are committed by the manifest. Parquet positions on S3 are read by the
    tasks themselves, with the AWS variables here (Spark's s3a:// connector is not on this
    classpath, and is not needed; tests/test_spark_urls.py has the rest)."""
    sample = ROOT / "data" / "sample"
    s3.client().upload_file(str(sample / "rules.parquet"), "bkt", "in/rules.parquet")
    s3.client().upload_file(str(sample / "positions.parquet"), "bkt", "in/positions.parquet")
    job = ["run", "--rules", "s3://bkt/in/rules.parquet", "--positions",
           str(sample / "positions.parquet")]
    assert run_cli([*job, "--out", "s3://bkt/polars"], tmp_path, s3.env()).returncode == 0
    done = run_cli([*job, "--out", "s3://bkt/spark", "--engine", "spark", "--spark-master",
                    "local[1]"], tmp_path, s3.env())
    assert done.returncode == 0, done.stderr
    manifest = assert_whole(s3, "spark")
    assert [e["type"] for e in manifest["outputs"] if e["name"] == "verdicts.parquet"] == [
        "directory"]
    spark, polars = remote_outputs(s3, "spark"), remote_outputs(s3, "polars")
    for name in OUTPUTS:
        assert spark[name].equals(polars[name]), name
    remote = run_cli(["run", "--rules", "s3://bkt/in/rules.parquet", "--positions",
                      "s3://bkt/in/positions.parquet", "--out", "s3://bkt/spark2",
                      "--engine", "spark", "--spark-master", "local[1]"], tmp_path, s3.env())
    assert remote.returncode == 0, remote.stderr
    assert_whole(s3, "spark2")
    from_s3 = remote_outputs(s3, "spark2")
    for name in OUTPUTS:  # no rejects: no source that names the file differently
        assert from_s3[name].equals(polars[name]), name
    again = run_cli([*job, "--out", "s3://bkt/spark", "--overwrite"], tmp_path, s3.env())
    assert again.returncode == 0, again.stderr  # its part files listed at their sizes
    replaced = assert_whole(s3, "spark")
    assert not any(manifest["run_id"] in key for key in names(s3, "spark"))
    assert sorted(names(s3, "spark/")) == sorted(
        ["spark/manifest.json"] + [f"spark/{replaced['run_id']}/{n}.parquet" for n in OUTPUTS])


@pytest.mark.parametrize(("target", "doing"), [("rules", "looking it up"),
                                               ("out", "listing")])
def test_refused_credentials_exit_1_in_one_line_without_the_secret(
        tmp_path: Path, target: str, doing: str) -> None:
    """A moto server that checks credentials (no IAM user has this key): exit 1, one line
    saying access was refused, neither key nor secret shown. A lookup (the rules) gets a
    bare 403 (ACCESS_DENIED), a listing (the output's prefix) the server's
    INVALID_ACCESS_KEY_ID."""
    from s3_server import MotoServer

    server = MotoServer({"INITIAL_NO_AUTH_ACTION_COUNT": "0"}).start()
    try:
        sample = ROOT / "data" / "sample"
        where = {"rules": str(sample / "rules.csv"), "out": str(tmp_path / "out")}
        where[target] = {"rules": "s3://bkt/rules.csv", "out": "s3://bkt/out"}[target]
        started = time.monotonic()
        result = run_cli(["run", "--rules", where["rules"], "--positions",
                          str(sample / "positions.csv"), "--out", where["out"]],
                         tmp_path, {**server.env(), "AWS_ACCESS_KEY_ID": "AKIAUNKNOWN0KEY",
                                    "AWS_SECRET_ACCESS_KEY": SECRET}, timeout=120)
    finally:
        server.stop()
    assert result.returncode == 1, result.stderr
    assert time.monotonic() - started < 60
    assert result.stderr.strip().splitlines() == [
        f"snim-batch: error: {where[target]}: the object store refused access "
        f"while {doing} (check the credentials)"]
    assert SECRET not in result.stderr and "AKIAUNKNOWN0KEY" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_the_readme_duckdb_recipe_reads_the_files_the_manifest_lists(s3_env,
                                                                     tmp_path: Path) -> None:
    """docs/object-stores.md's DuckDB SQL, on a local copy of a committed output (DuckDB's S3
    support, httpfs, is an extension downloaded at first use): the same verdicts as the
    manifest's."""
    import duckdb

    readme = (ROOT / "docs" / "object-stores.md").read_text()
    sql = readme.split("```sql\n", 1)[1].split("```", 1)[0]
    sample = ROOT / "data" / "sample"
    assert invoke(["run", "--rules", sample / "rules.csv", "--positions",
                   sample / "positions.csv", "--out", "s3://bkt/out"], tmp_path)[0] == 0
    copy = tmp_path / "copy"
    for key, data in keys(s3_env, "out/").items():
        (copy / key).parent.mkdir(parents=True, exist_ok=True)
        (copy / key).write_bytes(data)
    sql = sql.replace("s3://bucket/verdicts/2026-12-01", str(copy / "out"))
    with duckdb.connect() as db:
        *setup, query = [part for part in sql.split(";") if part.strip()]
        for statement in setup:
            db.execute(statement)
        got = db.execute(query).pl()
    assert got.equals(remote_outputs(s3_env, "out")["verdicts"])


@pytest.mark.parametrize("engine", ["polars", "spark"])
def test_hdfs_is_a_usage_error_naming_the_url(tmp_path: Path, engine: str) -> None:
    code, err = invoke(["run", "--rules", "hdfs://namenode:8020/in/rules.parquet",
                        "--positions", "p", "--out", "o", "--engine", engine], tmp_path)
    assert code == 2, err
    assert err.strip().splitlines() == [
        "snim-batch: error: hdfs://namenode:8020/in/rules.parquet: hdfs:// is read only by "
        "the Spark engine, and only for positions (--engine spark, not Spark Connect); put the "
        "other inputs and --out on a local or shared path or an object store"]
    assert list(tmp_path.iterdir()) == []


def test_retired_files_leave_out_objects_listed_without_a_time() -> None:
    """A store whose listing gives no modification time (0.0) cannot tell a user's file of
    the same size from the old one: such a file is not recorded, so a later run keeps it."""
    from pipeline.io.outputs.remote_target import Target

    run = "20260101T000000Z-abcdef"
    target = Target(listed={f"{run}/verdicts.parquet": 10, f"{run}/summary.parquet": 20,
                             "manifest.json": 5},
                     seen={f"{run}/verdicts.parquet": 0.0, f"{run}/summary.parquet": 7.5})
    assert target.retired_files() == {f"{run}/summary.parquet": [20, 7.5]}
    assert target.retired() == [run]


# ---- secrets in URLs, keys the clients cannot name, bounds of gs:// and az:// ---------------


def every_text(result: subprocess.CompletedProcess[str], server=None, out_key: str = "") -> str:
    """stdout, stderr and, when there is one, the manifest at `out_key`."""
    texts = [result.stdout, result.stderr]
    if server is not None and out_key:
        texts += [v.decode(errors="replace") for v in keys(server, out_key).values()]
    return "\n".join(texts)


@pytest.mark.parametrize("where", ["environment", "storage_options"])
def test_an_endpoint_with_a_password_is_refused_without_showing_it(
        s3, tmp_path: Path, where: str) -> None:
    """pyarrow's client would take `admin` for the host (and the message blamed DNS for a
    host that resolves); the password is shown nowhere, --verbose included."""
    sample = ROOT / "data" / "sample"
    s3.client().upload_file(str(sample / "rules.csv"), "bkt", "in/rules.csv")
    endpoint = s3.endpoint.replace("http://", "http://admin:PWSECRET@")
    env = {**s3.env(), "AWS_ENDPOINT_URL": endpoint}
    args = ["run", "--rules", "s3://bkt/in/rules.csv", "--positions",
            str(sample / "positions.csv"), "--out", "s3://bkt/out", "--verbose"]
    if where == "storage_options":
        env["AWS_ENDPOINT_URL"] = s3.endpoint
        config = config_file(tmp_path, {"aws_endpoint_url": endpoint},
                             rules="s3://bkt/in/rules.csv",
                             positions=str(sample / "positions.csv"), out="s3://bkt/out")
        args = ["run", "--config", str(config), "--verbose"]
    result = run_cli(args, tmp_path, env)
    assert result.returncode == 2, result.stderr
    assert "an endpoint URL holds no user name or password" in result.stderr
    assert "admin:<hidden>@127.0.0.1" in result.stderr
    assert "PWSECRET" not in every_text(result) and "cannot resolve" not in result.stderr
    assert names(s3, "out") == []


def test_a_host_that_resolves_is_not_blamed_on_dns() -> None:
    location = object_store.with_client_options(Location.parse("s3://bkt/k", Path("/")), {})
    resolves = OSError("AWS Error NETWORK_CONNECTION during HeadObject operation: curlCode: 6, "
                       "Could not resolve hostname; Details: Could not resolve host: localhost")
    said = str(object_store.store_error(location, resolves))
    assert "cannot reach the object store" in said and "cannot resolve" not in said
    unknown = OSError("curlCode: 6, Could not resolve hostname; Details: Could not resolve "
                      "host: no-such-host.invalid")
    assert "cannot resolve the object store's host 'no-such-host.invalid'" in str(
        object_store.store_error(location, unknown))


@pytest.mark.parametrize("rules", ["s3://bkt/in/rules.csv?X-Amz-Signature=VSECRET",
                                   "s3://bkt/in/rules.csv?x=1&X-Amz-Credential=VSECRET",
                                   "https://h/r.csv?sig=VSECRET",
                                   "ftp://u:VSECRET@h/r"])
def test_signed_urls_and_url_passwords_reach_no_output(s3, tmp_path: Path, rules: str) -> None:
    sample = ROOT / "data" / "sample"
    result = run_cli(["run", "--rules", rules, "--positions", str(sample / "positions.csv"),
                      "--out", "s3://bkt/out", "--verbose"], tmp_path, s3.env())
    assert result.returncode == 2, result.stderr
    assert "VSECRET" not in every_text(result, s3, "out") and "<hidden>" in result.stderr
    assert names(s3, "out") == []


@pytest.mark.parametrize("out", ["s3://bkt/a/../y", "s3://bkt/a/./y", "s3://bkt/a//y",
                                 "s3://bkt/../y"])
def test_an_output_key_with_dot_segments_is_refused_before_any_upload(
        s3, tmp_path: Path, out: str) -> None:
    """The files went to the normalised key, the manifest to the literal one: refused,
    exit 2, nothing written anywhere in the bucket."""
    sample = ROOT / "data" / "sample"
    result = run_cli(["run", "--rules", str(sample / "rules.csv"), "--positions",
                      str(sample / "positions.csv"), "--out", out], tmp_path, s3.env())
    assert result.returncode == 2, result.stderr
    assert "segment" in result.stderr and "name the key without it" in result.stderr
    assert names(s3) == []


def test_keys_with_empty_segments_and_directory_markers_on_a_prefix_read(
        s3_env, tmp_path: Path) -> None:
    """Empty markers (`d/`) are prefixes, never inputs; an object with `//` in its key,
    which no client can read, is named when the read would take it (not pyarrow's "Empty
    path component"), and is no obstacle to a pattern that does not take it; a marker with
    content, listed as an object without its '/', is named as a marker."""
    sample = ROOT / "data" / "sample"
    client = s3_env.client()
    body = (sample / "positions.csv").read_bytes()
    client.put_object(Bucket="bkt", Key="p/a.csv", Body=body)
    client.put_object(Bucket="bkt", Key="p/d.csv/", Body=b"")
    client.put_object(Bucket="bkt", Key="p/e/", Body=b"")
    rules = str(sample / "rules.csv")
    code, err = invoke(["run", "--rules", rules, "--positions", "s3://bkt/p", "--out",
                        tmp_path / "one"], tmp_path)
    assert code == 0, err
    code, err = invoke(["run", "--rules", rules, "--positions", "s3://bkt/p/*", "--out",
                        tmp_path / "glob"], tmp_path)
    assert code == 0, err
    client.put_object(Bucket="bkt", Key="p/x//b.csv", Body=body)
    for spec in ("s3://bkt/p", "s3://bkt/p/**/*.csv", "s3://bkt/p/x/**"):
        code, err = invoke(["run", "--rules", rules, "--positions", spec, "--out",
                            tmp_path / "two"], tmp_path)
        assert code == 1, err
        assert err.strip().splitlines() == [
            f"snim-batch: error: positions input {spec}: the object s3://bkt/p/x//b.csv has "
            "an empty segment (//) in its key, which the store clients cannot read; rename "
            "it, or name the objects to read without it"], err
    code, err = invoke(["run", "--rules", rules, "--positions", "s3://bkt/p/*.csv", "--out",
                        tmp_path / "three"], tmp_path)
    assert code == 0, err
    client.delete_object(Bucket="bkt", Key="p/x//b.csv")
    client.put_object(Bucket="bkt", Key="q/d.csv/", Body=b"not empty")
    code, err = invoke(["run", "--rules", rules, "--positions", "s3://bkt/q", "--out",
                        tmp_path / "four"], tmp_path)
    assert code == 1, err
    assert "s3://bkt/q/d.csv/: a prefix or directory marker (a key ending in '/')" in err
    assert "internal error" not in err


def test_a_zero_timeout_is_refused_before_anything_is_uploaded(s3, tmp_path: Path) -> None:
    sample = ROOT / "data" / "sample"
    config = config_file(tmp_path, {**s3.storage_options(), "timeout": "0s"},
                         rules=str(sample / "rules.csv"),
                         positions=str(sample / "positions.csv"), out="s3://bkt/out")
    result = run_cli(["run", "--config", str(config)], tmp_path)
    assert result.returncode == 2, result.stderr
    assert "key storage_options.timeout: must be between 1ms and 1h, got 0s" in result.stderr
    assert names(s3) == []


def test_az_without_credentials_says_how_to_give_them_in_one_line(tmp_path: Path) -> None:
    """No key, SAS or service principal: pyarrow's DefaultAzureCredential finds none (an
    ArrowException, not an OSError); without an az command on PATH its Azure CLI probe
    printed "/bin/sh: 1: az: not found" on our stderr. The store is an endpoint on
    127.0.0.1 (a closed port): the credentials are looked for before any request."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AZURE_")}
    env.update({"PYTHONPATH": str(ROOT), "PATH": os.path.dirname(sys.executable)})
    config = config_file(tmp_path, {"azure_endpoint": f"https://127.0.0.1:{closed_port()}",
                                    "account_name": "acct"},
                         rules="az://c/rules.csv", positions="az://c/p.csv",
                         out=str(tmp_path / "out"))
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--config",
                             str(config)], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    assert time.monotonic() - started < 60
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"snim-batch: config: {config}",
        "snim-batch: error: az://c/rules.csv: no usable Azure credentials were found: give "
        "storage_options account_key or sas_token (or AZURE_STORAGE_ACCOUNT_KEY, "
        "AZURE_STORAGE_SAS_TOKEN), a service principal (AZURE_CLIENT_ID, AZURE_TENANT_ID, "
        "AZURE_CLIENT_SECRET), or run where a managed identity or `az login` provides them"]
    env["AZURE_TOKEN_CREDENTIALS"] = "bogus"  # pyarrow's Azure client aborts the process
    result = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--config",
                             str(config)], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "AZURE_TOKEN_CREDENTIALS: 'bogus' is not one of" in result.stderr or \
        "AZURE_TOKEN_CREDENTIALS: bogus is not one of" in result.stderr


def test_an_az_location_without_credentials_leaves_the_callers_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Azure CLI credential is left out of the chain (no az command) by setting
    AZURE_TOKEN_CREDENTIALS while pyarrow's client is built: it was left set in the
    caller's process for good, so that a notebook's later DefaultAzureCredential skipped
    the developer credentials (az login). The API call fails (a closed port on 127.0.0.1)
    and the environment is as it was."""
    from pipeline import SnimError, evaluate_batch

    for name in [k for k in os.environ if k.startswith("AZURE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    config = config_file(tmp_path, {"azure_endpoint": f"https://127.0.0.1:{closed_port()}",
                                    "account_name": "acct"},
                         rules="az://c/rules.csv", positions="az://c/p.csv",
                         out=str(tmp_path / "out"))
    with pytest.raises(SnimError, match="no usable Azure credentials"):
        evaluate_batch(config_file=config)
    assert "AZURE_TOKEN_CREDENTIALS" not in os.environ


@pytest.mark.parametrize("anonymous", [True, False])
def test_an_unreachable_gs_store_fails_within_the_retry_bound(
        tmp_path: Path, anonymous: bool) -> None:
    """pyarrow's GCS client retried for timeout x attempts (90 s by default; 158-174 s
    seen); it now retries for retry_timeout. A closed port on 127.0.0.1 as the store's
    endpoint (gcs_base_url): with skip_signature the request fails to connect, without it
    the credentials' token cannot be fetched; either way one line, within the bound."""
    options = {"gcs_base_url": f"http://127.0.0.1:{closed_port()}", "retry_timeout": "3s",
               "timeout": "2s", "connect_timeout": "1s", "max_retries": "1"}
    if anonymous:
        options["google_skip_signature"] = "true"
    config = config_file(tmp_path, options, rules="gs://bucket/rules.csv",
                         positions="gs://bucket/p.csv", out=str(tmp_path / "out"))
    started = time.monotonic()
    result = run_cli(["run", "--config", str(config)], tmp_path, {
        "GOOGLE_APPLICATION_CREDENTIALS": "", "GCE_METADATA_HOST": options["gcs_base_url"][7:],
        "GCE_METADATA_ROOT": options["gcs_base_url"][7:]}, timeout=120)
    took = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert took < 20, took
    said, *lines = result.stderr.strip().splitlines()
    assert said == f"snim-batch: config: {config}", result.stderr
    assert len(lines) == 1 and lines[0].startswith(
        "snim-batch: error: gs://bucket/rules.csv: "), lines
    assert ("cannot connect to the object store at http://127.0.0.1:" if anonymous
            else "no usable Google credentials were found") in lines[0], lines


@pytest.mark.parametrize("store", ["gs", "az"])
@pytest.mark.parametrize("target", ["rules", "out"])
def test_a_gs_or_az_endpoint_that_never_answers_fails_within_the_bound(
        tmp_path: Path, black_hole: str, store: str, target: str) -> None:
    """pyarrow's GCS and Azure clients take no request timeout: a socket that accepts and
    never answers held a request 120 s (GCS) or 246 s (Azure). Each request to them now has
    connect_timeout + timeout + retry_timeout (here 6 s)."""
    sample = ROOT / "data" / "sample"
    options = {"timeout": "2s", "connect_timeout": "1s", "retry_timeout": "3s",
               "max_retries": "1"}
    if store == "gs":
        options.update({"gcs_base_url": black_hole, "google_skip_signature": "true"})
    else:
        options.update({"azure_endpoint": black_hole, "account_name": "acct",
                        "account_key": "a2V5"})
    url = f"{store}://bucket/x"
    where = {"rules": str(sample / "rules.csv"), "positions": str(sample / "positions.csv"),
             "out": str(tmp_path / "out")}
    where[target] = url
    config = config_file(tmp_path, options, **where)
    started = time.monotonic()
    result = run_cli(["run", "--config", str(config)], tmp_path, timeout=120)
    took = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert 6 <= took < 20, took
    assert result.stderr.strip().splitlines() == [
        f"snim-batch: config: {config}",
        f"snim-batch: error: {url}: the object store at {black_hole} did not answer while "
        f"{'looking it up' if target == 'rules' else 'listing'} (timeout 2s, 1 retries)"]


def test_an_output_inside_another_output_is_refused_on_a_store_too(s3_env, tmp_path: Path
                                                                  ) -> None:
    """--out s3://bkt/out/sub, or a Delta root there, inside a committed output (Parquet on
    the store, or a local one for a local Delta root): refused before any work (exit 2),
    nothing written, and the output stays replaceable."""
    sample = ROOT / "data" / "sample"
    job = ["run", "--rules", sample / "rules.csv", "--positions", sample / "positions.csv"]
    assert invoke([*job, "--out", "s3://bkt/out"], tmp_path)[0] == 0
    before = sorted(names(s3_env, "out/"))
    for out, extra in (("s3://bkt/out/sub", []),
                       ("s3://bkt/out/sub", ["--format", "delta", "--run-date", "2026-11-01"])):
        code, err = invoke([*job, "--out", out, *extra], tmp_path)
        assert code == 2, err
        assert "s3://bkt/out/sub: is inside the snim-batch output s3://bkt/out, whose " in err
    assert sorted(names(s3_env, "out/")) == before
    assert invoke([*job, "--out", "s3://bkt/out", "--overwrite"], tmp_path)[0] == 0
    assert invoke([*job, "--out", tmp_path / "local"], tmp_path)[0] == 0
    code, err = invoke([*job, "--out", tmp_path / "local" / "d", "--format", "delta"], tmp_path)
    assert code == 2, err
    assert "is inside the snim-batch output" in err
    assert sorted(p.name for p in (tmp_path / "local").iterdir()) == [
        "manifest.json", "rejects.parquet", "sg_tables.parquet", "summary.parquet",
        "verdicts.parquet"]
