"""The commit of an output in an object store, where nothing can be renamed.

The run writes its files into a local temporary directory (created after the target was
checked, removed at the end), then uploads them under `OUT/RUN_ID/` and commits by writing
`OUT/manifest.json` last, in one PUT: the manifest lists every file with its path under OUT
and its size, so a reader that starts from the manifest sees one whole output, the previous
or the new. On S3 the PUT is conditional (If-None-Match: * for a new output, If-Match: the
previous manifest's ETag with --overwrite), so of two racing runs one commits and the other
fails with nothing written. The previous run's files are deleted only after the new manifest
is in place; what a killed run uploaded (a RUN_ID/ prefix no manifest lists) is deleted by a
later commit once it is older than LEFTOVER_GRACE."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import OutputError
from pipeline.io import object_store
from pipeline.io.failures import WriteFailure
from pipeline.io.locations import Location
from pipeline.io.manifest import MANIFEST, few_names, written_by_snim

log = logging.getLogger(__name__)

RUN_ID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{6}")


LEFTOVER_GRACE = 24 * 3600
"""Seconds after which a RUN_ID/ prefix that no manifest lists is a dead run's leftover (a
live run commits right after its upload, well within this)."""


@dataclass
class _Target:
    """What is at OUT before the run: the manifest's ETag (None: no output), the keys it
    lists, and per RUN_ID/ prefix no manifest lists, the time of its newest object."""

    etag: str | None = None
    listed: list[str] = field(default_factory=list)
    leftovers: dict[str, float] = field(default_factory=dict)


def listed_paths(manifest: dict[str, Any]) -> list[str] | None:
    """The paths under OUT that a remote output's manifest lists (its files, and every file
    of its directories), or None when it is no manifest of a remote output."""
    outputs = manifest.get("outputs")
    if not isinstance(outputs, list):
        return None
    paths = []
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
            paths += [f"{path}/{f.get('name')}" for f in files if isinstance(f, dict)]
        else:
            paths.append(path)
    return paths


def _read_manifest(target: Location) -> tuple[dict[str, Any], str | None] | None:
    """OUT/manifest.json parsed, and its ETag; None when there is none."""
    location = target.child(MANIFEST)
    store = object_store.filesystem(location)
    try:
        with store.open_input_file(location.store_path) as handle:
            meta = {k.lower(): v for k, v in (handle.metadata() or {}).items()}
            data = handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        problem = object_store.store_error(location, exc, "reading the output's manifest")
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


def _target_state(target: Location, overwrite: bool) -> _Target:
    """Check what is at `target` (reads only): missing, or holding only dead runs'
    leftovers, is fine; a snim-batch output needs `overwrite`; anything else is refused."""
    objects = object_store.list_below(target)
    found = _read_manifest(target)
    state = _Target()
    if found is not None:
        manifest, state.etag = found
        listed = listed_paths(manifest) if written_by_snim(manifest) else None
        if listed is None:
            raise OutputError(f"{target}: exists and is not provably a snim-batch output (its "
                              f"{MANIFEST} was not written by snim-batch to an object store); "
                              "refusing to replace it, nothing was written")
        state.listed = listed
    start = len(target.key) + 1 if target.key else 0
    unlisted = []
    for key, _, mtime in objects:
        relative = key[start:]
        if relative == MANIFEST or relative in state.listed:
            continue
        head = relative.split("/", 1)[0]
        if RUN_ID.fullmatch(head) and "/" in relative:
            state.leftovers[head] = max(state.leftovers.get(head, 0.0), mtime)
        else:
            unlisted.append(relative)
    if unlisted:
        why = (f"holds what its {MANIFEST} does not list" if found is not None
               else f"holds objects and no {MANIFEST}")
        raise OutputError(f"{target}: exists and is not provably a snim-batch output ({why}: "
                          f"{few_names(sorted(unlisted))}); refusing to replace it, nothing "
                          "was written")
    if found is not None and not overwrite:
        raise OutputError(f"{target}: output already exists (pass --overwrite to replace it)")
    return state


PAUSE_ENV = "SNIM_BATCH_TEST_PAUSE"
"""For the kill tests: `POINT:FILE` makes the run create FILE at POINT (`uploaded`: one file
is up; `committing`: all are, the manifest is not; `committed`: the manifest is, the old
files are not deleted yet) and wait there (at most PAUSE_LIMIT seconds) to be killed."""

PAUSE_LIMIT = 600


def _pause(point: str) -> None:
    wanted, _, marker = os.environ.get(PAUSE_ENV, "").partition(":")
    if wanted == point and marker:
        Path(marker).touch()
        time.sleep(PAUSE_LIMIT)


_UPLOADS = 4  # files uploaded at once


def _upload(staging: Path, prefix: Location) -> None:
    """Every file below `staging` to the same relative key below `prefix` (no directory
    marker objects), a few at a time."""
    store = object_store.filesystem(prefix)
    files = sorted(path for path in staging.rglob("*") if path.is_file())

    def put(path: Path) -> None:
        target = prefix.child(path.relative_to(staging).as_posix())
        try:
            with path.open("rb") as source, store.open_output_stream(target.store_path) as out:
                shutil.copyfileobj(source, out, 1 << 23)
        except OSError as exc:
            raise object_store.store_error(target, exc, "writing the output") from None
        _pause("uploaded")

    with ThreadPoolExecutor(_UPLOADS, thread_name_prefix="upload") as pool:
        for done in [pool.submit(put, path) for path in files]:
            done.result()


def _remote_manifest(manifest: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The staged manifest with each output's path under OUT (RUN_ID/NAME)."""
    outputs = []
    for entry in manifest.get("outputs", []):
        if entry.get("name") != MANIFEST:
            entry = {**entry, "path": f"{run_id}/{entry['name']}"}
        outputs.append(entry)
    return {**manifest, "outputs": outputs}


def _put_manifest(target: Location, data: bytes, previous: str | None) -> None:
    """Write OUT/manifest.json in one PUT, only over the manifest with ETag `previous` (None:
    only where none exists): conditional on S3 (boto3), else checked right before it."""
    location = target.child(MANIFEST)
    client = _s3_client(location) if location.scheme == "s3" else None
    if client is not None:
        from botocore.exceptions import BotoCoreError, ClientError

        condition = {"IfMatch": f'"{previous}"'} if previous else {"IfNoneMatch": "*"}
        try:
            client.put_object(Bucket=location.bucket, Key=location.key, Body=data,
                              ContentType="application/json", **condition)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey",
                        "412", "409"):
                raise _changed(location) from None
            raise object_store.store_error(location, exc, "committing the manifest") from None
        except BotoCoreError as exc:
            raise object_store.store_error(location, exc, "committing the manifest") from None
        return
    current = _read_manifest(target)
    if (current[1] if current else None) != previous:
        raise _changed(location)
    try:
        with object_store.filesystem(location).open_output_stream(location.store_path) as out:
            out.write(data)
    except OSError as exc:
        raise object_store.store_error(location, exc, "committing the manifest") from None


def _changed(location: Location) -> OutputError:
    return OutputError(f"{location}: another run committed to this output while this run "
                       "was writing; nothing was written (rerun, with --overwrite to replace "
                       "it)")


def _s3_client(location: Location) -> Any:
    """A boto3 client for conditional writes, configured like the other clients; None when
    boto3 is not installed."""
    try:
        import boto3
        from botocore.config import Config as BotoConfig
    except ImportError:
        return None
    options = {k.lower(): v for k, v in location.options}

    def first(*names: str) -> str | None:
        return next((options[n] for n in names if options.get(n)), None)

    config = BotoConfig(
        connect_timeout=object_store.seconds(options["connect_timeout"], "connect_timeout"),
        read_timeout=object_store.seconds(options["timeout"], "timeout"),
        retries={"max_attempts": int(options["max_retries"]) + 1, "mode": "standard"})
    return boto3.client(
        "s3", endpoint_url=object_store.s3_endpoint(options),
        aws_access_key_id=first("aws_access_key_id", "access_key_id"),
        aws_secret_access_key=first("aws_secret_access_key", "secret_access_key"),
        aws_session_token=first("aws_session_token", "session_token", "token"),
        region_name=first("aws_region", "region", "aws_default_region"), config=config)


def _delete(target: Location, prefixes: list[str], what: str) -> str | None:
    """Delete every object below the RUN_ID/ `prefixes` of `target`; what to tell the user if
    some remain."""
    store = object_store.filesystem(target)
    for prefix in sorted(set(prefixes)):
        if not RUN_ID.fullmatch(prefix):
            continue
        try:
            store.delete_dir(target.child(prefix).store_path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return (f"{target}: {what} could not all be deleted "
                    f"({object_store.redacted(str(exc).splitlines()[0])})")
    return None


@contextmanager
def staged_remote_output(out: Location, run_id: str, overwrite: bool,
                         notify: Callable[[str], None] = lambda message: None
                         ) -> Iterator[Path]:
    """Yield a local temporary directory for the run's files; on normal exit, upload them
    under OUT/RUN_ID/ and commit OUT/manifest.json (see the module's docstring). Any failure
    before the commit deletes what was uploaded; the previous output is untouched."""
    previous = _target_state(out, overwrite)
    staging = Path(tempfile.mkdtemp(prefix=f"snim-batch-{run_id}-"))
    prefix = out.child(run_id)
    committed = uploaded = False
    try:
        yield staging
        manifest = json.loads((staging / MANIFEST).read_bytes())
        (staging / MANIFEST).unlink()
        uploaded = True
        _upload(staging, prefix)
        data = json.dumps(_remote_manifest(manifest, run_id), indent=2, default=str) + "\n"
        _pause("committing")
        _put_manifest(out, data.encode(), previous.etag)
        committed = True
        _pause("committed")
        log.info("committed %s%s", out, " (replacing the previous output)"
                 if previous.etag else "")
        replaced = [path.split("/", 1)[0] for path in previous.listed]
        for notice in (_delete(out, replaced, "the replaced output's files"),
                       _clean_leftovers(out, previous)):
            if notice:
                notify(notice)
    except WriteFailure as exc:
        raise exc.about(str(out)) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if uploaded and not committed:
            _delete(out, [run_id], "this run's uploaded files")


def _clean_leftovers(out: Location, previous: _Target) -> str | None:
    """Delete the RUN_ID/ prefixes of dead runs older than LEFTOVER_GRACE."""
    now = time.time()
    old = [prefix for prefix, newest in previous.leftovers.items()
           if now - newest > LEFTOVER_GRACE]
    young = len(previous.leftovers) - len(old)
    if young:
        log.info("%s: %d unlisted run prefixes younger than %d h kept (a live run?)", out,
                 young, LEFTOVER_GRACE // 3600)
    return _delete(out, old, "files left by interrupted runs")
