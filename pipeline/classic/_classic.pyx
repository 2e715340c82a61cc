# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled part of the classic format (see the package docstring): the token reader, the
one-pass parser, the rule deduplication and the parallel answer pass, over the input's bytes
as a uint8 array."""

include "_common.pxi"
include "_sg_values.pxi"
include "_argsort.pxi"
include "_tabulate.pxi"

from cpython.bytes cimport PyBytes_FromStringAndSize
cimport openmp
from cython.parallel cimport prange
from libc.string cimport memset

# numpy is imported by the functions that return arrays, not by the module: `solve_quick`
# answers a whole input without it (a command's start would pay for its import).

# The error record's slots and kinds as C constants (`parser` checks them against `faults`).
cdef enum:
    C_CODE = 0
    C_CASE = 1
    C_TOKEN = 2
    C_POSITION = 3
    C_POSITIONS = 4
    C_VALUE = 5
    C_EXPECTED = 6
    C_READ = 7
    C_START = 8
    C_END = 9
    C_SLOTS = 10
    C_OK = 0
    C_EOF_MOVES = 1
    C_EOF_M = 2
    C_EOF_L = 3
    C_EOF_HEAPS = 4
    C_K_NEG = 5
    C_MOVE_NONPOS = 6
    C_MOVE_BIG = 7
    C_M_NEG = 8
    C_L_NEG = 9
    C_HEAP_NEG = 10
    C_TRAILING = 11
    C_NOT_INT = 12
    C_OVERFLOW = 13
    C_UNTERMINATED = 14
    C_EMPTY = 15

# Token reader verdicts (as tokens.T_*).
cdef enum:
    T_INT = 0
    T_EOF = 1
    T_NOT_INT = 2
    T_OVERFLOW = 3

ANCHOR_ROWS = 4096  # `solve` answers positions in blocks of this many rows, on all threads
cdef enum:
    _ANCHOR = 4096  # ANCHOR_ROWS, a constant to the C compiler (a cheap remainder)
cdef int64_t _INT64_MAX = 0x7FFFFFFFFFFFFFFF

cdef struct Token:
    int64_t status
    int64_t value
    int64_t start
    int64_t end


cdef struct Buf:
    const uint8_t* data
    int64_t n


cdef inline bint _checked_value(const uint8_t* buf, int64_t start, int64_t end,
                                int64_t* out) noexcept nogil:
    """The value of the digits buf[start:end] into out; False when it exceeds int64."""
    cdef int64_t v = 0
    cdef int64_t d, i
    for i in range(start, end):
        d = <int64_t>buf[i] - 48
        if v > (_INT64_MAX - d) // 10:
            return False
        v = v * 10 + d
    out[0] = v
    return True


cdef inline Token next_token(Buf b, int64_t i) noexcept nogil:
    """Read the token at or after byte i: (verdict, value, start, end). Tokens are signed
    decimal integers separated by C whitespace; `end` is the byte after the token."""
    cdef Token tok
    cdef int64_t start, d, digits = 0
    cdef int64_t v = 0
    cdef uint8_t c
    cdef bint neg = False, not_int = False, overflow = False
    while i < b.n and is_space(b.data[i]):
        i += 1
    if i >= b.n:
        tok.status = T_EOF
        tok.value = 0
        tok.start = i
        tok.end = i
        return tok
    start = i
    c = b.data[i]
    if c == 45 or c == 43:  # '-' or '+'
        neg = c == 45
        i += 1
    while i < b.n:
        c = b.data[i]
        d = <int64_t>c - 48
        if 0 <= d <= 9:
            v = v * 10 + d  # may wrap past 18 digits: recomputed below
            digits += 1
        elif is_space(c):
            break
        else:
            not_int = True
        i += 1
    if digits > 18 and not not_int:
        overflow = not _checked_value(b.data, i - digits, i, &v)
    tok.start = start
    tok.end = i
    tok.value = 0
    if not_int or digits == 0:
        tok.status = T_NOT_INT
    elif overflow:
        tok.status = T_OVERFLOW
    else:
        tok.status = T_INT
        tok.value = -v if neg else v
    return tok


cdef inline bint plain_int(Buf b, int64_t i, int64_t* value, int64_t* after) noexcept nogil:
    """A token of 1 to 18 plain digits at or after byte i: value and the byte after it. Not
    ok for any other token or at EOF, which the checked reader then handles."""
    cdef int64_t start
    cdef int64_t v = 0
    cdef uint8_t c
    while i < b.n and is_space(b.data[i]):
        i += 1
    start = i
    while i < b.n:
        c = b.data[i]
        if c < 48 or c > 57:
            break
        v = v * 10 + (<int64_t>c - 48)
        i += 1
    value[0] = v
    after[0] = i
    return not (i == start or i - start > 18 or (i < b.n and not is_space(b.data[i])))


cdef struct Parse:
    int64_t i  # byte cursor
    int64_t t  # index of the last token read
    int64_t* err


cdef inline Token _expect_int(Buf b, Parse* p) noexcept nogil:
    """The next token, counted; at EOF the token index is unchanged. A token that is not an
    int64 is recorded in the error record."""
    cdef Token tok = next_token(b, p.i)
    p.i = tok.end
    if tok.status == T_EOF:
        return tok
    p.t += 1
    if tok.status != T_INT:
        p.err[C_CODE] = C_NOT_INT if tok.status == T_NOT_INT else C_OVERFLOW
        p.err[C_TOKEN] = p.t
        p.err[C_START] = tok.start
        p.err[C_END] = tok.end
    return tok


cdef inline void _fault(int64_t* err, int64_t code, int64_t t, int64_t value) noexcept nogil:
    err[C_CODE] = code
    err[C_TOKEN] = t
    err[C_VALUE] = value


cdef inline void _ended_early(int64_t* err, int64_t code, int64_t expected,
                              int64_t read) noexcept nogil:
    err[C_CODE] = code
    err[C_EXPECTED] = expected
    err[C_READ] = read


cdef int64_t _read_moves(Buf b, Parse* p, int64_t k, int64_t max_move, int64_t* moves,
                         int64_t nmv) noexcept nogil:
    """The k moves of a case into moves[nmv:]: moves stored."""
    cdef int64_t j = 0
    cdef Token tok
    while j < k:
        tok = _expect_int(b, p)
        if tok.status == T_EOF:
            _ended_early(p.err, C_EOF_MOVES, k, j)
            break
        if tok.status != T_INT:
            break
        if tok.value <= 0 or tok.value > max_move:
            _fault(p.err, C_MOVE_NONPOS if tok.value <= 0 else C_MOVE_BIG, p.t, tok.value)
            break
        moves[nmv] = tok.value
        nmv += 1
        j += 1
    return nmv


cdef struct Rows:
    int64_t nh  # heaps read
    int64_t npos  # rows read
    int64_t top  # largest heap, or -1
    int64_t ln  # the last position's l
    # `solve_quick`'s copy of the rows (NULL: none): each row's l then its heaps as 16 bits
    uint16_t* stream
    int64_t* stream_at  # where every ANCHOR_ROWS-th row starts in it
    int64_t ns  # its length
    bint wide  # an l did not fit in 16 bits (a heap that did not shows in `top`)


cdef void _read_positions(Buf b, Parse* p, int64_t m, int64_t* heaps, int64_t* pos_off,
                          int64_t* anchors, bint keep, Rows* r) noexcept nogil:
    """The m positions of a case, `l h1..hl` each; heaps go to heaps[nh:] and row ends to
    pos_off when `keep`, and every ANCHOR_ROWS-th row's first byte to anchors; each row to
    r.stream when there is one."""
    cdef int64_t q = 0
    cdef int64_t ln = -1
    cdef int64_t top = -1
    cdef int64_t j, v, after, nh = r.nh, npos = r.npos, ns = r.ns
    cdef uint16_t* stream = r.stream
    cdef Token tok
    cdef bint ok
    while q < m:
        if npos % _ANCHOR == 0:
            anchors[npos // _ANCHOR] = p.i
            if stream != NULL:
                r.stream_at[npos // _ANCHOR] = ns
        ok = plain_int(b, p.i, &ln, &after)
        if ok:
            p.i = after
            p.t += 1
        else:
            tok = _expect_int(b, p)
            ln = tok.value
            if tok.status == T_EOF:
                p.err[C_CODE] = C_EOF_L
                break
            if tok.status != T_INT:
                break
            if ln < 0:
                _fault(p.err, C_L_NEG, p.t, ln)
                break
        if stream != NULL:
            stream[ns] = <uint16_t>ln
            r.wide = r.wide or ln > 0xFFFF
            ns += 1
        j = 0  # the fast path for heaps: plain tokens
        while j < ln:
            if not plain_int(b, p.i, &v, &after):
                break
            if keep:
                heaps[nh + j] = v
            if stream != NULL:
                stream[ns + j] = <uint16_t>v
            if v > top:
                top = v
            j += 1
            p.i = after
        nh += j
        ns += j
        p.t += j
        while j < ln:
            tok = _expect_int(b, p)
            if tok.status == T_EOF:
                _ended_early(p.err, C_EOF_HEAPS, ln, j)
                break
            if tok.status != T_INT:
                break
            if tok.value < 0:
                _fault(p.err, C_HEAP_NEG, p.t, tok.value)
                break
            if keep:
                heaps[nh] = tok.value
            if stream != NULL:
                stream[ns] = <uint16_t>tok.value
            top = max(top, tok.value)
            nh += 1
            ns += 1
            j += 1
        if p.err[C_CODE] != C_OK:
            break
        npos += 1
        if keep:
            pos_off[npos] = nh
        q += 1
    if p.err[C_CODE] != C_OK:
        p.err[C_POSITION] = q + 1
        p.err[C_POSITIONS] = m
    r.nh = nh
    r.npos = npos
    r.top = top
    r.ln = ln
    r.ns = ns


cdef void _trailing(Buf b, Parse* p) noexcept nogil:
    """After the terminating 0 (token t) only whitespace may follow; else TRAILING with the
    number of tokens that do."""
    cdef int64_t count = 0
    cdef Token tok = next_token(b, p.i)
    while tok.status != T_EOF:
        count += 1
        tok = next_token(b, tok.end)
    if count:
        _fault(p.err, C_TRAILING, p.t + 1, count)


cdef void _unterminated(Buf b, int64_t t, int64_t m, int64_t ln, int64_t* err) noexcept nogil:
    """The input ended after a whole test case, without the terminating 0 (token t is the
    last). Accepted when a line break follows token t and it is not a 0; otherwise
    UNTERMINATED, naming the token and what it was read as."""
    cdef int64_t end = b.n
    cdef int64_t start
    cdef bint line_break = False
    cdef bint zero = True
    while is_space(b.data[end - 1]):
        end -= 1
        line_break = line_break or b.data[end] == 10 or b.data[end] == 13
    start = end
    while start > 0 and not is_space(b.data[start - 1]):
        start -= 1
        zero = zero and (b.data[start] == 48 or b.data[start] == 43 or b.data[start] == 45)
    if line_break and not zero:
        return
    err[C_CODE] = C_UNTERMINATED
    err[C_TOKEN] = t
    err[C_START] = start
    err[C_END] = end
    err[C_POSITIONS] = m
    err[C_POSITION] = m
    err[C_EXPECTED] = max(ln, 0) if m > 0 else 0
    err[C_READ] = err[C_EXPECTED]


cdef struct Parsed:
    # the parser's arrays (each as long as `_bound` allows; pos_off and heaps only with keep)
    int64_t* moves
    int64_t* moves_off
    int64_t* case_off
    int64_t* case_max
    int64_t* anchors
    int64_t* pos_off
    int64_t* heaps
    int64_t* err
    uint16_t* stream  # the rows for `solve_quick` (NULL: not kept), see Rows
    int64_t* stream_at
    # how much of them was filled
    int64_t nmv  # moves
    int64_t nc  # cases
    int64_t npos  # rows
    int64_t nh  # heaps (with keep)
    int64_t ns  # the stream's length
    bint wide  # an l too large for the stream


cdef inline int64_t _bound(int64_t n) noexcept nogil:
    """Most tokens (so moves, cases, rows, heaps) n bytes can hold: each takes a byte and a
    separator."""
    return n // 2 + 2


cdef void _parse(Buf b, int64_t max_move, bint keep, Parsed* out) noexcept nogil:
    """The one pass of `parse` into out's arrays (see there)."""
    cdef Parse p
    cdef Rows rows
    cdef Token tok
    cdef int64_t nmv = 0, nc = 0
    cdef int64_t m = -1  # the last case's m
    cdef int64_t k
    cdef int64_t* err = out.err
    p.i = 0
    p.t = -1
    p.err = err
    rows.nh = 0
    rows.npos = 0
    rows.top = -1
    rows.ln = -1  # the last case's last position's l
    rows.stream = out.stream
    rows.stream_at = out.stream_at
    rows.ns = 0
    rows.wide = False
    out.moves_off[0] = 0
    out.case_off[0] = 0
    out.pos_off[0] = 0
    while True:
        tok = _expect_int(b, &p)
        k = tok.value
        if tok.status == T_EOF:
            if nc:
                _unterminated(b, p.t, m, rows.ln, p.err)
            elif p.t < 0:
                p.err[C_CODE] = C_EMPTY
            break
        if tok.status != T_INT:
            break
        if k == 0:
            _trailing(b, &p)
            break
        if k < 0:
            _fault(p.err, C_K_NEG, p.t, k)
            break
        nmv = _read_moves(b, &p, k, max_move, out.moves, nmv)
        if p.err[C_CODE] != C_OK:
            break
        tok = _expect_int(b, &p)
        m = tok.value
        if tok.status == T_EOF:
            p.err[C_CODE] = C_EOF_M
            p.err[C_EXPECTED] = k
            break
        if tok.status != T_INT:
            break
        if m < 0:
            _fault(p.err, C_M_NEG, p.t, m)
            break
        _read_positions(b, &p, m, out.heaps, out.pos_off, out.anchors, keep, &rows)
        if p.err[C_CODE] != C_OK:
            break
        out.case_max[nc] = rows.top
        nc += 1
        out.moves_off[nc] = nmv
        out.case_off[nc] = rows.npos
    # the case an error is in: the one being read; for UNTERMINATED the last one read
    err[C_CASE] = nc if err[C_CODE] == C_UNTERMINATED else nc + 1
    out.nmv = nmv
    out.nc = nc
    out.npos = rows.npos
    out.nh = rows.nh
    out.ns = rows.ns
    out.wide = rows.wide


def parse(const uint8_t[::1] buf, int64_t max_move, bint keep):
    """Parse the bytes of a classic input in one pass into flat arrays plus an error record
    (see `parser.parse`)."""
    import numpy as np

    cdef int64_t n = buf.shape[0]
    cdef int64_t bound = _bound(n)
    cdef int64_t kept = bound if keep else 1
    moves_a = np.empty(bound, np.int64)
    moves_off_a = np.empty(bound, np.int64)
    case_off_a = np.empty(bound, np.int64)
    case_max_a = np.empty(bound, np.int64)
    anchors_a = np.empty(bound // _ANCHOR + 1, np.int64)
    pos_off_a = np.empty(kept, np.int64)
    heaps_a = np.empty(kept, np.int64)
    err_a = np.zeros(C_SLOTS, np.int64)
    cdef int64_t[::1] moves = moves_a
    cdef int64_t[::1] moves_off = moves_off_a
    cdef int64_t[::1] case_off = case_off_a
    cdef int64_t[::1] case_max = case_max_a
    cdef int64_t[::1] anchors = anchors_a
    cdef int64_t[::1] pos_off = pos_off_a
    cdef int64_t[::1] heaps = heaps_a
    cdef int64_t[::1] err = err_a
    cdef Buf b
    cdef Parsed out
    b.data = &buf[0]
    b.n = n
    out.moves = &moves[0]
    out.moves_off = &moves_off[0]
    out.case_off = &case_off[0]
    out.case_max = &case_max[0]
    out.anchors = &anchors[0]
    out.pos_off = &pos_off[0]
    out.heaps = &heaps[0]
    out.err = &err[0]
    out.stream = NULL
    out.stream_at = NULL
    with nogil:
        _parse(b, max_move, keep, &out)
    # Views: the untouched tails of these over-sized buffers are never paged in.
    nc = out.nc
    npos = out.npos
    kept_rows = npos + 1 if keep else 0
    n_anchors = (npos + _ANCHOR - 1) // _ANCHOR
    return (moves_a[:out.nmv], moves_off_a[: nc + 1], case_off_a[: nc + 1],
            pos_off_a[:kept_rows], heaps_a[:out.nh if keep else 0], case_max_a[:nc],
            anchors_a[:n_anchors], err_a)


cdef int64_t _dedup(const int64_t* moves, const int64_t* moves_off, int64_t nc,
                    int64_t* canon, int64_t* rule_off, int64_t* case_rule, uint64_t* rule_hash,
                    int64_t* slots, int64_t n_slots, int64_t* order) noexcept nogil:
    """The loop of `dedup_rules` (see there): slots (n_slots, a power of two, at least 2 nc)
    all -1, order as long as moves; the number of rules, or -1 when out of memory."""
    cdef uint64_t mask = <uint64_t>(n_slots - 1)
    cdef int64_t nr = 0, top = 0
    cdef int64_t c, a0, k, j, v, q, ln, r, a
    cdef uint64_t h, idx
    cdef bint same
    rule_off[0] = 0
    for c in range(nc):
        a0 = moves_off[c]
        k = moves_off[c + 1] - a0
        if k <= 32:  # insertion sort in place in canon (no allocation per case)
            for j in range(k):
                v = moves[a0 + j]
                q = top + j
                while q > top and canon[q - 1] > v:
                    canon[q] = canon[q - 1]
                    q -= 1
                canon[q] = v
        else:
            if stable_argsort(&moves[a0], k, order) < 0:
                return -1
            for j in range(k):
                canon[top + j] = moves[a0 + order[j]]
        ln = 0
        h = 0x9E3779B97F4A7C15
        for j in range(k):
            v = canon[top + j]
            if ln == 0 or canon[top + ln - 1] != v:
                canon[top + ln] = v
                ln += 1
                h = snim_mix64(h ^ <uint64_t>v)
        idx = h & mask
        while True:
            r = slots[idx]
            if r < 0:
                slots[idx] = nr
                rule_hash[nr] = h
                case_rule[c] = nr
                top += ln
                nr += 1
                rule_off[nr] = top
                break
            if rule_hash[r] == h and rule_off[r + 1] - rule_off[r] == ln:
                a = rule_off[r]
                same = True
                for j in range(ln):
                    if canon[a + j] != canon[top + j]:
                        same = False
                        break
                if same:
                    case_rule[c] = r
                    break
            idx = (idx + 1) & mask
    return nr


cdef inline int64_t _dedup_slots(int64_t nc) noexcept nogil:
    cdef int64_t n_slots = 16
    while n_slots < 2 * nc:
        n_slots *= 2
    return n_slots


def dedup_rules(const int64_t[::1] moves, const int64_t[::1] moves_off):
    """Canonical (sorted, distinct) S per case, deduplicated by hashing: (canon, rule_off,
    case_rule), rules numbered in order of first appearance (see `solving`)."""
    import numpy as np

    cdef Py_ssize_t nc = moves_off.shape[0] - 1
    canon_a = np.empty(moves.shape[0], np.int64)
    rule_off_a = np.empty(nc + 1, np.int64)
    case_rule_a = np.empty(nc, np.int64)
    cdef int64_t[::1] canon = canon_a
    cdef int64_t[::1] rule_off = rule_off_a
    cdef int64_t[::1] case_rule = case_rule_a
    cdef uint64_t[::1] rule_hash = np.empty(max(nc, 1), np.uint64)
    cdef int64_t n_slots = _dedup_slots(nc)
    cdef int64_t[::1] slots = np.full(n_slots, -1, np.int64)
    cdef int64_t[::1] order = np.empty(max(moves.shape[0], 1), np.int64)
    cdef int64_t nr
    with nogil:
        nr = _dedup(&moves[0], &moves_off[0], nc, &canon[0], &rule_off[0], &case_rule[0],
                    &rule_hash[0], &slots[0], n_slots, &order[0])
    if nr < 0:
        raise MemoryError("dedup_rules: out of memory")
    return canon_a[:rule_off[nr]].copy(), rule_off_a[: nr + 1].copy(), case_rule_a


cdef inline int64_t _search_right(const int64_t* a, int64_t n, int64_t value) noexcept nogil:
    cdef int64_t lo = 0
    cdef int64_t hi = n
    cdef int64_t mid
    while lo < hi:
        mid = lo + (hi - lo) // 2
        if a[mid] <= value:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline int64_t _heap_sg(int64_t h, int64_t t, int64_t t_len, int64_t t_base,
                             const tval* values, const int64_t* base, const int64_t* length,
                             const int64_t* pre, const int64_t* per, const int64_t* kind,
                             int64_t* bad, int64_t blk, int64_t row, int64_t j) noexcept nogil:
    """SG of heap `h` in table t (a table's own values directly, nim, half and periods by
    `_sg_of`); the first heap of block `blk` without one is recorded in bad[3 blk:3 blk + 3]
    as (row, index in the row, heap)."""
    cdef int64_t g
    if h < t_len:
        g = <int64_t>values[t_base + h]
    else:
        g = _sg_of(h, t, values, base, length, pre, per, kind)
    if g < 0 and bad[3 * blk] < 0:
        bad[3 * blk] = row
        bad[3 * blk + 1] = j
        bad[3 * blk + 2] = h
    return g


cdef void _answer_block(Buf b, int64_t blk, const int64_t* anchors, const int64_t* moves_off,
                        const int64_t* case_off, int64_t nc, const int64_t* case_table,
                        const tval* values, const int64_t* base, const int64_t* length,
                        const int64_t* pre, const int64_t* per, const int64_t* kind,
                        uint8_t* out, int64_t* bad) noexcept nogil:
    cdef int64_t i = anchors[blk]
    cdef int64_t row = blk * _ANCHOR
    cdef int64_t n_rows = case_off[nc]
    cdef int64_t end = min(row + _ANCHOR, n_rows)
    cdef int64_t c = _search_right(case_off, nc + 1, row) - 1
    cdef int64_t q, t, ln, j, h, acc, after, t_len, t_base
    cdef Token tok
    while row < end:
        while case_off[c + 1] <= row:  # skip the next case's `k s1..sk m`
            c += 1
            for q in range(moves_off[c + 1] - moves_off[c] + 2):
                i = next_token(b, i).end
        t = case_table[c]
        # a table's own values are looked up here; nim, half and periods by _sg_of
        t_len = length[t] if kind[t] != 1 and kind[t] != 2 else 0
        t_base = base[t]
        if plain_int(b, i, &ln, &after):
            i = after
        else:
            tok = next_token(b, i)
            ln = tok.value
            i = tok.end
        acc = 0
        for j in range(ln):
            if plain_int(b, i, &h, &after):
                i = after
            else:
                tok = next_token(b, i)
                h = tok.value
                i = tok.end
            acc ^= _heap_sg(h, t, t_len, t_base, values, base, length, pre, per, kind, bad,
                            blk, row, j)
        out[row + c] = 87 if acc != 0 else 76
        row += 1


cdef void _answer_block_stream(const uint16_t* stream, const int64_t* stream_at, int64_t blk,
                               const int64_t* case_off, int64_t nc, const int64_t* case_table,
                               const tval* values, const int64_t* base, const int64_t* length,
                               const int64_t* pre, const int64_t* per, const int64_t* kind,
                               uint8_t* out, int64_t* bad) noexcept nogil:
    """`_answer_block` from the parser's stream of the rows (each l, then its heaps) rather
    than from the bytes."""
    cdef int64_t i = stream_at[blk]
    cdef int64_t row = blk * _ANCHOR
    cdef int64_t n_rows = case_off[nc]
    cdef int64_t end = min(row + _ANCHOR, n_rows)
    cdef int64_t c = _search_right(case_off, nc + 1, row) - 1
    cdef int64_t t, ln, j, h, acc, t_len, t_base
    while row < end:
        while case_off[c + 1] <= row:
            c += 1
        t = case_table[c]
        t_len = length[t] if kind[t] != 1 and kind[t] != 2 else 0
        t_base = base[t]
        ln = stream[i]
        i += 1
        acc = 0
        for j in range(ln):
            h = stream[i + j]
            acc ^= _heap_sg(h, t, t_len, t_base, values, base, length, pre, per, kind, bad,
                            blk, row, j)
        i += ln
        out[row + c] = 87 if acc != 0 else 76
        row += 1


def answers(const uint8_t[::1] buf, const int64_t[::1] anchors, const int64_t[::1] moves_off,
            const int64_t[::1] case_off, const int64_t[::1] case_table, const tval[::1] values,
            const int64_t[::1] base, const int64_t[::1] length, const int64_t[::1] pre,
            const int64_t[::1] per, const int64_t[::1] kind):
    """The answer text of a checked input and the first heap beyond its table per block
    (see `solving._answers`)."""
    import numpy as np

    cdef int64_t nc = case_table.shape[0]
    cdef int64_t n_rows = case_off[nc]
    out_a = np.empty(n_rows + nc, np.uint8)
    cdef uint8_t[::1] out = out_a
    cdef int64_t c
    for c in range(nc):
        out[case_off[c + 1] + c] = 10
    cdef Py_ssize_t n_blocks = anchors.shape[0]
    bad_a = np.full((n_blocks, 3), -1, np.int64)
    cdef int64_t[:, ::1] bad = bad_a
    cdef Buf b
    b.data = &buf[0]
    b.n = buf.shape[0]
    cdef const int64_t* an = &anchors[0]
    cdef const int64_t* mo = &moves_off[0]
    cdef const int64_t* co = &case_off[0]
    cdef const int64_t* ct = &case_table[0]
    cdef const tval* v = &values[0]
    cdef const int64_t* bs = &base[0]
    cdef const int64_t* ln = &length[0]
    cdef const int64_t* pr = &pre[0]
    cdef const int64_t* pe = &per[0]
    cdef const int64_t* kd = &kind[0]
    cdef uint8_t* op = &out[0]
    cdef int64_t* bp = &bad[0, 0]
    cdef Py_ssize_t blk
    for blk in prange(n_blocks, nogil=True, schedule="static"):
        _answer_block(b, blk, an, mo, co, nc, ct, v, bs, ln, pr, pe, kd, op, bp)
    return out_a, bad_a


cdef struct Quick:
    # what `solve_quick` allocates, freed together (NULL: not allocated)
    int64_t* moves
    int64_t* moves_off
    int64_t* case_off
    int64_t* case_max
    int64_t* anchors
    int64_t* canon
    int64_t* rule_off
    int64_t* case_rule
    uint64_t* rule_hash
    int64_t* slots
    int64_t* order
    int64_t* rule_max
    int64_t* goal
    int64_t* base
    int64_t* length
    int64_t* pre
    int64_t* per
    int64_t* kind
    int64_t* res
    int64_t* bad
    void* values
    uint8_t* out
    uint16_t* stream
    int64_t* stream_at


cdef void _free_quick(Quick* q) noexcept nogil:
    free(q.moves)
    free(q.moves_off)
    free(q.case_off)
    free(q.case_max)
    free(q.anchors)
    free(q.canon)
    free(q.rule_off)
    free(q.case_rule)
    free(q.rule_hash)
    free(q.slots)
    free(q.order)
    free(q.rule_max)
    free(q.goal)
    free(q.base)
    free(q.length)
    free(q.pre)
    free(q.per)
    free(q.kind)
    free(q.res)
    free(q.bad)
    free(q.values)
    free(q.out)
    free(q.stream)
    free(q.stream_at)


cdef inline int64_t _ops_len(int64_t ops, int64_t value_ops) noexcept nogil:
    """`grundy.Rule.ops_len`: the values `ops` operations tabulate (SG(0) is free)."""
    return 1 + max(<int64_t>0, ops) // value_ops


cdef bint _one_round(Quick* q, int64_t nr, int64_t max_table_len, int64_t max_rule_ops,
                     int64_t max_total_values, int64_t max_run_ops,
                     int64_t proof_ops) noexcept nogil:
    """The goal of each rule's table as `grundy.TableBudget.build` sets it, into q.goal, and
    whether one round builds them all (no limit of the run cuts one short): the only case
    `solve_quick` answers. A table its own limit (--cap, --max-rule-ops) cuts short is
    built as far as that limit, as `build` does; a heap beyond it sends the input back."""
    cdef int64_t values = 0, ops = 0
    cdef int64_t r, value_ops, limit, goal, room
    for r in range(nr):
        value_ops = q.rule_off[r + 1] - q.rule_off[r] + proof_ops
        limit = min(max_table_len, _ops_len(max_rule_ops, value_ops))
        goal = max(<int64_t>1, min(q.rule_max[r] + 1, limit))
        if values >= max_total_values or max_run_ops - ops <= proof_ops:
            return False
        room = min(max_total_values - values, _ops_len(max_run_ops - ops, value_ops))
        if room < goal:
            return False
        values += goal
        ops += (goal - 1) * value_ops
        q.goal[r] = goal
    return True


cdef bint _tables_and_answers(tval* values, Buf b, Quick* q, int64_t nc, int64_t nr,
                              int64_t n_anchors, int threads, bint narrow) noexcept nogil:
    """Tabulate every rule to its goal (on `threads` threads, the costliest first), then
    answer every position from the parser's stream of the rows when it holds them all
    (`narrow`: every l and heap fit in 16 bits), else from the bytes (`answers`); False
    when out of memory or when a heap lies beyond its table."""
    cdef int64_t r, j, blk, k
    cdef bint ok = True
    for r in range(nr):
        q.res[r] = -(q.goal[r] * (q.rule_off[r + 1] - q.rule_off[r]))  # costliest first
    if stable_argsort(q.res, nr, q.order) < 0:
        return False
    for j in prange(nr, schedule="dynamic", num_threads=threads):
        r = q.order[j]
        _tabulate(&q.canon[q.rule_off[r]], q.rule_off[r + 1] - q.rule_off[r],
                  &values[q.base[r]], 0, q.goal[r], &q.res[3 * r])
    for r in range(nr):
        if q.res[3 * r] < 0:
            return False
        q.pre[r] = q.res[3 * r + 1]
        q.per[r] = q.res[3 * r + 2]
        q.length[r] = q.pre[r] + q.per[r] if q.per[r] > 0 else q.res[3 * r]
        q.kind[r] = 0  # lookups.KIND_SUBTRACTION
    for blk in range(n_anchors):
        q.bad[3 * blk] = -1
    for blk in prange(n_anchors, schedule="dynamic", num_threads=threads):
        if narrow:
            _answer_block_stream(q.stream, q.stream_at, blk, q.case_off, nc, q.case_rule,
                                 values, q.base, q.length, q.pre, q.per, q.kind, q.out, q.bad)
        else:
            _answer_block(b, blk, q.anchors, q.moves_off, q.case_off, nc, q.case_rule,
                          values, q.base, q.length, q.pre, q.per, q.kind, q.out, q.bad)
    for blk in range(n_anchors):
        if q.bad[3 * blk] >= 0:
            ok = False
    return ok


cdef int64_t* _ints(int64_t n) noexcept nogil:
    return <int64_t*>malloc(max(n, <int64_t>1) * sizeof(int64_t))


def max_threads():
    """Threads a parallel kernel called from this thread runs on (OpenMP's count)."""
    return openmp.omp_get_max_threads()


def solve_quick(const uint8_t[::1] buf, int64_t max_move, int64_t max_table_len,
                int64_t max_rule_ops, int64_t max_total_values, int64_t max_run_ops,
                int64_t proof_ops, int threads):
    """The answer text (bytes) of a classic input whose tables one round of
    `grundy.TableBudget.build` under these limits builds, found as `solving.solve_classic`
    finds it, without numpy; None for any other input (an error to word, a limit in the way,
    no memory), which `solve_classic` then answers or refuses as it always has. The tables
    and the answers run on `threads` threads."""
    cdef Quick q
    cdef Parsed p
    cdef Buf b
    cdef int64_t err[C_SLOTS]
    cdef int64_t zero = 0
    cdef int64_t n = buf.shape[0]
    cdef int64_t bound = _bound(n)
    cdef int64_t nc = 0, nr = 0, n_out = 0, n_anchors = 0
    cdef int64_t r, c, total, kmax, n_slots
    cdef bint ok = False
    cdef bint narrow = False
    memset(&q, 0, sizeof(q))
    if n == 0:
        return None
    with nogil:
        for r in range(C_SLOTS):
            err[r] = 0
        b.data = &buf[0]
        b.n = n
        q.moves = _ints(bound)
        q.moves_off = _ints(bound)
        q.case_off = _ints(bound)
        q.case_max = _ints(bound)
        q.anchors = _ints(bound // _ANCHOR + 1)
        q.stream = <uint16_t*>malloc(bound * sizeof(uint16_t))
        q.stream_at = _ints(bound // _ANCHOR + 1)
        if (q.moves != NULL and q.moves_off != NULL and q.case_off != NULL
                and q.case_max != NULL and q.anchors != NULL and q.stream != NULL
                and q.stream_at != NULL):
            p.moves = q.moves
            p.stream = q.stream
            p.stream_at = q.stream_at
            p.moves_off = q.moves_off
            p.case_off = q.case_off
            p.case_max = q.case_max
            p.anchors = q.anchors
            p.pos_off = &zero
            p.heaps = NULL
            p.err = err
            _parse(b, max_move, False, &p)
            ok = err[C_CODE] == C_OK
    if not ok:
        _free_quick(&q)
        return None
    nc = p.nc
    if nc == 0:
        _free_quick(&q)
        return b""
    ok = False
    with nogil:
        n_slots = _dedup_slots(nc)
        q.canon = _ints(p.nmv)
        q.rule_off = _ints(nc + 1)
        q.case_rule = _ints(nc)
        q.rule_hash = <uint64_t*>malloc(nc * sizeof(uint64_t))
        q.slots = _ints(n_slots)
        q.order = _ints(max(p.nmv, nc))
        if (q.canon != NULL and q.rule_off != NULL and q.case_rule != NULL
                and q.rule_hash != NULL and q.slots != NULL and q.order != NULL):
            memset(q.slots, 0xFF, n_slots * sizeof(int64_t))
            nr = _dedup(q.moves, q.moves_off, nc, q.canon, q.rule_off, q.case_rule,
                        q.rule_hash, q.slots, n_slots, q.order)
            ok = nr >= 0
        if ok:
            q.rule_max = _ints(nr)
            q.goal = _ints(nr)
            q.base = _ints(nr)
            q.length = _ints(nr)
            q.pre = _ints(nr)
            q.per = _ints(nr)
            q.kind = _ints(nr)
            q.res = _ints(3 * nr)
            n_anchors = (p.npos + _ANCHOR - 1) // _ANCHOR
            q.bad = _ints(3 * n_anchors)
            n_out = p.npos + nc
            q.out = <uint8_t*>malloc(n_out)
            ok = (q.rule_max != NULL and q.goal != NULL and q.base != NULL
                  and q.length != NULL and q.pre != NULL and q.per != NULL and q.kind != NULL
                  and q.res != NULL and q.bad != NULL and q.out != NULL)
        if ok:
            for r in range(nr):
                q.rule_max[r] = -1
            narrow = not p.wide
            for c in range(nc):
                r = q.case_rule[c]
                q.rule_max[r] = max(q.rule_max[r], q.case_max[c])
                narrow = narrow and q.case_max[c] <= 0xFFFF
            ok = _one_round(&q, nr, max_table_len, max_rule_ops, max_total_values, max_run_ops,
                            proof_ops)
        if ok:
            total = 0
            kmax = 0
            for r in range(nr):
                q.base[r] = total
                total += q.goal[r]
                kmax = max(kmax, q.rule_off[r + 1] - q.rule_off[r])
            for c in range(nc):
                q.out[q.case_off[c + 1] + c] = 10
            # the value type `grundy` gives these tables (`_value_dtype`): values <= |S|
            if kmax < 255:
                q.values = malloc(total * sizeof(uint8_t))
                ok = q.values != NULL and _tables_and_answers(
                    <uint8_t*>q.values, b, &q, nc, nr, n_anchors, threads, narrow)
            elif kmax < 65535:
                q.values = malloc(total * sizeof(uint16_t))
                ok = q.values != NULL and _tables_and_answers(
                    <uint16_t*>q.values, b, &q, nc, nr, n_anchors, threads, narrow)
            else:
                q.values = malloc(total * sizeof(uint32_t))
                ok = q.values != NULL and _tables_and_answers(
                    <uint32_t*>q.values, b, &q, nc, nr, n_anchors, threads, narrow)
    try:
        return PyBytes_FromStringAndSize(<char*>q.out, n_out) if ok else None
    finally:
        _free_quick(&q)
