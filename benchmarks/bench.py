"""Benchmark driver: `make bench` (ratios against references) and `make bench-large` (200M heaps).

    python benchmarks/bench.py [--repeat N]     # make bench
    python benchmarks/bench.py --large          # make bench-large

Every measured program runs as its own subprocess; the driver times it with time.perf_counter
around spawn-to-exit and reads its peak RSS (ru_maxrss) from os.wait4. The driver imports only
the standard library, so that its own small RSS is the only floor under the children's peak RSS
(Linux charges the parent's RSS at spawn time to the child's ru_maxrss; the floor is measured
and reported). Inputs are generated (seeded) under benchmarks/data/ when missing; outputs, logs
and RESULTS.md go to benchmarks/results/. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DATA = BENCH / "data"
RES = BENCH / "results"
LOGS = RES / "logs"
BIN = RES / "bin"
RESULTS = RES / "RESULTS.md"

PY = Path(sys.executable)
SNIM = PY.parent / "snim-batch"

GIB = 2**30
LARGE_RSS_GOAL = 4 * GIB

# Datasets of `snim-batch generate`; the same seed draws the same positions in every shape.
GEN_COMMON = ["--rule-sets", "1000", "--moves-per-set", "100", "--max-heap", "10000",
              "--heaps", "5"]  # HEAPS
HEAPS = 5
MAX_HEAP = 10_000


@dataclass(frozen=True)
class Dataset:
    """A generated input: `snim-batch generate` with GEN_COMMON and these options."""

    name: str
    positions: int
    seed: int
    form: str = "wide"
    fmt: str = "parquet"
    key_type: str = "int"
    shuffle: bool = False
    files: int = 0  # 0: one per million positions

    @property
    def file_count(self) -> int:
        return self.files or max(1, math.ceil(self.positions / 1_000_000))

    @property
    def rows(self) -> int:
        return self.positions * (HEAPS if self.form == "long" else 1)

    def options(self) -> list[str]:
        return ["--positions", str(self.positions), *GEN_COMMON, "--form", self.form,
                "--format", self.fmt, "--seed", str(self.seed), "--key-type", self.key_type,
                "--files", str(self.files), *(["--shuffle"] if self.shuffle else [])]

    def describe(self) -> str:
        keys = {"int": "integer ids", "string": "text rule ids",
                "uuid": "text rule ids, UUID position ids"}[self.key_type]
        order = ", rows shuffled" if self.shuffle else ""
        return (f"{self.positions:,} positions, {self.form} form, {self.fmt}, {keys}{order}, "
                f"{self.file_count} file{'s' if self.file_count > 1 else ''}")


TEN_M = 10_000_000
# The matrix of `make bench`: the shapes warehouse tables have, 10M positions each (seed 1).
MATRIX = [
    ("integer ids", Dataset("m_int", TEN_M, 1, files=1)),
    ("text rule ids", Dataset("m_string", TEN_M, 1, key_type="string", files=1)),
    ("UUIDs, shuffled, 4 files", Dataset("m_uuid", TEN_M, 1, key_type="uuid", shuffle=True,
                                         files=4)),
    ("wide CSV, text rule ids", Dataset("m_csv", TEN_M, 1, fmt="csv", key_type="string",
                                        files=10)),
    ("long form", Dataset("m_long", TEN_M, 1, form="long", files=1)),
]
MATRIX_RSS_GOAL = 2 * GIB
# Spark rows: the engine on local[2] against the polars engine and a hand-rolled Spark SQL plan
SPARK_MASTER = "local[2]"
SPARK_FLOOR_GOAL, SPARK_PLAN_GOAL = 1.3, 3.0
FLOOR_GOAL, LONG_GOAL = 1.5, 2.0
# `make bench-large`: 200M heaps (40M positions, seed 2).
LARGE = [
    Dataset("p40m", 40_000_000, 2),
    Dataset("p40m_string", 40_000_000, 2, key_type="string", files=20),
    Dataset("p40m_csv", 40_000_000, 2, fmt="csv"),
    Dataset("p40m_long", 40_000_000, 2, form="long"),
]

# SG builder benchmark: 1,000 rule sets x 100 distinct moves from 1..10^4, SG(0..10^4).
SG_RULES, SG_MOVES, SG_MAX_MOVE, SG_VALUES, SG_SEED = 1000, 100, 10_000, 10_001, 3
# Classic-format input for `solve`.
CLASSIC_BYTES, CLASSIC_SEED = 50_000_000, 4

_T0 = time.perf_counter()


class BenchError(Exception):
    """A failure the driver reports in one line (exit 1)."""


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:8.1f}s] {msg}", file=sys.stderr, flush=True)


@dataclass
class Proc:
    """One measured subprocess."""

    name: str
    argv: list[str]
    wall_s: float
    maxrss: int  # bytes
    stdout: str
    stderr: str
    values: dict[str, str] = field(default_factory=dict)  # key=value tokens printed by it
    cpu_s: float = 0.0  # user + system time of the child

    def num(self, key: str) -> float | None:
        v = self.values.get(key)
        return float(v) if v is not None else None


def _short(argv: list[str]) -> str:
    parts = []
    for a in argv:
        p = Path(a)
        if p.is_absolute():
            try:
                a = str(p.relative_to(ROOT))
            except ValueError:
                a = p.name if p.parent in (PY.parent, Path("/bin"), Path("/usr/bin")) else a
        parts.append(a)
    return " ".join(parts)


def measure(name: str, argv: list[str], *, stdin: Path | None = None,
            stdout: Path | None = None, cwd: Path = ROOT, code: Path | None = None,
            env: dict[str, str] | None = None) -> Proc:
    """Run argv as a child; wall time (perf_counter) and peak RSS (wait4); exit code checked.
    `code` is a checkout whose `pipeline` the child imports instead (PYTHONPATH); `env` is
    added to the environment."""
    env = {**os.environ, **(env or {}), **({"PYTHONPATH": str(code)} if code else {})}
    LOGS.mkdir(parents=True, exist_ok=True)
    out_path = stdout or LOGS / f"{name}.stdout"
    err_path = LOGS / f"{name}.stderr"
    log(f"{name}: {_short(argv)}" + (f" < {_short([str(stdin)])}" if stdin else ""))
    fin = open(stdin, "rb") if stdin else subprocess.DEVNULL
    try:
        with open(out_path, "wb") as fout, open(err_path, "wb") as ferr:
            t0 = time.perf_counter()
            try:
                proc = subprocess.Popen(argv, stdin=fin, stdout=fout, stderr=ferr, cwd=cwd,
                                        env=env)
            except OSError as exc:
                raise BenchError(f"{name}: cannot start {argv[0]}: {exc.strerror}") from None
            try:
                _, status, usage = os.wait4(proc.pid, 0)
            except BaseException:
                proc.kill()
                proc.wait()
                raise
            wall = time.perf_counter() - t0
            proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if stdin:
            fin.close()
    err_text = err_path.read_text(errors="replace")
    out_text = "" if stdout else out_path.read_text(errors="replace")
    if proc.returncode != 0:
        tail = "\n".join(err_text.strip().splitlines()[-15:])
        raise BenchError(f"{name} exited with code {proc.returncode}: {_short(argv)}\n"
                         f"--- last lines of {err_path}:\n{tail}")
    values = {}
    for tok in (out_text + "\n" + err_text).split():
        if "=" in tok:
            k, _, v = tok.partition("=")
            values[k] = v
    cpu = usage.ru_utime + usage.ru_stime
    log(f"{name}: {wall:.2f}s wall, {cpu:.2f}s CPU, peak RSS {usage.ru_maxrss / 1024:.0f} MiB")
    return Proc(name, argv, wall, usage.ru_maxrss * 1024, out_text, err_text, values, cpu)


def helper(*args: str, env: dict[str, str] | None = None) -> str:
    """Run benchmarks/helpers.py (not measured); its stdout; exit code checked."""
    argv = [str(PY), str(BENCH / "helpers.py"), *args]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT,
                             env={**os.environ, **env} if env else None)
    except OSError as exc:
        raise BenchError(f"cannot start {argv[0]}: {exc.strerror}") from None
    if res.returncode != 0:
        raise BenchError(f"helpers.py {args[0]} failed (exit {res.returncode}): "
                         f"{(res.stderr or res.stdout).strip()}")
    return res.stdout.strip()


def checked(argv: list[str], what: str) -> None:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    except OSError as exc:
        raise BenchError(f"{what}: cannot start {argv[0]}: {exc.strerror}") from None
    if res.returncode != 0:
        raise BenchError(f"{what} failed (exit {res.returncode}): {' '.join(argv)}\n"
                         f"{(res.stderr or res.stdout).strip()}")


# --------------------------------------------------------------------------- inputs


def ensure_dataset(ds: Dataset) -> Path:
    """benchmarks/data/NAME from `snim-batch generate`, reused when complete."""
    target = DATA / ds.name
    if target.exists():
        found = sorted((target / "positions").glob(f"part-*.{ds.fmt}"))
        if (target / f"rules.{ds.fmt}").is_file() and len(found) == ds.file_count:
            rows = int(helper("rows", str(target)))
            if rows == ds.rows:
                log(f"reusing {target.relative_to(ROOT)} ({len(found)} files, {rows} rows)")
                return target
            problem = f"{rows} position rows, expected {ds.rows}"
        else:
            problem = f"{len(found)} position files, expected {ds.file_count}"
        newest = max((p.stat().st_mtime for p in target.rglob("*")), default=0)
        if time.time() - newest < 120:
            raise BenchError(f"{target} is incomplete ({problem}) and was modified in the last "
                             "2 minutes; is it being generated? Wait, or remove it.")
        log(f"{target.relative_to(ROOT)} is incomplete ({problem}); generating it again")
    DATA.mkdir(parents=True, exist_ok=True)
    tmp = DATA / f".{ds.name}.tmp-{os.getpid()}"
    log(f"generating {target.relative_to(ROOT)}: {ds.describe()} (a few minutes)")
    checked([str(SNIM), "generate", "--out", str(tmp), *ds.options()], "snim-batch generate")
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)
    return target


def _ensure_text(name: str, kind: str, *args: object) -> Path:
    """DATA/name, made once by `helpers.py KIND PATH ARGS` (seeded, so reusable)."""
    path = DATA / name
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        log(f"generating {path.relative_to(ROOT)}")
        said = helper(kind, str(path), *(str(a) for a in args))
        if said.strip():
            log(said.strip())
    return path


def ensure_moves() -> Path:
    return _ensure_text(f"sg_moves_r{SG_RULES}_k{SG_MOVES}_m{SG_MAX_MOVE}_seed{SG_SEED}.txt",
                        "moves", "--rules", SG_RULES, "--moves", SG_MOVES,
                        "--max-move", SG_MAX_MOVE, "--values", SG_VALUES, "--seed", SG_SEED)


def ensure_classic() -> Path:
    return _ensure_text(f"classic_{CLASSIC_BYTES // 1_000_000}mb_seed{CLASSIC_SEED}.txt",
                        "classic", "--target-bytes", CLASSIC_BYTES, "--seed", CLASSIC_SEED)


def compile_references() -> dict[str, Path]:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise BenchError("gcc not found on PATH: it is needed to build the C references "
                         "(benchmarks/*.c); install it (e.g. apt-get install gcc) and rerun")
    BIN.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in ("sg_reference", "snim_reference"):
        exe = BIN / name
        checked([gcc, "-O2", "-o", str(exe), str(BENCH / f"{name}.c")], f"gcc -O2 {name}.c")
        out[name] = exe
    return out


# --------------------------------------------------------------------------- environment


def _git(*args: str, cwd: Path = ROOT) -> str:
    try:
        res = subprocess.run(["git", *args], capture_output=True, text=True, cwd=cwd)
    except OSError:
        return "?"
    return res.stdout.strip() if res.returncode == 0 else "?"


def code_under_test() -> Path:
    """The checkout whose `pipeline` the measured programs import (PYTHONPATH may point the
    venv at another checkout, e.g. an older commit for a before/after comparison)."""
    res = subprocess.run([str(PY), "-c", "import pipeline; print(pipeline.__file__)"],
                         capture_output=True, text=True, cwd="/")  # not ROOT: -c imports from cwd
    if res.returncode != 0:
        raise BenchError(f"cannot import pipeline: {res.stderr.strip()}")
    return Path(res.stdout.strip()).parent.parent


def environment() -> list[str]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kib / 2**20:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    code = code_under_test()
    dirty = _git("status", "--porcelain", "--", "pipeline", cwd=code)
    dirty_files = ([line.split(maxsplit=1)[-1] for line in dirty.splitlines()]
                   if dirty != "?" else ["?"])
    return [
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%S UTC')}",
        f"- machine: {platform.node()}, {os.cpu_count()} CPUs ({cpu}), {mem} RAM, "
        f"load average at start {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        f"- code: {code}, commit {_git('rev-parse', '--short', 'HEAD', cwd=code)}"
        + (f", uncommitted changes in {', '.join(dirty_files)}" if dirty_files else ", clean"),
        f"- python {platform.python_version()} ({PY})",
    ]


def rss_floor() -> int:
    """The child peak RSS the driver's own RSS imposes (see module docstring)."""
    return measure("rss-floor", ["/bin/true"]).maxrss


# --------------------------------------------------------------------------- formatting


def mib(n: float | None, floor: int = 0) -> str:
    if n is None:
        return "—"
    s = f"{n / 2**20:,.0f}"
    return f"≤ {s}" if floor and n <= floor * 1.05 else s


def secs(x: float | None) -> str:
    return "—" if x is None else (f"{x:.3f}" if x < 10 else f"{x:.1f}")


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b <= 0:
        return "—"
    return f"**{a / b:.2f}×**"


def manifest_total(out_dir: Path) -> tuple[float | None, str]:
    """Sum of the run's phase timings and the phases, from its manifest.json."""
    try:
        m = json.loads((out_dir / "manifest.json").read_text())
        t = m["timings_s"]
        return float(sum(t.values())), ", ".join(f"{k} {v:.2f}" for k, v in t.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None, "?"


def best(runs: list[Proc]) -> Proc:
    """The fastest of repeated runs, with the highest peak RSS of them all."""
    b = min(runs, key=lambda p: p.wall_s)
    return Proc(b.name, b.argv, b.wall_s, max(p.maxrss for p in runs), b.stdout, b.stderr,
                b.values, b.cpu_s)


# --------------------------------------------------------------------------- make bench


def warm_up() -> None:
    """Run each measured command once on the bundled sample first, so that the measured runs
    find the installed modules in the page cache (a run compiles nothing; the start rows
    measure first runs on their own)."""
    sample = ROOT / "data" / "sample"
    log("warm-up: the bundled sample")
    checked([str(SNIM), "run", "--rules", str(sample / "rules.parquet"), "--positions",
             str(sample / "positions.parquet"), "--out", str(RES / "warmup"), "--overwrite",
             "--winning-moves", "--quiet"], "warm-up run")
    with (sample / "classic.txt").open("rb") as fh:
        subprocess.run([str(SNIM), "solve"], stdin=fh, capture_output=True, check=False)


def prepare(large: bool) -> None:
    """Generate (or check) every input of `make bench` or `make bench-large`."""
    for ds in LARGE if large else [ds for _, ds in MATRIX] + S3_MANY:
        ensure_dataset(ds)
    if not large:
        ensure_moves()
        ensure_classic()


def compile_before(before: Path) -> None:
    """Write the older checkout's bytecode, as `make` writes this one's: under
    PYTHONDONTWRITEBYTECODE its every run would otherwise compile its modules again (about
    0.1 s, which the before/after tables once charged to the older code)."""
    subprocess.run([str(PY), "-m", "compileall", "-q", str(before / "pipeline")], check=True)


def run_argv(ds: Dataset, data: Path, out: Path, *extra: str,
             launcher: list[str] | None = None) -> list[str]:
    return [*(launcher or [str(SNIM)]), "run", "--rules", str(data / f"rules.{ds.fmt}"),
            "--positions", str(data / "positions"), "--out", str(out), "--overwrite", "--quiet",
            *extra]


def floor_argv(ds: Dataset, data: Path, out: Path) -> list[str]:
    return [str(PY), str(BENCH / "floor.py"), ds.form, ds.fmt,
            str(data / "positions" / f"*.{ds.fmt}"), str(out)]


def before_after(r: dict[str, Proc], before: Path | None) -> list[str]:
    """The matrix's `run` with the older checkout's pipeline against this one, if measured."""
    if before is None:
        return []
    lines = [f"### Before and after: `--before {before}` (commit "
             f"{_git('rev-parse', '--short', 'HEAD', cwd=before)})", "",
             "Each shape's two runs back to back; ratios against the same floor run.", "",
             "| shape | before wall (s) | after wall (s) | **after / before** | before / floor "
             "| after / floor | before RSS (MiB) | after RSS (MiB) |",
             "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for label, ds in MATRIX:
        old, new, fl = r[f"before_{ds.name}"], r[f"run_{ds.name}"], r[f"floor_{ds.name}"]
        lines.append(f"| {label} | {secs(old.wall_s)} | {secs(new.wall_s)} | "
                     f"{ratio(new.wall_s, old.wall_s)} | {ratio(old.wall_s, fl.wall_s)} | "
                     f"{ratio(new.wall_s, fl.wall_s)} | {mib(old.maxrss)} | {mib(new.maxrss)} |")
    return [*lines, ""]


def goal(value: float | None, limit: float) -> str:
    if value is None:
        return "—"
    return "met" if value <= limit else "**not met**"


def bench(repeat: int, before: Path | None = None, s3_positions: int = TEN_M,
          extra_rows: bool = True) -> None:
    """The matrix and the references; with `extra_rows` also the Spark and object-store rows."""
    env = environment()
    refs = compile_references()
    data = {ds.name: ensure_dataset(ds) for _, ds in MATRIX}
    moves = ensure_moves()
    classic = ensure_classic()
    RES.mkdir(parents=True, exist_ok=True)
    cwd = RES / "cwd"  # no config.yaml here, so `run` takes its flags and the defaults only
    cwd.mkdir(exist_ok=True)
    if (cwd / "config.yaml").exists():
        raise BenchError(f"{cwd / 'config.yaml'} exists; remove it")
    floor = rss_floor()
    warm_up()

    base = MATRIX[0][1]
    plan_out = RES / "polars_plan_m_int.parquet"
    sg_ours_bin, sg_ref_bin = RES / "sg_ours.bin", RES / "sg_reference.bin"
    solve_ours_txt, solve_ref_txt = RES / "solve_ours.txt", RES / "solve_reference.txt"
    runs: dict[str, list[Proc]] = {}

    def one(key: str, *args, out: Path | None = None, **kwargs) -> None:
        proc = measure(key, *args, **kwargs)
        if out is not None:  # its in-process time is in the manifest the next run replaces
            total, proc.values["phases"] = manifest_total(out)
            if total is not None:
                proc.values["job_s"] = str(total)
        runs.setdefault(key, []).append(proc)

    # Pairs are measured back to back (and alternate with --repeat) so that they see the same
    # machine load as far as possible.
    for i in range(repeat):
        if repeat > 1:
            log(f"round {i + 1} of {repeat}")
        one("startup", [str(PY), "-c", "import pipeline.cli, pipeline.classic, pipeline.grundy"],
            cwd=cwd)
        for _, ds in MATRIX:
            out = RES / f"run_{ds.name}"
            if before is not None:
                old = RES / f"before_{ds.name}"
                one(f"before_{ds.name}", run_argv(ds, data[ds.name], old, "--no-winning-moves",
                                                  launcher=OLD_LAUNCHER),
                    out=old, cwd=cwd, code=before)
            one(f"run_{ds.name}", run_argv(ds, data[ds.name], out, "--no-winning-moves"),
                out=out, cwd=cwd)
            one(f"floor_{ds.name}", floor_argv(ds, data[ds.name],
                                               RES / f"floor_{ds.name}.parquet"))
        one("polars_plan", [str(PY), str(BENCH / "polars_plan.py"),
                            str(data[base.name] / "rules.parquet"),
                            str(data[base.name] / "positions" / "*.parquet"), str(plan_out),
                            str(MAX_HEAP)])
        if extra_rows:
            spark_runs(one, base, data[base.name])
        one("sg_ours", [str(PY), str(BENCH / "sg_ours.py"), str(moves), str(sg_ours_bin)])
        one("sg_reference", [str(refs["sg_reference"]), str(moves), str(sg_ref_bin)])
        one("solve", [str(SNIM), "solve"], stdin=classic, stdout=solve_ours_txt)
        one("snim_reference", [str(refs["snim_reference"])], stdin=classic,
            stdout=solve_ref_txt)

    log("verifying outputs")
    base_verdicts = RES / f"run_{base.name}" / "verdicts.parquet"
    checks = {"plan": helper("same-nim-sums", str(base_verdicts), str(plan_out),
                             str(RES / f"floor_{base.name}.parquet"), str(base.positions))}
    for _, ds in MATRIX[1:]:
        checks[ds.name] = helper("same-verdicts", str(base_verdicts),
                                 str(RES / f"run_{ds.name}" / "verdicts.parquet"),
                                 str(RES / f"floor_{ds.name}.parquet"))
    if before is not None:
        for _, ds in MATRIX:
            checks[f"before_{ds.name}"] = helper(
                "same-verdicts", str(base_verdicts),
                str(RES / f"before_{ds.name}" / "verdicts.parquet"),
                str(RES / f"floor_{ds.name}.parquet"))
    ours_sum = runs["sg_ours"][-1].values.get("checksum")
    ref_sum = runs["sg_reference"][-1].values.get("checksum")
    if ours_sum is None or ours_sum != ref_sum:
        raise BenchError(f"SG tables differ: checksum {ours_sum} (ours) vs {ref_sum} (C)")
    checks["sg"] = (f"checksum {ours_sum} both; tables "
                    + helper("same-bytes", str(sg_ours_bin), str(sg_ref_bin)))
    checks["solve"] = "output " + helper("same-bytes", str(solve_ours_txt), str(solve_ref_txt))
    spark_checks = spark_verified(base, base_verdicts) if extra_rows else {}
    log("all outputs verified")
    s3_section = bench_s3(s3_positions, cwd) if extra_rows else []

    r = {k: best(v) for k, v in runs.items()}
    lines = ["# snim-batch benchmarks", "", *env,
             f"- runs per program: {repeat} (best wall time; highest peak RSS)",
             f"- peak RSS floor: {mib(floor)} MiB (a child's ru_maxrss is at least the driver's "
             "RSS when spawned; values at the floor are shown as `≤`)",
             "",
             "Ratios are ours / reference: above 1 means ours takes longer or uses more memory. "
             "The machine is shared and noisy; the two sides of each ratio were measured back "
             "to back in this one run, so compare ratios, not absolute seconds.",
             "",
             "## The data users have: `run` against its I/O floor", "",
             f"Goals: wall ≤ {FLOOR_GOAL}× the floor and peak RSS ≤ 2 GiB on every shape; long "
             f"form ≤ {LONG_GOAL}× the wide run of the same positions.", "",
             "| shape | data | run wall (s) | floor wall (s) | **wall ratio** | goal | "
             "run in-process (s) | floor in-process (s) | run RSS (MiB) | floor RSS (MiB) | "
             "RSS goal | run phases (s) |",
             "|---|---|--:|--:|--:|---|--:|--:|--:|--:|---|---|"]
    for label, ds in MATRIX:
        run, fl = r[f"run_{ds.name}"], r[f"floor_{ds.name}"]
        lines.append(
            f"| {label} | `{ds.name}`: {ds.describe()} | {secs(run.wall_s)} | "
            f"{secs(fl.wall_s)} | {ratio(run.wall_s, fl.wall_s)} | "
            f"{goal(run.wall_s / fl.wall_s, FLOOR_GOAL)} | {secs(run.num('job_s'))} | "
            f"{secs(fl.num('job_s'))} | {mib(run.maxrss, floor)} | {mib(fl.maxrss, floor)} | "
            f"{goal(run.maxrss, MATRIX_RSS_GOAL)} | {run.values.get('phases', '?')} |")
    long_run, wide_run = r["run_m_long"], r[f"run_{base.name}"]
    lines += [
        "",
        f"Long form against the wide run of the same positions: {secs(long_run.wall_s)} / "
        f"{secs(wide_run.wall_s)} s = {ratio(long_run.wall_s, wide_run.wall_s)} "
        f"({goal(long_run.wall_s / wide_run.wall_s, LONG_GOAL)}; goal ≤ {LONG_GOAL}×).",
        "",
        "`run` is `snim-batch run --rules R --positions DIR --out OUT --overwrite --quiet "
        "--no-winning-moves` (the floor writes no move columns either). The floor "
        "(`benchmarks/floor.py`) is a polars streaming plan that reads the same three columns "
        "and writes the same four (rule_set_id, position_id, nim_sum, verdict), with the sum "
        "of the heaps in place of the nim-sum: `scan_parquet`/`scan_csv` (CSV heaps split and "
        "cast), long form through a streamed `group_by(rule_set_id, position_id)`. Datasets: "
        "`snim-batch generate " + " ".join(GEN_COMMON) + " --seed 1` with the shape's "
        "`--key-type`, `--shuffle`, `--files`, `--form` and `--format`; every shape holds the "
        "same positions.",
        "", *before_after(r, before),
        "## References", "",
        "| # | ours | reference | wall ours (s) | wall ref (s) | **wall ratio** | "
        "in-process ours (s) | in-process ref (s) | **in-process ratio** | "
        "peak RSS ours (MiB) | peak RSS ref (MiB) | **RSS ratio** |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    sg_ours, sg_ref = r["sg_ours"], r["sg_reference"]
    rows = [
        ("2", "`snim-batch run` (integer ids)",
         "straightforward polars plan (explode, join, XOR group_by)", wide_run,
         r["polars_plan"], wide_run.num("job_s"), r["polars_plan"].num("job_s")),
        ("3", "`grundy.build_table` ×1000 (one core)", "C textbook SG (`gcc -O2`)", sg_ours,
         sg_ref, sg_ours.num("build_s"), sg_ref.num("build_s")),
        ("3b", f"`grundy.build_tables` (all {sg_ours.values.get('threads', '?')} cores, as "
         "`run` and `solve` build)", "the same C run", None, sg_ref,
         sg_ours.num("parallel_s"), sg_ref.num("build_s")),
        ("4", "`snim-batch solve`", "C textbook solver (`gcc -O2`)", r["solve"],
         r["snim_reference"], None, r["snim_reference"].num("solve_s")),
    ]
    for n, ours, ref, po, pr, io, ir in rows:
        wall, rss = (po.wall_s, po.maxrss) if po else (None, None)  # 3b: in-process only
        lines.append(f"| {n} | {ours} | {ref} | {secs(wall)} | {secs(pr.wall_s)} | "
                     f"{ratio(wall, pr.wall_s)} | {secs(io)} | {secs(ir)} | "
                     f"{ratio(io, ir)} | {mib(rss, floor)} | {mib(pr.maxrss, floor)} | "
                     f"{ratio(rss, pr.maxrss)} |")
    classic_mb = classic.stat().st_size / 1e6
    lines += [
        "", "Workloads:", "",
        f"- 2: `{base.name}` as above; the plan builds a lookup frame (rule_set_id, heap, sg) "
        f"for heaps 0..{MAX_HEAP:,} (tables {secs(r['polars_plan'].num('tables_s'))} s, plan "
        f"{secs(r['polars_plan'].num('plan_s'))} s).",
        f"- 3: {SG_RULES:,} rule sets × {SG_MOVES} distinct moves from 1..{SG_MAX_MOVE:,}, "
        f"SG(0..{SG_VALUES - 1:,}); ours is `build_table(rule, need_len={SG_VALUES}, "
        f"cap={SG_VALUES})` (no period probe; it stops early when it proves a period: "
        f"{sg_ours.values.get('periodic', '?')} of {SG_RULES} did). 3b is the same process "
        "building the same tables with `build_tables` (checked equal), so it has no wall time "
        "of its own; the C reference is single-threaded. In-process: the table-building loop "
        f"only (ours after a warm-up call of {secs(sg_ours.num('warmup_s'))} s).",
        f"- 4: a {classic_mb:.0f} MB classic-format input (`{classic.name}`; up to 100 moves "
        "≤ 10^4 per test case, 1..10 heaps ≤ 10^4 per position); C in-process = parse + "
        "tables + answers, after reading stdin.",
        "",
        f"Startup of ours (interpreter + `import pipeline.cli, pipeline.classic, "
        f"pipeline.grundy`, i.e. numpy and the compiled kernels): "
        f"{secs(r['startup'].wall_s)} s wall, "
        f"{mib(r['startup'].maxrss, floor)} MiB peak RSS; every `ours` process pays it, the C "
        "references do not.",
        "",
        *bench_start(before, repeat=repeat),
        *s3_section,
        *(spark_section(r, base, spark_checks, floor) if extra_rows else []),
        "## Checks", "",
        f"- `{base.name}`: {checks['plan']} (`run`, the polars plan and the floor)",
        *[f"- `{ds.name}`: {checks[ds.name]}" for _, ds in MATRIX[1:]],
        f"- 3: {checks['sg']}",
        f"- 4: {checks['solve']}",
        "",
        "## Processes", "",
        "| process | command | wall (s) | peak RSS (MiB) |",
        "|---|---|--:|--:|",
    ]
    for key, p in r.items():
        lines.append(f"| {key} | `{_short(p.argv)}` | {secs(p.wall_s)} | "
                     f"{mib(p.maxrss, floor)} |")
    lines += ["", f"Load average at the end: "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", ""]
    text = "\n".join(lines)
    RESULTS.write_text(text)
    print(text)
    log(f"wrote {RESULTS.relative_to(ROOT)}")


# --------------------------------------------------------------------------- Spark rows


def spark_runs(one, ds: Dataset, data: Path, before: Path | None = None) -> None:
    """The Spark engine (no Spark settings: the session's defaults) and the hand-rolled Spark
    SQL plan on `ds`, in the same round as the polars engine's run of the same data; with
    `before`, also that checkout's Spark engine."""
    out = RES / f"spark_{ds.name}"
    one("spark_engine", run_argv(ds, data, out, "--no-winning-moves", "--engine", "spark",
                                 "--spark-master", SPARK_MASTER), out=out, cwd=RES / "cwd")
    if before is not None:
        old = RES / f"spark_before_{ds.name}"
        one("spark_before", run_argv(ds, data, old, "--no-winning-moves", "--engine", "spark",
                                     "--spark-master", SPARK_MASTER),
            out=old, cwd=RES / "cwd", code=before)
    one("spark_start", [str(PY), str(BENCH / "spark_start.py"), SPARK_MASTER], cwd=RES / "cwd")
    one("spark_floor", [str(PY), str(BENCH / "spark_floor.py"),
                        str(data / "positions" / "*.parquet"), str(RES / "spark_floor_out"),
                        SPARK_MASTER])
    one("spark_plan", [str(PY), str(BENCH / "spark_plan.py"), str(data / "rules.parquet"),
                       str(data / "positions" / "*.parquet"), str(RES / "spark_plan_out"),
                       str(MAX_HEAP), SPARK_MASTER])


def spark_verified(ds: Dataset, polars_verdicts: Path) -> dict[str, str]:
    """Both Spark outputs against the polars engine's verdicts, position by position."""
    engine = RES / f"spark_{ds.name}" / "verdicts.parquet" / "part-*.parquet"
    plan = RES / "spark_plan_out" / "part-*.parquet"
    return {name: helper("same-nim-sums", str(polars_verdicts), str(path), str(polars_verdicts),
                         str(ds.positions))
            for name, path in (("engine", engine), ("plan", plan))}


def spark_section(r: dict[str, Proc], ds: Dataset, checks: dict[str, str],
                  floor: int) -> list[str]:
    polars_run, engine, plan = r[f"run_{ds.name}"], r["spark_engine"], r["spark_plan"]
    start, floor_run = r["spark_start"], r["spark_floor"]
    vs_floor, vs_plan = engine.wall_s / floor_run.wall_s, plan.wall_s / engine.wall_s
    return [
        f"## Spark on `{SPARK_MASTER}` (`{ds.name}`)", "",
        "| run | wall (s) | in-process (s) | peak RSS of the Python driver (MiB) | phases (s) |",
        "|---|--:|--:|--:|---|",
        *[f"| {label} | {secs(p.wall_s)} | {secs(p.num('job_s'))} | {mib(p.maxrss, floor)} | "
          f"{p.values.get('phases', '—')} |"
          for label, p in (("`snim-batch run` (polars engine)", polars_run),
                           ("`snim-batch run --engine spark`", engine),
                           ("Spark-native floor: read, sum, sort, write (`spark_floor.py`)",
                            floor_run),
                           ("hand-rolled Spark SQL plan (`spark_plan.py`)", plan),
                           ("Spark alone: session start and one trivial job "
                            "(`spark_start.py`)", start))],
        "",
        f"Spark's own fixed cost (process start, imports, JVM, session, a first job): "
        f"{secs(start.wall_s)} s = {ratio(start.wall_s, polars_run.wall_s)} the polars "
        f"engine's whole run, before any data moves; the engine's time beyond it: "
        f"{secs(engine.wall_s - start.wall_s)} s "
        f"({ratio(engine.wall_s - start.wall_s, polars_run.wall_s)} the polars engine).",
        "",
        f"Spark engine / Spark-native floor: **{vs_floor:.2f}×** "
        f"({goal(vs_floor, SPARK_FLOOR_GOAL)}; goal ≤ {SPARK_FLOOR_GOAL}×); "
        f"Spark engine / polars engine: {ratio(engine.wall_s, polars_run.wall_s)} (Spark's "
        "own cost on two cores, not a goal). "
        f"Hand-rolled plan / Spark engine: **{vs_plan:.2f}×** "
        f"({'met' if vs_plan >= SPARK_PLAN_GOAL else '**not met**'}; goal ≥ "
        f"{SPARK_PLAN_GOAL}×). The Spark engine runs with no Spark settings; the plan gets "
        "the same driver heap. Peak RSS is the Python driver's only (the JVM is not its "
        "reaped child). Checks against the polars engine's verdicts: engine "
        f"{checks['engine']}; plan {checks['plan']}.", ""]


def spark_before(r: dict[str, Proc], before: Path | None) -> list[str]:
    """The before checkout's Spark engine against this one's, and both against the floor."""
    if before is None:
        return []
    old, new, floor_run = r["spark_before"], r["spark_engine"], r["spark_floor"]
    return [f"### Before and after: `--before {before}` (commit "
            f"{_git('rev-parse', '--short', 'HEAD', cwd=before)})", "",
            "| Spark engine | wall (s) | phases (s) | / floor |", "|---|--:|---|--:|",
            *[f"| {label} | {secs(p.wall_s)} | {p.values.get('phases', '—')} | "
              f"{ratio(p.wall_s, floor_run.wall_s)} |"
              for label, p in (("before", old), ("after", new))], "",
            f"After / before: {ratio(new.wall_s, old.wall_s)}.", ""]


def bench_spark(repeat: int, before: Path | None = None) -> None:
    """`bench.py --spark`: only the Spark rows (and the polars run they compare with)."""
    env = environment()
    ds = MATRIX[0][1]
    data = ensure_dataset(ds)
    RES.mkdir(parents=True, exist_ok=True)
    (RES / "cwd").mkdir(exist_ok=True)
    floor = rss_floor()
    warm_up()
    runs: dict[str, list[Proc]] = {}

    def one(key: str, *args, out: Path | None = None, **kwargs) -> None:
        proc = measure(key, *args, **kwargs)
        if out is not None:
            total, proc.values["phases"] = manifest_total(out)
            if total is not None:
                proc.values["job_s"] = str(total)
        runs.setdefault(key, []).append(proc)

    for _ in range(repeat):
        out = RES / f"run_{ds.name}"
        one(f"run_{ds.name}", run_argv(ds, data, out, "--no-winning-moves"), out=out,
            cwd=RES / "cwd")
        spark_runs(one, ds, data, before)
    checks = spark_verified(ds, RES / f"run_{ds.name}" / "verdicts.parquet")
    r = {k: best(v) for k, v in runs.items()}
    text = "\n".join(["# snim-batch benchmarks: Spark rows", "", *env, "",
                      *spark_section(r, ds, checks, floor), *spark_before(r, before)])
    (RES / "SPARK.md").write_text(text)
    print(text)
    log(f"wrote {(RES / 'SPARK.md').relative_to(ROOT)}")


# --------------------------------------------------------------------------- Spark scale-out

SCALING_CORES = (1, 2)
SCALING_EXECUTOR_MEMORY = "4g"


def _spark_servers():
    """tests/spark_servers.py: the real Master and Worker the tests start (spark-class)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import spark_servers

    return spark_servers


def bench_spark_scaling(repeat: int) -> None:
    """`bench.py --spark-scaling`: the Spark engine on a standalone cluster (a Master and a
    Worker of 2 cores on 127.0.0.1), its application given 1 and then 2 executor cores
    (`spark.cores.max`), against the Spark-native floor given the same cores: how the time
    divides across executors. Writes results/SPARK_SCALING.md."""
    env = environment()
    ds = MATRIX[0][1]
    data = ensure_dataset(ds)
    RES.mkdir(parents=True, exist_ok=True)
    servers = _spark_servers()
    where = RES / "standalone"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    cluster = servers.StandaloneCluster(where, cores=max(SCALING_CORES), memory="8g").start()
    runs: dict[str, list[Proc]] = {}
    try:
        for _ in range(repeat):
            for cores in SCALING_CORES:
                cwd = where / f"cores{cores}"
                cwd.mkdir(exist_ok=True)
                conf = {"spark.cores.max": str(cores), "spark.executor.cores": str(cores),
                        "spark.executor.memory": SCALING_EXECUTOR_MEMORY}
                (cwd / "config.yaml").write_text(
                    "spark:\n  conf:\n" + "".join(f"    {k}: \"{v}\"\n"
                                                   for k, v in conf.items()))
                out = RES / f"spark_cluster_{cores}"
                proc = measure(f"spark_cluster_{cores}", run_argv(
                    ds, data, out, "--no-winning-moves", "--engine", "spark", "--config",
                    str(cwd / "config.yaml"), "--spark-master", cluster.url),
                    cwd=cwd, env=servers.spark_env())
                total, proc.values["phases"] = manifest_total(out)
                runs.setdefault(f"engine_{cores}", []).append(proc)
                floor_conf = [f"--conf={k}={v}" for k, v in conf.items()]
                runs.setdefault(f"floor_{cores}", []).append(measure(
                    f"spark_cluster_floor_{cores}",
                    [str(PY), str(BENCH / "spark_floor.py"), str(data / "positions" /
                     "*.parquet"), str(RES / f"spark_cluster_floor_{cores}"), cluster.url,
                     *floor_conf], cwd=cwd, env=servers.spark_env()))
    finally:
        cluster.stop()
    r = {k: best(v) for k, v in runs.items()}
    lines = ["# snim-batch benchmarks: the Spark engine on a standalone cluster", "", *env, "",
             f"`{ds.name}` (10M wide positions), a Master and one Worker of "
             f"{max(SCALING_CORES)} cores on 127.0.0.1; the application's executor cores set "
             f"by `spark.cores.max` and `spark.executor.cores` (executor memory "
             f"{SCALING_EXECUTOR_MEMORY}). The driver runs on the same machine.", "",
             "| executor cores | engine wall (s) | engine phases (s) | floor wall (s) | "
             "engine / floor |", "|--:|--:|---|--:|--:|"]
    for cores in SCALING_CORES:
        engine, fl = r[f"engine_{cores}"], r[f"floor_{cores}"]
        lines.append(f"| {cores} | {secs(engine.wall_s)} | "
                     f"{engine.values.get('phases', '—')} | {secs(fl.wall_s)} | "
                     f"{ratio(engine.wall_s, fl.wall_s)} |")
    one_core, two = r[f"engine_{SCALING_CORES[0]}"], r[f"engine_{SCALING_CORES[-1]}"]
    lines += ["", f"Engine, {SCALING_CORES[0]} core against {SCALING_CORES[-1]}: "
              f"{ratio(one_core.wall_s, two.wall_s)} (2.00× would be perfect scaling).", ""]
    text = "\n".join(lines)
    (RES / "SPARK_SCALING.md").write_text(text)
    print(text)
    log(f"wrote {(RES / 'SPARK_SCALING.md').relative_to(ROOT)}")


# --------------------------------------------------------------------------- make bench-large


def bench_large() -> None:
    """The 200M-heap job in every large shape, each with the code's default options (its
    working directory has no config.yaml, so winning moves are off), against the 4 GiB peak
    RSS goal; every shape's verdicts checked against the first."""
    env = environment()
    RES.mkdir(parents=True, exist_ok=True)
    cwd = RES / "cwd"
    cwd.mkdir(exist_ok=True)
    floor = rss_floor()
    rows = []
    for ds in LARGE:
        data = ensure_dataset(ds)
        out = RES / f"run_{ds.name}"
        p = measure(f"run_{ds.name}", run_argv(ds, data, out), cwd=cwd)
        total, phases = manifest_total(out)
        rows.append(
            f"| `{ds.name}`: {ds.describe()} × {HEAPS} heaps, seed {ds.seed} | "
            f"{secs(p.wall_s)} | {secs(total)} | {ds.positions * HEAPS / p.wall_s / 1e6:.1f} M | "
            f"{mib(p.maxrss, floor)} | {goal(p.maxrss, LARGE_RSS_GOAL)} |")
        rows.append(f"| phases (s): {phases} | | | | | |")
    first = RES / f"run_{LARGE[0].name}" / "verdicts.parquet"
    same = [f"`{ds.name}`: " + helper("same-verdicts", str(first),
                                      str(RES / f"run_{ds.name}" / "verdicts.parquet"))
            for ds in LARGE[1:]]
    lines = [
        "", "## Large: 200M heaps (`make bench-large`)", "", *env,
        f"- peak RSS floor: {mib(floor)} MiB", "",
        "| dataset | wall (s) | in-process (s) | heaps/s (wall) | peak RSS (MiB) | "
        "goal ≤ 4 GiB |",
        "|---|--:|--:|--:|--:|---|",
        *rows,
        "",
        "Command: `snim-batch run --rules DATA/rules.FORMAT --positions DATA/positions --out OUT "
        "--overwrite --quiet` (the code's defaults: winning moves off). Long form holds more "
        "than 2^22 rows in position order, so it is grouped as it streams "
        "(docs/performance.md).",
        f"Checks against `{LARGE[0].name}`: " + "; ".join(same) + ".",
        "",
    ]
    text = "\n".join(lines)
    append_results(text)


# --------------------------------------------------------------------------- memory (issue 37)


MEMORY_SIZES = (10_000_000, 40_000_000, 100_000_000)
MEMORY_FILES = 8


def ensure_hex_dataset(positions: int) -> Path:
    """Issue 37's shape (helpers.py hex-positions): text rule ids, 32-character hex position
    ids in random order, 1..9 heaps, 8 Parquet files; reused when complete."""
    target = DATA / f"i37_{positions // 1_000_000}m"
    found = sorted((target / "positions").glob("part-*.parquet"))
    if len(found) == MEMORY_FILES and int(helper("rows", str(target))) == positions:
        log(f"reusing {target.relative_to(ROOT)}")
        return target
    shutil.rmtree(target, ignore_errors=True)
    log(f"generating {target.relative_to(ROOT)}")
    helper("hex-positions", str(target), "--positions", str(positions), "--files",
           str(MEMORY_FILES), "--seed", "37")
    return target


def bench_memory(sizes: list[int], before: Path | None) -> None:
    """`run` (default options but --no-winning-moves, so the memory setting is auto) against
    its floor on issue 37's shape at each size, back to back (and with CHECKOUT's pipeline
    when --before is given): wall, peak RSS, run / floor; the verdicts' rows checked."""
    env = environment()
    floor_rss = rss_floor()
    rows = []
    for n in sizes:
        data = ensure_hex_dataset(n)
        label = f"{n // 1_000_000}M"
        ds = Dataset(data.name, n, 37, key_type="string")
        floor = measure(f"floor_{data.name}", floor_argv(ds, data, RES / f"floor_{data.name}"
                                                         ".parquet"))
        runs = [("after", None)] + ([("before", before)] if before else [])
        for which, code in runs:
            out = RES / f"run_{data.name}_{which}"
            p = measure(f"run_{data.name}_{which}",
                        run_argv(ds, data, out, "--no-winning-moves"), code=code)
            counted = helper("rows-of", str(out / "verdicts.parquet"))
            rows.append(f"| {label} | {which} | {secs(p.wall_s)} | {secs(floor.wall_s)} | "
                        f"{ratio(p.wall_s, floor.wall_s)} | {p.maxrss / GIB:.2f} | "
                        f"{floor.maxrss / GIB:.2f} | {counted} |")
            shutil.rmtree(out, ignore_errors=True)
        (RES / f"floor_{data.name}.parquet").unlink(missing_ok=True)
    text = "\n".join([
        "", "## Memory: issue 37's shape (`bench.py --memory`)", "", *env,
        f"- peak RSS floor: {mib(floor_rss)} MiB", "",
        "| positions | code | run (s) | floor (s) | run / floor | peak RSS run (GiB) | "
        "peak RSS floor (GiB) | verdicts |",
        "|---|---|--:|--:|--:|--:|--:|--:|", *rows, "",
        "Goals: peak RSS <= 4 GiB at 100M and not growing with the input, run <= 1.5x the "
        "floor at 100M.", ""])
    append_results(text)


def append_results(text: str) -> None:
    """Append a section to RESULTS.md (started when missing) and show it."""
    if not RESULTS.exists():
        RESULTS.write_text("# snim-batch benchmarks\n")
    with open(RESULTS, "a") as f:
        f.write(text)
    print(text)
    log(f"appended to {RESULTS.relative_to(ROOT)}")


# --------------------------------------------------------------------------- start (issue 36)


START_M = 1_000_000
START_GOAL, SAMPLE_GOAL, HELP_GOAL = 1.5, 2.0, 0.3
# (label, dataset, extra run options): every shape a first run used to compile kernels for
START_SHAPES = [
    ("wide Parquet, integer ids", Dataset("s_int", START_M, 5, files=1), []),
    ("wide Parquet, integer ids, winning moves", Dataset("s_int", START_M, 5, files=1),
     ["--winning-moves"]),
    ("wide Parquet, Int16/UInt32 ids, UInt16 heaps", Dataset("s_narrow", START_M, 5, files=1),
     []),
    ("wide Parquet, text rule ids", Dataset("s_string", START_M, 5, key_type="string",
                                            files=1), []),
    ("wide CSV, text ids", Dataset("s_csv", START_M, 5, fmt="csv", key_type="string",
                                   files=1), []),
    ("long Parquet, integer ids", Dataset("s_long", START_M, 5, form="long", files=1), []),
    ("long CSV, UUIDs shuffled, winning moves", Dataset("s_long_uuid", START_M, 5, form="long",
                                                        fmt="csv", key_type="uuid",
                                                        shuffle=True, files=1),
     ["--winning-moves"]),
]
ENTRY = ("import sys\ntry:\n    from pipeline.executable import entry\nexcept ImportError:\n"
         "    try:\n        from pipeline.terminal import entry\n    except ImportError:\n"
         "        from pipeline.cli import main as entry\nsys.exit(entry())")
# An older checkout's `run`, started through its own console entry (ENTRY), as the venv's
# script starts this one's.
OLD_LAUNCHER = [str(PY), "-c", ENTRY]


def ensure_start_dataset(ds: Dataset) -> Path:
    if ds.name != "s_narrow":
        return ensure_dataset(ds)
    target = DATA / ds.name
    if not target.exists():
        source = ensure_dataset(Dataset("s_int", ds.positions, ds.seed, files=1))
        log(f"writing {target.relative_to(ROOT)} (narrow integer types)")
        helper("narrow", str(source), str(target))
    return target


def _launcher(code: Path | None) -> tuple[list[str], dict[str, str]]:
    """How to start `snim-batch` with this checkout's pipeline (None: the one installed
    here), and the environment for it: an older checkout runs in its own .venv when it has
    one (its dependencies, numba included), else in this one."""
    if code is None:
        return [str(SNIM)], {}
    python = code / ".venv" / "bin" / "python"
    return [str(python if python.exists() else PY), "-c", ENTRY], {"PYTHONPATH": str(code)}


def _cold_warm(name: str, argv: list[str], env: dict[str, str], scratch: Path,
               stdin: Path | None = None) -> tuple[Proc, Proc]:
    """The command's first run in a fresh HOME (what a fresh container starts with; an empty
    numba cache too, for a `--before` checkout that still used numba), then its second run
    with the same."""
    home = scratch / f"home-{name}"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    fresh = {**env, "HOME": str(home), "NUMBA_CACHE_DIR": str(home / "numba-cache")}
    cold = measure(f"{name}_cold", argv, env=fresh, stdin=stdin, cwd=scratch)
    warm = measure(f"{name}_warm", argv, env=fresh, stdin=stdin, cwd=scratch)
    return cold, warm


def _best_pair(name: str, argv: list[str], env: dict[str, str], scratch: Path,
               stdin: Path | None, repeat: int) -> tuple[Proc, Proc]:
    """_cold_warm `repeat` times (a fresh HOME and cache each time): the best of each."""
    pairs = [_cold_warm(f"{name}_{i}" if repeat > 1 else name, argv, env, scratch, stdin)
             for i in range(repeat)]
    return best([c for c, _ in pairs]), best([w for _, w in pairs])


def bench_start(before: Path | None, positions: int = START_M, repeat: int = 1) -> list[str]:
    """Rows of issue 36: each shape's first run (cold) against its second (warm), the warm
    sample run against `python -c "import polars, pyarrow"`, and `--help`; with `before`,
    the same for that checkout, each command's two versions back to back."""
    scratch = RES / "start"
    scratch.mkdir(parents=True, exist_ok=True)
    shapes = [(label, Dataset(ds.name, positions, ds.seed, ds.form, ds.fmt, ds.key_type,
                              ds.shuffle, ds.files), extra)
              for label, ds, extra in START_SHAPES]
    data = {ds.name: ensure_start_dataset(ds) for _, ds, _ in shapes}
    versions = [("after", None)] + ([("before", before)] if before else [])
    sample = ROOT / "data" / "sample"
    classic = sample / "classic.txt"
    rows: dict[str, dict[str, tuple[Proc, Proc]]] = {}
    commands: list[tuple[str, str, list[str], Path | None]] = []
    for n, (label, ds, extra) in enumerate(shapes):
        commands.append((f"s{n}", label, ["run", "--rules", str(data[ds.name] /
                                                                 f"rules.{ds.fmt}"),
                                          "--positions", str(data[ds.name] / "positions"),
                                          "--out", str(scratch / f"out{n}"), "--overwrite",
                                          "--quiet", "--no-winning-moves", *extra], None))
    commands.append(("solve", "solve (bundled classic sample)", ["solve"], classic))
    commands.append(("grundy", "grundy --moves '2 5 7' --upto 1000",
                     ["grundy", "--moves", "2 5 7", "--upto", "1000"], None))
    commands.append(("sample", "run, bundled sample", [
        "run", "--rules", str(sample / "rules.parquet"), "--positions",
        str(sample / "positions.parquet"), "--out", str(scratch / "sample_out"), "--overwrite",
        "--winning-moves", "--quiet"], None))
    for key, _, args, stdin in commands:
        for version, code in versions:
            launcher, env = _launcher(code)
            rows.setdefault(key, {})[version] = _best_pair(
                f"start_{key}_{version}", launcher + args, env, scratch, stdin, repeat)
    imports, helps, versions_shown = {}, {}, {}
    for version, code in versions:
        launcher, env = _launcher(code)
        python = launcher[0] if code is not None else str(PY)
        imports[version] = best([measure(f"start_imports_{version}_{i}",
                                         [python, "-c", "import polars, pyarrow"], env=env)
                                 for i in range(max(3, repeat))])
        helps[version] = best([measure(f"start_help_{version}_{i}", launcher + ["--help"],
                                       env=env) for i in range(max(3, repeat))])
        if version == "after":  # an older checkout may have no --version
            versions_shown[version] = best([
                measure(f"start_version_{version}_{i}", launcher + ["--version"], env=env)
                for i in range(max(3, repeat))])
    head = "| command | after: cold (s) | warm (s) | cold/warm |"
    rule = "|---|--:|--:|--:|"
    if before:
        head += " before: cold (s) | warm (s) | cold/warm | cold after/before |"
        rule += "--:|--:|--:|--:|"
    lines = ["## Start: first run against second (issue 36)", "",
             f"Each command run twice in a row, the first time in a fresh `HOME` (what a fresh "
             f"container starts with; an empty numba cache too, for a checkout that used "
             f"numba); shapes of {positions:,} positions (seed 5); best of {repeat} of each. "
             f"Goal: cold/warm <= {START_GOAL}x.", "", head, rule]
    for key, label, _, _ in commands:
        cold, warm = rows[key]["after"]
        line = (f"| {label} | {secs(cold.wall_s)} | {secs(warm.wall_s)} | "
                f"{ratio(cold.wall_s, warm.wall_s)} |")
        if before:
            bcold, bwarm = rows[key]["before"]
            line += (f" {secs(bcold.wall_s)} | {secs(bwarm.wall_s)} | "
                     f"{ratio(bcold.wall_s, bwarm.wall_s)} | {ratio(cold.wall_s, bcold.wall_s)} |")
        lines.append(line)
    lines += ["", "| start | after (s) | " + ("before (s) | after/before |" if before else ""),
              "|---|--:|" + ("--:|--:|" if before else "")]

    def both(label: str, after: float, prior: float | None) -> str:
        tail = f" {secs(prior)} | {ratio(after, prior)} |" if before else ""
        return f"| {label} | {secs(after)} |{tail}"

    sample_after = rows["sample"]["after"][1].wall_s
    sample_before = rows["sample"]["before"][1].wall_s if before else None
    lines += [
        both("`python -c \"import polars, pyarrow\"` (best of 3)", imports["after"].wall_s,
             imports["before"].wall_s if before else None),
        both("`run` on the bundled sample, warm", sample_after, sample_before),
        both("`--help` (best of 3)", helps["after"].wall_s,
             helps["before"].wall_s if before else None),
        both("`--version` (best of 3)", versions_shown["after"].wall_s, None),
        "",
        f"Warm sample run / imports: after {ratio(sample_after, imports['after'].wall_s)}"
        + (f", before {ratio(sample_before, imports['before'].wall_s)}" if before else "")
        + f" (goal <= {SAMPLE_GOAL}x); `--help` and `--version` goal <= {HELP_GOAL} s.", ""]
    return lines


# --------------------------------------------------------------------------- object store


S3_GOAL = 1.5
S3_BUCKET = "bench"


def s3_dataset(positions: int) -> Dataset:
    """The integer-id shape of the matrix (`m_int` at 10M positions)."""
    base = MATRIX[0][1]
    return base if positions == base.positions else Dataset(f"s3_{positions}", positions, 1,
                                                            files=1)


def _cpu_seconds(pid: int) -> float:
    """User + system time so far of a running process (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# Many small objects: each file costs round trips of its own, whatever its size.
S3_MANY = [Dataset("s3_many_parquet", 2_000_000, 1, files=400),
           Dataset("s3_many_csv", 2_000_000, 1, fmt="csv", key_type="string", files=400)]


def bench_s3(positions: int, cwd: Path) -> list[str]:
    """`run` reading from and writing to a local S3 server (moto, as in the tests) against the
    same run on local disk, back to back, for the 10M-position file and for many small
    objects; each S3 output's verdicts checked against the local ones. Returns the
    RESULTS.md section."""
    sys.path.insert(0, str(ROOT / "tests"))
    from s3_server import MotoServer

    url = f"s3://{S3_BUCKET}"
    rows, checks = [], []
    server = MotoServer().start()
    try:
        env = server.env()
        for ds in [s3_dataset(positions), *S3_MANY]:
            data = ensure_dataset(ds)
            log(f"uploading {data.relative_to(ROOT)} to {url}/{ds.name} on {server.endpoint}")
            helper("upload", str(data), f"{url}/{ds.name}", env=env)
            local_out = RES / f"s3row_local_{ds.name}"
            local = measure(f"s3row_local_{ds.name}",
                            run_argv(ds, data, local_out, "--no-winning-moves"), cwd=cwd)
            before = _cpu_seconds(server.proc.pid)
            remote = measure(f"s3row_s3_{ds.name}", [
                str(SNIM), "run", "--rules", f"{url}/{ds.name}/rules.{ds.fmt}", "--positions",
                f"{url}/{ds.name}/positions", "--out", f"{url}/out_{ds.name}", "--overwrite",
                "--quiet", "--no-winning-moves"], cwd=cwd, env=env)
            server_cpu = _cpu_seconds(server.proc.pid) - before
            fetched = RES / f"s3row_s3_{ds.name}_verdicts.parquet"
            helper("fetch-verdicts", f"{url}/out_{ds.name}", str(fetched), env=env)
            checks.append(f"`{ds.name}`: " + helper(
                "same-verdicts", str(local_out / "verdicts.parquet"), str(fetched)))
            wall = remote.wall_s / local.wall_s
            rows.append(
                f"| `{ds.name}`: {ds.describe()} | {secs(local.wall_s)} | {secs(local.cpu_s)} | "
                f"{secs(remote.wall_s)} | {secs(remote.cpu_s)} | {secs(server_cpu)} | "
                f"{ratio(remote.wall_s, local.wall_s)} | "
                f"{goal(wall, S3_GOAL) if ds not in S3_MANY else '-'} | "
                f"{mib(local.maxrss)} | {mib(remote.maxrss)} |")
    finally:
        server.stop()
    return [
        "", "## Object store: S3 in and out against local disk", "",
        f"Goal: wall ≤ {S3_GOAL}× the same run on local disk, for the 10M-position file. The "
        "rows of many small objects show what each object's round trips cost (no goal).", "",
        "| data | local wall (s) | local CPU (s) | S3 wall (s) | S3 CPU (s) | moto CPU (s) | "
        "**wall ratio** | goal | local RSS (MiB) | S3 RSS (MiB) |",
        "|---|--:|--:|--:|--:|--:|--:|---|--:|--:|",
        *rows,
        "",
        f"Both runs: `snim-batch run ... --overwrite --quiet --no-winning-moves`; S3 reads "
        f"`{url}/NAME/rules.*` and the prefix `{url}/NAME/positions` and commits "
        f"`{url}/out_NAME` (files under `RUN_ID/`, then `manifest.json`), on a moto server "
        "(`tests/s3_server.py`) on 127.0.0.1 of the same machine: its CPU time competes with "
        "the run's for the same cores, which a real object store's does not, and a request "
        "costs it about a millisecond, where a cloud store's round trip takes tens. "
        f"Checks: {'; '.join(checks)}.", ""]


def s3_only(positions: int) -> None:
    """Only the object-store row (`bench.py --s3`), appended to RESULTS.md."""
    RES.mkdir(parents=True, exist_ok=True)
    cwd = RES / "cwd"
    cwd.mkdir(exist_ok=True)
    warm_up()
    text = "\n".join(["", *environment(), *bench_s3(positions, cwd)])
    append_results(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--large", action="store_true",
                    help="run the 200M-heap job instead (make bench-large)")
    ap.add_argument("--prepare", action="store_true",
                    help="only generate the inputs (of --large, with it) and stop")
    ap.add_argument("--s3", action="store_true",
                    help="run only the object-store row (S3 in and out on a local moto "
                         "server against local disk)")
    ap.add_argument("--s3-positions", type=int, default=TEN_M, metavar="N",
                    help="positions of the object-store row (default 10M; smaller on a busy "
                         "machine)")
    ap.add_argument("--matrix", action="store_true",
                    help="only the matrix of shapes and the references (no Spark and no "
                         "object-store rows, which take many minutes)")
    ap.add_argument("--spark", action="store_true",
                    help="run only the Spark rows (results/SPARK.md)")
    ap.add_argument("--spark-scaling", action="store_true",
                    help="run only the standalone-cluster rows: the Spark engine and floor on "
                    "1 and 2 executor cores (results/SPARK_SCALING.md)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="measure every program N times (best wall time is reported)")
    ap.add_argument("--start", action="store_true",
                    help="only the start rows (issue 36): first run against second per shape, "
                    "the sample run against the imports, --help (results/START.md)")
    ap.add_argument("--start-positions", type=int, default=START_M, metavar="N",
                    help="positions of the start rows' shapes (default 1M)")
    ap.add_argument("--memory", action="store_true",
                    help="only the memory rows (issue 37): run against its floor on text ids "
                    "in random order at 10M, 40M and 100M positions (--memory-sizes)")
    ap.add_argument("--memory-sizes", default="10,40,100", metavar="M,M,...",
                    help="positions of the memory rows, in millions (default 10,40,100)")
    ap.add_argument("--before", type=Path, metavar="CHECKOUT",
                    help="also run the matrix with CHECKOUT's pipeline (an older commit), each "
                    "shape back to back with this one, for a before/after table")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    if not SNIM.exists():
        print(f"bench: {SNIM} not found: run from the project's venv (make bench)",
              file=sys.stderr)
        return 1
    try:
        if args.before is not None:
            compile_before(args.before)
        if args.prepare:
            prepare(args.large)
        elif args.s3:
            s3_only(args.s3_positions)
        elif args.start:
            text = "\n".join(["# snim-batch start", "", *environment(),
                              *bench_start(args.before, args.start_positions, args.repeat)])
            RES.mkdir(parents=True, exist_ok=True)
            (RES / "START.md").write_text(text)
            print(text)
        else:
            if args.large:
                bench_large()
            elif args.memory:
                bench_memory([int(m) * 1_000_000 for m in args.memory_sizes.split(",")],
                             args.before)
            elif args.spark:
                bench_spark(args.repeat, args.before)
            elif args.spark_scaling:
                bench_spark_scaling(args.repeat)
            else:
                bench(args.repeat, args.before, args.s3_positions, not args.matrix)
    except BenchError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
