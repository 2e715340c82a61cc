"""One exception family; the CLI maps each class to a documented exit code.

Exit codes (docs/operations.md, "Exit codes"):
  0  clean run
  1  run failed, nothing written (bad input file, bad rows under --on-bad-rows fail, I/O)
  2  usage or configuration error (bad flag, bad config key or value, missing extra)
  3  run completed, but some rows were rejected (outputs and rejects.parquet written)

Every error is a message plus fields (`SnimError`): the file, row and column it is about, and
what became of the output. The message holds only its own content; `str()` renders the rest
once, here: "; refusing to replace it" when the output in place was refused, "; nothing was
written" when nothing was, then the error's `hint`. Every subclass is defined in this module.
"""

from __future__ import annotations

import reprlib
from typing import Any

__all__ = [
    "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_REJECTS", "NOTHING_WRITTEN", "SHOWN_CHARS",
    "SnimError", "UsageError", "MissingExtra", "ConfigError", "InputError", "BadRowsError",
    "OutputError", "WriteFailure", "OutputChanged", "CommitOutcomeUnknown", "StoreError",
    "RuleError", "ReconcileError", "SparkFailure", "SparkConnectError", "NotBuilt", "Stopped",
    "brief_repr", "truncated", "first_line",
]

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


def brief_repr(value: object, limit: int = SHOWN_CHARS) -> str:
    """`repr(value)` for a message, at most `limit` characters (cut with "..."): user data is
    echoed this way so that no message grows with the data (a huge cell, an expanded YAML
    value). The repr is built bounded, never in full."""
    text = _BRIEF.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def truncated(text: str, limit: int = SHOWN_CHARS) -> str:
    """Text for a message, at most `limit` characters (cut with "...")."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def first_line(exc: BaseException, limit: int = 200) -> str:
    """An exception's first line of text (or its type's name), at most `limit` characters: a
    library's error as the cause in one of ours."""
    return truncated((str(exc).strip().splitlines() or [type(exc).__name__])[0], limit)


NOTHING_WRITTEN = "nothing was written"


def _rebuilt(cls: type[SnimError], args: tuple[Any, ...], state: dict[str, Any]) -> SnimError:
    error = cls.__new__(cls, *args)
    error.__dict__.update(state)
    return error


class SnimError(Exception):
    """Base of every error a user can cause; carries its exit code and its fields.

    `message` is the error's own text. Fields, all keyword-only and kept as attributes:
    `path` the file or location it is about (as the message names it), `row` the row as the
    message counts it (an input file's line for an `InputError` about the file; the 0-based
    data row of rejects.parquet for a `BadRowsError`), `column` the column; `written` False
    when the run failed with nothing written (rendered "; nothing was written"), True when
    part of an output was written (the message says which), None when the message leaves it
    unsaid (a usage, config or input error, found before anything is written, or a commit
    whose outcome cannot be told); `refused` True when something in the output's place was not
    one this run may replace and was left as it was (rendered "; refusing to replace it",
    joined to "nothing was written" by a comma); `hint` text rendered last, its own
    punctuation first (" (rerun, with --overwrite to replace it)", ": raise ...")."""

    code = "snim_error"  # the class's stable name for machines: a run result's error.code
    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, path: object = None, row: int | None = None,
                 column: str | None = None, written: bool | None = None,
                 refused: bool = False, hint: str = ""):
        super().__init__(message)
        self.message = message
        self.path = None if path is None else str(path)
        self.row, self.column = row, column
        self.written, self.refused, self.hint = written, refused, hint

    def __str__(self) -> str:
        text = self.message
        if self.refused:
            text += "; refusing to replace it"
        if self.written is False:
            text += (", " if self.refused else "; ") + NOTHING_WRITTEN
        return text + self.hint

    def __reduce__(self) -> tuple[Any, ...]:  # pickled with its fields, whatever its __init__
        return _rebuilt, (type(self), self.args, self.__dict__)


class UsageError(SnimError):
    """The command line or its arguments are wrong."""

    code = "usage_error"
    exit_code = EXIT_USAGE


class MissingExtra(UsageError):
    """A command or option needs an optional extra of the package that is not installed."""

    code = "missing_extra"

    def __init__(self, what: str, extra: str, detail: str = "") -> None:
        super().__init__(
            f"{what} needs the {extra} extra{detail}: pip install '.[{extra}]' in the project's "
            f"checkout, or pip install 'WHEEL[{extra}]' naming the wheel you installed")
        self.extra = extra


class ConfigError(UsageError):
    """config.yaml is missing, unreadable, or has a bad key or value."""

    code = "config_error"


class InputError(SnimError):
    """An input file is missing, unreadable, corrupt, or has the wrong columns or types."""

    code = "input_error"


class BadRowsError(SnimError):
    """Rows failed validation and the policy is `fail`; `problems` lists the first few.
    `total`: the rows that failed, or with `complete` False, those found before the run
    stopped reading (at least that many)."""

    code = "bad_rows"

    def __init__(self, message: str, problems: list[str], total: int, complete: bool = True,
                 **fields: Any):
        super().__init__(message, **fields)
        self.problems = problems
        self.total = total
        self.complete = complete


class OutputError(SnimError):
    """The output directory cannot be written (exists without --overwrite, permissions)."""

    code = "output_error"


class WriteFailure(OutputError):
    """A file of the output could not be written: `doing` what, `cause` in a few words,
    `no_space` whether the disk or quota was full. The output's commit turns it into the
    error that names the output (`io.outputs.failures.failure`)."""

    code = "write_failure"

    def __init__(self, message: str, doing: str, cause: str, no_space: bool, **fields: Any):
        super().__init__(message, **fields)
        self.doing, self.cause, self.no_space = doing, cause, no_space


class OutputChanged(OutputError):
    """An object-store output's conditional manifest PUT was refused: another run's
    manifest is in place."""

    code = "output_changed"


class CommitOutcomeUnknown(OutputError):
    """Whether an object-store output's manifest PUT took effect cannot be told: this run's
    uploads are kept."""

    code = "commit_outcome_unknown"


class NotBuilt(SnimError):
    """A compiled module the install builds (the kernels) is missing or cannot be loaded:
    `module` names it, `cause` is the import's own error."""

    code = "not_built"

    def __init__(self, module: str, cause: str):
        super().__init__(
            f"the compiled module {module} cannot be loaded ({cause})",
            hint="; it is built at install: in a checkout `make clean-cache && make run` "
                 "builds it again, an installed package needs installing again (pip install)")
        self.module, self.cause = module, cause


class StoreError(SnimError):
    """An object store refused or could not be reached; exit 1."""

    code = "store_error"


class Stopped(KeyboardInterrupt):
    """The process was asked to stop by a signal other than Ctrl-C (SIGTERM from a scheduler,
    SIGHUP from a closed terminal): raised where Ctrl-C would be, so that a run cleans up and
    reports it the same way."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class RuleError(SnimError):
    """A rule set is invalid (empty S, non-positive move, unknown kind, table cap exceeded)."""

    code = "rule_error"


class ReconcileError(SnimError):
    """The rows read from an input file differ from the rows it holds, or the rows evaluated
    and rejected from the rows read (a read cut short, rows lost on the way): the run fails
    before it commits. `path` is the file (None: the counts of all files together)."""

    code = "reconcile_error"

    def __init__(self, message: str, path: str | None, expected: int, found: int,
                 **fields: Any):
        super().__init__(message, path=path, **fields)
        self.expected, self.found = expected, found


class SparkFailure(SnimError):
    """Spark failed for a reason outside the data (memory, a lost executor, a crashed worker,
    a dead JVM); the message names the setting to change."""

    code = "spark_failure"


class SparkConnectError(SparkFailure):
    """The Spark Connect server cannot be reached, or cannot take what the job sends it."""

    code = "spark_connect_error"
