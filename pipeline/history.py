"""`snim-batch history`: the runs committed to a Delta table root, as lines for a terminal."""

from __future__ import annotations

import polars as pl

from pipeline.errors import MissingExtra

_COLUMNS = ("run date", "run id", "version", "status", "verdicts", "W rate", "rejected",
            "verdicts version", "")


def history_lines(uri: str, storage_options: dict[str, str] | None = None) -> list[str]:
    """One header line, then one line per run, oldest first (see `delta_tables.run_history`)."""
    try:
        from pipeline.io.outputs.delta_tables import run_history, table_root
    except ImportError:
        raise MissingExtra("history (it reads Delta tables)", "delta") from None
    runs = run_history(table_root(uri, storage_options))
    return format_history(runs)


def format_history(runs: pl.DataFrame) -> list[str]:
    """Aligned columns; counts with thousands separators, the W rate as a percentage, and
    the run's state unless it is live: `replaced` on a run a later run of its night
    replaced, `partly replaced` when that run was stopped between its commits, `rolled back`
    on one whose row a failed run's restore took out, `incomplete` on a run stopped between
    its commits (no counts: it never committed them)."""
    def count(value: int | None) -> str:
        return "" if value is None else f"{value:,}"

    def version(value: int | None) -> str:
        return "" if value is None else str(value)

    cells = [[row["run_date"] or "", row["run_id"], version(row["version"]),
              row["status"] or "", count(row["verdicts"]),
              "" if row["w_rate"] is None else f"{row['w_rate']:.2%}",
              count(row["rejected"]), version(row["verdicts_version"]),
              "" if row["state"] == "live" else row["state"]]
             for row in runs.iter_rows(named=True)]
    widths = [max(len(c) for c in column) for column in zip(_COLUMNS, *cells, strict=True)]
    left = {0, 1, 3, 8}
    return [" ".join(c.ljust(w) if i in left else c.rjust(w)
                     for i, (c, w) in enumerate(zip(line, widths, strict=True))).rstrip()
            for line in [list(_COLUMNS), *cells]]
