"""The Spark SQL plan a data engineer writes for the job instead of `snim-batch run --engine spark`.

    spark_plan.py RULES_PARQUET POSITIONS_GLOB OUT_DIR MAX_HEAP MASTER

1. a lookup frame (rule_set_id, heap, sg) for every rule set and heap 0..MAX_HEAP, its values
   from pipeline.grundy.build_table (as in polars_plan.py), made a Spark frame via Arrow;
2. positions: explode heaps -> join the lookup on (rule_set_id, heap) -> groupBy(rule_set_id,
   position_id) with bit_xor(sg) -> orderBy(rule_set_id, position_id) -> write Parquet.

The session gets the driver heap snim-batch's own default would give it (a quarter of the
machine), so that both sides of the comparison have the same memory.
Prints "tables_s=<seconds> plan_s=<seconds> job_s=<tables + plan>" (after the session starts).
"""

import os
import sys
import time

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipeline.engines.spark_session import default_driver_memory, total_memory
from pipeline.grundy import build_table, canonical_rule


def reference_session(app: str, master: str, settings: dict[str, str] | None = None
                      ) -> SparkSession:
    """The session of a reference program (this plan, `spark_floor.py`): the driver heap
    snim-batch's own default would give it, quiet, with `settings` on top."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.driver.memory", default_driver_memory(total_memory()))
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.log.level", "ERROR"))
    for key, value in (settings or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def main() -> None:
    rules_path, positions, out = sys.argv[1], sys.argv[2], sys.argv[3]
    max_heap, master = int(sys.argv[4]), sys.argv[5]
    spark = reference_session("spark-plan", master)
    try:
        t0 = time.perf_counter()
        rules = spark.read.parquet(rules_path).select("rule_set_id", "moves").toArrow()
        heaps = np.arange(max_heap + 1, dtype=np.int64)
        ids, values = [], []
        for rule_set_id, moves in zip(rules["rule_set_id"].to_pylist(),
                                      rules["moves"].to_pylist()):
            table = build_table(canonical_rule("subtraction", moves), need_len=max_heap + 1)
            ids.append(rule_set_id)
            values.append(table.sg(heaps))
        lookup = spark.createDataFrame(pa.table({
            "rule_set_id": np.repeat(np.asarray(ids, dtype=np.int64), max_heap + 1),
            "heap": np.tile(heaps, len(ids)),
            "sg": np.concatenate(values),
        }))
        t1 = time.perf_counter()
        (spark.read.parquet(positions)
         .select("rule_set_id", "position_id", F.explode("heaps").alias("heap"))
         .join(lookup, ["rule_set_id", "heap"], "left")
         .groupBy("rule_set_id", "position_id").agg(F.bit_xor("sg").alias("nim_sum"))
         .orderBy("rule_set_id", "position_id")
         .write.mode("overwrite").parquet(out))
        t2 = time.perf_counter()
    finally:
        spark.stop()
    print(f"tables_s={t1 - t0:.6f} plan_s={t2 - t1:.6f} job_s={t2 - t0:.6f}")


if __name__ == "__main__":
    main()
