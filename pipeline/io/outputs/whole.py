"""One file written whole or not at all: the run result, a plot."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["temporaries", "whole_file"]


@contextmanager
def whole_file(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` for the block to write; once it ends, flushed to disk
    and renamed over `path`, so that a reader sees the old file or the new one, never part
    (a full disk midway leaves the old one as it was). Removed if the block fails."""
    temporary = _temporary(path, os.getpid())
    try:
        yield temporary
        with open(temporary, "rb+") as written:
            os.fsync(written.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _temporary(path: Path, pid: int) -> Path:
    return path.with_name(f".{path.name}.{pid}.tmp")


def temporaries(path: Path) -> list[tuple[Path, int]]:
    """The temporaries `whole_file` left beside `path` (a process killed while it wrote),
    with the process id each names; none if the directory cannot be listed."""
    named = re.compile(rf"\.{re.escape(path.name)}\.([0-9]+)\.tmp")
    try:
        beside = list(path.parent.iterdir())
    except OSError:
        return []
    return [(entry, int(found.group(1))) for entry in beside
            if (found := named.fullmatch(entry.name)) is not None]
