"""The input's columns and form, and the schema and column names of the rejects."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import polars as pl

from pipeline.config import Columns
from pipeline.errors import SHOWN_CHARS, InputError, brief_repr, truncated

REJECT_SCHEMA = {
    "table": pl.String, "source": pl.String, "row": pl.Int64, "rule_set_id": pl.String,
    "position_id": pl.String, "column": pl.String, "reason_code": pl.String,
    "reason": pl.String,
}


HEAPS = pl.List(pl.Int64)
_CANONICAL = set(vars(Columns()))
LISTED_CHARS = 200  # a list of column names (or a type) in a message


def detect_form(columns: Sequence[str], cols: Columns, source: str) -> str:
    """'wide' or 'long' from the columns present (docs/inputs.md)."""
    has_wide, has_long = cols.heaps in columns, cols.heap in columns
    if has_wide and has_long:
        raise InputError(f"{source}: has both {brief_repr(cols.heaps)} (wide) and "
                         f"{brief_repr(cols.heap)} (long) columns; keep one", path=source)
    if not has_wide and not has_long:
        raise InputError(f"{source}: no {brief_repr(cols.heaps)} column (wide form) or "
                         f"{brief_repr(cols.heap)} column (long form); columns are "
                         f"{brief_repr(list(columns), LISTED_CHARS)}"
                         f"{_case_hint(columns, cols)}", path=source)
    return "wide" if has_wide else "long"


def _case_hint(columns: Sequence[str], cols: Columns, among: Sequence[str] | None = None
               ) -> str:
    """'; ...' when columns (`among` them, if given) differ from expected names that the
    file lacks in case alone (`RULE_SET_ID`, as Snowflake and Oracle unload them): names
    match exactly, and config.yaml's `columns:` names them; else ''."""
    by_lower = {c.lower(): c for c in (columns if among is None else among)}
    found = {key: by_lower[name.lower()] for key, name in vars(cols).items()
             if name not in columns and name.lower() in by_lower}
    if not found:
        return ""
    named = ", ".join(f"{key}: {column}" for key, column in found.items())
    return (f"; names are matched exactly, case included: to read these, set config.yaml's "
            f"columns ({truncated(named, LISTED_CHARS)})")


def check_columns(columns: Sequence[str], required: Sequence[str], optional: Sequence[str],
                  source: str) -> None:
    """Missing, extra or misnamed columns are whole-file errors naming the column."""
    missing = [c for c in required if c not in columns]
    extra = [c for c in columns if c not in required and c not in optional]
    if missing:
        hint = f"; unexpected columns {brief_repr(extra, LISTED_CHARS)}" if extra else ""
        hint += _case_hint(columns, Columns(**{m: m for m in missing if m in _CANONICAL}))
        if f"/{missing[0]}=" in source.replace("\\", "/"):
            hint += (f"; a partition directory {brief_repr(missing[0] + '=...')} in the path is "
                     "not read as a column")
        raise InputError(f"{source}: missing column {brief_repr(missing[0])} (columns are "
                         f"{brief_repr(list(columns), LISTED_CHARS)}{hint})", path=source,
                         column=missing[0])
    if extra:
        expected = list(required) + [c for c in optional]
        hint = (" (pandas' index, which to_parquet writes as a column: write the frame with "
                "index=False)" if re.fullmatch(r"__index_level_\d+__", extra[0]) else "")
        hint += _case_hint(columns, Columns(**{e: e for e in expected if e in _CANONICAL}),
                           among=extra)
        raise InputError(f"{source}: unexpected column {brief_repr(extra[0])} (expected "
                         f"{brief_repr(expected, LISTED_CHARS)}){hint}", path=source,
                         column=extra[0])


def wrong_type(source: str, name: str, dtype: pl.DataType, expected: str) -> InputError:
    hint = (" (bytes, as a UUID or a hash is often stored: write the key as text, such as the "
            "UUID's canonical form)" if dtype == pl.Binary else "")
    if isinstance(dtype, pl.Decimal) and dtype.scale == 0:
        hint = (" (a NUMBER or DECIMAL column, as Snowflake and Oracle unload integers: cast "
                "it to an integer type in the export, such as ::BIGINT)")
    return InputError(f"{source}: column {brief_repr(name)} has type "
                      f"{truncated(str(dtype), LISTED_CHARS)}, expected {expected}{hint}",
                      path=source, column=name)


def input_column_names(cols: Columns, form: str) -> dict[str, str]:
    """The input column each canonical `_column` name stands for (`columns:` in config.yaml).
    Every step names the column at fault canonically; the rejects are renamed once, by the
    engine, so that `column` says what the user's file calls it. In long form the heaps are
    one `heap` column."""
    return {"rule_set_id": cols.rule_set_id, "kind": cols.kind, "moves": cols.moves,
            "position_id": cols.position_id, "heap": cols.heap,
            "heaps": cols.heaps if form == "wide" else cols.heap}


def with_input_column_names(rejects: pl.DataFrame, cols: Columns, form: str) -> pl.DataFrame:
    """Rejects whose `column` names the user's input column (see `input_column_names`)."""
    return rejects.with_columns(pl.col("column").replace(input_column_names(cols, form)))


INVISIBLE = tuple(chr(c) for c in (*range(0x20), *range(0x7f, 0xa0), 0xa0, 0xad, 0x61c,
                                   *range(0x200b, 0x2010), *range(0x2028, 0x202f),
                                   *range(0x2060, 0x2065), *range(0x2066, 0x206a), 0xfeff))
"""Characters a reader cannot see, which exports leave in keys (a byte-order mark inside a
file joined from parts, a zero-width or no-break space pasted with an id, a control or
direction mark): a reason shows each as its escape, or `unknown rule_set_id 1` would name
an id the rules do hold."""


def _escaped(char: str) -> str:
    """`char` as the terminal shows it (`\\n`, `\\x1b`, `\\ufeff`): the same text in the
    rejects as on stderr."""
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char)
    return named or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def shown_text(value: pl.Expr) -> pl.Expr:
    """A value as text for a reason, cut as `errors.truncated` cuts it (ids may be any
    length), then its invisible characters escaped (`INVISIBLE`: `\\ufeff1`)."""
    text = value.cast(pl.String)
    cut = pl.when(text.str.len_chars() <= SHOWN_CHARS).then(text).otherwise(
        pl.concat_str(text.str.slice(0, SHOWN_CHARS - 3), pl.lit("...")))
    return cut.str.replace_many(list(INVISIBLE), [_escaped(c) for c in INVISIBLE])


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_UNTIDY = re.compile(r"(^|/)\.\.?(/|$)|//")  # a `.` or `..` segment, or an empty one


def source_text(source: str) -> str:
    """A file's path for the rejects' `source` (and the reasons that name a file): as the
    run names it, with `.` and `..` segments and doubled slashes taken out as
    `os.path.normpath` does (`jobs/../data/r.csv` is `data/r.csv`; no symbolic link is
    resolved). An object-store URL is as given (its keys have no such segments)."""
    if not source or _URL.match(source) or not _UNTIDY.search(source.replace(os.sep, "/")):
        return source
    return os.path.normpath(source)


def with_source_text(sources: pl.Series) -> pl.Series:
    """`source_text` of each value of a column of file names (few distinct ones)."""
    distinct = sources.drop_nulls().unique().to_list()
    changed = {s: source_text(s) for s in distinct if source_text(s) != s}
    return sources.replace(changed) if changed else sources
