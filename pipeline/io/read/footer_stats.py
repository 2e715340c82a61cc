"""The largest value of integer columns, read from a Parquet footer's own bytes (the Thrift
compact protocol) instead of through pyarrow: pyarrow ends the whole process (an uncaught
C++ exception, exit 134) on statistics of the wrong length, which a damaged or hand-made
file can hold. Whatever this reader does not understand is None (not known), never an error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pipeline.io.thrift_compact import (
    BINARY,
    BYTE,
    DOUBLE,
    FALSE,
    I16,
    I32,
    I64,
    LIST,
    MAP,
    SET,
    STOP,
    STRUCT,
    TRUE,
    UUID,
    Malformed,
    list_header,
    varint,
)

_DEEPEST = 64  # nesting a footer of the Parquet format never comes near

# field ids of the Parquet format's Thrift structs (parquet.thrift)
_ROW_GROUPS, _COLUMNS, _META_DATA, _STATISTICS = 4, 1, 3, 12
_MAX, _MIN, _MAX_VALUE, _MIN_VALUE = 1, 2, 5, 6


def _struct(data: bytes, at: int, depth: int = 0, wanted: int | None = -1,
            kind_wanted: int = -1, inside: Callable[[int, int], int] | None = None) -> int:
    """Through the struct at `at`, where it ends. A field of type `kind_wanted` whose id is
    `wanted` (any id when it is None) is read by `inside(where its value starts, its id)`,
    which returns where the value ends; the rest are skipped, their scalars inline (most of a
    footer is structs of them, and a call per field was most of the walk's time)."""
    if depth > _DEEPEST:
        raise Malformed("nested too deep")
    last = 0
    while True:
        header = data[at]
        at += 1
        kind = header & 0x0F
        if kind == STOP:
            return at
        if header >> 4:
            last += header >> 4
        else:  # a long-form field id: a zigzag varint
            n, at = varint(data, at)
            last = (n >> 1) ^ -(n & 1)
        if kind == kind_wanted and (wanted is None or last == wanted):
            at = inside(at, last)  # type: ignore[misc]
        elif kind in (I16, I32, I64):
            while data[at] & 0x80:
                at += 1
            at += 1
        elif kind == BINARY:
            n, at = varint(data, at)
            at += n
        elif kind not in (TRUE, FALSE):  # a struct field's boolean is in its header
            at = _skip(data, at, kind, depth + 1)


def _skip(data: bytes, at: int, kind: int, depth: int = 0) -> int:
    """Where the value of type `kind` at `at` ends (past the end of `data` if it is cut)."""
    if kind == STRUCT:
        return _struct(data, at, depth)
    if kind in (TRUE, FALSE):  # a struct field's value is in its header
        return at
    if kind == BYTE:
        return at + 1
    if kind in (I16, I32, I64):
        return varint(data, at)[1]
    if kind in (DOUBLE, UUID):
        return at + (8 if kind == DOUBLE else 16)
    if kind == BINARY:
        n, at = varint(data, at)
        return at + n
    if depth > _DEEPEST:
        raise Malformed("nested too deep")
    if kind in (LIST, SET):
        count, element, at = list_header(data, at)
        if element in (TRUE, FALSE, BYTE):  # a boolean there is a whole byte
            return at + count
        if element in (I16, I32, I64):  # the common lists inline, as in `_struct`
            for _ in range(count):
                while data[at] & 0x80:
                    at += 1
                at += 1
            return at
        for _ in range(count):
            if element == STRUCT:
                at = _struct(data, at, depth + 1)
            elif element == BINARY:
                n, at = varint(data, at)
                at += n
            else:
                at = _skip(data, at, element, depth + 1)
            if at > len(data):
                raise Malformed("ends early")
        return at
    if kind == MAP:
        count, at = varint(data, at)
        if count:
            types = data[at]
            at += 1
            for _ in range(count):
                at = _skip(data, at, _element(types >> 4), depth + 1)
                at = _skip(data, at, _element(types & 0x0F), depth + 1)
                if at > len(data):
                    raise Malformed("ends early")
        return at
    raise Malformed(f"unknown type {kind}")


def _element(kind: int) -> int:
    """A map's key or value type as read: a boolean there is a whole byte."""
    return BYTE if kind in (TRUE, FALSE) else kind


def integer_maxima(footer: bytes, leaves: dict[int, tuple[int, bool]]
                   ) -> dict[int, int | None]:
    """For each leaf column index in `leaves` (its width in bytes, 4 or 8, and whether it is
    signed): max(-1, the largest maximum over every row group's statistics), or None where a
    row group lacks a minimum and maximum of that width, or the footer is not understood.
    The statistics' exact fields (max_value, min_value) are preferred; the older max and min
    are used for signed columns only, whose sort order they were written in."""
    groups = integer_ranges(footer, leaves)
    return {leaf: largest_of(None if groups is None else [g[leaf] for g in groups])
            for leaf in leaves}


def largest_of(ranges: Sequence[tuple[int, int] | None] | None) -> int | None:
    """max(-1, the largest maximum of a column's row groups' ranges), None where one lacks
    them or the footer was not understood (`ranges` None)."""
    if ranges is None or None in ranges:
        return None
    return max([-1, *(r[1] for r in ranges if r is not None)])


def integer_ranges(footer: bytes, leaves: dict[int, tuple[int, bool]]
                   ) -> list[dict[int, tuple[int, int] | None]] | None:
    """Per row group, for each leaf in `leaves` (as in `integer_maxima`), its (minimum,
    maximum) from the statistics, None where the row group lacks them; None when the footer
    is not understood."""
    groups: list[dict[int, tuple[int, int] | None]] = []
    try:
        _struct(footer, 0, 0, _ROW_GROUPS, LIST, lambda at, _: _each_struct(
            footer, at, lambda at, _: _row_group_ranges(footer, at, leaves, groups)))
    except (Malformed, IndexError):
        return None
    return groups


def _row_group_ranges(data: bytes, at: int, leaves: dict[int, tuple[int, bool]],
                      groups: list[dict[int, tuple[int, int] | None]]) -> int:
    """Add one row group's range of each leaf to `groups`; where the row group ends."""
    ranges: dict[int, tuple[int, int] | None] = dict.fromkeys(leaves)

    def column(at: int, leaf: int) -> int:
        stats: dict[int, bytes] = {}
        at = _struct(data, at, 0, _META_DATA, STRUCT, lambda at, _: _struct(
            data, at, 0, _STATISTICS, STRUCT, lambda at, _: _struct(
                data, at, 0, None, BINARY, lambda at, field: _binary(data, at, field, stats))))
        if leaf in leaves:
            ranges[leaf] = _range(stats, *leaves[leaf])
        return at

    at = _struct(data, at, 0, _COLUMNS, LIST, lambda at, _: _each_struct(data, at, column))
    groups.append(ranges)
    return at


def _each_struct(data: bytes, at: int, each: Callable[[int, int], int]) -> int:
    """Each element of the list of structs at `at` read by `each(where it starts, its
    index)`; where the list ends."""
    count, element, at = list_header(data, at)
    if element != STRUCT:
        raise Malformed("not a list of structs")
    for index in range(count):
        at = each(at, index)
    return at


def _binary(data: bytes, at: int, field: int, into: dict[int, bytes]) -> int:
    """The binary value at `at` into `into[field]`; where it ends."""
    n, at = varint(data, at)
    into[field] = data[at:at + n]
    return at + n


def _range(stats: dict[int, bytes], width: int, signed: bool) -> tuple[int, int] | None:
    if _MAX_VALUE in stats and _MIN_VALUE in stats:
        high, low = stats[_MAX_VALUE], stats[_MIN_VALUE]
    elif signed and _MAX in stats and _MIN in stats:
        high, low = stats[_MAX], stats[_MIN]
    else:
        return None
    if len(high) != width or len(low) != width:
        return None
    return (int.from_bytes(low, "little", signed=signed),
            int.from_bytes(high, "little", signed=signed))
