"""The run's table cache (`pipeline.tables.TableCache`): presized tables, their period probe
(started beside the read once the tables can change no more), and growth after it. Every
value and period is checked against the mex definition (`naive_sg`, `naive_period`)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import naive_period, naive_sg

from pipeline.config import Tables
from pipeline.grundy import Rule, SGTable
from pipeline.tables import TableCache

SETS = [(1, 2), (3, 5, 9), (18, 41, 59)]


def _cache(**settings: int) -> TableCache:
    return TableCache([Rule("subtraction", s) for s in SETS], Tables(**settings))


def _sg(table: SGTable, heap: int) -> int | None:
    """SG(heap) as the table gives it: tabulated, or through its proven period."""
    if heap < table.table_len:
        return int(table.values[heap])
    if table.period is None:
        return None
    assert table.preperiod is not None
    return int(table.values[table.preperiod + (heap - table.preperiod) % table.period])


def _reported(cache: TableCache) -> dict[tuple[int, ...], SGTable]:
    cache.reported()
    assert all(table is not None for table in cache.tables)
    return dict(zip(SETS, cache.tables))  # type: ignore[arg-type]


@pytest.mark.parametrize("presized", [True, False])
def test_periods_are_proven_whether_the_probe_ran_beside_the_read_or_after(presized,
                                                                         monkeypatch):
    """Presized tables (Parquet statistics bound the heaps) are probed early, in a thread of
    their own (`periods`), as soon as they are built; tables grown batch by batch are probed
    at the end, by the caller. Either way every period is the naive one and every value up
    to the heaps asked for is the mex value."""
    probed_by = []
    real = TableCache._with_periods

    def recorded(self, *args):
        probed_by.append(threading.current_thread().name.split("_")[0])
        return real(self, *args)

    monkeypatch.setattr(TableCache, "_with_periods", recorded)
    cache = _cache()
    if presized:
        cache.presize(10)
    else:
        cache.ensure(np.array([10, 10, 10]))
    for moves, table in _reported(cache).items():
        assert (table.preperiod, table.period) == naive_period(moves)[:2]
        assert [_sg(table, h) for h in range(200)] == naive_sg(moves, 200)
    assert probed_by == ["periods" if presized else "MainThread"]


def test_a_table_grown_after_the_early_probe_started_is_probed_again():
    """The early probe works on copies; a table grown after it started (a heap beyond the
    presized bound) makes its result stale, and `reported` keeps the grown table: with no
    probe budget, {18, 41, 59} covers heap 500 only by that growth."""
    cache = _cache(period_probe_ops=0)
    cache.presize(10)
    cache.ensure(np.array([-1, -1, 500]))
    table = _reported(cache)[(18, 41, 59)]
    assert [_sg(table, h) for h in range(501)] == naive_sg((18, 41, 59), 501)
