"""What is at an object-store output before a run replaces it: whether it is provably a
snim-batch output (every object below its prefixes listed, at its recorded size), what dead
runs left, and what replaced outputs left below the prefixes a manifest names as retired.
Reads only; `remote_commit` acts on it."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from pipeline.errors import OutputError, SnimError, UsageError
from pipeline.io.outputs.manifest import MANIFEST, RUN_FILE, RUN_ID, few_names, written_by_snim
from pipeline.io.store import object_store
from pipeline.io.store.locations import Location

log = logging.getLogger(__name__)

RETIRED = "retired_prefixes"
"""The manifest key listing replaced outputs' RUN_ID/ prefixes: what is left below them was
kept on purpose, and is kept (and named) by every later run until the user removes it; but
for the replaced outputs' own files (RETIRED_FILES), deleted when still as recorded."""

RETIRED_FILES = "retired_files"
"""The manifest key mapping each file of the outputs the run replaced to [size, modification
time] as the run found it: the run deletes them after its commit, and a later run deletes
any it could not that is still the same object (a user's file put in its place since has
another modification time, and is kept)."""


@dataclass
class Target:
    """What is at OUT before the run: the manifest's ETag (None: no output), the keys it
    lists with their recorded sizes, per RUN_ID/ prefix no manifest lists its run files with
    their modification times, below earlier replaced outputs' prefixes their files still as
    recorded (`stale`: an earlier deletion failed) and what earlier runs kept there."""

    etag: str | None = None
    listed: dict[str, int | None] = field(default_factory=dict)
    leftovers: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    stale: dict[str, int | None] = field(default_factory=dict)
    kept: list[str] = field(default_factory=list)
    seen: dict[str, float] = field(default_factory=dict)  # listed and stale objects' mtimes

    def replaced(self) -> dict[str, int | None]:
        """The files this run deletes after its commit, with their recorded sizes."""
        return {path: size for path, size in {**self.listed, **self.stale}.items()
                if RUN_ID.fullmatch(path.split("/", 1)[0])}

    def retired_files(self) -> dict[str, list[int | float]]:
        """RETIRED_FILES of the new manifest: each replaced file still there, as found."""
        return {path: [size, self.seen[path]] for path, size in sorted(self.replaced().items())
                if size is not None and self.seen.get(path)}  # 0.0: a store without times

    def retired(self) -> list[str]:
        """The prefixes the new manifest names as RETIRED: the replaced outputs', and those
        still holding what an earlier run kept."""
        heads = {path.split("/", 1)[0] for path in [*self.replaced(), *self.kept]}
        return sorted(heads)


def _recorded_size(entry: dict[str, Any]) -> int | None:
    size = entry.get("size")
    return size if type(size) is int else None


def listed_paths(manifest: dict[str, Any]) -> dict[str, int | None] | None:
    """The paths under OUT that a remote output's manifest lists (its files, and every file
    of its directories) with the size recorded for each (None: none), or None when it is no
    manifest of a remote output."""
    outputs = manifest.get("outputs")
    if not isinstance(outputs, list):
        return None
    paths: dict[str, int | None] = {}
    for entry in outputs:
        if not isinstance(entry, dict) or entry.get("name") == MANIFEST:
            continue
        path = entry.get("path")
        if not isinstance(path, str):
            return None
        if entry.get("type") == "directory":
            files = entry.get("files")
            if not isinstance(files, list):
                return None
            paths.update((f"{path}/{f.get('name')}", _recorded_size(f))
                         for f in files if isinstance(f, dict))
        else:
            paths[path] = _recorded_size(entry)
    return paths


def read_manifest(target: Location, named: Location | None = None
                  ) -> tuple[dict[str, Any], str | None] | None:
    """OUT/manifest.json parsed, and its ETag; None when there is none. A store failure names
    `named` (an --out below `target`) when given, else the manifest."""
    location = target.child(MANIFEST)
    store = object_store.filesystem(location)
    try:
        with store.open_input_file(location.store_path) as handle:
            meta = {k.lower(): v for k, v in (handle.metadata() or {}).items()}
            data = handle.read()
    except FileNotFoundError:
        return None
    except object_store.store_failures() as exc:
        problem = (object_store.store_error(location, exc, "reading the output's manifest")
                   if named is None else object_store.store_error(
                       named, exc, f"reading {location}, to check that it is not inside a "
                                   "snim-batch output"))
        if "no such object" in str(problem):
            return None
        raise problem from None
    etag = meta.get("etag")
    if isinstance(etag, bytes):
        etag = etag.decode(errors="replace")
    try:
        parsed = json.loads(data)
    except ValueError:
        parsed = None
    return (parsed if isinstance(parsed, dict) else {}), etag.strip('"') if etag else None


def _bucket_may_exist(target: Location) -> bool:
    """False only when the store says the bucket does not exist: credentials limited to a
    prefix may not look the bucket up (HeadBucket refused), and then the uploads tell."""
    try:
        return object_store.bucket_exists(target)
    except SnimError as exc:
        log.debug("%s: the bucket could not be looked up (%s)", target, exc)
        return True


def refuse_inside_remote_output(target: Location) -> None:
    """`commit.refuse_inside_snim_output` for a prefix: a UsageError when a prefix above
    `target` holds a snim-batch manifest (one GET a prefix above, a miss as a rule)."""
    parts = target.key.strip("/").split("/")[:-1]
    for depth in range(len(parts), 0, -1):
        above = target.at_key("/".join(parts[:depth]))
        found = read_manifest(above, named=target)
        if found is not None and written_by_snim(found[0]):
            raise UsageError(f"{target}: is inside the snim-batch output {above}, whose "
                             "manifest would no longer list all it holds (its next "
                             "--overwrite would refuse to replace it): choose --out outside "
                             "every snim-batch output", path=str(target))


def target_state(target: Location, overwrite: bool) -> Target:
    """Check what is at `target` (reads only): not inside another output; its bucket must
    exist; nothing there, or only dead runs' leftovers, is fine; a snim-batch output whose
    manifest lists every object below the prefixes it names, each at its recorded size,
    needs `overwrite`; anything else is refused."""
    refuse_inside_remote_output(target)
    objects = object_store.list_below(target)
    if target.key and object_store.is_object(target):  # as a local --out that is a file
        raise OutputError(f"{target}: is an object, not a prefix (a run's output is the "
                          "objects below a prefix)", path=target, refused=True, written=False)
    if not objects and not _bucket_may_exist(target):
        raise OutputError(f"{target}: the bucket {target.bucket!r} does not exist",
                          path=target, written=False)
    found = read_manifest(target)
    state, retired, retired_files = Target(), set(), {}
    if found is not None:
        manifest, state.etag = found
        listed = listed_paths(manifest) if written_by_snim(manifest) else None
        if listed is None:
            raise OutputError(f"{target}: exists and is not provably a snim-batch output (its "
                              f"{MANIFEST} was not written by snim-batch to an object store)",
                              path=target, refused=True, written=False)
        state.listed = listed
        retired, retired_files = _retired(manifest)
    owned = {path.split("/", 1)[0] for path in state.listed}
    unlisted, resized = [], []
    for relative, size, mtime in below(target, objects):
        if relative == MANIFEST:
            continue
        if relative in state.listed:
            state.seen[relative] = mtime
            expected = state.listed[relative]
            if expected is not None and size != expected:
                resized.append(f"{relative} ({size} bytes, listed with {expected})")
            continue
        head, _, rest = relative.partition("/")
        if head in retired and head not in owned:
            if retired_files.get(relative) == (size, mtime):
                state.stale[relative], state.seen[relative] = size, mtime
            else:
                state.kept.append(relative)
        elif RUN_ID.fullmatch(head) and head not in owned and RUN_FILE.fullmatch(rest):
            state.leftovers.setdefault(head, []).append((relative, mtime))
        else:
            unlisted.append(relative)
    problems = []
    if unlisted:
        problems.append(f"holds what its {MANIFEST} does not list: {few_names(unlisted)}"
                        if found is not None
                        else f"holds objects and no {MANIFEST}: {few_names(unlisted)}")
    if resized:
        problems.append(f"files changed size since its {MANIFEST} listed them: "
                        f"{few_names(resized)}")
    if problems:
        raise OutputError(f"{target}: exists and is not provably a snim-batch output "
                          f"({'; '.join(problems)})", path=target, refused=True, written=False)
    if found is not None and not overwrite:
        raise OutputError(f"{target}: output already exists (pass --overwrite to replace it)",
                          path=target)
    return state


def _retired(manifest: dict[str, Any]
             ) -> tuple[set[str], dict[str, tuple[int, float]]]:
    """The RUN_ID/ prefixes a manifest names as RETIRED, with the run files of RETIRED_FILES
    below them as (size, modification time) (anything else there is ignored)."""
    named, files = manifest.get(RETIRED), manifest.get(RETIRED_FILES)
    prefixes = ({p for p in named if isinstance(p, str) and RUN_ID.fullmatch(p)}
                if isinstance(named, list) else set())
    found: dict[str, tuple[int, float]] = {}
    for path, facts in files.items() if isinstance(files, dict) else ():
        head, _, rest = path.partition("/") if isinstance(path, str) else ("", "", "")
        if (head in prefixes and RUN_FILE.fullmatch(rest) and isinstance(facts, list)
                and len(facts) == 2 and type(facts[0]) is int
                and type(facts[1]) in (int, float)):
            found[path] = (facts[0], float(facts[1]))
    return prefixes, found


def below(target: Location, objects: list[tuple[str, int, float]]
           ) -> list[tuple[str, int, float]]:
    """`list_below`'s objects with their keys relative to `target`."""
    start = len(target.key) + 1 if target.key else 0
    return [(key[start:], size, mtime) for key, size, mtime in objects]
