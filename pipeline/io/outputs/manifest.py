"""The run manifest: written last, it lists every output file; a directory is provably a
snim-batch output only when its manifest lists everything in it."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, first_line
from pipeline.io.outputs.failures import writing
from pipeline.io.outputs.whole import whole_file

MANIFEST = "manifest.json"
MANIFEST_SCHEMA_VERSION = 1
"""The manifest's `schema_version`: raised when a key changes meaning or goes away (a key
may be added within a version). Manifests written before it was recorded have none."""
_NAMES_SHOWN = 5


def few_names(names: list[str]) -> str:
    more = len(names) - _NAMES_SHOWN
    return ", ".join(names[:_NAMES_SHOWN]) + (f" and {more} more" if more > 0 else "")


RUN_ID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{6}")
"""A run's id (`run.run_job`): the name of the prefix an object-store output uploads to."""
RUN_FILE = re.compile(r"(verdicts|rejects|sg_tables|summary)\.parquet(/part-[^/]+)?")
"""What a run uploads under its RUN_ID/ prefix (Spark: part files in directories)."""


def written_by_snim(manifest: object) -> bool:
    """Whether a parsed manifest.json is one snim-batch wrote: a run_id and versions naming
    snim-batch (enough never to read it as input; replacing it takes `_listed` too)."""
    return (isinstance(manifest, dict) and isinstance(manifest.get("run_id"), str)
            and isinstance(manifest.get("versions"), dict)
            and "snim-batch" in manifest["versions"])


def _plain_name(name: object) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name


_Sizes = dict[str, int | None]


def _size(entry: dict[str, Any]) -> tuple[bool, int | None]:
    """(whether it is valid, the size) of an entry's recorded size; None: none recorded (a
    manifest before sizes were recorded, or the manifest itself)."""
    size = entry.get("size")
    if size is None:
        return True, None
    return type(size) is int and size >= 0, size


def _listed(manifest: object) -> dict[str, int | None | _Sizes] | None:
    """The entries a snim-batch manifest lists (name -> the size of a file, None when none is
    recorded, or a dict of a directory's files and their sizes), or None when it is not a
    manifest that snim-batch wrote. A bare name (as in manifests before directory contents
    and sizes were listed) is a file of unknown size."""
    if not written_by_snim(manifest):
        return None
    outputs = manifest.get("outputs")  # a dict: written_by_snim checked it
    if not isinstance(outputs, list):
        return None
    listed: dict[str, int | None | _Sizes] = {}
    for entry in outputs:
        if _plain_name(entry):
            listed[entry] = None
            continue
        if not isinstance(entry, dict) or not _plain_name(entry.get("name")):
            return None
        if entry.get("type") == "file":
            valid, size = _size(entry)
            if not valid:
                return None
            listed[entry["name"]] = size
        elif entry.get("type") == "directory" and isinstance(entry.get("files"), list):
            files: _Sizes = {}
            for item in entry["files"]:
                if not isinstance(item, dict) or not _plain_name(item.get("name")):
                    return None
                valid, size = _size(item)
                if not valid:
                    return None
                files[item["name"]] = size
            listed[entry["name"]] = files
        else:
            return None
    return listed


def lists_its_outputs(manifest: object) -> bool:
    """Whether a parsed manifest.json is one snim-batch wrote, with a valid `outputs` list:
    one that a page can be added to and still prove the directory."""
    return _listed(manifest) is not None


def _differences(directory: Path, listed: dict[str, int | None | _Sizes]
                 ) -> tuple[list[str], list[str]]:
    """(entries of `directory` that `listed` does not account for, a directory's name ending
    with / and an entry of another kind than listed counting as unlisted; listed files whose
    size is not the one recorded, each with both sizes)."""
    unlisted: list[str] = []
    resized: list[str] = []

    def check_file(entry: os.DirEntry[str], shown: str, size: int | None) -> None:
        if not entry.is_file(follow_symlinks=False):
            unlisted.append(shown + "/" * entry.is_dir(follow_symlinks=False))
            return
        actual = entry.stat(follow_symlinks=False).st_size
        if size is not None and actual != size:
            resized.append(f"{shown} ({actual} bytes, listed with {size})")

    with os.scandir(directory) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            is_dir = entry.is_dir(follow_symlinks=False)
            if entry.name not in listed:
                unlisted.append(entry.name + "/" * is_dir)
                continue
            expected = listed[entry.name]
            if not isinstance(expected, dict):
                check_file(entry, entry.name, expected)
            elif not is_dir:
                unlisted.append(entry.name)
            else:
                with os.scandir(entry.path) as children:
                    for child in sorted(children, key=lambda c: c.name):
                        shown = f"{entry.name}/{child.name}"
                        if child.name not in expected:
                            unlisted.append(shown + "/" * child.is_dir(follow_symlinks=False))
                        else:
                            check_file(child, shown, expected[child.name])
    return unlisted, resized


def ownership_problem(directory: Path) -> str | None:
    """Why `directory` is not provably a snim-batch output, or None when it is: its
    manifest.json was written by snim-batch (run_id, versions, outputs) and lists every entry
    in it, and every file in each directory it lists, each of the size it records."""
    try:
        manifest = json.loads(_file_bytes(directory / MANIFEST))
    except FileNotFoundError:
        return f"no {MANIFEST}"
    except (OSError, ValueError, RecursionError) as exc:
        return f"unreadable {MANIFEST}: {first_line(exc)}"
    listed = _listed(manifest)
    if listed is None:
        return f"its {MANIFEST} was not written by snim-batch"
    try:
        unlisted, resized = _differences(directory, listed)
    except OSError as exc:
        return f"cannot list it: {exc.strerror}"
    problems = []
    if unlisted:
        problems.append(f"holds what its {MANIFEST} does not list: {few_names(unlisted)}")
    if resized:
        problems.append(f"files changed size since its {MANIFEST} listed them: "
                        f"{few_names(resized)}")
    return "; ".join(problems) or None


def resized_tables(directory: Path, manifest: object) -> list[str]:
    """The run's tables (files, or part files of the Spark engine's) in the output
    `directory` whose size is not the one its `manifest` records (cut short, or rewritten
    since the run wrote them), each with both sizes."""
    listed = _listed(manifest)
    if listed is None:
        return []
    tables = {name: size for name, size in listed.items() if RUN_FILE.fullmatch(name)}
    return _differences(directory, tables)[1]


def output_listing(directory: Path) -> list[dict[str, Any]]:
    """The manifest's `outputs` for a finished staging directory: each file with its size,
    each directory (Spark's part files) with every file in it and its size, and the
    manifest itself (written after, so without a size). A later --overwrite replaces the
    directory only while this accounts for everything in it."""
    entries: list[dict[str, Any]] = [{"name": MANIFEST, "type": "file"}]
    with os.scandir(directory) as found:
        for entry in found:
            if entry.name == MANIFEST:
                continue
            if entry.is_dir(follow_symlinks=False):
                with os.scandir(entry.path) as children:
                    files = [{"name": c.name, "size": c.stat(follow_symlinks=False).st_size}
                             for c in children]
                entries.append({"name": entry.name, "type": "directory",
                                "files": sorted(files, key=lambda f: f["name"])})
            else:
                entries.append({"name": entry.name, "type": "file",
                                "size": entry.stat(follow_symlinks=False).st_size})
    return sorted(entries, key=lambda e: e["name"])


def write_manifest(manifest: dict[str, Any], directory: Path) -> None:
    """Write `directory`/manifest.json atomically (a synced temporary file renamed over it).
    In a run it is written last: a directory without one is never a complete output."""
    text = json.dumps(manifest, indent=2, sort_keys=False, default=str) + "\n"
    with writing(MANIFEST), whole_file(directory / MANIFEST) as temporary:
        temporary.write_text(text, encoding="utf-8")


def _file_bytes(path: Path) -> bytes:
    """The bytes of `path`, which must be a regular file: a named pipe there (opened without
    waiting for a writer) raises OSError, where reading it would wait forever, out of reach
    of a stop signal."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file (a pipe or device)")
        return file.read()


def read_manifest(directory: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(_file_bytes(directory / MANIFEST))
    except FileNotFoundError:
        if not directory.exists():
            raise InputError(f"{directory}: does not exist") from None
        raise InputError(f"{directory}: not a snim-batch output (no {MANIFEST})") from None
    except NotADirectoryError:
        raise InputError(f"{directory}: not a snim-batch output (a file, not a directory)"
                         ) from None
    except OSError as exc:
        raise InputError(f"{directory / MANIFEST}: unreadable manifest "
                         f"({exc.strerror or exc})") from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{directory / MANIFEST}: unreadable manifest ({exc})") from None
    if not isinstance(manifest, dict):
        raise InputError(f"{directory / MANIFEST}: not a snim-batch manifest (not an object)")
    return manifest


def is_snim_output(directory: Path) -> bool:
    """Whether `directory` holds a manifest.json written by snim-batch: a JSON object with a
    run_id and versions naming snim-batch."""
    try:
        manifest = json.loads(_file_bytes(directory / MANIFEST))
    except (OSError, ValueError, RecursionError):
        return False
    return written_by_snim(manifest)
