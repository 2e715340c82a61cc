"""`solve_classic`: answer a classic input in two passes over its bytes, with one SG table
per distinct move set; the compiled passes (`_classic.pyx`) deduplicate the move sets and
answer the positions. An input that `quick` answers in one compiled call is answered there;
this module's own path answers the others and words every error."""

from __future__ import annotations

import numpy as np

from pipeline import grundy
from pipeline.classic import _classic
from pipeline.classic.faults import WHERE
from pipeline.classic.quick import solve_quick
from pipeline.classic.reading import checked
from pipeline.errors import RuleError

_LIMIT_OPTIONS = {"max_table_len": "--cap", "max_rule_ops": "--max-rule-ops",
                  "max_run_ops": "--max-run-ops"}


def _dedup_rules(moves: np.ndarray, moves_off: np.ndarray) -> tuple:
    """Canonical (sorted, distinct) S per case, deduplicated by hashing.

    Returns (canon, rule_off, case_rule): rule r has moves canon[rule_off[r]:rule_off[r + 1]] and
    case c uses rule case_rule[c]; rules are numbered in order of first appearance.
    """
    return _classic.dedup_rules(np.ascontiguousarray(moves, np.int64),
                                np.ascontiguousarray(moves_off, np.int64))


def _answers(buf, anchors, moves_off, case_off, case_table, values, base, length, pre, per,
             kind) -> tuple:
    """The answer text of a checked input: for each case, one W/L per position and a newline.

    Positions are re-read from the bytes in blocks of ANCHOR_ROWS rows, each from its anchor,
    on all threads (a block skips the headers of the cases it runs into). Returns (text, bad):
    bad[b] = (row, heap index, heap) of the first heap in block b beyond its table (no proven
    period), row -1 when there is none.
    """
    i64 = [np.ascontiguousarray(a, np.int64) for a in (anchors, moves_off, case_off, case_table)]
    return _classic.answers(np.ascontiguousarray(buf, np.uint8), *i64,
                            np.ascontiguousarray(values),
                            *(np.ascontiguousarray(a, np.int64)
                              for a in (base, length, pre, per, kind)))


def solve_classic(data: bytes, cap: int = grundy.DEFAULT_TABLE_LEN,
                  max_rule_ops: int = grundy.DEFAULT_RULE_OPS,
                  max_run_ops: int = grundy.DEFAULT_RUN_OPS) -> str:
    """Answer a classic S-Nim input: per test case one line of W/L, trailing newline.

    Two passes over the bytes, so no heap is ever stored: the first checks the input and finds
    each case's largest heap, then the tables are built, then the second reads the positions
    again, on all threads, and answers them. Tables are bounded as in `run` (see
    `grundy.TableBudget`): `cap` values, `max_rule_ops` operations a rule, `max_run_ops` in
    all. Raises InputError for malformed input and RuleError when a heap's value is not
    determined within them (no proven period), naming the limit.
    """
    quick = solve_quick(data, cap, max_rule_ops, max_run_ops)
    if quick is not None:
        return quick.decode("ascii")
    buf, moves, moves_off, case_off, _, _, case_max, anchors = checked(data, keep=False)
    if case_off.shape[0] == 1:
        return ""
    canon, rule_off, case_rule = _dedup_rules(moves, moves_off)
    n_rules = int(rule_off.shape[0] - 1)
    rule_max = np.full(n_rules, -1, np.int64)
    np.maximum.at(rule_max, case_rule, case_max)
    canon_list = canon.tolist()
    ro = rule_off.tolist()
    rules = [grundy.Rule("subtraction", tuple(canon_list[ro[r] : ro[r + 1]]))
             for r in range(n_rules)]
    budget = grundy.TableBudget(cap, max_rule_ops, grundy.MAX_HEAP, max_run_ops)
    tables = budget.build(rules, [m + 1 for m in rule_max.tolist()], [None] * n_rules)
    text, bad = _answers(buf, anchors, moves_off, case_off, case_rule,
                         *grundy.TableSet.of(tables).lookup_args())
    bad = bad[bad[:, 0] >= 0]
    if bad.shape[0]:
        row, j, heap = (int(v) for v in bad[0])
        case = int(np.searchsorted(case_off, row, side="right")) - 1
        pos = row - int(case_off[case])
        table = tables[int(case_rule[case])]
        limit = table.stopped_by or "max_table_len"
        raise RuleError(
            f"{WHERE}: test case {case + 1}, position {pos + 1}, heap {j + 1} (size {heap}): "
            f"its Grundy value under S = {table.rule.label} is not determined: no period is "
            f"proven within the {grundy.counted_values(table.table_len)} that "
            f"{_LIMIT_OPTIONS[limit]} {getattr(budget, limit)} allows")
    return text.tobytes().decode("ascii")
