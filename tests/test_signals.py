"""Stop signals, end to end: the real executable, at several moments of a real run (start-up,
reading the rules, reading a multi-file input, writing), started with SIGINT ignored (as
`cmd &` in a script starts it) or stopped by Ctrl-C typed in a pseudo-terminal, SIGINT or
SIGTERM. Each run ends either stopped cleanly (exit 128 + the signal, one line, the previous
output untouched, no staging left) or complete (every input row in the output).
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import polars as pl
import pytest
from conftest import CLI_EXE

ROWS = 3_000_000  # six files: their read takes 0.3-0.4 s here, then 0.2 s to write
STOPPED_LINE = {signal.SIGINT: "snim-batch: interrupted; nothing was written",
                signal.SIGTERM: "snim-batch: stopped by SIGTERM; nothing was written"}
PROGRESS = re.compile(r"snim-batch: \[\s*[\d.]+s\] (\w+)")


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(rules file, positions folder of six Parquet files), made by `snim-batch generate`."""
    where = tmp_path_factory.mktemp("signals")
    made = subprocess.run([str(CLI_EXE), "generate", "--out", str(where / "gen"), "--positions",
                           str(ROWS), "--rule-sets", "1000", "--key-type", "string", "--seed",
                           "1", "--files", "6"], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    return where / "gen" / "rules.parquet", where / "gen" / "positions"


def _caught(pid: int, *sigs: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(line.split()[1] for line in status.splitlines()
                    if line.startswith("SigCgt:")), 16)
    return all(mask >> (sig - 1) & 1 for sig in sigs)


def _ignored(pid: int, sig: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(line.split()[1] for line in status.splitlines()
                    if line.startswith("SigIgn:")), 16)
    return bool(mask >> (sig - 1) & 1)


def in_terminal(args: list[str], moment: str, delay: float, stop: str | int,
                ignore_sigint: bool = False, repeat: int = 1,
                watch=None) -> tuple[int, str]:
    """`snim-batch ARGS` in a pseudo-terminal (its progress line shows each phase as it
    starts); `delay` s after `moment` (a phase's name, or "start": once the executable's
    entry has set its stop handlers), `stop` is sent `repeat` times 0.05 s apart: "^C"
    typed, or a signal. With `ignore_sigint`, the process starts with SIGINT ignored.
    `watch(pid)` is called once the stops are sent and the positions phase has shown, while
    the process runs. Returns the exit status and all the terminal showed."""
    command = [str(CLI_EXE), *args]
    if ignore_sigint:
        command = ["sh", "-c", 'trap "" INT; exec "$0" "$@"', *command]
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            _output_kept_on_interrupt(0)
            os.execvp(command[0], command)
        finally:
            os._exit(127)
    shown, at, sent, deadline = b"", None, 0, time.monotonic() + 120
    watched = watch is None
    while time.monotonic() < deadline:
        if at is None:
            text = shown.decode(errors="replace")
            if (moment == "start" and _started(pid)) or moment in PROGRESS.findall(text):
                at = time.monotonic() + delay
        elif sent < repeat and time.monotonic() >= at + 0.05 * sent:
            if stop == "^C":
                os.write(fd, b"\x03")
            else:
                try:
                    os.kill(pid, stop)
                except ProcessLookupError:
                    pass
            sent += 1
        elif sent == repeat and not watched and "positions" in PROGRESS.findall(
                shown.decode(errors="replace")):
            watch(pid)
            watched = True
        ready, _, _ = select.select([fd], [], [], 0.002)
        if ready:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:  # the terminal's other side is closed: the process ended
                break
            if not chunk:
                break
            shown += chunk
    else:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), shown.decode(errors="replace")


def _output_kept_on_interrupt(fd: int) -> None:
    """NOFLSH on the terminal `fd`: a ^C typed no longer discards the output the process wrote
    that the terminal has not yet taken in. Without it, a second ^C 0.05 s after the first
    dropped the first one's stop line, written meanwhile, when the kernel was slow to pass
    it on (a busy machine): the test would judge the terminal, not the run."""
    attributes = termios.tcgetattr(fd)
    attributes[3] |= termios.NOFLSH
    termios.tcsetattr(fd, termios.TCSANOW, attributes)


def _started(pid: int) -> bool:
    """The executable's entry has set its handlers (SIGTERM and SIGHUP are caught)."""
    try:
        return _caught(pid, signal.SIGTERM, signal.SIGHUP)
    except (FileNotFoundError, ProcessLookupError):
        return False


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def _verdict_rows(out: Path) -> int:
    return pl.scan_parquet(out / "verdicts.parquet").select(pl.len()).collect().item()


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name != "out")


@pytest.fixture(scope="module")
def baseline(generated: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete output of the run on the generated input."""
    rules, positions = generated
    out = tmp_path_factory.mktemp("baseline") / "out"
    first = subprocess.run([str(CLI_EXE), "run", "--rules", str(rules), "--positions",
                            str(positions), "--out", str(out), "--quiet"],
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    return out


@pytest.fixture()
def previous(tmp_path: Path, generated: tuple[Path, Path],
             baseline: Path) -> tuple[list[str], Path]:
    """(the run's arguments, its output folder), with a complete output there already."""
    rules, positions = generated
    out = tmp_path / "job" / "out"
    shutil.copytree(baseline, out)
    return ["run", "--rules", str(rules), "--positions", str(positions), "--out", str(out),
            "--overwrite"], out


def assert_clean_stop_or_complete(status: int, shown: str, out: Path, before: dict,
                                  sig: int, where: str) -> bool:
    """Either stopped (128 + sig, its one line, the previous output as it was) or complete
    (exit 0, a new output with every row); never a crash or a traceback, never staging
    left beside the output. True if it was stopped."""
    assert "Traceback" not in shown and "Segmentation" not in shown, (where, shown)
    assert "Fatal Python error" not in shown and "internal error" not in shown, (where, shown)
    assert _leftovers(out.parent) == [], (where, _leftovers(out.parent))
    manifest = _manifest(out)
    if status == 128 + sig:
        # a Ctrl-C typed after the line is echoed by the terminal, not printed by the run
        assert shown.rstrip().removesuffix("^C").rstrip().endswith(STOPPED_LINE[sig]), \
            (where, shown)
        assert manifest["run_id"] == before["run_id"], where
        assert _verdict_rows(out) == ROWS, where
        return True
    assert status == 0, (where, status, shown)
    assert manifest["run_id"] != before["run_id"], where
    assert manifest["counts"]["positions"]["rows_read"] == ROWS, where
    assert _verdict_rows(out) == ROWS, where
    return False


@pytest.mark.parametrize(("moment", "delay"), [
    ("start", 0.0), ("rules", 0.0), ("positions", 0.3), ("write", 0.02),
], ids=["start-up", "rules", "positions", "write"])
def test_an_ignored_sigint_stays_ignored(previous: tuple[list[str], Path], moment: str,
                                         delay: float) -> None:
    """Started with SIGINT ignored (`snim-batch run ... &` in a script), the run ignores
    SIGINT, sent three times at each moment: it completes with every row, exit 0. `import
    polars` sets polars' own SIGINT action, which ended the read early (the run committed
    4,000,000 rows of 5,000,000 with exit 0) or stopped the run: SIGINT is ignored again
    in the process, checked while the positions are read (not during an import, where a
    library's own action can stand until the import returns)."""
    args, out = previous
    before = _manifest(out)
    seen: list[tuple[bool, bool]] = []

    def look(pid: int) -> None:
        try:
            seen.append((_ignored(pid, signal.SIGINT), _caught(pid, signal.SIGINT)))
        except (FileNotFoundError, ProcessLookupError):  # it has ended
            pass

    status, shown = in_terminal(args, moment, delay, signal.SIGINT, ignore_sigint=True,
                                repeat=3, watch=look)
    assert status == 0, shown
    assert not assert_clean_stop_or_complete(status, shown, out, before, signal.SIGINT, moment)
    assert seen in ([(True, False)], [] if moment == "write" else None), seen


@pytest.mark.parametrize(("stop", "moment", "delay"), [
    ("^C", "start", 0.0),
    ("^C", "rules", 0.0),
    ("^C", "positions", 0.0),
    ("^C", "positions", 0.15),
    ("^C", "positions", 0.4),
    ("^C", "write", 0.0),
    (signal.SIGINT, "positions", 0.2),
    (signal.SIGTERM, "positions", 0.25),
    (signal.SIGTERM, "tables", 0.0),
], ids=["ctrl-c-start-up", "ctrl-c-rules", "ctrl-c-positions-0", "ctrl-c-positions-0.15",
        "ctrl-c-positions-0.4", "ctrl-c-write", "sigint-positions", "sigterm-positions",
        "sigterm-tables"])
def test_a_stop_is_clean_at_any_moment(previous: tuple[list[str], Path], stop: str | int,
                                       moment: str, delay: float) -> None:
    """Ctrl-C typed in the terminal, SIGINT or SIGTERM, at start-up, while the rules or the
    positions are read, or while the output is written: exit 130 (143), one line, the
    previous output untouched and no staging directory left; or, stopped too late, the
    complete new output. Ctrl-C during the first batches crashed the process (SIGSEGV, a
    `.out.partial-*` directory left); a stop during start-up printed a traceback."""
    args, out = previous
    before = _manifest(out)
    sig = signal.SIGINT if stop == "^C" else stop
    status, shown = in_terminal(args, moment, delay, stop)
    stopped = assert_clean_stop_or_complete(status, shown, out, before, sig,
                                            f"{stop} at {moment}+{delay}")
    assert stopped or moment == "write", (status, shown)


@pytest.mark.parametrize(("line", "delay"), [
    ("commit: started", 0.0), ("commit done", 0.0), ("commit done", 0.001),
    ("commit done", 0.003)])
def test_a_stop_once_the_output_is_committed_leaves_a_committed_run(
        previous: tuple[list[str], Path], tmp_path: Path, line: str, delay: float) -> None:
    """SIGTERM just after the commit is done: the run completes and says so (exit 0, the
    new output whole, the result file "succeeded"), never "nothing was written" about an
    output in place. Before, a stop right after the commit exited 143 with that line, the
    new output committed (6 times in 11). As the commit starts (before the swap): a clean
    stop, or, once the swap holds the signals, a complete run."""
    args, out = previous
    before = _manifest(out)
    result = tmp_path / "result.json"
    proc = subprocess.Popen([str(CLI_EXE), *args, "--progress-every", "0", "--result-file",
                             str(result)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    status, text = _sigterm_once_said(proc, lambda said: line in said, delay)
    stopped = assert_clean_stop_or_complete(status, text, out, before, signal.SIGTERM, line)
    assert json.loads(result.read_text())["status"] == ("stopped" if stopped else "succeeded")
    if line == "commit done":
        assert not stopped and "nothing was written" not in text, text


@pytest.mark.slow
def test_repeated_ctrl_c_during_the_first_batches_never_crashes(
        previous: tuple[list[str], Path]) -> None:
    """Ctrl-C at twelve moments of the positions' read (0.3-0.4 s here), and twice in a row at
    some: each run stops cleanly (a second Ctrl-C does not cut the first one's clean-up
    short). A run may complete only if the terminal echoed every ^C after its last line
    (on a busy machine a late moment came after the run had ended); at least half stop."""
    args, out = previous
    before = _manifest(out)
    stopped = 0
    for i in range(12):
        delay = 0.025 * i
        status, shown = in_terminal(args, "positions", delay, "^C", repeat=1 + i % 2)
        where = f"Ctrl-C at positions+{delay:.3f}s"
        if assert_clean_stop_or_complete(status, shown, out, before, signal.SIGINT, where):
            stopped += 1
        else:
            assert "wrote " in shown and shown.index("wrote ") < shown.index("^C"), (
                where, shown)
            before = _manifest(out)  # the new output is the one the next run must keep
    assert stopped >= 6, stopped


_KERNEL_LOOP = """
import sys
import termios
from pipeline import terminal
terminal.stop_signals_as_interrupts()
import numpy as np
from pipeline import kernels

data = np.frombuffer(b'a,b\\n1,"x\\ny"\\n2,3\\n' * 50, np.uint8)
for i in range(int(sys.argv[1])):
    try:
        terminal._STOPPING.clear()  # each stop is a new one here
        print("ready", i, flush=True)
        while True:
            done, state, records = kernels.csv_records_part(data, data.shape[0], 0)
            assert (done, state, records) == (data.shape[0], 0, 150)
    except KeyboardInterrupt:
        pass
print("done", flush=True)
"""


def test_an_interrupt_never_lands_inside_a_kernel_call() -> None:
    """The CLI's handlers (`terminal.stop_signals_as_interrupts`) in a process that calls a
    compiled kernel returning a tuple in a loop, interrupted 100 times: each interrupt is
    a KeyboardInterrupt between calls, never a wrong result, a SystemError or a crash (as
    numba's kernels, whose wrapper called back into Python on every call, gave)."""
    stops = 100
    proc = subprocess.Popen([sys.executable, "-c", _KERNEL_LOOP, str(stops)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for i in range(stops):
            line = proc.stdout.readline()
            assert line == f"ready {i}\n", (line, proc.stderr.read() if not line else "")
            time.sleep(0.001 * (i % 5))
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (proc.returncode, out, err) == (0, "done\n", "")


SLOW_COMMIT = '''
import sys, time
import pipeline.io.outputs.commit as commit

real = commit._commit

def slow_commit(*args, **kwargs):
    sys.stderr.write("TEST: inside the commit's hold\\n")
    sys.stderr.flush()
    time.sleep(1.0)
    return real(*args, **kwargs)

commit._commit = slow_commit
'''


def test_a_stop_during_the_commit_s_hold_is_noted_once_it_is_done(tmp_path: Path) -> None:
    """SIGTERM while the commit holds the stop signals (the swap made slow here, by a
    sitecustomize in the real CLI process): the commit completes, the run exits 0 with its
    result file "succeeded", and says the stop came after the commit. Before, the held
    signal was dropped: exit 0 and not a word of it."""
    (tmp_path / "sitecustomize.py").write_text(SLOW_COMMIT)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)])}
    sample = root / "data" / "sample"
    out, result = tmp_path / "out", tmp_path / "result.json"
    proc = subprocess.Popen([str(CLI_EXE), "run", "--rules", str(sample / "rules.csv"),
                             "--positions", str(sample / "positions.csv"), "--out", str(out),
                             "--result-file", str(result)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    status, text = _sigterm_once_said(
        proc, lambda said: said.startswith("TEST: inside the commit's hold"))
    assert "TEST: inside the commit's hold" in text, text
    assert status == 0, text
    assert "SIGTERM came once the output was committed; the run finished" in text, text
    assert "nothing was written" not in text
    assert json.loads(result.read_text())["status"] == "succeeded"
    assert (out / "manifest.json").is_file()


def _sigterm_once_said(proc: subprocess.Popen, said_it, delay: float = 0.0) -> tuple[int, str]:
    """SIGTERM to `proc` `delay` s after the first stderr line `said_it` accepts; then its
    exit status and all it said on stderr (stdout drained)."""
    assert proc.stderr is not None and proc.stdout is not None
    shown = []
    for said in proc.stderr:
        shown.append(said)
        if said_it(said):
            time.sleep(delay)
            proc.send_signal(signal.SIGTERM)
            break
    shown.append(proc.stderr.read())
    proc.stdout.read()
    return proc.wait(timeout=120), "".join(shown)


STOP_AS_THE_READ_AHEAD_IS_JOINED = '''
import os, signal, threading, time
import pipeline.batches
import pipeline.engines.polars_engine as engine

pipeline.batches.BATCH_ROWS = 64
engine.LONG_PARTITION_ROWS = 100  # a "large" long-form input: the in-order read is tried
real_batches = engine.position_batches


def slow_batches(*args, **kwargs):
    # the read-ahead thread sleeps in its second batch; the first has rows out of order, so
    # the consumer is done with it and waits for the thread when SIGTERM comes
    for i, item in enumerate(real_batches(*args, **kwargs)):
        if i == 1:
            threading.Timer(0.25, os.kill, (os.getpid(), signal.SIGTERM)).start()
            time.sleep(0.5)
        yield item


engine.position_batches = slow_batches
'''


def test_a_stop_while_the_read_ahead_is_joined_is_a_stop(tmp_path: Path) -> None:
    """SIGTERM as the long-form in-order read gives up (rows out of order) and waits for its
    read-ahead thread, which is still inside the batches (made slow here, by a
    sitecustomize in the real CLI process): exit 143 with the stop's line. Before, the
    stop cut the wait short (and Python 3.11's `Thread.join`, so cut, marks the thread
    ended), the batches were closed while the thread was inside them ("generator already
    executing"), and the run ended "internal error", exit 1."""
    made = subprocess.run([str(CLI_EXE), "generate", "--out", str(tmp_path / "gen"),
                           "--positions", "300", "--form", "long", "--shuffle", "--format",
                           "csv", "--seed", "3"], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(STOP_AS_THE_READ_AHEAD_IS_JOINED)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(root)])}
    proc = subprocess.run([str(CLI_EXE), "run", "--rules", str(tmp_path / "gen" / "rules.csv"),
                           "--positions", str(tmp_path / "gen" / "positions"), "--out",
                           str(tmp_path / "out"), "--verbose"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert "long form: rows are not in key order" in proc.stderr, proc.stderr
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert proc.stderr.splitlines()[-1] == STOPPED_LINE[signal.SIGTERM], proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gen", "site"]


STOP_RIGHT_AFTER_THE_COMMIT = '''
import os, signal, time
from pipeline.io.outputs import kinds

real = kinds._Staged.commit


def commit(self, *args, **kwargs):  # a stop lands as the committed command returns
    done = real(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.2)
    return done


kinds._Staged.commit = commit
'''


STOP_AS_THE_RESULT_IS_WRITTEN = '''
import os, signal

_replace = os.replace


def replace(src, dst, *args, **kwargs):
    if str(dst).endswith("result.json"):
        os.kill(os.getpid(), signal.SIGTERM)
    return _replace(src, dst, *args, **kwargs)


os.replace = replace
'''


def test_a_stop_as_the_run_writes_its_result_file_is_noted(tmp_path: Path) -> None:
    """SIGTERM as a committed run renames its --result-file into place (sent by a
    sitecustomize in the real CLI process): exit 0, the result written, and the stop noted
    on stderr as any stop after the commit is. Before, it was dropped without a word: the
    note was said before the result was written."""
    root = Path(__file__).resolve().parents[1]
    sample = root / "data" / "sample"
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(STOP_AS_THE_RESULT_IS_WRITTEN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(root)])}
    result = tmp_path / "result.json"
    proc = subprocess.run([str(CLI_EXE), "run", "--rules", str(sample / "rules.csv"),
                           "--positions", str(sample / "positions.csv"), "--out",
                           str(tmp_path / "out"), "--result-file", str(result), "--quiet"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert (proc.returncode, proc.stderr) == (
        0, "snim-batch: SIGTERM came once the output was committed; the run finished\n")
    document = json.loads(result.read_text())
    assert (document["status"], document["exit_code"]) == ("succeeded", 0)
    assert (tmp_path / "out" / "manifest.json").is_file()


@pytest.mark.parametrize("command", ["convert", "report"])
def test_a_stop_once_convert_or_report_committed_is_noted_not_nothing_written(
        tmp_path: Path, command: str) -> None:
    """SIGTERM right after `convert --overwrite` renamed its tables in, or `report` its page
    (sent by a sitecustomize in the real CLI process): exit 0, what was written said, and
    the stop noted. Before, "stopped by SIGTERM; nothing was written", exit 143, with the
    new tables or page in place (a QA sweep: 26 of 54 timings for convert)."""
    root = Path(__file__).resolve().parents[1]
    sample = root / "data" / "sample"
    if command == "convert":
        first = subprocess.run([str(CLI_EXE), "convert", str(sample / "classic.txt"), "--out",
                                str(tmp_path / "tables")], capture_output=True, text=True)
        assert first.returncode == 0, first.stderr
        (tmp_path / "one.txt").write_text("1 2\n1\n1 5\n0\n")  # S = {2}, heap 5
        args = ["convert", str(tmp_path / "one.txt"), "--out", str(tmp_path / "tables"),
                "--overwrite"]
        written = f"wrote {tmp_path / 'tables' / 'rules.parquet'}, " \
                  f"{tmp_path / 'tables' / 'positions.parquet'}"
    else:
        made = subprocess.run([str(CLI_EXE), "run", "--rules", str(sample / "rules.csv"),
                               "--positions", str(sample / "positions.csv"), "--out",
                               str(tmp_path / "out")], capture_output=True, text=True)
        assert made.returncode == 0, made.stderr
        args = ["report", str(tmp_path / "out")]
        written = f"wrote {tmp_path / 'out' / 'report.html'}"
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(STOP_RIGHT_AFTER_THE_COMMIT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(root)])}
    proc = subprocess.run([str(CLI_EXE), *args], capture_output=True, text=True, env=env,
                          timeout=120)
    assert (proc.returncode, proc.stdout) == (0, written + "\n"), proc.stderr
    assert proc.stderr.splitlines()[-1] == \
        "snim-batch: SIGTERM came once the output was committed; the run finished", proc.stderr
    assert "nothing was written" not in proc.stderr
    if command == "convert":  # the new tables: one rule set {2}, one position, heap 5
        assert pl.read_parquet(tmp_path / "tables" / "positions.parquet")["heaps"].to_list() \
            == [[5]]
    else:
        assert (tmp_path / "out" / "report.html").is_file()
    assert not [p.name for p in tmp_path.rglob(".*") if p.name != ".pytest_cache"]


STOP_WHILE_GENERATE_MOVES_IN = '''
import os, pathlib, signal, time

real = pathlib.Path.rename


def rename(self, target):  # a stop lands after the first file is moved into --out
    done = real(self, target)
    if self.parent.name.startswith(".generating-"):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
    return done


pathlib.Path.rename = rename
'''


def test_a_stop_while_generate_moves_its_files_in_is_held_then_noted(tmp_path: Path) -> None:
    """SIGTERM after `generate` moved the first of its files into an existing empty --out
    (sent by a sitecustomize in the real CLI process): every file is moved in, exit 0, the
    stop noted. Before, the rules were in place without the positions (or the reverse),
    "nothing was written", exit 143, and the next generate there refused the directory."""
    root = Path(__file__).resolve().parents[1]
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(STOP_WHILE_GENERATE_MOVES_IN)
    (tmp_path / "gen").mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(root)])}
    proc = subprocess.run([str(CLI_EXE), "generate", "--out", str(tmp_path / "gen"),
                           "--positions", "50", "--format", "csv", "--files", "1"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert (proc.returncode, proc.stdout) == (
        0, f"wrote 2 files under {tmp_path / 'gen'}\n"), proc.stderr
    assert proc.stderr.splitlines()[-1] == \
        "snim-batch: SIGTERM came once the output was committed; the run finished", proc.stderr
    assert sorted(str(p.relative_to(tmp_path / "gen")) for p in (tmp_path / "gen").rglob("*")
                  ) == ["positions", "positions/part-00000.csv", "rules.csv"]


_PENDING_THEN_ANOTHER = """
import signal, sys
from pipeline import terminal

terminal.stop_signals_as_interrupts()
namespace = {}
exec(compile("import sys\\nframe = sys._getframe()", "<frozen importlib._bootstrap>", "exec"),
     namespace)
terminal._stop(signal.SIGTERM, namespace["frame"])  # in the import system: pending
assert terminal._PENDING == [signal.SIGTERM]
try:
    terminal._stop(signal.SIGINT, None)  # Ctrl-C a moment later, where it can be raised
except KeyboardInterrupt as exc:
    signal.setitimer(signal.ITIMER_REAL, 0)
    print(type(exc).__name__, getattr(exc, "signum", None), [int(s) for s in terminal.STOPPED_BY],
          flush=True)
"""


def test_a_stop_pending_in_a_library_s_code_is_the_one_raised_by_a_later_signal() -> None:
    """SIGTERM pending (it came while the main thread was in the import system's code), then
    SIGINT where an interrupt can be raised: the SIGTERM is raised, so that the exit code,
    the message and the result say the stop that came first (the run said "interrupted",
    its result 130, while the process exited 143)."""
    found = subprocess.run([sys.executable, "-c", _PENDING_THEN_ANOTHER], capture_output=True,
                           text=True, timeout=60, cwd=Path(__file__).resolve().parents[1])
    assert (found.returncode, found.stdout, found.stderr) == (
        0, f"Stopped {int(signal.SIGTERM)} [{int(signal.SIGTERM)}]\n", "")


STOP_AS_THE_CLI_IS_IMPORTED = '''
import os, signal, sys


class StopWhenImported:
    """SIGTERM to this process as module MODULE starts to be imported."""

    def find_spec(self, name, path=None, target=None):
        if name == os.environ["TEST_STOP_AT_IMPORT"]:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGTERM)
            sys.stderr.write("TEST: SIGTERM sent\\n")
        return None


sys.meta_path.insert(0, StopWhenImported())
'''


@pytest.mark.parametrize("module", ["pipeline.cli", "typer"])
def test_a_stop_before_the_command_began_is_reported_by_it(tmp_path: Path, module: str) -> None:
    """SIGTERM while the executable imports the CLI (or typer, its first import): the run
    reports the stop as one during its work: exit 143, its line, and its --result-file and
    --json result "stopped". Before, the stop ended the process before the run began, so
    that a scheduler cancelling a job at once got no result."""
    (tmp_path / "sitecustomize.py").write_text(STOP_AS_THE_CLI_IS_IMPORTED)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)]),
           "TEST_STOP_AT_IMPORT": module}
    sample = root / "data" / "sample"
    out, result = tmp_path / "out", tmp_path / "result.json"
    done = subprocess.run([str(CLI_EXE), "run", "--rules", str(sample / "rules.csv"),
                           "--positions", str(sample / "positions.csv"), "--out", str(out),
                           "--result-file", str(result), "--json"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 143, done.stderr
    assert done.stderr == ("TEST: SIGTERM sent\n"
                           "snim-batch: stopped by SIGTERM; nothing was written\n")
    document = json.loads(result.read_text())
    assert (document["status"], document["exit_code"]) == ("stopped", 143)
    assert json.loads(done.stdout) == document
    assert not out.exists()


def test_a_stop_before_another_command_began_stops_it(tmp_path: Path) -> None:
    """The same for `grundy`: the stop kept while the command line is read is raised as the
    command begins: exit 143, its line, no answer."""
    (tmp_path / "sitecustomize.py").write_text(STOP_AS_THE_CLI_IS_IMPORTED)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)]),
           "TEST_STOP_AT_IMPORT": "pipeline.cli"}
    done = subprocess.run([str(CLI_EXE), "grundy", "--moves", "1 2", "--upto", "5"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (
        143, "", "TEST: SIGTERM sent\nsnim-batch: stopped by SIGTERM; nothing was written\n")


_PENDING_THEN_HELD_TOO_LONG = """
import signal, time
from pipeline import terminal
from pipeline.errors import Stopped

terminal.stop_signals_as_interrupts()
frozen = {}
exec(compile("import sys, time\\nframe = sys._getframe()\\n"
             "def spin(seconds):\\n"
             "    end = time.monotonic() + seconds\\n"
             "    while time.monotonic() < end:\\n"
             "        pass\\n", "<frozen importlib._bootstrap>", "exec"), frozen)
terminal._stop(signal.SIGTERM, frozen["frame"])  # pending: it came in the import system
terminal.stops_held_until_taken()  # the executable starts to read its command line
try:
    frozen["spin"](terminal.HOLD_LIMIT_S + 1)  # the hold runs out here, where none is raised
    time.sleep(1)  # here it can be
    print("not stopped", flush=True)
except Stopped as exc:
    print("stopped", int(exc.signum), flush=True)
"""


def test_a_pending_stop_kept_too_long_is_raised_once_it_can_be() -> None:
    """A stop pending in the import system when the hold begins, the hold running out while
    the main thread is still where no stop is raised: the stop is raised once it can be (it
    was lost: the timer that brings a pending stop back had been given to the hold)."""
    found = subprocess.run([sys.executable, "-c", _PENDING_THEN_HELD_TOO_LONG],
                           capture_output=True, text=True, timeout=60,
                           cwd=Path(__file__).resolve().parents[1])
    assert (found.returncode, found.stdout, found.stderr) == (
        0, f"stopped {int(signal.SIGTERM)}\n", "")


@pytest.mark.parametrize(("args", "code", "said"), [
    (["run", "--bogus"], 2, "No such option: --bogus"),
    (["--version"], 0, ""),
    (["grundy", "--help"], 0, ""),
    (["explain", "--bogus"], 2, "No such option: --bogus"),
    (["grundy", "--moves", "2 5", "--upto", "-1"], 2, "--upto"),
], ids=["refused-flag", "version", "grundy-help", "explain-refused-flag", "grundy-bad-value"])
def test_a_stop_kept_while_only_the_command_line_was_read_leaves_its_exit_code(
        tmp_path: Path, args: list[str], code: int, said: str) -> None:
    """SIGTERM during the CLI's import, then a command line that ends before any command
    begins (a refused flag, --version): the line's own exit code and words, not a stop
    said with no result to show for it."""
    (tmp_path / "sitecustomize.py").write_text(STOP_AS_THE_CLI_IS_IMPORTED)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)]),
           "TEST_STOP_AT_IMPORT": "pipeline.cli"}
    done = subprocess.run([str(CLI_EXE), *args], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == code, done.stderr
    assert done.stderr.startswith("TEST: SIGTERM sent\n")
    assert said in done.stderr and "stopped" not in done.stderr


@pytest.mark.parametrize("module", ["pipeline.io.outputs.commit", "pipeline.results"])
def test_a_stop_while_a_refused_run_line_removes_the_earlier_result_is_dropped(
        tmp_path: Path, module: str) -> None:
    """SIGTERM as a refused `run` line removes the result an earlier run left at its
    --result-file (its imports take a tenth of a second): the line's exit 2 and words, the
    earlier result gone. Before, the stop signals had their default actions back by then:
    the process died by the signal (SIGINT: a traceback) and the earlier result stayed for
    a scheduler to take as this night's."""
    (tmp_path / "sitecustomize.py").write_text(STOP_AS_THE_CLI_IS_IMPORTED)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)]),
           "TEST_STOP_AT_IMPORT": module}
    result = tmp_path / "result.json"
    result.write_text('{"schema_version": 1, "status": "succeeded", "exit_code": 0}')
    done = subprocess.run([str(CLI_EXE), "run", "--rules", "r.csv", "--positions", "p.csv",
                           "--out", str(tmp_path / "out"), "--result-file", str(result),
                           "--bogus"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "TEST: SIGTERM sent\n" in done.stderr
    assert "No such option: --bogus" in done.stderr and "Traceback" not in done.stderr
    assert not result.exists()


_TWO_STOPS_IN_COMPILED_CODE = """
import signal, sys
from pipeline import terminal
from pipeline.errors import Stopped

terminal.stop_signals_as_interrupts()
print("ready", flush=True)
try:
    sum(range(10**8))  # compiled code: no handler runs until it returns
    print("not stopped", flush=True)
except Stopped as exc:
    print("stopped", int(exc.signum), flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def test_of_two_stops_that_come_while_compiled_code_runs_the_first_is_raised() -> None:
    """SIGTERM, then SIGINT 20 ms later, both while the main thread is in compiled code:
    Python runs their handlers after it, SIGINT's first (signal-number order); the stop
    raised is SIGTERM, the one that came first (it was said as Ctrl-C, 130)."""
    proc = subprocess.Popen([sys.executable, "-c", _TWO_STOPS_IN_COMPILED_CODE],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[1])
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        time.sleep(0.2)  # into the loop
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (proc.returncode, out, err) == (0, f"stopped {int(signal.SIGTERM)}\n", "")


KILLED_AS_THE_RUN_BEGINS = '''
import os, signal
import pipeline.api as api

def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

api.run_settings = killed
'''


def test_a_run_killed_before_its_end_leaves_no_result_but_its_own(tmp_path: Path) -> None:
    """A night's run killed with no chance to write its result (`kill -9`, the OOM
    killer; here as its work begins, by a sitecustomize in the real CLI process): the result
    file of the night before was left, "succeeded", read by a scheduler as this run's (QA).
    A run now removes it as it begins, and the temporaries of killed runs beside it; the
    scheduler finds no result file and reads the exit code (137), as operations.md says."""
    root = Path(__file__).resolve().parents[1]
    sample = root / "data" / "sample"
    result = tmp_path / "result.json"
    args = [str(CLI_EXE), "run", "--rules", str(sample / "rules.csv"), "--positions",
            str(sample / "positions.csv"), "--out", str(tmp_path / "night1"), "--result-file",
            str(result), "--quiet"]
    assert subprocess.run(args, capture_output=True, timeout=120).returncode == 0
    assert json.loads(result.read_text())["status"] == "succeeded"
    dead = subprocess.Popen(["true"])  # a process no longer running: its temporary is stale
    dead.wait()
    stale = tmp_path / f".result.json.{dead.pid}.tmp"
    stale.write_text("{")
    os.utime(stale, (time.time() - 120, time.time() - 120))  # left two minutes ago
    fresh = tmp_path / f".result.json.{dead.pid + 1}.tmp"  # maybe another namespace's: kept
    fresh.write_text("{")
    live = tmp_path / f".result.json.{os.getpid()}.tmp"  # a live process's: kept
    live.write_text("{")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(KILLED_AS_THE_RUN_BEGINS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(root)])}
    args[args.index(str(tmp_path / "night1"))] = str(tmp_path / "night2")
    killed = subprocess.run(args, capture_output=True, env=env, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([
        f".result.json.{os.getpid()}.tmp", fresh.name, "night1", "site"])


@pytest.mark.parametrize(("moment", "delay"), [("rules", 0.0), ("positions", 0.2)])
def test_a_stop_reading_parquet_of_any_name_keeps_a_shared_output_as_it_was(
        tmp_path: Path, generated: tuple[Path, Path], baseline: Path, moment: str,
        delay: float) -> None:
    """The listing reads Parquet files whatever their names (`000000_0`, as Hive writes
    them), and a replaced output takes its directory's group and mode: SIGTERM while the
    files are listed and sniffed, or read, leaves the previous output as it was, its group
    and setgid mode too, and nothing beside it; the run after it reads every row of the
    unsuffixed files into an output that keeps them."""
    rules, positions = generated
    table = tmp_path / "hive_table"
    table.mkdir()
    for i, part in enumerate(sorted(positions.glob("*.parquet"))):
        shutil.copyfile(part, table / f"00000{i}_0")
    out = tmp_path / "job" / "out"
    shutil.copytree(baseline, out)
    group = 12345 if os.geteuid() == 0 else next(
        (g for g in os.getgroups() if g != os.getegid()), os.getegid())
    os.chown(out, -1, group)
    os.chmod(out, 0o2770)
    before = _manifest(out)
    args = ["run", "--rules", str(rules), "--positions", str(table), "--out", str(out),
            "--overwrite"]
    status, shown = in_terminal(args, moment, delay, signal.SIGTERM)
    assert status == 143, shown
    assert shown.rstrip().endswith(STOPPED_LINE[signal.SIGTERM]), shown
    assert _manifest(out)["run_id"] == before["run_id"]
    assert _verdict_rows(out) == ROWS
    assert (os.stat(out).st_mode & 0o7777, os.stat(out).st_gid) == (0o2770, group)
    assert _leftovers(out.parent) == []
    done = subprocess.run([str(CLI_EXE), *args, "--quiet"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    manifest = _manifest(out)
    assert [Path(f["path"]).name for f in manifest["inputs"]["positions"]] == [
        f"00000{i}_0" for i in range(6)]
    assert manifest["counts"]["positions"]["verdicts"] == ROWS
    assert (os.stat(out).st_mode & 0o7777, os.stat(out).st_gid) == (0o2770, group)
