# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled part of the classic format (see the package docstring): the token reader, the
one-pass parser, the rule deduplication and the parallel answer pass, over the input's bytes
as a uint8 array."""

include "_common.pxi"
include "_sg_values.pxi"
include "_argsort.pxi"

from cython.parallel cimport prange

import numpy as np

from pipeline.classic.faults import (
    E_CASE, E_CODE, E_END, E_EXPECTED, E_POSITION, E_POSITIONS, E_READ, E_SLOTS, E_START,
    E_TOKEN, E_VALUE, EMPTY, EOF_HEAPS, EOF_L, EOF_M, EOF_MOVES, HEAP_NEG, K_NEG, L_NEG, M_NEG,
    MOVE_BIG, MOVE_NONPOS, NOT_INT, OK, OVERFLOW, TRAILING, UNTERMINATED)

# The error record's slots and kinds as C constants (checked against `faults` below).
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

assert (E_CODE, E_CASE, E_TOKEN, E_POSITION, E_POSITIONS, E_VALUE, E_EXPECTED, E_READ,
        E_START, E_END, E_SLOTS) == tuple(range(11))
assert (OK, EOF_MOVES, EOF_M, EOF_L, EOF_HEAPS, K_NEG, MOVE_NONPOS, MOVE_BIG, M_NEG, L_NEG,
        HEAP_NEG, TRAILING, NOT_INT, OVERFLOW, UNTERMINATED, EMPTY) == tuple(range(16))

# Token reader verdicts (as tokens.T_*).
cdef enum:
    T_INT = 0
    T_EOF = 1
    T_NOT_INT = 2
    T_OVERFLOW = 3

ANCHOR_ROWS = 4096  # `solve` answers positions in blocks of this many rows, on all threads
cdef int64_t _ANCHOR = 4096
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


cdef void _read_positions(Buf b, Parse* p, int64_t m, int64_t* heaps, int64_t* pos_off,
                          int64_t* anchors, bint keep, Rows* r) noexcept nogil:
    """The m positions of a case, `l h1..hl` each; heaps go to heaps[nh:] and row ends to
    pos_off when `keep`, and every ANCHOR_ROWS-th row's first byte to anchors."""
    cdef int64_t q = 0
    cdef int64_t ln = -1
    cdef int64_t top = -1
    cdef int64_t j, v, after, nh = r.nh, npos = r.npos
    cdef Token tok
    cdef bint ok
    while q < m:
        if npos % _ANCHOR == 0:
            anchors[npos // _ANCHOR] = p.i
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
        j = 0  # the fast path for heaps: plain tokens
        while j < ln:
            if not plain_int(b, p.i, &v, &after):
                break
            if keep:
                heaps[nh + j] = v
            if v > top:
                top = v
            j += 1
            p.i = after
        nh += j
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
            top = max(top, tok.value)
            nh += 1
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


def parse(const uint8_t[::1] buf, int64_t max_move, bint keep):
    """Parse the bytes of a classic input in one pass into flat arrays plus an error record
    (see `parser.parse`)."""
    cdef int64_t n = buf.shape[0]
    cdef int64_t bound = n // 2 + 2  # every token takes a byte and a separator
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
    cdef Parse p
    cdef Rows rows
    cdef Token tok
    cdef int64_t nmv = 0, nc = 0
    cdef int64_t m = -1  # the last case's m
    cdef int64_t k
    b.data = &buf[0]
    b.n = n
    p.i = 0
    p.t = -1
    p.err = &err[0]
    rows.nh = 0
    rows.npos = 0
    rows.top = -1
    rows.ln = -1  # the last case's last position's l
    moves_off[0] = 0
    case_off[0] = 0
    pos_off[0] = 0
    with nogil:
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
            nmv = _read_moves(b, &p, k, max_move, &moves[0], nmv)
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
            _read_positions(b, &p, m, &heaps[0], &pos_off[0], &anchors[0], keep, &rows)
            if p.err[C_CODE] != C_OK:
                break
            case_max[nc] = rows.top
            nc += 1
            moves_off[nc] = nmv
            case_off[nc] = rows.npos
    # the case an error is in: the one being read; for UNTERMINATED the last one read
    err[C_CASE] = nc if err[C_CODE] == C_UNTERMINATED else nc + 1
    # Views: the untouched tails of these over-sized buffers are never paged in.
    npos = rows.npos
    kept_rows = npos + 1 if keep else 0
    n_anchors = (npos + _ANCHOR - 1) // _ANCHOR
    return (moves_a[:nmv], moves_off_a[: nc + 1], case_off_a[: nc + 1], pos_off_a[:kept_rows],
            heaps_a[:rows.nh if keep else 0], case_max_a[:nc], anchors_a[:n_anchors], err_a)


def dedup_rules(const int64_t[::1] moves, const int64_t[::1] moves_off):
    """Canonical (sorted, distinct) S per case, deduplicated by hashing: (canon, rule_off,
    case_rule), rules numbered in order of first appearance (see `solving`)."""
    cdef Py_ssize_t nc = moves_off.shape[0] - 1
    canon_a = np.empty(moves.shape[0], np.int64)
    rule_off_a = np.empty(nc + 1, np.int64)
    case_rule_a = np.empty(nc, np.int64)
    cdef int64_t[::1] canon = canon_a
    cdef int64_t[::1] rule_off = rule_off_a
    cdef int64_t[::1] case_rule = case_rule_a
    cdef uint64_t[::1] rule_hash = np.empty(max(nc, 1), np.uint64)
    cdef int64_t n_slots = 16
    while n_slots < 2 * nc:
        n_slots *= 2
    cdef int64_t[::1] slots = np.full(n_slots, -1, np.int64)
    cdef int64_t[::1] order = np.empty(max(moves.shape[0], 1), np.int64)
    cdef uint64_t mask = <uint64_t>(n_slots - 1)
    cdef int64_t nr = 0, top = 0
    cdef int64_t c, a0, k, j, v, q, ln, r, a
    cdef uint64_t h, idx
    cdef bint same
    cdef int failed = 0
    rule_off[0] = 0
    with nogil:
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
                if stable_argsort(&moves[a0], k, &order[0]) < 0:
                    failed = 1
                    break
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
    if failed:
        raise MemoryError("dedup_rules: out of memory")
    return canon_a[:top].copy(), rule_off_a[: nr + 1].copy(), case_rule_a


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
    cdef int64_t q, t, ln, j, h, g, acc, after
    cdef Token tok
    while row < end:
        while case_off[c + 1] <= row:  # skip the next case's `k s1..sk m`
            c += 1
            for q in range(moves_off[c + 1] - moves_off[c] + 2):
                i = next_token(b, i).end
        t = case_table[c]
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
            g = _sg_of(h, t, values, base, length, pre, per, kind)
            if g < 0 and bad[3 * blk] < 0:
                bad[3 * blk] = row
                bad[3 * blk + 1] = j
                bad[3 * blk + 2] = h
            acc ^= g
        out[row + c] = 87 if acc != 0 else 76
        row += 1


def answers(const uint8_t[::1] buf, const int64_t[::1] anchors, const int64_t[::1] moves_off,
            const int64_t[::1] case_off, const int64_t[::1] case_table, const tval[::1] values,
            const int64_t[::1] base, const int64_t[::1] length, const int64_t[::1] pre,
            const int64_t[::1] per, const int64_t[::1] kind):
    """The answer text of a checked input and the first heap beyond its table per block
    (see `solving._answers`)."""
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
