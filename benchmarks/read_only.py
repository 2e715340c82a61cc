"""A diagnostic beside the I/O floor: polars reads the three positions columns that `run` needs
(rule_set_id, position_id, heaps) and decodes every heap, with no computing and no output.
`run` cannot take less than this plus its startup; the floor reads one column of the three.

    read_only.py POSITIONS_GLOB

Prints "job_s=<seconds>" (the read, after imports) and "rows=<n>".
"""

import sys
import time

import polars as pl


def main() -> None:
    t0 = time.perf_counter()
    frame = (pl.scan_parquet(sys.argv[1])
             .select("rule_set_id", "position_id", "heaps").collect())
    print(f"job_s={time.perf_counter() - t0:.6f}")
    print(f"rows={frame.height}")


if __name__ == "__main__":
    main()
