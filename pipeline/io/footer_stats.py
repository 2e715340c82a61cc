"""The largest value of integer columns, read from a Parquet footer's own bytes (the Thrift
compact protocol) instead of through pyarrow: pyarrow ends the whole process (an uncaught
C++ exception, exit 134) on statistics of the wrong length, which a damaged or hand-made
file can hold. Whatever this reader does not understand is None (not known), never an error.
"""

from __future__ import annotations

from collections.abc import Callable

_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY = range(9)
_LIST, _SET, _MAP, _STRUCT, _UUID = range(9, 14)
_DEEPEST = 64  # nesting a footer of the Parquet format never comes near

# field ids of the Parquet format's Thrift structs (parquet.thrift)
_ROW_GROUPS, _COLUMNS, _META_DATA, _STATISTICS = 4, 1, 3, 12
_MAX, _MIN, _MAX_VALUE, _MIN_VALUE = 1, 2, 5, 6


class _Malformed(Exception):
    """The bytes are not the Thrift the reader expects (reading past their end is an
    IndexError, which is taken the same way)."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise _Malformed("varint too long")


def _field(data: bytes, at: int, last: int) -> tuple[int, int, int]:
    """(field id, type, where its value starts) of the field header at `at`, whose struct's
    previous field was `last`; type _STOP at the struct's end."""
    header = data[at]
    at += 1
    kind, delta = header & 0x0F, header >> 4
    if kind == _STOP or delta:
        return last + delta, kind, at
    n, at = _varint(data, at)
    return (n >> 1) ^ -(n & 1), kind, at


def _skip(data: bytes, at: int, kind: int, depth: int = 0) -> int:
    """Where the value of type `kind` at `at` ends (past the end of `data` if it is cut)."""
    if kind == _STRUCT:
        if depth > _DEEPEST:
            raise _Malformed("nested too deep")
        while True:  # the fields' scalars inline: most of a footer is structs of them
            header = data[at]
            at += 1
            field_kind = header & 0x0F
            if field_kind == _STOP:
                return at
            if not header >> 4:  # a long-form field id: a varint
                while data[at] & 0x80:
                    at += 1
                at += 1
            if field_kind in (_I16, _I32, _I64):
                while data[at] & 0x80:
                    at += 1
                at += 1
            elif field_kind == _BINARY:
                n, at = _varint(data, at)
                at += n
            elif field_kind not in (_TRUE, _FALSE):
                at = _skip(data, at, field_kind, depth + 1)
    if kind in (_TRUE, _FALSE):  # a struct field's value is in its header
        return at
    if kind == _BYTE:
        return at + 1
    if kind in (_I16, _I32, _I64):
        return _varint(data, at)[1]
    if kind in (_DOUBLE, _UUID):
        return at + (8 if kind == _DOUBLE else 16)
    if kind == _BINARY:
        n, at = _varint(data, at)
        return at + n
    if depth > _DEEPEST:
        raise _Malformed("nested too deep")
    if kind in (_LIST, _SET):
        count, element, at = _elements(data, at)
        if element in (_TRUE, _FALSE, _BYTE):  # a boolean there is a whole byte
            return at + count
        for _ in range(count):
            at = _skip(data, at, element, depth + 1)
            if at > len(data):
                raise _Malformed("ends early")
        return at
    if kind == _MAP:
        count, at = _varint(data, at)
        if count:
            types = data[at]
            at += 1
            for _ in range(count):
                at = _skip(data, at, _element(types >> 4), depth + 1)
                at = _skip(data, at, _element(types & 0x0F), depth + 1)
                if at > len(data):
                    raise _Malformed("ends early")
        return at
    raise _Malformed(f"unknown type {kind}")


def _elements(data: bytes, at: int) -> tuple[int, int, int]:
    """(count, element type, where the elements start) of the list or set at `at`."""
    header = data[at]
    count = header >> 4
    if count == 15:
        count, at = _varint(data, at + 1)
        return count, header & 0x0F, at
    return count, header & 0x0F, at + 1


def _element(kind: int) -> int:
    """A map's key or value type as read: a boolean there is a whole byte."""
    return _BYTE if kind in (_TRUE, _FALSE) else kind


def integer_maxima(footer: bytes, leaves: dict[int, tuple[int, bool]]
                   ) -> dict[int, int | None]:
    """For each leaf column index in `leaves` (its width in bytes, 4 or 8, and whether it is
    signed): max(-1, the largest maximum over every row group's statistics), or None where a
    row group lacks a minimum and maximum of that width, or the footer is not understood.
    The statistics' exact fields (max_value, min_value) are preferred; the older max and min
    are used for signed columns only, whose sort order they were written in."""
    found: dict[int, list[int | None]] = {leaf: [] for leaf in leaves}
    try:
        _each_element(footer, 0, _ROW_GROUPS,
                      lambda at, _: _row_group_maxima(footer, at, leaves, found))
    except (_Malformed, IndexError):
        return dict.fromkeys(leaves)
    return {leaf: None if None in values else max([-1, *values])  # type: ignore[list-item]
            for leaf, values in found.items()}


def _row_group_maxima(data: bytes, at: int, leaves: dict[int, tuple[int, bool]],
                      found: dict[int, list[int | None]]) -> int:
    """Add one row group's maximum of each leaf to `found`; where the row group ends."""
    maxima: dict[int, int | None] = dict.fromkeys(leaves)

    def column(at: int, leaf: int) -> int:
        stats, at = _column_statistics(data, at)
        if leaf in leaves:
            maxima[leaf] = _largest(stats, *leaves[leaf])
        return at

    at = _each_element(data, at, _COLUMNS, column)
    for leaf, value in maxima.items():
        found[leaf].append(value)
    return at


def _each_element(data: bytes, at: int, wanted: int, each: Callable[[int, int], int]) -> int:
    """Through the struct at `at`, reading each element of its list-of-structs field `wanted`
    with `each(where it starts, its index)` and skipping the other fields; where it ends."""
    last = 0
    while True:
        last, kind, at = _field(data, at, last)
        if kind == _STOP:
            return at
        if last != wanted or kind != _LIST:
            at = _skip(data, at, kind)
            continue
        count, element, at = _elements(data, at)
        if element != _STRUCT:
            raise _Malformed(f"field {wanted} is not a list of structs")
        for index in range(count):
            at = each(at, index)


def _column_statistics(data: bytes, at: int) -> tuple[dict[int, bytes], int]:
    """The binary fields of a ColumnChunk's meta_data.statistics (empty when it has none),
    and where the ColumnChunk ends."""
    stats: dict[int, bytes] = {}
    at = _walk(data, at, _META_DATA, lambda at: _walk(
        data, at, _STATISTICS, lambda at: _binaries(data, at, stats)))
    return stats, at


def _walk(data: bytes, at: int, wanted: int, inside: Callable[[int], int]) -> int:
    """Through the struct at `at`, reading its struct field `wanted` with `inside` and
    skipping the rest; where the struct ends."""
    last = 0
    while True:
        last, kind, at = _field(data, at, last)
        if kind == _STOP:
            return at
        at = inside(at) if last == wanted and kind == _STRUCT else _skip(data, at, kind)


def _binaries(data: bytes, at: int, into: dict[int, bytes]) -> int:
    """The binary fields of the struct at `at` into `into` (by field id); where it ends."""
    last = 0
    while True:
        last, kind, at = _field(data, at, last)
        if kind == _STOP:
            return at
        if kind == _BINARY:
            n, at = _varint(data, at)
            into[last] = data[at:at + n]
            at += n
        else:
            at = _skip(data, at, kind)


def _largest(stats: dict[int, bytes], width: int, signed: bool) -> int | None:
    if _MAX_VALUE in stats and _MIN_VALUE in stats:
        high, low = stats[_MAX_VALUE], stats[_MIN_VALUE]
    elif signed and _MAX in stats and _MIN in stats:
        high, low = stats[_MAX], stats[_MIN]
    else:
        return None
    if len(high) != width or len(low) != width:
        return None
    return int.from_bytes(high, "little", signed=signed)
