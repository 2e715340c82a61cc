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


def manifest_counts(rules_read: int, rules_rejected: int, rows_read: int, rows_rejected: int,
                    verdicts: int, w: int) -> dict[str, dict[str, int]]:
    """The manifest's counts per table: rows read = accepted/evaluated + rejected."""
    return {
        "rules": {"rows_read": rules_read, "rows_accepted": rules_read - rules_rejected,
                  "rows_rejected": rules_rejected},
        "positions": {"rows_read": rows_read, "rows_evaluated": rows_read - rows_rejected,
                      "rows_rejected": rows_rejected, "verdicts": verdicts,
                      "W": w, "L": verdicts - w},
    }


def problem_text(row: dict[str, Any]) -> str:
    """One rejects row as a line for the terminal: file, row, column, reason."""
    column = f", column {row['column']}" if row["column"] else ""
    return f"{row['source']} row {row['row']}{column}: {row['reason']}"


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
