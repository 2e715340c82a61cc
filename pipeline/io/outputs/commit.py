"""The atomic output commit: the run writes into a hidden staging directory beside the target,
which replaces the target with one atomic rename; an existing output is replaced only when it
is provably a snim-batch output. See docs/ARCHITECTURE.md, "The commit"."""

from __future__ import annotations

import ctypes
import errno
import io
import logging
import os
import re
import shutil
import signal
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipeline.errors import OutputError, UsageError, WriteFailure
from pipeline.events import OnEvent, RunEvent, ignore, tell_committed
from pipeline.io.outputs.failures import (
    failure,
    refuse_long_names,
    refuse_long_staging,
    remove_staging,
    unwritable,
    write_cause,
    writing,
)
from pipeline.io.outputs.manifest import MANIFEST, is_snim_output, ownership_problem
from pipeline.io.store import object_store
from pipeline.io.store.locations import Location

log = logging.getLogger(__name__)

_RENAME_NOREPLACE = 1


_RENAME_EXCHANGE = 2


_AT_FDCWD = -100






_TAKEN = (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR)


_COMMIT_ATTEMPTS = 8














def _renameat2(source: Path, target: Path, flags: int) -> bool:
    """Linux renameat2(2): True when done, False where the call or the flag is unsupported;
    any other failure raises OSError."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), flags) == 0:
        return True
    number = ctypes.get_errno()
    if number in (errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(number, os.strerror(number), str(target))


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directories (Linux renameat2); False where unsupported."""
    return _renameat2(a, b, _RENAME_EXCHANGE)


def rename_noreplace(staging: Path, target: Path) -> None:
    """Rename `staging` to `target` only if nothing is there (renameat2 RENAME_NOREPLACE);
    where that is unsupported, a plain rename, which fails over a non-empty directory or a
    file (and replaces an empty directory, which is no output). A taken `target` raises
    OSError with errno EEXIST, ENOTEMPTY or ENOTDIR."""
    if not _renameat2(staging, target, _RENAME_NOREPLACE):
        os.rename(staging, target)


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*"), reverse=True) + [root]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists; a number no process can have (too large) is taken as
    alive, so that what a name merely looking like a staging directory holds is kept."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


START_SLACK_S = 2.0  # /proc gives the boot time in whole seconds


def made_by_live_process(entry: Path, pid: int) -> bool:
    """Whether `entry` (a staging directory, a file a run renamed) may belong to a process
    still at work: process `pid` exists (`pid_alive`); when that is this very process, only
    if it started no later than the entry last changed (/proc tells). In a container every
    run is pid 1: a killed run's staging named this process's number, and was never removed.
    Another process's start is not compared with the entry's time: a clock stepped between
    the two must never make a live run's staging look dead."""
    if not pid_alive(pid):
        return False
    if pid != os.getpid():
        return True
    started = _process_start(pid)
    if started is None:
        return True
    try:
        changed = os.lstat(entry).st_ctime  # a rename changes it too (a moved-aside output)
    except OSError:
        return True
    return started <= changed + START_SLACK_S


FRESH_EVERY_S = 0.5  # well within START_SLACK_S


@contextmanager
def kept_fresh(path: Path) -> Iterator[None]:
    """Touch `path` every FRESH_EVERY_S while the block runs. A run in another container
    that shares the volume is pid 1 too, and takes a staging directory named pid 1 that has
    not changed since it started for a dead run's (`made_by_live_process`): this process's
    keeps changing while it works in it, however long it holds its verdicts in memory."""
    stop = threading.Event()

    def touch() -> None:
        while not stop.wait(FRESH_EVERY_S):
            with suppress(OSError):
                os.utime(path)

    toucher = threading.Thread(target=touch, name="staging-fresh", daemon=True)
    toucher.start()
    try:
        yield
    finally:
        stop.set()
        toucher.join()


def _process_start(pid: int) -> float | None:
    """When process `pid` started, in seconds since the epoch (Linux's /proc), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            ticks = int(stat.read().rsplit(b")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/stat", "rb") as system:
            boot = next(int(line.split()[1]) for line in system if line.startswith(b"btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def remove_dead_staging(directory: Path, pattern: re.Pattern[str]) -> None:
    """Remove the entries of `directory` that `pattern` names (its first group: the pid of the
    process that made them) whose process is gone: what a killed writer left, provably ours
    (a staging directory, or a file)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        found = pattern.fullmatch(name)
        entry = directory / name
        if found and not made_by_live_process(entry, int(found.group(1))):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with suppress(OSError):
                    entry.unlink()


def output_target(out: Path) -> Path:
    """Where `--out OUT` is committed: OUT, or for a symbolic link the path it resolves to
    (every link followed, a dangling one to the path it names); the link itself is kept."""
    out = out.absolute()
    return Path(os.path.realpath(out)) if out.is_symlink() else out


def snim_output_holding(path: Path) -> Path | None:
    """The snim-batch output that `path` lies inside (not `path` itself), as written or
    through the symbolic links on its way; None when there is none."""
    written = Path(os.path.abspath(path))  # `..` taken as written: `out/../other` is not in out
    for candidate in dict.fromkeys((Path(os.path.realpath(written)), written)):
        for directory in candidate.parents:
            if is_snim_output(directory):
                return directory
    return None


def refuse_inside_snim_output(path: Path, shown: str, option: str = "--out") -> None:
    """A UsageError for a path to write (an output, a run result) inside another snim-batch
    output: that output's manifest would no longer list all it holds, and its next
    --overwrite would refuse to replace it."""
    found = snim_output_holding(path)
    if found is not None:
        raise UsageError(f"{shown}: is inside the snim-batch output {found}, whose manifest "
                         "would no longer list all it holds (its next --overwrite would "
                         f"refuse to replace it): choose {option} outside every snim-batch "
                         "output", path=shown)


def delta_table_holding(path: Path) -> Path | None:
    """The Delta table (a directory holding `_delta_log`) that `path` is or lies inside, as
    written or through the symbolic links on its way; None when there is none."""
    written = path.absolute()
    for candidate in dict.fromkeys((Path(os.path.realpath(written)), written)):
        for directory in (candidate, *candidate.parents):
            if os.path.isdir(directory / "_delta_log"):
                return directory
    return None


def refuse_inside_delta_table(out: Path | Location, shown: str) -> None:
    """A UsageError for an output (a local path, or an object-store location) that is, or
    lies inside, a Delta table: the table's own maintenance (a full vacuum deletes every
    file the table does not reference) would delete it, and a data file beside the table's
    is no part of it."""
    if isinstance(out, Location) and out.is_remote:
        table = _remote_delta_table_holding(out)
        if table is None:
            return
        found, where = str(table), "is the Delta table" if table.key == out.key else None
    else:
        path = out.path if isinstance(out, Location) else out
        assert path is not None
        local = delta_table_holding(path)
        if local is None:
            return
        found = str(local)
        where = ("is the Delta table" if local in (path.absolute(), Path(os.path.realpath(path)))
                 else None)
    raise UsageError(f"{shown}: {where or 'is inside the Delta table'} {found}; an output "
                     "there is not part of the table, and the table's full vacuum would "
                     "delete it: choose an --out outside every Delta table")


def _remote_delta_table_holding(location: Location) -> Location | None:
    """The prefix holding `_delta_log/` objects that `location` is or lies below, outermost
    first: a listing of each prefix's `_delta_log/`. A store that cannot be asked is left
    for the output's own checks to report."""
    parts = location.key.split("/") if location.key else []
    try:
        files = object_store.filesystem(location)
        for depth in range(1, len(parts) + 1):
            log = pafs.FileSelector(f"{location.bucket}/{'/'.join(parts[:depth])}/_delta_log",
                                    allow_not_found=True)
            if object_store.answered(location, lambda log=log: files.get_file_info(log),
                                     "listing"):
                return location.at_key("/".join(parts[:depth]))
    except object_store.StoreError:  # no answer within the bounds: the run cannot go on
        raise
    except Exception:  # noqa: BLE001 - any other failure here is the commit's to report
        return None
    return None


def _output_shown(out: Path, target: Path) -> str:
    out = out.absolute()
    return str(out) if out == target else f"{out} (a link to {target})"


def _is_mount_point(path: Path) -> bool:
    """Whether something is mounted at `path`: a file system of its own (`ismount`), or on
    Linux a bind mount of a directory of the same file system (/proc/self/mountinfo)."""
    if os.path.ismount(path):
        return True
    try:
        table = Path("/proc/self/mountinfo").read_text(errors="replace")
    except OSError:
        return False
    where = os.path.realpath(path)
    octal = re.compile(r"\\([0-7]{3})")
    return any(len(fields) > 4 and octal.sub(lambda m: chr(int(m.group(1), 8)), fields[4])
               == where for fields in map(str.split, table.splitlines()))


def _target_state(target: Path, overwrite: bool, shown: str) -> str:
    """"missing", "empty" (an empty directory, filled without --overwrite) or "output" (a
    snim-batch output that --overwrite allows to replace); anything else raises."""
    try:
        mode = target.lstat().st_mode
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        raise OutputError(f"{shown}: cannot inspect it ({exc.strerror})", path=shown,
                          written=False) from None
    if stat.S_ISLNK(mode):
        raise OutputError(f"{shown}: a symbolic link that does not resolve (a loop?)",
                          path=shown, written=False)
    if not stat.S_ISDIR(mode):
        raise OutputError(f"{shown}: exists and is not a directory", path=shown,
                          refused=True)
    if _holds_working_directory(target):
        raise OutputError(f"{shown}: is the current directory or holds it, and the output is "
                          "put in place by renaming a directory over it, which would leave "
                          "this shell in a removed directory; run from outside it (cd ..)",
                          path=shown, refused=True, written=False)
    if _is_mount_point(target):
        raise OutputError(f"{shown}: is a mount point, and the output is put in place by "
                          "renaming a directory over it, which a mount point cannot take; "
                          "give --out a directory inside it", path=shown, written=False)
    try:
        with os.scandir(target) as entries:
            if next(entries, None) is None:
                return "empty"
    except OSError as exc:
        raise OutputError(f"{shown}: cannot list it ({exc.strerror})", path=shown,
                          written=False) from None
    problem = ownership_problem(target)
    if problem is not None:
        raise OutputError(f"{shown}: exists and is not provably a snim-batch output "
                          f"({problem})", path=shown, refused=True, written=False)
    if not overwrite:
        raise OutputError(f"{shown}: output already exists (pass --overwrite to replace it)",
                          path=shown)
    return "output"


def target_state(out: Path, overwrite: bool) -> tuple[str, str]:
    """What `staged_output` would find at `out` before any work, read only (nothing is made or
    removed): (where the output goes, as messages show it; "missing", "empty" or "output"),
    raising the same errors it would for an output it refuses."""
    target = output_target(out)
    shown = _output_shown(out, target)
    if not target.name:
        raise OutputError(f"{shown}: the root directory cannot be an output")
    refuse_inside_delta_table(out, shown)
    refuse_inside_snim_output(out, shown)
    return shown, _target_state(target, overwrite, shown)


def _dispose(old: Path, target: Path, tag: str, shown: str, what: str) -> str | None:
    """Delete `what` (an output at `old`) if it is still provably a snim-batch output;
    otherwise keep it under a hidden name beside `target`. Returns what to tell the user (None
    when it was deleted); never raises, since by then the run's own output is in place."""
    problem = ownership_problem(old)
    try:
        if problem is None:
            with suppress(OSError):  # a read-only output (chmod 555): its own can empty it
                os.chmod(old, stat.S_IMODE(os.stat(old).st_mode) | stat.S_IRWXU)
            shutil.rmtree(old)
            return None
        kept = target.parent / f".{target.name}.kept-{tag}"
        os.rename(old, kept)
    except OSError as exc:
        undone = "removed" if problem is None else "moved aside"
        return f"{shown}: {what} could not be {undone} ({exc.strerror}); it is at {old}"
    return (f"{shown}: {what} is not provably a snim-batch output any more ({problem}), so "
            f"it was not deleted: it is kept as {kept}")


def _remove_stale_staging(out: Path) -> list[str]:
    """Clean up after earlier runs for this target whose process is gone: put back an output
    that a killed run had moved aside (the fallback commit without renameat2), remove
    unfinished staging directories, and remove a complete one (a new output not yet renamed,
    or the old one swapped out) only while it is provably a snim-batch output; one that is
    not is kept under a hidden `.NAME.kept-...` name. Returns what to tell the user."""
    notices: list[str] = []
    retired = []
    pattern = re.compile(rf"\.{re.escape(out.name)}\.(partial|retired)-(\d+)-(.*)")
    try:
        names = sorted(os.listdir(out.parent))
    except OSError:
        return []
    for name in names:
        match = pattern.fullmatch(name)
        if not match or made_by_live_process(out.parent / name, int(match.group(2))):
            continue
        stale = out.parent / name
        if match.group(1) == "retired":
            retired.append((stale, match.group(3)))
        elif not os.path.lexists(stale / MANIFEST):
            shutil.rmtree(stale, ignore_errors=True)
        else:
            notices.append(_dispose(stale, out, match.group(3), str(out),
                                    f"the output left by an interrupted run at {stale}") or "")
    for old, tag in retired:
        if not os.path.lexists(out):
            try:
                os.rename(old, out)
                continue
            except OSError as exc:
                notices.append(f"{out}: cannot put back the output at {old} ({exc.strerror})")
                continue
        notices.append(_dispose(old, out, tag, str(out),
                                f"the output left by an interrupted run at {old}") or "")
    return [notice for notice in notices if notice]


def missing_directories(directory: Path) -> list[Path]:
    """`directory` and those above it that do not exist yet, deepest first: what making
    it creates, and what a failed run removes again (`remove_if_empty`)."""
    missing = []
    while not os.path.lexists(directory) and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    return missing


def remove_if_empty(directories: list[Path]) -> None:
    """Remove the directories a failed run created for its output, deepest first, as far
    as they are empty (another run may have put something there meanwhile); one never made
    (the run failed on the way) is passed over."""
    for directory in directories:
        try:
            directory.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            return


def staging_refused(target: Path, shown: str) -> OutputError | None:
    """The error making the staging directory beside `target` would meet, found without
    writing anything (for `explain`): the nearest existing directory above it on a read-only
    file system, or one this user may not write in."""
    parent = target.absolute().parent
    existing = next((p for p in (parent, *parent.parents) if p.exists()), None)
    if existing is None:
        return None
    if not existing.is_dir():  # a file in the way
        return failure(shown, f"creating the directory {parent}",
                       *write_cause(OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))))
    cause = unwritable(existing)
    if cause is None:
        return None
    doing = (f"creating the staging directory in {existing}" if existing == parent
             else f"creating the directory {parent}")
    return failure(shown, doing, cause, False)


def _make_staging(target: Path, run_id: str, shown: str) -> Path:
    parent = target.parent
    staging = parent / f".{target.name}.partial-{os.getpid()}-{run_id}"
    for attempt in (1, 2):  # a failed run's clean-up may remove a parent made meanwhile
        doing = f"creating the directory {parent}"
        try:
            parent.mkdir(parents=True, exist_ok=True)
            doing = f"creating the staging directory {staging}"
            staging.mkdir()
            _take_group(target, staging)
            return staging
        except FileNotFoundError as exc:
            if attempt == 2:
                raise failure(shown, doing, *write_cause(exc)) from None
        except OSError as exc:
            raise failure(shown, doing, *write_cause(exc)) from None
    raise AssertionError("the second attempt returns or raises")


def _take_group(target: Path, staging: Path) -> None:
    """The group of the directory the output replaces (an empty one made for it, or the last
    night's) goes to its replacement, with its setgid bit, before any file is written, so
    that the files get it too: a group-shared output stays shared. What this user may not
    set stays as made."""
    try:
        found = os.stat(target)
    except OSError:
        return
    if not stat.S_ISDIR(found.st_mode):
        return
    with suppress(OSError):
        os.chown(staging, -1, found.st_gid)
    if found.st_mode & stat.S_ISGID:
        with suppress(OSError):
            os.chmod(staging, stat.S_IMODE(os.stat(staging).st_mode) | stat.S_ISGID)


def _take_mode(target: Path, staging: Path) -> None:
    """The mode of the directory the output replaces goes to its replacement, right before
    the rename (not before: a read-only mode would refuse the run's own writes), but for
    its owner's, who keeps every right: the next night's run must empty it."""
    with suppress(OSError):
        found = os.stat(target)
        if stat.S_ISDIR(found.st_mode):
            os.chmod(staging, stat.S_IMODE(found.st_mode) | stat.S_IRWXU)


def _holds_working_directory(target: Path) -> bool:
    """Whether `target` is the current directory or one above it."""
    try:
        here = Path(os.path.realpath(os.getcwd()))
    except OSError:
        return False
    real = Path(os.path.realpath(target))
    return here == real or real in here.parents


def _swap(staging: Path, target: Path) -> Path:
    """Swap the new output in for the old one; returns where the old one now is."""
    if _exchange(staging, target):
        return staging
    retired = staging.with_name(staging.name.replace(".partial-", ".retired-", 1))
    os.rename(target, retired)
    try:
        os.rename(staging, target)
    except OSError:
        os.rename(retired, target)
        raise
    return retired


def _commit(staging: Path, target: Path, overwrite: bool, shown: str) -> Path | None:
    """Put the finished `staging` at `target`; returns where the replaced output now is (None
    when there was none). A missing target is created atomically and never over an output
    another run committed meanwhile: that one is then judged like any existing output."""
    for _ in range(_COMMIT_ATTEMPTS):
        state = _target_state(target, overwrite, shown)
        try:
            if state == "missing":
                rename_noreplace(staging, target)
                return None
            _take_mode(target, staging)
            if state == "empty":
                os.rename(staging, target)  # the kernel refuses if it is no longer empty
                return None
            return _swap(staging, target)
        except OSError as exc:
            if exc.errno not in (*_TAKEN, errno.ENOENT) or not staging.is_dir():
                raise
    raise OutputError(f"{shown}: kept changing while this run committed its output",
                      path=shown, written=False)


HELD_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                     if hasattr(signal, name))


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C (and SIGTERM, SIGHUP) while the new output is swapped in and the old one
    removed: once started, the commit completes, so no message can say nothing was written
    after it was. A stop that came meanwhile is delivered once the block ends, to the
    handler set before: every commit tells the CLI it committed first (`tell_committed`),
    and the CLI then only notes the stop, exit code unchanged. One ignored before stays
    ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []

    def hold(signum: int, frame: object) -> None:
        came.append(signum)

    previous = {signum: signal.getsignal(signum) for signum in HELD_SIGNALS}
    for signum, handler in previous.items():
        if handler != signal.SIG_IGN:
            signal.signal(signum, hold)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is None:  # set outside Python: its Python default
                handler = (signal.default_int_handler if signum == signal.SIGINT
                           else signal.SIG_DFL)
            signal.signal(signum, handler)
        for signum in dict.fromkeys(came):
            signal.raise_signal(signum)


@contextmanager
def staged_output(out: Path, run_id: str, overwrite: bool,
                  on_event: OnEvent = ignore) -> Iterator[Path]:
    """Yield a hidden staging directory beside the output; on normal exit it replaces the
    output atomically.

    A symbolic link `out` is followed (`output_target`). An existing output is replaced only
    with `overwrite`, and only when it is provably a snim-batch output (`ownership_problem`),
    checked before any work, at the commit, and again right before it is deleted. A failed
    write names the output, the file and the cause (`writing`). The staging directory is
    removed on any exception. A run killed outright leaves only a hidden
    `.NAME.partial-PID-RUN` directory, cleaned up by the next run. `on_event` gets what the
    user should know though the run succeeded (an old output kept aside).
    """
    refuse_long_names(out, "--out")
    target = output_target(out)
    shown = _output_shown(out, target)
    if not target.name:
        raise OutputError(f"{shown}: the root directory cannot be an output")
    refuse_inside_delta_table(out, shown)
    refuse_inside_snim_output(out, shown)
    refuse_long_staging(target, "partial", len(run_id))
    for notice in _remove_stale_staging(target):
        on_event(RunEvent.warning(notice))
    _target_state(target, overwrite, shown)
    created = missing_directories(target.parent)
    try:
        staging = _make_staging(target, run_id, shown)
    except BaseException:
        remove_if_empty(created)
        raise
    log.debug("staging the output in %s", staging)
    committed = False
    try:
        with kept_fresh(staging):
            yield staging
            try:
                _fsync_tree(staging)
            except OSError as exc:
                raise failure(shown, "syncing the output to disk",
                              *write_cause(exc)) from None
        with interrupts_held():
            try:
                old = _commit(staging, target, overwrite, shown)
            except OSError as exc:
                raise failure(shown, f"renaming {staging.name} to {target.name}",
                               *write_cause(exc)) from None
            committed = True
            try:
                tell_committed(on_event, shown)
            finally:  # also when the callback raised past it: the old output goes
                log.info("committed %s%s", shown, " (replacing the previous output)"
                         if old is not None else "")
                notice = (_dispose(old, target, run_id, shown, "the replaced output")
                          if old is not None else None)
            if notice:
                on_event(RunEvent.warning(notice))
    except WriteFailure as exc:
        raise failure(shown, exc.doing, exc.cause, exc.no_space) from None
    finally:
        if not committed:
            remove_staging(staging, on_event)
            remove_if_empty(created)


# zstd at level 1: on verdict tables as fast as snappy, and no larger than zstd's default
# level 3 (smaller, with UUID position ids), which is slower to write (docs/performance.md)
ZSTD_LEVEL = 1


def write_parquet(frame: pl.DataFrame, path: Path) -> None:
    """One output table as Parquet; a failure names the file (see `writing`)."""
    with writing(path.name):
        frame.write_parquet(path, compression="zstd", compression_level=ZSTD_LEVEL,
                            statistics=True)


def empty_with_text_keys(path: Path, names: list[str]) -> None:
    """Write again a staged table of no rows (a file, or a directory of part files) with
    these columns as text: the types that no row decided (`run`), the other columns as
    they were."""
    parts = sorted(path.glob("part-*.parquet")) if path.is_dir() else [path]
    if not parts:
        return
    frame = pl.read_parquet(parts[0], glob=False).head(0)
    frame = frame.with_columns(pl.col(names).cast(pl.String))
    with writing(path.name):
        for part in parts:
            part.unlink()
    write_parquet(frame, parts[0])


def sink_parquet(frame: pl.LazyFrame, path: Path) -> None:
    """Stream a lazy frame to one Parquet file (columns computed chunk by chunk). Enum
    columns are written as the dictionary-encoded text Parquet stores anyway, from their
    codes, and declared plain text (`_enums_as_text`): readers see a string column, as if the
    writer had hashed every row's text to find its dictionary."""
    schema = frame.collect_schema()
    with writing(path.name):
        frame.sink_parquet(path, compression="zstd", compression_level=ZSTD_LEVEL,
                           statistics=True, metadata=_enums_as_text(schema))


def _enums_as_text(schema: pl.Schema) -> dict[str, str] | None:
    """The Arrow schema polars would store for `schema` with its Enum columns as String
    (the `ARROW:schema` key readers take column types from), or None when it has none."""
    if not any(isinstance(dtype, pl.Enum) for dtype in schema.values()):
        return None
    text = pl.Schema({name: pl.String if isinstance(dtype, pl.Enum) else dtype
                      for name, dtype in schema.items()})
    return _stored_schema(pl.DataFrame(schema=text).write_parquet)


def declared_text(schema: pa.Schema) -> dict[str, str] | None:
    """`ARROW:schema` metadata declaring the dictionary-encoded columns of `schema` as the
    text they hold, as pyarrow would store it (None when it has none): a writer given the
    codes encodes them without hashing each row's text, and readers see a text column.
    Written with `store_schema=False` and this metadata (`scratch.Spill.parquet`)."""
    if not any(pa.types.is_dictionary(field.type) for field in schema):
        return None
    text = as_values(schema)
    return _stored_schema(lambda written: pq.ParquetWriter(written, text).close())  # not
    # pq.write_table: it imports pandas


def as_values(schema: pa.Schema) -> pa.Schema:
    """`schema` with each dictionary-encoded column as the values it holds (text, for the
    merge's codes)."""
    return pa.schema([field.with_type(field.type.value_type)
                      if pa.types.is_dictionary(field.type) else field for field in schema])


def _stored_schema(write: Callable[[io.BytesIO], None]) -> dict[str, str]:
    """The `ARROW:schema` a Parquet writer stores, from an empty file `write` writes."""
    written = io.BytesIO()
    write(written)
    written.seek(0)
    stored = pq.read_metadata(written).metadata or {}
    return {"ARROW:schema": stored[b"ARROW:schema"].decode("ascii")}
