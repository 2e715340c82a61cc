"""Nothing is compiled on a user's run (issue 36): every input shape's first run, in a fresh
HOME and with the installed package and the virtualenv read-only (bind mounts in a private
mount namespace, as root ignores permission bits), runs the real `snim-batch` entry point and
loads the kernels as the extension modules the install built, with no JIT (numba, llvmlite)
and no compiler (Cython, pyximport) imported, and leaves no file in HOME or the package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from conftest import wins, write_csv

import pipeline

PACKAGE = Path(pipeline.__file__).resolve().parent
COMPILERS = ("numba", "llvmlite", "Cython", "pyximport")

# The console script's own entry, with what it imported written down when it ends (its
# os._exit skips atexit).
COLD_DRIVER = r"""
import json, os, sys
report = sys.argv[1]

def record():
    native = {name: getattr(module, "__file__", None) or ""
              for name, module in list(sys.modules.items())
              if name.startswith("pipeline.") and name.rsplit(".", 1)[-1].startswith("_")
              and name.rsplit(".", 1)[-1] not in ("__init__", "__main__")}
    with open(report, "w") as fh:
        json.dump({"compilers": sorted(m for m in sys.modules
                                       if m.split(".")[0] in COMPILERS),
                   "native": native}, fh)

real_exit = os._exit
def leave(code):
    record()
    real_exit(code)
os._exit = leave
sys.argv = ["snim-batch", *sys.argv[2:]]
from pipeline.executable import entry
try:
    entry()
finally:
    record()
""".replace("COMPILERS", repr(COMPILERS))

RULES = [("1", "subtraction", "1 2"), ("2", "nim", ""), ("3", "half", ""),
         ("4", "subtraction", "2 5 7")]
POSITIONS = [(1, 10, [3, 5, 7]), (2, 11, [1, 2]), (3, 12, [9, 4]), (4, 13, [8, 1, 30]),
             (1, 14, [0]), (4, 15, [])]


def _rules(where: Path, key: pl.DataType | None) -> Path:
    """The rules as CSV (text keys: key None) or as Parquet with `key` ids."""
    if key is None:
        return write_csv(where / "rules.csv", ["rule_set_id", "kind", "moves"],
                         [[f"rs{r}", k, m] for r, k, m in RULES])
    path = where / "rules.parquet"
    pl.DataFrame({"rule_set_id": [int(r) for r, _, _ in RULES],
                  "kind": [k for _, k, _ in RULES],
                  "moves": [[int(m) for m in ms.split()] for _, _, ms in RULES]},
                 schema={"rule_set_id": key, "kind": pl.String,
                         "moves": pl.List(pl.Int64)}).write_parquet(path)
    return path


def _positions(where: Path, form: str, fmt: str, key: pl.DataType | None,
               heap: pl.DataType) -> Path:
    """POSITIONS in one shape: wide (a list of heaps) or long (a row per heap), CSV or
    Parquet, integer keys of dtype `key` or text keys (None), heaps of dtype `heap`."""
    rid = [(f"rs{r}" if key is None else r) for r, _, _ in POSITIONS]
    pid = [(f"p{p}" if key is None else p) for _, p, _ in POSITIONS]
    ids = pl.String if key is None else key
    if form == "wide":
        frame = pl.DataFrame({"rule_set_id": rid, "position_id": pid,
                              "heaps": [h for _, _, h in POSITIONS]},
                             schema={"rule_set_id": ids, "position_id": ids,
                                     "heaps": pl.List(heap)})
    else:
        rows = [(r, p, h) for r, p, (_, _, hs) in zip(rid, pid, POSITIONS) for h in hs or [0]]
        frame = pl.DataFrame({"rule_set_id": [r for r, _, _ in rows],
                              "position_id": [p for _, p, _ in rows],
                              "heap": [h for _, _, h in rows]},
                             schema={"rule_set_id": ids, "position_id": ids, "heap": heap},
                             orient="col")
    if fmt == "parquet":
        path = where / "positions.parquet"
        frame.write_parquet(path)
    else:
        path = where / "positions.csv"
        if form == "wide":
            frame = frame.with_columns(pl.col("heaps").cast(pl.List(pl.String))
                                       .list.join(" "))
        frame.write_csv(path)
    return path


# (form, format, key dtype or None for text, heap dtype, winning moves)
SHAPES = [
    ("wide", "csv", pl.Int64, pl.Int64, False),
    ("wide", "csv", None, pl.Int64, True),
    ("wide", "parquet", pl.Int16, pl.UInt16, True),
    ("wide", "parquet", pl.UInt64, pl.Int8, False),
    ("wide", "parquet", pl.Int32, pl.UInt64, True),
    ("wide", "parquet", pl.UInt8, pl.UInt32, False),
    ("long", "csv", None, pl.Int64, True),
    ("long", "csv", pl.Int64, pl.Int64, False),
    ("long", "parquet", pl.UInt32, pl.Int16, True),
    ("long", "parquet", pl.Int8, pl.UInt8, False),
]

CLASSIC = b"2 2 5\n3\n2 5 12\n3 2 4 7\n2 2 3\n0\n"


def _commands(tmp_path: Path) -> list[tuple[str, list[str], bytes | None]]:
    """(name, snim-batch arguments, stdin) for every shape, each in a directory of its own."""
    commands = []
    for n, (form, fmt, key, heap, winning) in enumerate(SHAPES):
        where = tmp_path / f"shape{n}"
        where.mkdir()
        rules = _rules(where, key)
        positions = _positions(where, form, fmt, key, heap)
        name = f"{form}-{fmt}-{key or 'text'}-{heap}-{'moves' if winning else 'nomoves'}"
        commands.append((name, ["run", "--rules", str(rules), "--positions", str(positions),
                                "--out", str(where / "out"), "--quiet",
                                "--winning-moves" if winning else "--no-winning-moves"],
                         None))
    commands.append(("solve", ["solve"], CLASSIC))
    commands.append(("grundy", ["grundy", "--moves", "2 5 7", "--upto", "30"], None))
    return commands


def _tree(top: Path) -> set[str]:
    return {os.path.relpath(os.path.join(d, name), top)
            for d, dirs, files in os.walk(top) for name in dirs + files}


def test_the_first_run_of_every_shape_compiles_nothing(tmp_path):
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -rm (user and mount namespaces) is not permitted here")
    read_only = sorted({PACKAGE, Path(sys.prefix).resolve()})
    package_before = _tree(PACKAGE)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NUMBA_", "PYTHONPYCACHEPREFIX", "XDG_"))}
    mounts = " && ".join(f'mount --bind "{p}" "{p}" && mount -o remount,bind,ro "{p}" "{p}"'
                         for p in read_only)
    for n, (name, args, stdin) in enumerate(_commands(tmp_path)):
        home = tmp_path / f"home{n}"
        home.mkdir()
        report = tmp_path / f"report{n}.json"
        proc = subprocess.run(
            ["unshare", "-rm", "sh", "-c", f'{mounts} && exec "$@"', "sh", sys.executable,
             "-c", COLD_DRIVER, str(report), *args],
            input=stdin, capture_output=True, env={**env, "HOME": str(home)},
            cwd=tmp_path, timeout=300)
        assert proc.returncode == 0, (name, proc.stderr.decode()[-3000:])
        got = json.loads(report.read_text())
        assert got["compilers"] == [], name
        native = got["native"]
        assert native, name  # the kernels were loaded
        for module, path in native.items():
            assert Path(path).suffix == ".so" and Path(path).is_relative_to(PACKAGE), \
                (name, module, path)
        assert _tree(home) == set(), name
        if name == "solve":
            verdicts = "".join("W" if wins("subtraction", (2, 5), heaps) else "L"
                               for heaps in [(5, 12), (2, 4, 7), (2, 3)])
            assert proc.stdout.decode() == verdicts + "\n"
    assert _tree(PACKAGE) == package_before


def test_the_package_imports_no_jit_and_finds_its_compiled_kernels():
    """Quick form of the above: importing the kernels and the classic solver loads their
    extension modules and no compiler."""
    code = ("import sys, json\nfrom pipeline import kernels, classic, grundy\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in C)))"
            ).replace(" C)", f" {COMPILERS!r})")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


ENTRY = ("import sys; sys.argv = ['snim-batch', *sys.argv[1:]]; "
         "from pipeline.executable import entry; entry()")


@pytest.mark.parametrize("args", [[], ["--memory-limit", "1", "--verbose"],
                                  ["--memory-limit", "1", "--verbose", "--winning-moves"]],
                         ids=["in-memory", "spilled", "spilled-with-moves"])
def test_a_run_imports_no_pandas(tmp_path, args):
    """pandas (0.1-0.2 s to import) is not what a run needs: `pa.array` of a Python list
    at a module's import loaded it, through pyarrow's pandas shim, in every run's start; a
    run that spilled loaded it through pyarrow's `to_numpy`, `empty_table`, `pq.write_table`
    and `pyarrow.compute` scalars."""
    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", ENTRY, "run", "--rules",
                           str(sample / "rules.csv"), "--positions",
                           str(sample / "positions.csv"), "--out", str(tmp_path / "out"),
                           *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert ("rows spilled" in proc.stderr) == bool(args)
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")]
    assert "polars" in imported and "pipeline.transforms.ordering" in imported
    assert "pandas" not in imported


@pytest.mark.parametrize(("args", "stdin", "module"), [
    (["grundy", "--moves", "2 5", "--upto", "10"], None, "pipeline.kernels._csv_walk"),
    (["solve"], "2 1 2\n1\n1 3\n0\n", "pipeline.classic._classic"),
    (["run", "--rules", "RULES", "--positions", "POSITIONS", "--out", "out"], None,
     "pipeline.kernels._csv_walk"),
], ids=["grundy", "solve", "run"])
def test_kernels_not_built_are_named_with_what_builds_them(tmp_path, args, stdin, module):
    """The package without its compiled modules (a checkout after `make clean-cache`, a
    source tree on PYTHONPATH): one error line that names the module and what builds it,
    exit 1. Before, "internal error: ImportError: ... (most likely due to a circular
    import)", or for `solve` a traceback."""
    import shutil

    shutil.copytree(PACKAGE, tmp_path / "pipeline",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    sample = PACKAGE.parent / "data" / "sample"
    args = [str(sample / "rules.csv") if a == "RULES" else
            str(sample / "positions.csv") if a == "POSITIONS" else a for a in args]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", ENTRY, *args], input=stdin, cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        f"snim-batch: error: the compiled module {module} cannot be loaded (No module named "
        f"'{module}'); it is built at install: in a checkout `make clean-cache && make run` "
        "builds it again, an installed package needs installing again (pip install)"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()
