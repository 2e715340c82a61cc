"""Thrift's compact protocol, the encoding of a Parquet file's footer: its type codes, and the
numbers and list headers every reader and writer of it needs (`read.footer_stats` walks a
footer for its statistics; `outputs.joined_parquet` reads footers whole and writes one)."""

from __future__ import annotations

from collections.abc import Sequence

STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT, UUID = range(14)


class Malformed(Exception):
    """Bytes that are not the compact protocol's (reading past their end is an IndexError,
    which callers take the same way)."""


def varint(data: Sequence[int], at: int) -> tuple[int, int]:
    """(the unsigned varint at `at`, where it ends)."""
    value = shift = 0
    while True:
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise Malformed("varint too long")


def zigzag(data: Sequence[int], at: int) -> tuple[int, int]:
    """(the signed, zigzag-encoded varint at `at`, where it ends): i16, i32, i64, field ids."""
    n, at = varint(data, at)
    return (n >> 1) ^ -(n & 1), at


def list_header(data: Sequence[int], at: int) -> tuple[int, int, int]:
    """(count, element type, where the elements start) of the list or set at `at`."""
    header = data[at]
    count = header >> 4
    if count == 15:
        count, at = varint(data, at + 1)
        return count, header & 0x0F, at
    return count, header & 0x0F, at + 1


def encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if not n:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def encode_zigzag(n: int) -> bytes:
    return encode_varint((n << 1) ^ (n >> 63))


def encode_list_header(count: int, element: int) -> bytes:
    return (bytes([count << 4 | element]) if count < 15
            else bytes([0xF0 | element]) + encode_varint(count))
