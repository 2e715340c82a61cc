"""The default engine: positions streamed in batches through polars and the numba kernels.

Wide-form Parquet input is read one batch at a time, so memory holds one batch of heaps plus
the narrow verdict columns; SG tables grow as batches reveal larger heaps. A position's
long-form rows may be anywhere in the input, so long form is collected whole when it is small,
and otherwise first split by a hash of the key into scratch files of about
LONG_PARTITION_ROWS rows each, which are then collected one at a time.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl

from pipeline import keys
from pipeline.config import Config, Tables
from pipeline.engines import EngineResult, manifest_counts, problem_text
from pipeline.errors import InputError
from pipeline.grundy import MAX_HEAP, Rule, SGTable, TableBudget, TableSet
from pipeline.io.commit import sink_parquet, write_parquet
from pipeline.io.inputs import InputFile, RawTable, checksummed, format_of, resolve_inputs
from pipeline.io.readers import (
    columns_of,
    heap_upper_bound,
    iter_batches,
    read_tables,
    row_estimate,
)
from pipeline.io.scratch import spill
from pipeline.transforms import buffers, evaluate, long_form, normalize, ordering, outputs, schema

Phase = Callable[[str], AbstractContextManager[None]]
BATCH_ROWS = 1 << 20
PRESIZE_LIMIT = 1 << 16
LONG_PARTITION_ROWS = 1 << 22


class TableCache:
    """One SG table per distinct rule, tabulated only as far as the heaps seen so far need
    (exactly, so the final tables do not depend on how the input was batched), within the
    run's `TableBudget`; `reported` then spends the period-probe budget to prove periods for
    sg_tables."""

    def __init__(self, distinct: list[Rule], settings: Tables):
        self.distinct = distinct
        self.budget = TableBudget(settings.max_table_len, settings.max_rule_ops,
                                  settings.max_total_values, settings.max_run_ops)
        self.probe_budget = settings.period_probe_ops
        self.tables: list[SGTable | None] = [None] * len(distinct)
        self.known = np.full(len(distinct), -1, dtype=np.int64)
        self._set: TableSet | None = None

    def _build_all(self, ts: list[int], largest: list[int]) -> None:
        """Tables t in `ts` grown for heaps up to `largest`, on all cores; a table stopped by
        a limit is known for every heap (those beyond it are rejected, naming the limit)."""
        if not ts:
            return
        built = self.budget.build([self.distinct[t] for t in ts],
                                  [min(h + 1, MAX_HEAP) for h in largest],
                                  [self.tables[t] for t in ts])
        for t, table in zip(ts, built):
            self.tables[t] = replace(table, stopped_by=f"tables.{table.stopped_by}"
                                     ) if table.stopped_by else table
            stopped = table.stopped_by is not None or table.rule.kind != "subtraction"
            self.known[t] = MAX_HEAP if stopped else table.max_known_heap()
        self._set = None

    def presize(self, largest_heap: int | None) -> None:
        """Build every table for heaps up to `largest_heap` at once when that bound (from
        Parquet statistics) is small, instead of growing tables batch by batch."""
        if largest_heap is not None and 0 <= largest_heap < PRESIZE_LIMIT:
            missing = [t for t in range(len(self.distinct)) if self.tables[t] is None]
            self._build_all(missing, [largest_heap] * len(missing))

    def ensure(self, largest: np.ndarray) -> TableSet:
        """Tables covering `largest[t]` for every t (beyond a limit, heaps are rejected)."""
        grow = np.flatnonzero((largest > self.known) | (largest >= 0) & (self.known < 0))
        self._build_all(grow.tolist(), largest[grow].tolist())
        return self.table_set()

    def reported(self) -> TableSet:
        """The tables for sg_tables: those without a proven period that no limit stopped are
        tabulated further, up to `period_probe_ops` operations in all (within max_table_len,
        max_rule_ops and max_total_values). Rules go cheapest first and each may use an equal
        share of what is left, so budget a rule does not need (its period came early) flows to
        the rules after it; a lone rule may use all of it."""
        self.table_set()
        budget = self.probe_budget
        pending = sorted((t for t, table in enumerate(self.tables)
                          if table is not None and table.rule.kind == "subtraction"
                          and table.period is None and table.stopped_by is None),
                         key=lambda t: (self.distinct[t].value_ops, t))
        for left, t in zip(range(len(pending), 0, -1), pending):
            old = self.tables[t]
            assert old is not None
            probe = replace(self.budget, max_run_ops=budget // left, ops=0)
            (table,) = probe.build([old.rule], [MAX_HEAP], [old])
            budget -= probe.ops
            self.budget.values = probe.values
            self.tables[t] = replace(table, stopped_by=None)
        self._set = None
        return self.table_set()

    def table_set(self) -> TableSet:
        if self._set is None:
            missing = [t for t, table in enumerate(self.tables) if table is None]
            if missing:
                self._build_all(missing, [-1] * len(missing))
            self._set = TableSet.of([t for t in self.tables if t is not None])
        return self._set


def table_cache(distinct: list[Rule], config: Config, paths: list[Path], form: str
                ) -> TableCache:
    """The run's table cache, presized from Parquet statistics where they bound the heaps
    (both engines, so that their tables, and sg_tables, are the same)."""
    cache = TableCache(distinct, config.tables)
    if form == "wide":
        cache.presize(heap_upper_bound(paths, config.columns.heaps))
    return cache


def read_rules(config: Config) -> tuple[pl.DataFrame, list[InputFile]]:
    """All rules files, normalised and validated (reasons on bad rows)."""
    frames, files = [], []
    for raw in read_tables(config.rules, "rules", exclude=config.out):
        source = str(raw.file.path)
        frame = normalize.normalize_rules(raw.frame, raw.row, source, config.columns)
        frames.append(_with_bad_lines(frame, raw, {"rule_set_id": config.columns.rule_set_id}))
        files.append(raw.file)
    frames = keys.unify_key_types(frames, "rule_set_id")
    rules = pl.concat(frames, how="vertical_relaxed")
    return normalize.reject_duplicate_rules(rules), files


def _with_bad_lines(frame: pl.DataFrame, raw: RawTable, keys: dict[str, str]
                    ) -> pl.DataFrame:
    """Add the CSV lines the reader skipped (wrong field count) as rejected rows, with their
    key columns as given (`keys` maps output name -> input column) so that their rule set or
    position is accounted for too."""
    if not raw.bad_lines:
        return frame
    header = raw.frame.columns
    fields = [next(csv.reader([text]), []) for _, _, text in raw.bad_lines]

    def field(values: list[str], column: str) -> str | None:
        at = header.index(column) if column in header else -1
        value = values[at].strip() if 0 <= at < len(values) else ""
        return value or None

    bad = pl.DataFrame({
        "_source": [str(raw.file.path)] * len(raw.bad_lines),
        "_row": [r for r, _, _ in raw.bad_lines],
        "_reason": [why for _, why, _ in raw.bad_lines],
        **{name: [field(v, column) for v in fields] for name, column in keys.items()},
    }, schema={"_source": pl.String, "_row": pl.Int64, "_reason": pl.String,
               **{name: pl.String for name in keys}})
    if any(frame[name].dtype != pl.String for name in keys if name in frame.columns):
        frame = frame.with_columns(pl.col(name).cast(pl.String) for name in keys
                                   if name in frame.columns)
    return pl.concat([frame, bad], how="diagonal_relaxed").sort("_row")


def positions_form(paths: list[Path], config: Config) -> str:
    """The positions form, which every file must share."""
    forms = {p: schema.detect_form(columns_of(p), config.columns, str(p)) for p in paths}
    first = forms[paths[0]]
    for path, form in forms.items():
        if form != first:
            raise InputError(f"{path}: is in {form} form but {paths[0]} is in {first} form; "
                             "use one form per run")
    return first


def position_batches(paths: list[Path], config: Config, form: str
                     ) -> Iterator[tuple[int, pl.DataFrame]]:
    """(file index, normalised batch with reasons) for every batch of every positions file."""
    file_start = 0  # rows of the earlier files, which number default position ids on
    for index, path in enumerate(paths):
        rows_here = 0
        for raw in iter_batches(path, BATCH_ROWS):
            frame = normalize.normalize_positions(raw.frame, raw.row, str(path),
                                                   config.columns, form, file_start)
            rows_here += raw.frame.height + len(raw.bad_lines)
            keys = {"rule_set_id": config.columns.rule_set_id,
                    "position_id": config.columns.position_id}
            yield index, _with_bad_lines(frame, raw, keys)
        file_start += rows_here


def execute(config: Config, staging: Path, phase: Phase,
            note: Callable[[str], None] = lambda message: None) -> EngineResult:
    """Read, validate, tabulate, evaluate and write every output but the manifest."""
    with phase("rules"):
        rules, rule_files = read_rules(config)
        distinct, index = normalize.rule_index(rules)
        paths = resolve_inputs(config.positions, "positions", exclude=config.out)
        form = positions_form(paths, config)
    with phase("tables"):
        cache = table_cache(distinct, config, paths, form)
    checksums = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checksum")
    described = [checksums.submit(checksummed, p) for p in paths]
    checksums.shutdown(wait=False)
    with phase("positions"):
        if form == "wide":
            verdicts, position_rejects, rows_read = _evaluate_wide(paths, config, index, cache,
                                                                   note)
        else:
            verdicts, position_rejects, rows_read = _evaluate_long(paths, config, index, cache,
                                                                   staging, note)
    with phase("finish"):
        rejects = schema.with_input_column_names(outputs.sort_rejects(pl.concat(
            [outputs.reject_rows(rules, "rules"), position_rejects])), config.columns, form)
        summary = outputs.summary_rows(index, *outputs.summary_counts(verdicts, rejects))
        sg_tables = outputs.sg_table_rows(rules, distinct, cache.reported(), index)
    counts = manifest_counts(
        rules.height, rejects.filter(pl.col("table") == "rules").height, rows_read,
        rejects.filter(pl.col("table") == "positions").height, verdicts.height,
        int((verdicts["nim_sum"] != 0).sum()))
    problems = [problem_text(r) for r in rejects.head(10).iter_rows(named=True)]
    inputs = {"rules": [f.as_dict() for f in rule_files],
              "positions": [f.result().as_dict() for f in described]}
    if not (rejects.height and config.on_bad_rows == "fail"):
        with phase("write"):
            sink_parquet(evaluate.with_verdict(verdicts.lazy()),
                            staging / "verdicts.parquet")
            write_parquet(rejects, staging / "rejects.parquet")
            write_parquet(sg_tables, staging / "sg_tables.parquet")
            write_parquet(summary, staging / "summary.parquet")
    return EngineResult(inputs, counts, form, problems)


def _evaluate_wide(paths: list[Path], config: Config, index: pl.DataFrame, cache: TableCache,
                   note: Callable[[str], None]) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    parts, rejects, rows_read = [], [], 0
    keep = _verdict_columns(config)
    rule_ids = _integer_rule_ids(index)
    total = (row_estimate(paths) if all(format_of(p) == "parquet" for p in paths)
             else None)  # exact from the footers; a CSV's rows are known once it is read
    for file_index, frame in position_batches(paths, config, "wide"):
        rows_read += frame.height
        frame, batch_index = keys.match_key_type(keys.integer_keys(frame), index)
        frame = evaluate.attach_tables(frame, batch_index)
        chunks = buffers.heap_buffers(frame)
        tables = cache.ensure(evaluate.largest_heaps(frame, len(cache.distinct), chunks))
        evaluated = evaluate.evaluate(frame, tables, config.winning_moves, chunks)
        if evaluated["_reason"].null_count() < evaluated.height:
            rejects.append(outputs.reject_rows(evaluated, "positions"))
            evaluated = evaluated.filter(pl.col("_reason").is_null())
        parts.append(ordering.verdict_part(evaluated, file_index, rule_ids, keep))
        del frame, evaluated, chunks
        note(f"positions: {rows_read:,} of {total:,} rows ({100 * rows_read // max(total, 1)}%)"
             if total else
             f"positions: {rows_read:,} rows read (file {file_index + 1} of {len(paths)})")
    rejected = pl.concat([pl.DataFrame(schema=schema.REJECT_SCHEMA), *rejects])
    verdicts, duplicates = ordering.key_sorted_verdicts(parts, rule_ids, rejected,
                                                        [str(p) for p in paths])
    return verdicts, pl.concat([rejected, duplicates]), rows_read


def _verdict_columns(config: Config) -> list[str]:
    return ["rule_set_id", "position_id", "nim_sum"] + (
        list(ordering.MOVE_COLUMNS) if config.winning_moves else [])


def _integer_rule_ids(index: pl.DataFrame) -> np.ndarray | None:
    """Every rule_set_id, sorted, when they are integers (the counting sort's buckets)."""
    ids = index["rule_set_id"]
    if ids.dtype != pl.Int64:
        return None
    return np.unique(ids.drop_nulls().to_numpy())


def _unified_keys(frames: list[pl.DataFrame], text: dict[str, bool] | None = None
                  ) -> list[pl.DataFrame]:
    """`unify_key_types` for both keys; a key that `text` says some other frame of the run
    made text is text here too (values as given, as when all frames are unified at once)."""
    for key in keys.KEYS:
        if text and text[key]:
            frames = [f.with_columns(pl.col(key).cast(pl.String)) for f in frames]
        else:
            frames = keys.unify_key_types(frames, key)
    return frames


def _evaluate_long(paths: list[Path], config: Config, index: pl.DataFrame, cache: TableCache,
                   staging: Path, note: Callable[[str], None]
                   ) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    batches = position_batches(paths, config, "long")
    parts = -(-row_estimate(paths) // LONG_PARTITION_ROWS)
    if parts <= 1:
        frames = [frame for _, frame in batches]
        text = {key: any(keys.needs_text(f, key) for f in frames) for key in keys.KEYS}
        verdicts, rejects = _merge_long([frames], 1, text, frames[0].clear(), config, index,
                                        cache, note)
        return verdicts, rejects, sum(f.height for f in frames)
    rows_read = 0
    text = dict.fromkeys(keys.KEYS, False)
    with spill(staging) as scratch:
        for file_index, frame in batches:
            rows_read += frame.height
            empty = frame.clear()
            text = {key: text[key] or keys.needs_text(frame, key) for key in text}
            scratch_rows = long_form.to_scratch(frame, file_index)
            for part, rows in long_form.by_partition(scratch_rows, parts).items():
                scratch.write(part, rows)
            note(f"positions: {rows_read:,} rows split into {parts} parts "
                 f"(file {file_index + 1} of {len(paths)})")
        scratch.close()
        sources = [str(p) for p in paths]
        split = ([long_form.from_scratch(f, sources, empty.columns) for f in scratch.read(part)]
                 for part in range(parts))
        verdicts, rejects = _merge_long(split, parts, text, empty, config, index, cache, note)
    return verdicts, rejects, rows_read


def _merge_long(parts: Iterable[list[pl.DataFrame]], total: int, text: dict[str, bool],
                empty: pl.DataFrame, config: Config, index: pl.DataFrame, cache: TableCache,
                note: Callable[[str], None]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Evaluate long-form parts, each holding every row of its positions, and merge them:
    (verdicts in key order, rejects). A key that `text` says any input row made text is text
    in every part, as when all rows are unified at once; with integer keys throughout, the
    parts are kept narrow and merged with one counting sort, as wide batches are."""
    rule_ids = None if any(text.values()) else _integer_rule_ids(index)
    verdicts, rejects = [], []
    for n, frames in enumerate(parts, 1):
        clean, part_rejects, _ = _long_positions(_unified_keys(frames or [empty], text), config,
                                                 index, cache)
        verdicts.append(ordering.verdict_rows(clean, config.winning_moves) if rule_ids is None
                        else ordering.verdict_part(clean, None, rule_ids,
                                                   _verdict_columns(config)))
        rejects.append(part_rejects)
        note(f"positions: part {n} of {total} evaluated")
    if rule_ids is None:
        return ordering.sorted_from_parts(verdicts), pl.concat(rejects)
    no_rejects = pl.DataFrame(schema=schema.REJECT_SCHEMA)  # a long-form key cannot repeat
    return ordering.key_sorted_verdicts(verdicts, rule_ids, no_rejects, [])[0], pl.concat(rejects)


def _long_positions(frames: list[pl.DataFrame], config: Config, index: pl.DataFrame,
                    cache: TableCache) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Long-form rows holding every row of their positions, with unified key types ->
    (evaluated positions, none rejected; rejects; rows read)."""
    rows = pl.concat(frames, how="vertical_relaxed")
    positions = long_form.long_to_wide_sorted(rows, index)
    if positions is not None:  # clean: no row to reject unless a heap is beyond its table
        tables = cache.ensure(evaluate.largest_heaps(positions, len(cache.distinct)))
        evaluated = evaluate.evaluate(positions, tables, config.winning_moves)
        if evaluated["_reason"].null_count() == evaluated.height:
            return evaluated, pl.DataFrame(schema=schema.REJECT_SCHEMA), rows.height
    positions, long_rejects = long_form.long_to_wide(rows)
    key_type = positions["rule_set_id"].dtype  # the verdicts keep it, as for wide batches
    positions, index = keys.match_key_type(positions, index)
    positions = evaluate.attach_tables(positions, index)
    tables = cache.ensure(evaluate.largest_heaps(positions, len(cache.distinct)))
    evaluated = evaluate.evaluate(positions, tables, config.winning_moves)
    rejected = long_form.expand_long_rejects(evaluated.filter(pl.col("_reason").is_not_null()))
    rejects = pl.concat([outputs.reject_rows(rejected, "positions"),
                         outputs.reject_rows(long_rejects, "positions")])
    clean = evaluated.filter(pl.col("_reason").is_null())
    return clean.with_columns(pl.col("rule_set_id").cast(key_type)), rejects, rows.height
