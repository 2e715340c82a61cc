"""Seeded synthetic datasets for benchmarks and tests (rules + positions, wide or long)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from pipeline.errors import OutputError, UsageError, shown

CHUNK = 1_000_000


@dataclass(frozen=True)
class Spec:
    positions: int
    rule_sets: int = 100
    max_heap: int = 10_000
    moves_per_set: int = 10
    max_move: int = 0
    heaps_per_position: int = 5
    form: str = "wide"
    format: str = "parquet"
    seed: int = 0

    def check(self) -> None:
        if self.form not in ("wide", "long"):
            raise UsageError(f"--form must be wide or long, got {shown(self.form)}")
        if self.format not in ("parquet", "csv"):
            raise UsageError(f"--format must be parquet or csv, got {shown(self.format)}")
        if min(self.rule_sets, self.moves_per_set, self.max_heap) < 1 or self.positions < 0:
            raise UsageError("--rule-sets, --moves-per-set and --max-heap must be >= 1")


def rules_frame(spec: Spec, rng: np.random.Generator) -> pl.DataFrame:
    """Rule sets of 1..moves_per_set distinct moves from 1..max_move (default max_heap)."""
    top = spec.max_move or spec.max_heap
    moves = []
    for _ in range(spec.rule_sets):
        k = int(rng.integers(1, min(spec.moves_per_set, top) + 1))
        moves.append(np.sort(rng.choice(top, size=k, replace=False) + 1).tolist())
    return pl.DataFrame({
        "rule_set_id": np.arange(1, spec.rule_sets + 1, dtype=np.int64),
        "kind": ["subtraction"] * spec.rule_sets,
        "moves": moves,
    }, schema={"rule_set_id": pl.Int64, "kind": pl.String, "moves": pl.List(pl.Int64)})


def positions_chunk(spec: Spec, rng: np.random.Generator, start: int, n: int) -> pl.DataFrame:
    k = spec.heaps_per_position
    ids = rng.integers(1, spec.rule_sets + 1, size=n, dtype=np.int64)
    heaps = rng.integers(0, spec.max_heap + 1, size=n * k, dtype=np.int64)
    pids = np.arange(start, start + n, dtype=np.int64)
    if spec.form == "long":
        return pl.DataFrame({"rule_set_id": np.repeat(ids, k), "position_id": np.repeat(pids, k),
                             "heap": heaps})
    offsets = np.arange(0, n * k + 1, k, dtype=np.int64)
    lists = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(heaps))
    return pl.DataFrame({"rule_set_id": ids, "position_id": pids,
                         "heaps": pl.Series(lists).cast(pl.List(pl.Int64))})


def _write(frame: pl.DataFrame, path: Path, fmt: str) -> None:
    if fmt == "parquet":
        frame.write_parquet(path)
        return
    text_cols = [pl.col(c).cast(pl.List(pl.String)).list.join(" ").alias(c)
                 for c, t in frame.schema.items() if isinstance(t, pl.List)]
    frame.with_columns(text_cols).write_csv(path)


def generate(out: Path, spec: Spec) -> list[Path]:
    """Write rules.<fmt> and positions/part-NNNNN.<fmt> under `out`; returns the files."""
    spec.check()
    rng = np.random.default_rng(spec.seed)
    try:
        (out / "positions").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{out}: cannot create directory ({exc.strerror})") from None
    written = [out / f"rules.{spec.format}"]
    _write(rules_frame(spec, rng), written[0], spec.format)
    for part, start in enumerate(range(0, spec.positions, CHUNK)):
        n = min(CHUNK, spec.positions - start)
        path = out / "positions" / f"part-{part:05d}.{spec.format}"
        _write(positions_chunk(spec, rng, start, n), path, spec.format)
        written.append(path)
    return written
