"""Zero-copy numpy views of polars' Arrow buffers, the arrays the kernels take."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import polars as pl
import pyarrow as pa

HeapChunks = list[tuple[np.ndarray, np.ndarray]]


def text_buffers(s: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """A String column as Arrow (offsets, UTF-8 bytes) numpy views, for the text kernels."""
    arr = s.to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.type != pa.large_string():
        arr = arr.cast(pa.large_string())
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], np.int64)[arr.offset:arr.offset + len(arr) + 1]
    data = (np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None
            else np.zeros(0, np.uint8))
    return offsets, data


def text_views(s: pl.Series) -> tuple[str, np.ndarray, list[np.ndarray]] | None:
    """A String column (no nulls) in polars' own layout, Arrow's string views, as numpy views:
    ("views", the (n, 4) int32 views, the data buffers), for `kernels.text_run_order`
    (`text_buffers` copies every text into one buffer first); None when it is not in that
    layout."""
    arr = s.to_arrow(compat_level=pl.CompatLevel.newest())
    if isinstance(arr, pa.ChunkedArray):
        if arr.num_chunks != 1:
            return None
        arr = arr.chunk(0)
    if arr.type != pa.string_view() or arr.null_count:
        return None
    buffers = arr.buffers()
    views = np.frombuffer(buffers[1], np.int32)[4 * arr.offset:4 * (arr.offset + len(arr))]
    return ("views", views.reshape(-1, 4),
            [np.frombuffer(b, np.uint8) if b is not None else np.zeros(0, np.uint8)
             for b in buffers[2:]])


def text_layout(s: pl.Series) -> tuple:
    """A String column (no nulls) as the text kernels take it: polars' own string views
    where it is one chunk in that layout (read where they lie), else Arrow's (offsets,
    bytes), copied (`text_buffers`)."""
    return text_views(s) or text_buffers(s)


def string_views(s: pl.Series) -> tuple[np.ndarray, list[np.ndarray]]:
    """A String column (no nulls) as one piece of Arrow's string views (`text_views`): its
    (n, 4) int32 views and data buffers."""
    if s.len() == 0:
        return np.zeros((0, 4), np.int32), []
    views = text_views(s.rechunk())
    if views is None:
        raise ValueError(f"{s.name}: not a column of string views without nulls")
    return views[1], views[2]


def text_pieces(s: pl.Series) -> Iterator[tuple]:
    """A String column (no nulls) chunk by chunk, each in its `text_layout`: the pieces
    `kernels.text_addresses` reads."""
    for chunk in s.get_chunks():
        yield text_layout(chunk)


def arrow_int64(values: np.ndarray) -> pa.Array:
    """A view of int64 values as Arrow (`pa.array` would import pandas, slow to import, to check
    whether they are pandas objects)."""
    return pa.Array.from_buffers(pa.int64(), values.shape[0], [None, pa.py_buffer(values)])


def numpy_view(values: pa.Array) -> np.ndarray:
    """An Arrow integer array without nulls as numpy, a view of its values buffer: pyarrow's
    `to_numpy` imports pandas on its first call (in a run that spills, a cost of its start).
    Other arrays through `to_numpy` as a view too, which refuses nulls (not floats with NaN)."""
    if not pa.types.is_integer(values.type) or values.null_count:
        return values.to_numpy(zero_copy_only=True)
    kind = "i" if pa.types.is_signed_integer(values.type) else "u"
    dtype = np.dtype(f"{kind}{values.type.bit_width // 8}")
    data = values.buffers()[1]
    if data is None:
        return np.zeros(0, dtype)
    return np.frombuffer(data, dtype)[values.offset:values.offset + len(values)]


def arrow_view(values: np.ndarray) -> pa.Array:
    """`arrow_int64` for contiguous values of any integer dtype."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), values.shape[0],
                                 [None, pa.py_buffer(values)])


def list_chunks(heaps: pl.Series) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """Per chunk of a List(Int64) column: (Arrow offsets, the child's int64 values, how many
    child values are null), as views of polars' own buffers (no rechunk, and no copy unless
    nulls are read as 0). Offsets index the child values from its start."""
    out = []
    for chunk in heaps.get_chunks():
        arr = chunk.to_arrow()
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        offsets = np.frombuffer(arr.buffers()[1], np.int64)[arr.offset:arr.offset + len(arr) + 1]
        child = arr.values
        nulls = child.null_count
        if nulls:
            import pyarrow.compute as pc  # only here: else every run's start pays its import

            child = pc.fill_null(child, 0)
        values = np.frombuffer(child.buffers()[1], np.int64)[child.offset:
                                                             child.offset + len(child)]
        out.append((offsets, values, nulls))
    return out


def heap_buffers(positions: pl.DataFrame) -> HeapChunks:
    """The heaps column as (Arrow offsets, flat int64 values) per chunk, computed once per
    batch (null heaps, only possible in rows that are not evaluated, read as 0)."""
    return [(offsets, values) for offsets, values, _ in list_chunks(positions["heaps"])]


def row_slices(buffers: HeapChunks) -> list[tuple[slice, np.ndarray, np.ndarray]]:
    """Each chunk's rows within the frame, with its offsets and values."""
    out, start = [], 0
    for offsets, values in buffers:
        stop = start + offsets.shape[0] - 1
        out.append((slice(start, stop), offsets, values))
        start = stop
    return out


def gathered_rows(offsets: np.ndarray, values: np.ndarray, rows: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The lists at `rows` (ascending row numbers) as new (offsets, values), copied, and
    read-only as the views of Arrow buffers are."""
    lengths = offsets[rows + 1] - offsets[rows]
    out = np.zeros(rows.shape[0] + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    at = np.repeat(offsets[rows] - out[:-1], lengths) + np.arange(out[-1], dtype=np.int64)
    gathered = values[at]
    out.flags.writeable = gathered.flags.writeable = False
    return out, gathered
