"""What a command tells its caller while it works: one event type, one callback type.

`run_job`, `convert_classic`, `write_report` and `generate` take an `on_event` callback
(`OnEvent`, default `ignore`) and call it with a `RunEvent` for each of:

- `PHASE_START` / `PHASE_DONE`: a phase (rules, tables, positions, finish, write, commit;
  parse, render, ...) starts, or ends after `seconds`;
- `PROGRESS`: within a phase, `done_units` of `total_units` (None: not known yet) of
  `unit` (rows, parts, files), with a line for a person in `message`;
- `WARNING`: what the user should know though the command goes on or succeeds (an old
  output kept aside, and where), said as it arises so that a failure later does not hide it;
- `NOTE`: any other status line within the current phase (Spark's version and master);
- `COMMITTED`: `run_job`'s output is in place (sent while stop signals are still held, so
  that a caller can stop treating a stop as "nothing was written" from then on).

The core only calls the callback; rendering (a terminal's progress bar, a plain log line
elsewhere) is the CLI's. The callback runs on the thread that did the work: it must be quick
and must not raise.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["COMMITTED", "NOTE", "PHASE_DONE", "PHASE_START", "PROGRESS", "WARNING", "OnEvent",
           "RunEvent", "ignore", "phase", "tell_committed"]

PHASE_START = "phase-start"
PHASE_DONE = "phase-done"
PROGRESS = "progress"
WARNING = "warning"
NOTE = "note"
COMMITTED = "committed"


@dataclass(frozen=True)
class RunEvent:
    """One thing a command tells its caller (see the module docstring for the kinds)."""

    kind: str
    phase: str = ""
    message: str = ""
    done_units: int | None = None
    total_units: int | None = None
    unit: str = "rows"
    seconds: float | None = None

    @classmethod
    def phase_start(cls, phase: str) -> RunEvent:
        return cls(PHASE_START, phase, phase)

    @classmethod
    def phase_done(cls, phase: str, seconds: float) -> RunEvent:
        return cls(PHASE_DONE, phase, f"{phase} done in {seconds:.2f}s", seconds=seconds)

    @classmethod
    def progress(cls, phase: str, done_units: int, total_units: int | None, message: str,
                 unit: str = "rows") -> RunEvent:
        return cls(PROGRESS, phase, message, done_units, total_units, unit)

    @classmethod
    def warning(cls, message: str) -> RunEvent:
        return cls(WARNING, message=message)

    @classmethod
    def note(cls, message: str, phase: str = "") -> RunEvent:
        return cls(NOTE, phase, message)

    @classmethod
    def committed(cls, where: str) -> RunEvent:
        return cls(COMMITTED, "commit", f"committed {where}")


OnEvent = Callable[[RunEvent], None]


def ignore(event: RunEvent) -> None:
    """The callback of a caller that wants to hear nothing."""


def tell_committed(on_event: OnEvent, where: str) -> None:
    """Send COMMITTED (from inside the commit's hold), as `tell_after_commit`."""
    tell_after_commit(on_event, RunEvent.committed(where))


def tell_after_commit(on_event: OnEvent, event: RunEvent) -> None:
    """Send an event of a run whose output is committed: a callback that raises on it is
    only logged, as it cannot undo a commit that is done."""
    try:
        on_event(event)
    except Exception as exc:  # noqa: BLE001 - the caller's code; the output is in place
        logging.getLogger(__name__).warning("the event callback failed on %s: %s",
                                            event.kind.upper(), exc)


@contextmanager
def phase(on_event: OnEvent, name: str) -> Iterator[None]:
    """Tell `on_event` that phase `name` starts, and, unless it fails, when it ends."""
    on_event(RunEvent.phase_start(name))
    started = time.perf_counter()
    yield
    on_event(RunEvent.phase_done(name, round(time.perf_counter() - started, 4)))
