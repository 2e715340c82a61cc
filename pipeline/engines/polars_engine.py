"""The default engine: positions streamed in batches through polars and the compiled kernels.

Wide-form Parquet input is read one batch at a time, so memory holds one batch of heaps plus
the narrow verdict columns; SG tables grow as batches reveal larger heaps. A position's
long-form rows may be anywhere in the input, so long form is collected whole when it is small;
a large input whose rows come in key order (sorted by rule set then position, or by position
then rule set, as exports often are) is grouped batch by batch as it streams; any other is
first split by a hash of the key into scratch files of about LONG_PARTITION_ROWS rows each,
which are then collected one at a time. The verdicts of either form are held narrow until an
eighth of the memory setting, then sorted into runs in scratch and merged (`_SortedRuns`);
wide Parquet input whose verdicts are all expected within a quarter of it is sorted whole.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, closing, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from pipeline import kernels, keys
from pipeline.batches import coalesced, position_batches, read_ahead
from pipeline.config import Config
from pipeline.engines.base import PositionsJob
from pipeline.engines.polars_rejects import FOUND_KEPT, CountedRejects, HeldRejects
from pipeline.engines.rejected_keys import SortedRejectedKeys
from pipeline.events import OnEvent, RunEvent
from pipeline.grundy import TableSet
from pipeline.io.outputs.commit import as_values, sink_parquet, write_parquet
from pipeline.io.outputs.failures import writing
from pipeline.io.outputs.scratch import Spill, allow_open_files, spill
from pipeline.io.read.formats import format_of
from pipeline.io.read.readers import row_estimate
from pipeline.io.store.run_cache import RunCache
from pipeline.tables import TableCache
from pipeline.transforms import buffers, evaluate, long_form, ordering, outputs, schema

# rows per scratch part: smaller parts peak lower, in the same time, than 2^22 rows (the
# figures are in docs/performance.md)
LONG_PARTITION_ROWS = 1 << 21
log = logging.getLogger(__name__)


class PolarsEngine:
    """Positions evaluated in this process, batch by batch (see the module docstring)."""

    name = "polars"
    keeps_whole_objects = True

    def open_inputs(self, config: Config) -> AbstractContextManager[None]:
        return nullcontext()  # every input it reads is a path or an object store's URL

    @contextmanager
    def evaluate(self, job: PositionsJob) -> Iterator[PolarsEvaluation]:
        # the sorted runs' scratch lasts until the merged verdicts are written, and goes on
        # every way out (the staging directory that holds it too)
        with ExitStack() as scratch:
            merged = None

            @functools.cache  # one directory and thread for every `_SortedRuns` of the run
            def open_scratch() -> tuple[Spill, ThreadPoolExecutor]:
                # the thread is joined before the directory is removed
                # uncompressed: the runs' zstd halved their scratch but cost the merge more
                # CPU than it saved (docs/performance.md)
                return (scratch.enter_context(spill(job.staging, "uncompressed",
                                                    ".verdict-runs")),
                        scratch.enter_context(ThreadPoolExecutor(2, "verdicts-spill")))

            def new_runs(typed_by_rows: bool, expected_rows: int | None = None
                         ) -> _SortedRuns:
                return _SortedRuns(_rule_ids(job.index), memory_limit(job.config),
                                   open_scratch, typed_by_rows, expected_rows)

            spills = itertools.count()

            def new_rejects() -> HeldRejects:
                # lz4: reasons repeat their words, and zstd took twice the CPU; each
                # evaluation's in its own directory
                return HeldRejects(
                    max(memory_limit(job.config) // HELD_SHARE, 1),
                    lambda: scratch.enter_context(spill(job.staging, "lz4",
                                                        f".reject-runs-{next(spills)}")),
                    lambda frame: schema.with_input_column_names(frame, job.config.columns,
                                                                 job.form),
                    job.stop_past_rejects)

            if job.form == "wide":
                total = _wide_rows(job.paths, job.read_cache)
                verdicts, rejects, rows = _evaluate_wide(job.paths, job.config, job.index,
                                                         job.cache, job.on_event, total,
                                                         job.read_cache, new_runs(True, total),
                                                         new_rejects())
            else:
                verdicts, rejects, rows = _evaluate_long(job.paths, job.config, job.index,
                                                         job.cache, job.staging, job.on_event,
                                                         job.read_cache, new_runs, new_rejects)
            if isinstance(verdicts, MergedVerdicts):
                verdicts, merged = verdicts.empty, verdicts
            if rejects.spilled:
                log.info("rejects: %s rows, %s of them spilled to scratch", f"{rejects.rows:,}",
                         f"{rejects.spilled_rows:,}")
            yield PolarsEvaluation(verdicts, pl.DataFrame(schema=schema.REJECT_SCHEMA)
                                   if rejects.spilled else rejects.frame(), rows.tolist(),
                                   rejects.rows, merged=merged, rule_ids=_rule_ids(job.index),
                                   spilled_rejects=rejects if rejects.spilled else None)


@dataclass
class PolarsEvaluation:
    """Verdicts in key order (narrow columns, see `ordering`) and the positions' rejects."""

    verdicts: pl.DataFrame
    rejects: pl.DataFrame
    rows_per_file: list[int]
    rows_rejected: int
    _all_rejects: pl.DataFrame | None = field(default=None, repr=False)
    merged: MergedVerdicts | None = None
    """Verdicts merged from sorted runs into a scratch file (then `verdicts` is empty)."""
    spilled_rejects: HeldRejects | None = None
    """The positions' rejects when they passed their share of memory (then `rejects` is
    empty): written from scratch in the table's order."""
    rule_ids: pl.Series | None = None
    """The run's rule ids in key order (`keys.sorted_ids`), for the summary's counts."""

    @property
    def rows_read(self) -> int:
        return sum(self.rows_per_file)

    def counts(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        counts, rejected = outputs.summary_counts(self.verdicts, self.rejects, self.rule_ids)
        if self.spilled_rejects is not None:
            rejected = self.spilled_rejects.rejected_by_rule()
        return (counts if self.merged is None else self.merged.counts), rejected

    def _with_rules(self, rule_rejects: pl.DataFrame) -> pl.DataFrame:
        if self._all_rejects is None:
            self._all_rejects = outputs.sort_rejects(pl.concat([rule_rejects, self.rejects]))
        return self._all_rejects

    def first_rejects(self, rule_rejects: pl.DataFrame, n: int) -> pl.DataFrame:
        if self.spilled_rejects is not None:
            return self.spilled_rejects.first(rule_rejects, n)
        return self._with_rules(rule_rejects).head(n)

    def write(self, rule_rejects: pl.DataFrame, staging: Path) -> None:
        if self.merged is None:
            verdicts = outputs.rule_ids_as_codes(self.verdicts, self.rule_ids)
            sink_parquet(evaluate.with_verdict(verdicts.lazy(), dictionary=True),
                         staging / "verdicts.parquet")
        else:
            with writing("verdicts.parquet"):  # a rename within the staging directory
                os.replace(self.merged.path, staging / "verdicts.parquet")
        if self.spilled_rejects is None:
            write_parquet(self._with_rules(rule_rejects), staging / "rejects.parquet")
            return
        sorted_rejects = self.spilled_rejects.sorted_file(rule_rejects)
        with writing("rejects.parquet"):  # a rename within the staging directory
            os.replace(sorted_rejects, staging / "rejects.parquet")


def _wide_rows(paths: list[Path], read_cache: RunCache | None) -> int | None:
    """The positions of wide input, exact from Parquet footers; None if any file is CSV,
    whose rows are known once it is read."""
    if all(format_of(p, cache=read_cache) == "parquet" for p in paths):
        return row_estimate(paths, cache=read_cache)
    return None


def _evaluate_wide(paths: list[Path], config: Config, index: pl.DataFrame, cache: TableCache,
                   on_event: OnEvent, total: int | None, read_cache: RunCache | None,
                   runs: _SortedRuns, rejects: HeldRejects
                   ) -> tuple[pl.DataFrame | MergedVerdicts, HeldRejects, np.ndarray]:
    """The wide input's verdicts, rejects and rows per file; `total`: its rows if known."""
    rows_read = 0
    rows = _RowsPerFile(len(paths))
    keep = _verdict_columns(config)
    rule_ids = runs.rule_ids
    batches = position_batches(paths, config, "wide", read_together=True, cache=read_cache)
    # closed on the way out, an error included: a traceback holding the generators would
    # otherwise keep the reading thread at work and its files open
    with closing(read_ahead(_typed_and_attached(coalesced(batches), index))) as read:
        for file_index, same_type, frame in read:
            rejects.stop_if_past()  # a fail run past its tolerance reads no further
            rows_read += frame.height
            rows.add(file_index, frame)
            chunks = buffers.heap_buffers(frame)
            evaluated = _evaluated(frame, cache, config.winning_moves, chunks)
            part_of_batch = evaluated["_reason"].null_count() < evaluated.height
            if part_of_batch:
                rejects.add(outputs.reject_rows(evaluated, "positions"), evaluated.height)
                part_of_batch = evaluated["_reason"].null_count() * 2 < evaluated.height
                evaluated = evaluated.filter(pl.col("_reason").is_null())
            # ids made text only to meet the rules' are sorted, and typed, as the general path does
            part = ordering.verdict_part(evaluated, file_index, rule_ids if same_type else None,
                                         keep)
            # a few rows' text ids would keep the whole batch's alive (`ordering.with_own_text`)
            runs.add(ordering.with_own_text(part) if part_of_batch else part)
            del frame, evaluated, chunks
            on_event(RunEvent.progress("positions", rows_read, total, (
                f"positions: {rows_read:,} of {total:,} rows ({100 * rows_read // max(total, 1)}%)"
                if total else
                f"positions: {rows_read:,} rows read (file {file_index + 1} of {len(paths)})")))
    cache.report_meanwhile()
    verdicts = runs.finish(rejects.keys_for_duplicates(), [str(p) for p in paths], on_event,
                           rejects.add_duplicates)
    return verdicts, rejects, rows.counts


def memory_limit(config: Config) -> int:
    """The run's memory setting in bytes: the config's, else a quarter of the memory
    available now (cgroup limit or MemAvailable), at most DEFAULT_MEMORY_CAP and at least
    MIN_MEMORY."""
    if config.memory_limit != "auto":
        return config.memory_limit
    return max(MIN_MEMORY, min(DEFAULT_MEMORY_CAP, _available_memory() // 4))


DEFAULT_MEMORY_CAP = 3 << 30
MIN_MEMORY = 512 << 20
HELD_SHARE = 8
"""The verdicts held in memory before they are spilled as a sorted run: a 1/HELD_SHARE of
the memory setting (sorting them takes several times as much while the next batches are
evaluated; smaller runs also took less time at 100M positions: benchmarks/results)."""
WHOLE_SHARE = 4
"""All verdicts held, and sorted once at the end, when the input's rows are known and their
verdicts are expected to take at most a 1/WHOLE_SHARE of the memory setting: one sort of
them all with no scratch took less time than a run spilled and merged back."""
RUN_SLICE = 1 << 16  # rows per record batch of a run file: what the merge reads at a time
MERGE_MIN_READ = 1 << 13
"""Rows the merge reads of a run at least (of RUN_SLICE, a record batch, cut without a copy)
where the memory setting shared among many runs allows fewer: a round of the merge takes
about a read of every run, so reads of whole record batches made its memory grow with the
number of runs, input / (setting / HELD_SHARE)."""
SEGMENT_SLICES = 8  # record batches per file of a run: written two at a time, read mapped
MERGE_ENCODERS = 2  # threads encoding merged slices into Parquet at once: one alone was the
# merge's bound (docs/performance.md); two share the cores with the merging thread


def _available_memory() -> int:
    """Bytes this process may use: MemAvailable, or the container's (cgroup's) memory limit
    where that is smaller (the limit, not what is left under it: the cgroup's usage counts
    the page cache, which the kernel gives back); 8 GiB when neither can be read."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError):
        pass
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit).read_text().strip()
            if text != "max" and int(text) < 1 << 60:
                found.append(int(text))
        except (OSError, ValueError):
            continue
    return min(found) if found else 8 << 30


@dataclass
class MergedVerdicts:
    """Verdicts merged from sorted runs: written to `path` (in the scratch directory, moved
    into the staging directory by `PolarsEvaluation.write`), with their counts per rule set
    (`outputs.summary_counts`) and an empty frame of their columns."""

    path: Path
    counts: pl.DataFrame
    empty: pl.DataFrame


class _SortedRuns:
    """The wide path's verdict parts, held until they pass a 1/HELD_SHARE of the memory setting
    (`limit`; None: never), then sorted into a run in scratch (`open_scratch`, called once, at
    the first run), unless all `expected_rows` are expected to fit (WHOLE_SHARE); at the end
    (`finish`) the runs and the parts still held are merged into key order a slice at a time,
    with duplicate keys found in every slice, as one sort of all verdicts does
    (`ordering.key_sorted_verdicts`, which runs without runs). Position ids of two types go
    into text runs (`_ids_as_text`); parts that cannot go into runs (`ordering.spillable`:
    not narrow, ids of another type) stay in memory; when a run's position ids turn
    out not to keep their type over all rows (text ids that are all integers), the runs are read
    back and sorted in memory. `typed_by_rows` False: the parts' key types are decided already
    (long form), as in `ordering.key_sorted_verdicts`."""

    def __init__(self, rule_ids: pl.Series, limit: int | None,
                 open_scratch: Callable[[], tuple[Spill, ThreadPoolExecutor]],
                 typed_by_rows: bool = True, expected_rows: int | None = None):
        self.rule_ids = rule_ids
        self.typed_by_rows = typed_by_rows
        self.limit = limit
        self.budget = None if limit is None else max(limit // HELD_SHARE, 1)
        self.whole = None if limit is None or expected_rows is None else limit // WHOLE_SHARE
        self.expected_rows = expected_rows
        self.held_rows = 0
        self.open_scratch = open_scratch
        self.scratch: Spill | None = None
        self.pool: ThreadPoolExecutor | None = None
        self.spilling: Future[int] | None = None
        self.parts: list[ordering.VerdictPart] = []
        self.held = 0
        self.runs = 0
        self.run_rows = self.run_bytes = 0
        self.pid_type: pl.DataType | None = None
        self.keys = ordering.RunKeys.over(rule_ids)
        self.stuck = False
        self.formats: dict[int, _RunFormat] = {}
        self.segments: dict[int, list[int]] = {}
        self.extra_parts = itertools.count(1)

    def add(self, part: ordering.VerdictPart) -> None:
        if (self.pid_type == pl.String and part.frame["position_id"].dtype == pl.Int64
                and "_bucket" in part.frame.columns):  # into the text runs: as text
            part.frame = part.frame.with_columns(pl.col("position_id").cast(pl.String))
        self.parts.append(part)
        self.held += _part_bytes(part)
        self.held_rows += part.frame.height
        if (self.budget is not None and self.held > self.budget and not self.stuck
                and not self._all_fit()):
            self._spill()

    def _all_fit(self) -> bool:
        """Whether every verdict of the input, at the bytes a row of those held so far, is
        expected within `whole` (before any run is spilled; a guess that turns out wrong
        spills a larger first run)."""
        if self.whole is None or self.runs or self.held > self.whole:
            return False
        return self.held * self.expected_rows <= self.whole * max(self.held_rows, 1)

    def _spill(self) -> None:
        """Hand the parts held to the spilling thread (`verdicts-spill`) as the next run,
        once it is done with the one before: the run is sorted and written while this thread
        evaluates the next batches (10M shuffled text ids took 5 s a run, the reading
        stalled meanwhile)."""
        if self._ids_as_text():
            self.held = sum(map(_part_bytes, self.parts))  # the ids as text, as written
        if not ordering.spillable(self.parts, self.pid_type):
            log.info("verdicts: keys the sorted runs cannot take stay in memory")
            self.stuck = True
            return
        self.pid_type = self.parts[0].frame["position_id"].dtype
        for part in self.parts:
            self.keys.add(part.frame)
        self._wait()
        if self.scratch is None:
            self.scratch, self.pool = self.open_scratch()
        self.run_bytes += self.held
        self.spilling = self.pool.submit(self._write_run, self.parts, self.runs,
                                         self._slice_rows(self.held_rows, self.held))
        self.parts, self.held, self.held_rows = [], 0, 0
        self.runs += 1

    def _ids_as_text(self) -> bool:
        """Integer position ids held beside text ones as the text `keys.unify_key_types`
        makes of them over all rows (ids of two types are text unless every one is an
        integer, which `RunKeys.hold` finds at the end: the runs are then read back), so that
        they go into text runs instead of staying in memory; runs of integer ids spilled
        before the first text id are sorted again as text (`_runs_as_text`). Whether any
        part held was cast."""
        types = {p.frame["position_id"].dtype for p in self.parts}
        if self.pid_type is not None:
            types.add(self.pid_type)
        if types != {pl.Int64, pl.String} or not all(
                "_bucket" in p.frame.columns for p in self.parts):
            return False
        if self.pid_type == pl.Int64:
            self._runs_as_text()
        for part in self.parts:
            if part.frame["position_id"].dtype == pl.Int64:
                part.frame = part.frame.with_columns(pl.col("position_id").cast(pl.String))
        return True

    def _runs_as_text(self) -> None:
        """The runs spilled so far, of integer ids, read back and sorted again as text runs,
        one at a time (each about the share of the setting it was spilled at)."""
        self._wait()
        self.run_bytes = 0  # of the runs as they are now: the merge's reads are sized by it
        for run in range(self.runs):
            part = _run_part(pl.from_arrow(pa.concat_tables(self._stream(run))))
            part.frame = part.frame.with_columns(pl.col("position_id").cast(pl.String))
            self.run_bytes += _part_bytes(part)
            self._write_run([part], run, self._slice_rows(part.frame.height,
                                                          _part_bytes(part)), again=True)
        self.pid_type = pl.String

    def _slice_rows(self, rows: int, size: int) -> int:
        """Rows per record batch of a run of `rows` rows and `size` bytes: RUN_SLICE, or
        fewer (down to MERGE_MIN_READ) where the input's rows are known and make so many
        runs that a batch of each, which the merge holds as it reads them, would pass a
        quarter of the setting (300 small files a run each held 2 GiB at 4MiB)."""
        if self.expected_rows is None or self.limit is None or not rows:
            return RUN_SLICE
        runs = -(-self.expected_rows // rows)
        fit = self.limit // WHOLE_SHARE // max(runs * size // rows, 1)
        return min(RUN_SLICE, max(MERGE_MIN_READ, fit))

    def _write_run(self, parts: list[ordering.VerdictPart], run: int, slice_rows: int,
                   again: bool = False) -> int:
        """Sort and write run `run`: its tables of `slice_rows` rows (`_slice_rows`) in
        segments of SEGMENT_SLICES, a file each,
        written in turn by this thread and the pool's other one (the copy into the page
        cache was most of a run's time, and the main thread waited on it). The merge reads
        them mapped, a file's pages resident until it is merged past, or copied where the
        runs are many (`_merged`)."""
        rows = 0
        form = self.formats[run] = _RunFormat.for_parts(parts, self.rule_ids.len())
        segments = self.segments[run] = []
        other: Future[None] | None = None
        held: list[pa.Table] = []

        def written(tables: list[pa.Table], part: int) -> None:
            for table in tables:
                self.scratch.write(part, table)

        tables = ordering.sorted_run(parts, self.rule_ids.len(), slice_rows, form.shift)
        for end, table in _with_end(tables):
            held.append(form.packed(table))
            rows += table.num_rows
            if len(held) < SEGMENT_SLICES and not end:
                continue
            # the first segment is part `run`; the others negative numbers, one each
            segments.append(self._new_part() if segments else run)
            if len(segments) % 2:
                written(held, segments[-1])
            else:
                if other is not None:
                    other.result()
                other = self.pool.submit(written, held, segments[-1])
            held = []
        if other is not None:
            other.result()
        self.scratch.close()
        log.info("verdicts: run %d of %s rows %s%s", run + 1, f"{rows:,}",
                 "sorted again as text" if again else "spilled",
                 f", in record batches of {slice_rows:,}" if slice_rows < RUN_SLICE else "")
        _release_memory()
        return rows

    def _new_part(self) -> int:
        """A scratch part of no run's number: a run's later segments, rejected key runs."""
        return -next(self.extra_parts)

    def _wait(self) -> None:
        """Wait for the run being spilled (its error raised here)."""
        if self.spilling is not None:
            self.run_rows += self.spilling.result()
            self.spilling = None

    def discard(self) -> None:
        """Remove the runs spilled so far from scratch: the caller evaluates the input again
        another way, into new runs."""
        self._wait()
        for run in range(self.runs):
            for part in self.segments.pop(run):
                self.scratch.drop(part)
        self.parts, self.runs, self.held, self.held_rows = [], 0, 0, 0

    def finish(self, rejected: pl.DataFrame | Iterator[pl.DataFrame], sources: list[str],
               on_event: OnEvent, add_duplicates: Callable[[pl.DataFrame], None]
               ) -> pl.DataFrame | MergedVerdicts:
        """The verdicts in key order, in memory or merged into a file; the rejects of keys
        given more than once go to `add_duplicates` (a merged slice's at a time).
        `rejected`: the rejected rows' keys, or chunks of them (`ordering.split_duplicates`;
        the merge sorts them into its key order, `SortedRejectedKeys`)."""
        if not self.runs:
            verdicts, duplicates = ordering.key_sorted_verdicts(
                self.parts, self.rule_ids, rejected, sources, self.typed_by_rows)
            add_duplicates(duplicates)
            return verdicts
        self._wait()
        last = None
        self._ids_as_text()
        if self.parts and ordering.spillable(self.parts, self.pid_type):
            for part in self.parts:
                self.keys.add(part.frame)
            last = ordering.sorted_run(self.parts, self.rule_ids.len(), RUN_SLICE)
        if self.parts or (self.typed_by_rows
                          and not self.keys.hold(self.rule_ids, self.pid_type)):
            verdicts, duplicates = self._in_memory(last, rejected, sources)
            add_duplicates(duplicates)
            return verdicts
        assert self.scratch is not None and self.budget is not None  # runs were spilled
        # in tables of MERGE_MIN_READ rows: the merge holds one of each of their runs
        named = SortedRejectedKeys.sort(
            [rejected] if isinstance(rejected, pl.DataFrame) else rejected, self.rule_ids,
            self.pid_type, self.budget, MERGE_MIN_READ, self.scratch, self._new_part)
        return self._merged(last, named, sources, on_event, add_duplicates)

    def _in_memory(self, last: Iterator[pa.Table] | None,
                   rejected: pl.DataFrame | Iterator[pl.DataFrame],
                   sources: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
        log.info("verdicts: %d runs read back to be sorted in memory", self.runs)
        runs = [pl.from_arrow(pa.concat_tables(self._stream(i))) for i in range(self.runs)]
        if last is not None:
            runs.append(pl.from_arrow(pa.concat_tables(last)))
        parts = [_run_part(r) for r in runs]
        return ordering.key_sorted_verdicts(parts + self.parts, self.rule_ids, rejected,
                                            sources, self.typed_by_rows)

    def _stream(self, run: int, mapped: bool = True) -> Iterator[pa.Table]:
        """Run `run`'s tables back from scratch as `ordering.sorted_run` made them (`mapped`:
        views of the page cache, see `Spill.stream`)."""
        form = self.formats[run]
        return (form.unpacked(table) for part in self.segments[run]
                for table in self.scratch.stream(part, mapped=mapped))

    def _merged(self, last: Iterator[pa.Table] | None, rejected: SortedRejectedKeys,
                sources: list[str], on_event: OnEvent,
                add_duplicates: Callable[[pl.DataFrame], None]) -> MergedVerdicts:
        k = self.runs + (last is not None)
        row_bytes = max(self.run_bytes // max(self.run_rows, 1), 1)
        # a run file's pages read so far stay resident while it is read mapped: up to a file
        # of every run at once, past the setting when the runs are many (copies instead)
        assert self.limit is not None and self.budget is not None  # runs were spilled
        file_rows = min(self.run_rows // max(self.runs, 1), SEGMENT_SLICES * RUN_SLICE)
        mapped = k * file_rows * row_bytes <= self.limit
        allow_open_files(k + len(rejected.runs))
        streams = [_RunReader(self._stream(i, mapped)) for i in range(self.runs)]
        if last is not None:
            streams.append(_RunReader(last))
        block = max(min(RUN_SLICE, MERGE_MIN_READ),
                    min(1 << 20, self.budget // row_bytes // (2 * k)))
        log.info("verdicts: merging %d sorted runs, %s rows of each a read, %s", k,
                 f"{block:,}", "mapped" if mapped else "copied")
        buffers: list[pa.Table | None] = [None] * k
        live = [True] * k
        need = set(range(k))
        wins = np.zeros(self.rule_ids.len(), np.int64)
        losses = wins.copy()
        merged_rows, first = 0, None
        total = self.run_rows + (self.held_rows if last is not None else 0)
        reuse = ordering.SliceBuffers(MERGE_ENCODERS + 1)
        with self.scratch.parquet("verdicts.parquet", "verdicts.parquet",
                                 MERGE_ENCODERS) as write:
            while True:
                # the runs that ended the last round at its cut-off, and any other run
                # down to half a read: rounds of about k reads each, not of whatever the
                # other runs had left
                for i in need | {i for i, b in enumerate(buffers)
                                 if live[i] and (b is None or b.num_rows < block // 2)}:
                    buffers[i], live[i] = streams[i].read_more(buffers[i], block)
                takes, buffers, need = ordering.merge_round(buffers, live)
                if any(t.num_rows for t in takes) or (not any(live) and first is None):
                    merged = ordering.merged_slice(takes, self.rule_ids,
                                                   rejected.naming(takes), sources, reuse)
                    first = merged.verdicts.schema if first is None else first
                    write(merged.verdicts)
                    wins += merged.wins
                    losses += merged.losses
                    add_duplicates(merged.duplicates)
                    merged_rows += sum(t.num_rows for t in takes)
                    on_event(RunEvent.progress(
                        "positions", merged_rows, total,
                        f"positions: {merged_rows:,} of {total:,} rows merged from {k} sorted "
                        "runs", unit="rows merged"))
                    _release_memory()
                if not any(live):
                    break
        used = np.flatnonzero(wins + losses)
        counts = pl.DataFrame({"rule_set_id": self.rule_ids.gather(used), "W": wins[used],
                               "L": losses[used]})
        empty = pl.from_arrow(pa.Table.from_batches([], as_values(first)))  # not
        # empty_table(): it imports pandas
        return MergedVerdicts(self.scratch.path("verdicts.parquet"), counts, empty)


class _RunFormat:
    """How a sorted run's tables are written to scratch, in fewer bytes than
    `ordering.sorted_run` makes them (its rows are written once and read once, and every byte
    of scratch is a byte through the page cache): no `_bucket` column (the run is sorted by
    it: the rows per bucket, counted as written, give it back in order), text position ids
    with 32-bit offsets (a table's are small), and `_loc` in 32 bits where the run's files and
    rows fit (`file << shift | row`, made so by `sorted_run`). 53 bytes a row of
    32-character ids become 41."""

    def __init__(self, n_buckets: int, shift: int | None):
        self.counts = np.zeros(n_buckets, np.int64)
        self.shift = shift
        self.ends: np.ndarray | None = None
        self.read = 0

    @classmethod
    def for_parts(cls, parts: list[ordering.VerdictPart], n_buckets: int) -> _RunFormat:
        files = rows = 0
        for p in parts:
            files = max(files, p.file, int(p.files.max()) if p.files is not None
                        and p.files.shape[0] else 0)
            rows = max(rows, int(p.rows.max()) if p.rows is not None and p.rows.shape[0]
                       else p.first_row + p.frame.height)
        shift = int(rows).bit_length()
        return cls(n_buckets, shift if (files + 1) << shift <= 1 << 32 else None)

    def packed(self, table: pa.Table) -> pa.Table:
        bucket = ordering._numpy(table["_bucket"])
        self.counts += np.bincount(bucket, minlength=self.counts.shape[0])
        table = table.drop_columns(["_bucket"])
        at = table.schema.get_field_index("position_id")
        if pa.types.is_large_string(table.schema.field(at).type):
            table = table.set_column(at, "position_id", table["position_id"].cast(pa.string()))
        return table  # `_loc` came packed (`sorted_run`'s loc_shift)

    def unpacked(self, table: pa.Table) -> pa.Table:
        """A table `packed` gave, back as it was (text ids stay 32-bit: the merge takes
        either); tables must come back in the order they were packed."""
        if self.ends is None:
            self.ends = np.cumsum(self.counts)
        bucket = ordering.bucket_rows(self.ends, self.read, self.read + table.num_rows)
        self.read += table.num_rows
        table = table.add_column(0, "_bucket", buffers.arrow_view(bucket))
        if self.shift is not None:
            loc = ordering._numpy(table["_loc"]).astype(np.int64)
            loc = ((loc >> self.shift) << ordering.LOC_SHIFT) | (loc & ((1 << self.shift) - 1))
            table = table.set_column(table.schema.get_field_index("_loc"), "_loc",
                                     buffers.arrow_view(loc))
        return table


def _with_end(items: Iterator[pa.Table]) -> Iterator[tuple[bool, pa.Table]]:
    """(whether it is the last, item) for each item."""
    items = iter(items)
    held = next(items, None)
    while held is not None:
        after = next(items, None)
        yield after is None, held
        held = after


def _release_memory() -> None:
    """Give memory freed since back to the system: glibc keeps what numpy's arrays freed in
    its heap, and Arrow's pool its own pages, where the next sizes may not fit. Each round
    of a merge allocates arrays of other sizes, and without this the merge of 10M spilled
    positions grew from 0.85 to 1.22 GiB (0.77 to 0.94 with it)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
    pa.default_memory_pool().release_unused()


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_LIBC = _glibc()


class _RunReader:
    """A sorted run's tables as the merge reads them: `read_more` cuts the table where a
    read ends (a slice: no copy of the mapped file's rows) and keeps its rest for the next."""

    def __init__(self, stream: Iterator[pa.Table]):
        self.stream = stream
        self.rest: pa.Table | None = None

    def read_more(self, buffer: pa.Table | None, rows: int) -> tuple[pa.Table, bool]:
        """`buffer` with `rows` more rows of the run (fewer at its end), as the record batches
        read (chunks: the merge takes them as they are, without a copy that joins them), and
        whether the run has rows left."""
        more = [] if buffer is None else [buffer]
        got = 0
        while got < rows:
            table, self.rest = (self.rest, None) if self.rest is not None else (
                next(self.stream, None), None)
            if table is None:
                return pa.concat_tables(more), False
            if got + table.num_rows > rows:
                table, self.rest = table.slice(0, rows - got), table.slice(rows - got)
            more.append(table)
            got += table.num_rows
        return pa.concat_tables(more), True


def _run_part(run: pl.DataFrame) -> ordering.VerdictPart:
    """A sorted run's rows as a part again, its locations from `_loc`."""
    loc = run.drop_in_place("_loc").to_numpy()
    return ordering.VerdictPart(run, 0, 0, loc & ((1 << ordering.LOC_SHIFT) - 1),
                                loc >> ordering.LOC_SHIFT)


def _part_bytes(part: ordering.VerdictPart) -> int:
    """The memory a part holds: its frame's (polars leaves out a text column's 16-byte views)
    and row maps."""
    views = sum(16 * part.frame.height for dtype in part.frame.dtypes if dtype == pl.String)
    return part.frame.estimated_size() + views + sum(
        a.nbytes for a in (part.rows, part.files) if a is not None)


class _RowsPerFile:
    """The rows the engine met of each input file, for the run to reconcile with the rows
    each file holds: a batch's rows are its file's, or (batches joined across files) each
    row's `_file`'s."""

    def __init__(self, files: int) -> None:
        self.counts = np.zeros(files, dtype=np.int64)

    def add(self, file_index: int, frame: pl.DataFrame) -> None:
        if "_file" in frame.columns:
            self.counts += np.bincount(frame["_file"].to_numpy(), minlength=self.counts.size)
        else:
            self.counts[file_index] += frame.height

    def counted(self, file_index: int, frame: pl.DataFrame) -> pl.DataFrame:
        """`add`, then the frame without `_file` (its rows name their file in `_source`)."""
        self.add(file_index, frame)
        return frame.drop("_file", strict=False)


def _typed_and_attached(batches: Iterator[tuple[int, pl.DataFrame]], index: pl.DataFrame
                        ) -> Iterator[tuple[int, bool, pl.DataFrame]]:
    """(file index, whether the batch's rule ids had the rules' type, the batch with its
    keys typed and each row's table attached). Done by the read-ahead thread, after it
    normalised the batch: the thread that evaluates the batches is the busier one since
    Parquet slices are decoded by threads of their own and CSV is parsed by one (text rule
    ids, ranked through an Enum, most of all; docs/performance.md)."""
    ranked = evaluate.RankedIndex.of(index)
    for file_index, frame in batches:
        frame = keys.integer_keys(frame)
        same_type = frame["rule_set_id"].dtype == index["rule_set_id"].dtype
        frame, batch_index = keys.match_key_type(frame, index)
        yield file_index, same_type, evaluate.attach_tables(
            frame, batch_index, ranked if batch_index is index else None)


def _evaluated(positions: pl.DataFrame, cache: TableCache, winning_moves: bool,
               chunks: buffers.HeapChunks | None = None) -> pl.DataFrame:
    """`evaluate.evaluate` with tables that cover the heaps. Once every table exists, they
    grow for the rows found beyond them (`grow`) instead of after a pass over every heap
    for its table's largest: a pass that, on input whose tables no statistics presized (CSV),
    cost a third of the lookups themselves, to find that nothing needs to grow. The first
    batch still takes the pass: its tables are built from nothing, as the budget plans
    them; building them empty first and then growing them grants the run-wide room
    otherwise (`test_total_table_budget_rejects_instead_of_exhausting_memory`). Tables
    presized to cover the heaps that the footers' statistics bound grow too, should a heap
    lie beyond them after all (a writer's statistics that understate the values)."""
    if not cache.covers_input() and not cache.all_built():
        return evaluate.evaluate(positions, _tables_for(positions, cache, chunks),
                                 winning_moves, chunks)
    return evaluate.evaluate(positions, cache.table_set(), winning_moves, chunks,
                             grow=cache.ensure)


def _tables_for(positions: pl.DataFrame, cache: TableCache,
                chunks: buffers.HeapChunks | None = None) -> TableSet:
    """Tables covering these positions' heaps (`TableCache.grown_for`)."""
    return cache.grown_for(lambda: [evaluate.largest_heaps(positions, len(cache.distinct),
                                                           chunks)])


def _verdict_columns(config: Config) -> list[str]:
    return ["rule_set_id", "position_id", "nim_sum"] + (
        list(ordering.MOVE_COLUMNS) if config.winning_moves else [])


def _rule_ids(index: pl.DataFrame) -> pl.Series:
    """Every rule_set_id in key order: the sort's buckets."""
    return keys.sorted_ids(index["rule_set_id"])


def _unified_keys(frames: list[pl.DataFrame], text: dict[str, bool] | None = None
                  ) -> list[pl.DataFrame]:
    """`unify_key_types` for both keys; a key that `text` says some other frame of the run
    made text is text here too (values as given, as when all frames are unified at once)."""
    for key in keys.KEYS:
        if text and text[key]:
            frames = [f if f[key].dtype == pl.String
                      else f.with_columns(pl.col(key).cast(pl.String)) for f in frames]
        elif any(f[key].dtype != pl.Int64 for f in frames):  # else nothing to unify
            frames = keys.unify_key_types(frames, key)
    return frames


def _evaluate_long(paths: list[Path], config: Config, index: pl.DataFrame, cache: TableCache,
                   staging: Path, on_event: OnEvent, read_cache: RunCache | None,
                   new_runs: Callable[[bool], _SortedRuns], new_rejects: Callable[[], HeldRejects]
                   ) -> tuple[pl.DataFrame | MergedVerdicts, HeldRejects, np.ndarray]:
    """(verdicts, in memory or merged from sorted runs; rejects; rows read per file). The
    verdicts go through `_SortedRuns` (made by `new_runs`) as wide ones do, so that memory
    does not grow with the input. Small files are read together, as wide ones are (each row's
    file in `_file`, which only the split into scratch keeps)."""
    batches = position_batches(paths, config, "long", read_together=True, cache=read_cache)
    parts = -(-row_estimate(paths, cache=read_cache) // LONG_PARTITION_ROWS)
    per_file = _RowsPerFile(len(paths))
    if parts <= 1:
        log.info("long form: collected whole")
        frames = []
        for file_index, frame in batches:
            frames.append(per_file.counted(file_index, frame))
        text = {key: any(keys.needs_text(f, key) for f in frames) for key in keys.KEYS}
        verdicts, rejects = _merge_long([frames], 1, text, frames[0].clear(), config, index,
                                        cache, on_event, new_runs(False), new_rejects())
        return verdicts, rejects, per_file.counts
    in_order = _evaluate_long_in_order(paths, config, index, cache, on_event, read_cache,
                                       new_runs(False), new_rejects())
    if in_order is not None:
        return in_order
    log.info("long form: split by key into %d scratch parts of about %s rows", parts,
             f"{LONG_PARTITION_ROWS:,}")
    rows_read = 0
    text = dict.fromkeys(keys.KEYS, False)
    early = new_rejects().counter()  # a fail run past its tolerance stops splitting
    with spill(staging) as scratch:
        for file_index, frame in read_ahead(batches):
            early.stop_if_past()
            if early.stop_past is not None:
                _count_rejected_on_their_own(early, frame, index)
            rows_read += frame.height
            per_file.add(file_index, frame)
            empty = frame.clear().drop("_file", strict=False)
            text = {key: text[key] or keys.needs_text(frame, key) for key in text}
            scratch_rows = long_form.to_scratch(frame, file_index)
            for part, rows in long_form.by_partition(scratch_rows, parts).items():
                scratch.write(part, rows)
            on_event(RunEvent.progress("positions", rows_read, None,
                                       f"positions: {rows_read:,} rows split into {parts} "
                                       f"parts (file {file_index + 1} of {len(paths)})"))
        scratch.close()
        sources = [str(p) for p in paths]
        split = ([long_form.from_scratch(f, sources, empty.columns) for f in scratch.read(part)]
                 for part in range(parts))
        verdicts, rejects = _merge_long(split, parts, text, empty, config, index, cache, on_event,
                                        new_runs(False), new_rejects())
    return verdicts, rejects, per_file.counts


def _count_rejected_on_their_own(counter: CountedRejects, rows: pl.DataFrame,
                                 index: pl.DataFrame) -> None:
    """Count the long-form rows rejected whatever the other rows of their position hold (a
    reason of their own, such as a heap that is not one, or an unknown or invalid rule set),
    the first of them as reject rows."""
    checked = evaluate.attach_tables(*keys.match_key_type(rows, index))
    rejected = checked.filter(pl.col("_reason").is_not_null())
    counter.add(rejected.height, outputs.reject_rows(
        rejected.bottom_k(FOUND_KEPT, by=["_source", "_row"]), "positions"))


class _OutOfOrder(Exception):
    """Long-form rows that are not in key order after all: the run splits them instead."""


def _evaluate_long_in_order(paths: list[Path], config: Config, index: pl.DataFrame,
                            cache: TableCache, on_event: OnEvent, read_cache: RunCache | None,
                            runs: _SortedRuns, rejects: HeldRejects
                            ) -> tuple[pl.DataFrame | MergedVerdicts, HeldRejects,
                                       np.ndarray] | None:
    """Long form without scratch files, for input whose keys come in one key order throughout
    (each batch, and across batches and files; integer position ids, and integer rule set
    ids or text ones ordered by their rank among the rules' ids): every position's rows are then
    contiguous, so each batch is grouped as it comes, holding back only its last position,
    whose rows may go on in the next batch. None, after a log line, as soon as a batch shows
    otherwise (a text key, a null key, rows out of order): the caller then splits the input
    by key, reading it again (tables already grown stay; they depend only on the heaps; the
    runs spilled so far are removed)."""
    batches = position_batches(paths, config, "long", read_together=True, cache=read_cache)
    seen: dict[str, object] = {"order": None, "text": None}
    rows_per_file = _RowsPerFile(len(paths))
    rule_ids = _rule_ids(index)

    def groups() -> Iterator[list[pl.DataFrame]]:
        # the last key's rows so far, held back: (rows, their keys, their ranks or None)
        carry: tuple[pl.DataFrame, dict[str, np.ndarray], np.ndarray | None] | None = None
        for file_index, frame in read_ahead(batches):
            (frame,) = _unified_keys([rows_per_file.counted(file_index, frame)])
            text = frame["rule_set_id"].dtype == pl.String
            if seen["text"] is not None and text != seen["text"]:
                raise _OutOfOrder("rule_set_id is text in some batches only")
            seen["text"] = text
            if frame.height == 0:
                continue
            ids, bucket = _integer_keys(frame, rule_ids)  # this batch's rows only, once
            bucket = None if bucket is None else bucket.astype(np.int32)
            seen["order"] = _key_order([ids] if carry is None else [ids, _junction(carry[1], ids)],
                                       seen["order"], frame)
            tail = _last_key_start(ids)
            if carry is not None and tail == 0 and _same_key(carry[1], ids):
                # a key of more rows than a batch: held back whole until it ends
                bucket = _joined(carry[2], bucket)
                ids = {key: np.concatenate([carry[1][key], ids[key]]) for key in ids}
                carry = (pl.concat([carry[0], frame], how="vertical_relaxed"), ids, bucket)
                continue
            if carry is not None or tail:
                done, ranks = frame.slice(0, tail), None if bucket is None else bucket[:tail]
                if carry is not None:  # its key ends before this batch's first other key
                    done = pl.concat([carry[0], done], how="vertical_relaxed")
                    ranks = _joined(carry[2], ranks)
                yield [_with_ranks(done, ranks)]
            carry = (frame.slice(tail), {key: v[tail:] for key, v in ids.items()},
                     None if bucket is None else bucket[tail:])
        if carry is None:
            raise _OutOfOrder("no rows")
        yield [_with_ranks(carry[0], carry[2])]

    parts = groups()
    try:
        first = next(parts)  # the first batch decides whether rule_set_id is text
        text = {"rule_set_id": bool(seen["text"]), "position_id": False}
        verdicts, rejects = _merge_long(itertools.chain([first], parts), None, text, None,
                                        config, index, cache, on_event, runs, rejects)
    except _OutOfOrder as why:
        log.info("long form: %s; splitting the input by key instead", why)
        runs.discard()
        rejects.discard()
        return None
    finally:  # the groups first: a stop between them leaves them reading ahead
        parts.close()
        batches.close()
    return verdicts, rejects, rows_per_file.counts


def _integer_keys(rows: pl.DataFrame, rule_ids: pl.Series
                  ) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """Both keys of `rows` as int64 arrays, a text rule_set_id as its rank among the rules'
    ids (`rule_ids`, in key order, so the ranks keep the ids' order); else the rows are not
    for this path (a text position id, a missing key, a rule set the rules do not have).
    With them, each row's rank among `rule_ids` where every row has one (else None), which
    stands for its rule set from then on (`_with_ranks`)."""
    position, rule = rows["position_id"], rows["rule_set_id"]
    if position.dtype != pl.Int64 or position.null_count():
        raise _OutOfOrder("a position_id is text or missing")
    if rule.dtype == pl.Int64 and not rule.null_count():
        ranks = keys.ranks(rule, rule_ids)
        return ({"rule_set_id": rule.to_numpy(), "position_id": position.to_numpy()},
                ranks if ranks.size == 0 or ranks.min() >= 0 else None)
    if rule.dtype != pl.String or rule_ids.dtype != pl.String:
        raise _OutOfOrder("a rule_set_id is missing")
    ranks = _run_ranks(rule, rule_ids)
    if (ranks < 0).any():
        raise _OutOfOrder("a rule_set_id is missing or not in the rules")
    return {"rule_set_id": ranks, "position_id": position.to_numpy()}, ranks


def _run_ranks(ids: pl.Series, rule_ids: pl.Series) -> np.ndarray:
    """`keys.ranks` of text ids that, in key order, come in runs of equal ids: each run
    ranked once (a hash lookup per run, not per row), unless the runs are short (rows out
    of order, about to leave this path)."""
    runs = ids.rle_id()
    if runs.len() == 0 or 2 * (runs[-1] + 1) > runs.len():
        return keys.ranks(ids, rule_ids)
    runs = ids.rle()
    return np.repeat(keys.ranks(runs.struct.field("value"), rule_ids),
                     runs.struct.field("len").to_numpy())


def _with_ranks(rows: pl.DataFrame, ranks: np.ndarray | None) -> pl.DataFrame:
    """`rows` with their rule sets' `ranks` (int32) as `_bucket` (when known), which
    `_long_positions` takes instead of ranking the ids again."""
    if ranks is None:
        return rows
    return rows.with_columns(pl.Series("_bucket", ranks))


def _joined(first: np.ndarray | None, second: np.ndarray | None) -> np.ndarray | None:
    """The ranks of held-back rows and those of the rows after them (None if either is
    unknown)."""
    return None if first is None or second is None else np.concatenate([first, second])


def _junction(held: dict[str, np.ndarray], ids: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The keys of the last row held back and of the first row after it: rows in key order
    on either side of a batch's start are in key order together if these two are."""
    return {key: np.array([held[key][-1], ids[key][0]]) for key in ids}


def _same_key(held: dict[str, np.ndarray], ids: dict[str, np.ndarray]) -> bool:
    """Whether the first row of `ids` has the key of the rows held back."""
    return all(held[key][-1] == ids[key][0] for key in ids)


def _key_order(pieces: list[dict[str, np.ndarray]], order: list[str] | None,
               rows: pl.DataFrame) -> list[str] | None:
    """The key order that holds within each of `pieces` (the keys of a batch, and of the
    rows on either side of its start, `_junction`; the last row `rows`'s): `order` when
    given, else (rule_set_id, position_id) or (position_id, rule_set_id), whichever holds;
    None while both do (rows of one rule set and ascending positions, say): a later batch
    decides."""
    holding = [candidate for candidate in ([order] if order else [keys.KEYS, keys.KEYS[::-1]])
               if all(kernels.in_key_order(ids[candidate[0]], ids[candidate[1]])
                      for ids in pieces)]
    if holding:
        return holding[0] if len(holding) == 1 else None
    raise _OutOfOrder(f"rows are not in key order (file rows before row "
                      f"{rows['_row'][-1]} of {rows['_source'][-1]})")


def _last_key_start(ids: dict[str, np.ndarray]) -> int:
    """Where the run of rows of the last key (of rows in key order) starts: looked for in
    a tail of the rows that grows until it holds another key (a position has few rows)."""
    r, p = (ids[key] for key in keys.KEYS)
    if r.size == 0:
        return 0
    tail = 64
    while True:
        lo = max(r.size - tail, 0)
        same = (r[lo:] == r[-1]) & (p[lo:] == p[-1])
        if not same.all():
            return lo + int(same.size - np.argmin(same[::-1]))
        if lo == 0:
            return 0
        tail *= 16


def _merge_long(parts: Iterable[list[pl.DataFrame]], total: int | None, text: dict[str, bool],
                empty: pl.DataFrame, config: Config, index: pl.DataFrame, cache: TableCache,
                on_event: OnEvent, runs: _SortedRuns, rejects: HeldRejects
                ) -> tuple[pl.DataFrame | MergedVerdicts, HeldRejects]:
    """Evaluate long-form parts, each holding every row of its positions, and merge them:
    (verdicts in key order, rejects). A key that `text` says any input row made text is text
    in every part, as when all rows are unified at once. Where ranks can stand for the rule
    sets, parts are kept narrow and go through `runs` as wide batches do: one sort in memory,
    or sorted runs in scratch merged when they pass the memory setting (text position ids
    sorted by the kernel, which is faster than polars at it)."""
    # ranks stand for rule sets when every part's ids have the index's type (text or not):
    # then every part is narrow and the sort never retypes a key that `text` decided
    index_text = index["rule_set_id"].dtype == pl.String
    rule_ids = _rule_ids(index) if text["rule_set_id"] == index_text else None
    ranked = None if rule_ids is None else (rule_ids, evaluate.tables_of_ranks(rule_ids, index))
    verdicts = []
    for n, frames in enumerate(parts, 1):
        rejects.stop_if_past()
        clean, part_rejects, part_rows = _long_positions(
            _unified_keys(frames or [empty], text), config, index, cache, ranked)
        if rule_ids is None:
            verdicts.append(ordering.verdict_rows(clean, config.winning_moves))
        else:
            runs.add(ordering.with_own_text(ordering.verdict_part(
                clean, None, rule_ids, _verdict_columns(config))))
        rejects.add(part_rejects, part_rows)
        on_event(RunEvent.progress("positions", n, total,
                                   f"positions: part {n} of {total} evaluated" if total else
                                   f"positions: {n} batches evaluated",
                                   unit="parts" if total else "batches"))
    cache.report_meanwhile()
    if rule_ids is None:
        return ordering.sorted_from_parts(verdicts), rejects
    no_rejects = pl.DataFrame(schema=schema.REJECT_SCHEMA)  # a long-form key cannot repeat
    verdicts = runs.finish(no_rejects, [], on_event, rejects.add_duplicates)
    return verdicts, rejects


def _long_positions(frames: list[pl.DataFrame], config: Config, index: pl.DataFrame,
                    cache: TableCache, ranked: tuple[pl.Series, np.ndarray] | None = None
                    ) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Long-form rows holding every row of their positions, with unified key types ->
    (evaluated positions, none rejected; rejects; rows read). Rows in key order carry their
    rule sets' ranks among `ranked`'s ids (`_with_ranks`; `ranked`: the index's ids in key
    order and the table of each) and are grouped by their runs of equal keys."""
    rows = pl.concat(frames, how="vertical_relaxed")
    positions = None
    if "_bucket" in rows.columns:
        bucket = rows.drop_in_place("_bucket").to_numpy()
        if ranked is not None:
            positions = long_form.long_to_wide_in_order(rows, bucket, *ranked)
    if positions is None:
        positions = long_form.long_to_wide_sorted(rows, index)
    if positions is not None:  # clean: no row to reject unless a heap is beyond its table
        evaluated = _evaluated(positions, cache, config.winning_moves)
        if evaluated["_reason"].null_count() == evaluated.height:
            return evaluated, pl.DataFrame(schema=schema.REJECT_SCHEMA), rows.height
    positions, long_rejects = long_form.long_to_wide(rows)
    key_type = positions["rule_set_id"].dtype  # the verdicts keep it, as for wide batches
    positions, index = keys.match_key_type(positions, index)
    positions = evaluate.attach_tables(positions, index)
    evaluated = _evaluated(positions, cache, config.winning_moves)
    rejected = long_form.expand_long_rejects(evaluated.filter(pl.col("_reason").is_not_null()))
    rejects = pl.concat([outputs.reject_rows(rejected, "positions"),
                         outputs.reject_rows(long_rejects, "positions")])
    clean = evaluated.filter(pl.col("_reason").is_null())
    return clean.with_columns(pl.col("rule_set_id").cast(key_type)), rejects, rows.height
