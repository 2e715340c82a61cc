"""`reason_code` in rejects: one code per kind of reason, counted in the manifest and the
report; `source` without `..` segments."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from conftest import invoke, read_outputs, write_csv, write_parquet

from pipeline.transforms.reasons import ReasonCode, code_of


def rejected(where: Path, *options: str) -> pl.DataFrame:
    code, err = invoke(["run", "--rules", "rules.csv", "--positions", "positions", "--out",
                        "out", *options], where)
    assert code == 3, err
    return read_outputs(where / "out")["rejects"]


def test_every_kind_of_reason_has_its_code_wide_form(tmp_path):
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"], [
        [1, "", "1 2"], [2, "", "0 3"], [3, "", "1 x"], [4, "", "[1, 2"], [5, "", "3..1"],
        [6, "dice", ""], [7, "nim", "1"], [8, "", ""], [9, "", "1 2"], [9, "", "1 2"],
        [10, "", "1,,2"], [11, "", "2 9"]])
    write_csv(tmp_path / "positions" / "a.csv", ["rule_set_id", "position_id", "heaps"], [
        ["", 0, "1"], [1, 1, "x 2"], [1, 2, "-4"], [1, 3, "[1"], [1, 4, "99999999999999999999"],
        [77, 5, "1"], [2, 6, "1"], [1, 7, "3"], [1, 7, "4"], [1, 8, "1,,2"], [11, 9, "50"]])
    (tmp_path / "positions" / "a.csv").write_text(
        (tmp_path / "positions" / "a.csv").read_text() + "1,10,3,4\n")
    rejects = rejected(tmp_path, "--config", str(config(tmp_path, max_table_len=5)))
    got = rejects.select("table", "row", "column", "reason_code", "reason").rows()
    assert got == [
        ("rules", 1, "moves", "out_of_range", "move 0 is not a positive integer"),
        ("rules", 2, "moves", "not_an_integer", "'x' in '1 x' is not an integer"),
        ("rules", 3, "moves", "malformed_list", "malformed list '[1, 2' (unbalanced brackets)"),
        ("rules", 4, "moves", "malformed_list",
         "range '3..1' is empty (its first value is above its last)"),
        ("rules", 5, "kind", "bad_rule",
         "unknown kind 'dice' (expected one of: subtraction, nim, half)"),
        ("rules", 6, "moves", "bad_rule", "moves are given for a nim rule, whose moves are "
                                          "fixed (leave moves empty, or make it a subtraction "
                                          "rule)"),
        ("rules", 7, "moves", "bad_rule",
         "moves are empty (a subtraction rule needs a non-empty set S)"),
        ("rules", 8, "rule_set_id", "duplicate_key", rules_clash(tmp_path)),
        ("rules", 9, "rule_set_id", "duplicate_key", rules_clash(tmp_path)),
        ("rules", 10, "moves", "null_value", "move at index 1 is empty in '1,,2'"),
        ("positions", 0, "rule_set_id", "null_value", "rule_set_id is empty"),
        ("positions", 1, "heaps", "not_an_integer", "'x' in 'x 2' is not an integer"),
        ("positions", 2, "heaps", "out_of_range", "heap -4 at index 0 is negative"),
        ("positions", 3, "heaps", "malformed_list",
         "malformed list '[1' (unbalanced brackets)"),
        ("positions", 4, "heaps", "out_of_range",
         "heap 99999999999999999999 at index 0 is larger than 2^63-1"),
        ("positions", 5, "rule_set_id", "unknown_rule_set",
         "unknown rule_set_id 77 (not in the rules table)"),
        ("positions", 6, "rule_set_id", "invalid_rule_set", "rule set 2 is invalid: move 0 is "
                                                            f"not a positive integer "
                                                            f"({tmp_path}/rules.csv row 1)"),
        ("positions", 7, "position_id", "duplicate_key",
         "position_id 7 appears 2 times for rule_set_id 1"),
        ("positions", 8, "position_id", "duplicate_key",
         "position_id 7 appears 2 times for rule_set_id 1"),
        ("positions", 9, "heaps", "null_value", "heap at index 1 is empty in '1,,2'"),
        ("positions", 10, "heaps", "beyond_table_limit",
         "heap 50 at index 0 needs SG values of {2, 9} beyond tables.max_table_len (5 values "
         "tabulated), and no period was proven within them"),
        ("positions", 11, None, "wrong_field_count", "line has 4 fields, expected 3"),
    ]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["rejects"]["by_reason_code"] == {
        "duplicate_key": 4, "bad_rule": 3, "malformed_list": 3, "out_of_range": 3,
        "not_an_integer": 2, "null_value": 3, "beyond_table_limit": 1,
        "invalid_rule_set": 1, "unknown_rule_set": 1, "wrong_field_count": 1,
    }
    assert list(manifest["rejects"]["by_reason_code"]) == [
        "duplicate_key", "bad_rule", "malformed_list", "null_value", "out_of_range",
        "not_an_integer", "beyond_table_limit", "invalid_rule_set", "unknown_rule_set",
        "wrong_field_count"]
    assert "other" not in set(rejects["reason_code"])


def test_a_skipped_line_of_a_file_without_position_ids_is_named_by_its_default_id(tmp_path):
    """Files without a position_id column number their positions by row, across files
    (the second file's first row follows the first file's last): a line of the wrong field
    count had no position_id in its reject (QA), where its neighbours had theirs."""
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "1 2"]])
    (tmp_path / "positions").mkdir()
    (tmp_path / "positions" / "a.csv").write_text("rule_set_id,heaps\n1,5\n1,5,7\n1,3\n")
    (tmp_path / "positions" / "b.csv").write_text("rule_set_id,heaps\n1,9\n1,5,7\n1,x\n")
    got = rejected(tmp_path).select("row", "position_id", "reason_code").rows()
    assert got == [(1, "1", "wrong_field_count"), (1, "4", "wrong_field_count"),
                   (2, "5", "not_an_integer")]
    verdicts = read_outputs(tmp_path / "out")["verdicts"]
    assert verdicts.select("position_id", "nim_sum").rows() == [(0, 2), (2, 0), (3, 0)]


def rules_clash(where: Path) -> str:
    return (f"rule_set_id 9 is given 2 times, and a rule_set_id is unique ({where}/rules.csv "
            f"row 8; {where}/rules.csv row 9)")


def config(where: Path, **tables: int) -> Path:
    path = where / "config.yaml"
    path.write_text("tables:\n" + "".join(f"  {k}: {v}\n" for k, v in tables.items()))
    return path


def test_long_form_codes_a_position_whose_other_row_was_rejected(tmp_path):
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "1 2"]])
    write_parquet(tmp_path / "positions" / "p.parquet",
                  {"rule_set_id": [1, 1, 1, 1], "position_id": [0, 0, 1, 2],
                   "heap": [3, -1, None, 4]},
                  {"rule_set_id": pl.Int64, "position_id": pl.Int64, "heap": pl.Int64})
    rejects = rejected(tmp_path)
    assert rejects.select("row", "reason_code", "reason").rows() == [
        (0, "position_rejected",
         f"another row of this position ({tmp_path}/positions/p.parquet row 1) was rejected"),
        (1, "out_of_range", "heap -1 is negative"),
        (2, "null_value", "heap is null"),
    ]


def test_long_form_keeps_a_heap_beyond_its_table_on_that_heap_s_row(tmp_path):
    """A position rejected for its heaps past tables.max_table_len ({1, 30} having no period
    within 10 values) rejects its other rows too: each heap's row beyond the table carries the
    limit (long form has no index to name); the others, in this file and another, name the
    first such row's file and row. Position 8 of rule set 2
    (unknown) is the rule set's fault, on both rows alike."""
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "1 30"]])
    write_csv(tmp_path / "positions" / "a.csv", ["rule_set_id", "position_id", "heap"],
              [[1, 7, 5], [1, 7, 50], [2, 8, 1]])
    write_csv(tmp_path / "positions" / "b.csv", ["rule_set_id", "position_id", "heap"],
              [[1, 7, 6], [2, 8, 2], [1, 9, 4], [1, 7, 10], [1, 7, 9]])
    rejects = rejected(tmp_path, "--config", str(config(tmp_path, max_table_len=10)))
    a, b = (str(tmp_path / "positions" / name) for name in ("a.csv", "b.csv"))
    other = f"another row of this position ({a} row 1) was rejected"
    unknown = "unknown rule_set_id 2 (not in the rules table)"
    beyond = ("needs SG values of {1, 30} beyond tables.max_table_len (10 values tabulated), "
              "and no period was proven within them")
    assert sorted(rejects.select("source", "row", "column", "reason_code", "reason").rows()
                  ) == [
        (a, 0, None, "position_rejected", other),
        (a, 1, "heap", "beyond_table_limit", f"heap 50 {beyond}"),
        (a, 2, "rule_set_id", "unknown_rule_set", unknown),
        (b, 0, None, "position_rejected", other),
        (b, 1, "rule_set_id", "unknown_rule_set", unknown),
        # every heap beyond the table (10 values: SG(0..9)) carries the limit, 9 does not
        (b, 3, "heap", "beyond_table_limit", f"heap 10 {beyond}"),
        (b, 4, None, "position_rejected", other),
    ]


@pytest.mark.parametrize(("reason", "code"), [
    # ids and cell text quoted in a reason do not change its code
    ("unknown rule_set_id heap 1 at index 0 is negative (not in the rules table)",
     "unknown_rule_set"),
    ("'is negative' in 'is negative' is not an integer", "not_an_integer"),
    ("rule set rule_set_id is empty is invalid: moves are missing (a subtraction rule needs "
     "a non-empty set S) (r.csv row 3)", "invalid_rule_set"),
    ("position_id unknown rule_set_id x appears 2 times for rule_set_id y", "duplicate_key"),
    ("heap 'x\ny' is not an integer", "not_an_integer"),
    ("more than 1,000,000 moves (1,000,001)", "bad_rule"),
    ("moves pass the rules' limit of 20,000,000 moves in all, from this row on (give fewer "
     "or shorter rules)", "bad_rule"),
    ("move at index 2 is null", "null_value"),
    ("heaps is null", "null_value"),
    ("position_id is empty", "null_value"),
    ("range '1..9999999' is too long (over 1,000,000 values)", "malformed_list"),
    ("malformed range '1..x' in '1..x' (expected \"FIRST..LAST\", two integers)",
     "malformed_list"),
    ("move 5000000000 is larger than 4294967295", "out_of_range"),
    ("line has 1 field, expected 3", "wrong_field_count"),
    ("rule_set_id 4 is defined 2 different ways (r.csv row 1; r.csv row 2)", "duplicate_key"),
    ("rule_set_id 4 is defined 3 times and not every definition is valid (r.csv row 1; "
     "r.csv row 2; r.csv row 5)", "duplicate_key"),
    ("heap 9223372036854775808 is larger than 2^63-1", "out_of_range"),
    ("heap '1.5' is not an integer", "not_an_integer"),
    ("a reason no code knows", "other"),
])
def test_codes_are_read_off_the_fixed_words(reason, code):
    assert code_of(reason) is ReasonCode(code)


def test_the_enum_is_the_documented_list():
    page = (Path(__file__).parents[1] / "docs" / "outputs.md").read_text()
    listed = page.split("`reason_code` (one of ")[1].split(";")[0]
    assert [c.strip(" `").split("`")[0] for c in listed.split(", ")] == [
        c.value for c in ReasonCode]


def test_source_has_no_dot_dot_segments(tmp_path):
    (tmp_path / "jobs").mkdir()
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "1 2"], [1, "3"]])
    write_csv(tmp_path / "positions" / "a.csv", ["rule_set_id", "position_id", "heaps"],
              [[1, 0, "1"], [2, 1, "1"]])
    code, err = invoke(["run", "--rules", "jobs/../rules.csv", "--positions",
                        "jobs/.././positions", "--out", "out"], tmp_path)
    assert code == 3, err
    rejects = read_outputs(tmp_path / "out")["rejects"]
    assert rejects.select("source", "reason_code").rows() == [
        (f"{tmp_path}/rules.csv", "duplicate_key"), (f"{tmp_path}/rules.csv", "duplicate_key"),
        (f"{tmp_path}/positions/a.csv", "invalid_rule_set"),
        (f"{tmp_path}/positions/a.csv", "unknown_rule_set")]
    assert ".." not in "".join(rejects["reason"])


def test_the_report_counts_rejects_by_code_before_the_first_rows(tmp_path):
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "1 2"]])
    write_csv(tmp_path / "positions" / "a.csv", ["rule_set_id", "position_id", "heaps"],
              [[1, 0, "-1"], [2, 1, "1"], [3, 2, "1"], [1, 3, "2"]])
    rejected(tmp_path, "--max-rejected-rows", "1")
    code, err = invoke(["report", "out"], tmp_path)
    assert code == 0, err
    page = (tmp_path / "out" / "report.html").read_text()
    counts = ("<h3>Rejected rows by reason_code</h3><table><tr><th class=l>reason_code</th>"
              "<th class=l>rows</th></tr><tr><td class=l>unknown_rule_set</td><td>2</td></tr>"
              "<tr><td class=l>out_of_range</td><td>1</td></tr></table>"
              "<h3>The first rows</h3>")
    assert counts in page
    assert page.index(counts) < page.index("heap -1 at index 0 is negative")
    assert ("3 rows rejected (60.00% of the rows read); tolerance max_rejected_rows 1: over "
            "the tolerance: the run exited 3.") in page
