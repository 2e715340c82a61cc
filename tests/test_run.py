"""End-to-end: `run_job(config)` on files in tmp_path, every value against references in conftest.

Inputs are seeded random rule sets and positions in wide and long form, CSV and Parquet, single
files, directories and globs. Expected values come from exhaustive game search (small heaps),
naive mex tabulation with the naive period (huge heaps) and closed forms checked against brute
force; nothing is compared against the implementation itself.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
from functools import reduce
from operator import xor
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import (
    brute_force_wins,
    legal_takes,
    moves_text,
    naive_period,
    naive_sg,
    naive_sg_half,
    periodic_sg,
    read_outputs,
    sg_half,
    sg_nim,
    wins,
    write_csv,
    write_parquet,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from pipeline import batches
from pipeline.config import config_from_dict
from pipeline.engines import polars_engine
from pipeline.errors import BadRowsError, InputError, OutputError
from pipeline.events import COMMITTED, PHASE_DONE, PHASE_START, PROGRESS, RunEvent
from pipeline.io.outputs import scratch
from pipeline.run import run_job
from pipeline.transforms import evaluate, ordering
from pipeline.transforms.long_form import from_scratch, to_scratch

OUTPUTS = ["manifest.json", "rejects.parquet", "sg_tables.parquet", "summary.parquet",
           "verdicts.parquet"]
HEAPS = pl.List(pl.Int64)
BIG = 10**18
INT64_MAX = 2**63 - 1

# A rule is (rule_set_id, kind, moves as given); a position is (rule_set_id, position_id, heaps).


# ---- building inputs ------------------------------------------------------------------------


def random_rules(rng: random.Random, keys: str, n_sub: int = 6, max_move: int = 10) -> list:
    subs = []
    for _ in range(n_sub):
        moves = rng.sample(range(1, max_move + 1), rng.randint(1, 4))
        if rng.random() < 0.3:
            moves.append(moves[0])  # duplicates are dropped when canonicalising
        subs.append(moves)
    subs += [[3, 1, 2], [9, 4, 5]]  # runs, so the "a..b" CSV spelling shows up
    subs += [[7, 2], [6, 1, 11], [3, 8]]  # no runs: "2 7", "6,1,11", "[3, 8]" in turn
    subs.append(list(reversed(subs[0])) + [subs[0][0]])  # the same S under another id
    ids = rng.sample(range(1, 100), len(subs) + 2)
    if keys == "str":
        ids = [f"rs{i}" for i in ids]
    rules = [(rid, "subtraction", m) for rid, m in zip(ids, subs)]
    rules += [(ids[-2], "nim", None), (ids[-1], "half", None)]
    rng.shuffle(rules)
    return rules


def random_positions(rng: random.Random, rules: list, keys: str, per_rule: int = 10,
                     max_heap: int = 25, min_heaps: int = 0) -> list:
    positions = []
    for rid, _, _ in rules:
        pids = rng.sample(range(60), per_rule)
        for pid in pids:
            heaps = [rng.randint(0, max_heap) for _ in range(rng.randint(min_heaps, 3))]
            positions.append((rid, f"p{pid}" if keys == "str" else pid, heaps))
    rng.shuffle(positions)
    return positions


def key_dtype(values) -> pl.DataType:
    return pl.String if isinstance(values[0], str) else pl.Int64


def write_rules(path: Path, rules: list, fmt: str) -> Path:
    """CSV: every move spelling in turn, kind sometimes left blank (default subtraction)."""
    if fmt == "csv":
        rows, n = [], 0
        for i, (rid, kind, moves) in enumerate(rules):
            if kind != "subtraction":
                rows.append([rid, kind, ""])
                continue
            if any(m + 1 in moves for m in moves):
                style = 3
            else:
                style, n = n % 3, n + (len(moves) > 1)
            rows.append([rid, "" if i % 3 == 0 else kind, moves_text(moves, style)])
        return write_csv(path.with_suffix(".csv"), ["rule_set_id", "kind", "moves"], rows)
    ids = [r[0] for r in rules]
    return write_parquet(path.with_suffix(".parquet"), {
        "rule_set_id": ids,
        "kind": [None if i % 3 == 0 and k == "subtraction" else k
                 for i, (_, k, _) in enumerate(rules)],
        "moves": [m for _, _, m in rules],
    }, {"rule_set_id": key_dtype(ids), "kind": pl.String, "moves": HEAPS})


def write_positions(path: Path, positions: list, form: str, fmt: str,
                    with_pid: bool = True) -> Path:
    ids = [p[0] for p in positions]
    pids = [p[1] for p in positions]
    if form == "wide":
        if fmt == "csv":
            header = ["rule_set_id", "position_id", "heaps"] if with_pid else [
                "rule_set_id", "heaps"]
            rows = [[r, p, " ".join(map(str, h))] if with_pid else [r, " ".join(map(str, h))]
                    for r, p, h in positions]
            return write_csv(path.with_suffix(".csv"), header, rows)
        cols = {"rule_set_id": ids, "position_id": pids, "heaps": [p[2] for p in positions]}
        schema = {"rule_set_id": key_dtype(ids), "position_id": key_dtype(pids), "heaps": HEAPS}
        if not with_pid:
            del cols["position_id"], schema["position_id"]
        return write_parquet(path.with_suffix(".parquet"), cols, schema)
    rows = [(r, p, h) for r, p, heaps in positions for h in heaps]
    if fmt == "csv":
        return write_csv(path.with_suffix(".csv"), ["rule_set_id", "position_id", "heap"],
                         [list(row) for row in rows])
    return write_parquet(path.with_suffix(".parquet"), {
        "rule_set_id": [r[0] for r in rows], "position_id": [r[1] for r in rows],
        "heap": [r[2] for r in rows],
    }, {"rule_set_id": key_dtype(ids), "position_id": key_dtype(pids), "heap": pl.Int64})


def interleave_long(rng: random.Random, positions: list) -> list:
    """Long-form rows in shuffled order; returns the positions with heaps in file order."""
    rows = [(r, p, h) for r, p, heaps in positions for h in heaps]
    rng.shuffle(rows)
    grouped: dict = {}
    for r, p, h in rows:
        grouped.setdefault((r, p), []).append(h)
    return [(r, p, hs) for (r, p), hs in grouped.items()]


def job(tmp_path: Path, rules: str | Path, positions: str | Path, **extra) -> dict:
    return {"rules": str(rules), "positions": str(positions), "out": str(tmp_path / "out"),
            **extra}


def run(cfg: dict):
    return run_job(config_from_dict(cfg))


# ---- checking outputs -----------------------------------------------------------------------


def sg_reference(kind: str, moves):
    if kind == "nim":
        return sg_nim
    if kind == "half":
        return sg_half
    return periodic_sg(moves)


def canonical(moves) -> tuple[int, ...]:
    return tuple(sorted(set(moves)))


def check_move(kind, moves, heaps, move_heap, move_take, sg, small: bool) -> None:
    """A legal move to a losing position (by search for small heaps, else by the SG
    reference); for small heaps, exactly the one docs/outputs.md fixes among the winning moves
    search finds: on the first heap whose SG value g has g ^ nim-sum < g (the textbook
    strategy: a move to any smaller value exists), the smallest s in S that wins
    (subtraction), the only one (nim, half)."""
    assert move_heap is not None and move_take is not None
    assert 0 <= move_heap < len(heaps)
    h = heaps[move_heap]
    assert move_take in legal_takes(kind, canonical(moves or ()), h), (kind, moves, h, move_take)
    after = heaps[:move_heap] + [h - move_take] + heaps[move_heap + 1:]
    if not small:
        assert reduce(xor, map(sg, after), 0) == 0, (kind, moves, heaps, after)
        return

    def winning(i: int, take: int) -> bool:
        return not wins(kind, moves or (), heaps[:i] + [heaps[i] - take] + heaps[i + 1:])

    nim_sum = reduce(xor, map(sg, heaps), 0)
    i = next(i for i, h in enumerate(heaps) if sg(h) ^ nim_sum < sg(h))
    takes = [t for t in legal_takes(kind, canonical(moves or ()), heaps[i]) if winning(i, t)]
    assert kind == "subtraction" or len(takes) == 1
    assert (move_heap, move_take) == (i, min(takes)), (kind, moves, heaps, move_heap, move_take)


def check_outputs(out: Path, rules: list, positions: list, *, rows_read: int,
                  winning_moves: bool = False, small: bool = True) -> dict:
    """Verdicts equal the references; sorted; sg_tables and summary and manifest agree."""
    assert sorted(p.name for p in out.iterdir()) == OUTPUTS
    assert not list(out.parent.glob(f".{out.name}*")), "staging directory left behind"
    o = read_outputs(out)
    verdicts = o["verdicts"]
    cols = ["rule_set_id", "position_id", "nim_sum", "verdict"]
    if winning_moves:
        cols += ["move_heap", "move_take"]
    assert verdicts.columns == cols
    assert verdicts["nim_sum"].dtype == pl.Int64

    rule_of = {rid: (kind, moves) for rid, kind, moves in rules}
    sg_of = {rid: sg_reference(kind, moves) for rid, kind, moves in rules}
    heaps_of = {(r, p): h for r, p, h in positions}
    got = verdicts.rows(named=True)
    keys = [(row["rule_set_id"], row["position_id"]) for row in got]
    assert keys == sorted(keys), "verdicts not sorted by (rule_set_id, position_id)"
    assert sorted(keys) == sorted(heaps_of)
    for row in got:
        key = (row["rule_set_id"], row["position_id"])
        kind, moves = rule_of[key[0]]
        heaps = heaps_of[key]
        nim = reduce(xor, (sg_of[key[0]](h) for h in heaps), 0)
        assert row["nim_sum"] == nim, (key, kind, moves, heaps)
        if small:
            expected = "W" if wins(kind, moves or (), heaps) else "L"
            assert row["verdict"] == expected, (key, kind, moves, heaps)
        assert row["verdict"] == ("W" if row["nim_sum"] != 0 else "L")
        if winning_moves:
            if row["verdict"] == "W":
                check_move(kind, moves, heaps, row["move_heap"], row["move_take"],
                           sg_of[key[0]], small)
            else:
                assert row["move_heap"] is None and row["move_take"] is None

    assert o["rejects"].height == 0
    # sg_tables: one row per distinct rule, shared by every rule_set_id that has it
    expect_tables: dict = {}
    for rid, kind, moves in rules:
        k = (kind, canonical(moves) if kind == "subtraction" else ())
        expect_tables.setdefault(k, []).append(rid)  # the rules' key type, as in summary
    tables = o["sg_tables"]
    assert tables.height == len(expect_tables)
    for row in tables.rows(named=True):
        k = (row["kind"], tuple(row["moves"] or ()))
        assert sorted(row["rule_set_ids"]) == sorted(expect_tables[k]), k
        if row["kind"] == "subtraction":
            pre, per, _ = naive_period(k[1])
            assert (row["preperiod"], row["period"]) == (pre, per), k
    # summary: per rule set W / L from the references
    summary = {r["rule_set_id"]: r for r in o["summary"].rows(named=True)}
    assert sorted(summary) == sorted(rule_of)
    for rid in rule_of:
        mine = [v for v in got if v["rule_set_id"] == rid]
        w = sum(v["verdict"] == "W" for v in mine)
        assert (summary[rid]["positions"], summary[rid]["W"], summary[rid]["L"],
                summary[rid]["rejected"]) == (len(mine), w, len(mine) - w, 0)
    # manifest: counts reconcile with the inputs
    manifest = json.loads((out / "manifest.json").read_text())
    pos, rul = manifest["counts"]["positions"], manifest["counts"]["rules"]
    assert pos["rows_read"] == pos["rows_evaluated"] + pos["rows_rejected"] == rows_read
    assert pos["rows_rejected"] == 0
    assert (pos["verdicts"], pos["W"], pos["L"]) == (
        len(got), sum(v["verdict"] == "W" for v in got), sum(v["verdict"] == "L" for v in got))
    assert rul["rows_read"] == rul["rows_accepted"] + rul["rows_rejected"] == len(rules)
    assert manifest["exit_code"] == 0
    return manifest


# ---- the references themselves --------------------------------------------------------------


def run_checked(tmp_path: Path, rules: list, positions: list, form: str = "wide",
                fmt: str = "parquet", *, rules_fmt: str | None = None,
                winning_moves: bool = False, small: bool = True, **write) -> dict:
    """Write the tables, run cleanly (exit 0, no problems) and check every output against
    the references with `check_outputs`; the manifest."""
    r = write_rules(tmp_path / "rules", rules, rules_fmt or fmt)
    p = write_positions(tmp_path / "positions", positions, form, fmt, **write)
    result = run(job(tmp_path, r, p, winning_moves=winning_moves))
    assert result.exit_code == 0 and result.problems == []
    rows = len(positions) if form == "wide" else sum(len(h) for _, _, h in positions)
    return check_outputs(tmp_path / "out", rules, positions, rows_read=rows,
                         winning_moves=winning_moves, small=small)


def test_references_agree_with_brute_force():
    """The closed forms and the periodic formula used below, against exhaustive search."""
    assert naive_sg_half(300) == [sg_half(x) for x in range(300)]
    assert [sg_half(2**k - 1) for k in range(1, 63)] == [0] * 62
    rng = random.Random(7)
    for kind, moves in [("nim", ()), ("half", ()), ("subtraction", (2, 5)),
                        ("subtraction", (3, 7, 9)), ("subtraction", (1, 4, 6, 11))]:
        sg = sg_reference(kind, moves)
        if kind == "subtraction":
            assert [sg(x) for x in range(400)] == naive_sg(moves, 400)
        for _ in range(150):
            heaps = [rng.randint(0, 20) for _ in range(rng.randint(0, 3))]
            nim = reduce(xor, map(sg, heaps), 0)
            assert brute_force_wins(kind, moves, tuple(sorted(heaps))) == (nim != 0)


def test_many_rules_with_early_periods_all_get_their_tables_under_the_default_limits(tmp_path):
    """800 rule sets {k} with one heap of about 10^6 each: more first rounds of tables than
    the default max_run_ops holds at once (759 of them), but each period comes early, so
    every position is evaluated, none rejected. SG of {k} is floor(x / k) mod 2."""
    assert all(naive_sg((k,), 3 * k) == [(x // k) % 2 for x in range(3 * k)]
               for k in range(1, 12))
    ks = range(1, 801)
    rules = write_rules(tmp_path / "rules", [(k, "subtraction", (k,)) for k in ks], "parquet")
    heaps = {k: 10**6 + 7 * k for k in ks}
    positions = write_positions(tmp_path / "positions", [(k, k, (heaps[k],)) for k in ks],
                                "wide", "parquet")
    result = run(job(tmp_path, rules, positions))
    assert (result.exit_code, result.problems) == (0, [])
    verdicts = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")
    assert verdicts["verdict"].to_list() == ["W" if (heaps[k] // k) % 2 else "L" for k in ks]
    tables = pl.read_parquet(tmp_path / "out" / "sg_tables.parquet")
    assert tables["period"].to_list() == [2 * k for k in ks]
    assert tables["stopped_by"].null_count() == len(ks)


# ---- verdicts against brute force -----------------------------------------------------------

CASES = [("wide", "csv", "int"), ("wide", "parquet", "str"), ("long", "csv", "str"),
         ("long", "parquet", "int")]


@pytest.mark.parametrize(("form", "fmt", "keys"), CASES)
def test_verdicts_match_brute_force(tmp_path, form, fmt, keys):
    rng = random.Random(f"verdicts-{form}-{fmt}-{keys}")
    rules = random_rules(rng, keys)
    positions = random_positions(rng, rules, keys, min_heaps=0 if form == "wide" else 1)
    if form == "long":
        positions = interleave_long(rng, positions)
        rows = sum(len(h) for _, _, h in positions)
    else:
        positions += [(rules[0][0], "empty" if keys == "str" else 999, [])]
        rows = len(positions)
    manifest = run_checked(tmp_path, rules, positions, form, fmt)
    assert manifest["counts"]["positions"]["rows_read"] == rows
    assert manifest["positions_form"] == form


@pytest.mark.parametrize(("form", "fmt"), [("wide", "parquet"), ("long", "csv")])
def test_winning_moves_are_legal_and_winning(tmp_path, form, fmt):
    rng = random.Random(f"moves-{form}-{fmt}")
    rules = random_rules(rng, "int")
    positions = random_positions(rng, rules, "int", per_rule=12, min_heaps=1)
    if form == "long":
        positions = interleave_long(rng, positions)
    run_checked(tmp_path, rules, positions, form, fmt, winning_moves=True)
    v = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")
    assert v.filter(pl.col("verdict") == "W").height > 10  # the check above saw real moves


def split_long_form(monkeypatch, rows_per_part: int) -> list[int]:
    """Make the engine split long-form input into parts of about `rows_per_part` rows (as it
    does for large inputs); returns the list that records the part of each frame written."""
    monkeypatch.setattr(polars_engine, "LONG_PARTITION_ROWS", rows_per_part)
    written: list[int] = []
    write = scratch.Spill.write

    def recording(self: scratch.Spill, part: int, frame: pl.DataFrame) -> None:
        write(self, part, frame)
        written.append(part)

    monkeypatch.setattr(scratch.Spill, "write", recording)
    return written


@pytest.mark.parametrize(("fmt", "keys"), [("csv", "str"), ("parquet", "int")])
def test_long_form_split_into_parts_matches_brute_force(tmp_path, monkeypatch, fmt, keys):
    # Every position must still get all its heaps, in input order (winning moves index them),
    # though its rows are shuffled over the file and the parts are 7 rows each.
    written = split_long_form(monkeypatch, 7)
    rng = random.Random(f"split-{fmt}-{keys}")
    rules = random_rules(rng, keys)
    positions = interleave_long(rng, random_positions(rng, rules, keys, min_heaps=1))
    manifest = run_checked(tmp_path, rules, positions, "long", fmt, winning_moves=True)
    rows = sum(len(h) for _, _, h in positions)
    assert manifest["counts"]["positions"]["rows_read"] == rows
    assert len(set(written)) > 10
    assert sorted(x.name for x in (tmp_path / "out").iterdir()) == OUTPUTS


@pytest.mark.parametrize(("order", "fmt", "rule_keys"), [
    ("rule", "parquet", "int"), ("position", "csv", "int"),
    ("rule", "parquet", "str"), ("position", "csv", "str")])
def test_long_form_in_key_order_is_grouped_as_it_streams(tmp_path, monkeypatch, order, fmt,
                                                        rule_keys):
    """A large long-form input (several parts' worth) whose rows come in key order, sorted by
    rule set then position or by position then rule set, is grouped batch by batch with no
    scratch file, integer rule set ids or text ones (in their text order). Batches of 5 rows
    cut positions apart, and one position of 13 rows spans three batches: each must still
    get all its heaps, in input order (winning moves index them). Brute-force references."""
    written = split_long_form(monkeypatch, 7)
    monkeypatch.setattr(batches, "BATCH_ROWS", 5)
    rng = random.Random(f"in-order-{order}-{fmt}-{rule_keys}")
    rules = random_rules(rng, rule_keys)
    positions = random_positions(rng, rules, "int", min_heaps=1)
    positions.append((rules[0][0], 77, [1, 2, 0, 3, 1, 2, 2, 1, 0, 3, 1, 2, 3]))
    positions.sort(key=(lambda p: (p[0], p[1])) if order == "rule" else (lambda p: (p[1], p[0])))
    assert any(len(h) > 1 for _, _, h in positions)
    manifest = run_checked(tmp_path, rules, positions, "long", fmt, winning_moves=True)
    assert manifest["counts"]["positions"]["rows_read"] == sum(len(h) for _, _, h in positions)
    assert written == []


@pytest.mark.parametrize(("order", "rule_keys"), [("rule", "int"), ("position", "str")])
def test_long_form_in_key_order_with_bad_rows_gives_the_collected_runs_outputs(
        tmp_path, monkeypatch, order, rule_keys):
    """Rows in key order, some of them to reject (a negative heap, the positions of an invalid
    rule set, integer ids the rules do not have): the run grouped as it streams, batches of
    5 rows, writes exactly the outputs of the run that collects the same file whole."""
    rng = random.Random(f"in-order-bad-{order}-{rule_keys}")
    rules = random_rules(rng, rule_keys)
    bad_rule = "rs0" if rule_keys == "str" else 0
    rules.append((bad_rule, "subtraction", [0]))
    positions = random_positions(rng, rules, "int", min_heaps=1)
    positions[3] = (positions[3][0], positions[3][1], positions[3][2] + [-4])
    if rule_keys == "int":
        positions += [(100, 5, [1, 2]), (101, 5, [3])]
    positions.sort(key=(lambda p: (p[0], p[1])) if order == "rule" else (lambda p: (p[1], p[0])))
    r = write_rules(tmp_path / "rules", rules, "parquet")
    p = write_positions(tmp_path / "positions", positions, "long", "parquet")
    outputs = {}
    for how in ("collected", "streamed"):
        if how == "streamed":
            written = split_long_form(monkeypatch, 7)
            monkeypatch.setattr(batches, "BATCH_ROWS", 5)
        (tmp_path / how).mkdir()
        assert run(job(tmp_path / how, r, p, winning_moves=True)).exit_code == 3  # rejects
        manifest = json.loads((tmp_path / how / "out" / "manifest.json").read_text())
        assert manifest["counts"]["positions"]["rows_read"] == sum(len(h) for *_, h in positions)
        outputs[how] = read_outputs(tmp_path / how / "out")
    assert written == []
    assert outputs["collected"]["rejects"].height > 5
    for name, frame in outputs["collected"].items():
        assert_frame_equal(outputs["streamed"][name], frame)


@pytest.mark.parametrize("fault", ["position_cut_apart", "text_key_later",
                                   "next_file_starts_lower"])
def test_long_form_that_leaves_key_order_late_is_split_after_all(tmp_path, monkeypatch,
                                                                  fault):
    """Rows in key order until near the end, where a position's last heaps come again (its
    rows are not contiguous after all), a second file has text position ids, or a second
    file in key order of its own holds the last heaps of positions of the first (the order
    breaks right where a batch starts): the run notices there, splits the whole input by
    key instead, and its outputs are those of any other order (the position gets all its
    heaps, once). Brute-force references."""
    written = split_long_form(monkeypatch, 7)
    monkeypatch.setattr(batches, "BATCH_ROWS", 5)
    rng = random.Random(f"late-{fault}")
    rules = random_rules(rng, "int")
    positions = sorted(random_positions(rng, rules, "int", min_heaps=1),
                       key=lambda p: (p[0], p[1]))
    folder = tmp_path / "positions"
    folder.mkdir()
    if fault == "position_cut_apart":
        at = next(i for i, (_, _, h) in enumerate(positions) if len(h) > 1)
        rid, pid, heaps = positions[at]
        rows = positions[:at] + [(rid, pid, heaps[:1])] + positions[at + 1:]
        write_positions(folder / "a", rows + [(rid, pid, heaps[1:])], "long", "parquet")
    elif fault == "next_file_starts_lower":
        split = [p for p in positions if len(p[2]) > 1]
        assert len(split) > 3
        write_positions(folder / "a", [(r, p, h[:-1] if len(h) > 1 else h)
                                       for r, p, h in positions], "long", "parquet")
        write_positions(folder / "b", [(r, p, h[-1:]) for r, p, h in split], "long", "parquet")
    else:
        half = len(positions) // 2
        positions[half:] = [(rid, f"p{pid}", h) for rid, pid, h in positions[half:]]
        write_positions(folder / "a", positions[:half], "long", "csv")
        write_positions(folder / "b", positions[half:], "long", "csv")
        positions = [(rid, str(pid), h) for rid, pid, h in positions]
    result = run(job(tmp_path, write_rules(tmp_path / "rules", rules, "csv"), folder,
                     winning_moves=True))
    assert result.exit_code == 0 and result.problems == []
    check_outputs(tmp_path / "out", rules, positions,
                  rows_read=sum(len(h) for _, _, h in positions), winning_moves=True)
    assert written != []


def test_long_form_split_gives_the_whole_runs_outputs_with_mixed_key_types(tmp_path,
                                                                            monkeypatch):
    # Integer keys in one file and text keys in another ("07" is not the integer 7, so every
    # key becomes text): parts are hashed on the text form, so the split run must group and
    # order exactly as the run that collects everything at once.
    r = write_rules(tmp_path / "rules", [(1, "subtraction", [1, 2]), (7, "nim", None)], "csv")
    positions = tmp_path / "positions"
    positions.mkdir()
    rng = random.Random(11)
    ints = [(rng.choice([1, 7]), rng.randint(0, 30), rng.randint(0, 40)) for _ in range(300)]
    write_parquet(positions / "a.parquet", {
        "rule_set_id": [a for a, _, _ in ints], "position_id": [b for _, b, _ in ints],
        "heap": [h for _, _, h in ints]},
        {"rule_set_id": pl.Int64, "position_id": pl.Int64, "heap": pl.Int64})
    texts = [[rng.choice(["1", "7", "07"]), str(rng.randint(0, 30)), rng.randint(0, 40)]
             for _ in range(300)] + [["1", "3", "-2"], ["", "4", "1"]]
    write_csv(positions / "b.csv", ["rule_set_id", "position_id", "heap"], texts)
    whole = run(job(tmp_path / "whole", r, positions, winning_moves=True))
    split_long_form(monkeypatch, 5)
    split = run(job(tmp_path / "split", r, positions, winning_moves=True))
    assert whole.exit_code == split.exit_code == 3
    assert whole.manifest["counts"] == split.manifest["counts"]
    a, b = read_outputs(tmp_path / "whole" / "out"), read_outputs(tmp_path / "split" / "out")
    assert a["verdicts"]["rule_set_id"].dtype == pl.String
    assert a["verdicts"].height > 50 and "07" in set(a["rejects"]["rule_set_id"])
    for name in ("verdicts", "rejects", "summary", "sg_tables"):
        assert_frame_equal(a[name], b[name])
    # The rule set "07" is unknown; it is not rule set 7, so it keeps a summary row of its own.
    assert a["summary"].select("rule_set_id", "positions").rows() == [
        ("07", 0), ("1", a["verdicts"]["rule_set_id"].eq("1").sum()),
        ("7", a["verdicts"]["rule_set_id"].eq("7").sum())]


@pytest.mark.parametrize("case", ["minus zero", "text rule ids"])
def test_long_form_split_keeps_each_key_as_the_whole_run_does(tmp_path, monkeypatch, case):
    # "-0" is a key of its own, apart from "0" (it makes position_id text, as "07" does);
    # a text rule id in the rules file ("x") does not make
    # the positions' integer rule ids text (as in wide form and in Spark). Parts of 2 rows
    # must not change either. Under S = {1, 2}, SG(h) = h % 3; under nim, SG(h) = h.
    header = ["rule_set_id", "position_id", "heap"]
    if case == "minus zero":
        r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                      [[1, "subtraction", "1 2"]])
        write_csv(tmp_path / "positions" / "a.csv", header, [[1, "-0", 1], [1, 0, 2], [1, 1, 1]])
        write_csv(tmp_path / "positions" / "b.csv", header, [[1, "07", 1]])
        expected = [(1, "-0", 1), (1, "0", 2), (1, "07", 1), (1, "1", 1)]
    else:
        r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                      [[1, "subtraction", "1 2"], [2, "nim", ""], [10, "nim", ""],
                       ["x", "nim", ""]])
        write_csv(tmp_path / "positions" / "a.csv", header, [[1, 1, 1], [2, 1, 2], [10, 1, 3]])
        expected = [(1, 1, 1), (2, 1, 2), (10, 1, 3)]
    split_long_form(monkeypatch, 2)
    result = run(job(tmp_path, r, tmp_path / "positions"))
    assert result.exit_code == 0
    verdicts = read_outputs(tmp_path / "out")["verdicts"]
    assert verdicts.select("rule_set_id", "position_id", "nim_sum").rows() == expected


@pytest.mark.parametrize(("case", "integer_sort"), [
    ("integers", True), ("minus zero", False), ("leading zero", False)])
def test_wide_csv_batches_keep_each_key_as_one_table_would(tmp_path, monkeypatch, case,
                                                           integer_sort):
    # Batches of 2 rows. A CSV batch whose keys all read as integers is sorted as integers
    # (the counting sort, which keeps 200M CSV heaps under 2 GiB). "-0" is not how an integer
    # is written: like "07", it makes every key text, and is a key of its own, apart from "0",
    # as when all rows are unified at once. Under S = {1, 2}, SG(h) = h % 3.
    monkeypatch.setattr(batches, "BATCH_ROWS", 2)
    sorts: list[int] = []
    counting_sorted = ordering._counting_sorted

    def recording(frames, rule_ids):
        sorts.append(len(frames))
        return counting_sorted(frames, rule_ids)

    monkeypatch.setattr(ordering, "_counting_sorted", recording)
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [[1, "subtraction", "1 2"], [2, "nim", ""]])
    header = ["rule_set_id", "position_id", "heaps"]
    first = {"integers": "5", "minus zero": "-0", "leading zero": "-0"}[case]
    last = {"integers": "4", "minus zero": "7", "leading zero": "07"}[case]
    write_csv(tmp_path / "positions" / "a.csv", header,
              [[1, first, "1"], [2, 0, "2 3"], [1, 1, "1 1"]])
    write_csv(tmp_path / "positions" / "b.csv", header, [[1, last, "2 2"]])
    result = run(job(tmp_path, r, tmp_path / "positions"))
    assert result.exit_code == 0
    verdicts = read_outputs(tmp_path / "out")["verdicts"]
    expected = {"integers": [(1, 1, 0), (1, 4, 0), (1, 5, 1), (2, 0, 1)],
                "minus zero": [(1, "-0", 1), (1, "1", 0), (1, "7", 0), (2, "0", 1)],
                "leading zero": [(1, "-0", 1), (1, "07", 0), (1, "1", 0), (2, "0", 1)]}[case]
    assert verdicts.select("rule_set_id", "position_id", "nim_sum").rows() == expected
    assert sorts == ([3] if integer_sort else [])


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_progress_counts_rows_against_the_total_when_it_is_known(tmp_path, monkeypatch, fmt):
    # Parquet footers give the total up front, so progress is "rows of total (percent)";
    # a CSV file's rows are known only once it is read, so progress counts files.
    monkeypatch.setattr(batches, "BATCH_ROWS", 2)
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"], [[1, "nim", ""]])
    header = ["rule_set_id", "position_id", "heaps"]
    for name, ids in (("a", [1, 2, 3]), ("b", [4, 5])):
        rows = [[1, i, f"{i}"] for i in ids]
        if fmt == "csv":
            write_csv(tmp_path / "positions" / f"{name}.csv", header, rows)
        else:
            write_parquet(tmp_path / "positions" / f"{name}.parquet",
                          {"rule_set_id": [1] * len(ids), "position_id": ids,
                           "heaps": [[i] for i in ids]},
                          {"rule_set_id": pl.Int64, "position_id": pl.Int64,
                           "heaps": pl.List(pl.Int64)})
    events: list[RunEvent] = []
    run_job(config_from_dict(job(tmp_path, r, tmp_path / "positions")), events.append)
    messages = [event.message for event in events]
    shown = [m for m in messages if m.startswith("positions: ")]
    assert shown == ({"parquet": ["positions: 2 of 5 rows (40%)", "positions: 3 of 5 rows (60%)",
                                  "positions: 5 of 5 rows (100%)"],
                      "csv": ["positions: 2 rows read (file 1 of 2)",
                              "positions: 3 rows read (file 1 of 2)",
                              "positions: 5 rows read (file 2 of 2)"]}[fmt])
    steps = [(e.done_units, e.total_units, e.unit) for e in events if e.kind == PROGRESS]
    assert steps == ({"parquet": [(2, 5, "rows"), (3, 5, "rows"), (5, 5, "rows")],
                      "csv": [(2, None, "rows"), (3, None, "rows"), (5, None, "rows")]}[fmt])
    phases = [(e.kind, e.phase) for e in events if e.kind in (PHASE_START, PHASE_DONE)]
    assert phases == [(kind, phase) for phase in ("rules", "tables", "positions", "finish",
                                                  "write", "commit")
                      for kind in (PHASE_START, PHASE_DONE)]
    assert [e.kind for e in events if e.phase == "commit"] == [PHASE_START, COMMITTED,
                                                               PHASE_DONE]


@pytest.mark.parametrize("batch_rows", [2, 1 << 20])
def test_default_position_ids_are_row_numbers_across_files_and_skipped_lines(
        tmp_path, monkeypatch, batch_rows):
    # Wide CSV files without position_id: a row's id is its row number counted over the
    # files in name order, lines with the wrong field count included (they are rejects with
    # their own row numbers), however the files are cut into batches. Under nim, SG(h) = h.
    monkeypatch.setattr(batches, "BATCH_ROWS", batch_rows)
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"], [[1, "nim", ""]])
    files = {"a.csv": ["1,3", "1,4,9", "1,5", "1,6", "1,1,1", "1,7"],
             "b.csv": ["1,8", "1,9,9", "1,2"]}
    for name, lines in files.items():
        (tmp_path / "positions").mkdir(exist_ok=True)
        (tmp_path / "positions" / name).write_text("rule_set_id,heaps\n" + "\n".join(lines) + "\n")
    result = run(job(tmp_path, r, tmp_path / "positions"))
    assert result.exit_code == 3
    out = read_outputs(tmp_path / "out")
    assert out["verdicts"].select("position_id", "nim_sum").rows() == [
        (0, 3), (2, 5), (3, 6), (5, 7), (6, 8), (8, 2)]
    assert out["rejects"].select("source", "row").rows() == [
        (str(tmp_path / "positions" / "a.csv"), 1), (str(tmp_path / "positions" / "a.csv"), 4),
        (str(tmp_path / "positions" / "b.csv"), 1)]


def test_small_parquet_files_read_together_keep_ids_rows_and_files(tmp_path):
    """Three small Parquet files without position_id, read by one scan (the third has
    another schema, so it is read on its own): a row's id is its row number over the files in
    name order, and a rejected row keeps its file and its row in that file. A file that is
    not Parquet among them is named on its own, as when each is read alone. Under nim,
    SG(h) = h."""
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"], [[1, "nim", ""]])
    d = tmp_path / "positions"
    d.mkdir()
    heaps = {"a": [[3], [-1], [5]], "b": [[6], [7], [-2], [8]]}
    for name, rows in heaps.items():
        pl.DataFrame({"rule_set_id": [1] * len(rows), "heaps": rows}).write_parquet(
            d / f"{name}.parquet")
    pl.DataFrame({"rule_set_id": [1], "heaps": [[2]]},
                 schema={"rule_set_id": pl.Int32, "heaps": pl.List(pl.Int64)}).write_parquet(
        d / "c.parquet")
    result = run(job(tmp_path, r, d))
    assert result.exit_code == 3
    out = read_outputs(tmp_path / "out")
    assert out["verdicts"].select("position_id", "nim_sum").rows() == [
        (0, 3), (2, 5), (3, 6), (4, 7), (6, 8), (7, 2)]
    assert out["rejects"].select("source", "row").rows() == [
        (str(d / "a.parquet"), 1), (str(d / "b.parquet"), 2)]
    (d / "b.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match=f"^{d / 'b.parquet'}: "):
        run(job(tmp_path / "again", r, d))


def test_small_csv_files_normalised_together_keep_ids_rows_and_files(tmp_path):
    """Small CSV files without position_id: a.csv and b.csv are normalised as one batch, c.csv
    (a line with a field too many) and d.csv (its columns in another order) on their own,
    e.csv alone after them. A row's id is its row number over the files in name order (the
    skipped line counts), and a rejected row keeps its file and its row in that file.
    Under nim, SG(h) = h."""
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"], [[1, "nim", ""]])
    d = tmp_path / "positions"
    header = ["rule_set_id", "heaps"]
    write_csv(d / "a.csv", header, [[1, 3], [1, -1], [1, 5]])
    write_csv(d / "b.csv", header, [[1, 6], [1, "x"], [1, 7]])
    (d / "c.csv").write_text("rule_set_id,heaps\n1,8\n1,2,3\n1,9\n")
    write_csv(d / "d.csv", ["heaps", "rule_set_id"], [[2, 1]])
    write_csv(d / "e.csv", header, [[1, 4]])
    result = run(job(tmp_path, r, d))
    assert result.exit_code == 3
    out = read_outputs(tmp_path / "out")
    assert out["verdicts"].select("position_id", "nim_sum").rows() == [
        (0, 3), (2, 5), (3, 6), (5, 7), (6, 8), (8, 9), (9, 2), (10, 4)]
    assert sorted(out["rejects"].select("source", "row").rows()) == [
        (str(d / name), 1) for name in ("a.csv", "b.csv", "c.csv")]
    config = config_from_dict({"rules": str(r), "positions": str(d), "out": str(tmp_path)})
    read = batches.position_batches(sorted(d.iterdir()), config, "wide", read_together=True)
    assert [(i, f["_file"].to_list() if "_file" in f.columns else f.height) for i, f in read
            ] == [(0, [0, 0, 0, 1, 1, 1]), (2, 3), (3, 1), (4, 1)]


def test_small_csv_then_small_parquet_files_number_default_ids_in_file_order(tmp_path):
    """a.csv is held to be normalised with other small files; b.parquet and c.parquet are
    read by one scan after it. Default ids number the rows over the files in name order,
    so the scan's ids start after a.csv's rows. Under nim, SG(h) = h."""
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"], [[1, "nim", ""]])
    d = tmp_path / "positions"
    write_csv(d / "a.csv", ["rule_set_id", "heaps"], [[1, 1], [1, 2], [1, 3]])
    for name, heaps in (("b", [[4], [5]]), ("c", [[6]])):
        pl.DataFrame({"rule_set_id": [1] * len(heaps), "heaps": heaps}).write_parquet(
            d / f"{name}.parquet")
    assert run(job(tmp_path, r, d)).exit_code == 0
    assert read_outputs(tmp_path / "out")["verdicts"].select("position_id", "nim_sum").rows(
    ) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6)]


def test_a_held_small_files_error_comes_before_a_later_files_error(tmp_path):
    """a.csv's problem is found when it is normalised, which waits for the files it may be
    joined with; b.csv's (not UTF-8) when it is read. The run names a.csv, the first file."""
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"], [[1, "nim", ""]])
    d = tmp_path / "positions"
    write_csv(d / "a.csv", ["rule_set_id", "heaps", "extra"], [[1, 1, 0]])
    (d / "b.csv").write_bytes(b"rule_set_id,heaps\n1,\xff\n")
    with pytest.raises(InputError, match=f"^{d / 'a.csv'}: "):
        run(job(tmp_path, r, d))


@pytest.mark.parametrize("files", [1, 2])
def test_keys_made_text_only_by_rejected_rows_are_integers_in_any_file_layout(tmp_path, files):
    """Text that only rejected rows hold ("x": unknown rule set; "abc", "010": a negative
    heap) leaves the verdict keys integers, sorted as integers (2 before 10), whether those rows
    share a file with the others or not. The rules hold a text id, so the batch with "x"
    is typed as text to meet them. Under nim, SG(h) = h."""
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [[1, "nim", ""], ["rs", "nim", ""]])
    rows = [["x", 1, 3], [1, "abc", -5], [1, "010", -1], [1, 10, 3], [1, 2, 4]]
    d = tmp_path / "positions"
    header = ["rule_set_id", "position_id", "heaps"]
    write_csv(d / "a.csv", header, rows if files == 1 else rows[:3])
    if files == 2:
        write_csv(d / "b.csv", header, rows[3:])
    assert run(job(tmp_path, r, d)).exit_code == 3
    verdicts = read_outputs(tmp_path / "out")["verdicts"]
    assert verdicts.schema["rule_set_id"] == verdicts.schema["position_id"] == pl.Int64
    assert verdicts.select("rule_set_id", "position_id", "nim_sum").rows() == [
        (1, 2, 4), (1, 10, 3)]  # "010" (rejected: its heap) is not the key 10
    assert sorted(read_outputs(tmp_path / "out")["rejects"]["position_id"].to_list()) == [
        "010", "1", "abc"]


def test_text_rule_ids_leave_integer_verdict_keys_in_both_forms(tmp_path):
    rules = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                      [[1, "subtraction", "1 2"], [2, "nim", ""], [10, "nim", ""],
                       ["x", "nim", ""]])
    wide = write_csv(tmp_path / "wide.csv", ["rule_set_id", "position_id", "heaps"],
                     [[10, 1, 3], [1, 1, 1], [2, 1, 2]])
    long = write_csv(tmp_path / "long.csv", ["rule_set_id", "position_id", "heap"],
                     [[10, 1, 3], [1, 1, 1], [2, 1, 2]])
    for name, positions in (("wide", wide), ("long", long)):
        result = run(job(tmp_path / name, rules, positions))
        assert result.exit_code == 0
        out = read_outputs(tmp_path / name / "out")
        assert out["verdicts"].select("rule_set_id", "position_id", "nim_sum").rows() == [
            (1, 1, 1), (2, 1, 2), (10, 1, 3)], name
        assert out["summary"]["rule_set_id"].to_list() == ["1", "10", "2", "x"], name


@pytest.mark.parametrize("reasons", [False, True])
def test_scratch_rows_round_trip(reasons):
    rows = pl.DataFrame({
        "_source": ["b.csv"] * 3, "_row": [0, 1, 2], "rule_set_id": [1, None, 3],
        "position_id": ["07", "x", None], "heaps": [[4], [5], None],
        "_column": [None, "rule_set_id" if reasons else None, None],
        "_reason": [None, "rule_set_id is empty" if reasons else None, None]},
        schema_overrides={"_column": pl.String, "_reason": pl.String})
    scratch = to_scratch(rows, 1)
    assert "_source" not in scratch.columns
    assert ("_reason" in scratch.columns) == reasons
    assert_frame_equal(from_scratch(scratch, ["a.csv", "b.csv"], rows.columns), rows)


def test_long_form_split_with_no_rows(tmp_path, monkeypatch):
    split_long_form(monkeypatch, 1)  # the header alone counts as 4 possible rows: 4 parts
    r = write_rules(tmp_path / "rules", [(1, "subtraction", [1, 2])], "csv")
    p = write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heap"], [])
    result = run(job(tmp_path, r, p))
    assert result.exit_code == 0
    assert result.manifest["counts"]["positions"]["rows_read"] == 0
    assert read_outputs(tmp_path / "out")["verdicts"].height == 0


def test_wide_csv_without_position_id_numbers_rows(tmp_path):
    rules = [(1, "subtraction", [1, 3, 4]), (2, "nim", None)]
    heaps = [[5], [], [7, 2], [4, 4], [3, 6, 11], [0]]
    positions = [(1 + i % 2, i, h) for i, h in enumerate(heaps)]
    run_checked(tmp_path, rules, positions, "wide", "csv", with_pid=False)


@pytest.mark.parametrize("spec", ["directory", "glob"])
def test_directory_and_glob_inputs(tmp_path, spec):
    rng = random.Random(f"many-files-{spec}")
    rules = random_rules(rng, "int")
    positions = random_positions(rng, rules, "int")
    rules_dir, pos_dir = tmp_path / "in" / "rules", tmp_path / "in" / "positions"
    files = [write_rules(rules_dir / "part-0", rules[:4], "csv"),
             write_rules(rules_dir / "part-1", rules[4:], "parquet")]
    third = len(positions) // 3
    files += [write_positions(pos_dir / "part-0", positions[:third], "wide", "parquet"),
              write_positions(pos_dir / "part-1", positions[third:2 * third], "wide", "csv"),
              write_positions(pos_dir / "sub" / "part-2", positions[2 * third:], "wide",
                              "parquet")]
    (pos_dir / "_SUCCESS").write_text("")
    if spec == "directory":
        cfg = job(tmp_path, rules_dir, pos_dir)
    else:
        # decoys that the globs must not pick up (they would fail the run if read)
        (rules_dir / "notes.txt").write_text("not a table\n")
        (pos_dir / "other.csv").write_text("garbage,\n1\n")
        cfg = job(tmp_path, f"{rules_dir}/part-*", f"{pos_dir}/**/part-*")
    result = run(cfg)
    assert result.exit_code == 0
    manifest = check_outputs(tmp_path / "out", rules, positions, rows_read=len(positions))
    listed = {Path(f["path"]).resolve(): f for table in ("rules", "positions")
              for f in manifest["inputs"][table]}
    assert set(listed) == {f.resolve() for f in files}
    for f in files:
        entry = listed[f.resolve()]
        assert entry["size"] == f.stat().st_size
        assert entry["sha256"] == hashlib.sha256(f.read_bytes()).hexdigest()


def test_identical_move_sets_share_one_sg_table(tmp_path):
    rules = [("a", "subtraction", [5, 2, 2]), ("b", "subtraction", [2, 5]),
             ("c", "subtraction", [2, 5, 12]), ("d", "nim", None), ("e", "nim", None)]
    r = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                  [["a", "", "5 2 2"], ["b", "subtraction", "[2, 5]"],
                   ["c", "subtraction", "2,5,12"], ["d", "nim", ""], ["e", "nim", ""]])
    positions = [(rid, 0, [5, 12]) for rid in "abcde"] + [(rid, 1, [9]) for rid in "abcde"]
    p = write_positions(tmp_path / "positions", positions, "wide", "parquet")
    assert run(job(tmp_path, r, p)).exit_code == 0
    check_outputs(tmp_path / "out", rules, positions, rows_read=len(positions))
    tables = pl.read_parquet(tmp_path / "out" / "sg_tables.parquet")
    shared = tables.filter(pl.col("kind") == "subtraction", pl.col("moves") == [2, 5])
    assert shared.height == 1 and sorted(shared["rule_set_ids"][0]) == ["a", "b"]
    assert sorted(tables.filter(pl.col("kind") == "nim")["rule_set_ids"][0]) == ["d", "e"]


# ---- huge heaps ------------------------------------------------------------------------------


def test_nim_and_half_with_huge_heaps(tmp_path):
    rng = random.Random("huge-closed-forms")
    rules = [(1, "nim", None), (2, "half", None)]
    positions = []
    for pid in range(40):
        heaps = [rng.randint(BIG - 10**6, BIG + 10**6) for _ in range(rng.randint(1, 3))]
        positions += [(1, pid, heaps), (2, pid, heaps)]
    for pid in range(40, 50):  # losing positions by construction
        a, b = rng.randint(BIG, 2 * BIG), rng.randint(BIG, 2 * BIG)
        positions.append((1, pid, [a, b, a ^ b]))
        x = rng.randint(BIG, 2 * BIG)
        positions.append((2, pid, [x, 2 * x + 1]))  # equal SG under half
    positions += [(1, 50, [INT64_MAX]), (2, 50, [INT64_MAX]), (2, 51, [2**62 - 1, 2**62])]
    run_checked(tmp_path, rules, positions, winning_moves=True, small=False)
    v = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")
    assert v.filter(pl.col("position_id").is_between(40, 49))["verdict"].to_list() == ["L"] * 20


def find_preperiodic_sets(count: int, seed: int = 2024) -> list[tuple[int, ...]]:
    """Deterministic search for 2-4-element S with small moves and a nonzero preperiod."""
    rng, found = random.Random(seed), []
    while len(found) < count:
        s = tuple(sorted(rng.sample(range(1, 13), rng.randint(2, 4))))
        if s not in found and naive_period(s)[0] > 0:
            found.append(s)
    return found


def test_subtraction_with_huge_heaps_uses_the_proven_period(tmp_path):
    rng = random.Random("huge-periodic")
    sets = [tuple(rng.sample(range(1, 31), rng.randint(1, 4))) for _ in range(5)]
    sets += find_preperiodic_sets(3)
    rules = [(10 + i, "subtraction", list(s)) for i, s in enumerate(sets)]
    positions = []
    for rid, _, moves in rules:
        pre, per, _ = naive_period(moves)
        for pid in range(12):
            heaps = [rng.randint(BIG - 10**6, BIG + 10**6) for _ in range(rng.randint(1, 3))]
            if pid < 3:
                heaps.append(rng.randint(0, pre + per))  # a small heap, maybe in the preperiod
            positions.append((rid, pid, heaps))
        h = rng.randint(BIG, 2 * BIG)  # equal SG values: a losing position
        positions.append((rid, 12, [h, h + per * rng.randint(1, 10**6)]))
        positions.append((rid, 13, [INT64_MAX, INT64_MAX - per]))
    run_checked(tmp_path, rules, positions, "wide", "csv", winning_moves=True, small=False)
    v = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")
    assert set(v.filter(pl.col("position_id").is_in([12, 13]))["verdict"]) == {"L"}


def test_sg_tables_preperiod_and_period_match_naive(tmp_path):
    sets = find_preperiodic_sets(4, seed=99) + [(2, 5), (1,), (3, 4, 7), (2, 4, 6, 9)]
    rules = [(i, "subtraction", list(s)) for i, s in enumerate(sets)]
    rules += [(100, "subtraction", list(reversed(sets[0]))), (101, "half", None)]
    positions = [(rid, 0, [7, 20]) for rid, _, _ in rules]
    run_checked(tmp_path, rules, positions, "long", "csv", rules_fmt="parquet")
    tables = pl.read_parquet(tmp_path / "out" / "sg_tables.parquet")
    got = {tuple(row["moves"]): row for row in tables.rows(named=True)
           if row["kind"] == "subtraction"}
    assert sorted(got) == sorted(set(sets))
    assert sum(naive_period(s)[0] > 0 for s in sets) >= 5
    for s in sets:
        pre, per, _ = naive_period(s)
        assert (got[s]["preperiod"], got[s]["period"]) == (pre, per), s
        assert got[s]["table_len"] >= pre + per
    assert sorted(got[sets[0]]["rule_set_ids"]) == [0, 100]


# ---- rejects, policies, overwrite ------------------------------------------------------------


@pytest.mark.parametrize("form", ["wide", "long", "long split"])
def test_bad_rows_are_rejected_and_counts_reconcile(tmp_path, monkeypatch, form):
    if form == "long split":
        split_long_form(monkeypatch, 2)
        form = "long"
    rules = [(1, "subtraction", [2, 5]), (2, "half", None)]
    good = [(1, 0, [5, 12]), (1, 1, [2, 4, 7]), (2, 0, [3, 7]), (2, 1, [8])]
    r = write_rules(tmp_path / "rules", rules, "csv")
    if form == "wide":
        rows = [[a, b, " ".join(map(str, h))] for a, b, h in good]
        rows.insert(2, [1, 2, "5 x"])  # file row 2
        p = write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heaps"], rows)
        n_rows, n_bad = 5, 1
    else:
        rows = [[a, b, h] for a, b, heaps in good for h in heaps]
        rows += [[1, 2, 3], [1, 2, "-4"], [1, 2, 6]]  # rows 8-10: one bad heap taints position 2
        p = write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heap"], rows)
        n_rows, n_bad = len(rows), 3
    result = run(job(tmp_path, r, p))
    assert result.exit_code == 3
    out = tmp_path / "out"
    assert sorted(x.name for x in out.iterdir()) == OUTPUTS
    o = read_outputs(out)
    assert o["verdicts"].select("rule_set_id", "position_id").rows() == [
        (a, b) for a, b, _ in sorted(good)]
    for row in o["verdicts"].rows(named=True):
        kind, moves = {1: ("subtraction", (2, 5)), 2: ("half", ())}[row["rule_set_id"]]
        heaps = next(h for a, b, h in good if (a, b) == (row["rule_set_id"], row["position_id"]))
        assert row["verdict"] == ("W" if wins(kind, moves, heaps) else "L")
    rejects = o["rejects"]
    assert rejects.height == n_bad
    assert set(rejects["position_id"]) == {"2"} and set(rejects["rule_set_id"]) == {"1"}
    assert set(rejects["source"]) == {str(p)}
    assert sorted(rejects["row"]) == ([2] if form == "wide" else [8, 9, 10])
    assert all(reason for reason in rejects["reason"])
    pos = result.manifest["counts"]["positions"]
    assert pos["rows_read"] == n_rows
    assert pos["rows_read"] == pos["rows_evaluated"] + pos["rows_rejected"]
    assert pos["rows_rejected"] == n_bad
    assert result.manifest["exit_code"] == 3
    summary = {s["rule_set_id"]: s for s in o["summary"].rows(named=True)}
    assert summary[1]["rejected"] == (1 if form == "wide" else 3)
    assert len(result.problems) >= 1


def test_on_bad_rows_fail_writes_nothing(tmp_path):
    r = write_rules(tmp_path / "rules", [(1, "subtraction", [1, 2])], "csv")
    p = write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heaps"],
                  [[1, 0, "3 4"], [1, 1, "-1"]])
    with pytest.raises(BadRowsError) as err:
        run(job(tmp_path, r, p, on_bad_rows="fail"))
    assert err.value.exit_code == 1
    assert sorted(x.name for x in tmp_path.iterdir()) == ["positions.csv", "rules.csv"]


def test_rerun_without_overwrite_fails_and_keeps_previous_output(tmp_path):
    rules = [(1, "subtraction", [2, 5])]
    r = write_rules(tmp_path / "rules", rules, "csv")
    first = [(1, 0, [5, 12]), (1, 1, [2, 4, 7])]
    p = write_positions(tmp_path / "positions", first, "wide", "csv")
    result = run(job(tmp_path, r, p))
    out = tmp_path / "out"
    before = {f.name: f.read_bytes() for f in out.iterdir()}

    second = [(1, 0, [1]), (1, 1, [2]), (1, 2, [3, 9])]
    write_positions(tmp_path / "positions", second, "wide", "csv")
    with pytest.raises(OutputError) as err:
        run(job(tmp_path, r, p))
    assert err.value.exit_code == 1
    assert {f.name: f.read_bytes() for f in out.iterdir()} == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out", "positions.csv", "rules.csv"]

    replaced = run(job(tmp_path, r, p, overwrite=True))
    assert replaced.manifest["run_id"] != result.manifest["run_id"]
    assert json.loads((out / "manifest.json").read_text())["run_id"] == replaced.manifest["run_id"]
    check_outputs(out, rules, second, rows_read=3)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out", "positions.csv", "rules.csv"]


def test_failed_overwrite_run_keeps_previous_output(tmp_path):
    r = write_rules(tmp_path / "rules", [(1, "subtraction", [1, 2])], "csv")
    p = write_positions(tmp_path / "positions", [(1, 0, [3, 4])], "wide", "csv")
    run(job(tmp_path, r, p))
    out = tmp_path / "out"
    before = {f.name: f.read_bytes() for f in out.iterdir()}
    write_csv(p, ["rule_set_id", "position_id", "heaps"], [[1, 0, "3 4"], [1, 1, "x"]])
    with pytest.raises(BadRowsError):
        run(job(tmp_path, r, p, overwrite=True, on_bad_rows="fail"))
    with pytest.raises(InputError) as err:  # a missing input: nothing is touched either
        run(job(tmp_path, r, tmp_path / "missing.csv", overwrite=True))
    assert err.value.exit_code == 1
    assert {f.name: f.read_bytes() for f in out.iterdir()} == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out", "positions.csv", "rules.csv"]


@pytest.mark.parametrize("batch_rows", [1, 3, 1 << 20])
def test_tables_end_exactly_at_the_largest_heap_however_batches_ask_beyond_them(
        tmp_path, monkeypatch, batch_rows):
    """Wide CSV (no statistics, so tables grow as batches ask beyond them): with heaps going
    up and down from batch to batch, every table ends exactly one past its largest heap (no
    rule here reaches a period: each move set's largest move exceeds every heap), each
    nim-sum is the naive SG's, and a heap beyond max_table_len is a reject naming it while
    the rows before and after it still grow and read that table."""
    monkeypatch.setattr(batches, "BATCH_ROWS", batch_rows)
    moves = {1: [3, 17, 40], 2: [2, 29, 41], 3: [5, 50]}
    rules = write_rules(tmp_path / "rules", [(i, "subtraction", m) for i, m in moves.items()],
                        "csv")
    good = [(1, 0, [4]), (2, 1, [30]), (1, 2, [20, 1]), (3, 3, [6]), (2, 4, [1]),
            (1, 5, [25, 33]), (1, 6, [9]), (2, 8, [38, 3]), (2, 9, [5]), (1, 10, [2, 2])]
    positions = good[:7] + [(2, 7, [3, 47])] + good[7:]
    path = write_positions(tmp_path / "positions", positions, "wide", "csv")
    result = run(job(tmp_path, rules, path, tables={"max_table_len": 45, "period_probe_ops": 0}))
    assert result.exit_code == 3
    o = read_outputs(tmp_path / "out")
    assert o["rejects"].select("rule_set_id", "position_id", "column").rows() == [
        ("2", "7", "heaps")]
    assert "tables.max_table_len" in o["rejects"]["reason"][0]
    sg = {i: naive_sg(m, 48) for i, m in moves.items()}
    assert o["verdicts"].select("rule_set_id", "position_id", "nim_sum").rows() == [
        (i, p, reduce(xor, (sg[i][h] for h in heaps), 0)) for i, p, heaps in sorted(good)]
    tables = {t["rule_set_ids"][0]: t for t in o["sg_tables"].rows(named=True)}
    assert {i: (t["table_len"], t["period"], t["stopped_by"]) for i, t in tables.items()} == {
        1: (34, None, None), 2: (45, None, "tables.max_table_len"), 3: (7, None, None)}


TWO_RULES = [(1, "subtraction", [3, 17, 40]), (2, "subtraction", [2, 29, 41])]
ONE_RULE = TWO_RULES[:1]


@pytest.mark.parametrize("rules, second, limit, rejected, lengths", [
    (TWO_RULES, [(1, 4, [30]), (1, 5, [1]), (2, 6, [30]), (2, 7, [1])],
     {"max_total_values": 40}, ["4"], {(2, 29, 41): 31, (3, 17, 40): 9}),
    (ONE_RULE, [(1, 4, [60]), (1, 5, [1]), (1, 6, [100]), (1, 7, [1])],
     {"max_run_ops": 20_500}, [], {(3, 17, 40): 101}),
])
def test_a_batch_of_several_row_groups_grows_its_tables_once_in_rule_order(
        tmp_path, monkeypatch, rules, second, limit, rejected, lengths):
    """Parquet without statistics, in row groups of 2 rows, read in batches of 4 (the first
    batch's heaps are all 1): the second batch's two chunks each ask a table to grow. The
    batch grows its tables once, rule by rule in canonical order, as a pass over its heaps
    would. Under a room of 40 values, the first batch's 2 + 2 leave 36: {2, 29, 41} (first
    in canonical order, though asked second) takes 29 more and {3, 17, 40} gets 7, so its
    heap 30 is rejected. Under 20,500 operations one rule's table grows once, from 2 values
    to 101; grown per chunk (to 61, then 101) its second regrowth charge stopped it at 95."""
    monkeypatch.setattr(batches, "BATCH_ROWS", 4)
    rules_path = write_rules(tmp_path / "rules", rules, "csv")
    rows = [(1, 0, [1]), (len(rules), 1, [1]), (1, 2, [1]), (len(rules), 3, [1]), *second]
    table = pa.table({"rule_set_id": pa.array([r[0] for r in rows], pa.int64()),
                      "position_id": pa.array([r[1] for r in rows], pa.int64()),
                      "heaps": pa.array([r[2] for r in rows], pa.list_(pa.int64()))})
    pq.write_table(table, tmp_path / "positions.parquet", write_statistics=False,
                   row_group_size=2)
    result = run(job(tmp_path, rules_path, tmp_path / "positions.parquet",
                     tables={**limit, "period_probe_ops": 0}))
    assert result.exit_code == (3 if rejected else 0)
    o = read_outputs(tmp_path / "out")
    assert o["rejects"]["position_id"].to_list() == rejected
    assert {tuple(t["moves"]): t["table_len"] for t in o["sg_tables"].rows(named=True)
            } == lengths


def test_an_error_between_batches_stops_the_reading_thread_before_it_is_handled(
        tmp_path, monkeypatch):
    """A failure while typing the second batch's keys reaches the caller with the reading
    thread already stopped (its files closed), not left reading while the traceback that
    holds the batch generators lives; and nothing is written."""
    monkeypatch.setattr(batches, "BATCH_ROWS", 4)
    rules = write_rules(tmp_path / "rules", [(1, "subtraction", [1, 2])], "csv")
    table = pa.table({"rule_set_id": pa.array([1] * 40, pa.int64()),
                      "position_id": pa.array(range(40), pa.int64()),
                      "heaps": pa.array([[i % 5 + 1] for i in range(40)], pa.list_(pa.int64()))})
    pq.write_table(table, tmp_path / "positions.parquet", row_group_size=2)
    attach, calls = evaluate.attach_tables, []

    def failing_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected")
        return attach(*args, **kwargs)

    monkeypatch.setattr(evaluate, "attach_tables", failing_second)
    with pytest.raises(RuntimeError, match="injected") as raised:
        run(job(tmp_path, rules, tmp_path / "positions.parquet"))
    assert [t.name for t in threading.enumerate() if t.name == "read_ahead"] == []
    assert raised.value is not None and not (tmp_path / "out").exists()


def test_heap_beyond_an_unproven_table_is_a_rejected_row(tmp_path):
    """{4, 6, 11, 12} needs 45 values to prove its period: with a cap of 30 a huge heap is
    rejected (not a crash), small heaps still evaluate, and {2, 5} (proven in 30) is fine."""
    assert naive_period((4, 6, 11, 12))[:2] == (16, 17)
    rules = [(1, "subtraction", [4, 6, 11, 12]), (2, "subtraction", [2, 5])]
    good = [(1, 0, [20, 7]), (1, 2, [29, 3, 12]), (2, 0, [BIG, 3]), (2, 1, [INT64_MAX])]
    positions = good[:1] + [(1, 1, [5, BIG])] + good[1:]
    r = write_rules(tmp_path / "rules", rules, "csv")
    p = write_positions(tmp_path / "positions", positions, "wide", "parquet")
    result = run(job(tmp_path, r, p, tables={"max_table_len": 30, "period_probe_ops": 0}))
    assert result.exit_code == 3
    o = read_outputs(tmp_path / "out")
    assert o["rejects"].select("row", "rule_set_id", "position_id", "column").rows() == [
        (1, "1", "1", "heaps")]
    sg = {1: periodic_sg((4, 6, 11, 12)), 2: periodic_sg((2, 5))}
    assert o["verdicts"].select("rule_set_id", "position_id", "nim_sum").rows() == [
        (a, b, reduce(xor, map(sg[a], h), 0)) for a, b, h in good]
    tables = {tuple(t["moves"]): t for t in o["sg_tables"].rows(named=True)}
    assert tables[(4, 6, 11, 12)]["period"] is None
    assert tables[(4, 6, 11, 12)]["table_len"] <= 30
    assert (tables[(2, 5)]["preperiod"], tables[(2, 5)]["period"]) == (0, 7)
    pos = result.manifest["counts"]["positions"]
    assert pos["rows_read"] == pos["rows_evaluated"] + pos["rows_rejected"] == 5


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_bad_heap_token_does_not_change_other_rows(tmp_path, fmt):
    r = write_rules(tmp_path / "rules", [(1, "nim", None)], "csv")
    if fmt == "csv":
        p = write_csv(tmp_path / "positions.csv", ["rule_set_id", "position_id", "heaps"],
                      [[1, 0, f"{BIG + 1} {BIG}"], [1, 1, "4 x"]])
    else:
        p = write_parquet(tmp_path / "positions.parquet", {
            "rule_set_id": [1, 1], "position_id": [0, 1], "heaps": [[BIG + 1, BIG], [4, None]],
        }, {"rule_set_id": pl.Int64, "position_id": pl.Int64, "heaps": HEAPS})
    result = run(job(tmp_path, r, p))
    assert result.exit_code == 3
    v = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")
    assert v.select("position_id", "nim_sum", "verdict").rows() == [(0, 1, "W")]


def test_period_probe_budget_flows_to_the_rules_that_need_it(tmp_path):
    """sg_tables proves periods beyond the data's heaps within tables.period_probe_ops: rules
    whose period comes early leave their share to the others. A period is proven once
    pre + per + max(S) values are tabulated (naive reference), each value past the 5 the data
    needs (presized to the largest heap, 4) costing |S| + 200 operations: {18, 41, 59} needs
    more than an even share of the budget, but gets what {3, 5, 9} leaves."""
    sets = [(1,), (1, 2), (3, 5, 9), (18, 41, 59)]
    rules = write_parquet(tmp_path / "rules.parquet", {
        "rule_set_id": [1, 2, 3, 4], "moves": [list(s) for s in sets]},
        {"rule_set_id": pl.Int64, "moves": pl.List(pl.Int64)})
    positions = write_parquet(tmp_path / "positions.parquet", {
        "rule_set_id": [1, 2, 3, 4], "heaps": [[1], [2], [3], [4]]},
        {"rule_set_id": pl.Int64, "heaps": pl.List(pl.Int64)})
    expected = {s: naive_period(s)[:2] for s in sets}
    probe_ops = {s: max(0, pre + per + max(s) - 5) * (len(s) + 200)
                 for s, (pre, per) in expected.items()}
    assert probe_ops[(1,)] == probe_ops[(1, 2)] == 0  # proven within the data's 5 values
    budget = sum(probe_ops.values())
    assert probe_ops[(18, 41, 59)] > budget // 2

    def periods(budget: int) -> dict:
        result = run(job(tmp_path, rules, positions, overwrite=True,
                         tables={"period_probe_ops": budget}))
        assert result.exit_code == 0
        tables = pl.read_parquet(tmp_path / "out" / "sg_tables.parquet")
        return {tuple(m): (pre, per) for m, pre, per in
                tables.select("moves", "preperiod", "period").iter_rows()}

    assert periods(budget) == expected
    assert periods(budget - 1) == {**expected, (18, 41, 59): (None, None)}
    assert periods(0) == {**expected, (3, 5, 9): (None, None), (18, 41, 59): (None, None)}


def test_total_table_budget_rejects_instead_of_exhausting_memory(tmp_path):
    """tables.max_total_values bounds all tables together: once spent, a heap that would need
    a longer table is a rejected row, not a crash. Tables are granted in canonical rule order,
    each reserving the room it may take: {3, 5, 9} gets all 25 values and proves its period
    within them (naive reference), keeping pre + per = 16; {7} then gets the 9 values left,
    short of the 21 it needs, so its 10^18 heap is rejected, naming the limit."""
    (pre, per, values), (pre7, per7, _) = naive_period((3, 5, 9)), naive_period((7,))
    assert (pre, per) == (14, 2) and pre7 + per7 + 7 == 21
    rules = write_parquet(tmp_path / "rules.parquet", {
        "rule_set_id": [1, 2], "moves": [[7], [3, 5, 9]]},
        {"rule_set_id": pl.Int64, "moves": pl.List(pl.Int64)})
    positions = write_parquet(tmp_path / "positions.parquet", {
        "rule_set_id": [1, 2, 2], "heaps": [[10**18], [3], [10**18]]},
        {"rule_set_id": pl.Int64, "heaps": pl.List(pl.Int64)})
    result = run(job(tmp_path, rules, positions, tables={"max_total_values": 25,
                                                         "period_probe_ops": 0}))
    assert result.exit_code == 3
    sg = {h: values[h] if h < pre else values[pre + (h - pre) % per] for h in (3, 10**18)}
    verdicts = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")
    assert verdicts.select("rule_set_id", "position_id", "nim_sum").rows() == [
        (2, 1, sg[3]), (2, 2, sg[10**18])]
    rejects = pl.read_parquet(tmp_path / "out" / "rejects.parquet")
    assert rejects.select("rule_set_id", "row", "column").rows() == [("1", 0, "heaps")]
    assert rejects["reason"][0] == (
        f"heap {10**18} at index 0 needs SG values of {{7}} beyond tables.max_total_values "
        f"({25 - (pre + per)} values tabulated), and no period was proven within them")


def test_a_table_of_one_value_is_counted_in_the_singular(tmp_path):
    """max_table_len 1 keeps SG(0) alone of {7}: a larger heap's reason says so in words."""
    r = write_rules(tmp_path / "rules", [(1, "subtraction", [7])], "csv")
    p = write_positions(tmp_path / "positions", [(1, 0, [0]), (1, 1, [5])], "wide", "csv")
    result = run(job(tmp_path, r, p, tables={"max_table_len": 1, "period_probe_ops": 0}))
    assert result.exit_code == 3
    rejects = pl.read_parquet(tmp_path / "out" / "rejects.parquet")
    assert rejects["reason"].to_list() == [
        "heap 5 at index 0 needs SG values of {7} beyond tables.max_table_len "
        "(1 value tabulated), and no period was proven within it"]


# ---- work limits: tables.max_rule_ops / tables.max_run_ops ----------------------------------
# One SG value past SG(0) costs |S| + 200 operations (docs/configuration.md); a table stops at
# a limit and the heaps beyond it are rejected with a reason that names the limit.


def beyond_reason(heap: int, index: int, label: str, limit: str, tabulated: int) -> str:
    counted = "1 value" if tabulated == 1 else f"{tabulated} values"
    return (f"heap {heap} at index {index} needs SG values of {label} beyond tables.{limit} "
            f"({counted} tabulated), and no period was proven within "
            f"{'it' if tabulated == 1 else 'them'}")


def nim_sums(sg: list[int], positions: list) -> list[tuple]:
    return [(r, p, reduce(xor, (sg[h] for h in hs), 0)) for r, p, hs in positions]


def test_a_million_moves_and_a_2_62_heap_stop_at_the_rule_work_limit(tmp_path):
    """The default max_rule_ops (2 * 10^9) gives S = 1..10^6 1 + 2 * 10^9 // (10^6 + 200) =
    2000 values: a heap of 2^62 is rejected, naming the limit, heaps below 2000 are evaluated
    (only moves <= h matter, so the naive reference needs moves up to 1999 only)."""
    rules = write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"],
                      [[1, "1..1000000"], [2, "2 5"]])
    good = [(1, 1, [3, 1999]), (1, 3, []), (2, 0, [7, 2**62])]
    positions = write_positions(tmp_path / "positions", [
        (1, 0, [2**62]), good[0], (1, 2, [5, 2000]), good[1], good[2]], "wide", "csv")
    result = run(job(tmp_path, rules, positions))
    assert result.exit_code == 3
    o = read_outputs(tmp_path / "out")
    tables = {tuple(t["rule_set_ids"]): t for t in o["sg_tables"].rows(named=True)}
    assert (tables[(1,)]["table_len"], tables[(1,)]["period"]) == (2000, None)
    label = "{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ..., 999999, 1000000} (1000000 moves)"
    assert o["rejects"].select("row", "rule_set_id", "column", "reason").rows() == [
        (0, "1", "heaps", beyond_reason(2**62, 0, label, "max_rule_ops", 2000)),
        (2, "1", "heaps", beyond_reason(2000, 1, label, "max_rule_ops", 2000))]
    small = naive_sg(range(1, 2000), 2000)
    sg25 = periodic_sg((2, 5))
    assert o["verdicts"].select("rule_set_id", "position_id", "nim_sum").rows() == [
        (1, 1, small[3] ^ small[1999]), (1, 3, 0), (2, 0, sg25(7) ^ sg25(2**62))]


def test_3000_random_moves_up_to_10_7_stop_at_the_rule_work_limit(tmp_path):
    """3,000 random moves up to 10^7 cost 3,200 operations a value: the default limit gives
    625,001 values, so every position with a heap from there up to 10^7 is rejected, naming
    the limit, and positions of small heaps are evaluated (naive reference)."""
    rng = random.Random("3000 moves")
    moves = sorted(rng.sample(range(1, 10**7 + 1), 3000))
    limit = 1 + 2_000_000_000 // 3200
    assert limit == 625_001
    big = [(1, pid, [rng.randint(0, 3000), rng.randint(limit, 10**7)]) for pid in range(40)]
    small = [(1, pid, [rng.randint(0, 3000) for _ in range(3)]) for pid in range(40, 80)]
    rules = write_parquet(tmp_path / "rules.parquet", {"rule_set_id": [1], "moves": [moves]},
                          {"rule_set_id": pl.Int64, "moves": HEAPS})
    positions = write_positions(tmp_path / "positions", big + small, "wide", "parquet")
    result = run(job(tmp_path, rules, positions))
    assert result.exit_code == 3
    o = read_outputs(tmp_path / "out")
    assert o["sg_tables"]["table_len"].to_list() == [limit]
    label = rule_label(moves)
    assert o["rejects"].select("row", "reason").rows() == [
        (pid, beyond_reason(hs[1], 1, label, "max_rule_ops", limit)) for _, pid, hs in big]
    sg = naive_sg([m for m in moves if m <= 3000], 3001)
    assert o["verdicts"].select("rule_set_id", "position_id", "nim_sum").rows() == \
        nim_sums(sg, small)


def rule_label(moves) -> str:
    """S as reasons show it: the first ten moves, ..., the last two, and |S|."""
    ms = sorted(set(moves))
    if len(ms) <= 12:
        return "{" + ", ".join(map(str, ms)) + "}"
    return "{" + ", ".join(map(str, ms[:10])) + ", ..., " + ", ".join(map(str, ms[-2:])) + \
        f"}} ({len(ms)} moves)"


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_rules_that_each_fit_but_together_pass_the_run_work_limit(tmp_path, fmt):
    """Ten rules {1, 1000 + i} need 1000 values each (999 x 202 operations; no period within
    them, SG(x) = x % 2 by the naive reference): with work for three and a half, tables are
    granted in rule order, the fourth gets 500 values and the others SG(0) only; heaps beyond
    a table are rejected naming tables.max_run_ops, the rest evaluated."""
    sets = [(1, 1000 + i) for i in range(10)]
    rules = write_rules(tmp_path / "rules", [(i, "subtraction", list(s))
                                             for i, s in enumerate(sets)], fmt)
    positions = [(i, p, [h]) for i in range(10) for p, h in enumerate([999, 300, 0])]
    path = write_positions(tmp_path / "positions", positions, "wide", fmt)
    run_ops = 3 * 999 * 202 + 499 * 202 + 201
    result = run(job(tmp_path, rules, path, tables={"max_run_ops": run_ops,
                                                    "period_probe_ops": 0}))
    assert result.exit_code == 3
    o = read_outputs(tmp_path / "out")
    lens = [1000] * 3 + [500] + [1] * 6
    assert o["sg_tables"].select("moves", "table_len", "period").rows() == [
        (list(s), n, None) for s, n in zip(sets, lens)]
    assert sum((n - 1) * 202 for n in lens) <= run_ops
    rejected = [(i, p, h) for i, p, [h] in positions if h >= lens[i]]
    assert o["rejects"].select("rule_set_id", "position_id", "reason").rows() == [
        (str(i), str(p), beyond_reason(h, 0, rule_label(sets[i]), "max_run_ops", lens[i]))
        for i, p, h in rejected]
    evaluated = [(i, p, hs) for i, p, hs in positions if hs[0] < lens[i]]
    assert o["verdicts"].select("rule_set_id", "position_id", "nim_sum").rows() == [
        (i, p, naive_sg(sets[i], 1000)[h]) for i, p, [h] in evaluated]


@pytest.mark.parametrize("form", ["wide", "long"])
def test_tables_presized_from_statistics_never_spend_room_growing_would_keep(tmp_path, form):
    """Five rules {1, 1000 + i}; rule 0 has a heap of 3,000, the others of 5. Parquet
    statistics bound the heaps by 3,000, but building all five tables that far would pass
    tables.max_run_ops (1M operations: rules 2-4 were stopped at one value, and their rows
    rejected), while growing each to its own heaps fits: then every row is evaluated and no
    table is stopped, whatever the form. SG by the naive mex reference."""
    sets = [(1, 1000 + i) for i in range(5)]
    rules = write_rules(tmp_path / "rules", [(i, "subtraction", list(m))
                                             for i, m in enumerate(sets)], "csv")
    positions = [(i, i, [h]) for i, h in enumerate([3000, 5, 5, 5, 5])]
    path = write_positions(tmp_path / "positions", positions, form, "parquet")
    result = run(job(tmp_path, rules, path, tables={"max_run_ops": 1_000_000}))
    assert result.exit_code == 0
    o = read_outputs(tmp_path / "out")
    assert o["rejects"].height == 0
    assert o["sg_tables"]["stopped_by"].null_count() == 5
    assert o["verdicts"].select("rule_set_id", "position_id", "nim_sum").rows() == [
        (i, p, naive_sg(sets[i], h + 1)[h]) for i, p, [h] in positions]


def test_sg_tables_names_the_limit_and_length_that_the_rejects_name(tmp_path):
    """Twelve rules of one huge move each (SG = 0 below the move, by the rules of the game)
    with a heap of 10^6 and one of 60,000, under a run work limit that binds part-way through
    a round of growth, so the tables end with unequal lengths. For every rule sg_tables says
    what its rejected rows say: the same table_len and, in stopped_by, the same limit; a rule
    that no limit stopped has no rejects; heaps below table_len are evaluated."""
    moves = [2**32 - 1 - i for i in range(12)]
    rules = write_rules(tmp_path / "rules", [(i, "subtraction", [m])
                                             for i, m in enumerate(moves)], "csv")
    positions = [(i, p, [h]) for i in range(12) for p, h in enumerate([10**6, 60_000])]
    path = write_positions(tmp_path / "positions", positions, "wide", "csv")
    run_ops = 12 * 100_000 * 201
    result = run(job(tmp_path, rules, path, tables={"max_run_ops": run_ops}))
    assert result.exit_code == 3
    o = read_outputs(tmp_path / "out")
    tables = {int(t["rule_set_ids"][0]): t for t in o["sg_tables"].rows(named=True)}
    assert len({t["table_len"] for t in tables.values()}) > 1, tables
    assert sum((t["table_len"] - 1) * 201 for t in tables.values()) <= run_ops
    assert all(t["period"] is None for t in tables.values())
    rejected = {}
    for rid, pid, reason in o["rejects"].select("rule_set_id", "position_id", "reason").rows():
        rejected[int(rid), int(pid)] = reason
    for i, p, [h] in positions:
        table = tables[i]
        if h < table["table_len"]:
            assert (i, p) not in rejected
        else:
            assert table["stopped_by"] == "tables.max_run_ops", table
            assert rejected[i, p] == beyond_reason(h, 0, "{" + str(moves[i]) + "}",
                                                   "max_run_ops", table["table_len"])
    evaluated = [(i, p) for i, p, [h] in positions if h < tables[i]["table_len"]]
    assert o["verdicts"].select("rule_set_id", "position_id", "nim_sum", "verdict").rows() == [
        (i, p, 0, "L") for i, p in evaluated]
    assert len(evaluated) >= 12


def test_sg_tables_stopped_by_is_null_for_tables_no_limit_stopped(tmp_path):
    """A table that met what the data needed, or proved its period, was stopped by nothing;
    one that max_rule_ops cut says so even when no row needed more (max_rule_ops 6060 gives
    1..400 1 + 6060 // 600 = 11 values, exactly what a heap of 10 needs). Naive references."""
    many = list(range(1, 401))
    rules = write_rules(tmp_path / "rules", [(1, "subtraction", [2, 5]),
                                             (2, "subtraction", [1000]), (3, "nim", []),
                                             (4, "subtraction", many)], "parquet")
    path = write_positions(tmp_path / "positions", [(1, 0, [10**18]), (2, 0, [20]),
                                                    (3, 0, [7]), (4, 0, [10])],
                           "wide", "parquet")
    result = run(job(tmp_path, rules, path, tables={"max_rule_ops": 6060,
                                                    "period_probe_ops": 0}))
    assert result.exit_code == 0
    o = read_outputs(tmp_path / "out")
    pre, per, _ = naive_period((2, 5))
    assert o["sg_tables"].select("kind", "moves", "preperiod", "period", "table_len",
                                 "stopped_by").rows() == [
        ("nim", [], None, None, 0, None),
        ("subtraction", many, None, None, 11, "tables.max_rule_ops"),
        ("subtraction", [2, 5], pre, per, pre + per, None),
        ("subtraction", [1000], None, None, 21, None)]
    assert o["verdicts"]["nim_sum"].to_list() == [
        periodic_sg((2, 5))(10**18), naive_sg((1000,), 21)[20], 7, naive_sg(many, 11)[10]]


def test_a_rule_whose_moves_alone_pass_the_rule_work_limit_keeps_sg_0(tmp_path):
    """With max_rule_ops 500, 400 moves cost 600 a value: the rule keeps SG(0) = 0 (free), so
    a heap of 0 and the empty position are evaluated and any other heap is rejected; {1}
    (201 a value) gets 3 values, enough to prove its period (naive reference), so even 10^18
    is evaluated."""
    many = list(range(1, 401))
    rules = write_rules(tmp_path / "rules", [(1, "subtraction", many), (2, "subtraction", [1])],
                        "parquet")
    positions = [(1, 0, [0]), (1, 1, []), (1, 2, [0, 1]), (2, 0, [BIG, 3])]
    path = write_positions(tmp_path / "positions", positions, "wide", "parquet")
    result = run(job(tmp_path, rules, path, tables={"max_rule_ops": 500}))
    assert result.exit_code == 3
    o = read_outputs(tmp_path / "out")
    pre, per, _ = naive_period((1,))
    assert o["sg_tables"].select("moves", "table_len", "period").rows() == [
        ([1], pre + per, per), (many, 1, None)]
    assert o["rejects"].select("rule_set_id", "position_id", "reason").rows() == [
        ("1", "2", beyond_reason(1, 1, rule_label(many), "max_rule_ops", 1))]
    sg1 = periodic_sg((1,))
    assert o["verdicts"].select("rule_set_id", "position_id", "nim_sum").rows() == [
        (1, 0, 0), (1, 1, 0), (2, 0, sg1(BIG) ^ sg1(3))]


@pytest.mark.parametrize("form", ["wide", "long"])
def test_rule_work_limit_does_not_depend_on_batching(tmp_path, monkeypatch, form):
    """Tables grow batch by batch as larger heaps appear, exactly as far as they need: the
    outputs of a run read in batches of 7 rows equal those of one batch, where the rule work
    limit stops some tables and others find their period."""
    rng = random.Random("batching")
    sets = [tuple(rng.sample(range(1, 300), rng.randint(1, 4))) for _ in range(6)]
    rules = write_rules(tmp_path / "rules", [(i, "subtraction", list(s))
                                             for i, s in enumerate(sets)], "csv")
    positions = [(i, p, sorted(rng.randint(0, 40 * p + 10) for _ in range(2)))
                 for p in range(60) for i in range(6)]  # heaps grow from batch to batch
    path = write_positions(tmp_path / "positions", positions, form, "csv")
    cfg = job(tmp_path, rules, path, tables={"max_rule_ops": 300_000, "period_probe_ops": 0},
              overwrite=True)
    whole = run(cfg)
    outputs = read_outputs(tmp_path / "out")
    monkeypatch.setattr(batches, "BATCH_ROWS", 7)
    if form == "long":
        split_long_form(monkeypatch, 50)
    batched = run(cfg)
    assert whole.exit_code == batched.exit_code == 3
    for name, frame in read_outputs(tmp_path / "out").items():
        assert_frame_equal(frame, outputs[name])
    stopped = outputs["sg_tables"].filter(pl.col("period").is_null())
    assert stopped["table_len"].to_list() == [
        1 + 300_000 // (len(sets[int(ids[0])]) + 200) for ids in stopped["rule_set_ids"]]
    assert outputs["sg_tables"]["period"].drop_nulls().len() > 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3)), max_size=2000))
def test_the_last_keys_rows_start_where_a_plain_walk_back_finds(pairs):
    """The in-order long-form path holds back the last key's rows, whose run it looks for
    in a growing tail of the batch: the same start as walking back row by row."""
    pairs = sorted(pairs)
    ids = {"rule_set_id": np.array([r for r, _ in pairs], np.int64),
           "position_id": np.array([p for _, p in pairs], np.int64)}
    start = len(pairs)
    while start > 0 and pairs and pairs[start - 1] == pairs[-1]:
        start -= 1
    assert polars_engine._last_key_start(ids) == start
