"""Finished files placed into a directory that already exists: the page `report` adds to a
run's output (listed in its manifest), a page written anywhere else, and (in
`publish_tables`, with the helpers here) `convert`'s tables. Each file is written whole in a
hidden staging directory, synced, then renamed into place; a failure puts back what was moved
and removes what was written, so the directory is as it was. The staging is the `Output`
protocol's (`io.outputs.kinds`: `PageInOutput`, `PageElsewhere`, `TablesDirectory`): the
command writes its files into the directory `stage` gives, then commits or rolls back."""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from pipeline.errors import OutputError, WriteFailure
from pipeline.events import OnEvent, ignore, tell_committed
from pipeline.io.outputs.commit import (
    delta_table_holding,
    interrupts_held,
    made_by_live_process,
    remove_dead_staging,
    rename_noreplace,
    snim_output_holding,
)
from pipeline.io.outputs.failures import failure, write_cause, writing
from pipeline.io.outputs.manifest import MANIFEST, lists_its_outputs

_PAGE_OPTION = "--html"


_ELSEWHERE = f"write the page elsewhere with {_PAGE_OPTION}"


TAG_WIDTH = 8  # characters of a temporary name's random tag


def new_tag() -> str:
    """A random tag for a temporary name (TAG_WIDTH hex digits): what `report` and `convert`
    give their output's `stage` (a run gives its run id)."""
    return secrets.token_hex(TAG_WIDTH // 2)


def write_synced(path: Path, fill: Callable[[Path], None]) -> None:
    """Let `fill` write the new file `path`, then sync it to disk."""
    fill(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(data: bytes) -> Callable[[Path], None]:
    def fill(path: Path) -> None:
        with open(path, "xb") as fh:
            fh.write(data)

    return fill


def discard(path: Path) -> None:
    """Remove `path` if it is there; where even that fails (a read-only file system), it
    was never created."""
    with suppress(OSError):
        path.unlink(missing_ok=True)


def _resolved(target: Path, output: Path | None) -> Path:
    """Where a page written at `target` lands: its directory with every link resolved, and,
    unless that is the run output `output` (where nothing is followed), for a symbolic
    link `target` the path the link leads to."""
    target = target.absolute()
    named = Path(os.path.realpath(target.parent)) / target.name
    if named.parent != output and target.is_symlink():
        return Path(os.path.realpath(target))
    return named


PAGE_FILE = "page.html"
"""The name a page is written under in its staging directory (`staged_page`,
`staged_page_in_output`), whatever its own name."""


def write_file(path: Path, data: bytes) -> None:
    """The new file `path` holding `data`, synced; a failure is a `WriteFailure` naming it
    (`failures.writing`), which the staging it is written in words for its output."""
    with writing(path.name):
        write_synced(path, write_bytes(data))


def page_destination(out_dir: Path | None, target: Path) -> tuple[Path | None, Path]:
    """Where the page of the run in `out_dir` written at `target` goes: (the output it is
    added to, its path there) directly in that output (`staged_page_in_output`); (None, the
    path it replaces) elsewhere (`staged_page`). Inside any other snim-batch output, or
    inside this one but not directly, it is refused (the page would make that output
    unprovable), as it is inside a Delta table (no part of the table, whose full vacuum would
    delete it). `out_dir` None: a Delta table root's page, which no manifest lists."""
    output = None if out_dir is None else Path(os.path.realpath(out_dir))
    where = _resolved(target, output)
    if output is not None and where.parent == output:
        return output, where
    inside = snim_output_holding(where)
    if inside is not None:
        raise OutputError(f"{target}: inside the snim-batch output {inside}, whose manifest "
                          "would no longer list all it holds; refusing to write there (a page "
                          "goes directly in the output it describes, or outside any output)")
    table = delta_table_holding(where)
    if table is not None:
        raise OutputError(f"{target}: inside the Delta table {table}, which it is no part of "
                          "(the table's full vacuum would delete it); refusing to write there "
                          "(write the page outside every Delta table)")
    return None, where


@contextmanager
def staged_page(shown: Path, where: Path, tag: str, on_event: OnEvent = ignore
                ) -> Iterator[Path]:
    """Yield a hidden staging directory beside `where` (`shown` as the user named it) to
    write the page in (as PAGE_FILE); on normal exit the page replaces the file at `where`,
    whole, by one rename, the stop signals held, and `on_event` hears COMMITTED. On any
    failure the staging directory is removed and `where` is as it was; a write's failure
    names the page and the cause."""
    try:
        mode = where.lstat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise failure(str(shown), "inspecting it", *write_cause(exc), _PAGE_OPTION) from None
    if mode is not None and not stat.S_ISREG(mode):
        raise OutputError(f"{shown}: exists and is not a regular file", path=shown,
                          refused=True, written=False)
    remove_dead_temporaries(where.parent, [where.name])
    tmp = where.parent / f".{where.name}.tmp-{os.getpid()}-{tag}"
    try:
        tmp.mkdir()
        yield tmp
        with interrupts_held():
            os.replace(tmp / PAGE_FILE, where)
            tell_committed(on_event, str(shown))
    except WriteFailure as exc:
        raise failure(str(shown), "writing it", exc.cause, exc.no_space, _PAGE_OPTION
                      ) from None
    except OSError as exc:
        raise failure(str(shown), "writing it", *write_cause(exc), _PAGE_OPTION) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on `directory` (one `report` at a time adds to an output)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise OutputError(f"{directory}: cannot open it ({exc.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _page_staging(output: Path, tag: str) -> Path:
    """A new staging directory name for a report page, of the form `_page_staging_name`
    matches (so that a dead run's is found and removed)."""
    return output.parent / f".{output.name}.partial-{os.getpid()}-report-{tag}"


def _page_staging_name(output: Path) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(output.name)}\.partial-(\d+)-report-[0-9a-f]+")


def _remove_dead_page_staging(output: Path) -> None:
    """Remove what a killed `report` left beside the output (a run removes it too)."""
    remove_dead_staging(output.parent, _page_staging_name(output))


def _read_output_manifest(output: Path) -> tuple[bytes, dict[str, Any]]:
    """The output's manifest.json as bytes and parsed; refused unless it is a regular file
    that snim-batch wrote, listing the output's files."""
    path = output / MANIFEST
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            raise OutputError(f"{path}: not a regular file; refusing to add a page to the "
                              f"output ({_ELSEWHERE})")
        raw = path.read_bytes()
        manifest = json.loads(raw)
    except OSError as exc:
        raise OutputError(f"{path}: cannot read it ({exc.strerror})") from None
    except (ValueError, RecursionError):
        manifest = None
    if not lists_its_outputs(manifest):
        raise OutputError(f"{output}: its {MANIFEST} does not list the output's files as "
                          f"snim-batch writes them; refusing to add a page to it ({_ELSEWHERE})")
    assert isinstance(manifest, dict)
    return raw, manifest


def _page_entries(outputs: list[Any], page: Path) -> list[Any]:
    """The manifest entries named like `page`; refused if one is not a page report added."""
    same = [e for e in outputs if (e.get("name") if isinstance(e, dict) else e) == page.name]
    if page.name == MANIFEST or any(not isinstance(e, dict) or e.get("added_by") != "report"
                                    for e in same):
        raise OutputError(f"{page}: is one of the run's own outputs", path=page, refused=True)
    return same


def _earlier_page(page: Path, listed: list[Any]) -> bool:
    """Whether `page` holds a page that report added earlier (to be replaced); False when
    nothing is there. Anything else there is refused: a file the manifest does not list as
    report's page, a symbolic link (never followed), or a page changed since (its size)."""
    try:
        info = page.lstat()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise failure(str(page), "inspecting it", *write_cause(exc), _PAGE_OPTION) from None
    if not listed:
        why = ("not a page that report added to this output (its manifest does not list it "
               "as one); refusing to replace it")
    elif stat.S_ISLNK(info.st_mode):
        why = "a symbolic link, not the page report added; refusing to follow or replace it"
    elif not stat.S_ISREG(info.st_mode):
        why = "not a regular file, not the page report added; refusing to replace it"
    else:
        sizes = [e["size"] for e in listed if isinstance(e.get("size"), int)]
        if all(size == info.st_size for size in sizes):
            return True
        why = (f"changed since report added it ({info.st_size} bytes, listed with "
               f"{sizes[0]}); refusing to replace it")
    raise OutputError(f"{page}: {why} ({_ELSEWHERE})")


@contextmanager
def staged_page_in_output(output: Path, name: str, tag: str, on_event: OnEvent = ignore
                          ) -> Iterator[Path]:
    """Yield a directory to write page `name` of the run output `output` (a directory with
    every link resolved) in (as PAGE_FILE); on normal exit the page is added to the output,
    listed in its manifest as added by report with its size, so that a later --overwrite
    still proves the directory a snim-batch output.

    Only a page report added before is replaced, and only while it is still that page.
    The page and the new manifest are written whole in a staging directory beside the
    output (as a run stages), then renamed in: the earlier page out, the manifest, the new
    page. So at every moment the manifest lists all the directory holds and each page it
    lists is whole (or absent), and a failure can put back what was moved. The output is
    locked throughout (one report at a time adds to it). The renames hold the stop signals;
    `on_event` hears COMMITTED once they are done."""
    page = output / name
    with _locked(output):
        _remove_dead_page_staging(output)
        raw, manifest = _read_output_manifest(output)
        listed = _page_entries(manifest["outputs"], page)
        earlier = _earlier_page(page, listed)
        staging = _page_staging(output, tag)
        try:
            _make_page_staging(staging, page)
            yield staging / "page"
            entry = {"name": name, "type": "file",
                     "size": (staging / "page" / PAGE_FILE).lstat().st_size,
                     "added_by": "report"}
            manifest["outputs"] = sorted(
                [e for e in manifest["outputs"] if e not in listed] + [entry],
                key=lambda e: e.get("name", "") if isinstance(e, dict) else e)
            updated = (json.dumps(manifest, indent=2, default=str) + "\n").encode()
            _stage_manifests(staging, page, updated, raw)
            with interrupts_held():
                _swap_page_in(staging, page, earlier)
                tell_committed(on_event, str(page))
        except WriteFailure as exc:
            raise failure(str(page), f"writing it in {staging}", exc.cause, exc.no_space,
                          _PAGE_OPTION) from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _make_page_staging(staging: Path, page: Path) -> None:
    try:
        staging.mkdir()
        (staging / "page").mkdir()
    except OSError as exc:
        raise failure(str(page), f"creating the staging directory {staging}",
                      *write_cause(exc), _PAGE_OPTION) from None


def _stage_manifests(staging: Path, page: Path, manifest: bytes, previous: bytes) -> None:
    steps = ((f"writing the updated {MANIFEST} in {staging}",
              lambda: write_synced(staging / "manifest.new", write_bytes(manifest))),
             (f"keeping the current {MANIFEST} in {staging}",
              lambda: write_synced(staging / "manifest.old", write_bytes(previous))))
    for doing, step in steps:
        try:
            step()
        except OSError as exc:
            raise failure(str(page), doing, *write_cause(exc), _PAGE_OPTION) from None


def _swap_page_in(staging: Path, page: Path, earlier: bool) -> None:
    """Rename the staged page and manifest into the output, in the order that keeps the
    output provably whole; on a failure, put back what was renamed."""
    manifest = page.parent / MANIFEST
    aside = staging / "earlier"
    undo: list[Callable[[], None]] = []
    try:
        if earlier:
            os.rename(page, aside)
            undo.append(lambda: rename_noreplace(aside, page))
        os.rename(staging / "manifest.new", manifest)
        undo.append(lambda: os.rename(staging / "manifest.old", manifest))
        rename_noreplace(staging / "page" / PAGE_FILE, page)
    except OSError as exc:
        for step in reversed(undo):
            with suppress(OSError):
                step()
        raise failure(str(page), "renaming it into place", *write_cause(exc), _PAGE_OPTION
                      ) from None


_TEMPORARY = re.compile(r"\.(.+)\.(tmp|old)-(\d+)-[0-9a-f]{8}")
_JOURNAL = re.compile(r"\.snim-tables-((\d+)-[0-9a-f]{8})\.journal")
_TABLES_STAGING = re.compile(r"\.snim-tables-(\d+)-[0-9a-f]{8}")


def journal_name(token: str) -> str:
    """The journal `publish_tables.staged_tables` keeps while it renames its tables into
    place (`remove_dead_temporaries` finishes what a killed one began)."""
    return f".snim-tables-{token}.journal"


def remove_dead_temporaries(directory: Path, names: list[str]) -> None:
    """Clean up what a killed page or tables writer (`staged_page`, `staged_tables`) left in
    `directory` for the files `names`; only names of that exact form whose process is gone,
    so provably ours. A journal left means every table was staged whole and the renames had
    begun: they are finished (each table it lists still in the staging directory
    `.snim-tables-TOKEN`, or as `.NAME.tmp-TOKEN`, renamed into place). Then any staging
    directory, `.NAME.tmp-` (an unfinished file or page) and `.NAME.old-` (a replaced file)
    of a dead process is removed."""
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return
    for entry in entries:
        found = _JOURNAL.fullmatch(entry)
        if found and not made_by_live_process(directory / entry, int(found.group(2))):
            token = found.group(1)
            with suppress(OSError, ValueError):
                for name in json.loads((directory / entry).read_bytes()):
                    for staged in (directory / f".snim-tables-{token}" / name,
                                   directory / f".{name}.tmp-{token}"):
                        if os.path.lexists(staged):
                            os.replace(staged, directory / name)
                os.unlink(directory / entry)
    for entry in entries:
        found = _TABLES_STAGING.fullmatch(entry)
        if found and not made_by_live_process(directory / entry, int(found.group(1))):
            shutil.rmtree(directory / entry, ignore_errors=True)
        found = _TEMPORARY.fullmatch(entry)
        if found and found.group(1) in names and not made_by_live_process(
                directory / entry, int(found.group(3))):
            _remove_entry(directory / entry)


def _remove_entry(path: Path) -> None:
    """Remove a file, or a directory with what it holds (a link is never followed)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with suppress(OSError):
            os.unlink(path)
