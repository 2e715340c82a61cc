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
import stat
from collections.abc import Iterator
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
    except (OSError, ValueError):
        return False
    return (isinstance(manifest, dict) and "run_id" in manifest
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
    return OutputError(f"{path}: cannot write scratch file ({exc.strerror or _short(exc)})")


@contextmanager
def spill(staging: Path) -> Iterator[Spill]:
    """A `Spill` in a scratch directory inside the staging directory, removed on the way out
    (the staging directory is never published with it)."""
    directory = staging / ".spill"
    try:
        directory.mkdir()
    except OSError as exc:
        raise OutputError(f"{directory}: cannot create scratch directory ({exc.strerror})"
                          ) from None
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

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directories (Linux renameat2); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return rc == 0


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


def _remove_stale_staging(out: Path) -> None:
    """Remove staging dirs of earlier runs for this target whose process is gone; put back an
    output that a killed run had moved aside (the fallback commit without renameat2)."""
    retired = []
    for stale in out.parent.glob(f".{out.name}.*-*"):
        match = re.fullmatch(rf"\.{re.escape(out.name)}\.(partial|retired)-(\d+)-.*", stale.name)
        if not match or _pid_alive(int(match.group(2))):
            continue
        if match.group(1) == "retired":
            retired.append(stale)
        else:
            shutil.rmtree(stale, ignore_errors=True)
    for old in sorted(retired):
        if not out.exists():
            os.rename(old, out)
        else:
            shutil.rmtree(old, ignore_errors=True)


def check_target(out: Path, overwrite: bool) -> None:
    """Fail early when the output cannot be replaced (before any work is done)."""
    if out.is_dir() and not out.is_symlink() and not any(out.iterdir()):
        return  # an empty directory made ready for the run is not an output to protect
    if out.exists() or out.is_symlink():
        if not overwrite:
            raise OutputError(f"{out}: output already exists (pass --overwrite to replace it)")
        if not out.is_dir():
            raise OutputError(f"{out}: exists and is not a directory; refusing to replace it")
        if any(out.iterdir()) and not (out / MANIFEST).exists():
            raise OutputError(f"{out}: exists and is not a snim-batch output (no {MANIFEST}); "
                              "refusing to replace it")


@contextmanager
def staged_output(out: Path, run_id: str, overwrite: bool) -> Iterator[Path]:
    """Yield a hidden staging directory beside `out`; on normal exit it replaces `out` atomically.

    The staging directory is removed on any exception. A run killed outright leaves only a
    hidden `.NAME.partial-PID-RUN` directory (no manifest), cleaned up by the next run.
    """
    out = out.absolute()
    check_target(out, overwrite)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_staging(out)
        staging = out.parent / f".{out.name}.partial-{os.getpid()}-{run_id}"
        staging.mkdir()
    except OSError as exc:
        raise OutputError(
            f"{out.parent}: cannot create output directory ({exc.strerror})") from None
    try:
        yield staging
        _fsync_tree(staging)
        if out.exists():
            check_target(out, overwrite)
            if _exchange(staging, out):
                shutil.rmtree(staging)
            else:
                retired = out.parent / f".{out.name}.retired-{os.getpid()}-{run_id}"
                os.rename(out, retired)
                os.rename(staging, out)
                shutil.rmtree(retired)
        else:
            os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_parquet(frame: pl.DataFrame, path: Path) -> None:
    frame.write_parquet(path, compression="zstd", statistics=True)


def sink_parquet(frame: pl.LazyFrame, path: Path) -> None:
    """Stream a lazy frame to one Parquet file (columns computed chunk by chunk)."""
    frame.sink_parquet(path, compression="zstd", statistics=True)


def write_manifest(manifest: dict[str, Any], directory: Path) -> None:
    """The manifest is written last: a directory without one is never a complete output."""
    tmp = directory / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, directory / MANIFEST)


def read_manifest(directory: Path) -> dict[str, Any]:
    try:
        return json.loads((directory / MANIFEST).read_text())
    except FileNotFoundError:
        raise InputError(f"{directory}: not a snim-batch output (no {MANIFEST})") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{directory / MANIFEST}: unreadable manifest ({exc})") from None


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
