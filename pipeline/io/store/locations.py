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

from pipeline.errors import UsageError, brief_repr

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]*")
_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/?#@:]*):[^/?#]*@")
_PARAMETERS = re.compile(r"\?|/;")  # a query, or Spark Connect's /;token=...
_VALUE = re.compile(r"([?&;][^=&;/?#\s]*=)[^&;#\s]*")
_QUERY = re.compile(r"\?[^/?#=&]*=")
_USER = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")


def without_secrets(text: str) -> str:
    """`text` with every URL in it shown without its secrets: a password in its user info
    (`ftp://u:PW@h` as `ftp://u:<hidden>@h`) and the values of its query (`?sig=S` as
    `?sig=<hidden>`; signed URLs carry their credentials there). The one function through
    which a location's text reaches a message, a log line or a manifest."""

    def hidden(match: re.Match[str]) -> str:
        url = _PASSWORD.sub(r"\1:<hidden>@", match.group(0))
        start = _PARAMETERS.search(url)
        return url if start is None else (
            url[:start.start()] + _VALUE.sub(r"\1<hidden>", url[start.start():]))

    return _URL.sub(hidden, text)


GLOB_CHARS = "*?["
"""The characters that make an input location a glob (a path that exists is taken as it
is, whatever it holds)."""


def directories_glob(text: str) -> bool:
    """Whether `text` is a glob ending in `/` (`exports/*/`): the directories (or prefixes)
    it matches, as a shell's, not a file it matches itself."""
    return text.endswith("/") and any(ch in text for ch in GLOB_CHARS)


STORES = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "az": "az", "abfs": "az",
          "abfss": "az", "hdfs": "hdfs"}
"""URL scheme -> the store it names (`s3a` is Hadoop's name for S3; `gcs` Google's)."""


@dataclass(frozen=True)
class Location:
    """A parsed location. `scheme` is "file" for a local `path`; for a URL it is the store
    ("s3", "gs", "az", "hdfs"), `url` the URL as given (slashes at the end dropped),
    `bucket` the bucket or container, `key` the object key or prefix (no leading slash) and
    `account` the Azure storage account named in an abfs URL ("" otherwise). `options` are
    the store's client options (`object_store.with_client_options`), never shown."""

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
                raise UsageError(f"{brief_repr(without_secrets(text))}: a file:// URL names a "
                                 "local path (file:///path), not a host")
            return cls("file", Path(unquote(url.path)))
        if scheme not in STORES:
            raise UsageError(f"{brief_repr(without_secrets(text))}: {scheme}:// locations are not "
                             "supported (local "
                             "paths, file://, s3:// (s3a://), gs://, az:// and abfs[s]:// URLs "
                             "are)")
        return cls.remote(text)

    @classmethod
    def remote(cls, text: str) -> Location:
        """An object-store URL, taken apart (the scheme is known to be in STORES). A URL
        that carries a password or a query string (a signed URL), or a key with an empty,
        `.` or `..` segment, is refused: the stores' clients would read or write another
        key than the one named (or none), and credentials go in storage_options or the
        providers' environment variables."""
        scheme, rest = text.split("://", 1)
        store = STORES[scheme.lower()]
        rest = rest.rstrip("/")
        authority, _, key = rest.partition("/")
        said = brief_repr(without_secrets(text))
        if _PASSWORD.match(text) or (store != "az" and "@" in authority):
            held = "password (its user part is the container)" if store == "az" else \
                "user name or password"
            if store != "az":  # the user is a key id; Azure's is the container, shown
                said = brief_repr(_USER.sub(r"\1<hidden>@", without_secrets(text)))
            raise UsageError(f"{said}: an object-store URL holds no {held}; give credentials "
                             "in storage_options (config.yaml) or the store's environment "
                             "variables")
        if _QUERY.search(key):
            raise UsageError(f"{said}: an object-store URL takes no query string (signed "
                             f"URLs are not supported); name the object as "
                             f"{scheme}://BUCKET/KEY and give credentials in storage_options")
        parts = key.split("/") if key else []
        odd = next((part for part in parts if part in ("", ".", "..")), None)
        if odd is not None:
            segment = "an empty segment (//)" if odd == "" else f"a {odd!r} segment"
            raise UsageError(f"{said}: the key has {segment}, which object stores do not "
                             "resolve as a file system does; name the key without it")
        account = ""
        if "@" in authority and store == "az":
            authority, _, host = authority.partition("@")
            account = host.split(".", 1)[0]
        if store != "hdfs" and not authority:
            raise UsageError(f"{said}: a {scheme}:// URL names a bucket "
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
