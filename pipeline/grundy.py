"""Sprague-Grundy tables for the rule kinds, with exact periodicity; numpy in and out.

A `Rule` is canonical (sorted, distinct moves), so identical S under different rule_set_ids share
one `SGTable`. Tables are tabulated only as far as the data needs (or until the period is proven),
never past the configured cap; see DESIGN section 1.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numba
import numpy as np

from pipeline import kernels
from pipeline.errors import RuleError, shown

KINDS = {"subtraction": kernels.KIND_SUBTRACTION, "nim": kernels.KIND_NIM,
         "half": kernels.KIND_HALF}
MAX_HEAP = 2**63 - 1
MAX_TABLE_LEN = 2**32 - 1


@dataclass(frozen=True, order=True)
class Rule:
    """A canonical rule: its kind and, for `subtraction`, the sorted distinct moves."""

    kind: str
    moves: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        if self.kind != "subtraction":
            return self.kind
        return "{" + ", ".join(map(str, self.moves)) + "}"


def canonical_rule(kind: str | None, moves: Iterable[int] | None) -> Rule:
    """Validate and canonicalise a rule; RuleError says what is wrong in user terms."""
    kind = "subtraction" if kind is None or kind == "" else kind
    if kind not in KINDS:
        raise RuleError(f"unknown kind {shown(kind)} (expected one of: {', '.join(KINDS)})")
    if kind != "subtraction":
        return Rule(kind)
    if moves is None:
        raise RuleError("moves are missing (a subtraction rule needs a non-empty set S)")
    values = list(moves)
    if not values:
        raise RuleError("moves are empty (a subtraction rule needs a non-empty set S)")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise RuleError(f"move {v!r} is not an integer")
        if v <= 0:
            raise RuleError(f"move {v} is not a positive integer")
        if v > MAX_TABLE_LEN:
            raise RuleError(f"move {v} is larger than {MAX_TABLE_LEN}")
    return Rule(kind, tuple(sorted({int(v) for v in values})))


@dataclass(frozen=True)
class SGTable:
    """Grundy values T[0:len] of one rule, with the proven preperiod/period when found.

    `values` is empty for `nim` and `half`, whose values are closed forms.
    """

    rule: Rule
    values: np.ndarray
    preperiod: int | None
    period: int | None

    @property
    def table_len(self) -> int:
        return int(self.values.shape[0])

    def max_known_heap(self) -> int:
        """Largest heap whose value this table determines."""
        if self.rule.kind != "subtraction" or self.period is not None:
            return MAX_HEAP
        return self.table_len - 1

    def sg(self, heaps: Sequence[int] | np.ndarray) -> np.ndarray:
        """Grundy values of `heaps` (int64); -1 where a heap lies beyond the table."""
        arr = np.asarray(heaps, dtype=np.int64)
        ts = TableSet.of([self])
        return kernels.sg_per_heap(arr, np.zeros(arr.shape[0], np.int64), *ts.lookup_args())


def _value_dtype(n_moves: int) -> type:
    if n_moves < 2**8 - 1:
        return np.uint8
    if n_moves < 2**16 - 1:
        return np.uint16
    return np.uint32


def _stop_len(rule: Rule, need_len: int, cap: int, probe_ops: int = 0) -> int:
    if not 1 <= cap <= MAX_TABLE_LEN:
        raise RuleError(f"table cap {cap} must be between 1 and {MAX_TABLE_LEN}")
    probe_len = probe_ops // len(rule.moves) if probe_ops > 0 else 0
    return min(cap, max(need_len, probe_len, 1))


def _finished(rule: Rule, vals: np.ndarray, n: int, pre: int, per: int) -> SGTable:
    if per > 0:
        return SGTable(rule, vals[: pre + per].copy(), int(pre), int(per))
    return SGTable(rule, vals[:n], None, None)


def _closed_form(rule: Rule) -> SGTable:
    return SGTable(rule, np.zeros(0, np.uint8), None, None)


def build_table(rule: Rule, need_len: int = 0, cap: int = 2**26, probe_ops: int = 0,
                grow: SGTable | None = None) -> SGTable:
    """Tabulate `rule` far enough for heaps < need_len, stopping early once a period is proven.

    `probe_ops` lets a cheap rule keep tabulating past need_len (up to probe_ops / |S| values) to
    find its period for the sg_tables report; nothing is ever tabulated past `cap` values.
    `grow`, an earlier table of the rule without a period, is extended instead of starting
    over; the result is the same.
    """
    if rule.kind != "subtraction":
        return _closed_form(rule)
    stop_len = _stop_len(rule, need_len, cap, probe_ops)
    moves = np.asarray(rule.moves, dtype=np.int64)
    vals = np.zeros(stop_len, dtype=_value_dtype(len(rule.moves)))
    start = _given(grow, vals)
    n, pre, per = kernels.tabulate_subtraction(moves, vals, start, stop_len)
    return _finished(rule, vals, n, pre, per)


def _given(grow: SGTable | None, vals: np.ndarray) -> int:
    """Copy the values of a table being grown (one without a proven period) into the start
    of `vals`; how many."""
    if grow is None or grow.period is not None:
        return 0
    start = min(grow.table_len, vals.shape[0])
    vals[:start] = grow.values[:start]
    return start


def build_tables(rules: Sequence[Rule], need_lens: Sequence[int], caps: Sequence[int],
                 grow: Sequence[SGTable | None] | None = None) -> list[SGTable]:
    """`build_table(rules[i], need_lens[i], caps[i], grow=grow[i])` for every i, on all of
    numba's threads.

    The result is the same as one call at a time; only the wall time differs.
    """
    subtraction = [i for i, rule in enumerate(rules) if rule.kind == "subtraction"]
    tables = [_closed_form(rule) for rule in rules]
    if not subtraction:
        return tables
    chosen = [rules[i] for i in subtraction]
    stop = np.array([_stop_len(rules[i], need_lens[i], caps[i]) for i in subtraction],
                    dtype=np.int64)
    k = np.array([len(rule.moves) for rule in chosen], dtype=np.int64)
    moves = np.fromiter((m for rule in chosen for m in rule.moves), np.int64, int(k.sum()))
    vals_base = np.concatenate(([0], np.cumsum(stop)[:-1])).astype(np.int64)
    vals = np.zeros(int(stop.sum()), dtype=_value_dtype(int(k.max())))
    start = np.array([_given(grow[i] if grow else None, vals[vals_base[q]:][:stop[q]])
                      for q, i in enumerate(subtraction)], dtype=np.int64)
    worker_start, jobs = balance((stop - start) * k, numba.get_num_threads())
    n, pre, per = kernels.tabulate_many(
        moves, np.concatenate(([0], np.cumsum(k)[:-1])).astype(np.int64), k, vals, vals_base,
        start, stop, worker_start, jobs)
    # Tables may share the buffer (no copy) unless one stopped early: its unused room would
    # then stay allocated as long as any other table lives.
    share = not per.any()
    for q, i in enumerate(subtraction):
        own = vals[vals_base[q]:vals_base[q] + stop[q]].astype(_value_dtype(int(k[q])),
                                                               copy=not share)
        tables[i] = _finished(rules[i], own, int(n[q]), int(pre[q]), int(per[q]))
    return tables


def balance(costs: np.ndarray, workers: int) -> tuple[np.ndarray, np.ndarray]:
    """Jobs split over `workers` by longest-processing-time-first: (worker_start, jobs), where
    worker w runs jobs[worker_start[w]:worker_start[w + 1]]."""
    workers = max(1, min(workers, costs.shape[0]))
    load = [(0, w) for w in range(workers)]
    assigned: list[list[int]] = [[] for _ in range(workers)]
    for job in np.argsort(-costs, kind="stable").tolist():
        total, w = heapq.heappop(load)
        assigned[w].append(job)
        heapq.heappush(load, (total + int(costs[job]), w))
    sizes = [len(a) for a in assigned]
    worker_start = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    return worker_start, np.array([j for a in assigned for j in a], dtype=np.int64)


def grundy_values(rule: Rule, upto: int) -> np.ndarray:
    """SG(0..upto) as int64 (closed forms for nim/half, tabulation otherwise)."""
    table = build_table(rule, need_len=upto + 1, cap=max(upto + 1, 1))
    return table.sg(np.arange(upto + 1, dtype=np.int64))


@dataclass(frozen=True)
class TableSet:
    """Many tables flattened into the arrays the kernels take (see `kernels` docstring)."""

    tables: tuple[SGTable, ...]
    values: np.ndarray
    base: np.ndarray
    length: np.ndarray
    pre: np.ndarray
    per: np.ndarray
    kind: np.ndarray
    moves: np.ndarray
    moves_base: np.ndarray
    moves_len: np.ndarray

    @classmethod
    def of(cls, tables: Sequence[SGTable]) -> TableSet:
        n = len(tables)
        lengths = np.array([t.table_len for t in tables], dtype=np.int64)
        base = np.zeros(n, np.int64)
        if n:
            base[1:] = np.cumsum(lengths)[:-1]
        dtype = _value_dtype(max((len(t.rule.moves) for t in tables), default=0))
        values = np.zeros(int(lengths.sum()), dtype)
        for t, b in zip(tables, base):
            values[b : b + t.table_len] = t.values
        moves_len = np.array([len(t.rule.moves) for t in tables], dtype=np.int64)
        moves_base = np.zeros(n, np.int64)
        if n:
            moves_base[1:] = np.cumsum(moves_len)[:-1]
        flat_moves = [m for t in tables for m in t.rule.moves]
        return cls(
            tables=tuple(tables),
            values=values,
            base=base,
            length=lengths,
            pre=np.array([t.preperiod or 0 for t in tables], dtype=np.int64),
            per=np.array([t.period or 0 for t in tables], dtype=np.int64),
            kind=np.array([KINDS[t.rule.kind] for t in tables], dtype=np.int64),
            moves=np.array(flat_moves, dtype=np.int64),
            moves_base=moves_base,
            moves_len=moves_len,
        )

    def lookup_args(self) -> tuple[np.ndarray, ...]:
        """(values, base, length, pre, per, kind): the trailing arguments of the SG kernels."""
        return self.values, self.base, self.length, self.pre, self.per, self.kind

    def move_args(self) -> tuple[np.ndarray, ...]:
        """(moves, moves_base, moves_len) followed by lookup_args(), for winning moves."""
        return (self.moves, self.moves_base, self.moves_len) + self.lookup_args()
