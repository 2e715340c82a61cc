"""The I/O floor: a polars streaming job that reads the positions, decodes every heap and writes
one Int64 per position (the sum of its heaps). Anything snim-batch does costs at least this.

    io_floor.py POSITIONS_GLOB OUT_PARQUET

Prints "job_s=<seconds>" (the plan's execution, after imports).
"""

import sys
import time

import polars as pl


def main() -> None:
    positions, out = sys.argv[1], sys.argv[2]
    t0 = time.perf_counter()
    (pl.scan_parquet(positions)
     .select(pl.col("heaps").list.sum().alias("heap_sum"))
     .sink_parquet(out))
    print(f"job_s={time.perf_counter() - t0:.6f}")


if __name__ == "__main__":
    main()
