"""Shared, independent references for the end-to-end tests (written from the rules of the game).

Nothing here imports `pipeline`: expected values come from exhaustive game-tree search, naive mex
tabulation, a naive first-repeating-window period search and closed forms checked against them.
Also: running commands on a small real file system (`on_small_disk`), and the JVM options of
every Spark JVM the tests start (`SPARK_CLASSES`).
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import polars as pl
import pytest
from s3_server import MotoServer

# ---- the tests' Spark JVMs ------------------------------------------------------------------

# The class archive `make test` built (tests/spark_class_archive.py) and the JIT's first tier
# only: the tests' JVMs are short-lived, so start-up, not peak speed, is what they spend their
# CPU on. Drivers and Connect servers (spark-submit) and standalone Masters and Workers read
# these (and a Worker's executors: tests/spark_servers.py); a JVM whose classpath the archive
# does not match (a jar put before Spark's) starts without it, as before, and without
# printing so on stdout (`-Xlog:cds*=off`).
SPARK_CLASSES = Path(sys.prefix) / "spark-classes.jsa"
if SPARK_CLASSES.exists():
    for _var in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
        os.environ.setdefault(_var, f"-XX:SharedArchiveFile={SPARK_CLASSES} -Xshare:auto "
                                    "-Xlog:cds*=off -XX:TieredStopAtLevel=1")

# ---- the game, by definition ----------------------------------------------------------------


def legal_takes(kind: str, moves: tuple[int, ...], heap: int) -> range | list[int]:
    """Every number of stones a move may remove from `heap`."""
    if kind == "nim":
        return range(1, heap + 1)
    if kind == "half":
        return range(1, heap // 2 + 1)
    return [s for s in moves if s <= heap]


@cache
def brute_force_wins(kind: str, moves: tuple[int, ...], heaps: tuple[int, ...]) -> bool:
    """Exhaustive search: winning iff some legal move reaches a losing position.

    Call with `heaps` sorted (positions are multisets); keep heaps small (<= ~25, <= 3 heaps).
    """
    for i, h in enumerate(heaps):
        if i and heaps[i - 1] == h:
            continue  # same move from an equal heap
        for take in legal_takes(kind, moves, h):
            after = tuple(sorted(heaps[:i] + (h - take,) + heaps[i + 1:]))
            if not brute_force_wins(kind, moves, after):
                return True
    return False


def wins(kind: str, moves, heaps) -> bool:
    return brute_force_wins(kind, tuple(sorted(set(moves))), tuple(sorted(heaps)))


# ---- Grundy values: naive tabulation, period, closed forms ----------------------------------


def naive_sg(moves, n: int) -> list[int]:
    """SG(0..n-1) of a subtraction game by the mex definition."""
    values: list[int] = []
    for x in range(n):
        reachable = {values[x - s] for s in moves if s <= x}
        g = 0
        while g in reachable:
            g += 1
        values.append(g)
    return values


def naive_period(moves, limit: int = 100_000) -> tuple[int, int, list[int]]:
    """(preperiod, period, values) from the first repeating window of max(S) values.

    Windows W_x = (SG(x-M), ..., SG(x-1)) for x >= M; the first y with W_y == W_x (x < y) gives
    preperiod x - M and period y - x. `values` covers at least preperiod + period entries.
    """
    moves = sorted(set(moves))
    m = moves[-1]
    values: list[int] = []
    seen: dict[tuple[int, ...], int] = {}
    for x in range(limit):
        if x >= m:
            window = tuple(values[x - m:x])
            if window in seen:
                return seen[window] - m, x - seen[window], values
            seen[window] = x
        reachable = {values[x - s] for s in moves if s <= x}
        g = 0
        while g in reachable:
            g += 1
        values.append(g)
    raise AssertionError(f"no period for {moves} within {limit} values")


def periodic_sg(moves):
    """SG as a function of arbitrary (Python int) heaps, from the naive period."""
    pre, per, values = naive_period(moves)

    def sg(h: int) -> int:
        return values[h] if h < pre else values[pre + (h - pre) % per]

    return sg


def sg_nim(x: int) -> int:
    return x


def sg_half(x: int) -> int:
    """The closed form: x with its trailing one-bits dropped, then halved (checked in test_run)."""
    while x & 1:
        x >>= 1
    return x >> 1


def naive_sg_half(n: int) -> list[int]:
    """SG(0..n-1) of `half` by the mex definition (moves take 1..floor(x/2))."""
    values: list[int] = []
    for x in range(n):
        reachable = {values[x - t] for t in range(1, x // 2 + 1)}
        g = 0
        while g in reachable:
            g += 1
        values.append(g)
    return values


# ---- writing inputs -------------------------------------------------------------------------


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    """Rows as given (cells already spelled as text where it matters)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


# A small job of every rule kind: rules.csv and positions.csv (tests of the API and results).
SMALL_RULES = {1: ("subtraction", (2, 5)), 2: ("nim", ()), 3: ("half", ())}
SMALL_POSITIONS = [(1, 10, [3, 5, 7]), (2, 11, [1, 2]), (3, 12, [9, 4]), (1, 13, [8])]


def write_small_job(where: Path) -> Path:
    """SMALL_RULES and SMALL_POSITIONS as `where`/rules.csv and positions.csv."""
    write_csv(where / "rules.csv", ["rule_set_id", "kind", "moves"],
              [[r, k, " ".join(map(str, m))] for r, (k, m) in SMALL_RULES.items()])
    write_csv(where / "positions.csv", ["rule_set_id", "position_id", "heaps"],
              [[r, p, " ".join(map(str, h))] for r, p, h in SMALL_POSITIONS])
    return where


def small_job_verdicts() -> dict[tuple[int, int], str]:
    """The small job's verdicts by (rule_set_id, position_id), from the game-tree search."""
    return {(r, p): "W" if wins(*SMALL_RULES[r], h) else "L" for r, p, h in SMALL_POSITIONS}


def write_parquet(path: Path, columns: dict, schema: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(columns, schema=schema, orient="col").write_parquet(path)
    return path


def write_understated_parquet(table, path: Path, said: dict[int, int],
                              row_group_size: int | None = None) -> Path:
    """`table` (pyarrow) as uncompressed Parquet whose footer says `said[v]` wherever the
    statistics hold the 8-byte integer `v`: a writer whose statistics understate the values
    (at least one `v` must be in the statistics)."""
    import struct

    import pyarrow.parquet as pq

    true = path.with_suffix(".true")
    pq.write_table(table, true, compression="NONE", row_group_size=row_group_size)
    raw = true.read_bytes()
    true.unlink()
    size = int.from_bytes(raw[-8:-4], "little")
    footer = lying = raw[-8 - size:-8]
    for value, claim in said.items():
        lying = lying.replace(struct.pack("<q", value), struct.pack("<q", claim))
    assert lying != footer, said
    path.write_bytes(raw[:-8 - size] + lying + struct.pack("<i", len(lying)) + b"PAR1")
    return path


def moves_text(moves, style: int) -> str:
    """One of the CSV spellings of a move set (style 3 writes runs as ranges "a..b")."""
    ms = list(moves)
    if style == 0:
        return " ".join(map(str, ms))
    if style == 1:
        return ",".join(map(str, ms))
    if style == 2:
        return "[" + ", ".join(map(str, ms)) + "]"
    parts, i, s = [], 0, sorted(set(ms))
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        parts.append(f"{s[i]}..{s[j]}" if j > i else " ".join(map(str, s[i:j + 1])))
        i = j + 1
    return " ".join(parts)


def read_outputs(out: Path) -> dict[str, pl.DataFrame]:
    return {name: pl.scan_parquet(out / f"{name}.parquet").collect()
            for name in ("verdicts", "rejects", "sg_tables", "summary")}


CLASSIC_SAMPLE = """2 2 5
3
2 5 12
3 2 4 7
4 2 3 7 12
5 1 2 3 4 5
3
2 5 12
3 2 4 7
4 2 3 7 12
0
"""
"""The textbook S-Nim sample input; the textbook programs print LWW then WWL."""


def invoke(args, where: Path) -> tuple[int, str]:
    """`snim-batch ARGS` in-process from directory `where`: (exit code, stderr)."""
    from typer.testing import CliRunner

    from pipeline.cli import app

    old = Path.cwd()
    os.chdir(where)
    try:
        result = CliRunner().invoke(app, [str(a) for a in args])
    finally:
        os.chdir(old)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stderr


@pytest.fixture(scope="session")
def moto_server():
    """One real S3 API server (moto) for the session, stopped at its end."""
    server = MotoServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def s3(moto_server):
    """The S3 server, emptied, with a bucket `bkt`."""
    moto_server.reset()
    moto_server.client().create_bucket(Bucket="bkt")
    return moto_server


CLI_EXE = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "snim-batch"
if not CLI_EXE.exists():  # pragma: no cover - another layout of the virtualenv
    CLI_EXE = Path(sys.executable).parent / "snim-batch"


# Commands on a small real file system (a tmpfs in a private mount namespace)
DISK_DRIVER = r"""
import hashlib, json, os, subprocess, sys
exe, disk, steps = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])

def snapshot(top):
    return {os.path.relpath(os.path.join(d, f), top):
            hashlib.sha256(open(os.path.join(d, f), "rb").read()).hexdigest()
            for d, _, files in os.walk(top) for f in files}

results = []
for step, *args in steps:
    if step in ("run", "report", "convert", "explain"):
        quiet = ["--quiet"] if step == "run" else []
        proc = subprocess.run([exe, step, *quiet, *args], capture_output=True, text=True)
        results.append([proc.returncode, proc.stderr])
    elif step == "tree":
        results.append(sorted(os.path.relpath(os.path.join(d, name), disk)
                              for d, dirs, files in os.walk(disk) for name in dirs + files))
    elif step == "snapshot":
        results.append(snapshot(os.path.join(disk, args[0])))
    elif step == "entries":
        results.append(sorted(os.listdir(disk)))
    elif step == "free":
        st = os.statvfs(disk)
        results.append([st.f_bfree, st.f_ffree])
    elif step == "fill-inodes":
        os.mkdir(os.path.join(disk, "filler"))
        for i in range(100000):
            try:
                open(os.path.join(disk, "filler", str(i)), "w").close()
            except OSError:
                break
        results.append(i)
    elif step == "fill-leaving":
        st = os.statvfs(disk)
        with open(os.path.join(disk, "filler"), "wb") as fh:
            fh.write(b"\0" * (st.f_bavail * st.f_frsize - int(args[0])))
        st = os.statvfs(disk)
        results.append(st.f_bavail * st.f_frsize)
    elif step == "symlink":
        os.symlink(args[1], os.path.join(disk, args[0]))
        results.append(None)
    elif step == "read-only":
        subprocess.run(["mount", "-o", "remount,ro", disk], check=True)
        results.append(None)
print(json.dumps(results))
"""


def on_small_disk(tmp_path: Path, options: str, steps: list[list[str]]) -> list:
    """Run `steps` (DISK_DRIVER's: a `snim-batch` command, or a look at the disk) in a private
    mount namespace with a fresh tmpfs of `options` mounted at tmp_path/disk; returns each
    step's result."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -rm (user and mount namespaces) is not permitted here")
    disk = tmp_path / "disk"
    disk.mkdir()
    proc = subprocess.run(
        ["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o "$1" tmpfs "$2" && shift 2 && '
         'exec "$@"', "sh", options, str(disk), sys.executable, "-c", DISK_DRIVER, str(CLI_EXE),
         str(disk), json.dumps(steps)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# A real snim-batch command, SIGKILLed right after its N-th change to the file system (a
# directory made or removed, a file synced, renamed, replaced or removed).
KILL_DRIVER = r"""
import os, signal, sys
from pipeline.io.outputs import commit

limit, done = int(sys.argv[1]), 0

def counted(real):
    def change(*args, **kwargs):
        global done
        result = real(*args, **kwargs)
        done += 1
        if done == limit:
            os.kill(os.getpid(), signal.SIGKILL)
        return result
    return change

for name in ("mkdir", "rmdir", "rename", "replace", "unlink", "fsync"):
    setattr(os, name, counted(getattr(os, name)))
commit._renameat2 = counted(commit._renameat2)
from pipeline.cli import app
sys.argv = ["snim-batch", *sys.argv[2:]]
app()
"""


PROGRESS_LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z snim-batch: info: .*")


def said_lines(stderr: str) -> list[str]:
    """The lines of a command's stderr but its progress log lines: outside a terminal, a
    command that runs for over 10 s (a JVM's start, a store's timeout) logs its progress
    (`terminal.PlainProgress`, info lines), whatever else it says."""
    return [line for line in stderr.strip().splitlines() if not PROGRESS_LINE.fullmatch(line)]


def killed_at(limit: int, args: list[str]) -> subprocess.CompletedProcess:
    """Run `snim-batch ARGS`, killed (SIGKILL) right after its `limit`-th change to the file
    system; its return code is 0 (or the command's own) if it finished first."""
    return subprocess.run([sys.executable, "-c", KILL_DRIVER, str(limit), *args],
                          capture_output=True, text=True, timeout=120)
def inputs_with_rejects(where: Path, form: str) -> tuple[Path, Path]:
    """(rules.csv, positions folder) for the Spark server tests: a Parquet file that Spark
    splits and a CSV file, with rows each engine must reject (an unknown and an invalid rule
    set, a negative or missing heap, a line with too many fields, a duplicate key)."""
    import random

    rng = random.Random(f"server-{form}")
    rules = write_csv(where / "rules.csv", ["rule_set_id", "kind", "moves"],
                      [[1, "subtraction", "1 2"], [2, "subtraction", "2 5 7"], [3, "nim", ""],
                       [4, "subtraction", "0 3"]])
    heap = "heaps" if form == "wide" else "heap"
    rows = [[rng.choice([1, 2, 3, 4, 99]), pid,
             [rng.randint(0, 30) for _ in range(rng.randint(1, 4))] if form == "wide"
             else rng.randint(0, 30)] for pid in range(300)]
    rows[7][2] = [5, None] if form == "wide" else None
    rows[8][2] = [3, -2] if form == "wide" else -2
    rows.append(list(rows[10]))  # the same key twice
    positions = where / "positions"
    write_parquet(positions / "a.parquet", {
        "rule_set_id": [r[0] for r in rows], "position_id": [r[1] for r in rows],
        heap: [r[2] for r in rows]},
        {"rule_set_id": pl.Int64, "position_id": pl.Int64,
         heap: pl.List(pl.Int64) if form == "wide" else pl.Int64})
    csv_rows = [[1, 1000 + i, f"{i} {i + 1}" if form == "wide" else i] for i in range(20)]
    b = write_csv(positions / "b.csv", ["rule_set_id", "position_id", heap], csv_rows)
    b.write_text(b.read_text() + "1,2,3,4\n")
    return rules, positions


def assert_same_outputs(have: Path, want: Path) -> None:
    """The four tables of two output directories are equal, row for row."""
    from polars.testing import assert_frame_equal

    got, expected = read_outputs(have), read_outputs(want)
    for name in expected:
        try:
            assert_frame_equal(got[name], expected[name], check_exact=True)
        except AssertionError as exc:
            raise AssertionError(f"{name}.parquet differs: {exc}") from None
