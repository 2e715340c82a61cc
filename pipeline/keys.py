"""The one rule for key types, for both engines: integer keys or text keys, never a mix.

A key column (rule_set_id, position_id) is Int64 when every non-null value that decides it
(wide form: of every evaluated row; long form: of every input row; see docs/ARCHITECTURE.md,
"Keys") is an integer: an integer column, or text that an integer reads back as ("0", "42",
"-7"; not "07", "+7" or "-0", which would be the keys "7", "7" and "0" under another
spelling) that fits in int64.
Otherwise the column is text in every file, each value as given (stripped of surrounding
whitespace; empty is null). So "7" in a CSV file and 7 in a Parquet file are the same key,
while "07" makes the whole column text and stays "07".

Batches are typed early where that loses nothing: a text batch whose every value reads back
as written may become Int64 at once (`integer_keys`), so that it takes the integer paths;
`unify_key_types` over all batches still decides the run's type as it would on the text.
See docs/ARCHITECTURE.md, "Keys".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from pipeline import kernels
from pipeline.transforms.buffers import text_layout
from pipeline.transforms.schema import wrong_type

KEYS = ["rule_set_id", "position_id"]
_PEEK = 64  # values `integer_keys` looks at before it scans a whole column
CANONICAL_INT = r"^(0|-?[1-9][0-9]*)$"  # an integer key written as text, as it reads back
# ("-0" was once one too: the key 0, which rules that kept "-0" as text then did not find)

_KERNEL_ROWS = 1 << 14  # text key columns this long are parsed by the kernels
_INT64_MAX = (1 << 63) - 1


def key_column(frame: pl.DataFrame, name: str, source: str) -> pl.Series:
    """A key column of an input file, typed by the rule: Int64 when it is integers (or all
    null), else text. Dictionary-encoded text (Categorical, Enum) is the text it holds; an
    unsigned column with a value beyond int64 is text, as the same value in CSV is."""
    s = frame[name]
    if isinstance(s.dtype, (pl.Categorical, pl.Enum)):
        s = s.cast(pl.String)
    if s.dtype == pl.Null:  # an all-null (or empty) column: no value to decide the type
        return s.cast(pl.Int64).alias(name)
    if s.dtype.is_integer():
        if s.dtype == pl.UInt64 and (s.max() or 0) > _INT64_MAX:
            return s.cast(pl.String).alias(name)
        return s.cast(pl.Int64).alias(name)
    if s.dtype == pl.String:
        short = s.len() < _KERNEL_ROWS  # a rules table: polars is as fast there
        if not short and not s.null_count():
            buffers = text_layout(s)
            values, exact = kernels.int_text_values(*buffers)
            if exact:  # CSV integers as Int64 at once: the same as stripping and integer_keys
                return pl.Series(name, values, dtype=pl.Int64)
            if not kernels.needs_strip(*buffers):  # no edge space, none empty: as given
                return s.alias(name)
        text = s.str.strip_chars().replace("", None).alias(name)
        if short and text.len() and not text.null_count() and _all_round_trip(text):
            return text.cast(pl.Int64)
        return text
    raise wrong_type(source, name, s.dtype, "integer or string")


def always_integer(dtype: pl.DataType) -> bool:
    """Whether a key column of this type is Int64 whatever values it holds, so that a file's
    schema alone types its keys: every integer type but uint64, whose values beyond int64
    make the key text (`key_column`)."""
    return dtype.is_integer() and dtype != pl.UInt64


def unify_key_types(frames: Sequence[pl.DataFrame], name: str) -> list[pl.DataFrame]:
    """Give one key column the same type in every frame: Int64 when every value in every frame
    is an integer (CSV text included), else String."""
    dtypes = {f[name].dtype for f in frames}
    if dtypes <= {pl.Int64, pl.Null}:
        return [f.with_columns(pl.col(name).cast(pl.Int64)) for f in frames]
    as_text = [f.with_columns(pl.col(name).cast(pl.String)) for f in frames]
    if any(_surely_text(f[name]) for f in as_text):
        return as_text
    all_int = all(
        f.select(pl.col(name).drop_nulls().str.contains(CANONICAL_INT).all()).item() is not False
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
    casting back gives ("07" stays text), so `unify_key_types` over all batches still
    decides as it would on the text."""
    text = [name for name in ("rule_set_id", "position_id")
            if name in frame.columns and frame[name].dtype == pl.String
            and _may_be_integers(frame[name])]
    exact = [name for name in text if _all_round_trip(frame[name])]
    return frame.with_columns(pl.col(name).cast(pl.Int64) for name in exact) if exact else frame


def _all_round_trip(text: pl.Series) -> bool:
    """Whether every non-null value is an integer written as Int64 writes it."""
    return bool(text.drop_nulls().str.contains(CANONICAL_INT).all()) and (
        text.cast(pl.Int64, strict=False).null_count() == text.null_count())


def _surely_text(text: pl.Series) -> bool:
    """Whether one of the first values already is not an integer (the column is then text
    whatever the rest holds), so that a batch of names skips the scan of every value."""
    head = text.head(_PEEK).drop_nulls()
    return not head.str.contains(CANONICAL_INT).all()


def _may_be_integers(text: pl.Series) -> bool:
    """False when one of the first values already is not an integer, so that a column of
    UUIDs or names skips the scan of every value."""
    head = text.head(_PEEK).drop_nulls()
    return bool(head.str.contains(CANONICAL_INT).all())


def needs_text(frame: pl.DataFrame, name: str) -> bool:
    """Whether this frame alone makes a key column text for every frame it is unified with."""
    (unified,) = unify_key_types([frame.select(name)], name)
    return unified[name].dtype == pl.String


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


def rejected_key_as(name: str, dtype: pl.DataType) -> pl.Expr:
    """A rejected row's key (text) in the verdicts' key type, to find the verdict it repeats:
    as Int64, only text the rule reads as an integer ("010" and "+10" are not the key 10),
    else null."""
    key = pl.col(name)
    if dtype != pl.Int64:
        return key.cast(dtype, strict=False)
    return pl.when(key.cast(pl.String).str.contains(CANONICAL_INT)).then(
        key.cast(pl.Int64, strict=False)).alias(name)


def key_hash(rows: pl.DataFrame, name: str) -> pl.Expr:
    """A hash of a key column that is the same for the integer 7 and the text "7" (and
    differs for "07"), so that it agrees with `unify_key_types` whatever type a file gave."""
    key = pl.col(name)
    if rows[name].dtype != pl.String:
        return key.cast(pl.Int64).hash(seed=0)
    number = key.cast(pl.Int64, strict=False)
    canonical = key.str.contains(CANONICAL_INT) & number.is_not_null()
    return pl.when(canonical).then(number.hash(seed=0)).otherwise(key.hash(seed=0))


def sorted_ids(ids: pl.Series) -> pl.Series:
    """The distinct non-null ids in key order: the buckets of the counting sort and the ranks
    that stand for rule sets while positions are evaluated."""
    return ids.drop_nulls().unique().sort()


def ranks(values: pl.Series, ids: pl.Series, enum: pl.Enum | None = None,
          dtype: type = np.int64) -> np.ndarray:
    """Each value's index in `ids` (from `sorted_ids`; -1 where absent or null), for integer
    and text keys alike: a direct table or binary search for integers, an Enum cast for text
    (one hash lookup per distinct value of a batch, not a join). `enum`: `pl.Enum(ids)`,
    when the caller keeps it for many batches; `dtype`: the indices' (int32 or int64)."""
    if values.dtype != ids.dtype or values.dtype not in (pl.Int64, pl.String):
        return np.full(values.len(), -1, dtype)
    if values.dtype == pl.Int64:
        found = kernels.rank_in(values.fill_null(0).to_numpy(), ids.to_numpy())
        if values.null_count():
            found[values.is_null().to_numpy()] = -1
        return found.astype(dtype, copy=False)
    codes = values.cast(enum or pl.Enum(ids), strict=False).to_physical()
    if codes.null_count():
        codes = codes.cast(pl.Int64).fill_null(-1)
    return codes.to_numpy().astype(dtype, copy=False)


def ids_at(ids: pl.Series, ranks: pl.Series) -> pl.Series:
    """The ids of these ranks among `ids` (from `sorted_ids`; `ranks` as polars' UInt32 index
    type, or Int32), named rule_set_id: the inverse of `ranks`. Text ids come as an Enum of
    `ids`, whose codes follow their order: polars gathers a 4-byte code per row instead of a
    16-byte string view and a reference to the text's buffer, and a Parquet writer encodes
    the codes as they are (`commit.sink_parquet` declares the column text); every reader of
    the column (rejects, summaries, the written file) sees the same text."""
    if ids.dtype == pl.String:
        ids = ids.cast(pl.Enum(ids))
    return ids.gather(ranks).alias("rule_set_id")


def repeated_ids(ids: pl.Series, counts: np.ndarray) -> pl.Series:
    """Each of `ids` (sorted) `counts` times, in order (`ids_at`), marked sorted as they are,
    so that a summary finds its runs without reading the text (`outputs.summary_counts`)."""
    runs = pl.Series(np.repeat(np.arange(ids.len(), dtype=np.uint32), counts))
    return ids_at(ids, runs).set_sorted()
