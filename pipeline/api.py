"""The public Python API: `evaluate_batch(...)` runs the `run` command's job in this process
and returns a typed `BatchResult`; failures raise the `SnimError` subclasses of
`pipeline.errors` (docs/python-api.md).

It takes the settings the command line takes, as keyword arguments; a config file is read
only when `config_file` is given (never ./config.yaml by itself, and never the SNIM_BATCH_*
environment variables: those are the command line's). Arguments win over the file's keys,
the file's keys over the defaults. It never prints or exits: `on_event`, if given, hears what
the command line would show (`pipeline.events.RunEvent`: phases, progress, warnings)."""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pipeline.errors import ConfigError, UsageError, brief_repr
from pipeline.results import SUCCEEDED, result_document

if TYPE_CHECKING:
    from pipeline.config import Config
    from pipeline.events import OnEvent

__all__ = ["BatchResult", "evaluate_batch", "settings"]

# the package's records go where the caller's logging sends them, and nowhere (not Python's
# last-resort stderr) when the caller configured none: a library never prints
logging.getLogger("pipeline").addHandler(logging.NullHandler())


@dataclass(frozen=True)
class BatchResult:
    """What a run that committed its output returns."""

    exit_code: int
    """0: every row was evaluated, or the rows rejected were within the tolerance
    (`tolerated`); 3: the output is committed, but more rows were rejected (`counts`,
    `rejects`), as the command's exit codes."""
    out: str
    """The output: a local directory, an object-store URL, or a Delta table root."""
    counts: dict[str, dict[str, int]]
    """Rows per table: `rules` (rows_read, rows_accepted, rows_rejected) and `positions`
    (rows_read, rows_evaluated, rows_rejected, verdicts, W, L), as in the manifest."""
    manifest: dict[str, Any]
    """The run's manifest, as written (`manifest.json`, or the Delta runs table's row)."""
    manifest_path: str | None
    """Where `manifest.json` is (None for `output_format="delta"`, whose record of the run
    is the `runs` table)."""
    config_file: str | None
    """The config file read (absolute), or None."""
    rejects: str
    """Where the rejected rows are (a `rejects.parquet` file or the Delta `rejects` table)."""
    problems: list[str] = field(default_factory=list)
    """The first rejected rows, one line each (file, row, column, reason)."""
    warnings: list[str] = field(default_factory=list)
    """What the caller should know though the run succeeded (an old output kept aside)."""
    tolerated: str = ""
    """When rows were rejected within the tolerance (exit 0), the line that says so."""

    @property
    def status(self) -> Literal["succeeded"]:
        return "succeeded"  # SUCCEEDED: a run that returned committed its output

    def document(self) -> dict[str, Any]:
        """The run result as `snim-batch run --json` prints it (docs/run-result.schema.json)."""
        return result_document(SUCCEEDED, self.exit_code, out=self.out,
                               config_file=self.config_file, counts=self.counts,
                               manifest=self.manifest, manifest_path=self.manifest_path)


def settings(*, config_file: str | Path | None = None, rules: str | Path | None = None,
             positions: str | Path | None = None, out: str | Path | None = None,
             engine: Literal["polars", "spark"] | None = None,
             winning_moves: bool | None = None,
             on_bad_rows: Literal["reject", "fail"] | None = None,
             overwrite: bool | None = None,
             output_format: Literal["parquet", "delta"] | None = None,
             spark_master: str | None = None, spark_remote: str | None = None,
             max_rejected_rows: int | None = None,
             max_rejected_rate: float | None = None,
             memory_limit: str | int | None = None) -> Config:
    """The run's `Config`: `config_file` if given (its relative paths relative to it), with
    every argument that is not None over its keys. `rules`, `positions` and `out` (relative
    to the working directory) are required unless the file has them. Raises `UsageError`
    (`ConfigError` for the file or a value) when they do not make a run."""
    from pipeline.config import (
        config_from_dict,
        load_config,
        memory_bytes,
        resolve_location,
        resolve_output,
    )

    texts = {"rules": _path_text("rules", rules),
             "positions": _path_text("positions", positions), "out": _path_text("out", out)}
    config_text = _path_text("config_file", config_file)
    _check_texts(engine=engine, on_bad_rows=on_bad_rows, output_format=output_format,
                 spark_master=spark_master, spark_remote=spark_remote)
    for name, text in texts.items():
        if text is not None and not text.strip():
            raise UsageError(f"{name} is empty: give a path or URL")
    for name, flag in (("winning_moves", winning_moves), ("overwrite", overwrite)):
        if flag is not None and not isinstance(flag, bool):  # "false" would read as true
            raise ConfigError(f"{name} must be True or False, got {brief_repr(flag)}")
    try:
        cwd = Path.cwd()
    except FileNotFoundError:
        raise UsageError("the current directory no longer exists (removed, or replaced by "
                         "a rename): change to one that does") from None
    if config_text is not None:
        cfg = load_config(Path(config_text), texts)
    elif all(texts.values()):
        cfg = config_from_dict(dict(texts), "arguments", cwd)
    else:
        missing = ", ".join(name for name, text in texts.items() if not text)
        raise UsageError(f"no config file: give config_file, or rules, positions and out "
                         f"({missing} missing)")
    spark = None
    if spark_master is not None or spark_remote is not None:
        # a master given alone overrides the config's Spark Connect server too: it is how
        # the session is reached, as a remote given alone is
        remote = "" if spark_remote is None else spark_remote
        spark = dataclasses.replace(
            cfg.spark, master=cfg.spark.master if spark_master is None else spark_master,
            remote=cfg.spark.remote if spark_master is None and spark_remote is None
            else remote)
    return cfg.override(
        rules=resolve_location(texts["rules"], cwd) if texts["rules"] else None,
        positions=resolve_location(texts["positions"], cwd) if texts["positions"] else None,
        out=resolve_output(texts["out"], cwd) if texts["out"] else None,
        engine=_lower(engine), winning_moves=winning_moves, on_bad_rows=_lower(on_bad_rows),
        overwrite=overwrite, spark=spark, max_rejected_rows=max_rejected_rows,
        max_rejected_rate=max_rejected_rate,
        memory_limit=(memory_bytes(memory_limit, "memory_limit")
                      if memory_limit is not None else None),
        output=(dataclasses.replace(cfg.output, format=str(output_format).strip().lower())
                if output_format is not None else None),
    )


def _path_text(name: str, value: object) -> str | None:
    """A path or URL argument as text: a str, or a path (`os.fspath`). Anything else (a list
    of files, bytes) would be read as its repr, a glob that may match other files. The value
    is not shown: a URL may hold a token."""
    if value is None or isinstance(value, str):
        return value
    text = os.fspath(value) if isinstance(value, os.PathLike) else None
    if not isinstance(text, str):
        raise ConfigError(f"{name} must be one path or URL (a str or a path), got "
                          f"{type(value).__name__}")
    return text


def _check_texts(**values: object) -> None:
    """Settings given as text must be text: any other value (a list, a number) would be read
    as its repr, as if the caller had meant it. The value is not shown (a Spark Connect URL
    may hold a token)."""
    for name, value in values.items():
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{name} must be a str, got {type(value).__name__}")


def _lower(choice: str | None) -> str | None:
    """A choice in any case, as the command line takes it."""
    return None if choice is None else str(choice).strip().lower()


def evaluate_batch(*, config_file: str | Path | None = None, rules: str | Path | None = None,
                   positions: str | Path | None = None, out: str | Path | None = None,
                   engine: Literal["polars", "spark"] | None = None,
                   winning_moves: bool | None = None,
                   on_bad_rows: Literal["reject", "fail"] | None = None,
                   overwrite: bool | None = None,
                   output_format: Literal["parquet", "delta"] | None = None,
                   spark_master: str | None = None, spark_remote: str | None = None,
                   max_rejected_rows: int | None = None,
                   max_rejected_rate: float | None = None,
                   memory_limit: str | int | None = None,
                   run_date: date | None = None,
                   on_event: OnEvent | None = None) -> BatchResult:
    """Evaluate every position and commit the output whole, as `snim-batch run` does with the
    same settings (`settings` says how they combine; `run_date` is the night a Delta output
    replaces, default today in UTC).

    Returns a `BatchResult` when the output is committed (`exit_code` 0, also with rows
    rejected within `max_rejected_rows`/`max_rejected_rate`; 3 when more were rejected under
    `on_bad_rows="reject"`). Raises, with nothing written: `UsageError` or
    its `ConfigError` (the settings; the command's exit 2), `InputError`, `BadRowsError`
    (`on_bad_rows="fail"`), `RuleError`, `OutputError`, `StoreError`, `ReconcileError`,
    `SparkFailure` (exit 1), all `SnimError`s with `.code`, `.exit_code`, `.path`, `.row`,
    `.column`, `.written` (one `OutputError` is not "nothing written": `CommitOutcomeUnknown`,
    an object-store commit that cannot tell whether its manifest PUT took effect);
    `KeyboardInterrupt` when stopped (Ctrl-C; a stop signal, if the caller turned it into
    `pipeline.errors.Stopped`)."""
    if run_date is not None and (not isinstance(run_date, date)
                                 or isinstance(run_date, datetime)):
        raise UsageError(f"run_date must be a datetime.date, got {type(run_date).__name__}"
                         + (" (pass its .date(): the night, not a moment of it)"
                            if isinstance(run_date, datetime) else ""))
    if on_event is not None and not callable(on_event):
        raise UsageError("on_event must be a function of one RunEvent, got "
                         f"{type(on_event).__name__}")
    cfg = settings(config_file=config_file, rules=rules, positions=positions, out=out,
                   engine=engine, winning_moves=winning_moves, on_bad_rows=on_bad_rows,
                   overwrite=overwrite, output_format=output_format,
                   spark_master=spark_master, spark_remote=spark_remote,
                   max_rejected_rows=max_rejected_rows, max_rejected_rate=max_rejected_rate,
                   memory_limit=memory_limit)
    return run_settings(cfg, run_date, on_event)


def run_settings(cfg: Config, run_date: date | None = None,
                 on_event: OnEvent | None = None) -> BatchResult:
    """Run the job for settings made by `settings` (the command line's path: it says which
    config it read before the run starts)."""
    from pipeline.run import run_job

    result = run_job(cfg, on_event, run_date)
    manifest = result.manifest
    return BatchResult(
        exit_code=result.exit_code, out=str(result.out), counts=manifest["counts"],
        manifest=manifest, manifest_path=manifest_path(result.out, cfg.output.format),
        config_file=manifest.get("config_file"), rejects=result.rejects,
        problems=list(result.problems), warnings=list(result.warnings),
        tolerated=result.tolerated)


def manifest_path(out: Path | str, output_format: str) -> str | None:
    """Where a committed run's `manifest.json` is: OUT/manifest.json (a local directory or an
    object-store prefix); None for Delta tables."""
    if output_format == "delta":
        return None
    from pipeline.io.outputs.manifest import MANIFEST

    return str(Path(out) / MANIFEST) if isinstance(out, Path) else f"{out}/{MANIFEST}"
