"""Execution engines: the same steps, under the same names, on polars or on Spark."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline.errors import UsageError


@dataclass
class EngineResult:
    """What an engine reports back to the orchestrator (written into the manifest)."""

    inputs: dict[str, list[dict[str, Any]]]
    counts: dict[str, dict[str, int]]
    form: str
    problems: list[str] = field(default_factory=list)


def load_engine(name: str) -> Any:
    """The engine module for `name`; Spark needs the optional extra."""
    if name == "polars":
        from pipeline.engines import polars_engine

        return polars_engine
    if name == "spark":
        try:
            from pipeline.engines import spark_engine
        except ImportError:
            raise UsageError("the Spark engine needs the spark extra: "
                             "pip install 'snim-batch[spark]'") from None
        return spark_engine
    raise UsageError(f"unknown engine {name!r} (expected polars or spark)")
