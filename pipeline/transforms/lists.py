"""List text in CSV cells ("2 5 12", "2,5,12", "[2, 5, 12]", ranges "1..3"): parsed by a kernel
where the text is plain, by the exact grammar otherwise, and explained when it is bad."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from pipeline import kernels
from pipeline.errors import brief_repr
from pipeline.grundy import MAX_HEAP
from pipeline.transforms.buffers import arrow_int64, text_layout
from pipeline.transforms.schema import HEAPS

MAX_RANGE_VALUES = 1_000_000  # values one "FIRST..LAST" range may hold (docs/inputs.md)
MAX_MOVES = 1_000_000  # values one moves cell may hold, ranges counted whole (docs/inputs.md)

_INT_TEXT = re.compile(r"^[+-]?[0-9]+$")


_SPACE = "[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"


_SPACES = re.compile(f"{_SPACE}+")


_EDGE_SPACES = re.compile(f"^{_SPACE}+|{_SPACE}+$")


_EMPTY_ELEMENT = f"^{_SPACE}*,|,{_SPACE}*,|,{_SPACE}*$"


_INT64_DIGITS = 19
_UINT64_DIGITS = 20


def strip_spaces(text: str) -> str:
    return _EDGE_SPACES.sub("", text)


def parse_int_list(text: str, allow_ranges: bool = False, item: str = "element",
                   most: int | None = None) -> list[int]:
    """Parse a list written in a CSV cell; ValueError says what is wrong, naming the element
    as `item` ("heap", "move") with its index in the list, or that it holds more than `most`
    values (as written: a range counts each of its values, a duplicate again)."""
    body = strip_spaces(text)
    if body.startswith("[") != body.endswith("]") or (body.startswith("[") and len(body) < 2):
        raise ValueError(f"malformed list {brief_repr(text)} (unbalanced brackets)")
    if body.startswith("["):
        body = body[1:-1]
    pieces = body.split(",")
    values: list[int] = []
    for piece in pieces:
        tokens = _SPACES.split(strip_spaces(piece))
        if tokens == [""]:
            if len(pieces) > 1:
                raise ValueError(f"{item} at index {len(values)} is empty in {brief_repr(text)}")
            continue
        for token in tokens:
            if allow_ranges and ".." in token:
                values.extend(_int_range(token, text, item, len(values)))
            else:
                values.append(_int_token(token, text, item, len(values)))
            if most is not None and len(values) > most:
                raise ValueError(f"more than {most:,} {item}s in {brief_repr(text)}")
    return values


def _int_token(token: str, text: str, item: str, index: int) -> int:
    if not _INT_TEXT.fullmatch(token):
        raise ValueError(f"{brief_repr(token)} in {brief_repr(text)} is not an integer")
    digits = len(token.lstrip("+-").lstrip("0"))
    if digits > _INT64_DIGITS and token[0] == "-":
        raise ValueError(f"{item} {brief_repr(token)} at index {index} is negative")
    if digits > _INT64_DIGITS:  # int() of a long token would cost, or fail
        value = int(token) if digits <= _UINT64_DIGITS else None
        shown_value = brief_repr(token) if value is None else value  # as an integer column says it
        raise ValueError(f"{item} {shown_value} at index {index} is larger than 2^63-1")
    return int(token)


def _int_range(token: str, text: str, item: str, index: int) -> range:
    lo, _, hi = token.partition("..")
    if not (_INT_TEXT.fullmatch(lo) and _INT_TEXT.fullmatch(hi)):
        raise ValueError(f"malformed range {brief_repr(token)} in {brief_repr(text)} (expected "
                         "\"FIRST..LAST\", two integers)")
    first, last = _int_token(lo, text, item, index), _int_token(hi, text, item, index)
    if first > last:
        raise ValueError(f"range {brief_repr(token)} is empty (its first value is above its last)")
    if last - first >= MAX_RANGE_VALUES:
        raise ValueError(f"range {brief_repr(token)} is too long (over "
                         f"{MAX_RANGE_VALUES:,} values)")
    return range(first, last + 1)


def as_list(s: pl.Series) -> pl.Series:
    """A fixed-size list column (Arrow fixed_size_list, polars Array) as the plain list it
    is; any other column as it is."""
    return s.cast(pl.List(s.dtype.inner)) if isinstance(s.dtype, pl.Array) else s


def explain_heaps(values: Sequence[int | None] | None) -> str | None:
    """Why a parsed list of heaps cannot be evaluated, or None when it can."""
    if values is None:
        return "heaps is null"
    for i, v in enumerate(values):
        if v is None:
            return f"heap at index {i} is null"
        if v < 0:
            return f"heap {v} at index {i} is negative"
        if v > MAX_HEAP:
            return f"heap {v} at index {i} is larger than 2^63-1"
    return None


def explain_heap_text(text: str | None, wide: bool) -> str:
    if text is None:
        return "heaps is null" if wide else "heap is null"
    try:
        values = parse_int_list(text, item="heap") if wide else _heap_cell(text)
    except ValueError as exc:
        return str(exc)
    return explain_heaps(values) or f"cannot read heaps {brief_repr(text)}"


def _heap_cell(text: str) -> list[int]:
    """A long-form heap cell: one integer."""
    body = strip_spaces(text)
    if body == "":
        raise ValueError("heap is empty")
    if not _INT_TEXT.fullmatch(body):
        raise ValueError(f"heap {brief_repr(text)} is not an integer")
    return [_int_token(body, text, "heap", 0)]


def plain_int_lists(s: pl.Series) -> tuple[pl.Series, np.ndarray]:
    """List text parsed by a kernel where it is plain ASCII ("5 12", "5,12", "[5, 12]"):
    (List(Int64), the rows it leaves to an exact grammar - nulls and text with a "+", a
    long number, non-ASCII, a stray bracket, an empty element or a range - which hold an
    empty list here)."""
    with kernels.threads_for(s.len()):
        counts, values, slow = kernels.heap_text_lists(*text_layout(s))
    parsed = pl.Series(s.name, pa.LargeListArray.from_arrays(arrow_int64(counts),
                                                             arrow_int64(values)), dtype=HEAPS)
    if s.null_count():
        slow = np.union1d(slow, np.flatnonzero(s.is_null().to_numpy()))
    return parsed, slow


def _heaps_from_text_exactly(s: pl.Series) -> pl.Series:
    """The grammar of heaps text, for any text (null where it is not a list of integers, an
    empty element included)."""
    inner = s.str.strip_chars().str.strip_prefix("[").str.strip_suffix("]")
    body = inner.str.replace_all(r"[,\s]+", " ").str.strip_chars()
    tokens = body.str.split(" ")
    parsed = pl.select(pl.when(body == "").then(pl.lit([], dtype=HEAPS))
                       .otherwise(tokens.list.eval(pl.element().cast(pl.Int64, strict=False)))
                       ).to_series()
    ok = pl.select(
        s.str.strip_chars().str.starts_with("[") == s.str.strip_chars().str.ends_with("]"))
    ok = ok.to_series() & ~inner.str.contains(_EMPTY_ELEMENT)
    return pl.select(pl.when(ok & (parsed.list.drop_nulls().list.len() == parsed.list.len()))
                     .then(parsed).otherwise(pl.lit(None, HEAPS))).to_series().alias(s.name)


def heaps_from_text(s: pl.Series) -> pl.Series:
    """Heaps text ("5 12", "5,12", "[5, 12]") -> List(Int64), null where it is not a list of
    integers. A kernel parses the plain ASCII text that nearly every row is; the rows it
    leaves (and nulls) go through the exact polars grammar."""
    parsed, slow = plain_int_lists(s)
    if slow.shape[0] == 0:
        return parsed
    exact = _heaps_from_text_exactly(s.gather(slow))
    order = np.arange(s.len(), dtype=np.int64)
    order[slow] = s.len() + np.arange(slow.shape[0])
    return pl.concat([parsed, exact]).gather(order)
