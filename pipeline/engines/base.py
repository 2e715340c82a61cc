"""What an engine supplies to the one job skeleton (`pipeline.run`) and what the skeleton gives
it: the `Engine` and `Evaluation` protocols and the `PositionsJob`. Imported by the skeleton
and by each engine; `pipeline.engines.load_engine` picks the engine."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import polars as pl

from pipeline.config import Config
from pipeline.events import OnEvent
from pipeline.io.read.files import Source
from pipeline.io.store.run_cache import RunCache
from pipeline.tables import TableCache


@dataclass(frozen=True)
class PositionsJob:
    """What an engine needs to evaluate the positions, prepared by the skeleton."""

    config: Config
    paths: list[Source]
    form: str  # "wide" or "long", shared by every file
    index: pl.DataFrame  # rule_set_id -> table (or the rule's problem), from normalize.rule_index
    cache: TableCache
    staging: Path  # the output's staging directory (scratch files may go below it)
    on_event: OnEvent
    """The run's caller's callback: positions read so far (`RunEvent.progress`), notes."""
    read_cache: RunCache | None = None
    """What the run keeps of its input files (footers, metadata, small objects), for the
    engine's readers; None: every read is made."""
    stop_past_rejects: int | None = None
    """Rejected position rows past which the run is over its tolerance whatever it reads on
    (--on-bad-rows fail with --max-rejected-rows, or with no tolerance: any row): an engine
    may stop reading there by raising `RejectsPastTolerance`. None: read on."""


class RejectsPastTolerance(Exception):
    """An engine stopped reading at `rows` rejected position rows (more than
    `PositionsJob.stop_past_rejects`); `found`: some of them (REJECT_SCHEMA), the first found.
    The skeleton turns it into the run's `BadRowsError`."""

    def __init__(self, rows: int, found: pl.DataFrame):
        super().__init__(f"{rows} rejected position rows")
        self.rows = rows
        self.found = found


class Evaluation(Protocol):
    """An engine's evaluated positions, held where the engine keeps them (memory, a cluster)."""

    rows_per_file: list[int]
    """The rows read of each positions file, in the order of `PositionsJob.paths`."""
    rows_read: int
    rows_rejected: int

    def counts(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Per rule set: (rule_set_id, W, L) of the verdicts, and (rule_set_id as text,
        rejected) of the rejected position rows that name one."""
        ...

    def first_rejects(self, rule_rejects: pl.DataFrame, n: int) -> pl.DataFrame:
        """The first `n` rows of rejects.parquet (rules' rejects first)."""
        ...

    def write(self, rule_rejects: pl.DataFrame, staging: Path) -> None:
        """verdicts.parquet and rejects.parquet (with the rules' rejects) into `staging`."""
        ...


class Engine(Protocol):
    name: str
    keeps_whole_objects: bool
    """Whether the run's cache (`RunCache`) keeps small objects of a store whole: not where
    the engine's own tasks read the rows, so that the driver fetches no object whole."""

    def open_inputs(self, config: Config) -> AbstractContextManager[None]:
        """What the engine needs to reach the run's positions, held from before they are
        looked for until the run's output is written (Spark: a session whose JVM reaches
        hdfs://)."""
        ...

    def evaluate(self, job: PositionsJob) -> AbstractContextManager[Evaluation]:
        """Evaluate every position; the evaluation lasts until the context exits (a Spark
        session, cached frames), which the skeleton leaves after the write."""
        ...
