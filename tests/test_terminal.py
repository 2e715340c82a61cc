"""terminal: text made safe for a terminal, exit statuses, interrupts behind other errors.

The commands' own use of these is checked end to end in test_cli.py; here each piece is
checked on its own against hand-written expectations.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import subprocess
import sys
import time
import types
from contextlib import nullcontext
from pathlib import Path

import pytest

from pipeline.errors import Stopped
from pipeline.terminal import exit_status, heavy_imports, interrupt_within, printable


@pytest.mark.parametrize(("text", "shown"), [
    ("rs00042", "rs00042"),
    ("a\nb\rc\td", r"a\nb\rc\td"),
    ("\x1b[31mred", r"\x1b[31mred"),
    ("\x9b2J", r"\x9b2J"),
    ("\x7f", r"\x7f"),
    ("abc\u202edef", r"abc\u202edef"),
    ("\u2066x\u2069", r"\u2066x\u2069"),
    ("line\u2028sep", r"line\u2028sep"),
    ("café ü 東京", "café ü 東京"),
])
def test_printable_escapes_what_a_terminal_would_act_on(text: str, shown: str) -> None:
    assert printable(text) == shown


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (2, 2), (130, 130)])
def test_exit_status_of_a_number(code: object, status: int) -> None:
    assert exit_status(code) == status


def test_exit_status_of_text_prints_it_escaped_and_is_1(capsys: pytest.CaptureFixture) -> None:
    assert exit_status("bad\x1b[2J") == 1
    assert capsys.readouterr().err == "bad\\x1b[2J\n"


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001 - the test wants the exception object
        return caught


def test_an_interrupt_behind_a_system_error_is_found() -> None:
    stop = Stopped(signal.SIGTERM)
    try:
        try:
            raise stop
        except Stopped:
            raise SystemError("returned a result with an exception set") from None
    except SystemError as outer:
        assert interrupt_within(outer) is stop  # __context__ holds it when __cause__ is None


def test_no_interrupt_within_a_plain_error_or_a_cycle() -> None:
    assert interrupt_within(_raised(ValueError("x"))) is None
    first, second = ValueError("a"), ValueError("b")
    first.__context__, second.__context__ = second, first
    assert interrupt_within(first) is None


class _Node:
    """A container the collector tracks."""


@pytest.mark.parametrize("fails", [False, True], ids=["returns", "raises"])
def test_heavy_imports_pause_the_collector_then_freeze_what_they_made(fails: bool) -> None:
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    made: list[_Node] = []
    try:
        with pytest.raises(ValueError) if fails else nullcontext(), heavy_imports():
            assert not gc.isenabled()
            made.extend(_Node() for _ in range(1000))
            sys.modules["_a_module_the_block_loaded"] = types.ModuleType("loaded")
            if fails:
                raise ValueError("an import failed")
        assert gc.isenabled()
        assert gc.get_freeze_count() >= frozen + 1000
    finally:
        sys.modules.pop("_a_module_the_block_loaded", None)
        gc.unfreeze()
        gc.enable()


def test_heavy_imports_freeze_nothing_when_nothing_is_imported_and_keep_the_collector_off(
        ) -> None:
    """A second command in one process (tests, a notebook) imports nothing new: there is
    nothing worth freezing. A collector the caller turned off stays off."""
    frozen = gc.get_freeze_count()
    gc.disable()
    try:
        with heavy_imports():
            made = [_Node() for _ in range(1000)]
        assert not gc.isenabled()
        assert gc.get_freeze_count() == frozen
        assert len(made) == 1000
    finally:
        gc.enable()


_HELD_IMPORT = """
import pathlib, sys, time
MARKER = pathlib.Path(sys.argv[1])
class Hold:
    def find_spec(self, name, path=None, target=None):
        if name == "typer":
            MARKER.write_text("importing typer")
            time.sleep(60)
        return None
sys.meta_path.insert(0, Hold())
sys.argv = ["snim-batch", "--help"]
from pipeline.executable import entry
entry()
"""


@pytest.mark.parametrize(("sig", "code", "said"), [
    (signal.SIGINT, 130, "interrupted"),
    (signal.SIGTERM, 143, "stopped by SIGTERM"),
    (signal.SIGHUP, 129, "stopped by SIGHUP"),
], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stop_while_the_cli_is_imported_says_so(tmp_path: Path, sig: signal.Signals,
                                                   code: int, said: str) -> None:
    """The executable's entry sets the stop handlers before importing the CLI (typer and
    the rest): a stop during that import, held here on typer's, is one line and 128 + the
    signal, not Python's traceback or the signal's default action. The stop is kept for
    the command to report (`terminal.stops_held_until_taken`), but an import that hangs
    does not keep it for more than HOLD_LIMIT_S."""
    marker = tmp_path / "marker"
    proc = subprocess.Popen([sys.executable, "-c", _HELD_IMPORT, str(marker)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert marker.exists(), proc.communicate(timeout=60)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (code, "", f"snim-batch: {said}; nothing was written\n")


_STOP_IN_A_DEL = """
import gc, os, signal, sys, time
from pipeline.errors import Stopped
from pipeline.terminal import stop_signals_as_interrupts

stop_signals_as_interrupts()


class Dying:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # the handler runs here, where an exception cannot be raised on


try:
    Dying()
    gc.collect()
    for _ in range(100):
        time.sleep(0.01)
    print("not stopped")
except Stopped as stop:
    print("stopped by", stop.signum)
"""


def test_a_stop_raised_in_a_destructor_is_raised_again_not_lost() -> None:
    """A stop that lands in a `__del__` (or a weak reference's callback) cannot leave it:
    Python prints it and goes on. It is raised again in the main line of the program; before,
    the run went on, and every later stop signal was ignored."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", _STOP_IN_A_DEL], capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.strip() == f"stopped by {int(signal.SIGTERM)}", done.stderr
    assert "Exception ignored" not in done.stderr


_LIBRARY_WITH_ITS_OWN_SIGINT = """
import ctypes, os, signal, time
libc = ctypes.CDLL(None)
libc.signal.restype = ctypes.c_void_p
libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.signal(int(signal.SIGINT), 1)  # SIG_IGN, set behind Python's back, as a native library does
os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the library is imported
time.sleep(0.2)
print("the library's import ran to its end")
"""

_IMPORT_IT = """
import sys, time
sys.path.insert(0, sys.argv[1])
from pipeline import terminal
terminal.stop_signals_as_interrupts()
try:
    import library_with_its_own_sigint
    for _ in range(100):
        time.sleep(0.01)
    print("not stopped")
except KeyboardInterrupt:
    print("stopped")
"""


def test_a_ctrl_c_during_a_library_import_that_sets_its_own_action_is_not_lost(
        tmp_path: Path) -> None:
    """A library whose import sets its own SIGINT action (polars' native one swallowed a
    Ctrl-C typed during `import polars`, and the run went on): a Ctrl-C that comes during
    that import stops the program once the library's code has run (the import then fails
    with KeyboardInterrupt, as a Ctrl-C at its last line would). Without the stop signals
    held during the import, "not stopped"."""
    (tmp_path / "library_with_its_own_sigint.py").write_text(_LIBRARY_WITH_ITS_OWN_SIGINT)
    done = subprocess.run([sys.executable, "-c", _IMPORT_IT, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines() == ["the library's import ran to its end", "stopped"], (
        done.stdout, done.stderr)


class _Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Lines:
    """A logger stand-in that keeps each progress line's message and fields."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict]] = []

    def info(self, template: str, message: str, extra: dict) -> None:
        self.lines.append((template % message, extra["fields"]))


def test_plain_progress_is_quiet_for_a_short_command_then_a_line_every_interval() -> None:
    """Outside a terminal: nothing before `every` seconds; then a heartbeat every `every`
    seconds with the rate and the time left as of the last progress event, each phase's
    end and start, and a phase without progress events says how long it has run."""
    from pipeline.events import RunEvent
    from pipeline.terminal import PlainProgress

    clock, log = _Clock(), _Lines()
    plain = PlainProgress(10, clock=clock, log=log)
    plain(RunEvent.phase_start("rules"))
    clock.now = 1
    plain(RunEvent.phase_done("rules", 1.0))
    plain(RunEvent.phase_start("positions"))
    clock.now = 6
    plain(RunEvent.progress("positions", 100, 1000, "positions: 100 of 1,000 rows (10%)"))
    plain.tick()
    assert log.lines == []  # a command of less than 10 s says nothing
    clock.now = 12
    plain.tick()
    clock.now = 13
    plain.tick()  # 1 s after the last line: nothing
    plain(RunEvent.progress("positions", 200, 1000, "positions: 200 of 1,000 rows (20%)"))
    clock.now = 22
    plain.tick()
    plain(RunEvent.phase_done("positions", 21.0))
    plain(RunEvent.phase_start("finish"))
    clock.now = 40
    plain.tick()
    assert [message for message, _ in log.lines] == [
        "positions: 100 of 1,000 rows (10%), 20 rows/s, about 39s left (running for 11s)",
        "positions: 200 of 1,000 rows (20%), 17 rows/s, about 39s left (running for 21s)",
        "positions done in 21.00s",
        "finish: started",
        "finish: running for 18s",
    ]
    assert log.lines[0][1] == {"phase": "positions", "done_units": 100, "total_units": 1000,
                               "unit": "rows", "rate_per_s": 20.0, "eta_s": 39.0,
                               "elapsed_s": 12}
    assert log.lines[2][1]["status"] == "done" and log.lines[2][1]["seconds"] == 21.0


def test_a_step_of_other_units_gets_its_own_rate_and_time_left() -> None:
    """The rows read, then the merge of sorted runs in the same phase (rows merged): the
    merge's rate counts from the last row read, not from the phase's start (it showed a few
    thousand a second where the merge did a million)."""
    from pipeline.events import RunEvent
    from pipeline.terminal import PlainProgress

    clock, log = _Clock(), _Lines()
    plain = PlainProgress(0, clock=clock, log=log)
    plain(RunEvent.phase_start("positions"))
    clock.now = 100
    plain(RunEvent.progress("positions", 1000, 1000, "positions: 1,000 of 1,000 rows"))
    clock.now = 102
    plain(RunEvent.progress("positions", 100, 1000, "merged", unit="rows merged"))
    assert [message for message, _ in log.lines][-2:] == [
        "positions: 1,000 of 1,000 rows (100%), 10 rows/s, about 0s left (running for 1m40s)",
        "positions: 100 of 1,000 rows merged (10%), 50 rows merged/s, about 18s left "
        "(running for 1m42s)"]


def test_plain_progress_every_zero_says_each_phase_and_step_at_once() -> None:
    from pipeline.events import RunEvent
    from pipeline.terminal import PlainProgress

    clock, log = _Clock(), _Lines()
    plain = PlainProgress(0, clock=clock, log=log)
    plain(RunEvent.phase_start("write"))
    clock.now = 0.5
    plain(RunEvent.progress("write", 5, None, "write: 5 rows", unit="rows"))
    plain.tick()  # no heartbeat with 0
    plain(RunEvent.note("write: a note", "write"))
    clock.now = 1
    plain(RunEvent.phase_done("write", 1.0))
    assert [message for message, _ in log.lines] == [
        "write: started", "write: 5 rows, 10 rows/s (running for 1s)", "write: a note",
        "write done in 1.00s"]


def test_terminal_progress_shows_rate_eta_and_a_phase_without_steps_running() -> None:
    """On a terminal: each phase's line as it starts (when it started), units done of the
    total with the rate and ETA, the time a finished phase took, and a phase without
    progress events (finish) still showing its time passing: no silent gap after 100%."""
    import io

    from pipeline.events import RunEvent
    from pipeline.terminal import TerminalProgress

    stream, clock = io.StringIO(), _Clock()
    view = TerminalProgress(stream, clock)
    view(RunEvent.phase_start("positions"))
    clock.now = 1
    view(RunEvent.progress("positions", 50_000, 200_000, "positions: 50,000 of 200,000"))
    clock.now = 2
    view(RunEvent.progress("positions", 100_000, 200_000, "positions: 100,000 of 200,000"))
    view.progress.refresh()
    halfway = stream.getvalue()
    clock.now = 4
    view(RunEvent.phase_done("positions", 4.0))
    view(RunEvent.phase_start("finish"))
    clock.now = 9
    view.progress.refresh()
    view.close()
    frames = [frame for frame in stream.getvalue().split("\x1b[2K") if frame.strip()]
    assert re.search(r"snim-batch: \[   0.00s\] positions \S+ +100.0k/200.0k rows 50% "
                     r"50.0k/s ETA 2s", halfway), halfway
    assert [line.rstrip() for line in frames[-1].splitlines()[:2]] == [
        "snim-batch: [   0.00s] positions ━━━━━━━━━━━━ done in 4.00s",
        "snim-batch: [   4.00s] finish    ━━━━━━━━━━━━ 5s"]


def test_terminal_progress_starts_a_step_of_other_units_afresh() -> None:
    """The rows read, then the merge (rows merged) in the same phase: the line shows the
    merge's units of its own total, its rate counted from its own samples, not the rows'."""
    import io

    from pipeline.events import RunEvent
    from pipeline.terminal import TerminalProgress

    stream, clock = io.StringIO(), _Clock()
    view = TerminalProgress(stream, clock)
    view(RunEvent.phase_start("positions"))
    clock.now = 100
    view(RunEvent.progress("positions", 1_000_000, 1_000_000, "read"))
    clock.now = 101
    view(RunEvent.progress("positions", 100_000, 900_000, "merged", unit="rows merged"))
    for now, done in ((102, 400_000), (103, 700_000)):
        clock.now = now
        view(RunEvent.progress("positions", done, 900_000, "merged", unit="rows merged"))
    view.progress.refresh()
    shown = stream.getvalue().split("\x1b[2K")[-1]
    view.close()
    assert re.search(r"700.0k/900.0k rows merged 78% 300.0k/s ETA 1s", shown), shown


@pytest.mark.parametrize(("given", "after"), [(None, "off"), ("warn", "warn")])
def test_json_logs_silence_rust_libraries_unless_asked(monkeypatch, given, after):
    """Under --log-format json, deltalake's Rust log lines (its env_logger writes plain text
    to stderr, e.g. AWS region warnings) would break the one-object-per-line promise: off,
    unless RUST_LOG says otherwise. Text logging leaves RUST_LOG alone."""
    from pipeline.terminal import configure_logging

    if given is None:
        monkeypatch.delenv("RUST_LOG", raising=False)
    else:
        monkeypatch.setenv("RUST_LOG", given)
    configure_logging(quiet=False, verbose=False, log_format="text")
    assert os.environ.get("RUST_LOG") == given
    configure_logging(quiet=False, verbose=False, log_format="json")
    assert os.environ.get("RUST_LOG") == after
    configure_logging(quiet=False, verbose=False, log_format="text")


# The real entry point, run in a child with an audit hook that notes the environment at the
# moment polars (or numpy) is first imported: the allocator and thread pools read it then.
_ENV_AT_IMPORT = r"""
import os, sys
seen = {}
def hook(event, args):
    if event == "import" and args[0] in ("polars", "numpy") and args[0] not in seen:
        seen[args[0]] = {k: os.environ.get(k) for k in
                         ("_RJEM_MALLOC_CONF", "OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS")}
        print(args[0], repr(seen[args[0]]), file=sys.stderr, flush=True)
sys.addaudithook(hook)
sys.argv = ["snim-batch", "grundy", "--moves", "1,2", "--upto", "3"]
from pipeline.executable import entry
entry()
"""


def test_the_executable_sets_its_environment_before_polars_and_numpy_load() -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("_RJEM_MALLOC_CONF", "OPENBLAS_NUM_THREADS")}
    env["OMP_WAIT_POLICY"] = "ACTIVE"  # the user's own setting stays
    proc = subprocess.run([sys.executable, "-c", _ENV_AT_IMPORT], env=env, text=True,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    expected = repr({"_RJEM_MALLOC_CONF": None, "OMP_WAIT_POLICY": "ACTIVE",
                     "OPENBLAS_NUM_THREADS": "1"})
    assert sorted(proc.stderr.splitlines()) == [f"numpy {expected}", f"polars {expected}"]


@pytest.mark.parametrize(("library", "safe"), [
    ("polars/series/series.py", False), ("numba/core/serialize.py", False),
    ("typer/main.py", True), ("pyarrow/parquet/core.py", True)])
def test_a_stop_waits_out_python_code_that_compiled_code_called_back(library, safe) -> None:
    """polars' Rust calls its Python code (an Enum's categories read through
    `Series._from_pyseries` as a plan is built): an interrupt raised there panicked the Rust
    caller (exit 1 with a backtrace where Ctrl-C during the write should stop the run; seen
    once in a fresh clone's `make test`). The stop waits until that code has returned."""
    from pipeline.terminal import _safe_to_raise

    where = f"{os.sep}venv{os.sep}lib{os.sep}site-packages{os.sep}{library}"
    namespace: dict = {}
    exec(compile("import sys\nframe = sys._getframe()", where, "exec"), namespace)
    assert _safe_to_raise(namespace["frame"]) is safe
