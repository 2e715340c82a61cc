"""One file written whole or not at all: the run result, a plot."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

__all__ = ["claim", "whole_file"]


@contextmanager
def whole_file(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` for the block to write; once it ends, flushed to disk
    and renamed over `path`, so that a reader sees the old file or the new one, never part
    (a full disk midway leaves the old one as it was). Removed if the block fails."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield temporary
        with open(temporary, "rb+") as written:
            os.fsync(written.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def claim(path: Path) -> None:
    """Make `path` this process's to write at its end: remove the file an earlier process
    left there, and the temporaries (`.NAME.PID.tmp`) of processes no longer running, so that
    a process killed before it writes (`kill -9`, the OOM killer) leaves no file rather than
    an earlier one that reads as its own. What cannot be removed stays, to be replaced."""
    import re

    from pipeline.io.outputs.commit import made_by_live_process

    ours = re.compile(rf"\.{re.escape(path.name)}\.([0-9]+)\.tmp")
    try:
        beside = list(path.parent.iterdir())
    except OSError:
        beside = []
    for entry in beside:
        found = ours.fullmatch(entry.name)
        if found is not None and not made_by_live_process(entry, int(found.group(1))):
            with suppress(OSError):
                entry.unlink()
    if path.is_symlink() or path.is_file():
        with suppress(OSError):
            path.unlink()
