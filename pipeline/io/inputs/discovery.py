"""Finding the input files of a spec (a file, a directory or a glob); a URL's in its store
(`remote`). A name that exists is that file; outputs and staging are never inputs."""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.io.inputs.remote import (
    COMPRESSED_SUFFIXES,
    DELTA_TABLE,
    PARQUET_MAGIC,
    resolve_remote,
    skipped_compressed,
    unsuffixed,
)
from pipeline.io.outputs.manifest import is_snim_output
from pipeline.io.read.files import CSV_SUFFIXES, PARQUET_SUFFIXES, Source
from pipeline.io.store import object_store
from pipeline.io.store.locations import GLOB_CHARS, Location, directories_glob

_INPUT_SUFFIXES = PARQUET_SUFFIXES + CSV_SUFFIXES


_STAGING_NAME = re.compile(r"\..+\.(?:partial|retired)-\d+-.+")


def resolve_inputs(spec: str, what: str, exclude: Path | str | None = None,
                   options: dict[str, str] | None = None,
                   on_warning: Callable[[str], None] | None = None) -> list[Source]:
    """A file, a directory (its .parquet/.pq/.csv files, recursively, and files named
    without a suffix that start as Parquet) or a glob -> sorted files.

    A path that exists is taken as written, glob characters and all; only one that does not
    is a glob pattern. What a directory listing or a wildcard finds is skipped when its name
    starts with _ or . (hidden files, markers such as _SUCCESS, staging directories) or it is
    a snim-batch output directory; the directory `exclude` (the run's own output) is never
    read. Raises InputError saying what was found and skipped when no file is left.

    A URL (s3://, gs://, az://) is found in its store (`remote_inputs`), with `options`
    (config.yaml's storage_options) for its client. `on_warning` is told of compressed files
    a listing skipped (`x.csv.gz`: rows a night would otherwise miss unsaid)."""
    location = Location.parse(spec, Path.cwd())
    outside = Location.parse(str(exclude), Path.cwd()) if exclude is not None else None
    if location.is_remote:

        return list(resolve_remote(object_store.with_client_options(location, options), what,
                                   outside, directories_glob(spec), on_warning,
                                   prefix_only=spec.endswith("/")))
    local_exclude = outside.path if outside is not None and not outside.is_remote else None
    local = str(location.path) if spec[:5].lower() == "file:" else spec  # file:///path
    if directories_glob(spec) and not local.endswith("/"):
        local += "/"  # file:///in/*/
    finder = _InputFinder(local, what, local_exclude, named=spec)
    files = finder.files()
    warning = skipped_compressed(what, _shown(spec),
                                 [_shown(str(p)) for p in finder.compressed()])
    if warning is not None and on_warning is not None:
        on_warning(warning)
    return list(files)


def _starts_as_parquet(path: Path) -> bool:
    """Whether a file named without a suffix (`unsuffixed`: Hive and Trino name theirs
    `000000_0`, Impala `..._data.0.parq`) holds Parquet: its rows are read as the Parquet
    they are, not missed unsaid. A regular file that cannot be read is taken, for its
    reader to say why (a night's file must not be dropped unsaid); a pipe or device is not
    (opened without blocking, then checked)."""
    if not unsuffixed(path.name):
        return False
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return False
    except OSError:
        return os.path.isfile(path)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return False
        return os.read(descriptor, len(PARQUET_MAGIC)) == PARQUET_MAGIC
    except OSError:
        return True
    finally:
        os.close(descriptor)


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of what `path` leads to, None when it leads nowhere."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _unsearchable_directory(path: Path) -> Path:
    """The directory that keeps `path` from being looked up (permission denied): the
    deepest of its parents that can itself be looked up."""
    for parent in path.parents:
        try:
            os.lstat(parent)
        except OSError:
            continue
        return parent
    return path


def _shown(name: str) -> str:
    """A file name as printable text: bytes that are not UTF-8 as backslash escapes."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _once_each(files: list[Path]) -> list[Path]:
    """`files` with each path through `..` named as the file system leads it (its directory's
    links resolved, as `..` went through them; relative stays relative), so that the manifest
    and the rejects name the file read, and read once: `d/*/../p.csv` reaches d/p.csv once for
    each directory `*` matches; the first in order is kept. Paths without `..` stay as
    found, whatever they lead to (a link beside its target is read twice, as named)."""
    seen = {_identity(f) for f in files if ".." not in f.parts}
    kept = set()
    for file in files:
        if ".." in file.parts:
            identity = _identity(file)
            if identity in seen:
                continue
            seen.add(identity)
            real = Path(os.path.realpath(file.parent)) / file.name
            file = real if file.is_absolute() else Path(os.path.relpath(real))
        kept.add(file)
    return sorted(kept)


def special_kind(path: Path) -> str:
    """What a path that is no regular file nor directory is, in a few words."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "not readable as a file"
    for test, kind in ((stat.S_ISFIFO, "a pipe (a named pipe, /dev/stdin piped, <(...))"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "a special file"


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


class _InputFinder:
    """The files of one input spec, with a count of what was skipped and why (which the
    error says when nothing is left)."""

    def __init__(self, spec: str, what: str, exclude: Path | None, named: str = ""):
        self.spec = spec
        self.named = named or spec  # as the user wrote it (a file:// URL), for messages
        self.what = what
        self.excluded = _identity(exclude) if exclude is not None else None
        self.found: list[Path] = []
        self.directories_only = directories_glob(spec)
        self.skipped: dict[str, set[Path]] = {key: set() for key in (
            "hidden file", "hidden dir", "suffix", "special", "output", "delta", "own")}

    def files(self) -> list[Path]:
        path = Path(self.spec)
        if self.exists(path):
            kind = self.kind_of(path)
            if kind == "special":
                raise self.error(path, f"is {special_kind(path)}, not a regular file: a run "
                                       "reads each input more than once (its bytes checked, "
                                       "its rows read and counted), which a pipe or device "
                                       "gives only once; write it to a file first")
            if kind != "dir" and self.spec.endswith("/"):
                raise self.error(path, "is a file, not a directory (the name ends with /); "
                                       "name the file without the /")
            if kind != "dir":
                return self.named_in_utf8(_once_each([path]))
            table = next((d for d in path.absolute().parents if (d / "_delta_log").is_dir()),
                         None)
            if table is not None:  # a partition directory of a Delta table
                raise self.error(path, f"is inside the Delta table {_shown(str(table))}, "
                                 "whose data files include rows that later commits removed, "
                                 "so read it with a Delta reader and pass the result as "
                                 "Parquet")
            self.take_dir(path, ())
            empty = "no .parquet, .pq or .csv files found"
        elif any(ch in self.spec for ch in GLOB_CHARS):
            root = Path(path.anchor or ".")
            inner = self.enter(root, (), found_by_name=True)
            if inner is not None:
                self.match(root, path.parts[1 if path.anchor else 0:], inner)
            empty = "no file matches this pattern"
        else:
            raise self.error(path, "no such file or directory")
        if not self.found:
            raise self.error(path, empty + self.skip_text())
        return self.named_in_utf8(_once_each(sorted(set(self.found))))

    def named_in_utf8(self, files: list[Path]) -> list[Path]:
        """`files`, once each name is known to be UTF-8 text, as the outputs record it."""
        for file in files:
            if _shown(str(file)) != str(file):
                raise self.error(file, "the file name is not UTF-8 text, which the outputs "
                                       "need to name it (rename the file)")
        return files

    def exists(self, path: Path) -> bool:
        """Whether `path` itself (a symlink, even a broken one, included) exists; an error
        other than its absence (a directory on the way that cannot be searched) is raised."""
        try:
            os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as exc:
            if exc.errno == errno.EACCES:
                blocked = _unsearchable_directory(path)
                raise self.error(blocked, f"cannot read directory ({exc.strerror})") from None
            raise self.path_error(path, exc) from None
        return True

    def error(self, path: Path, message: str) -> InputError:
        where = "" if path == Path(self.spec) else f"{_shown(str(path))}: "
        return InputError(f"{self.what} input {_shown(self.named)}: {where}{message}",
                          path=_shown(str(path)))

    def path_error(self, path: Path, exc: OSError) -> InputError:
        if exc.errno == errno.ELOOP:
            return self.error(path, "symlink loop (too many levels of symbolic links)")
        if exc.errno == errno.ENOENT and os.path.islink(path):
            return self.error(path, f"dangling symlink to {_shown(os.readlink(path))} (its target "
                                    "does not exist)")
        if exc.errno == errno.ENOENT:
            return self.error(path, "no such file or directory")
        return self.error(path, f"cannot read it ({exc.strerror})")

    def kind_of(self, path: Path) -> str:
        """'dir', 'file' (regular) or 'special', through symlinks; a broken one is an error."""
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            raise self.path_error(path, exc) from None
        if stat.S_ISDIR(mode):
            return "dir"
        return "file" if stat.S_ISREG(mode) else "special"

    def entries(self, directory: Path) -> list[str]:
        try:
            return sorted(os.listdir(directory))
        except OSError as exc:
            raise self.error(directory, f"cannot read directory ({exc.strerror})") from None

    def hidden(self, directory: Path, name: str, pattern: str = "") -> bool:
        """Skip (and count) a name starting with _ or ., unless `pattern` starts with that
        character too; a staging directory is skipped whatever the pattern."""
        if not name.startswith(("_", ".")) or (
                pattern.startswith(name[0]) and not _STAGING_NAME.fullmatch(name)):
            return False
        path = directory / name
        self.skipped["hidden dir" if os.path.isdir(path) else "hidden file"].add(path)
        return True

    def enter(self, directory: Path, ancestors: tuple[Any, ...], found_by_name: bool
              ) -> tuple[Any, ...] | None:
        """The ancestors to walk `directory` with, or None to skip it: the run's own output,
        or (when a listing or a wildcard found it) a snim-batch output."""
        identity = _identity(directory)
        if identity is not None and identity == self.excluded:
            self.skipped["own"].add(directory)
            return None
        if not found_by_name and is_snim_output(directory):
            self.skipped["output"].add(directory)
            return None
        if os.path.isdir(directory / "_delta_log"):
            if found_by_name:
                raise self.error(directory, DELTA_TABLE)
            self.skipped["delta"].add(directory)
            return None
        if identity in ancestors:
            raise self.error(directory, "symlink loop (it leads back to a directory above it)")
        return (*ancestors, identity)

    def take_dir(self, directory: Path, ancestors: tuple[Any, ...], found_by_name: bool = True
                 ) -> None:
        """Every .parquet/.pq/.csv file below `directory`, and every file named without a
        suffix that starts as Parquet (`_starts_as_parquet`), following symlinks."""
        inner = self.enter(directory, ancestors, found_by_name)
        if inner is not None:
            self.take_entries(directory, inner)

    def take_entries(self, directory: Path, ancestors: tuple[Any, ...]) -> None:
        """`take_dir` for a directory already entered (`ancestors` ends with it)."""
        inner = ancestors
        for name in self.entries(directory):
            if self.hidden(directory, name):
                continue
            path = directory / name
            if (not name.lower().endswith(_INPUT_SUFFIXES) and not os.path.isdir(path)
                    and not _starts_as_parquet(path)):
                self.skipped["suffix"].add(path)
                continue
            kind = self.kind_of(path)
            if kind == "dir":
                self.take_dir(path, inner, found_by_name=False)
            elif kind == "file":
                self.found.append(path)
            else:
                self.skipped["special"].add(path)

    def match(self, base: Path, parts: tuple[str, ...], ancestors: tuple[Any, ...]) -> None:
        """The paths below `base` (a directory already entered, unless `parts` is empty) that
        match the pattern components `parts`; a component that exists as written is taken
        literally, `..` the directory above. A `**` at the end is every directory below `base`
        and `base` itself; a pattern ending in `/` (`directories_only`) takes no file it
        matches itself, only what the directories it matches hold."""
        if not parts:
            kind = self.kind_of(base)
            if kind == "dir":
                self.take_dir(base, ancestors, found_by_name=False)
            elif kind == "file" and not self.directories_only:
                self.found.append(base)
            elif kind == "special":
                self.skipped["special"].add(base)
            return
        head, rest = parts[0], parts[1:]
        literal = self.exists(base / head)
        if not any(ch in head for ch in GLOB_CHARS) or literal:
            # one step of the pattern (`..` included) is no walk that could go round a loop:
            # the check starts again below it, where `**` or a directory taken whole walk
            if rest and os.path.isdir(base / head):
                inner = self.enter(base / head, (), found_by_name=True)
                if inner is not None:
                    self.match(base / head, rest, inner)
            elif not rest and literal:
                self.match(base / head, rest, ())
            return
        if not os.path.isdir(base):
            return
        if head == "**" and not rest:  # every directory at any depth, this one included
            self.take_entries(base, ancestors)
            return
        if head == "**":  # any depth of directories, this one included
            self.match(base, rest, ancestors)
        for name in self.entries(base):
            path = base / name
            if head == "**" and not os.path.isdir(path) or (
                    head != "**" and not fnmatch.fnmatchcase(name, head)):
                continue
            if self.hidden(base, name, "" if head == "**" else head):
                continue
            if not rest and head != "**":
                self.match(path, (), ())
            elif os.path.isdir(path):
                inner = self.enter(path, ancestors if head == "**" else (), found_by_name=False)
                if inner is not None:
                    self.match(path, parts if head == "**" else rest, inner)

    def compressed(self) -> list[Path]:
        """The files skipped for their suffix whose names say they are compressed, sorted."""
        return sorted(p for p in self.skipped["suffix"]
                      if p.name.lower().endswith(COMPRESSED_SUFFIXES))

    def skip_text(self) -> str:
        """'; skipped ...' naming what was skipped and why, or '' when nothing was."""
        counts = {key: len(paths) for key, paths in self.skipped.items()}
        hidden = [_plural(counts[key], one, many) for key, one, many in (
            ("hidden file", "file", "files"), ("hidden dir", "directory", "directories"))
            if counts[key]]
        parts = []
        if hidden:
            parts.append(" and ".join(hidden) + " whose names start with _ or . (hidden files "
                         "and markers such as _SUCCESS are skipped, as Spark and Hadoop do)")
        if counts["suffix"]:
            compressed = len(self.compressed())
            named = f", {compressed} of them named as compressed" if compressed else ""
            parts.append(_plural(counts["suffix"], "file", "files") + f" of another type{named} "
                         "(a directory gives its .parquet, .pq and .csv files, and Parquet "
                         "files named without a suffix)")
        if counts["special"]:
            parts.append(_plural(counts["special"], "entry that is", "entries that are")
                         + " neither a file nor a directory")
        if counts["output"]:
            parts.append(_plural(counts["output"], "snim-batch output directory",
                                 "snim-batch output directories"))
        if counts["delta"]:
            parts.append(_plural(counts["delta"], "Delta table", "Delta tables"))
        if counts["own"]:
            parts.append("the run's own output directory")
        return "; skipped " + ", ".join(parts) if parts else ""


def takes_by_name(given: Path, entry: Path, named: Path, directories_only: bool = False) -> bool:
    """Whether input `given` (a file, a directory or a glob, absolute) is, or would take, the
    file at `entry` (its directory's links resolved; `named`: as written), from the names
    alone, by the rules `_InputFinder` lists files with, so also for a file not there yet:
    the file itself or the one it links to; a .parquet/.pq/.csv file below the directory
    that no hidden or `_` name hides; for a glob, what `_InputFinder.match` would take
    (`directories_only`: the glob ended in `/`, which `given` as a Path no longer shows; a
    `..` after a wildcard: any file below where it can lead whose name the last component
    matches, or a data file). `given` keeps its `..` as written (not `os.path.abspath`'s)."""
    if given.is_dir():
        top = Path(os.path.realpath(given))
        return top in entry.parents and _taken_below(entry.relative_to(top).parts)
    if given.exists():
        return entry in (Path(os.path.realpath(given)),
                         Path(os.path.realpath(given.parent)) / given.name)
    parts = given.parts
    fixed = next((i for i, part in enumerate(parts) if any(c in part for c in GLOB_CHARS)),
                 len(parts))
    up = parts[fixed:].count("..")
    if up:  # where `..` after a wildcard leads is the file system's to say: judged widely
        top = Path(os.path.realpath(Path(*parts[:fixed]))).parents[up - 1]
        return top in entry.parents and (fnmatch.fnmatchcase(entry.name, parts[-1])
                                         or _taken_below((entry.name,)))
    resolved = Path(os.path.realpath(Path(*parts[:fixed]))).parts + parts[fixed:]
    return any(_glob_takes(pattern, path.parts, not directories_only)
               for pattern in (resolved, parts) for path in (entry, named))


def _taken_below(parts: tuple[str, ...]) -> bool:
    """Whether a directory listing takes the file at `parts` below it: no hidden or `_`
    name on the way, and a data file's suffix."""
    return (bool(parts) and not any(part.startswith((".", "_")) for part in parts)
            and parts[-1].lower().endswith(_INPUT_SUFFIXES))


def _glob_takes(pattern: tuple[str, ...], parts: tuple[str, ...], files: bool = True) -> bool:
    """Whether the glob `pattern` takes the file `parts` (both split from the root), as
    `_InputFinder.match` does on names: a literal component is itself, `*`, `?`, `[...]` one name
    that is not hidden (unless the pattern's is), `**` any depth of directories (this one
    too; at the end, every data file below), and a matched directory all data files below;
    a file the whole pattern matches only if `files` (a pattern not ending in `/`)."""
    if not pattern:
        return files if not parts else _taken_below(parts)
    if not parts:
        return False
    head, rest = pattern[0], pattern[1:]
    if not any(c in head for c in GLOB_CHARS):
        return parts[0] == head and _glob_takes(rest, parts[1:], files)
    if head == "**":
        if not rest:
            return _taken_below(parts)
        return _glob_takes(rest, parts, files) or (
            len(parts) > 1 and not parts[0].startswith((".", "_"))
            and _glob_takes(pattern, parts[1:], files))
    hidden = parts[0].startswith((".", "_")) and not head.startswith(parts[0][0])
    return (not hidden and fnmatch.fnmatchcase(parts[0], head)
            and _glob_takes(rest, parts[1:], files))


def first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
