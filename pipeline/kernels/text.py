"""Text cells as Arrow (offsets, bytes): lists of heaps ("5 12", "[5, 12]") and integer keys,
read on the fast path; whatever these do not cover the caller parses the exact, slow way.

The kernels are compiled at install time (`_text.pyx`); they take int64 offsets and uint8
bytes (other offset dtypes are converted)."""

from __future__ import annotations

import numpy as np

from pipeline.kernels import _text


def _buffers(offsets, data) -> tuple[np.ndarray, np.ndarray]:
    return np.ascontiguousarray(offsets, np.int64), np.ascontiguousarray(data, np.uint8)


def heap_text_lists(offsets, data):
    """Parse each string data[offsets[i]:offsets[i+1]] as a list of heaps ("5 12", "5,12",
    "[5, 12]"): (list offsets, values, rows the plain grammar does not cover - a "+", a long
    number, non-ASCII, a stray bracket, a comma with no heap before or after it - which hold
    an empty list here). One pass over the text, on one thread: two passes on all threads
    (count, then store) took twice the CPU, which the run's other threads had no spare of."""
    found, counts, values = _text.heap_text_lists(*_buffers(offsets, data))
    return counts, values, np.nonzero(found < 0)[0]


def int_text_values(offsets, data):
    """Each string data[offsets[i]:offsets[i+1]], less ASCII spaces around it, as an integer
    written exactly as Int64 writes it ("-" only, no leading zero, no "-0"; at most 18
    digits): (values, True), or (values so far, False) at the first string that is not."""
    return _text.int_text_values(*_buffers(offsets, data))


def needs_strip(offsets, data):
    """Whether any string data[offsets[i]:offsets[i+1]] is empty or may start or end with
    whitespace (an ASCII space or any non-ASCII byte, which the exact strip then judges)."""
    return _text.needs_strip(*_buffers(offsets, data))
