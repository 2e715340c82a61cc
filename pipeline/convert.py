"""`convert`: classic S-Nim text -> rules.parquet + positions.parquet, the job's own input
tables (wide form, integer ids: test case i is rule set i, its positions numbered from 0)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from pipeline.classic import read_classic
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
        rules, positions = classic_frames(data)
        frames = {"rules.parquet": rules, "positions.parquet": positions}
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


def classic_frames(data: bytes | memoryview) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(rules, positions in wide form) of classic text: rule_set_id the 1-based test case
    number, kind "subtraction", moves as given; position_id 0-based within the test case.
    The list columns are the parser's flat arrays under their offsets (no Python list per
    row: 10M positions built that way took over 6 GiB)."""
    ci = read_classic(data)
    n = ci.n_cases
    counts = np.diff(ci.case_offsets)
    rules = pl.DataFrame({
        "rule_set_id": np.arange(1, n + 1, dtype=np.int64),
        "kind": pl.repeat("subtraction", n, dtype=pl.String, eager=True),
        "moves": pl.Series(_lists(ci.moves_offsets, ci.moves))})
    positions = pl.DataFrame({
        "rule_set_id": np.repeat(np.arange(1, n + 1, dtype=np.int64), counts),
        "position_id": (np.arange(ci.n_positions, dtype=np.int64)
                        - np.repeat(ci.case_offsets[:-1], counts)),
        "heaps": pl.Series(_lists(ci.offsets, ci.heaps))})
    return rules.cast(RULES_SCHEMA), positions.cast(POSITIONS_SCHEMA)


def _lists(offsets: np.ndarray, values: np.ndarray) -> pa.LargeListArray:
    return pa.LargeListArray.from_arrays(pa.array(offsets.astype(np.int64, copy=False)),
                                         pa.array(values.astype(np.int64, copy=False)))
