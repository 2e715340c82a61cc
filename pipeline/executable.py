"""The `snim-batch` executable: the stop handlers first, then the CLI (a stop during its
imports kept until the command can report it: `terminal.stops_held_until_taken`).

Kept apart from `terminal` (which the CLI imports) so that nothing imports the CLI but this
entry point: the handlers must be in place before typer's imports, during which
a stop is reported as one during a command is, not by Python's traceback.

`snim-batch solve` without options is answered here, before those imports, when the compiled
quick path answers its input (`classic.quick`): typer's, pydantic's and numpy's imports take
about as long as solving a large classic input. Any other input goes to the CLI's `solve`,
which answers it or words its error as it always has."""

from __future__ import annotations

import os
import signal
import sys
from typing import NoReturn

from pipeline.errors import SnimError, Stopped
from pipeline.terminal import (
    LOG_FORMAT_ENV,
    LOG_FORMATS,
    cannot_print_answer,
    configure_logging,
    give_back_stdin,
    say_on_stderr,
    set_process_defaults,
    stdin_bytes,
    stop_signals_as_interrupts,
    stopped_message,
    stops_held_until_taken,
)


def entry() -> None:  # pragma: no cover - console entry point
    """Set the stop handlers, answer a quick `solve` or import the CLI, run the command."""
    stop_signals_as_interrupts()
    set_process_defaults()
    try:
        if sys.argv[1:] == ["solve"]:
            _solve_quickly()
        stops_held_until_taken()  # a stop during the CLI's imports is raised by its command
        from pipeline.cli import main
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Stopped) else None
        sys.stderr.write(f"snim-batch: {stopped_message(signum)}\n")
        sys.stderr.flush()
        os._exit(128 + (signum or signal.SIGINT))
    main()


def _solve_quickly() -> None:
    """`snim-batch solve` (the default limits): print the answer and end the process, exit 0,
    when `classic.quick` answers the input; else give stdin back to the CLI and return. A
    --log-format value in the environment that the CLI would refuse goes to the CLI too."""
    log_format = os.environ.get(LOG_FORMAT_ENV, "text").lower()
    if log_format not in LOG_FORMATS:
        return
    try:
        from pipeline.classic.quick import solve_quick
    except SnimError as exc:  # the kernels are not built
        _fail(log_format, str(exc))

    data = stdin_bytes()
    answer = solve_quick(data)
    if answer is None:
        try:
            give_back_stdin(data)
        except OSError as exc:
            _fail(log_format, f"cannot hold the piped input for the full solver: {exc}; "
                              "give it as a file (snim-batch solve < FILE)")
        return
    try:
        sys.stdout.buffer.write(answer)
        sys.stdout.flush()
    except (AttributeError, OSError, ValueError) as exc:  # no stdout (`>&-`), a full disk
        _fail(log_format, cannot_print_answer(exc))
    os._exit(0)


def _fail(log_format: str, message: str) -> NoReturn:
    """Say `error: MESSAGE` as the CLI would, and end the process with exit 1."""
    configure_logging(quiet=False, verbose=False, log_format=log_format)
    say_on_stderr(f"error: {message}")
    sys.stderr.flush()
    os._exit(1)
