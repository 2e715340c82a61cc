"""The classic parser: one pass over the bytes (tokenizer and structural walk fused) into flat
int64 arrays with Arrow-style offsets and an error record (`faults`) naming the first problem
in input order. Compiled at install time (`_classic.pyx`)."""

from __future__ import annotations

import numpy as np

from pipeline.classic import _classic, faults

# The compiled parser numbers the error record's slots and kinds as `faults` does, in order.
assert [getattr(faults, name) for name in (
    "E_CODE", "E_CASE", "E_TOKEN", "E_POSITION", "E_POSITIONS", "E_VALUE", "E_EXPECTED",
    "E_READ", "E_START", "E_END", "E_SLOTS")] == list(range(11))
assert [getattr(faults, name) for name in (
    "OK", "EOF_MOVES", "EOF_M", "EOF_L", "EOF_HEAPS", "K_NEG", "MOVE_NONPOS", "MOVE_BIG",
    "M_NEG", "L_NEG", "HEAP_NEG", "TRAILING", "NOT_INT", "OVERFLOW", "UNTERMINATED",
    "EMPTY")] == list(range(16))

ANCHOR_ROWS = _classic.ANCHOR_ROWS  # `solve` answers positions in blocks of this many rows


def parse(buf: np.ndarray, max_move: int, keep: bool) -> tuple:
    """Parse the bytes of a classic input in one pass into flat arrays plus an error record.

    Returns (moves, moves_off, case_off, pos_off, heaps, case_max, anchors, err): the moves of
    case c are moves[moves_off[c]:moves_off[c + 1]], its positions are rows
    case_off[c]..case_off[c + 1], its largest heap is case_max[c] (-1 when none), and row i has
    heaps heaps[pos_off[i]:pos_off[i + 1]]. Row i * ANCHOR_ROWS starts at byte anchors[i].
    Without `keep`, heaps and pos_off are empty: the input is only checked and measured.
    err[E_CODE] == OK when the input is valid; otherwise err describes the first problem in
    input order (a bad token is reported as such, whatever was expected there).
    """
    return _classic.parse(np.ascontiguousarray(buf, np.uint8), int(max_move), bool(keep))
