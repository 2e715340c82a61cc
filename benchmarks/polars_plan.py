"""A straightforward polars plan for the same job as `snim-batch run` (without its extras).

    polars_plan.py RULES_PARQUET POSITIONS_GLOB OUT_PARQUET MAX_HEAP

1. a lookup frame (rule_set_id, heap, sg) for every rule set and heap 0..MAX_HEAP, its values
   from pipeline.grundy.build_table (the point is the plan's shape, not the tabulation);
2. positions: explode heaps -> join the lookup on (rule_set_id, heap) -> group_by(rule_set_id,
   position_id) with a bitwise XOR of sg -> sink_parquet (streaming engine).

Prints "tables_s=<seconds> plan_s=<seconds> job_s=<tables + plan>" (after imports).
"""

import sys
import time

import numpy as np
import polars as pl

from pipeline.grundy import build_table, canonical_rule


def main() -> None:
    rules_path, positions, out, max_heap = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    t0 = time.perf_counter()
    rules = pl.read_parquet(rules_path, columns=["rule_set_id", "moves"])
    heaps = np.arange(max_heap + 1, dtype=np.int64)
    ids, values = [], []
    for rule_set_id, moves in rules.iter_rows():
        table = build_table(canonical_rule("subtraction", moves), need_len=max_heap + 1)
        ids.append(rule_set_id)
        values.append(table.sg(heaps))
    lookup = pl.DataFrame({
        "rule_set_id": np.repeat(np.asarray(ids, dtype=np.int64), max_heap + 1),
        "heap": np.tile(heaps, len(ids)),
        "sg": np.concatenate(values),
    })
    t1 = time.perf_counter()
    (pl.scan_parquet(positions)
     .select("rule_set_id", "position_id", pl.col("heaps").alias("heap"))
     .explode("heap")
     .join(lookup.lazy(), on=["rule_set_id", "heap"], how="left")
     .group_by("rule_set_id", "position_id")
     .agg(pl.col("sg").bitwise_xor().alias("nim_sum"))
     .sink_parquet(out))
    t2 = time.perf_counter()
    print(f"tables_s={t1 - t0:.6f} plan_s={t2 - t1:.6f} job_s={t2 - t0:.6f}")


if __name__ == "__main__":
    main()
