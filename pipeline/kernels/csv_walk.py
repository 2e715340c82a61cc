"""CSV bytes walked as pyarrow's parser reads them, to find records, line numbers, quotes
left open and the longest record, whole (`csv_scan`) or part by part as a file streams in
(`csv_scan_part`).

The walk is compiled at install time (`_csv_walk.pyx`); these take the bytes as a uint8 array
(a view of a file's bytes or of a memory map)."""

from __future__ import annotations

import numpy as np

from pipeline.kernels import _csv_walk

_QUOTE, _COMMA, _CR, _LF, _SPACE, _TAB = 34, 44, 13, 10, 32, 9
_LINE_START, _FIELD_START, _UNQUOTED, _QUOTED, _BLANK = 0, 1, 2, 3, 4
CSV_IN_QUOTES = _QUOTED  # the state `csv_scan_part` returns inside a quoted field


def csv_scan(data, start, stop_after):
    """Walk CSV bytes data[start:] the way pyarrow's parser reads them: fields split by ",",
    a '"' opens a quoted field only at the start of a field, inside one '""' is a quote and
    a lone '"' closes it (what follows, up to the next comma or line end, is plain text), a
    quote anywhere else is a literal character; lines end with LF, CRLF or CR, and blank
    lines (empty, or only spaces and tabs) are no records.

    Returns (records: non-blank records seen, the last one possibly unterminated; end: the
    offset just past the line end of record number `stop_after` (stop_after <= 0: never
    stop), else len(data); open_line: the 1-based physical line (LF, CRLF or CR each end
    one, quoted or not) of the opening quote of a field still open at `end`, else 0;
    quoted_break: whether a quoted field before `end` holds a line break; stray_line: the
    physical line of the opening quote of the first field that holds a line break and whose
    closing quote text follows (not a comma, a line end or the end), else 0: two quotes left
    open that closed each other, never valid by the strict CSV rules; longest: the bytes of
    the longest record before `end` (line breaks in quoted fields, and its own line end,
    included; a blank line counts too) and longest_line: the physical line it starts on)."""
    return _csv_walk.csv_scan(np.ascontiguousarray(data, np.uint8), int(start),
                              int(stop_after))


def csv_scan_part(data, limit, state, line, open_line, quoted_break, stray_line,
                  field_break, base, line_start, start_line, longest, longest_line):
    """`csv_scan` over a file that arrives in parts: walk data[:limit], where data[0] is at
    offset `base` in the file, from `state` (start with (0, 1, 0, False, 0, False, base, base,
    1, 0, 0)); returns (offset reached, which may pass `limit` by the one byte of a '""' or
    CRLF, and the new state, line, open_line, quoted_break, stray_line, field_break,
    line_start, start_line, longest, longest_line). The caller keeps data[offset:] and puts it
    before the next part; at the end of the file, state 3 (_QUOTED) means the quote opened on
    `open_line` is never closed, and a last record without a line end runs from `line_start`
    (on line `start_line`) to the end."""
    return _csv_walk.csv_scan_part(np.ascontiguousarray(data, np.uint8), int(limit), int(state),
                                   int(line), int(open_line), bool(quoted_break),
                                   int(stray_line), bool(field_break), int(base),
                                   int(line_start), int(start_line), int(longest),
                                   int(longest_line))


def csv_records_part(data, limit, state):
    """The non-blank records that begin in data[:limit] of a CSV file that arrives in parts,
    walked as `csv_scan` walks them, from `state` (0 at the start of the file, after its
    byte-order mark). Returns (offset reached, which may pass `limit` by the one byte of a
    '""' or CRLF; the new state; records begun). The caller keeps data[offset:] and puts it
    before the next part; the last part is walked with `limit` = len(data)."""
    return _csv_walk.csv_records_part(np.ascontiguousarray(data, np.uint8), int(limit),
                                      int(state))
