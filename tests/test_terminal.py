"""terminal: text made safe for a terminal, exit statuses, interrupts behind other errors.

The commands' own use of these is checked end to end in test_cli.py; here each piece is
checked on its own against hand-written expectations.
"""

from __future__ import annotations

import gc
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
    signal, not Python's traceback or the signal's default action."""
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
