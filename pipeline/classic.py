"""The classic S-Nim text format (POJ 2960 / HDU 1536): parse, solve, and convert; pure.

Input is whitespace-separated integers, a sequence of test cases

    k s1 .. sk          the subtraction set S (moves as given; duplicates allowed)
    m                   the number of positions
    l h1 .. hl          m times: a position of l heaps (l = 0 is the empty position)

ended by a test case whose k is 0 (a missing final 0 at end of input is accepted; tokens after
the terminating 0 are an error). The answer is one line per test case with one character per
position: `W` when the player to move wins, `L` otherwise.

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

import numpy as np
from numba import njit, prange

from pipeline import grundy, kernels
from pipeline.errors import InputError, RuleError

_WHERE = "classic input"
_INT64_MAX = np.int64(2**63 - 1)
_MAX_MOVE = grundy.MAX_TABLE_LEN
_SHOW = 24  # characters of a bad token quoted in an error message
_ANCHOR_ROWS = 4096  # `solve` answers positions in blocks of this many rows, on all threads

# Error record of the parser: err = [code, case (1-based), token index (0-based), a, b, c, d,
# byte start, byte end]; the meaning of a..d depends on the code.
_OK = 0
_EOF_MOVES = 1  # a = k, b = moves read
_EOF_M = 2  # a = k
_EOF_L = 3  # a = position (1-based), b = m
_EOF_HEAPS = 4  # a = position (1-based), b = m, c = l, d = heaps read
_K_NEG = 5  # a = k
_MOVE_NONPOS = 6  # a = move
_MOVE_BIG = 7  # a = move
_M_NEG = 8  # a = m
_L_NEG = 9  # a = position, b = m, c = l
_HEAP_NEG = 10  # a = position, b = m, c = heap
_TRAILING = 11  # a = number of tokens after the terminating 0
_NOT_INT = 12  # a token that is not an integer; bytes [start, end)
_OVERFLOW = 13  # an integer that does not fit in int64; bytes [start, end)

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
    """The next token, counted; a token that is not an int64 is recorded in `err`.

    Returns (status, value, next byte, token index); at EOF the token index is unchanged.
    """
    st, v, b0, i = _next_token(buf, i)
    if st == _T_EOF:
        return st, v, i, t
    t += 1
    err[2] = t
    if st != _T_INT:
        err[0] = _NOT_INT if st == _T_NOT_INT else _OVERFLOW
        err[7] = b0
        err[8] = i
    return st, v, i, t


@njit(cache=True)
def _parse(buf, max_move, keep):
    """Parse the bytes of a classic input in one pass into flat arrays plus an error record.

    Returns (moves, moves_off, case_off, pos_off, heaps, case_max, anchors, err): the moves of
    case c are moves[moves_off[c]:moves_off[c + 1]], its positions are rows
    case_off[c]..case_off[c + 1], its largest heap is case_max[c] (-1 when none), and row i has
    heaps heaps[pos_off[i]:pos_off[i + 1]]. Row i * _ANCHOR_ROWS starts at byte anchors[i].
    Without `keep`, heaps and pos_off are empty: the input is only checked and measured.
    err[0] == _OK when the input is valid; otherwise err describes the first problem in input
    order.
    """
    n = buf.shape[0]
    bound = n // 2 + 2  # every token takes a byte and a separator
    kept = bound if keep else 1
    err = np.zeros(9, np.int64)
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
    nmv = 0
    nc = 0
    npos = 0
    nh = 0
    i = 0  # byte cursor
    t = -1  # index of the last token read
    while True:
        # Every read below: a bad token is reported as such, whatever was expected there.
        err[1] = nc + 1
        st, k, b0, i = _next_token(buf, i)
        if st == _T_EOF:
            break  # a missing final 0 is accepted
        t += 1
        if st != _T_INT:
            err[0] = _NOT_INT if st == _T_NOT_INT else _OVERFLOW
            err[2] = t
            err[7] = b0
            err[8] = i
            break
        if k == 0:
            st, v, b0, i2 = _next_token(buf, i)
            if st != _T_EOF:
                err[0] = _TRAILING
                err[2] = t + 1
                cnt = 0
                while st != _T_EOF:
                    cnt += 1
                    st, v, b0, i2 = _next_token(buf, i2)
                err[3] = cnt
            break
        err[2] = t
        if k < 0:
            err[0] = _K_NEG
            err[3] = k
            break
        j = np.int64(0)
        while j < k:
            st, v, i, t = _expect_int(buf, i, t, err)
            if st == _T_EOF:
                err[0] = _EOF_MOVES
                err[3] = k
                err[4] = j
                break
            if st != _T_INT:
                break
            if v <= 0 or v > max_move:
                err[0] = _MOVE_NONPOS if v <= 0 else _MOVE_BIG
                err[3] = v
                break
            moves[nmv] = v
            nmv += 1
            j += 1
        if err[0] != _OK:
            break
        st, m, i, t = _expect_int(buf, i, t, err)
        if st == _T_EOF:
            err[0] = _EOF_M
            err[3] = k
            break
        if st != _T_INT:
            break
        if m < 0:
            err[0] = _M_NEG
            err[3] = m
            break
        q = np.int64(0)
        top = np.int64(-1)
        while q < m:
            err[3] = q + 1
            err[4] = m
            if npos % _ANCHOR_ROWS == 0:
                anchors[npos // _ANCHOR_ROWS] = i
            ok, ln, i_next = _plain_int(buf, i)
            if ok:
                i = i_next
                t += 1
                err[2] = t
            else:
                st, ln, i, t = _expect_int(buf, i, t, err)
                if st == _T_EOF:
                    err[0] = _EOF_L
                    break
                if st != _T_INT:
                    break
                if ln < 0:
                    err[0] = _L_NEG
                    err[5] = ln
                    break
            j, i, top = _plain_ints(buf, i, ln, heaps, nh, keep, top)
            if j:
                nh += j
                t += j
                err[2] = t
            while j < ln:
                st, h, i, t = _expect_int(buf, i, t, err)
                if st == _T_EOF:
                    err[0] = _EOF_HEAPS
                    err[5] = ln
                    err[6] = j
                    break
                if st != _T_INT:
                    break
                if h < 0:
                    err[0] = _HEAP_NEG
                    err[5] = h
                    break
                if keep:
                    heaps[nh] = h
                if h > top:
                    top = h
                nh += 1
                j += 1
            if err[0] != _OK:
                break
            npos += 1
            if keep:
                pos_off[npos] = nh
            q += 1
        if err[0] != _OK:
            break
        case_max[nc] = top
        nc += 1
        moves_off[nc] = nmv
        case_off[nc] = npos
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


def _error(buf: np.ndarray, err: np.ndarray) -> InputError:
    code, case, tok, a, b, c, d, start, end = (int(x) for x in err)
    at = f"{_WHERE}: test case {case}"
    token = f"token {tok + 1}"
    if code in (_NOT_INT, _OVERFLOW):
        what = ("does not fit in a 64-bit integer" if code == _OVERFLOW
                else "is not a non-negative integer")
        msg = (f"{_WHERE}: {token} ({_token_text(buf, start, end)!r}, at byte offset {start}) "
               f"{what}")
        if case:
            msg += f" (in test case {case})"
    elif code == _EOF_MOVES:
        msg = f"{at}: expected {a} moves after k = {a}, input ended after {b}"
    elif code == _EOF_M:
        msg = f"{at}: expected m (the number of positions) after the k = {a} moves, input ended"
    elif code == _EOF_L:
        msg = f"{at}: expected 'l' (the number of heaps) of position {a} of {b}, input ended"
    elif code == _EOF_HEAPS:
        msg = (f"{at}, position {a} of {b}: expected {c} heap sizes after 'l', "
               f"input ended after {d}")
    elif code == _K_NEG:
        msg = f"{at}: k = {a} ({token}) is negative (expected the number of moves, or 0 to end)"
    elif code == _MOVE_NONPOS:
        msg = f"{at}: move {a} ({token}) is not positive"
    elif code == _MOVE_BIG:
        msg = f"{at}: move {a} ({token}) is larger than {_MAX_MOVE}"
    elif code == _M_NEG:
        msg = f"{at}: m = {a} ({token}) is negative (expected the number of positions)"
    elif code == _L_NEG:
        msg = f"{at}, position {a} of {b}: l = {c} ({token}) is negative (expected a heap count)"
    elif code == _HEAP_NEG:
        msg = f"{at}, position {a} of {b}: heap size {c} ({token}) is negative"
    elif code == _TRAILING:
        msg = (f"{_WHERE}: {a} unexpected token(s) after the terminating 0, "
               f"starting at {token}")
    else:  # pragma: no cover - every code is handled above
        msg = f"{_WHERE}: invalid input (code {code})"
    return InputError(msg)


def _checked(data: bytes, keep: bool) -> tuple:
    buf = _as_buffer(data)
    *parsed, err = _parse(buf, _MAX_MOVE, keep)
    if err[0] != _OK:
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
