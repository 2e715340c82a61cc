"""The error family: every SnimError subclass is defined in pipeline/errors.py and exported;
an error's fields are kept (and survive pickling); its text says "nothing was written" once,
rendered from its `written` field, never typed into a message; and the command line's error
lines read as before, byte for byte."""

from __future__ import annotations

import ast
import os
import pickle
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from conftest import write_csv

from pipeline import errors
from pipeline.config import load_config
from pipeline.errors import (
    BadRowsError,
    CommitOutcomeUnknown,
    ConfigError,
    InputError,
    OutputChanged,
    OutputError,
    ReconcileError,
    SparkConnectError,
    StoreError,
    UsageError,
    WriteFailure,
)
from pipeline.transforms.schema import check_columns, wrong_type

PIPELINE = Path(errors.__file__).parent
SCRIPT = Path(sys.executable).with_name("snim-batch")
ERROR_CLASSES = {name: value for name, value in vars(errors).items()
                 if isinstance(value, type) and issubclass(value, BaseException)
                 and value.__module__ == errors.__name__}


def _classes() -> list[tuple[Path, str, set[str]]]:
    """(module, class name, the names of its bases) of every class in pipeline/."""
    found = []
    for path in sorted(PIPELINE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else b.attr
                         for b in node.bases if isinstance(b, (ast.Name, ast.Attribute))}
                found.append((path, node.name, bases))
    return found


def test_every_error_of_ours_is_defined_in_errors_py() -> None:
    """No class outside errors.py derives from one of its errors, directly or through a
    class that does."""
    classes = _classes()
    ours = set(ERROR_CLASSES)
    outside: list[str] = []
    while True:
        more = [(path, name) for path, name, bases in classes
                if path.name != "errors.py" or path.parent != PIPELINE
                if bases & ours and name not in ours]
        if not more:
            break
        ours |= {name for _, name in more}
        outside += [f"{path.relative_to(PIPELINE.parent)}: {name}" for path, name in more]
    assert outside == []
    assert {"SnimError", "StoreError", "WriteFailure", "SparkFailure", "SparkConnectError",
            "OutputChanged", "CommitOutcomeUnknown", "ReconcileError"} <= set(ERROR_CLASSES)


def test_all_exports_every_error_and_exit_code() -> None:
    exported = set(errors.__all__)
    assert set(ERROR_CLASSES) <= exported
    assert {"EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_REJECTS"} <= exported
    assert all(hasattr(errors, name) for name in errors.__all__)
    assert len(errors.__all__) == len(exported)


def _said_outside_errors_py() -> list[str]:
    """Where a string in pipeline/ (not a docstring) holds "nothing was written": only the
    messages that are not a SnimError's may."""
    said = []
    for path in sorted(PIPELINE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docstrings and "nothing was written" in node.value):
                said.append(f"{path.relative_to(PIPELINE.parent)}:{node.lineno}")
    return said


def test_nothing_was_written_is_typed_only_where_no_snim_error_renders_it() -> None:
    """errors.py's one constant; the stop lines (terminal.py) and the internal error's line
    (cli.py), which are no SnimError's."""
    places = [place.split(":")[0] for place in _said_outside_errors_py()]
    assert sorted(places) == ["pipeline/cli.py", "pipeline/errors.py", "pipeline/terminal.py",
                              "pipeline/terminal.py"]


def test_fields_are_kept_and_survive_pickling() -> None:
    made = [
        InputError("a.csv: line 3: bad", path=Path("a.csv"), row=3, column="heaps"),
        OutputError("out: cannot list it", path="out", written=False, hint=" (see)"),
        BadRowsError("2 input rows failed", ["a row 1: x", "a row 2: y"], 2, written=False),
        ReconcileError("a.csv: held 4 read 3", "a.csv", 4, 3, written=False, hint=" (rerun)"),
        WriteFailure("v.parquet: disk full while writing it", "writing v.parquet",
                     "no space left on device", True, path="v.parquet"),
        OutputChanged("s3://b/o: another run committed", path="s3://b/o", written=False),
        CommitOutcomeUnknown("s3://b/o: could not tell", path="s3://b/o"),
        StoreError("s3://b/k: refused"),
        SparkConnectError("lost", written=False, hint=": see the server's log"),
        UsageError("--out x: too long", written=False),
    ]
    first = made[0]
    assert (first.message, first.path, first.row, first.column) == (
        "a.csv: line 3: bad", "a.csv", 3, "heaps")
    assert (first.written, first.refused, first.hint) == (None, False, "")
    for error in made:
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error)
        assert str(back) == str(error)
        assert vars(back) == vars(error)
        assert back.exit_code == error.exit_code
    bad = pickle.loads(pickle.dumps(made[2]))
    assert (bad.problems, bad.total) == (["a row 1: x", "a row 2: y"], 2)
    reconciled = pickle.loads(pickle.dumps(made[3]))
    assert (reconciled.path, reconciled.expected, reconciled.found) == ("a.csv", 4, 3)
    failure = pickle.loads(pickle.dumps(made[4]))
    assert (failure.doing, failure.cause, failure.no_space) == (
        "writing v.parquet", "no space left on device", True)
    assert made[-1].exit_code == errors.EXIT_USAGE and made[0].exit_code == errors.EXIT_FAILED


@pytest.mark.parametrize(("fields", "text"), [
    ({}, "x.csv: bad"),
    ({"written": None, "hint": " (see)"}, "x.csv: bad (see)"),
    ({"written": True}, "x.csv: bad"),
    ({"written": False}, "x.csv: bad; nothing was written"),
    ({"written": False, "hint": " (rerun, with --overwrite to replace it)"},
     "x.csv: bad; nothing was written (rerun, with --overwrite to replace it)"),
    ({"written": False, "hint": ": raise spark.executor.memory"},
     "x.csv: bad; nothing was written: raise spark.executor.memory"),
    ({"refused": True}, "x.csv: bad; refusing to replace it"),
    ({"refused": True, "written": False},
     "x.csv: bad; refusing to replace it, nothing was written"),
])
def test_str_renders_the_output_s_fate_once(fields: dict[str, object], text: str) -> None:
    error = OutputError("x.csv: bad", **fields)
    assert str(error) == text
    assert error.message == "x.csv: bad"
    assert str(error).count("nothing was written") == (fields.get("written") is False)


# ---- the command line's lines, byte for byte -------------------------------------------------


def _inputs(where: Path, heaps: str = "3 4") -> tuple[Path, Path]:
    where.mkdir()
    write_csv(where / "rules.csv", ["rule_set_id", "kind", "moves"], [[1, "subtraction", "1 2"]])
    write_csv(where / "positions.csv", ["rule_set_id", "position_id", "heaps"],
              [[1, 1, "1 2"], [1, 2, heaps]])
    return where / "rules.csv", where / "positions.csv"


def _run(tmp_path: Path, *args: object) -> tuple[int, list[str]]:
    """The installed script, run in `tmp_path` (no config.yaml there): its exit code and
    its stderr's lines."""
    proc = subprocess.run([str(SCRIPT), *map(str, args)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    return proc.returncode, proc.stderr.splitlines()


def test_cli_lines_where_nothing_was_written(tmp_path: Path) -> None:
    rules, positions = _inputs(tmp_path / "in", heaps="3 x")
    out = tmp_path / "out"
    code, lines = _run(tmp_path, "run", "--rules", rules, "--positions", positions, "--out",
                       out, "--on-bad-rows", "fail")
    assert code == 1, lines
    assert lines[0] == ("snim-batch: error: 1 input rows failed validation (--on-bad-rows "
                        "fail); nothing was written")
    assert not out.exists()

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine\n")
    code, lines = _run(tmp_path, "run", "--rules", rules, "--positions", positions, "--out",
                       foreign, "--overwrite")
    assert (code, lines) == (1, [
        f"snim-batch: error: {foreign}: exists and is not provably a snim-batch output (no "
        "manifest.json); refusing to replace it, nothing was written"])

    long = tmp_path / ("n" * 300)
    code, lines = _run(tmp_path, "run", "--rules", rules, "--positions", positions, "--out",
                       long)
    assert code == 2, lines
    assert lines == [f"snim-batch: error: --out {str(long)[:117]}...: the name "
                     f"'{'n' * 27}...{'n' * 28}' is 300 bytes, more than the 255 a file name "
                     "may have; nothing was written"]


def test_cli_lines_that_do_not_say_what_was_written(tmp_path: Path) -> None:
    rules, positions = _inputs(tmp_path / "in")
    a_file = tmp_path / "a_file"
    a_file.write_text("mine\n")
    code, lines = _run(tmp_path, "run", "--rules", rules, "--positions", positions, "--out",
                       a_file)
    assert (code, lines) == (1, [f"snim-batch: error: {a_file}: exists and is not a "
                                 "directory; refusing to replace it"])

    out = tmp_path / "out"
    code, lines = _run(tmp_path, "run", "--quiet", "--rules", rules, "--positions", positions,
                       "--out", out)
    assert code == 0, lines
    code, lines = _run(tmp_path, "run", "--rules", rules, "--positions", positions, "--out",
                       out)
    assert (code, lines) == (1, [f"snim-batch: error: {out}: output already exists (pass "
                                 "--overwrite to replace it)"])


def test_errors_raised_for_a_place_name_it(tmp_path: Path) -> None:
    """A config file's bad line, a missing or mistyped column: the error's fields name the
    file, the line and the column its message names."""
    config = tmp_path / "c.yaml"
    config.write_text("engine: polars\nwinning_moves: \x01\n")
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert (info.value.path, info.value.row, info.value.written) == (str(config), 2, None)
    assert str(info.value).startswith(f"{config}: line 2 is not valid YAML")

    with pytest.raises(InputError) as missing:
        check_columns(["rule_set_id", "heaps"], ["rule_set_id", "position_id"], ["heaps"],
                      "p.csv")
    assert (missing.value.path, missing.value.column) == ("p.csv", "position_id")
    mistyped = wrong_type("p.csv", "heaps", pl.Float64(), "a list of integers")
    assert (mistyped.path, mistyped.column, mistyped.row) == ("p.csv", "heaps", None)


@pytest.mark.parametrize(("text", "local", "said"), [
    ("java.lang.OutOfMemoryError: Java heap space", True,
     "Spark ran out of memory in the driver JVM, which runs every task in local mode "
     "(java.lang.OutOfMemoryError: Java heap space); nothing was written: raise "
     "spark.driver.memory (spark.conf in config.yaml, or spark-submit --driver-memory, now "
     "4g)"),
    ("ExecutorLostFailure (executor 1 exited)", False,
     "Spark lost an executor (ExecutorLostFailure (executor 1 exited)); nothing was written: "
     "raise spark.executor.memory and spark.executor.memoryOverhead, or see the executor's "
     "log on the cluster"),
])
def test_spark_failures_say_nothing_was_written_before_their_advice(
        text: str, local: bool, said: str) -> None:
    """Spark's failures outside the data, from the text of the exception it raised (no JVM
    needed): the advice follows "nothing was written", as a hint."""
    pytest.importorskip("pyspark")
    from pipeline.engines.spark_session import Session, failure

    run = Session(spark=None, owned=True, local=local, driver_memory="4g" if local else None)
    error = failure(RuntimeError(text), run)
    assert error is not None and str(error) == said
    assert (error.written, error.hint.startswith(": raise spark.")) == (False, True)
