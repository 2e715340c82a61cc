# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled part of `csv_walk` (see there): the walk over CSV bytes."""

include "_common.pxi"

from libc.string cimport memchr

cdef enum:
    _QUOTE = 34
    _COMMA = 44
    _CR = 13
    _LF = 10
    _SPACE = 32
    _TAB = 9
    _LINE_START = 0
    _FIELD_START = 1
    _UNQUOTED = 2
    _QUOTED = 3
    _BLANK = 4


cdef struct Walk:
    int64_t i
    int64_t state
    int64_t records
    int64_t line
    int64_t open_line
    bint quoted_break
    int64_t stray_line
    bint field_break
    bint stopped
    int64_t line_start
    int64_t start_line
    int64_t longest
    int64_t longest_line


cdef void _csv_walk(const uint8_t* data, int64_t n, int64_t limit, int64_t stop_after,
                    int64_t base, Walk* w) noexcept nogil:
    """The walk of `csv_scan` from offset w.i with the state in `w`, up to offset `limit`
    (bytes past it are looked at only to finish a '""' or a CRLF begun before it, or to see
    what follows a closing quote). `base` is the offset of data[0] in the file;
    w.line_start (an offset in the file) and w.start_line are where the record being
    walked began."""
    cdef int64_t i = w.i
    cdef int64_t state = w.state
    cdef uint8_t c
    w.stopped = False
    while i < limit:
        c = data[i]
        i += 1
        if state == _QUOTED:
            if c == _QUOTE:
                if i < n and data[i] == _QUOTE:
                    i += 1
                else:
                    state = _UNQUOTED
                    if (w.field_break and w.stray_line == 0 and i < n and data[i] != _COMMA
                            and data[i] != _LF and data[i] != _CR):
                        w.stray_line = w.open_line
            elif c == _LF or c == _CR:
                w.quoted_break = True
                w.field_break = True
                if c == _CR and i < n and data[i] == _LF:
                    i += 1
                w.line += 1
            continue
        if c == _LF or c == _CR:
            if c == _CR and i < n and data[i] == _LF:
                i += 1
            w.line += 1
            if base + i - w.line_start > w.longest:
                w.longest = base + i - w.line_start
                w.longest_line = w.start_line
            w.line_start = base + i
            w.start_line = w.line
            if state == _BLANK:
                state = _LINE_START
            elif state != _LINE_START:
                state = _LINE_START
                if w.records == stop_after:
                    w.stopped = True
                    break
            continue
        if state == _LINE_START or state == _BLANK:
            if c == _SPACE or c == _TAB:
                state = _BLANK
                continue
            w.records += 1
            state = _FIELD_START if state == _LINE_START else _UNQUOTED  # after spaces: no quote
        if c == _COMMA:
            state = _FIELD_START
        elif state == _FIELD_START:
            if c == _QUOTE:
                state = _QUOTED
                w.open_line = w.line
                w.field_break = False
            else:
                state = _UNQUOTED
    w.i = i
    w.state = state


cdef bint _plain_records(const uint8_t* data, int64_t limit, Walk* w) noexcept nogil:
    """`_csv_walk`'s records and state over data[w.i:limit] when those bytes hold no quote
    and no carriage return and the walk is not inside a quoted field: a record begins at a
    line's first byte other than a space or tab, and then runs to the next LF, found by
    memchr rather than byte by byte. False, with nothing walked, otherwise. (Lines, and the
    longest record, are not followed: only `csv_records_part` walks this way.)"""
    cdef int64_t i = w.i
    cdef int64_t state = w.state
    cdef const uint8_t* end
    cdef uint8_t c
    if state == _QUOTED or i >= limit:
        return False
    if memchr(data + i, _QUOTE, limit - i) != NULL or memchr(data + i, _CR, limit - i) != NULL:
        return False
    while i < limit:
        if state == _LINE_START or state == _BLANK:
            c = data[i]
            if c == _SPACE or c == _TAB:
                state = _BLANK
                i += 1
                continue
            if c == _LF:
                state = _LINE_START
                i += 1
                continue
            w.records += 1
            state = _UNQUOTED
        end = <const uint8_t*>memchr(data + i, _LF, limit - i)
        if end == NULL:  # the record goes on past `limit`: as the walk leaves it there
            state = _FIELD_START if data[limit - 1] == _COMMA else _UNQUOTED
            i = limit
            break
        i = end - data + 1
        state = _LINE_START
    w.i = i
    w.state = state
    return True


def csv_scan(const uint8_t[::1] data, int64_t start, int64_t stop_after):
    cdef int64_t n = data.shape[0]
    cdef Walk w
    w.i = start
    w.state = _LINE_START
    w.records = 0
    w.line = 1
    w.open_line = 0
    w.quoted_break = False
    w.stray_line = 0
    w.field_break = False
    w.line_start = start
    w.start_line = 1
    w.longest = 0
    w.longest_line = 0
    with nogil:
        _csv_walk(&data[0], n, n, stop_after, 0, &w)
    if w.stopped:
        return w.records, w.i, 0, w.quoted_break, w.stray_line, w.longest, w.longest_line
    if n - w.line_start > w.longest:
        w.longest = n - w.line_start
        w.longest_line = w.start_line
    return (w.records, n, w.open_line if w.state == _QUOTED else 0, w.quoted_break,
            w.stray_line, w.longest, w.longest_line)


def csv_scan_part(const uint8_t[::1] data, int64_t limit, int64_t state, int64_t line,
                  int64_t open_line, bint quoted_break, int64_t stray_line, bint field_break,
                  int64_t base, int64_t line_start, int64_t start_line, int64_t longest,
                  int64_t longest_line):
    cdef Walk w
    w.i = 0
    w.state = state
    w.records = 0
    w.line = line
    w.open_line = open_line
    w.quoted_break = quoted_break
    w.stray_line = stray_line
    w.field_break = field_break
    w.line_start = line_start
    w.start_line = start_line
    w.longest = longest
    w.longest_line = longest_line
    with nogil:
        _csv_walk(&data[0], data.shape[0], limit, -1, base, &w)
    return (w.i, w.state, w.line, w.open_line, w.quoted_break, w.stray_line, w.field_break,
            w.line_start, w.start_line, w.longest, w.longest_line)


def csv_records_part(const uint8_t[::1] data, int64_t limit, int64_t state):
    cdef Walk w
    w.i = 0
    w.state = state
    w.records = 0
    w.line = 1
    w.open_line = 0
    w.quoted_break = False
    w.stray_line = 0
    w.field_break = False
    w.line_start = 0
    w.start_line = 1
    w.longest = 0
    w.longest_line = 0
    with nogil:
        if not _plain_records(&data[0], limit, &w):
            _csv_walk(&data[0], data.shape[0], limit, -1, 0, &w)
    return w.i, w.state, w.records
