"""Spark's own floor for the job: what Spark costs to move the rows the engine moves.

    spark_floor.py POSITIONS_GLOB OUT_DIR MASTER [--conf=KEY=VALUE ...]

Reads the same three columns as `snim-batch run --engine spark` (rule_set_id, position_id,
heaps), stands in the sum of the heaps (`aggregate`, no Python) for the nim-sum, sorts by the
keys and writes the same four columns (rule_set_id, position_id, nim_sum, verdict) with the
engine's codec (zstd at the engine's level). No game logic, no validation, no rejects: the
engine's cost above this is its own.

The session is `spark_plan.reference_session`'s (the driver heap snim-batch's own default
would give it). Prints "job_s=<seconds>" (after the session starts).
"""

import sys
import time

from pyspark.sql import functions as F
from spark_plan import reference_session  # this directory: the script's own

from pipeline.io.outputs.commit import ZSTD_LEVEL


def main() -> None:
    positions, out, master = sys.argv[1], sys.argv[2], sys.argv[3]
    settings = dict(setting.removeprefix("--conf=").split("=", 1)  # a cluster run's cores
                    for setting in sys.argv[4:])
    spark = reference_session("spark-floor", master, settings)
    try:
        t0 = time.perf_counter()
        nim_sum = F.aggregate("heaps", F.lit(0).cast("long"), lambda acc, x: acc + x)
        (spark.read.parquet(positions)
         .select("rule_set_id", "position_id", nim_sum.alias("nim_sum"))
         .withColumn("verdict", F.when(F.col("nim_sum") != 0, "W").otherwise("L"))
         .orderBy("rule_set_id", "position_id")
         .write.mode("overwrite").option("compression", "zstd")
         .option("parquet.compression.codec.zstd.level", str(ZSTD_LEVEL)).parquet(out))
        t1 = time.perf_counter()
    finally:
        spark.stop()
    print(f"job_s={t1 - t0:.6f}")


if __name__ == "__main__":
    main()
