"""The public Python API (`pipeline.evaluate_batch`, docs/python-api.md), in process: the
typed result, the documented error classes, how settings combine, a cheap `import pipeline`,
and a real Dagster asset that runs the job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import polars as pl
import pytest
from conftest import small_job_verdicts, write_small_job

import pipeline
from pipeline import (
    BadRowsError,
    BatchResult,
    ConfigError,
    OutputError,
    UsageError,
    evaluate_batch,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """rules.csv and positions.csv in `tmp_path`, the working directory."""
    monkeypatch.chdir(tmp_path)
    return write_small_job(tmp_path)


def verdicts(out: Path) -> dict[tuple[int, int], str]:
    frame = pl.read_parquet(out / "verdicts.parquet")
    return {(int(r), int(p)): v for r, p, v in
            frame.select("rule_set_id", "position_id", "verdict").rows()}


def test_a_run_returns_its_typed_result(job: Path) -> None:
    phases: list[tuple[str, str]] = []
    result = evaluate_batch(rules="rules.csv", positions="positions.csv", out="out",
                            winning_moves=True,
                            on_event=lambda event: phases.append((event.kind, event.phase)))
    assert isinstance(result, BatchResult)
    manifest = json.loads((job / "out" / "manifest.json").read_text())
    assert (result.exit_code, result.status, result.out) == (0, "succeeded", str(job / "out"))
    assert result.manifest == manifest and result.counts == manifest["counts"]
    assert result.counts["positions"] == {"rows_read": 4, "rows_evaluated": 4,
                                          "rows_rejected": 0, "verdicts": 4,
                                          "W": list(small_job_verdicts().values()).count("W"),
                                          "L": list(small_job_verdicts().values()).count("L")}
    assert result.manifest_path == str(job / "out" / "manifest.json")
    assert result.config_file is None and manifest["config_file"] is None
    assert result.rejects == str(job / "out" / "rejects.parquet")
    assert verdicts(job / "out") == small_job_verdicts()
    assert "move_take" in pl.read_parquet(job / "out" / "verdicts.parquet").columns
    for name in ("rules", "positions", "write", "commit"):  # the callback heard each phase
        assert ("phase-start", name) in phases and ("phase-done", name) in phases, phases
    schema = json.loads((ROOT / "docs" / "run-result.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(result.document())
    assert result.document()["manifest"] == manifest


def test_rejected_rows_return_exit_code_3(job: Path) -> None:
    with (job / "positions.csv").open("a") as fh:
        fh.write("1,99,4 -2\n")
    result = evaluate_batch(rules="rules.csv", positions="positions.csv", out="out")
    assert result.exit_code == 3
    assert result.counts["positions"]["rows_rejected"] == 1
    assert result.problems == [f"{job / 'positions.csv'} row 4, column heaps: heap -2 at index 1 "
                               "is negative"]


def test_the_reject_tolerance_reason_codes_and_memory_limit_through_the_api(job: Path) -> None:
    """The same tolerance as the command line: within it exit 0 and the line that says so,
    over it exit 3 (or BadRowsError under fail); the manifest counts rejects by reason_code.
    A memory limit small enough to spill gives the same verdicts."""
    with (job / "positions.csv").open("a") as fh:
        fh.write("1,99,4 -2\n9,98,1\n")  # a negative heap, an unknown rule set
    within = evaluate_batch(rules="rules.csv", positions="positions.csv", out="within",
                            max_rejected_rows=2, memory_limit="1")
    assert within.exit_code == 0
    assert within.tolerated == ("2 rows rejected (within --max-rejected-rows 2); see "
                                f"{job / 'within' / 'rejects.parquet'}")
    assert within.manifest["rejects"]["by_reason_code"] == {"out_of_range": 1,
                                                            "unknown_rule_set": 1}
    assert within.manifest["rejects"]["decision"] == "within_tolerance"
    assert verdicts(job / "within") == small_job_verdicts()  # spilled: the same verdicts
    assert within.manifest["config"]["memory_limit"] == 1
    codes = pl.read_parquet(job / "within" / "rejects.parquet")["reason_code"].to_list()
    assert sorted(codes) == ["out_of_range", "unknown_rule_set"]
    over = evaluate_batch(rules="rules.csv", positions="positions.csv", out="over",
                          max_rejected_rate=0.1)  # 2 of 3 rules + 6 positions rows read
    assert (over.exit_code, over.tolerated) == (3, "")
    assert over.manifest["config"]["memory_limit"] == "auto"  # the default, as it is named
    assert over.manifest["rejects"]["decision"] == "over_tolerance"
    with pytest.raises(BadRowsError, match=r"over --max-rejected-rows 1"):
        evaluate_batch(rules="rules.csv", positions="positions.csv", out="failed",
                       max_rejected_rows=1, on_bad_rows="fail")
    assert not (job / "failed").exists()
    with pytest.raises(ConfigError, match="--max-rejected-rate must be between 0 and 1"):
        evaluate_batch(rules="rules.csv", positions="positions.csv", out="x",
                       max_rejected_rate=1.5)


def test_failures_raise_the_documented_classes(job: Path) -> None:
    with pytest.raises(UsageError) as missing:
        evaluate_batch(rules="rules.csv", out="out")
    assert type(missing.value) is UsageError and missing.value.exit_code == 2
    assert str(missing.value) == ("no config file: give config_file, or rules, positions and "
                                  "out (positions missing)")
    (job / "bad.yaml").write_text("tables:\n  max_table_len: " + "1" * 101 + "\n")
    with pytest.raises(ConfigError) as bad:
        evaluate_batch(config_file="bad.yaml")
    assert (bad.value.code, bad.value.path, bad.value.row) == ("config_error", "bad.yaml", 2)
    with pytest.raises(ConfigError, match="'engine' must be one of polars, spark"):
        evaluate_batch(rules="rules.csv", positions="positions.csv", out="out",
                       engine="flink")  # type: ignore[arg-type]
    evaluate_batch(rules="rules.csv", positions="positions.csv", out="out")
    with pytest.raises(OutputError) as exists:
        evaluate_batch(rules="rules.csv", positions="positions.csv", out="out")
    assert exists.value.exit_code == 1 and exists.value.code == "output_error"
    assert evaluate_batch(rules="rules.csv", positions="positions.csv", out="out",
                          overwrite=True).exit_code == 0
    with (job / "positions.csv").open("a") as fh:
        fh.write("1,99,4 x\n")
    with pytest.raises(BadRowsError) as rows:
        evaluate_batch(rules="rules.csv", positions="positions.csv", out="out2",
                       on_bad_rows="fail")
    assert (rows.value.written, rows.value.total) == (False, 1)
    assert not (job / "out2").exists()


@pytest.mark.parametrize(("name", "value"), [("overwrite", "no"), ("winning_moves", "false"),
                                             ("overwrite", 1), ("winning_moves", None)])
def test_a_flag_must_be_a_bool_not_text_that_reads_as_true(job: Path, name: str,
                                                           value: object) -> None:
    """Scheduler templates hand parameters over as text: "no" must not replace an output,
    nor "false" add the move columns. Only True or False (or None: unset) are taken."""
    evaluate_batch(rules="rules.csv", positions="positions.csv", out="out")
    before = (job / "out" / "verdicts.parquet").read_bytes()
    if value is None:
        evaluate_batch(rules="rules.csv", positions="positions.csv", out="fresh",
                       **{name: value})  # type: ignore[arg-type]
        return
    with pytest.raises(ConfigError) as bad:
        evaluate_batch(rules="rules.csv", positions="positions.csv", out="out",
                       **{name: value})  # type: ignore[arg-type]
    assert str(bad.value) == f"{name} must be True or False, got {value!r}"
    assert (job / "out" / "verdicts.parquet").read_bytes() == before


@pytest.mark.parametrize(("name", "value", "shown"), [
    ("rules", ["rules.csv"], "list"),
    ("positions", 5, "int"),
    ("out", ("out",), "tuple"),
    ("config_file", b"config.yaml", "bytes"),
])
def test_a_path_must_be_one_path_not_a_list_read_as_a_glob(job: Path, name: str, value: object,
                                                           shown: str) -> None:
    """`rules=["rules.csv"]` was the text "['rules.csv']": a glob whose brackets matched any
    one-letter file or directory, read as the rules with no error. Only a str or a path
    is taken, and nothing is written."""
    (job / "r").mkdir()
    (job / "r" / "other.csv").write_text("rule_set_id,kind,moves\n1,nim,\n")
    given = {"rules": "rules.csv", "positions": "positions.csv", "out": "out", name: value}
    with pytest.raises(ConfigError) as bad:
        evaluate_batch(**given)  # type: ignore[arg-type]
    assert str(bad.value) == f"{name} must be one path or URL (a str or a path), got {shown}"
    assert bad.value.exit_code == 2 and not (job / "out").exists()
    rules_entry = next(e for e in os.scandir(job) if e.name == "rules.csv")  # an os.PathLike
    assert evaluate_batch(rules=rules_entry, positions=job / "positions.csv",
                          out=Path("out")).exit_code == 0
    assert (job / "out" / "manifest.json").is_file()


@pytest.mark.parametrize("name", ["engine", "on_bad_rows", "output_format", "spark_master",
                                  "spark_remote"])
def test_a_choice_must_be_text_and_is_not_shown(job: Path, name: str) -> None:
    """Not shown: a Spark Connect URL may hold a token."""
    with pytest.raises(ConfigError) as bad:
        evaluate_batch(rules="rules.csv", positions="positions.csv", out="out",
                       **{name: [b"sc://h:15002/;token=SECRET"]})  # type: ignore[arg-type]
    assert str(bad.value) == f"{name} must be a str, got list"
    assert not (job / "out").exists()


def test_arguments_win_over_the_config_file_and_no_file_is_read_unasked(job: Path) -> None:
    """A config file is read only when `config_file` names it (./config.yaml is the command
    line's default, not the API's); an argument wins over its key."""
    (job / "config.yaml").write_text("rules: rules.csv\npositions: positions.csv\n"
                                     "out: from-config\nwinning_moves: true\n")
    with pytest.raises(UsageError, match="no config file"):
        evaluate_batch()
    result = evaluate_batch(rules="rules.csv", positions="positions.csv", out="plain")
    assert result.config_file is None
    assert "move_take" not in pl.read_parquet(job / "plain" / "verdicts.parquet").columns
    result = evaluate_batch(config_file="config.yaml", winning_moves=False)
    assert result.config_file == str(job / "config.yaml")
    assert result.out == str(job / "from-config")
    assert result.manifest["config_file"] == str(job / "config.yaml")
    assert result.manifest["config"]["winning_moves"] is False


def test_the_public_names_and_a_cheap_import() -> None:
    """`pipeline.__all__` names the entry point, its result and the error classes, none of
    them a submodule's name; `import pipeline` loads none of them (nor polars)."""
    for name in pipeline.__all__:
        assert getattr(pipeline, name) is not None, name
        assert not (ROOT / "pipeline" / f"{name}.py").exists(), name
        assert not (ROOT / "pipeline" / name).is_dir(), name
    assert pipeline.evaluate_batch.__module__ == "pipeline.api"
    assert pipeline.SnimError is __import__("pipeline.errors").errors.SnimError
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        pipeline.nothing  # noqa: B018
    code = ("import sys, json, pipeline\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pipeline', 'polars', 'pyarrow', 'numpy', 'typer'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["pipeline", "pipeline.io", "pipeline.io.lazy_exports"]


def test_every_error_class_the_api_page_names_is_exported() -> None:
    """python-api.md lists the errors a caller catches, "exported by `pipeline`":
    `from pipeline import CommitOutcomeUnknown` failed (QA)."""
    import re

    page = (ROOT / "docs" / "python-api.md").read_text()
    errors = page.split("**Errors.**", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"`([A-Z][A-Za-z]+)`", errors)) - {"KeyboardInterrupt"}
    assert {"CommitOutcomeUnknown", "SnimError", "NotBuilt"} <= named
    assert named <= set(pipeline.__all__), named - set(pipeline.__all__)


def test_the_package_is_typed() -> None:
    import tomllib

    assert (ROOT / "pipeline" / "py.typed").is_file()
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py.typed" in setuptools["package-data"]["pipeline"]


def test_a_dagster_asset_runs_the_job_in_process(job: Path) -> None:
    """The docs' asset (docs/python-api.md), materialized by Dagster in this process: its
    metadata from the BatchResult; a failure is the run's own error class."""
    import dagster as dg

    @dg.asset
    def snim_verdicts():  # no annotation: dagster resolves it in the module, not here
        result = evaluate_batch(rules=str(job / "rules.csv"),
                                positions=str(job / "positions.csv"), out=str(job / "out"),
                                overwrite=True)
        return dg.MaterializeResult(metadata={
            "exit_code": result.exit_code, "out": result.out,
            "verdicts": result.counts["positions"]["verdicts"],
            "rows_rejected": result.counts["positions"]["rows_rejected"]})

    done = dg.materialize([snim_verdicts])
    assert done.success
    [materialization] = done.asset_materializations_for_node("snim_verdicts")
    metadata = {key: value.value for key, value in materialization.metadata.items()}
    assert metadata == {"exit_code": 0, "out": str(job / "out"), "verdicts": 4,
                        "rows_rejected": 0}
    assert verdicts(job / "out") == small_job_verdicts()

    @dg.asset
    def refused():
        evaluate_batch(rules=str(job / "rules.csv"), positions=str(job / "positions.csv"),
                       out=str(job / "out"))  # exists, and no overwrite

    with pytest.raises(OutputError, match="output already exists"):
        dg.materialize([refused])


def test_a_delta_output_names_its_night_and_has_no_manifest_file(job: Path) -> None:
    from datetime import date

    result = evaluate_batch(rules="rules.csv", positions="positions.csv", out="root",
                            output_format="delta", run_date=date(2026, 11, 5))
    assert (result.exit_code, result.manifest["run_date"]) == (0, "2026-11-05")
    assert result.manifest_path is None and not (job / "root" / "manifest.json").exists()
    schema = json.loads((ROOT / "docs" / "run-result.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(result.document())
    runs = pl.read_delta(str(job / "root" / "runs"))
    assert runs["run_id"].to_list() == [result.manifest["run_id"]]
    with pytest.raises(UsageError, match="run_date must be a datetime.date, got str"):
        evaluate_batch(rules="rules.csv", positions="positions.csv", out="root",
                       output_format="delta", run_date="2026-11-05")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="on_event must be a function of one RunEvent, "
                                         "got int"):  # a TypeError, once the run had begun
        evaluate_batch(rules="rules.csv", positions="positions.csv", out="root2",
                       on_event=5)  # type: ignore[arg-type]
    assert not (job / "root2").exists()


def test_a_datetime_as_run_date_is_refused_before_anything_is_written(job: Path) -> None:
    """A datetime is a date to isinstance and to type checkers (Airflow's logical_date is
    one): it was written as the partition '2026-11-05T15:30:00', the Delta commit failed half
    way, and the new root was left unreadable for every later night ("Failed to parse
    value ... as 'date'"). Now refused before any work; the same night as a date runs."""
    from datetime import date, datetime

    with pytest.raises(UsageError, match=r"got datetime \(pass its .date\(\)"):
        evaluate_batch(rules="rules.csv", positions="positions.csv", out="root",
                       output_format="delta", run_date=datetime(2026, 11, 5, 15, 30))
    assert not (job / "root").exists()
    result = evaluate_batch(rules="rules.csv", positions="positions.csv", out="root",
                            output_format="delta", run_date=date(2026, 11, 5))
    assert (result.exit_code, result.manifest["run_date"]) == (0, "2026-11-05")


def test_a_callback_that_raises_past_committed_leaves_no_old_output_behind(job: Path) -> None:
    """An `on_event` that raises a BaseException other than Exception on COMMITTED (a
    framework's interrupt, KeyboardInterrupt): it goes on to the caller, the new output is
    in place, and the replaced one is removed as after any commit. Before, it skipped that:
    a full copy of the old output stayed as a hidden staging directory, which the next run
    in the same (live) process never removed."""
    from pipeline.events import COMMITTED

    first = evaluate_batch(rules="rules.csv", positions="positions.csv", out="out")
    assert first.exit_code == 0

    def interrupted(event) -> None:
        if event.kind == COMMITTED:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        evaluate_batch(rules="rules.csv", positions="positions.csv", out="out",
                       overwrite=True, on_event=interrupted)
    assert sorted(p.name for p in job.iterdir() if p.name.startswith((".", "out"))) == ["out"]
    manifest = json.loads((job / "out" / "manifest.json").read_text())
    assert manifest["run_id"] != first.manifest["run_id"]


@pytest.mark.parametrize("output_format", ["parquet", "delta"])
def test_a_callback_that_fails_after_the_commit_does_not_fail_the_run(
        job: Path, output_format: str, caplog: pytest.LogCaptureFixture) -> None:
    """`on_event` raising on the commit phase's end, which comes after COMMITTED: the run
    returns its result, logged as on COMMITTED. It raised, with the new output in place (a
    scheduler then retries a night that is written)."""
    from pipeline.events import PHASE_DONE

    def failing(event) -> None:
        if event.kind == PHASE_DONE and event.phase == "commit":
            raise ValueError("metrics sink down")

    result = evaluate_batch(rules="rules.csv", positions="positions.csv", out="out",
                            output_format=output_format, on_event=failing)
    assert result.exit_code == 0
    assert "the event callback failed on PHASE-DONE: metrics sink down" in caplog.text
    if output_format == "parquet":
        manifest = json.loads((job / "out" / "manifest.json").read_text())
        assert manifest["run_id"] == result.manifest["run_id"]
    else:
        runs = pl.read_delta(str(job / "out" / "runs"))
        assert runs["run_id"].to_list() == [result.manifest["run_id"]]


def test_the_api_prints_nothing_when_the_caller_configured_no_logging(job: Path) -> None:
    """A callback that fails on COMMITTED is logged, not raised: with no logging configured
    (a plain script), that warning went to Python's last-resort handler, on stderr, from a
    library that promises never to print. Now the package's logger has a NullHandler."""
    script = ("from pipeline import evaluate_batch\n"
              "from pipeline.events import COMMITTED\n"
              "def failing(event):\n"
              "    if event.kind == COMMITTED:\n"
              "        raise ValueError('the callback is broken')\n"
              "r = evaluate_batch(rules='rules.csv', positions='positions.csv', out='out',"
              " on_event=failing)\n"
              "print(r.exit_code)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=job, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (done.returncode, done.stdout, done.stderr) == (0, "0\n", "")
