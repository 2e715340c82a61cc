"""batches.read_ahead: the same items, errors and early exits as the plain iterator, read in a
thread of its own while parallel kernels run in the caller's."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from conftest import read_outputs, write_csv

from pipeline import batches, kernels
from pipeline.batches import BATCH_ROWS, coalesced, read_ahead
from pipeline.config import config_from_dict
from pipeline.errors import InputError
from pipeline.run import run_job

ROOT = Path(__file__).resolve().parents[1]


class Boom(Exception):
    pass


def test_items_arrive_in_order_and_all_of_them():
    assert list(read_ahead(iter(range(1000)))) == list(range(1000))


def test_an_empty_iterator_ends_at_once():
    assert list(read_ahead(iter([]))) == []


def test_an_error_is_raised_after_the_items_before_it():
    def items() -> Iterator[int]:
        yield 1
        yield 2
        raise Boom("third")

    got = []
    with pytest.raises(Boom, match="third"):
        for item in read_ahead(items()):
            got.append(item)
    assert got == [1, 2]


def test_items_are_made_by_another_thread_at_most_two_ahead():
    made: list[tuple[int, str]] = []

    def items() -> Iterator[int]:
        for i in range(6):
            made.append((i, threading.current_thread().name))
            yield i

    seen = []
    for item in read_ahead(items(), name="reader"):
        seen.append(item)
        if item == 1:
            ahead = len(made)
    assert seen == list(range(6))
    assert {name for _, name in made} == {"reader"}
    assert ahead <= 4  # item 1 taken, one waiting in the hand-off, one being made


@pytest.mark.parametrize("moment", ["start", "wait"])
def test_a_stop_as_the_thread_starts_or_is_waited_for_comes_after_it_closed_the_items(
        monkeypatch, moment):
    """A stop (KeyboardInterrupt, as the CLI's handler raises it) while `read_ahead` starts its
    thread (`Thread.start` waits for it) or waits for it to finish: raised once the thread has
    closed the items, so that the caller's own close of them is safe. Before, the caller met
    "generator already executing" (a stop during the wait was a real run's internal error)."""
    def items() -> Iterator[int]:
        for i in range(3):
            time.sleep(0.3)
            yield i

    source = items()
    if moment == "start":
        real_start = threading.Thread.start

        def start(self):
            real_start(self)
            raise KeyboardInterrupt

        monkeypatch.setattr(threading.Thread, "start", start)
        with pytest.raises(KeyboardInterrupt):
            next(read_ahead(source))
    else:
        real_wait = threading.Event.wait

        def wait(self, timeout=None):
            if threading.current_thread() is threading.main_thread():
                monkeypatch.setattr(threading.Event, "wait", real_wait)
                raise KeyboardInterrupt
            return real_wait(self, timeout)

        ahead = read_ahead(source)
        assert next(ahead) == 0
        monkeypatch.setattr(threading.Event, "wait", wait)
        with pytest.raises(KeyboardInterrupt):
            ahead.close()
    source.close()  # not "generator already executing"
    assert source.gi_frame is None


def test_leaving_early_stops_the_thread_and_closes_the_source():
    closed = threading.Event()
    made = []

    def items() -> Iterator[int]:
        try:
            for i in range(10_000):
                made.append(i)
                yield i
        finally:
            closed.set()

    for item in read_ahead(items()):
        if item == 3:
            break
    assert closed.wait(5)
    assert len(made) <= 6
    assert not [t for t in threading.enumerate() if t.name == "read_ahead"]


THREADS_PROBE = """
import json, threading
import numpy as np
from pipeline import kernels
from pipeline.batches import read_ahead
from pipeline.config import Tables
from pipeline.grundy import Rule
from pipeline.tables import TableCache

made = []
list(read_ahead(made.append(threading.current_thread().name) or x for x in range(3)))
cache = TableCache([Rule("subtraction", (1, 2))], Tables())
cache.presize_meanwhile(10)
rows = 1 << 20
offsets = np.arange(rows + 1, dtype=np.int64)
table = (np.zeros(1, np.uint8), *(np.zeros(1, np.int64) for _ in range(4)),
         np.array([kernels.KIND_NIM]))
sums = []
def lookups():
    for _ in range(20):
        sums.append(int(kernels.nim_sums_wide(offsets, offsets[1:], np.zeros(rows, np.int64),
                                              *table)[0].sum()))
both = [threading.Thread(target=lookups) for _ in range(2)]
for t in both:
    t.start()
for t in both:
    t.join()
print(json.dumps({"allowed": kernels.overlap_allowed(), "made_by": sorted(set(made)),
                  "presized_now": cache._pending is None, "sums": sorted(set(sums)),
                  "lookups": len(sums)}))
"""


def test_kernels_run_in_two_threads_at_once_and_batches_are_read_ahead():
    """The kernels' OpenMP regions may run from two threads at once (numba's workqueue layer
    aborted the process there): batches are read and tables built in threads of their own,
    and two threads' parallel lookups at once give the right sums."""
    proc = subprocess.run([sys.executable, "-c", THREADS_PROBE], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    rows = 1 << 20
    assert got == {"allowed": True, "made_by": ["read_ahead"], "presized_now": False,
                   "sums": [rows * (rows + 1) // 2], "lookups": 40}


def test_a_csv_run_of_several_batches_completes_with_kernels_overlapping(tmp_path):
    """End to end: CSV heaps are parsed by a parallel kernel while the batch before is
    evaluated by another, both running at once."""
    rows = 3 * BATCH_ROWS // 2
    positions = tmp_path / "positions.csv"
    with positions.open("w") as fh:
        fh.write("rule_set_id,position_id,heaps\n")
        fh.writelines(f"{i % 3},{i},{i % 17} {i % 5} {i % 11}\n" for i in range(rows))
    rules = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                      [[0, "", "1 2"], [1, "nim", ""], [2, "", "1 3 4"]])
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--rules", str(rules),
                           "--positions", str(positions), "--out", str(tmp_path / "out"),
                           "--quiet"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["counts"]["positions"]["verdicts"] == rows


def test_small_files_evaluated_as_one_batch_keep_each_rows_file_and_row(tmp_path):
    """Three small files are evaluated as one batch (`coalesced`); a key given again in
    another file is rejected in every copy, each named by its own file and 0-based row.
    Under S = {1, 2}, SG(h) = h % 3."""
    rules = write_csv(tmp_path / "rules.csv", ["rule_set_id", "kind", "moves"],
                      [[1, "subtraction", "1 2"]])
    d = tmp_path / "positions"
    d.mkdir()
    files = {"a": [(10, [1]), (11, [2])], "b": [(12, [3]), (10, [4])],
             "c": [(13, [1]), (11, [5]), (11, [6])]}
    for name, rows in files.items():
        pl.DataFrame({"rule_set_id": [1] * len(rows), "position_id": [p for p, _ in rows],
                      "heaps": [h for _, h in rows]}).write_parquet(d / f"{name}.parquet")
    joined = list(coalesced(iter([(0, pl.DataFrame({"x": [1]})),
                                  (1, pl.DataFrame({"x": [2, 3]}))])))
    assert [(i, f.to_dicts()) for i, f in joined] == [
        (0, [{"x": 1, "_file": 0}, {"x": 2, "_file": 1}, {"x": 3, "_file": 1}])]
    run_job(config_from_dict({"rules": str(rules), "positions": str(d),
                              "out": str(tmp_path / "out")}))
    out = read_outputs(tmp_path / "out")
    assert out["verdicts"].select("position_id", "nim_sum", "verdict").rows() == [
        (12, 0, "L"), (13, 1, "W")]
    rejects = out["rejects"].select("source", "row", "reason").rows()
    why = "position_id {} appears {} times for rule_set_id 1"
    assert sorted(rejects) == sorted([
        (str(d / "a.parquet"), 0, why.format(10, 2)), (str(d / "b.parquet"), 1, why.format(10, 2)),
        (str(d / "a.parquet"), 1, why.format(11, 3)), (str(d / "c.parquet"), 1, why.format(11, 3)),
        (str(d / "c.parquet"), 2, why.format(11, 3))])


@pytest.mark.parametrize("look_ahead", [False, True])
def test_a_files_batches_are_not_held_past_their_turn(tmp_path, monkeypatch, look_ahead):
    """Reading a file of several batches holds only the batch in hand (holding the first two
    for the whole file would cost about 130 MiB at 2^20 rows of text keys)."""
    monkeypatch.setattr(batches, "BATCH_ROWS", 4)
    path = write_csv(tmp_path / "p.csv", ["rule_set_id", "heaps"], [[1, i] for i in range(18)])
    alive, rows = [], []
    for raw, only in batches._file_batches(path, look_ahead):
        assert only is False
        alive.append(weakref.ref(raw.frame))
        rows += raw.frame["heaps"].to_list()
        del raw
        gc.collect()
        assert [ref() is None for ref in alive[:-1]] == [True] * (len(alive) - 1)
    assert len(alive) == 5 and rows == [str(i) for i in range(18)]


def _csv_files(directory: Path, rows_per_file: list[int]) -> list[Path]:
    return [write_csv(directory / f"p{k}.csv", ["rule_set_id", "position_id", "heaps"],
                      [[1, 100 * k + i, f"{i} {k}"] for i in range(rows)])
            for k, rows in enumerate(rows_per_file)]


def _config(tmp_path: Path):
    return config_from_dict({"rules": str(tmp_path / "rules.csv"), "positions": str(tmp_path),
                             "out": str(tmp_path / "out")})


def _made_by(monkeypatch) -> tuple[list[tuple[str, str]], list[str]]:
    """(file name and thread of each batch made, files in the order their reading began)."""
    made: list[tuple[str, str]] = []
    started: list[str] = []
    file_batches = batches._file_batches

    def recorded(path, look_ahead, cache=None):
        started.append(path.name)
        for raw, only in file_batches(path, look_ahead, cache=cache):
            made.append((path.name, threading.current_thread().name))
            yield raw, only

    monkeypatch.setattr(batches, "_file_batches", recorded)
    return made, started


def test_large_csv_files_are_parsed_by_a_thread_a_batch_ahead(tmp_path, monkeypatch):
    """pyarrow's CSV reader is serial: after a first batch that is not small, a
    `parse_ahead` thread parses the CSV files a batch ahead of their normalising; the
    batches still come in file and row order with their files' indices, and the thread
    does not outlive the read."""
    monkeypatch.setattr(batches, "BATCH_ROWS", 3)
    paths = _csv_files(tmp_path, [7, 2, 5])
    made, started = _made_by(monkeypatch)
    got = [(index, frame["position_id"].to_list())
           for index, frame in batches.position_batches(paths, _config(tmp_path), "wide")]
    assert got == [(0, [0, 1, 2]), (0, [3, 4, 5]), (0, [6]), (1, [100, 101]),
                   (2, [200, 201, 202]), (2, [203, 204])]
    ahead = "parse_ahead" if kernels.overlap_allowed() else "MainThread"  # workqueue: here
    assert [name for _, name in made] == ["MainThread"] + [ahead] * 5
    assert started == ["p0.csv", "p1.csv", "p2.csv"]
    assert not [t for t in threading.enumerate() if t.name == "parse_ahead"]


def test_small_csv_files_are_parsed_by_the_caller(tmp_path, monkeypatch):
    """Thousands of small files lost more to handing batches to a thread than they gained,
    so a small first batch (fewer than `_small_rows()` rows) keeps the parsing here, as
    do files that are not all CSV (by their content, whatever their names)."""
    paths = _csv_files(tmp_path, [7, 2, 5])
    made, _ = _made_by(monkeypatch)
    got = [frame.height for _, frame in
           batches.position_batches(paths, _config(tmp_path), "wide", read_together=True)]
    assert got == [14] and {name for _, name in made} == {"MainThread"}
    monkeypatch.setattr(batches, "BATCH_ROWS", 3)
    pl.read_csv(paths[1], infer_schema=False).write_parquet(paths[1])  # Parquet named .csv
    made.clear()
    assert sum(f.height for _, f in batches.position_batches(paths, _config(tmp_path),
                                                            "wide")) == 14
    assert {name for _, name in made} == {"MainThread"}


def test_an_error_in_the_next_csv_file_comes_in_its_turn_and_leaving_stops_every_parser(
        tmp_path, monkeypatch):
    """The file after the one being read is parsed meanwhile: its error is raised after
    every batch of the file before it, as a serial read raises it; leaving early stops the
    parsing threads."""
    monkeypatch.setattr(batches, "BATCH_ROWS", 2)
    paths = _csv_files(tmp_path, [5, 3])
    paths[1].write_text('rule_set_id,position_id,heaps\n1,7,"3 4\n')  # the quote never closes
    got = []
    with pytest.raises(InputError, match="p1.csv"):
        for index, frame in batches.position_batches(paths, _config(tmp_path), "wide"):
            got.append((index, frame.height))
    assert got == [(0, 2), (0, 2), (0, 1)]
    assert not [t for t in threading.enumerate() if t.name == "parse_ahead"]
    read = batches.position_batches(_csv_files(tmp_path / "more", [5, 5, 5]),
                                    _config(tmp_path), "wide")
    assert [next(read)[1].height for _ in range(2)] == [2, 2]  # the thread starts after one
    parsers = [t for t in threading.enumerate() if t.name == "parse_ahead"]
    assert len(parsers) == kernels.overlap_allowed()
    read.close()
    assert not [t for t in parsers if t.is_alive()]


def test_spark_tasks_parse_in_their_own_thread(tmp_path, monkeypatch):
    """A Spark task has one core: `parse_ahead=False` keeps the parsing in its thread."""
    monkeypatch.setattr(batches, "BATCH_ROWS", 3)
    made, _ = _made_by(monkeypatch)
    paths = _csv_files(tmp_path, [7])
    got = [f.height for _, f in batches.position_batches(paths, _config(tmp_path), "wide",
                                                          parse_ahead=False)]
    assert got == [3, 3, 1] and {name for _, name in made} == {"MainThread"}
