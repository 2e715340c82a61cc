"""Pure frame -> frame steps: normalise, validate, look up, XOR, winning moves. No paths here.

Every normalised frame carries `_source` (file), `_row` (0-based row in that file), `_column`
and `_reason`: a row whose `_reason` is set is rejected with that reason, the rest go on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import kernels
from pipeline.config import Columns
from pipeline.errors import SHOWN_CHARS, InputError, RuleError, cut, shown
from pipeline.grundy import KINDS, MAX_HEAP, Rule, TableSet, canonical_rule

REJECT_SCHEMA = {
    "table": pl.String, "source": pl.String, "row": pl.Int64, "rule_set_id": pl.String,
    "position_id": pl.String, "column": pl.String, "reason": pl.String,
}
HEAPS = pl.List(pl.Int64)
FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)
_INT_TEXT = re.compile(r"^[+-]?[0-9]+$")
_CANONICAL_INT = r"^-?(0|[1-9][0-9]*)$"
_ROUND_TRIP_INT = r"^(0|-?[1-9][0-9]*)$"


# ---- columns and types ----------------------------------------------------------------------

def detect_form(columns: Sequence[str], cols: Columns, source: str) -> str:
    """'wide' or 'long' from the columns present (DESIGN 2)."""
    has_wide, has_long = cols.heaps in columns, cols.heap in columns
    if has_wide and has_long:
        raise InputError(f"{source}: has both {shown(cols.heaps)} (wide) and "
                         f"{shown(cols.heap)} (long) columns; keep one")
    if not has_wide and not has_long:
        raise InputError(f"{source}: no {shown(cols.heaps)} column (wide form) or "
                         f"{shown(cols.heap)} column (long form); columns are "
                         f"{shown(list(columns), _LISTED_CHARS)}")
    return "wide" if has_wide else "long"


def check_columns(columns: Sequence[str], required: Sequence[str], optional: Sequence[str],
                  source: str) -> None:
    """Missing, extra or misnamed columns are whole-file errors naming the column."""
    missing = [c for c in required if c not in columns]
    extra = [c for c in columns if c not in required and c not in optional]
    if missing:
        hint = f"; unexpected columns {shown(extra, _LISTED_CHARS)}" if extra else ""
        raise InputError(f"{source}: missing column {shown(missing[0])} (columns are "
                         f"{shown(list(columns), _LISTED_CHARS)}{hint})")
    if extra:
        expected = list(required) + [c for c in optional]
        raise InputError(f"{source}: unexpected column {shown(extra[0])} (expected "
                         f"{shown(expected, _LISTED_CHARS)})")


def _wrong_type(source: str, name: str, dtype: pl.DataType, expected: str) -> InputError:
    return InputError(f"{source}: column {shown(name)} has type "
                      f"{cut(str(dtype), _LISTED_CHARS)}, expected {expected}")


def _key(frame: pl.DataFrame, name: str, source: str) -> pl.Series:
    s = frame[name]
    if s.dtype.is_integer():
        return s.cast(pl.Int64, strict=False).alias(name)
    if s.dtype == pl.String:
        if s.len() and not s.null_count():
            values, exact = kernels.int_text_values(*_text_buffers(s))
            if exact:  # CSV integers as Int64 at once: the same as stripping and integer_keys
                return pl.Series(name, values, dtype=pl.Int64)
        return s.str.strip_chars().replace("", None).alias(name)
    raise _wrong_type(source, name, s.dtype, "integer or string")


def _text_buffers(s: pl.Series) -> tuple[np.ndarray, np.ndarray]:
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


def unify_key_types(frames: Sequence[pl.DataFrame], name: str) -> list[pl.DataFrame]:
    """Give one key column the same type in every frame: Int64 when every value in every frame
    is an integer (CSV text included), else String."""
    dtypes = {f[name].dtype for f in frames}
    if dtypes <= {pl.Int64, pl.Null}:
        return [f.with_columns(pl.col(name).cast(pl.Int64)) for f in frames]
    as_text = [f.with_columns(pl.col(name).cast(pl.String)) for f in frames]
    all_int = all(
        f.select(pl.col(name).drop_nulls().str.contains(_CANONICAL_INT).all()).item() is not False
        and f.select(pl.col(name).cast(pl.Int64, strict=False).null_count()
                     == pl.col(name).null_count()).item()
        for f in as_text
    )
    if all_int:
        return [f.with_columns(pl.col(name).cast(pl.Int64)) for f in as_text]
    return as_text


def integer_keys(frame: pl.DataFrame) -> pl.DataFrame:
    """Text key columns (CSV) whose every value is an integer written as Int64 writes it, as
    Int64, so that a batch can take the integer sort. The text each value came from is what
    casting back gives ("-0" and "07" stay text), so `unify_key_types` over all batches still
    decides as it would on the text."""
    text = [name for name in ("rule_set_id", "position_id")
            if name in frame.columns and frame[name].dtype == pl.String]
    exact = [name for name in text if frame.select(
        pl.col(name).drop_nulls().str.contains(_ROUND_TRIP_INT).all()
        & (pl.col(name).cast(pl.Int64, strict=False).null_count() == pl.col(name).null_count())
    ).item()]
    return frame.with_columns(pl.col(name).cast(pl.Int64) for name in exact) if exact else frame


def needs_text(frame: pl.DataFrame, name: str) -> bool:
    """Whether this frame alone makes a key column text for every frame it is unified with."""
    (unified,) = unify_key_types([frame.select(name)], name)
    return unified[name].dtype == pl.String


# ---- list text ("2 5 12", "2,5,12", "[2, 5, 12]", "1..3") -----------------------------------
#
# Values are separated by whitespace, or by one comma with any whitespace around it; the list
# may be in brackets. A comma with no value before or after it is an empty element, an error
# (a value lost in the data, not a separator). Whitespace is Unicode's White_Space, as polars
# strips it and its regex `\s` matches it (Python's `\s` also takes U+001C..U+001F).

_SPACE = "[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
_SPACES = re.compile(f"{_SPACE}+")
_EDGE_SPACES = re.compile(f"^{_SPACE}+|{_SPACE}+$")
_EMPTY_ELEMENT = f"^{_SPACE}*,|,{_SPACE}*,|,{_SPACE}*$"
_INT64_DIGITS = 19
_LISTED_CHARS = 200  # a list of column names (or a type) in a message
_LISTED_ROWS = 5  # a clash names the first few rows of a rule_set_id defined many times


def _strip(text: str) -> str:
    return _EDGE_SPACES.sub("", text)


def parse_int_list(text: str, allow_ranges: bool = False, item: str = "element") -> list[int]:
    """Parse a list written in a CSV cell; ValueError says what is wrong, naming the element
    as `item` ("heap", "move") with its index in the list."""
    body = _strip(text)
    if body.startswith("[") != body.endswith("]") or (body.startswith("[") and len(body) < 2):
        raise ValueError(f"malformed list {shown(text)} (unbalanced brackets)")
    if body.startswith("["):
        body = body[1:-1]
    pieces = body.split(",")
    values: list[int] = []
    for piece in pieces:
        tokens = _SPACES.split(_strip(piece))
        if tokens == [""]:
            if len(pieces) > 1:
                raise ValueError(f"{item} at index {len(values)} is empty in {shown(text)}")
            continue
        for token in tokens:
            if allow_ranges and ".." in token:
                values.extend(_int_range(token, text, item, len(values)))
            else:
                values.append(_int_token(token, text, item, len(values)))
    return values


def _int_token(token: str, text: str, item: str, index: int) -> int:
    if not _INT_TEXT.fullmatch(token):
        raise ValueError(f"{shown(token)} in {shown(text)} is not an integer")
    if len(token.lstrip("+-").lstrip("0")) > _INT64_DIGITS:  # int() of it would cost, or fail
        raise ValueError(f"{item} {shown(token)} at index {index} is larger than 2^63-1")
    return int(token)


def _int_range(token: str, text: str, item: str, index: int) -> range:
    lo, _, hi = token.partition("..")
    if not (_INT_TEXT.fullmatch(lo) and _INT_TEXT.fullmatch(hi)):
        raise ValueError(f"malformed range {shown(token)} in {shown(text)} (expected "
                         "\"FIRST..LAST\", two integers)")
    first, last = _int_token(lo, text, item, index), _int_token(hi, text, item, index)
    if first > last:
        raise ValueError(f"range {shown(token)} is empty (its first value is above its last)")
    if last - first > 1_000_000:
        raise ValueError(f"range {shown(token)} is too long (over 1,000,000 values)")
    return range(first, last + 1)


def _explain_heaps(values: Sequence[int | None] | None) -> str | None:
    """Why a parsed list of heaps cannot be evaluated, or None when it can."""
    if values is None:
        return "heaps is null"
    for i, v in enumerate(values):
        if v is None:
            return f"heap at index {i} is null"
        if v < 0:
            return f"heap {v} at index {i} is negative"
        if v > MAX_HEAP:
            return f"heap {v} at index {i} is larger than 2^63-1"
    return None


def _explain_heap_text(text: str | None, wide: bool) -> str:
    if text is None:
        return "heaps is null" if wide else "heap is null"
    try:
        values = parse_int_list(text, item="heap") if wide else _heap_cell(text)
    except ValueError as exc:
        return str(exc)
    return _explain_heaps(values) or f"cannot read heaps {shown(text)}"


def _heap_cell(text: str) -> list[int]:
    """A long-form heap cell: one integer."""
    body = _strip(text)
    if body == "":
        raise ValueError("heap is empty")
    if not _INT_TEXT.fullmatch(body):
        raise ValueError(f"heap {shown(text)} is not an integer")
    return [_int_token(body, text, "heap", 0)]


# ---- rules ----------------------------------------------------------------------------------

def normalize_rules(raw: pl.DataFrame, rows: np.ndarray, source: str,
                    cols: Columns) -> pl.DataFrame:
    """Rules file -> (_source, _row, rule_set_id, kind, moves, _column, _reason)."""
    check_columns(raw.columns, [cols.rule_set_id], [cols.kind, cols.moves], source)
    if cols.moves not in raw.columns and cols.kind not in raw.columns:
        raise InputError(f"{source}: missing column {shown(cols.moves)} (columns are "
                         f"{shown(raw.columns, _LISTED_CHARS)})")
    ids = _key(raw, cols.rule_set_id, source)
    n = raw.height
    kinds = _text_column(raw, cols.kind, source, n)
    moves_col = raw[cols.moves] if cols.moves in raw.columns else pl.Series([None] * n)
    if moves_col.dtype == pl.String or moves_col.dtype == pl.Null:
        pass
    elif not (isinstance(moves_col.dtype, pl.List) and (
            moves_col.dtype.inner.is_integer() or moves_col.dtype.inner == pl.Null)):
        raise _wrong_type(source, cols.moves, moves_col.dtype,
                          'a list of integers (or text like "2 5 12")')
    out_kind, out_moves, out_col, out_reason = [], [], [], []
    for rid, kind, moves in zip(ids.to_list(), kinds, moves_col.to_list()):
        kind = None if kind is None else _strip(kind).lower()
        column, reason, rule = _rule_of(rid, kind, moves)
        out_kind.append(rule.kind if rule else kind)
        out_moves.append(list(rule.moves) if rule else None)
        out_col.append(column)
        out_reason.append(reason)
    return pl.DataFrame({
        "_source": pl.Series([source] * n, dtype=pl.String),
        "_row": pl.Series(rows, dtype=pl.Int64),
        "rule_set_id": ids,
        "kind": pl.Series(out_kind, dtype=pl.String),
        "moves": pl.Series(out_moves, dtype=HEAPS),
        "_column": pl.Series(out_col, dtype=pl.String),
        "_reason": pl.Series(out_reason, dtype=pl.String),
    })


def _rule_of(rid: object, kind: str | None, moves: str | list[int | None] | None
             ) -> tuple[str | None, str | None, Rule | None]:
    """(column at fault, reason, None) for a bad rules row, else (None, None, its Rule).
    `kind` is already stripped and lower case; the column is the canonical name."""
    if rid is None:
        return "rule_set_id", "rule_set_id is empty", None
    if isinstance(moves, str):
        try:
            moves = parse_int_list(moves, allow_ranges=True, item="move")
        except ValueError as exc:
            return "moves", str(exc), None
    elif moves is not None and None in moves:
        return "moves", f"move at index {moves.index(None)} is null", None
    try:
        return None, None, canonical_rule(kind, moves)
    except RuleError as exc:
        return ("kind" if kind and kind not in KINDS else "moves"), str(exc), None


def _text_column(raw: pl.DataFrame, name: str, source: str, n: int) -> list[str | None]:
    if name not in raw.columns:
        return [None] * n
    s = raw[name]
    if s.dtype not in (pl.String, pl.Null):
        raise _wrong_type(source, name, s.dtype, "string")
    return s.to_list()


def shown_text(value: pl.Expr) -> pl.Expr:
    """A value as text for a reason, cut as `errors.cut` cuts it: ids may be any length."""
    text = value.cast(pl.String)
    return pl.when(text.str.len_chars() <= SHOWN_CHARS).then(text).otherwise(
        pl.concat_str(text.str.slice(0, SHOWN_CHARS - 3), pl.lit("...")))


def reject_duplicate_rules(rules: pl.DataFrame) -> pl.DataFrame:
    """A rule_set_id given more than once is rejected on every row, naming the clash, unless
    every copy is valid and the same rule (harmless repeats are accepted)."""
    keyed = rules.filter(pl.col("rule_set_id").is_not_null())
    where = pl.format("{} row {}", pl.col("_source"), pl.col("_row"))
    clash = (
        keyed.group_by("rule_set_id")
        .agg(pl.len().alias("n"),
             pl.col("_reason").is_not_null().any().alias("any_bad"),
             pl.struct("kind", "moves").n_unique().alias("variants"),
             where.head(_LISTED_ROWS).alias("rows"))
        .filter((pl.col("n") > 1) & (pl.col("any_bad") | (pl.col("variants") > 1)))
    )
    if clash.is_empty():
        return rules
    more = pl.when(pl.col("n") > _LISTED_ROWS).then(
        pl.format("; and {} more", pl.col("n") - _LISTED_ROWS)).otherwise(pl.lit(""))
    rows = pl.concat_str(pl.col("rows").list.join("; "), more)
    rid = shown_text(pl.col("rule_set_id"))
    clash = clash.select(
        "rule_set_id",
        pl.when(pl.col("any_bad"))
        .then(pl.format("rule_set_id {} is defined {} times and not every definition is valid "
                        "({})", rid, pl.col("n"), rows))
        .otherwise(pl.format("rule_set_id {} is defined {} different ways ({})",
                             rid, pl.col("variants"), rows))
        .alias("clash"))
    return (
        rules.join(clash, on="rule_set_id", how="left", nulls_equal=False, maintain_order="left")
        .with_columns(
            pl.coalesce("_reason", "clash").alias("_reason"),
            pl.when(pl.col("_reason").is_null() & pl.col("clash").is_not_null())
            .then(pl.lit("moves")).otherwise(pl.col("_column")).alias("_column"),
        )
        .drop("clash")
    )


def rule_index(rules: pl.DataFrame) -> tuple[list[Rule], pl.DataFrame]:
    """Distinct canonical rules (sorted) and rule_set_id -> table index, or the rule's problem.

    The returned frame has one row per rule_set_id: `table` (null for an invalid rule) and
    `rule_problem` (why its positions are rejected).
    """
    valid = rules.filter(pl.col("_reason").is_null()).unique("rule_set_id", keep="first",
                                                              maintain_order=True)
    distinct = sorted({Rule(k, tuple(m or ())) for k, m in
                       zip(valid["kind"].to_list(), valid["moves"].to_list())})
    index = {r: i for i, r in enumerate(distinct)}
    table = [index[Rule(k, tuple(m or ()))] for k, m in
             zip(valid["kind"].to_list(), valid["moves"].to_list())]
    good = valid.select("rule_set_id").with_columns(
        pl.Series("table", table, dtype=pl.Int64), pl.lit(None, pl.String).alias("rule_problem"))
    bad_ids = rules.filter(pl.col("_reason").is_not_null() & pl.col("rule_set_id").is_not_null()
                           & ~pl.col("rule_set_id").is_in(valid["rule_set_id"].implode()))
    bad = (
        bad_ids.group_by("rule_set_id", maintain_order=True).first()
        .select(
            "rule_set_id",
            pl.lit(None, pl.Int64).alias("table"),
            pl.format("rule set {} is invalid: {} ({} row {})", shown_text(pl.col("rule_set_id")),
                      pl.col("_reason"), pl.col("_source"), pl.col("_row")).alias("rule_problem"),
        )
    )
    return distinct, pl.concat([good, bad])


# ---- positions ------------------------------------------------------------------------------

def _nulls(n: int) -> pl.Series:
    return pl.repeat(None, n, dtype=pl.String, eager=True)


def _heaps_from_text_exactly(s: pl.Series) -> pl.Series:
    """The grammar of heaps text, for any text (null where it is not a list of integers, an
    empty element included)."""
    inner = s.str.strip_chars().str.strip_prefix("[").str.strip_suffix("]")
    body = inner.str.replace_all(r"[,\s]+", " ").str.strip_chars()
    tokens = body.str.split(" ")
    parsed = pl.select(pl.when(body == "").then(pl.lit([], dtype=HEAPS))
                       .otherwise(tokens.list.eval(pl.element().cast(pl.Int64, strict=False)))
                       ).to_series()
    ok = pl.select(
        s.str.strip_chars().str.starts_with("[") == s.str.strip_chars().str.ends_with("]"))
    ok = ok.to_series() & ~inner.str.contains(_EMPTY_ELEMENT)
    return pl.select(pl.when(ok & (parsed.list.drop_nulls().list.len() == parsed.list.len()))
                     .then(parsed).otherwise(pl.lit(None, HEAPS))).to_series().alias(s.name)


def _arrow_int64(values: np.ndarray) -> pa.Array:
    """A view of int64 values as Arrow (`pa.array` would import pandas, 0.15 s, to check
    whether they are pandas objects)."""
    return pa.Array.from_buffers(pa.int64(), values.shape[0], [None, pa.py_buffer(values)])


def _heaps_from_text(s: pl.Series) -> pl.Series:
    """Heaps text ("5 12", "5,12", "[5, 12]") -> List(Int64), null where it is not a list of
    integers. A kernel parses the plain ASCII text that nearly every row is; the rows it
    leaves (and nulls) go through the exact polars grammar."""
    counts, values, slow = kernels.heap_text_lists(*_text_buffers(s))
    parsed = pl.Series(s.name, pa.LargeListArray.from_arrays(_arrow_int64(counts),
                                                             _arrow_int64(values)), dtype=HEAPS)
    if s.null_count():
        slow = np.union1d(slow, np.flatnonzero(s.is_null().to_numpy()))
    if slow.shape[0] == 0:
        return parsed
    exact = _heaps_from_text_exactly(s.gather(slow))
    order = np.arange(s.len(), dtype=np.int64)
    order[slow] = s.len() + np.arange(slow.shape[0])
    return pl.concat([parsed, exact]).gather(order)


def _heaps_column(raw: pl.DataFrame, name: str, source: str) -> tuple[pl.Series, pl.Series]:
    """The heaps list as List(Int64), and the text it came from (for messages) if any."""
    s = raw[name]
    if s.dtype == pl.String:
        return _heaps_from_text(s).alias(name), s
    if isinstance(s.dtype, pl.List) and (s.dtype.inner.is_integer() or s.dtype.inner == pl.Null):
        if s.dtype.inner == pl.UInt64:
            too_big = s.list.eval(pl.element() > MAX_HEAP).list.any()
            s = pl.select(pl.when(too_big).then(pl.lit(None, HEAPS)).otherwise(
                s.cast(HEAPS, strict=False))).to_series().alias(name)
            return s, pl.select(pl.when(too_big).then(
                pl.lit("a heap is larger than 2^63-1")).otherwise(None)).to_series()
        return s.cast(HEAPS), _nulls(s.len())
    raise _wrong_type(source, name, s.dtype, 'a list of integers (or text like "5 12")')


def normalize_positions(raw: pl.DataFrame, rows: np.ndarray, source: str, cols: Columns,
                        form: str, first_row_number: int) -> pl.DataFrame:
    """Positions file -> (_source, _row, rule_set_id, position_id, heaps, _column, _reason).

    Long form gets a one-element `heaps` list per row. Without a position_id column, a wide
    row's id is its row number in the file (`rows`) plus `first_row_number`, the rows of the
    files before it, so ids number the rows of all files in order (skipped lines included).
    """
    if form == "wide":
        check_columns(raw.columns, [cols.rule_set_id, cols.heaps], [cols.position_id], source)
        heap_name = cols.heaps
    else:
        check_columns(raw.columns, [cols.rule_set_id, cols.position_id, cols.heap], [], source)
        heap_name = cols.heap
    ids = _key(raw, cols.rule_set_id, source).alias("rule_set_id")
    if cols.position_id in raw.columns:
        pids = _key(raw, cols.position_id, source).alias("position_id")
    else:
        pids = pl.Series("position_id", rows + first_row_number, dtype=pl.Int64)
    if form == "wide":
        heaps, text = _heaps_column(raw, heap_name, source)
    else:
        heaps, text = _heap_scalar(raw, heap_name, source)
    frame = pl.DataFrame({
        "_row": pl.Series(rows, dtype=pl.Int64),
        "rule_set_id": ids, "position_id": pids, "heaps": heaps,
        "_text": text.cast(pl.String),
    }).select(pl.lit(source, pl.String).alias("_source"), pl.all())  # a scalar, not n copies
    if _obviously_clean(frame):
        return frame.drop("_text").with_columns(pl.lit(None, pl.String).alias("_column"),
                                                pl.lit(None, pl.String).alias("_reason"))
    has_null = pl.col("heaps").list.drop_nulls().list.len() != pl.col("heaps").list.len()
    negative = pl.col("heaps").list.min() < 0
    heap_col = pl.lit("heaps" if form == "wide" else "heap")
    reason_expr = (
        pl.when(pl.col("rule_set_id").is_null())
        .then(pl.struct(col=pl.lit("rule_set_id"), why=pl.lit("rule_set_id is empty")))
        .when(pl.col("position_id").is_null())
        .then(pl.struct(col=pl.lit("position_id"), why=pl.lit("position_id is empty")))
        .when(pl.col("heaps").is_null() | has_null | negative)
        .then(pl.struct(col=heap_col, why=pl.lit(None, pl.String)))
        .otherwise(pl.lit(None, pl.Struct({"col": pl.String, "why": pl.String})))
    )
    frame = frame.with_columns(reason_expr.alias("_r")).with_columns(
        pl.col("_r").struct.field("col").alias("_column"),
        pl.col("_r").struct.field("why").alias("_reason"),
    ).drop("_r")
    needs_text = frame.filter(pl.col("_column").is_not_null() & pl.col("_reason").is_null())
    if not needs_text.is_empty():
        wide = form == "wide"
        explained = [
            (_explain_heap_text(t, wide) if t is not None and not t.startswith("a heap")
             else t or _explain_heaps(h) or "heaps is null")
            for t, h in zip(needs_text["_text"].to_list(), needs_text["heaps"].to_list())
        ]
        if not wide:
            explained = [e.replace("heap at index 0", "heap").replace(" at index 0", "")
                         for e in explained]
        fix = needs_text.select("_row").with_columns(pl.Series("_why", explained,
                                                               dtype=pl.String))
        frame = frame.join(fix, on="_row", how="left", maintain_order="left").with_columns(
            pl.coalesce("_reason", "_why").alias("_reason")).drop("_why")
    return frame.drop("_text")


def _obviously_clean(frame: pl.DataFrame) -> bool:
    """True when no row can have a problem: the fast path for large clean batches, which
    skips the per-row reason expressions (decided on Arrow null counts and the minimum)."""
    if frame["rule_set_id"].null_count() or frame["position_id"].null_count():
        return False
    heaps = frame["heaps"]
    if heaps.null_count():
        return False
    for offsets, values, nulls in _list_chunks(heaps):
        used = values[offsets[0]:offsets[-1]]
        if nulls or (used.shape[0] and used.min() < 0):
            return False
    return True


HeapChunks = list[tuple[np.ndarray, np.ndarray]]


def _list_chunks(heaps: pl.Series) -> list[tuple[np.ndarray, np.ndarray, int]]:
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
            child = pc.fill_null(child, 0)
        values = np.frombuffer(child.buffers()[1], np.int64)[child.offset:
                                                             child.offset + len(child)]
        out.append((offsets, values, nulls))
    return out


def _heap_scalar(raw: pl.DataFrame, name: str, source: str) -> tuple[pl.Series, pl.Series]:
    s = raw[name]
    if s.dtype == pl.String:
        stripped = s.str.strip_chars()
        value = stripped.cast(pl.Int64, strict=False)
        return value.implode().explode().to_frame().select(
            pl.when(pl.col(name).is_not_null()).then(pl.concat_list(pl.col(name)))
        ).to_series().alias(name), s
    if s.dtype.is_integer():
        if s.dtype == pl.UInt64:
            big = s > MAX_HEAP
            value = pl.select(pl.when(big).then(None).otherwise(s.cast(pl.Int64, strict=False)))
            text = pl.select(pl.when(big).then(pl.lit("heap is larger than 2^63-1")))
            listed = value.select(pl.when(pl.all().is_not_null()).then(pl.concat_list(pl.all())))
            return listed.to_series().alias(name), text.to_series()
        value = s.cast(pl.Int64).to_frame(name)
        listed = value.select(pl.when(pl.col(name).is_not_null()).then(pl.concat_list(name)))
        return listed.to_series().alias(name), _nulls(s.len())
    raise _wrong_type(source, name, s.dtype, "integer")


def _key_hash(rows: pl.DataFrame, name: str) -> pl.Expr:
    """A hash of a key column that is the same for the integer 7 and the text "7" (and
    differs for "07"), so that it agrees with `unify_key_types` whatever type a file gave."""
    key = pl.col(name)
    if rows[name].dtype != pl.String:
        return key.cast(pl.Int64).hash(seed=0)
    number = key.cast(pl.Int64, strict=False)
    canonical = key.str.contains(_CANONICAL_INT) & number.is_not_null()
    return pl.when(canonical).then(number.hash(seed=0)).otherwise(key.hash(seed=0))


def by_partition(rows: pl.DataFrame, parts: int) -> dict[int, pl.DataFrame]:
    """Long-form rows split into `parts` groups by a hash of their key, so that every row of
    a position lands in the same group (see `_key_hash`)."""
    part = rows.select(((_key_hash(rows, "rule_set_id") % parts
                         + _key_hash(rows, "position_id") % parts) % parts).alias("_part"))
    return {int(p): frame.drop("_part") for (p,), frame in
            rows.with_columns(part.to_series()).partition_by("_part", as_dict=True).items()}


def to_scratch(rows: pl.DataFrame, file_index: int) -> pl.DataFrame:
    """Long-form rows as written to scratch files: `_source` becomes the file's index, the
    one-heap lists their heap, and the reason columns are left out when they are empty (the
    usual case); this cuts the time to write and read them back by more than half.
    `from_scratch` restores all three."""
    rows = rows.drop("_source").with_columns(pl.lit(file_index, pl.Int32).alias("_file"),
                                             pl.col("heaps").list.first())
    if rows["_column"].null_count() == rows["_reason"].null_count() == rows.height:
        rows = rows.drop("_column", "_reason")
    return rows


def from_scratch(rows: pl.DataFrame, sources: Sequence[str], columns: Sequence[str]
                 ) -> pl.DataFrame:
    """Undo `to_scratch`: `sources` are the file names by index, `columns` the rows' columns."""
    empty = [pl.lit(None, pl.String).alias(name) for name in ("_column", "_reason")
             if name not in rows.columns]
    source = pl.Series(list(sources), dtype=pl.String).gather(rows["_file"])
    heaps = pl.when(pl.col("heaps").is_not_null()).then(pl.concat_list("heaps")).alias("heaps")
    return rows.with_columns(source.alias("_source"), heaps, *empty).select(columns)


def long_to_wide(rows: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Collect long-form rows into positions (heaps in input order).

    A position with any bad row is rejected whole: its bad rows keep their reason, the others
    name it. Returns (positions in wide form, rejected rows).
    """
    wide_rows = (pl.col("_source").first(), pl.col("_row").first(),
                 pl.col("heaps").list.first().alias("heaps"),
                 pl.col("_row").alias("_rows"), pl.col("_source").alias("_sources"))
    no_reasons = (pl.lit(None, pl.String).alias("_column"),
                  pl.lit(None, pl.String).alias("_reason"))
    clean = (rows["_reason"].null_count() == rows.height
             and not rows["rule_set_id"].null_count() and not rows["position_id"].null_count())
    if clean:  # no row to reject, and none to taint its position
        wide = rows.group_by("rule_set_id", "position_id", maintain_order=True).agg(*wide_rows)
        return wide.with_columns(*no_reasons), rows.clear()
    rows = rows.with_row_index("_order")
    tainted = rows.with_columns(
        pl.col("_reason").is_not_null().any().over("rule_set_id", "position_id").alias("_t"),
        pl.col("_row").filter(pl.col("_reason").is_not_null()).first()
        .over("rule_set_id", "position_id").alias("_bad_row"),
    )
    keyless = pl.col("rule_set_id").is_null() | pl.col("position_id").is_null()
    rejected = tainted.filter(pl.col("_t") | keyless).with_columns(
        pl.coalesce(
            "_reason",
            pl.format("another row of this position (row {}) was rejected", pl.col("_bad_row")),
        ).alias("_reason")
    ).drop("_t", "_bad_row", "_order")
    good = tainted.filter(~pl.col("_t") & ~keyless)
    wide = (good.sort("_order").group_by("rule_set_id", "position_id", maintain_order=True)
            .agg(*wide_rows).with_columns(*no_reasons))
    return wide, rejected


def long_to_wide_sorted(rows: pl.DataFrame, index: pl.DataFrame) -> pl.DataFrame | None:
    """`long_to_wide` then `attach_tables` for the common case, by a counting sort instead of a
    group_by: clean rows with integer keys that all name a valid rule set (else None, for the
    general path). Positions come out in key order, each with its heaps in input order (the
    sort is stable); they carry no input locations (`_source` "", `_row` -1), which only
    rejects would need."""
    pid = rows["position_id"]
    if (pid.dtype != pl.Int64 or pid.null_count() or rows["heaps"].null_count()
            or rows["_reason"].null_count() != rows.height):
        return None
    found = _valid_ranks(rows["rule_set_id"], index)
    if found is None:
        return None
    ids, tables, bucket = found
    heaps = rows["heaps"].list.first().to_numpy()
    dest = np.empty(rows.height, np.int32 if rows.height < 2**31 else np.int64)
    sorted_pid, counts = kernels.counting_sort(bucket, ids.shape[0], pid.to_numpy(), dest)
    offsets, run_bucket = kernels.key_runs(counts, sorted_pid)
    lists = pa.LargeListArray.from_arrays(_arrow_int64(offsets),
                                          _arrow_int64(kernels.scatter(heaps, dest)))
    return pl.DataFrame({
        "rule_set_id": ids[run_bucket], "position_id": sorted_pid[offsets[:-1]],
        "heaps": pl.Series(lists, dtype=HEAPS),
        "table": tables[run_bucket],
    }).select(pl.lit("", pl.String).alias("_source"), pl.lit(-1, pl.Int64).alias("_row"),
              "rule_set_id", "position_id", "heaps", pl.lit(None, pl.String).alias("_column"),
              pl.lit(None, pl.String).alias("_reason"), "table")


# ---- evaluation -----------------------------------------------------------------------------

def attach_tables(positions: pl.DataFrame, index: pl.DataFrame) -> pl.DataFrame:
    """Add `table` to each position; unknown or invalid rule sets become reasons."""
    fast = _tables_by_rank(positions, index)
    if fast is not None:
        return fast
    joined = positions.join(index, on="rule_set_id", how="left", maintain_order="left")
    newly_bad = pl.col("_reason").is_null() & pl.col("table").is_null()
    return joined.with_columns(
        pl.when(newly_bad).then(pl.coalesce(
            "rule_problem",
            pl.format("unknown rule_set_id {} (not in the rules table)",
                      shown_text(pl.col("rule_set_id"))),
        )).otherwise(pl.col("_reason")).alias("_reason"),
        pl.when(newly_bad).then(pl.lit("rule_set_id")).otherwise(pl.col("_column"))
        .alias("_column"),
    ).drop("rule_problem")


def heap_buffers(positions: pl.DataFrame) -> HeapChunks:
    """The heaps column as (Arrow offsets, flat int64 values) per chunk, computed once per
    batch (null heaps, only possible in rows that are not evaluated, read as 0)."""
    return [(offsets, values) for offsets, values, _ in _list_chunks(positions["heaps"])]


def _valid_ranks(rid: pl.Series, index: pl.DataFrame
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """For integer ids that all name a valid rule set: (the valid ids sorted, their tables,
    each id's rank among them); else None, for the hash join and its reasons."""
    if rid.dtype != pl.Int64 or index["rule_set_id"].dtype != pl.Int64 or rid.null_count():
        return None
    ordered = index.filter(pl.col("table").is_not_null()).sort("rule_set_id")
    ids = ordered["rule_set_id"].to_numpy()
    ranks = kernels.rank_in(rid.to_numpy(), ids)
    if ranks.size and ranks.min() < 0:
        return None
    return ids, ordered["table"].to_numpy().astype(np.int64), ranks


def _tables_by_rank(positions: pl.DataFrame, index: pl.DataFrame) -> pl.DataFrame | None:
    """The common case without a hash join: integer ids that all name a valid rule set."""
    found = _valid_ranks(positions["rule_set_id"], index)
    if found is None:
        return None
    _, tables, ranks = found
    return positions.with_columns(pl.Series("table", tables[ranks], dtype=pl.Int64))


def largest_heaps(positions: pl.DataFrame, n_tables: int,
                  buffers: HeapChunks | None = None) -> np.ndarray:
    """Per table, the largest heap that valid positions look up in it (-1 where none)."""
    table_of_row = positions.select(
        pl.when(pl.col("_reason").is_null()).then(pl.col("table")).otherwise(-1)
        .fill_null(-1).cast(pl.Int64)).to_series().to_numpy()
    largest = np.full(n_tables, -1, np.int64)
    for rows, offsets, values in _row_slices(buffers or heap_buffers(positions)):
        np.maximum(largest, kernels.max_heap_per_table(offsets, values, table_of_row[rows],
                                                       n_tables), out=largest)
    return largest


def _row_slices(buffers: HeapChunks) -> list[tuple[slice, np.ndarray, np.ndarray]]:
    """Each chunk's rows within the frame, with its offsets and values."""
    out, start = [], 0
    for offsets, values in buffers:
        stop = start + offsets.shape[0] - 1
        out.append((slice(start, stop), offsets, values))
        start = stop
    return out


def evaluate(positions: pl.DataFrame, tables: TableSet, winning_moves: bool,
             buffers: HeapChunks | None = None) -> pl.DataFrame:
    """nim_sum (and a winning move) for valid positions; a heap beyond its table (no proven
    period within the cap) becomes the row's reason."""
    if positions["_reason"].null_count() == positions.height:
        valid = positions
        buffers = buffers or heap_buffers(valid)
    else:
        valid = positions.filter(pl.col("_reason").is_null())
        buffers = heap_buffers(valid)
    table_of_row = valid["table"].to_numpy().astype(np.int64, copy=False)
    parts = []
    for rows, offsets, values in _row_slices(buffers):
        nim, bad = kernels.nim_sums_wide(offsets, values, table_of_row[rows],
                                         *tables.lookup_args())
        moves = (kernels.winning_moves_wide(offsets, values, table_of_row[rows], nim,
                                            *tables.move_args()) if winning_moves else ())
        parts.append((nim, bad, *moves))
    empty = [np.zeros(0, np.int64)] * (4 if winning_moves else 2)
    nim, bad, *moves = [np.concatenate(c) for c in zip(*parts)] if parts else empty
    columns = [pl.Series("nim_sum", nim, dtype=pl.Int64)]
    if winning_moves:
        columns += [pl.Series("move_heap", moves[0]).replace(-1, None),
                    pl.Series("move_take", moves[1]).replace(-1, None)]
    out = valid.with_columns(*columns, pl.Series("_bad", bad))
    if (bad >= 0).any():
        out = _beyond_table_reasons(out, tables)
    out = out.drop("_bad")
    if valid is positions:
        return out
    return pl.concat([out, positions.filter(pl.col("_reason").is_not_null())],
                     how="diagonal_relaxed")


def _beyond_table_reasons(out: pl.DataFrame, tables: TableSet) -> pl.DataFrame:
    """Reasons for rows whose heap `_bad` lies beyond a table with no proven period."""
    labels = pl.DataFrame({
        "table": pl.Series(range(len(tables.tables)), dtype=pl.Int64),
        "_label": pl.Series([t.rule.label for t in tables.tables], dtype=pl.String),
        "_len": pl.Series([t.table_len for t in tables.tables], dtype=pl.Int64),
        "_limit": pl.Series([t.stopped_by or "tables.max_table_len" for t in tables.tables],
                            dtype=pl.String),
    })
    beyond = pl.col("_bad") >= 0
    bad_heap = pl.col("heaps").list.get(pl.col("_bad").clip(0, None), null_on_oob=True)
    return out.join(labels, on="table", how="left", maintain_order="left").with_columns(
        pl.when(beyond).then(pl.format(
            "heap {} at index {} needs SG values of {} beyond {} ({} values tabulated), "
            "and no period was proven within them",
            bad_heap, pl.col("_bad"), pl.col("_label"), pl.col("_limit"), pl.col("_len"),
        )).otherwise(pl.col("_reason")).alias("_reason"),
        pl.when(beyond).then(pl.lit("heaps")).otherwise(pl.col("_column")).alias("_column"),
    ).drop("_label", "_len", "_limit")


def with_verdict(verdicts: FrameT) -> FrameT:
    """Add `verdict` (W iff nim_sum != 0) after nim_sum; nim_sum and the move columns become
    Int64, a negative move null (the sort keeps them narrow, with -1 for no move); lazy in,
    lazy out."""
    names = verdicts.collect_schema().names()
    at = names.index("nim_sum") + 1
    verdict = pl.when(pl.col("nim_sum") != 0).then(pl.lit("W")).otherwise(pl.lit("L"))
    moves = [pl.when(pl.col(name) >= 0).then(pl.col(name).cast(pl.Int64)).alias(name)
             for name in ("move_heap", "move_take") if name in names]
    return verdicts.select(*names[:at - 1], pl.col("nim_sum").cast(pl.Int64),
                           verdict.alias("verdict"), *names[at:]).with_columns(moves)


def reject_rows(frame: pl.DataFrame, table: str) -> pl.DataFrame:
    """Rows with a reason, in the rejects schema (keys as text, as given)."""
    bad = frame.filter(pl.col("_reason").is_not_null())
    exprs = {
        "table": pl.lit(table),
        "source": pl.col("_source"),
        "row": pl.col("_row"),
        "rule_set_id": pl.col("rule_set_id").cast(pl.String),
        "position_id": (pl.col("position_id").cast(pl.String) if "position_id" in bad.columns
                        else pl.lit(None, pl.String)),
        "column": pl.col("_column"),
        "reason": pl.col("_reason"),
    }
    return bad.select(**exprs).cast(REJECT_SCHEMA)


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


def expand_long_rejects(rejected_positions: pl.DataFrame) -> pl.DataFrame:
    """Position-level rejects of long-form input, back to one row per input row."""
    return (rejected_positions.drop("_source", "_row")
            .explode("_rows", "_sources")
            .rename({"_rows": "_row", "_sources": "_source"}))


def sort_rejects(rejects: pl.DataFrame) -> pl.DataFrame:
    return rejects.sort("table", "source", "row", descending=[True, False, False])


def sg_table_rows(rules: pl.DataFrame, distinct: Sequence[Rule], tables: TableSet,
                  index: pl.DataFrame) -> pl.DataFrame:
    """One row per distinct rule: kind, canonical moves, the rule_set_ids sharing it, periods."""
    ids = (index.filter(pl.col("table").is_not_null())
           .group_by("table").agg(pl.col("rule_set_id").sort().cast(pl.String)
                                  .alias("rule_set_ids")))
    built = {t.rule: t for t in tables.tables}
    frame = pl.DataFrame({
        "table": pl.Series(range(len(distinct)), dtype=pl.Int64),
        "kind": pl.Series([r.kind for r in distinct], dtype=pl.String),
        "moves": pl.Series([list(r.moves) for r in distinct], dtype=HEAPS),
        "preperiod": pl.Series([built[r].preperiod if r in built else None for r in distinct],
                               dtype=pl.Int64),
        "period": pl.Series([built[r].period if r in built else None for r in distinct],
                            dtype=pl.Int64),
        "table_len": pl.Series([built[r].table_len if r in built else 0 for r in distinct],
                               dtype=pl.Int64),
    })
    return frame.join(ids, on="table", how="left").select(
        "kind", "moves", "rule_set_ids", "preperiod", "period", "table_len").sort("kind", "moves")


def summary_counts(verdicts: pl.DataFrame, rejects: pl.DataFrame
                   ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per rule set: (rule_set_id, W, L) from verdicts and (rule_set_id as text, rejected)
    from the positions' rejects."""
    counts = _run_counts(verdicts)
    if counts is None:
        counts = verdicts.group_by("rule_set_id").agg(
            (pl.col("nim_sum") != 0).sum().cast(pl.Int64).alias("W"),
            (pl.col("nim_sum") == 0).sum().cast(pl.Int64).alias("L"))
    rejected = (rejects.filter((pl.col("table") == "positions")
                               & pl.col("rule_set_id").is_not_null())
                .group_by("rule_set_id").agg(pl.len().cast(pl.Int64).alias("rejected")))
    return counts, rejected


def _run_counts(verdicts: pl.DataFrame) -> pl.DataFrame | None:
    """(rule_set_id, W, L) from runs of equal ids, when the ids are sorted integers (verdicts
    in key order): no hash group_by over every verdict."""
    rid = verdicts["rule_set_id"]
    if rid.dtype != pl.Int64 or rid.null_count() or not rid.is_sorted():
        return None
    ids, sizes, losing = kernels.run_counts(rid.to_numpy(), verdicts["nim_sum"].to_numpy())
    return pl.DataFrame({"rule_set_id": ids, "W": sizes - losing, "L": losing},
                        schema={"rule_set_id": pl.Int64, "W": pl.Int64, "L": pl.Int64})


def summary_rows(index: pl.DataFrame, counts: pl.DataFrame, rejected: pl.DataFrame
                 ) -> pl.DataFrame:
    """Per rule set: positions evaluated (W + L), W, L, rejected input rows, and W rate, from
    `summary_counts` (or an engine's own aggregation of the same shape)."""
    ids = pl.concat([index.select(pl.col("rule_set_id").cast(pl.String)),
                     rejected.select("rule_set_id")]).unique()
    frame = (ids.join(counts.with_columns(pl.col("rule_set_id").cast(pl.String)),
                      on="rule_set_id", how="left")
             .join(rejected, on="rule_set_id", how="left")
             .with_columns(pl.col("W", "L", "rejected").fill_null(0)))
    (frame,) = unify_key_types([frame], "rule_set_id")  # "07" stays text: it is not 7
    return frame.select(
        "rule_set_id",
        (pl.col("W") + pl.col("L")).alias("positions"),
        "W", "L", "rejected",
        pl.when(pl.col("W") + pl.col("L") > 0)
        .then(pl.col("W") / (pl.col("W") + pl.col("L"))).alias("w_rate"),
    ).sort("rule_set_id")


def match_key_type(frame: pl.DataFrame, index: pl.DataFrame) -> tuple[pl.DataFrame,
                                                                      pl.DataFrame]:
    """Give a batch's rule_set_id and the rule index's the same type, for the join."""
    if frame["rule_set_id"].dtype == index["rule_set_id"].dtype:
        return frame, index
    (index,) = unify_key_types([index], "rule_set_id")
    if frame["rule_set_id"].dtype == index["rule_set_id"].dtype:
        return frame, index
    text = pl.col("rule_set_id").cast(pl.String)
    return frame.with_columns(text), index.with_columns(text)
