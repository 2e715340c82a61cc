"""End-to-end reconciliation: each input file's rows, counted from the file itself (a Parquet
footer, a scan of a CSV file's records), against the rows the run read, before it commits.

A reader that really loses rows (a batch skipped, a rules row dropped, a verdict lost on the
way) must fail the run with exit 1, a message naming the file and both counts, nothing
written and the previous output intact."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from conftest import invoke, write_csv, write_parquet
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import batches
from pipeline.engines import polars_engine
from pipeline.io.read.csv_records import CsvRecords
from pipeline.io.read.files import RawTable

# ---- the CSV record count against pyarrow's own reader ---------------------------------------

_FIELD = st.one_of(
    st.text("0123456789 abc", max_size=6),
    st.text('0123456789,"\n\r ab', max_size=8).map(lambda t: '"' + t.replace('"', '""') + '"'),
)
_LINE_END = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def csv_texts(draw) -> str:
    """Three-column CSV text: quoted fields holding commas, quotes and line ends; LF, CRLF
    and CR line ends; empty lines; a last line with or without its line end."""
    lines = ["a,b,c"]
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.booleans()) and draw(st.booleans()):
            lines.append("")
        else:
            lines.append(",".join(draw(st.lists(_FIELD, min_size=3, max_size=3))))
    ends = [draw(_LINE_END) for _ in lines]
    text = "".join(line + end for line, end in zip(lines, ends))
    cut = text.rstrip("\r\n")
    return cut if draw(st.booleans()) and cut != lines[0] else text


def pyarrow_rows(text: str, skip_blank: bool = False) -> int:
    """Rows as pyarrow's CSV reader reads the text (every column as text); `skip_blank`:
    lines of only spaces and tabs skipped too, as the run's reader skips them (pyarrow skips
    empty lines only)."""
    options = pacsv.ConvertOptions(column_types=dict.fromkeys("abc", pa.string()))
    parse = pacsv.ParseOptions(newlines_in_values=True, invalid_row_handler=(
        (lambda row: "skip" if row.actual_columns == 1 and not (row.text or "").strip(" \t")
         else "error") if skip_blank else None))
    return pacsv.read_csv(io.BytesIO(text.encode()), parse_options=parse,
                          convert_options=options).num_rows


@settings(max_examples=300, deadline=None)
@given(text=csv_texts(), cuts=st.lists(st.integers(0, 200), max_size=6), bom=st.booleans())
def test_csv_records_count_what_pyarrow_reads_however_the_bytes_arrive(
        text: str, cuts: list[int], bom: bool) -> None:
    data = (b"\xef\xbb\xbf" if bom else b"") + text.encode()
    assert _fed_in_parts(data, cuts) == pyarrow_rows(text)


def _fed_in_parts(data: bytes, cuts: list[int]) -> int:
    """`CsvRecords.rows()` of `data` fed in parts cut at `cuts` (those within it)."""
    records = CsvRecords()
    at = 0
    for cut in sorted(c for c in cuts if c <= len(data)):
        records.feed(data[at:cut])
        at = cut
    records.feed(data[at:])
    return records.rows()


@st.composite
def plain_csv_texts(draw) -> str:
    """Three-column CSV text without quotes or carriage returns, which the record count
    walks line by line: blank lines of spaces and tabs, fields that begin with spaces or
    are empty, a last line with or without its LF, and now and then a quoted field after
    them all (the byte-by-byte walk for the rest)."""
    lines = ["a,b,c"]
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.booleans()) and draw(st.booleans()):
            lines.append(draw(st.text(" \t", max_size=3)))
        else:
            lines.append(",".join(draw(st.lists(st.text("09 \tab", max_size=4), min_size=3,
                                                 max_size=3))))
    if draw(st.booleans()) and draw(st.booleans()):
        lines.append('"x\ny",1,2')
    text = "\n".join(lines)
    return text if draw(st.booleans()) and len(lines) > 1 else text + "\n"


@settings(max_examples=300, deadline=None)
@given(text=plain_csv_texts(), cuts=st.lists(st.integers(0, 120), max_size=6))
def test_csv_records_of_plain_lines_count_what_pyarrow_reads(text: str, cuts: list[int]
                                                            ) -> None:
    assert _fed_in_parts(text.encode(), cuts) == pyarrow_rows(text, skip_blank=True)


def test_csv_records_of_a_header_alone_and_of_nothing() -> None:
    for text, rows in [(b"", 0), (b"a,b", 0), (b"a,b\n", 0), (b"a,b\n\n\n", 0), (b"a\n1", 1),
                       (b'a\n"x\ny"\n2\n', 2), (b"a\r\n1\r\n\r\n2", 2)]:
        records = CsvRecords()
        records.feed(text)
        assert records.rows() == rows, text


# ---- runs whose reading loses rows -----------------------------------------------------------


def _inputs(where: Path, fmt: str, files: int = 2, rows: int = 40) -> tuple[Path, Path]:
    """rules.csv and a positions folder of `files` files of `rows` rows each."""
    rng = random.Random(7)
    rules = write_csv(where / "rules.csv", ["rule_set_id", "moves"], [[1, "1 2"], [2, "2 5"]])
    folder = where / "positions"
    folder.mkdir()
    for f in range(files):
        ids = list(range(f * rows, (f + 1) * rows))
        rule = [1 + rng.randrange(2) for _ in ids]
        heaps = [[rng.randrange(30) for _ in range(rng.randrange(4))] for _ in ids]
        if fmt == "csv":
            write_csv(folder / f"part-{f}.csv", ["rule_set_id", "position_id", "heaps"],
                      [[r, i, " ".join(map(str, h))] for r, i, h in zip(rule, ids, heaps)])
        else:
            write_parquet(folder / f"part-{f}.parquet",
                          {"rule_set_id": rule, "position_id": ids, "heaps": heaps},
                          {"rule_set_id": pl.Int64, "position_id": pl.Int64,
                           "heaps": pl.List(pl.Int64)})
    return rules, folder


def _leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


@pytest.fixture(params=["csv", "parquet"])
def fmt(request) -> str:
    return request.param


def test_manifest_records_each_files_rows_in_the_source_and_read(tmp_path: Path,
                                                                   fmt: str) -> None:
    rules, positions = _inputs(tmp_path, fmt, files=3, rows=25)
    out = tmp_path / "out"
    code, err = invoke(["run", "--rules", rules, "--positions", positions, "--out", out],
                       tmp_path)
    assert code == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(f["rows_in_source"], f["rows_read"]) for f in manifest["inputs"]["positions"]] \
        == [(25, 25)] * 3
    assert [(f["rows_in_source"], f["rows_read"]) for f in manifest["inputs"]["rules"]] \
        == [(2, 2)]
    assert manifest["reconciled"] is True


def test_csv_counts_hold_with_blank_lines_quoted_line_ends_and_bad_lines(tmp_path: Path) -> None:
    """Lines of spaces are blank, a quoted field's line end is no record, and a line with
    the wrong number of fields is a row read (and rejected)."""
    rules = write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "1 2"]])
    positions = tmp_path / "p.csv"
    positions.write_text('rule_set_id,position_id,heaps\r\n1,1,"3\n4"\n\n   \n1,2,5\n'
                         '1,3,5,9\n\t\n1,4,"7"\r1,5,')
    out = tmp_path / "out"
    code, err = invoke(["run", "--rules", rules, "--positions", positions, "--out", out],
                       tmp_path)
    assert code == 3, err
    manifest = json.loads((out / "manifest.json").read_text())
    (entry,) = manifest["inputs"]["positions"]
    assert (entry["rows_in_source"], entry["rows_read"]) == (5, 5)
    assert manifest["counts"]["positions"]["rows_rejected"] == 1


def _skipping_second_batch(real):
    def iter_batches(path, batch_rows=1 << 20, *, cache=None):
        for n, raw in enumerate(real(path, batch_rows, cache=cache)):
            if n != 1:
                yield raw
    return iter_batches


def test_a_reader_that_skips_a_batch_fails_the_run_and_keeps_the_old_output(
        tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rules, positions = _inputs(tmp_path, fmt)
    out = tmp_path / "out"
    code, err = invoke(["run", "--rules", rules, "--positions", positions, "--out", out],
                       tmp_path)
    assert code == 0, err
    before = json.loads((out / "manifest.json").read_text())["run_id"]
    monkeypatch.setattr(batches, "BATCH_ROWS", 16)  # 40 rows: batches of 16, 16 and 8
    monkeypatch.setattr(batches, "SMALL_BATCH_ROWS", 0)  # no file read together with another
    monkeypatch.setattr(batches, "iter_batches", _skipping_second_batch(batches.iter_batches))
    code, err = invoke(["run", "--rules", rules, "--positions", positions, "--out", out,
                        "--overwrite"], tmp_path)
    assert code == 1, err
    first = positions / f"part-0.{fmt}"
    assert f"{first}: the file holds 40 positions rows but the run read 24; nothing was " \
           "written" in err
    assert "Traceback" not in err
    assert json.loads((out / "manifest.json").read_text())["run_id"] == before
    assert _leftovers(out) == []


def test_a_reader_that_skips_a_batch_of_long_form_fails_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rules = write_csv(tmp_path / "rules.csv", ["rule_set_id", "moves"], [[1, "1 2"]])
    positions = write_csv(tmp_path / "long.csv", ["rule_set_id", "position_id", "heap"],
                          [[1, i // 3, i % 7] for i in range(60)])
    monkeypatch.setattr(batches, "BATCH_ROWS", 16)
    monkeypatch.setattr(batches, "iter_batches", _skipping_second_batch(batches.iter_batches))
    out = tmp_path / "out"
    code, err = invoke(["run", "--rules", rules, "--positions", positions, "--out", out],
                       tmp_path)
    assert code == 1, err
    assert f"{positions}: the file holds 60 positions rows but the run read 44;" in err
    assert not out.exists() and _leftovers(out) == []


def test_a_rules_reader_that_drops_a_row_fails_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rules, positions = _inputs(tmp_path, "csv", files=1)
    real = batches.read_tables

    def read_tables(*args, **kwargs):
        for raw in real(*args, **kwargs):
            yield RawTable(raw.file, raw.frame.head(-1), raw.row[:-1], raw.bad_lines)

    monkeypatch.setattr(batches, "read_tables", read_tables)
    out = tmp_path / "out"
    code, err = invoke(["run", "--rules", rules, "--positions", positions, "--out", out],
                       tmp_path)
    assert code == 1, err
    assert f"{rules}: the file holds 2 rules rows but the run read 1; nothing was written" \
        in err
    assert not out.exists() and _leftovers(out) == []


def test_a_verdict_lost_after_the_read_fails_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row read (wide form) is one verdict or one rejected row, counted from the
    evaluation's own tables."""
    rules, positions = _inputs(tmp_path, "parquet", files=1)
    real = polars_engine.ordering.key_sorted_verdicts

    def losing(*args, **kwargs):
        verdicts, duplicates = real(*args, **kwargs)
        return verdicts.head(-1), duplicates

    monkeypatch.setattr(polars_engine.ordering, "key_sorted_verdicts", losing)
    out = tmp_path / "out"
    code, err = invoke(["run", "--rules", rules, "--positions", positions, "--out", out],
                       tmp_path)
    assert code == 1, err
    assert "positions: the run read 40 rows but has 39 verdicts and 0 rejected rows; " \
           "nothing was written" in err
    assert not out.exists() and _leftovers(out) == []
