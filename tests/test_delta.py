"""`--format delta`: nights committed to Delta tables, reruns, time travel, kills, S3.

Expected verdicts come from the brute-force game search in conftest (`wins`); Delta state is
read back through deltalake and polars, never through the code under test."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import duckdb
import polars as pl
import pytest
from conftest import invoke, on_small_disk, wins, write_csv
from deltalake import DeltaTable
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import config_from_dict
from pipeline.errors import OutputError
from pipeline.history import history_lines
from pipeline.io.outputs import delta, delta_tables
from pipeline.io.store import object_store
from pipeline.run import run_job

RULES = {1: ("subtraction", (2, 5)), 2: ("nim", ()), 3: ("subtraction", (1, 3, 4)),
         4: ("half", ())}
TABLES = ("verdicts", "rejects", "summary", "sg_tables", "runs")
NIGHT_1, NIGHT_2 = date(2026, 11, 1), date(2026, 11, 2)


def write_rules(path: Path) -> Path:
    return write_csv(path, ["rule_set_id", "kind", "moves"],
                     [[rid, kind, " ".join(map(str, moves))]
                      for rid, (kind, moves) in RULES.items()])


def random_positions(seed: int, n: int) -> list[tuple[int, int, tuple[int, ...]]]:
    rnd = random.Random(seed)
    return [(rnd.choice(list(RULES)), pid, tuple(rnd.randint(0, 20)
                                                  for _ in range(rnd.randint(0, 3))))
            for pid in range(n)]


def write_positions(path: Path, positions, bad_rows: int = 0) -> Path:
    rows = [[rid, pid, " ".join(map(str, heaps))] for rid, pid, heaps in positions]
    rows += [[1, 10_000 + i, "x"] for i in range(bad_rows)]  # rejected: not an integer
    return write_csv(path, ["rule_set_id", "position_id", "heaps"], rows)


def expected_verdicts(positions) -> pl.DataFrame:
    """The brute-force verdicts in key order."""
    return pl.DataFrame(
        [(rid, pid, "W" if wins(RULES[rid][0], RULES[rid][1], heaps) else "L")
         for rid, pid, heaps in sorted(positions)],
        schema={"rule_set_id": pl.Int64, "position_id": pl.Int64, "verdict": pl.String},
        orient="row")


def run_night(tmp_path: Path, root: Path, positions, night: date | None, bad_rows: int = 0,
              **cfg):
    name = f"positions-{abs(hash((tuple(positions), bad_rows))) % 10**8}.csv"
    return run_job(config_from_dict({
        "rules": str(write_rules(tmp_path / "rules.csv")),
        "positions": str(write_positions(tmp_path / "in" / name, positions, bad_rows)),
        "out": str(root), "output": {"format": "delta"}, **cfg}), run_date=night)


def versions(root: Path) -> dict[str, int]:
    return {name: DeltaTable(str(root / name)).version() for name in TABLES}


def night_rows(root: Path, table: str, night: date, version: int | None = None
               ) -> pl.DataFrame:
    return pl.read_delta(str(root / table), version=version).filter(
        pl.col("run_date") == night)


def verdict_rows(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.select("rule_set_id", "position_id", "verdict").sort(
        "rule_set_id", "position_id")


# ---- nights, reruns, time travel ------------------------------------------------------------


def test_two_nights_then_a_rerun_replaces_exactly_its_night(tmp_path: Path) -> None:
    root = tmp_path / "tables"
    first, second, fixed = (random_positions(seed, n) for seed, n in ((1, 300), (2, 250),
                                                                      (3, 180)))
    r1 = run_night(tmp_path, root, first, NIGHT_1, bad_rows=2)
    assert r1.exit_code == 3
    assert versions(root) == dict.fromkeys(TABLES, 0)
    r2 = run_night(tmp_path, root, second, NIGHT_2)
    assert r2.exit_code == 0
    assert versions(root) == dict.fromkeys(TABLES, 1)
    night_2_before = {t: night_rows(root, t, NIGHT_2) for t in TABLES}

    r3 = run_night(tmp_path, root, fixed, NIGHT_1)  # the rerun, after a fix of the input
    # one commit per data table; the runs table: the night taken out, then the new row
    assert versions(root) == {**dict.fromkeys(TABLES[:4], 2), "runs": 3}
    assert r3.manifest["table_versions"] == {**dict.fromkeys(TABLES[:4], 2), "runs": 3}
    for table in TABLES:
        partitions = {Path(uri).parent.name for uri in DeltaTable(str(root / table)).file_uris()}
        assert partitions <= {"run_date=2026-11-01", "run_date=2026-11-02"}, table
        now = pl.read_delta(str(root / table))
        assert set(now.filter(pl.col("run_date") == NIGHT_1)["run_id"]) <= {
            r3.manifest["run_id"]}, table
        assert_frame_equal(night_rows(root, table, NIGHT_2), night_2_before[table])
    assert_frame_equal(verdict_rows(night_rows(root, "verdicts", NIGHT_1)),
                       expected_verdicts(fixed))
    assert_frame_equal(verdict_rows(night_rows(root, "verdicts", NIGHT_2)),
                       expected_verdicts(second))
    assert night_rows(root, "rejects", NIGHT_1).is_empty()
    runs = pl.read_delta(str(root / "runs")).sort("run_date")
    assert runs.select("run_date", "run_id", "verdicts", "positions_rows_rejected",
                       "status").rows() == [
        (NIGHT_1, r3.manifest["run_id"], 180, 0, "ok"),
        (NIGHT_2, r2.manifest["run_id"], 250, 0, "ok")]
    w = expected_verdicts(fixed)["verdict"].eq("W").sum()
    assert runs["W"][0] == w and runs["w_rate"][0] == pytest.approx(w / 180)
    inputs = json.loads(runs["input_files"][0])
    assert [Path(f["path"]).name for f in inputs["positions"]] == [
        Path(r3.manifest["config"]["positions"]).name]

    # time travel: version 0 of each data table is the first night as the first run wrote it
    old = night_rows(root, "verdicts", NIGHT_1, version=0)
    assert set(old["run_id"]) == {r1.manifest["run_id"]}
    assert_frame_equal(verdict_rows(old), expected_verdicts(first))
    old_rejects = night_rows(root, "rejects", NIGHT_1, version=0)
    assert old_rejects.height == 2 and set(old_rejects["column"]) == {"heaps"}
    # docs/delta.md's DuckDB query, through deltalake's dataset (duckdb's delta extension is a
    # download): the same first-version rows
    old_dataset = DeltaTable(str(root / "verdicts"), version=0).to_pyarrow_dataset()
    connection = duckdb.connect()
    connection.register("old_dataset", old_dataset)
    via_duckdb = connection.execute(
        "SELECT rule_set_id, position_id, verdict FROM old_dataset "
        "WHERE run_date = DATE '2026-11-01' ORDER BY ALL").pl()
    assert_frame_equal(via_duckdb, expected_verdicts(first))
    old_runs = pl.read_delta(str(root / "runs"), version=1).sort("run_date")
    assert old_runs["run_id"].to_list() == [r1.manifest["run_id"], r2.manifest["run_id"]]
    assert old_runs["positions_rows_rejected"].to_list() == [2, 0]


def test_history_lists_every_run_with_its_versions(tmp_path: Path) -> None:
    root = tmp_path / "tables"
    ids = [run_night(tmp_path, root, random_positions(seed, 40), night).manifest["run_id"]
           for seed, night in ((1, NIGHT_1), (2, NIGHT_2), (3, NIGHT_1))]
    code, err = invoke(["history", str(root)], tmp_path)
    assert code == 0, err
    history = delta_tables.run_history(delta_tables.TableRoot(str(root)))
    assert history.select("run_date", "run_id", "version", "verdicts_version", "live").rows() \
        == [("2026-11-01", ids[0], 0, 0, False), ("2026-11-02", ids[1], 1, 1, True),
            ("2026-11-01", ids[2], 3, 2, True)]


def test_the_same_verdicts_as_the_parquet_output(tmp_path: Path) -> None:
    positions = random_positions(7, 400)
    root = tmp_path / "tables"
    result = run_night(tmp_path, root, positions, NIGHT_1, winning_moves=True)
    parquet = run_job(config_from_dict({
        "rules": str(tmp_path / "rules.csv"), "positions": result.manifest["config"]["positions"],
        "out": str(tmp_path / "parquet"), "winning_moves": True}))
    from_delta = pl.read_delta(str(root / "verdicts")).drop("run_date", "run_id").sort(
        "rule_set_id", "position_id")
    assert_frame_equal(from_delta, pl.read_parquet(parquet.out / "verdicts.parquet"),
                       check_column_order=False)
    assert_frame_equal(verdict_rows(from_delta), expected_verdicts(positions))
    for table in ("summary", "sg_tables", "rejects"):
        assert_frame_equal(pl.read_delta(str(root / table)).drop("run_date", "run_id"),
                           pl.read_parquet(parquet.out / f"{table}.parquet"),
                           check_column_order=False, check_row_order=False)


def test_a_night_with_winning_moves_adds_columns_the_earlier_nights_read_as_null(
        tmp_path: Path) -> None:
    root = tmp_path / "tables"
    run_night(tmp_path, root, random_positions(1, 50), NIGHT_1)
    run_night(tmp_path, root, random_positions(2, 50), NIGHT_2, winning_moves=True)
    run_night(tmp_path, root, random_positions(3, 50), date(2026, 11, 3))
    verdicts = pl.read_delta(str(root / "verdicts"))
    moved = verdicts.group_by("run_date").agg(pl.col("move_heap").is_not_null().any())
    assert dict(moved.rows()) == {NIGHT_1: False, NIGHT_2: True, date(2026, 11, 3): False}


def test_a_run_whose_key_type_differs_from_the_table_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "tables"
    run_night(tmp_path, root, random_positions(1, 20), NIGHT_1)
    before = versions(root)
    positions = write_csv(tmp_path / "text.csv", ["rule_set_id", "position_id", "heaps"],
                          [[1, "p-1", "3"]])
    code, err = invoke(["run", "--rules", tmp_path / "rules.csv", "--positions", positions,
                        "--out", root, "--format", "delta", "--run-date", "2026-11-02"],
                       tmp_path)
    assert code == 1, err
    assert (f"{root}/verdicts: this run's columns do not fit the table: position_id "
            "(integer in the table, text in this run)") in err
    assert "nothing was written" in err and "Traceback" not in err
    assert versions(root) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tables")] == []


def test_a_failed_run_leaves_every_table_as_it_was(tmp_path: Path) -> None:
    root = tmp_path / "tables"
    run_night(tmp_path, root, random_positions(1, 20), NIGHT_1)
    before = versions(root)
    code, err = invoke(["run", "--rules", tmp_path / "rules.csv",
                        "--positions", write_positions(tmp_path / "bad.csv", [], bad_rows=1),
                        "--out", root, "--format", "delta", "--run-date", "2026-11-01",
                        "--on-bad-rows", "fail"], tmp_path)
    assert code == 1 and "nothing was written" in err
    assert versions(root) == before


def third_call_fails(real, calls: list[str], message: str, **fields):
    """`real` (a delta step taking (root, plan, ...)), whose third call raises OutputError
    `message` with `fields`; each call's table name is appended to `calls`."""
    def step(*args, **kwargs):
        calls.append(args[1].name)
        if len(calls) == 3:
            raise OutputError(message, **fields)
        return real(*args, **kwargs)

    return step


def rerun(tmp_path: Path, root: Path, run_date: str) -> tuple[int, str]:
    """The CLI run of 30 other positions into `root` for the night `run_date`."""
    return invoke(["run", "--rules", tmp_path / "rules.csv", "--positions",
                   write_positions(tmp_path / "p2.csv", random_positions(2, 30)), "--out", root,
                   "--format", "delta", "--run-date", run_date], tmp_path)


def test_a_run_failing_between_commits_puts_every_table_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rerun whose third table commit fails (the store refuses it) restores the two tables
    it committed, and the night it took out of the runs table: every table then holds the
    rows of its version before the run."""
    root = tmp_path / "tables"
    run_night(tmp_path, root, random_positions(1, 30), NIGHT_1)
    before = versions(root)
    rows_before = {t: pl.read_delta(str(root / t)) for t in TABLES}
    calls: list[str] = []
    monkeypatch.setattr(delta, "_commit", third_call_fails(
        delta._commit, calls, f"{root}/summary: cannot commit the run's rows (refused)",
        written=False, hint=" (check the store's permissions)"))
    code, err = rerun(tmp_path, root, "2026-11-01")
    assert code == 1, err
    # the failed commit's fields survive the roll-back: rendered once, after what it did
    assert ("cannot commit the run's rows (refused); every table was put back to its rows "
            "before the run; nothing was written (check the store's permissions)") in err, err
    assert calls == ["verdicts", "rejects", "summary"]
    assert versions(root) == {**before, "verdicts": before["verdicts"] + 2,
                              "rejects": before["rejects"] + 2, "runs": before["runs"] + 2}
    for table in TABLES:
        assert_frame_equal(pl.read_delta(str(root / table)), rows_before[table],
                           check_row_order=False)
    # the files of the table whose commit failed stay (that commit may have landed); those
    # of the table no commit was tried for are deleted
    assert set(unreferenced_files(root)) == {"summary"}


def test_a_write_failing_on_a_later_table_deletes_the_files_written_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "tables"
    run_night(tmp_path, root, random_positions(1, 30), NIGHT_1)
    before = versions(root)
    calls: list[str] = []
    monkeypatch.setattr(delta, "_write_files", third_call_fails(
        delta._write_files, calls, f"{root}/summary: cannot write the run's rows (disk full)"))
    code, err = rerun(tmp_path, root, "2026-11-02")
    assert code == 1, err
    assert "cannot write the run's rows (disk full)" in err
    assert calls == ["verdicts", "rejects", "summary"]
    assert versions(root) == before
    assert unreferenced_files(root) == {}


def test_a_write_failing_inside_a_file_deletes_that_file_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills while a data file is half written (here after its first batch): that
    file goes with the others."""
    root = tmp_path / "tables"
    run_night(tmp_path, root, random_positions(1, 30), NIGHT_1)
    before = versions(root)
    real_add, calls = delta._FileStats.add, []

    def disk_full_in_the_second_file(self, batch):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_add(self, batch)

    monkeypatch.setattr(delta._FileStats, "add", disk_full_in_the_second_file)
    code, err = rerun(tmp_path, root, "2026-11-02")
    assert code == 1, err
    assert re.fullmatch(f"snim-batch: error: {re.escape(str(root))}: no space left on device "
                        r"while writing the \w+ table's rows; nothing was written \(free space "
                        r"or choose another --out\)\n", err), err
    assert versions(root) == before
    assert unreferenced_files(root) == {}


def other_run(tmp_path: Path, root: Path, positions, night: date) -> None:
    """Another run of the CLI, in its own process, to completion (exit 0)."""
    path = write_positions(tmp_path / f"other-{len(positions)}.csv", positions)
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--rules",
                           str(tmp_path / "rules.csv"), "--positions", str(path), "--out",
                           str(root), "--format", "delta", "--run-date", night.isoformat()],
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def my_run(tmp_path: Path, root: Path, positions, night: date) -> tuple[int, str]:
    """This run (in-process, under the test's patches) of `positions` as `night`."""
    return invoke(["run", "--rules", tmp_path / "rules.csv", "--positions",
                   write_positions(tmp_path / "mine.csv", positions), "--out", root,
                   "--format", "delta", "--run-date", night.isoformat()], tmp_path)


def assert_night_is(root: Path, night: date, positions) -> None:
    """The runs table lists one run for the night, and its verdicts are the night's rows."""
    run_ids = night_rows(root, "runs", night)["run_id"].to_list()
    assert len(run_ids) == 1
    verdicts = night_rows(root, "verdicts", night)
    assert set(verdicts["run_id"]) == set(run_ids)
    assert_frame_equal(verdict_rows(verdicts), expected_verdicts(positions))
    assert_consistent(root)


def test_a_failing_run_never_restores_over_another_runs_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs of one night at once: Y has read the tables' versions when X (another
    process) commits the night and exits 0; then Y's first commit fails. Y's roll-back must
    leave X's commits alone (restoring Y's versions would undo X) and say so."""
    root = tmp_path / "tables"
    run_night(tmp_path, root, random_positions(1, 30), NIGHT_1)
    mine = random_positions(3, 30)
    theirs = random_positions(2, 40)

    def others_commit_first(*args, **kwargs):
        other_run(tmp_path, root, theirs, NIGHT_1)
        raise OutputError(f"{root}/runs: cannot take out the night (refused)")

    monkeypatch.setattr(delta, "_retract_night", others_commit_first)
    code, err = my_run(tmp_path, root, mine, NIGHT_1)
    assert code == 1, err
    # Y's first commit (the retraction) failed: no table holds a commit of Y's to take out
    assert "every table was put back to its rows before the run" in err, err
    assert "not restored" not in err, err
    assert "Traceback" not in err
    assert_night_is(root, NIGHT_1, theirs)


def test_a_failing_run_leaves_a_table_another_run_committed_to_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Y has committed its verdicts (and the retraction of the night's runs row) when X, run
    to completion meanwhile, commits the whole night; then Y's rejects commit fails. Y's
    roll-back leaves verdicts and runs as X made them, says so, and the night is X's."""
    root = tmp_path / "tables"
    run_night(tmp_path, root, random_positions(1, 30), NIGHT_1)
    theirs = random_positions(2, 40)
    real = delta._commit

    def others_commit_after_my_verdicts(root_, plan, *args, **kwargs):
        if plan.name == "rejects":
            other_run(tmp_path, root, theirs, NIGHT_1)
            raise OutputError(f"{root}/rejects: cannot commit the run's rows (refused)")
        return real(root_, plan, *args, **kwargs)

    monkeypatch.setattr(delta, "_commit", others_commit_after_my_verdicts)
    code, err = my_run(tmp_path, root, random_positions(3, 30), NIGHT_1)
    assert code == 1, err
    assert (f"not restored: another run committed to {root}/verdicts, {root}/runs "
            "meanwhile") in err, err
    assert "Traceback" not in err
    assert_night_is(root, NIGHT_1, theirs)


def test_a_run_fails_before_its_first_commit_if_another_run_committed_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """X commits the night while Y is still writing its files: Y fails before its first
    commit (its commits would replace X's rows under X's exit 0), every table as X left it."""
    root = tmp_path / "tables"
    run_night(tmp_path, root, random_positions(1, 30), NIGHT_1)
    theirs = random_positions(2, 40)
    real_plan, left = delta._plan, {}

    def others_commit_meanwhile(*args, **kwargs):
        if not left:
            other_run(tmp_path, root, theirs, NIGHT_1)
            left.update(versions(root))
        return real_plan(*args, **kwargs)

    monkeypatch.setattr(delta, "_plan", others_commit_meanwhile)
    code, err = my_run(tmp_path, root, random_positions(3, 30), NIGHT_1)
    assert code == 1, err
    assert (f"{root}/runs: another run committed to this table root while this run ran (the "
            "runs table went from version 0 to version 2)") in err
    assert "nothing was written" in err
    assert versions(root) == left
    assert_night_is(root, NIGHT_1, theirs)
    assert unreferenced_files(root) == {}  # the refused run's data files are deleted too


PAUSED_AFTER_ITS_VERDICTS = """
import os, pathlib, time
import pipeline.io.outputs.delta as delta
gate, real = pathlib.Path(os.environ["PAUSE_GATE"]), delta._commit

def paused(root, plan, *args, **kwargs):
    version = real(root, plan, *args, **kwargs)
    if plan.name == "verdicts":
        (gate / "paused").touch()
        while not (gate / "go").exists():
            time.sleep(0.02)
    return version

delta._commit = paused
"""


def test_a_run_fails_before_its_first_commit_if_another_is_between_its_commits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """X (its own process) has committed its verdicts for a new night, not yet its runs row,
    when Y, which began before, reaches its commits; X then finishes. Y fails before its
    first commit, nothing written, and the night is X's whole. Before, Y's verdicts commit
    replaced X's rows while the runs table listed both runs, each `ok` in `history`."""
    root = tmp_path / "tables"
    run_night(tmp_path, root, random_positions(1, 30), NIGHT_1)
    theirs = random_positions(2, 40)
    gate, site = tmp_path / "gate", tmp_path / "site"
    gate.mkdir()
    site.mkdir()
    (site / "sitecustomize.py").write_text(PAUSED_AFTER_ITS_VERDICTS)
    path = write_positions(tmp_path / "theirs.csv", theirs)
    other: list[subprocess.Popen] = []
    real_plan = delta._plan

    def other_between_its_commits(*args, **kwargs):  # after Y's first look at the tables
        if not other:
            other.append(subprocess.Popen(
                [sys.executable, "-m", "pipeline.cli", "run", "--rules", tmp_path / "rules.csv",
                 "--positions", path, "--out", root, "--format", "delta", "--run-date",
                 NIGHT_2.isoformat()], stderr=subprocess.PIPE, text=True,
                env={**os.environ, "PAUSE_GATE": str(gate), "PYTHONPATH": os.pathsep.join(
                    [str(site), *sys.path])}))
            deadline = time.monotonic() + 120
            while not (gate / "paused").exists():
                assert other[0].poll() is None and time.monotonic() < deadline
                time.sleep(0.02)
        return real_plan(*args, **kwargs)

    def other_finishes(*args, **kwargs):  # Y read the versions it commits against
        (gate / "go").touch()
        assert other[0].wait(timeout=120) == 0
        return real_retract(*args, **kwargs)

    real_retract = delta._retract_night
    monkeypatch.setattr(delta, "_plan", other_between_its_commits)
    monkeypatch.setattr(delta, "_retract_night", other_finishes)
    try:
        code, err = my_run(tmp_path, root, random_positions(3, 30), NIGHT_2)
    finally:
        (gate / "go").touch()
        assert other[0].wait(timeout=120) == 0, other[0].stderr.read()
    assert code == 1, err
    assert (f"{root}/verdicts: another run committed to this table root while this run ran "
            "(the verdicts table went from version 0 to version 1)") in err
    assert "nothing was written" in err
    assert_night_is(root, NIGHT_2, theirs)
    assert unreferenced_files(root) == {}


def unreferenced_files(root: Path) -> dict[str, list[str]]:
    """Each table's Parquet files on disk that no version of the table ever added."""
    left = {}
    for table in sorted(p for p in root.iterdir() if (p / "_delta_log").is_dir()):
        added = {json.loads(line)["add"]["path"]
                 for log in (table / "_delta_log").glob("*.json")
                 for line in log.read_text().splitlines() if '"add"' in line}
        on_disk = {str(f.relative_to(table)) for f in table.rglob("*.parquet")
                   if "_delta_log" not in f.parts}
        if on_disk - added:
            left[table.name] = sorted(on_disk - added)
    return left


def test_history_marks_a_run_whose_row_its_failed_commit_took_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rerun whose runs-row commit is made but reported failed (the store's answer lost)
    restores every table, its own row included: `history` shows it `rolled back`, not
    `replaced`, and the first run live again."""
    root = tmp_path / "tables"
    first = random_positions(1, 30)
    kept_id = run_night(tmp_path, root, first, NIGHT_1).manifest["run_id"]
    real = delta._own_version

    def lost_answer(table, run_id):
        version = real(table, run_id)
        if table.table_uri.rstrip("/").endswith("/runs"):
            raise OSError("connection reset by peer")
        return version

    monkeypatch.setattr(delta, "_own_version", lost_answer)
    code, err = invoke(["run", "--rules", tmp_path / "rules.csv", "--positions",
                        write_positions(tmp_path / "p2.csv", random_positions(2, 30)),
                        "--out", root, "--format", "delta", "--run-date", "2026-11-01"],
                       tmp_path)
    assert code == 1 and "every table was put back to its rows before the run" in err, err
    monkeypatch.undo()
    assert_night_is(root, NIGHT_1, first)
    rerun = [c["snim_batch"]["run_id"] for c in DeltaTable(str(root / "runs")).history()
             if "versions" in c.get("snim_batch", {})]
    assert rerun[1] == kept_id and rerun[0] != kept_id
    history = delta_tables.run_history(delta_tables.TableRoot(str(root)))
    assert history.select("run_id", "version", "live", "rolled_back").rows() == [
        (kept_id, 0, True, False), (rerun[0], 2, False, True)]
    lines = history_lines(str(root))
    assert lines[1].split()[1] == kept_id and not lines[1].endswith(("replaced", "back"))
    assert lines[2].split()[1] == rerun[0] and lines[2].endswith(" rolled back")


def test_report_of_a_table_root_shows_the_latest_night_and_every_night(
        tmp_path: Path) -> None:
    root = tmp_path / "tables"
    first, second = random_positions(1, 40), random_positions(2, 30)
    run_night(tmp_path, root, first, NIGHT_1)
    latest = run_night(tmp_path, root, second, NIGHT_2).manifest["run_id"]
    code, err = invoke(["report", root], tmp_path)
    assert code == 0, err
    page = (root / "report.html").read_text()
    assert f"snim-batch run <code>{latest}</code>" in page
    assert "for the night <b>2026-11-02</b>" in page and "Across nights" in page
    assert "2026-11-01 w_rate" in page and "2026-11-02 w_rate" in page
    rates = {n: {rid: sum(v == "W" for r, _, v in rows if r == rid) / sum(r == rid for r, _, _
                                                                        in rows)
                 for rid in {r for r, _, _ in rows}}
             for n, rows in ((1, expected_verdicts(first).rows()),
                             (2, expected_verdicts(second).rows()))}
    spread = {rid: abs(rates[1][rid] - rates[2][rid]) for rid in rates[1].keys() & rates[2]}
    top = max(sorted(spread), key=lambda rid: spread[rid])
    row = re.search(r"<tr><td>(\d+)</td><td>([\d.]+)%</td><td>([\d.]+)%</td>", page)
    assert row is not None and int(row.group(1)) == top
    assert float(row.group(2)) == pytest.approx(100 * rates[1][top], abs=0.05)
    assert float(row.group(3)) == pytest.approx(100 * rates[2][top], abs=0.05)


@pytest.mark.parametrize("name", ["nightly tables", "tábuas+1"])
def test_a_root_whose_path_holds_a_space_or_a_non_ascii_letter_reads_back(
        tmp_path: Path, name: str) -> None:
    """Its files' URIs are percent-encoded: polars' Delta reader could not open them, so
    `history` failed ("internal error") and `report` too, and a rerun of a night could not
    take the night out. Two nights, a rerun, then history, report and the tables read back."""
    root = tmp_path / name
    first, second, fixed = (random_positions(seed, 30) for seed in (1, 2, 3))
    run_night(tmp_path, root, first, NIGHT_1)
    run_night(tmp_path, root, second, NIGHT_2)
    rerun = run_night(tmp_path, root, fixed, NIGHT_1)
    assert rerun.exit_code == 0
    code, err = invoke(["history", str(root)], tmp_path)
    assert code == 0, err
    code, err = invoke(["report", str(root)], tmp_path)
    assert code == 0, err
    assert "for the night <b>2026-11-02</b>" in (root / "report.html").read_text()
    tables = delta_tables.TableRoot(str(root))
    assert_frame_equal(verdict_rows(tables.read("verdicts", nights=[NIGHT_1])),
                       expected_verdicts(fixed))
    assert_frame_equal(verdict_rows(tables.read("verdicts", nights=[NIGHT_2])),
                       expected_verdicts(second))
    assert delta_tables.read_runs(tables)["run_id"].to_list()[0] == rerun.manifest["run_id"]


@pytest.mark.parametrize(("name", "part"), [("d%20x", "%20"), ("h#x", "#"), ("q?x", "?")])
def test_a_root_whose_path_holds_a_part_of_a_url_is_refused_before_any_work(
        tmp_path: Path, name: str, part: str) -> None:
    """deltalake reads a local root's path as a URL: `d%20x` as `d x` (the run committed its
    verdicts at one path and failed at the next table, leaving a root no rerun could use),
    `h#x` and `q?x` with a fragment or a query (the runs table's commit log read as empty:
    `history` listed no run). Refused, by run, explain, history and report alike, with
    nothing written."""
    rules = write_rules(tmp_path / "rules.csv")
    positions = write_positions(tmp_path / "in" / "p.csv", random_positions(1, 10))
    said = (f"{tmp_path}/{name}: a Delta root's path cannot hold {part!r}: deltalake reads "
            "the path as a URL, where it is not part of a name (an escape is decoded, '#' and "
            "'?' end the path), so the tables would not be those named; choose a path "
            "without it")
    for command in ("explain", "run"):
        code, err = invoke([command, "--rules", rules, "--positions", positions, "--out",
                            tmp_path / name, "--format", "delta"], tmp_path)
        assert code == 2, err
        assert said in " ".join(err.split()), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "rules.csv"]
    run_night(tmp_path, tmp_path / "plain", random_positions(1, 10), NIGHT_1)
    (tmp_path / "plain").rename(tmp_path / name)  # a root made so before: said so, not "no
    for command in ("history", "report"):         # runs" with exit 0
        code, err = invoke([command, tmp_path / name], tmp_path)
        assert code == 2, err
        assert said in " ".join(err.split()), err
    assert not (tmp_path / name / "report.html").exists()


# ---- the command line -----------------------------------------------------------------------


@pytest.mark.parametrize("text", ["2026-13-01", "2026-02-30", "20261101", "yesterday", ""])
def test_a_bad_run_date_is_a_usage_error_naming_the_option(tmp_path: Path, text: str) -> None:
    write_rules(tmp_path / "rules.csv")
    code, err = invoke(["run", "--rules", "rules.csv", "--positions", "rules.csv",
                        "--out", "o", "--format", "delta", "--run-date", text], tmp_path)
    assert code == 2
    assert f"--run-date: expected a date YYYY-MM-DD, got '{text}'" in err
    assert not (tmp_path / "o").exists()


def test_a_bad_run_date_from_the_environment_names_the_variable(tmp_path: Path,
                                                               monkeypatch) -> None:
    write_rules(tmp_path / "rules.csv")
    monkeypatch.setenv("SNIM_BATCH_RUN_DATE", "2026-02-30")
    for command in ("run", "explain"):
        code, err = invoke([command, "--rules", "rules.csv", "--positions", "rules.csv",
                            "--out", "o", "--format", "delta"], tmp_path)
        assert code == 2, err
        assert ("--run-date (set by SNIM_BATCH_RUN_DATE): expected a date YYYY-MM-DD, got "
                "'2026-02-30'") in err
    assert not (tmp_path / "o").exists()


def test_run_date_without_delta_is_a_usage_error(tmp_path: Path) -> None:
    write_rules(tmp_path / "rules.csv")
    write_positions(tmp_path / "p.csv", random_positions(1, 5))
    code, err = invoke(["run", "--rules", "rules.csv", "--positions", "p.csv", "--out", "o",
                        "--run-date", "2026-11-01"], tmp_path)
    assert code == 2 and "--run-date applies to --format delta only" in err


def test_the_run_date_defaults_to_today_in_utc(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    before = datetime.now(UTC).date()
    result = run_night(tmp_path, tmp_path / "t", random_positions(1, 5), None)
    after = datetime.now(UTC).date()
    assert result.manifest["run_date"] in {before.isoformat(), after.isoformat()}


def test_format_delta_refuses_a_parquet_output_and_a_foreign_table_dir(tmp_path: Path) -> None:
    """Each refusal before any work names, in the run result's error.path, the location its
    message is about (QA: it was null for these)."""
    write_rules(tmp_path / "rules.csv")
    write_positions(tmp_path / "p.csv", random_positions(1, 5))
    base = ["run", "--rules", "rules.csv", "--positions", "p.csv", "--result-file", "r.json"]

    def error_path() -> str | None:
        return json.loads((tmp_path / "r.json").read_text())["error"]["path"]

    assert invoke([*base, "--out", "pq"], tmp_path)[0] == 0
    code, err = invoke([*base, "--out", "pq", "--format", "delta"], tmp_path)
    assert code == 1 and "is a Parquet output of snim-batch (manifest.json)" in err
    assert error_path() == str(tmp_path / "pq")
    (tmp_path / "t" / "verdicts").mkdir(parents=True)
    (tmp_path / "t" / "verdicts" / "mine.txt").write_text("x")
    code, err = invoke([*base, "--out", "t", "--format", "delta"], tmp_path)
    assert code == 1 and f"{tmp_path}/t/verdicts: exists and is not a Delta table" in err
    assert error_path() == f"{tmp_path}/t/verdicts"
    assert (tmp_path / "t" / "verdicts" / "mine.txt").read_text() == "x"
    (tmp_path / "f").write_text("x")
    code, err = invoke([*base, "--out", "f", "--format", "delta"], tmp_path)
    assert code == 1 and "exists and is not a directory" in err
    assert error_path() == str(tmp_path / "f")


def test_output_format_in_the_config_file(tmp_path: Path) -> None:
    write_rules(tmp_path / "rules.csv")
    write_positions(tmp_path / "p.csv", random_positions(1, 5))
    (tmp_path / "config.yaml").write_text(
        "rules: rules.csv\npositions: p.csv\nout: t\noutput:\n  format: Delta\n")
    code, err = invoke(["run", "--run-date", "2026-11-05"], tmp_path)
    assert code == 0, err
    assert pl.read_delta(str(tmp_path / "t" / "runs"))["run_date"].to_list() == [
        date(2026, 11, 5)]
    (tmp_path / "config.yaml").write_text(
        "rules: rules.csv\npositions: p.csv\nout: t\noutput:\n  format: orc\n")
    code, err = invoke(["run"], tmp_path)
    assert code == 2 and "key 'output.format' must be one of parquet, delta, got 'orc'" in err


def test_history_of_a_non_delta_output_is_a_clear_error(tmp_path: Path) -> None:
    write_rules(tmp_path / "rules.csv")
    write_positions(tmp_path / "p.csv", random_positions(1, 5))
    assert invoke(["run", "--rules", "rules.csv", "--positions", "p.csv", "--out", "pq"],
                  tmp_path)[0] == 0
    for target in ("pq", "missing"):
        code, err = invoke(["history", target], tmp_path)
        assert code == 1
        assert (f"{tmp_path / target}: not a snim-batch Delta table root (no Delta table "
                "'runs' in it") in err and "Traceback" not in err


def test_history_lists_a_run_its_store_committed_twice_once(tmp_path: Path) -> None:
    """A runs-row commit whose answer the store lost is retried by deltalake, which commits
    the same row again as the next version (seen on S3 through a proxy that dropped one
    answer): the table still holds one row, and `history` lists the run once, at the version
    its result names (its latest), not twice."""
    root = tmp_path / "tables"
    first = run_night(tmp_path, root, random_positions(1, 20), NIGHT_1).manifest["run_id"]
    result = run_night(tmp_path, root, random_positions(2, 20), NIGHT_2)
    log = root / "runs" / "_delta_log"
    last = max(int(f.stem) for f in log.glob("*.json"))
    (log / f"{last + 1:020d}.json").write_bytes((log / f"{last:020d}.json").read_bytes())
    assert pl.read_delta(str(root / "runs")).height == 2
    history = delta_tables.run_history(delta_tables.TableRoot(str(root)))
    assert history.select("run_date", "run_id", "version", "live").rows() == [
        ("2026-11-01", first, 0, True), ("2026-11-02", result.manifest["run_id"], last + 1, True)]
    code, err = invoke(["history", str(root)], tmp_path)
    assert code == 0, err


def test_a_damaged_runs_table_is_one_line_for_history_and_report(tmp_path: Path) -> None:
    """A runs data file cut to nothing (damage from outside): `history` and `report` exit 1
    with one line naming the root and deltalake's causes, without its colours and escaped
    line breaks (history was an internal error)."""
    root = tmp_path / "tables"
    run_night(tmp_path, root, random_positions(1, 20), NIGHT_1)
    [data] = (root / "runs").rglob("*.parquet")
    data.write_bytes(b"")
    for command in ("history", "report"):
        code, err = invoke([command, str(root)], tmp_path)
        assert code == 1, err
        assert err.startswith(f"snim-batch: error: {root}: cannot read the Delta tables ("), err
        assert err.count("\n") == 1 and "\x1b" not in err and "\\n" not in err, err
        assert re.search(r"Delta tables \(\S.*\)$", err.strip()), err  # the cause given
        assert "internal error" not in err, err


# ---- SIGKILL --------------------------------------------------------------------------------

# The real run, killed by itself right after its n-th Delta commit (n = 0: before the first).
KILLER = r"""
import os, signal, sys
from pipeline.io.outputs import delta, delta_tables
from pipeline.io.store import object_store

after = int(sys.argv[1])
done = 0

def die_after_commits():
    if done == after:
        os.kill(os.getpid(), signal.SIGKILL)

def counted(real):
    def step(*args, **kwargs):
        global done
        die_after_commits()
        result = real(*args, **kwargs)
        done += 1
        return result
    return step

delta._commit = counted(delta._commit)
real_runs = delta._retract_night
def runs_version(root):
    tables = delta_tables.TableRoot(root.uri)
    return tables.open("runs").version() if tables.exists("runs") else None
def retract(root, night, run_id, base):
    global done
    die_after_commits()
    before = runs_version(root)
    result = real_runs(root, night, run_id, base)
    if runs_version(root) != before:
        done += 1
        die_after_commits()
    return result
delta._retract_night = retract
sys.argv = ["snim-batch", *sys.argv[2:]]
from pipeline.cli import main
main()
"""


def assert_consistent(root: Path) -> None:
    """Every table loads at a committed version, and every run the runs table lists has all
    its rows: its verdicts and rejects counted as the runs row says, its summary and
    sg_tables present; each night of each table holds one run's rows."""
    tables = {name: pl.read_delta(str(root / name)) for name in TABLES}
    for name, frame in tables.items():
        per_night = frame.group_by("run_date").agg(pl.col("run_id").n_unique())
        assert (per_night["run_id"] == 1).all(), f"{name} mixes runs in a night"
    for run in tables["runs"].iter_rows(named=True):
        rows = {name: tables[name].filter(pl.col("run_id") == run["run_id"]).height
                for name in TABLES[:4]}
        assert rows["verdicts"] == run["verdicts"], run["run_id"]
        assert rows["rejects"] == run["positions_rows_rejected"] + run["rules_rows_rejected"]
        assert rows["summary"] > 0 and rows["sg_tables"] > 0, run["run_id"]


def _killed_run(where: Path, after: int, args: list) -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", KILLER, str(after), *map(str, args)],
                          cwd=where, env=env, capture_output=True, text=True, timeout=300)
    return proc.returncode


@pytest.mark.slow
def test_sigkill_between_commits_never_lists_a_run_whose_rows_are_missing(
        tmp_path: Path) -> None:
    """A rerun of a committed night killed after each of its commits (0: before the first;
    a rerun makes six: the night's runs row taken out, the four tables, the new runs row).
    After each kill: every table at a committed version, one run's rows per night, and the
    runs table lists no run whose rows are missing; the next run cleans the staging up."""
    root = tmp_path / "tables"
    rules = write_rules(tmp_path / "rules.csv")
    for after in range(7):
        previous = run_night(tmp_path, root, random_positions(1, 200), NIGHT_1)
        before = versions(root)
        assert [p.name for p in tmp_path.iterdir() if ".tables.delta-staging" in p.name] == []
        rerun = random_positions(10 + after, 150)
        positions = write_positions(tmp_path / f"p{after}.csv", rerun)
        status = _killed_run(tmp_path, after, ["run", "--rules", rules, "--positions",
                                               positions, "--out", root, "--format", "delta",
                                               "--run-date", "2026-11-01"])
        assert status == (0 if after == 6 else -signal.SIGKILL), after
        assert_consistent(root)
        data_commits = max(0, min(after - 1, 4))
        assert versions(root) == {
            **{t: before[t] + (i < data_commits) for i, t in enumerate(TABLES[:4])},
            "runs": before["runs"] + (after >= 1) + (after == 6)}, after
        listed = pl.read_delta(str(root / "runs"))["run_id"].to_list()
        if after == 0:
            assert listed == [previous.manifest["run_id"]]
        elif after < 6:
            assert listed == []
        else:
            assert_frame_equal(verdict_rows(night_rows(root, "verdicts", NIGHT_1)),
                               expected_verdicts(rerun))
            assert len(listed) == 1 and listed != [previous.manifest["run_id"]]


@pytest.mark.slow
def test_history_after_a_first_night_killed_between_commits(tmp_path: Path) -> None:
    """A root whose first run was killed after its first table's commit: history says no
    night is committed yet (not 'not a root'), and a rerun commits the night."""
    root = tmp_path / "tables"
    rules = write_rules(tmp_path / "rules.csv")
    positions = write_positions(tmp_path / "p.csv", random_positions(3, 40))
    args = ["run", "--rules", rules, "--positions", positions, "--out", root,
            "--format", "delta", "--run-date", "2026-11-01"]
    assert _killed_run(tmp_path, 1, args) == -signal.SIGKILL
    assert (root / "verdicts").is_dir() and not (root / "runs").exists()
    code, err = invoke(["history", "tables"], tmp_path)
    assert code == 1 and "Traceback" not in err
    assert (f"{root}: no night committed yet (tables verdicts are there but no Delta table "
            "'runs': the first run stopped before its last commit") in err
    assert invoke([str(a) for a in args], tmp_path)[0] == 0
    assert invoke(["history", "tables"], tmp_path)[0] == 0
    assert history_lines(str(root))[1].split()[0] == "2026-11-01"


# The real run, killed by itself once the data files of the first table are written.
KILLED_AFTER_FILES = r"""
import os, signal, sys
from pipeline.io.outputs import delta
from pipeline.io.store import object_store

real = delta._write_files
def write_then_die(*args, **kwargs):
    real(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
delta._write_files = write_then_die
sys.argv = ["snim-batch", *sys.argv[1:]]
from pipeline.cli import main
main()
"""


def test_sigkill_once_the_data_files_are_written(tmp_path: Path) -> None:
    """Killed with the verdicts' data files of the night on disk, before any commit: the
    tables stay at the first night's versions and rows; the files are in no table."""
    root = tmp_path / "tables"
    run_night(tmp_path, root, random_positions(1, 50), NIGHT_1)
    before = versions(root)
    positions = write_positions(tmp_path / "p2.csv", random_positions(2, 50))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", KILLED_AFTER_FILES, "run", "--rules",
                           tmp_path / "rules.csv", "--positions", positions, "--out", root,
                           "--format", "delta", "--run-date", "2026-11-02"],
                          env=env, capture_output=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL
    assert any((root / "verdicts" / "run_date=2026-11-02").iterdir())
    assert versions(root) == before
    assert_consistent(root)
    assert set(pl.read_delta(str(root / "verdicts"))["run_date"]) == {NIGHT_1}



# The real run, stopped by SIGTERM while it writes the first data file of the night.
STOPPED_WHILE_WRITING = r"""
import os, signal, sys
from pipeline.io.outputs import delta

real = delta._FileStats.add
def add_then_stop(self, batch):
    real(self, batch)
    delta._FileStats.add = real
    os.kill(os.getpid(), signal.SIGTERM)
delta._FileStats.add = add_then_stop
sys.argv = ["snim-batch", *sys.argv[1:]]
from pipeline.cli import main
main()
"""


# The real run, stopped by SIGTERM once its commit room is held, before the commits begin.
STOPPED_BEFORE_COMMITS = r"""
import os, signal, sys
from pipeline.io.outputs import delta

real = delta._commit_night
def stop_then_commit(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    return real(*args, **kwargs)
delta._commit_night = stop_then_commit
sys.argv = ["snim-batch", *sys.argv[1:]]
from pipeline.cli import main
main()
"""


@pytest.mark.parametrize(("root_name", "script"), [
    ("tables", STOPPED_WHILE_WRITING), ("new/a/tables", STOPPED_WHILE_WRITING),
    ("tables", STOPPED_BEFORE_COMMITS)])
def test_a_stopped_night_leaves_no_directory_it_made(tmp_path: Path, root_name: str,
                                                      script: str) -> None:
    """SIGTERM while the verdicts' first data file is written, or once every data file is
    written and the commits' room is held, before any commit: exit 143,
    "nothing was written", and so it is: no partition directory of the night, no table
    directory, root or parent the run made (an existing root keeps its first night)."""
    root = tmp_path / root_name
    if root_name == "tables":
        run_night(tmp_path, root, random_positions(1, 50), NIGHT_1)
    else:
        write_rules(tmp_path / "rules.csv")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    positions = write_positions(tmp_path / "p2.csv", random_positions(2, 50))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", script, "run", "--rules",
                           tmp_path / "rules.csv", "--positions", positions, "--out", root,
                           "--format", "delta", "--run-date", "2026-11-02"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert proc.stderr.endswith("stopped by SIGTERM; nothing was written\n"), proc.stderr
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert after == sorted([*before, Path("p2.csv")])

@pytest.mark.slow
@pytest.mark.parametrize(("free", "doing"), [
    (0, "writing verdicts.parquet"),  # the staged tables
    (24576, r"writing the \w+ table's rows"),  # the night's data files in the root
    (2**20, "reserving room for its commits"),  # the commits' room, held until they start
    (delta.COMMIT_ROOM + 2**18, None),  # room enough
])
def test_a_full_disk_before_the_commits_writes_nothing(tmp_path: Path, free: int,
                                                       doing: str | None) -> None:
    """A second night on a disk that fills, at each step before the commits: one line naming
    the root and the cause, and the disk as it was. The commits' room is held from the last
    data file to the first commit: a disk that filled between two tables' commits left part
    of the run in place (the roll-back could not be written either)."""
    rules = write_rules(tmp_path / "rules.csv")
    first = write_positions(tmp_path / "p1.csv", random_positions(1, 3000))
    second = write_positions(tmp_path / "p2.csv", random_positions(2, 3000))
    root = tmp_path / "disk" / "root"

    def night(positions: Path, when: str) -> list[str]:
        return ["run", "--rules", str(rules), "--positions", str(positions), "--out", str(root),
                "--format", "delta", "--run-date", when]

    ran, before, _, rerun, after = on_small_disk(tmp_path, "size=12m", [
        night(first, "2026-11-01"), ["tree"], ["fill-leaving", str(free)],
        night(second, "2026-11-02"), ["tree"]])
    assert ran == [0, ""]
    if doing is None:
        assert rerun == [0, ""]
        return
    assert rerun[0] == 1
    assert re.fullmatch(f"snim-batch: error: {re.escape(str(root))}: no space left on device "
                        f"while {doing}; nothing was written \\(free space or choose another "
                        r"--out\)\n", rerun[1]), rerun[1]
    assert after == sorted([*before, "filler"])

def test_a_root_on_a_read_only_mount_is_refused_before_any_work(tmp_path: Path) -> None:
    """A root that is itself a mount point gone read-only (its staging beside it writable):
    `explain` says the run would stop (it said the night would be added), and the run stops
    before any work with one line naming the root (after all of it, an internal error: the
    commit room's unlink on the read-only file system hid the write's own error)."""
    rules = write_rules(tmp_path / "rules.csv")
    root = tmp_path / "disk"

    def night(verb: str, seed: int, when: str) -> list[str]:
        return [verb, "--rules", str(rules), "--positions",
                str(write_positions(tmp_path / f"p{seed}.csv", random_positions(seed, 50))),
                "--out", str(root), "--format", "delta", "--run-date", when]

    ran, before, _, explained, rerun, after = on_small_disk(tmp_path, "size=12m", [
        night("run", 1, "2026-11-01"), ["snapshot", "."], ["read-only"],
        night("explain", 2, "2026-11-02"), night("run", 2, "2026-11-02"), ["snapshot", "."]])
    assert ran == [0, ""]
    refused = (f"{root}: read-only file system while writing in {root}; nothing was written")
    assert explained[0] == 1
    assert explained[1] == f"snim-batch: error: the run would stop at its output: {refused}\n"
    assert rerun == [1, f"snim-batch: error: {refused}\n"]
    assert after == before


def test_the_commit_room_of_a_killed_run_is_removed_and_this_run_s_is_freed(
        tmp_path: Path) -> None:
    """The room a run holds in the root until its commits (a hidden file named by its pid) is
    gone once it committed, and one a killed run left (its process gone) goes with the next
    run; another live process's is kept."""
    root = tmp_path / "tables"
    run_night(tmp_path, root, random_positions(1, 30), NIGHT_1)
    dead, alive = root / ".snim-commit-room-4194304", root / f".snim-commit-room-{os.getppid()}"
    dead.write_bytes(b"\0" * 4096)
    alive.write_bytes(b"")
    run_night(tmp_path, root, random_positions(2, 30), date(2026, 11, 2))
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".")) == [alive.name]

def test_a_first_run_killed_before_its_tables_exist_does_not_block_the_root(
        tmp_path: Path) -> None:
    """The data files a first run wrote before it was killed (no table created yet) are no
    user's files: the next run writes the tables, whose rows are its own."""
    root = tmp_path / "tables"
    write_rules(tmp_path / "rules.csv")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", KILLED_AFTER_FILES, "run", "--rules",
                           tmp_path / "rules.csv", "--positions",
                           write_positions(tmp_path / "p1.csv", random_positions(1, 20)),
                           "--out", root, "--format", "delta", "--run-date", "2026-11-01"],
                          env=env, capture_output=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL
    assert any((root / "verdicts" / "run_date=2026-11-01").iterdir())
    positions = random_positions(2, 20)
    assert run_night(tmp_path, root, positions, NIGHT_1).exit_code == 0
    assert_night_is(root, NIGHT_1, positions)

# ---- object storage -------------------------------------------------------------------------


def test_delta_tables_on_s3(tmp_path: Path, s3, monkeypatch: pytest.MonkeyPatch) -> None:
    """`run --format delta --out s3://...` against the local S3 server, credentials and
    endpoint from the standard AWS variables: two nights, then a rerun of the first; the
    rows, versions, time travel and `history` read back through the same server."""
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    uri = "s3://bkt/warehouse/snim"
    rules = write_rules(tmp_path / "rules.csv")
    nights = ((1, NIGHT_1), (2, NIGHT_2), (3, NIGHT_1))
    for seed, night in nights:
        positions = write_positions(tmp_path / f"p{seed}.csv", random_positions(seed, 60))
        code, err = invoke(["run", "--rules", rules, "--positions", positions, "--out", uri,
                            "--format", "delta", "--run-date", night.isoformat()], tmp_path)
        assert code == 0, err
    options = s3.storage_options()
    verdicts = pl.read_delta(f"{uri}/verdicts", storage_options=options)
    for seed, night in nights[1:]:
        assert_frame_equal(verdict_rows(verdicts.filter(pl.col("run_date") == night)),
                           expected_verdicts(random_positions(seed, 60)))
    first = pl.read_delta(f"{uri}/verdicts", version=0, storage_options=options)
    assert_frame_equal(verdict_rows(first), expected_verdicts(random_positions(1, 60)))
    assert {name: DeltaTable(f"{uri}/{name}", storage_options=options).version()
            for name in TABLES} == {**dict.fromkeys(TABLES[:4], 2), "runs": 3}
    code, err = invoke(["history", uri], tmp_path)
    assert code == 0, err
    history = delta_tables.run_history(delta_tables.table_root(uri))
    assert history.select("run_date", "version", "live").rows() == [
        ("2026-11-01", 0, False), ("2026-11-02", 1, True), ("2026-11-01", 3, True)]
    keys = {o["Key"] for o in s3.client().list_objects_v2(Bucket="bkt")["Contents"]}
    assert {k.split("/")[2] for k in keys} == set(TABLES)


@pytest.mark.slow
@pytest.mark.spark
def test_the_spark_engine_writes_the_same_tables(tmp_path: Path) -> None:
    """The Spark engine's part files, staged, stream into the same Delta tables: equal to the
    polars engine's Delta rows and to the brute-force verdicts."""
    pytest.importorskip("pyspark")
    positions = random_positions(5, 300)
    roots = {engine: tmp_path / engine for engine in ("polars", "spark")}
    for engine, root in roots.items():
        run_night(tmp_path, root, positions, NIGHT_1, bad_rows=1, engine=engine,
                  winning_moves=True, spark={"master": "local[2]"})
    for table in TABLES[:4]:
        polars_rows, spark_rows = (pl.read_delta(str(roots[e] / table)).drop("run_id")
                                   for e in ("polars", "spark"))
        assert_frame_equal(spark_rows, polars_rows, check_row_order=False)
    spark_runs = pl.read_delta(str(roots["spark"] / "runs"))
    assert spark_runs.select("engine", "verdicts", "positions_rows_rejected").rows() == [
        ("spark", 300, 1)]
    assert_frame_equal(verdict_rows(pl.read_delta(str(roots["spark"] / "verdicts"))),
                       expected_verdicts(positions))


def test_format_delta_on_s3_refuses_a_parquet_output_and_foreign_objects(
        tmp_path: Path, s3, monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusals of a local root, on S3: a snim-batch Parquet output (its manifest.json),
    a table's prefix holding objects but no _delta_log; exit 1, not an object written."""
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    rules = write_rules(tmp_path / "rules.csv")
    positions = write_positions(tmp_path / "p.csv", random_positions(1, 5))
    base = ["run", "--rules", rules, "--positions", positions]
    assert invoke([*base, "--out", "s3://bkt/pq"], tmp_path)[0] == 0
    client = s3.client()
    client.put_object(Bucket="bkt", Key="t/verdicts/mine.txt", Body=b"x")

    def listing() -> dict[str, str]:
        return {o["Key"]: o["ETag"] for o in client.list_objects_v2(Bucket="bkt")["Contents"]}

    before = listing()
    code, err = invoke([*base, "--out", "s3://bkt/pq", "--format", "delta"], tmp_path)
    assert code == 1
    assert err.strip().splitlines() == [
        "snim-batch: error: s3://bkt/pq: is a Parquet output of snim-batch (manifest.json); "
        "--format delta needs a table root of its own (another --out)"]
    code, err = invoke([*base, "--out", "s3://bkt/t", "--format", "delta"], tmp_path)
    assert code == 1
    assert err.strip().splitlines() == [
        "snim-batch: error: s3://bkt/t/verdicts: exists and is not a Delta table; refusing to "
        "write into it"]
    assert listing() == before


@pytest.fixture()
def broken_store(request, s3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An S3 endpoint that fails one way (request.param), the AWS variables pointing at it
    and the client bounds shrunk (1 s, 1 retry): (the failure, the root URL, the
    endpoint)."""
    from s3_server import MotoServer, free_port

    monkeypatch.setattr(object_store, "CLIENT_DEFAULTS", {
        "connect_timeout": "1s", "timeout": "1s", "max_retries": "1", "retry_timeout": "3s"})
    env, uri, server, hole = dict(s3.env()), "s3://bkt/root", None, None
    if request.param == "closed port":
        env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"
    elif request.param == "no answer":
        hole = socket.socket()
        hole.bind(("127.0.0.1", 0))
        hole.listen(64)
        env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{hole.getsockname()[1]}"
    elif request.param == "refused credentials":
        server = MotoServer({"INITIAL_NO_AUTH_ACTION_COUNT": "0"}).start()
        env.update(AWS_ENDPOINT_URL=server.endpoint, AWS_ACCESS_KEY_ID="AKIAUNKNOWN0KEY")
    else:
        uri = "s3://nobkt/root"
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    try:
        yield request.param, uri, env["AWS_ENDPOINT_URL"]
    finally:
        if server is not None:
            server.stop()
        if hole is not None:
            hole.close()


@pytest.mark.parametrize("broken_store", ["closed port", "no answer", "refused credentials",
                                          "missing bucket"], indirect=True)
def test_store_failures_of_delta_runs_and_history_name_their_cause(
        tmp_path: Path, broken_store: tuple[str, str, str]) -> None:
    """deltalake's error text ("Generic S3 error" first) holds the cause: the messages say it
    as for every other object-store client, in one line, exit 1; the run result's error
    names that table in its `path` (QA: it was null)."""
    failure, uri, endpoint = broken_store
    rules = write_rules(tmp_path / "rules.csv")
    positions = write_positions(tmp_path / "p.csv", random_positions(1, 5))
    run = ["run", "--rules", rules, "--positions", positions, "--out", uri, "--format", "delta",
           "--result-file", tmp_path / "result.json"]
    for args, where, doing in ((run, f"{uri}/verdicts", "reading the Delta table"),
                               (["history", uri], uri, "reading the table root")):
        code, err = invoke(args, tmp_path)
        assert code == 1, err
        if args is run:
            error = json.loads((tmp_path / "result.json").read_text())["error"]
            assert error["path"] == where, error
        cause = {"closed port": f"cannot connect to the object store at {endpoint} while "
                                f"{doing} (connection refused)",
                 "no answer": f"the object store at {endpoint} did not answer while {doing} "
                              "(timeout 1s, 1 retries)",
                 "refused credentials": f"the object store refused access while {doing} "
                                        "(check the credentials)",
                 "missing bucket": "the bucket 'nobkt' does not exist"}[failure]
        assert err.strip().splitlines() == [f"snim-batch: error: {where}: {cause}"]


def test_a_store_gone_mid_commit_names_only_the_tables_the_run_committed_to(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The S3 server stops right after the run's verdicts commit: the rejects commit fails,
    and so does putting back the tables the run may have committed to (runs, for a rerun's
    retraction, verdicts, and rejects, whose failed commit may have landed); summary and
    sg_tables, which it never committed to, are not named among the tables that "may hold
    part of the run" (they were: all five)."""
    from s3_server import MotoServer

    monkeypatch.setattr(object_store, "CLIENT_DEFAULTS", {
        "connect_timeout": "1s", "timeout": "1s", "max_retries": "1", "retry_timeout": "3s"})
    server = MotoServer().start()
    try:
        server.client().create_bucket(Bucket="bkt")
        for key, value in server.env().items():
            monkeypatch.setenv(key, value)
        run_night(tmp_path, "s3://bkt/root", random_positions(1, 20), NIGHT_1)
        real = delta._commit

        def store_gone_after_verdicts(root, plan, *args, **kwargs):
            version = real(root, plan, *args, **kwargs)
            if plan.name == "verdicts":
                server.stop()
            return version

        monkeypatch.setattr(delta, "_commit", store_gone_after_verdicts)
        code, err = invoke(["run", "--rules", tmp_path / "rules.csv", "--positions",
                            write_positions(tmp_path / "p2.csv", random_positions(2, 20)),
                            "--out", "s3://bkt/root", "--format", "delta", "--run-date",
                            NIGHT_2.isoformat()], tmp_path)
    finally:
        server.stop()
    assert code == 1, err
    assert "s3://bkt/root/rejects: cannot connect to the object store" in err, err
    could_not = err.split("could not be put back and may hold part of the run: ")[1]
    named = set(re.findall(r"s3://bkt/root/(\w+):", could_not))
    assert named == {"runs", "verdicts", "rejects"}, err  # its commit may have landed


def test_local_staging_of_a_killed_run_to_s3_is_removed_by_the_next_run(
        tmp_path: Path, s3) -> None:
    """A run to an S3 root stages in $TMPDIR, in a directory named with its process id:
    killed (SIGKILL) there, it leaves it behind; the next run removes it (its process is
    gone) and its own."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, **s3.env(), "TMPDIR": str(temporary),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    rules = write_rules(tmp_path / "rules.csv")
    args = ["run", "--rules", str(rules), "--out", "s3://bkt/t", "--format", "delta",
            "--run-date", "2026-11-01", "--positions"]
    killed = subprocess.Popen([sys.executable, "-c", KILLED_AFTER_FILES, *args,
                               str(write_positions(tmp_path / "p1.csv",
                                                   random_positions(1, 20)))], env=env)
    assert killed.wait(300) == -signal.SIGKILL
    left = [p.name for p in temporary.iterdir()]
    assert len(left) == 1 and left[0].startswith(f"snim-batch-delta-{killed.pid}-"), left
    positions = random_positions(2, 20)
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", *args,
                           str(write_positions(tmp_path / "p2.csv", positions))],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert list(temporary.iterdir()) == []
    verdicts = pl.read_delta("s3://bkt/t/verdicts", storage_options=s3.storage_options())
    assert_frame_equal(verdict_rows(verdicts), expected_verdicts(positions))


# ---- an output inside a Delta table ---------------------------------------------------------


def test_an_output_inside_a_delta_table_is_refused_in_either_format(tmp_path: Path) -> None:
    """A table's full vacuum deletes every file it does not reference: an --out that is a
    Delta table, or lies inside one (its partitions, its _delta_log, through a link, a
    table of another writer), is refused before any work, exit 2, naming the table; a
    directory beside the tables of a root is no table's."""
    root = tmp_path / "tables"
    run_night(tmp_path, root, random_positions(1, 20), NIGHT_1)
    foreign = tmp_path / "theirs"
    (foreign / "_delta_log").mkdir(parents=True)
    (tmp_path / "link").symlink_to(root / "summary")
    positions = write_positions(tmp_path / "p.csv", random_positions(2, 10))
    before = versions(root)
    listing = sorted(str(p) for p in tmp_path.rglob("*"))
    for out, table, inside in (
            (root / "summary" / "myout", root / "summary", True),
            (root / "verdicts", root / "verdicts", False),
            (root / "summary" / "_delta_log" / "x", root / "summary", True),
            (root / "rejects" / "run_date=2026-11-01" / "mine", root / "rejects", True),
            (tmp_path / "link" / "x", root / "summary", True),
            (foreign, foreign, False), (foreign / "a" / "b", foreign, True)):
        for fmt in ("parquet", "delta"):
            code, err = invoke(["run", "--rules", tmp_path / "rules.csv", "--positions",
                                positions, "--out", out, "--format", fmt], tmp_path)
            assert code == 2, (out, fmt, err)
            where = "is inside the Delta table" if inside else "is the Delta table"
            assert err.strip().splitlines() == [
                f"snim-batch: error: {out}: {where} {table}; an output there is not part of "
                "the table, and the table's full vacuum would delete it: choose an --out "
                "outside every Delta table"], (out, fmt)
    assert versions(root) == before
    assert sorted(str(p) for p in tmp_path.rglob("*")) == listing
    code, err = invoke(["run", "--rules", tmp_path / "rules.csv", "--positions", positions,
                        "--out", root / "beside"], tmp_path)
    assert code == 0, err
    assert (root / "beside" / "manifest.json").is_file()


def test_convert_generate_and_report_write_nothing_inside_a_delta_table(tmp_path: Path) -> None:
    """As run's --out: convert's and generate's --out inside a Delta table of a root are
    refused, exit 2, and report's page (of a run's output or of the root) is refused there
    and inside another run's output, exit 1; the tables and that output stay as they were.
    A page beside the root's tables is written."""
    root = tmp_path / "tables"
    run_night(tmp_path, root, random_positions(1, 20), NIGHT_1)
    positions = write_positions(tmp_path / "p.csv", random_positions(2, 10))
    assert invoke(["run", "--rules", tmp_path / "rules.csv", "--positions", positions,
                   "--out", tmp_path / "night"], tmp_path)[0] == 0
    classic = Path(__file__).resolve().parents[1] / "data" / "sample" / "classic.txt"
    before = versions(root)
    listing = sorted(str(p) for p in tmp_path.rglob("*"))
    outside = ("an output there is not part of the table, and the table's full vacuum would "
               "delete it: choose an --out outside every Delta table")
    for args, out in ((["convert", classic, "--out"], root / "verdicts" / "x"),
                      (["generate", "--positions", "5", "--out"], root / "summary" / "g")):
        code, err = invoke([*args, out], tmp_path)
        assert (code, err.strip().splitlines()) == (2, [
            f"snim-batch: error: {out}: is inside the Delta table {out.parent}; {outside}"])
    page = root / "verdicts" / "p.html"
    for described in (root, tmp_path / "night"):
        code, err = invoke(["report", described, "--html", page], tmp_path)
        assert (code, err.strip().splitlines()) == (1, [
            f"snim-batch: error: {page}: inside the Delta table {root / 'verdicts'}, which it "
            "is no part of (the table's full vacuum would delete it); refusing to write there "
            "(write the page outside every Delta table)"])
    code, err = invoke(["report", root, "--html", tmp_path / "night" / "report.html"], tmp_path)
    assert code == 1 and "inside the snim-batch output" in err, err
    assert versions(root) == before
    assert sorted(str(p) for p in tmp_path.rglob("*")) == listing
    assert invoke(["report", root], tmp_path)[0] == 0
    assert (root / "report.html").is_file()


# ---- key types across nights ----------------------------------------------------------------


def test_nights_without_rows_leave_the_key_types_to_the_first_night_with_some(
        tmp_path: Path) -> None:
    """A first night with no positions (a holiday) writes tables of no rows, whose key
    columns say integer only for want of keys: a later night of text keys is taken (explain
    says so too), its types replace theirs, and the nights after it join as they would
    have; rows once in a table, its key types hold (`test_a_night_of_integer_keys_...`)."""
    root = tmp_path / "tables"
    empty = write_csv(tmp_path / "empty.csv", ["rule_set_id", "position_id", "heaps"], [])
    write_rules(tmp_path / "rules.csv")
    code, err = invoke(["run", "--rules", tmp_path / "rules.csv", "--positions", empty,
                        "--out", root, "--format", "delta", "--run-date", "2026-11-01"],
                       tmp_path)
    assert code == 0, err
    assert pl.read_delta(str(root / "verdicts")).schema["position_id"] == pl.Int64
    text_night = write_csv(tmp_path / "text.csv", ["rule_set_id", "position_id", "heaps"],
                           [[1, "p-1", "3"], [2, "p-2", "1 2"]])
    command = ["--rules", tmp_path / "rules.csv", "--positions", text_night, "--out", root,
               "--format", "delta", "--run-date", "2026-11-02"]
    plan = CliRunner().invoke(app, ["explain", *map(str, command)])  # absolute paths
    assert plan.exit_code == 0 and "the night 2026-11-02 would be added" in plan.stdout, (
        plan.output)
    code, err = invoke(["run", *command], tmp_path)
    assert code == 0, err
    code, err = run_cli_night(tmp_path, root, random_positions(5, 10), "2026-11-03")
    assert code == 0, err
    verdicts = pl.read_delta(str(root / "verdicts"))
    assert verdicts.schema["position_id"] == pl.String
    assert verdicts.filter(pl.col("run_date") == date(2026, 11, 2)).select(
        KEY_COLUMNS).sort(KEY_COLUMNS).rows() == [(1, "p-1"), (2, "p-2")]
    assert verdicts.filter(pl.col("run_date") == date(2026, 11, 3)).height == 10


def test_a_night_of_integer_keys_joins_a_root_whose_keys_are_text(tmp_path: Path) -> None:
    """A root whose first night had text keys takes a later night whose keys are all
    integers: written as their text (the keys as given), the tables' key columns stay text;
    a night of one integer and one text key column fits too. The other way round (an
    integer root, a text night) is still refused."""
    rules = write_csv(tmp_path / "text-rules.csv", ["rule_set_id", "kind", "moves"],
                      [["r-1", "subtraction", "2 5"], ["07", "nim", ""]])
    text_night = write_csv(tmp_path / "text.csv", ["rule_set_id", "position_id", "heaps"],
                           [["r-1", "p-1", "3"], ["07", "p-2", "1 2"]])
    root = tmp_path / "tables"
    code, err = invoke(["run", "--rules", rules, "--positions", text_night, "--out", root,
                        "--format", "delta", "--run-date", "2026-11-01"], tmp_path)
    assert code == 0, err
    positions = random_positions(4, 60)
    for night, rows in (("2026-11-02", positions), ("2026-11-03", positions[:30])):
        code, err = run_cli_night(tmp_path, root, rows, night, bad_rows=1)
        assert code == 3, err
    mixed = write_csv(tmp_path / "mixed.csv", ["rule_set_id", "position_id", "heaps"],
                      [[1, "x-1", "4"], [2, "x-2", "5 6"]])
    code, err = invoke(["run", "--rules", tmp_path / "rules.csv", "--positions", mixed,
                        "--out", root, "--format", "delta", "--run-date", "2026-11-04"],
                       tmp_path)
    assert code == 0, err
    for table, columns in (("verdicts", KEY_COLUMNS), ("summary", ["rule_set_id"]),
                           ("rejects", KEY_COLUMNS)):
        schema = pl.read_delta(str(root / table)).schema
        assert {c: schema[c] for c in columns} == dict.fromkeys(columns, pl.String), table
    expected = expected_verdicts(positions).with_columns(
        pl.col(KEY_COLUMNS).cast(pl.String)).sort(KEY_COLUMNS)
    assert_frame_equal(verdict_rows(night_rows(root, "verdicts", date(2026, 11, 2))), expected)
    assert night_rows(root, "verdicts", NIGHT_1).select(KEY_COLUMNS).sort(KEY_COLUMNS).rows() \
        == [("07", "p-2"), ("r-1", "p-1")]
    assert sorted(night_rows(root, "summary", date(2026, 11, 3))["rule_set_id"]) == [
        "1", "2", "3", "4"]
    assert night_rows(root, "verdicts", date(2026, 11, 4)).select(KEY_COLUMNS).sort(
        KEY_COLUMNS).rows() == [("1", "x-1"), ("2", "x-2")]
    assert night_rows(root, "rejects", date(2026, 11, 2))["position_id"].to_list() == [
        "10000"]

    integer_root = tmp_path / "integers"
    assert run_cli_night(tmp_path, integer_root, positions, "2026-11-01")[0] == 0
    code, err = invoke(["run", "--rules", rules, "--positions", text_night, "--out",
                        integer_root, "--format", "delta", "--run-date", "2026-11-02"],
                       tmp_path)
    assert code == 1
    assert (f"{integer_root}/verdicts: this run's columns do not fit the table: rule_set_id "
            "(integer in the table, text in this run), position_id (integer in the table, "
            "text in this run)") in err


KEY_COLUMNS = ["rule_set_id", "position_id"]


def run_cli_night(tmp_path: Path, root: Path, positions, night: str, bad_rows: int = 0
                  ) -> tuple[int, str]:
    path = write_positions(tmp_path / f"night-{night}.csv", positions, bad_rows)
    return invoke(["run", "--rules", write_rules(tmp_path / "rules.csv"), "--positions", path,
                   "--out", root, "--format", "delta", "--run-date", night], tmp_path)


# ---- history and report after a run stopped between its commits -----------------------------


def stopped_run_id(root: Path) -> str:
    """The run id of the latest retraction of a night from the runs table (its commit log)."""
    return next(c["snim_batch"]["by_run_id"] for c in DeltaTable(str(root / "runs")).history()
                if "retracted" in c.get("snim_batch", {}))


@pytest.mark.parametrize("after, first_state", [
    (1, "live"), (2, "partly replaced"), (4, "partly replaced"), (5, "replaced")])
def test_history_and_report_after_a_rerun_stopped_between_its_commits(
        tmp_path: Path, after: int, first_state: str) -> None:
    """A rerun killed after its n-th commit (1: its night taken out of the runs table; 2-5:
    also 1-4 data tables). The first run stays `live` in `history` (and `report` shows it)
    while every data table still holds its rows; else it is partly or wholly replaced and
    `report` says no complete run. The stopped run is listed `incomplete`; the next run of
    the night makes it all whole again."""
    root = tmp_path / "tables"
    first = random_positions(1, 60)
    first_id = run_night(tmp_path, root, first, NIGHT_1, bad_rows=1).manifest["run_id"]
    status = _killed_run(tmp_path, after, ["run", "--rules", tmp_path / "rules.csv",
                                           "--positions", write_positions(
                                               tmp_path / "p2.csv", random_positions(2, 50)),
                                           "--out", root, "--format", "delta",
                                           "--run-date", "2026-11-01"])
    assert status == -signal.SIGKILL
    stopped_id = stopped_run_id(root)
    assert pl.read_delta(str(root / "runs")).is_empty()  # as docs/delta.md says
    history = delta_tables.run_history(delta_tables.TableRoot(str(root)))
    assert history.select("run_date", "run_id", "version", "state", "live").rows() == [
        ("2026-11-01", first_id, 0, first_state, first_state == "live"),
        ("2026-11-01", stopped_id, 1, "incomplete", False)]
    code, err = invoke(["history", root], tmp_path)
    assert code == 0, err
    lines = history_lines(str(root))
    assert lines[1].split()[1] == first_id
    assert lines[1].endswith(first_state) == (first_state != "live")
    assert lines[2].split() == ["2026-11-01", stopped_id, "1", "incomplete"]
    code, err = invoke(["report", root], tmp_path)
    if first_state == "live":
        assert code == 0, err
        page = (root / "report.html").read_text()
        assert f"snim-batch run <code>{first_id}</code>" in page
        assert "for the night <b>2026-11-01</b>" in page
    else:
        assert code == 1
        assert err.strip().splitlines() == [
            f"snim-batch: error: {root}: no complete run yet: a run of 2026-11-01 was stopped "
            "between its commits; run that night again"]
        assert not (root / "report.html").exists()

    again = random_positions(3, 40)
    third_id = run_night(tmp_path, root, again, NIGHT_1).manifest["run_id"]
    assert_night_is(root, NIGHT_1, again)
    history = delta_tables.run_history(delta_tables.TableRoot(str(root)))
    assert history.select("run_id", "state").rows() == [
        (first_id, "replaced"), (stopped_id, "incomplete"), (third_id, "live")]
    assert invoke(["report", root], tmp_path)[0] == 0
    assert f"snim-batch run <code>{third_id}</code>" in (root / "report.html").read_text()


def test_report_across_nights_keeps_a_night_whose_rerun_was_stopped(tmp_path: Path) -> None:
    """Two nights, then a rerun of the later one killed right after it took the night out
    of the runs table: `report` still shows that night (its first run's rows, all there) as
    the latest, both nights across nights, and `history` both first runs live."""
    root = tmp_path / "tables"
    ids = [run_night(tmp_path, root, random_positions(seed, 40), night).manifest["run_id"]
           for seed, night in ((1, NIGHT_1), (2, NIGHT_2))]
    status = _killed_run(tmp_path, 1, ["run", "--rules", tmp_path / "rules.csv",
                                       "--positions", write_positions(
                                           tmp_path / "p3.csv", random_positions(3, 30)),
                                       "--out", root, "--format", "delta",
                                       "--run-date", "2026-11-02"])
    assert status == -signal.SIGKILL
    code, err = invoke(["report", root], tmp_path)
    assert code == 0, err
    page = (root / "report.html").read_text()
    assert f"snim-batch run <code>{ids[1]}</code>" in page
    assert "for the night <b>2026-11-02</b>" in page
    assert "2026-11-01 w_rate" in page and "2026-11-02 w_rate" in page
    history = delta_tables.run_history(delta_tables.TableRoot(str(root)))
    assert history.select("run_id", "state").rows() == [
        (ids[0], "live"), (ids[1], "live"), (stopped_run_id(root), "incomplete")]


def test_a_first_run_of_a_night_stopped_between_its_commits_is_incomplete(
        tmp_path: Path) -> None:
    """A night's first run killed after two of its data commits (no runs row to take out,
    so the runs table has no trace of it): `history` lists it `incomplete` for that night,
    without a runs version; `report` shows the latest complete night."""
    root = tmp_path / "tables"
    first_id = run_night(tmp_path, root, random_positions(1, 40), NIGHT_1).manifest["run_id"]
    status = _killed_run(tmp_path, 2, ["run", "--rules", tmp_path / "rules.csv",
                                       "--positions", write_positions(
                                           tmp_path / "p2.csv", random_positions(2, 30)),
                                       "--out", root, "--format", "delta",
                                       "--run-date", "2026-11-02"])
    assert status == -signal.SIGKILL
    stopped = set(pl.read_delta(str(root / "verdicts")).filter(
        pl.col("run_date") == NIGHT_2)["run_id"])
    assert len(stopped) == 1 and stopped != {first_id}
    history = delta_tables.run_history(delta_tables.TableRoot(str(root)))
    assert history.select("run_date", "run_id", "version", "state").rows() == [
        ("2026-11-01", first_id, 0, "live"), ("2026-11-02", *stopped, None, "incomplete")]
    assert history_lines(str(root))[2].split() == ["2026-11-02", *stopped, "incomplete"]
    code, err = invoke(["report", root], tmp_path)
    assert code == 0, err
    page = (root / "report.html").read_text()
    assert f"snim-batch run <code>{first_id}</code>" in page
    assert "for the night <b>2026-11-01</b>" in page
    # the night run again: its rows replace the stopped run's, which stays in the history
    # (it was gone from it: only the rows it left told of it, and the data tables' logs)
    rerun_id = run_night(tmp_path, root, random_positions(3, 30), NIGHT_2).manifest["run_id"]
    history = delta_tables.run_history(delta_tables.TableRoot(str(root)))
    assert history.select("run_date", "run_id", "version", "state").rows() == [
        ("2026-11-01", first_id, 0, "live"), ("2026-11-02", rerun_id, 1, "live"),
        ("2026-11-02", *stopped, None, "incomplete")]


def test_an_output_inside_a_delta_table_on_s3_is_refused(
        tmp_path: Path, s3, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same refusal on an object store: a prefix holding `_delta_log/` objects is a
    table; an --out at it or below it is refused, exit 2, not an object written; a prefix
    beside the tables of a root is no table's."""
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    rules = write_rules(tmp_path / "rules.csv")
    positions = write_positions(tmp_path / "p.csv", random_positions(1, 10))
    base = ["run", "--rules", rules, "--positions", positions]
    assert invoke([*base, "--out", "s3://bkt/t", "--format", "delta"], tmp_path)[0] == 0
    client = s3.client()

    def listing() -> dict[str, str]:
        return {o["Key"]: o["ETag"] for o in client.list_objects_v2(Bucket="bkt")["Contents"]}

    before = listing()
    for out, table in (("s3://bkt/t/summary/mine", "s3://bkt/t/summary"),
                       ("s3://bkt/t/verdicts", "s3://bkt/t/verdicts"),
                       ("s3://bkt/t/runs/_delta_log/x", "s3://bkt/t/runs")):
        for fmt in ("parquet", "delta"):
            code, err = invoke([*base, "--out", out, "--format", fmt], tmp_path)
            assert code == 2, (out, fmt, err)
            where = "is the Delta table" if out == table else "is inside the Delta table"
            assert err.strip().splitlines() == [
                f"snim-batch: error: {out}: {where} {table}; an output there is not part of "
                "the table, and the table's full vacuum would delete it: choose an --out "
                "outside every Delta table"], (out, fmt)
    assert listing() == before
    code, err = invoke([*base, "--out", "s3://bkt/t/beside"], tmp_path)
    assert code == 0, err
    assert "t/beside/manifest.json" in listing()


def test_a_runs_table_that_is_not_ours_is_refused_by_run_and_history(tmp_path: Path) -> None:
    """A Delta table named runs, partitioned by run_date but without our columns: history
    says so (exit 1, not an internal error), and a run refuses the root before any work,
    leaving no table directory behind."""
    import pyarrow as pa
    from deltalake import write_deltalake

    root = tmp_path / "root"
    write_deltalake(str(root / "runs"), pa.table({"a": [1, 2], "run_date": pa.array(
        [date(2026, 1, 1)] * 2, pa.date32())}), partition_by=["run_date"])
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    said = f"{root / 'runs'}: not a snim-batch runs table (no column 'run_id', 'status'"
    code, err = invoke(["history", root], tmp_path)
    assert code == 1 and said in err and "internal error" not in err, err
    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    code, err = invoke(["run", "--rules", sample / "rules.csv", "--positions",
                        sample / "positions.csv", "--format", "delta", "--out", root],
                       tmp_path)
    assert code == 1 and said in err and "nothing was written" in err, err
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before
