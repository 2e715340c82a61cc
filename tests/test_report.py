"""`snim-batch report`: one self-contained HTML page built from a run's outputs."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from pipeline.cli import app

RULES = "rule_set_id,kind,moves\n1,,2 5\n2,nim,\n3,,1 2 3\n"
POSITIONS = ("rule_set_id,position_id,heaps\n1,0,5 12\n1,1,2 4 7\n2,0,1 2 3\n2,1,7\n"
             "3,0,4\n3,1,x\n9,0,1\n")


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.extend(attrs)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _run(tmp_path: Path, *extra: str) -> Path:
    (tmp_path / "rules.csv").write_text(RULES)
    (tmp_path / "positions.csv").write_text(POSITIONS)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", "--rules", str(tmp_path / "rules.csv"),
                                      "--positions", str(tmp_path / "positions.csv"),
                                      "--out", str(out), "--quiet", *extra])
    assert result.exit_code == 3, result.output
    return out


def test_report_is_self_contained_and_shows_the_run(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = _run(tmp_path)
    target = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", str(out), "--html", str(target)])
    assert result.exit_code == 0, result.output
    page = target.read_text()
    parser = _Tags()
    parser.feed(page)
    # nothing to fetch: no scripts, stylesheets, images or links to other files
    assert not {"script", "link", "img", "iframe"} & set(parser.tags)
    assert not [v for k, v in parser.attrs if k in ("src", "href")]
    # one bar per rule set with W/L, and the W-rate histogram's 20 bins
    assert "svg" in parser.tags and parser.tags.count("rect") == 3 + 20
    text = " ".join(parser.text)
    assert "reconciles" in text and "MISMATCH" not in text
    # counts as in the manifest: 7 position rows read, 5 evaluated, 2 rejected
    assert re.search(r"positions\s+7\s+5\s+2", text), text
    assert "unknown rule_set_id 9" in text and "'x' is not an integer" in text
    # W rates, by hand: {2, 5} has SG 0 0 1 1 0 2 1 (period 7), so [5, 12] is 2^2 = 0 (L) and
    # [2, 4, 7] is 1^0^0 = 1 (W); nim: 1^2^3 = 0 (L), 7 (W); {1, 2, 3}: SG(4) = 4 mod 4 = 0 (L)
    summary = pl.read_parquet(out / "summary.parquet")
    assert dict(summary.select("rule_set_id", "w_rate").drop_nulls().rows()) == {
        1: 0.5, 2: 0.5, 3: 0.0}
    for pct in ("50.0%", "0.0%"):
        assert pct in text
    # the period table: {2, 5} has period 7, {1, 2, 3} period 4
    assert re.search(r"subtraction\s+2 5\s+1\s+0\s+7", text), text


def test_report_defaults_into_the_output_dir(tmp_path: Path) -> None:
    out = _run(tmp_path)
    result = CliRunner().invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "report.html").stat().st_size > 2000


def test_report_on_a_non_output_dir_is_a_clean_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 1
    assert "not a snim-batch output" in result.output and "Traceback" not in result.output


def _listed(out: Path) -> dict[str, dict]:
    manifest = json.loads((out / "manifest.json").read_text())
    return {entry["name"]: entry for entry in manifest["outputs"]}


def test_a_report_in_the_output_is_listed_and_replaced_with_it(tmp_path: Path) -> None:
    """The page written into OUT is listed in its manifest (once, with its size), so that a
    later --overwrite still sees a snim-batch output; the overwrite removes it with the run
    it described."""
    out = _run(tmp_path)
    for _ in range(2):
        result = CliRunner().invoke(app, ["report", str(out)])
        assert result.exit_code == 0, result.output
    listed = _listed(out)
    assert sorted(listed) == ["manifest.json", "rejects.parquet", "report.html",
                              "sg_tables.parquet", "summary.parquet", "verdicts.parquet"]
    assert listed["report.html"]["size"] == (out / "report.html").stat().st_size
    result = CliRunner().invoke(app, ["report", str(out), "--html", str(out / "other.html")])
    assert result.exit_code == 0, result.output
    assert "other.html" in _listed(out)
    _run(tmp_path, "--overwrite")
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json", "rejects.parquet", "sg_tables.parquet", "summary.parquet",
        "verdicts.parquet"]
    assert "report.html" not in _listed(out)


def test_a_report_never_replaces_one_of_the_runs_own_files(tmp_path: Path) -> None:
    out = _run(tmp_path)
    for name in ("summary.parquet", "manifest.json"):
        before = (out / name).read_bytes()
        result = CliRunner().invoke(app, ["report", str(out), "--html", str(out / name)])
        assert result.exit_code == 1
        assert f"{out / name}: is one of the run's own outputs; refusing to replace it" in \
            result.output
        assert (out / name).read_bytes() == before


def _summary(n: int) -> pl.DataFrame:
    """n rule sets: rule set i has 10,000 positions, W rate (i mod 101) / 100 but rule set 7
    at 100% and rule set 8 at 0%, and i mod 5 rejected rows."""
    ids = list(range(1, n + 1))
    rates = [1.0 if i == 7 else 0.0 if i == 8 else (i % 101) / 100 for i in ids]
    w = [round(r * 10_000) for r in rates]
    return pl.DataFrame({"rule_set_id": ids, "positions": [10_000] * n, "W": w,
                         "L": [10_000 - x for x in w], "rejected": [i % 5 for i in ids],
                         "w_rate": rates})


def test_w_rate_histogram_bins_of_five_points() -> None:
    from pipeline.report import w_rate_histogram

    frame = pl.DataFrame({"w_rate": [0.0, 0.049, 0.05, 0.5, 0.999, 1.0, None]})
    assert w_rate_histogram(frame) == [2, 1] + [0] * 8 + [1] + [0] * 8 + [2]


def test_standouts_highest_lowest_and_most_rejects() -> None:
    from pipeline.report import standouts

    found = standouts(_summary(1000))
    # W rate 100%: rule set 7, then i mod 101 == 100: 100, 201, 302, ...
    assert found["highest W rate"]["rule_set_id"].to_list() == [7, 100, 201, 302, 403, 504,
                                                               605, 706, 807, 908]
    assert found["lowest W rate"]["rule_set_id"].to_list() == [8, 101, 202, 303, 404, 505,
                                                              606, 707, 808, 909]
    assert found["most rejected rows"]["rule_set_id"].to_list() == [4, 9, 14, 19, 24, 29, 34,
                                                                   39, 44, 49]


def test_a_report_of_1000_rule_sets_reads_well(tmp_path: Path) -> None:
    """10M positions over 1,000 rule sets: counts with thousands separators, a histogram and
    the stand-outs instead of 1,000 bars, 60 rule sets listed (the rest named as elsewhere)."""
    from pipeline.report import render_report

    summary = _summary(1000)
    manifest = {"run_id": "r", "status": "ok", "counts": {"positions": {
        "rows_read": 10_000_000, "rows_evaluated": 10_000_000, "rows_rejected": 0,
        "verdicts": 10_000_000, "W": 5_000_123, "L": 4_999_877}}}
    sg = pl.DataFrame({"kind": ["nim"], "moves": [[]], "rule_set_ids": [["1"]], "preperiod": [0],
                       "period": [1], "table_len": [1]},
                      schema_overrides={"moves": pl.List(pl.Int64)})
    page = render_report(manifest, summary, sg, pl.DataFrame())
    parser = _Tags()
    parser.feed(page)
    text = " ".join(parser.text)
    assert "10,000,000 verdicts: 5,000,123 W, 4,999,877 L" in text
    assert re.search(r"positions\s+10,000,000\s+10,000,000\s+0", text)
    assert parser.tags.count("rect") == 20  # the histogram only, no bar per rule set
    assert "Distribution of W rates over the 1,000 rule sets" in text
    assert "940 more rows in summary.parquet" in text
    # header and row each: counts (1), three stand-out tables (10 each), list (60), sg (1)
    assert parser.tags.count("tr") == 2 + 3 * 11 + 61 + 2

def test_an_object_store_url_is_a_usage_error_that_writes_nothing(tmp_path: Path,
                                                                  monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for url, message in [
        ("s3://bkt/out", "s3://bkt/out: report reads a local output directory"),
        ("ftp://h/out", "ftp:// locations are not supported"),
    ]:
        result = CliRunner().invoke(app, ["report", url])
        assert result.exit_code == 2, result.output
        assert message in result.output
    assert list(tmp_path.iterdir()) == []
