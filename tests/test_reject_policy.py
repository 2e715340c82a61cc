"""The tolerance of rejected rows (--max-rejected-rows, --max-rejected-rate, and their
config keys): exit codes, the stderr line, the manifest's `rejects`, through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import invoke, write_csv

SCRIPT = Path(sys.executable).with_name("snim-batch")


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """2 rules rows and 8 positions rows, 2 of them rejected (an unknown rule set and a
    negative heap): 10 rows read, 2 rejected, a rate of 0.2."""
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "1 2"], [2, "2 5"]])
    write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heaps"],
              [[1, 0, "1"], [1, 1, "2 3"], [2, 2, "7"], [9, 3, "4"], [1, 4, "-1"],
               [2, 5, "5"], [2, 6, ""], [1, 7, "3"]])
    return tmp_path


def run(where: Path, *options: str) -> tuple[int, str]:
    return invoke(["run", "--rules", "rules.csv", "--positions", "positions.csv",
                   "--out", "out", *options], where)


def manifest(where: Path) -> dict:
    return json.loads((where / "out" / "manifest.json").read_text())


def rejects_entry(rows: int | None, rate: float | None, decision: str,
                  policy: str = "reject") -> dict:
    return {"rows": 2, "rate": 0.2,
            "by_reason_code": {"out_of_range": 1, "unknown_rule_set": 1},
            "policy": {"on_bad_rows": policy, "max_rejected_rows": rows,
                       "max_rejected_rate": rate},
            "decision": decision}


def test_without_a_tolerance_any_rejected_row_exits_3(job):
    code, err = run(job)
    assert code == 3
    assert err.splitlines()[0] == ("snim-batch: some rows were rejected (exit 3); first ones, "
                                   f"all in {job}/out/rejects.parquet:")
    found = manifest(job)
    assert (found["status"], found["exit_code"]) == ("completed_with_rejects", 3)
    assert found["rejects"] == rejects_entry(None, None, "over_tolerance")
    assert found["config"]["max_rejected_rows"] is None


def test_within_max_rejected_rows_exits_0_and_says_so(job):
    code, err = run(job, "--max-rejected-rows", "2")
    assert code == 0
    assert err.splitlines() == [f"snim-batch: 2 rows rejected (within --max-rejected-rows 2); "
                                f"see {job}/out/rejects.parquet"]
    found = manifest(job)
    assert (found["status"], found["exit_code"]) == ("completed_with_rejects", 0)
    assert found["rejects"] == rejects_entry(2, None, "within_tolerance")


def test_over_max_rejected_rows_exits_3(job):
    code, err = run(job, "--max-rejected-rows", "1")
    assert code == 3
    assert "some rows were rejected (exit 3)" in err
    assert manifest(job)["rejects"] == rejects_entry(1, None, "over_tolerance")


@pytest.mark.parametrize(("rate", "code"), [("0.2", 0), ("0.19", 3), ("1", 0), ("0", 3)])
def test_max_rejected_rate_is_a_fraction_of_the_rows_read(job, rate, code):
    got, err = run(job, "--max-rejected-rate", rate)
    assert got == code
    decision = "within_tolerance" if code == 0 else "over_tolerance"
    assert manifest(job)["rejects"] == rejects_entry(None, float(rate), decision)
    if code == 0:
        assert err.splitlines() == [f"snim-batch: 2 rows rejected (within --max-rejected-rate "
                                    f"{float(rate):g}); see {job}/out/rejects.parquet"]


@pytest.mark.parametrize(("rows", "rate", "code"), [
    ("5", "0.5", 0),  # within both
    ("1", "0.5", 3),  # over the rows
    ("5", "0.1", 3),  # over the rate
    ("1", "0.1", 3),  # over both
])
def test_with_both_a_run_fails_over_either(job, rows, rate, code):
    got, err = run(job, "--max-rejected-rows", rows, "--max-rejected-rate", rate)
    assert got == code
    if code == 0:
        assert err.splitlines() == [
            f"snim-batch: 2 rows rejected (within --max-rejected-rows {rows} and "
            f"--max-rejected-rate {rate}); see {job}/out/rejects.parquet"]
    assert manifest(job)["rejects"]["decision"] == ("within_tolerance" if code == 0
                                                    else "over_tolerance")


def test_on_bad_rows_fail_writes_within_the_tolerance_and_nothing_over_it(job):
    code, err = run(job, "--on-bad-rows", "fail", "--max-rejected-rows", "2")
    assert code == 0
    assert manifest(job)["rejects"] == rejects_entry(2, None, "within_tolerance", "fail")
    code, err = run(job, "--on-bad-rows", "fail", "--max-rejected-rows", "1", "--overwrite")
    assert code == 1
    assert err.splitlines()[0] == ("snim-batch: error: 2 input rows failed validation "
                                   "(--on-bad-rows fail, over --max-rejected-rows 1); nothing "
                                   "was written")
    assert manifest(job)["rejects"]["policy"]["max_rejected_rows"] == 2  # the first run's


def test_a_clean_run_with_a_tolerance_says_nothing_of_rejects(tmp_path):
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "1 2"]])
    write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heaps"],
              [[1, 0, "1"]])
    code, err = run(tmp_path, "--max-rejected-rows", "3")
    assert (code, err) == (0, "")
    assert manifest(tmp_path)["rejects"] == {
        "rows": 0, "rate": 0.0, "by_reason_code": {}, "decision": "none",
        "policy": {"on_bad_rows": "reject", "max_rejected_rows": 3, "max_rejected_rate": None}}


def test_config_keys_set_the_tolerance_and_flags_override_them(job):
    (job / "config.yaml").write_text("rules: rules.csv\npositions: positions.csv\nout: out\n"
                                     "max_rejected_rows: 2\nmax_rejected_rate: 0.5\n")
    code, err = invoke(["run", "--config", "config.yaml"], job)
    assert code == 0
    assert manifest(job)["rejects"] == rejects_entry(2, 0.5, "within_tolerance")
    code, err = invoke(["run", "--config", "config.yaml", "--overwrite",
                        "--max-rejected-rows", "1"], job)
    assert code == 3
    assert manifest(job)["rejects"] == rejects_entry(1, 0.5, "over_tolerance")


@pytest.mark.parametrize(("line", "message"), [
    ("max_rejected_rows: -1", "key 'max_rejected_rows' must be >= 0, got -1"),
    ("max_rejected_rows: 1.5", "key 'max_rejected_rows' must be an integer, got 1.5"),
    ("max_rejected_rows: true", "key 'max_rejected_rows' must be an integer, got True"),
    ("max_rejected_rows: ten", "key 'max_rejected_rows' must be an integer, got 'ten'"),
    ("max_rejected_rate: 1.5", "key 'max_rejected_rate' must be between 0 and 1 (a fraction "
                               "of the input rows), got 1.5"),
    ("max_rejected_rate: -0.1", "key 'max_rejected_rate' must be between 0 and 1 (a fraction "
                                "of the input rows), got -0.1"),
    ("max_rejected_rate: .nan", "key 'max_rejected_rate' must be between 0 and 1 (a fraction "
                                "of the input rows), got nan"),
    ("max_rejected_rate: 5%", "key 'max_rejected_rate' must be a number, got '5%'"),
])
def test_bad_config_values_are_usage_errors_naming_the_key(job, line, message):
    (job / "config.yaml").write_text(f"rules: rules.csv\npositions: positions.csv\nout: out\n"
                                     f"{line}\n")
    code, err = invoke(["run", "--config", "config.yaml"], job)
    assert (code, err) == (2, f"snim-batch: error: config.yaml: {message}\n")
    assert not (job / "out").exists()


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--max-rejected-rows", "-1", "--max-rejected-rows must be >= 0, got -1"),
    ("--max-rejected-rate", "1.01", "--max-rejected-rate must be between 0 and 1 (a fraction "
                                    "of the input rows), got 1.01"),
])
def test_bad_option_values_are_usage_errors_naming_the_option(job, option, value, message):
    code, err = run(job, option, value)
    assert (code, err) == (2, f"snim-batch: error: {message}\n")


def test_the_installed_script_exits_0_within_and_3_over(job):
    def script(*options: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(SCRIPT), "run", "--rules", "rules.csv", "--positions",
                               "positions.csv", "--out", "out", "--overwrite", *options],
                              cwd=job, capture_output=True, text=True, timeout=120)

    within = script("--max-rejected-rate", "0.25")
    assert within.returncode == 0, within.stderr
    assert within.stderr == (f"snim-batch: 2 rows rejected (within --max-rejected-rate 0.25); "
                             f"see {job}/out/rejects.parquet\n")
    over = script("--max-rejected-rate", "0.1")
    assert over.returncode == 3


def _mostly_unknown(where: Path, batches: int = 10) -> None:
    """rules.csv of rule set 1, positions.csv of `batches` batches of 64 rows (with
    BATCH_ROWS 64) whose rows name rule set 9 but every eighth, which names 1."""
    write_csv(where / "rules.csv", ["rule_set_id", "moves"], [[1, "1 2"]])
    write_csv(where / "positions.csv", ["rule_set_id", "position_id", "heaps"],
              [[1 if i % 8 == 0 else 9, i, f"{i % 5} 2"] for i in range(64 * batches)])


def _as_long_form(where: Path, in_key_order: bool = True) -> None:
    """positions.csv rewritten in long form, a row a heap (its positions in reverse order
    unless `in_key_order`)."""
    rows = [line.split(",") for line in (where / "positions.csv").read_text().splitlines()[1:]]
    write_csv(where / "positions.csv", ["rule_set_id", "position_id", "heap"],
              [[r, p, h] for r, p, heaps in (rows if in_key_order else rows[::-1])
               for h in heaps.split()])


def _failed_past_100(where: Path, on_progress) -> BaseException:
    """The error of a fail run of `where`'s tables over --max-rejected-rows 100, its
    positions' progress events given to `on_progress`."""
    from pipeline.api import evaluate_batch
    from pipeline.errors import BadRowsError

    with pytest.raises(BadRowsError) as failed:
        evaluate_batch(rules=where / "rules.csv", positions=where / "positions.csv",
                       out=where / "out", on_bad_rows="fail", max_rejected_rows=100,
                       on_event=lambda e: on_progress(e)
                       if e.kind == "progress" and e.phase == "positions" else None)
    return failed.value


@pytest.mark.parametrize("form", ["wide", "long"])
def test_a_fail_run_past_max_rejected_rows_stops_reading(tmp_path, monkeypatch, form):
    """--on-bad-rows fail with --max-rejected-rows: once past it the run is over whatever
    it reads on, so it reads no further batch (it read and held every row first: a wrong
    rules file's 10M rejects, 4.2 GiB), and says how many it found: at least."""
    _mostly_unknown(tmp_path)
    if form == "long":
        _as_long_form(tmp_path)
        # not collected whole (one part, nothing after it to stop before): grouped as read
        monkeypatch.setattr("pipeline.engines.polars_engine.LONG_PARTITION_ROWS", 200)
    monkeypatch.setattr("pipeline.batches.BATCH_ROWS", 64)
    progress = []
    failed = _failed_past_100(tmp_path, lambda e: progress.append(e.done_units))
    if form == "wide":  # 56 rejected rows a batch: past 100 in the second, so two read
        assert progress == [64, 128]
        assert str(failed).startswith(
            "at least 112 input rows failed validation (--on-bad-rows fail, over "
            "--max-rejected-rows 100; the run stopped reading there)")
        assert failed.total == 112
    else:  # the rows in key order: grouped as they come, position by position
        assert len(progress) < 10 and failed.total > 100
        assert str(failed).startswith(f"at least {failed.total} input rows")
    first = 1 if form == "wide" else 2  # rows count from 0 after the header; 2 heaps a row
    assert failed.problems[0] == (
        f"{tmp_path / 'positions.csv'} row {first}, column rule_set_id: unknown rule_set_id 9 "
        "(not in the rules table)")
    assert (failed.path, failed.row) == (str(tmp_path / "positions.csv"), first)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["positions.csv", "rules.csv"]


def test_a_fail_run_of_long_form_in_no_key_order_stops_splitting_past_its_tolerance(
        tmp_path, monkeypatch):
    """Long form in no key order is split into scratch parts before any position is grouped;
    rows rejected on their own (here an unknown rule set) stop the split past the tolerance,
    where the run read its whole input before (then stopped at the first part)."""
    _mostly_unknown(tmp_path)
    _as_long_form(tmp_path, in_key_order=False)
    monkeypatch.setattr("pipeline.engines.polars_engine.LONG_PARTITION_ROWS", 200)
    monkeypatch.setattr("pipeline.batches.BATCH_ROWS", 64)
    progress = []
    failed = _failed_past_100(tmp_path, lambda e: progress.append(e.message))
    # 32 positions a batch, 28 of them rule set 9's: 56 rows, past 100 in the second batch
    assert progress == ["positions: 64 rows split into 7 parts (file 1 of 1)",
                        "positions: 128 rows split into 7 parts (file 1 of 1)"]
    assert str(failed).startswith(
        "at least 112 input rows failed validation (--on-bad-rows fail, over "
        "--max-rejected-rows 100; the run stopped reading there)")
    assert failed.problems[0] == (
        f"{tmp_path / 'positions.csv'} row 0, column rule_set_id: unknown rule_set_id 9 "
        "(not in the rules table)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["positions.csv", "rules.csv"]


@pytest.mark.parametrize("options, message", [
    (["--max-rejected-rows", "550"], "561 input rows failed validation "
     "(--on-bad-rows fail, over --max-rejected-rows 550)"),
    (["--max-rejected-rate", "0.5"], "560 input rows failed validation "
     "(--on-bad-rows fail, over --max-rejected-rate 0.5)"),
])
def test_a_fail_run_reads_on_where_it_cannot_yet_tell(tmp_path, monkeypatch, options, message):
    """Past the tolerance only in the last batch (504 rejected position rows and a bad rules
    row are 505 after nine of ten batches), the run has read every row: the count is exact.
    A rate needs every row read: no early stop."""
    _mostly_unknown(tmp_path)
    monkeypatch.setattr("pipeline.batches.BATCH_ROWS", 64)
    if options[0] == "--max-rejected-rows":
        write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "1 2"], [2, "x"]])
    code, err = run(tmp_path, "--on-bad-rows", "fail", *options)
    assert code == 1, err
    assert err.splitlines()[0] == f"snim-batch: error: {message}; nothing was written"


def test_a_fail_run_over_a_rate_builds_no_rejects_table(tmp_path, monkeypatch):
    """Spilled rejects (--memory-limit 1) of a fail run over its rate: the error names the
    first rejected rows without the rejects table being written back from scratch (it was,
    in full, and a full disk then turned the error into an output error)."""
    from pipeline.engines.polars_rejects import HeldRejects

    def refuse(*_):
        raise AssertionError("the rejects table was written")

    _mostly_unknown(tmp_path)
    monkeypatch.setattr("pipeline.batches.BATCH_ROWS", 64)
    monkeypatch.setattr(HeldRejects, "sorted_file", refuse)
    code, err = run(tmp_path, "--on-bad-rows", "fail", "--max-rejected-rate", "0.5",
                    "--memory-limit", "1")
    assert code == 1, err
    lines = err.splitlines()
    assert lines[0] == ("snim-batch: error: 560 input rows failed validation (--on-bad-rows "
                        "fail, over --max-rejected-rate 0.5); nothing was written")
    assert lines[1] == (f"snim-batch:   {tmp_path / 'positions.csv'} row 1, column "
                        "rule_set_id: unknown rule_set_id 9 (not in the rules table)")


def test_a_stopped_run_names_the_first_rejects_it_found(tmp_path, monkeypatch):
    """Long form whose positions alternate a bad heap (row 0's, found by the parse, after a
    batch's other rejects) and an unknown rule set: the stop names the rows in file and row
    order among those found, row 0 first, and says the rest are a lower bound."""
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "1 2"]])
    write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heap"],
              [row for p in range(600) for row in (
                  [[1, p, "x"], [1, p, 2]] if p % 3 == 0 else [[9, p, 1], [9, p, 2]])])
    monkeypatch.setattr("pipeline.batches.BATCH_ROWS", 64)
    monkeypatch.setattr("pipeline.engines.polars_engine.LONG_PARTITION_ROWS", 200)
    code, err = run(tmp_path, "--on-bad-rows", "fail", "--max-rejected-rows", "20")
    assert code == 1, err
    lines = err.splitlines()
    assert lines[0].startswith("snim-batch: error: at least "), lines[0]
    where = tmp_path / "positions.csv"
    assert lines[1:3] == [
        f"snim-batch:   {where} row 0, column heap: heap 'x' is not an integer",
        f"snim-batch:   {where} row 1: another row of this position ({where} row 0) was "
        "rejected"]
    total = int(lines[0].split()[4])
    assert lines[-1] == f"snim-batch:   ... and at least {total - 10} more"
