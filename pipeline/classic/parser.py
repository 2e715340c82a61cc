"""The classic parser, in numba: one pass over the bytes (tokenizer and structural walk
fused) into flat int64 arrays with Arrow-style offsets and an error record
(`faults`) naming the first problem in input order."""

from __future__ import annotations

import numpy as np
from numba import njit

from pipeline.classic.faults import (
    E_CASE,
    E_CODE,
    E_END,
    E_EXPECTED,
    E_POSITION,
    E_POSITIONS,
    E_READ,
    E_SLOTS,
    E_START,
    E_TOKEN,
    E_VALUE,
    EMPTY,
    EOF_HEAPS,
    EOF_L,
    EOF_M,
    EOF_MOVES,
    HEAP_NEG,
    K_NEG,
    L_NEG,
    M_NEG,
    MOVE_BIG,
    MOVE_NONPOS,
    NOT_INT,
    OK,
    OVERFLOW,
    TRAILING,
    UNTERMINATED,
)
from pipeline.classic.tokens import (
    T_EOF,
    T_INT,
    T_NOT_INT,
    is_space,
    next_token,
    plain_int,
    plain_ints,
)

ANCHOR_ROWS = 4096  # `solve` answers positions in blocks of this many rows, on all threads


@njit(cache=True, inline="always")
def _expect_int(buf, i, t, err):
    """The next token, counted: (status, value, next byte, token index); at EOF the token index
    is unchanged. A token that is not an int64 is recorded in `err`."""
    st, v, b0, i = next_token(buf, i)
    if st == T_EOF:
        return st, v, i, t
    t += 1
    if st != T_INT:
        err[E_CODE] = NOT_INT if st == T_NOT_INT else OVERFLOW
        err[E_TOKEN] = t
        err[E_START] = b0
        err[E_END] = i
    return st, v, i, t


@njit(cache=True, inline="always")
def _fault(err, code, t, value):
    """Record the error `code` at token t, whose number is `value`."""
    err[E_CODE] = code
    err[E_TOKEN] = t
    err[E_VALUE] = value


@njit(cache=True)
def _ended_early(err, code, expected, read):
    """Record that the input ended with `read` of `expected` numbers of a list read."""
    err[E_CODE] = code
    err[E_EXPECTED] = expected
    err[E_READ] = read


@njit(cache=True)
def _read_moves(buf, i, t, k, max_move, moves, nmv, err):
    """The k moves of a case into moves[nmv:]: (next byte, token index, moves stored)."""
    j = np.int64(0)
    while j < k:
        st, v, i, t = _expect_int(buf, i, t, err)
        if st == T_EOF:
            _ended_early(err, EOF_MOVES, k, j)
            break
        if st != T_INT:
            break
        if v <= 0 or v > max_move:
            _fault(err, MOVE_NONPOS if v <= 0 else MOVE_BIG, t, v)
            break
        moves[nmv] = v
        nmv += 1
        j += 1
    return i, t, nmv


@njit(cache=True)
def _read_positions(buf, i, t, m, heaps, nh, pos_off, npos, anchors, keep, err):
    """The m positions of a case, `l h1..hl` each; heaps go to heaps[nh:] and row ends to
    pos_off when `keep`, and every ANCHOR_ROWS-th row's first byte to anchors. Returns (next
    byte, token index, heaps read, rows read, largest heap or -1, the last position's l)."""
    top = np.int64(-1)
    ln = np.int64(-1)
    q = np.int64(0)
    while q < m:
        if npos % ANCHOR_ROWS == 0:
            anchors[npos // ANCHOR_ROWS] = i
        ok, ln, i_next = plain_int(buf, i)
        if ok:
            i = i_next
            t += 1
        else:
            st, ln, i, t = _expect_int(buf, i, t, err)
            if st == T_EOF:
                err[E_CODE] = EOF_L
                break
            if st != T_INT:
                break
            if ln < 0:
                _fault(err, L_NEG, t, ln)
                break
        j, i, top = plain_ints(buf, i, ln, heaps, nh, keep, top)
        nh += j
        t += j
        while j < ln:
            st, h, i, t = _expect_int(buf, i, t, err)
            if st == T_EOF:
                _ended_early(err, EOF_HEAPS, ln, j)
                break
            if st != T_INT:
                break
            if h < 0:
                _fault(err, HEAP_NEG, t, h)
                break
            if keep:
                heaps[nh] = h
            top = max(top, h)
            nh += 1
            j += 1
        if err[E_CODE] != OK:
            break
        npos += 1
        if keep:
            pos_off[npos] = nh
        q += 1
    if err[E_CODE] != OK:
        err[E_POSITION] = q + 1
        err[E_POSITIONS] = m
    return i, t, nh, npos, top, ln


@njit(cache=True)
def _trailing(buf, i, t, err):
    """After the terminating 0 (token t) only whitespace may follow; else TRAILING with the
    number of tokens that do."""
    count = 0
    st, _, _, i = next_token(buf, i)
    while st != T_EOF:
        count += 1
        st, _, _, i = next_token(buf, i)
    if count:
        _fault(err, TRAILING, t + 1, count)


@njit(cache=True)
def _unterminated(buf, t, m, ln, err):
    """The input ended after a whole test case, without the terminating 0 (token t is the
    last; m and ln are the last case's m and its last position's l). That is accepted when a
    line break follows token t and it is not a 0: a 0 may be the terminator read as m, l or
    a heap because a number before it was lost, and a token that ends the input mid-line may
    be cut short. Otherwise UNTERMINATED, naming the token and what it was read as."""
    end = buf.shape[0]
    line_break = False
    while is_space(buf[end - 1]):
        end -= 1
        line_break = line_break or buf[end] == 10 or buf[end] == 13
    start = end
    zero = True
    while start > 0 and not is_space(buf[start - 1]):
        start -= 1
        zero = zero and (buf[start] == 48 or buf[start] == 43 or buf[start] == 45)
    if line_break and not zero:
        return
    err[E_CODE] = UNTERMINATED
    err[E_TOKEN] = t
    err[E_START] = start
    err[E_END] = end
    err[E_POSITIONS] = m
    err[E_POSITION] = m
    err[E_EXPECTED] = max(ln, 0) if m > 0 else 0
    err[E_READ] = err[E_EXPECTED]


@njit(cache=True)
def parse(buf, max_move, keep):
    """Parse the bytes of a classic input in one pass into flat arrays plus an error record.

    Returns (moves, moves_off, case_off, pos_off, heaps, case_max, anchors, err): the moves of
    case c are moves[moves_off[c]:moves_off[c + 1]], its positions are rows
    case_off[c]..case_off[c + 1], its largest heap is case_max[c] (-1 when none), and row i has
    heaps heaps[pos_off[i]:pos_off[i + 1]]. Row i * ANCHOR_ROWS starts at byte anchors[i].
    Without `keep`, heaps and pos_off are empty: the input is only checked and measured.
    err[E_CODE] == OK when the input is valid; otherwise err describes the first problem in
    input order (a bad token is reported as such, whatever was expected there).
    """
    n = buf.shape[0]
    bound = n // 2 + 2  # every token takes a byte and a separator
    kept = bound if keep else 1
    moves = np.empty(bound, np.int64)
    moves_off = np.empty(bound, np.int64)
    case_off = np.empty(bound, np.int64)
    case_max = np.empty(bound, np.int64)
    anchors = np.empty(bound // ANCHOR_ROWS + 1, np.int64)
    pos_off = np.empty(kept, np.int64)
    heaps = np.empty(kept, np.int64)
    moves_off[0] = 0
    case_off[0] = 0
    pos_off[0] = 0
    err = np.zeros(E_SLOTS, np.int64)
    nmv = nc = npos = nh = 0
    m = ln = np.int64(-1)  # the last case's m and its last position's l
    i = 0  # byte cursor
    t = -1  # index of the last token read
    while True:
        st, k, i, t = _expect_int(buf, i, t, err)
        if st == T_EOF:
            if nc:
                _unterminated(buf, t, m, ln, err)
            elif t < 0:
                err[E_CODE] = EMPTY
            break
        if st != T_INT:
            break
        if k == 0:
            _trailing(buf, i, t, err)
            break
        if k < 0:
            _fault(err, K_NEG, t, k)
            break
        i, t, nmv = _read_moves(buf, i, t, k, max_move, moves, nmv, err)
        if err[E_CODE] != OK:
            break
        st, m, i, t = _expect_int(buf, i, t, err)
        if st == T_EOF:
            err[E_CODE] = EOF_M
            err[E_EXPECTED] = k
            break
        if st != T_INT:
            break
        if m < 0:
            _fault(err, M_NEG, t, m)
            break
        i, t, nh, npos, top, ln = _read_positions(buf, i, t, m, heaps, nh, pos_off, npos,
                                                   anchors, keep, err)
        if err[E_CODE] != OK:
            break
        case_max[nc] = top
        nc += 1
        moves_off[nc] = nmv
        case_off[nc] = npos
    # the case an error is in: the one being read; for UNTERMINATED the last one read
    err[E_CASE] = nc if err[E_CODE] == UNTERMINATED else nc + 1
    # Views: the untouched tails of these over-sized buffers are never paged in.
    kept_rows = npos + 1 if keep else 0
    n_anchors = (npos + ANCHOR_ROWS - 1) // ANCHOR_ROWS
    return (moves[:nmv], moves_off[: nc + 1], case_off[: nc + 1], pos_off[:kept_rows],
            heaps[:nh if keep else 0], case_max[:nc], anchors[:n_anchors], err)
