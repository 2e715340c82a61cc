"""The Spark engine against the polars engine: same inputs, same outputs, row for row.

Every test runs `run_job` twice on the same inputs, with engine="polars" and engine="spark", and
compares verdicts, rejects, sg_tables and summary (read back with `pl.read_parquet`; Spark writes
verdicts and rejects as directories of part files) and the manifest counts. One local[2] Spark
session serves the whole module.
"""

from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from conftest import (
    CLI_EXE,
    assert_same_outputs,
    inputs_with_rejects,
    invoke,
    moves_text,
    naive_sg,
    read_outputs,
    wins,
    write_csv,
    write_parquet,
    write_understated_parquet,
)
from polars.testing import assert_frame_equal

pytest.importorskip("pyspark")

from pipeline.config import config_from_dict  # noqa: E402
from pipeline.errors import BadRowsError, InputError, OutputError  # noqa: E402
from pipeline.run import RunResult, run_job  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample"
OUTPUTS = ("verdicts", "rejects", "sg_tables", "summary")
HEAPS = pl.List(pl.Int64)
BIG = 10**18
INT64_MAX = 2**63 - 1


@pytest.fixture(scope="module")
def spark():
    from pipeline.engines.spark_session import session

    run = session("local[2]", {"spark.ui.enabled": "false"})
    yield run.spark
    run.stop(failed=False)


def run_both(tmp_path: Path, **cfg) -> tuple[RunResult, RunResult]:
    """Run both engines; assert equal outputs and counts; return (polars, spark) results."""
    results = {}
    for engine in ("polars", "spark"):
        out = tmp_path / f"out-{engine}"
        results[engine] = run_job(config_from_dict(
            {"winning_moves": True, **cfg, "out": str(out), "engine": engine}))
    expected, got = results["polars"], results["spark"]
    for name in OUTPUTS:
        want = pl.read_parquet(expected.out / f"{name}.parquet")
        have = pl.read_parquet(got.out / f"{name}.parquet")
        try:
            assert_frame_equal(have, want, check_exact=True)
        except AssertionError as exc:
            raise AssertionError(f"{name}.parquet differs: {exc}") from None
    assert (got.out / "verdicts.parquet").is_dir()
    assert got.manifest["counts"] == expected.manifest["counts"]
    assert got.manifest["rejects"] == expected.manifest["rejects"]  # by_reason_code too
    assert got.manifest["reconciled"] is True
    assert got.manifest["positions_form"] == expected.manifest["positions_form"]
    assert got.manifest["engine"] == "spark"
    assert got.manifest["inputs"] == expected.manifest["inputs"]
    assert got.exit_code == expected.exit_code
    assert got.problems == expected.problems
    return expected, got


def outputs(result: RunResult) -> dict[str, pl.DataFrame]:
    return {name: pl.read_parquet(result.out / f"{name}.parquet") for name in OUTPUTS}


# ---- the bundled sample ---------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.parametrize("rules, positions", [
    ("rules.csv", "positions.csv"),
    ("rules.parquet", "positions.parquet"),
    ("rules.csv", "positions_long.parquet"),
    ("rules.parquet", "positions_long.csv"),
])
def test_sample_matches_polars(spark, tmp_path, rules, positions):
    expected, _ = run_both(tmp_path, rules=str(SAMPLE / rules),
                           positions=str(SAMPLE / positions))
    assert expected.exit_code == 0
    assert expected.manifest["counts"]["positions"]["verdicts"] > 10


# ---- random inputs with bad rows ------------------------------------------------------------

# {4, 6, 11, 12} needs 45 values to prove its period: with max_table_len 30 a heap >= 30 is a
# reject ("beyond tables.max_table_len"); the other sets prove theirs within 30 values.
UNPROVEN = [4, 6, 11, 12]
TABLES = {"max_table_len": 30, "period_probe_ops": 0}


def random_rules(rng: random.Random, keys: str) -> list[list]:
    """CSV rows of rules: valid sets, a copy of one set, nim/half, and bad rows (an invalid set,
    an unknown kind, an id defined twice differently, an empty id)."""
    sets = [rng.sample(range(1, 10), rng.randint(1, 4)) for _ in range(5)] + [UNPROVEN]
    sets.append(list(reversed(sets[0])))  # the same S under another id: one shared table
    ids = [f"r{i}" if keys == "str" else i for i in rng.sample(range(1, 60), len(sets) + 5)]
    rows = [[rid, "" if i % 2 else "subtraction", moves_text(s, i % 4)]
            for i, (rid, s) in enumerate(zip(ids, sets))]
    n = len(sets)
    rows += [[ids[n], "nim", ""], [ids[n + 1], "half", ""],
             [ids[n + 2], "subtraction", "0 3"],  # invalid: referenced by positions
             [ids[n + 3], "chess", ""],
             [ids[n + 4], "subtraction", "2"], [ids[n + 4], "subtraction", "3"],
             ["", "nim", ""]]
    rng.shuffle(rows)
    return rows


def random_positions(rng: random.Random, rule_ids: list, count: int, keys: str,
                     wide: bool) -> list[list]:
    """(rule_set_id, position_id, heaps), distinct keys, some referring to an unknown rule set;
    heaps up to 40 (beyond the unproven table's 30) and a few near 10^18."""
    out = []
    for pid in rng.sample(range(10_000, 20_000), count):
        rid = rng.choice(rule_ids + ["ghost" if keys == "str" else 999])
        heaps = [rng.randint(0, 40) for _ in range(rng.randint(0 if wide else 1, 4))]
        if rng.random() < 0.03:
            heaps.append(rng.choice([BIG, INT64_MAX, 7 * BIG]))
        out.append([rid, f"p{pid}" if keys == "str" else pid, heaps])
    return out


def heaps_cell(rng: random.Random, heaps: list[int]) -> str:
    """Mostly well-formed text; sometimes a bad token, a negative heap or brackets."""
    roll = rng.random()
    if roll < 0.03:
        return " ".join(map(str, heaps)) + " x"
    if roll < 0.05:
        return " ".join(map(str, heaps + [-3]))
    if roll < 0.08:
        return "[" + ", ".join(map(str, heaps)) + "]"
    return " ".join(map(str, heaps))


def with_bad_lines(path: Path, rng: random.Random) -> Path:
    """Insert lines with the wrong number of fields, and a row with empty keys."""
    lines = path.read_text().splitlines()
    for extra in ("1,2,3,4", "7", ",,5"):
        lines.insert(rng.randrange(2, len(lines)), extra)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.spark
@pytest.mark.parametrize("keys", ["int", "str"])
def test_random_wide_with_rejects_matches_polars(spark, tmp_path, keys):
    rng = random.Random(f"spark-wide-{keys}")
    rules = random_rules(rng, keys)
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"], rules)
    ids = [row[0] for row in rules if row[0] != ""]
    rows = random_positions(rng, ids, 240, keys, wide=True)
    d = tmp_path / "positions"
    # file a: CSV with ids, bad tokens and bad lines
    a = write_csv(d / "a.csv", ["rule_set_id", "position_id", "heaps"],
                  [[rid, pid, heaps_cell(rng, h)] for rid, pid, h in rows[:100]])
    with_bad_lines(a, rng)
    # file b: Parquet with ids
    b = rows[100:170]
    write_parquet(d / "b.parquet", {
        "rule_set_id": [x[0] for x in b], "position_id": [x[1] for x in b],
        "heaps": [x[2] for x in b]},
        {"rule_set_id": pl.String if keys == "str" else pl.Int64,
         "position_id": pl.String if keys == "str" else pl.Int64, "heaps": HEAPS})
    # file c: Parquet without position_id (ids default to row numbers across files), 2 groups
    c = rows[170:]
    write_parquet(d / "c.parquet", {"rule_set_id": [x[0] for x in c],
                                    "heaps": [x[2] for x in c]},
                  {"rule_set_id": pl.String if keys == "str" else pl.Int64, "heaps": HEAPS})
    expected, _ = run_both(tmp_path, rules=str(r), positions=str(d), tables=TABLES)
    assert expected.exit_code == 3
    o = outputs(expected)
    reasons = " | ".join(o["rejects"]["reason"].to_list())
    for fragment in ("unknown rule_set_id", "is invalid", "fields, expected",
                     "beyond tables.max_table_len", "not an integer", "negative"):
        assert fragment in reasons, fragment
    assert o["verdicts"].height > 50
    assert o["verdicts"]["move_heap"].null_count() < o["verdicts"].height


@pytest.mark.spark
@pytest.mark.parametrize("keys", ["int", "str"])
def test_random_long_with_rejects_matches_polars(spark, tmp_path, keys):
    rng = random.Random(f"spark-long-{keys}")
    rules = random_rules(rng, keys)
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"], rules)
    ids = [row[0] for row in rules if row[0] != ""]
    positions = random_positions(rng, ids, 160, keys, wide=False)
    cells = [[rid, pid, h] for rid, pid, heaps in positions for h in heaps]
    rng.shuffle(cells)  # a position's heaps are scattered over the files, in input order
    for cell in rng.sample(cells, 6):
        cell[2] = rng.choice(["-1", "x", ""])
    d = tmp_path / "positions"
    cut = len(cells) // 2
    a = write_csv(d / "a.csv", ["rule_set_id", "position_id", "heap"], cells[:cut])
    with_bad_lines(a, rng)
    b = cells[cut:]
    write_parquet(d / "b.parquet", {
        "rule_set_id": [x[0] for x in b], "position_id": [x[1] for x in b],
        "heap": [x[2] if isinstance(x[2], int) else None for x in b]},
        {"rule_set_id": pl.String if keys == "str" else pl.Int64,
         "position_id": pl.String if keys == "str" else pl.Int64, "heap": pl.Int64})
    expected, _ = run_both(tmp_path, rules=str(r), positions=str(d), tables=TABLES)
    assert expected.exit_code == 3
    o = outputs(expected)
    reasons = " | ".join(o["rejects"]["reason"].to_list())
    for fragment in ("another row of this position", "unknown rule_set_id", "is invalid",
                     "fields, expected", "beyond tables.max_table_len"):
        assert fragment in reasons, fragment
    assert o["verdicts"].height > 40


@pytest.mark.spark
def test_long_without_winning_moves_uses_the_xor_path(spark, tmp_path):
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [[1, "", "2 5"], [2, "half", ""], [3, "", " ".join(map(str, UNPROVEN))]])
    cells = [[1, 0, 5], [2, 0, 9], [1, 0, 12], [1, 1, 3], [2, 1, BIG], [3, 0, 40], [3, 0, 2],
             [3, 1, 7], [1, 2, 4], [1, 2, 4]]
    p = write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heap"], cells)
    expected, _ = run_both(tmp_path, rules=str(r), positions=str(p), winning_moves=False,
                           tables=TABLES)
    assert outputs(expected)["verdicts"].columns == ["rule_set_id", "position_id", "nim_sum",
                                                     "verdict"]
    assert expected.exit_code == 3  # position (3, 0) has a heap beyond the unproven table


@pytest.mark.spark
def test_duplicate_positions_match_polars(spark, tmp_path):
    """Duplicates within a file, across files (CSV and Parquet), with a rejected copy, and a
    default position id (row number) that equals an explicit one."""
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [[1, "", "2 5"], [2, "nim", ""], [3, "half", ""]])
    d = tmp_path / "positions"
    write_csv(d / "a.csv", ["rule_set_id", "position_id", "heaps"],
              [[1, 0, "5 12"], [1, 0, "2"], [2, 5, "3 x"], [2, 5, "4"], [3, 1, "8"],
               [2, 9, "1 2"], [1, 3, "7"], [3, 1, "9 9"], [3, 12, "4"]])
    write_parquet(d / "b.parquet", {"rule_set_id": [2, 1, 3], "position_id": [9, 4, 2],
                                    "heaps": [[6], [1, 1], [5]]},
                  {"rule_set_id": pl.Int64, "position_id": pl.Int64, "heaps": HEAPS})
    write_parquet(d / "c.parquet", {"rule_set_id": [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3],
                                    "heaps": [[i] for i in range(12)]},
                  {"rule_set_id": pl.Int64, "heaps": HEAPS})  # ids 12..23: (3, 12) twice
    expected, _ = run_both(tmp_path, rules=str(r), positions=str(d))
    reasons = outputs(expected)["rejects"]["reason"].to_list()
    assert sum("appears" in x for x in reasons) == 9


@pytest.mark.spark
def test_keys_made_text_only_by_rejected_rows_match_polars(spark, tmp_path):
    """Text keys only in rejected rows, in one file with the rules' text id: both engines
    type the verdict keys over the verdict rows (integers), and neither takes the rejected
    "010" for the key 10."""
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [[1, "nim", ""], ["rs", "nim", ""]])
    p = write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heaps"],
                  [["x", 1, 3], [1, "abc", -5], [1, "010", -1], [1, 10, 3], [1, 2, 4]])
    expected, _ = run_both(tmp_path, rules=str(r), positions=str(p))
    assert outputs(expected)["verdicts"]["position_id"].to_list() == [2, 10]


@pytest.mark.spark
@pytest.mark.parametrize(("form", "pids", "pid_type", "want"), [
    ("wide", [2**64 - 1, 2**63, 7], "uint64",
     ["18446744073709551615", "7", "9223372036854775808"]),  # beyond int64: text, as in CSV
    ("long", [2**64 - 1, 2**63, 7], "uint64",
     ["18446744073709551615", "7", "9223372036854775808"]),
    ("wide", [2**63 - 1, 0, 7], "uint64", [0, 7, 2**63 - 1]),  # every value fits: Int64
    ("wide", [None, None, None], "null", []),  # Arrow's null type: each row rejected
    ("wide", ["b", "a", "c"], "dictionary", ["a", "b", "c"]),
])
def test_parquet_key_types_match_polars(spark, tmp_path, form, pids, pid_type, want):
    """A Parquet key's type does not decide the key type alone: a uint64 id beyond int64
    makes the key text in both engines, as the same digits in CSV do."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"], [[1, "", "2 5"]])
    arrow = (pa.array(pids).dictionary_encode() if pid_type == "dictionary"
             else pa.array(pids, pa.uint64() if pid_type == "uint64" else pa.null()))
    heap = "heaps" if form == "wide" else "heap"
    pq.write_table(pa.table({"rule_set_id": pa.array([1] * 3, pa.int64()), "position_id": arrow,
                             heap: pa.array([[5, 12]] * 3 if form == "wide" else [5] * 3)}),
                   tmp_path / "positions.parquet")
    expected, _ = run_both(tmp_path, rules=str(r), positions=str(tmp_path / "positions.parquet"))
    assert outputs(expected)["verdicts"]["position_id"].to_list() == want
    assert outputs(expected)["rejects"].height == (3 if pid_type == "null" else 0)


@pytest.mark.spark
@pytest.mark.parametrize("keys", ["int", "str", "extreme"])
def test_parquet_only_duplicates_match_polars(spark, tmp_path, keys):
    """Parquet files only, heaps bounded by their statistics: rows are evaluated as they are
    read, and keys given twice (in one file, across files, once with a rejected copy, once
    as a default position id) are found in the sorted verdicts. Integer keys are sorted on
    one long when their ranges allow it ("int", negative ids included) and on both keys
    when they do not ("extreme": ids at both ends of int64)."""
    low, high = (-(2**63), INT64_MAX) if keys == "extreme" else (-7, 40)
    dtype = pl.String if keys == "str" else pl.Int64

    def key(i):
        return str(i) if keys == "str" else i

    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [[low, "", "2 5"], [2, "nim", ""], [high, "half", ""], [-3, "", "1 3 4"]])
    d = tmp_path / "positions"
    rng = random.Random(f"spark-parquet-dups-{keys}")
    pids = [low, -1, 0, 1, 2, 5, high]
    rows = [(rng.choice([low, 2, high, -3, 99]), rng.choice(pids),
             [rng.randint(0, 30) for _ in range(rng.randint(0, 4))]) for _ in range(120)]
    rows[3] = (2, 5, [1, None])  # rejected, with a key some verdict may have as well
    write_parquet(d / "a.parquet", {"rule_set_id": [key(x[0]) for x in rows[:60]],
                                    "position_id": [key(x[1]) for x in rows[:60]],
                                    "heaps": [x[2] for x in rows[:60]]},
                  {"rule_set_id": dtype, "position_id": dtype, "heaps": HEAPS})
    write_parquet(d / "b.parquet", {"rule_set_id": [key(x[0]) for x in rows[60:]],
                                    "position_id": [key(x[1]) for x in rows[60:]],
                                    "heaps": [x[2] for x in rows[60:]]},
                  {"rule_set_id": dtype, "position_id": dtype, "heaps": HEAPS})
    write_parquet(d / "c.parquet", {"rule_set_id": [key(2)] * 4, "heaps": [[1], [2], [3], [4]]},
                  {"rule_set_id": dtype, "heaps": HEAPS})  # ids 120..123
    expected, got = run_both(tmp_path, rules=str(r), positions=str(d))
    reasons = outputs(expected)["rejects"]["reason"].to_list()
    assert any("appears" in x for x in reasons) and any("null" in x for x in reasons)
    assert outputs(got)["verdicts"].height > 5


# ---- renamed input columns ------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.parametrize("form", ["wide", "long"])
def test_renamed_columns_name_the_users_columns_as_polars_does(spark, tmp_path, form):
    """`columns:` renames every input column: both engines name the user's columns in rejects
    (an unknown rule set, a duplicate position, a heap beyond its table, a duplicate rule, an
    empty heap element), whichever step found the problem."""
    heap = "hs" if form == "wide" else "h"
    names = {"rule_set_id": "rsid", "kind": "kd", "moves": "mv", "position_id": "pid",
             "heaps": "hs", "heap": "h"}
    r = write_csv(tmp_path / "rules.csv", ["rsid", "kd", "mv"],
                  [[1, "", "2 5"], [3, "", "2"], [3, "", "3"], [4, "", "4 6 11 12"],
                   [5, "", "2,,5"]])
    d = tmp_path / "positions"
    if form == "wide":
        write_csv(d / "a.csv", ["rsid", "pid", heap],
                  [[1, 0, "5 12"], [9, 0, "3"], [1, 1, "4"], [1, 1, "6"], [4, 0, "2 40"],
                   [1, 2, "5,,6"], [3, 0, "1"]])
        write_parquet(d / "b.parquet", {"rsid": [1, 4], "pid": [7, 8], heap: [[3], [35]]},
                      {"rsid": pl.Int64, "pid": pl.Int64, heap: HEAPS})
    else:
        write_csv(d / "a.csv", ["rsid", "pid", heap],
                  [[1, 0, 5], [9, 0, 3], [1, 1, 4], [4, 0, 2], [4, 0, 40], [1, 2, "x"],
                   [3, 0, 1]])
        write_parquet(d / "b.parquet", {"rsid": [1, 4], "pid": [7, 8], heap: [3, 35]},
                      {"rsid": pl.Int64, "pid": pl.Int64, heap: pl.Int64})
    expected, _ = run_both(tmp_path, rules=str(r), positions=str(d), tables=TABLES,
                           columns=names)
    rejects = outputs(expected)["rejects"]
    # long form: the other row of position (4, 0), whose heap 40 is beyond its table, is
    # position_rejected, with no column of its own
    assert set(rejects["column"].to_list()) == {"rsid", "mv", heap} | (
        {"pid"} if form == "wide" else {None})
    assert not any(f", column {c}:" in line for line in expected.problems
                   for c in ("rule_set_id", "moves", "position_id", "heaps", "heap"))


# ---- heaps near 10^18 -----------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.parametrize("form", ["wide", "long"])
def test_huge_heaps_match_polars(spark, tmp_path, form):
    rng = random.Random(f"spark-huge-{form}")
    r = write_parquet(tmp_path / "rules.parquet", {
        "rule_set_id": [1, 2, 3, 4], "kind": ["nim", "half", "subtraction", "subtraction"],
        "moves": [None, None, [2, 5], [3, 4, 7]]},
        {"rule_set_id": pl.Int64, "kind": pl.String, "moves": HEAPS})
    near = [BIG - 1, BIG, BIG + 1, INT64_MAX, INT64_MAX - 1, 2**62, 2**60 + 3]
    positions = [(rid, pid, rng.sample(near, rng.randint(1, 3)) + [rng.randint(0, 30)])
                 for rid in (1, 2, 3, 4) for pid in range(12)]
    if form == "wide":
        heaps = [h if (rid + pid) % 7 else h + [2**64 - 1] for rid, pid, h in positions]
        p = write_parquet(tmp_path / "positions.parquet", {
            "rule_set_id": [x[0] for x in positions], "position_id": [x[1] for x in positions],
            "heaps": heaps},  # uint64: the 2^64-1 rows are rejected as larger than 2^63-1
            {"rule_set_id": pl.Int64, "position_id": pl.Int64, "heaps": pl.List(pl.UInt64)})
    else:
        cells = [[rid, pid, h] for rid, pid, hs in positions for h in hs]
        cells.append([4, 99, str(2**63)])  # text beyond int64: a rejected row
        p = write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heap"],
                      cells)
    expected, _ = run_both(tmp_path, rules=str(r), positions=str(p))
    o = outputs(expected)
    assert o["verdicts"].height >= 40
    assert o["verdicts"]["nim_sum"].max() > 2**59
    assert o["rejects"]["reason"].str.contains("larger than 2").all()


# ---- failures and the CLI -------------------------------------------------------------------


@pytest.mark.spark
def test_bad_rows_under_fail_policy_write_nothing(spark, tmp_path):
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"], [[1, "", "1 2"]])
    p = write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heaps"],
                  [[1, 0, "3 4"], [1, 1, "-1"]])
    errors = {}
    for engine in ("polars", "spark"):
        with pytest.raises(BadRowsError) as err:
            run_job(config_from_dict({"rules": str(r), "positions": str(p), "engine": engine,
                                      "out": str(tmp_path / engine), "on_bad_rows": "fail"}))
        errors[engine] = (str(err.value), err.value.problems)
        assert not (tmp_path / engine).exists()
    assert errors["spark"] == errors["polars"]


@pytest.mark.spark
def test_unreadable_input_is_the_same_input_error(spark, tmp_path):
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"], [[1, "", "1 2"]])
    d = tmp_path / "positions"
    write_csv(d / "a.csv", ["rule_set_id", "position_id", "heaps"], [[1, 0, "3"]])
    (d / "b.csv").write_bytes(b"rule_set_id,position_id,heaps\n1,\xff\xfe,2\n")
    messages = {}
    for engine in ("polars", "spark"):
        with pytest.raises(InputError) as err:
            run_job(config_from_dict({"rules": str(r), "positions": str(d), "engine": engine,
                                      "out": str(tmp_path / engine)}))
        messages[engine] = str(err.value)
        assert not (tmp_path / engine).exists()
    assert messages["spark"] == messages["polars"]


@pytest.mark.spark
def test_cli_engine_spark_on_the_sample(spark, tmp_path):
    from typer.testing import CliRunner

    from pipeline.cli import app

    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", "--config", str(ROOT / "config.yaml"),
                                      "--engine", "spark", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"wrote {out}: 17 verdicts")
    assert len(result.stdout.splitlines()) == 1  # no progress bars or logs on stdout
    manifest = (out / "manifest.json").read_text()
    assert '"engine": "spark"' in manifest
    verdicts = pl.read_parquet(out / "verdicts.parquet")
    assert verdicts.height == 17 and verdicts.columns[:4] == [
        "rule_set_id", "position_id", "nim_sum", "verdict"]


@pytest.mark.spark
def test_parquet_file_split_over_tasks_matches_polars(spark, tmp_path):
    """One Parquet file of many row groups read by several Spark tasks: row numbers come from
    _metadata.row_index, and default position ids run on across the split points."""
    rng = random.Random("spark-split")
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [[1, "", "2 5"], [2, "nim", ""], [3, "", "1 3 4"]])
    n = 30_000
    heaps = [[rng.randint(0, 60) for _ in range(rng.randint(0, 3))] for _ in range(n)]
    for i in rng.sample(range(n), 20):
        heaps[i] = heaps[i] + [None]  # a null heap: a reject naming its row
    p = tmp_path / "positions.parquet"
    pl.DataFrame({"rule_set_id": [rng.choice([1, 2, 3, 4]) for _ in range(n)], "heaps": heaps},
                 schema={"rule_set_id": pl.Int64, "heaps": HEAPS}).write_parquet(
        p, row_group_size=1_000)
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(p.stat().st_size // 6))
    try:
        assert spark.read.parquet(str(p)).rdd.getNumPartitions() > 3
        expected, _ = run_both(tmp_path, rules=str(r), positions=str(p))
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    rejects = outputs(expected)["rejects"]
    assert rejects.height > 20 and rejects["row"].max() > n // 2


def _sorted_part(path: Path, rule_ids: list[int], pids: range, repeat_at: int = -1) -> None:
    """A Parquet file of positions in key order (rule set, then position id), the key at row
    `repeat_at` given twice in a row, in row groups of 250 rows."""
    keys = [(r, p) for r in rule_ids for p in pids]
    if repeat_at >= 0:
        keys.insert(repeat_at, keys[repeat_at])
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame({"rule_set_id": [r for r, _ in keys], "position_id": [p for _, p in keys],
                  "heaps": [[p % 13, (p * 7) % 11] for _, p in keys]},
                 schema={"rule_set_id": pl.Int64, "position_id": pl.Int64, "heaps": HEAPS}
                 ).write_parquet(path, row_group_size=250)


@pytest.mark.spark
@pytest.mark.parametrize("order", ["in order", "parts out of order", "first rows not"])
def test_input_in_key_order_skips_the_sort_and_still_finds_duplicates(spark, tmp_path,
                                                                      caplog, monkeypatch,
                                                                      order):
    """Files in key order, read in file order over several tasks (a unit of row groups
    each), are not sorted again; a key that ends one file and starts the next is still a
    duplicate, as is a key repeated inside a file. When the file read first holds the later
    keys, or the first rows are out of order, the read's sample of the (integer) keys says
    so: the rows are sorted without a look at the first rows or the full check, in ranges
    drawn from that sample (no sampling pass of Spark's). All: the polars engine's four
    tables."""
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [[1, "", "2 5"], [2, "nim", ""], [3, "", "1 3 4"]])
    d = tmp_path / "positions"
    first, second = ("a.parquet", "b.parquet") if order == "in order" else (
        "b.parquet", "a.parquet")
    early = range(0, 3000)
    _sorted_part(d / first, [1, 2], early, repeat_at=9)  # ends with (2, 2999)
    _sorted_part(d / second, [2, 3], range(2999, 3400))  # starts with (2, 2999)
    if order == "first rows not":  # a.parquet, read first, backwards
        pl.read_parquet(d / "a.parquet").reverse().write_parquet(d / "a.parquet",
                                                                 row_group_size=250)
    from pipeline.engines import spark_ordering

    monkeypatch.setattr(spark_ordering, "ORDER_PROBE_ROWS", 100)  # within the first file
    with caplog.at_level(logging.INFO, logger="pipeline.engines.spark_ordering"):
        expected, _ = run_both(tmp_path, rules=str(r), positions=str(d))
    skipped = any("in key order as read" in m for m in caplog.messages)
    assert skipped == (order == "in order")
    sampled_out = any("not in key order (the read's sample)" in m for m in caplog.messages)
    assert sampled_out == (order != "in order")
    assert not any("not in key order (the first rows)" in m for m in caplog.messages)
    ranged = any("ranges drawn from the read's sample" in m for m in caplog.messages)
    assert ranged == (order != "in order")
    reasons = outputs(expected)["rejects"]["reason"].to_list()
    assert sorted(x for x in reasons if "appears" in x) == sorted(
        ["position_id 2999 appears 2 times for rule_set_id 2"] * 2
        + [f"position_id {early[9]} appears 2 times for rule_set_id 1"] * 2)


@pytest.mark.spark
@pytest.mark.parametrize("keys", ["int", "str"])
@pytest.mark.parametrize("twice", [False, True])
def test_sorted_verdicts_are_tallied_as_written(spark, tmp_path, caplog, keys, twice):
    """Verdicts out of key order, no rejected row, are sorted as they are written, and
    their repeated keys and counts tallied on the way (no cache, no job of their own).
    A key given twice (across files) is found by that tally: the written verdicts are
    dropped and the duplicates split off by the cached path. Both: the polars engine's
    four tables, and each position's verdict is the game-tree search's. With integer ids a
    rule row is rejected too: the problems shown list it though no position row is."""
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [[1, "", "1 3 4"], [2, "", "2 5"], [3, "", "1 2"],
                   *([[4, "", "0 2"]] if keys == "int" else [])])
    rng = random.Random(f"tally-{keys}-{twice}")
    rows = [(rng.choice([1, 2, 3]), pid, [rng.randint(0, 12) for _ in range(rng.randint(1, 3))])
            for pid in rng.sample(range(10_000), 2000)]

    def part(path: Path, chunk: list) -> None:
        write_parquet(path, {"rule_set_id": [x[0] for x in chunk],
                             "position_id": [pid(x[1]) for x in chunk],
                             "heaps": [x[2] for x in chunk]},
                      {"rule_set_id": pl.Int64,
                       "position_id": pl.String if keys == "str" else pl.Int64, "heaps": HEAPS})

    def pid(value: int) -> int | str:
        return f"p{value}" if keys == "str" else value

    d = tmp_path / "positions"
    part(d / "a.parquet", rows[:1000])
    part(d / "b.parquet", rows[1000:] + ([rows[17]] if twice else []))
    with caplog.at_level(logging.INFO, logger="pipeline.engines"):
        expected, got = run_both(tmp_path, rules=str(r), positions=str(d))
    assert any("tallied on the way" in m for m in caplog.messages)
    assert any("splitting the duplicates off" in m for m in caplog.messages) == twice
    kinds = {1: ("", (1, 3, 4)), 2: ("", (2, 5)), 3: ("", (1, 2))}
    verdicts = outputs(got)["verdicts"]
    assert verdicts.height == 2000 - (1 if twice else 0)
    want = {(rid, pid(p)): "W" if wins(*kinds[rid], tuple(heaps)) else "L"
            for rid, p, heaps in rows if not (twice and (rid, p) == rows[17][:2])}
    assert dict(zip(zip(verdicts["rule_set_id"], verdicts["position_id"]),
                    verdicts["verdict"])) == want
    summary = outputs(got)["summary"]  # the tally's counts
    assert {(rid, w, lose) for rid, w, lose in summary.select("rule_set_id", "W", "L").rows()} == {
        (rid, sum(v == "W" for (r, _), v in want.items() if r == rid),
         sum(v == "L" for (r, _), v in want.items() if r == rid)) for rid in (1, 2, 3)} | (
        {(4, 0, 0)} if keys == "int" else set())  # the rejected rule's row
    reasons = outputs(expected)["rejects"]["reason"].to_list()
    assert sum("appears" in x for x in reasons) == (2 if twice else 0)
    assert len(got.problems) == len(reasons) == (2 if twice else 0) + (keys == "int")


STRAIGHT_CASES = ["clean", "rejects", "reject with a verdict's key", "key twice",
                  "many rejects"]


@pytest.mark.spark
@pytest.mark.parametrize("case", STRAIGHT_CASES)
def test_rows_out_of_key_order_go_straight_to_the_sort(spark, tmp_path, caplog, case):
    """Parquet whose footers show the rows out of key order (row groups whose key ranges
    overlap) is read straight into the sort: no cache of the read, the reading tasks tally
    into an accumulator. Rejected rows that the tasks carry keep that path; a key given twice
    (across files), a rejected row with a verdict's key, or more rejected rows in one unit
    than a task carries have the rows read again, cached. Every case: the polars engine's
    four tables, and each verdict is the game-tree search's."""
    from pipeline.engines.spark_tasks import CARRIED_REJECTS

    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [[1, "", "1 3 4"], [2, "", "2 5"], [3, "", "1 2"]])
    rng = random.Random(f"straight-{case}")
    n = CARRIED_REJECTS + 500 if case == "many rejects" else 3000
    rows = [(rng.choice([1, 2, 3]), pid, [rng.randint(0, 12) for _ in range(rng.randint(1, 3))])
            for pid in rng.sample(range(10 * n), n)]
    bad = {"rejects": set(rng.sample(range(n), 40)),
           "many rejects": set(range(CARRIED_REJECTS + 1))}.get(case, set())
    rows = [(rid, pid, [-1] if i in bad else heaps) for i, (rid, pid, heaps) in enumerate(rows)]
    first = CARRIED_REJECTS + 100 if case == "many rejects" else n // 2
    extra = {"reject with a verdict's key": [(rows[5][0], rows[5][1], [-1])],
             "key twice": [rows[first + 17]]}.get(case, [])

    def part(path: Path, chunk: list, group_rows: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        pl.DataFrame({"rule_set_id": [x[0] for x in chunk], "position_id": [x[1] for x in chunk],
                      "heaps": [x[2] for x in chunk]},
                     schema={"rule_set_id": pl.Int64, "position_id": pl.Int64, "heaps": HEAPS}
                     ).write_parquet(path, row_group_size=group_rows)

    d = tmp_path / "positions"
    part(d / "a.parquet", rows[:first], first if case == "many rejects" else 500)
    part(d / "b.parquet", rows[first:] + extra, 500)
    with caplog.at_level(logging.INFO, logger="pipeline.engines"):
        expected, got = run_both(tmp_path, rules=str(r), positions=str(d))
    assert any("read straight into the sort" in m for m in caplog.messages)
    again = case in ("reject with a verdict's key", "key twice", "many rejects")
    assert any("reading them again, cached" in m for m in caplog.messages) == again
    kinds = {1: ("", (1, 3, 4)), 2: ("", (2, 5)), 3: ("", (1, 2))}
    twice = {(x[0], x[1]) for x in extra}
    want = {(rid, pid): "W" if wins(*kinds[rid], tuple(heaps)) else "L"
            for i, (rid, pid, heaps) in enumerate(rows) if i not in bad
            and (rid, pid) not in twice}
    verdicts = outputs(got)["verdicts"]
    assert dict(zip(zip(verdicts["rule_set_id"], verdicts["position_id"]),
                    verdicts["verdict"])) == want
    assert outputs(got)["rejects"].height == len(bad) + 2 * len(extra)


@pytest.mark.spark
@pytest.mark.parametrize("beyond", ["position_id", "rule_set_id"])
def test_footers_that_understate_the_keys_still_give_sorted_verdicts(spark, tmp_path, caplog,
                                                                     monkeypatch, beyond):
    """Row-group statistics that a writer got wrong (a key above the maximum its footer
    gives) put keys in the wrong range of the straight read's sort: the tally sees them out
    of order, the written verdicts are dropped, and the rows are read again by the cached
    path. A rule set id of 2^50 past a footer's 3 overflowed the sort's long (an error
    under Spark's ANSI mode). The polars engine's four tables, in key order."""
    from pipeline.engines import spark_reading

    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [[1, "", "1 3 4"], [2, "", "2 5"], [3, "", "1 2"], [1 << 50, "", "1 2"]])
    rng = random.Random("understated")
    rows = [(rng.choice([1, 2, 3]), pid, [rng.randint(0, 12)])
            for pid in rng.sample(range(20_000), 3000)]
    far = (1, 777_777_777) if beyond == "position_id" else (1 << 50, 5)
    rows.insert(250, (*far, [3]))  # inside the first row group
    rows.insert(260, (far[0], far[1] - 1, [4]))
    d = tmp_path / "positions"
    d.mkdir()
    pl.DataFrame({"rule_set_id": [x[0] for x in rows], "position_id": [x[1] for x in rows],
                  "heaps": [x[2] for x in rows]},
                 schema={"rule_set_id": pl.Int64, "position_id": pl.Int64, "heaps": HEAPS}
                 ).write_parquet(d / "a.parquet", row_group_size=500)
    real = spark_reading.row_group_facts

    def understated(path, names, **kwargs):
        sizes, ranges = real(path, names, **kwargs)
        cap = 19_999 if beyond == "position_id" else 3
        return sizes, [{**found, beyond: (found[beyond][0], min(found[beyond][1], cap))}
                       for found in ranges]

    monkeypatch.setattr(spark_reading, "row_group_facts", understated)
    with caplog.at_level(logging.INFO, logger="pipeline.engines"):
        run_both(tmp_path, rules=str(r), positions=str(d))
    assert any("read straight into the sort" in m for m in caplog.messages)
    assert any("reading them again, cached" in m for m in caplog.messages)


@pytest.mark.spark
@pytest.mark.parametrize(("form", "order", "max_table_len"), [
    ("wide", "in key order", None), ("wide", "out of key order", None),
    ("long", "in key order", None), ("wide", "out of key order", 500),
    ("long", "in key order", 500)])
def test_footers_that_understate_the_heaps_grow_the_tables(spark, tmp_path, caplog, form,
                                                           order, max_table_len):
    """Statistics that say the heaps end at 100 where they reach 40,000: the tables the
    footers presized before the read (which the reading tasks evaluate wide rows with, and
    cannot grow) are grown on the driver for the heaps the tasks found beyond them, and the
    rows read again (wide: cached, or straight into the sort as rows out of key order
    are); long form grows them before its nim-sums are taken again. Before, those rows
    were rejected naming tables.max_table_len, which no table had reached. Each verdict is
    the naive mex reference's; with a max_table_len that does stop the tables, the same
    rejects as the polars engine."""
    heaps = {1: [5], 2: [40_000], 3: [39_999, 3], 4: [40_000]}
    rule_of = {1: 1, 2: 1, 3: 1, 4: 2}
    moves = {1: [1000], 2: [1000, 1001]}
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [[rid, "", " ".join(map(str, m))] for rid, m in moves.items()])
    pids = list(heaps)[::-1] if order == "out of key order" else list(heaps)
    if form == "wide":
        table = pa.table({"rule_set_id": [rule_of[p] for p in pids], "position_id": pids,
                          "heaps": pa.array([heaps[p] for p in pids], pa.list_(pa.int64()))})
    else:
        cells = [(rule_of[p], p, h) for p in pids for h in heaps[p]]
        table = pa.table({"rule_set_id": [c[0] for c in cells],
                          "position_id": [c[1] for c in cells],
                          "heap": pa.array([c[2] for c in cells], pa.int64())})
    positions = write_understated_parquet(
        table, tmp_path / "positions.parquet", {40_000: 100, 39_999: 99},
        row_group_size=1 if order == "out of key order" else None)
    tables = {} if max_table_len is None else {"tables": {"max_table_len": max_table_len}}
    with caplog.at_level(logging.INFO, logger="pipeline.engines"):
        expected, got = run_both(tmp_path, rules=str(r), positions=str(positions), **tables)
    assert any("statistics" in m and "grow" in m for m in caplog.messages)
    if order == "out of key order":
        assert any("read straight into the sort" in m for m in caplog.messages)
    verdicts = outputs(got)["verdicts"]
    if max_table_len is not None:  # {1000} proves no period within 500 values
        assert verdicts["position_id"].to_list() == [1]
        reasons = outputs(got)["rejects"]["reason"]  # and the long rows of those positions
        assert reasons.str.contains("max_table_len|another row of this position").all()
        assert reasons.str.contains("max_table_len").sum() == 3
        return
    sg = {rid: naive_sg(m, 40_001) for rid, m in moves.items()}
    want = []
    for p in sorted(heaps):
        nim = 0
        for h in heaps[p]:
            nim ^= sg[rule_of[p]][h]
        want.append((rule_of[p], p, nim))
    assert verdicts.select("rule_set_id", "position_id", "nim_sum").rows() == want
    assert expected.exit_code == 0


def test_the_rejected_rows_carried_to_the_driver_are_bounded_in_all():
    """Each reading task carries at most 10,000 rejected rows, and all of them about 100,000
    (at least 100 a task): a bad night over many units reads again instead of flooding the
    driver."""
    from pipeline.engines.spark_tasks import carried_per_unit

    assert [carried_per_unit(n) for n in (0, 1, 10, 11, 400, 1000, 5000)] == [
        10_000, 10_000, 10_000, 9_090, 250, 100, 100]


def test_footer_key_stats_only_for_row_groups_out_of_key_order():
    """The sort's bounds and sample from row groups' statistics: None when the groups follow
    each other in key order (the read may be sorted, which it checks instead); else the
    keys' exact bounds, and a sample within each group's ranges."""
    from pipeline.engines.spark_reading import footer_key_stats

    sorted_groups = [(10, (1, 1), (0, 9)), (10, (1, 2), (0, 2999)), (5, (2, 2), (5, 8))]
    assert footer_key_stats(sorted_groups) is None  # may be sorted: (2, 4) may end the 2nd
    assert footer_key_stats([(5, (3, 3), (0, 10)), (5, (3, 3), (50, 60))]) is None
    backwards = footer_key_stats([(5, (3, 3), (50, 60)), (5, (3, 3), (0, 10))])
    assert backwards is not None and len(backwards.samples) == 2 * 2048
    overlapping = [(10, (1, 3), (0, 99)), (30, (2, 5), (-4, 50))]
    stats = footer_key_stats(overlapping)
    assert stats is not None
    assert (stats.lo_rule_set_id, stats.hi_rule_set_id) == (1, 5)
    assert (stats.lo_position_id, stats.hi_position_id) == (-4, 99)
    assert all(1 <= r <= 5 and -4 <= p <= 99 for r, p in stats.samples)
    assert len(stats.samples) == 4096 // 4 + 3 * 4096 // 4
    assert any(r > 3 for r, _ in stats.samples) and any(p < 0 for _, p in stats.samples)


def test_tallies_of_partitions_add_up_and_find_a_key_across_them():
    """`tallied_counts` over partitions given in any order (keyed by their number): W/L of
    a rule set that spans two partitions add up; a key repeated inside a partition, or
    ending one partition and starting the next, means the verdicts hold it twice (None);
    keys out of order inside a partition, or a partition whose keys start before the last
    key of the one before it, mean the sort's ranges were wrong (None)."""
    from pyspark.sql import types as T

    from pipeline.engines.spark_ordering import tallied_counts
    from pipeline.engines.spark_tasks import PartitionTally

    def part(first, last, repeated, counts):
        return PartitionTally(first, last, repeated, pl.DataFrame(
            counts, schema={"rule_set_id": pl.Int64, "W": pl.UInt32, "L": pl.UInt32},
            orient="row"))

    types = {"rule_set_id": T.LongType(), "position_id": T.LongType()}
    b = part((2, 0), (3, 9), 0, [(2, 1, 1), (3, 4, 0)])
    a = part((1, 5), (2, -1), 0, [(1, 2, 3), (2, 5, 0)])
    counts = tallied_counts({1: b, 0: a}, types)
    assert counts is not None
    assert sorted(counts.rows()) == [(1, 2, 3), (2, 6, 1), (3, 4, 0)]
    assert counts.schema["W"] == pl.Int64
    assert tallied_counts({0: a, 1: replace(b, repeated=1)}, types) is None
    assert tallied_counts({0: a, 1: replace(b, first=(2, -1))}, types) is None  # across
    assert tallied_counts({0: a, 1: replace(b, backwards=1)}, types) is None
    assert tallied_counts({0: a, 1: replace(b, first=(1, 9))}, types) is None  # overlapping
    assert tallied_counts({0: b, 1: a}, types) is None  # the partitions in the wrong order
    assert tallied_counts({}, types).height == 0


@pytest.mark.spark
@pytest.mark.parametrize("ids", [[1, 2], ["a", "b"]])
def test_no_verdict_at_all_is_a_directory_of_the_columns(spark, tmp_path, ids):
    """Every position rejected (no position id): Spark's write has no verdict row to write,
    and the verdicts are still a directory polars reads as the polars engine's empty
    table; with text rule ids, its rule_set_id is text in both (a night of verdicts has)."""
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [[ids[0], "", "1 2"], [ids[1], "", "1 3"]])
    p = write_parquet(tmp_path / "positions.parquet",
                      {"rule_set_id": [ids[1], ids[0], ids[1]],
                       "position_id": [None, None, None], "heaps": [[1], [2, 3], [4]]},
                      {"rule_set_id": pl.Int64 if ids[0] == 1 else pl.String,
                       "position_id": pl.Int64, "heaps": HEAPS})
    _, got = run_both(tmp_path, rules=str(r), positions=str(p), max_rejected_rate=1.0)
    assert outputs(got)["verdicts"].height == 0
    assert outputs(got)["verdicts"].schema["rule_set_id"] == (
        pl.Int64 if ids[0] == 1 else pl.String)
    assert outputs(got)["rejects"].height == 3


@pytest.mark.spark
def test_tables_without_a_period_match_polars(spark, tmp_path):
    """Rule sets whose period is not found (big moves, small probe budget): sg_tables reports
    the same table lengths from both engines, whatever each rule's largest heap is."""
    rng = random.Random(11)
    rules = [[i, "", " ".join(map(str, rng.sample(range(50, 400), 12)))] for i in range(1, 9)]
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"], rules)
    rows = {"rule_set_id": [], "position_id": [], "heaps": []}
    for pid in range(300):
        rid = rng.randint(1, 8)
        rows["rule_set_id"].append(rid)
        rows["position_id"].append(pid)
        rows["heaps"].append([rng.randint(0, 100 * rid) for _ in range(3)])
    p = write_parquet(tmp_path / "positions.parquet", rows,
                      {"rule_set_id": pl.Int64, "position_id": pl.Int64, "heaps": HEAPS})
    expected, _ = run_both(tmp_path, rules=str(r), positions=str(p),
                           tables={"period_probe_ops": 0})
    tables = outputs(expected)["sg_tables"]
    assert tables["period"].null_count() > 0  # some unproven: their lengths must agree


# ---- the manifest lists the part files, so that --overwrite can prove the output ours --------


@pytest.mark.spark
def test_part_files_are_listed_and_an_overwrite_checks_them(spark, tmp_path):
    out = tmp_path / "out"
    cfg = {"rules": str(SAMPLE / "rules.csv"), "positions": str(SAMPLE / "positions.csv"),
           "out": str(out), "engine": "spark"}
    result = run_job(config_from_dict(cfg))
    entries = {e["name"]: e for e in result.manifest["outputs"]}
    for name in ("verdicts.parquet", "rejects.parquet"):
        assert entries[name]["type"] == "directory"
        files = {f["name"]: f["size"] for f in entries[name]["files"]}
        assert files and files == {p.name: p.stat().st_size for p in (out / name).iterdir()}
    assert json.loads((out / "manifest.json").read_text())["outputs"] == \
        result.manifest["outputs"]
    (out / "verdicts.parquet" / "part-99999-mine.parquet").write_bytes(b"mine")
    with pytest.raises(OutputError, match=r"does not list: verdicts\.parquet/part-99999-mine"):
        run_job(config_from_dict({**cfg, "overwrite": True}))
    assert (out / "verdicts.parquet" / "part-99999-mine.parquet").read_bytes() == b"mine"
    (out / "verdicts.parquet" / "part-99999-mine.parquet").unlink()
    again = run_job(config_from_dict({**cfg, "overwrite": True}))
    assert again.manifest["run_id"] != result.manifest["run_id"]
    assert json.loads((out / "manifest.json").read_text())["run_id"] == again.manifest["run_id"]


@pytest.mark.spark
@pytest.mark.parametrize("form", ["wide", "long"])
def test_work_limits_match_polars(spark, tmp_path, form):
    """Rules whose tables pass tables.max_rule_ops, and together tables.max_run_ops: both
    engines build the same tables from the same budget (the per-rule limit for the long ones,
    the run's work running out in rule order), and reject the same rows naming the limit."""
    rng = random.Random(21)
    rules = [[i, "", " ".join(map(str, rng.sample(range(50, 400), 12)))] for i in range(1, 9)]
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"], rules)
    positions = [(rng.randint(1, 8), pid, [rng.randint(0, 100 * (pid % 9)) for _ in range(2)])
                 for pid in range(300)]
    if form == "wide":
        p = write_parquet(tmp_path / "positions.parquet", {
            "rule_set_id": [x[0] for x in positions], "position_id": [x[1] for x in positions],
            "heaps": [x[2] for x in positions]},
            {"rule_set_id": pl.Int64, "position_id": pl.Int64, "heaps": HEAPS})
    else:
        p = write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heap"],
                      [[rid, pid, h] for rid, pid, hs in positions for h in hs])
    limits = {"max_rule_ops": 500 * 212, "max_run_ops": 1_600 * 212, "period_probe_ops": 0}
    expected, _ = run_both(tmp_path, rules=str(r), positions=str(p), tables=limits)
    reasons = outputs(expected)["rejects"]["reason"].to_list()
    for limit in ("max_rule_ops", "max_run_ops"):
        assert any(f"beyond tables.{limit} " in reason for reason in reasons), limit


# ---- finding and reading inputs: line ends, names with glob characters, earlier outputs -------


def _verdicts_by_brute_force(rows: list[tuple[int, int, list[int]]]) -> dict:
    rules = {1: ("subtraction", (2, 5)), 2: ("nim", ())}
    return {(r, p): "W" if wins(*rules[r], heaps) else "L" for r, p, heaps in rows}


def _verdicts(result: RunResult) -> dict:
    frame = outputs(result)["verdicts"]
    return {(r, p): v for r, p, v in frame.select("rule_set_id", "position_id", "verdict")
            .iter_rows()}


@pytest.mark.spark
def test_csv_line_end_styles_and_quoted_breaks_match_polars(spark, tmp_path):
    """CSV files with CR-only, CRLF and mixed line ends, quoted line breaks and a last field
    ending inside its quotes, and a header-only CR file: the same rows in both engines."""
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [[1, "", "2 5"], [2, "nim", ""]])
    rng = random.Random("line-ends")
    d = tmp_path / "positions"
    d.mkdir()
    rows, pid = [], 0
    for name, ends in [("cr", ["\r"]), ("crlf", ["\r\n"]), ("mixed", ["\n", "\r", "\r\n"])]:
        lines = ["rule_set_id,position_id,heaps"]
        for i in range(50):
            heaps = [rng.randrange(14) for _ in range(rng.randrange(4))]
            end = ends[i % len(ends)]
            text = " ".join(map(str, heaps))
            lines.append(f"{1 + pid % 2},{pid},"
                         + [text, f'"{text.replace(" ", end)}"', f'"{text}{end}"',
                            f'"[{text.replace(" ", ",")}]"'][i % 4])
            rows.append((1 + pid % 2, pid, heaps))
            pid += 1
        (d / f"{name}.csv").write_bytes("".join(
            line + ends[i % len(ends)] for i, line in enumerate(lines)).encode())
    (d / "header-only.csv").write_bytes(b"rule_set_id,position_id,heaps\r")
    expected, _ = run_both(tmp_path, rules=str(r), positions=str(d))
    assert expected.exit_code == 0
    assert expected.manifest["counts"]["positions"]["rows_read"] == len(rows)
    assert _verdicts(expected) == _verdicts_by_brute_force(rows)


@pytest.mark.spark
def test_parquet_names_with_glob_characters_are_read_as_named(spark, tmp_path):
    """Spark expands [ ] { } * ? in the paths it is given; a file named with them is read as
    that file, not as the files its name would match."""
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [[1, "", "2 5"], [2, "nim", ""]])
    d = tmp_path / "positions"
    schema = {"rule_set_id": pl.Int64, "position_id": pl.Int64, "heaps": HEAPS}
    rows = {}
    for k, name in enumerate(["pos[1].parquet", "pos1.parquet", "pos{a,b}.parquet",
                              "posa.parquet", "pos?.parquet", "pos\\1.parquet",
                              "pos %5B1%5D.parquet", "t=00:00/pos.parquet"]):
        rows[name] = [(1 + k % 2, 10 * k + j, [k + j, 3]) for j in range(3)]
        write_parquet(d / name, {"rule_set_id": [x[0] for x in rows[name]],
                                 "position_id": [x[1] for x in rows[name]],
                                 "heaps": [x[2] for x in rows[name]]}, schema)
    everything, _ = run_both(tmp_path / "all", rules=str(r), positions=str(d))
    assert _verdicts(everything) == _verdicts_by_brute_force(
        [x for name in rows for x in rows[name]])
    one, _ = run_both(tmp_path / "one", rules=str(r), positions=str(d / "pos[1].parquet"))
    assert _verdicts(one) == _verdicts_by_brute_force(rows["pos[1].parquet"])


@pytest.mark.spark
def test_parquet_file_name_with_a_colon_is_read_by_the_tasks(spark, tmp_path):
    """Hadoop's local file system cannot open a file whose name holds ':' (its checksum
    file's name is no valid path); the tasks read local Parquet themselves, so it is read like
    any other file."""
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"], [[1, "", "2 5"]])
    p = write_parquet(tmp_path / "pos:1.parquet", {"rule_set_id": [1, 1], "position_id": [0, 1],
                                                   "heaps": [[5], [7, 1]]},
                      {"rule_set_id": pl.Int64, "position_id": pl.Int64, "heaps": HEAPS})
    expected, _ = run_both(tmp_path, rules=str(r), positions=str(p))
    assert _verdicts(expected) == _verdicts_by_brute_force([(1, 0, [5]), (1, 1, [7, 1])])


@pytest.mark.spark
def test_outputs_inside_the_positions_folder_are_not_read_back(spark, tmp_path):
    """Both engines write their outputs (Spark's as directories of part files) into the
    positions folder; the next runs read the positions alone."""
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [[1, "", "2 5"], [2, "nim", ""]])
    d = tmp_path / "positions"
    rows = [(1, 0, [5, 12]), (2, 1, [1, 2]), (1, 2, [7])]
    write_csv(d / "part-0.csv", ["rule_set_id", "position_id", "heaps"],
              [[a, b, " ".join(map(str, c))] for a, b, c in rows])
    for _ in range(2):
        expected, _ = run_both(d, rules=str(r), positions=str(d), overwrite=True)
        assert [f["path"] for f in expected.manifest["inputs"]["positions"]] == [
            str(d / "part-0.csv")]
        assert _verdicts(expected) == _verdicts_by_brute_force(rows)


# ---- a real standalone cluster ----------------------------------------------------------------


def readme_block(marker: str) -> str:
    """docs/spark.md's shell lines from the comment line `marker` to the end of that command."""
    lines = (ROOT / "docs" / "spark.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == marker)
    end = start
    while lines[end].endswith("\\") or lines[end].startswith("#") or "=" in lines[end]:
        end += 1
    return "\n".join(lines[start:end + 1])


@pytest.mark.spark
@pytest.mark.slow
def test_readme_spark_submit_on_a_standalone_cluster_matches_polars(tmp_path):
    """A Master and a Worker JVM on 127.0.0.1 run docs/spark.md's spark-submit command: the
    executors run on the worker, and the four tables equal the polars engine's (with rejects)."""
    from spark_servers import StandaloneCluster, spark_env

    rules, positions = inputs_with_rejects(tmp_path, "wide")
    expected = run_job(config_from_dict({"rules": str(rules), "positions": str(positions),
                                         "out": str(tmp_path / "polars")}))
    assert expected.exit_code == 3
    conf = tmp_path / "conf"  # the test's sizes: a 1-core, 512m executor; no web UI
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(
        "spark.executor.memory 512m\nspark.executor.cores 1\nspark.cores.max 1\n"
        "spark.driver.memory 1g\nspark.ui.enabled false\nspark.sql.shuffle.partitions 4\n"
        f"spark.local.dir {tmp_path}\n")
    cluster = StandaloneCluster(tmp_path).start()
    try:
        env = spark_env(SPARK_CONF_DIR=str(conf), MASTER=cluster.url, PY=sys.executable,
                        RULES=str(rules), POSITIONS=str(positions), OUT=str(tmp_path / "spark"))
        done = subprocess.run(["bash", "-euc", readme_block("# a standalone cluster:")],
                              env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 3, done.stderr[-3000:]
        executors = list(cluster.work_dir.glob("app-*/*/stderr"))
        apps = cluster.state().get("completedapps", []) + cluster.state().get("activeapps", [])
    finally:
        cluster.stop()
    assert executors, "no executor ran on the worker"
    assert len(apps) == 1
    assert_same_outputs(tmp_path / "spark", expected.out)
    assert read_outputs(expected.out)["rejects"].height > 5


# ---- Parquet read by the tasks themselves (row groups as units of work) ----------------------


def test_units_cover_each_file_in_whole_row_groups():
    """`plan_units`: every row of every file exactly once, in order, in whole row groups, none
    of more than BATCH_ROWS rows unless one row group is larger."""
    from pipeline.batches import BATCH_ROWS
    from pipeline.engines.spark_tasks import ParquetFile, plan_units

    def info(index, groups):
        return ParquetFile(index, f"f{index}", {}, False, tuple(groups))

    cases = [
        ([info(0, [1 << 20] * 9 + [562_816])], 2),
        ([info(0, [1000] * 30)], 2),
        ([info(0, [700] * 5), info(1, []), info(2, [0, 300, 5]), info(3, [3 << 20])], 4),
        ([info(0, [10] * 100)], 1),
    ]
    for files, slots in cases:
        units = plan_units(files, slots)
        for f in files:
            mine = [u for u in units if u.file == f.index]
            bounds = [0]
            for n in f.row_groups:
                bounds.append(bounds[-1] + n)
            starts = [u.start for u in mine]
            assert starts == sorted(starts) and set(starts) <= set(bounds)
            assert all(u.start + u.rows in bounds for u in mine)
            assert sum(u.rows for u in mine) == bounds[-1]
            assert all(a.start + a.rows == b.start for a, b in zip(mine, mine[1:]))
            assert all(u.rows <= max(BATCH_ROWS, *f.row_groups) for u in mine)
    # m_int: a unit per 2^20-row group; else units of up to total / (4 slots) rows: 3000 of
    # 30,000 on 2 cores; 3,500 and 305 beside a 3M-row group; 250 of 1,000 on one core
    assert [len(plan_units(files, slots)) for files, slots in cases] == [10, 10, 3, 4]


def _grouped_parquet(path: Path, columns: dict, schema: dict, group: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(columns, schema=schema).write_parquet(path, row_group_size=group,
                                                       statistics=group % 2 == 0)
    return path


@pytest.mark.spark
@pytest.mark.parametrize("statistics", [True, False])
def test_row_groups_read_by_tasks_number_rows_and_ids_as_polars(spark, tmp_path, statistics):
    """Three files of several row groups, each group its own task: rejects in later row
    groups name their row in the file, and default position ids run on across groups and
    files, as the polars engine numbers them. With statistics the tables are built before
    the read and rows are evaluated as they are read; without, in a second pass."""
    rng = random.Random(f"units-{statistics}")
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [[1, "", "2 5"], [2, "nim", ""]])
    d = tmp_path / "positions"
    group = 700 if statistics else 701  # odd: no statistics, so no presized tables
    sizes = {"a.parquet": 5 * group - 11, "b.parquet": 3 * group, "c.parquet": 2 * group + 3}
    bad = {name: sorted(rng.sample(range(group, n), 6)) for name, n in sizes.items()}
    want, pid_base = {}, 0
    for name, n in sizes.items():
        rids = [rng.choice([1, 2]) for _ in range(n)]
        heaps = [[rng.randint(0, 30) for _ in range(rng.randint(1, 3))] for _ in range(n)]
        for k, i in enumerate(bad[name]):
            heaps[i] = [4, -1] if k % 2 else [None]
        columns = {"rule_set_id": rids, "heaps": heaps}
        schema = {"rule_set_id": pl.Int64, "heaps": HEAPS}
        pids = list(range(pid_base, pid_base + n))
        if name == "b.parquet":  # ids given: the file's rows still count for c's defaults
            pids = [10_000 + 3 * i for i in range(n)]
            columns, schema = {**columns, "position_id": pids}, {**schema,
                                                                  "position_id": pl.Int64}
        _grouped_parquet(d / name, columns, schema, group)
        want.update({(rids[i], pids[i]): heaps[i] for i in range(n) if i not in bad[name]})
        pid_base += n
    expected, _ = run_both(tmp_path, rules=str(r), positions=str(d))
    assert _verdicts(expected) == _verdicts_by_brute_force(
        [(rid, pid, h) for (rid, pid), h in want.items()])
    rejects = outputs(expected)["rejects"]
    assert sorted(rejects.select("source", "row").iter_rows()) == sorted(
        (str(d / name), i) for name in sizes for i in bad[name])


def _corrupt_page_header(path: Path, row_group: int, fill: bytes) -> None:
    """Overwrite the header of the first data page of `row_group`'s heaps column."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path)
    offset = meta.row_group(row_group).column(1).data_page_offset
    data = bytearray(path.read_bytes())
    data[offset:offset + len(fill)] = fill
    path.write_bytes(bytes(data))


@pytest.mark.spark
def test_a_corrupt_row_group_is_the_polars_engines_error(spark, tmp_path):
    """Row groups 2 and 4 of the second file are corrupt (each unit its own task): the run
    stops with the polars engine's one line for the first of them, exit 1, nothing written."""
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"], [[1, "", "2 5"]])
    d = tmp_path / "positions"
    schema = {"rule_set_id": pl.Int64, "heaps": HEAPS}
    n = 3000
    columns = {"rule_set_id": [1] * n, "heaps": [[i % 9, 2] for i in range(n)]}
    _grouped_parquet(d / "a.parquet", columns, schema, 500)
    p = d / "b.parquet"
    pl.DataFrame(columns, schema=schema).write_parquet(p, row_group_size=500,
                                                       compression="uncompressed")
    _corrupt_page_header(p, 2, b"\xff" * 16)
    _corrupt_page_header(p, 4, b"\x00" * 16)
    lines = {}
    for engine in ("polars", "spark"):
        spark = ["--spark-master", "local[2]"] if engine == "spark" else []
        code, err = invoke(["run", "--engine", engine, *spark, "--rules", r, "--positions", d,
                            "--out", tmp_path / engine], tmp_path)
        assert code == 1, err
        [lines[engine]] = err.strip().splitlines()
        assert not (tmp_path / engine).exists()
    assert lines["spark"] == lines["polars"]
    assert lines["polars"] == (f"snim-batch: error: {p}: not a readable Parquet file "
                               "(parquet: File out of specification: Invalid thrift: bad data)")


@pytest.mark.spark
@pytest.mark.parametrize("form", ["wide", "long"])
def test_list_view_columns_are_read_as_lists_by_the_tasks(spark, tmp_path, form):
    """Parquet list views (polars' reader panics on them) in the rules' moves and the
    positions' heaps, over several row groups each read by their task: the polars engine's
    verdicts, and the brute-force ones."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(f"views-{form}")
    moves = {1: [2, 5], 2: [1, 3, 4], 3: [1]}
    rules = tmp_path / "rules.parquet"
    pq.write_table(pa.table({"rule_set_id": list(moves), "kind": ["subtraction"] * 3,
                             "moves": pa.array(list(moves.values()),
                                               pa.large_list_view(pa.int64()))}), rules)
    rows = [(rng.choice(list(moves)), pid, [rng.randint(0, 40) for _ in range(rng.randint(1, 4))])
            for pid in range(2_000)]
    positions = tmp_path / "positions.parquet"
    if form == "wide":
        table = pa.table({"rule_set_id": [r for r, _, _ in rows],
                          "position_id": [p for _, p, _ in rows],
                          "heaps": pa.array([h for _, _, h in rows], pa.list_view(pa.int64()))})
    else:
        flat = [(r, p, h) for r, p, hs in rows for h in hs]
        table = pa.table({"rule_set_id": [r for r, _, _ in flat],
                          "position_id": [p for _, p, _ in flat],
                          "heap": [h for _, _, h in flat],
                          "note": pa.array([[1]] * len(flat), pa.list_view(pa.int8()))})
    pq.write_table(table, positions, row_group_size=300)
    if form == "long":  # an extra column is refused, as for any other type
        with pytest.raises(InputError, match="unexpected column 'note'"):
            run_job(config_from_dict({"rules": str(rules), "positions": str(positions),
                                      "out": str(tmp_path / "refused"), "engine": "spark"}))
        pq.write_table(table.drop_columns("note"), positions, row_group_size=300)
    expected, _ = run_both(tmp_path, rules=str(rules), positions=str(positions))
    assert _verdicts(expected) == {
        (r, p): "W" if wins("subtraction", tuple(moves[r]), h) else "L" for r, p, h in rows}


@pytest.mark.spark
@pytest.mark.parametrize("keys", ["int", "str"])
def test_spark_joins_summary_sg_tables_and_verdicts_without_a_cast(spark, tmp_path, keys):
    """The Spark engine's outputs, read by Spark: rule_set_id has one type in summary and
    verdicts and sg_tables.rule_set_ids is an array of it, so the joins need no cast."""
    from pyspark.sql import functions as F

    ids = [1, 2, 3] if keys == "int" else ["a", "b", "c"]
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [[ids[0], "", "1 2"], [ids[1], "nim", ""], [ids[2], "", "2 1"]])
    p = write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heaps"],
                  [[ids[0], 0, "4 5"], [ids[1], 1, "6"], [ids[2], 2, "3"]])
    expected, _ = run_both(tmp_path, rules=str(r), positions=str(p))
    out = tmp_path / "out-spark"
    summary = spark.read.parquet(str(out / "summary.parquet"))
    tables = spark.read.parquet(str(out / "sg_tables.parquet"))
    verdicts = spark.read.parquet(str(out / "verdicts.parquet"))
    key_type = "bigint" if keys == "int" else "string"
    assert dict(summary.dtypes)["rule_set_id"] == dict(verdicts.dtypes)["rule_set_id"] == key_type
    assert dict(tables.dtypes)["rule_set_ids"] == f"array<{key_type}>"
    joined = (summary.join(tables.select(F.explode("rule_set_ids").alias("rule_set_id"),
                                         "period_status"), "rule_set_id")
              .join(verdicts.select("rule_set_id", "nim_sum"), "rule_set_id")
              .orderBy("rule_set_id").select("rule_set_id", "period_status", "nim_sum")
              .collect())
    assert [tuple(row) for row in joined] == [(ids[0], "proven", 3), (ids[1], "closed_form", 6),
                                              (ids[2], "proven", 0)]


EXECUTOR_COULD_NOT_WRITE = (
    "An error occurred while calling o409.parquet.\n: org.apache.spark.SparkException: Job "
    "aborted due to stage failure: Task 0 in stage 2.0 failed 4 times, most recent failure: "
    "Lost task 0.3 in stage 2.0 (TID 7) (127.0.0.1 executor 0): java.io.IOException: Mkdirs "
    "failed to create file:/tmp/h/ro/job/.out.partial-1-x/verdicts.parquet/_temporary/0/"
    "_temporary/attempt_2026_0002_m_000000_7 (exists=false, cwd=file:/tmp/h/work/app-1/0)\n"
    "\tat org.apache.hadoop.fs.ChecksumFileSystem.create(ChecksumFileSystem.java:774)\n")


def test_a_write_spark_cannot_make_its_directories_for_is_one_line(spark, tmp_path):
    """Spark's write making its directories where it cannot (here below a file; on a cluster
    or a Connect server: a path its processes cannot write while snim-batch's can): one
    line naming the output file and the directory, with what to check; it was an internal
    error with the Java stack trace."""
    from pipeline.engines.spark_engine import _Job, _unwritable
    from pipeline.errors import WriteFailure

    (tmp_path / "afile").write_text("not a directory\n")
    with pytest.raises(WriteFailure) as info:
        _Job.write(spark.range(3), tmp_path / "afile" / "verdicts.parquet")
    assert str(info.value) == (
        f"verdicts.parquet: Spark could not create file:{tmp_path / 'afile'}/... (its "
        "executors, or a Spark Connect server, must be able to write --out at the same path) "
        "while writing it")
    # a standalone Worker in a mount namespace where the staging directory is read-only
    # (the hunt that found it), its task's error as the driver got it:
    failed = _unwritable("verdicts.parquet", Exception(EXECUTOR_COULD_NOT_WRITE))
    assert failed is not None and str(failed) == (
        "verdicts.parquet: Spark could not create file:/tmp/h/ro/job/.out.partial-1-x/"
        "verdicts.parquet/_temporary/0/_temporary/attempt_2026_0002_m_000000_7 (its "
        "executors, or a Spark Connect server, must be able to write --out at the same path) "
        "while writing it")


@pytest.mark.spark
def test_a_run_failing_on_its_input_leaves_no_jvm_log(tmp_path):
    """The real CLI on Spark with heaps of floats (refused once Spark has started): exit 1
    with the input's error, which names no JVM log, and no `snim-batch-spark-*.log` left in
    the temporary directory (each such failure left one, holding only the JVM's banner)."""
    import os

    write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "1 2"], [2, "1 3"]])
    (tmp_path / "positions").mkdir()
    pl.DataFrame({"rule_set_id": [1, 2], "position_id": [1, 2], "heaps": [[1.5], [2.0]]}
                 ).write_parquet(tmp_path / "positions" / "a.parquet")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    done = subprocess.run(
        [str(CLI_EXE), "run", "--engine", "spark", "--rules", "rules.csv", "--positions",
         "positions", "--out", "out", "--quiet"], cwd=tmp_path, capture_output=True, text=True,
        timeout=300, env={**os.environ, "TMPDIR": str(temporary)})
    assert done.returncode == 1, done.stderr
    assert "column 'heaps' has type" in done.stderr and "log" not in done.stderr, done.stderr
    assert sorted(p.name for p in temporary.glob("snim-batch-spark-*.log")) == []
    assert not (tmp_path / "out").exists()
