"""Execution engines: what an engine supplies to the one job skeleton (`pipeline.run`).

The skeleton reads the rules, builds the SG tables and writes the small tables and the
manifest; an engine evaluates the positions and writes the two large tables. `polars`
(default) streams batches on this machine; `spark` runs the same per-batch steps on a cluster.
"""

from __future__ import annotations

from pipeline.engines.base import Engine, Evaluation, PositionsJob, RejectsPastTolerance
from pipeline.errors import MissingExtra, UsageError, brief_repr

__all__ = ["Engine", "Evaluation", "PositionsJob", "RejectsPastTolerance", "load_engine"]


def load_engine(name: str) -> Engine:
    """The engine called `name`; Spark needs the optional extra."""
    if name == "polars":
        from pipeline.engines.polars_engine import PolarsEngine

        return PolarsEngine()
    if name == "spark":
        try:
            from pipeline.engines.spark_engine import SparkEngine
        except ImportError:
            raise MissingExtra("the Spark engine", "spark") from None
        return SparkEngine()
    raise UsageError(f"unknown engine {brief_repr(name)} (expected polars or spark)")
