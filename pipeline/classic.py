"""The classic S-Nim text format (POJ 2960 / HDU 1536): parse, solve, and convert; pure.

Input is whitespace-separated integers, a sequence of test cases

    k s1 .. sk          the subtraction set S (moves as given; duplicates allowed)
    m                   the number of positions
    l h1 .. hl          m times: a position of l heaps (l = 0 is the empty position)

ended by a test case whose k is 0; tokens after it are an error. The final 0 may be left out only
where that cannot hide a truncated input: the input must then end with a line break after its
last token, and that token must not be a 0 (read as m, l or a heap, it may be the terminator of
an input that lost a number); otherwise the error says what the last token was read as. An
input with no number at all (empty, or only whitespace) is an error too, as truncated as can be;
a lone 0 is a valid input without test cases. The
answer is one line per test case with one character per position: `W` when the player to move
wins, `L` otherwise.

Everything that touches every byte or token runs in numba: a single-pass parser over
`np.frombuffer(data, np.uint8)` (tokenizer and structural walk fused) producing flat int64 arrays
with Arrow-style offsets, and a canonicalise-and-deduplicate pass so that identical S across test
cases share one table (`grundy.TableBudget.build` up to that S's largest heap). `solve` runs the
parser without storing heaps, then answers the positions in a second, parallel pass over the
bytes. Python only loops over the distinct rule sets. Errors name the first problem in input
order. No printing, no exits, no polars.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numba import njit, prange

from pipeline import grundy, kernels
from pipeline.errors import InputError, RuleError

_WHERE = "classic input"
_INT64_MAX = np.int64(2**63 - 1)
_MAX_MOVE = grundy.MAX_TABLE_LEN
_SHOW = 24  # characters of a bad token quoted in an error message
_ANCHOR_ROWS = 4096  # `solve` answers positions in blocks of this many rows, on all threads

# The parser's error record: an int64 array whose slots (_E_*) each keep one meaning; an error
# kind fills the slots its message needs (see _MESSAGES and _error).
_E_CODE = 0  # the error kind, _OK when the input is valid
_E_CASE = 1  # test case (1-based)
_E_TOKEN = 2  # index (0-based) of the token at fault
_E_POSITION = 3  # position within the case (1-based)
_E_POSITIONS = 4  # m, the case's number of positions
_E_VALUE = 5  # the number at fault (k, a move, m, l, a heap), or how many tokens trail
_E_EXPECTED = 6  # how many moves (k) or heaps (l) were expected
_E_READ = 7  # how many of those were read
_E_START = 8  # the bytes of the token at fault are [start, end)
_E_END = 9
_E_SLOTS = 10

_OK = 0
_EOF_MOVES = 1  # input ended among the moves: expected, read
_EOF_M = 2  # input ended before m: expected (k)
_EOF_L = 3  # input ended before a position's l: position, positions
_EOF_HEAPS = 4  # input ended among a position's heaps: position, positions, expected, read
_K_NEG = 5  # value (k)
_MOVE_NONPOS = 6  # value (the move)
_MOVE_BIG = 7  # value (the move)
_M_NEG = 8  # value (m)
_L_NEG = 9  # position, positions, value (l)
_HEAP_NEG = 10  # position, positions, value (the heap)
_TRAILING = 11  # token (the first after the terminating 0), value (how many)
_NOT_INT = 12  # a token that is not an integer: start, end
_OVERFLOW = 13  # an integer that does not fit in int64: start, end
_UNTERMINATED = 14  # no terminating 0, and the end may be a cut: the last token (start, end),
#                     read as m (positions = 0), as l (expected = 0) or as heap `read`
_EMPTY = 15  # no token at all: nothing, or only whitespace (a lone 0 is a valid empty input)

# Token reader verdicts.
_T_INT = 0
_T_EOF = 1
_T_NOT_INT = 2
_T_OVERFLOW = 3


# --------------------------------------------------------------------------- numba kernels


@njit(cache=True, inline="always")
def _is_space(c):
    return c == 32 or (c >= 9 and c <= 13)


@njit(cache=True)
def _checked_value(buf, start, end):
    """The value of the digits buf[start:end] and whether it exceeds int64."""
    v = np.int64(0)
    for i in range(start, end):
        d = np.int64(buf[i]) - 48
        if v > (_INT64_MAX - d) // 10:
            return np.int64(0), True
        v = v * 10 + d
    return v, False


@njit(cache=True, inline="always")
def _next_token(buf, i):
    """Read the token at or after byte i: (verdict, value, start, end).

    Tokens are signed decimal integers separated by C whitespace (space and bytes 9-13, i.e.
    tab, newline, vertical tab, form feed, carriage return).
    `end` is the byte after the token (where the next read starts).
    """
    n = buf.shape[0]
    while i < n and _is_space(buf[i]):
        i += 1
    if i >= n:
        return _T_EOF, np.int64(0), i, i
    start = i
    c = buf[i]
    neg = False
    if c == 45 or c == 43:  # '-' or '+'
        neg = c == 45
        i += 1
    v = np.int64(0)
    digits = 0
    not_int = False
    overflow = False
    while i < n:
        c = buf[i]
        d = np.int64(c) - 48
        if d >= 0 and d <= 9:
            v = v * 10 + d  # may wrap past 18 digits: recomputed below
            digits += 1
        elif _is_space(c):
            break
        else:
            not_int = True
        i += 1
    if digits > 18 and not not_int:
        v, overflow = _checked_value(buf, i - digits, i)
    if not_int or digits == 0:
        return _T_NOT_INT, np.int64(0), start, i
    if overflow:
        return _T_OVERFLOW, np.int64(0), start, i
    return _T_INT, -v if neg else v, start, i


@njit(cache=True, inline="always")
def _plain_int(buf, i):
    """A token of 1 to 18 plain digits at or after byte i: (ok, value, byte after it). Not ok
    for any other token or at EOF, which the checked reader then handles."""
    n = buf.shape[0]
    while i < n and _is_space(buf[i]):
        i += 1
    start = i
    v = np.int64(0)
    while i < n:
        c = buf[i]
        if c < 48 or c > 57:
            break
        v = v * 10 + (np.int64(c) - 48)
        i += 1
    ok = not (i == start or i - start > 18 or (i < n and not _is_space(buf[i])))
    return ok, v, i


@njit(cache=True, inline="always")
def _plain_ints(buf, i, count, out, at, keep, top):
    """The fast path for heaps: read up to `count` plain tokens (see `_plain_int`) from byte i,
    into out[at:] when `keep`. Returns (tokens read, byte after the last one, max(top, them))."""
    j = 0
    while j < count:
        ok, v, k = _plain_int(buf, i)
        if not ok:
            break
        if keep:
            out[at + j] = v
        if v > top:
            top = v
        j += 1
        i = k
    return j, i, top


@njit(cache=True, inline="always")
def _expect_int(buf, i, t, err):
    """The next token, counted: (status, value, next byte, token index); at EOF the token index
    is unchanged. A token that is not an int64 is recorded in `err`."""
    st, v, b0, i = _next_token(buf, i)
    if st == _T_EOF:
        return st, v, i, t
    t += 1
    if st != _T_INT:
        err[_E_CODE] = _NOT_INT if st == _T_NOT_INT else _OVERFLOW
        err[_E_TOKEN] = t
        err[_E_START] = b0
        err[_E_END] = i
    return st, v, i, t


@njit(cache=True, inline="always")
def _fault(err, code, t, value):
    """Record the error `code` at token t, whose number is `value`."""
    err[_E_CODE] = code
    err[_E_TOKEN] = t
    err[_E_VALUE] = value


@njit(cache=True)
def _read_moves(buf, i, t, k, max_move, moves, nmv, err):
    """The k moves of a case into moves[nmv:]: (next byte, token index, moves stored)."""
    j = np.int64(0)
    while j < k:
        st, v, i, t = _expect_int(buf, i, t, err)
        if st == _T_EOF:
            err[_E_CODE] = _EOF_MOVES
            err[_E_EXPECTED] = k
            err[_E_READ] = j
            break
        if st != _T_INT:
            break
        if v <= 0 or v > max_move:
            _fault(err, _MOVE_NONPOS if v <= 0 else _MOVE_BIG, t, v)
            break
        moves[nmv] = v
        nmv += 1
        j += 1
    return i, t, nmv


@njit(cache=True)
def _read_positions(buf, i, t, m, heaps, nh, pos_off, npos, anchors, keep, err):
    """The m positions of a case, `l h1..hl` each; heaps go to heaps[nh:] and row ends to
    pos_off when `keep`, and every _ANCHOR_ROWS-th row's first byte to anchors. Returns (next
    byte, token index, heaps read, rows read, largest heap or -1, the last position's l)."""
    top = np.int64(-1)
    ln = np.int64(-1)
    q = np.int64(0)
    while q < m:
        if npos % _ANCHOR_ROWS == 0:
            anchors[npos // _ANCHOR_ROWS] = i
        ok, ln, i_next = _plain_int(buf, i)
        if ok:
            i = i_next
            t += 1
        else:
            st, ln, i, t = _expect_int(buf, i, t, err)
            if st == _T_EOF:
                err[_E_CODE] = _EOF_L
                break
            if st != _T_INT:
                break
            if ln < 0:
                _fault(err, _L_NEG, t, ln)
                break
        j, i, top = _plain_ints(buf, i, ln, heaps, nh, keep, top)
        nh += j
        t += j
        while j < ln:
            st, h, i, t = _expect_int(buf, i, t, err)
            if st == _T_EOF:
                err[_E_CODE] = _EOF_HEAPS
                err[_E_EXPECTED] = ln
                err[_E_READ] = j
                break
            if st != _T_INT:
                break
            if h < 0:
                _fault(err, _HEAP_NEG, t, h)
                break
            if keep:
                heaps[nh] = h
            top = max(top, h)
            nh += 1
            j += 1
        if err[_E_CODE] != _OK:
            break
        npos += 1
        if keep:
            pos_off[npos] = nh
        q += 1
    if err[_E_CODE] != _OK:
        err[_E_POSITION] = q + 1
        err[_E_POSITIONS] = m
    return i, t, nh, npos, top, ln


@njit(cache=True)
def _trailing(buf, i, t, err):
    """After the terminating 0 (token t) only whitespace may follow; else _TRAILING with the
    number of tokens that do."""
    count = 0
    st, _, _, i = _next_token(buf, i)
    while st != _T_EOF:
        count += 1
        st, _, _, i = _next_token(buf, i)
    if count:
        _fault(err, _TRAILING, t + 1, count)


@njit(cache=True)
def _unterminated(buf, t, m, ln, err):
    """The input ended after a whole test case, without the terminating 0 (token t is the
    last; m and ln are the last case's m and its last position's l). That is accepted when a
    line break follows token t and it is not a 0: a 0 may be the terminator read as m, l or
    a heap because a number before it was lost, and a token that ends the input mid-line may
    be cut short. Otherwise _UNTERMINATED, naming the token and what it was read as."""
    end = buf.shape[0]
    line_break = False
    while _is_space(buf[end - 1]):
        end -= 1
        line_break = line_break or buf[end] == 10 or buf[end] == 13
    start = end
    zero = True
    while start > 0 and not _is_space(buf[start - 1]):
        start -= 1
        zero = zero and (buf[start] == 48 or buf[start] == 43 or buf[start] == 45)
    if line_break and not zero:
        return
    err[_E_CODE] = _UNTERMINATED
    err[_E_TOKEN] = t
    err[_E_START] = start
    err[_E_END] = end
    err[_E_POSITIONS] = m
    err[_E_POSITION] = m
    err[_E_EXPECTED] = max(ln, 0) if m > 0 else 0
    err[_E_READ] = err[_E_EXPECTED]


@njit(cache=True)
def _parse(buf, max_move, keep):
    """Parse the bytes of a classic input in one pass into flat arrays plus an error record.

    Returns (moves, moves_off, case_off, pos_off, heaps, case_max, anchors, err): the moves of
    case c are moves[moves_off[c]:moves_off[c + 1]], its positions are rows
    case_off[c]..case_off[c + 1], its largest heap is case_max[c] (-1 when none), and row i has
    heaps heaps[pos_off[i]:pos_off[i + 1]]. Row i * _ANCHOR_ROWS starts at byte anchors[i].
    Without `keep`, heaps and pos_off are empty: the input is only checked and measured.
    err[_E_CODE] == _OK when the input is valid; otherwise err describes the first problem in
    input order (a bad token is reported as such, whatever was expected there).
    """
    n = buf.shape[0]
    bound = n // 2 + 2  # every token takes a byte and a separator
    kept = bound if keep else 1
    moves = np.empty(bound, np.int64)
    moves_off = np.empty(bound, np.int64)
    case_off = np.empty(bound, np.int64)
    case_max = np.empty(bound, np.int64)
    anchors = np.empty(bound // _ANCHOR_ROWS + 1, np.int64)
    pos_off = np.empty(kept, np.int64)
    heaps = np.empty(kept, np.int64)
    moves_off[0] = 0
    case_off[0] = 0
    pos_off[0] = 0
    err = np.zeros(_E_SLOTS, np.int64)
    nmv = nc = npos = nh = 0
    m = ln = np.int64(-1)  # the last case's m and its last position's l
    i = 0  # byte cursor
    t = -1  # index of the last token read
    while True:
        st, k, i, t = _expect_int(buf, i, t, err)
        if st == _T_EOF:
            if nc:
                _unterminated(buf, t, m, ln, err)
            elif t < 0:
                err[_E_CODE] = _EMPTY
            break
        if st != _T_INT:
            break
        if k == 0:
            _trailing(buf, i, t, err)
            break
        if k < 0:
            _fault(err, _K_NEG, t, k)
            break
        i, t, nmv = _read_moves(buf, i, t, k, max_move, moves, nmv, err)
        if err[_E_CODE] != _OK:
            break
        st, m, i, t = _expect_int(buf, i, t, err)
        if st == _T_EOF:
            err[_E_CODE] = _EOF_M
            err[_E_EXPECTED] = k
            break
        if st != _T_INT:
            break
        if m < 0:
            _fault(err, _M_NEG, t, m)
            break
        i, t, nh, npos, top, ln = _read_positions(buf, i, t, m, heaps, nh, pos_off, npos,
                                                   anchors, keep, err)
        if err[_E_CODE] != _OK:
            break
        case_max[nc] = top
        nc += 1
        moves_off[nc] = nmv
        case_off[nc] = npos
    # the case an error is in: the one being read; for _UNTERMINATED the last one read
    err[_E_CASE] = nc if err[_E_CODE] == _UNTERMINATED else nc + 1
    # Views: the untouched tails of these over-sized buffers are never paged in.
    kept_rows = npos + 1 if keep else 0
    return (moves[:nmv], moves_off[: nc + 1], case_off[: nc + 1], pos_off[:kept_rows],
            heaps[:nh if keep else 0], case_max[:nc], anchors[: (npos + _ANCHOR_ROWS - 1)
                                                              // _ANCHOR_ROWS], err)


@njit(cache=True)
def _dedup_rules(moves, moves_off):
    """Canonical (sorted, distinct) S per case, deduplicated by hashing.

    Returns (canon, rule_off, case_rule): rule r has moves canon[rule_off[r]:rule_off[r + 1]] and
    case c uses rule case_rule[c]; rules are numbered in order of first appearance.
    """
    nc = moves_off.shape[0] - 1
    canon = np.empty(moves.shape[0], np.int64)
    rule_off = np.empty(nc + 1, np.int64)
    rule_hash = np.empty(nc, np.uint64)
    case_rule = np.empty(nc, np.int64)
    n_slots = 16
    while n_slots < 2 * nc:
        n_slots *= 2
    slots = np.full(n_slots, -1, np.int64)
    mask = np.uint64(n_slots - 1)
    rule_off[0] = 0
    nr = 0
    top = 0
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
            canon[top: top + k] = np.sort(moves[a0: a0 + k])
        ln = 0
        h = np.uint64(0x9E3779B97F4A7C15)
        for j in range(k):
            v = canon[top + j]
            if ln == 0 or canon[top + ln - 1] != v:
                canon[top + ln] = v
                ln += 1
                h = kernels.mix64(h ^ np.uint64(v))
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
            idx = (idx + np.uint64(1)) & mask
    return canon[:top].copy(), rule_off[: nr + 1].copy(), case_rule


@njit(cache=True, parallel=True, nogil=True)
def _answers(buf, anchors, moves_off, case_off, case_table, values, base, length, pre, per, kind):
    """The answer text of a checked input: for each case, one W/L per position and a newline.

    Positions are re-read from the bytes in blocks of _ANCHOR_ROWS rows, each from its anchor,
    on all threads (a block skips the headers of the cases it runs into). Returns (text, bad):
    bad[b] = (row, heap index, heap) of the first heap in block b beyond its table (no proven
    period), row -1 when there is none.
    """
    nc = case_table.shape[0]
    n_rows = case_off[nc]
    out = np.empty(n_rows + nc, np.uint8)
    for c in range(nc):
        out[case_off[c + 1] + c] = 10
    n_blocks = anchors.shape[0]
    bad = np.full((n_blocks, 3), -1, np.int64)
    for blk in prange(n_blocks):
        i = anchors[blk]
        row = blk * _ANCHOR_ROWS
        end = min(row + _ANCHOR_ROWS, n_rows)
        c = np.searchsorted(case_off, row, side="right") - 1
        while row < end:
            while case_off[c + 1] <= row:  # skip the next case's `k s1..sk m`
                c += 1
                for _ in range(moves_off[c + 1] - moves_off[c] + 2):
                    _, _, _, i = _next_token(buf, i)
            t = case_table[c]
            _, ln, _, i = _next_token(buf, i)
            acc = np.int64(0)
            for j in range(ln):
                ok, h, k = _plain_int(buf, i)
                if ok:
                    i = k
                else:
                    _, h, _, i = _next_token(buf, i)
                g = kernels.sg_of(h, t, values, base, length, pre, per, kind)
                if g < 0 and bad[blk, 0] < 0:
                    bad[blk, 0] = row
                    bad[blk, 1] = j
                    bad[blk, 2] = h
                acc ^= g
            out[row + c] = 87 if acc != 0 else 76
            row += 1
    return out, bad


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True, eq=False)
class ClassicInput:
    """A whole classic input as flat arrays (Arrow-style offsets), int64 throughout.

    Test case c (0-based) has moves `moves[moves_offsets[c]:moves_offsets[c + 1]]` (as given),
    position rows `case_offsets[c]` .. `case_offsets[c + 1]` (exclusive), and row i has heaps
    `heaps[offsets[i]:offsets[i + 1]]`.
    """

    moves: np.ndarray
    moves_offsets: np.ndarray
    case_offsets: np.ndarray
    offsets: np.ndarray
    heaps: np.ndarray

    @property
    def n_cases(self) -> int:
        return int(self.moves_offsets.shape[0] - 1)

    @property
    def n_positions(self) -> int:
        return int(self.offsets.shape[0] - 1)


@dataclass(frozen=True, eq=False)
class ClassicCase:
    """One test case: its moves as given, and its positions as offsets + flat heaps.

    Position q has heaps `heaps[offsets[q]:offsets[q + 1]]`; offsets[0] == 0.
    """

    moves: tuple[int, ...]
    offsets: np.ndarray
    heaps: np.ndarray

    @property
    def n_positions(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def positions(self) -> list[np.ndarray]:
        """The positions as a list of int64 heap arrays (views into `heaps`)."""
        off = self.offsets.tolist()
        return [self.heaps[a:b] for a, b in zip(off[:-1], off[1:])]


def _as_buffer(data: bytes | bytearray | memoryview | str) -> np.ndarray:
    if isinstance(data, str):
        data = data.encode()
    try:
        return np.frombuffer(data, dtype=np.uint8)
    except (TypeError, ValueError) as e:
        raise InputError(f"{_WHERE}: expected bytes, got {type(data).__name__}") from e


def _token_text(buf: np.ndarray, start: int, end: int) -> str:
    raw = bytes(buf[start : min(end, start + _SHOW)]).decode("utf-8", errors="replace")
    return raw + ("..." if end - start > _SHOW else "")


class _Fault(NamedTuple):
    """The parser's error record, slot by slot (see _E_*)."""

    code: int
    case: int
    token: int
    position: int
    positions: int
    value: int
    expected: int
    read: int
    start: int
    end: int


_MESSAGES = {
    _EOF_MOVES: "{at}: expected {expected} moves after k = {expected}, input ended after {read}",
    _EOF_M: "{at}: expected m (the number of positions) after the k = {expected} moves, "
            "input ended",
    _EOF_L: "{at}: expected 'l' (the number of heaps) of position {position} of {positions}, "
            "input ended",
    _EOF_HEAPS: "{at}, position {position} of {positions}: expected {expected} heap sizes after "
                "'l', input ended after {read}",
    _K_NEG: "{at}: k = {value} ({tok}) is negative (expected the number of moves, or 0 to end)",
    _MOVE_NONPOS: "{at}: move {value} ({tok}) is not positive",
    _MOVE_BIG: "{at}: move {value} ({tok}) is larger than " + str(_MAX_MOVE),
    _M_NEG: "{at}: m = {value} ({tok}) is negative (expected the number of positions)",
    _L_NEG: "{at}, position {position} of {positions}: l = {value} ({tok}) is negative "
            "(expected a heap count)",
    _HEAP_NEG: "{at}, position {position} of {positions}: heap size {value} ({tok}) is "
               "negative",
    _TRAILING: _WHERE + ": {value} unexpected token(s) after the terminating 0, starting at "
                        "{tok}",
    _EMPTY: _WHERE + ": is empty (no number at all): expected test cases ending with a line "
                     "holding 0 (a lone 0 is an input without test cases)",
}


def _error(buf: np.ndarray, err: np.ndarray) -> InputError:
    fault = _Fault(*(int(x) for x in err))
    tok = f"token {fault.token + 1}"
    if fault.code in (_NOT_INT, _OVERFLOW):
        what = ("does not fit in a 64-bit integer" if fault.code == _OVERFLOW
                else "is not a non-negative integer")
        return InputError(f"{_WHERE}: {tok} ({_token_text(buf, fault.start, fault.end)!r}, at "
                          f"byte offset {fault.start}) {what} (in test case {fault.case})")
    if fault.code == _UNTERMINATED:
        return InputError(_unterminated_message(buf, fault, tok))
    return InputError(_MESSAGES[fault.code].format(
        at=f"{_WHERE}: test case {fault.case}", tok=tok, **fault._asdict()))


def _unterminated_message(buf: np.ndarray, fault: _Fault, tok: str) -> str:
    if fault.positions == 0:
        role = f"m, the number of positions, of test case {fault.case}"
    elif fault.expected == 0:
        role = (f"l, the number of heaps, of position {fault.position} of {fault.positions} "
                f"in test case {fault.case}")
    else:
        role = (f"heap {fault.read} of position {fault.position} of {fault.positions} in test "
                f"case {fault.case}")
    text = _token_text(buf, fault.start, fault.end)
    seen = f"its last token, {text} ({tok}, at byte offset {fault.start}), was read as {role}"
    if text.strip("+-0") == "":
        why = "that 0 may be the terminator, read as data because a number before it was lost"
    else:
        why = "no line break follows it, so it may be cut short"
    return (f"{_WHERE}: input ends without the terminating 0; {seen}, and {why}: truncated? "
            "(a complete input ends with a line holding 0)")


def _checked(data: bytes, keep: bool) -> tuple:
    buf = _as_buffer(data)
    *parsed, err = _parse(buf, _MAX_MOVE, keep)
    if err[_E_CODE] != _OK:
        raise _error(buf, err)
    return buf, *parsed


def read_classic(data: bytes) -> ClassicInput:
    """Parse a classic input into flat arrays; InputError names the first problem in input order."""
    _, moves, moves_off, case_off, pos_off, heaps, _, _ = _checked(data, keep=True)
    return ClassicInput(moves, moves_off, case_off, pos_off, heaps)


def parse_classic(data: bytes) -> list[ClassicCase]:
    """The test cases of a classic input, in order (the terminating 0 is not a case)."""
    ci = read_classic(data)
    mo = ci.moves_offsets.tolist()
    co = ci.case_offsets.tolist()
    moves = ci.moves.tolist()
    cases = []
    for c in range(ci.n_cases):
        r0, r1 = co[c], co[c + 1]
        off = ci.offsets[r0 : r1 + 1]
        cases.append(ClassicCase(moves=tuple(moves[mo[c] : mo[c + 1]]),
                                 offsets=off - off[0],
                                 heaps=ci.heaps[off[0] : off[-1]]))
    return cases


# --------------------------------------------------------------------------- solving


_LIMIT_OPTIONS = {"max_table_len": "--cap", "max_rule_ops": "--max-rule-ops",
                  "max_run_ops": "--max-run-ops"}


def solve_classic(data: bytes, cap: int = grundy.DEFAULT_TABLE_LEN,
                  max_rule_ops: int = grundy.DEFAULT_RULE_OPS,
                  max_run_ops: int = grundy.DEFAULT_RUN_OPS) -> str:
    """Answer a classic S-Nim input: per test case one line of W/L, trailing newline.

    Two passes over the bytes, so no heap is ever stored: the first checks the input and finds
    each case's largest heap, then the tables are built, then the second reads the positions
    again, on all threads, and answers them. Tables are bounded as in `run` (see
    `grundy.TableBudget`): `cap` values, `max_rule_ops` operations a rule, `max_run_ops` in
    all. Raises InputError for malformed input and RuleError when a heap's value is not
    determined within them (no proven period), naming the limit.
    """
    buf, moves, moves_off, case_off, _, _, case_max, anchors = _checked(data, keep=False)
    if case_off.shape[0] == 1:
        return ""
    canon, rule_off, case_rule = _dedup_rules(moves, moves_off)
    n_rules = int(rule_off.shape[0] - 1)
    rule_max = np.full(n_rules, -1, np.int64)
    np.maximum.at(rule_max, case_rule, case_max)
    canon_list = canon.tolist()
    ro = rule_off.tolist()
    rules = [grundy.Rule("subtraction", tuple(canon_list[ro[r] : ro[r + 1]]))
             for r in range(n_rules)]
    budget = grundy.TableBudget(cap, max_rule_ops, grundy.MAX_HEAP, max_run_ops)
    tables = budget.build(rules, [m + 1 for m in rule_max.tolist()], [None] * n_rules)
    text, bad = _answers(buf, anchors, moves_off, case_off, case_rule,
                         *grundy.TableSet.of(tables).lookup_args())
    bad = bad[bad[:, 0] >= 0]
    if bad.shape[0]:
        row, j, heap = (int(v) for v in bad[0])
        case = int(np.searchsorted(case_off, row, side="right")) - 1
        pos = row - int(case_off[case])
        table = tables[int(case_rule[case])]
        limit = table.stopped_by or "max_table_len"
        raise RuleError(
            f"{_WHERE}: test case {case + 1}, position {pos + 1}, heap {j + 1} (size {heap}): "
            f"its Grundy value under S = {table.rule.label} is not determined: no period is "
            f"proven within the {table.table_len} values that {_LIMIT_OPTIONS[limit]} "
            f"{getattr(budget, limit)} allows")
    return text.tobytes().decode("ascii")


# --------------------------------------------------------------------------- conversion


def classic_to_tables(data: bytes) -> tuple[dict[str, list], dict[str, list]]:
    """Plain column dicts for the `convert` command: (rules, positions in wide form).

    rules: rule_set_id (1-based test case number), kind ("subtraction"), moves (as given).
    positions: rule_set_id, position_id (0-based within the test case), heaps.
    """
    ci = read_classic(data)
    mo = ci.moves_offsets.tolist()
    moves = ci.moves.tolist()
    n = ci.n_cases
    rules: dict[str, list] = {
        "rule_set_id": list(range(1, n + 1)),
        "kind": ["subtraction"] * n,
        "moves": [moves[mo[c] : mo[c + 1]] for c in range(n)],
    }
    counts = np.diff(ci.case_offsets)
    rule_set_id = np.repeat(np.arange(1, n + 1, dtype=np.int64), counts)
    position_id = np.arange(ci.n_positions, dtype=np.int64) - np.repeat(ci.case_offsets[:-1],
                                                                        counts)
    off = ci.offsets.tolist()
    heaps = ci.heaps.tolist()
    positions: dict[str, list] = {
        "rule_set_id": rule_set_id.tolist(),
        "position_id": position_id.tolist(),
        "heaps": [heaps[a:b] for a, b in zip(off[:-1], off[1:])],
    }
    return rules, positions
