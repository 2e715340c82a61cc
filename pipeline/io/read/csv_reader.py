"""CSV files in batches with exact row numbers: pyarrow's streaming parser, every column as
text, after one exact scan of the bytes for encoding, quotes and line ends."""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.csv as pacsv

from pipeline import kernels
from pipeline.errors import InputError, first_line
from pipeline.io.read.files import InputFile, RawTable, Source
from pipeline.io.read.formats import compression_of
from pipeline.io.read.starts import read_start
from pipeline.io.store import object_store
from pipeline.io.store.locations import Location
from pipeline.io.store.run_cache import RunCache

_BOM = b"\xef\xbb\xbf"
_SPAN = 1 << 18  # `_short_lines`' window


_HEADER_LIMIT = 1 << 20
_BLOCK = 1 << 20  # pyarrow's default block; a record must fit in one
LONGEST_RECORD = 1 << 28  # a longer record would need blocks of more than 512 MiB


@dataclass(frozen=True)
class _TextScan:
    """What a pass over a CSV file's bytes found: the offset of the first NUL byte or invalid
    UTF-8 sequence (-1: none; binary data is never CSV) and its physical line, the physical
    line of a quote that is never closed (0: none), whether a quoted field holds a line
    break, the line of a quote that opens a field holding a line break whose closing quote
    text follows (0: none; `kernels.csv_scan`), and the bytes of the longest record and the
    line it starts on (0: every line is shorter than 2 * _SPAN bytes, which the reader's
    default block holds)."""

    bad_byte: int
    open_line: int
    quoted_break: bool
    stray_line: int = 0
    bad_line: int = 0
    longest: int = 0
    longest_line: int = 0

    def __post_init__(self) -> None:
        if self.longest < 2 * _SPAN:  # the same scan whether the lines were measured or not
            object.__setattr__(self, "longest", 0)
            object.__setattr__(self, "longest_line", 0)


def _csv_bytes(data: bytes) -> np.ndarray:
    return np.frombuffer(data, np.uint8)


def _bom_length(data: bytes) -> int:
    return len(_BOM) if data[:len(_BOM)] == _BOM else 0


def _scan_text(path: Source, cache: RunCache | None = None) -> _TextScan:
    """Check the whole file, read in parts (an object in a store: as the run's `cache` keeps
    it whole, or streamed), so a large file is never held whole, nor twice. A local file is
    read, not memory-mapped: a file an exporter rewrites in place while the run reads it then
    reads short, which the run reports as changed, where a mapped page past its new end
    would end the process (SIGBUS)."""
    if isinstance(path, Location):
        whole = None if cache is None else cache.get("object", path)
        if whole is not None:
            return _scan_bytes(whole)
        with object_store.open_stream(path) as stream:
            def read(size: int) -> bytes:
                try:
                    return stream.read(size)
                except OSError as exc:
                    raise object_store.store_error(path, exc) from None

            return _scan_parts(read)
    with path.open("rb") as fh:
        if _plain_text(fh.read):
            return _TextScan(-1, 0, False)
        fh.seek(0)
        return _scan_parts(fh.read)


def _plain_text(read: Callable[[int], bytes]) -> bool:
    """Whether the bytes `read` gives, part by part, are what `_scan_bytes` passes without its
    compiled scan: no NUL byte, UTF-8, no quote, every line shorter than 2 * _SPAN bytes (the
    windows of `_short_lines`, as the parts are whole windows). Else the caller scans again,
    from the start, to say where (`_scan_parts`)."""
    if _PART % _SPAN:  # parts that are not whole windows: the full scan measures the lines
        return False
    decoder = codecs.getincrementaldecoder("utf-8")()
    while True:
        part = read(_PART)
        last = len(part) < _PART
        if part.find(b"\x00") >= 0 or part.find(b'"') >= 0:
            return False
        if not (part.isascii() and not decoder.getstate()[0]):
            try:
                decoder.decode(part, final=last)
            except UnicodeDecodeError:
                return False
        if not _short_lines(part):
            return False
        if last:
            return True


def _line_at(data: bytes, offset: int, line: int = 1, step: int = 1 << 24) -> int:
    """The physical line of data[offset], when data[0] is on line `line` (LF, CRLF and CR
    each end one), counted `step` bytes at a time."""
    for start in range(0, offset, step):
        end = min(start + step, offset)
        part = data[start:end]
        line += part.count(b"\n") + part.count(b"\r") - part.count(b"\r\n")
        if end < offset and data[end - 1:end + 1] == b"\r\n":  # a CRLF across the cut
            line -= 1
    return line


def _short_lines(data: bytes) -> bool:
    """Whether every line is shorter than 2 * _SPAN bytes: each whole _SPAN-byte window holds
    a line end. A search stops at the first line end, so this reads a few bytes per window,
    not the file."""
    for start in range(0, len(data) - _SPAN + 1, _SPAN):
        if data.find(b"\n", start, start + _SPAN) < 0 and \
                data.find(b"\r", start, start + _SPAN) < 0:
            return False
    return True


def _scan_bytes(data: bytes) -> _TextScan:
    """No NUL byte, UTF-8 (plain ASCII, as most exports are, told by one vectorised maximum;
    other text decoded in 16 MiB slices), quotes and the longest record by a compiled scan
    of the bytes (without quotes, and with no long line, lines are records: no scan)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    nul = data.find(b"\x00")
    if nul >= 0:
        return _TextScan(nul, 0, False, bad_line=_line_at(data, nul))
    view = _csv_bytes(data)
    try:  # the map cannot close while an array still points into it, even on Ctrl-C
        ascii_only = view.shape[0] == 0 or int(view.max()) < 0x80
    finally:
        del view
    step = 1 << 24
    for start in range(0, 0 if ascii_only else len(data), step):
        try:
            decoder.decode(data[start:start + step], final=start + step >= len(data))
        except UnicodeDecodeError as exc:
            bad = start + exc.start
            return _TextScan(bad, 0, False, bad_line=_line_at(data, bad))
    if data.find(b'"') < 0 and _short_lines(data):
        return _TextScan(-1, 0, False)
    view = _csv_bytes(data)
    try:
        _, _, open_line, quoted_break, stray_line, longest, longest_line = kernels.csv_scan(
            view, _bom_length(data), 0)
    finally:
        del view
    return _TextScan(-1, open_line, quoted_break, stray_line, 0, longest, longest_line)


_PART = 1 << 24


def _scan_parts(read: Callable[[int], bytes]) -> _TextScan:
    """`_scan_bytes` for bytes `read` gives in 16 MiB parts (the same checks; the quote walk
    carried from part to part), never held whole. One difference: bad bytes are looked for
    part by part, so invalid UTF-8 in one part is named before a NUL byte in a later one
    (`_scan_bytes` looks for a NUL in the whole file first)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    state, line, open_line, quoted_break, stray_line, field_break = 0, 1, 0, False, 0, False
    line_start, start_line, longest, longest_line = 0, 1, 0, 0
    carried = b""
    offset = 0  # of carried[0] in the object
    first = True
    while True:
        part = read(_PART)
        last = len(part) < _PART
        nul = part.find(b"\x00")
        if nul >= 0:  # line: that of carried[0], plus the line ends before the byte
            bad = len(carried) + nul
            return _TextScan(offset + bad, 0, False,
                             bad_line=_line_at(carried + part, bad, line))
        pending = len(decoder.getstate()[0])  # bytes of a character cut by the last part
        try:
            if not (part.isascii() and pending == 0):
                decoder.decode(part, final=last)
        except UnicodeDecodeError as exc:  # exc.start counts the pending bytes first
            bad = len(carried) - pending + exc.start  # < 0: in a cut character, no line end
            return _TextScan(offset + bad, 0, False,
                             bad_line=_line_at(carried + part, max(bad, 0), line))
        data = carried + part
        start = _bom_length(data) if first else 0
        if first:
            line_start = start
        first = False
        view = _csv_bytes(data)
        limit = len(data) if last else len(data) - 1
        (done, state, line, open_line, quoted_break, stray_line, field_break, line_start,
         start_line, longest, longest_line) = kernels.csv_scan_part(
            view[start:], limit - start, state, line, open_line, quoted_break, stray_line,
            field_break, offset + start, line_start, start_line, longest, longest_line)
        if last:
            break
        carried = data[start + done:]
        offset += start + done
    if offset + len(data) - line_start > longest:  # a last record without a line end
        longest, longest_line = offset + len(data) - line_start, start_line
    return _TextScan(-1, open_line if state == kernels.CSV_IN_QUOTES else 0, quoted_break,
                     stray_line, 0, longest, longest_line)


def csv_batches(file: InputFile, batch_rows: int, *, cache: RunCache | None = None
                ) -> Iterator[RawTable]:
    """A CSV file in batches of `batch_rows` rows (the last one fewer), parsed as it streams
    (pyarrow's serial reader, every column as text), so memory holds one batch, not the file.
    Each batch carries the lines with the wrong number of fields found since the previous
    one. What the run's `cache` keeps of the file is used, then let go."""
    header, terminated, skip, scan = _checked_text(file, cache)
    if not terminated:  # the header runs to the end of the file: pyarrow finds no rows
        yield RawTable(file, pl.DataFrame(schema=dict.fromkeys(header, pl.String)),
                       np.zeros(0, np.int64), [])
        return
    bad: list[tuple[int, str, str]] = []
    reader = _open_reader(file.path, header, skip, scan, bad, cache)
    if cache is not None:
        cache.drop("object", file.path)  # the reader holds what it needs
    yield from _batches(file, reader, bad, batch_rows)


def _checked_text(file: InputFile, cache: RunCache | None
                  ) -> tuple[list[str], bool, int, _TextScan]:
    """The file's header (`_header`) and the scan of its bytes, unless they show it is no
    CSV file: empty, binary or not UTF-8, a quote never closed, a quoted field running over
    lines with text after its closing quote, or a record too long to read."""
    path = file.path
    header, terminated, skip = _header(path, cache)
    scan = _scan_text(path, cache)
    if scan.bad_byte >= 0:
        raise InputError(f"{path}: line {scan.bad_line}: not a CSV file (binary data or invalid "
                         f"UTF-8 at byte {scan.bad_byte})", path=path, row=scan.bad_line)
    if scan.open_line:
        raise _unclosed_quote(path, scan.open_line)
    if scan.stray_line:
        raise InputError(f"{path}: line {scan.stray_line}: a quoted field runs over several "
                         "lines and text follows its closing quote (an unterminated quote "
                         "that a later one closed?)", path=path, row=scan.stray_line)
    if scan.longest > LONGEST_RECORD:
        raise InputError(f"{path}: line {scan.longest_line}: a record of {scan.longest} bytes; "
                         f"records of at most {LONGEST_RECORD >> 20} MiB are read (memory)",
                         path=path, row=scan.longest_line)
    return header, terminated, skip, scan


def _unreadable(path: Source, exc: Exception) -> InputError:
    if isinstance(path, Location):
        problem = object_store.store_problem(path, exc)
        if problem is not None:
            return problem
    return InputError(f"{path}: not a readable CSV file ({first_line(exc)})", path=path)


def _open_reader(path: Source, header: list[str], skip: int, scan: _TextScan,
                 bad: list[tuple[int, str, str]], cache: RunCache | None
                 ) -> pacsv.CSVStreamingReader:
    """pyarrow's serial streaming reader of `path` from its header (after the first `skip`
    lines), every column as text, in blocks that hold the longest record; a line with the
    wrong number of fields is skipped and appended to `bad` as (row number, reason, text). A
    line of only spaces and tabs is blank: skipped, and no row, as pyarrow skips empty
    lines."""
    blank = 0

    def on_invalid(row: Any) -> str:
        nonlocal blank
        text = row.text or ""
        if row.actual_columns == 1 and not text.strip(" \t"):
            blank += 1
            return "skip"
        number = row.number - 2 - skip - blank if row.number is not None else -1  # 1-based
        fields = "field" if row.actual_columns == 1 else "fields"
        bad.append((number, f"line has {row.actual_columns} {fields}, expected "
                            f"{row.expected_columns}", text))
        return "skip"

    source: Any
    if isinstance(path, Location):
        whole = None if cache is None else cache.get("object", path)
        source = object_store.open_stream(path) if whole is None else pa.BufferReader(whole)
    try:
        if not isinstance(path, Location):  # as it is, whatever its name (`x.gz` is not gzip)
            source = pa.input_stream(str(path), compression=None)
        return pacsv.open_csv(
            source,
            read_options=pacsv.ReadOptions(
                use_threads=False, skip_rows=skip,
                block_size=max(_BLOCK, 2 * scan.longest + (1 << 16))),
            parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid,
                                             newlines_in_values=scan.quoted_break),
            convert_options=pacsv.ConvertOptions(
                column_types={name: pa.string() for name in header},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError, OSError) as exc:
        raise _unreadable(path, exc) from None


def _batches(file: InputFile, reader: pacsv.CSVStreamingReader,
             bad: list[tuple[int, str, str]], batch_rows: int) -> Iterator[RawTable]:
    """The reader's rows regrouped in batches of `batch_rows` (at least one batch), each
    with its data row numbers and the lines in `bad` found since the previous batch."""
    numbering = _RowNumbers()
    given = 0

    def emit(table: pa.Table) -> RawTable:
        nonlocal given
        rows = numbering.next(table.num_rows, [r for r, _, _ in bad[numbering.skipped:]])
        frame = _text_frame(table)
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
        except (pa.ArrowInvalid, UnicodeDecodeError, OSError) as exc:
            raise _unreadable(file.path, exc) from None
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


def _text_frame(table: pa.Table) -> pl.DataFrame:
    """The reader's table (every column text) as a polars frame, column by column: a third
    of `pl.from_arrow`'s 60-150 microseconds, which thousands of small files pay each."""
    return pl.DataFrame([pl.Series(name, table.column(name), dtype=pl.String)
                         for name in table.column_names])


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


def _unclosed_quote(path: Path, line: int) -> InputError:
    return InputError(f"{path}: line {line}: a quoted field is never closed (unterminated "
                      "quote)", path=path, row=line)


def read_header(path: Source, *, cache: RunCache | None = None) -> tuple[list[str], bool]:
    """(column names, whether a line end follows them) from the file's first record, found
    by the same scan of quotes and line ends (LF, CRLF, CR) as the rows; blank lines before
    it (empty, or only spaces and tabs) are skipped."""
    names, terminated, _ = _header(path, cache)
    return names, terminated


def _header(path: Source, cache: RunCache | None = None) -> tuple[list[str], bool, int]:
    """`read_header`, and the physical lines before the header that the reader must be told
    to skip: 0 unless one of them holds spaces or tabs (pyarrow skips only empty lines)."""
    head, size = read_start(path, _HEADER_LIMIT, cache=cache)
    if size == 0:
        raise InputError(f"{path}: empty file (expected a CSV header line)", path=path)
    if head.startswith(b"PAR1"):
        raise InputError(f"{path}: a Parquet file, not CSV (it starts with Parquet's magic "
                         f"bytes, but its name ends in {path.suffix}: rename it to .parquet)",
                         path=path)
    compressed = compression_of(head)
    if compressed is not None:
        raise InputError(f"{path}: a {compressed}-compressed file, not CSV text: inputs are read "
                         "uncompressed (CSV as text, Parquet with its own compressed pages); "
                         "decompress it first", path=path)
    whole = len(head) == size
    records, end, open_line, *_ = kernels.csv_scan(_csv_bytes(head), _bom_length(head), 1)
    if records == 0 and whole:
        raise InputError(f"{path}: no header line (the file holds only blank lines; "
                         "expected column names)", path=path)
    if open_line and whole:
        raise _unclosed_quote(path, open_line)
    terminated = not open_line and head[end - 1:end] in (b"\n", b"\r")
    if not terminated and not whole:
        raise InputError(f"{path}: the header line does not end within the first "
                         f"{_HEADER_LIMIT >> 20} MiB (is this a CSV file?)", path=path)
    first, skip = head[:end], 0
    bom = _bom_length(head)
    lead = bom + len(first[bom:]) - len(first[bom:].lstrip(b" \t\r\n"))
    start = max(first.rfind(b"\n", bom, lead), first.rfind(b"\r", bom, lead), bom - 1) + 1
    if first[bom:start].strip(b"\r\n"):
        first, skip = first[start:], _line_at(head, start) - 1
    try:
        text = first.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a CSV file (the first line is not UTF-8 text)",
                         path=path) from None
    if not text.strip():
        raise InputError(f"{path}: empty header line (expected column names)", path=path)
    names = header_names(first if terminated else first + b"\n", text, path)
    if "" in names:
        position = names.index("") + 1
        hint = " (a trailing comma?)" if position == len(names) else ""
        raise InputError(f"{path}: empty column name at position {position} of the header"
                         f"{hint}", path=path)
    if len(set(names)) != len(names):
        raise InputError(f"{path}: duplicate column names in header: {names}", path=path)
    return names, terminated, skip


def header_names(first: bytes, text: str, path: Source) -> list[str]:
    """The column names of a header record (`first`, its bytes with the line end; `text`,
    the same decoded, without a byte order mark). A line without quotes is split at its
    commas, as pyarrow's parser splits it (nothing trimmed), far more cheaply than setting up
    pyarrow's reader, which thousands of small files paid twice each; a line
    with quotes is read by pyarrow."""
    line = text.rstrip("\r\n")
    if not any(c in line for c in '"\r\n'):
        return line.split(",")
    try:
        table = pacsv.read_csv(pa.py_buffer(first), read_options=pacsv.ReadOptions(
            use_threads=False))
    except pa.ArrowInvalid as exc:
        raise InputError(f"{path}: not a readable CSV header ({first_line(exc)})",
                         path=path) from None
    return table.column_names


def csv_row_estimate(path: Source, sample: int = 1 << 22, *, cache: RunCache | None = None
                     ) -> int:
    """Exact for a file of at most `sample` bytes (its records less the header, counted as
    the parser counts them); else those of its first `sample` bytes scaled to its size."""
    head, size = read_start(path, sample, cache=cache)
    rows = max(kernels.csv_scan(_csv_bytes(head), _bom_length(head), 0)[0] - 1, 0)
    if len(head) == size:
        return rows
    return -(-size * rows // len(head))
