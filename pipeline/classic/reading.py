"""A classic input read whole: flat arrays (`read_classic`, which the `convert` command makes
its tables of) and test cases (`parse_classic`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.classic.faults import E_CODE, MAX_MOVE, OK, WHERE, input_error
from pipeline.classic.parser import parse
from pipeline.errors import InputError


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


_BOM = b"\xef\xbb\xbf"


def _as_buffer(data: bytes | bytearray | memoryview | str) -> np.ndarray:
    """The input's bytes, after a UTF-8 byte order mark if it starts with one (editors on
    Windows add it; it is no token, and columns are then counted as the editor shows them)."""
    if isinstance(data, str):
        data = data.encode()
    try:
        buf = np.frombuffer(data, dtype=np.uint8)
    except (TypeError, ValueError) as e:
        raise InputError(f"{WHERE}: expected bytes, got {type(data).__name__}") from e
    return buf[len(_BOM):] if buf[:len(_BOM)].tobytes() == _BOM else buf


def _skipped(buf: np.ndarray, data: bytes | bytearray | memoryview | str) -> int:
    """The bytes `_as_buffer` skipped at the start of `data` (a byte order mark, or none)."""
    whole = len(data.encode()) if isinstance(data, str) else memoryview(data).nbytes
    return whole - buf.shape[0]


def checked(data: bytes, keep: bool) -> tuple:
    """(the input as a byte array, the parser's arrays), or the InputError of its first
    problem; with `keep` false, heaps are read but not stored (`parser.parse`)."""
    buf = _as_buffer(data)
    *parsed, err = parse(buf, MAX_MOVE, keep)
    if err[E_CODE] != OK:
        raise input_error(buf, err, skipped=_skipped(buf, data))
    return buf, *parsed


def read_classic(data: bytes) -> ClassicInput:
    """Parse a classic input into flat arrays; InputError names the first problem in input order."""
    _, moves, moves_off, case_off, pos_off, heaps, _, _ = checked(data, keep=True)
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
