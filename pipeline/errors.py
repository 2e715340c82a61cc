"""One exception family; the CLI maps each class to a documented exit code.

Exit codes (README "Exit codes"):
  0  clean run
  1  run failed, nothing written (bad input file, bad rows under --on-bad-rows fail, I/O)
  2  usage or configuration error (bad flag, bad config key or value, missing extra)
  3  run completed, but some rows were rejected (outputs and rejects.parquet written)
"""

from __future__ import annotations

import reprlib

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_REJECTS = 3


SHOWN_CHARS = 60


class _Brief(reprlib.Repr):
    """reprlib with every part bounded, huge integers included (whose full repr would cost
    quadratic time, or fail past Python's 4300-digit limit)."""

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 4 * SHOWN_CHARS:
            return f"<a {x.bit_length()}-bit integer>"
        return super().repr_int(x, level)


_BRIEF = _Brief()
_BRIEF.maxstring = _BRIEF.maxother = SHOWN_CHARS
_BRIEF.maxlevel, _BRIEF.maxlist, _BRIEF.maxdict, _BRIEF.maxtuple, _BRIEF.maxset = 2, 6, 6, 6, 6


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """`repr(value)` for a message, at most `limit` characters (cut with "..."): user data is
    echoed this way so that no message grows with the data (a huge cell, an expanded YAML
    value). The repr is built bounded, never in full."""
    text = _BRIEF.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def cut(text: str, limit: int = SHOWN_CHARS) -> str:
    """Text for a message, at most `limit` characters (cut with "...")."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def first_line(exc: BaseException, limit: int = 200) -> str:
    """An exception's first line of text (or its type's name), at most `limit` characters: a
    library's error as the cause in one of ours."""
    return cut((str(exc).strip().splitlines() or [type(exc).__name__])[0], limit)


class SnimError(Exception):
    """Base of every error a user can cause; carries its exit code."""

    exit_code = EXIT_FAILED


class UsageError(SnimError):
    """The command line or its arguments are wrong."""

    exit_code = EXIT_USAGE


class ConfigError(UsageError):
    """config.yaml is missing, unreadable, or has a bad key or value."""


class InputError(SnimError):
    """An input file is missing, unreadable, corrupt, or has the wrong columns or types."""


class BadRowsError(SnimError):
    """Rows failed validation and the policy is `fail`; `problems` lists the first few."""

    def __init__(self, message: str, problems: list[str], total: int):
        super().__init__(message)
        self.problems = problems
        self.total = total


class OutputError(SnimError):
    """The output directory cannot be written (exists without --overwrite, permissions)."""


class Stopped(KeyboardInterrupt):
    """The process was asked to stop by a signal other than Ctrl-C (SIGTERM from a scheduler,
    SIGHUP from a closed terminal): raised where Ctrl-C would be, so that a run cleans up and
    reports it the same way."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class RuleError(SnimError):
    """A rule set is invalid (empty S, non-positive move, unknown kind, table cap exceeded)."""


class ReconcileError(SnimError):
    """The rows read from an input file differ from the rows it holds, or the rows evaluated
    and rejected from the rows read (a read cut short, rows lost on the way): the run fails
    before it commits. `path` is the file (None: the counts of all files together)."""

    def __init__(self, message: str, path: str | None, expected: int, found: int):
        super().__init__(message)
        self.path, self.expected, self.found = path, expected, found
