"""CSV bytes walked as pyarrow's parser reads them, to find records, line numbers, quotes
left open and the longest record, whole (`csv_scan`) or part by part as a file streams in
(`csv_scan_part`)."""

from __future__ import annotations

from numba import njit

_QUOTE, _COMMA, _CR, _LF, _SPACE, _TAB = 34, 44, 13, 10, 32, 9
_LINE_START, _FIELD_START, _UNQUOTED, _QUOTED, _BLANK = 0, 1, 2, 3, 4
CSV_IN_QUOTES = _QUOTED  # the state `csv_scan_part` returns inside a quoted field


@njit(cache=True, nogil=True)
def _csv_walk(data, i, limit, state, records, line, open_line, quoted_break, stray_line,
              field_break, stop_after, base, line_start, start_line, longest, longest_line):
    """The walk of `csv_scan` from offset `i` with the given state, up to offset `limit`
    (bytes past it are looked at only to finish a '""' or a CRLF begun before it, or to see
    what follows a closing quote). `base` is the offset of data[0] in the file; `line_start`
    (an offset in the file) and `start_line` are where the record being walked began.
    Returns (offset reached, state, records, line, open_line, quoted_break, stray_line,
    field_break, stopped, line_start, start_line, longest, longest_line)."""
    n = data.shape[0]
    while i < limit:
        c = data[i]
        i += 1
        if state == _QUOTED:
            if c == _QUOTE:
                if i < n and data[i] == _QUOTE:
                    i += 1
                else:
                    state = _UNQUOTED
                    if (field_break and stray_line == 0 and i < n and data[i] != _COMMA
                            and data[i] != _LF and data[i] != _CR):
                        stray_line = open_line
            elif c == _LF or c == _CR:
                quoted_break = True
                field_break = True
                if c == _CR and i < n and data[i] == _LF:
                    i += 1
                line += 1
            continue
        if c == _LF or c == _CR:
            if c == _CR and i < n and data[i] == _LF:
                i += 1
            line += 1
            if base + i - line_start > longest:
                longest = base + i - line_start
                longest_line = start_line
            line_start = base + i
            start_line = line
            if state == _BLANK:
                state = _LINE_START
            elif state != _LINE_START:
                state = _LINE_START
                if records == stop_after:
                    return (i, state, records, line, open_line, quoted_break, stray_line,
                            field_break, True, line_start, start_line, longest, longest_line)
            continue
        if state == _LINE_START or state == _BLANK:
            if c == _SPACE or c == _TAB:
                state = _BLANK
                continue
            records += 1
            state = _FIELD_START if state == _LINE_START else _UNQUOTED  # after spaces: no quote
        if c == _COMMA:
            state = _FIELD_START
        elif state == _FIELD_START:
            if c == _QUOTE:
                state = _QUOTED
                open_line = line
                field_break = False
            else:
                state = _UNQUOTED
    return (i, state, records, line, open_line, quoted_break, stray_line, field_break, False,
            line_start, start_line, longest, longest_line)


@njit(cache=True, nogil=True)
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
    n = data.shape[0]
    (i, state, records, line, open_line, quoted_break, stray_line, _, stopped, line_start,
     start_line, longest, longest_line) = _csv_walk(data, start, n, _LINE_START, 0, 1, 0,
                                                    False, 0, False, stop_after, 0, start, 1,
                                                    0, 0)
    if stopped:
        return records, i, 0, quoted_break, stray_line, longest, longest_line
    if n - line_start > longest:
        longest, longest_line = n - line_start, start_line
    return (records, n, open_line if state == _QUOTED else 0, quoted_break, stray_line,
            longest, longest_line)


@njit(cache=True, nogil=True)
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
    (i, state, _, line, open_line, quoted_break, stray_line, field_break, _, line_start,
     start_line, longest, longest_line) = _csv_walk(
        data, 0, limit, state, 0, line, open_line, quoted_break, stray_line, field_break, -1,
        base, line_start, start_line, longest, longest_line)
    return (i, state, line, open_line, quoted_break, stray_line, field_break, line_start,
            start_line, longest, longest_line)


@njit(cache=True, nogil=True)
def csv_records_part(data, limit, state):
    """The non-blank records that begin in data[:limit] of a CSV file that arrives in parts,
    walked as `csv_scan` walks them, from `state` (0 at the start of the file, after its
    byte-order mark). Returns (offset reached, which may pass `limit` by the one byte of a
    '""' or CRLF; the new state; records begun). The caller keeps data[offset:] and puts it
    before the next part; the last part is walked with `limit` = len(data)."""
    (i, state, records, _, _, _, _, _, _, _, _, _, _) = _csv_walk(
        data, 0, limit, state, 0, 1, 0, False, 0, False, -1, 0, 0, 1, 0, 0)
    return i, state, records
