"""The orchestrator: `run_job(config) -> RunResult`, the one job skeleton for every engine.

rules -> SG tables -> positions (the engine) -> summary and sg_tables -> outputs -> manifest,
all inside a staging directory that replaces the output atomically at the end. It never
prints or exits; its caller's `on_event` hears about phases, progress and warnings
(`pipeline.events`), and errors are SnimError subclasses.
"""

from __future__ import annotations

import logging
import platform
import secrets
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import polars as pl

from pipeline import __version__, keys
from pipeline.batches import positions_form, read_rules
from pipeline.config import Config
from pipeline.engines import Engine, PositionsJob, RejectsPastTolerance, load_engine
from pipeline.errors import (
    EXIT_OK,
    EXIT_REJECTS,
    BadRowsError,
    InputError,
    ReconcileError,
    SnimError,
    truncated,
)
from pipeline.events import WARNING, OnEvent, RunEvent, tell_after_commit
from pipeline.io.inputs.changes import describe_before_reading, ensure_unchanged
from pipeline.io.inputs.discovery import resolve_inputs
from pipeline.io.outputs import commit
from pipeline.io.outputs.kinds import output_for
from pipeline.io.outputs.manifest import MANIFEST_SCHEMA_VERSION
from pipeline.io.read.files import InputFile
from pipeline.io.read.source_rows import counted_at_once, reconcile, rows_in_source
from pipeline.io.store.run_cache import RunCache
from pipeline.tables import table_cache
from pipeline.transforms import normalize, outputs, schema

log = logging.getLogger(__name__)

Phase = Callable[[str], AbstractContextManager[None]]
PROBLEMS_SHOWN = 10  # rejects named in the result (the CLI prints some of them)


@dataclass(frozen=True)
class RunResult:
    out: Path | str  # a local directory, or an object-store URL
    exit_code: int
    manifest: dict[str, Any]
    problems: list[str]
    warnings: list[str] = field(default_factory=list)
    """What the user should know though the run succeeded (an old output kept aside)."""
    rejects: str = ""
    """Where the rejects are, as the output's kind says (`Output.table`)."""
    tolerated: str = ""
    """For a run whose rejects are within the tolerance (exit 0): what the CLI says of them,
    "N rows rejected (within --max-rejected-rows M); see TABLE"; else empty."""


@dataclass(frozen=True)
class JobOutcome:
    """What the skeleton reports for the manifest once every output but it is written."""

    inputs: dict[str, list[dict[str, Any]]]
    counts: dict[str, dict[str, int]]
    form: str
    problems: list[str]

    by_reason_code: dict[str, int] = field(default_factory=dict)
    first_reject: dict[str, Any] | None = None
    """The first rejected row's source, row and column (in rejects' order), if any."""

    @property
    def rejected(self) -> int:
        return self.counts["rules"]["rows_rejected"] + self.counts["positions"]["rows_rejected"]

    @property
    def tolerance(self) -> RejectTolerance:
        return RejectTolerance.of(self.counts)


@dataclass(frozen=True)
class RejectTolerance:
    """The rejected rows against `max_rejected_rows` and `max_rejected_rate`
    (docs/operations.md, Reject policy): a run is over its tolerance when it exceeds either one
    given; with neither, any rejected row is over it (a tolerance of 0 rows). `rate` is the
    rejected rows (rules and positions) as a fraction of the input rows read (rules and
    positions)."""

    rows: int
    rate: float

    @classmethod
    def of(cls, counts: dict[str, dict[str, int]]) -> RejectTolerance:
        rejected = counts["rules"]["rows_rejected"] + counts["positions"]["rows_rejected"]
        read = counts["rules"]["rows_read"] + counts["positions"]["rows_read"]
        return cls(rejected, rejected / read if read else 0.0)

    def exceeded(self, config: Config) -> bool:
        rows, rate = config.max_rejected_rows, config.max_rejected_rate
        if rows is None and rate is None:
            return self.rows > 0
        return ((rows is not None and self.rows > rows)
                or (rate is not None and self.rate > rate))

    @staticmethod
    def limits(config: Config) -> str:
        """The tolerance as the options name it ("--max-rejected-rows 5 and ...")."""
        given = [f"--max-rejected-rows {config.max_rejected_rows}"
                 if config.max_rejected_rows is not None else "",
                 f"--max-rejected-rate {config.max_rejected_rate:g}"
                 if config.max_rejected_rate is not None else ""]
        return " and ".join(g for g in given if g)

    def decision(self, config: Config) -> str:
        """"none" (no row rejected), "within_tolerance" (exit 0) or "over_tolerance"."""
        if not self.rows:
            return "none"
        return "over_tolerance" if self.exceeded(config) else "within_tolerance"

    def manifest(self, config: Config, by_code: dict[str, int]) -> dict[str, Any]:
        """The manifest's `rejects`: counts (per `reason_code`), the policy, the decision."""
        return {"rows": self.rows, "rate": self.rate, "by_reason_code": by_code,
                "policy": {"on_bad_rows": config.on_bad_rows,
                           "max_rejected_rows": config.max_rejected_rows,
                           "max_rejected_rate": config.max_rejected_rate},
                "decision": self.decision(config)}


def run_job(config: Config, on_event: OnEvent | None = None, run_date: date | None = None
            ) -> RunResult:
    """Run the batch job and commit its output whole, whatever its kind (`io.outputs.Output`,
    chosen by `output_for` from the settings; `run_date` is the night a table output
    replaces, default today in UTC).

    Raises SnimError subclasses for user-caused failures; nothing is written then.
    `on_event` hears each phase start and end, progress within a phase, and each warning as
    it arises (an old output kept aside, and where), so that the user learns where their
    files are even when the run then fails; RunResult.warnings lists the warnings too.
    """
    warnings: list[str] = []

    def tell(event: RunEvent) -> None:
        if event.kind == WARNING:
            warnings.append(event.message)
        if on_event:
            on_event(event)

    output = output_for(config.out, config.output.format, config.overwrite,
                        config.storage_options, tell, run_date)
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)
    started = _now()
    timings: dict[str, float] = {}

    @contextmanager
    def phase(name: str) -> Iterator[None]:
        tell(RunEvent.phase_start(name))
        t0 = time.perf_counter()
        yield
        timings[name] = round(time.perf_counter() - t0, 4)
        tell(RunEvent.phase_done(name, timings[name]))

    engine = load_engine(config.engine)
    log.info("run %s: engine %s, output %s", run_id, engine.name, config.out)
    try:
        staging = output.stage(run_id)
        read_cache = RunCache(whole_objects=engine.keeps_whole_objects)
        with read_cache, engine.open_inputs(config):
            outcome = execute(config, engine, staging, phase, tell, read_cache)
            tolerance = outcome.tolerance
            over = tolerance.exceeded(config)
            if over and config.on_bad_rows == "fail":
                beyond = tolerance.limits(config)
                first = outcome.first_reject or {}
                raise BadRowsError(f"{outcome.rejected} input rows failed validation "
                                   f"(--on-bad-rows fail{', over ' + beyond if beyond else ''})",
                                   outcome.problems, outcome.rejected, written=False,
                                   path=first.get("source"), row=first.get("row"),
                                   column=first.get("column"))
            exit_code = EXIT_REJECTS if over else EXIT_OK
            manifest = {
                "schema_version": MANIFEST_SCHEMA_VERSION,
                "run_id": run_id,
                "started_at": started,
                "finished_at": _now(),
                "status": "completed_with_rejects" if outcome.rejected else "ok",
                "exit_code": exit_code,
                "engine": config.engine,
                "positions_form": outcome.form,
                "versions": _versions(),
                "config": config.as_dict(),
                "config_file": None if config.config_file is None else str(config.config_file),
                "inputs": outcome.inputs,
                "counts": outcome.counts,
                "reconciled": _reconciled(outcome.counts),
                "rejects": tolerance.manifest(config, outcome.by_reason_code),
                "timings_s": timings,
            }
        # the inputs and the engine are let go first: once the output is committed, nothing
        # is left that could fail the run (and make it say that nothing was written)
        tell(RunEvent.phase_start("commit"))  # not in timings_s: the manifest is written in it
        t0 = time.perf_counter()
        manifest.update(output.commit(manifest))
    except BaseException as error:
        output.roll_back(error)
        raise
    tell_after_commit(tell, RunEvent.phase_done("commit", round(time.perf_counter() - t0, 4)))
    table = output.table("rejects", manifest)
    tolerated = (f"{tolerance.rows} rows rejected (within {tolerance.limits(config)}); see "
                 f"{table}" if tolerance.rows and not over else "")
    return RunResult(config.out, exit_code, manifest, outcome.problems, warnings, table,
                     tolerated)


def execute(config: Config, engine: Engine, staging: Path, phase: Phase, on_event: OnEvent,
            read_cache: RunCache | None = None) -> JobOutcome:
    """Every step of the job and every output but the manifest, written into `staging`
    (under --on-bad-rows fail with rejected rows, nothing is written); every read of an
    input goes through the run's `read_cache`, if given."""
    def warn(text: str) -> None:  # what a listing of the inputs skipped that holds rows
        on_event(RunEvent.warning(text))

    with phase("rules"):
        rules, rule_files, rule_rows = read_rules(config, cache=read_cache, on_warning=warn)
        ensure_unchanged(rule_files)  # read whole: a later edit cannot reach this run
        rule_counts = reconcile(rule_files, [rows_in_source(f, cache=read_cache)
                                             for f in rule_files], rule_rows, "rules")
        distinct, index = normalize.rule_index(rules)
        paths = resolve_inputs(config.positions, "positions", config.out,
                               config.storage_options, on_warning=warn)
        files = describe_before_reading(paths, cache=read_cache)  # before a byte is read
        with _changed_is_the_error(files):
            form = positions_form(paths, config, cache=read_cache)
        log.info("%d rule rows, %d distinct rules; %d positions files in %s form",
                 rules.height, len(distinct), len(paths), form)
    with phase("tables"), _changed_is_the_error(files):
        cache = table_cache(distinct, config, paths, form, read_cache=read_cache)
    described = _checksums(files, read_cache)
    rule_rejects = schema.with_input_column_names(outputs.reject_rows(rules, "rules"),
                                                  config.columns, form)
    job = PositionsJob(config, paths, form, index, cache, staging, on_event,
                       read_cache=read_cache,
                       stop_past_rejects=_stop_past_rejects(config, rule_rejects.height))
    with ExitStack() as evaluation_lasts:
        with phase("positions"), _changed_is_the_error(files):
            try:
                evaluation = evaluation_lasts.enter_context(engine.evaluate(job))
            except RejectsPastTolerance as stop:
                raise _stopped_past_tolerance(config, rule_rejects, stop) from None
        with phase("finish"):
            verdict_counts, rejected_by_rule = evaluation.counts()
            summary = outputs.summary_rows(index, verdict_counts, rejected_by_rule)
            first_rows = list(evaluation.first_rejects(rule_rejects, PROBLEMS_SHOWN)
                              .iter_rows(named=True))
            problems = [problem_text(row) for row in first_rows]
            w = int(verdict_counts["W"].sum())
            verdicts = w + int(verdict_counts["L"].sum())
            counts = manifest_counts(rules.height, rule_rejects.height, evaluation.rows_read,
                                     evaluation.rows_rejected, verdicts, w)
            rows_per_file = evaluation.rows_per_file
            if not evaluation.rows_read:  # a night's export that came out empty, perhaps
                what = ("its file is" if len(paths) == 1
                        else f"each of its {len(paths)} files is")
                on_event(RunEvent.warning(
                    f"the positions input has no rows ({what} a header or an empty table): "
                    "the output holds no verdicts"))
            if form == "wide":
                _every_row_evaluated_or_rejected(evaluation.rows_read, verdicts,
                                                 evaluation.rows_rejected)
        outcome = JobOutcome({}, counts, form, problems, first_reject=(
            {k: first_rows[0][k] for k in ("source", "row", "column")} if first_rows else None))
        if config.on_bad_rows == "fail" and outcome.tolerance.exceeded(config):
            return outcome  # nothing is written: no manifest, no checksum to wait for
        with phase("write"):
            evaluation.write(rule_rejects, staging)
            if not verdicts:
                _keys_typed_without_rows(staging / "verdicts.parquet", index)
            # after the verdicts: the period probe (`report_meanwhile`) runs while they are written
            sg_tables = outputs.sg_table_rows(rules, distinct, cache.reported(), index,
                                              outputs.run_key_type(index, verdict_counts))
            commit.write_parquet(sg_tables, staging / "sg_tables.parquet")
            commit.write_parquet(summary, staging / "summary.parquet")
        outcome = replace(outcome, by_reason_code=counts_by_reason_code(
            staging / "rejects.parquet") if outcome.rejected else {})
    positions, in_source = zip(*[f.result() for f in described]) if described else ((), ())
    ensure_unchanged(list(positions))  # every row has been read
    position_counts = reconcile(positions, in_source, rows_per_file, "positions")
    return replace(outcome, inputs={
        "rules": [{**f.as_dict(), **n} for f, n in zip(rule_files, rule_counts)],
        "positions": [{**f.as_dict(), **n} for f, n in zip(positions, position_counts)]})


def _stop_past_rejects(config: Config, rule_rejects: int) -> int | None:
    """The rejected position rows past which a fail run is over its tolerance whatever it
    reads on: under --on-bad-rows fail with --max-rejected-rows (less the rules' rejects), or
    with no tolerance (any row); None otherwise (a rate needs every row read)."""
    if config.on_bad_rows != "fail":
        return None
    if config.max_rejected_rows is not None:
        return config.max_rejected_rows - rule_rejects
    return None if config.max_rejected_rate is not None else -rule_rejects


def rules_past_tolerance(config: Config, rules: pl.DataFrame, form: str
                         ) -> BadRowsError | None:
    """The error a fail run stops with once its rules' rejected rows alone are over its
    tolerance, whatever the positions hold (`explain` says it before any work), or None."""
    rule_rejects = schema.with_input_column_names(outputs.reject_rows(rules, "rules"),
                                                  config.columns, form)
    stop = _stop_past_rejects(config, rule_rejects.height)
    if stop is None or stop >= 0:
        return None
    first = outputs.sort_rejects(rule_rejects).head(PROBLEMS_SHOWN)
    rows = list(first.iter_rows(named=True))
    beyond = RejectTolerance.limits(config)
    return BadRowsError(
        f"at least {rule_rejects.height} input rows failed validation (--on-bad-rows fail"
        f"{', over ' + beyond if beyond else ''}; the rules' alone, whatever the positions "
        "hold)", [problem_text(row) for row in rows], rule_rejects.height, complete=False,
        written=False, path=rows[0]["source"], row=rows[0]["row"], column=rows[0]["column"])


def _stopped_past_tolerance(config: Config, rule_rejects: pl.DataFrame,
                            stop: RejectsPastTolerance) -> BadRowsError:
    """The error of a fail run whose engine stopped reading past its tolerance: the rows
    rejected until then, the first of those found."""
    first = outputs.sort_rejects(pl.concat([rule_rejects, stop.found])).head(PROBLEMS_SHOWN)
    rows = list(first.iter_rows(named=True))
    beyond = RejectTolerance.limits(config)
    return BadRowsError(
        f"at least {rule_rejects.height + stop.rows} input rows failed validation "
        f"(--on-bad-rows fail{', over ' + beyond if beyond else ''}; the run stopped reading "
        "there)", [problem_text(row) for row in rows], rule_rejects.height + stop.rows,
        complete=False, written=False, path=rows[0]["source"], row=rows[0]["row"],
        column=rows[0]["column"])


def _keys_typed_without_rows(verdicts: Path, index: pl.DataFrame) -> None:
    """Verdicts of no row (an empty night, every row rejected) have keys no row typed: their
    rule_set_id is text when no rule's id reads as an integer, as every verdict of these
    rules would have it (and summary and sg_tables do), so that the night reads together
    with the nights that had verdicts. position_id stays Int64: nothing tells its type (a
    Parquet column of text holds integers as often as not)."""
    ids = index["rule_set_id"]
    if ids.dtype == pl.String and not ids.str.contains(keys.CANONICAL_INT).any():
        commit.empty_with_text_keys(verdicts, ["rule_set_id"])


def counts_by_reason_code(rejects: Path) -> dict[str, int]:
    """Rejected rows per `reason_code` (most first, then by code), read back from the staged
    rejects table: a file, or a directory of part files (the Spark engine's)."""
    files = sorted(rejects.glob("*.parquet")) if rejects.is_dir() else [rejects]
    if not files:
        return {}
    counts = (pl.scan_parquet(files, glob=False).group_by("reason_code").len("rows")
              .sort(["rows", "reason_code"], descending=[True, False]).collect())
    return {code: rows for code, rows in counts.iter_rows()}


def _every_row_evaluated_or_rejected(rows_read: int, verdicts: int, rejected: int) -> None:
    """Wide form: every position row read is one verdict or one rejected row."""
    if verdicts + rejected != rows_read:
        raise ReconcileError(
            f"positions: the run read {rows_read:,} rows but has {verdicts:,} verdicts and "
            f"{rejected:,} rejected rows", None, rows_read, verdicts + rejected,
            written=False)


def _checksums(files: list[InputFile], cache: RunCache | None
               ) -> list[Future[tuple[InputFile, int | None]]]:
    """The positions files (described before any was read) with their checksums and the
    rows they hold (`source_rows`) found by a background thread while the engine reads them
    (the page cache serves both)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checksum")
    described = []
    for file in files:
        if counted_at_once(file, cache=cache):  # before the reader lets go of what is kept
            described.append(Future())
            described[-1].set_result((file, rows_in_source(file, cache=cache)))
        else:
            described.append(pool.submit(_checksummed, file, cache))
    pool.shutdown(wait=False)
    return described


@contextmanager
def _changed_is_the_error(files: list[InputFile]) -> Iterator[None]:
    """An input that fails to read because it changed while the run read it (an exporter
    rewriting it in place: a Parquet file cut short reads as corrupt, a CSV file as empty)
    is reported as changed, with the hint to rerun, rather than by the symptom."""
    try:
        yield
    except InputError as error:
        try:
            ensure_unchanged([f for f in files if str(f.path) == error.path])
        except InputError:
            raise
        except SnimError:  # the store cannot say now (refused, unreachable): the read's error
            raise error from None
        raise


def _checksummed(file: InputFile, cache: RunCache | None) -> tuple[InputFile, int | None]:
    file.sha256  # noqa: B018 - computes and caches it
    return file, rows_in_source(file, cache=cache)


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


def _reconciled(counts: dict[str, dict[str, int]]) -> bool:
    pos, rules = counts["positions"], counts["rules"]
    return (pos["rows_read"] == pos["rows_evaluated"] + pos["rows_rejected"]
            and rules["rows_read"] == rules["rows_accepted"] + rules["rows_rejected"])


def problem_text(row: dict[str, Any]) -> str:
    """One rejects row as a line for the terminal: file, row, column, reason."""
    column = f", column {truncated(row['column'])}" if row["column"] else ""
    return f"{row['source']} row {row['row']}{column}: {row['reason']}"


def _versions() -> dict[str, str]:
    versions = {"snim-batch": __version__, "python": platform.python_version()}
    for dist in ("polars", "pyarrow", "numpy", "typer", "pyspark"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return versions


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
