"""The stable `reason_code` of a rejected row: one code per kind of reason, for grouping and
for thresholds, while `reason` keeps the human text (with the values it names).

The code is read off the reason's text where the rejects table is built (`outputs.
reject_rows`), by the patterns below: each reason is written by one format in the transforms
(`normalize`, `lists`, `evaluate`, `long_form`, `ordering`), the CSV reader (a line with the
wrong number of fields) or `grundy.canonical_rule`, and each pattern is anchored on the fixed
words of its format, so that values quoted in a reason (ids, cell text) cannot change its
code. A new reason text needs its pattern here (`tests/test_reasons.py` checks every known
one); until then it is `other`.
"""

from __future__ import annotations

from enum import Enum

import polars as pl


class ReasonCode(str, Enum):
    """Why a row was rejected (docs/outputs.md, The tables: rejects)."""

    null_value = "null_value"
    """A key, the heaps (heap) or the moves is empty or null, or a list has an empty or null
    element."""
    not_an_integer = "not_an_integer"
    """Text where an integer is expected (a heap, a move)."""
    malformed_list = "malformed_list"
    """A list or range in a cell is written wrong (brackets, FIRST..LAST, an empty or too
    long range)."""
    out_of_range = "out_of_range"
    """A heap that is negative or beyond 2^63-1; a move that is not positive or too large."""
    bad_rule = "bad_rule"
    """A rules row that is no rule: unknown kind, moves given for nim/half, missing or empty
    moves, too many moves (in the row, or in all the rules rows)."""
    duplicate_key = "duplicate_key"
    """A rule_set_id in the rules, or a (rule_set_id, position_id), given more than once."""
    unknown_rule_set = "unknown_rule_set"
    """A position's rule_set_id is not in the rules table."""
    invalid_rule_set = "invalid_rule_set"
    """A position's rule set was itself rejected (its reason follows)."""
    beyond_table_limit = "beyond_table_limit"
    """A heap needs SG values past a `tables.*` limit, with no period proven."""
    position_rejected = "position_rejected"
    """Long form: another row of the same position was rejected."""
    wrong_field_count = "wrong_field_count"
    """A CSV line with more or fewer fields than the header."""
    other = "other"
    """A reason without a code yet (please report it)."""


_ITEM = r"(heap|move|element)"
_PATTERNS: list[tuple[ReasonCode, str]] = [
    # a position's rule set: the rule's own reason follows, so these are looked at first
    (ReasonCode.invalid_rule_set, r"^rule set .* is invalid: "),
    (ReasonCode.unknown_rule_set, r"^unknown rule_set_id .* \(not in the rules table\)$"),
    (ReasonCode.position_rejected,
     r"^another row of this position \(.* row -?[0-9]+\) was rejected$"),
    (ReasonCode.beyond_table_limit, r"^heap -?[0-9]+ (at index [0-9]+ )?needs SG values of .* "
                                    r"beyond tables\.[a-z_]+ \("),
    (ReasonCode.duplicate_key, r"^position_id .* appears [0-9]+ times for rule_set_id "),
    (ReasonCode.duplicate_key, r"^rule_set_id .* (is defined [0-9]+ times and not every "
                               r"definition is valid|is defined [0-9]+ different ways|is "
                               r"given [0-9]+ times, and a rule_set_id is unique) \("),
    (ReasonCode.wrong_field_count, r"^line has [0-9]+ fields?, expected [0-9]+$"),
    (ReasonCode.null_value, r"^(rule_set_id|position_id) is empty$"),
    (ReasonCode.null_value, r"^(heaps|heap) is (null|empty)$"),
    (ReasonCode.null_value, rf"^{_ITEM} at index [0-9]+ is (null|empty in .*)$"),
    (ReasonCode.out_of_range, rf"^{_ITEM} .* is (negative|larger than 2\^63-1)$"),
    (ReasonCode.out_of_range, r"^move .* is (not a positive integer|larger than [0-9]+)$"),
    (ReasonCode.not_an_integer, r"^(heap|move) .* is not an integer$"),
    (ReasonCode.not_an_integer, r" in .* is not an integer$"),
    (ReasonCode.malformed_list, r"^malformed (list .* \(unbalanced brackets\)|range .* \("
                                r"expected \"FIRST\.\.LAST\", two integers\))$"),
    (ReasonCode.malformed_list, r"^range .* is (empty \(its first value is above its last\)"
                                r"|too long \(over [0-9,]+ values\))$"),
    (ReasonCode.bad_rule, r"^unknown kind .* \(expected one of: .*\)$"),
    (ReasonCode.bad_rule, r"^moves are given for a [a-z]+ rule, whose moves are fixed "),
    (ReasonCode.bad_rule, r"^moves are (missing|empty) \(a subtraction rule needs a "
                          r"non-empty set S\)$"),
    (ReasonCode.bad_rule, r"^more than [0-9,]+ moves( in .*| \([0-9,]+\))$"),
    (ReasonCode.bad_rule, r"^moves pass the rules' limit of [0-9,]+ moves in all, from this "
                          r"row on "),
    (ReasonCode.not_an_integer, r"^cannot read heaps "),
]


def reason_code(reason: pl.Expr) -> pl.Expr:
    """The `ReasonCode` value of each reason (null where the reason is null)."""
    text = reason.str.replace_all("\n", " ", literal=True)  # `.` spans a quoted line break
    expr: pl.Expr | pl.When | pl.Then = pl
    for code, pattern in _PATTERNS:
        expr = expr.when(text.str.contains(pattern)).then(pl.lit(code.value))  # type: ignore[union-attr]
    return expr.when(reason.is_not_null()).then(pl.lit(ReasonCode.other.value)  # type: ignore[union-attr]
                                               ).otherwise(pl.lit(None, pl.String))


def code_of(reason: str) -> ReasonCode:
    """The code of one reason text (`reason_code` on one value)."""
    return ReasonCode(pl.select(reason_code(pl.lit(reason, pl.String))).item())
