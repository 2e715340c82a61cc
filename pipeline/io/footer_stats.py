"""The largest value of integer columns, read from a Parquet footer's own bytes (the Thrift
compact protocol) instead of through pyarrow: pyarrow ends the whole process (an uncaught
C++ exception, exit 134) on statistics of the wrong length, which a damaged or hand-made
file can hold. Whatever this reader does not understand is None (not known), never an error.
"""

from __future__ import annotations

from collections.abc import Iterator

_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY = range(9)
_LIST, _SET, _MAP, _STRUCT, _UUID = range(9, 14)
_DEEPEST = 64  # nesting a footer of the Parquet format never comes near

# field ids of the Parquet format's Thrift structs (parquet.thrift)
_ROW_GROUPS, _COLUMNS, _META_DATA, _STATISTICS = 4, 1, 3, 12
_MAX, _MIN, _MAX_VALUE, _MIN_VALUE = 1, 2, 5, 6


class _Malformed(Exception):
    """The bytes are not the Thrift the reader expects."""


class _Reader:
    """A cursor over Thrift compact-protocol bytes."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at, self.depth = data, 0, 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            raise _Malformed("ends early")
        self.at += 1
        return self.data[self.at - 1]

    def varint(self) -> int:
        value = 0
        for shift in range(0, 70, 7):
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
        raise _Malformed("varint too long")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def binary(self) -> bytes:
        n = self.varint()
        if self.at + n > len(self.data):
            raise _Malformed("binary past the end")
        self.at += n
        return self.data[self.at - n:self.at]

    def fields(self) -> Iterator[tuple[int, int]]:
        """(field id, type) of each field of the struct at the cursor, up to its end; the
        caller reads or skips each value before asking for the next."""
        self.depth += 1
        if self.depth > _DEEPEST:
            raise _Malformed("nested too deep")
        last = 0
        while (header := self.byte()) & 0x0F != _STOP:
            delta, kind = header >> 4, header & 0x0F
            last = last + delta if delta else self.zigzag()
            yield last, kind
        self.depth -= 1

    def elements(self) -> tuple[int, int]:
        """(count, element type) of the list or set at the cursor."""
        header = self.byte()
        count = header >> 4
        return (self.varint() if count == 15 else count), header & 0x0F

    def skip(self, kind: int) -> None:
        if kind in (_LIST, _SET, _MAP, _STRUCT):
            self.depth += 1
            if self.depth > _DEEPEST:
                raise _Malformed("nested too deep")
            self._skip(kind)
            self.depth -= 1
        else:
            self._skip(kind)

    def _skip(self, kind: int) -> None:
        if kind in (_TRUE, _FALSE):  # a struct field's value is in its header
            return
        if kind == _BYTE:
            self.byte()
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind in (_DOUBLE, _UUID):
            self.at += 8 if kind == _DOUBLE else 16
            if self.at > len(self.data):
                raise _Malformed("ends early")
        elif kind == _BINARY:
            self.binary()
        elif kind in (_LIST, _SET):
            count, element = self.elements()
            for _ in range(count):
                self.skip(_element(element))
        elif kind == _MAP:
            count = self.varint()
            if count:
                types = self.byte()
                for _ in range(count):
                    self.skip(_element(types >> 4))
                    self.skip(_element(types & 0x0F))
        elif kind == _STRUCT:
            for _, field_kind in self.fields():
                self.skip(field_kind)
        else:
            raise _Malformed(f"unknown type {kind}")


def _element(kind: int) -> int:
    """A list's, set's or map's element type as read: a boolean there is a whole byte."""
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
        reader = _Reader(footer)
        for field, kind in reader.fields():
            if field != _ROW_GROUPS or kind != _LIST:
                reader.skip(kind)
                continue
            groups, element = reader.elements()
            if element != _STRUCT:
                raise _Malformed("row groups are not structs")
            for _ in range(groups):
                for leaf, value in _row_group_maxima(reader, leaves).items():
                    found[leaf].append(value)
    except _Malformed:
        return dict.fromkeys(leaves)
    return {leaf: None if None in values else max([-1, *values])  # type: ignore[list-item]
            for leaf, values in found.items()}


def _row_group_maxima(reader: _Reader, leaves: dict[int, tuple[int, bool]]
                      ) -> dict[int, int | None]:
    maxima: dict[int, int | None] = dict.fromkeys(leaves)
    for field, kind in reader.fields():
        if field != _COLUMNS or kind != _LIST:
            reader.skip(kind)
            continue
        count, element = reader.elements()
        if element != _STRUCT:
            raise _Malformed("columns are not structs")
        for leaf in range(count):
            stats = _column_statistics(reader)
            if leaf in leaves:
                maxima[leaf] = _largest(stats, *leaves[leaf])
    return maxima


def _column_statistics(reader: _Reader) -> dict[int, bytes]:
    """The binary fields of a ColumnChunk's meta_data.statistics (empty when it has none)."""
    stats: dict[int, bytes] = {}
    for field, kind in reader.fields():
        if field != _META_DATA or kind != _STRUCT:
            reader.skip(kind)
            continue
        for meta_field, meta_kind in reader.fields():
            if meta_field != _STATISTICS or meta_kind != _STRUCT:
                reader.skip(meta_kind)
                continue
            for stat_field, stat_kind in reader.fields():
                if stat_kind == _BINARY:
                    stats[stat_field] = reader.binary()
                else:
                    reader.skip(stat_kind)
    return stats


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
