"""The run's SG tables: one per distinct rule, grown only as far as the heaps seen so far need,
within the run's work and size limits. Engine-neutral: both engines build tables here, on the
driver, so their tables (and sg_tables) are the same."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import kernels
from pipeline.config import Config, Tables
from pipeline.grundy import MAX_HEAP, Rule, SGTable, TableBudget, TableSet
from pipeline.io.read.readers import heap_upper_bound
from pipeline.io.store.run_cache import RunCache

PRESIZE_LIMIT = 1 << 16


class TableCache:
    """One SG table per distinct rule, tabulated only as far as the heaps seen so far need
    (exactly, so the final tables do not depend on how the input was batched), within the
    run's `TableBudget`; `reported` then spends the period-probe budget to prove periods for
    sg_tables."""

    def __init__(self, distinct: list[Rule], settings: Tables):
        self.distinct = distinct
        self.budget = TableBudget(settings.max_table_len, settings.max_rule_ops,
                                  settings.max_total_values, settings.max_run_ops)
        self.probe_budget = settings.period_probe_ops
        self.tables: list[SGTable | None] = [None] * len(distinct)
        self.known = np.full(len(distinct), -1, dtype=np.int64)
        self._set: TableSet | None = None
        self.heap_bound: int | None = None  # every table is built for heaps up to it (presize)
        self._probed = False
        self._pending: Future[None] | None = None
        self._changes = 0  # tables built or grown so far: tells an early probe it is stale
        self._early: tuple[int, Future[tuple[list[SGTable | None], int]]] | None = None

    def _build_all(self, ts: list[int], largest: list[int]) -> None:
        """Tables t in `ts` grown for heaps up to `largest`, on all cores; a table stopped by
        a limit is known for every heap (those beyond it are rejected, naming the limit)."""
        if not ts:
            return
        built = self.budget.build([self.distinct[t] for t in ts],
                                  [min(h + 1, MAX_HEAP) for h in largest],
                                  [self.tables[t] for t in ts])
        for t, table in zip(ts, built):
            self.tables[t] = replace(table, stopped_by=f"tables.{table.stopped_by}"
                                     ) if table.stopped_by else table
            stopped = table.stopped_by is not None or table.rule.kind != "subtraction"
            self.known[t] = MAX_HEAP if stopped else table.max_known_heap()
        self._set = None
        self._probed = False  # a table grown after the probe is probed again
        self._changes += 1

    def presize(self, largest_heap: int | None) -> None:
        """Build every table for heaps up to `largest_heap` at once when that bound (from
        Parquet statistics) is small, instead of growing tables batch by batch. All or
        nothing: if a limit stops any table on the way, the tables are left to grow as the
        heaps need, so that presizing never spends the run's room on tables that do not need
        it and no row is rejected, or table stopped, that growing would have kept."""
        if largest_heap is not None and 0 <= largest_heap < PRESIZE_LIMIT:
            missing = [t for t in range(len(self.distinct)) if self.tables[t] is None]
            before = replace(self.budget), list(self.tables), self.known.copy()
            self._build_all(missing, [largest_heap] * len(missing))
            if any(self.tables[t].stopped_by for t in missing):  # type: ignore[union-attr]
                self.budget, self.tables, self.known = before
                self._set = None
                return
            self.heap_bound = largest_heap
            self._flattened()
            self._probe_early()

    def presize_meanwhile(self, largest_heap: int | None) -> None:
        """`presize` in a thread of its own, so that the tables are built while the engine
        starts reading positions (the tabulation kernels release the GIL)."""
        self._meanwhile(self.presize, largest_heap)

    def report_meanwhile(self) -> None:
        """The period probing of `reported`, started in a thread of its own once the engine
        needs no more tables, so that it overlaps the engine's last steps (the sort)."""
        self._meanwhile(self._probe_periods)

    def _meanwhile(self, work: Callable[..., None], *args: Any) -> None:
        """`work` in a thread of its own; every public method waits for it first, and
        raises what it raised. Done now where the kernels may not run in two threads at
        once (`kernels.overlap_allowed`)."""
        self._settle()
        if not kernels.overlap_allowed():
            work(*args)
            return
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tables")
        self._pending = pool.submit(work, *args)
        pool.shutdown(wait=False)

    def _settle(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def covers_input(self) -> bool:
        """True when the presized tables already cover every heap the input can hold, so
        that `ensure` would change nothing whatever the heaps are (no need to look)."""
        self._settle()
        return self.heap_bound is not None and bool(np.all(self.known >= self.heap_bound))

    def all_built(self) -> bool:
        """Whether every table exists (after the first batch's `table_set`), so that
        growing one changes only its length."""
        self._settle()
        return None not in self.tables

    def grown_for(self, largest: Callable[[], Iterable[np.ndarray]]) -> TableSet:
        """Tables covering the heaps whose largest per table each array of `largest()` holds,
        grown in that order (`ensure`); `largest` (a pass over the heaps, or a Spark job) is
        not called when the presized tables cover every heap the input can hold."""
        if not self.covers_input():
            for need in largest():
                self.ensure(need)
        return self.table_set()

    def ensure(self, largest: np.ndarray) -> TableSet:
        """Tables covering `largest[t]` for every t (beyond a limit, heaps are rejected)."""
        self._settle()
        grow = np.flatnonzero((largest > self.known) | (largest >= 0) & (self.known < 0))
        self._build_all(grow.tolist(), largest[grow].tolist())
        return self.table_set()

    def reported(self) -> TableSet:
        """The tables for sg_tables: those without a proven period that no limit stopped are
        tabulated further, up to `period_probe_ops` operations in all (within max_table_len,
        max_rule_ops and max_total_values). Rules go cheapest first and each may use an equal
        share of what is left, so budget a rule does not need (its period came early) flows to
        the rules after it; a lone rule may use all of it."""
        self._settle()
        if not self._probed:
            self._probe_periods()
        return self.table_set()

    def _probe_early(self) -> None:
        """Once presized tables cover every heap the input can hold, no table changes while
        the engine reads: the period probe starts now, in a thread of its own beside the
        read, instead of after it, where it took a core from the sort and the write. It
        works on copies; `_probe_periods` takes its result unless a table changed since."""
        if not kernels.overlap_allowed():
            return
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="periods")
        self._early = (self._changes, pool.submit(self._with_periods, list(self.tables),
                                                  replace(self.budget)))
        pool.shutdown(wait=False)

    def _probe_periods(self) -> None:
        self._flattened()
        early, self._early = self._early, None
        if early is not None and early[0] == self._changes:
            self.tables, self.budget.values = early[1].result()
        else:
            self.tables, self.budget.values = self._with_periods(self.tables, self.budget)
        self._probed = True
        self._set = None
        self._flattened()

    def _with_periods(self, tables: list[SGTable | None], budget: TableBudget
                      ) -> tuple[list[SGTable | None], int]:
        """`tables` with those lacking a proven period tabulated further (see `reported`),
        and the budget's values after them; changes neither argument."""
        tables = list(tables)
        values = budget.values
        left_ops = self.probe_budget
        pending = sorted((t for t, table in enumerate(tables)
                          if table is not None and table.rule.kind == "subtraction"
                          and table.period is None and table.stopped_by is None),
                         key=lambda t: (self.distinct[t].value_ops, t))
        for left, t in zip(range(len(pending), 0, -1), pending):
            old = tables[t]
            assert old is not None
            probe = replace(budget, max_run_ops=left_ops // left, ops=0, values=values)
            (table,) = probe.build([old.rule], [MAX_HEAP], [old])
            left_ops -= probe.ops
            values = probe.values
            tables[t] = replace(table, stopped_by=None)
        return tables, values

    def table_set(self) -> TableSet:
        self._settle()
        return self._flattened()

    def _flattened(self) -> TableSet:
        if self._set is None:
            missing = [t for t, table in enumerate(self.tables) if table is None]
            if missing:
                self._build_all(missing, [-1] * len(missing))
            self._set = TableSet.of([t for t in self.tables if t is not None])
        return self._set


def table_cache(distinct: list[Rule], config: Config, paths: list[Path], form: str, *,
                read_cache: RunCache | None = None) -> TableCache:
    """The run's table cache, presized from Parquet statistics where they bound the heaps
    (both engines, so that their tables, and sg_tables, are the same), in the background
    while the engine starts; the footers read through the run's `read_cache`."""
    cache = TableCache(distinct, config.tables)
    heaps = config.columns.heaps if form == "wide" else config.columns.heap
    cache.presize_meanwhile(heap_upper_bound(paths, heaps, cache=read_cache))
    return cache
