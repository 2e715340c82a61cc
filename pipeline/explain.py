"""`plan_run(config) -> RunPlan`: what a run of this config would do, from what is cheap to
read (the rules table whole, Parquet footers, CSV headers and starts), without running it.

Nothing is written and no row of positions is read. The same inputs, columns and settings are
checked as the run checks them first, with the same errors (a missing file, a file of the
wrong form, a missing column); an output the run would refuse is part of the plan instead
(`OutputPlan.problem`). Counts the footers give are exact; the rest are estimates and say so.
It never prints: `cli.explain` renders the plan, or prints `RunPlan.as_dict()` as JSON.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from pipeline import keys
from pipeline.batches import BATCH_ROWS, positions_form, read_rules
from pipeline.config import Config
from pipeline.engines import load_engine
from pipeline.engines.polars_engine import HELD_SHARE, WHOLE_SHARE, memory_limit
from pipeline.errors import OutputError, SnimError, UsageError
from pipeline.grundy import MAX_HEAP, Rule, build_table
from pipeline.io.inputs.discovery import resolve_inputs
from pipeline.io.outputs.commit import output_target, staging_refused, target_state
from pipeline.io.read.csv_reader import csv_row_estimate
from pipeline.io.read.files import Source
from pipeline.io.read.footers import parquet_footer, row_group_facts
from pipeline.io.read.formats import describe
from pipeline.io.read.readers import as_read, columns_of_each, heap_upper_bound
from pipeline.io.store.locations import Location
from pipeline.io.store.run_cache import RunCache
from pipeline.run import rules_past_tolerance
from pipeline.tables import PRESIZE_LIMIT
from pipeline.transforms import normalize
from pipeline.transforms.schema import check_columns, wrong_type

PLAN_VERSION = 1  # the JSON form's `plan_version`: raised when a key changes meaning
CSV_SAMPLE = 1 << 22  # a CSV file's first bytes whose records are counted (all of a smaller one)

# Key types, as the run decides them (`keys`): "int" or "text" when the files' types decide,
# "by values" when the values do (text columns: integer keys when every value is an integer).
INT, TEXT, BY_VALUES = "int", "text", "by values"

# The memory model of the polars engine (rough; calibrated on the README's figures: 40M wide
# positions of 5 heaps, winning moves on, peak about 1.5 GiB): the process with its
# libraries, the batches in flight (the one evaluated, one read ahead, and two decoding for
# a local Parquet file, `readers.SLICES_AHEAD`, or one parsed ahead for CSV; each held
# about twice while it is normalised), each verdict kept until the final sort, and the
# tables (the flat copy the kernels read beside each table's own values).
PROCESS_BYTES = 200 << 20
BATCHES_IN_FLIGHT = 4
BATCH_COPIES = 2
# A verdict: held, its rule set rank, integer position id and nim-sum (13-16 bytes), and at
# the final sort the arrays beside them (buckets, destinations, the sorted columns, the rule
# ids restored): about 56 bytes a position in all (calibration: docs/performance.md). Long
# form counts one per row, the most positions its rows can be.
VERDICT_BYTES = 56
TEXT_ID_BYTES = 40  # a text position id instead: its view, text and the sort's copy
TEXT_RULE_ID_BYTES = 16  # text rule ids restored for every verdict (views)
WINNING_MOVE_BYTES = 8  # move_heap and move_take
CSV_ROW_COPIES = 3  # a CSV row in memory: its text, the parsed columns, the normalised ones
# A run that spills holds an eighth of its memory setting in verdicts, and sorts a run of
# that size into scratch beside the next ones: about three such shares at once. A run on
# scratch takes at most RUN_ROW_BYTES, the position id and RUN_MOVE_BYTES per position
# (before zstd). Held, a verdict takes HELD_ROW_BYTES (the rank and the narrowest nim-sum; at
# most also its input row's number) beside its position id (8 bytes, or a text id's 16-byte
# view and its text) and its moves (2 to 8 bytes).
RUN_COPIES = 3
RUN_ROW_BYTES = 9
RUN_MOVE_BYTES = 16
HELD_ROW_BYTES = (5, 16)
TEXT_VIEW_BYTES = 16
# Work (operations, as `Rule.value_ops` counts them) explain spends in all proving the rules'
# periods, cheapest rules first: a table whose period is proven stops there in the run, so
# its plan is its real size, not its limit's.
PERIOD_PROBE_OPS = 50_000_000


@dataclass(frozen=True)
class FilePlan:
    """One input file: its format and size, and its rows (`rows_exact`: from a Parquet footer,
    or a CSV file small enough to be counted whole; else CSV_SAMPLE bytes' records scaled to
    its size). `largest_heap`: of a Parquet positions file, from its statistics (None: not
    known, or not a positions file)."""

    path: str
    format: str
    size: int
    rows: int
    rows_exact: bool
    largest_heap: int | None = None


@dataclass(frozen=True)
class RulesPlan:
    """The rules, read whole as the run reads them: rows, the rows rejected, the rule sets
    with a valid rule, and the distinct rules they share (one SG table each)."""

    files: tuple[FilePlan, ...]
    rows: int
    rows_rejected: int
    rule_sets: int
    distinct_rules: int
    distinct_by_kind: dict[str, int]
    key_type: str


@dataclass(frozen=True)
class PositionsPlan:
    """The positions files, their rows (exact when every file's count is), form and key
    types (INT, TEXT or BY_VALUES), and the largest heap the footers bound (None: a file is
    CSV, or lacks the statistics). `largest_heap_by_rule_set`: of each valid rule set (by its
    id as text), the largest heap of the row groups whose rule_set_id range holds it (-1:
    none does, it has no positions), when every file's row groups bound both (integer keys,
    Parquet); else None. `row_bytes`: the most a row of any file takes in memory as read (a
    Parquet file's uncompressed size over its rows, a CSV file's size over its rows,
    CSV_ROW_COPIES times)."""

    files: tuple[FilePlan, ...]
    rows: int
    rows_exact: bool
    form: str
    rule_set_id_type: str
    position_id_type: str
    largest_heap: int | None
    largest_heap_by_rule_set: dict[str, int] | None
    row_bytes: int


@dataclass(frozen=True)
class RulePlan:
    """One distinct subtraction rule's table, at most: `values` (SG values stored) and `ops`
    (operations), tabulated for heaps up to `largest_heap` (the largest of its rule sets', or
    with the tables presized, the input's; None: not known, so up to its own limits),
    `stopped_by` the limit of its own (`tables.max_table_len` or
    `tables.max_rule_ops`) that would stop it first; with its period proven, the values up to
    it. The run-wide limits are `TablesPlan`'s."""

    moves: str
    rule_sets: int
    largest_heap: int | None
    values: int
    ops: int
    stopped_by: str | None
    preperiod: int | None = None
    period: int | None = None
    """The rule's preperiod and period when explain proved them (`PERIOD_PROBE_OPS`): the
    run's table then holds at most preperiod + period values, and no limit stops it."""


@dataclass(frozen=True)
class TablesPlan:
    """The SG tables, at most: every subtraction rule's table for the heaps the footers bound
    (or, unknown, up to its own limits), against the `tables.*` limits. `presized`: built at
    once from the footers' bound before any row is read (the bound is below 2^16 and no limit
    stops a table). `binds`: the run-wide limits the tables' sum passes, which then decide
    where tables stop (in the order the data asks for them). `probe_ops`: work spent on top,
    at most, proving periods for sg_tables. `bounded`: False when the heaps are not known
    before the run, so that the tables are counted at their limits (`binds` then says what
    the tables could pass, at most)."""

    largest_heap: int | None
    bounded: bool
    presized: bool
    values: int
    ops: int
    probe_ops: int
    limits: dict[str, int]
    binds: tuple[str, ...]
    stopped_by_own_limit: int
    value_bytes: int
    rules: tuple[RulePlan, ...]


@dataclass(frozen=True)
class MemoryPlan:
    """Estimated peak memory of the polars engine's process, in bytes, by part (see the
    model's constants): the process with its libraries, the batches in flight, the verdicts
    held (long form: one per row, at most), the SG tables (at their limits when the heaps
    are not known: `TablesPlan.bounded`), and their `total`; the memory setting (`limit`,
    `memory_limit`) under which verdicts past an eighth of it go to scratch as sorted runs,
    whether the run would (`spill`: "yes", "no" or "near the setting", see `_spill`), and
    the scratch disk the runs take at most, uncompressed (`scratch`; 0: none)."""

    process: int
    batches: int
    verdicts: int
    tables: int
    total: int
    limit: int
    spill: str
    scratch: int


@dataclass(frozen=True)
class OutputPlan:
    """Where the output goes and what happens there: `action` is "create" (nothing there),
    "fill" (an empty directory), "replace" (a snim-batch output, with --overwrite), "add night"
    (--format delta: the night's rows replace any earlier run's of that night) or "refused"
    (the run would stop before any work, or, for a Delta night whose keys the root's tables
    cannot take, at its commit: `problem` says why, as the run would; `refusal` is the error
    it would stop with, whose exit code `explain` exits with too)."""

    location: str
    format: str
    overwrite: bool
    exists: bool | None  # None: an object-store output the run refuses (whatever is there)
    action: str
    problem: str | None = None
    run_date: str | None = None
    refusal: SnimError | None = dataclasses.field(default=None, repr=False, compare=False)
    replaces_night: bool | None = None  # Delta: the tables hold rows of run_date already

    @property
    def exit_code(self) -> int:
        return 0 if self.refusal is None else self.refusal.exit_code


@dataclass(frozen=True)
class RunPlan:
    """What a run of the config would do (see the module docstring)."""

    engine: str
    winning_moves: bool
    on_bad_rows: str
    rules: RulesPlan
    positions: PositionsPlan
    tables: TablesPlan
    output: OutputPlan
    memory: MemoryPlan | None
    """None for the Spark engine, whose memory is its executors'."""
    warnings: tuple[str, ...] = ()
    """What the run would warn of before reading a row: files its listings skip."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (`snim-batch explain --json`)."""
        bare = dataclasses.replace(self, output=dataclasses.replace(self.output, refusal=None))
        plan = _plain(dataclasses.asdict(bare))
        del plan["output"]["refusal"]  # the command's, not the plan's
        return {"plan_version": PLAN_VERSION, **plan}


def _plain(value: Any) -> Any:
    """`value` with its tuples as lists, as JSON gives them back."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def plan_run(config: Config, run_date: date | None = None) -> RunPlan:
    """The plan of a run of `config` (`run_date`: the night a --format delta run replaces);
    raises the SnimError the run would raise for an input it cannot read or a setting it
    refuses; where it would refuse its output as well, that error, as the run meets it
    first."""
    output = _output_plan(config, run_date)
    load_engine(config.engine)  # as the run loads it before its output is staged: its extra
    try:
        warnings: list[str] = []
        with RunCache(whole_objects=config.engine != "spark") as cache:
            rules, distinct, index, read = _rules_plan(config, cache, warnings.append)
            positions = _positions_plan(config, cache, index, warnings.append)
            past = rules_past_tolerance(config, read, positions.form)
            if past is not None:  # certain from the rules alone: the run fails as it reads
                raise past
    except SnimError:
        if output.refusal is not None:  # the run stops at its output before reading a row
            raise output.refusal from None
        raise
    if output.action == "add night":
        output = _with_key_types(output, config, positions, index)
    tables = _tables_plan(distinct, index, positions, config)
    memory = None if config.engine == "spark" else _memory(positions, tables, config)
    return RunPlan(config.engine, config.winning_moves, config.on_bad_rows, rules, positions,
                   tables, output, memory, tuple(warnings))


def _rules_plan(config: Config, cache: RunCache, warn: Callable[[str], None]
                ) -> tuple[RulesPlan, list[Rule], pl.DataFrame, pl.DataFrame]:
    """The rules read whole, as the run reads them (`batches.read_rules`), their distinct
    rules with the index rule_set_id -> table, and the rules as read."""
    rules, files, rows = read_rules(config, cache=cache, on_warning=warn)
    distinct, index = normalize.rule_index(rules)
    by_kind: dict[str, int] = {}
    for rule in distinct:
        by_kind[rule.kind] = by_kind.get(rule.kind, 0) + 1
    plan = RulesPlan(
        files=tuple(FilePlan(str(f.path), f.format, f.size, n, True) for f, n in zip(files, rows)),
        rows=rules.height,
        rows_rejected=rules.filter(pl.col("_reason").is_not_null()).height,
        rule_sets=index.filter(pl.col("table").is_not_null()).height,
        distinct_rules=len(distinct),
        distinct_by_kind=by_kind,
        key_type=INT if rules["rule_set_id"].dtype == pl.Int64 else TEXT,
    )
    return plan, distinct, index, rules


def _positions_plan(config: Config, cache: RunCache, index: pl.DataFrame,
                    warn: Callable[[str], None]) -> PositionsPlan:
    """The positions files the run would read (`resolve_inputs`), their form and columns
    checked as the run checks them, their rows and key types from footers and headers."""
    cols = config.columns
    if config.engine == "spark" and Location.parse(config.positions, Path.cwd()).scheme == "hdfs":
        raise UsageError(f"{config.positions}: explain does not plan hdfs:// positions, which "
                         "only a Spark session reaches (the run starts one; explain starts "
                         "none)")
    paths = resolve_inputs(config.positions, "positions", config.out, config.storage_options,
                           on_warning=warn)
    form = positions_form(paths, config, cache=cache)
    heap = cols.heaps if form == "wide" else cols.heap
    files, id_types, pid_types, row_bytes = [], [], [], 0
    groups: list[tuple[int, int, int]] | None = []  # (lowest id, highest id, largest heap)
    for path, columns in zip(paths, columns_of_each(paths, cache=cache)):
        if form == "wide":
            check_columns(columns, [cols.rule_set_id, cols.heaps], [cols.position_id], str(path))
        else:
            check_columns(columns, [cols.rule_set_id, cols.position_id, cols.heap], [],
                          str(path))
        file = describe(path, cache=cache)
        if file.format == "parquet":
            footer = parquet_footer(path, cache=cache)  # read already, for the columns
            _check_types(path, footer.schema, config, form)
            files.append(FilePlan(str(path), "parquet", file.size, footer.num_rows, True,
                                  footer.largest.get(heap)))
            types = _parquet_key_types(path, footer.schema, footer.largest,
                                       [cols.rule_set_id, cols.position_id])
            sizes, ranges = _row_groups(path, [cols.rule_set_id, heap], cache)
            uncompressed = sum(sizes) if sizes is not None else 4 * file.size
            groups = _with_groups(groups, footer.row_groups, ranges, cols.rule_set_id, heap)
        else:
            files.append(FilePlan(str(path), "csv", file.size,
                                  csv_row_estimate(path, CSV_SAMPLE, cache=cache),
                                  file.size <= CSV_SAMPLE))
            types = {cols.rule_set_id: BY_VALUES, cols.position_id: BY_VALUES}
            uncompressed, groups = CSV_ROW_COPIES * file.size, None
        if files[-1].rows:
            row_bytes = max(row_bytes, -(-uncompressed // files[-1].rows))
        id_types.append(types[cols.rule_set_id])
        pid_types.append(types[cols.position_id] if cols.position_id in columns else INT)
    id_type = _run_key_type(id_types)
    per_rule_set = None
    if groups is not None and id_type == INT and index["rule_set_id"].dtype == pl.Int64:
        valid = index.filter(pl.col("table").is_not_null())["rule_set_id"].sort()
        per_rule_set = dict(zip(map(str, valid.to_list()),
                                _largest_per_id(valid.to_numpy(), groups).tolist()))
    return PositionsPlan(
        files=tuple(files),
        rows=sum(f.rows for f in files),
        rows_exact=all(f.rows_exact for f in files),
        form=form,
        rule_set_id_type=id_type,
        position_id_type=_run_key_type(pid_types),
        largest_heap=heap_upper_bound(paths, heap, cache=cache),
        largest_heap_by_rule_set=per_rule_set,
        row_bytes=row_bytes,
    )


def _row_groups(path: Source, names: list[str], cache: RunCache
                ) -> tuple[list[int] | None, list[dict[str, tuple[int, int] | None]] | None]:
    """`footers.row_group_facts`, or (None, None) when the footer cannot be read again (the
    run's reader says what is wrong)."""
    try:
        return row_group_facts(path, names, cache=cache)
    except (pa.ArrowException, OSError, ValueError, SnimError):
        return None, None


INT64_MAX = 2**63 - 1


def _with_groups(groups: list[tuple[int, int, int]] | None, rows: tuple[int, ...],
                 ranges: list[dict[str, tuple[int, int] | None]] | None, ids: str, heap: str
                 ) -> list[tuple[int, int, int]] | None:
    """`groups` with a file's row groups (lowest and highest rule_set_id, largest heap) added;
    None once a row group with rows does not bound both."""
    if groups is None or ranges is None or len(ranges) != len(rows):
        return None
    for count, found in zip(rows, ranges):
        if not count:
            continue
        id_range, heap_range = found[ids], found[heap]
        if id_range is None or heap_range is None or max(*id_range, heap_range[1]) > INT64_MAX:
            return None  # uint64 past int64: text ids, or a heap the run rejects
        groups.append((*id_range, heap_range[1]))
    return groups


def _largest_per_id(ids: np.ndarray, groups: list[tuple[int, int, int]]) -> np.ndarray:
    """For each of the sorted `ids`, the largest heap of the groups whose id range holds it
    (-1: none does): the groups largest heap first, each id given its value once (the next
    id still without one found through `after`, with paths halved), so that wide ranges over
    many ids cost no more than narrow ones."""
    largest = np.full(ids.shape[0], -1, np.int64)
    after = list(range(ids.shape[0] + 1))  # the first id from here on without a value

    def first_open(i: int) -> int:
        while after[i] != i:
            after[i] = after[after[i]]
            i = after[i]
        return i

    for low, high, heap in sorted(groups, key=lambda group: -group[2]):
        end = int(np.searchsorted(ids, high, "right"))
        i = first_open(int(np.searchsorted(ids, low, "left")))
        while i < end:
            largest[i] = heap
            after[i] = i + 1
            i = first_open(i + 1)
    return largest


def _check_types(path: Source, schema: pa.Schema, config: Config, form: str) -> None:
    """Raise the run's InputError for a column of a type it refuses (a heaps column of
    floats, say), found as the run finds it: by normalising an empty frame of the file's
    schema."""
    try:
        empty = pl.from_arrow(as_read(schema, path).empty_table())
    except SnimError:
        raise
    except Exception:  # noqa: BLE001 - a type polars cannot take: its read will say so
        return
    assert isinstance(empty, pl.DataFrame)
    normalize.normalize_positions(empty, np.zeros(0, np.int64), str(path), config.columns,
                                  form, 0)


def _parquet_key_types(path: Source, schema: pa.Schema, largest: dict[str, int | None],
                       names: list[str]) -> dict[str, str | None]:
    """The key type each of `names` (those in the file) gets from this Parquet file's schema,
    as `keys.key_column` types it: INT for an integer column (a uint64 one only when its
    statistics bound it by 2^63-1, TEXT when they pass it), BY_VALUES for text, None for a
    column of nulls (no value to decide); another type is the run's InputError."""
    found: dict[str, str | None] = {}
    present = [name for name in names if name in schema.names]
    try:
        frame = pl.from_arrow(as_read(pa.schema([schema.field(n) for n in present]),
                                      path).empty_table())
    except SnimError:
        raise
    except Exception:  # noqa: BLE001 - a type polars cannot take: its read will say so
        return dict.fromkeys(present, BY_VALUES)
    assert isinstance(frame, pl.DataFrame)
    for name in present:
        dtype = frame.schema[name]
        if dtype == pl.Null:
            found[name] = None
        elif keys.always_integer(dtype):
            found[name] = INT
        elif dtype == pl.UInt64:
            bound = largest.get(name)
            found[name] = BY_VALUES if bound is None else INT if bound < 2**63 else TEXT
        elif dtype == pl.String or isinstance(dtype, (pl.Categorical, pl.Enum)):
            found[name] = BY_VALUES
        else:
            raise wrong_type(str(path), name, dtype, "integer or string")
    return found


def _run_key_type(types: list[str | None]) -> str:
    """A key column's type over every file: TEXT when one file makes it text, INT when every
    file's type makes it an integer, else BY_VALUES (the values decide)."""
    seen = {t for t in types if t is not None}
    if TEXT in seen:
        return TEXT
    return BY_VALUES if BY_VALUES in seen else INT


def _tables_plan(distinct: list[Rule], index: pl.DataFrame, positions: PositionsPlan,
                 config: Config) -> TablesPlan:
    """Each subtraction rule's table at most (`RulePlan`), and their sum against the run-wide
    limits, counted as `grundy.TableBudget` counts them: a value costs `Rule.value_ops`.
    Tables are presized as the run presizes them (`tables.TableCache.presize`): every one for
    the input's largest heap, when it is small and no limit stops a table on the way; else
    each grows to its own rule sets' largest heap, where the row groups say it."""
    t = config.tables
    valid = index.filter(pl.col("table").is_not_null())
    shared = dict(valid.group_by("table").len().iter_rows())
    largest = positions.largest_heap
    by_rule: dict[int, int] = {}
    if positions.largest_heap_by_rule_set is not None:
        for key, table in zip(valid["rule_set_id"].to_list(), valid["table"].to_list()):
            heap = positions.largest_heap_by_rule_set[str(key)]
            by_rule[table] = max(by_rule.get(table, -1), heap)

    periods = _proven_periods(distinct, t.max_table_len)

    def planned(bound: Callable[[int], int | None]) -> list[RulePlan]:
        rules = []
        for number, rule in enumerate(distinct):
            if rule.kind != "subtraction":
                continue
            heap = bound(number)
            own = {"max_table_len": t.max_table_len,
                   "max_rule_ops": rule.ops_len(t.max_rule_ops)}
            name = min(own, key=own.__getitem__)
            need = own[name] if heap is None else min(heap, MAX_HEAP - 1) + 1
            values = max(1, min(need, own[name]))
            stopped_by = f"tables.{name}" if heap is not None and need > own[name] else None
            pre, per = periods.get(number, (None, None))
            if per is not None and pre + per <= own[name]:  # the table stops at its period
                values, stopped_by = min(values, pre + per), None
            rules.append(RulePlan(rule.label, shared.get(number, 0), heap, values,
                                  (values - 1) * rule.value_ops, stopped_by, pre, per))
        return rules

    def run_wide(rules: list[RulePlan]) -> tuple[str, ...]:
        return tuple(f"tables.{name}" for name, total, limit in (
            ("max_total_values", sum(r.values for r in rules), t.max_total_values),
            ("max_run_ops", sum(r.ops for r in rules), t.max_run_ops)) if total > limit)

    rules = planned(lambda number: largest)
    presized = (largest is not None and 0 <= largest < PRESIZE_LIMIT
                and not any(r.stopped_by for r in rules) and not run_wide(rules))
    if not presized and by_rule:
        rules = planned(lambda number: by_rule.get(number, -1))
    binds = run_wide(rules)
    values = min(sum(r.values for r in rules), t.max_total_values)
    most_moves = max((len(rule.moves) for rule in distinct), default=0)
    width = 1 if most_moves < 2**8 - 1 else 2 if most_moves < 2**16 - 1 else 4
    return TablesPlan(
        largest_heap=largest,
        bounded=largest is not None,
        presized=presized,
        values=values,
        ops=min(sum(r.ops for r in rules), t.max_run_ops),
        probe_ops=t.period_probe_ops if any(r.period is None for r in rules) else 0,
        limits=dataclasses.asdict(t),
        binds=binds,
        stopped_by_own_limit=sum(r.stopped_by is not None for r in rules),
        value_bytes=values * width,
        rules=tuple(rules),
    )


def _proven_periods(distinct: list[Rule], cap: int) -> dict[int, tuple[int, int]]:
    """(preperiod, period) of each subtraction rule (by its number) whose period the kernel
    proves within an equal share of what is left of `PERIOD_PROBE_OPS`, cheapest rules
    first; rules it does not prove are left out."""
    order = sorted((rule.value_ops, number) for number, rule in enumerate(distinct)
                   if rule.kind == "subtraction")
    left, found = PERIOD_PROBE_OPS, {}
    for done, (value_ops, number) in enumerate(order):
        share = left // (len(order) - done)
        length = min(cap, distinct[number].ops_len(share))
        table = build_table(distinct[number], need_len=length, cap=max(length, 1))
        spent = length if table.period is None else table.table_len + max(distinct[number].moves)
        left -= (min(length, spent) - 1) * value_ops  # a proof sees its window repeat
        if table.period is not None:
            found[number] = (table.preperiod, table.period)
    return found


def _memory(positions: PositionsPlan, tables: TablesPlan, config: Config) -> MemoryPlan:
    """Estimated peak memory of the polars engine's run (see the model's constants)."""
    batches = (BATCHES_IN_FLIGHT * BATCH_COPIES * min(positions.rows, BATCH_ROWS)
               * positions.row_bytes)
    verdict = (VERDICT_BYTES + (TEXT_ID_BYTES if positions.position_id_type != INT else 0)
               + (TEXT_RULE_ID_BYTES if positions.rule_set_id_type != INT else 0)
               + (WINNING_MOVE_BYTES if config.winning_moves else 0))
    verdicts, table_bytes = positions.rows * verdict, 2 * tables.value_bytes
    limit = memory_limit(config)
    spill = _spill(positions, config.winning_moves, limit)
    scratch = 0
    if spill != "no":  # the verdicts held are capped by the setting; the rest go to scratch
        verdicts = min(verdicts, RUN_COPIES * (limit // HELD_SHARE))
        scratch = positions.rows * (RUN_ROW_BYTES + _id_bytes(positions)
                                    + (RUN_MOVE_BYTES if config.winning_moves else 0))
    return MemoryPlan(PROCESS_BYTES, batches, verdicts, table_bytes,
                      PROCESS_BYTES + batches + verdicts + table_bytes, limit, spill, scratch)


def _spill(positions: PositionsPlan, winning_moves: bool, limit: int) -> str:
    """Whether the run spills sorted runs under the memory setting `limit`: "yes", "no", or
    "near the setting" when the verdicts' bytes (which the engine measures as it holds them:
    `polars_engine._SortedRuns`) may fall on either side of its threshold. The threshold is
    a quarter of the setting for wide Parquet, whose rows are known, else an eighth. Long
    form's rows are no count of its positions (a position has one row or many): its verdicts
    are never surely past the threshold."""
    threshold = (limit // WHOLE_SHARE if positions.rows_exact and positions.form == "wide"
                 else limit // HELD_SHARE)
    moves = (2, 8) if winning_moves else (0, 0)
    text = positions.position_id_type != INT
    fewest = positions.rows if positions.form == "wide" else 0
    low = fewest * (HELD_ROW_BYTES[0] + (TEXT_VIEW_BYTES if text else 8) + moves[0])
    high = positions.rows * (HELD_ROW_BYTES[1] + (TEXT_VIEW_BYTES + _id_bytes(positions) if text
                                                  else 8) + moves[1])
    return "yes" if low > threshold else "no" if high <= threshold else "near the setting"


def _id_bytes(positions: PositionsPlan) -> int:
    """The most a position id takes as bytes: 8 for integers; text ids at most a row's bytes
    as read (`PositionsPlan.row_bytes`), for want of their own size."""
    return 8 if positions.position_id_type == INT else max(positions.row_bytes, 1)


def _with_key_types(output: OutputPlan, config: Config, positions: PositionsPlan,
                    index: pl.DataFrame) -> OutputPlan:
    """A Delta night whose keys are text for certain where the root's tables hold integers:
    refused, as the run's commit would refuse it after all its work, naming the first table
    it would. Certain: the verdicts' keys when a positions file's column makes them text (or
    no rule set id reads as an integer); the summary's rule_set_id when any rules row's does
    not (the summary lists every rule set, a rejected one's too)."""
    from pipeline.io.outputs.delta import text_keys_refused
    from pipeline.io.outputs.kinds import output_for

    rule_ids = index["rule_set_id"]
    text_rules = rule_ids.dtype == pl.String  # a rules key is not an integer: text for all
    verdicts = [key for key, certain in (
        ("rule_set_id", positions.rule_set_id_type == TEXT
         or text_rules and not rule_ids.str.contains(keys.CANONICAL_INT).any()),
        ("position_id", positions.position_id_type == TEXT)) if certain]
    text = {"verdicts": verdicts, "summary": ["rule_set_id"] if text_rules else []}
    if not any(text.values()):
        return output
    root = output_for(config.out, "delta", config.overwrite, config.storage_options,
                      lambda message: None, None).root
    refused = text_keys_refused(root, text)
    if refused is None:
        return output
    return dataclasses.replace(output, action="refused", problem=str(refused), refusal=refused)


def _output_plan(config: Config, run_date: date | None) -> OutputPlan:
    """What the run would find at its output, read only: the checks `Output.stage` makes
    before any work (`commit.target_state`, `remote_target.target_state`,
    `delta_tables.check_root`); an output they refuse is the plan's `problem`. A usage error
    of the options (--run-date without --format delta) is raised, as the run raises it."""
    from pipeline.io.outputs.commit import refuse_inside_delta_table
    from pipeline.io.outputs.failures import refuse_long_names, refuse_long_staging
    from pipeline.io.outputs.kinds import DeltaTables, ObjectStorePrefix, output_for
    from pipeline.io.outputs.remote_target import target_state as remote_state

    location, fmt, overwrite = str(config.out), config.output.format, config.overwrite
    night = (run_date or datetime.now(UTC).date()).isoformat() if fmt == "delta" else None
    if isinstance(config.out, Path):  # the names the run makes, checked first as it does
        try:
            refuse_long_names(config.out, "--out")
            refuse_long_staging(output_target(config.out),
                                "delta-staging" if fmt == "delta" else "partial")
        except UsageError as exc:
            return OutputPlan(location, fmt, overwrite, None, "refused", str(exc), night, exc)
    exists = (config.out.exists() or config.out.is_symlink()) if isinstance(config.out, Path) \
        else None
    try:
        output = output_for(config.out, fmt, overwrite, config.storage_options,
                            lambda message: None, run_date)
    except OutputError as exc:  # a Delta root the run refuses
        return OutputPlan(location, fmt, overwrite, exists, "refused", str(exc), night, exc)
    try:
        if isinstance(output, DeltaTables):
            from pipeline.io.outputs.delta_tables import RUNS, holds_night

            refused = (staging_refused(config.out, location)  # beside the root as named
                       if isinstance(config.out, Path) else None)
            if refused is not None:
                return OutputPlan(location, fmt, overwrite, exists, "refused", str(refused),
                                  night, refused)
            return OutputPlan(location, fmt, overwrite, output.root.exists(RUNS), "add night",
                              run_date=night, replaces_night=holds_night(
                                  output.root, date.fromisoformat(str(night))))
        if isinstance(output, ObjectStorePrefix):
            refuse_inside_delta_table(output.location, location)
            found = remote_state(output.location, overwrite).etag is not None
            return OutputPlan(location, fmt, overwrite, found, "replace" if found else "create")
        assert isinstance(config.out, Path)
        location, state = target_state(config.out, overwrite)
    except (OutputError, UsageError) as exc:  # the usage error: an --out in a Delta table
        return OutputPlan(location, fmt, overwrite, exists, "refused", str(exc), refusal=exc)
    refused = staging_refused(output_target(config.out), location)
    if refused is not None:  # where the run cannot write (beside a link's target, as it does)
        return OutputPlan(location, fmt, overwrite, state != "missing", "refused", str(refused),
                          refusal=refused)
    action = {"missing": "create", "empty": "fill", "output": "replace"}[state]
    return OutputPlan(location, fmt, overwrite, state != "missing", action)
