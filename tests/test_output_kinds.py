"""io.outputs.kinds: the Output protocol's shared staging, entered and left exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.events import ignore
from pipeline.io.outputs.kinds import LocalDirectory


class StoppedOnEntry:
    """A staging context that is stopped the moment it has made its directory (Ctrl-C landing
    as `__enter__` returns)."""

    def __init__(self, inner):
        self.inner = inner

    def __enter__(self):
        self.inner.__enter__()
        raise KeyboardInterrupt

    def __exit__(self, *exc):
        return self.inner.__exit__(*exc)


def test_a_stop_as_the_staging_is_entered_leaves_no_staging(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    output = LocalDirectory(tmp_path / "out", False, ignore)
    real = output._open
    made: list[StoppedOnEntry] = []  # held: its cleanup must not wait for the collector

    def stopped(run_id: str) -> StoppedOnEntry:
        made.append(StoppedOnEntry(real(run_id)))
        return made[-1]

    monkeypatch.setattr(output, "_open", stopped)
    with pytest.raises(KeyboardInterrupt):
        output.stage("20261204T000000Z-abcdef")
    assert made and list(tmp_path.iterdir()) == []  # the staging directory is gone
    output.roll_back(KeyboardInterrupt())  # nothing is left to roll back, and that is no error
    assert list(tmp_path.iterdir()) == []


def test_a_staged_run_rolled_back_leaves_nothing(tmp_path: Path) -> None:
    output = LocalDirectory(tmp_path / "out", False, ignore)
    staging = output.stage("20261204T000000Z-abcdef")
    (staging / "verdicts.parquet").write_bytes(b"half a file")
    output.roll_back(RuntimeError("a bug"))
    assert list(tmp_path.iterdir()) == []
