"""Finished files placed into a directory that already exists: the page `report` adds to a
run's output (listed in its manifest), a page written anywhere else, and (in
`publish_tables`, with the helpers here) `convert`'s tables. Each file is written whole under
a temporary name, synced, then renamed into place; a failure puts back what was moved and
removes what was written, so the directory is as it was."""

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

from pipeline.errors import OutputError
from pipeline.io.outputs.commit import (
    interrupts_held,
    pid_alive,
    remove_dead_staging,
    rename_noreplace,
)
from pipeline.io.outputs.failures import failure, write_cause
from pipeline.io.outputs.manifest import MANIFEST, is_snim_output, lists_its_outputs

_PAGE_OPTION = "--html"


_ELSEWHERE = f"write the page elsewhere with {_PAGE_OPTION}"


TAG_WIDTH = 8  # characters of a temporary name's random tag


def temp_token() -> str:
    """A temporary name's unique part: this process and a random tag."""
    return f"{os.getpid()}-{secrets.token_hex(TAG_WIDTH // 2)}"


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


def _resolved(target: Path, output: Path) -> Path:
    """Where a page written at `target` lands: its directory with every link resolved, and,
    unless that is the run output `output` (where nothing is followed), for a symbolic
    link `target` the path the link leads to."""
    target = target.absolute()
    named = Path(os.path.realpath(target.parent)) / target.name
    if named.parent != output and target.is_symlink():
        return Path(os.path.realpath(target))
    return named


def _enclosing_output(directory: Path) -> Path | None:
    """The snim-batch output that `directory` is or lies in, if any."""
    for candidate in (directory, *directory.parents):
        if is_snim_output(candidate):
            return candidate
    return None


def place_page(out_dir: Path, target: Path, data: bytes) -> None:
    """Write the page `data` of the run in `out_dir` at `target`: directly in that output it is
    added to the output (`add_page`); inside any other snim-batch output, or inside this one
    but not directly, it is refused (the page would make that output unprovable); elsewhere it
    replaces `target` whole (`write_page`)."""
    output = Path(os.path.realpath(out_dir))
    where = _resolved(target, output)
    if where.parent == output:
        add_page(output, where.name, data)
        return
    inside = _enclosing_output(where.parent)
    if inside is not None:
        raise OutputError(f"{target}: inside the snim-batch output {inside}, whose manifest "
                          "would no longer list all it holds; refusing to write there (a page "
                          "goes directly in the output it describes, or outside any output)")
    write_page(target, where, data)


def write_page(shown: Path, where: Path, data: bytes) -> None:
    """Replace the file at `where` (`shown` as the user named it) with `data`, whole: written
    beside it under a temporary name, synced, then renamed over it."""
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
    tmp = where.parent / f".{where.name}.tmp-{temp_token()}"
    try:
        write_synced(tmp, write_bytes(data))
        os.replace(tmp, where)
    except OSError as exc:
        discard(tmp)
        raise failure(str(shown), "writing it", *write_cause(exc), _PAGE_OPTION) from None
    except BaseException:
        discard(tmp)
        raise


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


def _page_staging(output: Path) -> Path:
    """A new staging directory name for a report page, of the form `_page_staging_name`
    matches (so that a dead run's is found and removed)."""
    return output.parent / f".{output.name}.partial-{os.getpid()}-report-{secrets.token_hex(4)}"


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


def add_page(output: Path, name: str, data: bytes) -> None:
    """Add page `name` to the run output `output` (a directory with every link resolved),
    listed in its manifest as added by report with its size, so that a later --overwrite
    still proves the directory a snim-batch output.

    Only a page report added before is replaced, and only while it is still that page.
    The page and the new manifest are written whole in a staging directory beside the
    output (as a run stages), then renamed in: the earlier page out, the manifest, the new
    page. So at every moment the manifest lists all the directory holds and each page it
    lists is whole (or absent), and a failure can put back what was moved."""
    page = output / name
    with _locked(output):
        _remove_dead_page_staging(output)
        raw, manifest = _read_output_manifest(output)
        listed = _page_entries(manifest["outputs"], page)
        earlier = _earlier_page(page, listed)
        entry = {"name": name, "type": "file", "size": len(data), "added_by": "report"}
        manifest["outputs"] = sorted(
            [e for e in manifest["outputs"] if e not in listed] + [entry],
            key=lambda e: e.get("name", "") if isinstance(e, dict) else e)
        updated = (json.dumps(manifest, indent=2, default=str) + "\n").encode()
        staging = _page_staging(output)
        try:
            _stage_page(staging, page, data, updated, raw)
            with interrupts_held():
                _swap_page_in(staging, page, earlier)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _stage_page(staging: Path, page: Path, data: bytes, manifest: bytes, previous: bytes
                ) -> None:
    steps = ((f"creating the staging directory {staging}", staging.mkdir),
             (f"writing it in {staging}",
              lambda: write_synced(staging / "page", write_bytes(data))),
             (f"writing the updated {MANIFEST} in {staging}",
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
        rename_noreplace(staging / "page", page)
    except OSError as exc:
        for step in reversed(undo):
            with suppress(OSError):
                step()
        raise failure(str(page), "renaming it into place", *write_cause(exc), _PAGE_OPTION
                      ) from None


_TEMPORARY = re.compile(r"\.(.+)\.(tmp|old)-(\d+)-[0-9a-f]{8}")
_JOURNAL = re.compile(r"\.snim-tables-((\d+)-[0-9a-f]{8})\.journal")


def journal_name(token: str) -> str:
    """The journal `publish_tables.write_tables` keeps while it renames its tables into place
    (`remove_dead_temporaries` finishes what a killed one began)."""
    return f".snim-tables-{token}.journal"


def remove_dead_temporaries(directory: Path, names: list[str]) -> None:
    """Clean up what a killed `write_page` or `write_tables` left in `directory` for the files
    `names`; only names of that exact form whose process is gone, so provably ours. A
    journal left means every table was written whole and the renames had begun: they are
    finished (each `.NAME.tmp-` of a name it lists renamed into place). Then any
    `.NAME.tmp-` (an unfinished file) and `.NAME.old-` (a replaced file) of a dead process
    is removed."""
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return
    for entry in entries:
        found = _JOURNAL.fullmatch(entry)
        if found and not pid_alive(int(found.group(2))):
            with suppress(OSError, ValueError):
                for name in json.loads((directory / entry).read_bytes()):
                    tmp = directory / f".{name}.tmp-{found.group(1)}"
                    if os.path.lexists(tmp):
                        os.replace(tmp, directory / name)
                os.unlink(directory / entry)
    for entry in entries:
        found = _TEMPORARY.fullmatch(entry)
        if found and found.group(1) in names and not pid_alive(int(found.group(3))):
            with suppress(OSError):
                os.unlink(directory / entry)
