"""Input rows -> typed, validated rows (reasons on bad ones); rule sets -> distinct rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl

from pipeline.config import Columns
from pipeline.errors import InputError, RuleError, brief_repr
from pipeline.grundy import KINDS, MAX_HEAP, MAX_TABLE_LEN, Rule, canonical_rule
from pipeline.keys import key_column
from pipeline.limits import MAX_RULES_MOVES
from pipeline.transforms.buffers import list_chunks
from pipeline.transforms.lists import (
    MAX_MOVES,
    as_list,
    explain_heap_text,
    explain_heaps,
    heaps_from_text,
    parse_int_list,
    plain_int_lists,
    strip_spaces,
)
from pipeline.transforms.schema import HEAPS, LISTED_CHARS, check_columns, shown_text, wrong_type

_LISTED_ROWS = 5  # a clash names the first few rows of a rule_set_id defined many times


def normalize_rules(raw: pl.DataFrame, rows: np.ndarray, source: str, cols: Columns,
                    moves_left: int = MAX_RULES_MOVES) -> pl.DataFrame:
    """Rules file -> (_source, _row, rule_set_id, kind, moves, _column, _reason).

    `moves_left`: the moves the rules rows before this file left of MAX_RULES_MOVES; from
    the row whose moves pass it on, every row with moves is rejected (`moves_held` counts
    what a file's rows hold)."""
    check_columns(raw.columns, [cols.rule_set_id], [cols.kind, cols.moves], source)
    if cols.moves not in raw.columns and cols.kind not in raw.columns:
        raise InputError(f"{source}: missing column {brief_repr(cols.moves)} (columns are "
                         f"{brief_repr(raw.columns, LISTED_CHARS)})", path=source,
                         column=cols.moves)
    ids = key_column(raw, cols.rule_set_id, source)
    n = raw.height
    kinds = _text_column(raw, cols.kind, source, n)
    moves_col = (as_list(_as_text(raw[cols.moves])) if cols.moves in raw.columns
                 else pl.Series([None] * n))
    if moves_col.dtype == pl.String or moves_col.dtype == pl.Null:
        pass
    elif not (isinstance(moves_col.dtype, pl.List) and (
            moves_col.dtype.inner.is_integer() or moves_col.dtype.inner == pl.Null)):
        raise wrong_type(source, cols.moves, moves_col.dtype,
                          'a list of integers (or text like "2 5 12")')
    plain = _plain_subtraction(ids, kinds, moves_col)
    rest = np.flatnonzero(plain.is_null().to_numpy()) if plain is not None else np.arange(n)
    held = np.zeros(n, np.int64)  # each row's distinct moves
    if plain is not None:
        held[:] = plain.list.len().fill_null(0).to_numpy()
    plain_before = np.cumsum(held) - held  # the plain rows' moves before each row
    out_kind, out_moves, out_col, out_reason = [], [], [], []
    slow_held = 0  # the moves of these rows so far
    for i, rid, kind, moves in zip(rest, ids.gather(rest).to_list(), [kinds[i] for i in rest],
                                   moves_col.gather(rest).to_list()):
        kind = None if kind is None else strip_spaces(kind).lower()
        if plain_before[i] + slow_held >= moves_left and _gives_moves(moves):
            column, reason, rule = "moves", PAST_RULES_MOVES, None  # not parsed: past it
        else:
            column, reason, rule = _rule_of(rid, kind, moves)
        held[i] = len(rule.moves) if rule else 0
        slow_held += int(held[i])
        out_kind.append(rule.kind if rule else kind)
        out_moves.append(list(rule.moves) if rule else None)
        out_col.append(column)
        out_reason.append(reason)
    columns = {"kind": pl.Series(out_kind, dtype=pl.String),
               "moves": pl.Series(out_moves, dtype=HEAPS),
               "_column": pl.Series(out_col, dtype=pl.String),
               "_reason": pl.Series(out_reason, dtype=pl.String)}
    judged = pl.DataFrame(columns)
    if plain is not None:  # the plain rows, then the others, each put back in its place
        done = np.flatnonzero(plain.is_not_null().to_numpy())
        place = np.empty(n, np.int64)
        place[done] = np.arange(done.shape[0])
        place[rest] = done.shape[0] + np.arange(rest.shape[0])
        judged = pl.concat([pl.DataFrame({
            "kind": pl.repeat("subtraction", done.shape[0], dtype=pl.String, eager=True),
            "moves": plain.gather(done), "_column": _nulls(done.shape[0]),
            "_reason": _nulls(done.shape[0])}), judged]).gather(place)
    judged = _within_rules_moves(judged, held, moves_left)
    return pl.DataFrame({
        "_source": pl.Series([source] * n, dtype=pl.String),
        "_row": pl.Series(rows, dtype=pl.Int64),
        "rule_set_id": ids,
    }).hstack(judged)


def moves_held(rules: pl.DataFrame) -> int:
    """The distinct moves a normalised rules file's valid rows hold (`normalize_rules`)."""
    valid = rules.filter(pl.col("_reason").is_null())["moves"]
    return int(valid.list.len().sum() or 0)


def _within_rules_moves(judged: pl.DataFrame, held: np.ndarray, moves_left: int
                        ) -> pl.DataFrame:
    """`judged` with every row from the first whose moves pass `moves_left` on rejected, if
    it holds moves (the rows judged one by one past it are so already, unparsed). Far under
    the limit, as rules tables are, this is one sum."""
    total = np.cumsum(held)
    if not total.shape[0] or int(total[-1]) <= moves_left:
        return judged
    cut = np.zeros(len(held), np.bool_)
    first = int(np.flatnonzero(total > moves_left)[0])
    cut[first:] = held[first:] > 0
    past = pl.Series(cut)
    return judged.with_columns(
        pl.when(past).then(pl.lit(None)).otherwise(pl.col("moves")).alias("moves"),
        pl.when(past).then(pl.lit("moves")).otherwise(pl.col("_column")).alias("_column"),
        pl.when(past).then(pl.lit(PAST_RULES_MOVES)).otherwise(pl.col("_reason"))
        .alias("_reason"))


PAST_RULES_MOVES = (f"moves pass the rules' limit of {MAX_RULES_MOVES:,} moves in all, from "
                    "this row on (give fewer or shorter rules)")


def _gives_moves(moves: object) -> bool:
    """Whether a rules cell gives any move (text other than blanks, or a non-empty list)."""
    return bool(strip_spaces(moves)) if isinstance(moves, str) else bool(moves)


def _plain_subtraction(ids: pl.Series, kinds: list[str | None], moves: pl.Series
                       ) -> pl.Series | None:
    """The canonical moves (sorted, distinct) of the rows that are subtraction rules as
    rules tables mostly give them, found without a Python object per move: an id, no kind
    (or exactly "subtraction"), 1 to MAX_MOVES moves given as integers (or as plain list
    text, `lists.plain_int_lists`), none null, none below 1 or above MAX_TABLE_LEN; null for
    every other row, which `_rule_of` judges (and explains). None when the moves are
    neither lists of integers nor text."""
    left = np.zeros(moves.len(), np.bool_)  # rows whose text the kernel left
    if moves.dtype == pl.String:
        moves, slow = plain_int_lists(moves)
        left[slow] = True
    elif not (isinstance(moves.dtype, pl.List) and moves.dtype.inner.is_integer()):
        return None
    m = pl.col("moves")
    plain = (pl.col("id").is_not_null() & m.is_not_null() & ~pl.col("left")
             & m.list.len().is_between(1, MAX_MOVES)
             & (m.list.drop_nulls().list.len() == m.list.len())
             & (m.list.min() > 0) & (m.list.max() <= MAX_TABLE_LEN)
             & (pl.col("kind").is_null() | (pl.col("kind") == "subtraction")))
    frame = pl.DataFrame({"id": ids, "moves": moves, "left": left,
                          "kind": pl.Series(kinds, dtype=pl.String)})
    return frame.select(pl.when(plain).then(m.cast(HEAPS, strict=False).list.unique()
                                            .list.sort()).alias("moves")).to_series()


def _rule_of(rid: object, kind: str | None, moves: str | list[int | None] | None
             ) -> tuple[str | None, str | None, Rule | None]:
    """(column at fault, reason, None) for a bad rules row, else (None, None, its Rule).
    `kind` is already stripped and lower case; the column is the canonical name."""
    if rid is None:
        return "rule_set_id", "rule_set_id is empty", None
    if isinstance(moves, str):
        try:
            moves = parse_int_list(moves, allow_ranges=True, item="move", most=MAX_MOVES)
        except ValueError as exc:
            return "moves", str(exc), None
    elif moves is not None and len(moves) > MAX_MOVES:
        return "moves", f"more than {MAX_MOVES:,} moves ({len(moves):,})", None
    elif moves is not None and None in moves:
        return "moves", f"move at index {moves.index(None)} is null", None
    try:
        return None, None, canonical_rule(kind, moves)
    except RuleError as exc:
        return ("kind" if kind and kind not in KINDS else "moves"), str(exc), None


def _text_column(raw: pl.DataFrame, name: str, source: str, n: int) -> list[str | None]:
    if name not in raw.columns:
        return [None] * n
    s = _as_text(raw[name])
    if s.dtype not in (pl.String, pl.Null):
        raise wrong_type(source, name, s.dtype, "string")
    return s.to_list()


def _as_text(s: pl.Series) -> pl.Series:
    """Dictionary-encoded text (Categorical, Enum: a pandas `category` column) as the text it
    holds; any other column as it is."""
    return s.cast(pl.String) if isinstance(s.dtype, (pl.Categorical, pl.Enum)) else s


def reject_duplicate_rules(rules: pl.DataFrame) -> pl.DataFrame:
    """A rule_set_id given more than once is rejected on every row, naming the clash: the key
    is unique (docs/inputs.md), so copies of one rule are refused as copies of different ones
    are."""
    keyed = rules.filter(pl.col("rule_set_id").is_not_null())
    where = pl.format("{} row {}", pl.col("_source"), pl.col("_row"))
    clash = (
        keyed.group_by("rule_set_id")
        .agg(pl.len().alias("n"),
             pl.col("_reason").is_not_null().any().alias("any_bad"),
             pl.struct("kind", "moves").n_unique().alias("variants"),
             pl.col("kind").n_unique().alias("kinds"),
             where.head(_LISTED_ROWS).alias("rows"))
        .filter(pl.col("n") > 1)
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
        .when(pl.col("variants") > 1)
        .then(pl.format("rule_set_id {} is defined {} different ways ({})",
                        rid, pl.col("variants"), rows))
        .otherwise(pl.format("rule_set_id {} is given {} times, and a rule_set_id is unique "
                             "({})", rid, pl.col("n"), rows))
        .alias("clash"),
        # the column that differs: kind where the definitions' kinds do, else moves
        pl.when(~pl.col("any_bad") & (pl.col("kinds") > 1)).then(pl.lit("kind"))
        .when(pl.col("any_bad") | (pl.col("variants") > 1)).then(pl.lit("moves"))
        .otherwise(pl.lit("rule_set_id")).alias("clash_column"))
    return (
        rules.join(clash, on="rule_set_id", how="left", nulls_equal=False, maintain_order="left")
        .with_columns(
            pl.coalesce("_reason", "clash").alias("_reason"),
            pl.when(pl.col("_reason").is_null() & pl.col("clash").is_not_null())
            .then(pl.col("clash_column")).otherwise(pl.col("_column")).alias("_column"),
        )
        .drop("clash", "clash_column")
    )


def rule_index(rules: pl.DataFrame) -> tuple[list[Rule], pl.DataFrame]:
    """Distinct canonical rules (sorted) and rule_set_id -> table index, or the rule's problem.

    The returned frame has one row per rule_set_id: `table` (null for an invalid rule) and
    `rule_problem` (why its positions are rejected).
    """
    valid = rules.filter(pl.col("_reason").is_null()).unique("rule_set_id", keep="first",
                                                              maintain_order=True)
    each = [Rule(k, tuple(m or ())) for k, m in
            zip(valid["kind"].to_list(), valid["moves"].to_list())]
    distinct = sorted(set(each))
    index = {r: i for i, r in enumerate(distinct)}
    table = [index[rule] for rule in each]
    good = valid.select("rule_set_id").with_columns(
        pl.Series("table", table, dtype=pl.Int64), pl.lit(None, pl.String).alias("rule_problem"))
    bad_ids = rules.filter(pl.col("_reason").is_not_null() & pl.col("rule_set_id").is_not_null()
                           & ~pl.col("rule_set_id").is_in(valid["rule_set_id"].implode()))
    bad = (
        bad_ids.group_by("rule_set_id", maintain_order=True).first()
        .select(
            "rule_set_id",
            pl.lit(None, pl.Int64).alias("table"),
            pl.when(pl.col("_reason").str.contains(  # the reason names its rows already
                pl.format("{} row {}", pl.col("_source"), pl.col("_row")), literal=True))
            .then(pl.format("rule set {} is invalid: {}", shown_text(pl.col("rule_set_id")),
                            pl.col("_reason")))
            .otherwise(pl.format("rule set {} is invalid: {} ({} row {})",
                                 shown_text(pl.col("rule_set_id")), pl.col("_reason"),
                                 pl.col("_source"), pl.col("_row")))
            .alias("rule_problem"),
        )
    )
    return distinct, pl.concat([good, bad])


def _nulls(n: int) -> pl.Series:
    return pl.repeat(None, n, dtype=pl.String, eager=True)


def _heaps_column(raw: pl.DataFrame, name: str, source: str
                  ) -> tuple[pl.Series, pl.Series, pl.Series | None]:
    """The heaps list as List(Int64), the text it came from (for messages) if any, and the
    reasons of rows whose problem the cast hides (an unsigned heap beyond int64), if any."""
    s = _as_text(raw[name])
    if s.dtype == pl.String:
        return heaps_from_text(s).alias(name), s, None
    if s.dtype == pl.Null:  # an all-null (or empty) column: every row's heaps are null
        return s.cast(HEAPS).alias(name), _nulls(s.len()), None
    s = as_list(s)
    if isinstance(s.dtype, pl.List) and (s.dtype.inner.is_integer() or s.dtype.inner == pl.Null):
        if s.dtype.inner == pl.UInt64 and (s.explode().max() or 0) > MAX_HEAP:
            too_big = s.list.eval(pl.element() > MAX_HEAP).list.any()
            return (pl.select(pl.when(too_big).then(pl.lit(None, HEAPS)).otherwise(
                        s.cast(HEAPS, strict=False))).to_series().alias(name),
                    _nulls(s.len()), _explained(s, too_big, explain_heaps))
        return s.cast(HEAPS), _nulls(s.len()), None
    raise wrong_type(source, name, s.dtype, 'a list of integers (or text like "5 12")')


def _explained(s: pl.Series, bad: pl.Series, explain: Callable[[Any], str | None]
               ) -> pl.Series:
    """`explain` of each value of `s` where `bad` (the few rows whose values polars cannot
    keep exactly), null elsewhere."""
    why = _nulls(s.len())
    where = np.flatnonzero(bad.fill_null(False).to_numpy())
    if where.shape[0]:
        why = why.scatter(where, [explain(v) for v in s.gather(where).to_list()])
    return why


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
    ids = key_column(raw, cols.rule_set_id, source).alias("rule_set_id")
    if cols.position_id in raw.columns:
        pids = key_column(raw, cols.position_id, source).alias("position_id")
    else:
        pids = pl.Series("position_id", rows + first_row_number, dtype=pl.Int64)
    if form == "wide":
        heaps, text, known = _heaps_column(raw, heap_name, source)
    else:
        heaps, text, known = _heap_scalar(raw, heap_name, source)
    frame = pl.DataFrame({
        "_row": pl.Series(rows, dtype=pl.Int64),
        "rule_set_id": ids, "position_id": pids, "heaps": heaps,
        "_text": text.cast(pl.String),
    }).select(pl.lit(source, pl.String).alias("_source"), pl.all())  # a scalar, not n copies
    if _obviously_clean(frame):
        return frame.drop("_text").with_columns(pl.lit(None, pl.String).alias("_column"),
                                                pl.lit(None, pl.String).alias("_reason"))
    frame = frame.with_columns(pl.lit(None, pl.String).alias("_known") if known is None
                               else known.alias("_known"))
    has_null = pl.col("heaps").list.drop_nulls().list.len() != pl.col("heaps").list.len()
    negative = pl.col("heaps").list.min() < 0
    heap_col = pl.lit("heaps" if form == "wide" else "heap")
    reason_expr = (
        pl.when(pl.col("rule_set_id").is_null())
        .then(pl.struct(col=pl.lit("rule_set_id"), why=pl.lit("rule_set_id is empty")))
        .when(pl.col("position_id").is_null())
        .then(pl.struct(col=pl.lit("position_id"), why=pl.lit("position_id is empty")))
        .when(pl.col("heaps").is_null() | has_null | negative)
        .then(pl.struct(col=heap_col, why=pl.col("_known")))
        .otherwise(pl.lit(None, pl.Struct({"col": pl.String, "why": pl.String})))
    )
    frame = frame.with_columns(reason_expr.alias("_r")).with_columns(
        pl.col("_r").struct.field("col").alias("_column"),
        pl.col("_r").struct.field("why").alias("_reason"),
    ).drop("_r")
    needs_text = frame.filter(pl.col("_column").is_not_null() & pl.col("_reason").is_null())
    if not needs_text.is_empty():
        wide = form == "wide"
        null = "heaps is null" if wide else "heap is null"
        explained = [
            (explain_heap_text(t, wide) if t is not None
             else null if h is None else explain_heaps(h) or null)
            for t, h in zip(needs_text["_text"].to_list(), needs_text["heaps"].to_list())
        ]
        if not wide:
            explained = [e.replace("heap at index 0", "heap").replace(" at index 0", "")
                         for e in explained]
        fix = needs_text.select("_row").with_columns(pl.Series("_why", explained,
                                                               dtype=pl.String))
        frame = frame.join(fix, on="_row", how="left", maintain_order="left").with_columns(
            pl.coalesce("_reason", "_why").alias("_reason")).drop("_why")
    return frame.drop("_text", "_known")


def _obviously_clean(frame: pl.DataFrame) -> bool:
    """True when no row can have a problem: the fast path for large clean batches, which
    skips the per-row reason expressions (decided on Arrow null counts and the minimum)."""
    if frame["rule_set_id"].null_count() or frame["position_id"].null_count():
        return False
    heaps = frame["heaps"]
    if heaps.null_count():
        return False
    for offsets, values, nulls in list_chunks(heaps):
        used = values[offsets[0]:offsets[-1]]
        if nulls or (used.shape[0] and used.min() < 0):
            return False
    return True


def _heap_scalar(raw: pl.DataFrame, name: str, source: str
                 ) -> tuple[pl.Series, pl.Series, pl.Series | None]:
    """A long-form heap column as one-element heaps lists, as `_heaps_column` gives them."""
    s = _as_text(raw[name])
    if s.dtype == pl.String:
        stripped = s.str.strip_chars()
        value = stripped.cast(pl.Int64, strict=False)
        return value.implode().explode().to_frame().select(
            pl.when(pl.col(name).is_not_null()).then(pl.concat_list(pl.col(name)))
        ).to_series().alias(name), s, None
    if s.dtype.is_integer() or s.dtype == pl.Null:
        big = s > MAX_HEAP if s.dtype == pl.UInt64 else None
        value = s.cast(pl.Int64, strict=big is None).to_frame(name)
        if big is not None:
            value = value.select(pl.when(big).then(None).otherwise(pl.col(name)).alias(name))
        listed = value.select(pl.when(pl.col(name).is_not_null()).then(pl.concat_list(name)))
        known = None if big is None else _explained(
            s, big, lambda v: f"heap {v} is larger than 2^63-1")
        return listed.to_series().alias(name), _nulls(s.len()), known
    raise wrong_type(source, name, s.dtype, "integer")
