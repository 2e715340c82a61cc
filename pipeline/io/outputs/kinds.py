"""The `Output` protocol and its three kinds: where a run's tables go, and how they appear
there whole or not at all.

A run writes its tables into `stage(run_id)`, a local directory; `commit(manifest)` makes them
the output in one step and returns what the manifest gains by it; if anything goes wrong
before or during the commit, `roll_back(error)` removes what was staged and the previous
output stays whole. The orchestrator holds an `Output` and never asks which kind it is:

- `LocalDirectory`, a local `--out`: staged beside the target, swapped in by one rename
  (`commit.py`);
- `ObjectStorePrefix`, an `s3://`, `gs://` or `az://` `--out`: files uploaded under
  `OUT/RUN_ID/`, then `OUT/manifest.json` written last (`remote_commit.py`);
- `DeltaTables`, `--format delta`: one Delta commit per table, the runs table last
  (`delta.py`).

`output_for` picks the kind from the run's settings. `convert` and `report` write through the
same protocol, with kinds of their own for files placed in an existing directory
(`publish.py`, `publish_tables.py`): `TablesDirectory` (convert's two tables, both or
neither), and `report`'s page, chosen by `page_output_for`: `PageInOutput` (added to the run
output it describes, listed in its manifest) or `PageElsewhere` (replacing a file whole).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Protocol

from pipeline.errors import MissingExtra, UsageError
from pipeline.events import OnEvent, ignore
from pipeline.io.outputs.commit import refuse_inside_delta_table, staged_output
from pipeline.io.outputs.manifest import output_listing, write_manifest
from pipeline.io.outputs.publish import page_destination, staged_page, staged_page_in_output
from pipeline.io.outputs.publish_tables import staged_tables
from pipeline.io.outputs.remote_commit import staged_remote_output
from pipeline.io.store import object_store
from pipeline.io.store.locations import Location

__all__ = ["DeltaTables", "LocalDirectory", "ObjectStorePrefix", "Output", "PageElsewhere",
           "PageInOutput", "TablesDirectory", "output_for", "page_output_for"]

class Output(Protocol):
    """Where a run's tables go (see the module docstring)."""

    def stage(self, run_id: str) -> Path:
        """Check the target (refusing it before any work), and give the local directory the
        run writes its tables into."""
        ...

    def commit(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Make the staged tables, with `manifest`, the output in one step; returns what the
        manifest gains (for instance the Delta tables' versions)."""
        ...

    def roll_back(self, error: BaseException) -> None:
        """After `error`: remove what was staged (and uploaded); the previous output stays.
        May raise a clearer error about the output in place of `error`."""
        ...

    def table(self, name: str, manifest: Mapping[str, Any]) -> str:
        """Where the committed table `name` (such as "rejects") is, for a message."""
        ...


class _Staged:
    """The part every kind shares: a staging context (entered by `stage`, left by the commit
    or the roll-back, exactly once) around the kind's own `_publish`."""

    def __init__(self) -> None:
        self._context: AbstractContextManager[Path] | None = None
        self._staging: Path | None = None

    def _open(self, run_id: str) -> AbstractContextManager[Path]:
        raise NotImplementedError

    def _publish(self, staging: Path, manifest: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def stage(self, run_id: str) -> Path:
        context = self._open(run_id)
        self._context = context  # held before it is entered: a roll-back always finds it
        try:
            self._staging = context.__enter__()
        except BaseException as error:  # a refusal, or a stop landing as it is entered
            self._context = None
            context.__exit__(type(error), error, error.__traceback__)  # cleans what it made
            raise
        return self._staging

    def commit(self, manifest: dict[str, Any]) -> dict[str, Any]:
        assert self._context is not None and self._staging is not None, "stage() first"
        gained = self._publish(self._staging, manifest)
        context, self._context = self._context, None
        context.__exit__(None, None, None)
        return gained

    def roll_back(self, error: BaseException) -> None:
        context, self._context = self._context, None
        if context is not None:
            context.__exit__(type(error), error, error.__traceback__)


class LocalDirectory(_Staged):
    """A directory on a local file system, replaced atomically (`commit.staged_output`)."""

    def __init__(self, out: Path, overwrite: bool, on_event: OnEvent) -> None:
        super().__init__()
        self.out, self.overwrite, self.on_event = out, overwrite, on_event

    def _open(self, run_id: str) -> AbstractContextManager[Path]:
        return staged_output(self.out, run_id, self.overwrite, self.on_event)

    def _publish(self, staging: Path, manifest: dict[str, Any]) -> dict[str, Any]:
        manifest["outputs"] = output_listing(staging)
        write_manifest(manifest, staging)  # last: the swap follows when the staging closes
        return {"outputs": manifest["outputs"]}

    def table(self, name: str, manifest: Mapping[str, Any]) -> str:
        return str(self.out / f"{name}.parquet")


class ObjectStorePrefix(LocalDirectory):
    """A prefix in an object store, committed by its manifest (`remote_commit`)."""

    def __init__(self, out: Location, overwrite: bool, on_event: OnEvent) -> None:
        _Staged.__init__(self)
        self.location, self.overwrite, self.on_event = out, overwrite, on_event

    def _open(self, run_id: str) -> AbstractContextManager[Path]:
        refuse_inside_delta_table(self.location, str(self.location))
        self._written: dict[str, Any] = {}
        return staged_remote_output(self.location, run_id, self.overwrite, self.on_event,
                                    self._written)

    def commit(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """As a local directory's, and the manifest gains what the committed one holds
        beyond the staged one: each output's path under OUT, the prefixes it retired."""
        gained = super().commit(manifest)
        return {**gained, **self._written}

    def table(self, name: str, manifest: Mapping[str, Any]) -> str:
        return f"{self.location}/{manifest['run_id']}/{name}.parquet"


class DeltaTables(_Staged):
    """Delta tables under a root, one commit per table for the night `run_date`
    (`delta.publish`; needs the optional deltalake package)."""

    def __init__(self, out: Path | str, storage_options: Mapping[str, str],
                 run_date: date | None, on_event: OnEvent = ignore) -> None:
        super().__init__()
        self.on_event = on_event
        try:
            from pipeline.io.outputs import delta, delta_tables
        except ImportError:
            raise MissingExtra("--format delta", "delta") from None
        self._writer, self._tables = delta, delta_tables
        self.out = out
        self.night = run_date or datetime.now(UTC).date()
        self.root = delta_tables.table_root(out, storage_options)
        delta_tables.check_root(self.root)

    def _open(self, run_id: str) -> AbstractContextManager[Path]:
        return self._tables.staging_directory(self.root, run_id, self.on_event)

    def _publish(self, staging: Path, manifest: dict[str, Any]) -> dict[str, Any]:
        manifest["run_date"] = self.night.isoformat()
        versions = self._writer.publish(self.root, staging, manifest, self.night,
                                        self.on_event)
        return {"run_date": manifest["run_date"], "table_versions": versions}

    def table(self, name: str, manifest: Mapping[str, Any]) -> str:
        return f"{self.out}/{name}"


def output_for(out: Path | str, output_format: str, overwrite: bool,
               storage_options: Mapping[str, str], on_event: OnEvent,
               run_date: date | None = None) -> Output:
    """The kind of output `--out` and `--format` name."""
    if output_format == "delta":
        return DeltaTables(out, storage_options, run_date, on_event)
    if run_date is not None:
        raise UsageError("--run-date applies to --format delta only (a Parquet output is "
                         "one run, not a night of a table)")
    if isinstance(out, Path):
        return LocalDirectory(out, overwrite, on_event)
    location = object_store.with_client_options(Location.parse(out, Path.cwd()), storage_options)
    return ObjectStorePrefix(location, overwrite, on_event)


class _Placed(_Staged):
    """A kind whose files are placed in an existing directory: nothing to add to a
    manifest (the kind keeps its own, if any)."""

    def _publish(self, staging: Path, manifest: dict[str, Any]) -> dict[str, Any]:
        return {}  # the staging context places the files when it closes


class TablesDirectory(_Placed):
    """`convert`'s tables `names` in a local directory, all or none, each replacing only a
    table convert wrote, and that only with `overwrite` (`publish_tables.staged_tables`)."""

    def __init__(self, directory: Path, names: list[str], overwrite: bool,
                 on_event: OnEvent = ignore) -> None:
        super().__init__()
        self.directory, self.names, self.overwrite = directory, names, overwrite
        self.on_event = on_event

    def _open(self, run_id: str) -> AbstractContextManager[Path]:
        return staged_tables(self.directory, self.names, self.overwrite, run_id,
                             self.on_event)

    def table(self, name: str, manifest: Mapping[str, Any]) -> str:
        return str(self.directory / name)


class PageInOutput(_Placed):
    """`report`'s page added to the run output it describes, listed in the output's manifest
    (`publish.staged_page_in_output`)."""

    def __init__(self, output: Path, name: str, on_event: OnEvent = ignore) -> None:
        super().__init__()
        self.output, self.name, self.on_event = output, name, on_event

    def _open(self, run_id: str) -> AbstractContextManager[Path]:
        return staged_page_in_output(self.output, self.name, run_id, self.on_event)

    def table(self, name: str, manifest: Mapping[str, Any]) -> str:
        return str(self.output / self.name)


class PageElsewhere(_Placed):
    """`report`'s page replacing the file at `where` (`shown` as the user named it) whole
    (`publish.staged_page`)."""

    def __init__(self, shown: Path, where: Path, on_event: OnEvent = ignore) -> None:
        super().__init__()
        self.shown, self.where, self.on_event = shown, where, on_event

    def _open(self, run_id: str) -> AbstractContextManager[Path]:
        return staged_page(self.shown, self.where, run_id, self.on_event)

    def table(self, name: str, manifest: Mapping[str, Any]) -> str:
        return str(self.shown)


def page_output_for(out_dir: Path, target: Path, in_output: bool,
                    on_event: OnEvent = ignore) -> Output:
    """Where `report` writes the page of the run in `out_dir` named `target`: with
    `in_output` (a run's output directory, which has a manifest), directly in that output it
    is added to it, elsewhere it replaces `target`; without (a Delta table root), `target`
    is replaced elsewhere only (`publish.page_destination` refuses a place inside a
    snim-batch output or a Delta table). `on_event` hears COMMITTED once the page is in
    place."""
    output, where = page_destination(out_dir if in_output else None, target)
    if output is not None:
        return PageInOutput(output, where.name, on_event)
    return PageElsewhere(target, where, on_event)
