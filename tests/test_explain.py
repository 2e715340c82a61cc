"""`snim-batch explain`: what a run would do, from the rules, footers and headers only, through
the installed script (and `plan_run` for the plan's own fields); nothing is ever written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import jsonschema
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import naive_period, on_small_disk, write_csv, write_parquet

from pipeline import explain
from pipeline.config import config_from_dict
from pipeline.explain import (
    BY_VALUES,
    CSV_SAMPLE,
    INT,
    PROCESS_BYTES,
    TEXT,
    VERDICT_BYTES,
    plan_run,
)

SCRIPT = Path(sys.executable).with_name("snim-batch")
PLAN_SCHEMA = jsonschema.Draft202012Validator(json.loads(
    (Path(__file__).resolve().parents[1] / "docs" / "explain-plan.schema.json").read_text()))


def snim(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})


def explained(*args: str, cwd: Path, code: int = 0) -> dict:
    """The plan `explain --json` prints, checked against the schema the docs publish; `code`
    the exit code (a refused output's: the run's, said on stderr as well)."""
    done = snim("explain", *args, "--json", cwd=cwd)
    assert done.returncode == code, done.stderr
    plan = json.loads(done.stdout)
    PLAN_SCHEMA.validate(plan)
    assert done.stderr == ("" if code == 0 else "snim-batch: error: the run would stop at its "
                           f"output: {plan['output']['problem']}\n")
    return plan


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every entry below `root`, hidden ones included, with its size and modification time."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


@pytest.fixture
def wide_parquet(tmp_path: Path) -> Path:
    """Integer keys; rule sets 1 and 3 share S = {1, 3, 4}, 2 is nim, 4 is invalid."""
    write_parquet(tmp_path / "rules.parquet",
                  {"rule_set_id": [1, 2, 3, 4], "kind": ["subtraction", "nim", "", "half"],
                   "moves": [[4, 1, 3], [], [1, 3, 4], [2]]},
                  {"rule_set_id": pl.Int64, "kind": pl.String, "moves": pl.List(pl.Int64)})
    write_parquet(tmp_path / "positions" / "part-0.parquet",
                  {"rule_set_id": [1, 2, 3], "position_id": [10, 11, 12],
                   "heaps": [[5, 17], [], [300]]},
                  {"rule_set_id": pl.Int64, "position_id": pl.Int64, "heaps": pl.List(pl.Int64)})
    write_parquet(tmp_path / "positions" / "part-1.parquet",
                  {"rule_set_id": [1, 3], "position_id": [13, 14], "heaps": [[7], [2, 9]]},
                  {"rule_set_id": pl.Int32, "position_id": pl.Int64, "heaps": pl.List(pl.Int32)})
    return tmp_path


def test_wide_parquet_int_keys_exact_counts_and_nothing_written(wide_parquet: Path) -> None:
    before = tree(wide_parquet)
    plan = explained("--rules", "rules.parquet", "--positions", "positions", "--out", "out",
                     cwd=wide_parquet)
    assert tree(wide_parquet) == before  # nothing written, not even a hidden staging directory
    assert not (wide_parquet / "out").exists()
    assert plan["plan_version"] == 1 and plan["engine"] == "polars"
    rules = plan["rules"]
    assert (rules["rows"], rules["rows_rejected"], rules["rule_sets"],
            rules["distinct_rules"]) == (4, 1, 3, 2)
    assert rules["distinct_by_kind"] == {"nim": 1, "subtraction": 1}
    assert rules["key_type"] == INT
    positions = plan["positions"]
    assert [(Path(f["path"]).name, f["format"], f["rows"], f["rows_exact"], f["largest_heap"])
            for f in positions["files"]] == [("part-0.parquet", "parquet", 3, True, 300),
                                             ("part-1.parquet", "parquet", 2, True, 9)]
    assert (positions["rows"], positions["rows_exact"], positions["form"]) == (5, True, "wide")
    assert (positions["rule_set_id_type"], positions["position_id_type"]) == (INT, INT)
    assert positions["largest_heap"] == 300
    # both files' row groups hold rule sets 1 to 3: each may have heaps up to 300
    assert positions["largest_heap_by_rule_set"] == {"1": 300, "2": 300, "3": 300}
    tables = plan["tables"]
    assert tables["largest_heap"] == 300 and tables["presized"] is True
    assert tables["bounded"] is True
    # heaps up to 300, but the table stops at its period, proven by explain itself
    pre, per, _ = naive_period([1, 3, 4])
    assert tables["rules"] == [{"moves": "{1, 3, 4}", "rule_sets": 2, "largest_heap": 300,
                                "values": pre + per, "ops": (pre + per - 1) * 203,
                                "stopped_by": None, "preperiod": pre, "period": per}]
    assert (tables["values"], tables["ops"], tables["binds"]) == (
        pre + per, (pre + per - 1) * 203, [])
    assert tables["probe_ops"] == 0  # every period is proven: the run needs no probe
    assert plan["output"] == {"location": str(wide_parquet / "out"), "format": "parquet",
                              "overwrite": False, "exists": False, "action": "create",
                              "problem": None, "run_date": None, "replaces_night": None}
    memory = plan["memory"]
    assert memory["process"] == PROCESS_BYTES and memory["verdicts"] == 5 * VERDICT_BYTES
    assert memory["tables"] == 2 * (pre + per)  # a byte a value, and the flat copy beside
    assert memory["batches"] > 0
    assert memory["total"] == sum(memory[k] for k in ("process", "batches", "verdicts",
                                                      "tables"))
    assert memory["scratch"] == 0 and memory["limit"] >= 512 << 20  # auto: held in memory


def test_the_human_plan_says_the_same(wide_parquet: Path) -> None:
    done = snim("explain", "--rules", "rules.parquet", "--positions", "positions", "--out",
                "out", cwd=wide_parquet)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "engine: polars"
    assert lines[1] == ("rules: 1 file, 4 rows (1 rejected): 3 rule sets with 2 distinct rules "
                        "(nim 1, subtraction 1); keys int")
    assert lines[3] == "positions: 2 files, 5 rows, wide form; rule_set_id int, position_id int"
    assert lines[4].startswith(f"  {wide_parquet / 'positions' / 'part-0.parquet'}: parquet, ")
    assert lines[4].endswith(", 3 rows, heaps <= 300")
    assert ("largest heap: 300 (the Parquet statistics); per rule set from the row groups' "
            "rule_set_id ranges: 3 rule sets with heaps, 0 without") in lines
    assert naive_period([1, 3, 4])[:2] == (0, 7)
    assert ("SG tables: 1 subtraction table, at most 7 values (7 bytes) and 1,218 "
            "operations; built at once from the footers' bound") in lines
    assert ("  {1, 3, 4}: 2 rule sets, heaps <= 300, at most 7 values, 1,218 operations, "
            "period 7 from 0 (proven now)") in lines
    assert lines[-2] == (f"output: {wide_parquet / 'out'} (parquet): does not exist; it would "
                         "be created")
    assert lines[-1] == "nothing was run or written"
    (memory,) = [line for line in lines if line.startswith("memory: about ")]
    assert "at peak, an estimate: 200.0 MiB the process, " in memory
    assert memory.endswith(f", {5 * VERDICT_BYTES} bytes verdicts, 14 bytes SG tables")
    assert not (wide_parquet / "out").exists()


def test_long_csv_text_keys(tmp_path: Path) -> None:
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
              [["rs-a", "", "2 5"], ["rs-b", "", "5, 2"], ["rs-c", "half", ""]])
    write_csv(tmp_path / "pos" / "a.csv", ["rule_set_id", "position_id", "heap"],
              [["rs-a", "p1", 4], ["rs-a", "p1", 6], ["rs-b", "p2", 11]])
    (tmp_path / "pos" / "b.csv").write_text("rule_set_id,position_id,heap\n\nrs-c,p3,8\n\n")
    plan = explained("--rules", "rules.csv", "--positions", "pos", "--out", "out", cwd=tmp_path)
    assert not (tmp_path / "out").exists()
    rules = plan["rules"]
    assert (rules["rows"], rules["rule_sets"], rules["distinct_rules"], rules["key_type"]) == (
        3, 3, 2, TEXT)
    positions = plan["positions"]
    assert [(Path(f["path"]).name, f["format"], f["rows"], f["rows_exact"])
            for f in positions["files"]] == [("a.csv", "csv", 3, True), ("b.csv", "csv", 1, True)]
    assert (positions["rows"], positions["rows_exact"], positions["form"]) == (4, True, "long")
    assert (positions["rule_set_id_type"], positions["position_id_type"]) == (BY_VALUES,
                                                                             BY_VALUES)
    assert positions["largest_heap"] is None  # CSV has no statistics
    assert positions["largest_heap_by_rule_set"] is None
    tables = plan["tables"]
    assert tables["presized"] is False and tables["bounded"] is False
    (rule,) = tables["rules"]
    assert (rule["moves"], rule["rule_sets"], rule["largest_heap"]) == ("{2, 5}", 2, None)
    pre, per, _ = naive_period([2, 5])  # the heaps unknown, but the period proven
    assert (rule["values"], rule["preperiod"], rule["period"]) == (pre + per, pre, per)


def test_parquet_text_keys_and_a_uint64_key_beyond_int64(tmp_path: Path) -> None:
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [["1", "1 2"]])
    write_parquet(tmp_path / "p" / "a.parquet",
                  {"rule_set_id": [1, 2**64 - 1], "position_id": ["x", "y"], "heaps": [[1], [2]]},
                  {"rule_set_id": pl.UInt64, "position_id": pl.String, "heaps": pl.List(pl.Int64)})
    write_parquet(tmp_path / "q" / "a.parquet",
                  {"rule_set_id": [1, 2], "position_id": ["x", "y"], "heaps": [[1], [2]]},
                  {"rule_set_id": pl.UInt64, "position_id": pl.Categorical,
                   "heaps": pl.List(pl.Int64)})
    text = explained("--rules", "rules.csv", "--positions", "p", "--out", "o", cwd=tmp_path)
    assert text["positions"]["rule_set_id_type"] == TEXT  # 2^64-1 is text, as in CSV
    assert text["positions"]["position_id_type"] == BY_VALUES
    small = explained("--rules", "rules.csv", "--positions", "q", "--out", "o", cwd=tmp_path)
    assert small["positions"]["rule_set_id_type"] == INT
    assert small["positions"]["position_id_type"] == BY_VALUES
    assert not (tmp_path / "o").exists()


def test_largest_heap_per_rule_set_from_row_groups(tmp_path: Path) -> None:
    """Positions sorted by rule set, two rows a row group: each rule set's own largest heap,
    and each table grown for its own rule sets (the input's bound, 10^6, is too large for the
    tables to be presized)."""
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
              [[1, "", "1 2"], [2, "", "2 1"], [3, "", "3"], [4, "nim", ""], [5, "", "7"]])
    rows = [(1, [100, 4]), (1, [5]), (2, [70_000]), (2, [3]), (3, [500]), (3, []),
            (4, [10**6]), (4, [0])]
    table = pa.table({"rule_set_id": [r for r, _ in rows], "position_id": list(range(8)),
                      "heaps": [h for _, h in rows]})
    (tmp_path / "p").mkdir()
    pq.write_table(table, tmp_path / "p" / "sorted.parquet", row_group_size=2)
    assert pq.read_metadata(tmp_path / "p" / "sorted.parquet").num_row_groups == 4
    plan = explained("--rules", "rules.csv", "--positions", "p", "--out", "o", cwd=tmp_path)
    positions, tables = plan["positions"], plan["tables"]
    assert positions["largest_heap"] == 10**6
    assert positions["largest_heap_by_rule_set"] == {"1": 100, "2": 70_000, "3": 500,
                                                     "4": 10**6, "5": -1}
    assert tables["presized"] is False
    # each table stops at its rule sets' largest heap or at its period, whichever is first
    (p12, q12, _), (p3, q3, _) = naive_period([1, 2]), naive_period([3])
    assert [(r["moves"], r["rule_sets"], r["largest_heap"], r["values"], r["ops"])
            for r in tables["rules"]] == [
        ("{1, 2}", 2, 70_000, p12 + q12, (p12 + q12 - 1) * 202),
        ("{3}", 1, 500, p3 + q3, (p3 + q3 - 1) * 201), ("{7}", 1, -1, 1, 0)]
    assert (tables["values"], tables["ops"]) == (
        p12 + q12 + p3 + q3 + 1, (p12 + q12 - 1) * 202 + (p3 + q3 - 1) * 201)
    human = snim("explain", "--rules", "rules.csv", "--positions", "p", "--out", "o",
                 cwd=tmp_path).stdout
    assert ("largest heap: 1,000,000 (the Parquet statistics); per rule set from the row "
            "groups' rule_set_id ranges: 4 rule sets with heaps, 1 without") in human
    assert (f"  {{1, 2}}: 2 rule sets, heaps <= 70,000, at most {p12 + q12} values, "
            f"{(p12 + q12 - 1) * 202} operations, period {q12} from {p12} (proven now)"
            in human)
    assert not (tmp_path / "o").exists()


def test_a_large_csv_file_is_estimated_and_marked_so(tmp_path: Path) -> None:
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "1 2"]])
    rows = CSV_SAMPLE // 20 * 3  # about 20 bytes a row: three times the sample
    with (tmp_path / "big.csv").open("w") as fh:
        fh.write("rule_set_id,position_id,heaps\n")
        fh.writelines(f"1,{i},{i % 1000} {i % 7}\n" for i in range(rows))
    assert (tmp_path / "big.csv").stat().st_size > CSV_SAMPLE
    plan = explained("--rules", "rules.csv", "--positions", "big.csv", "--out", "o",
                     cwd=tmp_path)
    (file,) = plan["positions"]["files"]
    assert file["rows_exact"] is False and plan["positions"]["rows_exact"] is False
    assert abs(file["rows"] - rows) < rows * 0.1
    done = snim("explain", "--rules", "rules.csv", "--positions", "big.csv", "--out", "o",
                cwd=tmp_path)
    assert "big.csv: csv, " in done.stdout
    assert f"about {file['rows']:,} rows (estimated from its first 4 MiB)" in done.stdout
    assert f"positions: 1 file, about {file['rows']:,} rows (estimated), wide form" in done.stdout


def test_the_replace_flag_and_an_existing_output_untouched(wide_parquet: Path) -> None:
    args = ["--rules", "rules.parquet", "--positions", "positions", "--out", "out"]
    ran = snim("run", *args, cwd=wide_parquet)
    assert ran.returncode == 3, ran.stderr  # rule set 4 is invalid
    before = tree(wide_parquet)
    refused = explained(*args, cwd=wide_parquet, code=1)["output"]
    assert refused == {"location": str(wide_parquet / "out"), "format": "parquet",
                       "overwrite": False, "exists": True, "action": "refused",
                       "problem": f"{wide_parquet / 'out'}: output already exists (pass "
                                  "--overwrite to replace it)", "run_date": None,
                                  "replaces_night": None}
    replaced = explained(*args, "--overwrite", cwd=wide_parquet)["output"]
    assert (replaced["exists"], replaced["overwrite"], replaced["action"],
            replaced["problem"]) == (True, True, "replace", None)
    human = snim("explain", *args, "--overwrite", cwd=wide_parquet)
    assert (f"output: {wide_parquet / 'out'} (parquet): a snim-batch output; it would be "
            "replaced (--overwrite)") in human.stdout
    assert tree(wide_parquet) == before
    (wide_parquet / "empty").mkdir()
    empty = explained("--rules", "rules.parquet", "--positions", "positions", "--out", "empty",
                      cwd=wide_parquet)["output"]
    assert (empty["exists"], empty["action"]) == (True, "fill")
    assert list((wide_parquet / "empty").iterdir()) == []


@pytest.mark.parametrize("args", [
    ["--rules", "nope.csv", "--positions", "positions", "--out", "out"],
    ["--rules", "rules.parquet", "--positions", "nope/*.parquet", "--out", "out"],
    ["--config", "nope.yaml"],
    ["--rules", "rules.parquet", "--positions", "positions", "--out", "out", "--engine", "duck"],
    ["--rules", "rules.parquet", "--positions", "positions", "--out", "out",
     "--run-date", "2026-01-01"],
])
def test_bad_input_gives_what_run_gives(wide_parquet: Path, args: list[str]) -> None:
    ran = snim("run", *args, cwd=wide_parquet)
    explain = snim("explain", *args, cwd=wide_parquet)
    assert ran.returncode in (1, 2)
    said = ran.stderr.replace("snim-batch run ", "snim-batch explain ")  # typer's usage line
    assert (explain.returncode, explain.stderr) == (ran.returncode, said)
    assert explain.stdout == ""
    assert not (wide_parquet / "out").exists()


@pytest.mark.parametrize("tolerance, certain, run_code", [
    ([], True, 1), (["--max-rejected-rows", "1"], True, 1),
    (["--max-rejected-rows", "2"], False, 0), (["--max-rejected-rate", "0.5"], False, 0),
    (["--max-rejected-rate", "0.01"], False, 1)])
def test_a_fail_run_over_its_tolerance_on_the_rules_alone_is_the_runs_error(
        tmp_path: Path, tolerance: list[str], certain: bool, run_code: int) -> None:
    """Under --on-bad-rows fail, rules whose rejected rows alone are over the tolerance fail
    the run whatever the positions hold: explain exited 0 before a run that exited 1. Now it
    exits with the run's error; where the positions may still decide (a rate, a limit not
    reached yet), it plans as before. Two of the three rules rows are rejected (id 1 twice,
    differently); two positions rows of 2 are fine."""
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "2 5"], [1, "3"], [2, "1"]])
    write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heaps"],
              [[2, 0, "5"], [2, 1, "4"]])
    args = ["--rules", "rules.csv", "--positions", "positions.csv", "--out", "out",
            "--on-bad-rows", "fail", *tolerance]
    explain = snim("explain", *args, cwd=tmp_path)
    if certain:
        assert explain.returncode == 1, explain.stderr
        assert explain.stderr.startswith("snim-batch: error: at least 2 input rows failed "
                                         "validation (--on-bad-rows fail")
    else:
        assert explain.returncode == 0, explain.stderr
        assert "rules: 1 file, 3 rows (2 rejected)" in explain.stdout
    assert not (tmp_path / "out").exists()
    ran = snim("run", *args, cwd=tmp_path)
    assert ran.returncode == run_code, ran.stderr
    if certain:  # the same rows named, the first line its own: a Spark run reads on
        assert explain.stderr.splitlines()[0] == (
            f"snim-batch: error: at least 2 input rows failed validation (--on-bad-rows fail"
            f"{', over ' + ' '.join(tolerance) if tolerance else ''}; the rules' alone, "
            "whatever the positions hold); nothing was written")
        assert explain.stderr.splitlines()[1:] == ran.stderr.splitlines()[1:]


def test_heaps_all_negative_are_planned_as_the_rejects_they_are(tmp_path: Path) -> None:
    """Parquet statistics whose largest heap is negative said "largest heap: 0"; the plan
    says the rows are rejects, as the run then makes them."""
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "2 5"]])
    pl.DataFrame({"rule_set_id": [1, 1], "position_id": [0, 1],
                  "heaps": [[-3], [-5, -1]]}).write_parquet(tmp_path / "neg.parquet")
    args = ["--rules", "rules.csv", "--positions", "neg.parquet", "--out", "out"]
    done = snim("explain", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert ("largest heap: -1 (the Parquet statistics): every heap is negative, so every "
            "position with a heap is rejected (out_of_range)") in done.stdout.splitlines()
    ran = snim("run", *args, cwd=tmp_path)
    assert ran.returncode == 3, ran.stderr
    assert pl.read_parquet(tmp_path / "out" / "rejects.parquet")["reason_code"].to_list() == [
        "out_of_range"] * 2


def test_a_positions_file_missing_a_column_is_the_runs_error(tmp_path: Path) -> None:
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "1 2"]])
    write_csv(tmp_path / "pos" / "a.csv", ["rule_set_id", "position_id", "heaps"], [[1, 1, 5]])
    write_csv(tmp_path / "pos" / "b.csv", ["position_id", "heaps"], [[2, 5]])
    args = ["--rules", "rules.csv", "--positions", "pos", "--out", "out"]
    ran, explain = snim("run", *args, cwd=tmp_path), snim("explain", *args, cwd=tmp_path)
    assert ran.returncode == 1 and "missing column 'rule_set_id'" in ran.stderr
    assert (explain.returncode, explain.stderr) == (ran.returncode, ran.stderr)


@pytest.mark.parametrize(("column", "arrow_type", "value"), [
    ("heaps", pa.list_(pa.float64()), [1.5]),
    ("heaps", pa.list_(pa.list_(pa.int64())), [[3]]),
    ("heaps", pa.list_(pa.string()), ["3"]),
    ("heap", pa.float64(), 1.5),
])
def test_a_heap_column_of_a_type_run_refuses_is_the_runs_error(
        tmp_path: Path, column: str, arrow_type: pa.DataType, value: object) -> None:
    """A heaps column whose type the run refuses is explain's error too, word for word
    (explain approved it and printed a plan, the run then exited 1)."""
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "1 2"]])
    pq.write_table(pa.table({"rule_set_id": [1], "position_id": [1],
                             column: pa.array([value], arrow_type)}), tmp_path / "p.parquet")
    args = ["--rules", "rules.csv", "--positions", "p.parquet", "--out", "out"]
    ran, explain = snim("run", *args, cwd=tmp_path), snim("explain", *args, cwd=tmp_path)
    assert ran.returncode == 1 and f"column '{column}' has type" in ran.stderr, ran.stderr
    assert (explain.returncode, explain.stderr, explain.stdout) == (1, ran.stderr, "")


def test_a_uint64_heap_beyond_int64_is_planned_not_an_internal_error(tmp_path: Path) -> None:
    """A uint64 heap past 2^63-1 (a row the run rejects): explain plans the run (it raised
    OverflowError with integer rule ids), and the run rejects that row."""
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "2 5"]])
    pq.write_table(pa.table({"rule_set_id": [1, 1], "position_id": ["a", "b"],
                             "heaps": pa.array([[2**64 - 1], [3]], pa.list_(pa.uint64()))}),
                   tmp_path / "p.parquet")
    args = ["--rules", "rules.csv", "--positions", "p.parquet", "--out", "out"]
    plan = explained(*args, cwd=tmp_path)
    assert plan["positions"]["rows"] == 2
    ran = snim("run", *args, cwd=tmp_path)
    assert ran.returncode == 3 and "is larger than 2^63-1" in ran.stderr


def test_limits_against_the_tables(wide_parquet: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """With no period proven (explain's probe given no work), the limits decide; a proven
    period lifts a rule's own limit."""
    def plan(tables: dict) -> dict:
        config = config_from_dict({"rules": "rules.parquet", "positions": "positions",
                                   "out": "out", "tables": tables}, "test", wide_parquet)
        return plan_run(config).as_dict()["tables"]

    pre, per, _ = naive_period([1, 3, 4])
    proven = plan({"max_rule_ops": 100 * 203})
    assert proven["rules"][0]["stopped_by"] is None
    assert (proven["rules"][0]["values"], proven["stopped_by_own_limit"]) == (pre + per, 0)
    monkeypatch.setattr(explain, "PERIOD_PROBE_OPS", 0)
    own = plan({"max_rule_ops": 100 * 203})  # 101 values: heap 300 needs 301
    assert own["rules"][0]["stopped_by"] == "tables.max_rule_ops"
    assert (own["rules"][0]["values"], own["stopped_by_own_limit"]) == (101, 1)
    assert own["presized"] is False and own["binds"] == []
    short = plan({"max_table_len": 50})
    assert short["rules"][0]["stopped_by"] == "tables.max_table_len"
    assert short["rules"][0]["values"] == 50
    run_wide = plan({"max_total_values": 200, "max_run_ops": 1000})
    assert run_wide["binds"] == ["tables.max_total_values", "tables.max_run_ops"]
    assert (run_wide["values"], run_wide["ops"]) == (200, 1000)
    assert run_wide["rules"][0]["stopped_by"] is None
    assert run_wide["presized"] is False


def test_spark_and_delta_are_planned_without_starting_them(wide_parquet: Path) -> None:
    spark = explained("--rules", "rules.parquet", "--positions", "positions", "--out", "out",
                      "--engine", "spark", cwd=wide_parquet)
    assert spark["engine"] == "spark" and spark["memory"] is None
    hdfs = snim("explain", "--rules", "rules.parquet", "--positions", "hdfs://nn:9000/p",
                "--out", "out", "--engine", "spark", cwd=wide_parquet)
    assert (hdfs.returncode, hdfs.stderr) == (2, (
        "snim-batch: error: hdfs://nn:9000/p: explain does not plan hdfs:// positions, which "
        "only a Spark session reaches (the run starts one; explain starts none)\n"))
    pytest.importorskip("deltalake")
    delta = explained("--rules", "rules.parquet", "--positions", "positions", "--out", "tables",
                      "--format", "delta", "--run-date", "2026-03-04", cwd=wide_parquet)
    assert delta["output"]["action"] == "add night"
    assert delta["output"]["run_date"] == "2026-03-04"
    assert delta["output"]["replaces_night"] is False
    assert not (wide_parquet / "tables").exists()


def test_explain_says_whether_a_delta_night_is_new_or_replaced(wide_parquet: Path) -> None:
    """A root holding the night 2026-03-04: explain of that night says its rows would be
    replaced; of another night, that it would be added (it said "replacing an earlier run
    of that night" for any night once the root existed; QA)."""
    args = ["--rules", "rules.parquet", "--positions", "positions", "--out", "tables",
            "--format", "delta"]
    assert snim("run", *args, "--run-date", "2026-03-04", cwd=wide_parquet).returncode == 3
    for night, replaces, said in (
            ("2026-03-04", True, "the night 2026-03-04 would replace the rows an earlier run "
                                 "of that night left"),
            ("2026-03-05", False, "the night 2026-03-05 would be added")):
        plan = explained(*args, "--run-date", night, cwd=wide_parquet)["output"]
        assert (plan["action"], plan["exists"], plan["replaces_night"]) == (
            "add night", True, replaces)
        text = snim("explain", *args, "--run-date", night, cwd=wide_parquet)
        assert text.stdout.splitlines()[-2] == (
            f"output: {wide_parquet / 'tables'} (delta): Delta tables; {said}")


def test_explain_refuses_a_delta_night_of_text_keys_on_a_root_of_integer_keys(
        tmp_path: Path) -> None:
    """A root whose verdicts hold integer rule set ids, and a night whose rules have text ids
    only: the run does all its work and is refused at its commit; explain said "would be
    added", exit 0 (QA). It now says the run's refusal, exit 1; a night of integer ids is
    still added."""
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "1 2"]])
    write_csv(tmp_path / "text_rules.csv", ["rule_set_id", "moves"], [["r-1", "1 2"]])
    write_csv(tmp_path / "p.csv", ["rule_set_id", "position_id", "heaps"], [[1, 1, "5"]])
    write_csv(tmp_path / "text_p.csv", ["rule_set_id", "position_id", "heaps"],
              [["r-1", 1, "5"]])
    root = ["--out", "tables", "--format", "delta"]
    first = snim("run", "--rules", "rules.csv", "--positions", "p.csv", *root,
                 "--run-date", "2026-03-04", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    night = ["--rules", "text_rules.csv", "--positions", "text_p.csv", *root,
             "--run-date", "2026-03-05"]
    problem = (f"{tmp_path / 'tables'}/verdicts: this run's columns do not fit the table: "
               "rule_set_id (integer in the table, text in this run); key columns are "
               "integers only when every key of the run is one. Write this run to another "
               "table root; nothing was written")
    plan = explained(*night, cwd=tmp_path, code=1)["output"]
    assert (plan["action"], plan["problem"]) == ("refused", problem)
    ran = snim("run", *night, cwd=tmp_path)
    assert ran.returncode == 1 and problem in ran.stderr, ran.stderr
    integers = explained("--rules", "rules.csv", "--positions", "p.csv", *root,
                         "--run-date", "2026-03-05", cwd=tmp_path)["output"]
    assert integers["action"] == "add night"
    # one text key among integer ones (a rejected rule's too): the verdicts keep integer ids,
    # the summary, which lists every rule set, has them as text (review: explain said "would
    # be added", exit 0)
    for extra in (["a", "1..3"], ["07", "2"], ["abc", "x"]):
        write_csv(tmp_path / "mixed.csv", ["rule_set_id", "moves"], [[1, "1 2"], extra])
        night = ["--rules", "mixed.csv", "--positions", "p.csv", *root, "--run-date",
                 "2026-03-06"]
        plan = explained(*night, cwd=tmp_path, code=1)["output"]
        assert plan["problem"].startswith(f"{tmp_path / 'tables'}/summary: this run's columns "
                                          "do not fit the table: rule_set_id (integer in the "
                                          "table, text in this run)"), plan["problem"]
        ran = snim("run", *night, cwd=tmp_path)
        assert ran.returncode == 1 and plan["problem"] in ran.stderr, ran.stderr


def test_explain_warns_of_the_compressed_files_the_run_would_skip(tmp_path: Path) -> None:
    """The run warns which files named as compressed its listings skip; explain, the
    preflight, said nothing of them (QA): its plan lists the same warnings, in --json and
    in its text."""
    import gzip

    write_csv(tmp_path / "r" / "rules.csv", ["rule_set_id", "moves"], [[1, "1 2"]])
    (tmp_path / "r" / "old.csv.gz").write_bytes(gzip.compress(b"rule_set_id,moves\n"))
    write_csv(tmp_path / "in" / "a.csv", ["rule_set_id", "position_id", "heaps"], [[1, 1, "5"]])
    (tmp_path / "in" / "b.csv.gz").write_bytes(gzip.compress(b"rule_set_id,position_id,heaps\n"))
    args = ["--rules", "r", "--positions", "in", "--out", "out"]
    said = [f"rules input {tmp_path}/r: skipped 1 file named as compressed "
            f"({tmp_path}/r/old.csv.gz): a listing reads only .parquet, .pq and .csv files; "
            "decompress it to read its rows (or name it as an input itself, if it is plain "
            "text)",
            f"positions input {tmp_path}/in: skipped 1 file named as compressed "
            f"({tmp_path}/in/b.csv.gz): a listing reads only .parquet, .pq and .csv files; "
            "decompress it to read its rows (or name it as an input itself, if it is plain "
            "text)"]
    assert explained(*args, cwd=tmp_path)["warnings"] == said
    text = snim("explain", *args, cwd=tmp_path).stdout.splitlines()
    assert text[-3:] == [f"warning: {said[0]}", f"warning: {said[1]}",
                         "nothing was run or written"]
    ran = snim("run", *args, cwd=tmp_path)
    assert [line.removeprefix("snim-batch: warning: ") for line in ran.stderr.splitlines()
            if "named as compressed" in line] == said, ran.stderr


def test_explain_takes_runs_options() -> None:
    """`explain` takes every option of `run`, with its help, so that a run's command line
    can be given to it as it is; those that only shape what a run reports say they are
    ignored; and --json, its own."""
    from typer.main import get_command

    from pipeline.cli import app

    group = get_command(app)
    options = {command: {tuple(p.opts): p.help for p in group.commands[command].params}
               for command in ("run", "explain")}
    assert options["explain"].pop(("--json",)) and options["run"].pop(("--json",))
    assert options["explain"].keys() == options["run"].keys()
    ignored = {("--quiet",), ("--progress-every",)}
    for opts, help_text in options["explain"].items():
        if opts in ignored:
            assert help_text.endswith("and ignored: explain writes nothing and shows no "
                                      "progress."), opts
        elif opts == ("--result-file",):
            assert help_text.startswith("Checked as run checks it"), help_text
        else:
            assert help_text == options["run"][opts], opts


def test_explain_refuses_a_result_file_and_a_delta_root_as_the_run_does(wide_parquet: Path
                                                                         ) -> None:
    """A preflight stops where the run stops before any work (QA): a --result-file the run
    refuses (inside an output, or the positions file itself: exit 2), and a Delta root below
    a file (exit 1), each with the run's own message."""
    args = ["--rules", "rules.parquet", "--positions", "positions", "--out", "out"]
    assert snim("run", *args, cwd=wide_parquet).returncode == 3  # the fixture's rule 4
    (wide_parquet / "afile").write_text("not a directory\n")
    cases = [[*args, "--overwrite", "--result-file", "out/r.json"],
             [*args, "--overwrite", "--result-file", "positions/part-0.parquet"],
             ["--rules", "rules.parquet", "--positions", "positions", "--out", "afile/t",
              "--format", "delta"]]
    for case in cases:
        ran, explained_ = (snim(command, *case, cwd=wide_parquet)
                           for command in ("run", "explain"))
        assert ran.returncode in (1, 2), ran.stderr
        assert explained_.returncode == ran.returncode, (case, explained_.stderr, ran.stderr)
        said = ran.stderr.removeprefix("snim-batch: error: ")
        assert explained_.stderr.endswith(said) or said.split(" while ")[0] in \
            explained_.stderr, (explained_.stderr, ran.stderr)


@pytest.mark.parametrize("shape", ["int ids, csv", "uuid ids, parquet", "long int ids, csv"])
def test_explain_says_whether_the_run_spills_under_its_memory_setting(
        wide_parquet: Path, tmp_path: Path, shape: str) -> None:
    """With the run's own --memory-limit (and the rest of its command line, --quiet and
    --result-file included, which explain ignores), across settings on both sides of where
    the run starts to spill: where explain says "yes" the run spills its sorted runs, where
    it says "no" it does not ("near the setting": either), with scratch and the verdicts held
    capped where it may spill."""
    n = 20_000
    ids = ([str(uuid.UUID(int=i * 7919 + 13)) for i in range(n)] if shape.startswith("uuid")
           else list(range(n)))
    rows = {"rule_set_id": [1 + i % 3 for i in range(n)], "position_id": ids,
            "heaps": [[i % 50, 3] for i in range(n)]}
    if shape.startswith("long"):  # a row a heap: its rows are not its positions' count
        positions = tmp_path / "positions.csv"
        write_csv(positions, ["rule_set_id", "position_id", "heap"],
                  [[r, p, x] for r, p, h in zip(*rows.values()) for x in h])
    elif shape.endswith("csv"):
        positions = tmp_path / "positions.csv"
        write_csv(positions, ["rule_set_id", "position_id", "heaps"],
                  [[r, p, " ".join(map(str, h))] for r, p, h in zip(*rows.values())])
    else:
        positions = tmp_path / "positions.parquet"
        pl.DataFrame(rows).write_parquet(positions)
    said = {}
    for setting in ("64KiB", "1MiB", "2MiB", "4MiB", "8MiB", "3GiB"):
        args = ["--rules", str(wide_parquet / "rules.parquet"), "--positions", str(positions),
                "--out", str(tmp_path / "out"), "--memory-limit", setting, "--overwrite"]
        memory = explained(*args, "--quiet", "--result-file", str(tmp_path / "r.json"),
                           cwd=tmp_path)["memory"]
        assert not (tmp_path / "r.json").exists()
        ran = snim("run", *args, "--verbose", cwd=tmp_path)
        assert ran.returncode == 3, ran.stderr  # the fixture's invalid rule 4
        spilled = "verdicts: run 1 of " in ran.stderr
        said[setting] = (memory["spill"], spilled)
        if memory["spill"] != "near the setting":
            assert (memory["spill"] == "yes") == spilled, (setting, memory)
        assert (memory["scratch"] > 0) == (memory["spill"] != "no")
        if memory["spill"] != "no":
            assert memory["verdicts"] <= 3 * memory["limit"] // 8
    surely = "near the setting" if shape.startswith("long") else "yes"
    assert said["64KiB"] == (surely, True) and said["3GiB"] == ("no", False), said


def test_inputs_and_output_in_an_object_store(s3, wide_parquet: Path) -> None:
    """Footers read by range from S3, and the output's state read from its manifest: nothing
    is written to the bucket."""
    client = s3.client()
    client.upload_file(str(wide_parquet / "rules.parquet"), "bkt", "in/rules.parquet")
    for name in ("part-0.parquet", "part-1.parquet"):
        client.upload_file(str(wide_parquet / "positions" / name), "bkt", f"in/pos/{name}")
    config = wide_parquet / "config.yaml"
    config.write_text("rules: s3://bkt/in/rules.parquet\npositions: s3://bkt/in/pos\n"
                      "out: s3://bkt/out\nstorage_options:\n" + "".join(
                          f"  {k}: '{v}'\n" for k, v in s3.storage_options().items()))

    def objects() -> dict[str, str]:
        listed = client.list_objects_v2(Bucket="bkt").get("Contents", [])
        return {o["Key"]: o["ETag"] for o in listed}

    before = objects()
    plan = explained("--config", str(config), cwd=wide_parquet)
    assert objects() == before
    positions = plan["positions"]
    assert [(f["path"], f["rows"], f["rows_exact"], f["largest_heap"])
            for f in positions["files"]] == [("s3://bkt/in/pos/part-0.parquet", 3, True, 300),
                                             ("s3://bkt/in/pos/part-1.parquet", 2, True, 9)]
    assert (plan["rules"]["rule_sets"], positions["form"], positions["largest_heap"]) == (
        3, "wide", 300)
    assert plan["output"]["action"] == "create" and plan["output"]["exists"] is False
    ran = snim("run", "--config", str(config), cwd=wide_parquet)
    assert ran.returncode == 3, ran.stderr
    before = objects()
    refused = explained("--config", str(config), cwd=wide_parquet, code=1)["output"]
    assert (refused["action"], refused["exists"], refused["problem"]) == (
        "refused", None, "s3://bkt/out: output already exists (pass --overwrite to replace it)")
    replaced = explained("--config", str(config), "--overwrite", cwd=wide_parquet)["output"]
    assert (replaced["action"], replaced["exists"]) == ("replace", True)
    assert objects() == before


def test_the_published_schema_refuses_a_plan_it_does_not_describe(wide_parquet: Path) -> None:
    plan = explained("--rules", "rules.parquet", "--positions", "positions", "--out", "out",
                     cwd=wide_parquet)
    for broken in ({**plan, "plan_version": 2}, {**plan, "extra": 1},
                   {**plan, "output": {**plan["output"], "action": "overwrite"}}):
        with pytest.raises(jsonschema.ValidationError):
            PLAN_SCHEMA.validate(broken)


def test_an_output_inside_an_output_is_refused_with_the_run_s_usage_code(
        wide_parquet: Path) -> None:
    """A preflight `explain && run` stops where the run would: exit 2 for an --out inside an
    existing output, the plan still printed whole."""
    args = ["--rules", "rules.parquet", "--positions", "positions"]
    assert snim("run", *args, "--out", "out", cwd=wide_parquet).returncode == 3
    output = explained(*args, "--out", "out/night", cwd=wide_parquet, code=2)["output"]
    assert (output["action"], output["exists"]) == ("refused", False)
    assert output["problem"].startswith(f"{wide_parquet / 'out' / 'night'}: is inside the "
                                        f"snim-batch output {wide_parquet / 'out'}")
    assert not (wide_parquet / "out" / "night").exists()


def test_an_unreadable_input_and_a_refused_output_exit_as_the_run_does(wide_parquet: Path
                                                                         ) -> None:
    """The run refuses its output before it reads a row: with a missing positions input as
    well, explain says the output's error and exits with its code (2), as the run does."""
    args = ["--rules", "rules.parquet", "--positions", "positions"]
    assert snim("run", *args, "--out", "out", cwd=wide_parquet).returncode == 3
    both = ["--rules", "rules.parquet", "--positions", "gone.csv", "--out", "out/night"]
    ran, explained_ = (snim(command, *both, cwd=wide_parquet) for command in ("run", "explain"))
    assert (explained_.returncode, explained_.stderr) == (ran.returncode, ran.stderr) == (
        2, ran.stderr)
    assert "is inside the snim-batch output" in ran.stderr


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_an_output_on_a_read_only_file_system_is_refused_as_the_run_refuses_it(
        tmp_path: Path, fmt: str) -> None:
    """A preflight on a read-only mount (a container's read-only root, a mount gone
    read-only): explain exits 1 saying why, as the run then does at once; before, explain
    said the output would be created and exited 0 (QA)."""
    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    out = tmp_path / "disk" / "nightly" / "out"
    args = ["--rules", str(sample / "rules.csv"), "--positions", str(sample / "positions.csv"),
            "--out", str(out), "--format", fmt]
    _, explained_, ran = on_small_disk(tmp_path, "size=1m", [
        ["read-only"], ["explain", *args], ["run", *args]])
    said = (f"{out}: read-only file system while creating the directory {out.parent}; "
            "nothing was written\n")
    assert explained_ == [1, f"snim-batch: error: the run would stop at its output: {said}"]
    if fmt == "parquet":
        assert ran == [1, f"snim-batch: error: {said}"]
    else:  # the Delta staging directory is made with its parents, in one step
        assert ran[0] == 1
        assert ran[1].startswith(f"snim-batch: error: {out}: read-only file system while "
                                 f"creating the staging directory {out.parent}/"), ran[1]


def test_a_linked_output_is_judged_where_the_run_writes_it(tmp_path: Path) -> None:
    """--out a symbolic link: the run stages beside what the link points to, so explain
    judges that place. A link on a read-only mount to a writable directory passes, and the run
    writes there; a link in a writable directory into a read-only mount is refused by both."""
    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    disk, writable = tmp_path / "disk", tmp_path / "w"
    writable.mkdir()
    (tmp_path / "into-ro").symlink_to(disk / "real")

    def args(out: Path) -> list[str]:
        return ["--rules", str(sample / "rules.csv"), "--positions",
                str(sample / "positions.csv"), "--out", str(out)]

    results = on_small_disk(tmp_path, "size=1m", [
        ["symlink", "out-link", str(writable / "real")], ["read-only"],
        ["explain", *args(disk / "out-link")], ["run", *args(disk / "out-link")],
        ["explain", *args(tmp_path / "into-ro")], ["run", *args(tmp_path / "into-ro")]])
    _, _, (explained_code, _), ran_out, (refused_code, refused), ran_in = results
    assert (explained_code, ran_out) == (0, [0, ""])
    assert (writable / "real" / "manifest.json").is_file()
    said = (f"{tmp_path / 'into-ro'} (a link to {disk / 'real'}): read-only file system while "
            f"creating the staging directory in {disk}; nothing was written\n")
    assert (refused_code, refused) == (1, f"snim-batch: error: the run would stop at its "
                                          f"output: {said}")
    assert ran_in[0] == 1 and "read-only file system while creating the staging directory" \
        in ran_in[1], ran_in


def test_a_result_file_on_a_read_only_mount_is_refused_before_any_work(tmp_path: Path) -> None:
    """A --result-file the run could not write: refused up front, exit 2, by the run and by
    explain alike (QA: explain passed it, and the run committed its output, then exited 1
    with the night's result unwritten)."""
    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    disk, out = tmp_path / "disk", tmp_path / "out"
    args = ["--rules", str(sample / "rules.csv"), "--positions", str(sample / "positions.csv"),
            "--out", str(out), "--result-file", str(disk / "r.json")]
    _, (explain_code, explain_err), ran = on_small_disk(tmp_path, "size=1m", [
        ["read-only"], ["explain", *args], ["run", *args]])
    assert ran == [2, explain_err] and explain_code == 2
    assert explain_err.startswith("snim-batch: error: --result-file '"), explain_err
    assert explain_err.endswith("r.json': its directory cannot be written (read-only file "
                                "system)\n"), explain_err
    assert not out.exists()


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
@pytest.mark.parametrize("name", ["a" * 250, "c" * 256, "/".join(["d" * 200] * 21)],
                         ids=["staging-name-too-long", "name-too-long", "path-too-long"])
def test_an_output_whose_names_the_run_refuses_is_refused_by_explain_alike(
        tmp_path: Path, fmt: str, name: str) -> None:
    """An --out of 250 bytes (its staging name would pass 255), of 256 bytes, or a path of
    4,200 bytes: explain exits 2 with the run's own message (it said the output would be
    created, or "a name in this path is too long", exit 1, with no plan)."""
    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    args = ["--rules", str(sample / "rules.csv"), "--positions", str(sample / "positions.csv"),
            "--out", name, "--format", fmt]
    ran = snim("run", *args, cwd=tmp_path)
    assert ran.returncode == 2, ran.stderr
    plan = explained(*args, cwd=tmp_path, code=2)
    assert plan["output"]["action"] == "refused"
    assert f"snim-batch: error: {plan['output']['problem']}\n" == ran.stderr
    assert sorted(tmp_path.iterdir()) == []
