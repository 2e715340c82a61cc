"""`generate`: the data shapes of the benchmarks, and the job's verdicts on each of them."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest
from conftest import invoke, naive_sg, read_outputs
from polars.testing import assert_frame_equal

from pipeline.generate import Spec, generate

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
SMALL = {"positions": 2_500, "rule_sets": 7, "max_heap": 60, "moves_per_set": 4,
         "heaps_per_position": 3, "seed": 11}


def _read(directory: Path, fmt: str = "parquet") -> tuple[pl.DataFrame, pl.DataFrame]:
    files = sorted((directory / "positions").glob(f"part-*.{fmt}"))
    if fmt == "parquet":
        return pl.read_parquet(directory / "rules.parquet"), pl.concat(
            [pl.read_parquet(f) for f in files])
    return pl.read_csv(directory / "rules.csv"), pl.concat(
        [pl.read_csv(f, infer_schema=False) for f in files])


def _by_number(positions: pl.DataFrame) -> pl.DataFrame:
    """(rule set number, heaps) per position, whatever the key type: rs00042 -> 42."""
    return positions.select(
        pl.col("rule_set_id").cast(pl.String).str.strip_prefix("rs").cast(pl.Int64)
        .alias("rule"), "heaps")


def test_every_key_type_draws_the_same_positions(tmp_path: Path) -> None:
    plain, text, uuids = (tmp_path / k for k in ("int", "string", "uuid"))
    for key_type, out in (("int", plain), ("string", text), ("uuid", uuids)):
        generate(out, Spec(**SMALL, key_type=key_type))
    rules_int, base = _read(plain)
    rules_text, as_text = _read(text)
    _, as_uuid = _read(uuids)
    assert base["position_id"].to_list() == list(range(SMALL["positions"]))
    assert as_text["position_id"].to_list() == list(range(SMALL["positions"]))
    assert rules_text["rule_set_id"].to_list() == [f"rs{i:05d}" for i in range(1, 8)]
    assert rules_text["moves"].to_list() == rules_int["moves"].to_list()
    assert_frame_equal(_by_number(as_text), _by_number(base))
    assert_frame_equal(_by_number(as_uuid), _by_number(base))
    ids = as_uuid["position_id"].to_list()
    assert all(UUID.match(i) for i in ids) and len(set(ids)) == len(ids)


def test_shuffled_files_hold_the_same_rows_in_another_order(tmp_path: Path) -> None:
    generate(tmp_path / "plain", Spec(**SMALL))
    generate(tmp_path / "mixed", Spec(**SMALL, shuffle=True, files=3))
    _, plain = _read(tmp_path / "plain")
    files = sorted((tmp_path / "mixed" / "positions").glob("*.parquet"))
    sizes = [pl.read_parquet(f).height for f in files]
    assert len(files) == 3 and sum(sizes) == SMALL["positions"] and max(sizes) - min(sizes) <= 1
    _, mixed = _read(tmp_path / "mixed")
    assert mixed["position_id"].to_list() != plain["position_id"].to_list()
    assert_frame_equal(mixed.sort("position_id"), plain)


def test_long_form_is_the_wide_form_one_heap_a_row(tmp_path: Path) -> None:
    generate(tmp_path / "wide", Spec(**SMALL, key_type="string"))
    generate(tmp_path / "long", Spec(**SMALL, key_type="string", form="long", format="csv",
                                     shuffle=True, files=4))
    _, wide = _read(tmp_path / "wide")
    _, long = _read(tmp_path / "long", "csv")
    assert long.height == SMALL["positions"] * SMALL["heaps_per_position"]
    exploded = wide.explode("heaps").select("rule_set_id", pl.col("position_id").cast(pl.String),
                                            pl.col("heaps").cast(pl.String).alias("heap"))
    assert_frame_equal(long.sort(pl.all()), exploded.sort(pl.all()))


def test_more_files_than_positions_leaves_empty_files(tmp_path: Path) -> None:
    written = generate(tmp_path, Spec(positions=2, files=3, seed=1))
    sizes = [pl.read_parquet(p).height for p in written[1:]]
    assert sorted(sizes) == [0, 1, 1]


@pytest.mark.parametrize("key_type,form,fmt", [("string", "wide", "parquet"),
                                               ("uuid", "wide", "csv"),
                                               ("uuid", "long", "parquet")])
def test_the_job_is_right_on_every_shape(tmp_path: Path, key_type: str, form: str,
                                         fmt: str) -> None:
    data = tmp_path / "data"
    code, err = invoke(["generate", "--out", data, "--positions", 3_000, "--rule-sets", 9,
                        "--max-heap", 40, "--moves-per-set", 5, "--heaps", 3, "--seed", 4,
                        "--key-type", key_type, "--shuffle", "--files", 3, "--form", form,
                        "--format", fmt], tmp_path)
    assert code == 0, err
    code, err = invoke(["run", "--rules", data / f"rules.{fmt}", "--positions",
                        data / "positions", "--out", tmp_path / "out"], tmp_path)
    assert code == 0, err
    rules = pl.read_parquet(data / "rules.parquet") if fmt == "parquet" else pl.read_csv(
        data / "rules.csv").with_columns(pl.col("moves").str.split(" ").cast(pl.List(pl.Int64)))
    sg = {r: naive_sg(m, 41) for r, m in rules.select("rule_set_id", "moves").iter_rows()}
    generate(tmp_path / "wide", Spec(3_000, 9, 40, 5, 0, 3, seed=4, key_type=key_type))
    _, wide = _read(tmp_path / "wide")
    expected = {(r, p): _xor(sg[r], h) for r, p, h in wide.iter_rows()}
    verdicts = read_outputs(tmp_path / "out")["verdicts"]
    assert verdicts.height == len(expected)
    got = {(r, p): n for r, p, n in verdicts.select("rule_set_id", "position_id",
                                                     "nim_sum").iter_rows()}
    assert got == expected
    keys = verdicts.select("rule_set_id", "position_id")
    assert_frame_equal(keys, keys.sort(pl.all()))


def _xor(values: list[int], heaps: list[int]) -> int:
    out = 0
    for h in heaps:
        out ^= values[h]
    return out


def test_a_directory_that_is_not_empty_is_refused_and_kept_as_it_was(tmp_path: Path) -> None:
    """A second dataset written over a first would leave the first's extra files beside it,
    read by `run` as the second's: refused, exit 1, the first dataset untouched."""
    data = tmp_path / "data"
    generate(data, Spec(positions=50, files=5, seed=1))
    before = {p: p.read_bytes() for p in data.rglob("*") if p.is_file()}
    code, err = invoke(["generate", "--out", data, "--positions", 20, "--files", 2], tmp_path)
    assert code == 1, err
    assert (f"error: {data}: exists and is not an empty directory; generate writes a whole "
            "dataset into a new or empty one") in " ".join(err.split())
    assert {p: p.read_bytes() for p in data.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    (tmp_path / "rules.csv").write_text("rule_set_id,moves\n1,2 5\n")  # a file: said so
    code, err = invoke(["generate", "--out", tmp_path / "rules.csv", "--positions", 5],
                       tmp_path)
    assert code == 1, err
    assert (f"error: {tmp_path / 'rules.csv'}: is a file, not a directory; generate writes a "
            "whole dataset into a new or empty directory") in " ".join(err.split())
    assert (tmp_path / "rules.csv").read_text() == "rule_set_id,moves\n1,2 5\n"


@pytest.mark.parametrize("out", [".", "link", "new/deeper"])
def test_an_empty_directory_itself_a_link_to_one_or_a_new_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, out: str) -> None:
    """`--out .` in an empty directory, a link to an empty directory (the dataset lands in
    its target), or a path whose parents do not exist yet."""
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here" if out == "." else tmp_path)
    code, err = invoke(["generate", "--out", out, "--positions", 12, "--files", 2, "--seed",
                        3], Path.cwd())
    assert code == 0, err
    where = {".": tmp_path / "here", "link": tmp_path / "target",
             "new/deeper": tmp_path / "new" / "deeper"}[out]
    assert sorted(p.relative_to(where).as_posix() for p in where.rglob("*")) == [
        "positions", "positions/part-00000.parquet", "positions/part-00001.parquet",
        "rules.parquet"]
    assert pl.read_parquet(where / "positions").height == 12


@pytest.mark.parametrize("exists", [False, True])
@pytest.mark.parametrize(("error", "cause"), [
    (OSError(28, "No space left on device"), "no space left on device"),
    # polars' writer words a full disk in its own error (seen with a few KiB left)
    (pl.exceptions.ComputeError("parquet: File out of specification: underlying IO error: "
                                "No space left on device (os error 28)"),
     "no space left on device"),
])
def test_a_failed_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       exists: bool, error: Exception, cause: str) -> None:
    from pipeline import generate as module

    if exists:
        (tmp_path / "data").mkdir()

    real_write, calls = module._Part.write, set()

    def fail_on_the_third_file(part, frame):
        calls.add(part.path)
        if len(calls) == 2:  # the rules, and a positions file, are written
            raise error
        real_write(part, frame)

    monkeypatch.setattr(module._Part, "write", fail_on_the_third_file)
    code, err = invoke(["generate", "--out", tmp_path / "data", "--positions", 30, "--files",
                        3], tmp_path)
    assert code == 1, err
    assert f"cannot write the dataset ({cause})" in err
    assert "internal error" not in err
    assert [p.name for p in tmp_path.rglob("*")] == (["data"] if exists else [])


@pytest.mark.parametrize("form", ["wide", "long"])
def test_positions_of_no_heaps(tmp_path: Path, form: str) -> None:
    """--heaps 0: wide rows with an empty list (each an L: no move), long form no rows."""
    data = tmp_path / "data"
    code, err = invoke(["generate", "--out", data, "--positions", 6, "--heaps", 0, "--form",
                        form, "--shuffle"], tmp_path)
    assert code == 0, err
    positions = pl.read_parquet(data / "positions")
    if form == "long":
        assert positions.height == 0 and positions.columns == [
            "rule_set_id", "position_id", "heap"]
        return
    assert positions["heaps"].to_list() == [[]] * 6
    code, err = invoke(["run", "--rules", data / "rules.parquet", "--positions",
                        data / "positions", "--out", tmp_path / "out"], tmp_path)
    assert code == 0, err
    assert read_outputs(tmp_path / "out")["verdicts"]["verdict"].to_list() == ["L"] * 6


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--seed", "-1", "--seed must be in 0..2^63-2, got -1"),
    ("--max-heap", str(2**63), f"--max-heap must be at most 2^63-2 ({2**63 - 2}), got {2**63}"),
    ("--max-move", str(2**32), "--max-move must be at most 2^32-1 (4294967295), the largest "
                               "move a rule may have, got 4294967296"),
])
def test_values_out_of_range_are_usage_errors(tmp_path: Path, option: str, value: str,
                                              message: str) -> None:
    code, err = invoke(["generate", "--out", tmp_path / "data", option, value], tmp_path)
    assert code == 2, err
    assert f"error: {message}" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("max_move", [2**32 - 1, 0])
def test_the_largest_heaps_and_moves_allowed(tmp_path: Path, max_move: int) -> None:
    """Heaps up to 2^63-2; moves up to 2^32-1, the largest a run takes, also when they are
    drawn up to --max-heap (--max-move 0): every rule generated is one a run reads."""
    top = 2**63 - 2
    generate(tmp_path / "data", Spec(positions=40, rule_sets=3, max_heap=top, max_move=max_move,
                                     moves_per_set=4, seed=2))
    rules, positions = _read(tmp_path / "data")
    moves = [m for ms in rules["moves"].to_list() for m in ms]
    heaps = [h for hs in positions["heaps"].to_list() for h in hs]
    assert 1 <= min(moves) and max(moves) <= 2**32 - 1 and 0 <= min(heaps) and max(heaps) <= top
    assert max(moves) > 2**28  # three or more draws over 1..2^32-1 (seeded), not capped low
    assert max(heaps) > 2**60  # uniform over 0..top: 200 draws below 2^60 would be 1/8^200


def test_a_killed_calls_staging_is_removed_by_the_next(tmp_path: Path) -> None:
    """A generate killed mid-write leaves its staging (inside an existing empty --out, or
    beside a new one); once its process is gone, the next call removes it and writes. The
    staging of a live process is content: refused."""
    import os
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()
    inside = tmp_path / "empty"
    (inside / f".generating-{gone.pid}" / "positions").mkdir(parents=True)
    beside = tmp_path / f".new.generating-{gone.pid}"
    (beside / "positions").mkdir(parents=True)
    for out in (inside, tmp_path / "new"):
        generate(out, Spec(positions=5, seed=1))
        assert sorted(p.name for p in out.iterdir()) == ["positions", "rules.parquet"]
    assert not beside.exists()
    for pid in (os.getpid(), 10**20):  # alive; a number no process can have: kept too
        live = tmp_path / f"busy-{pid}"
        (live / f".generating-{pid}").mkdir(parents=True)
        code, err = invoke(["generate", "--out", live, "--positions", 5], tmp_path)
        assert code == 1 and "exists and is not an empty directory" in err, err


@pytest.mark.parametrize(("args", "message"), [
    (["--positions", 10**20], "Invalid value for '--positions': Input should be less than or "
                              "equal to 10000000000"),
    (["--heaps", 1_000_001], "Invalid value for '--heaps': Input should be less than or equal "
                             "to 1000000"),
    (["--files", 100_001], "Invalid value for '--files': Input should be less than or equal to "
                           "100000"),
    (["--rule-sets", 10**30], "Invalid value for '--rule-sets': Input should be less than or "
                              "equal to 1000000"),
    (["--moves-per-set", 1_000_001], "Invalid value for '--moves-per-set': Input should be less "
                                     "than or equal to 1000000"),
    (["--positions", 10**10, "--heaps", 11],
     "error: --positions x --heaps must be at most 100,000,000,000, got 10,000,000,000 x 11"),
    (["--positions", 20_000_001, "--shuffle"],
     "error: --shuffle permutes the rows in memory: at most 20,000,000 rows, got 20,000,001 "
     "(positions)"),
    (["--positions", 4_000_001, "--form", "long", "--shuffle"],
     "error: --shuffle permutes the rows in memory: at most 20,000,000 rows, got 20,000,005 "
     "(positions x heaps)"),
    (["--rule-sets", 1_000_000, "--moves-per-set", 21],
     "error: --rule-sets x --moves-per-set must be at most 20,000,000 (the rules table is drawn "
     "whole), got 1,000,000 x 21"),
])
def test_sizes_beyond_the_bounds_are_refused_at_once(tmp_path: Path, args: list,
                                                     message: str) -> None:
    """A size that would take years (or all memory: --positions 10^20 grew without bound) is
    exit 2 before anything is drawn or written; the bounds are in --help."""
    import time

    started = time.monotonic()
    code, err = invoke(["generate", "--out", tmp_path / "data", *args], tmp_path)
    assert time.monotonic() - started < 5
    assert code == 2, err
    assert message in " ".join(err.split()) and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_the_bounds_are_in_the_help(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from pipeline.cli import app

    text = " ".join(CliRunner().invoke(app, ["generate", "--help"]).stdout.split())
    for bound in ("0<=x<=10000000000", "positions x heaps at most 100,000,000,000",
                  "shuffled, at most 20,000,000 rows", "1<=x<=1000000", "0<=x<=100000"):
        assert bound in text, text


def _peak_rss_mib(tmp_path: Path, positions: int) -> int:
    """Peak resident memory of a fresh process that generates `positions` long-form positions
    into one file (MiB)."""
    import subprocess
    import sys

    script = ("import resource, sys\nfrom pathlib import Path\n"
              "from pipeline.generate import Spec, generate\n"
              f"generate(Path(sys.argv[1]), Spec({positions}, form='long', files=1))\n"
              "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)\n")
    out = tmp_path / f"g{positions}"
    done = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert pl.scan_parquet(out / "positions").select(pl.len()).collect().item() == positions * 5
    return int(done.stdout)


def test_memory_does_not_grow_with_the_size_of_a_file(tmp_path: Path) -> None:
    """Four times the rows in one file take about the memory of one chunk more, not four
    times the data: a file is written a chunk at a time (it was gathered whole: 413 MiB for
    5M rows, 811 MiB for 20M)."""
    small, large = _peak_rss_mib(tmp_path, 1_000_000), _peak_rss_mib(tmp_path, 4_000_000)
    assert large < small * 1.3, (small, large)


def test_out_of_memory_is_one_line_exit_1_and_leaves_nothing(tmp_path: Path) -> None:
    """A process whose address space is full (RLIMIT_AS, set 64 MiB above what it maps once
    warmed up) cannot draw a chunk of 10 million heaps: one line, exit 1, no staging left
    (it was `internal error: MemoryError`)."""
    import os
    import subprocess
    import sys

    script = (
        "import os, resource, sys\nfrom pathlib import Path\n"
        "from pipeline.cli import main\nfrom pipeline.generate import Spec, generate\n"
        "generate(Path('warm'), Spec(10))  # thread pools started, writers loaded\n"
        "size = int(open('/proc/self/statm').read().split()[0]) * os.sysconf('SC_PAGE_SIZE')\n"
        "resource.setrlimit(resource.RLIMIT_AS, (size + (64 << 20),) * 2)\n"
        "sys.argv = ['snim-batch', 'generate', '--out', 'big', '--positions', '1000000', "
        "'--heaps', '10']\nmain()\n")
    # One malloc arena: a thread that meets another in malloc after the limit is set would
    # otherwise reserve an arena of its own (64 MiB of address space, the whole headroom), and
    # the next allocation to fail could be a new thread's or polars' (which abort the process)
    # rather than the chunk of heaps this test draws: 2 of 60 copies run at once did so.
    env = {**os.environ, "MALLOC_ARENA_MAX": "1"}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=env)
    assert (done.returncode, done.stderr) == (
        1, "snim-batch: error: out of memory; nothing was written (give the process more "
           "memory, or the job less work at once)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["warm"]
