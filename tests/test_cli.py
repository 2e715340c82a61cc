"""The `snim-batch` command line (Typer CliRunner, and the installed script for a few), with
expected values from the independent references in conftest."""

from __future__ import annotations

import inspect
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import typer
from conftest import CLASSIC_SAMPLE, naive_period, naive_sg, sg_half, wins, write_csv
from typer.testing import CliRunner

from pipeline import cli as cli_module
from pipeline.cli import app
from pipeline.errors import Stopped
from pipeline.grundy import DEFAULT_RULE_OPS, DEFAULT_RUN_OPS

SCRIPT = Path(sys.executable).with_name("snim-batch")


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None):
        return runner.invoke(app, list(args), input=input)

    return invoke


def no_traceback(result) -> None:
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.fixture
def small_job(tmp_path, monkeypatch):
    """rules.csv + positions.csv in a fresh directory with no config.yaml; returns expected."""
    monkeypatch.chdir(tmp_path)
    rules = {1: ("subtraction", (2, 5)), 2: ("nim", ()), 3: ("half", ()),
             4: ("subtraction", (1, 3, 4))}
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
              [[1, "", "2 5"], [2, "nim", ""], [3, "half", ""], [4, "subtraction", "[1, 3..4]"]])
    rng = random.Random("cli-small-job")
    positions = [(rid, pid, [rng.randint(0, 20) for _ in range(rng.randint(0, 3))])
                 for rid in rules for pid in range(8)]
    write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heaps"],
              [[r, p, " ".join(map(str, h))] for r, p, h in positions])
    assert not (tmp_path / "config.yaml").exists()
    return {(r, p): ("W" if wins(*rules[r], h) else "L") for r, p, h in positions}


RUN_FLAGS = ("run", "--rules", "rules.csv", "--positions", "positions.csv", "--out", "out")


def test_run_with_flags_and_no_config_file(cli, tmp_path, small_job):
    result = cli(*RUN_FLAGS, "--winning-moves")
    assert result.exit_code == 0, result.output
    assert "32 verdicts" in result.stdout
    v = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")
    assert {(r, p): w for r, p, w in v.select("rule_set_id", "position_id", "verdict").rows()
            } == small_job
    assert "move_take" in v.columns


def test_a_config_file_without_locations_takes_them_from_the_flags(cli, tmp_path, small_job):
    """A config of settings only (here in another folder, with winning moves off): --rules,
    --positions and --out fill its missing keys, relative to the working directory; a key
    neither gives is still an error naming it."""
    settings = tmp_path / "conf" / "settings.yaml"
    settings.parent.mkdir()
    settings.write_text("winning_moves: false\ntables:\n  period_probe_ops: 0\n")
    result = cli(*RUN_FLAGS, "--config", str(settings))
    assert result.exit_code == 0, result.output
    v = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")
    assert {(r, p): w for r, p, w in v.select("rule_set_id", "position_id", "verdict").rows()
            } == small_job
    assert "move_take" not in v.columns
    missing = cli("run", "--config", str(settings), "--rules", "rules.csv", "--out", "o2")
    assert missing.exit_code == 2, missing.output
    assert f"{settings}: missing key 'positions'" in missing.stderr
    no_traceback(missing)


def test_a_trailing_slash_names_a_directory_as_a_shell_reads_it(cli, tmp_path, small_job):
    """`positions.csv/` is refused as `cat positions.csv/` is (it read the file); `dir/`
    still reads the directory."""
    result = cli("run", "--rules", "rules.csv", "--positions", "positions.csv/", "--out", "out")
    assert result.exit_code == 1, result.output
    no_traceback(result)
    assert result.stderr == (f"snim-batch: error: positions input {tmp_path}/positions.csv/: is "
                             "a file, not a directory (the name ends with /); name the file "
                             "without the /\n")
    assert not (tmp_path / "out").exists()
    dotted = cli("run", "--rules", "rules.csv", "--positions", "positions.csv/.", "--out", "out")
    assert dotted.exit_code == 1, dotted.output
    assert "positions.csv/: is a file, not a directory" in dotted.stderr
    (tmp_path / "in").mkdir()
    (tmp_path / "positions.csv").rename(tmp_path / "in" / "positions.csv")
    result = cli("run", "--rules", "rules.csv", "--positions", "in/", "--out", "out")
    assert result.exit_code == 0, result.output
    v = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")
    assert {(r, p): w for r, p, w in v.select("rule_set_id", "position_id", "verdict").rows()
            } == small_job


def test_parquet_files_of_any_name_in_a_directory_are_read(cli, tmp_path, monkeypatch):
    """Hive, Trino, Athena and Impala name their Parquet files `000000_0`, `000000_0_copy_1`,
    `20261208_..._abcde` or `..._data.0.parq`: a directory listing reads every file named so
    that starts as Parquet, rather than missing its rows with exit 0; a text file named so
    (`notes`) is still skipped, and so are copies with another suffix (`.bak`, `~`, a
    download's `.Ab12`), which would make every key a duplicate. The verdicts are checked
    against a brute-force game-tree search."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.chdir(tmp_path)
    (tmp_path / "rules.csv").write_text("rule_set_id,moves\n1,2 5\n")
    table = tmp_path / "table"
    table.mkdir()
    heaps = {0: [5], 1: [4], 2: [3, 6], 3: [7, 7, 2], 4: [9], 5: [11, 1]}
    names = {"000000_0": [0, 1], "000000_0_copy_1": [2], "4c4d8f_1234_data.0.parq": [3],
             "20261208_000123_00004_abcde": [4], "part-00001.parquet": [5]}
    for name, ids in names.items():
        pq.write_table(pa.table({"rule_set_id": [1] * len(ids), "position_id": ids,
                                 "heaps": [heaps[i] for i in ids]}), table / name)
    for copy in ("part-00001.parquet.bak", "part-00001.parquet~", "part-00001.parquet.Ab12"):
        (table / copy).write_bytes((table / "part-00001.parquet").read_bytes())  # not read
    (table / "notes").write_text("rule_set_id,position_id,heaps\n1,99,5\n")
    result = cli("run", "--rules", "rules.csv", "--positions", "table", "--out", "out")
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [Path(f["path"]).name for f in manifest["inputs"]["positions"]] == sorted(names)
    assert {f["format"] for f in manifest["inputs"]["positions"]} == {"parquet"}
    verdicts = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")
    assert dict(verdicts.select("position_id", "verdict").iter_rows()) == {
        i: "W" if wins("subtraction", (2, 5), h) else "L"
        for i, h in heaps.items()}


def test_invisible_characters_in_a_key_are_shown_escaped(cli, tmp_path, monkeypatch):
    """A byte-order mark left inside a file joined from parts, or a zero-width space pasted
    with an id, made `unknown rule_set_id 1 (not in the rules table)` while the rules hold
    1: the reason (in rejects.parquet and on stderr) shows the character as its escape."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rules.csv").write_text("rule_set_id,moves\n1,2 5\n")
    (tmp_path / "p.csv").write_bytes("rule_set_id,position_id,heaps\n1,0,5\n\ufeff1,1,6\n"
                                     "1\u200b,2,6\n1\u200e,3,6\n".encode())
    result = cli("run", "--rules", "rules.csv", "--positions", "p.csv", "--out", "out")
    assert result.exit_code == 3, result.output
    rejects = pl.read_parquet(tmp_path / "out" / "rejects.parquet")
    assert rejects["reason"].to_list() == [
        f"unknown rule_set_id {shown} (not in the rules table)"
        for shown in ("\\ufeff1", "1\\u200b", "1\\u200e")]
    assert "unknown rule_set_id \\ufeff1 (not in the rules table)" in result.stderr


def test_compressed_files_a_directory_listing_skips_are_named_in_a_warning(
        cli, tmp_path, small_job):
    """A directory of CSV exports where some came compressed (`x.csv.gz`): the run reads the
    others, as documented, and warns which it skipped (their rows were missed unsaid); a
    file of another type (`notes.txt`) is skipped as before, without a word."""
    import gzip

    (tmp_path / "in").mkdir()
    (tmp_path / "positions.csv").rename(tmp_path / "in" / "a.csv")
    for name in ("b.csv.gz", "c.csv.zst"):
        (tmp_path / "in" / name).write_bytes(gzip.compress(b"rule_set_id,position_id,heaps\n"))
    (tmp_path / "in" / "notes.txt").write_text("exported nightly\n")
    (tmp_path / "more").mkdir()  # the other names compressed files go by
    names = ["d.csv.gzip", "e.tgz", "f.csv.Z", "g.csv.lzma", "h.csv.br"]
    for name in names:
        (tmp_path / "more" / name).write_bytes(b"x")
    result = cli("run", "--rules", "rules.csv", "--positions", "more", "--out", "o2")
    assert result.exit_code == 1, result.output
    assert "5 files of another type, 5 of them named as compressed" in result.stderr
    for name in names:
        (tmp_path / "more" / name).unlink()
    result = cli("run", "--rules", "rules.csv", "--positions", "in", "--out", "out")
    assert result.exit_code == 0, result.output
    assert (f"warning: positions input {tmp_path}/in: skipped 2 files named as compressed "
            f"({tmp_path}/in/b.csv.gz, {tmp_path}/in/c.csv.zst): a listing reads only "
            ".parquet, .pq and .csv files; decompress them to read their rows (or name each "
            "as an input itself, if it is plain text)") in result.stderr
    assert "notes.txt" not in result.stderr
    assert pl.read_parquet(tmp_path / "out" / "verdicts.parquet").height == len(small_job)
    (tmp_path / "r").mkdir()  # the rules' listing says it too
    (tmp_path / "rules.csv").rename(tmp_path / "r" / "rules.csv")
    (tmp_path / "r" / "more.csv.gz").write_bytes(gzip.compress(b"rule_set_id,moves\n"))
    result = cli("run", "--rules", "r", "--positions", "in", "--out", "out", "--overwrite")
    assert result.exit_code == 0, result.output
    assert (f"warning: rules input {tmp_path}/r: skipped 1 file named as compressed "
            f"({tmp_path}/r/more.csv.gz)") in result.stderr
    (tmp_path / "r" / "rules.csv").rename(tmp_path / "rules.csv")
    (tmp_path / "in" / "a.csv").unlink()  # only compressed ones: the error says so
    result = cli("run", "--rules", "rules.csv", "--positions", "in", "--out", "out2")
    assert result.exit_code == 1, result.output
    assert result.stderr.endswith(
        f"error: positions input {tmp_path}/in: no .parquet, .pq or .csv files found; skipped "
        "3 files of another type, 2 of them named as compressed (a directory gives its "
        ".parquet, .pq and .csv files, and Parquet files named without a suffix)\n"
    ), result.stderr


def test_run_with_one_bad_row_exits_3(cli, tmp_path, small_job):
    with (tmp_path / "positions.csv").open("a") as fh:
        fh.write("1,99,4 -2\n")
    result = cli(*RUN_FLAGS)
    assert result.exit_code == 3, result.output
    no_traceback(result)
    assert "positions.csv row 32" in result.stderr
    rejects = pl.read_parquet(tmp_path / "out" / "rejects.parquet")
    assert rejects.select("rule_set_id", "position_id", "row").rows() == [("1", "99", 32)]
    v = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")
    assert {(r, p): w for r, p, w in v.select("rule_set_id", "position_id", "verdict").rows()
            } == small_job


def test_on_bad_rows_fail_exits_1_and_writes_nothing(cli, tmp_path, small_job):
    with (tmp_path / "positions.csv").open("a") as fh:
        fh.write("1,99,4 x\n")
    result = cli(*RUN_FLAGS, "--on-bad-rows", "fail")
    assert result.exit_code == 1, result.output
    no_traceback(result)
    assert "positions.csv row 32" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["positions.csv", "rules.csv"]


def test_rerun_needs_overwrite(cli, tmp_path, small_job):
    assert cli(*RUN_FLAGS).exit_code == 0
    before = (tmp_path / "out" / "manifest.json").read_text()
    again = cli(*RUN_FLAGS)
    assert again.exit_code == 1 and "--overwrite" in again.stderr
    no_traceback(again)
    assert (tmp_path / "out" / "manifest.json").read_text() == before
    assert cli(*RUN_FLAGS, "--overwrite").exit_code == 0
    assert (tmp_path / "out" / "manifest.json").read_text() != before


def test_run_without_config_or_flags_is_a_usage_error(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("run", "--out", "out")
    assert result.exit_code == 2
    assert "config.yaml" in result.stderr
    no_traceback(result)


def test_missing_config_file_exits_2(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("run", "--config", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2
    assert "nope.yaml" in result.stderr and "not found" in result.stderr
    no_traceback(result)
    assert list(tmp_path.iterdir()) == []


COMMANDS = ("run", "explain", "history", "grundy", "solve", "convert", "report", "generate")


def test_the_command_list_shows_each_summary_whole(cli):
    """Each command's one-line summary in `snim-batch --help` ends its sentence (click cuts
    a long one with '...')."""
    result = cli("--help")
    assert result.exit_code == 0
    listed = dict(line.split(None, 1) for line in
                  result.stdout.split("Commands:")[1].strip().splitlines())
    assert sorted(listed) == sorted(COMMANDS)
    for name, summary in listed.items():
        assert summary.endswith(".") and not summary.endswith("..."), (name, summary)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_paragraphs_are_reflowed_not_broken_mid_sentence(cli, command):
    """A docstring's source line breaks are not kept: no line of the description (before the
    option tables) stops short before a word that continues its sentence in lower case."""
    result = cli(command, "--help")
    assert result.exit_code == 0
    description = re.split(r"\n\W*(?:Options|Arguments)", result.stdout)[0]
    lines = [line.strip("│ ") for line in description.splitlines()]
    assert len([line for line in lines if line]) >= 2
    for line, after in zip(lines, lines[1:]):
        word = after.split(" ")[0]
        if line and word[:1].islower():
            assert len(line) + 1 + len(word) > 70, (line, after)
    broken = [line for line in result.stdout.splitlines() if re.search(r"\w-$", line)]
    assert broken == [], "an option name or value is cut at its hyphen"


def test_run_help_mentions_exit_codes(cli):
    result = cli("run", "--help")
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "Exit codes" in text
    for code in ("0 clean", "1 run failed", "2 usage", "3 completed"):
        assert code in text


# ---- grundy ---------------------------------------------------------------------------------


def grundy_lines(stdout: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in stdout.splitlines() if ": " in line)


def test_grundy_subtraction(cli):
    result = cli("grundy", "--moves", "2 5", "--upto", "20")
    assert result.exit_code == 0, result.output
    lines = grundy_lines(result.stdout)
    assert lines["preperiod"] == "0" and lines["period"] == "7"
    assert lines["SG(0..20)"].split() == [str(v) for v in naive_sg((2, 5), 21)]


@pytest.mark.parametrize(("moves", "s"), [("1..3 7", (1, 2, 3, 7)),
                                         ("[3, 7, 8, 10]", (3, 7, 8, 10)),
                                         ("12,4,6,11,6", (4, 6, 11, 12))])
def test_grundy_spellings_and_preperiods(cli, moves, s):
    pre, per, _ = naive_period(s)
    result = cli("grundy", "--moves", moves, "--upto", "60")
    assert result.exit_code == 0, result.output
    lines = grundy_lines(result.stdout)
    assert (int(lines["preperiod"]), int(lines["period"])) == (pre, per)
    assert lines["SG(0..60)"].split() == [str(v) for v in naive_sg(s, 61)]


@pytest.mark.parametrize(("kind", "sg"), [("nim", lambda x: x), ("half", sg_half)])
def test_grundy_closed_forms(cli, kind, sg):
    result = cli("grundy", "--kind", kind, "--upto", "40")
    assert result.exit_code == 0, result.output
    lines = grundy_lines(result.stdout)
    assert lines["SG(0..40)"].split() == [str(sg(x)) for x in range(41)]
    assert "closed form" in lines


@pytest.mark.parametrize("moves", ["2 x", "1..x", "[2 5", "2.5"])
def test_grundy_unparsable_moves_exit_2(cli, moves):
    result = cli("grundy", "--moves", moves)
    assert result.exit_code == 2, result.output
    assert "--moves" in result.stderr
    no_traceback(result)


@pytest.mark.parametrize(("moves", "message"), [
    ("2,,5", "move at index 1 is empty in '2,,5'"),
    ("[2, 5,]", "move at index 2 is empty in '[2, 5,]'"),
    ("..3", "malformed range '..3' in '..3' (expected \"FIRST..LAST\", two integers)"),
    ("1 5..3", "range '5..3' is empty (its first value is above its last)"),
])
def test_grundy_moves_with_an_empty_element_or_range_exit_2(cli, moves, message):
    result = cli("grundy", "--moves", moves)
    assert (result.exit_code, result.stderr) == (2, f"snim-batch: error: --moves: {message}\n")


@pytest.mark.parametrize("moves", ["0", "-3", "", "2 0 5"])
def test_grundy_invalid_moves_exit_2(cli, moves):
    result = cli("grundy", "--moves", moves)
    no_traceback(result)
    assert result.stderr.strip()
    assert result.exit_code == 2, result.output


def test_grundy_unknown_kind_exit_2(cli):
    result = cli("grundy", "--kind", "bogus")
    no_traceback(result)
    assert "bogus" in result.stderr
    assert result.exit_code == 2, result.output


def test_grundy_work_limit_bounds_what_upto_asks(cli):
    """--max-ops bounds the table whatever --upto asks: S = 1..10^6 costs 10^6 + 200
    operations a value past SG(0), so the default 10^9 gives SG(0..999) (only moves up to x
    matter for SG(x)) and the rest is unknown, naming the option; a smaller --max-ops, less."""
    result = cli("grundy", "--moves", "1..1000000", "--upto", "5000")
    assert result.exit_code == 0, result.output
    lines = grundy_lines(result.stdout)
    assert lines["SG(0..999)"].split() == [str(v) for v in naive_sg(range(1, 1000), 1000)]
    assert lines["SG(1000..5000)"] == (
        "unknown (beyond --max-ops 1000000000, with no period proven)")
    assert lines["period"] == "none found within 1000 values"
    result = cli("grundy", "--moves", "1000000", "--upto", "3", "--max-ops", "200")
    assert result.exit_code == 0, result.output
    assert grundy_lines(result.stdout)["period"] == "none found within 1 value"
    result = cli("grundy", "--moves", "1 1000", "--upto", "300", "--max-ops", str(99 * 202))
    assert result.exit_code == 0, result.output
    lines = grundy_lines(result.stdout)
    assert lines["SG(0..99)"].split() == [str(v) for v in naive_sg((1, 1000), 100)]
    assert lines["SG(100..300)"] == "unknown (beyond --max-ops 19998, with no period proven)"


@pytest.mark.parametrize(("kind", "sg"), [("NIM", lambda x: x), ("Nim", lambda x: x),
                                        ("HALF", sg_half), ("Subtraction", None)])
def test_grundy_kind_in_any_case_as_rule_files_accept_it(cli, kind, sg):
    moves = ("--moves", "2 5") if sg is None else ()
    result = cli("grundy", "--kind", kind, *moves, "--upto", "30")
    assert result.exit_code == 0, result.output
    expected = naive_sg((2, 5), 31) if sg is None else [sg(x) for x in range(31)]
    assert grundy_lines(result.stdout)["SG(0..30)"].split() == [str(v) for v in expected]


@pytest.mark.parametrize("kind", ["nim", "half"])
def test_grundy_refuses_moves_for_a_kind_whose_moves_are_fixed(cli, kind):
    """As a rules row with moves for nim or half is rejected, not read as plain nim."""
    result = cli("grundy", "--kind", kind, "--moves", "2 5")
    no_traceback(result)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (f"snim-batch: error: --moves: moves are given for a {kind} rule, "
                             "whose moves are fixed (leave moves empty, or make it a "
                             "subtraction rule)\n")


CHOICE_ERRORS = [
    (("grundy", "--kind", "chess"), "--kind", "'chess' is not one of 'subtraction', 'nim', "
                                             "'half'"),
    (("generate", "--out", "g", "--form", "tall"), "--form", "'tall' is not one of 'wide', "
                                                             "'long'"),
    (("generate", "--out", "g", "--format", "xlsx"), "--format", "'xlsx' is not one of "
                                                                 "'parquet', 'csv'"),
    (("run", "--engine", "flink"), "--engine", "'flink' is not one of 'polars', 'spark'"),
    (("run", "--on-bad-rows", "skip"), "--on-bad-rows", "'skip' is not one of 'reject', "
                                                        "'fail'"),
    (("run", "--format", "orc"), "--format", "'orc' is not one of 'parquet', 'delta'"),
    (("run", "--log-format", "xml"), "--log-format", "'xml' is not one of 'text', 'json'"),
    (("explain", "--format", "orc"), "--format", "'orc' is not one of 'parquet', 'delta'"),
]


def option_hint(command: str, option: str) -> str:
    """How click names an option in a usage error: a `run` option with its variable, as the
    value may have come from it."""
    variable = "SNIM_BATCH_" + option.lstrip("-").replace("-", "_").upper()
    return f"'{option}'" + (f" (env var: '{variable}')" if command in ("run", "explain") else "")


@pytest.mark.parametrize(("args", "option", "message"), CHOICE_ERRORS,
                         ids=[c[1] for c in CHOICE_ERRORS])
def test_every_fixed_choice_is_checked_by_typer_with_one_error_style(cli, tmp_path, monkeypatch,
                                                                     args, option, message):
    monkeypatch.chdir(tmp_path)
    result = cli(*args)
    no_traceback(result)
    assert result.exit_code == 2, result.output
    flat = " ".join(result.stderr.split())
    assert f"Invalid value for {option_hint(args[0], option)}: {message}." in \
        flat, result.stderr
    assert list(tmp_path.iterdir()) == []


LONG_CHOICE = "x" * 2000 + "tail"
LONG_CHOICES = [
    (("grundy", "--kind"), "--kind", "'subtraction', 'nim', 'half'"),
    (("generate", "--out", "g", "--form"), "--form", "'wide', 'long'"),
    (("generate", "--out", "g", "--format"), "--format", "'parquet', 'csv'"),
    (("generate", "--out", "g", "--key-type"), "--key-type", "'int', 'string', 'uuid'"),
    (("run", "--engine"), "--engine", "'polars', 'spark'"),
    (("run", "--on-bad-rows"), "--on-bad-rows", "'reject', 'fail'"),
]


@pytest.mark.parametrize(("args", "option", "listed"), LONG_CHOICES,
                         ids=[c[1] for c in LONG_CHOICES])
def test_a_long_choice_value_is_echoed_cut(cli, tmp_path, monkeypatch, args, option, listed):
    """A 2004-character value for a fixed choice: exit 2 naming the option and the choices,
    the value shown in 60 characters ('xxx...xxtail'), not in full."""
    monkeypatch.chdir(tmp_path)
    result = cli(*args, LONG_CHOICE)
    no_traceback(result)
    assert result.exit_code == 2, result.output
    flat = " ".join(result.stderr.split())
    shown = "'" + "x" * 27 + "..." + "x" * 24 + "tail'"
    assert (f"Invalid value for {option_hint(args[0], option)}: {shown} is not one "
            f"of {listed}.") in flat, result.stderr
    assert "x" * 61 not in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("args", "option", "limit"), [
    (("grundy", "--moves", "2 5", "--upto", str(10**15)), "--upto", "1000000"),
    (("grundy", "--moves", "2 5", "--upto", str(2**63)), "--upto", "1000000"),
    (("grundy", "--moves", "2 5", "--upto", "1000001"), "--upto", "1000000"),
    (("grundy", "--moves", "2 5", "--cap", str(2**32)), "--cap", "4294967295"),
    (("solve", "--cap", str(2**32)), "--cap", "4294967295"),
])
def test_too_large_sizes_are_usage_errors_naming_the_limit(cli, args, option, limit):
    result = cli(*args, input="1 2\n1\n1 3\n0\n")
    no_traceback(result)
    assert (result.exit_code, result.stdout) == (2, ""), result.output
    flat = " ".join(result.stderr.split())
    assert f"Invalid value for '{option}': Input should be less than or equal to {limit}" in \
        flat, result.stderr


@pytest.mark.parametrize("args", [("--upto", "-1"), ("--upto", str(-2**63)), ("--cap", "0")])
def test_negative_or_zero_sizes_are_usage_errors(cli, args):
    result = cli("grundy", "--moves", "2 5", *args)
    no_traceback(result)
    assert (result.exit_code, result.stdout) == (2, ""), result.output
    assert f"Invalid value for '{args[0]}'" in result.stderr


def test_grundy_prints_up_to_the_upto_limit(cli):
    result = cli("grundy", "--moves", "2 5", "--upto", "1000000")
    assert result.exit_code == 0, result.output
    values = grundy_lines(result.stdout)["SG(0..1000000)"].split()
    period = [str(v) for v in naive_sg((2, 5), 7)]  # {2, 5}: preperiod 0, period 7
    assert values == period * (1_000_001 // 7) + period[:1_000_001 % 7]


def test_generate_choices_in_any_case(cli, tmp_path):
    result = cli("generate", "--out", str(tmp_path / "g"), "--positions", "7", "--rule-sets",
                 "2", "--form", "LONG", "--format", "Csv")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "g" / "rules.csv").is_file()
    parts = sorted((tmp_path / "g" / "positions").iterdir())
    assert parts and all(p.suffix == ".csv" for p in parts)
    assert pl.read_csv(parts[0]).columns == ["rule_set_id", "position_id", "heap"]


def test_run_choices_in_any_case(cli, tmp_path, small_job):
    result = cli(*RUN_FLAGS, "--engine", "POLARS", "--on-bad-rows", "Fail")
    assert result.exit_code == 0, result.output
    v = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")
    assert {(r, p): w for r, p, w in v.select("rule_set_id", "position_id", "verdict").rows()
            } == small_job


# ---- user data reaches the terminal as text ---------------------------------------------------

HOSTILE = "\x1b[31mred\x1b]0;title\x07\x9b2J\u202egnp.exe\r\nforged: ok\x7f"
HOSTILE_SHOWN = r"\x1b[31mred\x1b]0;title\x07\x9b2J\u202egnp.exe\r\nforged: ok\x7f"
# In a file name, without the glob characters "[]" (a name that holds them is taken for a glob)
HOSTILE_NAME = "\x1b:title\x07\x9b2J\u202egnp.exe\r\nforged\x7f"
HOSTILE_NAME_SHOWN = r"\x1b:title\x07\x9b2J\u202egnp.exe\r\nforged\x7f"


def assert_printable(text: str) -> None:
    """No character a terminal would act on (tab and the line ends between lines aside)."""
    for line in text.split("\n"):
        assert not any(ord(c) < 32 and c != "\t" or 0x7f <= ord(c) <= 0x9f or c == "\u202e"
                       for c in line), repr(line)


def hostile_job(tmp_path: Path) -> Path:
    """A rule set and a bad position whose ids and cell text carry terminal controls, in a
    positions file whose name carries them too."""
    write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
              [[f"r{HOSTILE}", "", "2 5"], ["ok", "nim", ""]])
    positions = tmp_path / f"pos{HOSTILE_NAME}.csv"
    write_csv(positions, ["rule_set_id", "position_id", "heaps"],
              [[f"r{HOSTILE}", f"p{HOSTILE}", "3 4"], ["ok", "1", f"5 {HOSTILE}"],
               [f"ghost{HOSTILE}", "2", "1"]])
    return positions


def test_user_data_in_messages_is_escaped_and_kept_in_outputs(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    positions = hostile_job(tmp_path)
    result = cli("run", "--rules", "rules.csv", "--positions", positions.name, "--out", "out")
    assert result.exit_code == 3, result.output
    assert_printable(result.stdout)
    assert_printable(result.stderr)
    shown_file = str(tmp_path / f"pos{HOSTILE_NAME_SHOWN}.csv")
    assert f"{shown_file} row 1, column heaps: " in result.stderr
    assert f"{shown_file} row 2, column rule_set_id: unknown rule_set_id ghost" in result.stderr
    v = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")
    assert v.select("rule_set_id", "position_id").rows() == [(f"r{HOSTILE}", f"p{HOSTILE}")]
    rejects = pl.read_parquet(tmp_path / "out" / "rejects.parquet")
    assert rejects["source"].to_list() == [str(positions)] * 2
    assert rejects["rule_set_id"].to_list() == ["ok", f"ghost{HOSTILE}"]


def test_config_errors_and_verbose_tracebacks_are_escaped(cli, tmp_path):
    config = tmp_path / f"job{HOSTILE_NAME}.yaml"
    config.write_text('rules: r\npositions: p\nout: o\n"\\e[2Jkey\\u202e": 1\n')
    result = cli("run", "--config", str(config), "--verbose")
    assert result.exit_code == 2, result.output
    assert_printable(result.stderr)
    assert "Traceback" in result.stderr
    assert (f"snim-batch: error: {tmp_path}/job{HOSTILE_NAME_SHOWN}.yaml: unknown key "
            r"'\x1b[2Jkey\u202e'") in result.stderr


# ---- solve and convert ----------------------------------------------------------------------


def test_solve_classic_sample(cli):
    result = cli("solve", input=CLASSIC_SAMPLE)
    assert result.exit_code == 0, result.output
    assert result.stdout == "LWW\nWWL\n"


def random_classic(rng: random.Random, cases: int = 6):
    text, expected = [], []
    for _ in range(cases):
        moves = [rng.randint(1, 9) for _ in range(rng.randint(1, 4))]
        text.append(f"{len(moves)} {' '.join(map(str, moves))}")
        positions = [[rng.randint(0, 22) for _ in range(rng.randint(0, 3))] for _ in range(7)]
        text.append(str(len(positions)))
        text += [" ".join(map(str, [len(h), *h])) for h in positions]
        expected.append("".join("W" if wins("subtraction", moves, h) else "L"
                                for h in positions))
    return "\n".join(text + ["0"]) + "\n", "".join(line + "\n" for line in expected)


def test_solve_random_classic_input_matches_brute_force(cli):
    text, expected = random_classic(random.Random("classic"))
    result = cli("solve", input=text)
    assert result.exit_code == 0, result.output
    assert result.stdout == expected


@pytest.mark.parametrize(("cut", "role"), [
    (CLASSIC_SAMPLE.replace("7 12\n0\n", "7 1"), "1 .*heap 4 of position 3 of 3 in test case 2"),
    (CLASSIC_SAMPLE.replace("3 7 12\n0\n", "3 7\n0\n"),
     "0 .*heap 4 of position 3 of 3 in test case 2"),
])
def test_solve_and_convert_refuse_an_input_that_may_be_truncated(cli, tmp_path, monkeypatch,
                                                                 cut, role):
    """A classic input that lost its end (the last number cut short, or a number lost so that
    the terminating 0 reads as a heap) fails both commands with exit 1 naming the last token;
    nothing is printed or written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cut.txt").write_text(cut)
    for result in (cli("solve", input=cut), cli("convert", "cut.txt", "--out", "tables")):
        no_traceback(result)
        assert result.exit_code == 1
        assert result.stdout == ""
        assert re.search(r"input ends without the terminating 0; its last token, " + role +
                         r".*truncated\?", result.stderr)
    assert not (tmp_path / "tables").exists()


@pytest.mark.parametrize("text", ["", " ", "\n\n", " \t\r\n "])
def test_solve_and_convert_refuse_an_input_without_any_number(cli, tmp_path, monkeypatch, text):
    """Empty or whitespace-only input is no game: exit 1 (malformed input), nothing printed or
    written; a lone 0 stays a valid input without test cases."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.txt").write_text(text)
    for result in (cli("solve", input=text), cli("convert", "empty.txt", "--out", "tables")):
        no_traceback(result)
        assert result.exit_code == 1
        assert result.stdout == ""
        assert result.stderr == ("snim-batch: error: classic input: is empty (no number at all): "
                                 "expected test cases ending with a line holding 0 (a lone 0 is "
                                 "an input without test cases)\n")
    assert not (tmp_path / "tables").exists()
    zero = cli("solve", input=text + "0\n")
    assert (zero.exit_code, zero.stdout) == (0, "")


@pytest.mark.parametrize("text", [CLASSIC_SAMPLE, "random"])
def test_convert_then_run_matches_solve(cli, tmp_path, monkeypatch, text):
    monkeypatch.chdir(tmp_path)
    if text == "random":
        text, _ = random_classic(random.Random("classic-convert"))
    (tmp_path / "sample.txt").write_text(text)
    solved = cli("solve", input=text)
    assert solved.exit_code == 0
    converted = cli("convert", "sample.txt", "--out", "tables")
    assert converted.exit_code == 0, converted.output
    ran = cli("run", "--rules", "tables/rules.parquet", "--positions",
              "tables/positions.parquet", "--out", "out")
    assert ran.exit_code == 0, ran.output
    v = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")
    lines = (v.group_by("rule_set_id", maintain_order=True)
             .agg(pl.col("verdict").str.join("")).sort("rule_set_id")["verdict"].to_list())
    assert "".join(line + "\n" for line in lines) == solved.stdout


# ---- the installed script -------------------------------------------------------------------

def test_solve_work_limits_name_their_option(cli):
    """solve bounds its tables as run does: past --max-rule-ops or --max-run-ops a heap's value
    is unknown, exit 1 naming the case, the heap and the option; the defaults are run's."""
    many = " ".join(map(str, range(1, 401)))  # 600 operations a value
    result = cli("solve", "--max-rule-ops", "6000", input=f"400 {many}\n1\n1 500\n0\n")
    assert result.exit_code == 1
    assert result.stderr.strip().endswith(
        "test case 1, position 1, heap 1 (size 500): its Grundy value under S = "
        "{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ..., 399, 400} (400 moves) is not determined: no "
        "period is proven within the 11 values that --max-rule-ops 6000 allows")
    text = "2 1 1001\n1\n1 999\n2 1 1002\n1\n1 999\n0\n"  # 999 x 202 operations each
    result = cli("solve", "--max-run-ops", str(999 * 202 + 498 * 202), input=text)
    assert result.exit_code == 1
    assert "test case 2, position 1, heap 1 (size 999)" in result.stderr
    assert "within the 499 values that --max-run-ops 302394 allows" in result.stderr
    result = cli("solve", "--max-run-ops", str(2 * 999 * 202), input=text)
    assert (result.exit_code, result.stdout) == (0, "W\nW\n")  # SG(999) = 1 (x % 2 below 1000)
    defaults = {name: p.default for name, p in inspect.signature(cli_module.solve).parameters
                .items()}
    assert (defaults["max_rule_ops"], defaults["max_run_ops"]) == (DEFAULT_RULE_OPS,
                                                                   DEFAULT_RUN_OPS)


needs_script = pytest.mark.skipif(not SCRIPT.exists(), reason="snim-batch script not installed")


@needs_script
def test_script_solve_and_grundy(tmp_path):
    solved = subprocess.run([SCRIPT, "solve"], input=CLASSIC_SAMPLE, capture_output=True,
                            text=True, cwd=tmp_path, timeout=120)
    assert (solved.returncode, solved.stdout) == (0, "LWW\nWWL\n"), solved.stderr
    grundy = subprocess.run([SCRIPT, "grundy", "--moves", "2 5", "--upto", "20"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert grundy.returncode == 0, grundy.stderr
    lines = grundy_lines(grundy.stdout)
    assert (lines["preperiod"], lines["period"]) == ("0", "7")
    assert lines["SG(0..20)"].split() == [str(v) for v in naive_sg((2, 5), 21)]


@needs_script
@pytest.mark.parametrize("text", ["", "\n \n"])
def test_script_solve_refuses_an_empty_file_on_stdin(tmp_path, text):
    path = tmp_path / "in.txt"
    path.write_text(text)
    with path.open("rb") as stdin:
        solved = subprocess.run([SCRIPT, "solve"], stdin=stdin, capture_output=True, text=True,
                                cwd=tmp_path, timeout=120)
    assert (solved.returncode, solved.stdout) == (1, "")
    assert "classic input: is empty (no number at all)" in solved.stderr


@needs_script
def test_script_bad_moves_exit_2_without_traceback(tmp_path):
    bad = subprocess.run([SCRIPT, "grundy", "--moves", "2 x"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert bad.returncode == 2
    assert "--moves" in bad.stderr and "Traceback" not in bad.stderr
    assert bad.stdout == ""


@needs_script
def test_script_solve_reads_a_file_on_stdin_from_its_offset_and_flushes_all(tmp_path):
    # A regular file on stdin is mapped, not read: the answer must start where the file offset
    # is, and a large answer must reach stdout in full though the process skips its teardown.
    # S = {1, 2}: SG(h) = h % 3, so a single heap wins iff h % 3 != 0.
    heaps = [random.Random(5).randrange(0, 1000) for _ in range(300_000)]
    body = f"2 1 2\n{len(heaps)}\n" + "".join(f"1 {h}\n" for h in heaps) + "0\n"
    path = tmp_path / "in.txt"
    path.write_text("not classic input; skipped by the offset\n" + body)
    with path.open("rb") as stdin:
        stdin.seek(len("not classic input; skipped by the offset\n"))
        solved = subprocess.run([SCRIPT, "solve"], stdin=stdin, capture_output=True,
                                text=True, cwd=tmp_path, timeout=120)
    assert solved.returncode == 0, solved.stderr
    assert solved.stdout == "".join("W" if h % 3 else "L" for h in heaps) + "\n"
    with path.open("rb") as stdin:
        bad = subprocess.run([SCRIPT, "solve"], stdin=stdin, capture_output=True, text=True,
                             cwd=tmp_path, timeout=120)
    assert bad.returncode == 1, bad.stderr  # bad input file: exit 1, as documented
    assert "token 1 ('not'" in bad.stderr and "Traceback" not in bad.stderr


@needs_script
def test_script_with_stdout_closed_and_stdin_left_at_its_end(tmp_path):
    # With stdout closed (`>&-`) Python has no sys.stdout: the command still succeeds.
    closed = subprocess.run([SCRIPT, "generate", "--out", str(tmp_path / "g"), "--positions", "5"],
                            stderr=subprocess.PIPE, text=True, timeout=120,
                            preexec_fn=lambda: os.close(1))
    assert closed.returncode == 0, closed.stderr
    assert (tmp_path / "g" / "rules.parquet").is_file()
    # solve consumes its stdin as a read would: a command after it sees nothing left.
    (tmp_path / "in.txt").write_text(CLASSIC_SAMPLE)
    both = subprocess.run(["sh", "-c", f"{{ '{SCRIPT}' solve; cat; }} < in.txt"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (both.returncode, both.stdout) == (0, "LWW\nWWL\n"), both.stderr


@needs_script
@pytest.mark.parametrize("where", ["full disk", "closed pipe", "no stderr"])
def test_a_committed_run_with_stdout_or_stderr_gone_exits_with_its_own_code(tmp_path, where):
    """Once the output is committed, a summary that cannot be printed (stdout on a full disk,
    a reader that closed the pipe) or no stderr at all (`2>&-`) does not turn the run into
    a failure: the run's exit code, and the result file says it succeeded. Before, exit 1
    (and a traceback for the full disk), or with no stderr every run failed."""
    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    argv = [str(SCRIPT), "run", "--rules", str(sample / "rules.csv"), "--positions",
            str(sample / "positions.csv"), "--out", str(tmp_path / "out"), "--result-file",
            str(tmp_path / "result.json")]
    if where == "full disk":
        with open("/dev/full", "w") as full:
            proc = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True,
                                  timeout=120)
        assert "cannot print the result (No space left on device)" in proc.stderr
    elif where == "closed pipe":
        reader, writer = os.pipe()
        os.close(reader)
        try:
            proc = subprocess.run(argv, stdout=writer, stderr=subprocess.PIPE, text=True,
                                  timeout=120)
        finally:
            os.close(writer)
        assert "cannot print the result (Broken pipe)" in proc.stderr
    else:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, timeout=120,
                              preexec_fn=lambda: os.close(2))
    assert proc.returncode == 0
    assert "Traceback" not in (proc.stderr or "")
    result = json.loads((tmp_path / "result.json").read_text())
    assert (result["status"], result["exit_code"]) == ("succeeded", 0)
    assert (tmp_path / "out" / "manifest.json").is_file()


FULL = "snim-batch: error: stdout: cannot print the answer (No space left on device)"
STDOUT_CASES = [
    (["grundy", "--moves", "2 5"], 1, None, FULL),
    (["--version"], 1, None, FULL),
    (["--help"], 1, None, FULL),
    (["run", "--help"], 1, None, FULL),
    (["explain", "--json", "--rules", "R", "--positions", "P", "--out", "OUT"], 1, None, FULL),
    (["generate", "--out", "OUT", "--positions", "5"], 0, "rules.parquet",
     "snim-batch: warning: stdout: cannot print the result (No space left on device)"),
    (["run", "--json", "--rules", "R", "--positions", "P", "--out", "OUT"], 1, "manifest.json",
     FULL + "; the run's output is committed"),
]


@needs_script
@pytest.mark.parametrize(("args", "code", "wrote", "line"), STDOUT_CASES)
def test_no_stdout_at_all_is_said_as_a_full_one_is(tmp_path, args, code, wrote, line):
    """`>&-`: Python has no sys.stdout then, and click printed the answer nowhere, exit 0
    (QA). Every command now says it as for a full stdout, in solve's words for a closed one."""
    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    names = {"R": str(sample / "rules.csv"), "P": str(sample / "positions.csv"),
             "OUT": str(tmp_path / "out")}
    proc = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", str(SCRIPT),
                           *(names.get(a, a) for a in args)],
                          stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == code, proc.stderr
    assert line.replace("No space left on device", "it is closed") in proc.stderr.splitlines()
    assert "Traceback" not in proc.stderr
    if wrote is not None:
        assert (tmp_path / "out" / wrote).is_file()


@needs_script
@pytest.mark.parametrize(("args", "code", "wrote", "line"), STDOUT_CASES)
def test_stdout_on_a_full_disk_is_an_error_line_not_a_traceback(tmp_path, args, code, wrote,
                                                                 line):
    """A command whose answer is its stdout (SG values, a plan, --help, the run result under
    --json) fails with one error line, exit 1, when stdout cannot take it; a line that only
    says what was written is a warning, the files stand and the exit is 0. A committed run
    whose --json result is lost exits 1 and says the output is committed."""
    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    names = {"R": str(sample / "rules.csv"), "P": str(sample / "positions.csv"),
             "OUT": str(tmp_path / "out")}
    with open("/dev/full", "w") as full:
        proc = subprocess.run([str(SCRIPT), *(names.get(a, a) for a in args)], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == code, proc.stderr
    assert line in proc.stderr.splitlines()
    assert "Traceback" not in proc.stderr
    if wrote is not None:
        assert (tmp_path / "out" / wrote).is_file()


@pytest.mark.parametrize("inner", [False, True])
@pytest.mark.parametrize("landed", ["outcome unknown", "written", "nothing written"])
def test_a_stop_during_the_clean_up_of_a_commit_that_may_have_landed(capsys, landed, inner):
    """A stop that comes while the error of a commit that may have landed is on its way (its
    staging being removed, `inner`: inside the clean-up's own handling of an OSError) is
    reported as that error, which says what is in place; a stop during the clean-up of an
    error that wrote nothing stays a stop."""
    import typer

    from pipeline import cli
    from pipeline.errors import CommitOutcomeUnknown, OutputError, Stopped

    error = {"outcome unknown": CommitOutcomeUnknown("s3://b/out: could not tell whether "
                                                     "this run committed"),
             "written": OutputError("out: 2 tables committed, 1 not", written=True),
             "nothing written": OutputError("out: cannot rename", written=False)}[landed]
    try:
        try:
            raise error
        finally:  # the clean-up, where the stop lands
            if inner:
                try:
                    raise OSError("busy")
                except OSError:  # the stop, raised as a signal handler raises it
                    raise Stopped(signal.SIGTERM)  # noqa: B012, B904
            raise Stopped(signal.SIGTERM)  # noqa: B012
    except Stopped as stop:
        stopped = stop
    with pytest.raises(typer.Exit) as ended:
        cli._fail(stopped, False)
    said = capsys.readouterr().err
    if landed == "nothing written":
        assert ended.value.exit_code == 143
        assert "stopped by SIGTERM; nothing was written" in said
    else:
        assert ended.value.exit_code == 1
        assert f"error: {error}" in said and "stopped by" not in said


def on_a_terminal(argv: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, str]:
    """Run `argv` with its stderr on a terminal (a pty), where nothing strips escape
    sequences on the way; the process and all it wrote there."""
    import pty

    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=follower,
                              timeout=120)
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal has no writer left and nothing unread
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    return proc, b"".join(chunks).decode()


@needs_script
def test_a_terminal_that_goes_away_does_not_fail_the_run(tmp_path):
    """stderr a terminal that is closed once the run has begun to draw on it (a hung-up
    session): the display is given up, not the run (it failed with an internal error, EIO,
    nothing written). Exit 0, the output committed, the result file says so."""
    import pty

    made = subprocess.run([str(SCRIPT), "generate", "--out", str(tmp_path / "g"),
                           "--positions", "300000", "--seed", "3"], capture_output=True,
                          timeout=120)
    assert made.returncode == 0, made.stderr
    leader, follower = pty.openpty()
    proc = subprocess.Popen([str(SCRIPT), "run", "--rules", str(tmp_path / "g" / "rules.parquet"),
                             "--positions", str(tmp_path / "g" / "positions"), "--out",
                             str(tmp_path / "out"), "--result-file", str(tmp_path / "r.json")],
                            stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    try:
        assert os.read(leader, 100)  # the display has begun
    finally:
        os.close(leader)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert out.startswith(f"wrote {tmp_path / 'out'}: 300000 verdicts".encode())
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "succeeded"


@needs_script
def test_script_on_a_terminal_escapes_user_data(tmp_path):
    # stderr is a terminal here (a pty), where nothing strips escape sequences on the way.
    positions = hostile_job(tmp_path)
    proc, err = on_a_terminal([SCRIPT, "run", "--rules", "rules.csv", "--positions",
                               positions.name, "--out", "out"], tmp_path)
    assert proc.returncode == 3, err
    assert_printable(proc.stdout.decode())
    # the live progress display's own controls aside: hide and show the cursor, erase the
    # line, up one line, and the returns between its redraws (no colour: it has none)
    shown = err
    for own in ("\x1b[?25l", "\x1b[?25h", "\x1b[2K", "\x1b[1A", "\r"):
        shown = shown.replace(own, "\n" if own == "\r" else "")
    assert_printable(shown)
    assert (f"pos{HOSTILE_NAME_SHOWN}.csv row 2, column rule_set_id: unknown rule_set_id "
            f"ghost{HOSTILE_SHOWN}") in err


# ---- logging: the core logs, the CLI shows it ------------------------------------------------


def test_verbose_shows_the_cores_log_and_default_does_not(cli, tmp_path):
    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    args = ["run", "--rules", str(sample / "rules.csv"), "--positions",
            str(sample / "positions.csv")]
    quiet = cli(*args, "--out", str(tmp_path / "a"))
    loud = cli(*args, "--out", str(tmp_path / "b"), "--verbose")
    assert (quiet.exit_code, loud.exit_code) == (0, 0), quiet.output + loud.output
    quiet_err, loud_err = quiet.stderr, loud.stderr
    assert "info:" not in quiet_err and "debug:" not in quiet_err
    assert "snim-batch: info: 6 rule rows, 6 distinct rules; 1 positions files in wide form" \
        in loud_err
    assert f"snim-batch: info: committed {tmp_path / 'b'}" in loud_err
    assert "snim-batch: debug: staging the output in " in loud_err


@pytest.mark.parametrize(("interrupt", "code", "line"), [
    (KeyboardInterrupt(), 130, "snim-batch: interrupted; nothing was written"),
    (Stopped(15), 143, "snim-batch: stopped by SIGTERM; nothing was written"),
])
def test_an_interrupt_inside_a_kernel_call_is_reported_as_the_interrupt(capsys, interrupt, code,
                                                                        line):
    """A signal that lands while numba loads a kernel surfaces as the SystemError it caused;
    the user is told of the signal, not of an internal error."""
    try:
        try:
            raise interrupt
        except KeyboardInterrupt as exc:
            raise SystemError("CPUDispatcher(<function nim_sums_wide>) returned a result "
                              "with an exception set") from exc
    except SystemError as exc:
        caught = exc
    with pytest.raises(typer.Exit) as exit_:
        cli_module._fail(caught, verbose=False)
    assert exit_.value.exit_code == code
    assert capsys.readouterr().err.splitlines() == [line]


def test_a_stop_signal_outside_the_commands_own_handling_exits_128_plus_it():
    """SIGTERM while `grundy` is blocked writing its 2 MB of values to a pipe nobody reads:
    typer turns the interrupt into exit 130; the exit status still names the signal (143)."""
    read_end, write_end = os.pipe()
    proc = subprocess.Popen([str(SCRIPT), "grundy", "--moves", "2 5", "--upto", "1000000"],
                            stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    try:
        assert os.read(read_end, 1)  # the output has begun; the pipe then fills and blocks it
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        os.close(read_end)
    assert proc.returncode == 143


@pytest.mark.parametrize("empty", ["rules", "positions", "out"])
def test_an_empty_path_option_is_named(cli, small_job, tmp_path, empty):
    paths = {"rules": "rules.csv", "positions": "positions.csv", "out": "out", empty: " "}
    result = cli("run", *[a for name, path in paths.items() for a in (f"--{name}", path)])
    assert (result.exit_code, result.stderr) == (
        2, f"snim-batch: error: --{empty} is empty: give a path or URL\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["positions.csv", "rules.csv"]


@pytest.mark.parametrize("flags, named", [
    (("--spark-master", "local[2]"), "--spark-master applies to --engine spark only; this "
     "run uses the polars engine, which ignores it"),
    (("--spark-remote", "sc://127.0.0.1:15002"), "--spark-remote applies to --engine spark "
     "only; this run uses the polars engine, which ignores it"),
    (("--spark-master", "yarn", "--spark-remote", "sc://h:1", "--engine", "polars"),
     "--spark-master and --spark-remote apply to --engine spark only; this run uses the "
     "polars engine, which ignores them")])
def test_spark_flags_of_a_polars_run_are_named_as_ignored(cli, tmp_path, small_job, flags,
                                                          named):
    """--spark-master/--spark-remote given to a run of the polars engine: the run goes on
    (exit 0) with one warning line; the config file's spark settings (as the bundled
    config.yaml has) are not named, whatever engine runs."""
    result = cli(*RUN_FLAGS, *flags)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [f"snim-batch: warning: {named}"]
    assert (tmp_path / "out" / "manifest.json").is_file()
    (tmp_path / "settings.yaml").write_text("spark:\n  master: local[2]\n")
    quiet = cli(*RUN_FLAGS[:-1], "out2", "--config", "settings.yaml")
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stderr == f"snim-batch: config: {tmp_path / 'settings.yaml'}\n"


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--spark-remote", "sc://127.0.0.1:99999",
     "option 'spark.remote' must be a Spark Connect URL sc://HOST[:PORT][/;KEY=VALUE;...]: the "
     "port must be a number from 1 to 65535, got '99999'; got 'sc://127.0.0.1:99999'"),
    ("--spark-remote", "sc://u:PW@127.0.0.1:15002/;token=SECRET",
     "option 'spark.remote' must be a Spark Connect URL sc://HOST[:PORT][/;KEY=VALUE;...]: a "
     "user or password is not part of a Spark Connect URL (give token=... as a parameter); got "
     "'sc://<hidden>@127.0.0.1:15002/;token=<hidden>'"),
    ("--spark-master", "spark://127.0.0.1:99999",
     "option 'spark.master' is not a Spark master URL: the port must be a number from 1 to "
     "65535, got '99999'; got 'spark://127.0.0.1:99999'"),
    ("--spark-master", "local[0]",
     "option 'spark.master' is not a Spark master URL: a local master needs at least 1 "
     "thread; got 'local[0]'"),
])
def test_a_bad_spark_url_is_exit_2_before_anything_starts(cli, tmp_path, small_job, flag,
                                                           value, message):
    """Checked with the options, before Spark or a reader starts: exit 2, one line."""
    result = cli(*RUN_FLAGS, "--engine", "spark", flag, value)
    no_traceback(result)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [f"snim-batch: error: {message}"]
    assert not (tmp_path / "out").exists()


def name(size: int, letter: str = "n") -> str:
    return letter * size


def too_long(name_: str, staging: str = "", extra: int = 0) -> str:
    """The problem `refuse_long_names` states for `name_`: too long itself, or with the
    staging name beside it (`extra` bytes longer)."""
    shown = f"'{name_[:27]}...{name_[-28:]}'"
    size = len(name_.encode())
    if not staging:
        return f"the name {shown} is {size} bytes, more than the 255 a file name may have"
    return (f"the name {shown} is {size} bytes, and {staging} beside it would be "
            f"{size + extra}, more than the 255 a file name may have: give a name of at most "
            f"{255 - extra} bytes")


PARTIAL = "its staging directory .NAME.partial-PID-RUN"
DELTA = "its staging directory .NAME.delta-staging-PID-RUN"
GENERATING = "its staging directory .NAME.generating-PID"
TMP = "its temporary file .NAME.tmp-PID-TAG"


@pytest.mark.parametrize(("args", "option", "problem"), [
    (("run", "--out", name(256)), "--out", too_long(name(256))),
    (("run", "--out", name(215)), "--out", too_long(name(215), PARTIAL, 41)),
    (("run", "--out", "é" * 108), "--out", too_long("é" * 108, PARTIAL, 41)),  # 216 bytes
    (("run", "--out", f"x/{name(300)}/y"), "--out", too_long(name(300))),
    (("run", "--format", "delta", "--out", name(256)), "--out", too_long(name(256))),
    (("run", "--format", "delta", "--out", name(209)), "--out", too_long(name(209), DELTA, 47)),
    (("generate", "--positions", "5", "--out", name(256)), "--out", too_long(name(256))),
    (("generate", "--positions", "5", "--out", name(236)), "--out",
     too_long(name(236), GENERATING, 20)),
    (("report", "out", "--html", name(256)), "--html", too_long(name(256))),
    (("report", "out", "--html", name(234)), "--html", too_long(name(234), TMP, 22)),
])
def test_a_name_too_long_for_the_file_system_is_exit_2_before_any_work(
        cli, tmp_path, small_job, args, option, problem):
    """A path component over 255 bytes, or a name whose staging name beside it would be (the
    staging name is longer than the name), is refused up front with the longest name that
    works; it was `internal error: OSError: [Errno 36]`."""
    assert cli(*RUN_FLAGS).exit_code == 0  # `out`, for report
    before = sorted(p.name for p in tmp_path.iterdir())
    command, *rest = args
    flags = RUN_FLAGS[1:5] if command == "run" else ()
    result = cli(command, *flags, *rest)
    no_traceback(result)
    assert result.exit_code == 2, result.output
    given = rest[rest.index(option) + 1]
    shown = str(tmp_path / given) if command in ("run",) else given
    shown = shown if len(shown) <= 120 else shown[:117] + "..."
    assert result.stderr.strip().splitlines() == [
        f"snim-batch: error: {option} {shown}: {problem}; nothing was written"]
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("args", [
    ("run", "--out", name(214)),  # the longest a run's output may have
    ("run", "--format", "delta", "--out", name(208)),
    ("generate", "--positions", "5", "--out", name(235)),
    ("report", "out", "--html", name(233)),
    ("convert", "classic.txt", "--out", name(255)),  # its files go inside, under short names
])
def test_the_longest_name_that_fits_works(cli, tmp_path, small_job, args):
    assert cli(*RUN_FLAGS).exit_code == 0
    (tmp_path / "classic.txt").write_text("1 1\n1\n1 3\n0\n")
    command, *rest = args
    result = cli(command, *(RUN_FLAGS[1:5] if command == "run" else ()), *rest)
    assert result.exit_code == 0, result.output
    made = tmp_path / rest[rest.index("--out" if "--out" in rest else "--html") + 1]
    assert made.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_convert_and_inputs_with_a_name_too_long(cli, tmp_path, small_job):
    """convert's --out (exit 2, before reading), and a name too long in an input, which
    cannot exist (exit 1, as a missing input): a line naming the cause each, no traceback."""
    (tmp_path / "classic.txt").write_text("1 1\n1\n1 3\n0\n")
    long = name(256)
    result = cli("convert", "classic.txt", "--out", f"{long}/tables")
    no_traceback(result)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"snim-batch: error: --out {(long + '/tables')[:117]}...: {too_long(long)}; nothing "
        "was written"]
    for args, message in [
        (("run", "--rules", f"{long}/r.csv", "--positions", "positions.csv", "--out", "o"),
         f"rules input {tmp_path}/{long}/r.csv: cannot read it (File name too long)"),
        (("run", "--rules", "rules.csv", "--positions", f"{long}/*.csv", "--out", "o"),
         f"positions input {tmp_path}/{long}/*.csv: cannot read it (File name too long)"),
        (("report", long), f"{long[:117]}...: cannot read it ({too_long(long)})"),
        (("convert", long, "--out", "t"), f"{long}: cannot read (File name too long)"),
    ]:
        result = cli(*args)
        no_traceback(result)
        assert result.exit_code == 1, result.output
        assert result.stderr.strip().splitlines() == [f"snim-batch: error: {message}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["classic.txt", "positions.csv",
                                                          "rules.csv"]


def test_a_path_too_long_for_the_file_system_is_exit_2(cli, tmp_path, small_job):
    """Every name fits, but the path (with the staging name and the files below it) does not:
    refused up front too."""
    deep = "/".join([name(200, "d")] * 20)  # about 4 KiB
    result = cli(*RUN_FLAGS[:5], "--out", deep)
    no_traceback(result)
    assert result.exit_code == 2, result.output
    size = len(str(tmp_path / deep).encode())
    assert result.stderr.strip().endswith(
        f": the path is {size} bytes: with the names of the files beside and below it, longer "
        "than the 4096 bytes a path may have; nothing was written")


# ---- progress and log lines outside a terminal ---------------------------------------------

TIMESTAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
PHASES = ["rules", "tables", "positions", "finish", "write", "commit"]


def _parquet_job(tmp_path: Path) -> None:
    """rules.csv and a positions.parquet of 5 rows (so the run knows its total)."""
    import polars as pl

    write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
              [[1, "", "2 5"], [2, "nim", ""]])
    pl.DataFrame({"rule_set_id": [1, 1, 2, 2, 2], "position_id": [0, 1, 0, 1, 2],
                  "heaps": [[3], [5, 12], [1, 2], [7], []]},
                 schema={"rule_set_id": pl.Int64, "position_id": pl.Int64,
                         "heaps": pl.List(pl.Int64)}).write_parquet(tmp_path / "positions.parquet")


def _run_script(tmp_path: Path, *args: str, env: dict | None = None):
    return subprocess.run([SCRIPT, "run", "--rules", "rules.csv", "--positions",
                           "positions.parquet", "--out", "out", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


@needs_script
def test_outside_a_terminal_progress_is_timestamped_log_lines(tmp_path):
    """stderr not a terminal, --progress-every 0: one log line (UTC timestamp, level) at each
    phase's start and end, and for each progress step with the rate; nothing else."""
    _parquet_job(tmp_path)
    proc = _run_script(tmp_path, "--progress-every", "0")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    for line in lines:
        assert re.fullmatch(f"{TIMESTAMP} snim-batch: info: .+", line), line
    messages = [line.split(" snim-batch: info: ", 1)[1] for line in lines]
    expected = []
    for phase in PHASES:
        expected.append(re.escape(f"{phase}: started"))
        if phase == "positions":
            expected.append(r"positions: 5 of 5 rows \(100%\), [\d.,]+[kMG]? rows/s, about 0s "
                            r"left \(running for \d+s\)")
        expected.append(re.escape(f"{phase} done in ") + r"\d+\.\d\ds")
    assert len(messages) == len(expected), messages
    for message, pattern in zip(messages, expected, strict=True):
        assert re.fullmatch(pattern, message), (message, pattern)


@needs_script
def test_a_short_run_outside_a_terminal_prints_no_progress(tmp_path):
    """The default interval (10 s): a run that takes less says nothing on stderr."""
    _parquet_job(tmp_path)
    proc = _run_script(tmp_path)
    assert (proc.returncode, proc.stderr) == (0, "")


@needs_script
@pytest.mark.parametrize("how", ["flag", "env", "global flag"])
def test_log_format_json_is_one_object_per_line(tmp_path, how):
    """--log-format json (or SNIM_BATCH_LOG_FORMAT=json): every line on stderr is a JSON
    object with ts (UTC) and level: the core's log (--verbose), the progress with its fields,
    and an error."""
    from datetime import datetime

    _parquet_job(tmp_path)
    flags = {"flag": ["--log-format", "json"], "env": [], "global flag": []}[how]
    env = {"SNIM_BATCH_LOG_FORMAT": "json"} if how == "env" else {}

    def run(*args: str):
        if how == "global flag":
            return subprocess.run([SCRIPT, "--log-format", "JSON", "run", "--rules",
                                   "rules.csv", "--positions", "positions.parquet", "--out",
                                   "out", *args], cwd=tmp_path, capture_output=True,
                                  text=True, timeout=120)
        return _run_script(tmp_path, *flags, *args, env=env)

    proc = run("--progress-every", "0", "--verbose")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stderr.splitlines()]
    for record in records:
        assert record["ts"].endswith("Z")
        assert datetime.fromisoformat(record["ts"]).utcoffset().total_seconds() == 0
        assert record["level"] in ("debug", "info")
        assert isinstance(record["message"], str)
        assert record["logger"].startswith("pipeline")
    progress = [r for r in records if r["logger"] == "pipeline.progress"]
    assert [(r["phase"], r.get("status")) for r in progress if "status" in r] == [
        (phase, status) for phase in PHASES for status in ("started", "done")]
    steps = [r for r in progress if "status" not in r]
    assert [(r["phase"], r["done_units"], r["total_units"], r["unit"]) for r in steps] == [
        ("positions", 5, 5, "rows")]
    assert steps[0]["rate_per_s"] > 0 and steps[0]["eta_s"] == 0
    assert any(r["logger"] == "pipeline.run" and r["level"] == "info" for r in records)
    failed = run()
    assert failed.returncode == 1
    error = json.loads(failed.stderr.splitlines()[-1])
    assert (error["level"], error["logger"], error["message"]) == (
        "error", "pipeline.lines",
        f"{tmp_path / 'out'}: output already exists (pass --overwrite to replace it)")


def test_a_usage_error_with_log_format_json_is_a_json_line(cli, tmp_path, monkeypatch):
    """The format holds from the start of the command: a config error is one JSON object;
    the next command without the option prints text again."""
    monkeypatch.chdir(tmp_path)
    result = cli("run", "--log-format", "json", "--config", "missing.yaml")
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    record = json.loads(line)
    assert (record["level"], record["message"]) == (
        "error", "missing.yaml: config file not found")
    assert cli("run", "--config", "missing.yaml").stderr == (
        "snim-batch: error: missing.yaml: config file not found\n")


@pytest.mark.parametrize("command", ["explain", "run"])
def test_the_global_log_format_holds_for_every_command(cli, tmp_path, monkeypatch, command):
    """`snim-batch --log-format json COMMAND`: the command's own logging set-up (explain's,
    run's without its own --log-format) keeps the format, so its error is a JSON line."""
    monkeypatch.chdir(tmp_path)
    result = cli("--log-format", "json", command, "--rules", "missing.csv", "--positions",
                 "missing.parquet", "--out", "out")
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert json.loads(line)["message"] == (
        f"rules input {tmp_path / 'missing.csv'}: no such file or directory")


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--log-format", "json", "run", "--bogus"], {},
     "No such option: --bogus (Possible options: --out, --verbose); "
     "see 'snim-batch run --help'"),
    (["run", "--log-format=JSON", "--engine", "bad"], {},
     "Invalid value for '--engine' (env var: 'SNIM_BATCH_ENGINE'): 'bad' is not "
     "one of 'polars', 'spark'; see 'snim-batch run --help'"),
    (["report", "--bogus"], {"SNIM_BATCH_LOG_FORMAT": "json"},
     "No such option: --bogus; see 'snim-batch report --help'"),
    (["no-such-command"], {"SNIM_BATCH_LOG_FORMAT": "json"},
     "No such command 'no-such-command'; see 'snim-batch --help'"),
    (["--bogus", "--log-format", "json"], {},
     "No such option: --bogus; see 'snim-batch --help'"),
])
def test_a_command_line_usage_error_under_log_format_json_is_a_json_line(
        cli, monkeypatch, args, env, message):
    """click's own usage errors (an unknown option or command, a bad value) are, under
    --log-format json or its variable, the one JSON error line every other error is: a
    scheduler that parses stderr line by line meets no text block. Exit code 2 still."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = cli(*args)
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    record = json.loads(line)
    assert (record["level"], record["message"]) == ("error", message)


def test_no_arguments_under_log_format_json_is_still_the_help(cli, monkeypatch):
    """`snim-batch` alone shows its help (exit 2, as click gives it), not an error line."""
    monkeypatch.setenv("SNIM_BATCH_LOG_FORMAT", "json")
    result = cli()
    assert result.exit_code == 2
    assert result.stderr.startswith("Usage: snim-batch [OPTIONS] COMMAND [ARGS]...\n")
    assert "Commands:" in result.stderr


def test_a_command_line_usage_error_in_text_is_clicks_own(cli, monkeypatch):
    """Without json (or with a later --log-format text), the usage error reads as click
    prints it: the usage, where to find help, the error."""
    monkeypatch.setenv("SNIM_BATCH_LOG_FORMAT", "json")
    result = cli("--log-format", "text", "run", "--bogus")
    assert result.exit_code == 2
    assert result.stderr == (
        "Usage: snim-batch run [OPTIONS]\nTry 'snim-batch run --help' for help.\n\n"
        "Error: No such option: --bogus (Possible options: --out, --verbose)\n")


@needs_script
def test_log_format_json_on_a_terminal_is_json_lines_not_a_live_display(tmp_path):
    """JSON is for a machine wherever stderr is: on a terminal too, every line is an object."""

    _parquet_job(tmp_path)
    proc, err = on_a_terminal([SCRIPT, "run", "--rules", "rules.csv", "--positions",
                               "positions.parquet", "--out", "out", "--log-format", "json",
                               "--progress-every", "0"], tmp_path)
    assert proc.returncode == 0
    records = [json.loads(line) for line in err.splitlines()]
    assert [r["phase"] for r in records if r.get("status") == "done"] == PHASES


INSIDE = "is inside the snim-batch output"


@pytest.mark.parametrize(("args", "said"), [
    (["run", "--rules", "rules.csv", "--positions", "positions.csv", "--out", "o/inner"],
     INSIDE),
    (["generate", "--out", "o/gen", "--positions", "5"], INSIDE),
    (["convert", "classic.txt", "--out", "o/tables"], INSIDE),
    (["run", "--rules", "rules.csv", "--positions", "positions.csv", "--out", "o",
      "--overwrite", "--result-file", "o/result.json"], INSIDE),
    (["run", "--rules", "rules.csv", "--positions", "positions.csv", "--out", "elsewhere",
      "--result-file", "o/result.json"], INSIDE),
])
def test_nothing_is_written_inside_a_snim_batch_output(cli, small_job, tmp_path, args, said):
    """An output, a dataset, tables or a run result inside an existing output would leave
    it holding what its manifest does not list, so that its next --overwrite refused to
    replace it: refused before any work (exit 2), and the output stays replaceable."""
    (tmp_path / "classic.txt").write_text(CLASSIC_SAMPLE)
    job = ["run", "--rules", "rules.csv", "--positions", "positions.csv", "--out", "o"]
    assert cli(*job).exit_code == 0
    listed = sorted(p.name for p in (tmp_path / "o").iterdir())
    result = cli(*args)
    assert result.exit_code == 2, result.output
    assert said in result.stderr
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == listed
    assert not (tmp_path / "elsewhere").exists()
    assert cli(*job, "--overwrite").exit_code == 0


@pytest.mark.parametrize("fault", ["missing input", "bad rows under fail"])
def test_a_failed_run_removes_the_directories_it_made_for_its_output(cli, small_job, tmp_path,
                                                                    fault):
    """--out new/a/b: a run that fails with nothing written leaves no new/ behind (it made
    new/ and new/a for its staging); one that succeeds keeps them, and an existing directory
    on the way is never removed."""
    (tmp_path / "kept").mkdir()
    (tmp_path / "bad.csv").write_text("rule_set_id,position_id,heaps\n1,0,x\n")
    positions = "missing.csv" if fault == "missing input" else "bad.csv"
    for out in ("new/a/b", "kept/a/b"):
        result = cli("run", "--rules", "rules.csv", "--positions", positions, "--out", out,
                     "--on-bad-rows", "fail")
        assert result.exit_code == 1, result.output
    assert not (tmp_path / "new").exists()
    assert list((tmp_path / "kept").iterdir()) == []
    assert cli("run", "--rules", "rules.csv", "--positions", "positions.csv", "--out",
               "new/a/b").exit_code == 0
    assert (tmp_path / "new" / "a" / "b" / "manifest.json").is_file()


@pytest.mark.parametrize("how", ["config out, empty directory", "linked out", "the out itself"])
def test_a_result_file_inside_the_run_s_own_output_is_refused(cli, small_job, tmp_path, how):
    """However the output is named (by the config file, through a link, or the result file
    being the output's own path), a --result-file inside it is refused before any work, and
    nothing is left there; `..` in a path is taken as written (`o/../r.json` is beside it)."""
    (tmp_path / "night").mkdir()
    (tmp_path / "c.yaml").write_text("rules: rules.csv\npositions: positions.csv\nout: night\n")
    (tmp_path / "link").symlink_to(tmp_path / "night")
    args = {"config out, empty directory": ["--config", "c.yaml", "--result-file",
                                            "night/r.json"],
            "linked out": ["--config", "c.yaml", "--out", "link", "--result-file",
                           "night/r.json"],
            "the out itself": ["--config", "c.yaml", "--out", "fresh", "--result-file",
                               "fresh"]}[how]
    result = cli("run", *args)
    assert result.exit_code == 2, result.output
    assert "is inside the output" in result.stderr
    assert list((tmp_path / "night").iterdir()) == []
    assert not (tmp_path / "fresh").exists()
    assert cli("run", "--config", "c.yaml", "--result-file", "night/../r.json").exit_code == 0
    assert cli("run", "--config", "c.yaml", "--out", "night/../other", "--result-file",
               "night/../r2.json").exit_code == 0
    assert (tmp_path / "other" / "manifest.json").is_file() and (tmp_path / "r2.json").is_file()


def test_a_result_file_name_too_long_for_its_temporary_file_is_refused_first(
        cli, small_job, tmp_path):
    """The result is written through `.NAME.PID.tmp` beside it: a legal name too long for
    that was found only after the commit (exit 1, "the run's output is committed", and a
    retry then met "output already exists"). Refused before any work now, exit 2; the
    longest name that fits is written."""
    (tmp_path / "c.yaml").write_text("rules: rules.csv\npositions: positions.csv\nout: o\n")
    result = cli("run", "--config", "c.yaml", "--result-file", "r" * 250)
    assert result.exit_code == 2, result.output
    assert result.stderr.endswith(
        "is 250 bytes, and its temporary file .NAME.PID.tmp beside it would be 263, more than "
        "the 255 a file name may have: give a name of at most 242 bytes; nothing was written\n")
    assert not (tmp_path / "o").exists()
    too_long = cli("run", "--config", "c.yaml", "--result-file", "r" * 300)  # past NAME_MAX
    assert (too_long.exit_code, too_long.stderr.count("\n")) == (2, 1), too_long.output
    assert "is 300 bytes, more than the 255 a file name may have" in too_long.stderr
    assert cli("run", "--config", "c.yaml", "--result-file", "r" * 242).exit_code == 0
    assert json.loads((tmp_path / ("r" * 242)).read_text())["exit_code"] == 0


@pytest.mark.parametrize(("args", "read_as"), [
    (["--config", "c.yaml", "--result-file", "positions.csv"], "--positions positions.csv"),
    (["--config", "c.yaml", "--result-file", "c.yaml"], "config file c.yaml"),
    (["--config", "c.yaml", "--rules", "rul*.csv", "--result-file", "./rules.csv"],
     "--rules rul*.csv"),
    (["--config", "c.yaml", "--positions", "in", "--result-file", "in/deep/p.csv"],
     "--positions in"),
    (["--config", "c.yaml", "--rules", "link.csv", "--result-file", "rules.csv"],
     "--rules link.csv"),
    (["--config", "c.yaml", "--positions", "pos/p*.csv", "--result-file", "pos/p9.csv"],
     "--positions pos/p*.csv"),  # not there yet: the next night would read it
    (["--config", "c.yaml", "--positions", "lk", "--result-file", "ext/real.csv"],
     "--positions lk"),  # lk/p.csv links to it
])
def test_a_result_file_that_is_an_input_is_refused(cli, small_job, tmp_path, args, read_as):
    """The result would replace the file (a failed run's result too) and the next night would
    read JSON: a file the run reads, however named (a glob, a directory, the file a link
    points to), or its config file, is refused before any work, and every file stays as it
    was. A JSON file in an input directory is no input; a link that is not an input itself
    but points to one is refused too: the result replaces the file a link points to."""
    (tmp_path / "c.yaml").write_text("rules: rules.csv\npositions: positions.csv\nout: o\n")
    (tmp_path / "in" / "deep").mkdir(parents=True)
    (tmp_path / "in" / "deep" / "p.csv").write_bytes((tmp_path / "positions.csv").read_bytes())
    (tmp_path / "in" / "r.json").write_text("{}")
    (tmp_path / "link.csv").symlink_to(tmp_path / "rules.csv")
    (tmp_path / "pos").mkdir()
    (tmp_path / "pos" / "p1.csv").write_bytes((tmp_path / "positions.csv").read_bytes())
    (tmp_path / "ext").mkdir()
    (tmp_path / "ext" / "real.csv").write_bytes((tmp_path / "positions.csv").read_bytes())
    (tmp_path / "lk").mkdir()
    (tmp_path / "lk" / "p.csv").symlink_to(tmp_path / "ext" / "real.csv")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    result = cli("run", *args)
    assert result.exit_code == 2, result.output
    shown = repr(str(Path(args[-1])))  # as typer's Path gives it
    *what, spec = read_as.split()
    read_as = f"{' '.join(what)} {tmp_path / spec}"  # the settings' absolute paths
    assert result.stderr == (f"snim-batch: error: --result-file {shown}: the run reads it "
                             f"({read_as}), and the result would replace it: name another "
                             "file\n")
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert not (tmp_path / "o").exists()
    assert cli("run", "--config", "c.yaml", "--overwrite", "--result-file",
               "r.json").exit_code == 0
    through = cli("run", "--config", "c.yaml", "--overwrite", "--result-file", "link.csv")
    assert through.exit_code == 2, through.output  # it would replace rules.csv
    assert f"the run reads it (--rules {tmp_path / 'rules.csv'})" in through.stderr
    assert (tmp_path / "link.csv").is_symlink()
    assert (tmp_path / "rules.csv").read_bytes() == before[tmp_path / "rules.csv"]
    for fine in ("in/r.json", "in/.hidden.csv", "in/_x.csv"):  # names the run does not read
        assert cli("run", "--config", "c.yaml", "--positions", "in", "--overwrite",
                   "--result-file", fine).exit_code == 0
    assert cli("run", "--config", "c.yaml", "--positions", str(tmp_path / "p*.csv"),
               "--overwrite", "--result-file", "pos/p2.csv").exit_code == 0  # `*` is no `/`
    (tmp_path / "pos" / "p2.csv").unlink()  # that result: pos/ would read it as input
    assert cli("run", "--config", "c.yaml", "--positions", "pos/**/*.csv", "--overwrite",
               "--result-file", "pos/new.csv").exit_code == 2  # `**`: no directory too
    assert cli("run", "--config", "c.yaml", "--positions", "pos/**", "--overwrite",
               "--result-file", "pos/run.json").exit_code == 0  # `**` takes data files
    os.link(tmp_path / "pos" / "p1.csv", tmp_path / "hard.csv")  # a rename leaves p1.csv be
    assert cli("run", "--config", "c.yaml", "--positions", "pos", "--overwrite",
               "--result-file", "hard.csv").exit_code == 0
    assert (tmp_path / "pos" / "p1.csv").read_bytes() == before[tmp_path / "pos" / "p1.csv"]


def test_verbose_traceback_under_log_format_json_is_one_json_line(cli, tmp_path, monkeypatch):
    """--verbose adds the traceback of an error; under json it is one object, like every
    other line on stderr, its message the whole traceback."""
    monkeypatch.chdir(tmp_path)
    result = cli("--log-format", "json", "run", "--rules", "missing.csv", "--positions",
                 "missing.csv", "--out", "out", "--verbose")
    assert result.exit_code == 1
    records = [json.loads(line) for line in result.stderr.splitlines()]
    [trace] = [r for r in records if r["message"].startswith("Traceback (most recent call")]
    assert "InputError" in trace["message"] and "\n" in trace["message"]



@pytest.mark.parametrize(("args", "extra"), [
    (["history", "OUT"], "delta"),
    (["run", "--rules", "R", "--positions", "P", "--out", "OUT", "--format", "delta"], "delta"),
    (["grundy", "--moves", "1 2", "--plot", "OUT/sg.png"], "plot"),
    (["run", "--rules", "R", "--positions", "P", "--out", "OUT", "--engine", "spark"], "spark"),
    (["explain", "--rules", "R", "--positions", "P", "--out", "OUT", "--engine", "spark"],
     "spark"),  # a preflight stops as the run would (it said "engine: spark", exit 0)
])
def test_a_missing_extra_is_named_for_a_checkout_and_for_a_wheel(tmp_path, args, extra):
    """An install without the extra (its packages hidden from the interpreter): exit 2, one
    line naming the extra and how to add it both from a checkout and from a wheel (the
    errors said only 'in the project's checkout'; history said it in words of its own)."""
    sample = Path(__file__).resolve().parents[1] / "data" / "sample"
    names = {"R": str(sample / "rules.csv"), "P": str(sample / "positions.csv"),
             "OUT": str(tmp_path / "out")}
    argv = [names.get(a, a).replace("OUT", str(tmp_path / "out")) for a in args]
    hidden = "; ".join(f"sys.modules[{m!r}] = None" for m in ("deltalake", "matplotlib",
                                                               "pyspark"))
    proc = subprocess.run([sys.executable, "-c", f"import sys; {hidden}; "
                           "from pipeline.cli import main; main()", *argv],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("snim-batch: error: "), line
    assert (f"needs the {extra} extra" in line and f"pip install '.[{extra}]' in the project's "
            f"checkout, or pip install 'WHEEL[{extra}]' naming the wheel you installed") in line


@pytest.mark.parametrize("command", [[], ["run"], ["explain"], ["grundy"], ["report"]])
def test_dash_h_is_help_as_in_most_tools(cli, command):
    """`snim-batch -h` said "No such option: -h" (QA): it is --help, for every command."""
    short, long = cli(*command, "-h"), cli(*command, "--help")
    assert short.exit_code == long.exit_code == 0, short.output
    assert short.stdout == long.stdout and "-h, --help" in short.stdout
