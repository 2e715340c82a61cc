"""What an input or output location names. Today: a local path, or a `file://` URL naming
one. A location with another scheme (`s3://bucket/key`, `gs://`, `az://`, `hdfs://`...) is
recognised as a URL, never taken for a relative path: it is refused by name until a reader
and a commit exist for it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from pipeline.errors import UsageError, shown

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


@dataclass(frozen=True)
class Location:
    """A parsed location: `scheme` ("file" for local paths) and the absolute local `path`."""

    scheme: str
    path: Path

    @classmethod
    def parse(cls, text: str, base: Path) -> Location:
        """`text` as given by a user: a path relative to `base` (or `~`), or a URL."""
        match = _SCHEME.match(text)
        if match is None:
            path = Path(text).expanduser()
            return cls("file", path if path.is_absolute() else base / path)
        scheme = match.group(1).lower()
        if scheme != "file":
            raise UsageError(f"{shown(text)}: {scheme}:// locations are not supported (local "
                             "paths and file:// URLs are)")
        url = urlparse(text)
        if url.netloc not in ("", "localhost"):
            raise UsageError(f"{shown(text)}: a file:// URL names a local path "
                             "(file:///path), not a host")
        return cls("file", Path(unquote(url.path)))

    def __str__(self) -> str:
        return str(self.path)
