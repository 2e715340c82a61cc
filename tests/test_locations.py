"""io.locations: what a location names; a URL is never taken for a relative path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import invoke

from pipeline.errors import UsageError
from pipeline.io.store.locations import Location

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


@pytest.mark.parametrize(("text", "scheme", "bucket", "key", "account"), [
    ("s3://bucket/rules.parquet", "s3", "bucket", "rules.parquet", ""),
    ("S3://bucket/in/", "s3", "bucket", "in", ""),
    ("s3a://bucket/a/b.csv", "s3", "bucket", "a/b.csv", ""),
    ("gs://b/x/*.parquet", "gs", "b", "x/*.parquet", ""),
    ("gcs://b/x", "gs", "b", "x", ""),
    ("az://c/x", "az", "c", "x", ""),
    ("abfss://c@acct.dfs.core.windows.net/x/y", "az", "c", "x/y", "acct"),
    ("abfs://c@acct.dfs.core.windows.net", "az", "c", "", "acct"),
    ("hdfs:///in/x", "hdfs", "", "in/x", ""),
    ("hdfs://namenode:8020/in/x", "hdfs", "namenode:8020", "in/x", ""),
])
def test_object_store_urls_are_taken_apart(text: str, scheme: str, bucket: str, key: str,
                                           account: str) -> None:
    location = Location.parse(text, Path("/base"))
    assert (location.scheme, location.bucket, location.key, location.account) == (
        scheme, bucket, key, account)
    assert location.is_remote and location.path is None
    assert str(location) == text.rstrip("/")


def test_children_and_keys_keep_the_scheme_and_account() -> None:
    base = Location.parse("abfss://c@acct.dfs.core.windows.net/out", Path("/base"))
    child = base.child("run/verdicts.parquet")
    assert (str(child), child.key, child.account, child.name, child.suffix) == (
        "abfss://c@acct.dfs.core.windows.net/out/run/verdicts.parquet",
        "out/run/verdicts.parquet", "acct", "verdicts.parquet", ".parquet")
    assert str(base.at_key("in/a.csv")) == "abfss://c@acct.dfs.core.windows.net/in/a.csv"
    assert child.store_path == "c/out/run/verdicts.parquet"


@pytest.mark.parametrize("text", ["HTTP://example.com/x", "ftp://host/x", "hdfs2://x/y",
                                  "webhdfs://x/y"])
def test_unknown_schemes_are_refused_by_name(text: str) -> None:
    with pytest.raises(UsageError, match=r"locations are not supported") as info:
        Location.parse(text, Path("/base"))
    assert repr(text) in str(info.value)


@pytest.mark.parametrize("text", ["s3:///key", "gs://", "az:///x"])
def test_a_store_url_without_a_bucket_is_refused(text: str) -> None:
    with pytest.raises(UsageError, match=r"names a bucket"):
        Location.parse(text, Path("/base"))


def test_a_file_url_with_a_host_is_refused() -> None:
    with pytest.raises(UsageError, match=r"names a local path"):
        Location.parse("file://server/share/r.csv", Path("/base"))


@pytest.mark.parametrize("option", ["--rules", "--positions", "--out"])
def test_an_unknown_scheme_exits_2_and_creates_nothing(tmp_path: Path, option: str) -> None:
    args = {"--rules": str(SAMPLE / "rules.csv"), "--positions": str(SAMPLE / "positions.csv"),
            "--out": "out"}
    args[option] = "ftp://bucket/data"
    code, err = invoke(["run", *[x for pair in args.items() for x in pair]], tmp_path)
    assert code == 2, err
    assert "'ftp://bucket/data': ftp:// locations are not supported" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [
    ["generate", "--out", "{url}"],
    ["convert", str(SAMPLE / "classic.txt"), "--out", "{url}"],
    ["convert", "{url}", "--out", "tables"],
    ["report", str(SAMPLE), "--html", "{url}"],
    ["run", "--rules", str(SAMPLE / "rules.csv"), "--positions",
     str(SAMPLE / "positions.csv"), "--out", "out", "--result-file", "{url}"],
], ids=["generate", "convert-out", "convert-source", "report-html", "run-result-file"])
@pytest.mark.parametrize("url", ["s3://AKID:PASSWORD123@bkt/x", "ftp://u:PASSWORD123@h/x"])
def test_a_url_to_an_option_of_local_paths_exits_2_without_its_password(
        tmp_path: Path, args: list[str], url: str) -> None:
    """Options that take local paths only: a URL there became a local path `s3:/bkt/x`:
    generate made the directory `s3:` and failed as an internal error, convert and report
    printed the URL's password, and run wrote its result to `./s3:/bkt/...`. Now exit 2,
    the URL shown without its password, nothing made."""
    code, err = invoke([a.replace("{url}", url) for a in args], tmp_path)
    assert code == 2, err
    shown = url.replace("PASSWORD123", "<hidden>")
    assert f"'{shown}': takes a local path, not a URL" in err, err
    assert "PASSWORD123" not in err
    assert list(tmp_path.iterdir()) == []


def test_file_urls_run_the_job(tmp_path: Path) -> None:
    code, err = invoke(["run", "--rules", (SAMPLE / "rules.csv").as_uri(), "--positions",
                        (SAMPLE / "positions.csv").as_uri(), "--out",
                        (tmp_path / "out").as_uri()], tmp_path)
    assert code == 0, err
    assert (tmp_path / "out" / "verdicts.parquet").is_file()


@pytest.mark.parametrize(("text", "shown_as"), [
    ("ftp://u:PW@h/r", "ftp://u:<hidden>@h/r"),
    ("https://h/r.csv?sig=S&se=2030", "https://h/r.csv?sig=<hidden>&se=<hidden>"),
    ("s3://bkt/in/rules.csv?X-Amz-Signature=V", "s3://bkt/in/rules.csv?X-Amz-Signature=<hidden>"),
    ("error at http://admin:PW@127.0.0.1:9000 while listing",
     "error at http://admin:<hidden>@127.0.0.1:9000 while listing"),
    ("sc://h:15002/;token=T;user_id=me", "sc://h:15002/;token=<hidden>;user_id=<hidden>"),
    ("'abfss://c@acct.dfs.core.windows.net/x?sv=1&sig=2'",
     "'abfss://c@acct.dfs.core.windows.net/x?sv=<hidden>&sig=<hidden>'"),
    # nothing secret: globs, hive-style keys and an Azure container@account stay as they are
    ("s3://bkt/part-?.csv", "s3://bkt/part-?.csv"),
    ("s3://bkt/date=2026-12-0?/x=1.csv", "s3://bkt/date=2026-12-0?/x=1.csv"),
    ("abfss://c@acct.dfs.core.windows.net/x", "abfss://c@acct.dfs.core.windows.net/x"),
])
def test_urls_are_shown_without_passwords_or_query_values(text: str, shown_as: str) -> None:
    from pipeline.io.store.locations import without_secrets

    assert without_secrets(text) == shown_as


@pytest.mark.parametrize(("text", "secret", "said"), [
    ("s3://bkt/in/rules.csv?X-Amz-Signature=VSECRET", "VSECRET", "takes no query string"),
    ("gs://bkt/r.csv?x-goog-signature=VSECRET&x=1", "VSECRET", "takes no query string"),
    ("https://h/r.csv?sig=SSECRET", "SSECRET", "https:// locations are not supported"),
    ("ftp://u:PWSECRET@h/r", "PWSECRET", "ftp:// locations are not supported"),
    ("s3://u:PWSECRET@bkt/in/rules.csv", "PWSECRET", "holds no user name or password"),
    # the user of an object-store URL is an access key id: hidden too
    ("s3://AKIAKEYID:PWSECRET@bkt/in/rules.csv", "AKIAKEYID", "holds no user name or password"),
    ("gs://AKIAKEYID@bkt/in/rules.csv", "AKIAKEYID", "holds no user name or password"),
    # Azure's user is the container, shown: the message says which URL, its password hidden
    ("abfss://cont:PWSECRET@acct.dfs.core.windows.net/x", "PWSECRET",
     "'abfss://cont:<hidden>@acct.dfs.core.windows.net/x': an object-store URL holds no "
     "password (its user part is the container)"),
    ("file://u:PWSECRET@host/x", "PWSECRET", "names a local path"),
])
@pytest.mark.parametrize("option", ["--rules", "--positions", "--out"])
def test_a_url_with_a_password_or_signature_is_refused_without_showing_it(
        tmp_path: Path, text: str, secret: str, said: str, option: str) -> None:
    args = {"--rules": str(SAMPLE / "rules.csv"), "--positions": str(SAMPLE / "positions.csv"),
            "--out": str(tmp_path / "out")}
    args[option] = text
    code, err = invoke(["run", *[part for pair in args.items() for part in pair],
                        "--verbose"], tmp_path)
    assert code == 2, err
    assert said in err and secret not in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("text", "said"), [
    ("s3://bkt/a/../y", "a '..' segment"), ("s3://bkt/a/./y", "a '.' segment"),
    ("s3://bkt/../y", "a '..' segment"), ("gs://bkt/a//y", "an empty segment (//)"),
    ("az://c/x/..", "a '..' segment"), ("abfss://c@a.dfs.core.windows.net/./x", "a '.' segment"),
])
def test_keys_with_dot_or_empty_segments_are_refused(text: str, said: str) -> None:
    """A store keeps `a/../y` as a key of its own, while clients normalise it (an output's
    files went to `y/`, its manifest to `a/../y/`): refused, for inputs and outputs alike."""
    with pytest.raises(UsageError, match=re.escape(said)):
        Location.parse(text, Path("/base"))
