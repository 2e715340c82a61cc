"""What an input or output location names: a local path (or a `file://` URL naming one), or an
object-store URL: `s3://bucket/key`, `gs://bucket/key`, `az://container/key` (also
`abfs[s]://container@account.dfs.core.windows.net/key`; `s3a://` is Hadoop's name for S3).
`hdfs://` is read only by the Spark engine, for positions (elsewhere a usage error where a
client is needed: `object_store.hdfs_refused`). Any other scheme is a usage error."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse

from pipeline.errors import UsageError, shown

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


STORES = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "az": "az", "abfs": "az",
          "abfss": "az", "hdfs": "hdfs"}
"""URL scheme -> the store it names (`s3a` is Hadoop's name for S3; `gcs` Google's)."""


@dataclass(frozen=True)
class Location:
    """A parsed location. `scheme` is "file" for a local `path`; for a URL it is the store
    ("s3", "gs", "az", "hdfs"), `url` the URL as given (slashes at the end dropped),
    `bucket` the bucket or container, `key` the object key or prefix (no leading slash) and
    `account` the Azure storage account named in an abfs URL ("" otherwise). `options` are
    the store's client options (`object_store.bound`), never shown."""

    scheme: str
    path: Path | None = None
    url: str = ""
    bucket: str = ""
    key: str = ""
    account: str = ""
    options: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def parse(cls, text: str, base: Path) -> Location:
        """`text` as given by a user: a path relative to `base` (or `~`), or a URL."""
        match = _SCHEME.match(text)
        if match is None:
            path = Path(text).expanduser()
            return cls("file", path if path.is_absolute() else base / path)
        scheme = match.group(1).lower()
        if scheme == "file":
            url = urlparse(text)
            if url.netloc not in ("", "localhost"):
                raise UsageError(f"{shown(text)}: a file:// URL names a local path "
                                 "(file:///path), not a host")
            return cls("file", Path(unquote(url.path)))
        if scheme not in STORES:
            raise UsageError(f"{shown(text)}: {scheme}:// locations are not supported (local "
                             "paths, file://, s3:// (s3a://), gs://, az:// and abfs[s]:// URLs "
                             "are)")
        return cls.remote(text)

    @classmethod
    def remote(cls, text: str) -> Location:
        """An object-store URL, taken apart (the scheme is known to be in STORES)."""
        scheme, rest = text.split("://", 1)
        store = STORES[scheme.lower()]
        rest = rest.rstrip("/")
        authority, _, key = rest.partition("/")
        account = ""
        if "@" in authority and store == "az":
            authority, _, host = authority.partition("@")
            account = host.split(".", 1)[0]
        if store != "hdfs" and not authority:
            raise UsageError(f"{shown(text)}: a {scheme}:// URL names a bucket "
                             f"({scheme}://BUCKET/KEY)")
        return cls(store, None, f"{scheme}://{rest}", authority, key, account)

    @property
    def is_remote(self) -> bool:
        return self.scheme != "file"

    @property
    def name(self) -> str:
        """The last component, as Path.name."""
        return PurePosixPath(self.key).name if self.is_remote else (self.path or Path()).name

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.name).suffix

    @property
    def store_path(self) -> str:
        """`bucket/key`: how pyarrow's file systems name the object."""
        return f"{self.bucket}/{self.key}" if self.key else self.bucket

    def child(self, relative: str) -> Location:
        """The location `relative` (a/b/c) below this one."""
        if not self.is_remote:
            assert self.path is not None
            return Location("file", self.path / relative)
        key = f"{self.key}/{relative}" if self.key else relative
        return replace(self, url=f"{self.url}/{relative}", key=key)

    def at_key(self, key: str) -> Location:
        """The object `key` in this location's bucket, named with this location's scheme."""
        scheme, rest = self.url.split("://", 1)
        authority = rest.split("/", 1)[0]  # "" in hdfs:///key (the default namenode)
        return replace(self, url=f"{scheme}://{authority}/{key}", key=key)

    def __str__(self) -> str:
        return self.url if self.is_remote else str(self.path)


def location_of(text: str | Path, base: Path | None = None) -> Location:
    """The Location a config value names (a Path is always local)."""
    if isinstance(text, Path):
        return Location("file", text)
    return Location.parse(text, base or Path.cwd())
