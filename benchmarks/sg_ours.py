"""Our SG table builder on the SG benchmark's input (see sg_reference.c for the C reference).

    sg_ours.py MOVES_FILE OUT_BIN

Calls pipeline.grundy.build_table(rule, need_len=N, cap=N) for every rule set, one at a time
on one core (period probe off: probe_ops=0), then pipeline.grundy.build_tables on all of them
at once (all cores: what `run` and `solve` use). Only the building is timed, after imports,
reading the input, making the Rule objects and warm-up calls (which load the compiled
kernels). Both must give the same tables. build_table stops early when it proves a period;
the tables are expanded to SG(0..N-1) afterwards (untimed) and written as R*N bytes, like the C
reference, with the same checksum printed:
    build_s=<seconds> parallel_s=<seconds> threads=<n> checksum=<...> warmup_s=<seconds>
    periodic=<rules stopped early>
"""

import sys
import time
from pathlib import Path

import numpy as np

from pipeline import kernels
from pipeline.grundy import build_table, build_tables, canonical_rule


def main() -> None:
    moves_file, out_bin = Path(sys.argv[1]), Path(sys.argv[2])
    lines = moves_file.read_text().split("\n")
    n_rules, n_values = (int(v) for v in lines[0].split())
    rules = []
    for line in lines[1 : n_rules + 1]:
        k, *moves = (int(v) for v in line.split())
        assert len(moves) == k
        rules.append(canonical_rule("subtraction", moves))

    t0 = time.perf_counter()
    build_table(canonical_rule("subtraction", [1, 2]), need_len=4, cap=4)
    build_tables([canonical_rule("subtraction", [1, 2])] * 2, [4, 4], [4, 4])
    warmup = time.perf_counter() - t0

    t0 = time.perf_counter()
    tables = [build_table(rule, need_len=n_values, cap=n_values) for rule in rules]
    build_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    at_once = build_tables(rules, [n_values] * len(rules), [n_values] * len(rules))
    parallel_s = time.perf_counter() - t0
    for r, (one, many) in enumerate(zip(tables, at_once)):
        if not (np.array_equal(one.values, many.values) and one.period == many.period
                and one.preperiod == many.preperiod):
            sys.exit(f"rule {r}: build_tables differs from build_table")

    # Untimed: expand to SG(0..N-1) (only tables stopped early by a proven period need it) and
    # checksum rule by rule, so that this verification adds little time and memory.
    heaps = np.arange(n_values, dtype=np.int64)
    checksum = 0
    with open(out_bin, "wb") as f:
        for r, table in enumerate(tables):
            vals = table.values if table.table_len == n_values else table.sg(heaps)
            if vals.shape[0] != n_values or vals.min() < 0 or vals.max() > 255:
                sys.exit(f"rule {r}: unexpected table")
            row = np.asarray(vals, dtype=np.uint8)
            f.write(row.tobytes())
            index = np.arange(r * n_values, (r + 1) * n_values, dtype=np.uint64)
            weights = index * np.uint64(0x9E3779B97F4A7C15) + np.uint64(1)
            part = int(np.sum(row.astype(np.uint64) * weights, dtype=np.uint64))
            checksum = (checksum + part) % 2**64
    periodic = sum(t.period is not None for t in tables)
    print(f"build_s={build_s:.6f} parallel_s={parallel_s:.6f} "
          f"threads={kernels.get_num_threads()} checksum={checksum} warmup_s={warmup:.6f} "
          f"periodic={periodic}")


if __name__ == "__main__":
    main()
