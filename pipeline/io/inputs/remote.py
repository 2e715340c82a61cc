"""Finding the input objects of an object-store spec, as `inputs.resolve_inputs` finds files:
an object that exists is that object; else a prefix is a directory (its .parquet, .pq and
.csv objects, at any depth, and objects named without a suffix that start as Parquet) and a URL
with glob characters is a pattern over keys, `**` matching any depth. Below what was named,
names starting with _ or . are skipped, and so are snim-batch outputs (prefixes holding a
manifest.json) and the run's own output."""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import PurePosixPath

from pipeline.errors import InputError
from pipeline.io.outputs.manifest import MANIFEST, RUN_FILE, RUN_ID, written_by_snim
from pipeline.io.store.locations import GLOB_CHARS, Location
from pipeline.io.store.object_store import (
    bucket_exists,
    filesystem,
    is_object,
    list_below,
    read_head,
    store_error,
    store_failures,
)

INPUT_SUFFIXES = (".parquet", ".pq", ".csv")
COMPRESSED_SUFFIXES = (".gz", ".gzip", ".tgz", ".z", ".zst", ".zstd", ".bz2", ".xz", ".lzma",
                       ".zip", ".lz4", ".snappy", ".br")
"""Files compressed whole (`x.csv.gz`), which a listing skips: a warning names them."""
PARQUET_MAGIC = b"PAR1"
SMALLEST_PARQUET = 12  # its magic bytes at both ends and the footer's length between


def skipped_compressed(what: str, spec: str, names: list[str]) -> str | None:
    """The warning for compressed files (or objects) `names` that a listing of `spec`
    skipped, or None if there are none: their rows would otherwise be missed unsaid."""
    if not names:
        return None
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    one = len(names) == 1
    return (f"{what} input {spec}: skipped {len(names)} {'file' if one else 'files'} named as "
            f"compressed ({shown}): a listing reads only .parquet, .pq and .csv files; "
            f"decompress {'it' if one else 'them'} to read {'its' if one else 'their'} rows "
            f"(or name {'it' if one else 'each'} as an input itself, if it is plain text)")


DELTA_TABLE = ("is a Delta table; its data files include rows that later commits removed, so "
               "read it with a Delta reader and pass the result as Parquet")


def resolve_remote(spec: Location, what: str, exclude: Location | None,
                   directories_only: bool = False,
                   on_warning: Callable[[str], None] | None = None,
                   prefix_only: bool = False) -> list[Location]:
    """The objects of `spec` (bound to its options), sorted by key; InputError naming the URL
    when there are none. `directories_only`: the glob ended in `/` (`in/*/`), so it takes
    the objects below the prefixes it matches, not an object it matches itself.
    `prefix_only`: the URL ended in `/`, so it names a prefix, as `dir/` names a directory:
    the objects below it, never an object of that key (one of both names is refused).
    `on_warning` is told of compressed objects skipped (`skipped_compressed`)."""
    if not prefix_only and is_object(spec):
        return [spec]
    parts = spec.key.split("/") if spec.key else []
    wild = next((i for i, part in enumerate(parts) if any(c in part for c in GLOB_CHARS)), None)
    if wild is None:
        base, pattern = parts, None
    else:
        base, pattern = parts[:wild], parts[wild:]
    root = spec.at_key("/".join(base))
    listed = list_below(root)
    while pattern and _exists("/".join(base + pattern[:1]), listed):
        # a component that exists as written is taken literally, as a path's on disk
        base, pattern = base + pattern[:1], pattern[1:] or None
        root = spec.at_key("/".join(base))
        listed = [entry for entry in listed if entry[0].startswith(root.key + "/")]
    tables = _delta_tables(listed)
    if spec.key in tables or root.key in tables:
        raise InputError(f"{what} input {spec}: {DELTA_TABLE}")
    outputs = _snim_outputs(root, listed) + tables + _unlisted_runs(root, listed)
    found: list[str] = []
    compressed: list[str] = []
    skipped = 0
    candidates = [key for key, size, *_ in listed if size >= SMALLEST_PARQUET
                  and _taken(_relative(key, root), pattern, directories_only) is False
                  and _taken(_relative(key, root), pattern, directories_only, any_name=True)
                  and not any(key.startswith(o + "/") for o in outputs)
                  and not _own(key, spec, exclude)]
    parquet = _starting_as_parquet([spec.at_key(key) for key in candidates])
    for key, *_ in listed:
        relative = _relative(key, root)
        taken = _taken(relative, pattern, directories_only)
        owner = next((o for o in outputs if key.startswith(o + "/")), None)
        if taken is None:
            continue
        taken = taken or str(spec.at_key(key)) in parquet
        if not taken or (owner is not None and owner != spec.key) or _own(key, spec, exclude):
            skipped += 1
            if (owner is None and not any(_hidden(name) for name in relative)
                    and relative[-1].lower().endswith(COMPRESSED_SUFFIXES)):
                compressed.append(str(spec.at_key(key)))
            continue
        if "" in relative or key.endswith("/"):
            raise InputError(f"{what} input {spec}: the object {spec.at_key(key)} has an "
                             "empty segment (//) in its key, which the store clients cannot "
                             "read; rename it, or name the objects to read without it")
        found.append(key)
    if not found:
        if prefix_only and not listed and is_object(spec):
            raise InputError(f"{what} input {spec}/: is an object, not a prefix (the URL ends "
                             "with /); name the object without the /")
        if not listed and not bucket_exists(spec):
            raise InputError(f"{what} input {spec}: the bucket {spec.bucket!r} does not exist")
        if not listed and pattern is None:
            raise InputError(f"{what} input {spec}: no such object or prefix")
        empty = ("no object matches this pattern" if pattern is not None
                 else "no .parquet, .pq or .csv objects found below this prefix")
        more = (f" (skipped {skipped}: hidden names, other types, snim-batch outputs or "
                "Delta tables)") \
            if skipped else ""
        raise InputError(f"{what} input {spec}: {empty}{more}")
    warning = skipped_compressed(what, str(spec), compressed)
    if warning is not None and on_warning is not None:
        on_warning(warning)
    return [spec.at_key(key) for key in sorted(found)]


def _own(key: str, spec: Location, exclude: Location | None) -> bool:
    return (exclude is not None and exclude.is_remote and exclude.bucket == spec.bucket
            and (key == exclude.key or key.startswith(exclude.key + "/")))


def _hidden(name: str, pattern: str = "") -> bool:
    return name.startswith(("_", ".")) and not pattern.startswith(name[0])


def _exists(key: str, listed: list[tuple[str, int, float]]) -> bool:
    """Whether `key` is one of the listed objects, or a prefix of one."""
    return any(k == key or k.startswith(key + "/") for k, *_ in listed)


def _relative(key: str, root: Location) -> list[str]:
    return key[len(root.key) + 1:].split("/") if root.key else key.split("/")


def unsuffixed(name: str) -> bool:
    """Whether a data file's name has no suffix, as Hive, Trino and Athena name theirs
    (`000000_0`, `000000_0_copy_1`, `20261208_..._<uuid>`), or Impala's `.parq`: such a file
    is read when it starts as Parquet. One with another suffix (`x.bak`, a download's
    `x.parquet.Ab12`, a backup's `x~`) is not."""
    return ("." not in name or name.lower().endswith(".parq")) and not name.endswith("~")


STORE_REQUESTS = 16  # objects asked about at a time (as `describe_before_reading` asks)


def _starting_as_parquet(locations: list[Location]) -> set[str]:
    """Which of the objects (of names `unsuffixed`) start as Parquet: their rows are read,
    not missed. An object that cannot be read fails the listing, naming it (a 403 or a
    timeout must not drop a night's file unsaid)."""
    if not locations:
        return set()

    def starts(location: Location) -> bool:
        return read_head(location, len(PARQUET_MAGIC))[0] == PARQUET_MAGIC

    with ThreadPoolExecutor(min(STORE_REQUESTS, len(locations))) as pool:
        return {str(loc) for loc, yes in zip(locations, pool.map(starts, locations)) if yes}


def _taken(relative: list[str], pattern: list[str] | None, directories_only: bool = False,
           any_name: bool = False) -> bool | None:
    """None when the pattern does not reach this object; True to read it; False when it is
    reached but skipped (a hidden name or another type below what was named). `any_name`:
    an object found below what was named of no suffix too (`unsuffixed`)."""
    if pattern is None:
        return _plain_below(relative, any_name)
    ends = _matched_prefixes(pattern, relative)
    if directories_only:
        ends.discard(len(relative))  # the object itself: no prefix of others
    if not ends:
        return None
    if len(relative) in ends:
        return True
    return any(_plain_below(relative[end:], any_name) for end in ends)


def _plain_below(relative: list[str], any_name: bool = False) -> bool:
    """A file found below a directory: read when no name on the way is hidden and its
    suffix is an input suffix (`any_name`: or it has none, `unsuffixed`)."""
    return (not any(_hidden(name) for name in relative)
            and (relative[-1].lower().endswith(INPUT_SUFFIXES)
                 or (any_name and unsuffixed(relative[-1]))))


def _matched_prefixes(pattern: list[str], names: list[str]) -> set[int]:
    """Every k such that `pattern` matches names[:k] (a wildcard never matches a hidden
    name unless the pattern component starts with the same character)."""
    if not pattern:
        return {0}
    head, rest = pattern[0], pattern[1:]
    ends: set[int] = set()
    if head == "**":
        ends |= _matched_prefixes(rest, names)
        if len(names) > 1 and not _hidden(names[0]):
            ends |= {k + 1 for k in _matched_prefixes(pattern, names[1:])}
        return ends
    if names and fnmatch.fnmatchcase(names[0], head) and (
            not any(c in head for c in GLOB_CHARS) or not _hidden(names[0], head)):
        ends |= {k + 1 for k in _matched_prefixes(rest, names[1:])}
    return ends


def _delta_tables(listed: list[tuple[str, int, float]]) -> list[str]:
    """Keys of the prefixes that hold a _delta_log/: Delta tables (snim-batch's own --format
    delta tables among them), whose files are not inputs."""
    found = set()
    for key, *_ in listed:
        at = ("/" + key).find("/_delta_log/")
        if at >= 0:
            found.add(key[:max(at - 1, 0)])
    return sorted(found)


def _unlisted_runs(root: Location, listed: list[tuple[str, int, float]]) -> list[str]:
    """Keys of RUN_ID/ prefixes holding only what a run uploads (where a run puts its output
    before its manifest lists it), which a killed first run leaves below its --out until the
    next run there removes them. A prefix named so that holds anything else is read."""
    below: dict[str, bool] = {}
    start = len(root.key.split("/")) if root.key else 0
    for key, *_ in listed:
        parts = key.split("/")
        at = next((i for i in range(start, len(parts) - 1) if RUN_ID.fullmatch(parts[i])), None)
        if at is not None:
            prefix = "/".join(parts[:at + 1])
            only_outputs = RUN_FILE.fullmatch("/".join(parts[at + 1:])) is not None
            below[prefix] = below.get(prefix, True) and only_outputs
    return sorted(prefix for prefix, runs_only in below.items() if runs_only)


def _snim_outputs(root: Location, listed: list[tuple[str, int, float]]) -> list[str]:
    """Keys of the prefixes below `root` that hold a manifest.json written by snim-batch."""
    outputs = []
    for key, *_ in listed:
        if PurePosixPath(key).name != MANIFEST:
            continue
        manifest = root.at_key(key)
        try:
            with filesystem(manifest).open_input_stream(manifest.store_path) as handle:
                parsed = json.loads(handle.read())
        except ValueError:  # not JSON
            continue
        except store_failures() as exc:
            raise store_error(manifest, exc) from None
        if written_by_snim(parsed):
            outputs.append(str(PurePosixPath(key).parent))
    return outputs
