"""`make test` runs two pytest-xdist workers with `--dist loadfile`: every test of a file on
one worker, so that the Spark session, cluster or server a module shares starts once. This
checks that the installed pytest and xdist still do so (a scheduling mode that rewrote test
ids, `loadgroup`, silently stopped grouping under pytest 9.2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

_A_FILE = '''
import os, pathlib, time
def _mark(name):
    time.sleep(0.2)
    pathlib.Path(name).write_text(os.environ.get("PYTEST_XDIST_WORKER", "none"))
'''


@pytest.mark.slow
def test_loadfile_keeps_each_files_tests_on_one_worker(tmp_path: Path) -> None:
    for module in ("a", "b"):
        tests = "".join(f"def test_{n}(): _mark('{module}{n}')\n" for n in range(4))
        (tmp_path / f"test_{module}.py").write_text(_A_FILE + tests)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-n", "2", "--dist", "loadfile", str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    workers = {module: {(tmp_path / f"{module}{n}").read_text() for n in range(4)}
               for module in ("a", "b")}
    assert all(len(ids) == 1 for ids in workers.values()), workers
    assert workers["a"] | workers["b"] <= {"gw0", "gw1"}, workers
