"""The orchestrator: `run_job(config) -> RunResult`. It never prints or exits."""

from __future__ import annotations

import platform
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from pipeline import __version__
from pipeline.config import Config
from pipeline.engines import load_engine
from pipeline.errors import EXIT_OK, EXIT_REJECTS, BadRowsError
from pipeline.io import commit
from pipeline.io.manifest import output_listing, write_manifest

Progress = Callable[[str, bool], None]
"""progress(message, done): a phase starting or finished (done=True), or a status line within
the current phase (done=False, e.g. rows so far), for a terminal to show."""


@dataclass(frozen=True)
class RunResult:
    out: Path
    exit_code: int
    manifest: dict[str, Any]
    problems: list[str]
    warnings: list[str] = field(default_factory=list)
    """What the user should know though the run succeeded (an old output kept aside)."""


def _versions() -> dict[str, str]:
    versions = {"snim-batch": __version__, "python": platform.python_version()}
    for dist in ("polars", "pyarrow", "numpy", "numba", "typer", "pyspark"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return versions


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def run_job(config: Config, progress: Progress | None = None) -> RunResult:
    """Run the batch job and commit its output directory atomically.

    Raises SnimError subclasses for user-caused failures; nothing is written then.
    """
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)
    started = _now()
    timings: dict[str, float] = {}

    @contextmanager
    def phase(name: str) -> Iterator[None]:
        if progress:
            progress(name, False)
        t0 = time.perf_counter()
        yield
        timings[name] = round(time.perf_counter() - t0, 4)
        if progress:
            progress(f"{name} done in {timings[name]:.2f}s", True)

    def note(message: str) -> None:
        if progress:
            progress(message, False)

    engine = load_engine(config.engine)
    warnings: list[str] = []
    with commit.staged_output(config.out, run_id, config.overwrite, warnings.append) as staging:
        result = engine.execute(config, staging, phase, note)
        rejected = result.counts["rules"]["rows_rejected"] + \
            result.counts["positions"]["rows_rejected"]
        if rejected and config.on_bad_rows == "fail":
            raise BadRowsError(f"{rejected} input rows failed validation "
                               "(--on-bad-rows fail); nothing was written", result.problems,
                               rejected)
        exit_code = EXIT_REJECTS if rejected else EXIT_OK
        pos = result.counts["positions"]
        manifest = {
            "run_id": run_id,
            "started_at": started,
            "finished_at": _now(),
            "status": "completed_with_rejects" if rejected else "ok",
            "exit_code": exit_code,
            "engine": config.engine,
            "positions_form": result.form,
            "versions": _versions(),
            "config": config.as_dict(),
            "inputs": result.inputs,
            "counts": result.counts,
            "reconciled": pos["rows_read"] == pos["rows_evaluated"] + pos["rows_rejected"]
            and result.counts["rules"]["rows_read"]
            == result.counts["rules"]["rows_accepted"] + result.counts["rules"]["rows_rejected"],
            "timings_s": timings,
            "outputs": output_listing(staging),
        }
        write_manifest(manifest, staging)
    return RunResult(Path(config.out), exit_code, manifest, result.problems, warnings)
