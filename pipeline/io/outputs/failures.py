"""Failures to write an output, as errors that name the output, the file and the cause (a
full disk says so, and what to do)."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

import polars as pl
import pyarrow as pa

from pipeline.errors import OutputError, first_line

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


_STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)


class WriteFailure(OutputError):
    """A file of the output could not be written; `staged_output` says which output."""

    def __init__(self, message: str, doing: str, cause: str, no_space: bool):
        super().__init__(message)
        self.doing, self.cause, self.no_space = doing, cause, no_space

    def about(self, shown: str) -> OutputError:
        return failure(shown, self.doing, self.cause, self.no_space)


def failure(shown: str, doing: str, cause: str, no_space: bool, option: str = "--out"
            ) -> OutputError:
    """'SHOWN: CAUSE while DOING; nothing was written', with advice for a full disk (free
    space, or point `option` elsewhere)."""
    advice = f" (free space or choose another {option})" if no_space else ""
    return OutputError(f"{shown}: {cause} while {doing}; nothing was written{advice}")


def write_cause(exc: BaseException) -> tuple[str, bool]:
    """(the cause in a few words, whether it is a full disk or quota) of a failed write: the
    system's text for its error number (an OSError's, or "os error N" in a polars message),
    else the first storage error named in the message, else its first line."""
    number = exc.errno if isinstance(exc, OSError) else None
    if number is None:
        text = str(exc)
        found = re.search(r"\(os error (\d+)\)", text)
        number = int(found.group(1)) if found else next(
            (n for n in _STORAGE_ERRNOS if os.strerror(n) in text), None)
    if number is not None:
        words = os.strerror(number)
        return words[:1].lower() + words[1:], number in _NO_SPACE
    return first_line(exc), False


def storage_failure(name: str, exc: BaseException) -> OutputError | None:
    """The OutputError for `exc` when its message names a storage error (disk full, quota,
    read-only file system, I/O error) met while writing output `name`, else None: for
    engines whose writes also run the computation, so that other failures keep their own
    message."""
    if not isinstance(exc, OSError) and not any(
            os.strerror(n) in str(exc) for n in _STORAGE_ERRNOS):
        return None
    cause, no_space = write_cause(exc)
    return WriteFailure(f"{name}: {cause} while writing it", f"writing {name}", cause,
                         no_space)


@contextmanager
def writing(name: str) -> Iterator[None]:
    """Turn a failure to write output `name` (an OSError, a polars or Arrow error) into an
    OutputError naming the file and the cause; within `staged_output`, the output too."""
    try:
        yield
    except WriteFailure:
        raise
    except (OSError, pl.exceptions.PolarsError, pa.ArrowException) as exc:
        cause, no_space = write_cause(exc)
        raise WriteFailure(f"{name}: {cause} while writing it", f"writing {name}", cause,
                            no_space) from None
