"""A run's result for machines: one JSON object, whatever the outcome (`snim-batch run
--result-file PATH` and `--json`, `BatchResult.document()`), described by the JSON Schema
docs/run-result.schema.json. Its `schema_version` changes only when a field changes meaning
or goes away; a field may be added within a version.

`status` is `succeeded` when the run committed its output (exit 0, or 3: rows rejected),
`failed` when it wrote nothing (exit 1 or 2), `stopped` when a signal stopped it (128 + the
signal). `error` names the failure: `code`, a stable snake_case name per exception class
(`SnimError.code`), the class, the message as the command prints it, and the error's fields
(path, row, column, written)."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

from pipeline.errors import SnimError

RESULT_SCHEMA_VERSION = 1
SUCCEEDED, FAILED, STOPPED = "succeeded", "failed", "stopped"

# codes of failures that are not a SnimError (the command words each as one)
STOPPED_CODE = "stopped"
OUT_OF_MEMORY = "out_of_memory"
NAME_TOO_LONG = "name_too_long"
INTERNAL_ERROR = "internal_error"


def error_fields(error: BaseException, message: str) -> dict[str, Any]:
    """The result's `error` for `error` as the command reported it (`message`): a SnimError
    with its own code and fields; a stop (`stopped`), memory running out (`out_of_memory`),
    a name too long for the file system (`name_too_long`) or anything else
    (`internal_error`), each with nothing written."""
    if isinstance(error, SnimError):
        code, path, row, column, written = (error.code, error.path, error.row, error.column,
                                            error.written)
    else:
        path = getattr(error, "filename", None) if isinstance(error, OSError) else None
        row = column = None
        written = False
        if isinstance(error, KeyboardInterrupt):
            code = STOPPED_CODE
        elif isinstance(error, MemoryError):
            code = OUT_OF_MEMORY
        elif isinstance(error, OSError) and error.errno == errno.ENAMETOOLONG:
            code = NAME_TOO_LONG
        else:
            code = INTERNAL_ERROR
    return {"code": code, "class": type(error).__name__, "message": message,
            "path": None if path is None else str(path), "row": row, "column": column,
            "written": written}


def result_document(status: str, exit_code: int, *, error: dict[str, Any] | None = None,
                    out: str | None = None, config_file: str | None = None,
                    counts: dict[str, Any] | None = None, manifest: dict[str, Any] | None = None,
                    manifest_path: str | None = None) -> dict[str, Any]:
    """The result object, every field present (null where unknown or not applicable)."""
    return {"schema_version": RESULT_SCHEMA_VERSION, "status": status, "exit_code": exit_code,
            "error": error, "out": out, "config_file": config_file, "counts": counts,
            "manifest_path": manifest_path, "manifest": manifest}


def result_json(document: dict[str, Any]) -> str:
    """The document as one line of ASCII JSON: every other character escaped (\\uXXXX), so
    that data in it (a path, a message) cannot drive a terminal it is printed on; a value JSON
    has no form for, such as a date, as its text."""
    return json.dumps(document, default=str)


def write_result_file(path: Path, document: dict[str, Any]) -> None:
    """Write the document to `path` whole or not at all: a temporary file beside it, flushed
    to disk, then renamed over it (a reader sees the old file or the new one, never part)."""
    from pipeline.io.outputs.whole import whole_file

    with whole_file(path) as temporary:
        temporary.write_text(result_json(document) + "\n", encoding="utf-8")


def claim_result_file(path: Path) -> None:
    """Make `path` this process's to write at its end: remove the file an earlier process
    left there, and the temporaries (`whole.temporaries`) of processes no longer running, so
    that a process killed before it writes (`kill -9`, the OOM killer) leaves no file rather
    than an earlier one that reads as its own. What cannot be removed stays, to be replaced."""
    from contextlib import suppress

    from pipeline.io.outputs.commit import made_by_live_process
    from pipeline.io.outputs.whole import temporaries

    for entry, pid in temporaries(path):
        if not made_by_live_process(entry, pid) and _older_than(entry, STALE_TEMPORARY_S):
            with suppress(OSError):
                entry.unlink()
    if path.is_symlink() or path.is_file():
        with suppress(OSError):
            path.unlink()


def forget_earlier_result(path: Path, most_bytes: int = 1 << 26) -> None:
    """Remove the run result an earlier run left at `path`, for a `run` command line refused
    before the run began: it writes no result, and a scheduler that reads `path` must find
    none rather than the night before's. Only a regular file that holds a run result (the
    schema's first fields) is removed; any other file stays, as does what cannot be read."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > most_bytes:
            return
        document = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return
    if isinstance(document, dict) and {"schema_version", "status", "exit_code"} <= document.keys():
        from contextlib import suppress

        with suppress(OSError):
            path.unlink()


STALE_TEMPORARY_S = 60.0
"""A temporary's age before a dead process's is removed: a live writer in another process
namespace (a container sharing the volume) looks dead here, and holds its for milliseconds."""


def _older_than(entry: Path, seconds: float) -> bool:
    import time

    try:
        return time.time() - entry.lstat().st_mtime > seconds
    except OSError:
        return False
