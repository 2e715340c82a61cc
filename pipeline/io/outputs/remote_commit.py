"""The commit of an output in an object store, where nothing can be renamed.

The run writes its files into a local temporary directory (`snim-batch-PID-RUN_ID-*`, removed
at the end, and by a later run once its process is gone), then uploads them under
`OUT/RUN_ID/` and commits by writing `OUT/manifest.json` last, in one PUT: the manifest lists
every file with its path under OUT and its size, so a reader that starts from the manifest
sees one whole output, the previous or the new. On S3 the PUT is conditional (If-None-Match: *
for a new output, If-Match: the previous manifest's ETag with --overwrite), so of two racing
runs one commits and the other fails with nothing written. A PUT that fails (a timeout whose
retry finds the first attempt's manifest in place, a 5xx, an interrupt) is judged by reading
the manifest back: the run is committed when it names this run, and this run's uploads are
deleted only when it provably does not. Interrupts are held from the PUT until the previous
output's files are deleted.

Only what is provably ours is deleted, key by key: the previous output's files its manifest
lists, at the size it records (an output holding anything else is not replaced), and in a
RUN_ID/ prefix no manifest lists (a killed run's), once older than LEFTOVER_GRACE, the names
a run uploads. A replaced output's prefix and files are named in the new manifest (RETIRED,
RETIRED_FILES), so that what a user put there during the run, kept then, is never taken for a
killed run's files later, while the old output's own files, if their deletion failed, are
deleted by the next run."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pipeline.errors import (
    CommitOutcomeUnknown,
    OutputChanged,
    OutputError,
    SnimError,
    WriteFailure,
    first_line,
)
from pipeline.events import OnEvent, RunEvent, ignore, tell_committed
from pipeline.io.outputs.commit import interrupts_held, remove_dead_staging
from pipeline.io.outputs.failures import local_staging_failure, remove_staging, write_cause
from pipeline.io.outputs.manifest import MANIFEST, RUN_ID, few_names
from pipeline.io.outputs.remote_target import (
    RETIRED,
    RETIRED_FILES,
    Target,
    below,
    read_manifest,
    target_state,
)
from pipeline.io.store import object_store
from pipeline.io.store.locations import Location

log = logging.getLogger(__name__)


_STAGING = re.compile(rf"snim-batch-(\d+)-{RUN_ID.pattern}-[^/]+")
"""A local staging directory (`tempfile.mkdtemp` in `staged_remote_output`): PID, RUN_ID."""


LEFTOVER_GRACE = 24 * 3600
"""Seconds after which a RUN_ID/ prefix that no manifest lists is a dead run's leftover (a
live run commits right after its upload, well within this)."""


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

    with ThreadPoolExecutor(_UPLOADS, thread_name_prefix="upload") as pool:
        for done in [pool.submit(put, path) for path in files]:
            done.result()


def _remote_manifest(manifest: dict[str, Any], run_id: str, previous: Target
                     ) -> dict[str, Any]:
    """The staged manifest with each output's path under OUT (RUN_ID/NAME), and the
    prefixes and files of the outputs it replaces."""
    outputs = []
    for entry in manifest.get("outputs", []):
        if entry.get("name") != MANIFEST:
            entry = {**entry, "path": f"{run_id}/{entry['name']}"}
        outputs.append(entry)
    return {**manifest, "outputs": outputs, RETIRED: previous.retired(),
            RETIRED_FILES: previous.retired_files()}


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
    current = read_manifest(target)
    if (current[1] if current else None) != previous:
        raise _changed(location)
    try:
        with object_store.filesystem(location).open_output_stream(location.store_path) as out:
            out.write(data)
    except OSError as exc:
        raise object_store.store_error(location, exc, "committing the manifest") from None


def _changed(location: Location) -> OutputError:
    return OutputChanged(f"{location}: another run committed to this output while this run "
                         "was writing", path=location, written=False,
                         hint=" (rerun, with --overwrite to replace it)")


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
    key, secret = object_store.s3_key_pair(options)
    return boto3.client(
        "s3", endpoint_url=object_store.s3_endpoint(options),
        aws_access_key_id=key, aws_secret_access_key=secret,
        aws_session_token=first("aws_session_token", "session_token", "token"),
        region_name=first("aws_region", "region", "aws_default_region"), config=config)


def _delete(target: Location, relatives: list[str], what: str) -> str | None:
    """Delete the objects at these keys below `target`, key by key (never a whole prefix,
    and no directory marker is left behind); what to tell the user if some remain."""
    if not relatives:
        return None
    try:
        client = _s3_client(target) if target.scheme == "s3" else None
        if client is None:
            store = object_store.filesystem(target)
            for relative in relatives:
                try:
                    store.delete_file(target.child(relative).store_path)
                except FileNotFoundError:
                    continue
            return None
        failed: list[str] = []
        for start in range(0, len(relatives), 1000):  # S3's most keys per request
            keys = [{"Key": target.child(r).key} for r in relatives[start:start + 1000]]
            reply = client.delete_objects(Bucket=target.bucket,
                                          Delete={"Objects": keys, "Quiet": True})
            failed += [str(error.get("Key")) for error in reply.get("Errors", [])]
    except Exception as exc:  # botocore's and pyarrow's errors: the run is committed by now
        return (f"{target}: {what} could not all be deleted "
                f"({object_store.redacted(first_line(exc))})")
    return (f"{target}: {what} could not all be deleted ({few_names(failed)})"
            if failed else None)


def _commit(out: Location, data: bytes, previous: str | None, run_id: str) -> None:
    """PUT the manifest (see `_put_manifest`). When the PUT fails in any way, the manifest
    is read back: one naming this run is in place (a retry after a timeout that found the
    first attempt's, an interrupt after the store took it), so the run is committed; one
    that cannot be read leaves it unknown (`CommitOutcomeUnknown`)."""
    try:
        _put_manifest(out, data, previous)
    except BaseException as exc:
        failure = object_store.redacted(first_line(exc))
        try:
            found = read_manifest(out)
        except Exception as reading:
            raise _unknown(out, run_id, previous, f"the {MANIFEST} PUT failed: {failure}; "
                           "reading it back failed: "
                           f"{object_store.redacted(first_line(reading))}") from None
        if found is not None and found[0].get("run_id") == run_id:
            log.info("%s: the %s PUT failed (%s), but the manifest in place is this run's",
                     out, MANIFEST, failure)
            return
        if isinstance(exc, OutputChanged) or (found[1] if found else None) != previous:
            raise  # refused, or the manifest moved on: this run's PUT can no longer land
        raise _unknown(out, run_id, previous, f"the {MANIFEST} PUT failed ({failure}) and "
                       "may still take effect: the store may yet apply it") from None


def _unknown(out: Location, run_id: str, previous: str | None, why: str
             ) -> CommitOutcomeUnknown:
    kept = " (the replaced one's files were kept)" if previous else ""
    return CommitOutcomeUnknown(
        f"{out}: could not tell whether this run committed ({why}); if {out}/{MANIFEST} "
        f"names run {run_id}, the new output is in place{kept}; else its files under "
        f"{out}/{run_id}/ can be deleted (a later run there removes them once they are a day "
        "old)", path=out)


@contextmanager
def staged_remote_output(out: Location, run_id: str, overwrite: bool,
                         on_event: OnEvent = ignore, written: dict[str, Any] | None = None
                         ) -> Iterator[Path]:
    """Yield a local temporary directory for the run's files; on normal exit, upload them
    under OUT/RUN_ID/ and commit OUT/manifest.json (see the module's docstring), which
    `written` then holds as committed (each output's path, the retired prefixes). Any
    failure before the commit deletes what was uploaded; the previous output is untouched."""
    previous = target_state(out, overwrite)
    temporary = Path(tempfile.gettempdir())
    remove_dead_staging(temporary, _STAGING)
    try:
        staging = Path(tempfile.mkdtemp(prefix=f"snim-batch-{os.getpid()}-{run_id}-"))
    except OSError as exc:
        raise local_staging_failure(str(out), temporary, "creating the staging directory",
                                    *write_cause(exc)) from None
    uploads: list[str] = []
    settled = False  # committed, or not provably uncommitted: the uploads stay
    try:
        yield staging
        manifest = json.loads((staging / MANIFEST).read_bytes())
        (staging / MANIFEST).unlink()
        uploads = [f"{run_id}/{path.relative_to(staging).as_posix()}"
                   for path in sorted(staging.rglob("*")) if path.is_file()]
        _upload(staging, out.child(run_id))
        committed = _remote_manifest(manifest, run_id, previous)
        data = json.dumps(committed, indent=2, default=str) + "\n"
        with interrupts_held():
            try:
                _commit(out, data.encode(), previous.etag, run_id)
            except CommitOutcomeUnknown:
                settled = True
                raise
            settled = True
            if written is not None:
                written.update(committed)
            try:
                tell_committed(on_event, str(out))
            finally:  # also when the callback raised past it: the old output's files go
                log.info("committed %s%s", out, " (replacing the previous output)"
                         if previous.etag else "")
                notices = _retire(out, previous)
            for notice in notices:
                on_event(RunEvent.warning(notice))
    except WriteFailure as exc:  # a file of the local staging
        raise local_staging_failure(str(out), temporary, exc.doing, exc.cause,
                                    exc.no_space) from None
    finally:
        remove_staging(staging, on_event)
        if uploads and not settled:
            _delete(out, uploads, "this run's uploaded files")


def _retire(out: Location, previous: Target) -> list[str]:
    """After the commit: delete the replaced output's files that are still as its manifest
    listed them, and those of earlier replaced outputs still as recorded (anything else below
    their prefixes is kept, and named), then the run files of dead runs' prefixes older than
    LEFTOVER_GRACE. Returns what to tell the user."""
    replacing = previous.replaced()
    old = {path.split("/", 1)[0] for path in replacing}
    try:
        now = ({key: size for key, size, _ in below(out, object_store.list_below(out))}
               if old else {})
    except SnimError as exc:
        return [f"{out}: the replaced output's files were not deleted ({exc})"]
    replaced, kept = [], []
    for path, size in replacing.items():
        if path in now:
            if size is None or now[path] == size:
                replaced.append(path)
            else:
                kept.append(f"{path} ({now[path]} bytes, listed with {size})")
    earlier = set(previous.kept)
    kept += [key for key in now if key.split("/", 1)[0] in old and key not in replacing
             and key not in earlier]
    notices = []
    if kept:
        notices.append(f"{out}: kept what the replaced output's {MANIFEST} does not account "
                       f"for: {few_names(sorted(kept))}")
    if previous.kept:
        notices.append(f"{out}: kept what is below a replaced output's prefix but not one "
                       f"of its files: {few_names(sorted(previous.kept))} (remove it "
                       "yourself)")
    stale, young = [], 0
    for files in previous.leftovers.values():
        if time.time() - max(mtime for _, mtime in files) > LEFTOVER_GRACE:
            stale += [relative for relative, _ in files]
        else:
            young += 1
    if young:
        log.info("%s: %d unlisted run prefixes younger than %d h kept (a live run?)", out,
                 young, LEFTOVER_GRACE // 3600)
    notices += [_delete(out, replaced, "the replaced output's files"),
                _delete(out, stale, "files left by interrupted runs")]
    return [notice for notice in notices if notice]
