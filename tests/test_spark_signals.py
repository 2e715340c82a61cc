"""Stop signals against the Spark engine, end to end: the real executable on local[2], on
a standalone cluster (Master and Worker started here, on 127.0.0.1) and through a Spark
Connect server (started here too), sent SIGTERM while the JVM starts, while the sorted
verdicts are written and after. Each run stops cleanly, as
test_signals.py checks for the polars engine, and leaves no process and no file behind.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import CLI_EXE
from test_signals import STOPPED_LINE, _leftovers, _manifest, _verdict_rows

Process = tuple[int, int]
"""(pid, start time in clock ticks since boot): a pid the system gives again later is
another process."""


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command's name (state first), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def _descendants(pid: int) -> set[Process]:
    """The processes started by `pid`, and theirs (the Spark JVM, its Python workers)."""
    parents: dict[int, list[Process]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat(int(entry.name))
        if fields is not None:
            parents.setdefault(int(fields[1]), []).append((int(entry.name), int(fields[19])))
    found, todo = set(), [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child[0])
    return found


def _command(process: Process) -> str:
    try:
        return Path(f"/proc/{process[0]}/cmdline").read_bytes().split(b"\0")[0].decode(
            ).rsplit("/", 1)[-1]
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _alive(process: Process) -> bool:
    fields = _stat(process[0])
    return fields is not None and int(fields[19]) == process[1] and fields[0] != "Z"


@dataclass
class _SparkStop:
    """A Spark run stopped by SIGTERM (`_spark_run_stopped`): its exit status, stderr, the
    JVMs it started and whether they had ended when it did, and its output folder."""

    status: int
    err: str
    jvms: set[Process]
    jvms_left: list[Process]
    started: set[Process]
    out: Path
    before: dict


ROWS = 400_000


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    """(the run's input arguments, a complete output of them): 400,000 generated positions
    with text ids in 4 files, and the polars engine's output."""
    where = tmp_path_factory.mktemp("spark-signals")
    gen = where / "gen"
    made = subprocess.run([str(CLI_EXE), "generate", "--out", str(gen), "--positions",
                           str(ROWS), "--rule-sets", "200", "--key-type", "string", "--seed",
                           "3", "--files", "4"], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    inputs = ["--rules", str(gen / "rules.parquet"), "--positions", str(gen / "positions")]
    first = subprocess.run([str(CLI_EXE), "run", *inputs, "--out", str(where / "out"),
                            "--quiet"], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    return inputs, where / "out"


def _spark_run_stopped(tmp_path: Path, generated: tuple[list[str], Path], master: str,
                       written: str, delay: float, sig: int = signal.SIGTERM,
                       sigint_ignored: bool = False) -> _SparkStop | None:
    """The Spark engine's run on `master` (an sc:// URL: through that Spark Connect server)
    over a copy of the complete output (`generated`),
    sent `sig` `delay` s after `written` appears in its staging directory's verdicts (or,
    for "java", once its JVM runs); with `sigint_ignored`, started with SIGINT ignored
    (`cmd &` in a script). None if the run ended before that moment was seen (a busy
    machine can keep this process from looking for 0.3 s)."""
    inputs, complete = generated
    out = tmp_path / "job" / "out"
    shutil.copytree(complete, out)
    args = ["run", *inputs, "--out", str(out), "--overwrite"]
    before = _manifest(out)
    said = tmp_path / "stderr.txt"  # a file, not a pipe: the JVM's ending is not waited for
    with open(said, "w") as stderr:
        where = "--spark-remote" if master.startswith("sc://") else "--spark-master"
        command = [str(CLI_EXE), *args, "--engine", "spark", where, master]
        if sigint_ignored:
            command = ["sh", "-c", 'trap "" INT; exec "$0" "$@"', *command]
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    deadline, started, jvms, looked = time.monotonic() + 240, set(), set(), 0.0
    while proc.poll() is None and time.monotonic() < deadline:
        if written == "java" or time.monotonic() > looked + 0.25:  # /proc is slow to scan
            started |= _descendants(proc.pid)
            jvms |= {p for p in started if _command(p) == "java"}
            looked = time.monotonic()
        if written == "java" and jvms:
            break
        if list(out.parent.glob(f".out.partial-*/verdicts.parquet/{written}")):
            break
        time.sleep(0.005)
    else:
        proc.kill()
        proc.wait()
        assert time.monotonic() < deadline, f"took too long before {written}: {said.read_text()}"
        return None
    time.sleep(delay)
    started |= _descendants(proc.pid)
    jvms |= {p for p in started if _command(p) == "java"}
    proc.send_signal(sig)
    proc.wait(timeout=120)
    jvms_left = [p for p in jvms if _alive(p)]
    return _SparkStop(proc.returncode, said.read_text(), jvms, jvms_left, started, out, before)


def _stopped(tmp_path: Path, generated: tuple[list[str], Path], master: str, written: str,
             delay: float, **how: object) -> _SparkStop:
    """`_spark_run_stopped`, tried again (up to three times in all) while the run ends
    before the moment was seen."""
    for attempt in range(3):
        stop = _spark_run_stopped(tmp_path / f"try{attempt}", generated, master, written,
                                  delay, **how)
        if stop is not None:
            return stop
    pytest.fail(f"three runs ended before {written} was seen")


def _assert_stopped_cleanly(stop: _SparkStop) -> None:
    """Exit 143, the one line and no traceback; no staging directory left, the previous
    output as it was."""
    assert stop.status == 143, stop.err
    assert stop.err.strip().splitlines()[-1] == STOPPED_LINE[signal.SIGTERM], stop.err
    assert "Traceback" not in stop.err, stop.err
    assert _leftovers(stop.out.parent) == []
    assert _manifest(stop.out) == stop.before
    assert _verdict_rows(stop.out) == ROWS


@pytest.mark.spark
@pytest.mark.parametrize(("written", "delay"), [
    ("java", 0.5), ("_temporary", 0.3), ("_SUCCESS", 0.0),
], ids=["while-the-jvm-starts", "during-the-verdicts-write", "after-the-verdicts-write"])
def test_sigterm_during_the_spark_engines_run(tmp_path: Path, generated, written: str,
                                             delay: float) -> None:
    """The Spark engine (local[2]) writes its sorted verdicts during the positions phase,
    tallying them on the way: SIGTERM while its JVM starts, while Spark's tasks write the
    verdicts, or once they are written and the rejects are next. The run stops cleanly
    (py4j's own report of the interrupt was printed above its line, with a traceback), and
    the JVM it started is gone when it exits (one started then ran on; one whose tasks were
    ending wrote into the staging directory after it was removed)."""
    stop = _stopped(tmp_path, generated, "local[2]", written, delay)
    assert stop.jvms, "no JVM was seen"
    assert not stop.jvms_left, "the JVM outlived the run"
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in stop.started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in stop.started if _alive(p)], "its workers outlived the run"
    _assert_stopped_cleanly(stop)


@pytest.mark.spark
def test_an_ignored_sigint_stays_ignored_by_the_spark_engine(tmp_path: Path,
                                                            generated) -> None:
    """Started with SIGINT ignored, the Spark engine's run ignores SIGINT during the
    verdicts' write too, and completes: a new SparkContext sets pyspark's own SIGINT
    action (cancel every job, raise), which stopped that run (exit 130) until the job set
    its own back after the session's start."""
    stop = _stopped(tmp_path, generated, "local[2]", "_temporary", 0.3, sig=signal.SIGINT,
                    sigint_ignored=True)
    assert stop.status == 0, stop.err
    assert _manifest(stop.out)["run_id"] != stop.before["run_id"]
    assert _manifest(stop.out)["counts"]["positions"]["rows_read"] == ROWS
    assert _verdict_rows(stop.out) == ROWS
    assert _leftovers(stop.out.parent) == []


@pytest.mark.spark
@pytest.mark.slow
def test_sigterm_during_the_verdicts_write_on_a_standalone_cluster(tmp_path: Path,
                                                                   generated) -> None:
    """The same stop while the verdicts are written by the executors of a standalone cluster
    (a Master and a Worker of 2 cores, on 127.0.0.1): once the master has the application
    as completed (its executors gone), no staging directory is left. Before the run
    cancelled its jobs and waited for their tasks, an executor's task wrote its file into
    the staging directory a second after the run had removed it (2 stops in 12; this one
    stop will not catch every such regression)."""
    from spark_servers import StandaloneCluster

    (tmp_path / "cluster").mkdir()
    cluster = StandaloneCluster(tmp_path / "cluster", cores=2, memory="2g").start()
    try:
        stop = _stopped(tmp_path, generated, cluster.url, "_temporary", 0.5)
        deadline = time.monotonic() + 60
        while cluster.state().get("activeapps") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not cluster.state().get("activeapps"), "the application did not end"
        time.sleep(1)  # a task ending late wrote its file a second after the run's exit
        _assert_stopped_cleanly(stop)
    finally:
        cluster.stop()


@pytest.mark.spark
@pytest.mark.slow
def test_sigterm_during_the_verdicts_write_through_spark_connect(tmp_path: Path,
                                                                 generated) -> None:
    """The same stop through Spark Connect (a server of local[2] on 127.0.0.1, whose own
    tasks write the verdicts): the client exits 143 with the one line, and 3 s later no
    staging directory is left and the previous output is as it was. The client cancels the
    running operation (pyspark's own, on the interrupt) and releases the session; nothing
    here sees the server's tasks end, so this checks the stop end to end, not that wait."""
    pytest.importorskip("grpc")
    from spark_servers import ConnectServer

    (tmp_path / "connect").mkdir()
    server = ConnectServer(tmp_path / "connect").start()
    try:
        stop = _stopped(tmp_path, generated, server.url, "_temporary", 0.3)
        time.sleep(3)  # a late task of the server's would most likely write within this
        _assert_stopped_cleanly(stop)
    finally:
        server.stop()
