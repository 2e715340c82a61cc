"""`solve_classic`: answer a classic input in two passes over its bytes, with one SG table
per distinct move set; the numba passes deduplicate the move sets and answer the
positions."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from pipeline import grundy
from pipeline.classic.faults import WHERE
from pipeline.classic.parser import ANCHOR_ROWS
from pipeline.classic.reading import checked
from pipeline.classic.tokens import next_token, plain_int
from pipeline.errors import RuleError
from pipeline.kernels import mix64, sg_of

_LIMIT_OPTIONS = {"max_table_len": "--cap", "max_rule_ops": "--max-rule-ops",
                  "max_run_ops": "--max-run-ops"}


@njit(cache=True)
def _dedup_rules(moves, moves_off):
    """Canonical (sorted, distinct) S per case, deduplicated by hashing.

    Returns (canon, rule_off, case_rule): rule r has moves canon[rule_off[r]:rule_off[r + 1]] and
    case c uses rule case_rule[c]; rules are numbered in order of first appearance.
    """
    nc = moves_off.shape[0] - 1
    canon = np.empty(moves.shape[0], np.int64)
    rule_off = np.empty(nc + 1, np.int64)
    rule_hash = np.empty(nc, np.uint64)
    case_rule = np.empty(nc, np.int64)
    n_slots = 16
    while n_slots < 2 * nc:
        n_slots *= 2
    slots = np.full(n_slots, -1, np.int64)
    mask = np.uint64(n_slots - 1)
    rule_off[0] = 0
    nr = 0
    top = 0
    for c in range(nc):
        a0 = moves_off[c]
        k = moves_off[c + 1] - a0
        if k <= 32:  # insertion sort in place in canon (no allocation per case)
            for j in range(k):
                v = moves[a0 + j]
                q = top + j
                while q > top and canon[q - 1] > v:
                    canon[q] = canon[q - 1]
                    q -= 1
                canon[q] = v
        else:
            canon[top: top + k] = np.sort(moves[a0: a0 + k])
        ln = 0
        h = np.uint64(0x9E3779B97F4A7C15)
        for j in range(k):
            v = canon[top + j]
            if ln == 0 or canon[top + ln - 1] != v:
                canon[top + ln] = v
                ln += 1
                h = mix64(h ^ np.uint64(v))
        idx = h & mask
        while True:
            r = slots[idx]
            if r < 0:
                slots[idx] = nr
                rule_hash[nr] = h
                case_rule[c] = nr
                top += ln
                nr += 1
                rule_off[nr] = top
                break
            if rule_hash[r] == h and rule_off[r + 1] - rule_off[r] == ln:
                a = rule_off[r]
                same = True
                for j in range(ln):
                    if canon[a + j] != canon[top + j]:
                        same = False
                        break
                if same:
                    case_rule[c] = r
                    break
            idx = (idx + np.uint64(1)) & mask
    return canon[:top].copy(), rule_off[: nr + 1].copy(), case_rule


@njit(cache=True, parallel=True, nogil=True)
def _answers(buf, anchors, moves_off, case_off, case_table, values, base, length, pre, per, kind):
    """The answer text of a checked input: for each case, one W/L per position and a newline.

    Positions are re-read from the bytes in blocks of ANCHOR_ROWS rows, each from its anchor,
    on all threads (a block skips the headers of the cases it runs into). Returns (text, bad):
    bad[b] = (row, heap index, heap) of the first heap in block b beyond its table (no proven
    period), row -1 when there is none.
    """
    nc = case_table.shape[0]
    n_rows = case_off[nc]
    out = np.empty(n_rows + nc, np.uint8)
    for c in range(nc):
        out[case_off[c + 1] + c] = 10
    n_blocks = anchors.shape[0]
    bad = np.full((n_blocks, 3), -1, np.int64)
    for blk in prange(n_blocks):
        i = anchors[blk]
        row = blk * ANCHOR_ROWS
        end = min(row + ANCHOR_ROWS, n_rows)
        c = np.searchsorted(case_off, row, side="right") - 1
        while row < end:
            while case_off[c + 1] <= row:  # skip the next case's `k s1..sk m`
                c += 1
                for _ in range(moves_off[c + 1] - moves_off[c] + 2):
                    _, _, _, i = next_token(buf, i)
            t = case_table[c]
            _, ln, _, i = next_token(buf, i)
            acc = np.int64(0)
            for j in range(ln):
                ok, h, k = plain_int(buf, i)
                if ok:
                    i = k
                else:
                    _, h, _, i = next_token(buf, i)
                g = sg_of(h, t, values, base, length, pre, per, kind)
                if g < 0 and bad[blk, 0] < 0:
                    bad[blk, 0] = row
                    bad[blk, 1] = j
                    bad[blk, 2] = h
                acc ^= g
            out[row + c] = 87 if acc != 0 else 76
            row += 1
    return out, bad


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
