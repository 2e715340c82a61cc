"""`convert` through the CLI: both tables or neither, the same overwrite policy as `run`
(an existing table only with --overwrite, and only one convert wrote), and what a killed
convert leaves cleaned up by the next. Expected tables are read off the classic text."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from conftest import killed_at, on_small_disk
from typer.testing import CliRunner

from pipeline.cli import app

FIRST = "2 1 2\n2\n1 3\n2 1 4\n1 3\n1\n0\n0\n"
FIRST_RULES = [(1, "subtraction", [1, 2]), (2, "subtraction", [3])]
FIRST_POSITIONS = [(1, 0, [3]), (1, 1, [1, 4]), (2, 0, [])]
SECOND = "1 5\n1\n2 6 7\n0\n"
SECOND_RULES = [(1, "subtraction", [5])]
SECOND_POSITIONS = [(1, 0, [6, 7])]
TABLES = ["positions.parquet", "rules.parquet"]


def _convert(tmp_path: Path, text: str, out: Path, *extra: str) -> tuple[int, str]:
    source = tmp_path / "classic.txt"
    source.write_text(text)
    result = CliRunner().invoke(app, ["convert", str(source), "--out", str(out), *extra])
    return result.exit_code, result.stderr


def _tables(out: Path) -> tuple[list, list]:
    return (pl.read_parquet(out / "rules.parquet").rows(),
            pl.read_parquet(out / "positions.parquet").rows())


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_an_existing_table_needs_overwrite_and_is_then_replaced(tmp_path: Path) -> None:
    out = tmp_path / "tables"
    assert _convert(tmp_path, FIRST, out) == (0, "")
    assert _tables(out) == (FIRST_RULES, FIRST_POSITIONS)
    before = _files(out)
    code, err = _convert(tmp_path, SECOND, out)
    assert code == 1
    assert err == (f"snim-batch: error: {out / 'rules.parquet'}: already exists (pass "
                   "--overwrite to replace it); nothing was written\n")
    assert _files(out) == before
    assert _convert(tmp_path, SECOND, out, "--overwrite") == (0, "")
    assert _tables(out) == (SECOND_RULES, SECOND_POSITIONS)
    assert sorted(os.listdir(out)) == TABLES


@pytest.mark.parametrize("existing", [False, True])
def test_a_link_as_out_is_followed_a_dangling_one_to_the_directory_it_names(
        tmp_path: Path, existing: bool) -> None:
    target = tmp_path / "elsewhere" / "tables"
    if existing:
        target.mkdir(parents=True)
    link = tmp_path / "latest"
    link.symlink_to(target)
    assert _convert(tmp_path, FIRST, link) == (0, "")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert _tables(target) == (FIRST_RULES, FIRST_POSITIONS)
    assert sorted(os.listdir(target)) == TABLES
    assert _convert(tmp_path, SECOND, link, "--overwrite") == (0, "")
    assert _tables(target) == (SECOND_RULES, SECOND_POSITIONS)


@pytest.mark.parametrize("foreign", ["rules.parquet", "positions.parquet"])
@pytest.mark.parametrize("content", ["parquet", "text"])
def test_overwrite_never_replaces_a_table_convert_did_not_write(tmp_path: Path, foreign: str,
                                                                content: str) -> None:
    """A user's own table (Parquet without convert's mark, or any other file) under either
    name: refused, and neither table is written."""
    out = tmp_path / "tables"
    out.mkdir()
    if content == "parquet":
        pl.DataFrame({"mine": [1, 2]}).write_parquet(out / foreign)
    else:
        (out / foreign).write_text("my notes\n")
    (out / "other.txt").write_text("keep\n")
    before = _files(out)
    code, err = _convert(tmp_path, FIRST, out, "--overwrite")
    assert code == 1
    assert err == (f"snim-batch: error: {out / foreign}: exists and is not a table snim-batch "
                   "convert wrote; refusing to replace it, nothing was written\n")
    assert _files(out) == before


def test_a_directory_in_the_way_of_the_second_table_writes_neither(tmp_path: Path) -> None:
    out = tmp_path / "new" / "tables"
    out.mkdir(parents=True)
    (out / "positions.parquet").mkdir()
    code, err = _convert(tmp_path, FIRST, out, "--overwrite")
    assert code == 1
    assert err == (f"snim-batch: error: {out / 'positions.parquet'}: exists and is not a "
                   "regular file; refusing to replace it, nothing was written\n")
    assert sorted(os.listdir(out)) == ["positions.parquet"]


@pytest.mark.parametrize("disk", ["full", "read-only"])
def test_convert_on_a_full_or_read_only_disk_writes_nothing(tmp_path: Path, disk: str) -> None:
    """A real small tmpfs: no space (or a read-only mount) while writing the tables: exit 1,
    one line naming the output directory and the cause, no file left (a missing directory
    made for the tables is removed again)."""
    source = tmp_path / "classic.txt"
    source.write_text(FIRST)
    out = tmp_path / "disk" / "made" / "tables"
    fault = ["fill-leaving", "0"] if disk == "full" else ["read-only"]
    _, failed, tree = on_small_disk(tmp_path, "size=256k", [
        fault, ["convert", str(source), "--out", str(out)], ["tree"]])
    code, err = failed
    assert code == 1
    if disk == "full":
        assert err == (f"snim-batch: error: {out}: no space left on device while writing "
                       "rules.parquet; nothing was written (free space or choose another "
                       "--out)\n")
        assert tree == ["filler"]
    else:
        assert err == (f"snim-batch: error: {out}: read-only file system while creating the "
                       f"directory {out.parent}; nothing was written\n")
        assert tree == []


@pytest.mark.slow
def test_two_converts_at_once_into_a_new_directory_keep_one_and_refuse_the_other(
        tmp_path: Path) -> None:
    """Started together, without --overwrite, into a directory neither finds: one writes
    its tables, the other is refused naming a table (never the directory the first made,
    and never both written, the second over the first's), every time."""
    exe = Path(sys.executable).with_name("snim-batch")
    sources = []
    for name, text in (("first.txt", FIRST), ("second.txt", SECOND)):
        (tmp_path / name).write_text(text)
        sources.append(tmp_path / name)
    for attempt in range(6):
        out = tmp_path / f"tables{attempt}"
        procs = [subprocess.Popen([str(exe), "convert", str(source), "--out", str(out)],
                                  stderr=subprocess.PIPE, text=True) for source in sources]
        done = [(proc.wait(timeout=120), proc.stderr.read()) for proc in procs]
        for proc in procs:
            proc.stderr.close()
        codes = sorted(code for code, _ in done)
        assert codes == [0, 1], done
        refused = next(err for code, err in done if code == 1)
        assert "creating the directory" not in refused, refused
        assert ("already exists (pass --overwrite to replace it)" in refused
                or "a file of that name appeared meanwhile" in refused), refused
        winner = sources[next(i for i, (code, _) in enumerate(done) if code == 0)]
        assert _tables(out) == (_tables_of(winner, tmp_path / f"alone{attempt}"))
        assert sorted(os.listdir(out)) == TABLES


def _tables_of(source: Path, out: Path) -> tuple[list, list]:
    """The tables a convert of `source` alone writes."""
    result = CliRunner().invoke(app, ["convert", str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return _tables(out)


def test_a_killed_convert_is_finished_or_undone_by_the_next(tmp_path: Path) -> None:
    """Killed after each of its changes in turn while replacing tables: each table is then
    absent, or a whole old or new one; the next convert finishes or removes what was left,
    leaving exactly the two tables, and nothing else beside them."""
    out = tmp_path / "tables"
    source = tmp_path / "second.txt"
    source.write_text(SECOND)
    for limit in range(1, 40):
        if out.exists():
            for name in os.listdir(out):
                (out / name).unlink()
        assert _convert(tmp_path, FIRST, out) == (0, "")
        proc = killed_at(limit, ["convert", str(source), "--out", str(out), "--overwrite"])
        assert proc.returncode in (0, -signal.SIGKILL), proc.stderr
        rules = out / "rules.parquet"
        positions = out / "positions.parquet"
        assert not rules.exists() or pl.read_parquet(rules).rows() in (FIRST_RULES,
                                                                      SECOND_RULES), limit
        assert not positions.exists() or pl.read_parquet(positions).rows() in (
            FIRST_POSITIONS, SECOND_POSITIONS), limit
        assert _convert(tmp_path, SECOND, out, "--overwrite") == (0, ""), limit
        assert _tables(out) == (SECOND_RULES, SECOND_POSITIONS)
        assert sorted(os.listdir(out)) == TABLES, limit
        if proc.returncode == 0:
            break
    assert proc.returncode == 0


def test_only_a_dead_process_temporaries_are_removed(tmp_path: Path) -> None:
    """Leftovers named as convert names them, of a process that is gone, are removed; a live
    process's, and names of any other form, are kept."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    out = tmp_path / "tables"
    out.mkdir()
    leftovers = [f".rules.parquet.tmp-{dead.pid}-0123abcd",
                 f".positions.parquet.old-{dead.pid}-0123abcd"]
    kept = [f".rules.parquet.tmp-{os.getpid()}-0123abcd", f".notes.tmp-{dead.pid}-0123abcd",
            f".rules.parquet.tmp-{dead.pid}-mine"]
    for name in leftovers + kept:
        (out / name).write_bytes(b"partial")
    assert _convert(tmp_path, FIRST, out) == (0, "")
    assert sorted(os.listdir(out)) == sorted(kept + TABLES)


def test_a_dead_process_journal_finishes_its_renames(tmp_path: Path) -> None:
    """A journal left by a convert killed while renaming: its whole tables are renamed into
    place by the next convert, which then judges them as its own (refused without
    --overwrite)."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    staged = tmp_path / "staged"
    assert _convert(tmp_path, SECOND, staged) == (0, "")
    out = tmp_path / "tables"
    assert _convert(tmp_path, FIRST, out) == (0, "")
    token = f"{dead.pid}-0123abcd"
    os.rename(out / "rules.parquet", out / f".rules.parquet.old-{token}")
    os.rename(staged / "rules.parquet", out / f".rules.parquet.tmp-{token}")
    os.rename(staged / "positions.parquet", out / f".positions.parquet.tmp-{token}")
    (out / f".snim-tables-{token}.journal").write_text('["rules.parquet", "positions.parquet"]')
    code, err = _convert(tmp_path, FIRST, out)
    assert code == 1, err
    assert sorted(os.listdir(out)) == TABLES
    assert _tables(out) == (SECOND_RULES, SECOND_POSITIONS)


def _failing_writer(fails_on: str, error: BaseException):
    """A table writer that writes each table as convert does, but on `fails_on` leaves half
    a file in the staging directory and raises `error` (through the same failure wording as
    convert's own writer, for an OSError)."""
    from pipeline.io.outputs.failures import writing
    from pipeline.io.outputs.publish_tables import write_marked_table

    def write(frame: pl.DataFrame, path: Path) -> None:
        if path.name != fails_on:
            write_marked_table(frame, path)
            return
        with writing(path.name):
            path.write_bytes(b"PAR1 half a table")
            raise error

    return write


@pytest.mark.parametrize("fails_on", ["rules.parquet", "positions.parquet"])
@pytest.mark.parametrize("error", ["no space", "unexpected", "interrupt"])
def test_a_convert_failing_mid_write_leaves_the_tables_as_they_were(
        tmp_path: Path, monkeypatch, fails_on: str, error: str) -> None:
    """Convert's tables go through the Output protocol: a writer failing on either table
    (a full disk, a bug, Ctrl-C) after the other was staged leaves the earlier tables as they
    were and nothing beside them; a new directory is not left behind."""
    import errno

    import pipeline.convert

    raised = {"no space": OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
              "unexpected": RuntimeError("boom"), "interrupt": KeyboardInterrupt()}[error]
    out = tmp_path / "tables"
    assert _convert(tmp_path, FIRST, out) == (0, "")
    before = _files(out)
    monkeypatch.setattr(pipeline.convert, "write_marked_table",
                        _failing_writer(fails_on, raised))
    code, err = _convert(tmp_path, SECOND, out, "--overwrite")
    new = tmp_path / "new" / "tables"
    code_new, err_new = _convert(tmp_path, SECOND, new)
    if error == "no space":
        assert (code, err) == (1, f"snim-batch: error: {out}: no space left on device while "
                                  f"writing {fails_on}; nothing was written (free space or "
                                  "choose another --out)\n")
    elif error == "unexpected":
        assert code == 1 and err.startswith("snim-batch: internal error: RuntimeError: boom")
    else:
        assert (code, err) == (130, "snim-batch: interrupted; nothing was written\n")
    assert code_new == code
    assert _files(out) == before
    assert not (tmp_path / "new").exists(), err_new
