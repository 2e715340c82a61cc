"""One rule_set_id type across verdicts, summary and sg_tables (a list of it), so that they
join without a cast in polars and DuckDB, in Parquet and in Delta; sg_tables'
`period_status`."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from conftest import invoke, read_outputs, write_csv

KEYS = {"int": [1, 2, 3, 4], "text": ["a", "b", "c", "d"]}


def job(where: Path, keys: str, *options: str) -> dict[str, pl.DataFrame]:
    """Rules: S={1,2} twice (one table), nim, half; a position per rule set, and one row
    rejected for an unknown rule set."""
    k = KEYS[keys]
    write_csv(where / "rules.csv", ["rule_set_id", "kind", "moves"],
              [[k[0], "", "1 2"], [k[1], "nim", ""], [k[2], "", "2,1"], [k[3], "half", ""]])
    write_csv(where / "positions.csv", ["rule_set_id", "position_id", "heaps"],
              [[k[0], 0, "4 5"], [k[1], 1, "6"], [k[2], 2, "3"], [k[3], 3, "5"],
               ["zz", 4, "1"]])
    code, err = invoke(["run", "--rules", "rules.csv", "--positions", "positions.csv", "--out",
                        "out", "--max-rejected-rows", "1", *options], where)
    assert code == 0, err
    return {} if "delta" in options else read_outputs(where / "out")


@pytest.mark.parametrize("keys", ["int", "text"])
def test_summary_sg_tables_and_verdicts_join_without_a_cast_in_polars(tmp_path, keys):
    o = job(tmp_path, keys)
    k = KEYS[keys]
    dtype = pl.Int64 if keys == "int" else pl.String
    assert o["verdicts"].schema["rule_set_id"] == dtype
    assert o["summary"].schema["rule_set_id"] == dtype
    assert o["sg_tables"].schema["rule_set_ids"] == pl.List(dtype)
    tables = o["sg_tables"].explode("rule_set_ids").rename({"rule_set_ids": "rule_set_id"})
    joined = o["summary"].join(tables, on="rule_set_id").sort("rule_set_id")
    assert joined.select("rule_set_id", "positions", "kind", "period_status").rows() == [
        (k[0], 1, "subtraction", "proven"), (k[1], 1, "nim", "closed_form"),
        (k[2], 1, "subtraction", "proven"), (k[3], 1, "half", "closed_form")]
    # the unknown rule set "zz" is no integer key: with integer keys it has no summary row
    assert o["summary"].height == (4 if keys == "int" else 5)
    verdicts = o["verdicts"].join(o["summary"], on="rule_set_id").sort("rule_set_id")
    # SG for S={1,2} is x mod 3: 4 5 -> 1 ^ 2 = 3; nim 6 -> 6; 3 -> 0; half(5) = 1
    assert verdicts.select("rule_set_id", "nim_sum", "verdict", "W").rows() == [
        (k[0], 3, "W", 1), (k[1], 6, "W", 1), (k[2], 0, "L", 0), (k[3], 1, "W", 1)]


@pytest.mark.parametrize("keys", ["int", "text"])
def test_the_same_joins_in_duckdb_sql_on_the_parquet_files(tmp_path, keys):
    job(tmp_path, keys)
    out = tmp_path / "out"
    con = duckdb.connect()
    types = {name: con.sql(f"SELECT typeof(rule_set_id) FROM '{out}/{name}.parquet' LIMIT 1"
                           ).fetchone()[0] for name in ("verdicts", "summary")}
    listed = con.sql(f"SELECT typeof(rule_set_ids) FROM '{out}/sg_tables.parquet' LIMIT 1"
                     ).fetchone()[0]
    key = "BIGINT" if keys == "int" else "VARCHAR"
    assert (types, listed) == ({"verdicts": key, "summary": key}, f"{key}[]")
    rows = con.sql(f"""
        SELECT s.rule_set_id, t.kind, t.period, t.period_status, v.nim_sum
        FROM '{out}/summary.parquet' s
        JOIN (SELECT unnest(rule_set_ids) AS rule_set_id, kind, period, period_status
              FROM '{out}/sg_tables.parquet') t ON s.rule_set_id = t.rule_set_id
        JOIN '{out}/verdicts.parquet' v ON v.rule_set_id = s.rule_set_id
        ORDER BY s.rule_set_id""").fetchall()
    k = KEYS[keys]
    assert rows == [(k[0], "subtraction", 3, "proven", 3), (k[1], "nim", None, "closed_form", 6),
                    (k[2], "subtraction", 3, "proven", 0), (k[3], "half", None, "closed_form", 1)]


def test_period_status_says_why_period_is_null(tmp_path):
    """S={1,2}: SG = 0 1 2 0 1 2 ..., period 3 from 0 (its windows of 2 repeat at 2 and 5);
    nim and half: closed forms; S={2,9} at heap 50 with tables of 5 values: stopped by the
    limit; S={3,4} at heap 1 with no probe budget: not found within it."""
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
              [[1, "", "1 2"], [2, "nim", ""], [3, "half", ""], [4, "", "2 9"], [5, "", "3 4"]])
    write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heaps"],
              [[1, 0, "4"], [2, 1, "9"], [3, 2, "9"], [4, 3, "50"], [4, 4, "1"], [5, 5, "1"]])
    (tmp_path / "config.yaml").write_text("tables:\n  max_table_len: 5\n"
                                          "  period_probe_ops: 0\n")
    code, err = invoke(["run", "--config", "config.yaml", "--rules", "rules.csv",
                        "--positions", "positions.csv", "--out", "out"], tmp_path)
    assert code == 3, err
    o = read_outputs(tmp_path / "out")
    assert o["sg_tables"].columns == ["kind", "moves", "rule_set_ids", "preperiod", "period",
                                      "period_status", "table_len", "stopped_by"]
    assert o["sg_tables"].rows() == [
        ("half", [], [3], None, None, "closed_form", 0, None),
        ("nim", [], [2], None, None, "closed_form", 0, None),
        ("subtraction", [1, 2], [1], 0, 3, "proven", 3, None),
        ("subtraction", [2, 9], [4], None, None, "table_stopped_by_limit", 5,
         "tables.max_table_len"),
        ("subtraction", [3, 4], [5], None, None, "not_found_within_budget", 2, None),
    ]
    assert o["rejects"].select("rule_set_id", "reason_code").rows() == [("4", "beyond_table_limit")]
    code, err = invoke(["report", "out"], tmp_path)
    assert code == 0, err
    page = (tmp_path / "out" / "report.html").read_text()
    assert ("<tr><td class=l>not_found_within_budget</td><td>1</td><td class=l>no period "
            "showed within the values the data needed and tables.period_probe_ops spent past "
            "them; every heap of the data was looked up</td></tr>") in page
    assert "<tr><td class=l>closed_form</td><td>2</td>" in page


def test_delta_sg_tables_keep_the_key_type_of_their_first_night(tmp_path):
    """A text-key table takes a night of integer keys as their text (lists too); an
    integer-key table refuses a night of text keys, naming the column and both types."""
    from deltalake import DeltaTable

    from pipeline.errors import OutputError
    from pipeline.io.outputs import delta, delta_tables

    root = tmp_path / "tables"
    for keys, night in (("text", "2026-11-01"), ("int", "2026-11-02")):
        where = tmp_path / keys
        where.mkdir()
        job(where, keys, "--format", "delta", "--out", str(root), "--run-date", night)
    runs = pl.from_arrow(DeltaTable(str(root / "runs")).to_pyarrow_table()).sort("run_date")
    assert [json.loads(r)["by_reason_code"] for r in runs["rejects"]] == [
        {"unknown_rule_set": 1}] * 2
    assert json.loads(runs["rejects"][1])["decision"] == "within_tolerance"
    code, err = invoke(["report", str(root)], tmp_path)
    assert code == 0, err
    page = (root / "report.html").read_text()
    assert ("1 rows rejected (11.11% of the rows read); tolerance max_rejected_rows 1: within "
            "the tolerance: the run succeeded.") in page
    assert "<tr><td class=l>unknown_rule_set</td><td>1</td></tr>" in page
    tables = pl.from_arrow(DeltaTable(str(root / "sg_tables")).to_pyarrow_table())
    assert tables.schema["rule_set_ids"] == pl.List(pl.String)
    assert sorted(tables.filter(pl.col("kind") == "nim")["rule_set_ids"].to_list()) == [
        ["2"], ["b"]]

    int_root = tmp_path / "int_tables"
    where = tmp_path / "int2"
    where.mkdir()
    job(where, "int", "--format", "delta", "--out", str(int_root), "--run-date", "2026-11-01")
    text_lists = pa.table({"kind": ["nim"], "rule_set_ids": [["b"]]})
    with pytest.raises(OutputError) as raised:
        delta._plan_frame(delta_tables.TableRoot(str(int_root)), "sg_tables", text_lists)
    assert str(raised.value).startswith(
        f"{int_root}/sg_tables: this run's columns do not fit the table: rule_set_ids (list "
        "of integer in the table, list of text in this run)")



def test_text_rule_keys_with_integer_verdict_keys_are_the_one_case_that_needs_a_cast(tmp_path):
    """By design a text id in the rules ("a") does not make the positions' integer keys
    text (tests/test_run.py: the evaluated rows decide): verdicts keep integer keys, while
    summary and sg_tables hold the rules' text keys. docs/outputs.md names this case."""
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [["a", "1 2"], [10, "1"],
                                                                 [9, "1 2"]])
    write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heaps"],
              [[9, 0, "4"], [10, 1, "3"], [9, 2, "3"]])
    code, err = invoke(["run", "--rules", "rules.csv", "--positions", "positions.csv", "--out",
                        "out"], tmp_path)
    assert code == 0, err
    o = read_outputs(tmp_path / "out")
    assert o["verdicts"].rows() == [(9, 0, 1, "W"), (9, 2, 0, "L"), (10, 1, 1, "W")]
    assert o["summary"].select("rule_set_id", "positions").rows() == [
        ("10", 1), ("9", 2), ("a", 0)]
    assert o["sg_tables"].select("moves", "rule_set_ids").rows() == [
        ([1], ["10"]), ([1, 2], ["9", "a"])]


@pytest.mark.parametrize("night", ["header only", "every row rejected"])
@pytest.mark.parametrize("form", ["wide", "long"])
def test_a_night_without_verdicts_keeps_the_rule_ids_type_of_the_nights_with_some(
        tmp_path, night, form):
    """Rules whose ids are all text: every verdict's rule_set_id is text, and so is that of
    a night without verdicts (an empty export; every row rejected), so that the nights'
    verdicts read as one table, the empty night first (DuckDB, pyarrow's datasets), and join
    summary without a cast. Before, it was Int64, and DuckDB failed to cast "a" to BIGINT.
    Rules of integer ids, or of a text id beside integer ones (whose verdicts may keep
    integer keys, above), keep Int64."""
    heap = "heaps" if form == "wide" else "heap"
    for rules in (["a", "b"], [1, 2], ["a", 2]):
        where = tmp_path / "_".join(map(str, rules))
        where.mkdir()
        write_csv(where / "rules.csv", ["rule_set_id", "moves"], [[rules[0], "1 2"],
                                                                  [rules[1], "1"]])
        nights = {"holiday": [] if night == "header only" else [[rules[1], 0, -1]],
                  "day": [[rules[0], 0, 4], [rules[1], 1, 3]]}
        for name, rows in nights.items():
            write_csv(where / f"{name}.csv", ["rule_set_id", "position_id", heap], rows)
            code, err = invoke(["run", "--rules", "rules.csv", "--positions", f"{name}.csv",
                                "--out", name, "--max-rejected-rows", "1"], where)
            assert code == 0, err
        holiday = read_outputs(where / "holiday")
        assert holiday["verdicts"].height == 0
        assert holiday["verdicts"].schema["rule_set_id"] == (
            pl.String if rules == ["a", "b"] else pl.Int64), rules
        if rules == ["a", 2]:
            continue
        files = [str(where / n / "verdicts.parquet") for n in nights]
        # S={1,2}: SG(4) = 1; S={1}: SG(3) = 1
        assert duckdb.sql(f"SELECT rule_set_id, nim_sum FROM read_parquet({files}) "
                          "ORDER BY 1").fetchall() == [(rules[0], 1), (rules[1], 1)]
        assert ds.dataset(files).to_table().num_rows == 2
        assert holiday["verdicts"].join(holiday["summary"], on="rule_set_id").height == 0


@pytest.mark.parametrize("form", ["wide", "long"])
@pytest.mark.parametrize("other_rule", ["x", "1"])
def test_minus_zero_is_a_text_key_of_its_own_in_rules_and_positions_alike(tmp_path, form,
                                                                          other_rule):
    """"-0" is not how 0 reads back: it is text wherever it stands, so a position of rule set
    "-0" is evaluated under that rule set, and the verdict, the summary and the rules name it
    alike (QA: with "-0" the integer 0 in the positions but text in the rules, the verdict was
    keyed 0, the summary gave "-0" no position, or the position was rejected as unknown).
    Under S = {1}, SG(h) = h % 2; under nim, SG(h) = h."""
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
              [["-0", "subtraction", "1"], [other_rule, "nim", ""]])
    if form == "wide":
        write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heaps"],
                  [["-0", 1, "3"], [other_rule, 2, "5"]])
    else:
        write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heap"],
                  [["-0", 1, 3], ["-0", 1, 2], [other_rule, 2, 5]])
    code, err = invoke(["run", "--rules", "rules.csv", "--positions", "positions.csv", "--out",
                        "out"], tmp_path)
    assert code == 0, err
    o = read_outputs(tmp_path / "out")
    nim_sum = 1  # SG(3) = 1, and in long form SG(2) = 0 beside it
    assert o["verdicts"].select("rule_set_id", "position_id", "nim_sum").rows() == [
        ("-0", 1, nim_sum), (other_rule, 2, 5)]
    assert sorted(o["summary"].select("rule_set_id", "positions", "W", "L").rows()) == [
        ("-0", 1, 1, 0), (other_rule, 1, 1, 0)]
    assert o["rejects"].height == 0
