"""io.locations: what a location names; a URL is never taken for a relative path."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import invoke

from pipeline.errors import UsageError
from pipeline.io.locations import Location

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample"


@pytest.mark.parametrize(("text", "expected"), [
    ("rules.csv", "/base/rules.csv"),
    ("sub/../rules.csv", "/base/sub/../rules.csv"),
    ("/abs/rules.csv", "/abs/rules.csv"),
    ("file:///abs/my%20rules.csv", "/abs/my rules.csv"),
    ("FILE://localhost/abs/r.csv", "/abs/r.csv"),
    ("pos[1].csv", "/base/pos[1].csv"),
    ("c:rules.csv", "/base/c:rules.csv"),
])
def test_local_paths_and_file_urls(text: str, expected: str) -> None:
    location = Location.parse(text, Path("/base"))
    assert (location.scheme, str(location)) == ("file", expected)


def test_home_is_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/someone")
    assert str(Location.parse("~/r.csv", Path("/base"))) == "/home/someone/r.csv"


@pytest.mark.parametrize("text", ["s3://bucket/rules.parquet", "gs://b/x", "az://c/x",
                                  "abfss://c@acct.dfs.core.windows.net/x", "hdfs:///in/x",
                                  "HTTP://example.com/x"])
def test_other_schemes_are_refused_by_name(text: str) -> None:
    with pytest.raises(UsageError, match=r"locations are not supported") as info:
        Location.parse(text, Path("/base"))
    assert repr(text) in str(info.value)


def test_a_file_url_with_a_host_is_refused() -> None:
    with pytest.raises(UsageError, match=r"names a local path"):
        Location.parse("file://server/share/r.csv", Path("/base"))


@pytest.mark.parametrize("option", ["--rules", "--positions", "--out"])
def test_a_url_option_exits_2_and_creates_nothing(tmp_path: Path, option: str) -> None:
    args = {"--rules": str(SAMPLE / "rules.csv"), "--positions": str(SAMPLE / "positions.csv"),
            "--out": "out"}
    args[option] = "s3://bucket/data"
    code, err = invoke(["run", *[x for pair in args.items() for x in pair]], tmp_path)
    assert code == 2, err
    assert "'s3://bucket/data': s3:// locations are not supported" in err
    assert list(tmp_path.iterdir()) == []


def test_file_urls_run_the_job(tmp_path: Path) -> None:
    code, err = invoke(["run", "--rules", (SAMPLE / "rules.csv").as_uri(), "--positions",
                        (SAMPLE / "positions.csv").as_uri(), "--out",
                        (tmp_path / "out").as_uri()], tmp_path)
    assert code == 0, err
    assert (tmp_path / "out" / "verdicts.parquet").is_file()
