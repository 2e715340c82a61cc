"""The token reader of the classic format: signed decimal integers separated by C whitespace
(space and bytes 9-13, i.e. tab, newline, vertical tab, form feed, carriage return), read
with a checked path (any token, verdict and value) and a fast path for plain digits (1 to 18
digits). The reader itself is compiled at install time with the parser (`_classic.pyx`);
these are its verdicts."""

from __future__ import annotations

# Token reader verdicts.
T_INT = 0
T_EOF = 1
T_NOT_INT = 2
T_OVERFLOW = 3
