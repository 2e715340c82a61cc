"""What reaches the terminal and the process, outside typer: the executable's entry (the stop
handlers, then the CLI), text made safe to print, log and progress lines on stderr, stdin
read whole, and the stop signals turned into interrupts.

Only `pipeline.cli` uses it; with it, the two are the only modules that print or exit.
"""

from __future__ import annotations

import gc
import logging
import re
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

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
    would walk them all again. Time in collections (benchmarks/gc_time.py): a 10M-position
    `run` 0.16-0.24 s -> 0.04 s, `solve` of 50 MB 0.13-0.15 s -> 0.03 s. The collector is
    left as it was found."""
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


class _PrintableFormatter(logging.Formatter):
    """Log records as `snim-batch: LEVEL: message`, escaped like every other line we print."""

    def format(self, record: logging.LogRecord) -> str:
        return "snim-batch: " + printable(f"{record.levelname.lower()}: {super().format(record)}")


def configure_logging(quiet: bool, verbose: bool) -> None:
    """The core logs through `logging.getLogger(__name__)`; here its records reach stderr:
    warnings by default, errors only with --quiet, everything down to debug with --verbose.
    Only the `pipeline` loggers are shown (libraries keep their own)."""
    logger = logging.getLogger("pipeline")
    logger.handlers = [logging.StreamHandler(sys.stderr)]
    logger.handlers[0].setFormatter(_PrintableFormatter("%(message)s"))
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
    """All of stdin. A regular file is mapped rather than copied (50 MB of input is 50 MB less
    fresh memory to touch, 0.03-0.05 s); a pipe or terminal is read. The cost: a file cut
    shorter while it is being solved ends the process with SIGBUS (exit 135), not a message."""
    import mmap
    import os
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
OpenBLAS pool (never called) spins about 0.1 CPU-s at start, and the kernels' OpenMP workers spin
between parallel regions on the cores polars reads with. On 10M positions: 0.1-0.4 CPU-s
less, wall 2-4% less."""


STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP")
                     if hasattr(signal, name))


STOPPED_BY: list[int] = []  # the stop signals received, for an exit code typer made 130


def _stop(signum: int, frame: Any) -> None:
    STOPPED_BY.append(signum)
    raise Stopped(signum)


def stop_signals_as_interrupts() -> None:
    """SIGTERM (a scheduler's timeout or cancel) and SIGHUP stop a run as Ctrl-C does: its
    staging is removed, the previous output stays, and the exit code is 128 + the signal.
    A signal the caller set to be ignored (`nohup`) stays ignored."""
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) == signal.SIG_DFL:
            signal.signal(signum, _stop)


def stopped_message(signum: int | None) -> str:
    """The one line for a run stopped by Ctrl-C (None) or a stop signal."""
    return (f"stopped by {signal.Signals(signum).name}; nothing was written" if signum
            else "interrupted; nothing was written")


def entry() -> None:  # pragma: no cover - console entry point
    """The `snim-batch` executable: the stop handlers first, then the CLI, whose imports
    (typer, and through it pydantic) take 0.1-0.3 s; a stop meanwhile is reported as one
    during a command is, instead of killing the process or printing Python's traceback."""
    import os

    stop_signals_as_interrupts()
    try:
        from pipeline.cli import main
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Stopped) else None
        sys.stderr.write(f"snim-batch: {stopped_message(signum)}\n")
        sys.stderr.flush()
        os._exit(128 + (signum or signal.SIGINT))
    main()


def default_stop_signals() -> None:
    """The command is over: a later stop signal ends the process as it would have."""
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is _stop:
            signal.signal(signum, signal.SIG_DFL)
