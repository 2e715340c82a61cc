"""What reaches the terminal and the process, outside typer: text made safe to print, log
and progress lines on stderr, stdin read whole, and the stop signals turned into interrupts.

Only `pipeline.cli` and the executable's entry (`pipeline.executable`) use it; with them, the
only modules that print or exit. Its own imports are few and light (logging is imported when
it is configured): until `executable.entry` has set the stop handlers, a Ctrl-C is Python's,
with a traceback.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from pipeline.errors import Stopped

# Characters a terminal acts on rather than shows: C0 controls (ESC starts the sequences that
# recolour, move the cursor or retitle the window; CR and LF forge lines), DEL, C1 controls
# (CSI 0x9b is a one-byte ESC [), the bidirectional overrides and isolates that reorder what
# is shown, and the Unicode line and paragraph separators.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
                     r"\u2066-\u2069]")
_NAMED = {"\n": r"\n", "\r": r"\r", "\t": r"\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (rf"\x{ord(char):02x}" if ord(char) < 0x100
                                else rf"\u{ord(char):04x}")


@contextmanager
def heavy_imports() -> Iterator[None]:
    """A command's imports (polars, pyarrow, the kernels) with the cyclic garbage collector paused,
    then, if they loaded modules, every object so far frozen out of later collections, which
    would walk them all again (`benchmarks/gc_time.py` measures the time it saves;
    docs/performance.md). The collector is left as it was found."""
    was_enabled, modules = gc.isenabled(), len(sys.modules)
    try:
        gc.disable()
        yield
    finally:
        if len(sys.modules) > modules:
            gc.freeze()
        if was_enabled:
            gc.enable()


def printable(text: str) -> str:
    r"""Text with every character in _UNSAFE written as its escape (`\x1b`, `\n`, `\u202e`):
    messages carry user data (ids, cell text, file names), which must reach the terminal as
    text, never as instructions to it."""
    return _UNSAFE.sub(_escape, text)


def interrupt_within(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or stop signal behind `exc`: one that arrives inside a call into compiled
    code can surface as the SystemError it caused (`returned a result with an exception set`)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def configure_logging(quiet: bool, verbose: bool) -> None:
    """The core logs through `logging.getLogger(__name__)`; here its records reach stderr as
    `snim-batch: LEVEL: message`, escaped like every other line we print: warnings by
    default, errors only with --quiet, everything down to debug with --verbose. Only the
    `pipeline` loggers are shown (libraries keep their own)."""
    import logging

    class PrintableFormatter(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return "snim-batch: " + printable(f"{record.levelname.lower()}: "
                                              f"{super().format(record)}")

    logger = logging.getLogger("pipeline")
    logger.handlers = [logging.StreamHandler(sys.stderr)]
    logger.handlers[0].setFormatter(PrintableFormatter("%(message)s"))
    logger.setLevel(logging.ERROR if quiet else logging.DEBUG if verbose else logging.WARNING)
    logger.propagate = False


def progress_printer(quiet: bool, verbose: bool):
    """On a terminal, one status line rewritten in place; with --verbose (not a terminal),
    one line per phase; otherwise nothing."""
    tty = sys.stderr.isatty()
    if quiet or not (tty or verbose):
        return None
    started = time.perf_counter()

    def progress(message: str, done: bool) -> None:
        line = f"snim-batch: [{time.perf_counter() - started:7.2f}s] {printable(message)}"
        if tty:
            sys.stderr.write("\r\033[K" + line + ("\n" if done else ""))
            sys.stderr.flush()
        elif done:
            print(line, file=sys.stderr, flush=True)

    return progress


def exit_status(code: object) -> int:
    """The process exit status for a SystemExit code (None is 0; text is printed, then 1)."""
    if code is None or isinstance(code, int):
        return code or 0
    print(printable(str(code)), file=sys.stderr)
    return 1


def stdin_bytes() -> bytes | memoryview:
    """All of stdin. A regular file is mapped rather than copied (no second copy of the input
    in fresh memory to touch); a pipe or terminal is read. The cost: a file cut
    shorter while it is being solved ends the process with SIGBUS (exit 135), not a message."""
    import mmap
    import stat

    try:
        fd = sys.stdin.fileno()
        if stat.S_ISREG(os.fstat(fd).st_mode):
            at = os.lseek(fd, 0, os.SEEK_CUR)
            data = memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))[at:]
            os.lseek(fd, 0, os.SEEK_END)  # consumed, as a read would leave it
            return data
    except (OSError, ValueError):  # no descriptor (io.UnsupportedOperation), empty file, ...
        pass
    return sys.stdin.buffer.read()


QUIET_THREAD_POOLS = {"OPENBLAS_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
"""Thread pools the job has no use for kept from spinning, unless the user set these: numpy's
OpenBLAS pool (never called) spins at start, and the kernels' OpenMP workers spin
between parallel regions on the cores polars reads with (docs/performance.md)."""


STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                     if hasattr(signal, name))


STOPPED_BY: list[int] = []  # the stop signals received, for an exit code typer made 130
_STOPPING: list[int] = []  # the stop under way (raised): later ones are ignored

# Where a frame's code comes from, to tell when raising the stop is safe (`_safe_to_raise`).
_OURS = os.path.dirname(os.path.abspath(__file__)) + os.sep
_PYTHONS = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
_CALLED_BACK = tuple(f"{os.sep}{packages}{os.sep}{name}{os.sep}"
                     for packages in ("site-packages", "dist-packages")
                     for name in ("numba", "llvmlite"))
"""Libraries whose compiled code calls their Python code, and does not survive an exception
raised there."""


def _safe_to_raise(frame: FrameType | None) -> bool:
    """Whether the interrupt may be raised in `frame`, the Python code the main thread was
    running when the signal's handler ran (or in the standard library's code it called):
    not in numba's (`_CALLED_BACK`), nor in the import system's, whose locks an exception
    there can leave held. numba's compiled wrappers call `serialize._numba_unpickle` on
    every kernel call: a KeyboardInterrupt raised there came back as a tuple with a hole
    in it, and the caller crashed on it (SIGSEGV, 4 times in 23 Ctrl-Cs during a run's
    first batches); one raised in a weak reference's callback in the import system left
    its lock held, and the next import waited for ever. Elsewhere (the job's code, a
    library's Python code such as typer's writing to a full pipe) it is raised as Python
    would, at once."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(_OURS):
            return True
        if filename.startswith("<frozen ") or any(part in filename for part in _CALLED_BACK):
            return False
        if not filename.startswith(_PYTHONS) or "-packages" + os.sep in filename:
            return True  # a library's Python code, or a script's own (`python -c`, a file)
        frame = frame.f_back
    return True


_PENDING: list[int] = []  # a stop that came in a library's code, raised once it has returned
PENDING_CHECK_S = 0.002  # how often a pending stop looks again for where it can be raised


def _stop(signum: int, frame: FrameType | None) -> None:
    """A stop signal's Python handler: the interrupt (KeyboardInterrupt for Ctrl-C, else
    Stopped), raised once, and only where that is safe (`_safe_to_raise`). Elsewhere
    (in numba's code) the stop is pending: a timer (SIGALRM) brings it back every
    PENDING_CHECK_S, until the main thread is out of the library's code. A stop once
    raised is the only one: its clean-up (the staging directory removed) is not cut short
    by a second Ctrl-C or a scheduler's SIGTERM after it."""
    if _STOPPING:
        return
    while frame is not None and frame.f_code in _HANDLERS:  # a handler run within one
        frame = frame.f_back
    if not _safe_to_raise(frame):
        if not _PENDING:
            _PENDING.append(signum)
            signal.signal(signal.SIGALRM, _stop_pending)
        signal.setitimer(signal.ITIMER_REAL, PENDING_CHECK_S)
        return
    _PENDING.clear()
    _STOPPING.append(signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    STOPPED_BY.append(signum)
    raise Stopped(signum)


def _stop_pending(alarm: int, frame: FrameType | None) -> None:
    """SIGALRM's handler while a stop is pending: `_stop` again, unless the stop signal is
    held meanwhile (`io.commit.interrupts_held`): then it is dropped, as a stop signal
    coming during the hold is."""
    if _PENDING:
        signum = _PENDING[0]
        if signal.getsignal(signum) is _stop:
            _stop(signum, frame)
        else:
            _PENDING.clear()


_HANDLERS = (_stop.__code__, _stop_pending.__code__)


def _stop_not_lost(unraisable: sys.UnraisableHookArgs) -> None:
    """`sys.unraisablehook` while the stop handlers are set: a stop raised where Python
    cannot raise it on (a `__del__`, a weak reference's callback run by the collector) is
    only printed there and lost, and, `_STOPPING` being set, every later stop signal would
    be ignored. Such a stop is made pending again instead, for the main thread to raise
    once that code has returned."""
    if _STOPPING and isinstance(unraisable.exc_value, KeyboardInterrupt):
        import threading  # not at the top: the module's own imports are kept few

        signum = _STOPPING.pop()
        if threading.current_thread() is threading.main_thread():  # pending, as in `_stop`
            _PENDING[:] = [signum]
            signal.signal(signal.SIGALRM, _stop_pending)
            signal.setitimer(signal.ITIMER_REAL, PENDING_CHECK_S)
        else:
            import _thread

            _thread.interrupt_main(signum)
        return
    _DEFAULT_UNRAISABLE(unraisable)


_DEFAULT_UNRAISABLE = sys.unraisablehook


def stop_signals_as_interrupts() -> None:
    """Ctrl-C, SIGTERM (a scheduler's timeout or cancel) and SIGHUP stop a run the same way
    (`_stop`): its staging is removed, the previous output stays, and the exit code is
    128 + the signal. A signal the caller set to be ignored (`nohup`, `&` in a script)
    stays ignored, also after a library's import (`keep_signals_after_imports`)."""
    keep_signals_after_imports()
    sys.unraisablehook = _stop_not_lost
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(signum, _stop)


def keep_signals() -> None:
    """Each stop signal's action in the process set back to what Python holds for it (SIG_IGN,
    or its handler): `import polars` sets polars' own SIGINT action, which stops a query
    reading the input as if it had ended, and which runs even where SIGINT was ignored;
    a run so stopped committed what it had read, exit 0. Outside the main thread (where
    Python cannot set signals), nothing."""
    for signum in STOP_SIGNALS:
        handler = signal.getsignal(signum)
        if handler is not None:  # None: set outside Python, which cannot restore it
            try:
                signal.signal(signum, handler)
            except ValueError:
                return


class _SignalsKept:
    """A finder on `sys.meta_path` that finds no module itself: it hands a top-level module's
    import to the finders after it, then calls `keep_signals` once the module has run, so
    that no library's import leaves its own signal action in place (`import polars` does)."""

    @classmethod
    def find_spec(cls, name: str, path: object = None, target: object = None) -> object:
        if "." in name:
            return None
        finders = sys.meta_path[sys.meta_path.index(cls) + 1:] if cls in sys.meta_path else []
        for finder in finders:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or isinstance(loader, type):  # built-in and frozen modules
            return spec
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None or getattr(exec_module, "keeps_signals", False):
            return spec  # a loader of the old protocol, or one (shared) wrapped already

        def exec_then_keep(module: object) -> None:
            try:
                exec_module(module)
            finally:
                keep_signals()

        exec_then_keep.keeps_signals = True  # type: ignore[attr-defined]
        loader.exec_module = exec_then_keep
        return spec


def keep_signals_after_imports() -> None:
    """From now on, every top-level module's import ends with `keep_signals`."""
    if _SignalsKept not in sys.meta_path:
        sys.meta_path.insert(0, _SignalsKept)


def stopped_message(signum: int | None) -> str:
    """The one line for a run stopped by Ctrl-C (None) or a stop signal."""
    return (f"stopped by {signal.Signals(signum).name}; nothing was written" if signum
            else "interrupted; nothing was written")


def default_stop_signals() -> None:
    """The command is over: a later stop signal ends the process as it would have, unless
    the command was stopped: then its exit is not cut short."""
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is _stop:
            signal.signal(signum, signal.SIG_IGN if _STOPPING else
                          signal.default_int_handler if signum == signal.SIGINT
                          else signal.SIG_DFL)
