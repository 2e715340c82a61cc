"""Planning SG tables for many rule sets: `TableBudget.build` for N distinct 3-move rules
(moves from 1..299) that each need a heap of 10^18, under the default limits.

    .venv/bin/python benchmarks/table_planning.py 2000 20000 50000

Prints, per N, the seconds `build` took, how many tables a limit stopped, and the values and
operations charged. Planning rounds look only at the tables they grant, so the time grows
with N, not N squared.
"""

from __future__ import annotations

import random
import sys
import time

from pipeline.grundy import Rule, TableBudget


def distinct_rules(n: int, seed: int = 1) -> list[Rule]:
    rng, seen, rules = random.Random(seed), set(), []
    while len(rules) < n:
        moves = tuple(sorted(rng.sample(range(1, 300), 3)))
        if moves not in seen:
            seen.add(moves)
            rules.append(Rule("subtraction", moves))
    return rules


def main(counts: list[int]) -> None:
    for n in counts:
        rules = distinct_rules(n)
        started = time.perf_counter()
        budget = TableBudget()
        tables = budget.build(rules, [10**18] * n, [None] * n)
        stopped = sum(1 for t in tables if t.stopped_by)
        print(f"{n} rule sets: {time.perf_counter() - started:.2f} s, {stopped} stopped by a "
              f"limit, {budget.values} values, {budget.ops} operations")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [2000, 20000])
