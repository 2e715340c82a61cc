"""An input file as the readers and the manifest see it (`InputFile`), where it is (`Source`:
a local path or an object in a store), and a file's rows as read (`RawTable`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from pipeline.errors import InputError
from pipeline.io.read.csv_records import CsvRecords
from pipeline.io.store.locations import Location

PARQUET_SUFFIXES = (".parquet", ".pq")


CSV_SUFFIXES = (".csv",)


Source = Path | Location
"""An input file: a local path, or an object in a store (a bound remote Location)."""


@dataclass(frozen=True)
class InputFile:
    """One input file as recorded in the manifest; a local file's checksum is computed on
    first use (for positions, by the engines in a background thread while the rows are read);
    an object carries the store's etag and version instead (no second read for a checksum)."""

    path: Source
    format: str
    size: int
    etag: str | None = None
    version: str | None = None
    stamp: tuple[int, int, int, int] | None = field(default=None, repr=False, compare=False)
    """A local file's (size, mtime_ns, device, inode) when described: `changes.ensure_unchanged`
    compares (the inode tells a file renamed over it, of the same size and time)."""
    _digest: str | None = field(default=None, init=False, repr=False, compare=False)
    _csv_rows: int | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def sha256(self) -> str | None:
        if isinstance(self.path, Location):
            return None
        if self._digest is None:
            self._read_whole()
        return self._digest

    @property
    def csv_rows(self) -> int:
        """A local CSV file's data records, counted by the pass that computes its checksum
        (`csv_records.CsvRecords`), not by the reader that reads its rows."""
        assert isinstance(self.path, Path) and self.format == "csv"
        if self._csv_rows is None:
            self._read_whole()
        assert self._csv_rows is not None
        return self._csv_rows

    def _read_whole(self) -> None:
        assert isinstance(self.path, Path)
        digest = hashlib.sha256()
        records = CsvRecords() if self.format == "csv" else None
        try:
            with self.path.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
                    if records is not None:
                        records.feed(block)
        except OSError as exc:
            raise InputError(f"{self.path}: cannot read ({exc.strerror})", path=self.path) from None
        object.__setattr__(self, "_digest", digest.hexdigest())
        if records is not None:
            object.__setattr__(self, "_csv_rows", records.rows())

    def as_dict(self) -> dict[str, Any]:
        if isinstance(self.path, Location):
            return {"path": str(self.path), "format": self.format, "size": self.size,
                    "etag": self.etag, "version": self.version}
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
