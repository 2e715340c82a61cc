"""A CSV file's records counted as its bytes stream past, walked as pyarrow's parser reads them
(`kernels.csv_records_part`): the count the run reconciles the rows it read with."""

from __future__ import annotations

import numpy as np

from pipeline import kernels

_BOM = b"\xef\xbb\xbf"


class CsvRecords:
    """Feed a file's bytes in order (`feed`), then `rows()`: its non-blank records less the
    header, as the reader would find them (blank lines, empty or spaces and tabs only, are no
    records; a quoted field may hold line ends)."""

    def __init__(self) -> None:
        self._carried = b""
        self._state = 0
        self._records = 0
        self._first = True

    def feed(self, part: bytes) -> None:
        self._walk(self._carried + part, last=False)

    def rows(self) -> int:
        """The data records of everything fed (the last one may lack its line end)."""
        self._walk(self._carried, last=True)
        self._carried = b""
        return max(self._records - 1, 0)

    def _walk(self, data: bytes, last: bool) -> None:
        start = 0
        if self._first:
            if len(data) < len(_BOM) and not last and _BOM.startswith(data):
                self._carried = data  # too short yet to tell a byte-order mark
                return
            start = len(_BOM) if data.startswith(_BOM) else 0
            self._first = False
        view = np.frombuffer(data, np.uint8)[start:]
        limit = view.shape[0] if last else view.shape[0] - 1
        done, self._state, records = kernels.csv_records_part(view, max(limit, 0), self._state)
        self._records += records
        self._carried = b"" if last else data[start + done:]
