"""What reaches the terminal and the process, outside typer: text made safe to print, log
and progress lines on stderr, stdin read whole, and the stop signals turned into interrupts.

Only `pipeline.cli` and the executable's entry (`pipeline.executable`) use it; with them, the
only modules that print or exit. Its own imports are few and light (logging is imported when
it is configured): until `executable.entry` has set the stop handlers, a Ctrl-C is Python's,
with a traceback.
"""

from __future__ import annotations

import errno
import gc
import io
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
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


LOG_FORMATS = ("text", "json")
LOG_FORMAT_ENV = "SNIM_BATCH_LOG_FORMAT"  # --log-format's environment variable


def configure_logging(quiet: bool, verbose: bool, log_format: str | None = None) -> None:
    """The core logs through `logging.getLogger(__name__)`; here its records reach stderr,
    each with its level and a UTC timestamp: as text, `TIMESTAMP snim-batch: LEVEL: message`
    escaped like every other line we print, or (`log_format` "json") one JSON object per
    line (`ts`, `level`, `logger`, `message`, and the record's fields); None keeps the format
    set before (text at first). Warnings by default, errors only with --quiet, everything
    down to debug with --verbose; the progress lines (`PROGRESS_LOG`) at info unless
    --quiet; the CLI's own lines (`say_on_stderr`) always. Only the `pipeline` loggers are
    shown (libraries keep their own; under json, `RUST_LOG` unset means off, so that
    deltalake's own lines, such as AWS region warnings, do not break the JSON lines)."""
    import logging

    logger = logging.getLogger("pipeline")
    if log_format is None:
        log_format = configured_log_format()
    if log_format == "json":  # deltalake's Rust log lines (env_logger) would be no JSON
        os.environ.setdefault("RUST_LOG", "off")
    logger.handlers = [_stderr_handler(log_format)]
    logger.setLevel(logging.ERROR if quiet else logging.DEBUG if verbose else logging.WARNING)
    logger.propagate = False
    logging.getLogger(PROGRESS_LOG).setLevel(logging.ERROR if quiet else
                                             logging.DEBUG if verbose else logging.INFO)
    logging.getLogger(LINES_LOG).setLevel(logging.DEBUG)


PROGRESS_LOG = "pipeline.progress"
"""The logger of the plain progress lines (`PlainProgress`), below `pipeline` so that they
share its handler and format."""

LINES_LOG = "pipeline.lines"
"""The logger of the CLI's own lines on stderr (`say_on_stderr`): errors, warnings and what
follows them, shown whatever the level, in the handler's format."""


def configured_log_format() -> str:
    """The format of the handler `configure_logging` installed ("text" before any)."""
    import logging

    for handler in logging.getLogger("pipeline").handlers:
        return getattr(handler, "log_format", "text")
    return "text"


def say_on_stderr(text: str) -> None:
    """One line of the CLI on stderr (an error, a warning, what follows them), through the
    logging handler, which alone decides its form: as it has always read, `snim-batch: TEXT`
    escaped; in JSON, an object whose level is the text's own (`error:`, `warning:`), else
    info."""
    import logging

    if not logging.getLogger("pipeline").handlers:
        configure_logging(quiet=False, verbose=False)
    level = logging.INFO
    for prefix, at in _LINE_LEVELS:
        if text.startswith(prefix):
            level = at
    logging.getLogger(LINES_LOG).log(level, "%s", text)


_LINE_LEVELS = (("error: ", 40), ("internal error: ", 40), ("warning: ", 30))
"""A CLI line's level by its prefix (logging.ERROR, logging.WARNING)."""


def _utc_timestamp(created: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds"
                                                            ).replace("+00:00", "Z")


def json_line(level: str, message: str, created: float | None = None, **fields: object) -> str:
    """One JSON object for a line on stderr: `ts` (UTC), `level`, `message`, then `fields`.
    JSON escapes every control character, so the line is printable as it is."""
    import json

    line = {"ts": _utc_timestamp(time.time() if created is None else created), "level": level,
            "message": message, **fields}
    return json.dumps(line, ensure_ascii=True, default=str)


def _line_json(record) -> str:  # noqa: ANN001 - a logging.LogRecord
    """A CLI line (`say_on_stderr`) as JSON: its level, the text without its prefix."""
    text = record.getMessage()
    for prefix, _ in _LINE_LEVELS:
        if text.startswith(prefix):
            return json_line(record.levelname.lower(), text.removeprefix(prefix),
                             record.created, logger=record.name)
    return json_line("info", text.strip(), record.created, logger=record.name)


def _stderr_handler(log_format: str):  # noqa: ANN202 - a logging.Handler
    """A handler writing each record as one line on `sys.stderr` as it is at that record (a
    live progress display replaces it, to print the line above itself)."""
    import logging

    class Lines(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            if record.name == LINES_LOG:
                return (_line_json(record) if log_format == "json"
                        else f"snim-batch: {printable(record.getMessage())}")
            if log_format == "json":
                return json_line(record.levelname.lower(), record.getMessage(),
                                 record.created, logger=record.name,
                                 **getattr(record, "fields", {}))
            return (_utc_timestamp(record.created) + " snim-batch: "
                    + printable(f"{record.levelname.lower()}: {record.getMessage()}"))

    class CurrentStderr(logging.StreamHandler):
        def emit(self, record: logging.LogRecord) -> None:
            self.stream = sys.stderr
            super().emit(record)

    handler = CurrentStderr()
    handler.setFormatter(Lines())
    handler.log_format = log_format  # type: ignore[attr-defined] - `configured_log_format`
    return handler


def _count(value: float) -> str:
    """A count for a progress line: 950, 12.3k, 4.5M, 1.2G."""
    for above, size, suffix in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if value >= above:
            return f"{value / size:.1f}{suffix}"
    return f"{value:,.0f}"


def _duration(seconds: float) -> str:
    """A duration for a progress line: 7s, 3m05s, 2h10m."""
    whole = int(seconds + 0.5)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


class PlainProgress:
    """The progress of a command where stderr is not a terminal: log lines (`PROGRESS_LOG`,
    info), never rewritten. Nothing for a command shorter than `every` seconds; from then on
    (at once with `from_start`, --verbose) a line at each phase's start and end and, while a
    phase runs, every `every` seconds (`tick`, called by a timer thread) and at a progress
    event that comes at least `every` seconds after the last line (with `every` 0: at each).
    A line says the phase, units done of the total, the rate and the time left, as text and
    as fields (`phase`, `done_units`, `total_units`, `unit`, `rate_per_s`, `eta_s`,
    `elapsed_s`). `clock` is the time in seconds (`time.monotonic`)."""

    def __init__(self, every: float, from_start: bool = False,
                 clock=time.monotonic, log=None) -> None:  # noqa: ANN001
        import threading

        self.every, self.from_start, self.clock = every, from_start, clock
        import logging

        self.log = log or logging.getLogger(PROGRESS_LOG)
        self._lock = threading.Lock()
        self.started = self.last_line = clock()
        self.phase, self.phase_started = "", self.started
        self.done: int | None = None
        self.total: int | None = None
        self.done_at = self.unit_started = self.started
        self.unit, self.message = "rows", ""

    def _due(self, now: float) -> bool:
        return self.from_start or now - self.started >= self.every

    def __call__(self, event) -> None:  # noqa: ANN001 - a pipeline.events.RunEvent
        from pipeline.events import NOTE, PHASE_DONE, PHASE_START, PROGRESS

        now = self.clock()
        with self._lock:
            if event.kind == PHASE_START:
                self.phase, self.phase_started = event.phase, now
                self.unit_started = now
                self.done = self.total = None
                self.unit, self.message = "rows", ""
                if self._due(now):
                    self._line(now, f"{event.phase}: started", status="started")
            elif event.kind == PHASE_DONE:
                if self._due(now):
                    self._line(now, event.message, status="done", seconds=event.seconds)
                self.phase = ""
            elif event.kind == PROGRESS:
                if event.unit != self.unit and self.done is not None:
                    self.unit_started = self.done_at  # a step of other units: its own rate
                self.done, self.total, self.unit = event.done_units, event.total_units, event.unit
                self.done_at = now
                self.message = event.message
                if self._due(now) and now - self.last_line >= self.every:
                    self._line(now, self._status(now))
            elif event.kind == NOTE:
                self.message = event.message
                if self._due(now):
                    self._line(now, event.message)

    def tick(self) -> None:
        """A line if a phase runs and none was written for `every` seconds (every > 0)."""
        now = self.clock()
        with self._lock:
            if self.every > 0 and self.phase and now - self.last_line >= self.every:
                self._line(now, self._status(now))

    def _rate(self, now: float) -> float | None:
        """Units per second in the phase (since the step of these units began: the merge
        of sorted runs after the rows read), as of its last progress event."""
        elapsed = self.done_at - self.unit_started
        return self.done / elapsed if self.done and elapsed > 0 else None

    def _eta(self, now: float) -> float | None:
        """Seconds left at that rate, less the time since that event."""
        rate = self._rate(now)
        if rate and self.total is not None and self.done is not None:
            return max((self.total - self.done) / rate - (now - self.done_at), 0.0)
        return None

    def _status(self, now: float) -> str:
        running = _duration(now - self.phase_started)
        if self.done is None:
            return f"{self.phase}: running for {running}"
        text = f"{self.phase}: {self.done:,}"
        if self.total:
            text += f" of {self.total:,} {self.unit} ({100 * self.done // self.total}%)"
        else:
            text += f" {self.unit}"
        rate, eta = self._rate(now), self._eta(now)
        if rate:
            text += f", {_count(rate)} {self.unit}/s"
        if eta is not None:
            text += f", about {_duration(eta)} left"
        return text + f" (running for {running})"

    def _line(self, now: float, message: str, **extra: object) -> None:
        self.last_line = now
        rate, eta = self._rate(now), self._eta(now)
        fields = {"phase": self.phase, "done_units": self.done, "total_units": self.total,
                  "unit": self.unit, "rate_per_s": None if rate is None else round(rate, 1),
                  "eta_s": None if eta is None else round(eta, 1),
                  "elapsed_s": round(now - self.started, 3), **extra}
        self.log.info("%s", message, extra={"fields": fields})


class TerminalProgress:
    """The progress of a command on a terminal: a live display (rich, imported here, not
    before: `snim-batch --help` stays quick) with a line per phase, `snim-batch: [T] PHASE`
    (T: when it started, in seconds), a bar (pulsing while the total is unknown), units done
    of the total, the rate and the time left; a finished phase says how long it took. It is
    redrawn four times a second, so a phase without progress events (finish, write, commit)
    still shows its time passing: no silent gap after 100%. No colour, and every text
    escaped (`printable`)."""

    def __init__(self, stream=None, clock=time.monotonic) -> None:  # noqa: ANN001
        from rich.console import Console
        from rich.progress import BarColumn, Progress, ProgressColumn
        from rich.table import Column
        from rich.text import Text

        started = clock()

        class Phase(ProgressColumn):
            def render(self, task) -> Text:  # noqa: ANN001
                return Text(f"snim-batch: [{task.fields['at']:7.2f}s] {task.description}",
                            no_wrap=True)

        class Status(ProgressColumn):
            max_refresh = 0.5

            def render(self, task) -> Text:  # noqa: ANN001
                fields = task.fields
                if fields.get("took") is not None:
                    return Text(f"done in {fields['took']:.2f}s")
                running = _duration(task.elapsed or 0)
                if fields.get("done") is None:
                    return Text(f"{running}  {fields['note']}".rstrip())
                unit, text = fields["unit"], _count(fields["done"])
                if task.total:
                    text += f"/{_count(task.total)} {unit} {task.percentage:.0f}%"
                else:
                    text += f" {unit}"
                if task.speed:
                    text += f" {_count(task.speed)}/s"
                if task.total and task.time_remaining is not None:
                    text += f" ETA {_duration(task.time_remaining)}"
                else:
                    text += f" {running}"
                return Text(text)

        self.clock, self.started = clock, started
        self.console = Console(file=stream or sys.stderr, color_system=None, highlight=False,
                               emoji=False, markup=False, force_terminal=True)
        self.progress = Progress(Phase(table_column=Column(no_wrap=True)),
                                 BarColumn(bar_width=12),
                                 Status(table_column=Column(no_wrap=True, overflow="ellipsis")),
                                 console=self.console, refresh_per_second=4, get_time=clock,
                                 redirect_stdout=False)
        self.task = None
        self.progress.start()

    def __call__(self, event) -> None:  # noqa: ANN001 - a pipeline.events.RunEvent
        from pipeline.events import NOTE, PHASE_DONE, PHASE_START, PROGRESS

        progress = self.progress
        if event.kind == PHASE_START:
            self.task = progress.add_task(printable(event.phase), total=None,
                                          at=self.clock() - self.started, done=None,
                                          unit="rows", took=None, note="")
            progress.refresh()  # a phase is shown as it starts, however short
        elif self.task is None:
            return
        elif event.kind == PHASE_DONE:
            total = progress.tasks[-1].total or 1
            progress.update(self.task, total=total, completed=total, took=event.seconds)
            progress.stop_task(self.task)
            progress.refresh()
        elif event.kind == PROGRESS:
            unit = printable(event.unit)
            fields = progress.tasks[-1].fields
            if unit != fields["unit"]:  # a step of its own: its rate and time left
                progress.reset(self.task, total=event.total_units, completed=event.done_units,
                               **{**fields, "done": event.done_units, "unit": unit})
            progress.update(self.task, completed=event.done_units, total=event.total_units,
                            done=event.done_units, unit=unit)
        elif event.kind == NOTE:
            progress.update(self.task, note=printable(event.message))

    def tick(self) -> None:
        """Nothing: the display redraws itself."""

    def close(self) -> None:
        self.progress.stop()


def progress_renderer(quiet: bool, verbose: bool, every: float):
    """How a command's progress reaches stderr (`pipeline.events` callbacks): nothing with
    --quiet; on a terminal a live display (`TerminalProgress`), unless the log is JSON (for
    a machine, wherever it is); elsewhere plain log lines (`PlainProgress`, from the start
    with --verbose), with a thread calling its `tick` so that a long phase without events
    still gets its line. Call `close()` when the command ends, before printing its result
    or error."""
    if quiet:
        return None
    if sys.stderr is None:  # closed by the shell (`2>&-`): nowhere to show it
        return None
    if sys.stderr.isatty() and configured_log_format() != "json":
        return TerminalProgress()
    return _Ticking(PlainProgress(every, from_start=verbose))


class _Ticking:
    """A `PlainProgress` and the daemon thread that calls its `tick` until `close`."""

    def __init__(self, plain: PlainProgress) -> None:
        import threading

        self.plain, self._stop = plain, threading.Event()
        self._thread = None
        if plain.every > 0:
            self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(min(self.plain.every, 1.0)):
            self.plain.tick()

    def __call__(self, event) -> None:  # noqa: ANN001
        self.plain(event)

    def close(self) -> None:
        self._stop.set()


def exit_status(code: object) -> int:
    """The process exit status for a SystemExit code (None is 0; text is printed, then 1)."""
    if code is None or isinstance(code, int):
        return code or 0
    print(printable(str(code)), file=sys.stderr)
    return 1


def give_back_stdin(data: bytes | memoryview) -> None:
    """Put `data`, all of stdin as `stdin_bytes` returned it, back on stdin, so that the next
    read of stdin reads it again (the executable's quick `solve` read it and leaves the input
    to the CLI): a regular file is wound back to where it was read from; a pipe's bytes go to
    an anonymous file in memory that becomes stdin (`memfd_create`: no temporary directory,
    which a read-only image has none of; an anonymous temporary file where there is no
    memfd). An OSError if neither can be made."""
    import stat

    if sys.stdin is None:  # closed: `stdin_bytes` reads nothing from it again
        return
    fd = sys.stdin.fileno()
    if stat.S_ISREG(os.fstat(fd).st_mode):
        os.lseek(fd, -len(data), os.SEEK_END)  # `stdin_bytes` read it to the end
        return
    try:
        memory = os.memfd_create("snim-batch-stdin")
    except (AttributeError, OSError):  # no memfd here (not Linux, or refused)
        import tempfile

        held = tempfile.TemporaryFile()
    else:
        held = open(memory, "w+b")  # noqa: SIM115 - closed below (and the descriptor with it)
    with held:
        held.write(data)
        held.flush()
        held.seek(0)
        os.dup2(held.fileno(), fd)


def stdin_bytes() -> bytes | memoryview:
    """All of stdin. A regular file is mapped rather than copied (no second copy of the input
    in fresh memory to touch); a pipe or terminal is read. The cost: a file cut
    shorter while it is being solved ends the process with SIGBUS (exit 135), not a message.
    A closed stdin (`<&-`) reads as empty, as /dev/null does."""
    import mmap
    import stat

    if sys.stdin is None:
        return b""
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


PROCESS_DEFAULTS = {"OPENBLAS_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
"""The environment the executable sets before its imports, unless the user set these. Thread
pools the job has no use for kept from spinning: numpy's OpenBLAS pool (never called) spins
at start, and the kernels' OpenMP workers spin between parallel regions on the cores polars
reads with. Polars' allocator keeps its own default pages: asked to use huge pages
(`thp:always`), it spent more on faulting them in than it saved (docs/performance.md)."""


def set_process_defaults() -> None:
    """`PROCESS_DEFAULTS` into the environment where unset: before polars, numpy or the
    kernels are imported, which read them once."""
    for name, value in PROCESS_DEFAULTS.items():
        os.environ.setdefault(name, value)


STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                     if hasattr(signal, name))


STOPPED_BY: list[int] = []  # the stop signals received, for an exit code typer made 130
_STOPPING: list[int] = []  # the stop under way (raised): later ones are ignored
LATE_STOPS: list[int] = []  # stop signals that came once the output was committed (not raised)
_COMMITTED: list[bool] = []  # see `stops_once_committed`
_HOLDING: list[bool] = []  # see `stops_held_until_taken`
_HELD: list[int] = []  # the first stop signal that came while they were held


def stops_once_committed() -> None:
    """The command's output is in place (called while the commit still holds the stop
    signals, `events.COMMITTED`): from now to the end of the process a stop signal no longer
    stops it, it is noted in LATE_STOPS, and the command ends as it would have, so that it
    never says that nothing was written about an output in place."""
    _COMMITTED.append(True)

# Where a frame's code comes from, to tell when raising the stop is safe (`_safe_to_raise`).
_OURS = os.path.dirname(os.path.abspath(__file__)) + os.sep
_PYTHONS = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
_CALLED_BACK = tuple(f"{os.sep}{packages}{os.sep}{name}{os.sep}"
                     for packages in ("site-packages", "dist-packages")
                     for name in ("numba", "llvmlite", "polars"))
"""Libraries whose compiled code calls their Python code, and does not survive an exception
raised there: polars' Rust reads an Enum's categories through `Series._from_pyseries` while it
builds a plan, and an interrupt raised there is a Rust panic (exit 1, Rust's backtrace), not
a stop. A stop that comes in their Python code is raised once it has returned."""


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
    by a second Ctrl-C or a scheduler's SIGTERM after it. Once the output is committed
    (`stops_once_committed`), a stop is only noted."""
    if _COMMITTED:
        LATE_STOPS.append(signum)
        return
    if _STOPPING:
        return
    signum = _first_arrived(signum)
    if _HOLDING:
        if not _HELD:  # the first: one that was pending came before this one
            _HELD.append(_PENDING[0] if _PENDING else signum)
            _PENDING.clear()
            signal.signal(signal.SIGALRM, _held_too_long)
            signal.setitimer(signal.ITIMER_REAL, HOLD_LIMIT_S)
        return
    while frame is not None and frame.f_code in _HANDLERS:  # a handler run within one
        frame = frame.f_back
    if not _safe_to_raise(frame):
        if not _PENDING:
            _PENDING.append(signum)
        signal.signal(signal.SIGALRM, _stop_pending)
        signal.setitimer(signal.ITIMER_REAL, PENDING_CHECK_S)
        return
    if _PENDING:  # the stop that came first, not a later one that found it pending
        signum = _PENDING[0]
    _PENDING.clear()
    _STOPPING.append(signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    STOPPED_BY.append(signum)
    raise Stopped(signum)


def _stop_pending(alarm: int, frame: FrameType | None) -> None:
    """SIGALRM's handler while a stop is pending: `_stop` again, unless the stop signal is
    held meanwhile (`io.commit.interrupts_held`): then it is dropped here, as the hold
    delivers the stops that come during it once the commit is done."""
    if _PENDING:
        signum = _PENDING[0]
        if signal.getsignal(signum) is _stop:
            _stop(signum, frame)
        else:
            _PENDING.clear()


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
    _note_arrivals()
    sys.unraisablehook = _stop_not_lost
    _COMMITTED.clear()
    LATE_STOPS.clear()
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(signum, _stop)


_ARRIVALS: list[int] = []  # the pipe's read end that `_note_arrivals` set up


def _note_arrivals() -> None:
    """Have the interpreter write each signal's number to a pipe as the signal arrives
    (`signal.set_wakeup_fd`), for `_first_arrived`: signals that come while the main thread
    is in compiled code have their handlers run in signal-number order, not in the order
    they came (SIGTERM then Ctrl-C 5 ms later was said as Ctrl-C). Nothing where a wakeup
    file descriptor is set already, or outside the main thread."""
    if _ARRIVALS:
        return
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    try:
        previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except ValueError:  # not the main thread
        previous = None
    if previous != -1:  # another's (theirs stays), or none could be set
        if previous is not None:
            signal.set_wakeup_fd(previous)
        os.close(read)
        os.close(write)
        return
    _ARRIVALS.append(read)


def _first_arrived(signum: int) -> int:
    """The stop signal that arrived first among those noted since the last look (the pipe
    read empty), else `signum`."""
    if not _ARRIVALS:
        return signum
    noted = b""
    while True:
        try:
            chunk = os.read(_ARRIVALS[0], 4096)
        except OSError:  # empty: BlockingIOError
            break
        if not chunk:
            break
        noted += chunk
    return next((number for number in noted if number in STOP_SIGNALS), signum)


def stops_held_until_taken() -> None:
    """From now until `take_stops`, a stop signal is kept, not raised: one that comes while
    the command line is parsed is raised where the command can report it (`run` writes its
    --result-file and --json result for a stop, which it cannot do before it has begun). A
    stop kept already stays kept; one kept for HOLD_LIMIT_S is raised then."""
    _HOLDING[:] = [True]


HOLD_LIMIT_S = 2.0  # a stop kept longer (a hung import) is raised where the process is


def _held_too_long(alarm: int, frame: FrameType | None) -> None:
    """SIGALRM's handler while a stop is kept: the command has not taken it within
    HOLD_LIMIT_S, so it is raised now, as it would be without the hold."""
    if _HOLDING and _HELD:
        _HOLDING.clear()
        _stop(_HELD.pop(), frame)


_HANDLERS = (_stop.__code__, _stop_pending.__code__, _held_too_long.__code__)


def take_stops() -> None:
    """Stop signals are raised as they come again; one kept meanwhile is raised now, with
    the stop signals blocked until it is: a second one meanwhile is not raised in its place."""
    with _stop_signals_blocked():
        _HOLDING.clear()
        if _HELD:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _stop(_HELD.pop(), None)


def stops_held() -> bool:
    """Whether a stop signal that comes now is kept (`stops_held_until_taken`), not raised."""
    return bool(_HOLDING)


def drop_held_stops() -> bool:
    """If the command line was only read (`--help`, `--version`, a refused flag), no command
    began to take a stop kept meanwhile: it is dropped, and the exit code is the line's.
    Whether that was so: stops were still held, no command took them."""
    only_read = bool(_HOLDING)
    _HOLDING.clear()
    if _HELD:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _HELD.clear()
    return only_read


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


def _signal_mask() -> set[signal.Signals] | None:
    """This thread's blocked signals, or None where they cannot be set."""
    if not hasattr(signal, "pthread_sigmask"):
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, [])


@contextmanager
def _stop_signals_blocked() -> Iterator[None]:
    """The stop signals blocked in this thread within (threads started meanwhile keep them
    blocked); one that comes meanwhile is delivered as the block ends, to the handler then
    set. The mask is set back whatever happens."""
    mask = _signal_mask()
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


class _SignalsKept:
    """A finder on `sys.meta_path` that finds no module itself: it hands a top-level module's
    import to the finders after it, then calls `keep_signals` once the module has run, so
    that no library's import leaves its own signal action in place (`import polars` does).
    The stop signals are blocked while the module runs: one that comes meanwhile waits,
    and then goes to the handler `keep_signals` set back, not to the library's own action
    (polars' swallows SIGINT: a Ctrl-C typed during its import would be lost). The mask is
    set back whatever happens, a stop raised in `keep_signals` included."""

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
            with _stop_signals_blocked():  # a stop meanwhile is delivered after, to ours
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


def stdout_lost(exc: OSError) -> str:
    """After stdout failed (a reader that closed the pipe, a full disk) on a line that only
    reports what is done (the output is written): the rest of what goes there is dropped,
    so that the exit's flush does not fail again. The warning to say."""
    _drop_stdout()
    return f"warning: stdout: cannot print the result ({exc.strerror or exc})"


def stdout_failed(exc: BaseException) -> str:
    """`stdout_lost` for what a command prints as its answer (a plan, SG values, the run
    result, --help, solve's verdicts): the error to say, the command having failed."""
    _drop_stdout()
    return f"error: {cannot_print_answer(exc)}"


def cannot_print_answer(exc: BaseException) -> str:
    """Why stdout did not take a command's answer, as every command says it: a full disk, a
    reader that closed the pipe, or no stdout at all (`>&-`)."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else (
        str(exc) if isinstance(exc, OSError) else "it is closed")
    return f"stdout: cannot print the answer ({reason})"


class StdoutClosed(OSError):
    """A write to `ClosedStdout`."""


class ClosedStdout(io.TextIOBase):
    """stdout when the shell closed it (`>&-`), where Python leaves `sys.stdout` None and
    click would print a command's answer nowhere and exit 0: every write fails, as on a
    full disk, so that a command says it cannot print its answer (exit 1), or warns that
    it cannot print its report, as it does then. `install` puts it in place."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise StdoutClosed(errno.EBADF, "it is closed")

    @classmethod
    def install(cls) -> None:
        """When stdout is closed: /dev/null on file descriptor 1, so that no file the
        process opens takes that number (and a library's or a child's writes to it go
        nowhere), and this in `sys.stdout`."""
        if sys.stdout is not None:
            return
        null = os.open(os.devnull, os.O_WRONLY)
        if null != 1:
            os.dup2(null, 1)
            os.close(null)
        sys.stdout = cls()


def _drop_stdout() -> None:
    if isinstance(sys.stdout, ClosedStdout):  # said once: the rest goes nowhere
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stdout, for the process's life
        return
    with suppress(OSError, ValueError, AttributeError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)


def late_stops_note() -> str | None:
    """The line for stop signals that came once the output was committed, if any."""
    if not LATE_STOPS:
        return None
    names = ", ".join(dict.fromkeys(signal.Signals(s).name for s in LATE_STOPS))
    return f"{names} came once the output was committed; the run finished"


def stopped_message(signum: int | None) -> str:
    """The one line for a run stopped by Ctrl-C (None) or a stop signal."""
    return (f"stopped by {signal.Signals(signum).name}; nothing was written" if signum
            else "interrupted; nothing was written")


def default_stop_signals() -> None:
    """The command is over: a later stop signal ends the process as it would have, unless
    the command was stopped or has committed: then its exit is not cut short."""
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is _stop:
            signal.signal(signum, signal.SIG_IGN if _STOPPING or _COMMITTED else
                          signal.default_int_handler if signum == signal.SIGINT
                          else signal.SIG_DFL)
