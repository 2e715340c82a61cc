"""What the classic parser can report: the layout of its error record (one int64 array, each
slot keeping one meaning), the error kinds, and the message each kind becomes."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pipeline import grundy
from pipeline.errors import InputError

WHERE = "classic input"
MAX_MOVE = grundy.MAX_TABLE_LEN
_SHOW = 24  # characters of a bad token quoted in an error message

# The parser's error record: an int64 array whose slots (E_*) each keep one meaning; an error
# kind fills the slots its message needs (see _MESSAGES and input_error).
E_CODE = 0  # the error kind, OK when the input is valid
E_CASE = 1  # test case (1-based)
E_TOKEN = 2  # index (0-based) of the token at fault
E_POSITION = 3  # position within the case (1-based)
E_POSITIONS = 4  # m, the case's number of positions
E_VALUE = 5  # the number at fault (k, a move, m, l, a heap), or how many tokens trail
E_EXPECTED = 6  # how many moves (k) or heaps (l) were expected
E_READ = 7  # how many of those were read
E_START = 8  # the bytes of the token at fault are [start, end)
E_END = 9
E_SLOTS = 10

OK = 0
EOF_MOVES = 1  # input ended among the moves: expected, read
EOF_M = 2  # input ended before m: expected (k)
EOF_L = 3  # input ended before a position's l: position, positions
EOF_HEAPS = 4  # input ended among a position's heaps: position, positions, expected, read
K_NEG = 5  # value (k)
MOVE_NONPOS = 6  # value (the move)
MOVE_BIG = 7  # value (the move)
M_NEG = 8  # value (m)
L_NEG = 9  # position, positions, value (l)
HEAP_NEG = 10  # position, positions, value (the heap)
TRAILING = 11  # token (the first after the terminating 0), value (how many)
NOT_INT = 12  # a token that is not an integer: start, end
OVERFLOW = 13  # an integer that does not fit in int64: start, end
UNTERMINATED = 14  # no terminating 0, and the end may be a cut: the last token (start, end),
#                    read as m (positions = 0), as l (expected = 0) or as heap `read`
EMPTY = 15  # no token at all: nothing, or only whitespace (a lone 0 is a valid empty input)


def _token_text(buf: np.ndarray, start: int, end: int) -> str:
    raw = bytes(buf[start : min(end, start + _SHOW)]).decode("utf-8", errors="replace")
    return raw + ("..." if end - start > _SHOW else "")


class _Fault(NamedTuple):
    """The parser's error record, slot by slot (see E_*)."""

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
    EOF_MOVES: "{at}: expected {expected} moves after k = {expected}, input ended after {read}",
    EOF_M: "{at}: expected m (the number of positions) after the k = {expected} moves, "
           "input ended",
    EOF_L: "{at}: expected 'l' (the number of heaps) of position {position} of {positions}, "
           "input ended",
    EOF_HEAPS: "{at}, position {position} of {positions}: expected {expected} heap sizes after "
               "'l', input ended after {read}",
    K_NEG: "{at}: k = {value} ({tok}) is negative (expected the number of moves, or 0 to end)",
    MOVE_NONPOS: "{at}: move {value} ({tok}) is not positive",
    MOVE_BIG: "{at}: move {value} ({tok}) is larger than " + str(MAX_MOVE),
    M_NEG: "{at}: m = {value} ({tok}) is negative (expected the number of positions)",
    L_NEG: "{at}, position {position} of {positions}: l = {value} ({tok}) is negative "
           "(expected a heap count)",
    HEAP_NEG: "{at}, position {position} of {positions}: heap size {value} ({tok}) is "
              "negative",
    TRAILING: WHERE + ": {value} unexpected token(s) after the terminating 0, starting at "
                      "{tok}",
    EMPTY: WHERE + ": is empty (no number at all): expected test cases ending with a line "
                   "holding 0 (a lone 0 is an input without test cases)",
}


def input_error(buf: np.ndarray, err: np.ndarray, skipped: int = 0) -> InputError:
    """The error the parser's record `err` describes, in words, quoting the input `buf`, whose
    byte offsets are `skipped` (a byte order mark) past the file's."""
    fault = _Fault(*(int(x) for x in err))
    tok = f"token {fault.token + 1}"
    if fault.code in (NOT_INT, OVERFLOW):
        what = ("does not fit in a 64-bit integer" if fault.code == OVERFLOW
                else "is not a non-negative integer")
        return InputError(f"{WHERE}: {tok} ({_token_text(buf, fault.start, fault.end)!r}, at "
                          f"byte offset {fault.start + skipped}) {what} (in test case "
                          f"{fault.case})")
    if fault.code == UNTERMINATED:
        return InputError(_unterminated_message(buf, fault, tok, skipped))
    return InputError(_MESSAGES[fault.code].format(
        at=f"{WHERE}: test case {fault.case}", tok=tok, **fault._asdict()))


def _unterminated_message(buf: np.ndarray, fault: _Fault, tok: str, skipped: int) -> str:
    if fault.positions == 0:
        role = f"m, the number of positions, of test case {fault.case}"
    elif fault.expected == 0:
        role = (f"l, the number of heaps, of position {fault.position} of {fault.positions} "
                f"in test case {fault.case}")
    else:
        role = (f"heap {fault.read} of position {fault.position} of {fault.positions} in test "
                f"case {fault.case}")
    text = _token_text(buf, fault.start, fault.end)
    seen = (f"its last token, {text} ({tok}, at byte offset {fault.start + skipped}), was read "
            f"as {role}")
    if text.strip("+-0") == "":
        why = "that 0 may be the terminator, read as data because a number before it was lost"
    else:
        why = "no line break follows it, so it may be cut short"
    return (f"{WHERE}: input ends without the terminating 0; {seen}, and {why}: truncated? "
            "(a complete input ends with a line holding 0)")
