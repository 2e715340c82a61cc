"""The fair I/O floor of `snim-batch run`: a polars streaming job that reads the same input
columns (rule_set_id, position_id, heaps) and writes the same output columns (rule_set_id,
position_id, nim_sum, verdict), with the cheapest stand-in for the game (the sum of the heaps)
where the job looks up and XORs SG values. Anything the job does costs at least this.

    floor.py FORM FORMAT POSITIONS_GLOB OUT_PARQUET

FORM is wide or long, FORMAT parquet or csv. Wide rows sum their list (CSV: the heaps text
split on spaces); long rows are grouped by key and their heaps summed, streamed.
Prints "job_s=<seconds>" (the plan's execution, after imports).
"""

import sys
import time

import polars as pl


def plan(form: str, fmt: str, positions: str) -> pl.LazyFrame:
    keys = ["rule_set_id", "position_id"]
    if fmt == "parquet":
        rows = pl.scan_parquet(positions)
    else:
        rows = pl.scan_csv(positions, infer_schema=False)
    if form == "wide":
        heaps = pl.col("heaps")
        if fmt == "csv":
            heaps = heaps.str.split(" ").list.eval(pl.element().cast(pl.Int64))
        summed = rows.select(*keys, heaps.list.sum().alias("nim_sum"))
    else:
        heap = pl.col("heap") if fmt == "parquet" else pl.col("heap").cast(pl.Int64)
        summed = rows.group_by(keys).agg(heap.sum().alias("nim_sum"))
    verdict = pl.when(pl.col("nim_sum") != 0).then(pl.lit("W")).otherwise(pl.lit("L"))
    return summed.with_columns(verdict.alias("verdict"))


def main() -> None:
    form, fmt, positions, out = sys.argv[1:5]
    t0 = time.perf_counter()
    plan(form, fmt, positions).sink_parquet(out)
    print(f"job_s={time.perf_counter() - t0:.6f}")


if __name__ == "__main__":
    main()
