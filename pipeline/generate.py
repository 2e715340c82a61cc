"""Seeded synthetic datasets for benchmarks and tests (rules + positions, wide or long).

Besides the plain shape (integer ids, positions in id order), it makes the shapes warehouse
tables have: text rule ids (`rs00042`), UUID position ids, rows in random order, many files.
The same seed gives the same positions in every form and format, so runs can be compared.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.errors import OutputError, UsageError, brief_repr
from pipeline.events import OnEvent, RunEvent, ignore, phase, tell_committed
from pipeline.io.outputs.commit import (
    interrupts_held,
    kept_fresh,
    refuse_inside_delta_table,
    refuse_inside_snim_output,
    remove_dead_staging,
)
from pipeline.io.outputs.failures import (
    FILES_DEPTH,
    PID_WIDTH,
    refuse_long_names,
    storage_failure,
    write_cause,
)
from pipeline.limits import (
    MAX_ALL_HEAPS,
    MAX_ALL_MOVES,
    MAX_FILES,
    MAX_HEAPS,
    MAX_MOVES_PER_SET,
    MAX_POSITIONS,
    MAX_RULE_SETS,
    MAX_SHUFFLED_ROWS,
    MAX_TABLE_LEN,
)

CHUNK = 1_000_000
CHUNK_VALUES = 10_000_000  # heaps drawn at once: a chunk holds fewer positions of many heaps
MAX_VALUE = 2**63 - 2  # heaps are drawn from 0..MAX_HEAP, an int64 range with room for +1
ROW_GROUP_ROWS = 1 << 20
KEY_TYPES = ("int", "string", "uuid")
_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


@dataclass(frozen=True)
class Spec:
    positions: int
    rule_sets: int = 100
    max_heap: int = 10_000
    moves_per_set: int = 10
    max_move: int = 0
    heaps_per_position: int = 5
    form: str = "wide"
    format: str = "parquet"
    seed: int = 0
    key_type: str = "int"
    shuffle: bool = False
    files: int = 0

    def check(self) -> None:
        if self.form not in ("wide", "long"):
            raise UsageError(f"--form must be wide or long, got {brief_repr(self.form)}")
        if self.format not in ("parquet", "csv"):
            raise UsageError(f"--format must be parquet or csv, got {brief_repr(self.format)}")
        if self.key_type not in KEY_TYPES:
            raise UsageError(f"--key-type must be one of {', '.join(KEY_TYPES)}, "
                             f"got {brief_repr(self.key_type)}")
        if min(self.rule_sets, self.moves_per_set, self.max_heap) < 1 or self.positions < 0:
            raise UsageError("--rule-sets, --moves-per-set and --max-heap must be >= 1")
        if min(self.files, self.heaps_per_position, self.max_move) < 0:
            raise UsageError("--files, --heaps and --max-move must be >= 0")
        if self.max_heap > MAX_VALUE:
            raise UsageError(f"--max-heap must be at most 2^63-2 ({MAX_VALUE}), got "
                             f"{self.max_heap}")
        if self.max_move > MAX_TABLE_LEN:  # a run rejects a larger move (out_of_range)
            raise UsageError(f"--max-move must be at most 2^32-1 ({MAX_TABLE_LEN}), the "
                             f"largest move a rule may have, got {self.max_move}")
        if not 0 <= self.seed <= MAX_VALUE:
            raise UsageError(f"--seed must be in 0..2^63-2, got {self.seed}")
        for name, value, most in (("--positions", self.positions, MAX_POSITIONS),
                                  ("--heaps", self.heaps_per_position, MAX_HEAPS),
                                  ("--rule-sets", self.rule_sets, MAX_RULE_SETS),
                                  ("--moves-per-set", self.moves_per_set, MAX_MOVES_PER_SET),
                                  ("--files", self.files, MAX_FILES)):
            if value > most:
                raise UsageError(f"{name} must be at most {most:,}, got {brief_repr(value)}")
        if self.positions * max(1, self.heaps_per_position) > MAX_ALL_HEAPS:
            raise UsageError(f"--positions x --heaps must be at most {MAX_ALL_HEAPS:,}, got "
                             f"{self.positions:,} x {self.heaps_per_position:,}")
        moves = self.rule_sets * min(self.moves_per_set, self.move_top())
        if moves > MAX_ALL_MOVES:
            raise UsageError(f"--rule-sets x --moves-per-set must be at most {MAX_ALL_MOVES:,} "
                             f"(the rules table is drawn whole), got {self.rule_sets:,} x "
                             f"{self.moves_per_set:,}")
        rows = self.positions * (self.heaps_per_position if self.form == "long" else 1)
        if self.shuffle and rows > MAX_SHUFFLED_ROWS:
            raise UsageError(f"--shuffle permutes the rows in memory: at most "
                             f"{MAX_SHUFFLED_ROWS:,} rows, got {rows:,} (positions"
                             f"{' x heaps' if self.form == 'long' else ''})")

    def move_top(self) -> int:
        """The largest move drawn: --max-move, else --max-heap up to the largest move a rule
        may have."""
        return self.max_move or min(self.max_heap, MAX_TABLE_LEN)

    def file_count(self) -> int:
        """Position files: `files`, or one per CHUNK positions (at least one)."""
        return self.files or max(1, -(-self.positions // CHUNK))

    def chunk(self) -> int:
        """Positions drawn at once: CHUNK, fewer when they hold over CHUNK_VALUES heaps."""
        return max(1, min(CHUNK, CHUNK_VALUES // max(1, self.heaps_per_position)))


def rule_ids(spec: Spec) -> pl.Series:
    """1..rule_sets, or as text `rs00001`.. for the string and uuid key types."""
    ids = np.arange(1, spec.rule_sets + 1, dtype=np.int64)
    if spec.key_type == "int":
        return pl.Series("rule_set_id", ids)
    width = max(5, len(str(spec.rule_sets)))
    return pl.Series("rule_set_id", [f"rs{i:0{width}d}" for i in ids.tolist()])


def rules_frame(spec: Spec, rng: np.random.Generator) -> pl.DataFrame:
    """Rule sets of 1..moves_per_set distinct moves from 1..max_move (default max_heap)."""
    top = spec.move_top()
    moves = []
    for _ in range(spec.rule_sets):
        k = int(rng.integers(1, min(spec.moves_per_set, top) + 1))
        moves.append(np.sort(rng.choice(top, size=k, replace=False) + 1))
    offsets = np.zeros(spec.rule_sets + 1, dtype=np.int64)
    np.cumsum([m.shape[0] for m in moves], out=offsets[1:])
    values = np.concatenate(moves).astype(np.int64) if moves else np.zeros(0, np.int64)
    lists = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))
    return pl.DataFrame({
        "rule_set_id": rule_ids(spec),
        "kind": ["subtraction"] * spec.rule_sets,
        "moves": pl.Series(lists).cast(pl.List(pl.Int64)),
    })


def uuid_text(rng: np.random.Generator, n: int) -> pl.Series:
    """n random (version 4) UUIDs as text, built as bytes without a Python loop."""
    raw = rng.integers(0, 256, size=(n, 16), dtype=np.uint8)
    raw[:, 6] = (raw[:, 6] & 0x0F) | 0x40
    raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80
    digits = np.empty((n, 32), np.uint8)
    digits[:, 0::2] = _HEX[raw >> 4]
    digits[:, 1::2] = _HEX[raw & 0x0F]
    text = np.full((n, 36), ord("-"), np.uint8)
    for src, dst, width in ((0, 0, 8), (8, 9, 4), (12, 14, 4), (16, 19, 4), (20, 24, 12)):
        text[:, dst:dst + width] = digits[:, src:src + width]
    offsets = np.arange(0, 36 * n + 1, 36, dtype=np.int64)
    array = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets),
                                             pa.py_buffer(text.tobytes()))
    return pl.Series("position_id", array, dtype=pl.String)


def positions_chunk(spec: Spec, rng: np.random.Generator, start: int, n: int,
                    uuids: np.random.Generator | None = None) -> pl.DataFrame:
    """Positions start..start+n in wide form: random rule sets and heaps. UUID position ids
    come from their own generator `uuids`, so every key type draws the same positions."""
    k = spec.heaps_per_position
    ids = rng.integers(0, spec.rule_sets, size=n, dtype=np.int64)
    heaps = rng.integers(0, spec.max_heap + 1, size=n * k, dtype=np.int64)
    if spec.key_type == "uuid":
        position_id = uuid_text(uuids or np.random.default_rng([spec.seed, 1]), n)
    else:
        position_id = pl.Series("position_id", np.arange(start, start + n, dtype=np.int64))
    offsets = np.arange(n + 1, dtype=np.int64) * k
    lists = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(heaps))
    return pl.DataFrame({"rule_set_id": rule_ids(spec).gather(ids), "position_id": position_id,
                         "heaps": pl.Series(lists).cast(pl.List(pl.Int64))})


def long_form(wide: pl.DataFrame) -> pl.DataFrame:
    """One row per heap, in the order of the wide rows and their heaps (a position of no
    heaps has no row)."""
    return wide.explode("heaps", empty_as_null=False).rename({"heaps": "heap"})


def _write(frame: pl.DataFrame, path: Path, fmt: str) -> None:
    if fmt == "parquet":
        frame.write_parquet(path, row_group_size=ROW_GROUP_ROWS)
        return
    _as_text(frame).write_csv(path)


def _as_text(frame: pl.DataFrame) -> pl.DataFrame:
    """A CSV file's columns: lists as their values separated by spaces."""
    return frame.with_columns(pl.col(c).cast(pl.List(pl.String)).list.join(" ").alias(c)
                              for c, t in frame.schema.items() if isinstance(t, pl.List))


class _Part:
    """One positions file written a chunk at a time (so that a file of any size takes the
    memory of a chunk): Parquet through one writer, row groups of at most ROW_GROUP_ROWS;
    CSV with its header once."""

    def __init__(self, path: Path, fmt: str):
        self.path, self.fmt = path, fmt
        self.parquet: pq.ParquetWriter | None = None
        self.csv: BinaryIO | None = None

    def write(self, frame: pl.DataFrame) -> None:
        if self.fmt == "parquet":
            table = frame.to_arrow()
            if self.parquet is None:
                self.parquet = pq.ParquetWriter(self.path, table.schema, compression="zstd")
            self.parquet.write_table(table, row_group_size=ROW_GROUP_ROWS)
            return
        header = self.csv is None
        if self.csv is None:
            self.csv = open(self.path, "xb")  # noqa: SIM115 - closed by `close`
        _as_text(frame).write_csv(self.csv, include_header=header)

    def close(self, empty: pl.DataFrame | None = None) -> None:
        """Close the file; one that got no rows gets the columns of `empty` (if given)."""
        if empty is not None and self.parquet is None and self.csv is None:
            self.write(empty)
        for writer in (self.parquet, self.csv):
            if writer is not None:
                writer.close()
        self.parquet = self.csv = None


def _chunks(spec: Spec, rng: np.random.Generator) -> Iterator[pl.DataFrame]:
    """The positions in frames of at most CHUNK positions, in the requested form, in file
    order. Shuffled, the same rows come in a random order (of rows: in long form a position's
    heaps scatter over the files), from a generator of their own."""
    uuids = np.random.default_rng([spec.seed, 1])
    step = spec.chunk()
    chunks = (positions_chunk(spec, rng, start, min(step, spec.positions - start), uuids)
              for start in range(0, spec.positions, step))
    if spec.form == "long":
        chunks = (long_form(chunk) for chunk in chunks)
    if not spec.shuffle:
        yield from chunks
        return
    rows = pl.concat(list(chunks))
    rows = rows.gather(np.random.default_rng([spec.seed, 2]).permutation(rows.height))
    step *= max(1, spec.heaps_per_position if spec.form == "long" else 1)
    for start in range(0, rows.height, step):
        yield rows.slice(start, step)


def generate(out: Path, spec: Spec, on_event: OnEvent = ignore) -> list[Path]:
    """Write rules.<fmt> and positions/part-NNNNN.<fmt> under `out`, a new or empty directory
    (a dataset is never mixed with another's files); returns the files. They are written in a
    directory beside it (inside it, when it exists), renamed into place once complete, so a
    failed call leaves nothing (a killed one leaves its staging, removed by the next call).
    The renames hold the stop signals; `on_event` hears COMMITTED once they are done.

    Positions are split over `spec.file_count()` files of as equal a row count as possible.
    `on_event` hears the write phase and the rows written so far."""
    spec.check()
    refuse_long_names(out, "--out")
    refuse_inside_delta_table(out, str(out))
    refuse_inside_snim_output(out, str(out))
    if not out.is_dir():
        refuse_long_names(out, "--out", "its staging directory .NAME.generating-PID",
                          len("..generating-") + PID_WIDTH, FILES_DEPTH)
    try:
        if out.is_dir():  # a killed call's staging inside it (its process gone) is no content
            remove_dead_staging(out, re.compile(r"\.generating-(\d+)"))
        remove_dead_staging(out.parent,
                            re.compile(rf"\.{re.escape(out.name)}\.generating-(\d+)"))
        if out.exists() and not out.is_dir():
            raise OutputError(f"{out}: is a file, not a directory; generate writes a whole "
                              "dataset into a new or empty directory (choose another --out)")
        if out.exists() and any(out.iterdir()):
            raise OutputError(f"{out}: exists and is not an empty directory; generate writes "
                              "a whole dataset into a new or empty one (remove it, or choose "
                              "another --out)")
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{out}: cannot create directory ({exc.strerror})") from None
    inside = out.exists()  # an empty directory (`.`, a link, a mount point): staged in it
    staging = (out / f".generating-{os.getpid()}" if inside
               else out.parent / f".{out.name}.generating-{os.getpid()}")
    moved: list[Path] = []
    try:
        (staging / "positions").mkdir(parents=True)
        with phase(on_event, "write"), kept_fresh(staging):
            written = _write_dataset(staging, spec, on_event)
        with interrupts_held():  # all moved in, then a stop is only noted
            if not inside:
                staging.rename(out)
            for entry in sorted(staging.iterdir() if inside else []):
                entry.rename(out / entry.name)
                moved.append(out / entry.name)
            tell_committed(on_event, str(out))
    except (OSError, pl.exceptions.PolarsError, pa.ArrowException) as exc:
        if not isinstance(exc, OSError) and storage_failure(str(out), exc) is None:
            raise  # not the disk's doing: an internal error, as before
        for path in moved:  # put back as it was: empty
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        raise OutputError(f"{out}: cannot write the dataset ({write_cause(exc)[0]})") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [out / path.relative_to(staging) for path in written]


def _write_dataset(out: Path, spec: Spec, on_event: OnEvent) -> list[Path]:
    """The rules, then the positions streamed into their files: a chunk's rows are written
    to the file they fall in (split at the files' bounds), so that no file is held whole."""
    rng = np.random.default_rng(spec.seed)
    written = [out / f"rules.{spec.format}"]
    _write(rules_frame(spec, rng), written[0], spec.format)
    per_row = spec.heaps_per_position if spec.form == "long" else 1
    files = spec.file_count()
    rows = spec.positions * per_row

    def part(number: int) -> _Part:
        path = out / "positions" / f"part-{number:05d}.{spec.format}"
        written.append(path)
        return _Part(path, spec.format)

    empty = positions_chunk(spec, np.random.default_rng(0), 0, 0)  # a file of no rows
    empty = long_form(empty) if spec.form == "long" else empty
    current, end = part(0), rows // files  # file f holds rows [rows*f//files, rows*(f+1)//files)
    done = 0
    try:
        for chunk in _chunks(spec, rng):
            while chunk.height:
                while done == end:
                    current.close(empty)
                    number = len(written) - 1
                    current, end = part(number), rows * (number + 1) // files
                take = min(chunk.height, end - done)
                current.write(chunk.slice(0, take))
                chunk, done = chunk.slice(take), done + take
                on_event(RunEvent.progress("write", done, rows, f"write: {done:,} of {rows:,} "
                                           "rows"))
        while len(written) - 1 < files:  # no positions left for these files
            current.close(empty)
            current = part(len(written) - 1)
        current.close(empty)
    finally:
        current.close()
    return written
