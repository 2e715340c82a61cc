"""`snim-batch run` for schedulers, through the installed script in a real process: the run
result (`--result-file`, `--json`) on success, rejects, bad settings and failed runs, checked
against the schema the docs publish; SNIM_BATCH_* variables and their precedence; which
config file a run reads (and says it read); `--version`."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import polars as pl
import pytest
from conftest import SMALL_POSITIONS, small_job_verdicts, write_small_job

from pipeline import errors

SCRIPT = Path(sys.executable).with_name("snim-batch")
SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "docs" / "run-result.schema.json")
                    .read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)



@pytest.fixture
def job(tmp_path: Path) -> Path:
    """rules.csv and positions.csv in `tmp_path`; no config file there."""
    return write_small_job(tmp_path)


def snim(args: list[str], cwd: Path, env: dict[str, str] | None = None,
         ) -> subprocess.CompletedProcess[str]:
    """The installed script in `cwd`, with no SNIM_BATCH_* variable but those in `env`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SNIM_BATCH_")}
    return subprocess.run([str(SCRIPT), *args], cwd=cwd, env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=300)


def verdicts(out: Path) -> dict[tuple[int, int], str]:
    frame = pl.read_parquet(out / "verdicts.parquet")
    return {(int(r), int(p)): v for r, p, v in
            frame.select("rule_set_id", "position_id", "verdict").rows()}


def valid(document: dict) -> dict:
    errors_found = sorted(VALIDATOR.iter_errors(document), key=str)
    assert not errors_found, [e.message for e in errors_found]
    return document


RUN = ["run", "--rules", "rules.csv", "--positions", "positions.csv", "--out", "out"]


# ---- the run result ---------------------------------------------------------------------------


def test_the_schema_is_a_valid_json_schema_and_lists_every_error_code() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    classes = [getattr(errors, name) for name in errors.__all__]
    codes = [c.code for c in classes if isinstance(c, type) and issubclass(c, errors.SnimError)]
    assert len(codes) == len(set(codes)), codes  # one code per class, none inherited
    listed = SCHEMA["$defs"]["error"]["properties"]["code"]["enum"]
    assert sorted(listed) == sorted([*codes, "stopped", "out_of_memory", "name_too_long",
                                     "internal_error"])


def test_a_clean_run_writes_the_result_file_and_prints_the_same_json(job: Path) -> None:
    (job / "result.json").write_text("an older result\n")
    proc = snim([*RUN, "--result-file", "result.json", "--json"], job)
    assert proc.returncode == 0, proc.stderr
    printed = proc.stdout.splitlines()
    assert len(printed) == 1  # stdout holds the result alone; messages are on stderr
    document = valid(json.loads(printed[0]))
    assert json.loads((job / "result.json").read_text()) == document
    assert "snim-batch: wrote " in proc.stderr
    manifest = json.loads((job / "out" / "manifest.json").read_text())
    assert document == {
        "schema_version": 1, "status": "succeeded", "exit_code": 0, "error": None,
        "out": str(job / "out"), "config_file": None, "counts": manifest["counts"],
        "manifest_path": str(job / "out" / "manifest.json"), "manifest": manifest}
    assert manifest["schema_version"] == 1 and manifest["config_file"] is None
    assert manifest["counts"]["positions"]["verdicts"] == len(SMALL_POSITIONS)
    assert verdicts(job / "out") == small_job_verdicts()
    assert sorted(p.name for p in job.iterdir()) == ["out", "positions.csv", "result.json",
                                                     "rules.csv"]  # no temporary file left


def test_rejected_rows_exit_3_and_the_result_counts_them(job: Path) -> None:
    with (job / "positions.csv").open("a") as fh:
        fh.write("1,99,4 -2\n")
    proc = snim([*RUN, "--result-file", "r.json"], job)
    assert proc.returncode == 3, proc.stderr
    document = valid(json.loads((job / "r.json").read_text()))
    assert (document["status"], document["exit_code"], document["error"]) == ("succeeded", 3,
                                                                              None)
    assert document["counts"]["positions"]["rows_rejected"] == 1
    assert document["manifest"]["exit_code"] == 3


def test_a_config_error_exit_2_names_its_file_and_line(job: Path) -> None:
    """A bad value in the config file: exit 2, the result `failed` with the error's code,
    class, file and line, nothing written."""
    (job / "job.yaml").write_text("tables:\n  max_table_len: " + "1" * 101 + "\n")
    proc = snim([*RUN, "--config", "job.yaml", "--result-file", "r.json", "--json"], job)
    assert proc.returncode == 2, proc.stderr
    document = valid(json.loads(proc.stdout))
    assert json.loads((job / "r.json").read_text()) == document
    message = "job.yaml: line 2: an integer of 101 characters"
    assert proc.stderr == f"snim-batch: error: {message}\n"
    assert document == {
        "schema_version": 1, "status": "failed", "exit_code": 2,
        "error": {"code": "config_error", "class": "ConfigError", "message": message,
                  "path": "job.yaml", "row": 2, "column": None, "written": None},
        "out": None, "config_file": None, "counts": None, "manifest_path": None,
        "manifest": None}
    assert not (job / "out").exists()


@pytest.mark.parametrize(("content", "message"), [
    ("bogus: 1\n", "job.yaml: unknown key 'bogus' (known: "),
    ("engine: flink\n", "job.yaml: key 'engine' must be one of polars, spark"),
    ("- a list\n", "job.yaml: must be a mapping of keys to values"),
])
def test_every_config_file_error_names_the_file_in_the_result(job: Path, content: str,
                                                              message: str) -> None:
    """Whatever the config file's fault (an unknown key, a bad choice, not a mapping), the
    result's error.path names it, as the message does."""
    (job / "job.yaml").write_text(content)
    proc = snim([*RUN, "--config", "job.yaml", "--result-file", "r.json"], job)
    assert proc.returncode == 2, proc.stderr
    error = valid(json.loads((job / "r.json").read_text()))["error"]
    assert error["message"].startswith(message)
    assert (error["code"], error["path"]) == ("config_error", "job.yaml")


def test_missing_inputs_are_a_usage_error_in_the_result(job: Path) -> None:
    proc = snim(["run", "--out", "out", "--result-file", "r.json"], job)
    assert proc.returncode == 2, proc.stderr
    document = valid(json.loads((job / "r.json").read_text()))
    assert document["error"]["code"] == "usage_error"
    assert document["error"]["class"] == "UsageError"
    assert document["error"]["message"] == ("no ./config.yaml here: pass --config FILE, or "
                                            "--rules, --positions and --out")


def test_a_failed_run_exit_1_is_failed_with_its_error(job: Path) -> None:
    """The output exists and --overwrite is not given: exit 1, `failed` (nothing written),
    `output_error` with the error's fields as it holds them; the output as it was."""
    assert snim(RUN, job).returncode == 0
    before = (job / "out" / "manifest.json").read_text()
    proc = snim([*RUN, "--result-file", "r.json", "--json"], job)
    assert proc.returncode == 1, proc.stderr
    document = valid(json.loads(proc.stdout))
    error = document["error"]
    assert (document["status"], document["exit_code"]) == ("failed", 1)
    assert (error["code"], error["class"]) == ("output_error", "OutputError")
    assert error["message"] == f"{job / 'out'}: output already exists (pass --overwrite to " \
        "replace it)"
    assert f"snim-batch: error: {error['message']}" in proc.stderr
    assert document["out"] == str(job / "out") and document["manifest"] is None
    assert (job / "out" / "manifest.json").read_text() == before


@pytest.mark.parametrize(("content", "row"), [
    (b"rule_set_id,position_id,heaps\n1,0,5\n1,1,\xff\n", 3),
    (b"rule_set_id,position_id,heaps\n1,0,\"5\n", 2),
    (b"", None),
    (b"rule_set_id,rule_set_id,heaps\n", None),
])
def test_a_file_level_input_error_names_its_file_and_line_in_the_result(
        job: Path, content: bytes, row: int | None) -> None:
    """A positions file that cannot be read as CSV at all (invalid UTF-8, a quote never
    closed, empty, a duplicate column name): the result's error names the file in `path`
    and, where the message counts one, its line in `row` (both were null)."""
    (job / "positions.csv").write_bytes(content)
    proc = snim([*RUN, "--result-file", "r.json"], job)
    assert proc.returncode == 1, proc.stderr
    error = valid(json.loads((job / "r.json").read_text()))["error"]
    assert (error["code"], error["path"], error["row"]) == (
        "input_error", str(job / "positions.csv"), row), error
    assert error["message"].startswith(f"{job / 'positions.csv'}: ")
    if row is not None:
        assert f": line {row}: " in error["message"]


def test_bad_rows_under_fail_exit_1_with_their_code(job: Path) -> None:
    """The error names the first rejected row's file, row and column, as stderr's first
    problem line does (they were null: QA)."""
    rows = (job / "positions.csv").read_text().count("\n") - 1  # the header
    with (job / "positions.csv").open("a") as fh:
        fh.write("1,99,4 x\n")
    proc = snim([*RUN, "--on-bad-rows", "fail", "--json"], job)
    assert proc.returncode == 1, proc.stderr
    error = valid(json.loads(proc.stdout))["error"]
    assert (error["code"], error["written"]) == ("bad_rows", False)
    assert (error["path"], error["row"], error["column"]) == (
        str(job / "positions.csv"), rows, "heaps")  # rejects' 0-based data row
    assert f"snim-batch:   {job / 'positions.csv'} row {rows}, column heaps: " in proc.stderr
    assert not (job / "out").exists()


def test_a_stopped_run_says_so_in_its_result(job: Path) -> None:
    """SIGTERM once the run has staged its output and waits for its positions (a FIFO no
    one writes to): exit 143, status `stopped`, nothing written."""
    os.mkfifo(job / "slow.csv")
    proc = subprocess.Popen(
        [str(SCRIPT), "run", "--rules", "rules.csv", "--positions", "slow.csv", "--out", "out",
         "--result-file", "r.json", "--verbose"], cwd=job, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("SNIM_BATCH_")})
    try:
        said = []
        while not any("staging the output in" in line for line in said):
            said.append(proc.stderr.readline())
            assert said[-1], said  # the run ended before it staged
        proc.terminate()
        err = proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    document = valid(json.loads((job / "r.json").read_text()))
    assert (document["status"], document["exit_code"]) == ("stopped", 143)
    assert document["error"] == {
        "code": "stopped", "class": "Stopped", "message": "stopped by SIGTERM; nothing was "
        "written", "path": None, "row": None, "column": None, "written": False}
    assert not (job / "out").exists()


def test_a_result_file_in_a_missing_directory_is_exit_2_before_any_work(job: Path) -> None:
    proc = snim([*RUN, "--result-file", "nowhere/r.json"], job)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ("snim-batch: error: --result-file 'nowhere/r.json': its directory "
                           "does not exist\n")
    assert not (job / "out").exists()


def test_a_result_file_that_is_a_pipe_is_exit_2_and_stays_a_pipe(job: Path) -> None:
    """The result is written whole by a rename over its file, which would put a regular file
    in a pipe's (or, as root, a device's: /dev/null) place: refused before any work."""
    os.mkfifo(job / "fifo")
    proc = snim([*RUN, "--result-file", "fifo"], job)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ("snim-batch: error: --result-file 'fifo': is a pipe (a named pipe, "
                           "/dev/stdin piped, <(...)), not a regular file, and the file is "
                           "replaced whole, by a rename over it; name a file (--json prints "
                           "the result on stdout)\n")
    assert stat.S_ISFIFO(os.lstat(job / "fifo").st_mode)
    assert not (job / "out").exists()


def test_a_result_file_through_dev_or_proc_a_loop_or_a_long_target_is_exit_2(job: Path
                                                                              ) -> None:
    """`--result-file /dev/stdout` with stdout sent to a log (`>> sched.log`) followed the
    descriptor to the log and renamed the result over it; a link loop was replaced by a
    file; a link to a name too long for its temporary file failed after the commit. Each is
    refused before any work, and the log keeps its lines."""
    log = job / "sched.log"
    log.write_text("the night before\n")
    (job / "la").symlink_to("lb")
    (job / "lb").symlink_to("la")
    (job / "short.json").symlink_to("r" * 245)
    for named, said in (("/dev/stdout", "is a process's stream or descriptor, not a regular "
                                        "file"),
                        ("la", "is a symlink loop"),
                        ("short.json", "is 245 bytes, and its temporary file")):
        with log.open("a") as stdout:
            proc = subprocess.run([str(SCRIPT), *RUN, "--result-file", named], cwd=job,
                                  stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=300,
                                  env={k: v for k, v in os.environ.items()
                                       if not k.startswith("SNIM_BATCH_")})
        assert proc.returncode == 2, proc.stderr
        assert said in proc.stderr
        assert not (job / "out").exists()
    assert log.read_text() == "the night before\n"
    assert (job / "la").is_symlink() and (job / "lb").is_symlink()


def test_a_removed_working_directory_is_exit_2_naming_it(job: Path) -> None:
    """A shell left in a removed directory (an earlier `rm -rf` of the night's folder): a
    command that reads relative paths there gave a traceback or an internal error."""
    gone = job / "gone"
    gone.mkdir()
    script = (f"cd {gone} && rmdir {gone} && exec {SCRIPT} run --rules {job}/rules.csv "
              f"--positions {job}/positions.csv --out {job}/out --result-file r.json")
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=300)
    assert (proc.returncode, proc.stderr) == (
        2, "snim-batch: error: the current directory no longer exists (removed, or replaced "
           "by a rename): change to one that does\n")
    assert not (job / "out").exists()


def test_a_result_file_through_a_symlink_replaces_its_target(job: Path) -> None:
    """A link to the file a scheduler reads (`latest.json -> results/night.json`) stays a
    link: the file it points to gets the result, also through a dangling link."""
    (job / "results").mkdir()
    (job / "results" / "night.json").write_text("an older result\n")
    (job / "latest.json").symlink_to("results/night.json")
    (job / "next.json").symlink_to("results/next.json")
    for link in ("latest.json", "next.json"):
        proc = snim([*RUN, "--result-file", link, "--overwrite"], job)
        assert proc.returncode == 0, proc.stderr
        assert (job / link).is_symlink()
        document = valid(json.loads((job / link).read_text()))
        assert document["status"] == "succeeded"
    assert sorted(p.name for p in (job / "results").iterdir()) == ["next.json", "night.json"]


@pytest.mark.parametrize("result_file", ["nowhere/r.json", "positions.csv", "out/r.json"])
def test_a_refused_result_file_still_gets_json_its_result_on_stdout(job: Path,
                                                                     result_file: str) -> None:
    """Where the result file would go is the error (its directory missing, an input, inside
    the output): no file is written, and --json still prints the run's one result."""
    before = (job / "positions.csv").read_bytes()
    proc = snim([*RUN, "--json", "--result-file", result_file], job)
    assert proc.returncode == 2, proc.stderr
    printed = proc.stdout.splitlines()
    assert len(printed) == 1, proc.stdout
    document = valid(json.loads(printed[0]))
    assert (document["status"], document["exit_code"]) == ("failed", 2)
    assert document["error"]["code"] == "usage_error"
    assert document["error"]["message"] in proc.stderr
    assert "--result-file" in document["error"]["message"]
    assert (job / "positions.csv").read_bytes() == before
    assert not (job / "nowhere").exists() and not (job / "out").exists()


@pytest.mark.parametrize(("named", "refused"), [
    (["--result-file", "r.json"], ["--bogus"]),
    (["--result-file=r.json"], ["--engine", "flink"]),
    ([], ["--max-rejected-rows"]),  # SNIM_BATCH_RESULT_FILE; an option without its value
])
def test_a_refused_command_line_leaves_no_earlier_result(job: Path, named: list[str],
                                                         refused: list[str]) -> None:
    """A run line the parser refuses writes no result (exit 2, the parser's message): the
    result the night before left is removed, so that a scheduler reading the file finds none
    rather than an old success."""
    env = {} if named else {"SNIM_BATCH_RESULT_FILE": "r.json"}
    assert snim([*RUN, *named], job, env).returncode == 0
    assert valid(json.loads((job / "r.json").read_text()))["status"] == "succeeded"
    proc = snim([*RUN, "--overwrite", *named, *refused], job, env)
    assert proc.returncode == 2, proc.stderr
    assert "Error:" in proc.stderr and "Traceback" not in proc.stderr
    assert not (job / "r.json").exists()
    assert sorted(p.name for p in job.iterdir()) == ["out", "positions.csv", "rules.csv"]


@pytest.mark.parametrize("content", ["rule_set_id,kind,moves\n1,,1 2\n", '{"a": 1}\n',
                                     '{"schema_version": 1, "status": "succeeded"\n'])
def test_a_refused_command_line_keeps_a_file_that_is_no_result(job: Path, content: str
                                                                ) -> None:
    (job / "r.json").write_text(content)
    proc = snim([*RUN, "--result-file", "r.json", "--bogus"], job)
    assert proc.returncode == 2, proc.stderr
    assert (job / "r.json").read_text() == content


def test_a_refused_command_line_keeps_a_result_the_run_would_not_write_there(job: Path
                                                                              ) -> None:
    """Inside a snim-batch output (where the run refuses a --result-file), and for another
    command than run, the file stays."""
    assert snim([*RUN, "--result-file", "r.json"], job).returncode == 0
    inside = job / "out" / "r.json"
    inside.write_bytes((job / "r.json").read_bytes())
    assert snim([*RUN, "--result-file", str(inside), "--bogus"], job).returncode == 2
    assert snim(["explain", *RUN[1:], "--result-file", "r.json", "--bogus"], job
                ).returncode == 2
    assert snim([*RUN, "--result-file", "r.json", "--help"], job).returncode == 0
    assert inside.exists() and (job / "r.json").exists()


# ---- settings: environment variables, config files --------------------------------------------


def test_every_run_option_has_its_variable_in_the_help(job: Path) -> None:
    from typer.main import get_command

    from pipeline.cli import app

    command = get_command(app).commands["run"]  # type: ignore[attr-defined]
    options = [p for p in command.params if p.name != "help"]
    assert options
    for param in options:
        name = max(param.opts, key=len).lstrip("-").replace("-", "_").upper()
        assert param.envvar == f"SNIM_BATCH_{name}", param.opts
    shown = " ".join(snim(["run", "--help"], job).stdout.split())
    for param in options:
        assert f"SNIM_BATCH_{param.envvar[len('SNIM_BATCH_'):]}" in shown.replace("- ", "-")


def test_variables_run_the_job_and_flags_win_over_them(job: Path) -> None:
    env = {"SNIM_BATCH_RULES": "rules.csv", "SNIM_BATCH_POSITIONS": "positions.csv",
           "SNIM_BATCH_OUT": "from-env", "SNIM_BATCH_WINNING_MOVES": "true",
           "SNIM_BATCH_JSON": "1"}
    proc = snim(["run"], job, env)
    assert proc.returncode == 0, proc.stderr
    document = valid(json.loads(proc.stdout))
    assert document["out"] == str(job / "from-env")
    assert "move_take" in pl.read_parquet(job / "from-env" / "verdicts.parquet").columns
    proc = snim(["run", "--out", "from-flag", "--no-winning-moves"], job, env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["out"] == str(job / "from-flag")
    assert "move_take" not in pl.read_parquet(job / "from-flag" / "verdicts.parquet").columns
    assert verdicts(job / "from-flag") == small_job_verdicts()


def test_a_variable_wins_over_the_config_file_and_the_file_over_the_default(job: Path) -> None:
    (job / "job.yaml").write_text("rules: rules.csv\npositions: positions.csv\nout: o1\n"
                                  "winning_moves: true\n")
    proc = snim(["run", "--config", "job.yaml"], job)  # the file over the default (off)
    assert proc.returncode == 0, proc.stderr
    assert "move_take" in pl.read_parquet(job / "o1" / "verdicts.parquet").columns
    env = {"SNIM_BATCH_CONFIG": "job.yaml", "SNIM_BATCH_WINNING_MOVES": "false",
           "SNIM_BATCH_OUT": "o2"}
    proc = snim(["run"], job, env)  # the variables over the file's keys
    assert proc.returncode == 0, proc.stderr
    assert "move_take" not in pl.read_parquet(job / "o2" / "verdicts.parquet").columns
    manifest = json.loads((job / "o2" / "manifest.json").read_text())
    assert manifest["config"]["winning_moves"] is False
    assert manifest["config_file"] == str(job / "job.yaml")
    assert proc.stderr == f"snim-batch: config: {job / 'job.yaml'}\n"


def test_a_bad_variable_value_is_a_usage_error_naming_it(job: Path) -> None:
    proc = snim(RUN, job, {"SNIM_BATCH_ENGINE": "flink"})
    assert proc.returncode == 2
    assert ("Invalid value for '--engine' (env var: 'SNIM_BATCH_ENGINE'): "
            "'flink' is not one of 'polars', 'spark'.") in " ".join(proc.stderr.split())
    assert not (job / "out").exists()


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("SNIM_BATCH_MAX_REJECTED_ROWS", "-3",
     "--max-rejected-rows (set by SNIM_BATCH_MAX_REJECTED_ROWS) must be >= 0, got -3"),
    ("SNIM_BATCH_MAX_REJECTED_RATE", "2", "--max-rejected-rate (set by "
     "SNIM_BATCH_MAX_REJECTED_RATE) must be between 0 and 1 (a fraction of the input rows), "
     "got 2.0"),
    ("SNIM_BATCH_SPARK_REMOTE", "http://x", "--spark-remote (set by SNIM_BATCH_SPARK_REMOTE) "
     "must be a Spark Connect URL sc://HOST[:PORT][/;KEY=VALUE;...]"),
    ("SNIM_BATCH_RUN_DATE", "2026-01-01", "--run-date (set by SNIM_BATCH_RUN_DATE) applies to "
     "--format delta only"),
])
def test_a_value_a_variable_gave_is_refused_naming_the_variable(job: Path, variable: str,
                                                                value: str, message: str
                                                                ) -> None:
    """The settings' own checks name the option as it was given: a scheduler's variable,
    not a flag its command line does not have; in the run result too."""
    proc = snim([*RUN, "--json"], job, {variable: value})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"snim-batch: error: {message}"), proc.stderr
    assert json.loads(proc.stdout)["error"]["message"].startswith(message)
    assert not (job / "out").exists()


def test_the_working_directorys_config_is_read_only_without_inputs_on_the_command_line(
        job: Path) -> None:
    """./config.yaml (winning moves on, another output) is the run's config when neither
    --rules nor --positions is given, and is not read when they are (nor when their
    variables are): the same flags give the same run in any directory."""
    (job / "config.yaml").write_text("rules: rules.csv\npositions: positions.csv\n"
                                     "out: from-config\nwinning_moves: true\n")
    proc = snim(["run", "--json"], job)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["config_file"] == str(job / "config.yaml")
    assert proc.stderr.splitlines()[0] == f"snim-batch: config: {job / 'config.yaml'}"
    assert "move_take" in pl.read_parquet(job / "from-config" / "verdicts.parquet").columns
    proc = snim([*RUN, "--json"], job)
    assert proc.returncode == 0, proc.stderr
    assert "config:" not in proc.stderr
    document = json.loads(proc.stdout)
    assert document["config_file"] is None and document["manifest"]["config_file"] is None
    assert "move_take" not in pl.read_parquet(job / "out" / "verdicts.parquet").columns
    proc = snim(["run", "--out", "o3"], job, {"SNIM_BATCH_RULES": "rules.csv",
                                              "SNIM_BATCH_POSITIONS": "positions.csv"})
    assert proc.returncode == 0, proc.stderr
    assert "move_take" not in pl.read_parquet(job / "o3" / "verdicts.parquet").columns
    proc = snim(["run", "--rules", "rules.csv", "--out", "o4"], job)  # positions: nowhere
    assert proc.returncode == 2
    assert proc.stderr == ("snim-batch: error: no config file: pass --rules, --positions and "
                           "--out, or --config FILE (./config.yaml is read only when neither "
                           "--rules nor --positions is given, and --rules is)\n")
    proc = snim(["run", "--out", "o4"], job, {"SNIM_BATCH_RULES": "rules.csv"})
    assert proc.returncode == 2  # the variable, which no command line shows, is named
    assert proc.stderr == ("snim-batch: error: no config file: pass --rules, --positions and "
                           "--out, or --config FILE (./config.yaml is read only when neither "
                           "--rules nor --positions is given, and --rules (set by "
                           "SNIM_BATCH_RULES) is)\n")
    proc = snim(["run", "--config", "config.yaml", "--out", "o5", "--quiet"], job)
    assert (proc.returncode, proc.stderr) == (0, "")  # --quiet: not even the config line
    assert "move_take" in pl.read_parquet(job / "o5" / "verdicts.parquet").columns


# ---- --version ---------------------------------------------------------------------------------


def test_version_prints_the_package_version_fast(tmp_path: Path) -> None:
    import tomllib

    import pipeline

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml")
                            .read_text())["project"]
    assert pipeline.__version__ == project["version"]
    started = time.monotonic()
    proc = snim(["--version"], tmp_path)
    took = time.monotonic() - started
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        0, f"snim-batch {pipeline.__version__}\n", "")
    assert took < 2, took  # typer's import, no polars
    code = ("import sys\nfrom pipeline.cli import app\n"
            "try:\n    app(['--version'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('polars', 'pyarrow', 'numpy') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=tmp_path, timeout=120)
    assert loaded.stdout.splitlines()[-1] == "[]", loaded.stderr


def test_the_package_metadata_names_its_license_and_urls() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (root / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n")
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert set(project["urls"]) >= {"Homepage", "Source", "Issues"}
    assert "Typing :: Typed" in project["classifiers"]
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]  # PEP 639


def test_the_json_on_stdout_is_ascii_whatever_the_data(job: Path) -> None:
    """A name with an escape and a bidirectional override: the result on stdout is ASCII
    (every other character escaped by JSON), and parses back to the name."""
    name = "gone\x1b[31m\u202e.csv"
    proc = snim(["run", "--rules", "rules.csv", "--positions", name, "--out", "out", "--json"],
                job)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.isascii() and proc.stdout.count("\n") == 1
    assert proc.stdout.rstrip("\n").isprintable()
    document = valid(json.loads(proc.stdout))
    assert document["error"]["code"] == "input_error"
    assert name in document["error"]["message"]


@pytest.mark.parametrize("positions, out, code, about", [
    ("gone.csv", "out", "input_error", "gone.csv"),
    ("nothing*.csv", "out", "input_error", "nothing*.csv"),
    ("positions.csv", "done", "output_error", "done"),
])
def test_the_error_names_the_path_it_is_about(job: Path, positions: str, out: str, code: str,
                                              about: str) -> None:
    """`error.path` is "the file or location the error is about" (the schema): a scheduler's
    alert can name it without parsing the message."""
    first = snim(["run", "--rules", "rules.csv", "--positions", "positions.csv", "--out", "done",
                  "--quiet"], job)
    assert first.returncode == 0, first.stderr
    proc = snim(["run", "--rules", "rules.csv", "--positions", positions, "--out", out,
                 "--json"], job)
    assert proc.returncode == 1, proc.stderr
    error = valid(json.loads(proc.stdout))["error"]
    assert (error["code"], error["path"]) == (code, str(job / about))
