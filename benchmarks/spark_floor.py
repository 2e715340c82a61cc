"""Spark's own floor for the job: what Spark costs to move the rows the engine moves.

    spark_floor.py POSITIONS_GLOB OUT_DIR MASTER [--conf=KEY=VALUE ...]

Reads the same three columns as `snim-batch run --engine spark` (rule_set_id, position_id,
heaps), stands in the sum of the heaps (`aggregate`, no Python) for the nim-sum, sorts by the
keys and writes the same four columns (rule_set_id, position_id, nim_sum, verdict) with the
engine's codec (zstd at the engine's level). No game logic, no validation, no rejects: the
engine's cost above this is its own.

The session gets the driver heap snim-batch's own default would give it (a quarter of the
machine), as `spark_plan.py` does. Prints "job_s=<seconds>" (after the session starts).
"""

import os
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipeline.engines.spark_session import default_driver_memory, total_memory
from pipeline.io.outputs.commit import ZSTD_LEVEL


def main() -> None:
    positions, out, master = sys.argv[1], sys.argv[2], sys.argv[3]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(master).appName("spark-floor")
               .config("spark.driver.memory", default_driver_memory(total_memory()))
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.log.level", "ERROR"))
    for setting in sys.argv[4:]:  # --conf=KEY=VALUE: the executor cores of a cluster run
        key, _, value = setting.removeprefix("--conf=").partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
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
