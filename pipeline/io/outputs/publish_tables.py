"""`convert`'s tables placed in a directory, all or none, each replacing only a table an
earlier `convert` wrote (the rules of `publish`: written whole in a hidden staging directory
beside them, synced, renamed into place; a failure puts back what was moved). The `Output`
kind `io.outputs.kinds.TablesDirectory` holds `staged_tables`."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.errors import OutputError, WriteFailure
from pipeline.events import OnEvent, ignore, tell_committed
from pipeline.io.outputs.commit import (
    interrupts_held,
    output_target,
    refuse_inside_delta_table,
    refuse_inside_snim_output,
    rename_noreplace,
)
from pipeline.io.outputs.failures import failure, refuse_long_names, write_cause, writing
from pipeline.io.outputs.manifest import is_snim_output
from pipeline.io.outputs.publish import (
    discard,
    journal_name,
    remove_dead_temporaries,
    write_bytes,
    write_synced,
)


def _is_taken(exc: OSError) -> bool:
    return exc.errno in (errno.EEXIST, errno.ENOTEMPTY)


TEMPORARY_DEPTH = 64  # bytes of a table's temporary name in the directory, and more

TABLE_MARK = {b"written_by": b"snim-batch convert"}
"""Key-value metadata in each table `write_marked_table` writes: what proves a file ours to
replace."""


def staging_name(token: str) -> str:
    """The hidden directory in the tables' directory where `staged_tables` stages them."""
    return f".snim-tables-{token}"


@contextmanager
def staged_tables(directory: Path, names: list[str], overwrite: bool, tag: str,
                  on_event: OnEvent = ignore) -> Iterator[Path]:
    """Yield a hidden staging directory inside `directory` for the tables `names`; on normal
    exit they are placed in `directory`, all or none: each staged table is synced (the writer,
    `write_marked_table`, does so), a journal naming them is synced, then all are renamed into
    place and the journal removed. A file already there is replaced only with `overwrite`,
    and only one that `write_marked_table` wrote (its TABLE_MARK); it is put back if a later
    rename fails. A directory that was missing is created, and removed again on a failure,
    as is the staging directory. What a killed call left is finished or removed by the next
    one (`remove_dead_temporaries`). The renames hold the stop signals; `on_event` hears
    COMMITTED once they are done. A symbolic link `directory` is followed, a dangling one
    to the directory it names, which is created (as `run` treats `--out`)."""
    shown = str(directory)
    refuse_long_names(directory, "--out", depth=TEMPORARY_DEPTH)
    directory = output_target(directory)
    refuse_inside_delta_table(directory, shown)
    refuse_inside_snim_output(directory, shown)
    _check_table_directory(directory)
    remove_dead_temporaries(directory, names)
    for name in names:
        _check_table_target(directory / name, overwrite)
    created = _make_directories(directory, shown)
    token = f"{os.getpid()}-{tag}"
    staging = directory / staging_name(token)
    journal = directory / journal_name(token)
    try:
        try:
            staging.mkdir()
        except OSError as exc:
            raise failure(shown, f"creating the staging directory {staging}",
                          *write_cause(exc)) from None
        yield staging
        try:
            write_synced(journal, write_bytes(json.dumps(names).encode()))
        except OSError as exc:
            raise failure(shown, "writing the journal", *write_cause(exc)) from None
        with interrupts_held():
            _rename_tables({name: staging / name for name in names}, directory, token, shown,
                           overwrite)
            journal.unlink(missing_ok=True)
            tell_committed(on_event, shown)
            with suppress(OSError):
                staging.rmdir()
    except WriteFailure as exc:
        _undo(staging, journal, created)
        raise failure(shown, exc.doing, exc.cause, exc.no_space) from None
    except BaseException:
        _undo(staging, journal, created)
        raise


def _undo(staging: Path, journal: Path, created: list[Path]) -> None:
    shutil.rmtree(staging, ignore_errors=True)
    discard(journal)
    for made in reversed(created):
        with suppress(OSError):
            made.rmdir()


def write_marked_table(frame: pl.DataFrame, path: Path) -> None:
    """`frame` as the Parquet file `path`, marked as convert's (TABLE_MARK) and synced; a
    failure is a `WriteFailure` naming the file (`failures.writing`)."""
    with writing(path.name):
        write_synced(path, _write_marked(frame))


def _write_marked(frame: pl.DataFrame) -> Callable[[Path], None]:
    def fill(path: Path) -> None:
        table = frame.to_arrow()
        pq.write_table(table.replace_schema_metadata({**(table.schema.metadata or {}),
                                                      **TABLE_MARK}), path)

    return fill


def _written_by_us(path: Path) -> bool:
    """Whether `path` is a Parquet file that `write_marked_table` wrote (its TABLE_MARK)."""
    try:
        metadata = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowException):
        return False
    return all(metadata.get(key) == value for key, value in TABLE_MARK.items())


def _check_table_directory(directory: Path) -> None:
    try:
        mode = directory.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise failure(str(directory), "inspecting it", *write_cause(exc)) from None
    if not stat.S_ISDIR(mode):
        raise OutputError(f"{directory}: exists and is not a directory", path=directory,
                          written=False)
    if is_snim_output(directory):
        raise OutputError(f"{directory}: is a snim-batch output, whose manifest would no "
                          "longer list all it holds", path=directory, written=False,
                          hint=" (choose another --out)")


def _check_table_target(target: Path, overwrite: bool) -> None:
    try:
        mode = target.lstat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        raise failure(str(target), "inspecting it", *write_cause(exc)) from None
    if not stat.S_ISREG(mode):
        raise OutputError(f"{target}: exists and is not a regular file", path=target,
                          refused=True, written=False)
    if not overwrite:
        raise OutputError(f"{target}: already exists (pass --overwrite to replace it)",
                          path=target, written=False)
    if not _written_by_us(target):
        raise OutputError(f"{target}: exists and is not a table snim-batch convert wrote",
                          path=target, refused=True, written=False)


def _make_directories(directory: Path, shown: str) -> list[Path]:
    """Create `directory` and its missing parents; the ones created, outermost first."""
    missing = []
    for path in (directory.absolute(), *directory.absolute().parents):
        if os.path.lexists(path):
            break
        missing.append(path)
    created = []
    for path in reversed(missing):
        try:
            path.mkdir()
        except OSError as exc:
            if isinstance(exc, FileExistsError) and path.is_dir():
                continue  # made meanwhile by another call: its, not this one's to remove
            for made in reversed(created):
                with suppress(OSError):
                    made.rmdir()
            raise failure(shown, f"creating the directory {path}", *write_cause(exc)) from None
        created.append(path)
    return created


def _rename_tables(temps: dict[str, Path], directory: Path, token: str, shown: str,
                   overwrite: bool) -> None:
    """Rename each written table into place, with `overwrite` moving a file it replaces
    aside first (without, a file that appeared since the check, another call's, is never
    replaced); on a failure, put everything back as it was."""
    undo: list[Callable[[], None]] = []
    aside: list[Path] = []
    try:
        for name, tmp in temps.items():
            target = directory / name
            if overwrite and os.path.lexists(target):
                old = directory / f".{name}.old-{token}"
                os.rename(target, old)
                aside.append(old)
                undo.append(lambda target=target, old=old: rename_noreplace(old, target))
            rename_noreplace(tmp, target)
            undo.append(lambda target=target, tmp=tmp: os.rename(target, tmp))
    except OSError as exc:
        for step in reversed(undo):
            with suppress(OSError):
                step()
        cause = ("a file of that name appeared meanwhile", False) if _is_taken(exc) \
            else write_cause(exc)
        raise failure(shown, f"renaming {name} into place", *cause) from None
    for old in aside:
        with suppress(OSError):
            old.unlink()
