"""What Spark costs before any data moves: the session snim-batch starts (its own settings,
`spark_session.session`) and one trivial job, then stop. No engine can be faster than this
on the same master, so it is the floor under `snim-batch run --engine spark`.

    spark_start.py MASTER

Prints "session_s=<seconds> first_job_s=<seconds> job_s=<both>" (after imports).
"""

import sys
import time

from pipeline.engines.spark_session import session


def main() -> None:
    t0 = time.perf_counter()
    run = session(sys.argv[1], {})
    t1 = time.perf_counter()
    run.spark.range(1000).selectExpr("sum(id)").collect()
    t2 = time.perf_counter()
    run.stop(False)
    print(f"session_s={t1 - t0:.6f} first_job_s={t2 - t1:.6f} job_s={t2 - t0:.6f}")


if __name__ == "__main__":
    main()
