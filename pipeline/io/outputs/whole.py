"""One file written whole or not at all: the run result, a plot."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["whole_file"]


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

