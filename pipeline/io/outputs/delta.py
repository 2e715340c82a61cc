"""Delta Lake output (`--format delta`): `--out` is a table root holding the Delta tables
verdicts, rejects, summary, sg_tables and runs; every row carries its run's `run_id` and
`run_date`, and every table is partitioned by `run_date`.

A run stages its four tables as Parquet, exactly as a Parquet run writes them, in a local
staging directory; they are checked (row counts, column types against the tables) before
anything reaches Delta. Their rows are then streamed, batch by batch, into new data files in
each table's partition of the night (invisible until committed), and each table gets one
commit that replaces the night's files with them, the runs table last: a run is complete
once the runs table lists it. A rerun of a night first takes that night's row out of the
runs table, so that the runs table never lists a run whose rows a later run has begun to
replace. Every commit is made against the table's version the run saw before its first
commit, so that a commit of another run in between fails it instead of being overwritten;
a failed run puts back only tables whose latest commits are its own. A root may be local or
a URL with `storage_options` (deltalake's object-store keys).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Schema
from deltalake.exceptions import DeltaError
from deltalake.fs import DeltaStorageHandler
from deltalake.transaction import AddAction, create_table_with_add_actions

from pipeline.errors import OutputError
from pipeline.events import OnEvent, ignore, tell_committed
from pipeline.io.outputs.commit import (
    interrupts_held,
    missing_directories,
    remove_if_empty,
)
from pipeline.io.outputs.delta_tables import (
    DATA_TABLES,
    METADATA_KEY,
    PARTITION,
    RUNS,
    TableRoot,
    check_root,
    commit_room,
    run_row,
    table_failure,
)
from pipeline.io.outputs.failures import failure, storage_failure, write_cause
from pipeline.io.outputs.publish import discard
from pipeline.keys import KEYS

log = logging.getLogger(__name__)

_BATCH_ROWS = 1 << 20  # at most this many rows in a batch, and in a row group
_FILE_ROWS = 1 << 24  # rows per data file (about 50 MB of verdicts)


@dataclass(frozen=True)
class _Plan:
    """One table's commit: the staged rows, the columns as the table will hold them, and
    whether the commit adds columns to the table's schema."""

    name: str
    staged: ds.Dataset
    schema: pa.Schema
    adds_columns: bool


def publish(root: TableRoot, staging: Path, manifest: dict[str, Any], run_date: date,
            on_event: OnEvent = ignore) -> dict[str, int]:
    """Commit the run staged in `staging` to the Delta tables under `root`, replacing the
    night `run_date`; returns each table's version after its commit. Everything is checked,
    and every data file written, before the first commit; the commits then follow each other
    in milliseconds, with Ctrl-C held from the first to the last."""
    check_root(root)
    created = _new_directories(root, run_date)
    try:
        return _publish(root, staging, manifest, run_date, on_event)
    except BaseException:
        for chain in created:  # a run that committed nothing leaves no empty directory
            remove_if_empty(chain)
        raise


def _new_directories(root: TableRoot, run_date: date) -> list[list[Path]]:
    """For each table of a local root, the directories writing its night would create
    (partition, table, root), deepest first; the root's last."""
    if not root.is_local:
        return []
    partition = f"{PARTITION}={run_date.isoformat()}"
    return [missing_directories(Path(root.table(name).removeprefix("file://")) / partition)
            for name in (*DATA_TABLES, RUNS)]


def _publish(root: TableRoot, staging: Path, manifest: dict[str, Any], run_date: date,
             on_event: OnEvent) -> dict[str, int]:
    run_id = manifest["run_id"]
    expected = _expected_rows(manifest)
    plans = [_plan(root, name, staging / f"{name}.parquet", expected.get(name))
             for name in DATA_TABLES]
    described = {"run_id": run_id, "run_date": run_date.isoformat(),
                 "status": manifest["status"], **_run_counts(manifest)}
    uncommitted: dict[str, list[AddAction]] = {}  # data files no commit was tried for yet
    try:
        for plan in plans:
            uncommitted[plan.name] = []  # filled file by file: a stop finds them all
            _write_files(root, plan, run_id, run_date, uncommitted[plan.name])
        _reserve_commit_room(root, uncommitted)
        return _commit_night(root, plans, uncommitted, manifest, run_date, described, on_event)
    except BaseException:  # a stop before the commits too: no file of the run stays
        _delete_uncommitted(root, uncommitted)
        raise
    finally:
        _free_commit_room(root)


def _commit_night(root: TableRoot, plans: list[_Plan], uncommitted: dict[str, list[AddAction]],
                  manifest: dict[str, Any], run_date: date, described: dict[str, Any],
                  on_event: OnEvent) -> dict[str, int]:
    """The night's commits, one per table and then the runs table's, with stops held; a
    failed one puts the tables back (`_roll_back`)."""
    run_id = manifest["run_id"]
    versions: dict[str, int] = {}
    with interrupts_held():
        _free_commit_room(root)  # the commits (and a roll-back) take its place
        try:
            previous = _versions_now(root)
            _refuse_moved(root, previous)
        except OutputError:
            _delete_uncommitted(root, uncommitted)
            raise
        tried = [RUNS]  # the tables the run may have committed to (runs: a retraction)
        try:
            runs_base = _retract_night(root, run_date, run_id, previous[RUNS])
            for plan in plans:
                tried.append(plan.name)
                attempted = uncommitted.pop(plan.name)  # a failed commit may have landed
                versions[plan.name] = _commit(root, plan, attempted, run_date, described,
                                              previous[plan.name])
            runs = _plan_frame(root, RUNS, run_row(manifest, run_date, versions))
            versions[RUNS] = _commit(root, runs, _write_files(root, runs, run_id, run_date),
                                     run_date, {**described, "versions": dict(versions)},
                                     runs_base)
            tell_committed(on_event, root.uri)
        except OutputError as exc:
            restored, clean = _roll_back(root, {name: version for name, version
                                                in previous.items() if name in tried}, run_id)
            _delete_uncommitted(root, uncommitted)  # the tables no commit was tried for
            raise OutputError(f"{exc.message}; {restored}", path=exc.path, row=exc.row,
                              column=exc.column, written=exc.written if clean else True,
                              refused=exc.refused, hint=exc.hint) from None
    log.info("committed run %s as night %s to %s (versions %s)", run_id, run_date, root.uri,
             versions)
    return versions


COMMIT_ROOM = 8 * 2**20
COMMIT_ROOM_PER_FILE = 8 * 2**10
"""Room held on a local root's file system, from the last data file written to the first
commit: its log entries, the runs table's row and a roll-back's entries need a little
space, and a disk that fills between two tables' commits leaves part of the run in place."""
_NO_RESERVING = (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


def _reserve_commit_room(root: TableRoot, uncommitted: dict[str, list[AddAction]]) -> None:
    """A hidden file in a local root (its own file system, whatever mount or link it is)
    holding the room the commits need, freed just before them (`_free_commit_room`); none
    for an object store or a file system that cannot reserve. A disk without that room fails
    the run here, before any commit. One a killed run left goes with the next run's staging
    directory."""
    if not root.is_local:
        return
    room = commit_room(root)
    size = COMMIT_ROOM + COMMIT_ROOM_PER_FILE * sum(map(len, uncommitted.values()))
    try:
        with open(room, "wb") as fh:
            os.posix_fallocate(fh.fileno(), 0, size)
    except BaseException as exc:
        discard(room)
        if not isinstance(exc, OSError):  # a stop signal
            raise
        if exc.errno in _NO_RESERVING:
            log.debug("%s: cannot reserve room for the commits (%s)", root.uri, exc.strerror)
            return
        raise failure(root.uri, "reserving room for its commits", *write_cause(exc)) from None


def _free_commit_room(root: TableRoot) -> None:
    if root.is_local:  # on a read-only file system even a missing file's unlink fails
        discard(commit_room(root))


def _versions_now(root: TableRoot) -> dict[str, int | None]:
    """Each table's version (None: no table yet), the base of the run's commits."""
    try:
        return {name: root.open(name).version() if root.exists(name) else None
                for name in (*DATA_TABLES, RUNS)}
    except (DeltaError, OSError) as exc:
        raise OutputError(table_failure(root, root.uri, exc, "reading the Delta tables",
                                        "cannot read the Delta tables"), path=root.uri,
                          written=False) from None


def _refuse_moved(root: TableRoot, versions: dict[str, int | None]) -> None:
    """Fail before the first commit if another run committed to any table since this run's
    first check: its commits and this run's would replace each other's rows. A run that
    has committed its rows but not yet its runs row is caught here too: this run would
    replace its verdicts, and the runs table would then list both runs."""
    for name in (RUNS, *DATA_TABLES):  # a whole run first: its runs row
        version = versions[name]
        seen = root.seen.get(name, version)
        if seen != version:
            def brief_repr(version: int | None) -> str:
                return "no table" if version is None else f"version {version}"

            raise OutputError(f"{root.table(name)}: another run committed to this table root "
                              f"while this run ran (the {name} table went from "
                              f"{brief_repr(seen)} to {brief_repr(version)}); two runs of one "
                              "table root at once are not supported, nor a vacuum or optimize "
                              "of its tables during a run", path=root.table(name),
                              written=False)


def _author(commit: dict[str, Any]) -> str | None:
    """The run that made a commit (its data, its runs row, or a retraction for its rerun)."""
    run = commit.get(METADATA_KEY)
    return run.get("run_id") or run.get("by_run_id") if isinstance(run, dict) else None


def _roll_back(root: TableRoot, previous: dict[str, int | None],
               run_id: str) -> tuple[str, bool]:
    """After a failed commit, put each table whose latest commits are the run's own back to
    its rows before them (a restore commit; a table the run created is emptied). A table
    where another run committed after the run's own commits is left alone: restoring it
    would undo that run; one without commits of the run's holds nothing to take out. Says
    how that went, for the error message, and whether every table is back to its rows before
    the run (else part of the run may be in place)."""
    properties = CommitProperties(custom_metadata={METADATA_KEY: {"rolled_back": run_id}})
    failed, kept, restored = [], [], []
    for name, version in previous.items():
        try:
            if not root.exists(name):
                continue
            table = root.open(name)
            since = table.version() - (-1 if version is None else version)
            if since <= 0:
                continue
            first_own, overtaken = _own_commits(table.history(limit=since), run_id)
            if overtaken:
                kept.append(name)
            elif first_own is None:  # none of the run's own: nothing of it to take out
                continue
            elif first_own == 0:
                table.delete(commit_properties=properties)
                restored.append(name)
            elif first_own is not None:
                table.restore(first_own - 1, commit_properties=properties)
                restored.append(name)
        except (DeltaError, OSError) as exc:
            failed.append(table_failure(root, root.table(name), exc, "putting the table back",
                                        "cannot put the table back"))
    notes = [f"not restored: another run committed to "
             f"{', '.join(root.table(name) for name in kept)} meanwhile"] if kept else []
    if failed:
        notes.append("these tables could not be put back and may hold part of the run: "
                     + "; ".join(failed))
    if not notes:
        return "every table was put back to its rows before the run", True
    if restored:
        notes.insert(0, f"{', '.join(restored)} put back to their rows before the run")
    return "; ".join(notes), False


def _own_commits(commits: list[dict[str, Any]], run_id: str) -> tuple[int | None, bool]:
    """From a table's commits since the run began (newest first): the version of the first
    of the run's own latest commits (None if the latest is not the run's), and whether
    another run committed after one of the run's commits."""
    first_own, others = None, False
    for commit in commits:
        if _author(commit) != run_id:
            others = True
        elif others:
            return first_own, True
        else:
            first_own = commit["version"]
    return first_own, False


def _expected_rows(manifest: dict[str, Any]) -> dict[str, int]:
    counts = manifest["counts"]
    return {"verdicts": counts["positions"]["verdicts"],
            "rejects": counts["positions"]["rows_rejected"] + counts["rules"]["rows_rejected"]}


def _run_counts(manifest: dict[str, Any]) -> dict[str, Any]:
    pos, rules = manifest["counts"]["positions"], manifest["counts"]["rules"]
    return {"rows_read": pos["rows_read"], "verdicts": pos["verdicts"], "W": pos["W"],
            "L": pos["L"], "rejected": pos["rows_rejected"] + rules["rows_rejected"],
            "w_rate": pos["W"] / pos["verdicts"] if pos["verdicts"] else None}


def _plan(root: TableRoot, name: str, path: Path, expected: int | None) -> _Plan:
    """A staged table checked against what the run counted and against the Delta table's
    columns (a column may be added, none may change its type)."""
    if not path.exists():
        raise OutputError(f"{root.uri}: the run staged no {path.name}", path=root.uri,
                          written=False)
    staged = ds.dataset(str(path), format="parquet")
    rows = staged.count_rows()
    if expected is not None and rows != expected:
        raise OutputError(f"{root.uri}: the staged {path.name} holds {rows} rows where the "
                          f"run counted {expected}", path=root.uri, written=False)
    return _checked(root, name, staged, staged.schema)


def _plan_frame(root: TableRoot, name: str, frame: pa.Table) -> _Plan:
    return _checked(root, name, ds.dataset(frame), frame.schema)


def _checked(root: TableRoot, name: str, staged: ds.Dataset, schema: pa.Schema) -> _Plan:
    columns = pa.schema([pa.field(PARTITION, pa.date32()), pa.field("run_id", pa.string()),
                         *[f for f in schema if f.name not in (PARTITION, "run_id")]])
    if not root.exists(name):
        return _Plan(name, staged, columns, False)
    try:
        table = root.open(name)
        existing = pa.schema(table.schema().to_arrow())
        empty = not _holds_rows(table)
    except (DeltaError, OSError) as exc:
        raise OutputError(table_failure(root, root.table(name), exc, "reading the Delta table",
                                        "cannot read the Delta table"),
                          path=root.table(name)) from None
    old = {f.name: str(f.type) for f in Schema.from_arrow(existing).fields}
    new = {f.name: str(f.type) for f in Schema.from_arrow(columns).fields}
    # a table whose nights held no rows has had no key to type: the run's types replace its
    retyped = {f.name: f for f in columns
               if empty and (f.name in KEYS or f.name == KEY_LISTS)}
    changed = [f"{c} ({_type_name(old[c])} in the table, {_type_name(t)} in this run)"
               for c, t in new.items() if c in old and old[c] != t and c not in retyped
               and not _as_text(c, old[c], t)]
    if changed:
        raise _unfit(root, name, changed)
    added = [f for f in columns if f.name not in old]
    return _Plan(name, staged, pa.schema([*(retyped.get(f.name, f) for f in existing), *added]),
                 bool(added))


def _holds_rows(table: DeltaTable) -> bool:
    """Whether a live file of `table` holds a row (a file without its count is taken to):
    the nights a run found no rows for commit none."""
    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return False
    records = actions["num_records"]
    return records.null_count > 0 or (pc.sum(records).as_py() or 0) > 0


def _unfit(root: TableRoot, name: str, changed: list[str]) -> OutputError:
    return OutputError(f"{root.table(name)}: this run's columns do not fit the table: "
                       f"{', '.join(changed)}; key columns are integers only when every key "
                       "of the run is one. Write this run to another table root",
                       path=root.table(name), written=False)


def text_keys_refused(root: TableRoot, text_keys: dict[str, list[str]]) -> OutputError | None:
    """The error a run whose key columns `text_keys` (table -> its key columns that are text
    for certain) meets when it commits to a root whose tables hold them as integers
    (`_checked`), found before any work (`explain`): the first such table in the order the
    run commits them; None where they fit or there is no table yet."""
    for name in DATA_TABLES:
        columns = text_keys.get(name)
        if not columns or not root.exists(name):
            continue
        try:
            table = root.open(name)
            if not _holds_rows(table):
                continue  # the run's night sets its key types (`_checked`)
            in_table = {f.name: str(f.type)
                        for f in Schema.from_arrow(table.schema().to_arrow()).fields}
        except (DeltaError, OSError):
            return None  # the run's own read of the table names what is wrong
        changed = [f"{c} (integer in the table, text in this run)" for c in columns
                   if _type_name(in_table.get(c, "")) == "integer"]
        if changed:
            return _unfit(root, name, changed)
    return None


def _as_text(column: str, in_table: str, in_run: str) -> bool:
    """Whether a key column of integers fits a table whose keys are text: written as the
    text of each integer, which is the key as given (a key is an integer only when its text
    reads back as written), so that a night of integer ids joins a text-key root. The same
    for sg_tables' `rule_set_ids`, a list of keys."""
    if column == KEY_LISTS:
        in_table, in_run = _element_type(in_table), _element_type(in_run)
    elif column not in KEYS:
        return False
    return (_type_name(in_table), _type_name(in_run)) == ("text", "integer")


KEY_LISTS = "rule_set_ids"  # sg_tables' list of the keys sharing a rule


def _element_type(delta_type: str) -> str:
    """The element type of a Delta array type ("" for another type)."""
    match = re.fullmatch(r"ArrayType\((.*), contains_null=\w+\)", delta_type)
    return match.group(1) if match else ""


def _type_name(delta_type: str) -> str:
    if element := _element_type(delta_type):
        return f"list of {_type_name(element)}"
    match = re.search(r'PrimitiveType\("(\w+)"\)', delta_type)
    simple = {"long": "integer", "integer": "integer", "string": "text"}
    return simple.get(match.group(1), match.group(1)) if match and delta_type.startswith(
        "Primitive") else delta_type


def _batches(plan: _Plan, run_id: str) -> Iterator[pa.RecordBatch]:
    """The staged rows as the table's columns (run_date aside: it is the partition), one
    batch at a time: run_id added, a column the run lacks as nulls."""
    columns = [f for f in plan.schema if f.name != PARTITION]
    for batch in _staged_batches(plan.staged):
        n = batch.num_rows
        yield pa.RecordBatch.from_arrays(
            [pa.repeat(pa.scalar(run_id, pa.string()), n) if f.name == "run_id"
             else batch.column(f.name).cast(f.type) if f.name in batch.schema.names
             else pa.nulls(n, f.type)
             for f in columns], schema=pa.schema(columns))


def _staged_batches(staged: ds.Dataset) -> Iterator[pa.RecordBatch]:
    """The staged rows one row group at a time: a dataset scanner reads ahead of a consumer
    slower than it (the Parquet writer), holding batches it had no use for yet."""
    if not isinstance(staged, ds.FileSystemDataset):
        yield from staged.to_batches()
        return
    for path in staged.files:
        with pq.ParquetFile(path) as staged_file:
            for group in range(staged_file.num_row_groups):
                yield from staged_file.read_row_group(group).to_batches(_BATCH_ROWS)


class _FileStats:
    """A data file's Delta statistics (row count; nulls, min and max of integer columns),
    gathered batch by batch as it is written."""

    def __init__(self) -> None:
        self.rows = 0
        self.nulls: dict[str, int] = {}
        self.low: dict[str, int] = {}
        self.high: dict[str, int] = {}

    def add(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            self.nulls[name] = self.nulls.get(name, 0) + column.null_count
            if pa.types.is_integer(column.type) and column.null_count < len(column):
                low, high = pc.min_max(column).values()
                self.low[name] = min(self.low.get(name, low.as_py()), low.as_py())
                self.high[name] = max(self.high.get(name, high.as_py()), high.as_py())

    def json(self) -> str:
        return json.dumps({"numRecords": self.rows, "minValues": self.low,
                           "maxValues": self.high, "nullCount": self.nulls})


def _write_files(root: TableRoot, plan: _Plan, run_id: str, run_date: date,
                 actions: list[AddAction] | None = None) -> list[AddAction]:
    """Write the table's rows for the night as Parquet data files in the table's partition
    directory, streamed (memory holds one batch), not yet part of the table: a reader sees
    them only once `_commit` adds them. Files of a run that dies before its commit are never
    read (`DeltaTable.vacuum` removes them); on an error they are deleted here. Each file's
    action is appended to `actions` (when given: the caller's) as soon as the file is whole."""
    uri = root.table(plan.name)
    partition = f"{PARTITION}={run_date.isoformat()}"
    if root.is_local:  # Arrow's own file system: its errors keep the system's error number
        directory = Path(uri.removeprefix("file://"))
        files = pafs.SubTreeFileSystem(str(directory), pafs.LocalFileSystem())
    else:
        files = pafs.PyFileSystem(DeltaStorageHandler(uri, root.storage_options))
    actions = [] if actions is None else actions  # each file's action once it is whole
    batches = _batches(plan, run_id)
    schema = pa.schema([f for f in plan.schema if f.name != PARTITION])
    path = None
    try:
        if root.is_local:
            (directory / partition).mkdir(parents=True, exist_ok=True)
        batch = next(batches, None)
        while batch is not None:
            path = f"{partition}/part-{run_id}-{uuid.uuid4().hex}.zstd.parquet"
            stats = _FileStats()
            with files.open_output_stream(path) as stream, \
                    pq.ParquetWriter(stream, schema, compression="zstd") as writer:
                while batch is not None and stats.rows < _FILE_ROWS:
                    writer.write_batch(batch, row_group_size=_BATCH_ROWS)
                    stats.add(batch)
                    batch = next(batches, None)
            actions.append(AddAction(path, files.get_file_info(path).size,
                                     {PARTITION: run_date.isoformat()},
                                     int(time.time() * 1000), True, stats.json()))
            path = None
    except BaseException as exc:
        _delete_files(root, plan.name, actions)
        if path is not None:  # the file being written when it failed
            with suppress(OSError):
                files.delete_file(path)
        full = storage_failure(plan.name, exc) if root.is_local else None
        if full is not None:  # a full disk, a quota, a read-only file system
            raise failure(root.uri, f"writing the {plan.name} table's rows", full.cause,
                          full.no_space) from None
        if isinstance(exc, (DeltaError, OSError, pa.ArrowException)):
            raise OutputError(table_failure(root, uri, exc, "writing the run's rows",
                                            "cannot write the run's rows")
                              + "; nothing was committed", path=uri) from None
        raise
    return actions


def _delete_uncommitted(root: TableRoot, uncommitted: dict[str, list[AddAction]]) -> None:
    for name, actions in uncommitted.items():
        _delete_files(root, name, actions)


def _delete_files(root: TableRoot, name: str, actions: list[AddAction]) -> None:
    """Delete data files this run wrote but never committed (no reader can see them), so
    that a failed or refused run leaves nothing behind for a full vacuum to find."""
    files = pafs.PyFileSystem(DeltaStorageHandler(root.table(name), root.storage_options))
    for action in actions:
        with suppress(OSError):
            files.delete_file(action.path)


def _commit(root: TableRoot, plan: _Plan, actions: list[AddAction], run_date: date,
            described: dict[str, Any], base: int | None) -> int:
    """One commit that replaces the night `run_date` of one table with the files written
    for it, made against the table's version `base` (None: creating the table for its first
    night), so that a commit of another run since then fails it; the version it made."""
    properties = CommitProperties(custom_metadata={METADATA_KEY: described})
    try:
        if base is not None:
            root.open(plan.name, base).create_write_transaction(
                actions, "overwrite", plan.schema, partition_by=[PARTITION],
                partition_filters=[(PARTITION, "=", run_date.isoformat())],
                commit_properties=properties)
        else:
            create_table_with_add_actions(root.table(plan.name), Schema.from_arrow(plan.schema),
                                          actions, mode="error", partition_by=[PARTITION],
                                          storage_options=root.storage_options,
                                          commit_properties=properties)
        return _own_version(root.open(plan.name), described["run_id"])
    except (DeltaError, OSError, pa.ArrowException) as exc:
        raise OutputError(table_failure(root, root.table(plan.name), exc,
                                        "committing the run's rows",
                                        "cannot commit the run's rows")
                          + f"; {_committed_note(described)}",
                          path=root.table(plan.name)) from None


def _own_version(table: DeltaTable, run_id: str) -> int:
    """The version of the run's latest commit to `table` (another run may have committed
    since, on another night)."""
    for limit in (1, 16):
        for commit in table.history(limit=limit):
            if _author(commit) == run_id:
                return int(commit["version"])
    return table.version()


def _committed_note(described: dict[str, Any]) -> str:
    return (f"the runs table does not list run {described['run_id']}, so readers that join "
            "through it do not see its rows")


def _retract_night(root: TableRoot, run_date: date, run_id: str, base: int | None
                   ) -> int | None:
    """Before a rerun replaces a night, take the night's row out of the runs table at its
    version `base` (one commit), so that it never lists a run whose rows are being replaced;
    the runs table's version the run's own row is then committed against."""
    if base is None:
        return None
    try:
        runs = root.open(RUNS, base)
        night = root.read(RUNS, version=base, nights=[run_date], columns=["run_id"])
        if night.is_empty():
            return base
        runs.delete(f"{PARTITION} = '{run_date.isoformat()}'", commit_properties=CommitProperties(
            custom_metadata={METADATA_KEY: {"retracted": night["run_id"].to_list(),
                                            "by_run_id": run_id}}))
    except (DeltaError, OSError, pl.exceptions.PolarsError) as exc:
        raise OutputError(table_failure(root, root.table(RUNS), exc,
                                        "taking out the night for the rerun",
                                        f"cannot take out the night {run_date} for the rerun"),
                          path=root.table(RUNS), written=False) from None
    return runs.version()
