"""The session snim-batch starts (its default driver heap) and Spark's failures outside the data
as one line naming the setting, exit 1, no JVM stack trace, nothing written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import said_lines

pytest.importorskip("pyspark")

from pipeline.engines.spark_session import (  # noqa: E402
    default_driver_memory,
    driver_memory_given,
)

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "sample"
GIB = 2**30

# Loaded by every Python process started with it on PYTHONPATH: the `row_groups_task` the driver
# ships to the Python workers kills the worker that runs it (as the OOM killer would).
KILL_WORKERS = '''
import importlib.util, os, signal, sys

class KillTheWorkers:
    def find_spec(self, name, path=None, target=None):
        if name != "pipeline.engines.spark_tasks":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)

            def row_groups_task(*args, **kwargs):
                os.kill(os.getpid(), signal.SIGKILL)

            module.row_groups_task = row_groups_task

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, KillTheWorkers())
'''


@pytest.mark.parametrize(("memory", "expected"), [
    (24 * GIB, "6g"), (2 * GIB, "1g"), (0, "1g"), (7 * GIB, "1g"), (8 * GIB, "2g"),
    (1024 * GIB, "32g")])
def test_default_driver_memory_is_a_quarter_of_the_machine_within_1g_to_32g(memory, expected):
    assert default_driver_memory(memory) == expected


@pytest.mark.parametrize(("conf", "env", "given"), [
    ({}, {}, False),
    ({"spark.driver.memory": "2g"}, {}, True),
    ({}, {"SPARK_DRIVER_MEMORY": "3g"}, True),
    ({}, {"PYSPARK_SUBMIT_ARGS": "--driver-memory 3g pyspark-shell"}, True),
    ({}, {"PYSPARK_SUBMIT_ARGS": "--conf spark.driver.memory=3g pyspark-shell"}, True),
    ({}, {"PYSPARK_SUBMIT_ARGS": "--executor-memory 3g pyspark-shell"}, False),
])
def test_a_driver_heap_the_user_set_anywhere_stands(monkeypatch, tmp_path, conf, env, given):
    for name in ("SPARK_DRIVER_MEMORY", "PYSPARK_SUBMIT_ARGS", "SPARK_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))  # no spark-defaults.conf there
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert driver_memory_given(conf) is given


def test_a_driver_heap_in_spark_defaults_stands(monkeypatch, tmp_path):
    monkeypatch.delenv("SPARK_DRIVER_MEMORY", raising=False)
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    (tmp_path / "spark-defaults.conf").write_text("spark.master local[2]\n"
                                                  "  spark.driver.memory   5g\n")
    assert driver_memory_given({})


def run_cli(tmp_path: Path, conf: dict[str, str], *extra: str,
            pythonpath: Path | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    """`snim-batch run --engine spark` on the sample in a fresh process (its own JVM), with
    `conf` as spark.conf in config.yaml, its temporary files (a failed run's JVM log) under
    `tmp_path`."""
    out = tmp_path / "out"
    lines = [f"rules: {SAMPLE / 'rules.parquet'}", f"positions: {SAMPLE / 'positions.parquet'}",
             f"out: {out}", "engine: spark", "spark:", '  master: "local[1]"',
             "  conf:" + ("" if conf else " {}"),
             *[f'    {k}: "{v}"' for k, v in conf.items()]]
    config = tmp_path / "config.yaml"
    config.write_text("\n".join(lines) + "\n")
    paths = [str(p) for p in (pythonpath, ROOT) if p is not None]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [*paths, *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("PYSPARK_GATEWAY_PORT", None)
    env["TMPDIR"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "run", "--config", str(config), *extra],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    return result, out


def assert_one_line_failure(result: subprocess.CompletedProcess, out: Path) -> str:
    assert result.returncode == 1, result.stderr
    said, *lines = said_lines(result.stderr)  # a JVM's start may take progress lines
    assert said.startswith("snim-batch: config: "), result.stderr  # the config the run read
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and "\tat " not in result.stderr
    assert "internal error" not in result.stderr
    assert not out.exists()
    kept = re.search(r"\(Spark's log: (.+)\)$", lines[0])  # a failure of Spark's keeps it
    assert kept is not None and Path(kept[1]).parent == out.parent, lines[0]
    assert Path(kept[1]).read_text().strip(), kept[1]
    return lines[0]


@pytest.mark.spark
def test_a_driver_heap_too_small_to_start_names_spark_driver_memory(tmp_path):
    result, out = run_cli(tmp_path, {"spark.driver.memory": "200m"})
    line = assert_one_line_failure(result, out)
    assert line.startswith("snim-batch: error: Spark could not start: ")
    assert "spark.driver.memory" in line


@pytest.mark.spark
def test_a_master_url_spark_refuses_is_one_line_with_spark_s_own_reason(tmp_path):
    """A master URL Spark itself refuses (`bogus://x`): the JVM exits before its gateway
    answers, and the line gives the reason its log has (`Exception in thread "main" ...`),
    not only that the gateway exited."""
    result, out = run_cli(tmp_path, {}, "--spark-master", "bogus://x")
    line = assert_one_line_failure(result, out)
    assert line.startswith("snim-batch: error: Spark could not start: SparkException: Master "
                           "must either be yarn or start with spark"), line


def test_a_start_failure_whose_text_needs_the_dead_jvm_is_still_one_line(tmp_path):
    """A Py4J error's text is asked of the JVM; once the JVM is gone, asking raises (here
    ConnectionRefusedError, after an unreachable master). The failure names what it can
    instead of becoming an internal error."""
    from pipeline.engines.spark_session import _start_failure

    class GoneGatewayError(Exception):
        def __str__(self) -> str:
            raise ConnectionRefusedError(111, "Connection refused")

    log = tmp_path / "spark.log"
    log.write_text("INFO starting\n")
    failure = _start_failure(GoneGatewayError(), log)
    assert str(failure) == ("Spark could not start: GoneGatewayError; check spark.master and "
                            f"spark.conf (and that Java 17+ is installed) (Spark's log: {log})")


def test_a_start_failure_logged_without_an_exception_gives_the_logged_error(tmp_path):
    """A spark:// master that never answers: the JVM gives up after about a minute and logs
    why on an ERROR line with no exception (this log's lines, from such a run); the failure
    gives that line, not only the Py4J error's type."""
    from pipeline.engines.spark_session import _start_failure

    log = tmp_path / "spark.log"
    log.write_text(
        "WARNING: Using incubator modules: jdk.incubator.vector\n"
        'Setting Spark log level to "ERROR".\n'
        "26/12/07 14:13:49 ERROR StandaloneSchedulerBackend: Application has been killed. "
        "Reason: All masters are unresponsive! Giving up.\n")

    class Py4JJavaError(Exception):
        def __str__(self) -> str:
            raise ConnectionRefusedError(111, "Connection refused")

    failure = _start_failure(Py4JJavaError(), log)
    assert str(failure) == (
        "Spark could not start: Application has been killed. Reason: All masters are "
        "unresponsive! Giving up.; check spark.master and spark.conf (and that Java 17+ is "
        f"installed) (Spark's log: {log})")


@pytest.mark.spark
def test_a_crashed_python_worker_is_one_line_naming_its_memory_setting(tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(KILL_WORKERS)
    result, out = run_cli(tmp_path, {}, pythonpath=hook)
    line = assert_one_line_failure(result, out)
    assert "a Spark Python worker crashed" in line
    assert "spark.executor.pyspark.memory" in line


_START_FAILS_THEN_AGAIN = """
from pipeline.engines.spark_session import session
from pipeline.errors import SparkFailure

try:
    session("local[1]", {"spark.driver.memory": "100m"})
except SparkFailure as exc:
    print("failed:", "raise spark.driver.memory" in str(exc))
run = session("local[1]")
print("then:", run.spark.range(3).count())
run.stop(failed=False)
"""


@pytest.mark.spark
def test_a_session_that_could_not_start_leaves_the_process_able_to_start_another(tmp_path):
    """A session whose JVM started and then could not make its context (a heap too small):
    that JVM is ended and forgotten, and a session started after it in the same process, with
    the default heap, works (pyspark kept the JVM's gateway and handed it to the next
    session: the same heap, or, once the JVM was ended, a dead one)."""
    done = subprocess.run([sys.executable, "-c", _START_FAILS_THEN_AGAIN], capture_output=True,
                          text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "TMPDIR": str(tmp_path)})  # the failure's log
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["failed: True", "then: 3"], done.stdout
