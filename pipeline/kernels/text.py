"""Text cells: lists of heaps ("5 12", "[5, 12]") and integer keys, read on the fast path;
whatever these do not cover the caller parses the exact, slow way.

The kernels are compiled at install time (`_text.pyx`). They take the cells as Arrow's
(offsets, bytes) (other offset dtypes are converted) or as ("views", views, buffers), Arrow's
string views, polars' own layout (`buffers.text_layout`), read where they lie."""

from __future__ import annotations

import numpy as np

from pipeline.kernels import _text


def heap_text_lists(*text):
    """Parse each string as a list of heaps ("5 12", "5,12", "[5, 12]"): (list offsets,
    values, rows the plain grammar does not cover - a "+", a long number, non-ASCII, a stray
    bracket, a comma with no heap before or after it - which hold an empty list here). One
    pass over the text, on one thread: two passes on all threads (count, then store) took
    twice the CPU, which the run's other threads had no spare of."""
    found, counts, values = _text.heap_text_lists(text)
    return counts, values, np.nonzero(found < 0)[0]


def int_text_values(*text):
    """Each string, less ASCII spaces around it, as an integer written exactly as Int64
    writes it ("-" only, no leading zero, no "-0"; at most 18 digits): (values, True), or
    (values so far, False) at the first string that is not."""
    return _text.int_text_values(text)


def needs_strip(*text):
    """Whether any string is empty or may start or end with whitespace (an ASCII space or
    any non-ASCII byte, which the exact strip then judges)."""
    return _text.needs_strip(text)
