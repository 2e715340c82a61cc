"""One Parquet file from parts encoded apart: each part is a whole Parquet file (a row group
or more, encoded by a thread of its own while others encode theirs), and the parts' bodies
are appended in order under one footer listing all their row groups, each byte offset in it
moved to where its bytes now lie. The footer is Thrift's compact protocol, read and written
here field by field; fields this module does not move are kept as they were. Parts with a
page index are refused (its page offsets are in the body); pyarrow writes none unless
asked (`write_page_index`)."""

from __future__ import annotations

import errno
import struct
from typing import Any, BinaryIO

from pipeline.io import thrift_compact as thrift

__all__ = ["JoinedParquet", "JoinError"]

MAGIC = b"PAR1"

# parquet.thrift field ids: FileMetaData, RowGroup, ColumnChunk, ColumnMetaData
_FILE_NUM_ROWS, _FILE_ROW_GROUPS = 3, 4
_GROUP_COLUMNS, _GROUP_FILE_OFFSET, _GROUP_ORDINAL = 1, 5, 7
_CHUNK_OFFSETS = (2,)  # file_offset
_CHUNK_INDEXES = (4, 6)  # offset_index_offset, column_index_offset: a page index
_CHUNK_META = 3
_META_OFFSETS = (9, 10, 11, 14)  # data, index, dictionary page; bloom filter


class JoinError(Exception):
    """A part is not a Parquet file of the schema of the parts before it."""


Field = list  # [field id, compact type, value]


class JoinedParquet:
    """Parquet parts (whole files, the same schema) appended to `sink` in order, then one
    footer (`finish`)."""

    def __init__(self, sink: BinaryIO):
        self._sink = sink
        self._at = len(MAGIC)
        self._head: list[Field] | None = None  # the first part's footer, less its row groups
        self._groups: list[list[Field]] = []
        self._rows = 0
        self._write(memoryview(MAGIC))

    def append(self, part: bytes | memoryview) -> None:
        view = memoryview(part).cast("B")  # bytes, not the signed ones a pa.Buffer views
        if len(view) < 12 or view[:4] != MAGIC or view[-4:] != MAGIC:
            raise JoinError("not a Parquet file")
        length = struct.unpack("<I", view[-8:-4])[0]
        body_end = len(view) - 8 - length
        if body_end < 4:
            raise JoinError("its footer's length is past its start")
        try:
            footer, end = _read_struct(view[body_end:len(view) - 8], 0)
        except (IndexError, struct.error, thrift.Malformed):
            raise JoinError("its footer ends inside a value") from None
        if end != length:
            raise JoinError("its footer does not end where its length says")
        head = [f for f in footer if f[0] not in (_FILE_NUM_ROWS, _FILE_ROW_GROUPS)]
        if self._head is None:
            self._head = head
        elif _dump_struct(head) != _dump_struct(self._head):
            raise JoinError("its schema or metadata differ from the first part's")
        shift = self._at - len(MAGIC)
        for group in _value(footer, _FILE_ROW_GROUPS, (thrift.STRUCT, []))[1]:
            _move_group(group, shift, len(self._groups))
            self._groups.append(group)
        self._rows += _value(footer, _FILE_NUM_ROWS, 0)
        self._write(view[4:body_end])
        self._at += body_end - 4

    def finish(self) -> None:
        """Write the footer: the first part's schema and metadata, every part's row groups."""
        if self._head is None:
            raise JoinError("no part was given")
        footer = sorted([*self._head, [_FILE_NUM_ROWS, thrift.I64, self._rows],
                         [_FILE_ROW_GROUPS, thrift.LIST, (thrift.STRUCT, self._groups)]],
                        key=lambda f: f[0])
        data = _dump_struct(footer)
        self._write(memoryview(data + struct.pack("<I", len(data)) + MAGIC))

    def _write(self, data: memoryview) -> None:
        """All of `data` (an unbuffered file writes what it can: a disk nearly full, or
        2 GiB at most a call)."""
        while len(data):
            written = self._sink.write(data)
            if not written:
                raise OSError(errno.ENOSPC, "no byte written")
            data = data[written:]

    @property
    def rows(self) -> int:
        return self._rows

    @property
    def row_groups(self) -> int:
        return len(self._groups)


def _value(fields: list[Field], fid: int, default: Any) -> Any:
    return next((f[2] for f in fields if f[0] == fid), default)


def _move_group(group: list[Field], shift: int, ordinal: int) -> None:
    """A row group's byte offsets moved by `shift`, its ordinal set (0 offsets: not set).
    A page index is refused: its page offsets lie in the body, not in the footer."""
    for field in group:
        if field[0] == _GROUP_FILE_OFFSET and field[2]:
            field[2] += shift
        elif field[0] == _GROUP_ORDINAL:
            field[2] = ordinal
        elif field[0] == _GROUP_COLUMNS:
            for chunk in field[2][1]:
                for f in chunk:
                    if f[0] in _CHUNK_INDEXES:
                        raise JoinError("it has a page index, whose offsets would not move")
                    if f[0] in _CHUNK_OFFSETS and f[2]:
                        f[2] += shift
                    elif f[0] == _CHUNK_META:
                        for m in f[2]:
                            if m[0] in _META_OFFSETS and m[2]:
                                m[2] += shift


# --- the compact protocol ------------------------------------------------------------------

def _read_value(buf: memoryview, at: int, kind: int) -> tuple[Any, int]:
    if kind in (thrift.TRUE, thrift.FALSE):  # in a collection: one byte, 1 for true
        return buf[at] == thrift.TRUE, at + 1
    if kind == thrift.BYTE:
        return struct.unpack_from("<b", buf, at)[0], at + 1
    if kind in (thrift.I16, thrift.I32, thrift.I64):
        return thrift.zigzag(buf, at)
    if kind == thrift.DOUBLE:
        return struct.unpack_from("<d", buf, at)[0], at + 8
    if kind == thrift.BINARY:
        n, at = thrift.varint(buf, at)
        return bytes(buf[at:at + n]), at + n
    if kind in (thrift.LIST, thrift.SET):
        n, elem, at = thrift.list_header(buf, at)
        items = []
        for _ in range(n):
            item, at = _read_value(buf, at, elem)
            items.append(item)
        return (elem, items), at
    if kind == thrift.MAP:
        n, at = thrift.varint(buf, at)
        if not n:
            return (0, 0, []), at
        types = buf[at]
        at += 1
        pairs = []
        for _ in range(n):
            k, at = _read_value(buf, at, types >> 4)
            v, at = _read_value(buf, at, types & 0x0F)
            pairs.append((k, v))
        return (types >> 4, types & 0x0F, pairs), at
    if kind == thrift.STRUCT:
        return _read_struct(buf, at)
    raise JoinError(f"its footer holds an unknown Thrift type {kind}")


def _read_struct(buf: memoryview, at: int) -> tuple[list[Field], int]:
    fields: list[Field] = []
    last = 0
    while True:
        if at >= len(buf):
            raise JoinError("its footer ends inside a structure")
        head = buf[at]
        at += 1
        if head == 0:
            return fields, at
        delta, kind = head >> 4, head & 0x0F
        if delta:
            fid = last + delta
        else:
            fid, at = thrift.zigzag(buf, at)
        if kind in (thrift.TRUE, thrift.FALSE):
            value: Any = kind == thrift.TRUE
        else:
            value, at = _read_value(buf, at, kind)
        fields.append([fid, kind, value])
        last = fid


def _dump_value(kind: int, value: Any) -> bytes:
    if kind in (thrift.TRUE, thrift.FALSE):
        return bytes([thrift.TRUE if value else thrift.FALSE])
    if kind == thrift.BYTE:
        return struct.pack("<b", value)
    if kind in (thrift.I16, thrift.I32, thrift.I64):
        return thrift.encode_zigzag(value)
    if kind == thrift.DOUBLE:
        return struct.pack("<d", value)
    if kind == thrift.BINARY:
        return thrift.encode_varint(len(value)) + value
    if kind in (thrift.LIST, thrift.SET):
        elem, items = value
        return thrift.encode_list_header(len(items), elem) + b"".join(
            _dump_value(elem, item) for item in items)
    if kind == thrift.MAP:
        ktype, vtype, pairs = value
        if not pairs:
            return b"\x00"
        return (thrift.encode_varint(len(pairs)) + bytes([ktype << 4 | vtype])
                + b"".join(_dump_value(ktype, k) + _dump_value(vtype, v) for k, v in pairs))
    if kind == thrift.STRUCT:
        return _dump_struct(value)
    raise JoinError(f"unknown Thrift type {kind}")


def _dump_struct(fields: list[Field]) -> bytes:
    out = bytearray()
    last = 0
    for fid, kind, value in fields:
        if kind in (thrift.TRUE, thrift.FALSE):
            kind = thrift.TRUE if value else thrift.FALSE
        if 0 < fid - last <= 15:
            out.append((fid - last) << 4 | kind)
        else:
            out.append(kind)
            out += thrift.encode_zigzag(fid)
        if kind not in (thrift.TRUE, thrift.FALSE):
            out += _dump_value(kind, value)
        last = fid
    out.append(0)
    return bytes(out)
