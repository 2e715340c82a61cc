"""All file I/O: finding and reading inputs, atomic commit of the output directory, manifest."""

from __future__ import annotations

import codecs
import ctypes
import errno
import fnmatch
import hashlib
import json
import mmap
import os
import re
import shutil
import signal
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from pipeline import kernels
from pipeline.errors import InputError, OutputError

PARQUET_SUFFIXES = (".parquet", ".pq")
CSV_SUFFIXES = (".csv",)
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class InputFile:
    """One input file as recorded in the manifest; its checksum is computed on first use (for
    positions, by the engines in a background thread while the rows are read)."""

    path: Path
    format: str
    size: int
    _digest: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def sha256(self) -> str:
        if self._digest is None:
            try:
                object.__setattr__(self, "_digest", _checksum(self.path))
            except OSError as exc:
                raise InputError(f"{self.path}: cannot read ({exc.strerror})") from None
        assert self._digest is not None
        return self._digest

    def as_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "format": self.format, "size": self.size,
                "sha256": self.sha256}


@dataclass(frozen=True)
class RawTable:
    """A file's rows as read (CSV: every column a string), plus rows the reader had to skip.

    `row` is the 0-based data row number in the file for each frame row; `bad_lines` holds
    (row, reason, line text) for CSV lines with the wrong number of fields.
    """

    file: InputFile
    frame: pl.DataFrame
    row: np.ndarray
    bad_lines: list[tuple[int, str, str]]


def format_of(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    if suffix in CSV_SUFFIXES:
        return "csv"
    with path.open("rb") as fh:
        return "parquet" if fh.read(4) == b"PAR1" else "csv"


GLOB_CHARS = "*?["
_INPUT_SUFFIXES = PARQUET_SUFFIXES + CSV_SUFFIXES
_STAGING_NAME = re.compile(r"\..+\.(?:partial|retired)-\d+-.+")


def resolve_inputs(spec: str, what: str, exclude: Path | None = None) -> list[Path]:
    """A file, a directory (its .parquet/.pq/.csv files, recursively) or a glob -> sorted files.

    A path that exists is taken as written, glob characters and all; only one that does not
    is a glob pattern. What a directory listing or a wildcard finds is skipped when its name
    starts with _ or . (hidden files, markers such as _SUCCESS, staging directories) or it is
    a snim-batch output directory; the directory `exclude` (the run's own output) is never
    read. Raises InputError saying what was found and skipped when no file is left."""
    return _InputFinder(spec, what, exclude).files()


def is_snim_output(directory: Path) -> bool:
    """Whether `directory` holds a manifest.json written by snim-batch: a JSON object with a
    run_id and versions naming snim-batch."""
    try:
        manifest = json.loads((directory / MANIFEST).read_bytes())
    except (OSError, ValueError, RecursionError):
        return False
    return written_by_snim(manifest)


def written_by_snim(manifest: object) -> bool:
    """Whether a parsed manifest.json is one snim-batch wrote: a run_id and versions naming
    snim-batch (enough never to read it as input; replacing it takes `_listed` too)."""
    return (isinstance(manifest, dict) and isinstance(manifest.get("run_id"), str)
            and isinstance(manifest.get("versions"), dict)
            and "snim-batch" in manifest["versions"])


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of what `path` leads to, None when it leads nowhere."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _shown(name: str) -> str:
    """A file name as printable text: bytes that are not UTF-8 as backslash escapes."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


class _InputFinder:
    """The files of one input spec, with a count of what was skipped and why (which the
    error says when nothing is left)."""

    def __init__(self, spec: str, what: str, exclude: Path | None):
        self.spec = spec
        self.what = what
        self.excluded = _identity(exclude) if exclude is not None else None
        self.found: list[Path] = []
        self.skipped: dict[str, set[Path]] = {key: set() for key in (
            "hidden file", "hidden dir", "suffix", "special", "output", "own")}

    def files(self) -> list[Path]:
        path = Path(self.spec)
        if self.exists(path):
            if self.kind_of(path) != "dir":
                return self.named_in_utf8([path])
            self.take_dir(path, ())
            empty = "no .parquet, .pq or .csv files found"
        elif any(ch in self.spec for ch in GLOB_CHARS):
            self.match(Path(path.anchor or "."), path.parts[1 if path.anchor else 0:], ())
            empty = "no file matches this pattern"
        else:
            raise self.error(path, "no such file or directory")
        if not self.found:
            raise self.error(path, empty + self.skip_text())
        return self.named_in_utf8(sorted(set(self.found)))

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
            raise self.path_error(path, exc) from None
        return True

    def error(self, path: Path, message: str) -> InputError:
        where = "" if path == Path(self.spec) else f"{_shown(str(path))}: "
        return InputError(f"{self.what} input {_shown(self.spec)}: {where}{message}")

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
        if identity in ancestors:
            raise self.error(directory, "symlink loop (it leads back to a directory above it)")
        return (*ancestors, identity)

    def take_dir(self, directory: Path, ancestors: tuple[Any, ...], found_by_name: bool = True
                 ) -> None:
        """Every .parquet/.pq/.csv file below `directory`, following symlinks."""
        inner = self.enter(directory, ancestors, found_by_name)
        if inner is None:
            return
        for name in self.entries(directory):
            if self.hidden(directory, name):
                continue
            path = directory / name
            if not name.lower().endswith(_INPUT_SUFFIXES) and not os.path.isdir(path):
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
        """The paths below `base` that match the pattern components `parts`; a component
        that exists as written is taken literally."""
        if not parts:
            kind = self.kind_of(base)
            if kind == "dir":
                self.take_dir(base, ancestors, found_by_name=False)
            elif kind == "file":
                self.found.append(base)
            else:
                self.skipped["special"].add(base)
            return
        head, rest = parts[0], parts[1:]
        if not any(ch in head for ch in GLOB_CHARS) or os.path.lexists(base / head):
            if rest and os.path.isdir(base / head):
                inner = self.enter(base / head, ancestors, found_by_name=True)
                if inner is not None:
                    self.match(base / head, rest, inner)
            elif not rest and os.path.lexists(base / head):
                self.match(base / head, rest, ancestors)
            return
        if not os.path.isdir(base):
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
                self.match(path, (), ancestors)
            elif os.path.isdir(path):
                inner = self.enter(path, ancestors, found_by_name=False)
                if inner is not None:
                    self.match(path, parts if head == "**" else rest, inner)

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
            parts.append(_plural(counts["suffix"], "file", "files") + " of another type (only "
                         ".parquet, .pq and .csv files are read from a directory)")
        if counts["special"]:
            parts.append(_plural(counts["special"], "entry that is", "entries that are")
                         + " neither a file nor a directory")
        if counts["output"]:
            parts.append(_plural(counts["output"], "snim-batch output directory",
                                 "snim-batch output directories"))
        if counts["own"]:
            parts.append("the run's own output directory")
        return "; skipped " + ", ".join(parts) if parts else ""


def _checksum(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def describe(path: Path) -> InputFile:
    try:
        with path.open("rb"):
            pass  # unreadable files fail here, with a plain message
        return InputFile(path, format_of(path), path.stat().st_size)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None


def checksummed(path: Path) -> InputFile:
    """`describe` with the checksum computed now."""
    file = describe(path)
    file.sha256  # noqa: B018 - computes and caches it
    return file


def _short(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__


_BOM = b"\xef\xbb\xbf"
_HEADER_LIMIT = 1 << 20


@dataclass(frozen=True)
class _TextScan:
    """What a pass over a CSV file's bytes found: the offset of the first NUL byte or invalid
    UTF-8 sequence (-1: none; binary data is never CSV), the physical line of a quote that
    is never closed (0: none), and whether a quoted field holds a line break."""

    bad_byte: int
    open_line: int
    quoted_break: bool


def _csv_bytes(data: bytes | mmap.mmap) -> np.ndarray:
    return np.frombuffer(data, np.uint8)


def _bom_length(data: bytes | mmap.mmap) -> int:
    return len(_BOM) if data[:len(_BOM)] == _BOM else 0


def _scan_text(path: Path) -> _TextScan:
    """Check the whole file through a memory map (decoded in 16 MiB slices, quotes followed
    by a compiled scan of the mapped bytes), so a large file is never held twice."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        nul = data.find(b"\x00")
        if nul >= 0:
            return _TextScan(nul, 0, False)
        step = 1 << 24
        for start in range(0, len(data), step):
            try:
                decoder.decode(data[start:start + step], final=start + step >= len(data))
            except UnicodeDecodeError as exc:
                return _TextScan(start + exc.start, 0, False)
        if data.find(b'"') < 0:
            return _TextScan(-1, 0, False)
        view = _csv_bytes(data)
        _, _, open_line, quoted_break = kernels.csv_scan(view, _bom_length(data), 0)
        del view  # the map cannot close while an array still points into it
    return _TextScan(-1, open_line, quoted_break)


def _csv_batches(file: InputFile, batch_rows: int) -> Iterator[RawTable]:
    """A CSV file in batches of `batch_rows` rows (the last one fewer), parsed as it streams
    (pyarrow's serial reader, every column as text), so memory holds one batch, not the file.
    Each batch carries the lines with the wrong number of fields found since the previous
    one."""
    path = file.path
    if file.size == 0:
        raise InputError(f"{path}: empty file (expected a CSV header line)")
    header, terminated = _read_header(path)
    scan = _scan_text(path)
    if scan.bad_byte >= 0:
        raise InputError(f"{path}: not a CSV file (binary data or invalid UTF-8 at byte "
                         f"{scan.bad_byte})")
    if scan.open_line:
        raise _unclosed_quote(path, scan.open_line)
    if not terminated:  # the header runs to the end of the file: pyarrow finds no rows
        yield RawTable(file, pl.DataFrame(schema=dict.fromkeys(header, pl.String)),
                       np.zeros(0, np.int64), [])
        return
    bad: list[tuple[int, str, str]] = []

    def on_invalid(row: Any) -> str:
        number = row.number - 2 if row.number is not None else -1  # 1-based, with header
        bad.append((number, f"line has {row.actual_columns} fields, expected "
                            f"{row.expected_columns}", row.text or ""))
        return "skip"

    def unreadable(exc: Exception) -> InputError:
        return InputError(f"{path}: not a readable CSV file ({_short(exc)})")

    try:
        reader = pacsv.open_csv(
            path,
            read_options=pacsv.ReadOptions(use_threads=False),
            parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid,
                                             newlines_in_values=scan.quoted_break),
            convert_options=pacsv.ConvertOptions(
                column_types={name: pa.string() for name in header},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise unreadable(exc) from None
    numbering = _RowNumbers()
    given = 0

    def emit(table: pa.Table) -> RawTable:
        nonlocal given
        rows = numbering.next(table.num_rows, [r for r, _, _ in bad[numbering.skipped:]])
        if scan.quoted_break:
            _check_text(path, table, rows)
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        new_bad, given = bad[given:], len(bad)
        return RawTable(file, frame, rows, new_bad)

    pending: list[pa.RecordBatch] = []
    held = 0
    yielded = False
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            break
        except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
            raise unreadable(exc) from None
        pending.append(batch)
        held += batch.num_rows
        if held < batch_rows:
            continue
        table = pa.Table.from_batches(pending, schema=reader.schema)
        whole = held - held % batch_rows
        for start in range(0, whole, batch_rows):
            yield emit(table.slice(start, batch_rows))
            yielded = True
        pending, held = table.slice(whole).to_batches(), held - whole
    if held or not yielded or given < len(bad):
        yield emit(pa.Table.from_batches(pending, schema=reader.schema))


class _RowNumbers:
    """Data row numbers of the rows a CSV reader keeps, given the numbers of the lines it
    skipped so far (reported in order, before the rows after them are returned)."""

    def __init__(self) -> None:
        self.row = 0
        self.skipped = 0

    def next(self, count: int, new_skips: list[int]) -> np.ndarray:
        out = np.empty(count, np.int64)
        done = 0
        skips = iter(new_skips)
        skip = next(skips, None)
        while done < count:
            while skip is not None and skip <= self.row:
                if skip == self.row:
                    self.row += 1
                self.skipped += 1
                skip = next(skips, None)
            take = count - done if skip is None else min(count - done, skip - self.row)
            out[done:done + take] = np.arange(self.row, self.row + take)
            done += take
            self.row += take
        return out


def _check_text(path: Path, table: pa.Table, rows: np.ndarray) -> None:
    """Reject a field that swallowed whole CSV lines; a quoted line break alone is valid CSV.
    The quote scan finds a quote left open to the end of the file; this finds two quotes
    left open that close each other ('"5' ... '"7'), valid by the CSV rules but never meant.
    `rows` numbers the table's rows in the file."""
    for name in table.column_names:
        column = table[name]
        spans = pc.match_substring_regex(column, "[\r\n]")
        if not pc.any(spans).as_py():
            continue
        swallowed = pc.and_(spans, pc.match_substring_regex(column, "[\r\n][^\r\n]*[,\"]"))
        if pc.any(swallowed).as_py():
            row = int(rows[pc.index(swallowed, True).as_py()])
            raise InputError(f"{path}: row {row}, column {name}: a quoted field runs over "
                             "several lines that look like CSV rows (unterminated quote?)")


def _unclosed_quote(path: Path, line: int) -> InputError:
    return InputError(f"{path}: line {line}: a quoted field is never closed (unterminated "
                      "quote)")


def _read_header(path: Path) -> tuple[list[str], bool]:
    """(column names, whether a line end follows them) from the file's first record, found
    by the same scan of quotes and line ends (LF, CRLF, CR) as the rows; blank lines before
    it are skipped, as pyarrow skips them."""
    try:
        with path.open("rb") as fh:
            head = fh.read(_HEADER_LIMIT)
            whole = len(head) == os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    records, end, open_line, _ = kernels.csv_scan(_csv_bytes(head), _bom_length(head), 1)
    if records == 0 and whole:
        raise InputError(f"{path}: no header line (the file holds only blank lines; "
                         "expected column names)")
    if open_line and whole:
        raise _unclosed_quote(path, open_line)
    terminated = not open_line and head[end - 1:end] in (b"\n", b"\r")
    if not terminated and not whole:
        raise InputError(f"{path}: the header line does not end within the first "
                         f"{_HEADER_LIMIT >> 20} MiB (is this a CSV file?)")
    first = head[:end]
    try:
        text = first.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a CSV file (the first line is not UTF-8 text)") from None
    if not text.strip():
        raise InputError(f"{path}: empty header line (expected column names)")
    try:
        table = pacsv.read_csv(pa.py_buffer(first if terminated else first + b"\n"),
                               read_options=pacsv.ReadOptions(use_threads=False))
    except pa.ArrowInvalid as exc:
        raise InputError(f"{path}: not a readable CSV header ({_short(exc)})") from None
    names = table.column_names
    if len(set(names)) != len(names):
        raise InputError(f"{path}: duplicate column names in header: {names}")
    return names, terminated


def _parquet_error(path: Path, exc: BaseException) -> InputError:
    if isinstance(exc, PermissionError):
        return InputError(f"{path}: cannot read ({os.strerror(exc.errno or 13)})")
    return InputError(f"{path}: not a readable Parquet file ({_short(exc)})")


def _parquet_batches(file: InputFile, batch_rows: int) -> Iterator[RawTable]:
    """polars' streaming reader (about 2x pyarrow's iter_batches here), after pyarrow has
    checked the footer so that a file that is not Parquet gets a plain message."""
    try:
        schema = pq.read_schema(file.path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _parquet_error(file.path, exc) from None
    start = 0
    try:
        for frame in pl.scan_parquet(file.path, glob=False).collect_batches(
                chunk_size=batch_rows):
            rows = np.arange(start, start + frame.height, dtype=np.int64)
            start += frame.height
            yield RawTable(file, frame, rows, [])
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as exc:  # corrupt pages can surface as a pyo3 PanicException
        raise _parquet_error(file.path, exc) from None
    if start == 0:
        empty = pl.from_arrow(schema.empty_table())
        assert isinstance(empty, pl.DataFrame)
        yield RawTable(file, empty, np.zeros(0, np.int64), [])


def heap_upper_bound(paths: list[Path], column: str) -> int | None:
    """Largest value of a Parquet list column's leaves over all files, from the row-group
    statistics alone (no data read); None when any file is CSV or lacks the statistics."""
    bound = -1
    for path in paths:
        if format_of(path) != "parquet":
            return None
        try:
            meta = pq.ParquetFile(path).metadata
        except (pa.ArrowException, OSError):
            return None
        leaves = [i for i in range(meta.num_columns)
                  if meta.schema.column(i).path.split(".")[0] == column]
        if len(leaves) != 1:
            return None
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(leaves[0]).statistics
            if stats is None or not stats.has_min_max or not isinstance(stats.max, int):
                return None
            bound = max(bound, stats.max)
    return bound


def row_estimate(paths: list[Path]) -> int:
    """Rows in the input files: exact for Parquet (from the footers); for CSV, the records of
    its first 4 MiB scaled to its size (it only sizes the long-form parts; ids grow longer
    down a file, so this tends to count high, which keeps parts small)."""
    rows = 0
    for path in paths:
        if format_of(path) != "parquet":
            rows += _csv_row_estimate(path)
            continue
        try:
            rows += pq.ParquetFile(path).metadata.num_rows
        except (pa.ArrowException, OSError) as exc:
            raise _parquet_error(path, exc) from None
    return rows


def _csv_row_estimate(path: Path, sample: int = 1 << 22) -> int:
    """Exact for a file of at most `sample` bytes (its records less the header, counted as
    the parser counts them); else those of its first `sample` bytes scaled to its size."""
    try:
        with path.open("rb") as fh:
            head = fh.read(sample)
            size = os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    rows = max(kernels.csv_scan(_csv_bytes(head), _bom_length(head), 0)[0] - 1, 0)
    if len(head) == size:
        return rows
    return -(-size * rows // len(head))


class Spill:
    """Scratch space for frames split into parts: one Arrow IPC stream per part (zstd level 1:
    as small as the default level here, and faster), appended frame by frame. A frame with
    another schema than its part's open stream (a file whose keys have another type) starts
    a new file; at most MAX_OPEN streams stay open at once."""

    MAX_OPEN = 128

    def __init__(self, directory: Path):
        self.directory = directory
        self.files: dict[int, list[Path]] = {}
        self._open: dict[int, tuple[pa.Schema, Any, Any]] = {}  # part -> schema, file, writer

    def write(self, part: int, frame: pl.DataFrame) -> None:
        table = frame.to_arrow()
        stream = self._open.get(part)
        if stream is None or not stream[0].equals(table.schema):
            self._close(part)
            if len(self._open) >= self.MAX_OPEN:
                self._close(next(iter(self._open)))
            path = self.directory / f"{part}-{len(self.files.get(part, []))}.arrows"
            self.files.setdefault(part, []).append(path)
            try:
                fh = path.open("wb")
                writer = pa.ipc.new_stream(fh, table.schema, options=pa.ipc.IpcWriteOptions(
                    compression=pa.Codec("zstd", compression_level=1)))
            except OSError as exc:
                raise _spill_error(path, exc) from None
            stream = self._open[part] = (table.schema, fh, writer)
        try:
            stream[2].write_table(table)
        except OSError as exc:
            raise _spill_error(self.files[part][-1], exc) from None

    def _close(self, part: int) -> None:
        stream = self._open.pop(part, None)
        if stream is not None:
            try:
                stream[2].close()
                stream[1].close()
            except OSError as exc:
                raise _spill_error(self.files[part][-1], exc) from None

    def close(self) -> None:
        """Finish every stream (before any part is read)."""
        for part in list(self._open):
            self._close(part)

    def read(self, part: int) -> list[pl.DataFrame]:
        """The part's frames back, one contiguous frame per file (grouping a frame of many
        small chunks peaked higher: 3.1 GiB against 2.7 at 200M long-form rows); each file is
        removed once read."""
        frames = []
        for path in self.files.pop(part, []):
            frames.append(pl.read_ipc_stream(path).rechunk())
            path.unlink()
        return frames


def _spill_error(path: Path, exc: OSError) -> OutputError:
    cause, no_space = _cause(exc)
    return _WriteFailure(f"{path}: cannot write scratch file ({exc.strerror or _short(exc)})",
                         f"writing the scratch file {path.parent.name}/{path.name}", cause,
                         no_space)


@contextmanager
def spill(staging: Path) -> Iterator[Spill]:
    """A `Spill` in a scratch directory inside the staging directory, removed on the way out
    (the staging directory is never published with it)."""
    directory = staging / ".spill"
    try:
        directory.mkdir()
    except OSError as exc:
        cause, no_space = _cause(exc)
        raise _WriteFailure(f"{directory}: cannot create scratch directory ({exc.strerror})",
                            f"creating the scratch directory {directory.name}", cause,
                            no_space) from None
    scratch = Spill(directory)
    try:
        yield scratch
    finally:
        for stream in scratch._open.values():
            stream[1].close()
        shutil.rmtree(directory, ignore_errors=True)


def iter_batches(path: Path, batch_rows: int = 1 << 20) -> Iterator[RawTable]:
    """One file in batches of at most `batch_rows` rows (CSV: exactly that many but the last),
    so memory holds one batch, not the file."""
    file = describe(path)
    if file.format == "parquet":
        yield from _parquet_batches(file, batch_rows)
        return
    yield from _csv_batches(file, batch_rows)


def columns_of(path: Path) -> list[str]:
    """Column names of an input file without reading its rows."""
    if format_of(path) == "parquet":
        try:
            return pq.read_schema(path).names
        except (pa.ArrowException, OSError) as exc:
            raise _parquet_error(path, exc) from None
    if path.stat().st_size == 0:
        raise InputError(f"{path}: empty file (expected a CSV header line)")
    return _read_header(path)[0]


def read_table(path: Path) -> RawTable:
    """Read one input file whole; whole-file problems raise InputError naming the file."""
    batches = list(iter_batches(path, batch_rows=1 << 62))
    if len(batches) == 1:
        return batches[0]
    frame = pl.concat([b.frame for b in batches])
    return RawTable(batches[0].file, frame, np.concatenate([b.row for b in batches]),
                    [line for b in batches for line in b.bad_lines])


def read_tables(spec: str, what: str, exclude: Path | None = None) -> list[RawTable]:
    """Every file of `spec` read whole, each checksummed as it is read (`exclude`: as in
    `resolve_inputs`)."""
    tables = [read_table(p) for p in resolve_inputs(spec, what, exclude)]
    for table in tables:
        table.file.sha256  # noqa: B018 - computes and caches it
    return tables


# ---- atomic output --------------------------------------------------------------------------

_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)
_TAKEN = (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR)
_COMMIT_ATTEMPTS = 8
_NAMES_SHOWN = 5


class _WriteFailure(OutputError):
    """A file of the output could not be written; `staged_output` says which output."""

    def __init__(self, message: str, doing: str, cause: str, no_space: bool):
        super().__init__(message)
        self.doing, self.cause, self.no_space = doing, cause, no_space

    def about(self, shown: str) -> OutputError:
        return _failure(shown, self.doing, self.cause, self.no_space)


def _failure(shown: str, doing: str, cause: str, no_space: bool) -> OutputError:
    advice = " (free space or choose another --out)" if no_space else ""
    return OutputError(f"{shown}: {cause} while {doing}; nothing was written{advice}")


def _cause(exc: BaseException) -> tuple[str, bool]:
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
    return _short(exc), False


def storage_failure(name: str, exc: BaseException) -> OutputError | None:
    """The OutputError for `exc` when its message names a storage error (disk full, quota,
    read-only file system, I/O error) met while writing output `name`, else None: for
    engines whose writes also run the computation, so that other failures keep their own
    message."""
    if not isinstance(exc, OSError) and not any(
            os.strerror(n) in str(exc) for n in _STORAGE_ERRNOS):
        return None
    cause, no_space = _cause(exc)
    return _WriteFailure(f"{name}: {cause} while writing it", f"writing {name}", cause,
                         no_space)


@contextmanager
def writing(name: str) -> Iterator[None]:
    """Turn a failure to write output `name` (an OSError, a polars or Arrow error) into an
    OutputError naming the file and the cause; within `staged_output`, the output too."""
    try:
        yield
    except _WriteFailure:
        raise
    except (OSError, pl.exceptions.PolarsError, pa.ArrowException) as exc:
        cause, no_space = _cause(exc)
        raise _WriteFailure(f"{name}: {cause} while writing it", f"writing {name}", cause,
                            no_space) from None


def _renameat2(source: Path, target: Path, flags: int) -> bool:
    """Linux renameat2(2): True when done, False where the call or the flag is unsupported;
    any other failure raises OSError."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), flags) == 0:
        return True
    number = ctypes.get_errno()
    if number in (errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(number, os.strerror(number), str(target))


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directories (Linux renameat2); False where unsupported."""
    return _renameat2(a, b, _RENAME_EXCHANGE)


def _create(staging: Path, target: Path) -> None:
    """Rename `staging` to `target` only if nothing is there (renameat2 RENAME_NOREPLACE);
    where that is unsupported, a plain rename, which fails over a non-empty directory or a
    file (and replaces an empty directory, which is no output). A taken `target` raises
    OSError with errno EEXIST, ENOTEMPTY or ENOTDIR."""
    if not _renameat2(staging, target, _RENAME_NOREPLACE):
        os.rename(staging, target)


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*"), reverse=True) + [root]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def output_target(out: Path) -> Path:
    """Where `--out OUT` is committed: OUT, or for a symbolic link the path it resolves to
    (every link followed, a dangling one to the path it names); the link itself is kept."""
    out = out.absolute()
    return Path(os.path.realpath(out)) if out.is_symlink() else out


def _output_shown(out: Path, target: Path) -> str:
    out = out.absolute()
    return str(out) if out == target else f"{out} (a link to {target})"


def _few(names: list[str]) -> str:
    more = len(names) - _NAMES_SHOWN
    return ", ".join(names[:_NAMES_SHOWN]) + (f" and {more} more" if more > 0 else "")


def _plain_name(name: object) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name


def _listed(manifest: object) -> dict[str, set[str] | None] | None:
    """The entries a snim-batch manifest lists (name -> None for a file, or the names of the
    files in a directory), or None when it is not a manifest that snim-batch wrote. A bare
    name (as in manifests before directory contents were listed) is a file."""
    if not written_by_snim(manifest):
        return None
    outputs = manifest.get("outputs")  # a dict: written_by_snim checked it
    if not isinstance(outputs, list):
        return None
    listed: dict[str, set[str] | None] = {}
    for entry in outputs:
        if _plain_name(entry):
            listed[entry] = None
            continue
        if not isinstance(entry, dict) or not _plain_name(entry.get("name")):
            return None
        if entry.get("type") == "file":
            listed[entry["name"]] = None
        elif entry.get("type") == "directory" and isinstance(entry.get("files"), list):
            files = [f.get("name") if isinstance(f, dict) else None for f in entry["files"]]
            if not all(_plain_name(f) for f in files):
                return None
            listed[entry["name"]] = set(files)
        else:
            return None
    return listed


def _unlisted(directory: Path, listed: dict[str, set[str] | None]) -> list[str]:
    """Entries of `directory` that `listed` does not account for (a directory's name ends
    with /; an entry of another kind than listed counts as unlisted)."""
    found = []
    with os.scandir(directory) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            is_dir = entry.is_dir(follow_symlinks=False)
            shown = entry.name + "/" * is_dir
            if entry.name not in listed:
                found.append(shown)
            elif listed[entry.name] is None:
                if not entry.is_file(follow_symlinks=False):
                    found.append(shown)
            elif not is_dir:
                found.append(shown)
            else:
                inside = listed[entry.name] or set()
                with os.scandir(entry.path) as children:
                    found.extend(
                        f"{entry.name}/{child.name}" + "/" * child.is_dir(follow_symlinks=False)
                        for child in sorted(children, key=lambda c: c.name)
                        if child.name not in inside or not child.is_file(follow_symlinks=False))
    return found


def ownership_problem(directory: Path) -> str | None:
    """Why `directory` is not provably a snim-batch output, or None when it is: its
    manifest.json was written by snim-batch (run_id, versions, outputs) and lists every entry
    in it, and every file in each directory it lists."""
    try:
        manifest = json.loads((directory / MANIFEST).read_bytes())
    except FileNotFoundError:
        return f"no {MANIFEST}"
    except (OSError, ValueError, RecursionError) as exc:
        return f"unreadable {MANIFEST}: {_short(exc)}"
    listed = _listed(manifest)
    if listed is None:
        return f"its {MANIFEST} was not written by snim-batch"
    try:
        unlisted = _unlisted(directory, listed)
    except OSError as exc:
        return f"cannot list it: {exc.strerror}"
    if unlisted:
        return f"holds what its {MANIFEST} does not list: {_few(unlisted)}"
    return None


def _target_state(target: Path, overwrite: bool, shown: str) -> str:
    """"missing", "empty" (an empty directory, filled without --overwrite) or "output" (a
    snim-batch output that --overwrite allows to replace); anything else raises."""
    try:
        mode = target.lstat().st_mode
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        raise OutputError(f"{shown}: cannot inspect it ({exc.strerror}); nothing was written"
                          ) from None
    if stat.S_ISLNK(mode):
        raise OutputError(f"{shown}: a symbolic link that does not resolve (a loop?); "
                          "nothing was written")
    if not stat.S_ISDIR(mode):
        raise OutputError(f"{shown}: exists and is not a directory; refusing to replace it")
    try:
        with os.scandir(target) as entries:
            if next(entries, None) is None:
                return "empty"
    except OSError as exc:
        raise OutputError(f"{shown}: cannot list it ({exc.strerror}); nothing was written"
                          ) from None
    problem = ownership_problem(target)
    if problem is not None:
        raise OutputError(f"{shown}: exists and is not provably a snim-batch output "
                          f"({problem}); refusing to replace it, nothing was written")
    if not overwrite:
        raise OutputError(f"{shown}: output already exists (pass --overwrite to replace it)")
    return "output"


def _dispose(old: Path, target: Path, tag: str, shown: str, what: str) -> str | None:
    """Delete `what` (an output at `old`) if it is still provably a snim-batch output;
    otherwise keep it under a hidden name beside `target`. Returns what to tell the user (None
    when it was deleted); never raises, since by then the run's own output is in place."""
    problem = ownership_problem(old)
    try:
        if problem is None:
            shutil.rmtree(old)
            return None
        kept = target.parent / f".{target.name}.kept-{tag}"
        os.rename(old, kept)
    except OSError as exc:
        undone = "removed" if problem is None else "moved aside"
        return f"{shown}: {what} could not be {undone} ({exc.strerror}); it is at {old}"
    return (f"{shown}: {what} is not provably a snim-batch output any more ({problem}), so "
            f"it was not deleted: it is kept as {kept}")


def _remove_stale_staging(out: Path) -> list[str]:
    """Clean up after earlier runs for this target whose process is gone: put back an output
    that a killed run had moved aside (the fallback commit without renameat2), remove
    unfinished staging directories, and remove a complete one (a new output not yet renamed,
    or the old one swapped out) only while it is provably a snim-batch output; one that is
    not is kept under a hidden `.NAME.kept-...` name. Returns what to tell the user."""
    notices: list[str] = []
    retired = []
    pattern = re.compile(rf"\.{re.escape(out.name)}\.(partial|retired)-(\d+)-(.*)")
    try:
        names = sorted(os.listdir(out.parent))
    except OSError:
        return []
    for name in names:
        match = pattern.fullmatch(name)
        if not match or _pid_alive(int(match.group(2))):
            continue
        stale = out.parent / name
        if match.group(1) == "retired":
            retired.append((stale, match.group(3)))
        elif not os.path.lexists(stale / MANIFEST):
            shutil.rmtree(stale, ignore_errors=True)
        else:
            notices.append(_dispose(stale, out, match.group(3), str(out),
                                    f"the output left by an interrupted run at {stale}") or "")
    for old, tag in retired:
        if not os.path.lexists(out):
            try:
                os.rename(old, out)
                continue
            except OSError as exc:
                notices.append(f"{out}: cannot put back the output at {old} ({exc.strerror})")
                continue
        notices.append(_dispose(old, out, tag, str(out),
                                f"the output left by an interrupted run at {old}") or "")
    return [notice for notice in notices if notice]


def _make_staging(target: Path, run_id: str, shown: str) -> Path:
    parent = target.parent
    staging = parent / f".{target.name}.partial-{os.getpid()}-{run_id}"
    for doing, make in ((f"creating the directory {parent}",
                         lambda: parent.mkdir(parents=True, exist_ok=True)),
                        (f"creating the staging directory {staging}", staging.mkdir)):
        try:
            make()
        except OSError as exc:
            raise _failure(shown, doing, *_cause(exc)) from None
    return staging


def _swap(staging: Path, target: Path) -> Path:
    """Swap the new output in for the old one; returns where the old one now is."""
    if _exchange(staging, target):
        return staging
    retired = staging.with_name(staging.name.replace(".partial-", ".retired-", 1))
    os.rename(target, retired)
    try:
        os.rename(staging, target)
    except OSError:
        os.rename(retired, target)
        raise
    return retired


def _commit(staging: Path, target: Path, overwrite: bool, shown: str) -> Path | None:
    """Put the finished `staging` at `target`; returns where the replaced output now is (None
    when there was none). A missing target is created atomically and never over an output
    another run committed meanwhile: that one is then judged like any existing output."""
    for _ in range(_COMMIT_ATTEMPTS):
        state = _target_state(target, overwrite, shown)
        try:
            if state == "missing":
                _create(staging, target)
                return None
            if state == "empty":
                os.rename(staging, target)  # the kernel refuses if it is no longer empty
                return None
            return _swap(staging, target)
        except OSError as exc:
            if exc.errno not in (*_TAKEN, errno.ENOENT) or not staging.is_dir():
                raise
    raise OutputError(f"{shown}: kept changing while this run committed its output; nothing "
                      "was written")


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ignore Ctrl-C while the new output is swapped in and the old one removed: once
    started, the commit completes, so no message can say nothing was written after it was."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)


@contextmanager
def staged_output(out: Path, run_id: str, overwrite: bool,
                  notify: Callable[[str], None] = lambda message: None) -> Iterator[Path]:
    """Yield a hidden staging directory beside the output; on normal exit it replaces the
    output atomically.

    A symbolic link `out` is followed (`output_target`). An existing output is replaced only
    with `overwrite`, and only when it is provably a snim-batch output (`ownership_problem`),
    checked before any work, at the commit, and again right before it is deleted. A failed
    write names the output, the file and the cause (`writing`). The staging directory is
    removed on any exception. A run killed outright leaves only a hidden
    `.NAME.partial-PID-RUN` directory, cleaned up by the next run. `notify` gets what the
    user should know though the run succeeded (an old output kept aside).
    """
    target = output_target(out)
    shown = _output_shown(out, target)
    if not target.name:
        raise OutputError(f"{shown}: the root directory cannot be an output")
    for notice in _remove_stale_staging(target):
        notify(notice)
    _target_state(target, overwrite, shown)
    staging = _make_staging(target, run_id, shown)
    committed = False
    try:
        yield staging
        try:
            _fsync_tree(staging)
        except OSError as exc:
            raise _failure(shown, "syncing the output to disk", *_cause(exc)) from None
        with _interrupts_held():
            try:
                old = _commit(staging, target, overwrite, shown)
            except OSError as exc:
                raise _failure(shown, f"renaming {staging.name} to {target.name}",
                               *_cause(exc)) from None
            committed = True
            if old is not None:
                notice = _dispose(old, target, run_id, shown, "the replaced output")
                if notice:
                    notify(notice)
    except _WriteFailure as exc:
        raise exc.about(shown) from None
    finally:
        if not committed:
            shutil.rmtree(staging, ignore_errors=True)


def write_parquet(frame: pl.DataFrame, path: Path) -> None:
    """One output table as Parquet; a failure names the file (see `writing`)."""
    with writing(path.name):
        frame.write_parquet(path, compression="zstd", statistics=True)


def sink_parquet(frame: pl.LazyFrame, path: Path) -> None:
    """Stream a lazy frame to one Parquet file (columns computed chunk by chunk)."""
    with writing(path.name):
        frame.sink_parquet(path, compression="zstd", statistics=True)


def output_listing(directory: Path) -> list[dict[str, Any]]:
    """The manifest's `outputs` for a finished staging directory: each file with its size,
    each directory (Spark's part files) with every file in it and its size, and the
    manifest itself (written after, so without a size). A later --overwrite replaces the
    directory only while this accounts for everything in it."""
    entries: list[dict[str, Any]] = [{"name": MANIFEST, "type": "file"}]
    with os.scandir(directory) as found:
        for entry in found:
            if entry.name == MANIFEST:
                continue
            if entry.is_dir(follow_symlinks=False):
                with os.scandir(entry.path) as children:
                    files = [{"name": c.name, "size": c.stat(follow_symlinks=False).st_size}
                             for c in children]
                entries.append({"name": entry.name, "type": "directory",
                                "files": sorted(files, key=lambda f: f["name"])})
            else:
                entries.append({"name": entry.name, "type": "file",
                                "size": entry.stat(follow_symlinks=False).st_size})
    return sorted(entries, key=lambda e: e["name"])


def write_manifest(manifest: dict[str, Any], directory: Path) -> None:
    """Write `directory`/manifest.json atomically (a synced temporary file renamed over it).
    In a run it is written last: a directory without one is never a complete output."""
    tmp = directory / f".{MANIFEST}.tmp-{os.getpid()}"
    text = json.dumps(manifest, indent=2, sort_keys=False, default=str) + "\n"
    try:
        with writing(MANIFEST):
            with tmp.open("w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, directory / MANIFEST)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def add_output_file(directory: Path, name: str, data: bytes) -> Path:
    """Add (or replace) file `name` in a committed output, listed in its manifest so that a
    later --overwrite still proves the directory is a snim-batch output. The manifest is
    updated first, atomically; the file is then written in place (a file cut short by a
    kill is still listed, and the next write replaces it)."""
    manifest = read_manifest(directory)
    outputs = manifest.get("outputs")
    target = directory / name
    if isinstance(outputs, list):
        same = [e for e in outputs if (e.get("name") if isinstance(e, dict) else e) == name]
        if name == MANIFEST or any(not isinstance(e, dict) or e.get("added_by") != "report"
                                   for e in same):
            raise OutputError(f"{target}: is one of the run's own outputs; refusing to "
                              "replace it")
        manifest["outputs"] = sorted(
            [e for e in outputs if e not in same] + [
                {"name": name, "type": "file", "size": len(data), "added_by": "report"}],
            key=lambda e: e.get("name", "") if isinstance(e, dict) else e)
        try:
            write_manifest(manifest, directory)
        except OutputError as exc:
            raise OutputError(f"{directory}: {exc}") from None
    try:
        target.write_bytes(data)
    except OSError as exc:
        raise OutputError(f"{target}: cannot write ({exc.strerror})") from None
    return target


def read_manifest(directory: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except FileNotFoundError:
        raise InputError(f"{directory}: not a snim-batch output (no {MANIFEST})") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise InputError(f"{directory / MANIFEST}: unreadable manifest ({exc})") from None
    if not isinstance(manifest, dict):
        raise InputError(f"{directory / MANIFEST}: not a snim-batch manifest (not an object)")
    return manifest


def write_classic_tables(data: bytes, out: Path) -> list[Path]:
    """Classic S-Nim text -> rules.parquet + positions.parquet (wide form) in `out`."""
    from pipeline.classic import classic_to_tables

    rules, positions = classic_to_tables(data)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{out}: cannot create directory ({exc.strerror})") from None
    written = []
    for name, columns, schema in (
        ("rules.parquet", rules, {"rule_set_id": pl.Int64, "kind": pl.String,
                                  "moves": pl.List(pl.Int64)}),
        ("positions.parquet", positions, {"rule_set_id": pl.Int64, "position_id": pl.Int64,
                                          "heaps": pl.List(pl.Int64)}),
    ):
        target = out / name
        tmp = out / f".{name}.tmp"
        pl.DataFrame(columns, schema=schema).write_parquet(tmp)
        os.replace(tmp, target)
        written.append(target)
    return written
