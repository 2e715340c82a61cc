"""`convert`: classic S-Nim text -> rules.parquet + positions.parquet, the job's own input
tables (wide form, integer ids: test case i is rule set i, its positions numbered from 0)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pipeline.classic import classic_to_tables
from pipeline.events import OnEvent, ignore, phase
from pipeline.io.outputs.kinds import TablesDirectory
from pipeline.io.outputs.publish import new_tag
from pipeline.io.outputs.publish_tables import write_marked_table

RULES_SCHEMA = {"rule_set_id": pl.Int64, "kind": pl.String, "moves": pl.List(pl.Int64)}
POSITIONS_SCHEMA = {"rule_set_id": pl.Int64, "position_id": pl.Int64,
                    "heaps": pl.List(pl.Int64)}


def convert_classic(data: bytes | memoryview, out: Path, overwrite: bool = False,
                    on_event: OnEvent = ignore) -> list[Path]:
    """Parse (and check) classic text, then write its two tables into `out`, both or neither
    (the `Output` kind `TablesDirectory`: an existing table is replaced only with
    `overwrite`, and only one that convert wrote). `on_event` hears the phases (parse,
    write) and COMMITTED once both are in place."""
    with phase(on_event, "parse"):
        rules, positions = classic_to_tables(data)
        frames = {"rules.parquet": pl.DataFrame(rules, schema=RULES_SCHEMA),
                  "positions.parquet": pl.DataFrame(positions, schema=POSITIONS_SCHEMA)}
    with phase(on_event, "write"):
        output = TablesDirectory(out, list(frames), overwrite, on_event)
        staging = output.stage(new_tag())
        try:
            for name, frame in frames.items():
                write_marked_table(frame, staging / name)
            output.commit({})
        except BaseException as error:
            output.roll_back(error)
            raise
    return [Path(output.table(name, {})) for name in frames]
