"""Where the Delta tables of `--format delta` live and what is read from them: the table
root (`TableRoot`, `table_root`), the refusals before a run writes to it (`check_root`), the
run's local staging directory, deltalake's errors worded as one line (`table_failure`), the
runs table's row (`run_row`, rebuilt as a manifest by `latest_night`), and the readers of
`report` and `history` (the runs table, its commit log, a night's rows).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from deltalake.fs import DeltaStorageHandler

from pipeline.errors import InputError, OutputError, UsageError, WriteFailure, truncated
from pipeline.events import OnEvent, ignore
from pipeline.io.outputs.commit import (
    kept_fresh,
    missing_directories,
    refuse_inside_delta_table,
    refuse_inside_snim_output,
    remove_dead_staging,
    remove_if_empty,
)
from pipeline.io.outputs.failures import (
    failure,
    local_staging_failure,
    refuse_long_names,
    refuse_long_staging,
    remove_staging,
    unwritable,
    write_cause,
)
from pipeline.io.outputs.manifest import MANIFEST
from pipeline.io.outputs.remote_target import refuse_inside_remote_output
from pipeline.io.store import object_store
from pipeline.io.store.locations import Location

_URL_PARTS = re.compile(r"%[0-9A-Fa-f]{2}|[#?]")
"""What deltalake reads as a URL's in a local path: an escape (`d%20x` decoded: its commits go
to `d x`), a fragment or a query (`h#x`: its commit log reads as empty, no run in history)."""

DATA_TABLES = ("verdicts", "rejects", "summary", "sg_tables")
RUNS = "runs"
PARTITION = "run_date"
METADATA_KEY = "snim_batch"  # the commit-info key under which a run's commits describe it
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_ARROWS = re.compile(r"\x1b\[[0-9;]*m|\u21b3")  # the colours and arrows of deltalake's causes
_CAUSE_BREAKS = re.compile(r"\\n(?=\s|$)")
_RETRIES = re.compile(r"after \d+ retries, max_retries \d+, retry_timeout \S+")
_DATA_FILE = re.compile(rf"{PARTITION}=\d{{4}}-\d{{2}}-\d{{2}}/part-[\w-]+\.zstd\.parquet")
_STAGING = re.compile(r"snim-batch-delta-(\d+)-.*")  # a remote root's local staging


@dataclass(frozen=True)
class TableRoot:
    """Where the Delta tables live: a local directory or a URL, and the options deltalake
    needs to reach it (credentials, endpoint; None for local paths and the environment's).
    `seen` holds each table's version (None: no table yet) at the run's first `check_root`,
    so that the commit can tell whether another run committed meanwhile."""

    uri: str
    storage_options: dict[str, str] | None = None
    seen: dict[str, int | None] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_local(self) -> bool:
        return _URL.match(self.uri) is None or self.uri.startswith("file://")

    def table(self, name: str) -> str:
        return f"{self.uri.rstrip('/')}/{name}"

    def exists(self, name: str) -> bool:
        return DeltaTable.is_deltatable(self.table(name), self.storage_options)

    def open(self, name: str, version: int | None = None) -> DeltaTable:
        return DeltaTable(self.table(name), version=version,
                          storage_options=self.storage_options)

    def read(self, name: str, version: int | None = None, nights: list[date] | None = None,
             columns: list[str] | None = None) -> pl.DataFrame:
        """Table `name` (at `version`; only the partitions of `nights`, only `columns`) read
        through deltalake: polars' own Delta reader cannot open a local root whose path
        holds a space or a non-ASCII letter (the tables' file URIs are percent-encoded)."""
        filters = None if nights is None else pc.field(PARTITION).isin(
            pa.array(nights, pa.date32()))
        return pl.DataFrame(self.open(name, version).to_pyarrow_table(filters=filters,
                                                                     columns=columns))

    def night_dataset(self, name: str, night: date) -> ds.Dataset:
        """Table `name`'s rows of one night as a dataset, to be read a record batch at a
        time (a bad night's rejects can be tens of millions of rows)."""
        return self.open(name).to_pyarrow_dataset().filter(
            pc.field(PARTITION) == pa.scalar(night, pa.date32()))


def table_root(out: Path | str, configured: Mapping[str, str] | None = None) -> TableRoot:
    """The table root `out` names: a local directory, or an object-store URL with the client
    options (credentials, endpoint, timeouts) every other object-store client of a run gets."""
    if isinstance(out, Path):
        return TableRoot(str(out))
    location = object_store.with_client_options(Location.parse(out, Path.cwd()), configured)
    if not location.is_remote:
        return TableRoot(str(location.path))
    if location.scheme == "hdfs":
        raise UsageError(f"{out}: Delta tables are written to local paths, s3://, gs:// and "
                         "az:// roots, not hdfs://")
    return TableRoot(object_store.client_url(location), dict(location.options))


def _refuse_unwritable(path: Path) -> None:
    """A local root (and its tables' directories and logs) that the run could not write in,
    a read-only mount or another user's, refused before any work: the run found out at its
    first data file, and `explain` never."""
    for directory in (path, *(path / name / sub for name in (*DATA_TABLES, RUNS)
                              for sub in ("", "_delta_log"))):
        cause = unwritable(directory) if directory.is_dir() else None
        if cause is not None:
            raise failure(str(path), f"writing in {directory}", cause, False)


def check_root(root: TableRoot) -> None:
    """Refuse a root that is not (or cannot become) a snim-batch table root: a file, a
    Parquet output of snim-batch, or a table directory (or prefix) that is not a Delta table
    partitioned by run_date. Checked before any work and again right before the first
    commit; the first check notes each table's version (`TableRoot.seen`)."""
    if root.is_local:
        path = Path(root.uri.removeprefix("file://"))
        refuse_url_parts(root)
        refuse_inside_delta_table(path, root.uri)
        refuse_inside_snim_output(path, root.uri)
        refuse_long_names(path, "--out")
        if path.exists() and not path.is_dir():
            raise OutputError(f"{root.uri}: exists and is not a directory; a Delta table root "
                              "is a directory", path=root.uri)
        if (path / MANIFEST).exists():
            raise _parquet_output(root)
        for name in (*DATA_TABLES, RUNS):
            table = path / name
            if table.is_dir() and not root.exists(name) and _foreign(
                    [str(f.relative_to(table)) for f in table.rglob("*") if not f.is_dir()]):
                raise _foreign_table(root, name)
        _refuse_unwritable(path)
    for name in (*DATA_TABLES, RUNS):
        try:
            if not root.exists(name):
                root.seen.setdefault(name, None)
                continue
            table = root.open(name)
            partitions = table.metadata().partition_columns
            root.seen.setdefault(name, table.version())
            if name == RUNS:
                foreign = _foreign_runs(table)
                if foreign is not None:
                    raise OutputError(f"{root.table(name)}: {foreign}; refusing to write "
                                      "there", path=root.table(name), written=False)
        except (DeltaError, OSError) as exc:
            raise OutputError(table_failure(root, root.table(name), exc,
                                            "reading the Delta table",
                                            "cannot read the Delta table"),
                              path=root.table(name)) from None
        if list(partitions) != [PARTITION]:
            raise OutputError(f"{root.table(name)}: a Delta table partitioned by "
                              f"{list(partitions) or 'nothing'}, not by {PARTITION}; not a "
                              "snim-batch table", path=root.table(name))
    if not root.is_local:
        _check_remote(root)
        location = replace(Location.parse(root.uri, Path.cwd()),
                           options=tuple(sorted((root.storage_options or {}).items())))
        refuse_inside_delta_table(location, root.uri)
        refuse_inside_remote_output(location)


def _check_remote(root: TableRoot) -> None:
    """The refusals of a local root, on an object store: a snim-batch Parquet output (its
    manifest), a table's prefix holding objects but no Delta log (someone's files)."""
    files = pafs.PyFileSystem(DeltaStorageHandler(root.uri, root.storage_options))
    try:
        if files.get_file_info(MANIFEST).type != pafs.FileType.NotFound:
            raise _parquet_output(root)
        for name in (*DATA_TABLES, RUNS):
            if not root.exists(name) and _foreign(
                    [info.path.removeprefix(f"{name}/") for info in files.get_file_info(
                        pafs.FileSelector(name, allow_not_found=True, recursive=True))
                     if info.type == pafs.FileType.File]):
                raise _foreign_table(root, name)
    except (DeltaError, OSError) as exc:
        raise OutputError(table_failure(root, root.uri, exc, "listing the table root",
                                        "cannot list the table root"), path=root.uri) from None


def _foreign(files: list[str]) -> bool:
    """Whether a table's directory that is not a Delta table holds files (relative paths)
    other than the data files of a run killed before its table's first commit."""
    return any(_DATA_FILE.fullmatch(name) is None for name in files)


def _parquet_output(root: TableRoot) -> OutputError:
    return OutputError(f"{root.uri}: is a Parquet output of snim-batch ({MANIFEST}); "
                       "--format delta needs a table root of its own (another --out)",
                       path=root.uri)


def _foreign_table(root: TableRoot, name: str) -> OutputError:
    return OutputError(f"{root.table(name)}: exists and is not a Delta table; refusing to "
                       "write into it", path=root.table(name))


def table_failure(root: TableRoot, uri: str, exc: BaseException, doing: str, what: str) -> str:
    """A deltalake error at `uri` as one line: what the store's failure was when its full
    text says (no connection, no answer, refused credentials, missing bucket: worded as for
    every other object-store client), else `what` and the error's first line."""
    if not root.is_local:
        text = _RETRIES.sub("", " ".join(_ARROWS.sub(" ", str(exc)).split()))
        options = tuple(sorted((root.storage_options or {}).items()))
        location = replace(Location.parse(uri, Path.cwd()), options=options)
        problem = object_store.store_problem(location, OSError(text), doing)
        if isinstance(problem, object_store.StoreError) or "bucket" in str(problem or ""):
            return str(problem)
    return f"{uri}: {what} ({object_store.redacted(delta_cause(exc), root.storage_options)})"


def delta_cause(exc: BaseException) -> str:
    """A deltalake error's first line as one line of text: its causes, which it writes after
    escaped line breaks (a backslash and an n, then spaces and a coloured arrow), joined by
    colons. What follows a real line break (a Rust backtrace under RUST_BACKTRACE) is left
    out."""
    first = (str(exc).strip().splitlines() or [""])[0]
    causes = _CAUSE_BREAKS.split(_ARROWS.sub(" ", first))
    return truncated(": ".join(" ".join(c.split()) for c in causes if c.strip())
                     or type(exc).__name__, 300)


@contextmanager
def staging_directory(root: TableRoot, run_id: str, on_event: OnEvent = ignore
                      ) -> Iterator[Path]:
    """A local directory for the run's staged Parquet tables (and the engine's scratch),
    removed at the end: beside a local root (same file system, so a Spark cluster that
    shares the root shares it), else in the system's temporary directory. Its name holds
    the process id: staging directories of killed runs (their process gone) are removed
    first."""
    if root.is_local:
        target = Path(root.uri.removeprefix("file://")).absolute()
        if not target.name:
            raise OutputError(f"{root.uri}: the root directory cannot be a table root",
                              path=root.uri)
        refuse_long_staging(target, "delta-staging", len(run_id))
        _remove_stale(target)
        staging = target.parent / f".{target.name}.delta-staging-{os.getpid()}-{run_id}"
    else:
        temporary = Path(tempfile.gettempdir())
        remove_dead_staging(temporary, _STAGING)
        staging = temporary / f"snim-batch-delta-{os.getpid()}-{run_id}"
    created = missing_directories(staging.parent)  # a new root's parents
    try:
        try:
            staging.mkdir(mode=0o777 if root.is_local else 0o700, parents=True)
        except OSError as exc:
            raise _staging_failure(root, staging, f"creating the staging directory {staging}",
                                   *write_cause(exc)) from None
        with kept_fresh(staging):
            yield staging
    except WriteFailure as exc:  # a staged table: the message names the root, as others do
        raise _staging_failure(root, staging, exc.doing, exc.cause, exc.no_space) from None
    finally:
        remove_staging(staging, on_event)
        remove_if_empty(created)  # kept once they hold the committed root


def _staging_failure(root: TableRoot, staging: Path, doing: str, cause: str, no_space: bool
                     ) -> OutputError:
    """A failure in the staging directory, named by the root; for a root in a store, the
    staging is in the local temporary directory, whose disk is what failed."""
    if root.is_local:
        return failure(root.uri, doing, cause, no_space)
    return local_staging_failure(root.uri, staging.parent, doing, cause, no_space)


def _remove_stale(target: Path) -> None:
    """What killed runs left: their staging directories beside the root, and the room a run
    holds in the root until its commits (`commit_room`): 8 MiB a disk may need back."""
    remove_dead_staging(target.parent,
                        re.compile(rf"\.{re.escape(target.name)}\.delta-staging-(\d+)-.*"))
    remove_dead_staging(target, _ROOM)


_ROOM = re.compile(r"\.snim-commit-room-(\d+)")


def commit_room(root: TableRoot) -> Path:
    """Where a run holds room for its commits in a local root (delta.publish)."""
    return Path(root.uri.removeprefix("file://")) / f".snim-commit-room-{os.getpid()}"


def run_row(manifest: dict[str, Any], run_date: date, versions: dict[str, int]) -> pa.Table:
    """The runs table's row for one run: the manifest, flattened where a query needs it
    (counts, W rate, times, the data tables' versions), the rest as JSON text."""
    pos, rules = manifest["counts"]["positions"], manifest["counts"]["rules"]
    row: dict[str, Any] = {
        PARTITION: run_date,
        "run_id": manifest["run_id"],
        "started_at": datetime.fromisoformat(manifest["started_at"]),
        "finished_at": datetime.fromisoformat(manifest["finished_at"]),
        "status": manifest["status"],
        "exit_code": manifest["exit_code"],
        "engine": manifest["engine"],
        "positions_form": manifest["positions_form"],
        "snim_batch_version": manifest["versions"]["snim-batch"],
        "rules_rows_read": rules["rows_read"],
        "rules_rows_rejected": rules["rows_rejected"],
        "positions_rows_read": pos["rows_read"],
        "positions_rows_evaluated": pos["rows_evaluated"],
        "positions_rows_rejected": pos["rows_rejected"],
        "verdicts": pos["verdicts"],
        "W": pos["W"],
        "L": pos["L"],
        "w_rate": pos["W"] / pos["verdicts"] if pos["verdicts"] else None,
        "reconciled": manifest["reconciled"],
        **{f"{name}_version": versions[name] for name in DATA_TABLES},
        "input_files": json.dumps(manifest["inputs"]),
        "config": json.dumps(manifest["config"]),
        "versions": json.dumps(manifest["versions"]),
        "timings_s": json.dumps(manifest["timings_s"]),
        "rejects": json.dumps(manifest["rejects"]) if "rejects" in manifest else None,
    }
    return pa.Table.from_pylist([row], schema=_RUNS_SCHEMA)


_RUNS_SCHEMA = pa.schema(
    [(PARTITION, pa.date32()), ("run_id", pa.string()),
     ("started_at", pa.timestamp("us", "UTC")), ("finished_at", pa.timestamp("us", "UTC")),
     ("status", pa.string()), ("exit_code", pa.int64()), ("engine", pa.string()),
     ("positions_form", pa.string()), ("snim_batch_version", pa.string()),
     *[(c, pa.int64()) for c in ("rules_rows_read", "rules_rows_rejected",
                                 "positions_rows_read", "positions_rows_evaluated",
                                 "positions_rows_rejected", "verdicts", "W", "L")],
     ("w_rate", pa.float64()), ("reconciled", pa.bool_()),
     *[(f"{name}_version", pa.int64()) for name in DATA_TABLES],
     *[(c, pa.string()) for c in ("input_files", "config", "versions", "timings_s",
                                  "rejects")]])


def refuse_url_parts(root: TableRoot) -> None:
    """A UsageError for a local root whose path deltalake would not read as named
    (`_URL_PARTS`)."""
    url_part = _URL_PARTS.search(root.uri) if root.is_local else None
    if url_part is not None:
        raise UsageError(f"{root.uri}: a Delta root's path cannot hold {url_part.group()!r}: "
                         "deltalake reads the path as a URL, where it is not part of a name "
                         "(an escape is decoded, '#' and '?' end the path), so the tables "
                         "would not be those named; choose a path without it", path=root.uri)


def require_root(root: TableRoot) -> None:
    """Refuse a root without a runs table: not the output of a --format delta run (nor one
    whose path deltalake misreads, `refuse_url_parts`)."""
    refuse_url_parts(root)
    try:
        found = root.exists(RUNS)
    except (DeltaError, OSError) as exc:
        raise InputError(table_failure(root, root.uri, exc, "reading the table root",
                                       "cannot read"), path=root.uri) from None
    if not found:
        raise InputError(_no_runs_table(root), path=root.uri)
    try:
        table = root.open(RUNS)
    except (DeltaError, OSError) as exc:
        raise InputError(table_failure(root, root.table(RUNS), exc, "reading the Delta table",
                                       "cannot read the Delta table"),
                         path=root.table(RUNS)) from None
    problem = _foreign_runs(table)
    if problem is not None:
        raise InputError(f"{root.table(RUNS)}: {problem}", path=root.table(RUNS))


def _no_runs_table(root: TableRoot) -> str:
    """Why a root without a runs table has no history: a first night that never finished
    (its data tables are there, uncounted), or not a snim-batch root at all."""
    try:
        started = [name for name in DATA_TABLES if root.exists(name)]
    except (DeltaError, OSError):
        started = []
    if started:
        return (f"{root.uri}: no night committed yet (tables {', '.join(started)} are there "
                f"but no Delta table '{RUNS}': the first run stopped before its last commit; "
                "a rerun of that night commits it)")
    return (f"{root.uri}: not a snim-batch Delta table root (no Delta table '{RUNS}' in it; "
            "it is written by `run --format delta`)")


RUNS_KEYS = ("run_id", PARTITION, "status")
"""Columns every snim-batch runs table has: one without them is someone else's table."""


def _foreign_runs(table: DeltaTable) -> str | None:
    """Why a Delta table named runs is not snim-batch's (columns it lacks), or None."""
    columns = {field.name for field in table.schema().fields}
    missing = [name for name in RUNS_KEYS if name not in columns]
    if not missing:
        return None
    return (f"not a snim-batch runs table (no column {', '.join(repr(m) for m in missing)}; "
            "it is written by `run --format delta`)")


def is_table_root(uri: str, storage_options: dict[str, str] | None = None) -> bool:
    return TableRoot(uri, storage_options).exists(RUNS)


def holds_night(root: TableRoot, night: date) -> bool:
    """Whether a table of the root holds rows of `night` now (a run of it replaces them): the
    runs table's row, or a stopped run's rows in the data tables."""
    text = night.isoformat()
    return any(root.exists(name) and any(part.get(PARTITION) == text
                                         for part in root.open(name).partitions())
               for name in (RUNS, *DATA_TABLES))


def read_runs(root: TableRoot) -> pl.DataFrame:
    """The runs table as it is now: one row per night, the run whose rows are live."""
    require_root(root)
    return root.read(RUNS).sort(PARTITION)


def latest_night(root: TableRoot) -> dict[str, Any]:
    """What `report` shows of a table root: `manifest` (the latest night's run, rebuilt from
    its runs row), that night's `summary` and `sg_tables` rows, its `rejects` rows as a
    dataset (`night_dataset`), the `runs` table and `summaries` (rule_set_id and w_rate of
    every night)."""
    runs, unlisted = live_runs(root)
    if runs.is_empty():
        if unlisted:
            raise InputError(f"{root.uri}: no complete run yet: a run of "
                             f"{', '.join(sorted(map(str, unlisted)))} was stopped between "
                             "its commits; run that night again", path=root.uri)
        raise InputError(f"{root.uri}: the runs table lists no run yet", path=root.uri)
    run = runs.row(-1, named=True)
    night = run[PARTITION]

    def rows(name: str) -> pl.DataFrame:
        return root.read(name, nights=[night]).drop(PARTITION, "run_id")

    manifest = {
        **{key: run[key] for key in ("run_id", "status", "exit_code", "engine")},
        "run_date": night.isoformat(),
        "started_at": run["started_at"].isoformat(),
        "finished_at": run["finished_at"].isoformat(),
        "counts": {
            "rules": {"rows_read": run["rules_rows_read"],
                      "rows_accepted": run["rules_rows_read"] - run["rules_rows_rejected"],
                      "rows_rejected": run["rules_rows_rejected"]},
            "positions": {"rows_read": run["positions_rows_read"],
                          "rows_evaluated": run["positions_rows_evaluated"],
                          "rows_rejected": run["positions_rows_rejected"],
                          "verdicts": run["verdicts"], "W": run["W"], "L": run["L"]}},
        **{key: json.loads(run[field]) for key, field in (
            ("inputs", "input_files"), ("config", "config"), ("versions", "versions"),
            ("timings_s", "timings_s"))},
        **({"rejects": json.loads(run["rejects"])} if run.get("rejects") else {})}
    summaries = root.read("summary", columns=[PARTITION, "rule_set_id", "w_rate"])
    return {"manifest": manifest, "summary": rows("summary"), "sg_tables": rows("sg_tables"),
            "rejects": root.night_dataset("rejects", night), "runs": runs,
            "summaries": summaries}


def live_runs(root: TableRoot) -> tuple[pl.DataFrame, dict[date, dict[str, dict[str, int]]]]:
    """The run whose rows are live of every night, as runs rows, oldest night first: the
    runs table's, and for a night it does not list (a run stopped between its commits, see
    `delta.publish`) the run whose rows every data table still holds for it, all of them
    (its row read from the runs table's version that committed it). Also each such unlisted
    night's rows by table and run id, as committed now."""
    runs = read_runs(root)
    unlisted = _unlisted_nights(root, set(runs[PARTITION].to_list()))
    if not unlisted:
        return runs, unlisted
    committed = {commit[METADATA_KEY]["run_id"]: commit["version"]
                 for commit in root.open(RUNS).history()
                 if isinstance(commit.get(METADATA_KEY), dict)
                 and "versions" in commit[METADATA_KEY]}
    recovered = []
    for night, tables in unlisted.items():
        ids = {run_id for rows in tables.values() for run_id in rows}
        if len(ids) != 1 or next(iter(ids)) not in committed:
            continue
        (run_id,) = ids
        row = root.read(RUNS, version=committed[run_id]).filter(
            (pl.col("run_id") == run_id) & (pl.col(PARTITION) == night))
        if row.height == 1 and _holds_all_of(row.row(0, named=True), tables):
            recovered.append(row)
    return pl.concat([runs, *recovered], how="diagonal_relaxed").sort(PARTITION), unlisted


def _holds_all_of(run: dict[str, Any], tables: dict[str, dict[str, int]]) -> bool:
    """Whether a night's rows (by table and run id) are all of `run`'s: its verdicts and
    rejects as many as it counted (a table emptied for the night by a later run's commit
    holds no run's rows), its summary there."""
    rows = {name: sum(tables.get(name, {}).values()) for name in DATA_TABLES}
    return (rows["verdicts"] == run["verdicts"] and rows["summary"] > 0
            and rows["rejects"] == run["positions_rows_rejected"] + run["rules_rows_rejected"])


def _unlisted_nights(root: TableRoot, listed: set[date]
                     ) -> dict[date, dict[str, dict[str, int]]]:
    """The nights that the data tables hold rows of but the runs table does not list, each
    with its rows per table and run id in the tables' latest versions."""
    found: dict[date, dict[str, dict[str, int]]] = {}
    for name in DATA_TABLES:
        if not root.exists(name):
            continue
        nights = {date.fromisoformat(p[PARTITION]) for p in root.open(name).partitions()
                  if p.get(PARTITION)} - listed
        if not nights:
            continue
        counts = root.read(name, nights=sorted(nights), columns=[PARTITION, "run_id"]
                           ).group_by(PARTITION, "run_id").len()
        for night, run_id, rows in counts.iter_rows():
            found.setdefault(night, {}).setdefault(name, {})[run_id] = rows
    return found


def run_history(root: TableRoot) -> pl.DataFrame:
    """Every run ever committed to the runs table, oldest first, from its commit log: run
    date, run id, the runs table's version that committed it, status, counts, W rate, the
    verdicts table's version holding its rows, and its `state`: `live` (its rows are the
    night's: the runs table lists it, or a later run of its night stopped before replacing
    any of them), `replaced` (a later run of its night replaced them), `partly replaced` (a
    later run of its night stopped between its commits, having replaced some tables' rows),
    `rolled back` (a failed run's restore took its row out: a restore commit went back to
    a version before it). A run that took its night out of the runs table, or committed
    rows, but never committed its row (stopped between its commits, not rolled back) is
    listed too, `incomplete`, where the runs table took its night out (else with the
    version null), without counts. `live` and `rolled_back` say the same as booleans."""
    require_root(root)
    try:
        return _run_history(root)
    except (DeltaError, OSError, pa.ArrowException, pl.exceptions.PolarsError) as exc:
        raise InputError(table_failure(root, root.uri, exc, "reading the Delta tables",
                                       "cannot read the Delta tables"), path=root.uri) from None


def _run_history(root: TableRoot) -> pl.DataFrame:
    runs, unlisted = live_runs(root)
    live = set(runs["run_id"].to_list())
    mixed = {run_id for tables in unlisted.values() for rows in tables.values()
             for run_id in rows}
    commits = root.open(RUNS).history()
    undone = [(_restored_to(commit), commit["version"]) for commit in commits
              if isinstance(commit.get(METADATA_KEY), dict)
              and "rolled_back" in commit[METADATA_KEY]]
    rolled_back_ids = {commit[METADATA_KEY]["rolled_back"] for commit in commits
                       if isinstance(commit.get(METADATA_KEY), dict)
                       and "rolled_back" in commit[METADATA_KEY]}
    rows, nights, retractions = [], {}, {}
    for commit in commits:
        run = commit.get(METADATA_KEY)
        if isinstance(run, dict) and "retracted" in run and run.get("by_run_id"):
            retractions[run["by_run_id"]] = (commit["version"], run["retracted"])
        if not isinstance(run, dict) or "versions" not in run or run["run_id"] in nights:
            continue  # a run committed twice (a retry after the store's answer was lost): once
        nights[run["run_id"]] = run["run_date"]
        rolled_back = run["run_id"] not in live and any(
            low < commit["version"] < high for low, high in undone)
        state = ("live" if run["run_id"] in live else "rolled back" if rolled_back
                 else "partly replaced" if run["run_id"] in mixed else "replaced")
        rows.append({"run_date": run["run_date"], "run_id": run["run_id"],
                     "version": commit["version"], "status": run["status"],
                     "rows_read": run["rows_read"], "verdicts": run["verdicts"],
                     "W": run["W"], "rejected": run["rejected"], "w_rate": run["w_rate"],
                     "verdicts_version": run["versions"].get("verdicts"), "state": state,
                     "live": state == "live", "rolled_back": rolled_back})
    stopped = {run_id: (version, next((nights[r] for r in retracted if r in nights), None))
               for run_id, (version, retracted) in retractions.items()}
    for night, tables in unlisted.items():
        for run_id in {r for rows in tables.values() for r in rows}:
            if run_id not in stopped:
                stopped[run_id] = (None, night.isoformat())
            elif stopped[run_id][1] is None:
                stopped[run_id] = (stopped[run_id][0], night.isoformat())
    committed_to: dict[str, set[str]] = {}  # of the data tables: run id -> tables
    restored: dict[str, set[str]] = {}
    for name in DATA_TABLES:  # a night's first run stopped after a data commit, since rerun
        for commit in root.open(name).history() if root.exists(name) else []:
            run = commit.get(METADATA_KEY)
            if isinstance(run, dict) and "rolled_back" in run:
                restored.setdefault(run["rolled_back"], set()).add(name)
            elif isinstance(run, dict) and "run_id" in run:
                committed_to.setdefault(run["run_id"], set()).add(name)
                stopped.setdefault(run["run_id"], (None, run.get("run_date")))
    # rolled back: every data table it committed to restored (else its rows stay somewhere)
    rolled_back_ids |= {run_id for run_id, tables in committed_to.items()
                        if tables <= restored.get(run_id, set())}
    for run_id, (version, night) in stopped.items():
        if run_id in nights or run_id in rolled_back_ids:
            continue
        rows.append({"run_date": night, "run_id": run_id, "version": version,
                     "status": None, "rows_read": None, "verdicts": None, "W": None,
                     "rejected": None, "w_rate": None, "verdicts_version": None,
                     "state": "incomplete", "live": False, "rolled_back": False})
    schema = {"run_date": pl.String, "run_id": pl.String, "version": pl.Int64,
              "status": pl.String, "rows_read": pl.Int64, "verdicts": pl.Int64,
              "W": pl.Int64, "rejected": pl.Int64, "w_rate": pl.Float64,
              "verdicts_version": pl.Int64, "state": pl.String, "live": pl.Boolean,
              "rolled_back": pl.Boolean}
    return pl.DataFrame(rows, schema=schema, orient="row").sort("version", nulls_last=True)


def _restored_to(commit: dict[str, Any]) -> int:
    """The version a rollback commit went back to (-1: it emptied the table)."""
    if commit.get("operation") != "RESTORE":
        return -1
    try:
        return int(commit.get("operationParameters", {}).get("version"))
    except (TypeError, ValueError):
        return -1
