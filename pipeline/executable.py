"""The `snim-batch` executable: the stop handlers first, then the CLI.

Kept apart from `terminal` (which the CLI imports) so that nothing imports the CLI but this
entry point: the handlers must be in place before typer's imports, during which
a stop is reported as one during a command is, not by Python's traceback."""

from __future__ import annotations

import os
import signal
import sys

from pipeline.errors import Stopped
from pipeline.terminal import stop_signals_as_interrupts, stopped_message


def entry() -> None:  # pragma: no cover - console entry point
    """Set the stop handlers, import the CLI, run the command."""
    stop_signals_as_interrupts()
    try:
        from pipeline.cli import main
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Stopped) else None
        sys.stderr.write(f"snim-batch: {stopped_message(signum)}\n")
        sys.stderr.flush()
        os._exit(128 + (signum or signal.SIGINT))
    main()
