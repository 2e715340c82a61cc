"""pipeline.io: finding inputs, CSV row numbering, and the atomic commit of the output directory.

The atomic-commit tests run the real `snim-batch` executable and SIGKILL it at many moments
(docs/outputs.md: "a failed or killed run leaves the previous output intact and no partial
directory that looks complete"; staging directories are hidden `.NAME.partial-PID-RUNID` without a
manifest.json until the very end).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import CLI_EXE, invoke, on_small_disk
from hypothesis import given, settings
from hypothesis import strategies as st

import pipeline.io.inputs.discovery as inputs
from pipeline import kernels
from pipeline.config import config_from_dict
from pipeline.errors import InputError, OutputError
from pipeline.events import COMMITTED, WARNING, RunEvent
from pipeline.io.outputs import commit, failures, manifest, scratch
from pipeline.io.read import csv_reader, footers, formats, readers, starts
from pipeline.io.read.files import RawTable
from pipeline.io.store.run_cache import RunCache

ROOT = Path(__file__).resolve().parents[1]
EXE = ROOT / ".venv" / "bin" / "snim-batch"
if not EXE.exists():  # pragma: no cover - another layout of the virtualenv
    EXE = Path(sys.executable).parent / "snim-batch"

RULES_CSV = "rule_set_id,kind,moves\n1,,2 5\n2,nim,\n"
POSITIONS_CSV = "rule_set_id,position_id,heaps\n1,0,5 12\n1,1,2 4 7\n2,0,1 2\n"


# ---- helpers --------------------------------------------------------------------------------


def job(rules: Path, positions: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "--rules", str(rules), "--positions", str(positions), "--out", str(out),
            *extra]


def small_inputs(directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    rules, positions = directory / "rules.csv", directory / "positions.csv"
    rules.write_text(RULES_CSV)
    positions.write_text(POSITIONS_CSV)
    return rules, positions


def snapshot(directory: Path) -> dict[str, str]:
    """Every file under `directory` (relative path -> sha256)."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def run_id(out: Path) -> str:
    return json.loads((out / "manifest.json").read_text())["run_id"]


def staging_dirs(parent: Path, name: str = "out") -> list[Path]:
    return sorted(parent.glob(f".{name}.partial-*"))


def manifest_files(manifest: dict) -> dict[str, int | None]:
    """Every file a manifest's `outputs` lists (relative path -> size; None for the manifest,
    which cannot hold its own size)."""
    files: dict[str, int | None] = {}
    for entry in manifest["outputs"]:
        if entry["type"] == "directory":
            files.update({f"{entry['name']}/{f['name']}": f["size"] for f in entry["files"]})
        else:
            files[entry["name"]] = entry.get("size")
    return files


def present_files(directory: Path) -> dict[str, int]:
    """Every file under `directory` (relative path -> size)."""
    return {str(p.relative_to(directory)): p.stat().st_size
            for p in sorted(directory.rglob("*")) if p.is_file()}


def assert_no_complete_looking_leftovers(parent: Path, expected: set[str]) -> None:
    """Only `expected` non-hidden entries; no hidden directory holds a manifest.json."""
    visible = {p.name for p in parent.iterdir() if not p.name.startswith(".")}
    assert visible == expected, visible
    for hidden in parent.iterdir():
        if hidden.name.startswith(".") and hidden.is_dir():
            assert not list(hidden.rglob("manifest.json")), f"{hidden} looks complete"


# ---- resolve_inputs -------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "in"
    for rel in ["a.csv", "b.parquet", "sub/c.CSV", "sub/deeper/d.pq", ".hidden/e.csv",
                "_staging/f.csv", ".g.csv", "notes.txt", "sub/readme.md"]:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x\n")
    return root


def test_resolve_single_file(tree: Path) -> None:
    assert inputs.resolve_inputs(str(tree / "a.csv"), "rules") == [tree / "a.csv"]


def test_resolve_single_file_with_any_suffix(tree: Path) -> None:
    """A file named explicitly is taken whatever its suffix (its format is sniffed)."""
    assert inputs.resolve_inputs(str(tree / "notes.txt"), "rules") == [tree / "notes.txt"]


def test_resolve_directory_recursive_sorted_skipping_hidden(tree: Path) -> None:
    got = inputs.resolve_inputs(str(tree), "positions")
    assert got == [tree / "a.csv", tree / "b.parquet", tree / "sub/c.CSV",
                   tree / "sub/deeper/d.pq"]


def test_resolve_glob(tree: Path) -> None:
    assert inputs.resolve_inputs(str(tree / "*.csv"), "rules") == [tree / "a.csv"]
    got = inputs.resolve_inputs(str(tree / "sub" / "**" / "*.pq"), "positions")
    assert got == [tree / "sub/deeper/d.pq"]
    assert inputs.resolve_inputs(str(tree / "[ab].*"), "positions") == [tree / "a.csv",
                                                                    tree / "b.parquet"]


@pytest.mark.parametrize("spec", ["missing.csv", "nodir/", "missing/*.csv", "empty"])
def test_resolve_missing_raises_input_error_naming_it(tmp_path: Path, spec: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not an input\n")
    target = str(tmp_path / spec)
    with pytest.raises(InputError) as info:
        inputs.resolve_inputs(target, "positions")
    message = str(info.value)
    assert "positions" in message and target.rstrip("/") in message


def test_resolve_missing_via_cli_exit_1(tmp_path: Path) -> None:
    rules, _ = small_inputs(tmp_path)
    code, err = invoke(job(rules, tmp_path / "nope" / "*.parquet", tmp_path / "out"), tmp_path)
    assert code == 1
    assert str(tmp_path / "nope" / "*.parquet") in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


# ---- CSV field counts and row numbers -------------------------------------------------------


def _read_csv_text(tmp_path: Path, text: str | bytes) -> RawTable:
    path = tmp_path / "t.csv"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return readers.read_table(path)


@pytest.mark.parametrize(("body", "good_rows", "bad"), [
    # too many / too few fields; rows numbered from 0 after the header
    ("1,0,5\n1,1,5,6\n1,2,7\n1,3\n1,4,8\n", [0, 2, 4], {1: (4, 3), 3: (2, 3)}),
    # first and last data rows bad, no final newline
    ("1,0,5,5\n1,1,5\n1,2", [1], {0: (4, 3), 2: (2, 3)}),
    # every row bad
    ("1\n2\n", [], {0: (1, 3), 1: (1, 3)}),
    # a quoted field with a line break is one row; CRLF line ends
    ('1,0,"5\r\n6"\r\n1,1,7,7\r\n1,2,8\r\n', [0, 2], {1: (4, 3)}),
    # blank lines are not rows
    ("1,0,5\n\n1,1,5,9\n\n1,2,7\n", [0, 2], {1: (4, 3)}),
    # nor are lines of spaces and tabs, in any line end style, the last one unterminated
    ("1,0,5\n   \n1,1,5,9\n\t\n1,2,7\r\n \t \r\n1,3\r \r1,4,4\n  ", [0, 2, 4],
     {1: (4, 3), 3: (2, 3)}),
    (" \n1,0,5\n", [0], {}),
])
def test_csv_field_count_rows(tmp_path: Path, body: str, good_rows: list[int],
                              bad: dict[int, tuple[int, int]]) -> None:
    raw = _read_csv_text(tmp_path, "rule_set_id,position_id,heaps\n" + body)
    assert raw.row.tolist() == good_rows
    assert raw.frame.height == len(good_rows)
    assert [r for r, _, _ in raw.bad_lines] == sorted(bad)
    for row, reason, _ in raw.bad_lines:
        actual, expected = bad[row]
        fields = "field" if actual == 1 else "fields"
        assert reason == f"line has {actual} {fields}, expected {expected}", reason
    if good_rows:
        assert raw.frame["position_id"].cast(pl.Int64).to_list() == good_rows


def test_csv_field_count_rows_past_the_first_block(tmp_path: Path) -> None:
    """Row numbers stay exact in a file larger than the reader's block size."""
    bad = {0, 5, 70_000, 149_999, 150_000, 199_999}
    lines = ["rule_set_id,position_id,heaps"]
    lines += [f"1,{i},1 2 3 4 5 6 7 8" + (",9" if i in bad else "") for i in range(200_000)]
    raw = _read_csv_text(tmp_path, "\n".join(lines) + "\n")
    assert [r for r, _, _ in raw.bad_lines] == sorted(bad)
    np.testing.assert_array_equal(raw.row, raw.frame["position_id"].cast(pl.Int64).to_numpy())
    assert raw.frame.height + len(bad) == 200_000


def test_csv_field_count_rows_reach_rejects(tmp_path: Path) -> None:
    rules, _ = small_inputs(tmp_path)
    positions = tmp_path / "positions.csv"
    positions.write_text("rule_set_id,position_id,heaps\n1,0,5\n1,1,5,6\n\n1,2,7\n1,3\n")
    out = tmp_path / "out"
    code, err = invoke(job(rules, positions, out), tmp_path)
    assert code == 3, err
    rejects = pl.read_parquet(out / "rejects.parquet")
    assert rejects.select("source", "row").rows() == [(str(positions), 1), (str(positions), 3)]
    assert f"{positions} row 1" in err and f"{positions} row 3" in err
    manifest = json.loads((out / "manifest.json").read_text())
    pos = manifest["counts"]["positions"]
    assert pos["rows_read"] == 4 == pos["rows_evaluated"] + pos["rows_rejected"]


# ---- replacing an existing output -----------------------------------------------------------


def test_existing_output_replaced_only_with_overwrite(tmp_path: Path) -> None:
    rules, positions = small_inputs(tmp_path / "in")
    out = tmp_path / "job" / "out"
    assert invoke(job(rules, positions, out), tmp_path)[0] == 0
    before, first_id = snapshot(out), run_id(out)

    code, err = invoke(job(rules, positions, out), tmp_path)
    assert code == 1
    assert str(out) in err and "--overwrite" in err and "Traceback" not in err
    assert snapshot(out) == before

    code, err = invoke(job(rules, positions, out, "--overwrite"), tmp_path)
    assert code == 0, err
    assert run_id(out) != first_id
    assert_no_complete_looking_leftovers(out.parent, {"out"})
    assert staging_dirs(out.parent) == []


@pytest.mark.parametrize("kind", ["foreign-dir", "file"])
def test_overwrite_refuses_what_is_not_an_output(tmp_path: Path, kind: str) -> None:
    rules, positions = small_inputs(tmp_path / "in")
    out = tmp_path / "out"
    if kind == "file":
        out.write_text("precious\n")
    else:
        out.mkdir()
        (out / "precious.txt").write_text("precious\n")
    code, err = invoke(job(rules, positions, out, "--overwrite"), tmp_path)
    assert code == 1 and str(out) in err and "Traceback" not in err
    if kind == "file":
        assert out.read_text() == "precious\n"
    else:
        assert [p.name for p in out.iterdir()] == ["precious.txt"]


def test_failed_run_keeps_previous_output_and_leaves_no_staging(tmp_path: Path) -> None:
    rules, positions = small_inputs(tmp_path / "in")
    out = tmp_path / "job" / "out"
    assert invoke(job(rules, positions, out), tmp_path)[0] == 0
    before = snapshot(out)
    positions.write_text(POSITIONS_CSV + "1,9,x\n")
    code, _ = invoke(job(rules, positions, out, "--overwrite", "--on-bad-rows", "fail"), tmp_path)
    assert code == 1
    assert snapshot(out) == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["out"]


def test_staged_output_removes_staging_on_error(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(RuntimeError), commit.staged_output(out, "20260101T000000Z-abcdef",
                                                       False) as staging:
        (staging / "verdicts.parquet").write_bytes(b"partial")
        assert staging.name.startswith(".out.partial-") and staging.parent == tmp_path
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


# ---- what --overwrite may replace ---------------------------------------------------------


def foreign_manifest(run: str = "r1", **extra: object) -> str:
    """A manifest in the shape snim-batch writes, built by hand."""
    return json.dumps({"run_id": run, "versions": {"snim-batch": "0.1.0"}, **extra})


def refusal(out: Path, reason: str) -> str:
    return (f"{out}: exists and is not provably a snim-batch output ({reason}); refusing to "
            "replace it, nothing was written")


def test_overwrite_refuses_a_folder_whose_manifest_is_not_ours(tmp_path: Path) -> None:
    """The reported case: a manifest.json beside someone's files is not a licence to delete."""
    rules, positions = small_inputs(tmp_path / "in")
    out = tmp_path / "w"
    out.mkdir()
    (out / "manifest.json").write_text("{}\n")
    (out / "index.html").write_text("hi\n")
    before = snapshot(out)
    for extra in ([], ["--overwrite"]):
        code, err = invoke(job(rules, positions, out, *extra), tmp_path)
        assert code == 1
        assert err.strip() == "snim-batch: error: " + refusal(
            out, "its manifest.json was not written by snim-batch")
        assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "w"]


@pytest.mark.parametrize("extras, named", [
    (["notes.txt"], "notes.txt"),
    ([".DS_Store"], ".DS_Store"),
    (["sub/"], "sub/"),
    ([f"extra-{i}.txt" for i in range(1, 8)],
     "extra-1.txt, extra-2.txt, extra-3.txt, extra-4.txt, extra-5.txt and 2 more"),
])
def test_overwrite_refuses_an_output_holding_files_its_manifest_does_not_list(
        tmp_path: Path, extras: list[str], named: str) -> None:
    rules, positions = small_inputs(tmp_path / "in")
    out = tmp_path / "out"
    assert invoke(job(rules, positions, out), tmp_path)[0] == 0
    for extra in extras:
        if extra.endswith("/"):
            (out / extra).mkdir()
            (out / extra / "kept.txt").write_text("mine\n")
        else:
            (out / extra).write_text("mine\n")
    before = snapshot(out)
    code, err = invoke(job(rules, positions, out, "--overwrite"), tmp_path)
    assert code == 1
    assert err.strip() == "snim-batch: error: " + refusal(
        out, f"holds what its manifest.json does not list: {named}")
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out"]


def test_overwrite_refuses_a_listed_file_that_became_a_directory(tmp_path: Path) -> None:
    rules, positions = small_inputs(tmp_path / "in")
    out = tmp_path / "out"
    assert invoke(job(rules, positions, out), tmp_path)[0] == 0
    (out / "summary.parquet").unlink()
    (out / "summary.parquet").mkdir()
    (out / "summary.parquet" / "mine.txt").write_text("mine\n")
    code, err = invoke(job(rules, positions, out, "--overwrite"), tmp_path)
    assert code == 1
    assert refusal(out, "holds what its manifest.json does not list: summary.parquet/") in err
    assert (out / "summary.parquet" / "mine.txt").read_text() == "mine\n"


@pytest.mark.parametrize("text, reason", [
    ("not json", "unreadable manifest.json: "),
    ("[]", "its manifest.json was not written by snim-batch"),
    ('{"run_id": "r", "outputs": ["manifest.json"]}',
     "its manifest.json was not written by snim-batch"),
    ('{"run_id": "r", "versions": {"snim-batch": "0.1.0"}}',
     "its manifest.json was not written by snim-batch"),
    (foreign_manifest(outputs=["manifest.json", "../elsewhere"]),
     "its manifest.json was not written by snim-batch"),
    (foreign_manifest(outputs=[{"name": "manifest.json", "type": "link"}]),
     "its manifest.json was not written by snim-batch"),
])
def test_manifests_that_snim_batch_did_not_write(tmp_path: Path, text: str, reason: str) -> None:
    (tmp_path / "manifest.json").write_text(text)
    problem = manifest.ownership_problem(tmp_path)
    assert problem is not None and problem.startswith(reason), problem


def _output_with_part_files(out: Path, plain: tuple[str, bytes, int], part_size: int) -> None:
    """An output as Spark writes it: verdicts.parquet a directory holding part-0.parquet
    (4 bytes, listed with `part_size`), beside one plain file (name, bytes, listed size)."""
    (out / "verdicts.parquet").mkdir()
    (out / "verdicts.parquet" / "part-0.parquet").write_bytes(b"PAR1")
    name, data, size = plain
    (out / name).write_bytes(data)
    (out / "manifest.json").write_text(foreign_manifest(outputs=[
        {"name": "manifest.json", "type": "file"},
        {"name": name, "type": "file", "size": size},
        {"name": "verdicts.parquet", "type": "directory",
         "files": [{"name": "part-0.parquet", "size": part_size}]}]))


def test_a_manifest_lists_the_files_inside_directory_outputs(tmp_path: Path) -> None:
    """Spark writes verdicts.parquet as a directory of part files: each is listed, and a file
    added among them makes the directory foreign; an older manifest naming the directory
    alone (a file, in its terms) does not list its files."""
    _output_with_part_files(tmp_path, ("summary.parquet", b"PAR1PAR1", 8), part_size=4)
    assert manifest.ownership_problem(tmp_path) is None
    (tmp_path / "verdicts.parquet" / "part-1.parquet").write_bytes(b"PAR1")
    assert manifest.ownership_problem(tmp_path) == (
        "holds what its manifest.json does not list: verdicts.parquet/part-1.parquet")
    (tmp_path / "verdicts.parquet" / "part-1.parquet").unlink()
    (tmp_path / "manifest.json").write_text(foreign_manifest(
        outputs=["manifest.json", "summary.parquet", "verdicts.parquet"]))
    assert manifest.ownership_problem(tmp_path) == (
        "holds what its manifest.json does not list: verdicts.parquet/")
    (tmp_path / "manifest.json").write_text(foreign_manifest(
        outputs=["manifest.json", "summary.parquet"]))
    (tmp_path / "verdicts.parquet" / "part-0.parquet").unlink()
    (tmp_path / "verdicts.parquet").rmdir()
    assert manifest.ownership_problem(tmp_path) is None  # an older manifest of plain files


@pytest.mark.parametrize("name", ["summary.parquet", "verdicts.parquet"])
def test_overwrite_refuses_an_output_whose_listed_file_changed_size(tmp_path: Path,
                                                                    name: str) -> None:
    """A user who put a file of their own in place of a listed one (same name, another size)
    keeps it: the size the manifest records is part of the proof."""
    rules, positions = small_inputs(tmp_path / "in")
    out = tmp_path / "out"
    assert invoke(job(rules, positions, out), tmp_path)[0] == 0
    listed = {e["name"]: e for e in json.loads((out / "manifest.json").read_text())["outputs"]}
    (out / name).write_bytes(b"mine" * 8)
    before = snapshot(out)
    code, err = invoke(job(rules, positions, out, "--overwrite"), tmp_path)
    assert code == 1
    assert err.strip() == "snim-batch: error: " + refusal(
        out, f"files changed size since its manifest.json listed them: {name} (32 bytes, "
             f"listed with {listed[name]['size']})")
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out"]


def test_sizes_are_checked_inside_directory_outputs_too(tmp_path: Path) -> None:
    _output_with_part_files(tmp_path, ("notes.txt", b"mine", 3), part_size=5)
    assert manifest.ownership_problem(tmp_path) == (
        "files changed size since its manifest.json listed them: notes.txt (4 bytes, listed "
        "with 3), verdicts.parquet/part-0.parquet (4 bytes, listed with 5)")
    (tmp_path / "extra").write_bytes(b"")
    assert manifest.ownership_problem(tmp_path) == (
        "holds what its manifest.json does not list: extra; files changed size since its "
        "manifest.json listed them: notes.txt (4 bytes, listed with 3), "
        "verdicts.parquet/part-0.parquet (4 bytes, listed with 5)")


@pytest.mark.parametrize("size", ["4", -4, 4.0, True, [4]])
def test_a_size_that_is_not_a_byte_count_is_no_manifest_of_ours(tmp_path: Path,
                                                                size: object) -> None:
    (tmp_path / "a.parquet").write_bytes(b"PAR1")
    (tmp_path / "manifest.json").write_text(foreign_manifest(outputs=[
        {"name": "manifest.json", "type": "file"},
        {"name": "a.parquet", "type": "file", "size": size}]))
    assert manifest.ownership_problem(tmp_path) == (
        "its manifest.json was not written by snim-batch")


def test_the_manifest_lists_every_output_file_with_its_size(tmp_path: Path) -> None:
    rules, positions = small_inputs(tmp_path / "in")
    out = tmp_path / "out"
    assert invoke(job(rules, positions, out), tmp_path)[0] == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert [e["name"] for e in manifest["outputs"]] == [
        "manifest.json", "rejects.parquet", "sg_tables.parquet", "summary.parquet",
        "verdicts.parquet"]
    assert all(e["type"] == "file" for e in manifest["outputs"])
    assert_complete_output(out)


def _replacement(staging: Path) -> None:
    (staging / "new.txt").write_text("new\n")
    (staging / "manifest.json").write_text(foreign_manifest(outputs=[
        {"name": "manifest.json", "type": "file"}, {"name": "new.txt", "type": "file"}]))


def test_an_output_that_gains_a_file_during_the_run_is_not_replaced(tmp_path: Path) -> None:
    """Checked again at the commit: a file that appeared while the run worked stops it."""
    rules, positions = small_inputs(tmp_path / "in")
    out = tmp_path / "job" / "out"
    assert invoke(job(rules, positions, out), tmp_path)[0] == 0
    before = snapshot(out)
    with pytest.raises(OutputError) as caught, \
            commit.staged_output(out, "20260101T000000Z-abcdef", True) as staging:
        (out / "added-meanwhile.txt").write_text("mine\n")
        _replacement(staging)
    assert str(caught.value) == refusal(
        out, "holds what its manifest.json does not list: added-meanwhile.txt")
    assert snapshot(out) == {**before,
                             "added-meanwhile.txt": hashlib.sha256(b"mine\n").hexdigest()}
    assert sorted(p.name for p in out.parent.iterdir()) == ["out"]


def test_an_old_output_that_gains_a_file_at_the_swap_is_kept_not_deleted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checked again right before deletion: a file that appears between the commit's check
    and the atomic exchange leaves the swapped-out old output kept under a hidden name, and
    the user told."""
    rules, positions = small_inputs(tmp_path / "in")
    out = tmp_path / "job" / "out"
    assert invoke(job(rules, positions, out), tmp_path)[0] == 0
    before = snapshot(out)
    real_exchange = commit._exchange

    def exchange_after_a_write(a: Path, b: Path) -> bool:
        (out / "added-meanwhile.txt").write_text("mine\n")
        return real_exchange(a, b)

    monkeypatch.setattr(commit, "_exchange", exchange_after_a_write)
    notices: list[str] = []
    kinds: list[str] = []

    def told(event: RunEvent) -> None:
        kinds.append(event.kind)
        if event.kind == WARNING:
            notices.append(event.message)

    with commit.staged_output(out, "20260101T000000Z-abcdef", True, told) as staging:
        _replacement(staging)
    assert kinds == [COMMITTED, WARNING]  # in place first, then what became of the old one
    kept = out.parent / ".out.kept-20260101T000000Z-abcdef"
    assert snapshot(kept) == {**before,
                              "added-meanwhile.txt": hashlib.sha256(b"mine\n").hexdigest()}
    assert (out / "new.txt").read_text() == "new\n"
    assert notices == [
        f"{out}: the replaced output is not provably a snim-batch output any more (holds what "
        f"its manifest.json does not list: added-meanwhile.txt), so it was not deleted: it is "
        f"kept as {kept}"]
    assert sorted(p.name for p in out.parent.iterdir()) == [kept.name, "out"]


def test_a_stale_output_that_is_not_provably_ours_is_kept_and_the_user_told(
        tmp_path: Path) -> None:
    """A killed run's hidden leftover holding a complete output plus a file its manifest does
    not list is not deleted by the next run's clean-up."""
    rules, positions = small_inputs(tmp_path / "in")
    assert invoke(job(rules, positions, tmp_path / "first"), tmp_path)[0] == 0
    parent = tmp_path / "job"
    parent.mkdir()
    stale = parent / f".out.partial-{_dead_pid()}-20260101T000000Z-abcdef"
    (tmp_path / "first").rename(stale)
    (stale / "mine.txt").write_text("mine\n")
    expected = snapshot(stale)
    code, err = invoke(job(rules, positions, parent / "out"), tmp_path)
    assert code == 0, err
    kept = parent / ".out.kept-20260101T000000Z-abcdef"
    assert snapshot(kept) == expected
    assert (f"snim-batch: warning: {parent / 'out'}: the output left by an interrupted run at "
            f"{stale} is not provably a snim-batch output any more (holds what its "
            f"manifest.json does not list: mine.txt), so it was not deleted: it is kept as "
            f"{kept}") in err
    assert sorted(p.name for p in parent.iterdir()) == [kept.name, "out"]


@pytest.mark.parametrize("failing", ["missing positions", "bad rows under fail"])
def test_a_run_that_fails_still_says_where_it_kept_a_leftover_output(tmp_path: Path,
                                                                    failing: str) -> None:
    """The leftover is kept aside before the run reads its inputs: a run that then fails
    (exit 1) must still tell where the user's files now are."""
    rules, positions = small_inputs(tmp_path / "in")
    assert invoke(job(rules, positions, tmp_path / "first"), tmp_path)[0] == 0
    parent = tmp_path / "job"
    parent.mkdir()
    stale = parent / f".out.partial-{_dead_pid()}-20260101T000000Z-abcdef"
    (tmp_path / "first").rename(stale)
    (stale / "mine.txt").write_text("mine\n")
    expected = snapshot(stale)
    extra: list[str] = []
    if failing == "missing positions":
        positions = tmp_path / "in" / "nowhere.csv"
    else:
        positions.write_text("rule_set_id,position_id,heaps\n1,0,x\n")
        extra = ["--on-bad-rows", "fail"]
    code, err = invoke(job(rules, positions, parent / "out", *extra), tmp_path)
    assert code == 1, err
    kept = parent / ".out.kept-20260101T000000Z-abcdef"
    assert snapshot(kept) == expected
    lines = err.strip().splitlines()
    assert lines[0] == (
        f"snim-batch: warning: {parent / 'out'}: the output left by an interrupted run at "
        f"{stale} is not provably a snim-batch output any more (holds what its manifest.json "
        f"does not list: mine.txt), so it was not deleted: it is kept as {kept}")
    assert lines[1].startswith("snim-batch: error: ")
    assert sorted(p.name for p in parent.iterdir()) == [kept.name]


# ---- a symbolic link as --out ---------------------------------------------------------------


def test_a_link_to_an_output_is_followed_and_stays_a_link(tmp_path: Path) -> None:
    rules, positions = small_inputs(tmp_path / "in")
    target = tmp_path / "real" / "out"
    assert invoke(job(rules, positions, target), tmp_path)[0] == 0
    first = run_id(target)
    link = tmp_path / "link"
    link.symlink_to(target)
    code, err = invoke(job(rules, positions, link), tmp_path)
    assert code == 1
    assert err.strip() == (f"snim-batch: error: {link} (a link to {target}): output already "
                           "exists (pass --overwrite to replace it)")
    assert run_id(target) == first
    code, err = invoke(job(rules, positions, link, "--overwrite"), tmp_path)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert run_id(target) != first
    assert_complete_output(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "link", "real"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["out"]


def test_a_chain_of_relative_links_is_followed(tmp_path: Path) -> None:
    rules, positions = small_inputs(tmp_path / "in")
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "hop").symlink_to("../real/out")
    (tmp_path / "link").symlink_to("real/hop")
    for _ in range(2):
        code, err = invoke(job(rules, positions, tmp_path / "link", "--overwrite"), tmp_path)
        assert code == 0, err
        assert_complete_output(tmp_path / "real" / "out")
    assert os.readlink(tmp_path / "link") == "real/hop"
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["hop", "out"]


def test_a_dangling_link_commits_at_the_path_it_names(tmp_path: Path) -> None:
    rules, positions = small_inputs(tmp_path / "in")
    link = tmp_path / "link"
    link.symlink_to("not/yet/out")
    code, err = invoke(job(rules, positions, link), tmp_path)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == "not/yet/out"
    assert_complete_output(tmp_path / "not" / "yet" / "out")
    assert sorted(p.name for p in (tmp_path / "not" / "yet").iterdir()) == ["out"]


def test_a_link_to_a_file_or_a_loop_is_refused(tmp_path: Path) -> None:
    rules, positions = small_inputs(tmp_path / "in")
    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    to_file = tmp_path / "to-file"
    to_file.symlink_to(precious)
    code, err = invoke(job(rules, positions, to_file, "--overwrite"), tmp_path)
    assert code == 1
    assert err.strip() == (f"snim-batch: error: {to_file} (a link to {precious}): exists and "
                           "is not a directory; refusing to replace it")
    assert precious.read_text() == "precious\n" and to_file.is_symlink()
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    code, err = invoke(job(rules, positions, tmp_path / "a", "--overwrite"), tmp_path)
    assert code == 1 and "does not resolve" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "in", "precious.txt",
                                                          "to-file"]


def test_the_root_directory_is_no_output(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="the root directory cannot be an output"), \
            commit.staged_output(Path("/"), "r", True):
        pass


# ---- two runs racing for a fresh output ------------------------------------------------------


def _race(out: Path, overwrite: bool) -> list[str]:
    """Two staged outputs committed to `out` at once, each from its own thread; returns
    "ok" or the error message for each."""
    results = ["", ""]

    def racer(i: int) -> None:
        try:
            with commit.staged_output(out, f"20260101T000000Z-race{i}", overwrite) as staging:
                (staging / "data.txt").write_text(f"racer {i}\n")
                (staging / "manifest.json").write_text(foreign_manifest(f"race{i}", outputs=[
                    {"name": "data.txt", "type": "file", "size": 8},
                    {"name": "manifest.json", "type": "file"}]))
            results[i] = "ok"
        except OutputError as exc:
            results[i] = str(exc)

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


@pytest.mark.parametrize("renameat2", [True, False], ids=["renameat2", "plain-rename"])
@pytest.mark.parametrize("overwrite", [False, True], ids=["no-overwrite", "overwrite"])
def test_two_runs_racing_for_a_fresh_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            renameat2: bool, overwrite: bool) -> None:
    """Both runs see no output, then both commit at once (held at a barrier just before the
    rename): one creates it; the other finds an existing output, as if it had been there."""
    if not renameat2:
        monkeypatch.setattr(commit, "_renameat2", lambda source, target, flags: False)
    real_create = commit.rename_noreplace
    barrier = threading.Barrier(2, timeout=30)

    def create_together(staging: Path, target: Path) -> None:
        barrier.wait()
        real_create(staging, target)

    monkeypatch.setattr(commit, "rename_noreplace", create_together)
    for attempt in range(25):
        out = tmp_path / f"out{attempt}"
        results = _race(out, overwrite)
        barrier.reset()
        if overwrite:
            assert results == ["ok", "ok"], results
        else:
            assert sorted(results) == [
                f"{out}: output already exists (pass --overwrite to replace it)", "ok"], results
        winner = json.loads((out / "manifest.json").read_text())["run_id"]
        assert (out / "data.txt").read_text() == f"racer {winner[-1]}\n"
        assert sorted(p.name for p in out.iterdir()) == ["data.txt", "manifest.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"out{i}" for i in range(25))


# ---- failed writes ---------------------------------------------------------------------------


def test_a_failed_write_names_the_output_the_file_and_the_cause(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(OutputError) as caught, commit.staged_output(out, "r", False) as staging:
        commit.write_parquet(pl.DataFrame({"a": [1]}), staging / "gone" / "summary.parquet")
    assert str(caught.value) == (f"{out}: no such file or directory while writing "
                                 "summary.parquet; nothing was written")
    assert list(tmp_path.iterdir()) == []


def test_storage_errors_reported_by_spark_are_output_errors(tmp_path: Path) -> None:
    """Spark's writes run the job too: only a storage error in its message is the output's."""
    java = Exception("An error occurred while calling o123.parquet.\n: org.apache.spark."
                     "SparkException: Job aborted.\nCaused by: java.io.IOException: No space "
                     "left on device")
    failure = failures.storage_failure("verdicts.parquet", java)
    assert failure is not None
    out = tmp_path / "out"
    with pytest.raises(OutputError) as caught, commit.staged_output(out, "r", False):
        raise failure
    assert str(caught.value) == (f"{out}: no space left on device while writing "
                                 "verdicts.parquet; nothing was written (free space or choose "
                                 "another --out)")
    assert failures.storage_failure("verdicts.parquet", Exception("ZeroDivisionError")) is None
    assert list(tmp_path.iterdir()) == []


# ---- stale staging directories ----------------------------------------------------------------


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_next_run_removes_stale_staging_dirs(tmp_path: Path) -> None:
    rules, positions = small_inputs(tmp_path / "in")
    parent = tmp_path / "job"
    parent.mkdir()
    stale = parent / f".out.partial-{_dead_pid()}-20260101T000000Z-abcdef"
    stale.mkdir()
    (stale / "verdicts.parquet").write_bytes(b"partial")
    alive = parent / f".out.partial-{os.getpid()}-20260101T000000Z-123456"
    alive.mkdir()
    code, err = invoke(job(rules, positions, parent / "out"), tmp_path)
    assert code == 0, err
    assert alive.exists()  # a live process's staging directory is left alone
    assert not stale.exists(), "stale staging directory of a dead run was not removed"


def test_a_staging_named_for_this_pid_but_older_than_this_process_is_not_ours(
        tmp_path: Path) -> None:
    """In a container every run is pid 1: a killed run's staging names the pid of the next
    run's own process. A process takes an entry named with its own pid for its own only if
    it started before the entry last changed; another live pid keeps its entry whatever the
    times (a clock step must never make a live run's staging look dead)."""
    entry = tmp_path / ".out.partial-1-20260101T000000Z-abcdef"
    entry.mkdir()
    assert commit.made_by_live_process(entry, os.getpid())  # ours: made after we started
    time.sleep(commit.START_SLACK_S + 1.5)
    check = ("import os, sys; from pathlib import Path; from pipeline.io.outputs import commit; "
             "entry = Path(sys.argv[1]); mine = Path(sys.argv[2]); mine.mkdir(); "
             "print(commit.made_by_live_process(entry, os.getpid()), "
             "commit.made_by_live_process(mine, os.getpid()), "
             "commit.made_by_live_process(entry, os.getppid()))")
    later = subprocess.run([sys.executable, "-c", check, str(entry), str(tmp_path / "mine")],
                           capture_output=True, text=True, timeout=60)
    assert later.stdout.split() == ["False", "True", "True"], later.stderr


def test_a_staging_kept_fresh_by_its_live_run_looks_live_to_a_run_of_the_same_pid(
        tmp_path: Path) -> None:
    """Two containers sharing a volume, both runs pid 1: the later one took the earlier
    one's staging, unchanged since before it started (the verdicts held in memory), for a
    dead run's and removed it; the earlier run then failed "no such file or directory".
    A run now keeps its staging changing while it works in it (`kept_fresh`): a process
    started long after the directory was made, whose own pid it names, leaves it."""
    entry = tmp_path / ".out.partial-1-20260101T000000Z-abcdef"
    entry.mkdir()
    check = ("import os, sys; from pathlib import Path; from pipeline.io.outputs import commit; "
             "print(commit.made_by_live_process(Path(sys.argv[1]), os.getpid()))")
    with commit.kept_fresh(entry):
        time.sleep(commit.START_SLACK_S + 1.5)
        later = subprocess.run([sys.executable, "-c", check, str(entry)],
                               capture_output=True, text=True, timeout=60)
    assert later.stdout.split() == ["True"], later.stderr
    time.sleep(commit.START_SLACK_S + 1.5)  # its run gone: no longer kept fresh
    after = subprocess.run([sys.executable, "-c", check, str(entry)],
                           capture_output=True, text=True, timeout=60)
    assert after.stdout.split() == ["False"], after.stderr


def test_stale_staging_of_an_output_named_like_a_glob_is_removed(tmp_path: Path) -> None:
    rules, positions = small_inputs(tmp_path / "in")
    parent = tmp_path / "job"
    parent.mkdir()
    stale = parent / f".res[1].partial-{_dead_pid()}-20260101T000000Z-abcdef"
    stale.mkdir()
    (stale / "verdicts.parquet").write_bytes(b"partial")
    code, err = invoke(job(rules, positions, parent / "res[1]"), tmp_path)
    assert code == 0, err
    assert sorted(p.name for p in parent.iterdir()) == ["res[1]"]


# ---- SIGKILL at any moment --------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A job that takes a second or two: 400k wide positions in Parquet."""
    base = tmp_path_factory.mktemp("big")
    rng = np.random.default_rng(7)
    n = 400_000
    rules = base / "rules.parquet"
    pl.DataFrame({"rule_set_id": [1, 2, 3], "kind": ["subtraction", "subtraction", "nim"],
                  "moves": [[2, 5], [1, 3, 4], None]},
                 schema={"rule_set_id": pl.Int64, "kind": pl.String,
                         "moves": pl.List(pl.Int64)}).write_parquet(rules)
    sizes = rng.integers(1, 6, n)
    heaps = (pl.DataFrame({"v": rng.integers(0, 1_000_000, int(sizes.sum())),
                           "g": np.repeat(np.arange(n), sizes)})
             .group_by("g", maintain_order=True).agg(pl.col("v"))["v"].alias("heaps"))
    positions = base / "positions.parquet"
    pl.DataFrame({"rule_set_id": rng.integers(1, 4, n), "position_id": np.arange(n),
                  "heaps": heaps}).write_parquet(positions)
    return rules, positions


# a phase's end as --verbose logs it outside a terminal: "TIMESTAMP snim-batch: info: write done
# in 0.12s"
PROGRESS = re.compile(r"^\S+Z snim-batch: info: (\w+) done in ")


def _run_and_kill(args: list[str], where: Path, trigger: str | int, delay: float,
                  sig: signal.Signals = signal.SIGKILL) -> int:
    """`_run_and_signal`'s exit status alone."""
    return _run_and_signal(args, where, trigger, delay, sig)[0]


def _wait_until_caught(proc: subprocess.Popen, *sigs: signal.Signals) -> None:
    """Until `proc` has a handler for every one of `sigs` (its SigCgt mask in /proc)."""
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        status = Path(f"/proc/{proc.pid}/status").read_text()
        mask = int(next(line.split()[1] for line in status.splitlines()
                        if line.startswith("SigCgt:")), 16)
        if all(mask >> (sig - 1) & 1 for sig in sigs):
            return
        time.sleep(0.002)
    raise AssertionError(f"the process set no handlers for {sigs} "
                         f"({'it ended' if proc.poll() is not None else 'in 60 s'})")


def _run_and_signal(args: list[str], where: Path, trigger: str | int, delay: float,
                    sig: signal.Signals) -> tuple[int, str]:
    """Start the executable; send it `sig` `delay` s after `trigger` (a phase name, the n-th
    progress line, or "start": once the process catches SIGTERM and SIGHUP, i.e. the entry
    has set its stop handlers, before the CLI is imported). Returns the exit status (-9 when
    killed) and stderr."""
    proc = subprocess.Popen([str(EXE), *args, "--verbose"], cwd=where,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    fired = threading.Event()
    seen: list[str] = []
    lines: list[str] = []

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            m = PROGRESS.match(line)
            if m:
                seen.append(m.group(1))
                if trigger == m.group(1) or trigger == len(seen):
                    fired.set()
        fired.set()  # end of output: the run is over

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    if trigger == "start":
        _wait_until_caught(proc, signal.SIGTERM, signal.SIGHUP)
    else:
        fired.wait(timeout=120)
    time.sleep(delay)
    if proc.poll() is None:
        proc.send_signal(sig)
    status = proc.wait(timeout=120)
    reader.join(timeout=10)
    return status, "".join(lines)


def assert_complete_output(out: Path) -> None:
    """A committed output: the manifest lists exactly the files present, and the verdicts are
    those of the run the manifest describes (winning-move columns iff the config asked)."""
    manifest = json.loads((out / "manifest.json").read_text())
    listed, present = manifest_files(manifest), present_files(out)
    assert listed.keys() == present.keys()
    assert {k: v for k, v in listed.items() if k != "manifest.json"} == {
        k: v for k, v in present.items() if k != "manifest.json"}
    assert listed["manifest.json"] is None
    columns = pl.scan_parquet(out / "verdicts.parquet").collect_schema().names()
    assert ("move_heap" in columns) == manifest["config"]["winning_moves"]


@pytest.mark.slow
def test_sigkill_at_any_moment_keeps_previous_output(tmp_path: Path,
                                                     big_inputs: tuple[Path, Path]) -> None:
    """Killed at eight moments (startup, reading, evaluating, writing): the output directory is
    always either the previous one, byte for byte, or (killed after the commit) the new one,
    complete; never a mixture, never missing; beside it only hidden staging directories."""
    rules, positions = big_inputs
    parent = tmp_path / "job"
    out = parent / "out"
    first = subprocess.run([str(EXE), *job(rules, positions, out, "--winning-moves")],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    baseline, baseline_id = snapshot(out), run_id(out)

    rnd = random.Random(20260101)
    schedule: list[tuple[str | int, float]] = [
        ("start", 0.2), ("start", rnd.uniform(0.4, 0.8)), (1, 0.0), (2, rnd.uniform(0, 0.2)),
        ("write", 0.0), ("write", rnd.uniform(0.005, 0.05)), ("write", rnd.uniform(0.03, 0.1)),
        ("write", rnd.uniform(0.1, 0.3)),
    ]
    killed_before_commit = 0
    for i, (trigger, delay) in enumerate(schedule):
        # alternate the output shape so that a committed run is told apart from the previous
        moves = "--no-winning-moves" if i % 2 == 0 else "--winning-moves"
        status = _run_and_kill(job(rules, positions, out, moves, "--overwrite"), tmp_path,
                               trigger, delay)
        where = f"kill at {trigger}+{delay:.3f}s (status {status})"
        assert status in (0, -signal.SIGKILL), where
        assert out.is_dir(), f"output gone after {where}"
        assert_complete_output(out)
        if run_id(out) == baseline_id:
            assert status == -signal.SIGKILL, where
            assert snapshot(out) == baseline, f"previous output changed by {where}"
            killed_before_commit += 1
        else:  # committed before the kill (or finished): the new output is the baseline now
            baseline, baseline_id = snapshot(out), run_id(out)
        # nothing beside the output that a reader could take for one (a hidden staging dir
        # holding a manifest.json, possible in a short window at the commit, is checked
        # deterministically by test_kill_at_commit_leaves_no_complete_looking_staging)
        assert {p.name for p in parent.iterdir() if not p.name.startswith(".")} == {"out"}
        for hidden in parent.iterdir():
            if hidden.name != "out":
                assert re.fullmatch(r"\.out\.partial-\d+-.+", hidden.name), hidden.name
    assert killed_before_commit >= 4, f"only {killed_before_commit} runs killed before commit"


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code", "said"), [
    (signal.SIGINT, 130, "interrupted"),
    (signal.SIGTERM, 143, "stopped by SIGTERM"),
    (signal.SIGHUP, 129, "stopped by SIGHUP"),
], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stop_signal_leaves_the_previous_output_and_no_staging(
        tmp_path: Path, big_inputs: tuple[Path, Path], sig: signal.Signals, code: int,
        said: str) -> None:
    """Ctrl-C, or a scheduler's SIGTERM (timeout, cancel), or SIGHUP at three moments of a run
    (reading rules, evaluating, sorting): exit 128 + the signal with one line saying nothing
    was written, no traceback, the previous output byte for byte, no staging left behind."""
    rules, positions = big_inputs
    parent = tmp_path / "job"
    out = parent / "out"
    first = subprocess.run([str(EXE), *job(rules, positions, out)], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    baseline = snapshot(out)
    for trigger, delay in (("start", 0.0), (1, 0.0), (2, 0.05)):
        status, err = _run_and_signal(job(rules, positions, out, "--overwrite"), tmp_path,
                                      trigger, delay, sig)
        where = f"{sig.name} at {trigger}+{delay}s"
        assert status == code, (where, err)
        assert err.splitlines()[-1] == f"snim-batch: {said}; nothing was written", (where, err)
        assert "Traceback" not in err and "internal error" not in err, (where, err)
        assert snapshot(out) == baseline, where
        assert staging_dirs(parent) == [], where


def _slow_to_checksum(path: Path, gap: int = 256 << 30) -> Path:
    """A valid Parquet file of two positions with `gap` bytes of hole (a sparse file: no disk
    space) between its data and its footer: read in milliseconds, checksummed in minutes."""
    pl.DataFrame({"rule_set_id": [1, 1], "position_id": [0, 1], "heaps": [[3], [4]]},
                 schema={"rule_set_id": pl.Int64, "position_id": pl.Int64,
                         "heaps": pl.List(pl.Int64)}).write_parquet(path)
    data = path.read_bytes()
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    with path.open("wb") as out:
        out.write(data[:footer])
        out.seek(footer + gap)
        out.write(data[footer:])
    return path


def test_a_failing_or_stopped_run_does_not_wait_for_its_input_checksums(tmp_path: Path) -> None:
    """The checksums (for the manifest) are computed in the background; a run that fails
    (--on-bad-rows fail) or is stopped (SIGTERM once its rows are evaluated) ends at once
    instead of hashing the rest of a large input: a scheduler's grace period is short."""
    rules = tmp_path / "rules.csv"
    rules.write_text("rule_set_id,kind,moves\n1,,2 5\n")
    positions = tmp_path / "positions"
    positions.mkdir()
    _slow_to_checksum(positions / "a.parquet")
    _slow_to_checksum(positions / "b.parquet")  # the same ids again
    failed = subprocess.run([str(EXE), "run", "--rules", str(rules), "--positions",
                             str(positions), "--out", str(tmp_path / "out"), "--on-bad-rows",
                             "fail", "--quiet"], capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1, failed.stderr
    assert "4 input rows failed validation" in failed.stderr
    (positions / "b.parquet").unlink()
    status, err = _run_and_signal(job(rules, positions, tmp_path / "out"), tmp_path, "finish",
                                  0.3, signal.SIGTERM)
    assert status == 143, err
    assert err.splitlines()[-1] == "snim-batch: stopped by SIGTERM; nothing was written"
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_next_run_cleans_staging_left_by_sigkill(tmp_path: Path,
                                                 big_inputs: tuple[Path, Path]) -> None:
    rules, positions = big_inputs
    parent = tmp_path / "job"
    out = parent / "out"
    args = job(rules, positions, out, "--overwrite")
    status = _run_and_kill(args, tmp_path, 1, 0.0)
    assert status == -signal.SIGKILL
    assert len(staging_dirs(parent)) == 1 and not out.exists()
    small_rules, small_positions = small_inputs(tmp_path / "small")
    code, err = invoke(job(small_rules, small_positions, out, "--overwrite"), tmp_path)
    assert code == 0, err
    assert staging_dirs(parent) == [], "the killed run's staging directory is still there"


# Kills at two exact moments of the commit, simulated in a child process: the real functions
# run, then the process SIGKILLs itself at the chosen instant.
DRIVER = r"""
import os, signal, sys
from pipeline.io.outputs import commit

def die():
    os.kill(os.getpid(), signal.SIGKILL)

mode = sys.argv[1]
if mode == "manifest-written":
    # the staging directory is complete (manifest.json written, files synced), not yet renamed
    if not hasattr(commit, "_fsync_tree"):
        sys.exit(99)
    real_fsync_tree = commit._fsync_tree
    def fsync_tree(root):
        real_fsync_tree(root)
        die()
    commit._fsync_tree = fsync_tree
elif mode == "after-exchange":
    # the exchange has swapped the new output in: the staging name now holds the old output
    if not hasattr(commit, "_exchange"):
        sys.exit(99)
    real_rmtree = commit.shutil.rmtree
    def rmtree(path, *a, **k):
        if ".partial-" in str(path) and not k.get("ignore_errors"):
            die()
        return real_rmtree(path, *a, **k)
    commit.shutil.rmtree = rmtree
elif mode == "no-exchange":
    # a system without renameat2(RENAME_EXCHANGE): killed between the two renames
    if not hasattr(commit, "_exchange"):
        sys.exit(99)
    commit._exchange = lambda a, b: False
    real_rename = os.rename
    def rename(a, b):
        real_rename(a, b)
        die()
    commit.os.rename = rename
from pipeline.cli import app
sys.argv = ["snim-batch", *sys.argv[2:]]
app()
"""


def _simulated_kill(tmp_path: Path, mode: str) -> tuple[Path, dict[str, str], str]:
    rules, positions = small_inputs(tmp_path / "in")
    parent = tmp_path / "job"
    out = parent / "out"
    assert invoke(job(rules, positions, out), tmp_path)[0] == 0
    before, before_id = snapshot(out), run_id(out)
    proc = subprocess.run([sys.executable, "-c", DRIVER, mode,
                           *job(rules, positions, out, "--overwrite")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    if proc.returncode == 99:
        pytest.skip("the commit no longer has the internals this simulation patches")
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    return out, before, before_id


def assert_leftovers_complete_or_unmarked(parent: Path, out: Path) -> None:
    """Leftovers are hidden; one holding a manifest.json is a whole output (every file its
    manifest lists exists), never a partial one; the next run's clean-up removes them."""
    visible = {p.name for p in parent.iterdir() if not p.name.startswith(".")}
    assert visible == {"out"}, visible
    for hidden in parent.iterdir():
        if hidden.is_dir() and (hidden / "manifest.json").exists():
            listed = manifest_files(json.loads((hidden / "manifest.json").read_text()))
            assert all((hidden / name).exists() for name in listed), f"{hidden} is partial"
    commit._remove_stale_staging(out)
    assert sorted(p.name for p in parent.iterdir()) == ["out"]


@pytest.mark.parametrize("moment", ["manifest-written", "after-exchange"])
def test_kill_at_commit_keeps_a_complete_output_in_place(tmp_path: Path, moment: str) -> None:
    """Killed just before or just after the atomic exchange, `out` is the old or the new
    output, whole; the staging directory left beside it is hidden and removed next run."""
    out, before, before_id = _simulated_kill(tmp_path, moment)
    assert out.is_dir()
    if moment == "manifest-written":
        assert snapshot(out) == before and run_id(out) == before_id
    else:
        assert run_id(out) != before_id  # the new output is in place
        assert_complete_output(out)
    assert_leftovers_complete_or_unmarked(out.parent, out)


def test_kill_between_fallback_renames_is_repaired_by_the_next_run(tmp_path: Path) -> None:
    """Without renameat2 (non-Linux) the commit takes two renames; killed between them, the
    previous output waits under a hidden name and the next run puts it back."""
    out, before, before_id = _simulated_kill(tmp_path, "no-exchange")
    commit._remove_stale_staging(out)
    assert out.is_dir(), "the previous output was not restored"
    assert snapshot(out) == before and run_id(out) == before_id
    assert sorted(p.name for p in out.parent.iterdir()) == ["out"]


def test_renameat2_exchange_available_here(tmp_path: Path) -> None:
    """The kill tests above exercise the exchange path; make sure it is the one in use."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    assert commit._exchange(a, b)
    assert (b / "x").read_text() == "a"


def test_an_empty_output_directory_needs_no_overwrite(tmp_path: Path) -> None:
    """A directory made ready (empty) for the run is filled; a non-empty one is protected."""
    rules, positions = small_inputs(tmp_path / "in")
    out = tmp_path / "job" / "out"
    out.mkdir(parents=True)
    code, err = invoke(job(rules, positions, out), tmp_path)
    assert code == 0, err
    assert (out / "manifest.json").exists()
    code, err = invoke(job(rules, positions, out), tmp_path)
    assert code == 1 and "--overwrite" in err


def test_a_replaced_output_keeps_its_directorys_group_and_mode(tmp_path: Path) -> None:
    """An output is staged beside its directory and renamed over it: a directory made ready
    for a group (setgid, group-writable, another group) stayed so only until the first run,
    and each `--overwrite` reset the last night's. Now the new directory takes the old one's
    group (its files too, through the setgid bit) and mode, but for its owner's rights: a
    read-only output is replaced, and removed, night after night with nothing left."""
    rules, positions = small_inputs(tmp_path / "in")
    out = tmp_path / "shared"
    out.mkdir()
    group = 12345 if os.geteuid() == 0 else next(
        (g for g in os.getgroups() if g != os.getegid()), os.getegid())
    os.chown(out, -1, group)
    os.chmod(out, 0o2770)
    for extra in ((), ("--overwrite",)):
        code, err = invoke(job(rules, positions, out, *extra), tmp_path)
        assert code == 0, err
        assert (os.stat(out).st_mode & 0o7777, os.stat(out).st_gid) == (0o2770, group)
        assert {os.stat(f).st_gid for f in out.iterdir()} == {group}
    os.chmod(out, 0o2555)  # read-only: its owner keeps every right, to empty it each night
    for _ in range(2):
        code, err = invoke(job(rules, positions, out, "--overwrite"), tmp_path)
        assert code == 0, err
        assert "warning" not in err
        assert os.stat(out).st_mode & 0o7777 == 0o2755
        assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "shared"]


def test_the_working_directory_is_no_output(tmp_path: Path) -> None:
    """`--out .` from an empty directory (or `--out ..`) put the output in place by renaming
    over the directory the shell stands in, leaving it in a removed directory (every later
    command failed there): refused, nothing written; from outside it is filled."""
    rules, positions = small_inputs(tmp_path / "in")
    night = tmp_path / "night"
    (night / "sub").mkdir(parents=True)
    for where, out in ((night, "."), (night / "sub", "..")):
        code, err = invoke(job(rules, positions, out), where)
        assert code == 1, err
        shown = night if out == "." else night / "sub" / ".."
        assert err == (f"snim-batch: error: {shown}: is the current directory or holds it, "
                       "and the output is put in place by renaming a directory over it, which "
                       "would leave this shell in a removed directory; run from outside it "
                       "(cd ..); refusing to replace it, nothing was written\n")
        assert sorted(p.name for p in night.iterdir()) == ["sub"]
    (night / "sub").rmdir()
    code, err = invoke(job(rules, positions, "night"), tmp_path)
    assert code == 0, err


# ---- a full or read-only file system (a real small tmpfs) ------------------------------------


def disk_job(rules: Path, positions: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "--rules", str(rules), "--positions", str(positions), "--out", str(out),
            *extra]


@pytest.mark.slow
def test_disk_full_mid_write_names_the_output_and_leaves_nothing(
        tmp_path: Path, big_inputs: tuple[Path, Path]) -> None:
    """256 KiB of tmpfs holds a small output but not 400k verdicts: the run fails naming the
    output and the file, the staging directory is gone (the free space is as before) and
    the previous output is intact."""
    rules, positions = small_inputs(tmp_path / "in")
    out = tmp_path / "disk" / "out"
    first, before, free, second, after, entries, free_after = on_small_disk(
        tmp_path, "size=256k", [
            disk_job(rules, positions, out), ["snapshot", "out"], ["free"],
            disk_job(*big_inputs, out, "--overwrite"), ["snapshot", "out"], ["entries"],
            ["free"]])
    assert first == [0, ""]
    assert second == [1, f"snim-batch: error: {out}: no space left on device while writing "
                         "verdicts.parquet; nothing was written (free space or choose another "
                         "--out)\n"]
    assert after == before and len(before) == 5
    assert entries == ["out"]
    assert free_after == free


READ_ONLY_MID_RUN = r"""
import json, os, subprocess, sys, time
exe, disk, out, *args = sys.argv[1:]
run = subprocess.Popen([exe, "run", "--quiet", "--out", out, *args], stderr=subprocess.PIPE,
                       text=True)
deadline, made_read_only = time.monotonic() + 120, False
while not made_read_only and run.poll() is None and time.monotonic() < deadline:
    staged = [os.path.join(disk, d, ".verdict-runs") for d in os.listdir(disk)
              if ".partial-" in d or ".delta-staging-" in d]
    if any(os.path.isdir(d) and os.listdir(d) for d in staged):  # a run is spilled
        made_read_only = subprocess.run(["mount", "-o", "remount,ro", disk],
                                        capture_output=True).returncode == 0  # EBUSY: again
    time.sleep(0.005)
err = run.communicate(timeout=300)[1]
print(json.dumps([made_read_only, run.returncode, err, sorted(os.listdir(disk))]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_a_staging_directory_that_cannot_be_removed_is_named_in_a_warning(tmp_path: Path,
                                                                          fmt: str) -> None:
    """The output's file system goes read-only while sorted runs are spilled: the run fails
    (exit 1, nothing committed) and cannot remove its staging directory; it says what is
    left, and that the next run removes it, rather than leaving it unsaid (QA)."""
    if fmt == "delta":
        pytest.importorskip("deltalake")
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -rm (user and mount namespaces) is not permitted here")
    from pipeline.generate import Spec, generate

    data = tmp_path / "in"
    generate(data, Spec(4_000_000, 50, 1000, 4, 0, 4, "wide", "parquet", 3, "string", True, 4))
    disk = tmp_path / "disk"
    disk.mkdir()
    out = disk / "out"
    proc = subprocess.run(
        ["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o size=400m tmpfs "$1" && shift && '
         'exec "$@"', "sh", str(disk), sys.executable, "-c", READ_ONLY_MID_RUN, str(CLI_EXE),
         str(disk), str(out), "--rules", str(data / "rules.parquet"), "--positions",
         str(data / "positions"), "--memory-limit", "1MiB", "--format", fmt],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    made_read_only, code, err, entries = json.loads(proc.stdout)
    assert made_read_only, err
    assert code == 1, err
    [staging] = entries
    kind = "partial" if fmt == "parquet" else "delta-staging"
    assert re.fullmatch(rf"\.out\.{kind}-\d+-\S+", staging), staging
    lines = err.splitlines()
    assert (f"snim-batch: warning: {disk / staging}: this run's staging directory is left "
            "(read-only file system); the next run to this output removes it") in lines, err
    assert lines[-1].startswith(f"snim-batch: error: {out}: read-only file system while "), err


@pytest.mark.parametrize("form", ["wide", "long"])
def test_a_spill_on_a_disk_without_a_free_byte_names_the_scratch_file(tmp_path: Path,
                                                                      form: str) -> None:
    """Verdicts spilled to scratch (a tiny --memory-limit) on a file system with no byte
    free: exit 1, one line naming the output and the scratch file, nothing left. Before,
    closing the scratch streams on the way out (flushing what they held) raised a second
    "no space left" that took the first's place: "internal error: OSError ... report it"."""
    from pipeline.generate import Spec, generate

    data = tmp_path / "in"
    generate(data, Spec(200_000, 20, 1000, 4, 0, 4, form, "parquet", 3, "int", True, 1))
    out = tmp_path / "disk" / "out"
    free, (code, err), entries = on_small_disk(tmp_path, "size=4m", [
        ["fill-leaving", "0"],
        disk_job(data / "rules.parquet", data / "positions", out, "--memory-limit", "1MiB"),
        ["entries"]])
    assert free == 0
    assert code == 1, err
    assert re.fullmatch(f"snim-batch: error: {re.escape(str(out))}: no space left on device "
                        r"while writing the scratch file \.verdict-runs/\S+; nothing was "
                        r"written \(free space or choose another --out\)\n", err), err
    assert entries == ["filler"]


def test_disk_without_room_for_the_staging_directory(tmp_path: Path) -> None:
    """No inode left: the staging directory cannot even be created, for a new output or in
    place of an existing one; nothing changes on the disk."""
    rules, positions = small_inputs(tmp_path / "in")
    out, fresh = tmp_path / "disk" / "out", tmp_path / "disk" / "fresh"
    results = on_small_disk(tmp_path, "size=256k,nr_inodes=64", [
        disk_job(rules, positions, out), ["snapshot", "out"], ["fill-inodes"], ["free"],
        disk_job(rules, positions, out, "--overwrite"), disk_job(rules, positions, fresh),
        ["snapshot", "out"], ["entries"], ["free"]])
    first, before, _, free, replace, create, after, entries, free_after = results
    assert first == [0, ""]
    staging = re.escape(str(out.parent)) + r"/\.{name}\.partial-\d+-\S+"
    for (code, err), target in ((replace, out), (create, fresh)):
        assert code == 1
        assert re.fullmatch(
            f"snim-batch: error: {re.escape(str(target))}: no space left on device while "
            f"creating the staging directory {staging.format(name=target.name)}; nothing was "
            r"written \(free space or choose another --out\)\n", err), err
    assert after == before
    assert entries == ["filler", "out"]
    assert free_after == free


def test_a_mount_point_as_out_is_refused_before_any_work(tmp_path: Path) -> None:
    """A volume mounted as --out (a container's usual output) cannot be renamed over: the
    run says so at the start, exit 1, rather than failing at the commit after all the work;
    a directory inside the volume works."""
    rules, positions = small_inputs(tmp_path / "in")
    disk = tmp_path / "disk"
    refused, entries, inside, tree = on_small_disk(tmp_path, "size=256k", [
        disk_job(rules, positions, disk), ["entries"],
        disk_job(rules, positions, disk / "out"), ["tree"]])
    assert refused == [1, f"snim-batch: error: {disk}: is a mount point, and the output is "
                          "put in place by renaming a directory over it, which a mount point "
                          "cannot take; give --out a directory inside it; nothing was "
                          "written\n"]
    assert entries == []
    assert inside == [0, ""]
    assert "out/manifest.json" in tree


def test_a_bind_mount_as_out_is_refused_before_any_work(tmp_path: Path) -> None:
    """A directory of the same file system bind-mounted as --out (as `docker -v` does) has
    no device of its own, yet cannot be renamed over either."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -rm (user and mount namespaces) is not permitted here")
    rules, positions = small_inputs(tmp_path / "in")
    source, out = tmp_path / "volume", tmp_path / "out"
    source.mkdir()
    out.mkdir()
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", 'mount --bind "$1" "$2" && shift 2 && '
                           'exec "$@"', "sh", str(source), str(out), str(EXE),
                           *job(rules, positions, out), "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (1, (
        f"snim-batch: error: {out}: is a mount point, and the output is put in place by "
        "renaming a directory over it, which a mount point cannot take; give --out a "
        "directory inside it; nothing was written\n"))
    assert list(source.iterdir()) == [] and list(out.iterdir()) == []


def test_read_only_file_system(tmp_path: Path) -> None:
    rules, positions = small_inputs(tmp_path / "in")
    out = tmp_path / "disk" / "out"
    first, before, _, replace, after, entries = on_small_disk(tmp_path, "size=256k", [
        disk_job(rules, positions, out), ["snapshot", "out"], ["read-only"],
        disk_job(rules, positions, out, "--overwrite"), ["snapshot", "out"], ["entries"]])
    assert first == [0, ""]
    code, err = replace
    assert code == 1
    assert re.fullmatch(f"snim-batch: error: {re.escape(str(out))}: read-only file system "
                        r"while creating the staging directory \S+/\.out\.partial-\S+; "
                        r"nothing was written\n", err), err
    assert after == before and entries == ["out"]


@pytest.mark.spark
@pytest.mark.slow
def test_disk_full_while_spark_writes_its_part_files(tmp_path: Path) -> None:
    """Spark's own write fails on a 4 KiB tmpfs: the same message, nothing left behind."""
    pytest.importorskip("pyspark")
    rules, positions = small_inputs(tmp_path / "in")
    out = tmp_path / "disk" / "out"
    (code, err), entries = on_small_disk(tmp_path, "size=4k", [
        disk_job(rules, positions, out, "--engine", "spark", "--spark-master", "local[1]"),
        ["entries"]])
    assert code == 1
    assert err.endswith(f"snim-batch: error: {out}: no space left on device while writing "
                        "verdicts.parquet; nothing was written (free space or choose another "
                        "--out)\n"), err
    assert entries == []


# ---- scratch files (long form split into parts) ---------------------------------------------


def test_row_estimate_counts_parquet_rows_and_csv_lines(tmp_path):
    pl.DataFrame({"a": list(range(7))}).write_parquet(tmp_path / "a.parquet")
    (tmp_path / "b.csv").write_text("rule_set_id,position_id,heap\n" + "1,2,3\n" * 5)
    (tmp_path / "c.csv").write_text("rule_set_id,position_id,heap\n1,2,3\n1,2,4")
    assert readers.row_estimate([tmp_path / "a.parquet"]) == 7
    assert readers.row_estimate([tmp_path / "a.parquet", tmp_path / "b.csv", tmp_path / "c.csv"]) \
        == 7 + 5 + 2


def test_kept_values_live_for_the_run_within_the_byte_budget(monkeypatch):
    monkeypatch.setattr(RunCache, "budget", 10)
    cache = RunCache()
    with cache:
        assert cache.put("object", "a", b"123456", 6)
        assert cache.has_room("object", 4) and not cache.has_room("object", 5)
        assert not cache.put("object", "b", b"12345", 5)  # 11 bytes would be over
        assert cache.put("footer", "b", "counted as 4", 4)
        assert RunCache().get("object", "a") is None  # another run's cache: its own
        cache.drop("object", "a")
        assert cache.get("object", "a") is None
        assert cache.put("object", "b", b"12345", 5)
        cache.drop("object")
        assert cache.get("object", "b") is None and cache.get("footer", "b") == "counted as 4"
    assert not cache.has_room("object", 0) and cache.get("footer", "b") is None
    assert not cache.put("object", "a", b"123", 3) and cache.get("object", "a") is None
    assert RunCache(4).has_room("footer", 4) and not RunCache(4).has_room("footer", 5)
    refusing = RunCache(whole_objects=False)  # an engine whose tasks read the files
    assert not refusing.has_room("object", 0) and refusing.has_room("footer", 10)
    assert not refusing.put("object", "c", b"refused", 1) and refusing.get("object", "c") is None
    assert refusing.put("footer", "c", "kept", 1) and refusing.get("footer", "c") == "kept"


def test_a_runs_cache_is_shared_by_the_threads_given_it_and_closes_with_the_run():
    """A thread the run hands its cache to shares it; one that outlives the run keeps
    nothing, and a run it then starts has a cache of its own."""
    seen: dict[str, object] = {}
    helped, late = threading.Event(), threading.Event()

    def helper(cache: RunCache):
        seen["helper"] = cache.get("footer", "f")
        cache.put("footer", "g", "from the helper", 1)
        helped.set()
        late.wait(10)
        seen["late"] = (cache.has_room("footer", 0), cache.put("footer", "h", "too late", 1),
                        cache.get("footer", "f"))
        with RunCache() as own:
            seen["own run"] = (own.put("footer", "i", "its own", 1), own.get("footer", "i"))

    thread = None
    try:
        with RunCache() as cache:
            cache.put("footer", "f", "run's", 1)
            thread = threading.Thread(target=helper, args=(cache,))
            thread.start()
            assert helped.wait(10)
            assert cache.get("footer", "g") == "from the helper"
    finally:
        late.set()
        if thread is not None:
            thread.join(10)
    assert seen == {"helper": "run's", "late": (False, False, None),
                    "own run": (True, "its own")}


def test_a_runs_footers_are_read_once_and_forgotten_after_it(tmp_path):
    path = tmp_path / "p.parquet"
    pl.DataFrame({"rule_set_id": [1, 2], "heaps": [[3], [400, 5]]}).write_parquet(path)
    with RunCache() as cache:
        assert readers.row_estimate([path], cache=cache) == 2
        assert readers.heap_upper_bound([path], "heaps", cache=cache) == 400
        # replaced during the run: the run goes on with the footer it read first
        pl.DataFrame({"x": [7, 8, 9]}).write_parquet(path)
        assert readers.row_estimate([path], cache=cache) == 2
        assert readers.columns_of(path, cache=cache) == ["rule_set_id", "heaps"]
        assert readers.heap_upper_bound([path], "heaps", cache=cache) == 400
        assert readers.row_estimate([path]) == 3  # a reader given no cache reads the file
    assert readers.row_estimate([path], cache=cache) == 3  # the run is over: forgotten
    assert readers.columns_of(path) == ["x"]
    assert readers.heap_upper_bound([path], "heaps") is None


def test_a_footer_that_cannot_be_read_is_not_kept(tmp_path):
    path = tmp_path / "p.parquet"
    path.write_bytes(b"not parquet\x00 at all")  # binary: no CSV, so its name says Parquet
    with RunCache() as cache:
        with pytest.raises(InputError, match="not a readable Parquet file"):
            readers.columns_of(path, cache=cache)
        pl.DataFrame({"a": [1]}).write_parquet(path)
        assert readers.columns_of(path, cache=cache) == ["a"]


def test_the_kept_schema_is_the_one_read_schema_gives(tmp_path):
    path = tmp_path / "p.parquet"
    frame = pl.DataFrame({"k": ["a"], "e": pl.Series([["x"]], dtype=pl.List(pl.Categorical)),
                          "n": pl.Series([1], dtype=pl.Int16)})
    frame.write_parquet(path)
    with RunCache() as cache:
        assert footers.parquet_footer(path, cache=cache).schema.equals(pq.read_schema(path),
                                                                       check_metadata=True)
        assert footers.parquet_footer(path, cache=cache) is cache.get("footer", path)


def test_the_kept_footer_holds_row_groups_and_the_largest_value_of_each_column(tmp_path):
    """Row groups of 3, 3 and 1 rows written on purpose; the largest values from the data
    itself; a struct (two leaves) and a text column have none; a file of 10,000 such
    footers is kept whole within the run's budget (each counted at a few KB, not 11)."""
    import pyarrow as pa

    path = tmp_path / "p.parquet"
    heaps = [[3], [400, 5], [], [9], [2**62], [1, 1], [7]]
    table = pa.table({"heaps": pa.array(heaps, pa.list_(pa.int64())),
                      "n": pa.array([5, -2, 9, 0, 1, 2, 3], pa.int32()),
                      "s": pa.array([{"a": 1, "b": 2}] * 7),
                      "t": pa.array(list("abcdefg"))})
    pq.write_table(table, path, row_group_size=3)
    with RunCache() as cache:
        footer = footers.parquet_footer(path, cache=cache)
        assert footer.row_groups == (3, 3, 1) and footer.num_rows == 7
        assert footer.largest == {"heaps": 2**62, "n": 9, "s": None, "t": None}
        assert readers.heap_upper_bound([path], "heaps", cache=cache) == 2**62
        assert readers.heap_upper_bound([path], "t", cache=cache) is None
        assert readers.heap_upper_bound([path], "absent", cache=cache) is None
        assert 10_000 * footers._footer_in_memory(footer) <= RunCache.budget


def test_row_group_facts_come_from_the_kept_footer_without_a_second_read(tmp_path):
    """Each row group's byte size and key ranges (the Spark read's sort ranges, explain's
    per-rule-set bounds) come from the footer the run kept: with the file gone they are
    the same; a non-integer column has no range, and a file never kept is read."""
    import pyarrow as pa

    path = tmp_path / "p.parquet"
    table = pa.table({"rule_set_id": pa.array([5, 2, 9, 4, 7], pa.int64()),
                      "t": pa.array(list("abcde"))})
    pq.write_table(table, path, row_group_size=2)
    sizes = [pq.ParquetFile(path).metadata.row_group(g).total_byte_size for g in range(3)]
    expected = (sizes, [{"rule_set_id": (2, 5), "t": None}, {"rule_set_id": (4, 9), "t": None},
                        {"rule_set_id": (7, 7), "t": None}])
    assert footers.row_group_facts(path, ["rule_set_id", "t"]) == expected
    with RunCache() as cache:
        footers.parquet_footer(path, cache=cache)
        path.unlink()
        assert footers.row_group_facts(path, ["rule_set_id", "t"], cache=cache) == expected
    with pytest.raises(OSError):
        footers.row_group_facts(path, ["rule_set_id"])


def test_statistics_that_do_not_decode_are_not_read(tmp_path):
    """A text column whose largest value is not UTF-8 and a timestamp past datetime's range:
    pyarrow raises when it decodes their statistics, so the footer never does; the run's
    own checks then name the file as before (an extra column), no internal error."""
    import pyarrow as pa

    path = tmp_path / "p.parquet"
    table = pa.table({"rule_set_id": pa.array([1, 1], pa.int64()),
                      "heaps": pa.array([[2], [3]], pa.list_(pa.int64())),
                      "note": pa.array([b"ok", b"\xff"], pa.binary()).view(pa.string()),
                      "seen": pa.array([2**62, 0], pa.int64()).cast(pa.timestamp("us"))})
    pq.write_table(table, path)
    with pytest.raises((UnicodeDecodeError, OverflowError)):
        (lambda m: [m.row_group(0).column(i).statistics.max for i in (2, 3)])(
            pq.ParquetFile(path).metadata)
    with RunCache() as cache:
        assert footers.parquet_footer(path, cache=cache).largest == {
            "rule_set_id": 1, "heaps": 3, "note": None, "seen": None}
        assert readers.columns_of(path, cache=cache) == ["rule_set_id", "heaps", "note", "seen"]
    code, err = invoke(["run", "--rules", ROOT / "data" / "sample" / "rules.csv",
                        "--positions", path, "--out", tmp_path / "out"], tmp_path)
    assert code != 0 and "internal error" not in err and str(path) in err, err


def test_a_column_name_that_is_not_utf8_names_the_file(tmp_path):
    """A footer whose column name bytes are not UTF-8 (patched in place, same length):
    pyarrow raises UnicodeDecodeError reading it; the run says the file is unreadable."""
    path = tmp_path / "p.parquet"
    pl.DataFrame({"zzzz": [1], "heaps": [[2]]}).write_parquet(path)
    data = path.read_bytes()
    assert data.count(b"zzzz") >= 1
    path.write_bytes(data.replace(b"zzzz", b"\xff\xfe\xfd\xfc"))
    with pytest.raises(InputError, match=r"not a readable Parquet file \(unreadable footer: "):
        readers.columns_of(path)
    code, err = invoke(["run", "--rules", ROOT / "data" / "sample" / "rules.csv",
                        "--positions", path, "--out", tmp_path / "out"], tmp_path)
    assert code == 1 and f"{path}: not a readable Parquet file" in err, err


def test_row_estimate_scales_the_lines_of_a_large_csvs_start(tmp_path):
    # 500,000 lines of 9 bytes then 100,000 of 18: the first 4 MiB hold 9-byte lines only,
    # so the estimate (about size / 9) is high, never low: parts come out smaller, not larger.
    path = tmp_path / "big.csv"
    path.write_text("h,h,h\n" + "1,100,10\n" * 500_000 + "1,1000000,1000000\n" * 100_000)
    estimate = readers.row_estimate([path])
    assert 600_000 < estimate <= path.stat().st_size // 9 + 2


def test_spill_round_trip_and_the_directory_goes_away(tmp_path):
    ints = pl.DataFrame({"rule_set_id": [1, None], "position_id": [5, 6],
                         "heaps": [[3], None], "_reason": [None, "heap is empty"]})
    text = ints.with_columns(pl.col("position_id").cast(pl.String))  # another file's schema
    with scratch.spill(tmp_path) as spilled:
        for part, frame in [(3, ints), (0, text), (3, ints), (3, text), (3, ints)]:
            spilled.write(part, frame)
        spilled.close()
        got = spilled.read(3)
        assert [f.schema for f in got] == [ints.schema, text.schema, ints.schema]
        assert got[0].equals(pl.concat([ints, ints])) and got[1].equals(text)
        assert got[2].equals(ints)
        assert spilled.read(1) == []
        assert spilled.read(0)[0].equals(text)
        assert list(spilled.directory.iterdir()) == []  # read files are removed at once
    assert list(tmp_path.iterdir()) == []


def test_spill_keeps_at_most_max_open_streams(tmp_path, monkeypatch):
    monkeypatch.setattr(scratch.Spill, "MAX_OPEN", 2)
    frame = pl.DataFrame({"a": [1, 2]})
    with scratch.spill(tmp_path) as spilled:
        for part in [0, 1, 2, 0, 1]:
            spilled.write(part, frame)
        assert len(spilled._open) == 2
        spilled.close()
        assert [f.height for f in spilled.read(0)] == [2, 2]  # two files: closed in between
        assert [f.height for f in spilled.read(2)] == [2]


def test_spill_write_failure_names_the_file(tmp_path):
    spilled = scratch.Spill(tmp_path / "gone")
    with pytest.raises(OutputError, match=r"gone/0-0\.arrows: cannot write scratch file \(No such"):
        spilled.write(0, pl.DataFrame({"a": [1]}))


# ---- Parquet read in slices -------------------------------------------------------------------


@pytest.mark.parametrize(("groups", "batch", "expected"), [
    ([1000, 1000, 1000], 2048, [(0, 2000, [0, 1]), (2000, 1000, [2])]),  # never across a group
    ([3, 3, 3], 7, [(0, 6, [0, 1]), (6, 3, [2])]),
    ([10, 2], 5, [(0, 10, [0]), (10, 2, [1])]),  # a group larger than a batch: alone, whole
    ([2, 0, 3], 5, [(0, 5, [0, 1, 2])]),
    ([5, 5], 5, [(0, 5, [0]), (5, 5, [1])]),
    ([0], 5, []),
    ([], 5, []),
])
def test_slices_are_whole_row_groups_up_to_a_batch(groups, batch, expected):
    assert [(s.start, s.rows, list(s.groups)) for s in readers.slice_bounds(groups, batch)
            ] == expected


@pytest.mark.parametrize("batch", [1, 4, 9, 10, 14, 100])
def test_parquet_batches_hold_whole_row_groups_in_order(tmp_path, batch):
    # Row groups of uneven sizes (as files written by different tools have): every row once,
    # in file order, numbered from 0; where no group is larger than a batch (read in slices),
    # each batch a run of whole groups of at most `batch` rows.
    # The frames are what polars' own reader makes of the whole file.
    from polars.testing import assert_frame_equal

    sizes = [3, 1, 4, 1, 5, 9, 2, 6]
    path = tmp_path / "p.parquet"
    schema = pa.schema([("name", pa.string()), ("heaps", pa.list_(pa.int16())),
                        ("a", pa.int64()), ("moves", pa.large_list(pa.uint8()))])
    with pq.ParquetWriter(path, schema) as writer:
        first = 0
        for size in sizes:
            rows = range(first, first + size)
            writer.write_table(pa.table({
                "name": [None if i % 7 == 3 else f"n{i}" for i in rows],
                "heaps": [None if i % 5 == 2 else [i, None][:1 + i % 2] * (i % 3) for i in rows],
                "a": list(rows),
                "moves": [[i % 256, 255] for i in rows]}, schema=schema))
            first += size
    assert [pq.ParquetFile(path).metadata.row_group(g).num_rows
            for g in range(len(sizes))] == sizes
    batches = list(readers.iter_batches(path, batch))
    assert_frame_equal(pl.concat([b.frame for b in batches]), pl.read_parquet(path))
    assert [x for b in batches for x in b.frame["a"].to_list()] == list(range(sum(sizes)))
    assert np.concatenate([b.row for b in batches]).tolist() == list(range(sum(sizes)))
    assert all(b.frame.height <= batch for b in batches)
    if batch >= max(sizes):
        ends = set(np.cumsum(sizes).tolist())
        assert all(int(b.row[-1]) + 1 in ends for b in batches)
        assert len(batches) == len(readers.slice_bounds(sizes, batch))


@pytest.mark.parametrize(("names", "table"), [
    ("a struct and a dotted list", lambda h: {"a": pa.array([{"b": i} for i in range(4)]),
                                              "a.b": h}),
    ("an empty name", lambda h: {"": h, "id": list(range(4))}),
    ("a star", lambda h: {"*": list(range(4)), "h": h}),
    ("a regular expression", lambda h: {"^i.*$": list(range(4)), "id": list(range(4)), "h": h}),
])
def test_parquet_column_names_polars_or_pyarrow_would_widen_read_as_written(
        tmp_path, names, table):
    # Names that pyarrow takes as a path into a struct, or polars as a wildcard, a regular
    # expression or a column to rename: read in slices, the file reads as polars reads it
    # whole (a run then names the column it does not expect).
    from polars.testing import assert_frame_equal

    h = pa.array([[1, 2], None, [], [3]], pa.list_(pa.int32()))
    path = tmp_path / "odd.parquet"
    pq.write_table(pa.table(table(h)), path, row_group_size=2)
    got = pl.concat([b.frame for b in readers.iter_batches(path, 2)])
    assert_frame_equal(got, pl.read_parquet(path))


# ---- CSV read as it streams ------------------------------------------------------------------


def csv_lines(kinds: list[bool]) -> str:
    """A header and one line per kind: True a good row "i,x", False a line with an extra
    field."""
    lines = ["a,b"] + [f"{i},x" if ok else f"{i},x,extra" for i, ok in enumerate(kinds)]
    return "\n".join(lines) + "\n"


def check_csv_batches(path: Path, kinds: list[bool], batch: int) -> None:
    batches = list(readers.iter_batches(path, batch))
    good = [i for i, ok in enumerate(kinds) if ok]
    assert np.concatenate([b.row for b in batches]).tolist() == good
    assert [int(x) for b in batches for x in b.frame["a"].to_list()] == good
    assert [r for b in batches for r, _, _ in b.bad_lines] == [
        i for i, ok in enumerate(kinds) if not ok]
    assert all(b.frame.height == batch for b in batches[:-1])
    assert batches[-1].frame.height <= batch


@pytest.mark.parametrize("batch", [1, 2, 3, 1000])
@pytest.mark.parametrize("pattern", ["", "+", "-", "++-+--+++-", "--+", "+--", "+-+-+-+"])
def test_csv_batches_number_kept_rows_and_skipped_lines(tmp_path, pattern, batch):
    # Every kept row carries its data row number in the file, every line with the wrong field
    # count is reported once with its own, and batches hold `batch` rows (the last one fewer).
    kinds = [c == "+" for c in pattern]
    path = tmp_path / "t.csv"
    path.write_text(csv_lines(kinds))
    check_csv_batches(path, kinds, batch)


def test_csv_larger_than_the_parsers_blocks_streams_with_exact_row_numbers(tmp_path):
    # About 4 MB: several of pyarrow's 1 MB blocks, with bad lines in all of them and at block
    # edges; what a whole-file read would number, and batches of 50,000 rows.
    rng = random.Random(5)
    kinds = [rng.random() > 0.001 for _ in range(400_000)]
    path = tmp_path / "big.csv"
    path.write_text(csv_lines(kinds))
    check_csv_batches(path, kinds, 50_000)
    whole = readers.read_table(path)
    assert whole.row.tolist() == [i for i, ok in enumerate(kinds) if ok]
    assert len(whole.bad_lines) == kinds.count(False)


# ---- CSV line ends, quotes and the header, as pyarrow's parser reads them --------------------

LINE_ENDS = {"LF": ["\n"], "CRLF": ["\r\n"], "CR": ["\r"], "mixed": ["\n", "\r", "\r\n"]}


def styled(lines: list[str], style: str, final: bool) -> str:
    """`lines` joined by the style's line ends (mixed: LF, CR and CRLF in turn), with a line
    end after the last line when `final`."""
    ends = LINE_ENDS[style]
    text = "".join(line + ends[i % len(ends)] for i, line in enumerate(lines[:-1]))
    return text + lines[-1] + (ends[(len(lines) - 1) % len(ends)] if final else "")


def logical_table(count: int, style: str) -> tuple[list[str], list[int], list[int], list[str]]:
    """(lines, kept data rows, data rows with an extra field, expected value of column b for
    each kept row): quoted fields with a comma, an escaped quote, a line break (in the
    file's own style) or a trailing line break, literal quotes inside plain fields, blank
    lines, and a line with an extra field every 7th row."""
    lines = ["a,b,c"]
    kept, bad, values = [], [], []
    for i in range(count):
        end = LINE_ENDS[style][i % len(LINE_ENDS[style])]
        written, value = [(f"x{i}", f"x{i}"), (f'"{i},"', f"{i},"), (f'"q""{i}"', f'q"{i}'),
                          (f'"{i}{end}{i}"', f"{i}{end}{i}"), (f'"{i}{end}"', f"{i}{end}"),
                          (f'{i}"', f'{i}"'), (f'"{i}"z', f"{i}z")][i % 7]
        if i % 7 == 6:
            lines.append(f"{i},{written},c,extra")
            bad.append(i)
        else:
            lines.append(f"{i},{written},c")
            kept.append(i)
            values.append(value)
        if i % 11 == 3:
            lines.append("")  # a blank line is no row
    return lines, kept, bad, values


def check_logical(raw_batches: list[RawTable], kept: list[int], bad: list[int],
                  values: list[str]) -> None:
    rows = np.concatenate([b.row for b in raw_batches]).tolist()
    frame = pl.concat([b.frame for b in raw_batches])
    assert rows == kept
    assert frame["a"].cast(pl.Int64).to_list() == kept
    assert frame["b"].to_list() == values
    assert frame["c"].to_list() == ["c"] * len(kept)
    assert [r for b in raw_batches for r, _, _ in b.bad_lines] == bad


@pytest.mark.parametrize("final", [True, False], ids=["final-end", "no-final-end"])
@pytest.mark.parametrize("style", list(LINE_ENDS))
@pytest.mark.parametrize("count", [40, 120_000], ids=["small", "over-block-size"])
def test_csv_every_line_end_style_reads_the_same_rows(tmp_path, style, final, count):
    """LF, CRLF, CR-only and mixed line ends, with quoted line breaks, commas and quotes:
    the same rows with the same row numbers, in a small file and in one of about 3 MB (over
    1 MiB and over pyarrow's 1 MiB blocks, so quoted line breaks fall on block edges)."""
    lines, kept, bad, values = logical_table(count, style)
    path = tmp_path / "t.csv"
    path.write_bytes(styled(lines, style, final).encode())
    if count > 100:
        assert path.stat().st_size > 2 << 20
    check_logical([readers.read_table(path)], kept, bad, values)
    check_logical(list(readers.iter_batches(path, 10_007)), kept, bad, values)
    assert readers.columns_of(path) == ["a", "b", "c"]
    if count < 100:
        assert readers.row_estimate([path]) == len(kept) + len(bad)


@pytest.mark.parametrize("style", list(LINE_ENDS))
def test_csv_row_estimate_of_a_large_file_counts_records_in_every_style(tmp_path, style):
    lines, kept, bad, _ = logical_table(300_000, style)
    path = tmp_path / "t.csv"
    path.write_bytes(styled(lines, style, True).encode())
    assert path.stat().st_size > 4 << 20
    rows = len(kept) + len(bad)
    assert 0.9 * rows < readers.row_estimate([path]) < 1.2 * rows


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"], ids=["plain", "bom"])
@pytest.mark.parametrize("ending", ["", "\n", "\r\n", "\r", "\n\n", "\r\r", "\r\n\r\n"])
def test_csv_header_only_file_is_an_empty_table_in_every_style(tmp_path, ending, bom):
    path = tmp_path / "t.csv"
    path.write_bytes(bom + f'a,"b",c{ending}'.encode())
    raw = readers.read_table(path)
    assert raw.frame.columns == ["a", "b", "c"] and raw.frame.height == 0
    assert raw.bad_lines == [] and raw.row.tolist() == []
    assert readers.columns_of(path) == ["a", "b", "c"]
    assert readers.row_estimate([path]) == 0


@settings(max_examples=300, deadline=None)
@given(line=st.text(st.sampled_from(['a', 'Z', 'é', '東', ' ', '\t', ',', '"', '_', '\x00']),
                    min_size=1, max_size=12),
       bom=st.booleans(), ending=st.sampled_from(["", "\n", "\r\n", "\r"]))
def test_csv_header_names_are_pyarrows(tmp_path_factory, line, bom, ending):
    """The header's names as pyarrow's own reader gives them for the same bytes (the
    reference), whether the quick split or pyarrow read them; a header pyarrow refuses or
    that is not one record is left to the checks around it."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    data = (b"\xef\xbb\xbf" if bom else b"") + (line + ending).encode()
    try:
        want = pacsv.read_csv(pa.py_buffer(data if ending else data + b"\n"),
                              read_options=pacsv.ReadOptions(use_threads=False)).column_names
    except pa.ArrowInvalid:
        return
    if not line.strip(" \t") or kernels.csv_scan(np.frombuffer(data, np.uint8), 0, 0)[0] != 1:
        return  # blank, or more than one record: not a header these names come from
    path = tmp_path_factory.mktemp("h") / "t.csv"
    path.write_bytes(data)
    try:
        names, _ = csv_reader.read_header(path)
    except InputError as exc:  # an empty or duplicate name, an open quote: refused by name
        assert "" in want or len(set(want)) < len(want) or "quote" in str(exc), str(exc)
        return
    assert names == want


@pytest.mark.parametrize("style", ["LF", "CRLF", "CR"])
def test_csv_bom_and_blank_lines_before_the_header_as_pyarrow_reads_them(tmp_path, style):
    end = LINE_ENDS[style][0]
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbf" + f'{end}{end}"a",b{end}1,2{end}'.encode())
    raw = readers.read_table(path)
    assert raw.frame.to_dict(as_series=False) == {"a": ["1"], "b": ["2"]}
    assert raw.row.tolist() == [0]


@pytest.mark.parametrize("style", ["LF", "CRLF", "CR"])
@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_csv_lines_of_spaces_and_tabs_before_the_header_are_blank_too(tmp_path, style, bom):
    """Skipped like empty lines, whatever follows: rows numbered from the header, a line with
    a wrong field count numbered among them, the heaps of a quoted field kept whole."""
    end = LINE_ENDS[style][0]
    path = tmp_path / "t.csv"
    path.write_bytes(bom + end.join([" ", "", "\t \t", "", '"a",b', "1,2", " ", "3", '4,"5',
                                     '6"', "7,8"]).encode())
    raw = readers.read_table(path)
    assert raw.frame.to_dict(as_series=False) == {"a": ["1", "4", "7"],
                                                  "b": ["2", "5" + end + "6", "8"]}
    assert raw.row.tolist() == [0, 2, 3]
    assert [(r, why) for r, why, _ in raw.bad_lines] == [(1, "line has 1 field, expected 2")]
    assert readers.columns_of(path) == ["a", "b"]
    assert readers.row_estimate([path]) == 4


@pytest.mark.parametrize(("text", "line"), [
    ('a,b\r1,"x\r2,3\r', 2),               # CR-only: lines counted at each CR
    ('a,b\r\n1,"x\r\n"\r\n2,"3', 4),       # a closed quoted break, then an open one
    ('a,b\n1,"x""\n', 2),                  # "" is an escaped quote, so the field stays open
    ('a,b\n1,"x"""\n2,"', 3),              # """ closes after an escaped quote
    ('a,"b\n1,2\n', 1),                    # in the header
    ('a,b\n\n\n1,x"y\n2,"\n', 5),          # a quote inside a plain field is literal
])
def test_csv_quote_never_closed_names_its_physical_line(tmp_path, text, line):
    path = tmp_path / "t.csv"
    path.write_bytes(text.encode())
    with pytest.raises(InputError, match=re.escape(f"{path}: line {line}: a quoted field is "
                                                   "never closed")):
        readers.read_table(path)


@pytest.mark.parametrize(("body", "value"), [
    ('1,"5\n"\n', "5\n"), ('1,"5,"', "5,"), ('1,"5\r"', "5\r"), ('1,"5"""', '5"'),
    ('1,""', ""), ('1,"a""b"', 'a"b'), ('1,"5,\n"\r\n', "5,\n"),
])
def test_csv_last_quoted_field_ending_in_a_comma_quote_or_line_break_is_valid(tmp_path, body,
                                                                               value):
    raw = _read_csv_text(tmp_path, "a,b\n" + body)
    assert raw.frame["b"].to_list() == [value] and raw.row.tolist() == [0]


def test_csv_quoted_fields_that_swallow_rows_are_still_refused(tmp_path):
    # Two quotes left open pair up: by the lenient CSV rules the rows between are one field;
    # the text after its closing quote is what the strict rules refuse.
    path = tmp_path / "t.csv"
    path.write_text('a,b,c\n1,0,"5\n1,1,6\n1,2,"7\n')
    with pytest.raises(InputError, match=r"line 2: a quoted field runs over several lines "
                                         "and text follows its closing quote"):
        readers.read_table(path)


def test_csv_large_cr_only_file_with_quoted_breaks_on_every_block_edge(tmp_path):
    """Quoted CR line breaks at every offset around pyarrow's 1 MiB block edges."""
    lines = ["a,b"]
    size = 4
    i = 0
    while size < (3 << 20):
        value = f'"{i}\r{"y" * (i % 13)}"'
        lines.append(f"{i},{value}")
        size += len(lines[-1]) + 1
        i += 1
    path = tmp_path / "t.csv"
    path.write_bytes(styled(lines, "CR", True).encode())
    raw = readers.read_table(path)
    assert raw.row.tolist() == list(range(i))
    assert raw.frame["b"].to_list() == [f'{k}\r{"y" * (k % 13)}' for k in range(i)]


# ---- resolve_inputs: names as written, what is skipped and why -------------------------------


def touch(root: Path, *names: str, text: str = "x\n") -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def make_output(directory: Path, manifest: dict | None = None) -> Path:
    """A directory that looks like a snim-batch output (or holds `manifest` instead)."""
    touch(directory, "verdicts.parquet", "rejects.parquet", "summary.parquet")
    manifest = manifest or {"run_id": "20250101T000000Z-abc123",
                            "versions": {"snim-batch": "0.1.0", "python": "3.11"}}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def resolve_error(spec: Path | str, exclude: Path | None = None) -> str:
    with pytest.raises(InputError) as info:
        inputs.resolve_inputs(str(spec), "positions", exclude)
    return str(info.value)


@pytest.mark.parametrize("name", ["pos[1].csv", "pos*.csv", "pos?.csv", "p[!x]s.csv",
                                  "[a-z].csv"])
def test_an_existing_file_with_glob_characters_is_that_file(tmp_path, name):
    touch(tmp_path, name, "pos1.csv", "poss.csv", "a.csv", "pas.csv")
    assert inputs.resolve_inputs(str(tmp_path / name), "positions") == [tmp_path / name]


def test_an_existing_directory_with_glob_characters_is_that_directory(tmp_path):
    touch(tmp_path, "d[1]/a.csv", "d1/b.csv")
    assert inputs.resolve_inputs(str(tmp_path / "d[1]"), "positions") == [tmp_path / "d[1]/a.csv"]


def test_a_glob_takes_a_component_that_exists_as_written_literally(tmp_path):
    touch(tmp_path, "d[1]/a.csv", "d1/b.csv")
    assert inputs.resolve_inputs(str(tmp_path / "d[1]" / "*.csv"), "positions") == [
        tmp_path / "d[1]/a.csv"]
    assert inputs.resolve_inputs(str(tmp_path / "d[0-9]" / "*.csv"), "positions") == [
        tmp_path / "d1/b.csv"]


def test_a_missing_file_with_glob_characters_is_a_pattern(tmp_path):
    touch(tmp_path, "pos1.csv", "pos2.csv")
    found = inputs.resolve_inputs(str(tmp_path / "pos[1].csv"), "positions")
    assert found == [tmp_path / "pos1.csv"]


def test_a_glob_matching_directories_reads_them_as_directories(tmp_path):
    touch(tmp_path, "day=1/a.csv", "day=1/_SUCCESS", "day=1/notes.txt", "day=2/sub/b.parquet",
          "day=3.csv", "other/c.csv")
    got = inputs.resolve_inputs(str(tmp_path / "day=*"), "positions")
    assert got == [tmp_path / "day=1/a.csv", tmp_path / "day=2/sub/b.parquet",
                   tmp_path / "day=3.csv"]


@pytest.mark.parametrize("spec", ["d/**", "d/**/**", "**"])
def test_a_glob_ending_in_double_star_reads_every_directory_below(tmp_path, spec,
                                                                   monkeypatch):
    """`**` at the end is every directory at any depth, the one before it included, each
    read as a directory is: its .parquet/.pq/.csv files, hidden names and outputs skipped."""
    touch(tmp_path, "d/a.csv", "d/notes.txt", "d/sub/b.parquet", "d/sub/deep/c.pq",
          "d/_tmp/x.csv", "d/.h/y.csv")
    make_output(tmp_path / "d" / "sub" / "old")
    monkeypatch.chdir(tmp_path / "d" if spec == "**" else tmp_path)
    found = [tmp_path / "d/a.csv", tmp_path / "d/sub/b.parquet", tmp_path / "d/sub/deep/c.pq"]
    assert inputs.resolve_inputs(spec, "positions") == [
        Path(os.path.relpath(p)) for p in found]
    assert inputs.resolve_inputs(str(Path.cwd() / spec), "positions") == found


def test_a_glob_through_dot_dot_steps_up_and_is_no_loop(tmp_path, monkeypatch):
    """`..` in a glob (a config kept in conf/ naming `../data/*.csv`) goes to the directory
    above, as the file system has it: it was refused as a symlink loop, there being none."""
    touch(tmp_path, "d/sub/x.txt", "d/pos/a.csv", "d/pos/b.csv")
    found = inputs.resolve_inputs(str(tmp_path / "d/sub/../pos/*.csv"), "positions")
    assert [os.path.realpath(p) for p in found] == [
        str(tmp_path / "d/pos/a.csv"), str(tmp_path / "d/pos/b.csv")]
    monkeypatch.chdir(tmp_path / "d" / "sub")
    assert [os.path.realpath(p) for p in inputs.resolve_inputs("../pos/*.csv", "positions")
            ] == [str(tmp_path / "d/pos/a.csv"), str(tmp_path / "d/pos/b.csv")]
    assert [os.path.realpath(p) for p in inputs.resolve_inputs("./../p*/./a.csv",
                                                               "positions")
            ] == [str(tmp_path / "d/pos/a.csv")]
    # a pattern ending in `..` is the directory above; a file reached through `..` from
    # several directories `*` matched is read once, not once for each (every row a duplicate)
    assert [os.path.realpath(p) for p in inputs.resolve_inputs("../*/..", "positions")] == [
        str(tmp_path / "d/pos/a.csv"), str(tmp_path / "d/pos/b.csv")]
    assert [os.path.realpath(p) for p in inputs.resolve_inputs("../*/../pos/a.csv",
                                                               "positions")
            ] == [str(tmp_path / "d/pos/a.csv")]


def test_steps_of_a_glob_through_links_are_no_loop(tmp_path):
    """A step of the pattern is no walk that could go round: `..` out of a linked directory
    goes where the file system says (not back where the pattern came from), and a link to a
    directory above, named by one step, is read as the shell lists it. Taken whole, or under
    `**`, the same link is still a loop."""
    touch(tmp_path, "d/p.csv", "e/sub/x.txt", "L/top.csv", "L/s/y.txt")
    (tmp_path / "d" / "b").mkdir()
    (tmp_path / "d" / "b" / "le").symlink_to(tmp_path / "e" / "sub")
    (tmp_path / "L" / "s" / "up").symlink_to(tmp_path / "L")
    # named as the file system leads, so the manifest and the rejects name the file read
    assert inputs.resolve_inputs(str(tmp_path / "d/b/l*/../../*/p*.csv"), "positions") == [
        Path(os.path.realpath(tmp_path / "d/p.csv"))]
    touch(tmp_path, "e/p.csv")  # e/sub/.. is e: another file than d/p.csv, named so
    assert inputs.resolve_inputs(str(tmp_path / "d/b/le/../p.csv"), "positions") == [
        Path(os.path.realpath(tmp_path / "e/p.csv"))]
    assert inputs.resolve_inputs(str(tmp_path / "L/s/up/*.csv"), "positions") == [
        tmp_path / "L/s/up/top.csv"]
    for looped in ("L/s/u?", "L/**"):
        assert "symlink loop (it leads back to a directory above it)" in resolve_error(
            tmp_path / looped)


def test_a_glob_ending_in_a_slash_takes_directories_only(tmp_path):
    """`exports/*/` names the partition directories, as a shell expands it, not the stray
    file beside them (whose rows made every position a duplicate)."""
    touch(tmp_path, "e/2026-12-05/p.csv", "e/2026-12-06/p.csv", "e/manual_fixups.csv")
    assert inputs.resolve_inputs(str(tmp_path / "e") + "/*/", "positions") == [
        tmp_path / "e/2026-12-05/p.csv", tmp_path / "e/2026-12-06/p.csv"]
    assert config_from_dict({"rules": "r.csv", "positions": "e/*/", "out": "o"}
                            ).positions.endswith("/*/")


def test_a_glob_ending_in_double_star_still_finds_a_symlink_loop(tmp_path):
    touch(tmp_path, "d/a.csv")
    (tmp_path / "d" / "up").symlink_to(tmp_path / "d")
    assert resolve_error(tmp_path / "d" / "**") == (
        f"positions input {tmp_path / 'd' / '**'}: {tmp_path / 'd/up'}: symlink loop (it leads "
        "back to a directory above it)")


def test_a_glob_ending_in_double_star_with_nothing_says_what_it_skipped(tmp_path):
    touch(tmp_path, "d/_SUCCESS", "d/sub/notes.txt")
    assert resolve_error(tmp_path / "d" / "**") == (
        f"positions input {tmp_path / 'd' / '**'}: no file matches this pattern; skipped 1 "
        f"file whose {MARKERS}, 1 file {OTHER_TYPE}")


def test_glob_skips_marker_and_hidden_names_like_a_directory(tmp_path):
    touch(tmp_path, "d/a.csv", "d/_SUCCESS", "d/.a.csv.crc", "d/_tmp/x.csv", "d/.h/y.csv",
          "d/notes.txt")
    assert inputs.resolve_inputs(str(tmp_path / "d" / "*"), "positions") == [
        tmp_path / "d/a.csv", tmp_path / "d/notes.txt"]  # a file a pattern names is taken
    assert inputs.resolve_inputs(str(tmp_path / "d"), "positions") == [tmp_path / "d/a.csv"]
    assert inputs.resolve_inputs(str(tmp_path / "d" / "**" / "*.csv"), "positions") == [
        tmp_path / "d/a.csv"]


def test_a_pattern_that_starts_with_the_character_matches_hidden_names(tmp_path):
    touch(tmp_path, "d/_a.csv", "d/.b.csv", "d/c.csv")
    assert inputs.resolve_inputs(str(tmp_path / "d" / "_*"), "positions") == [tmp_path / "d/_a.csv"]
    assert inputs.resolve_inputs(str(tmp_path / "d" / ".*"), "positions") == [tmp_path / "d/.b.csv"]


@pytest.mark.parametrize("spec", ["d", "d/*", "d/**/*.csv", "d/*/*.csv"])
def test_snim_outputs_and_staging_below_the_input_are_never_read(tmp_path, spec):
    touch(tmp_path, "d/a.csv", "d/sub/b.csv")
    make_output(tmp_path / "d" / "out")
    make_output(tmp_path / "d" / "sub" / "old")
    touch(tmp_path / "d", ".out.partial-123-20250101T000000Z-abc123/verdicts.parquet",
          ".out.retired-123-20250101T000000Z-abc123/verdicts.parquet")
    got = inputs.resolve_inputs(str(tmp_path / spec), "positions")
    assert got == [p for p in [tmp_path / "d/a.csv", tmp_path / "d/sub/b.csv"]
                   if spec != "d/*/*.csv" or p.parent.name == "sub"]


def test_delta_tables_below_the_input_are_skipped_and_one_named_is_refused(tmp_path):
    """A Delta table's data files hold rows that later commits removed: never inputs found
    by a listing (a --format delta root inside the positions folder), refused when named."""
    touch(tmp_path, "d/a.csv", "d/tbl/part-0.parquet", "d/tbl/_delta_log/00000.json",
          "d/root/runs/run_date=2026-01-01/part-0.parquet", "d/root/runs/_delta_log/0.json")
    for spec in ["d", "d/*", "d/**"]:
        assert inputs.resolve_inputs(str(tmp_path / spec), "positions") == [
            tmp_path / "d/a.csv"], spec
    assert resolve_error(tmp_path / "d/**/*.parquet") == (
        f"positions input {tmp_path / 'd/**/*.parquet'}: no file matches this pattern; skipped "
        "2 Delta tables")
    assert resolve_error(tmp_path / "d/tbl") == (
        f"positions input {tmp_path / 'd/tbl'}: is a Delta table; its data files include rows "
        "that later commits removed, so read it with a Delta reader and pass the result as "
        "Parquet")
    (tmp_path / "d/tbl/run_date=2026-01-01").mkdir()
    touch(tmp_path, "d/tbl/run_date=2026-01-01/part-1.parquet")
    assert resolve_error(tmp_path / "d/tbl/run_date=2026-01-01") == (
        f"positions input {tmp_path / 'd/tbl/run_date=2026-01-01'}: is inside the Delta table "
        f"{tmp_path / 'd/tbl'}, whose data files include rows that later commits removed, so "
        "read it with a Delta reader and pass the result as Parquet")


def test_staging_is_skipped_even_by_a_pattern_for_hidden_names(tmp_path):
    touch(tmp_path, "d/.old.csv", "d/.out.partial-123-20250101T000000Z-abc123/v.parquet")
    assert inputs.resolve_inputs(str(tmp_path / "d" / ".*"), "positions") == [
        tmp_path / "d/.old.csv"]


@pytest.mark.parametrize("manifest", [{"run_id": "x", "versions": {"other-tool": "1"}},
                                      {"versions": {"snim-batch": "1"}}, ["run_id"]])
def test_a_directory_with_another_tools_manifest_is_read(tmp_path, manifest):
    touch(tmp_path, "d/data/a.csv")
    (tmp_path / "d" / "data" / "manifest.json").write_text(json.dumps(manifest))
    assert inputs.resolve_inputs(str(tmp_path / "d"), "positions") == [tmp_path / "d/data/a.csv"]


def test_the_runs_own_output_is_never_read_even_without_a_manifest(tmp_path):
    out = tmp_path / "d" / "out"
    touch(tmp_path, "d/a.csv", "d/out/half-written.parquet")
    for spec in ["d", "d/*"]:
        found = inputs.resolve_inputs(str(tmp_path / spec), "positions", out)
        assert found == [tmp_path / "d/a.csv"]
    assert resolve_error(tmp_path / "d/**/*.parquet", out) == (
        f"positions input {tmp_path / 'd/**/*.parquet'}: no file matches this pattern; skipped "
        "the run's own output directory")
    assert resolve_error(out, out) == (f"positions input {out}: no .parquet, .pq or .csv files "
                                       "found; skipped the run's own output directory")


def test_a_file_named_inside_an_output_is_read(tmp_path):
    out = make_output(tmp_path / "out")
    assert inputs.resolve_inputs(str(out / "rejects.parquet"), "positions", out) == [
        out / "rejects.parquet"]
    assert inputs.resolve_inputs(str(out), "positions") == [
        out / "rejects.parquet", out / "summary.parquet", out / "verdicts.parquet"]


def test_directory_symlinks_are_followed_and_a_loop_is_an_error(tmp_path):
    touch(tmp_path, "data/a.csv", "d/b.csv")
    (tmp_path / "d" / "linked").symlink_to(tmp_path / "data")
    assert inputs.resolve_inputs(str(tmp_path / "d"), "positions") == [
        tmp_path / "d/b.csv", tmp_path / "d/linked/a.csv"]
    (tmp_path / "data" / "up").symlink_to(tmp_path / "d")
    for spec in ["d", "d/**/*.csv"]:
        assert resolve_error(tmp_path / spec) == (
            f"positions input {tmp_path / spec}: {tmp_path / 'd/linked/up'}: symlink loop "
            "(it leads back to a directory above it)")


MARKERS = ("names start with _ or . (hidden files and markers such as _SUCCESS are skipped, "
           "as Spark and Hadoop do)")
OTHER_TYPE = ("of another type (a directory gives its .parquet, .pq and .csv files, and Parquet "
              "files named without a suffix)")


@pytest.mark.parametrize(("names", "found", "skipped"), [
    ([], "no .parquet, .pq or .csv files found", ""),
    (["_x.csv", ".x.csv"], "no .parquet, .pq or .csv files found",
     f"; skipped 2 files whose {MARKERS}"),
    (["_tmp/x.csv", "_SUCCESS"], "no .parquet, .pq or .csv files found",
     f"; skipped 1 file and 1 directory whose {MARKERS}"),
    (["a.txt", "b.json", "c.csv.gz"], "no .parquet, .pq or .csv files found",
     "; skipped 3 files of another type, 1 of them named as compressed (a directory gives "
     "its .parquet, .pq and .csv files, and Parquet files named without a suffix)"),
    (["_x.csv", "a.txt"], "no .parquet, .pq or .csv files found",
     f"; skipped 1 file whose {MARKERS}, 1 file {OTHER_TYPE}"),
])
def test_an_empty_find_says_what_was_skipped_and_why(tmp_path, names, found, skipped):
    directory = tmp_path / "d"
    directory.mkdir()
    touch(directory, *names)
    assert resolve_error(directory) == f"positions input {directory}: {found}{skipped}"


def test_an_empty_glob_says_what_it_skipped(tmp_path):
    touch(tmp_path, "d/_SUCCESS", "d/.part-0.crc")
    make_output(tmp_path / "d" / "old")
    spec = tmp_path / "d" / "*"
    assert resolve_error(spec) == (
        f"positions input {spec}: no file matches this pattern; skipped 2 files whose "
        f"{MARKERS}, 1 snim-batch output directory")
    assert resolve_error(tmp_path / "nothing" / "*.csv") == (
        f"positions input {tmp_path / 'nothing' / '*.csv'}: no file matches this pattern")


def test_symlink_loop_and_dangling_symlink_say_so(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling.csv").symlink_to(tmp_path / "gone.csv")
    assert resolve_error(tmp_path / "loop") == (
        f"positions input {tmp_path / 'loop'}: symlink loop (too many levels of symbolic links)")
    assert resolve_error(tmp_path / "dangling.csv") == (
        f"positions input {tmp_path / 'dangling.csv'}: dangling symlink to "
        f"{tmp_path / 'gone.csv'} (its target does not exist)")
    assert resolve_error(tmp_path / "loop" / "x.csv") == (
        f"positions input {tmp_path / 'loop' / 'x.csv'}: symlink loop (too many levels of "
        "symbolic links)")


def test_a_dangling_input_file_in_a_directory_is_an_error_not_a_silent_skip(tmp_path):
    touch(tmp_path, "d/a.csv")
    (tmp_path / "d" / "b.csv").symlink_to(tmp_path / "gone.csv")
    (tmp_path / "d" / "notes.txt").symlink_to(tmp_path / "gone.txt")  # skipped by its suffix
    assert resolve_error(tmp_path / "d") == (
        f"positions input {tmp_path / 'd'}: {tmp_path / 'd/b.csv'}: dangling symlink to "
        f"{tmp_path / 'gone.csv'} (its target does not exist)")


def test_a_file_name_that_is_not_utf8_is_refused_by_name(tmp_path):
    raw = os.fsencode(tmp_path) + b"/d/pos\xff.csv"
    os.makedirs(os.fsencode(tmp_path) + b"/d")
    with open(raw, "wb") as fh:
        fh.write(b"a\n")
    shown = f"{tmp_path}/d/pos\\xff.csv"
    assert resolve_error(tmp_path / "d") == (
        f"positions input {tmp_path / 'd'}: {shown}: the file name is not UTF-8 text, which the "
        "outputs need to name it (rename the file)")


# ---- csv_reader: the byte checks before parsing ----------------------------------------------

CSV_BYTES = st.lists(st.sampled_from([b"a", b"7", b",", b"\n", b'"', b"\x00", b"\xc3\xa9",
                                      b"\xe2\x82\xac", b"\xc3", b"\x80", b"\xed\xa0\x80",
                                      b"\xf0\x9f\x98\x80", b"\xff"]), min_size=1, max_size=40)


def bad_byte_reference(raw: bytes) -> int:
    """The first NUL byte, else where Python's strict UTF-8 decoding fails, else -1."""
    if b"\x00" in raw:
        return raw.index(b"\x00")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return -1


@settings(max_examples=300, deadline=None)
@given(CSV_BYTES)
def test_a_csv_files_first_bad_byte_is_where_python_finds_it(tmp_path_factory, pieces):
    """Plain ASCII skips the decode; anything else is decoded exactly: a NUL byte first,
    then an invalid UTF-8 sequence (overlong, surrogate, cut short), named by its offset
    (an empty file never gets here: it is refused first)."""
    raw = b"".join(pieces)
    path = tmp_path_factory.mktemp("scan") / "f.csv"
    path.write_bytes(raw)
    assert csv_reader._scan_text(path).bad_byte == bad_byte_reference(raw)


@pytest.mark.parametrize("part", [1 << 24, 1 << 19])  # whole windows of `_short_lines`
@pytest.mark.parametrize("raw", [
    b"a,b\n" + b"1,2\n" * 300_000,  # plain: no scan
    b"a,b\n1," + b"9" * 700_000 + b"\n2,3\n",  # a line longer than two windows
    b"a,b\n" + b"1,2\n" * 200_000 + b'3,"4\n5"\n' + b"6,7\n" * 10,  # a quote past a part
    "a,b\n\u00e9,\u20ac\n".encode() * 100_000,  # UTF-8, characters cut by the parts
    b"a,b\n" + b"1,2\n" * 200_000 + b"\xff,1\n",  # invalid UTF-8 in a later part
])
def test_a_local_csv_file_read_in_parts_scans_as_its_whole_bytes(
        tmp_path, monkeypatch: pytest.MonkeyPatch, part: int, raw: bytes) -> None:
    """A local file is read in parts (no memory map, which a file cut short meanwhile would
    turn into SIGBUS): the plain-text shortcut and the scan in parts find what the scan of
    the whole bytes finds (each case has one kind of bad byte at most: with both in
    different parts, the parts name the first part's, see `_scan_parts`)."""
    monkeypatch.setattr(csv_reader, "_PART", part)
    path = tmp_path / "f.csv"
    path.write_bytes(raw)
    assert csv_reader._scan_text(path) == csv_reader._scan_bytes(raw)


# ---- csv_reader: records longer than the parser's default block ------------------------------

LONG_HEAPS = " ".join(str(i % 10) for i in range(1_500_000))  # 3 MB: the reader's block is 1 MiB


def _long_record_csv(quoted: bool, end: str, final: bool) -> bytes:
    """Rows 0-4: a short row, a 3 MB heaps cell at row 2, a line with an extra field at row 3;
    the last row is long too when `final` (and then no line end follows it)."""
    cell = f'"{LONG_HEAPS}"' if quoted else LONG_HEAPS
    lines = ["rule_set_id,position_id,heaps", "1,0,5", "1,1,5 6", f"1,2,{cell}", "1,3,4,4",
             "1,4,8"] + ([f"1,5,{cell}"] if final else [])
    return (end.join(lines) + ("" if final else end)).encode()


def _check_long_record_rows(raw: RawTable, final: bool) -> None:
    assert raw.row.tolist() == [0, 1, 2, 4] + ([5] if final else [])
    assert raw.frame["heaps"].to_list() == ["5", "5 6", LONG_HEAPS, "8"] + (
        [LONG_HEAPS] if final else [])
    assert [(r, why) for r, why, _ in raw.bad_lines] == [(3, "line has 4 fields, expected 3")]


@pytest.mark.parametrize(("quoted", "end", "final"), [
    (False, "\n", False), (False, "\r", True), (True, "\r\n", False), (True, "\n", True)])
def test_csv_record_longer_than_the_parsers_block_is_read_whole(tmp_path, quoted, end, final):
    """The contract sets no line length: the reader's block grows to hold the longest record
    (with and without quotes, every line end style, last in the file without a line end)."""
    path = tmp_path / "long.csv"
    path.write_bytes(_long_record_csv(quoted, end, final))
    _check_long_record_rows(readers.read_table(path), final)


@pytest.fixture()
def store_csv(s3, monkeypatch: pytest.MonkeyPatch):
    """(bytes) -> the Location of an object holding them, on the moto server."""
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    from pipeline.io.store import object_store
    from pipeline.io.store.locations import Location

    def put(data: bytes, name: str = "f.csv"):
        s3.client().put_object(Bucket="bkt", Key=name, Body=data)
        return object_store.with_client_options(Location.parse(f"s3://bkt/{name}", Path("/")))

    return put


@pytest.mark.parametrize("whole", [False, True])
def test_csv_object_with_a_record_longer_than_the_block_is_read_whole(
        store_csv, monkeypatch: pytest.MonkeyPatch, whole: bool) -> None:
    """The same from an object in a store, streamed (in parts that cut the long record) or,
    within a run, kept whole."""
    monkeypatch.setattr(csv_reader, "_PART", 1 << 20)
    location = store_csv(_long_record_csv(True, "\r\n", True))
    if not whole:
        _check_long_record_rows(readers.read_table(location), True)
        return
    monkeypatch.setattr(starts, "SMALL_OBJECT", 1 << 23)  # 6 MB: kept whole
    with RunCache() as cache:
        starts.read_start(location, 4, cache=cache)
        assert cache.get("object", location) is not None
        _check_long_record_rows(readers.read_table(location, cache=cache), True)


def test_csv_record_beyond_the_limit_names_its_line_and_the_limit(
        tmp_path, store_csv, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(csv_reader, "LONGEST_RECORD", 1 << 20)
    data = b"a,b\n1,2\n\n3,\"4\n" + b"5" * (1 << 20) + b"\"\n6,7\n"
    path = tmp_path / "f.csv"
    path.write_bytes(data)
    location = store_csv(data)
    for source in (path, location):
        with pytest.raises(InputError) as err:
            readers.read_table(source)
        assert str(err.value) == (f"{source}: line 4: a record of {(1 << 20) + 7} bytes; "
                                  "records of at most 1 MiB are read (memory)")


def _physical_line(data: bytes, offset: int) -> int:
    return len(re.split(rb"\r\n|\r|\n", data[:offset]))


@pytest.mark.parametrize("bad", [b"\x00", b"\xff", b"\xe2\x82"])
@pytest.mark.parametrize("part", [1, 3, 7, 1 << 20])
def test_csv_bad_byte_names_its_physical_line_local_or_streamed(
        tmp_path, store_csv, monkeypatch: pytest.MonkeyPatch, bad: bytes, part: int) -> None:
    """The line of a NUL byte or invalid UTF-8 counts LF, CRLF and CR line ends, quoted or
    not, before it (for an object read in parts, those in the parts before too)."""
    monkeypatch.setattr(csv_reader, "_PART", part)
    data = (b"a,b\r\n1,2\r3,\"x\r\n\xc3\xa9\"\n" + b"4,5\r\n" * 5 + b"6,7\r" + bad + b",8\n")
    offset = data.index(bad)
    path = tmp_path / "f.csv"
    path.write_bytes(data)
    for source in (path, store_csv(data)):
        with pytest.raises(InputError) as err:
            readers.read_table(source)
        assert str(err.value) == (
            f"{source}: line {_physical_line(data, offset)}: not a CSV file (binary data or "
            f"invalid UTF-8 at byte {offset})")


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=40).map(lambda b: bytes(b"a\r\n"[x % 3] for x in b)),
       step=st.integers(1, 8), cut=st.integers(0, 40))
def test_the_line_of_a_byte_is_counted_in_slices_as_in_one_piece(data, step, cut):
    """LF, CRLF and CR each end a line, also when a CRLF falls across two slices."""
    offset = min(cut, len(data))
    before = data[:offset]
    expected = 1 + before.count(b"\n") + before.count(b"\r") - before.count(b"\r\n")
    assert csv_reader._line_at(data, offset, step=step) == expected


def test_a_file_is_read_as_what_it_holds_whatever_its_suffix(tmp_path):
    """CSV named .parquet or .pq, Parquet named .csv, .txt or nothing: named directly (rules
    and positions) or found in a directory, each is read by its content, the same verdicts
    as the sample's; the manifest records the format found. A file that is neither (binary,
    or Parquet cut short) is a Parquet reader's error naming it, exit 1."""
    sample = ROOT / "data" / "sample"
    expected = invoke(["run", "--rules", sample / "rules.csv", "--positions",
                       sample / "positions.csv", "--out", tmp_path / "ref"], tmp_path)
    assert expected[0] == 0, expected[1]
    reference = pl.read_parquet(tmp_path / "ref" / "verdicts.parquet")
    (tmp_path / "named").mkdir()
    csv_as = {"rules": tmp_path / "named" / "rules.parquet",
              "positions": tmp_path / "named" / "positions.pq"}
    pq_as = {"rules": tmp_path / "named" / "rules.csv",
             "positions": tmp_path / "named" / "positions"}
    for name in ("rules", "positions"):
        csv_as[name].write_bytes((sample / f"{name}.csv").read_bytes())
        pq_as[name].write_bytes((sample / f"{name}.parquet").read_bytes())
    for listed, name, content in (("listed-pq", "a.csv", "positions.parquet"),
                                  ("listed-csv", "b.parquet", "positions.csv")):
        (tmp_path / listed).mkdir()
        (tmp_path / listed / name).write_bytes((sample / content).read_bytes())
    cases = [(csv_as["rules"], csv_as["positions"], "csv", "csv"),
             (pq_as["rules"], pq_as["positions"], "parquet", "parquet"),
             (csv_as["rules"], pq_as["positions"], "csv", "parquet")]
    for i, (rules, positions, rules_format, positions_format) in enumerate(cases):
        code, err = invoke(["run", "--rules", rules, "--positions", positions, "--out",
                            tmp_path / f"out{i}"], tmp_path)
        assert code == 0, (rules, positions, err)
        got = json.loads((tmp_path / f"out{i}" / "manifest.json").read_text())["inputs"]
        assert [(f["path"], f["format"]) for f in got["rules"]] == [(str(rules), rules_format)]
        assert [(f["path"], f["format"]) for f in got["positions"]] == [
            (str(positions), positions_format)]
        assert pl.read_parquet(tmp_path / f"out{i}" / "verdicts.parquet").equals(reference)
    for listed in ("listed-pq", "listed-csv"):
        code, err = invoke(["run", "--rules", csv_as["rules"], "--positions",
                            tmp_path / listed, "--out", tmp_path / f"out-{listed}"], tmp_path)
        assert code == 0, err
        assert pl.read_parquet(tmp_path / f"out-{listed}" / "verdicts.parquet").equals(
            reference)

    truncated = tmp_path / "cut.csv"
    truncated.write_bytes((sample / "positions.parquet").read_bytes()[:100])
    binary = tmp_path / "binary.parquet"
    binary.write_bytes(bytes(range(256)) * 8)
    for broken in (truncated, binary):
        code, err = invoke(["run", "--rules", csv_as["rules"], "--positions", broken,
                            "--out", tmp_path / "never"], tmp_path)
        assert code == 1
        assert err.startswith(f"snim-batch: error: {broken}: not a readable Parquet file ("), err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "never").exists()


def test_sniffing_tells_parquet_from_csv_by_the_first_bytes():
    assert formats.sniffed(b"PAR1\x15\x04", "csv") == "parquet"
    assert formats.sniffed(b"PAR1", "csv") == "parquet"  # cut short: its reader says so
    assert formats.sniffed(b"rule_set_id,kind\n1,nim\n", "parquet") == "csv"
    assert formats.sniffed("id,h\u00e9".encode()[:-1], "parquet") == "csv"  # a cut character
    assert formats.sniffed(b"\xef\xbb\xbfa,b\n", "parquet") == "csv"  # a BOM
    for binary in (b"a,b\x00\n", b"\xff\xfe\x00a", b"\x1f\x8b\x08\x00", b""):
        assert formats.sniffed(binary, "parquet") == "parquet"
        assert formats.sniffed(binary, "csv") == "csv"


def test_an_object_is_read_as_what_it_holds_whatever_its_suffix(tmp_path, s3, monkeypatch):
    """In an object store too: CSV named .parquet, Parquet named .csv (small: fetched whole;
    large: by range), Parquet under another name, named directly or below a prefix, each
    read by its content, the sample's verdicts; binary named .parquet is a Parquet
    reader's error naming the object, exit 1."""
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    sample = ROOT / "data" / "sample"
    code, err = invoke(["run", "--rules", sample / "rules.csv", "--positions",
                        sample / "positions.csv", "--out", tmp_path / "ref"], tmp_path)
    assert code == 0, err
    reference = pl.read_parquet(tmp_path / "ref" / "verdicts.parquet")
    client = s3.client()
    objects = {"csv/rules.parquet": (sample / "rules.csv").read_bytes(),
               "csv/positions.pq": (sample / "positions.csv").read_bytes(),
               "pq/rules.csv": (sample / "rules.parquet").read_bytes(),
               "pq/positions.csv": (sample / "positions.parquet").read_bytes(),
               "other/positions": (sample / "positions.parquet").read_bytes(),
               "listed/a.csv": (sample / "positions.parquet").read_bytes(),
               "bad/positions.parquet": bytes(range(256)) * 8}
    for key, body in objects.items():
        client.put_object(Bucket="bkt", Key=key, Body=body)
    cases = [("s3://bkt/csv/rules.parquet", "s3://bkt/csv/positions.pq", "csv", "csv"),
             ("s3://bkt/pq/rules.csv", "s3://bkt/pq/positions.csv", "parquet", "parquet"),
             ("s3://bkt/pq/rules.csv", "s3://bkt/other/positions", "parquet", "parquet"),
             ("s3://bkt/csv/rules.parquet", "s3://bkt/listed", "csv", "parquet")]
    for small in (True, False):
        if not small:  # every object streamed by range, not fetched whole and kept
            monkeypatch.setattr(starts, "SMALL_OBJECT", 0)
        for i, (rules, positions, rules_format, positions_format) in enumerate(cases):
            out = tmp_path / f"out-{small}-{i}"
            code, err = invoke(["run", "--rules", rules, "--positions", positions, "--out",
                                out], tmp_path)
            assert code == 0, (rules, positions, err)
            got = json.loads((out / "manifest.json").read_text())["inputs"]
            assert [f["format"] for f in got["rules"]] == [rules_format]
            assert {f["format"] for f in got["positions"]} == {positions_format}
            assert pl.read_parquet(out / "verdicts.parquet").equals(reference)
    code, err = invoke(["run", "--rules", "s3://bkt/pq/rules.csv", "--positions",
                        "s3://bkt/bad/positions.parquet", "--out", tmp_path / "never"],
                       tmp_path)
    assert code == 1
    assert err.startswith("snim-batch: error: s3://bkt/bad/positions.parquet: not a readable "
                          "Parquet file ("), err
    assert not (tmp_path / "never").exists()


def _slices_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("slices")]


def test_slices_come_in_order_two_decoding_at_once_and_no_thread_outlives_them(tmp_path):
    """A local file's slices (`readers._slices`, two decoding at once) come in file order,
    all of them; leaving after the first, or a read that fails midway (the file gone), ends
    the decoding threads; frames before the failure are the file's first rows."""
    from polars.testing import assert_frame_equal

    path = tmp_path / "p.parquet"
    frame = pl.DataFrame({"k": np.arange(70, dtype=np.int64),
                          "v": [f"x{i}" for i in range(70)]})
    frame.write_parquet(path, row_group_size=10)
    slices = list(readers._slices(path, readers.slice_bounds([10] * 7, 10)))
    assert [s.height for s in slices] == [10] * 7
    assert_frame_equal(pl.concat(slices), frame)
    assert _slices_threads() == []

    early = readers._slices(path, readers.slice_bounds([10] * 7, 10))
    assert_frame_equal(next(early), frame.head(10))
    early.close()
    assert _slices_threads() == []

    failing = readers._slices(path, readers.slice_bounds([10] * 7, 10))
    got = [next(failing)]
    path.unlink()
    with pytest.raises(Exception):  # noqa: B017, PT011 - polars' own error for a lost file
        got.extend(failing)
    assert_frame_equal(pl.concat(got), frame.head(10 * len(got)))
    assert _slices_threads() == []


def test_a_stop_during_the_hold_is_delivered_after_it():
    """A SIGTERM that comes while a commit holds the stop signals reaches the handler set
    before only once the block ends (the CLI then notes it: every commit has told it that it
    committed); a signal ignored before stays ignored."""
    got = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    previous_hup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with commit.interrupts_held():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.05)
            assert got == []
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        time.sleep(0.05)
        assert got == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, before)
        signal.signal(signal.SIGHUP, previous_hup)


def test_the_staging_directory_is_made_again_if_its_parent_vanished_meanwhile(
        tmp_path, monkeypatch):
    """Another run's clean-up of a failure may remove an empty parent this run had just made
    (both made it for their --out): the staging directory is made once more, parent and
    all, rather than failing the run; a second loss is the run's error."""
    import shutil

    real = Path.mkdir
    lost = []

    def racing(self, *args, **kwargs):
        if self.name.startswith(".out.partial-") and len(lost) < times:
            lost.append(self)
            shutil.rmtree(self.parent)  # the other run's clean-up, just before
            raise FileNotFoundError(2, "No such file or directory", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", racing)
    times = 1
    staging = commit._make_staging(tmp_path / "new" / "out", "run1", "out")
    assert staging.is_dir() and len(lost) == 1
    times = 3
    with pytest.raises(OutputError, match="no such file or directory while creating the staging"):
        commit._make_staging(tmp_path / "other" / "out", "run2", "out")


def test_takes_by_name_takes_at_least_what_a_glob_through_dot_dot_reads(tmp_path: Path
                                                                        ) -> None:
    """`..` after a wildcard, or out of a link: where it leads is the file system's, so the
    check by names (a --result-file the next night would read) judges widely: it takes every
    file the finder reads, and never refuses less."""
    from pipeline.io.inputs.discovery import resolve_inputs, takes_by_name

    for name in ["d/p.csv", "e/q.csv", "e/sub/x.txt", "w/top/c/deep/y.txt", "w/top/c/q.csv",
                 "w/top/r.csv"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    (tmp_path / "d" / "le").symlink_to(tmp_path / "e" / "sub")
    for spec, future in [("d/le/../*.csv", "e/res.csv"), ("w/top/**/../*.csv", "w/top/c/n.csv"),
                         ("d/*/../../e/*.csv", "e/new.csv")]:
        given = Path(os.path.join(tmp_path, spec))
        taken = [os.path.realpath(p) for p in resolve_inputs(str(given), "positions")]
        assert taken, spec
        for path in [*taken, str(tmp_path / future)]:
            entry = Path(os.path.realpath(Path(path).parent)) / Path(path).name
            assert takes_by_name(given, entry, Path(path)), (spec, path)


def test_takes_by_name_agrees_with_the_finder_on_every_glob_form(tmp_path: Path) -> None:
    """Which existing files an input glob or directory takes, judged from names alone
    (`takes_by_name`, for run --result-file), is what the finder itself lists: over
    a tree with hidden and `_` names, nested directories, non-data files and a linked
    directory, for each glob form discovery knows."""
    from pipeline.io.inputs.discovery import resolve_inputs, takes_by_name

    files = ["data/p.csv", "data/run.json", "data/_x.csv", "data/.h.csv", "data/2026-12/a.csv",
             "data/2026-12/b.parquet", "data/sub/deep/c.csv", "data/sub/_hid/d.csv",
             "other/e.csv", "data/q.pq", "data/2026-11.csv"]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    (tmp_path / "lk").symlink_to(tmp_path / "data")
    specs = ["data", "lk", "data/*", "data/*.csv", "data/**", "data/**/*.csv", "data/2026*",
             "lk/*", "lk/**", "data/*/*.csv", "data/s*/**", "*/p.csv", "data/?.csv",
             "data/p.csv", "lk/p.csv", "data/sub/../*.csv", "data/sub/../**", "data/*/",
             "*/", "data/**/"]
    for spec in specs:
        given = tmp_path / spec
        slash = "/" if spec.endswith("/") else ""
        try:
            taken = {os.path.realpath(p)
                     for p in resolve_inputs(str(given) + slash, "positions")}
        except InputError:
            taken = set()
        for name in files:
            entry = Path(os.path.realpath(tmp_path / name))
            assert takes_by_name(given, entry, tmp_path / name, directories_only=bool(slash)
                                 ) == (str(entry) in taken), (spec, name)


def test_a_page_the_decoder_panics_on_is_said_to_be_damaged(tmp_path: Path) -> None:
    """A file whose footer is intact and whose first pages are overwritten: polars' decoder
    panics; the message said the panic's own text (`called Result::unwrap() on an Err
    value: JoinError::Panic(...)`; QA), it now says the file is damaged. Exit 1, nothing
    written."""
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"rule_set_id": [1] * 1000, "position_id": list(range(1000)),
                             "heaps": [[1, 2]] * 1000}), path)
    data = path.read_bytes()
    path.write_bytes(data[:100] + b"\xff" * 200 + data[300:])
    (tmp_path / "rules.csv").write_text("rule_set_id,kind,moves\n1,subtraction,2 5\n")
    code, err = invoke(["run", "--rules", "rules.csv", "--positions", "p.parquet", "--out",
                        "out"], tmp_path)
    assert code == 1
    assert err.splitlines()[-1] == (
        f"snim-batch: error: {path}: not a readable Parquet file (its pages do not decode as "
        "its footer describes them: the file is damaged, or written in a way the Parquet "
        "reader cannot take)"), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("batch_rows", [1000, 1 << 20])
def test_a_corrupt_page_in_a_later_row_group_names_the_rows_read_before_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_rows: int) -> None:
    """A Parquet file whose third row group (rows 2000-2999) has a page header overwritten:
    the run fails, exit 1, nothing written, and where the rows before it were read whole the
    message says from which row the file cannot be read (QA: only the file was named)."""
    from pipeline import batches

    monkeypatch.setattr(batches, "BATCH_ROWS", batch_rows)
    n = 3000
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"rule_set_id": np.ones(n, dtype=np.int64),
                             "position_id": np.arange(n),
                             "heaps": [[i % 7, 3] for i in range(n)]}),
                   path, row_group_size=1000, compression="none")
    page = pq.ParquetFile(path).metadata.row_group(2).column(2).data_page_offset
    data = bytearray(path.read_bytes())
    data[page:page + 12] = b"\xff" * 12
    path.write_bytes(bytes(data))
    (tmp_path / "rules.csv").write_text("rule_set_id,kind,moves\n1,subtraction,1 2\n")
    code, err = invoke(["run", "--rules", "rules.csv", "--positions", "p.parquet", "--out",
                        "out", "--result-file", "r.json"], tmp_path)
    assert code == 1
    where = " from row 2000 on" if batch_rows == 1000 else ""
    assert err.startswith(f"snim-batch: error: {path}: not a readable Parquet file{where} ("), err
    assert json.loads((tmp_path / "r.json").read_text())["error"]["row"] == (
        2000 if batch_rows == 1000 else None)
    assert not (tmp_path / "out").exists()
