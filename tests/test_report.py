"""`snim-batch report`: one self-contained HTML page built from a run's outputs."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
import pytest
from conftest import CLI_EXE, killed_at, on_small_disk
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.io.outputs import manifest

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

    @classmethod
    def text_of(cls, page: str) -> str:
        parser = cls()
        parser.feed(page)
        return " ".join(parser.text)


def _run(tmp_path: Path, *extra: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
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
    assert result.stderr == (f"snim-batch: error: {tmp_path}: not a snim-batch output (no "
                             "manifest.json)\n")


@pytest.mark.parametrize("counts", [{"positions": None}, "many", {"positions": {"W": "x"}}])
def test_a_manifest_of_another_shape_is_a_clean_error(tmp_path: Path, counts: object) -> None:
    """A manifest whose counts are not what a run writes: one line naming it, exit 1 (it was
    an internal error telling to rerun with a --verbose that report does not have)."""
    out = _run(tmp_path)
    written = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**written, "counts": counts}))
    result = CliRunner().invoke(app, ["report", str(out)])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"snim-batch: error: {out / 'manifest.json'}: not a "
                                    "manifest as snim-batch writes them ("), result.stderr
    assert not (out / "report.html").exists()


@pytest.mark.parametrize("table", ["verdicts.parquet", "summary.parquet"])
def test_a_damaged_output_is_refused_not_reported(tmp_path: Path, table: str) -> None:
    """A table cut short since its run wrote it (its size is not the manifest's): one line
    naming it, exit 1, no page. A page was written for it, and listed in its manifest."""
    out = _run(tmp_path)
    size = (out / table).stat().st_size
    os.truncate(out / table, 100)
    before = (out / "manifest.json").read_bytes()
    result = CliRunner().invoke(app, ["report", str(out)])
    assert (result.exit_code, result.stderr) == (1, (
        f"snim-batch: error: {out}: files changed size since its run wrote them ({table} (100 "
        f"bytes, listed with {size})): a damaged output; run it again\n"))
    assert not (out / "report.html").exists()
    assert (out / "manifest.json").read_bytes() == before


def test_report_on_a_file_says_it_is_no_output(tmp_path: Path) -> None:
    """A file where the output directory should be: said in words, not as Python's error."""
    (tmp_path / "afile").write_text("x\n")
    result = CliRunner().invoke(app, ["report", str(tmp_path / "afile")])
    assert (result.exit_code, result.stderr) == (
        1, f"snim-batch: error: {tmp_path / 'afile'}: not a snim-batch output (a file, not a "
           "directory)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_table_that_became_a_pipe_is_refused_not_waited_on(tmp_path: Path) -> None:
    """A listed table replaced by a named pipe: reading it would wait forever, and no stop
    signal reached the process while it waited (the installed executable, with a timeout)."""
    out = _run(tmp_path)
    (out / "rejects.parquet").unlink()
    os.mkfifo(out / "rejects.parquet")
    proc = subprocess.run([str(CLI_EXE), "report", str(out)], capture_output=True, text=True,
                          timeout=60)
    assert (proc.returncode, proc.stderr) == (1, (
        f"snim-batch: error: {out / 'rejects.parquet'}: not a regular file (a pipe or device; "
        "reading it could wait forever): not an output as snim-batch writes them\n"))
    assert not (out / "report.html").exists()


@pytest.mark.parametrize("command", ["report", "run --overwrite", "run reading beside it"])
def test_a_manifest_that_is_a_pipe_is_never_waited_on(tmp_path: Path, command: str) -> None:
    """A manifest.json that is a named pipe: `report` and `run --overwrite` refuse it, and a
    run whose input directory holds one below it reads on (no snim-batch output there); each
    used to wait forever for a writer (the installed executable, with a timeout)."""
    _run(tmp_path)  # rules.csv, positions.csv
    where = tmp_path / ("in" if command == "run reading beside it" else "o")
    (where / "sub").mkdir(parents=True)
    os.mkfifo(where / ("sub" if command == "run reading beside it" else "") / "manifest.json")
    job = ["--rules", str(tmp_path / "rules.csv"), "--quiet"]
    args = {"report": ["report", str(where)],
            "run --overwrite": ["run", *job, "--positions", str(tmp_path / "positions.csv"),
                                "--out", str(where), "--overwrite"],
            "run reading beside it": ["run", *job, "--positions", str(where), "--out",
                                      str(tmp_path / "o2")]}[command]
    if command == "run reading beside it":
        shutil.copy(tmp_path / "positions.csv", where / "positions.csv")
    proc = subprocess.run([str(CLI_EXE), *args], capture_output=True, text=True, timeout=60)
    said = {"report": f"snim-batch: error: {where / 'manifest.json'}: unreadable manifest (not "
                      "a regular file (a pipe or device))\n",
            "run --overwrite": f"snim-batch: error: {where}: exists and is not provably a "
                               "snim-batch output (unreadable manifest.json: not a regular file "
                               "(a pipe or device)); refusing to replace it, nothing was "
                               "written\n",
            "run reading beside it": ""}[command]
    assert (proc.returncode, proc.stderr) == (3 if command == "run reading beside it" else 1,
                                              said)


def test_report_on_a_missing_path_says_it_does_not_exist(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", str(tmp_path / "nope")])
    assert (result.exit_code, result.stderr) == (
        1, f"snim-batch: error: {tmp_path / 'nope'}: does not exist\n")
    assert list(tmp_path.iterdir()) == []


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


# ---- what report may replace, and where it may write ---------------------------------------


def _tree(top: Path) -> dict[str, bytes | str]:
    """Everything under `top` (hidden names too): a file's bytes, a link's target, a
    directory as '/', anything else (a FIFO, never opened) as its file type."""
    found: dict[str, bytes | str] = {}
    for path in sorted(top.rglob("*")):
        name = str(path.relative_to(top))
        if path.is_symlink():
            found[name] = "-> " + str(path.readlink())
        elif path.is_dir():
            found[name] = "/"
        elif path.is_file():
            found[name] = path.read_bytes()
        else:
            found[name] = f"type {stat.S_IFMT(path.lstat().st_mode):o}"
    return found


ELSEWHERE = "(write the page elsewhere with --html)"


@pytest.mark.parametrize("kind", ["link", "file", "directory"])
def test_report_never_replaces_or_follows_what_it_did_not_add(tmp_path: Path,
                                                              kind: str) -> None:
    """Anything named report.html in OUT that the manifest does not list as report's page (a
    link to the user's file, the user's own file, a directory) is left alone, and so is the
    manifest: a later --overwrite still refuses, and deletes nothing of the user's."""
    out = _run(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    page = out / "report.html"
    if kind == "link":
        page.symlink_to(victim)
    elif kind == "file":
        page.write_text("mine\n")
    else:
        page.mkdir()
        (page / "mine.txt").write_text("mine\n")
    before = _tree(tmp_path)
    result = CliRunner().invoke(app, ["report", str(out)])
    assert result.exit_code == 1, result.output
    assert result.stderr == (f"snim-batch: error: {page}: not a page that report added to this "
                             "output (its manifest does not list it as one); refusing to "
                             f"replace it {ELSEWHERE}\n")
    assert _tree(tmp_path) == before
    rerun = CliRunner().invoke(app, ["run", "--rules", str(tmp_path / "rules.csv"),
                                     "--positions", str(tmp_path / "positions.csv"),
                                     "--out", str(out), "--overwrite", "--quiet"])
    assert rerun.exit_code == 1 and "report.html" in rerun.stderr
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("change", ["edited", "link", "fifo"])
def test_report_refuses_its_own_page_once_someone_changed_it(tmp_path: Path,
                                                             change: str) -> None:
    """A page report added, then edited by the user (another size), or put in place of by a
    link or a special file, is no longer report's to replace."""
    out = _run(tmp_path)
    assert CliRunner().invoke(app, ["report", str(out)]).exit_code == 0
    page = out / "report.html"
    listed = _listed(out)["report.html"]["size"]
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    if change == "edited":
        with page.open("a") as fh:
            fh.write("<!-- my notes -->\n")
        why = (f"changed since report added it ({listed + 18} bytes, listed with {listed}); "
               "refusing to replace it")
    elif change == "link":
        page.unlink()
        page.symlink_to(victim)
        why = "a symbolic link, not the page report added; refusing to follow or replace it"
    else:
        page.unlink()
        os.mkfifo(page)
        why = "not a regular file, not the page report added; refusing to replace it"
    before = _tree(tmp_path)
    result = CliRunner().invoke(app, ["report", str(out)])
    assert result.exit_code == 1, result.output
    assert result.stderr == f"snim-batch: error: {page}: {why} {ELSEWHERE}\n"
    assert _tree(tmp_path) == before


def test_report_replaces_its_own_page_whole_and_records_its_size(tmp_path: Path) -> None:
    """Report's page is replaced by rename (a new file, never written in place) and listed
    with its new size; nothing else is left beside or in the output."""
    out = _run(tmp_path)
    page = out / "report.html"
    assert CliRunner().invoke(app, ["report", str(out)]).exit_code == 0
    first = page.stat().st_ino
    recorded = json.loads((out / "manifest.json").read_text())
    recorded["status"] = "checked by hand"
    (out / "manifest.json").write_text(json.dumps(recorded, indent=2))
    entries = _listed(out)
    assert CliRunner().invoke(app, ["report", str(out)]).exit_code == 0
    assert page.stat().st_ino != first
    assert "checked by hand" in page.read_text()
    assert _listed(out)["report.html"] == {"name": "report.html", "type": "file",
                                          "size": page.stat().st_size, "added_by": "report"}
    assert {k: v for k, v in _listed(out).items() if k != "report.html"} == {
        k: v for k, v in entries.items() if k != "report.html"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "positions.csv", "rules.csv"]
    assert manifest.ownership_problem(out) is None


def test_a_page_inside_another_output_or_a_part_directory_is_refused(tmp_path: Path) -> None:
    """Writing into another snim-batch output (or below this one) would leave a file its
    manifest does not list: refused, nothing written."""
    out = _run(tmp_path)
    other = _run(tmp_path / "second")
    (out / "verdicts_parts").mkdir()
    shutil.copytree(out, tmp_path / "copy")
    (out / "verdicts_parts").rmdir()
    before = _tree(tmp_path)
    for target, enclosing in ((other / "r.html", other), (out / "verdicts.parquet" / "r.html",
                                                           out),
                              (tmp_path / "copy" / "verdicts_parts" / "r.html",
                               tmp_path / "copy")):
        result = CliRunner().invoke(app, ["report", str(out), "--html", str(target)])
        assert result.exit_code == 1, result.output
        assert result.stderr == (
            f"snim-batch: error: {target}: inside the snim-batch output {enclosing}, whose "
            "manifest would no longer list all it holds; refusing to write there (a page goes "
            "directly in the output it describes, or outside any output)\n")
    assert _tree(tmp_path) == before


def test_a_page_named_through_a_link_to_the_output_is_added_to_it(tmp_path: Path) -> None:
    """The output reached through a link to it, or a link outside it naming its page: the
    same rules as the page named directly."""
    out = _run(tmp_path)
    (tmp_path / "alias").symlink_to(out)
    result = CliRunner().invoke(app, ["report", str(tmp_path / "alias"), "--html",
                                      str(tmp_path / "alias" / "page.html")])
    assert result.exit_code == 0, result.output
    assert "page.html" in _listed(out) and (out / "page.html").is_file()
    (tmp_path / "latest.html").symlink_to(out / "page.html")
    result = CliRunner().invoke(app, ["report", str(out), "--html",
                                      str(tmp_path / "latest.html")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "latest.html").is_symlink()
    assert _listed(out)["page.html"]["size"] == (out / "page.html").stat().st_size
    assert manifest.ownership_problem(out) is None


def test_a_page_elsewhere_replaces_the_named_file_whole(tmp_path: Path) -> None:
    """Outside any output, --html names the file to write: an existing file is replaced
    (by rename), a link is followed to the file it names, a directory is refused."""
    out = _run(tmp_path)
    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "old.html").write_text("old\n")
    (pages / "latest.html").symlink_to(pages / "old.html")
    for name in ("old.html", "latest.html"):
        result = CliRunner().invoke(app, ["report", str(out), "--html", str(pages / name)])
        assert result.exit_code == 0, result.output
    assert (pages / "latest.html").is_symlink()
    assert (pages / "old.html").read_text().startswith("<!doctype html>")
    assert sorted(p.name for p in pages.iterdir()) == ["latest.html", "old.html"]
    (pages / "dir.html").mkdir()
    result = CliRunner().invoke(app, ["report", str(out), "--html", str(pages / "dir.html")])
    assert result.exit_code == 1
    assert result.stderr == (f"snim-batch: error: {pages / 'dir.html'}: exists and is not a "
                             "regular file; refusing to replace it, nothing was written\n")
    missing = tmp_path / "nowhere" / "r.html"
    result = CliRunner().invoke(app, ["report", str(out), "--html", str(missing)])
    assert result.exit_code == 1
    assert result.stderr == (f"snim-batch: error: {missing}: no such file or directory while "
                             "writing it; nothing was written\n")
    assert "report.html" not in _listed(out)


# ---- failed writes and kills leave the output as it was -------------------------------------


def _disk_run(disk: Path) -> tuple[list[str], Path]:
    rules, positions = disk.parent / "rules.csv", disk.parent / "positions.csv"
    rules.write_text(RULES)
    positions.write_text(POSITIONS)
    return (["run", "--rules", str(rules), "--positions", str(positions), "--out",
             str(disk / "out")], disk / "out")


def _reports_on_small_disk(tmp_path: Path, job: list[str], out: Path, fault: list[str]
                           ) -> list:
    """On a small disk: the run, a look at it, `fault`, then report into the output and
    report elsewhere, and a second look (on_small_disk's results, one per step)."""
    return on_small_disk(tmp_path, "size=256k", [
        job, ["snapshot", "out"], ["tree"], fault, ["report", str(out)],
        ["report", str(out), "--html", str(out.parent / "elsewhere.html")],
        ["snapshot", "out"], ["tree"]])


def test_report_on_a_full_disk_leaves_the_output_as_it_was(tmp_path: Path) -> None:
    """One free page (4 KiB) and a page of more: exit 1 naming the page and the cause;
    the output, the manifest and the free space are as before, and nothing is left beside."""
    job, out = _disk_run(tmp_path / "disk")
    ran, before, tree, free, failed, again, after, tree_after = _reports_on_small_disk(
        tmp_path, job, out, ["fill-leaving", "4096"])
    assert ran[0] == 3 and free == 4096
    code, err = failed
    assert code == 1
    assert re.fullmatch(
        f"snim-batch: error: {re.escape(str(out / 'report.html'))}: no space left on device "
        f"while writing it in {re.escape(str(out.parent))}/\\.out\\.partial-\\d+-report-"
        r"[0-9a-f]+; nothing was written \(free space or choose another --html\)\n", err), err
    assert again == [1, f"snim-batch: error: {out.parent / 'elsewhere.html'}: no space left on "
                        "device while writing it; nothing was written (free space or choose "
                        "another --html)\n"]
    assert after == before
    assert tree_after == sorted([*tree, "filler"])


def test_report_on_a_read_only_file_system(tmp_path: Path) -> None:
    job, out = _disk_run(tmp_path / "disk")
    ran, before, tree, _, failed, again, after, tree_after = _reports_on_small_disk(
        tmp_path, job, out, ["read-only"])
    assert ran[0] == 3
    code, err = failed
    assert code == 1
    assert re.fullmatch(
        f"snim-batch: error: {re.escape(str(out / 'report.html'))}: read-only file system "
        f"while creating the staging directory {re.escape(str(out.parent))}/\\.out\\.partial-"
        r"\d+-report-[0-9a-f]+; nothing was written\n", err), err
    assert again == [1, f"snim-batch: error: {out.parent / 'elsewhere.html'}: read-only file "
                        "system while writing it; nothing was written\n"]
    assert after == before and tree_after == tree


@pytest.mark.slow
@pytest.mark.parametrize("earlier", [False, True])
def test_report_killed_at_any_moment_leaves_a_provable_output(tmp_path: Path,
                                                               earlier: bool) -> None:
    """Killed after each of its changes in turn (adding a first page, or replacing one): the
    output is always provably a snim-batch output (its manifest lists all it holds, each
    file of the listed size), the page is absent or whole, beside it are only hidden
    staging directories, and the next report removes them."""
    pristine = _run(tmp_path / "first")
    expected = tmp_path / "expected.html"
    assert CliRunner().invoke(app, ["report", str(pristine), "--html", str(expected)]
                              ).exit_code == 0
    if earlier:
        assert CliRunner().invoke(app, ["report", str(pristine)]).exit_code == 0
    parent = tmp_path / "job"
    out = parent / "out"
    for limit in range(1, 100):
        shutil.rmtree(parent, ignore_errors=True)
        parent.mkdir()
        shutil.copytree(pristine, out)
        proc = killed_at(limit, ["report", str(out)])
        assert proc.returncode in (0, -signal.SIGKILL), proc.stderr
        assert manifest.ownership_problem(out) is None, limit
        page = out / "report.html"
        assert not page.exists() or page.read_bytes() == expected.read_bytes(), limit
        if page.exists():
            assert _listed(out)["report.html"]["size"] == page.stat().st_size
        for left in parent.iterdir():
            assert left.name == "out" or re.fullmatch(r"\.out\.partial-\d+-report-[0-9a-f]+",
                                                      left.name), left.name
        if proc.returncode == 0:
            assert sorted(p.name for p in parent.iterdir()) == ["out"]
            break
        assert CliRunner().invoke(app, ["report", str(out)]).exit_code == 0, limit
        assert sorted(p.name for p in parent.iterdir()) == ["out"]
        assert page.read_bytes() == expected.read_bytes()
    assert limit > 6, "report made fewer changes than staging and renaming take"


def test_a_page_elsewhere_removes_what_a_killed_report_left_beside_it(tmp_path: Path) -> None:
    """`.NAME.tmp-PID-TAG` beside the page, of a process that is gone, is removed by the next
    report writing that page; a live process's, and other names, are kept."""
    out = _run(tmp_path)
    dead = subprocess.Popen(["true"])
    dead.wait()
    pages = tmp_path / "pages"
    pages.mkdir()
    left = f".r.html.tmp-{dead.pid}-0123abcd"
    kept = [f".r.html.tmp-{os.getpid()}-0123abcd", f".other.html.tmp-{dead.pid}-0123abcd"]
    for name in [left, *kept]:
        (pages / name).write_text("<html>half")
    result = CliRunner().invoke(app, ["report", str(out), "--html", str(pages / "r.html")])
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(pages)) == sorted([*kept, "r.html"])


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))


@pytest.mark.parametrize("elsewhere", [False, True])
def test_report_past_the_file_size_limit_writes_nothing(tmp_path: Path, elsewhere: bool) -> None:
    """A write cut short by RLIMIT_FSIZE (EFBIG, as a quota would): exit 1, one line naming
    the page and the cause, the output and the directory as they were."""
    out = _run(tmp_path)
    before = _tree(tmp_path)
    target = [] if not elsewhere else ["--html", str(tmp_path / "r.html")]
    proc = subprocess.run([str(CLI_EXE), "report", str(out), *target], capture_output=True,
                          text=True, preexec_fn=_limit_file_size, timeout=120)
    assert proc.returncode == 1
    if elsewhere:
        assert proc.stderr == (f"snim-batch: error: {tmp_path / 'r.html'}: file too large "
                               "while writing it; nothing was written\n")
    else:
        assert re.fullmatch(
            f"snim-batch: error: {re.escape(str(out / 'report.html'))}: file too large while "
            f"writing it in {re.escape(str(tmp_path))}/\\.out\\.partial-\\d+-report-[0-9a-f]+; "
            "nothing was written\n", proc.stderr), proc.stderr
    assert _tree(tmp_path) == before


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
    from pipeline.report import ShownRejects, reason_code_counts, render_report

    summary = _summary(1000)
    manifest = {"run_id": "r", "status": "ok", "counts": {"positions": {
        "rows_read": 10_000_000, "rows_evaluated": 10_000_000, "rows_rejected": 0,
        "verdicts": 10_000_000, "W": 5_000_123, "L": 4_999_877}}}
    sg = pl.DataFrame({"kind": ["nim"], "moves": [[]], "rule_set_ids": [["1"]], "preperiod": [0],
                       "period": [1], "table_len": [1]},
                      schema_overrides={"moves": pl.List(pl.Int64)})
    page = render_report(manifest, summary, sg,
                         ShownRejects(pl.DataFrame(), 0, reason_code_counts({})))
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


def _failing_page_writer(error: BaseException):
    """A page writer that leaves half the page in the staging directory, then raises
    `error` (through the page writer's own failure wording, for an OSError)."""
    from pipeline.io.outputs.failures import writing

    def write(path: Path, data: bytes) -> None:
        with writing(path.name):
            path.write_bytes(data[:100])
            raise error

    return write


@pytest.mark.parametrize("elsewhere", [False, True])
@pytest.mark.parametrize("error", ["no space", "interrupt"])
def test_a_report_failing_mid_write_leaves_nothing_half_written(
        tmp_path: Path, monkeypatch, elsewhere: bool, error: str) -> None:
    """The page goes through the Output protocol: a write failing half way (a full disk,
    Ctrl-C) leaves the output (its manifest, an earlier page) and the page's directory as
    they were, with no staging directory left."""
    import errno

    import pipeline.report

    out = _run(tmp_path / "job")
    target = tmp_path / "pages" / "r.html" if elsewhere else out / "report.html"
    target.parent.mkdir(exist_ok=True)
    args = ["report", str(out), *(["--html", str(target)] if elsewhere else [])]
    assert CliRunner().invoke(app, args).exit_code == 0
    before = _tree(tmp_path)
    raised = {"no space": OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
              "interrupt": KeyboardInterrupt()}[error]
    monkeypatch.setattr(pipeline.report, "write_file", _failing_page_writer(raised))
    result = CliRunner().invoke(app, args)
    if error == "interrupt":
        assert (result.exit_code, result.stderr) == (
            130, "snim-batch: interrupted; nothing was written\n")
    elif elsewhere:
        assert (result.exit_code, result.stderr) == (
            1, f"snim-batch: error: {target}: no space left on device while writing it; "
               "nothing was written (free space or choose another --html)\n")
    else:
        assert result.exit_code == 1
        assert re.fullmatch(
            f"snim-batch: error: {re.escape(str(target))}: no space left on device while "
            f"writing it in {re.escape(str(out.parent))}/\\.out\\.partial-\\d+-report-"
            r"[0-9a-f]+; nothing was written \(free space or choose another --html\)\n",
            result.stderr), result.stderr
    assert _tree(tmp_path) == before
    assert manifest.ownership_problem(out) is None


def test_the_rejected_rows_of_a_large_table_are_counted_and_the_first_listed(
        tmp_path: Path) -> None:
    """A night of 326 rejects in three reasons, as one file and as the Spark engine's
    directory of part files: the counts per reason_code (against the rows made bad), the
    first 100 rows as the table holds them, and the rest named. The page reads the table a
    record batch at a time, never whole."""
    lines = ["rule_set_id,position_id,heaps"]
    made = {"unknown_rule_set": 0, "not_an_integer": 0, "out_of_range": 0}
    for i in range(600):
        if i % 3 == 0:
            lines.append(f"9,{i},1 2")
            made["unknown_rule_set"] += 1
        elif i % 5 == 1:
            lines.append(f"1,{i},4 x")
            made["not_an_integer"] += 1
        elif i % 7 == 2:
            lines.append(f"2,{i},-3")
            made["out_of_range"] += 1
        else:
            lines.append(f"1,{i},{i % 13}")
    (tmp_path / "rules.csv").write_text(RULES)
    (tmp_path / "positions.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", "--rules", str(tmp_path / "rules.csv"),
                                      "--positions", str(tmp_path / "positions.csv"),
                                      "--out", str(out), "--quiet"])
    assert result.exit_code == 3, result.output
    rejected = sum(made.values())
    table = pl.read_parquet(out / "rejects.parquet")
    assert table.height == rejected

    def shown() -> tuple[dict[str, int], list[str], str]:
        page = (out / "report.html")
        result = CliRunner().invoke(app, ["report", str(out)])
        assert result.exit_code == 0, result.output
        text = " ".join(_Tags.text_of(page.read_text()).split())
        counts = dict(re.findall(r"\b([a-z_]+) ([\d,]+)\b", text.split(
            "Rejected rows by reason_code")[1].split("The first rows")[0]))
        return ({code: int(n.replace(",", "")) for code, n in counts.items()
                 if code in made}, re.findall(r"positions\.csv (\d+)", text), text)

    counts, rows, text = shown()
    assert counts == made
    assert rows == [str(r) for r in table["row"].head(100)]
    assert f"… {rejected - 100:,} more rows in rejects.parquet." in text
    (out / "rejects.parquet").unlink()
    (out / "rejects.parquet").mkdir()
    table.head(150).write_parquet(out / "rejects.parquet" / "part-00000.parquet")
    table.slice(150).write_parquet(out / "rejects.parquet" / "part-00001.parquet")
    (out / "report.html").unlink()
    counts, rows, text = shown()
    assert counts == made
    assert rows == [str(r) for r in table["row"].head(100)]
