"""Scratch files: frames split into parts, written as zstd Arrow IPC streams under the
staging directory and read back one part at a time."""

from __future__ import annotations

import os
import shutil
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.errors import OutputError, WriteFailure, first_line
from pipeline.io.outputs.commit import ZSTD_LEVEL, declared_text
from pipeline.io.outputs.failures import write_cause, writing
from pipeline.io.outputs.joined_parquet import JoinedParquet, JoinError


class Spill:
    """Scratch space for frames split into parts: one Arrow IPC stream per part (zstd level 1:
    as small as the default level here, and faster), appended frame by frame. A frame with
    another schema than its part's open stream (a file whose keys have another type) starts
    a new file; at most MAX_OPEN streams stay open at once."""

    MAX_OPEN = 128

    def __init__(self, directory: Path, compression: str = "zstd"):
        self.directory = directory
        self.compression = compression
        self.files: dict[int, list[Path]] = {}
        self._open: dict[int, tuple[pa.Schema, Any, Any]] = {}  # part -> schema, file, writer

    def write(self, part: int, frame: pl.DataFrame | pa.Table) -> None:
        table = frame.to_arrow() if isinstance(frame, pl.DataFrame) else frame
        stream = self._open.get(part)
        if stream is None or not stream[0].equals(table.schema):
            self._close(part)
            if len(self._open) >= self.MAX_OPEN:
                self._close(next(iter(self._open)))
            path = self.directory / _file_name(part, len(self.files.get(part, [])))
            self.files.setdefault(part, []).append(path)
            try:
                fh = path.open("wb")
                codec = {"zstd": pa.Codec("zstd", compression_level=1),
                         "uncompressed": None}.get(self.compression, self.compression)
                writer = pa.ipc.new_stream(fh, table.schema, options=pa.ipc.IpcWriteOptions(
                    compression=codec))
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

    def close_part(self, part: int) -> None:
        """Finish the part's open stream (its next frame starts a file of its own)."""
        self._close(part)

    def close(self) -> None:
        """Finish every stream (before any part is read)."""
        for part in list(self._open):
            self._close(part)

    def read(self, part: int) -> list[pl.DataFrame]:
        """The part's frames back, one contiguous frame per file (grouping a frame of many
        small chunks peaked higher); each file is
        removed once read."""
        frames = []
        for path in self.files.pop(part, []):
            try:
                frames.append(pl.read_ipc_stream(path).rechunk())
                path.unlink()
            except OSError as exc:  # removed meanwhile (its output's directory deleted)
                raise _read_back_error(path, exc) from None
        return frames


    def stream(self, part: int, mapped: bool = False) -> Iterator[pa.Table]:
        """The part's record batches back as they were written, one at a time as Arrow
        tables (each file removed once read through), for reading a large part a slice at
        a time. `mapped`: the batches are views of the file's pages in the page cache (no
        copy into fresh memory), which count in the process's resident memory until no
        batch of the file is held: for parts written in files of a few record batches each
        (a part in one large file read through this way held every page read: 40M spilled
        positions, 2.5 GiB, growing)."""
        for path in self.files.pop(part, []):
            try:
                with (pa.memory_map(str(path)) if mapped else pa.OSFile(str(path))) as file, \
                        pa.ipc.open_stream(file) as reader:
                    for batch in reader:
                        yield pa.Table.from_batches([batch])
                path.unlink()
            except OSError as exc:  # removed meanwhile (its output's directory deleted)
                raise _read_back_error(path, exc) from None

    def drop(self, part: int) -> None:
        """Remove the part's files unread."""
        self._close(part)
        for path in self.files.pop(part, []):
            path.unlink(missing_ok=True)

    def path(self, name: str) -> Path:
        """A file of this name in the scratch directory, removed with it."""
        return self.directory / name

    @contextmanager
    def parquet(self, name: str, output: str, encoders: int = 2
                ) -> Iterator[Callable[[pl.DataFrame | pa.Table], None]]:
        """Write Parquet file `name` in the scratch directory frame by frame (a row group or
        more each), as the output table `output` is written (zstd, statistics); yields
        write(frame). Frames are encoded by `encoders` threads at once (`verdicts-write`),
        each into a Parquet file of its own in memory, while the caller makes the next;
        their bodies are appended in order under one footer (`JoinedParquet`: one thread
        encoding bound a spilled night's merge). write(frame) returns once fewer than
        `encoders` frames are being encoded, so the frame given `encoders` calls before is
        written and its arrays free. The way out waits for them all, and reads the joined
        footer back. A failure names `output` (`writing`)."""
        path = self.directory / name
        pending: deque[Future[pa.Buffer]] = deque()
        declared: list[dict[str, str] | None] = []  # the first frame's ARROW:schema, if any

        def encode(table: pa.Table) -> pa.Buffer:
            text = declared[0]
            stream = pa.BufferOutputStream()
            with pq.ParquetWriter(stream, table.schema, compression="zstd",
                                  compression_level=ZSTD_LEVEL, write_statistics=True,
                                  store_schema=text is None) as writer:
                if text is not None:
                    writer.add_key_value_metadata(text)
                writer.write_table(table, row_group_size=table.num_rows or None)
            return stream.getvalue()

        with writing(output), ThreadPoolExecutor(encoders, "verdicts-write") as pool, \
                open(path, "wb", buffering=0) as sink:
            joined = JoinedParquet(sink)

            def append(part: Future[pa.Buffer]) -> None:
                joined.append(memoryview(part.result()))
                _start_writeback(sink.fileno())

            try:
                def write(frame: pl.DataFrame | pa.Table) -> None:
                    table = frame.to_arrow() if isinstance(frame, pl.DataFrame) else frame
                    if not declared:
                        declared.append(declared_text(table.schema))
                    while len(pending) >= encoders:
                        append(pending.popleft())
                    pending.append(pool.submit(encode, table))

                yield write
                while pending:
                    append(pending.popleft())
                if declared:
                    joined.finish()
            except JoinError as exc:
                raise _join_failure(output, str(exc)) from None
            except BaseException:
                wait(pending)  # each encoder's arrays are the caller's until it is done
                raise
        if declared:
            _check_footer(path, joined, output)
        else:
            path.unlink()


def _check_footer(path: Path, joined: JoinedParquet, output: str) -> None:
    """The joined file's footer as pyarrow reads it: every part's rows and row groups, each
    column chunk after the one before it and before the footer."""
    try:
        meta = pq.read_metadata(path)
        ok = (meta.num_rows, meta.num_row_groups) == (joined.rows, joined.row_groups)
        body_end, at = path.stat().st_size - 8 - meta.serialized_size, 4
        for i in range(meta.num_row_groups):
            group = meta.row_group(i)
            for j in range(group.num_columns):
                chunk = group.column(j)
                start = (chunk.dictionary_page_offset if chunk.has_dictionary_page
                         else chunk.data_page_offset)
                ok = ok and at <= start and start + chunk.total_compressed_size <= body_end
                at = start + chunk.total_compressed_size
    except (OSError, pa.ArrowException):
        ok = False
    if not ok:
        raise _join_failure(output, f"the joined footer does not read back as the {joined.rows}"
                                    f" rows in {joined.row_groups} row groups written")


def _join_failure(output: str, cause: str) -> WriteFailure:
    """A joined Parquet file that is not whole (a defect of this program, not of the run's
    input or disk): the run fails as for any failed write, nothing committed."""
    return WriteFailure(f"{output}: {cause} while writing it", f"writing {output}", cause,
                        False, path=output)


def _start_writeback(fd: int) -> None:
    """Start writing the file's pages to disk now, without waiting for it (Linux: a dirty
    page is queued for writeback, a clean one dropped from the page cache): the commit's
    fsync of a merged verdicts file then finds little left to write, where it would wait
    for the whole file. Elsewhere, nothing."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        try:
            advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass  # advice only: the fsync still writes whatever is left


def _file_name(part: int, n: int) -> str:
    """Part `part`'s file `n`: "2-0.arrows"; a negative part (a run's later segments) as
    "s2-0.arrows", not "-2-0.arrows", which reads as an option in a message's command."""
    return f"{part}-{n}.arrows" if part >= 0 else f"s{-part}-{n}.arrows"


def _spill_error(path: Path, exc: OSError) -> OutputError:
    cause, no_space = write_cause(exc)
    return WriteFailure(f"{path}: cannot write scratch file ({exc.strerror or first_line(exc)})",
                         f"writing the scratch file {path.parent.name}/{path.name}", cause,
                         no_space, path=path)


def _read_back_error(path: Path, exc: OSError) -> OutputError:
    """A scratch file that cannot be read back (removed meanwhile with its output's directory),
    as the write failure the output's commit names: the run's output cannot be written."""
    cause, no_space = write_cause(exc)
    return WriteFailure(f"{path}: cannot read scratch file back ({cause})",
                        f"reading the scratch file {path.parent.name}/{path.name} back", cause,
                        no_space, path=path)


OPEN_FILES_RESERVE = 256  # open files a run needs besides a merge's scratch streams


def allow_open_files(streams: int) -> None:
    """Raise the process's soft limit of open files, up to its hard limit, where a merge is
    about to hold `streams` scratch files open at once (one a sorted run) beyond it: the
    usual soft limit, 1,024, is far under the usual hard one, and a night of a thousand runs
    failed with "too many open files". Left as it is where it suffices, or where the hard
    limit is lower (then the open that passes it fails, naming its file)."""
    try:
        import resource
    except ImportError:  # not on this platform
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = streams + OPEN_FILES_RESERVE
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if raised > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))


@contextmanager
def spill(staging: Path, compression: str = "zstd", name: str = ".spill") -> Iterator[Spill]:
    """A `Spill` in a scratch directory `name` inside the staging directory, removed on the
    way out (the staging directory is never published with it); `compression` is the scratch
    files' codec ("zstd" at level 1, "lz4", "uncompressed")."""
    directory = staging / name
    try:
        directory.mkdir()
    except OSError as exc:
        cause, no_space = write_cause(exc)
        raise WriteFailure(f"{directory}: cannot create scratch directory ({exc.strerror})",
                            f"creating the scratch directory {directory.name}", cause,
                            no_space, path=directory) from None
    scratch = Spill(directory, compression)
    try:
        yield scratch
    finally:
        for stream in scratch._open.values():
            # the scratch is removed: bytes a close cannot flush (a full disk) are not
            # wanted, and the error of the write that failed is the one to raise
            with suppress(OSError):
                stream[1].close()
        shutil.rmtree(directory, ignore_errors=True)
