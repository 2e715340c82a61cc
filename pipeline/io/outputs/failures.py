"""Failures to write an output, as errors that name the output, the file and the cause (a
full disk says so, and what to do)."""

from __future__ import annotations

import errno
import os
import re
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl
import pyarrow as pa

from pipeline.errors import OutputError, UsageError, WriteFailure, brief_repr, first_line, truncated
from pipeline.events import OnEvent, RunEvent

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)

NAME_MAX = 255  # bytes of a file name, where the file system does not say (pathconf)
PATH_MAX = 4096  # bytes of a path, likewise
PID_WIDTH = 7  # digits of the largest process id Linux gives (2^22)
RUN_ID_WIDTH = 23  # a run id, 20261204T192806Z-75e4fd
FILES_DEPTH = 128  # bytes a run's deepest file adds below its output (a Delta partition's)


_STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)


def failure(shown: str, doing: str, cause: str, no_space: bool, option: str = "--out",
            path: str | None = None) -> OutputError:
    """'SHOWN: CAUSE while DOING; nothing was written', with advice for a full disk (free
    space, or point `option` elsewhere). A `WriteFailure` met within an output's commit is
    turned into this, naming the output: `failure(shown, e.doing, e.cause, e.no_space)`.
    `path`: where the failure was, when not at `shown`."""
    advice = f" (free space or choose another {option})" if no_space else ""
    return OutputError(f"{shown}: {cause} while {doing}", path=shown if path is None else path,
                       written=False, hint=advice)


def local_staging_failure(shown: str, temporary: Path, doing: str, cause: str, no_space: bool
                          ) -> OutputError:
    """`failure` for an output kept elsewhere (an object store, a remote Delta root) whose
    files are staged in the local temporary directory: that directory is what filled or
    failed, and TMPDIR, not --out, is what moves it."""
    return failure(shown, f"{doing} in the local temporary directory {temporary}", cause,
                   no_space, option="TMPDIR", path=str(temporary))


def unwritable(directory: Path) -> str | None:
    """Why a new file in the existing `directory` would fail, asked without writing: "read-only
    file system", "permission denied" (for this user), else None."""
    if os.statvfs(directory).f_flag & os.ST_RDONLY:
        return write_cause(OSError(errno.EROFS, os.strerror(errno.EROFS)))[0]
    if not os.access(directory, os.W_OK | os.X_OK, effective_ids=True):
        return write_cause(OSError(errno.EACCES, os.strerror(errno.EACCES)))[0]
    return None


def remove_staging(staging: Path, on_event: OnEvent) -> None:
    """Remove a run's staging directory, which did not become its output; if it cannot be
    removed (its file system gone read-only, a failing disk), warn what is left and that the
    next run removes it."""
    kept = _left_behind(staging)
    if kept is not None:
        on_event(RunEvent.warning(kept))


def _left_behind(staging: Path) -> str | None:
    failures: list[BaseException] = []
    if sys.version_info >= (3, 12):
        shutil.rmtree(staging, onexc=lambda function, path, exc: failures.append(exc))
    else:
        shutil.rmtree(staging, onerror=lambda function, path, info: failures.append(info[1]))
    if not os.path.lexists(staging):
        return None
    reason = next((write_cause(e)[0] for e in failures if isinstance(e, OSError)),
                  "it could not be removed")
    return (f"{staging}: this run's staging directory is left ({reason}); the next run to "
            "this output removes it")


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


def storage_failure(name: str, exc: BaseException) -> WriteFailure | None:
    """The OutputError for `exc` when its message names a storage error (disk full, quota,
    read-only file system, I/O error) met while writing output `name`, else None: for
    engines whose writes also run the computation, so that other failures keep their own
    message."""
    if not isinstance(exc, OSError) and not any(
            os.strerror(n) in str(exc) for n in _STORAGE_ERRNOS):
        return None
    cause, no_space = write_cause(exc)
    return WriteFailure(f"{name}: {cause} while writing it", f"writing {name}", cause,
                         no_space, path=name)


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
                            no_space, path=name) from None


def _name_limits(path: Path) -> tuple[int, int]:
    """(longest name, longest path) in bytes on the file system that holds `path`, asked of
    its nearest existing ancestor."""
    for candidate in (path, *path.parents):
        try:
            return (os.pathconf(candidate, "PC_NAME_MAX"), os.pathconf(candidate, "PC_PATH_MAX"))
        except (OSError, ValueError):
            continue
    return NAME_MAX, PATH_MAX


def name_problem(path: Path, beside: str = "", extra: int = 0, depth: int = 0) -> str | None:
    """What makes `path` (absolute) impossible to create on its file system, or None: a
    component longer than a name may be; the name `beside` derived from its own for a file
    beside it (a staging directory: `extra` bytes longer, its variable parts at their
    widest), too long likewise; or a path that, with the `depth` bytes its files add, is
    longer than a path may be."""
    name_max, path_max = _name_limits(path)
    for part in path.parts[1:]:
        size = len(os.fsencode(part))
        if size > name_max:
            return (f"the name {brief_repr(part)} is {size} bytes, more than the {name_max} a file "
                    "name may have")
    size = len(os.fsencode(path.name))
    if beside and size + extra > name_max:
        return (f"the name {brief_repr(path.name)} is {size} bytes, and {beside} beside it "
                f"would be {size + extra}, more than the {name_max} a file name may have: give "
                f"a name of at most {name_max - extra} bytes")
    longest = len(os.fsencode(str(path))) + extra + depth
    if longest >= path_max:
        return (f"the path is {len(os.fsencode(str(path)))} bytes: with the names of the "
                f"files {'beside and ' if extra else ''}below it, longer than the {path_max} "
                "bytes a path may have")
    return None


def refuse_long_staging(target: Path, kind: str, run_id_length: int = RUN_ID_WIDTH) -> None:
    """`refuse_long_names` for the output `target` and the staging directory
    `.NAME.KIND-PID-RUN` a run makes beside it (`explain` asks with the longest run id)."""
    refuse_long_names(target, "--out", f"its staging directory .NAME.{kind}-PID-RUN",
                      len(f"..{kind}--") + PID_WIDTH + run_id_length, FILES_DEPTH)


def refuse_long_names(path: Path, option: str, beside: str = "", extra: int = 0,
                      depth: int = 0) -> None:
    """A UsageError (exit 2, before any work) when `name_problem` finds one in the output
    `path` that `option` names."""
    problem = name_problem(path.absolute(), beside, extra, depth)
    if problem is not None:
        raise UsageError(f"{option} {truncated(str(path), 120)}: {problem}", path=path,
                         written=False)
