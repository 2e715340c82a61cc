"""Sprague-Grundy tables for the rule kinds, with exact periodicity; numpy in and out.

A `Rule` is canonical (sorted, distinct moves), so identical S under different rule_set_ids share
one `SGTable`. Tables are tabulated only as far as the data needs (or until the period is proven),
never past the configured limits; see docs/ARCHITECTURE.md, "Periods".
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from pipeline import kernels
from pipeline.errors import RuleError, brief_repr
from pipeline.limits import (
    DEFAULT_RULE_OPS,
    DEFAULT_RUN_OPS,
    DEFAULT_TABLE_LEN,
    DEFAULT_TOTAL_VALUES,
    MAX_HEAP,
    MAX_TABLE_LEN,
    PROOF_OPS,
)

KINDS = {"subtraction": kernels.KIND_SUBTRACTION, "nim": kernels.KIND_NIM,
         "half": kernels.KIND_HALF}
# Work is counted in operations: one SG value of a subtraction rule costs |S| + PROOF_OPS, its
# moves plus the period proof's window hash, which costs about as much as PROOF_OPS moves (a
# cache miss in a table as long as the SG table). One operation is about a nanosecond.
# PROOF_OPS is in `limits`, with the limits it is counted against.
REGROW_OPS = 64  # growing a table hashes the windows it has seen again (measured 17-63 ns each)
LABEL_MOVES = 12  # `Rule.label` shows this many moves at most
FIRST_ROUND_LEN = 1 << 16  # `TableBudget.build` grows a table to this length, then doubles it


@dataclass(frozen=True, order=True)
class Rule:
    """A canonical rule: its kind and, for `subtraction`, the sorted distinct moves."""

    kind: str
    moves: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        """The rule for messages: its kind, or S, whose middle is elided past LABEL_MOVES
        moves (a reject reason per row must not carry a million moves)."""
        if self.kind != "subtraction":
            return self.kind
        if len(self.moves) <= LABEL_MOVES:
            return "{" + ", ".join(map(str, self.moves)) + "}"
        shown = [*map(str, self.moves[:LABEL_MOVES - 2]), "...", *map(str, self.moves[-2:])]
        return "{" + ", ".join(shown) + "} (" + f"{len(self.moves)} moves)"

    @property
    def value_ops(self) -> int:
        """Work of tabulating one SG value (operations; 0 for the closed forms)."""
        return len(self.moves) + PROOF_OPS if self.kind == "subtraction" else 0

    def ops_len(self, ops: int) -> int:
        """How many SG values `ops` operations tabulate: SG(0) = 0 is free, each other costs
        `value_ops`."""
        return 1 + max(0, ops) // self.value_ops if self.value_ops else MAX_TABLE_LEN


def canonical_rule(kind: str | None, moves: Iterable[int] | None) -> Rule:
    """Validate and canonicalise a rule; RuleError says what is wrong in user terms."""
    kind = "subtraction" if kind is None or kind == "" else kind
    if kind not in KINDS:
        raise RuleError(f"unknown kind {brief_repr(kind)} (expected one of: {', '.join(KINDS)})")
    values = None if moves is None else list(moves)
    if kind != "subtraction":
        if values:
            raise RuleError(f"moves are given for a {kind} rule, whose moves are fixed (leave "
                            "moves empty, or make it a subtraction rule)")
        return Rule(kind)
    if values is None:
        raise RuleError("moves are missing (a subtraction rule needs a non-empty set S)")
    if not values:
        raise RuleError("moves are empty (a subtraction rule needs a non-empty set S)")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise RuleError(f"move {brief_repr(v)} is not an integer")
        if v <= 0:
            raise RuleError(f"move {brief_repr(v)} is not a positive integer")
        if v > MAX_TABLE_LEN:
            raise RuleError(f"move {brief_repr(v)} is larger than {MAX_TABLE_LEN}")
    return Rule(kind, tuple(sorted({int(v) for v in values})))


@dataclass(frozen=True)
class SGTable:
    """Grundy values T[0:len] of one rule, with the proven preperiod/period when found.

    `values` is empty for `nim` and `half`, whose values are closed forms. `stopped_by` names
    the limit that keeps a table without a period from growing (for reasons that name it).
    """

    rule: Rule
    values: np.ndarray
    preperiod: int | None
    period: int | None
    stopped_by: str | None = None

    @property
    def table_len(self) -> int:
        return int(self.values.shape[0])

    @property
    def work(self) -> int:
        """Operations spent tabulating it: its values, and with a period the max(S) values
        past it that proved the repeat."""
        proof = self.rule.moves[-1] if self.period is not None else 0
        return max(0, self.table_len - 1 + proof) * self.rule.value_ops

    @property
    def regrow_ops(self) -> int:
        """Work of extending it (no period yet): the period proof hashes again the windows it
        has seen, REGROW_OPS each, one per value from max(S) on."""
        if self.rule.kind != "subtraction" or self.period is not None:
            return 0
        return max(0, self.table_len - self.rule.moves[-1] + 1) * REGROW_OPS

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
        raise RuleError(f"table cap {brief_repr(cap)} must be between 1 and {MAX_TABLE_LEN}")
    probe_len = rule.ops_len(probe_ops) if probe_ops > 0 else 0
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

    `probe_ops` lets a cheap rule keep tabulating past need_len (up to `rule.ops_len(probe_ops)`
    values) to find its period; nothing is ever tabulated past `cap` values.
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
    the kernels' threads.

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
    worker_start, jobs = balance((stop - start) * (k + PROOF_OPS), kernels.get_num_threads())
    if len(chosen) == 1:  # no parallel region to start (each start costs ~1 ms, more on a
        # busy machine), as when the period probe grows one table at a time
        n, pre, per = (np.array([v]) for v in kernels.tabulate_subtraction(
            moves, vals, int(start[0]), int(stop[0])))
    else:
        n, pre, per = kernels.tabulate_many(
            moves, np.concatenate(([0], np.cumsum(k)[:-1])).astype(np.int64), k, vals,
            vals_base, start, stop, worker_start, jobs)
    # Tables may share the buffer (no copy) unless one stopped early: its unused room would
    # then stay allocated as long as any other table lives.
    share = not per.any()
    for q, i in enumerate(subtraction):
        own = vals[vals_base[q]:vals_base[q] + stop[q]].astype(_value_dtype(int(k[q])),
                                                               copy=not share)
        tables[i] = _finished(rules[i], own, int(n[q]), int(pre[q]), int(per[q]))
    return tables


@dataclass
class TableBudget:
    """A run's limits on its SG tables, and what its tables have taken so far.

    The limits: the longest table (`max_table_len` values) and one rule's work
    (`max_rule_ops`), then all tables' values together (`max_total_values`, memory) and all
    tables' work (`max_run_ops`, which also counts `regrow_ops` each time a table grows
    again). A table that would pass a limit is tabulated up to it (its period may still be
    proven there) and then grows no further; its `stopped_by` names that limit.

    `build` builds tables on all cores in rounds, each planned before it runs: the run-wide
    room is granted in rule order and reserved as if no period came early, so the tables do
    not depend on the number of threads. When all the tables fit in the room, one round builds
    them; otherwise each round grows each table at most to double its length (from
    FIRST_ROUND_LEN), until it has what it needs, proves its period or meets a limit, so that
    the room is shared about evenly among the tables that need much, not spent on the first.
    A table the room left short in a round stops there only if no table of that round proved
    its period; one that did freed the rest of what it had reserved, and the next round
    grants it again (so a run of many rules whose periods come early never starves the last).
    """

    max_table_len: int = DEFAULT_TABLE_LEN
    max_rule_ops: int = DEFAULT_RULE_OPS
    max_total_values: int = DEFAULT_TOTAL_VALUES
    max_run_ops: int = DEFAULT_RUN_OPS
    values: int = 0
    ops: int = 0

    def _own_limit(self, rule: Rule) -> tuple[int, str]:
        limits = {"max_table_len": self.max_table_len,
                  "max_rule_ops": rule.ops_len(self.max_rule_ops)}
        name = min(limits, key=limits.__getitem__)
        return limits[name], name

    def _room(self, rule: Rule, old: SGTable | None, values: int, ops: int) -> tuple[int, str]:
        """The longest table of `rule` that the run's values and work left allow, given that
        `values` and `ops` are taken (old's share included; growing old costs its regrow_ops
        too)."""
        have, spent, regrow = ((old.table_len, old.work, old.regrow_ops) if old is not None
                               else (0, 0, 0))
        limits = {"max_total_values": have + self.max_total_values - values,
                  "max_run_ops": rule.ops_len(spent + self.max_run_ops - ops - regrow)}
        name = min(limits, key=limits.__getitem__)
        return limits[name], name

    def _out_of_room(self, values: int, ops: int) -> str | None:
        """The run-wide limit that leaves no table room to grow by one value (None: room is
        left). One value costs at least 1 + PROOF_OPS operations."""
        if values >= self.max_total_values:
            return "max_total_values"
        if self.max_run_ops - ops <= PROOF_OPS:
            return "max_run_ops"
        return None

    def _grant(self, rules: Sequence[Rule], tables: Sequence[SGTable | None],
               targets: Iterable[tuple[int, int]]
               ) -> tuple[dict[int, int], dict[int, str], str | None]:
        """Lengths for tables i (in order) towards their targets, as far as the run's room
        goes, reserved as if no period came early; the tables the room stops, with the limit;
        and the run-wide limit that ran out before the last table, if one did (the tables
        after that point are not looked at, so a round costs what it grants)."""
        values, ops = self.values, self.ops
        stops: dict[int, int] = {}
        short: dict[int, str] = {}
        for i, target in targets:
            spent = self._out_of_room(values, ops)
            if spent is not None:
                return stops, short, spent
            old = tables[i]
            room, name = self._room(rules[i], old, values, ops)
            stops[i] = target if room >= target else max(_length(old), room, 1)
            if room < target:
                short[i] = name
            values += stops[i] - _length(old)
            ops += _growth_ops(rules[i], old, stops[i])
        return stops, short, None

    def _build(self, rules: Sequence[Rule], tables: list[SGTable | None],
               stops: dict[int, int]) -> list[int]:
        """Grow tables i to stops[i] (those that grow), charging the budget what each took;
        returns the tables built."""
        todo = [i for i, stop in stops.items() if stop > _length(tables[i])]
        built = build_tables([rules[i] for i in todo], [stops[i] for i in todo],
                             [stops[i] for i in todo], [tables[i] for i in todo])
        for i, table in zip(todo, built):
            old = tables[i]
            self.values += table.table_len - _length(old)
            self.ops += table.work - (old.work - old.regrow_ops if old is not None else 0)
            tables[i] = table
        return todo

    def build(self, rules: Sequence[Rule], need_lens: Sequence[int],
              grown: Sequence[SGTable | None]) -> list[SGTable]:
        """Tables of `rules` for heaps < need_lens (extending `grown`, earlier tables of the
        same rules without a period), charged to the budget at the work they took."""
        tables: list[SGTable | None] = list(grown)
        goals: dict[int, int] = {}
        stopped_by: list[str | None] = [None] * len(rules)
        for i, rule in enumerate(rules):
            if rule.kind != "subtraction":
                tables[i] = _closed_form(rule)
                continue
            limit, name = self._own_limit(rule)
            goal = max(1, min(need_lens[i], limit))
            if goal >= limit:
                stopped_by[i] = name
            if grown[i] is None or grown[i].period is None and grown[i].table_len < goal:
                goals[i] = goal
        while goals:
            stops, short, spent = self._grant(rules, tables, goals.items())
            if short or spent:  # the room binds: grow every table at the same pace instead
                stops, short, spent = self._grant(rules, tables, (
                    (i, min(goal, max(2 * _length(tables[i]), FIRST_ROUND_LEN)))
                    for i, goal in goals.items()))
            todo = self._build(rules, tables, stops)
            if any(tables[i].period is not None for i in todo):
                short, spent = {}, None  # periods came early: the room they freed goes round
            waiting = dict.fromkeys(i for i in goals if i not in stops) if spent else {}
            for i, name in [*short.items(), *((i, spent) for i in waiting)]:
                stopped_by[i] = name
            self._build(rules, tables, {i: 1 for i in waiting if tables[i] is None})
            for i in [*stops, *waiting]:
                if (i in short or i in waiting or tables[i].period is not None
                        or _length(tables[i]) >= goals[i]):
                    del goals[i]
        return [replace(t, stopped_by=why) if why is not None and t.period is None else t
                for t, why in zip(tables, stopped_by)]


def _length(table: SGTable | None) -> int:
    return table.table_len if table is not None else 0


def _growth_ops(rule: Rule, old: SGTable | None, length: int) -> int:
    """Most work that growing `old` to `length` values may take: the new values, and the old
    windows hashed again."""
    if old is None:
        return (length - 1) * rule.value_ops
    if length <= old.table_len:
        return 0
    return (length - 1) * rule.value_ops - old.work + old.regrow_ops


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


def counted_values(n: int) -> str:
    """"1 value", "n values": how many SG values, as messages say it."""
    return f"{n} value" if n == 1 else f"{n} values"


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
