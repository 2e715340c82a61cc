"""An input rewritten while the run reads it fails the run, naming it, with nothing written:
local files (size, modification time) and objects in a real S3 server (etag, size)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

import polars as pl
import pytest
from conftest import CLI_EXE, wins

from pipeline.config import config_from_dict
from pipeline.errors import InputError, SnimError, StoreError
from pipeline.events import PHASE_START, RunEvent
from pipeline.run import run_job

RULES = "rule_set_id,kind,moves\n1,,2 5\n2,nim,\n"
POSITIONS = "rule_set_id,position_id,heaps\n1,0,5 12\n2,1,3 4\n1,2,7\n"
REWRITTEN = "rule_set_id,position_id,heaps\n1,0,5 12\n2,1,3 4\n1,2,9\n"  # same size


def rewrite_when(phase: str, rewrite):
    """An event callback that calls `rewrite()` as `phase` starts."""
    def on_event(event: RunEvent) -> None:
        if event.kind == PHASE_START and event.phase == phase:
            rewrite()
    return on_event


def local_job(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "rules.csv").write_text(RULES)
    (tmp_path / "positions.csv").write_text(POSITIONS)
    return {"rules": str(tmp_path / "rules.csv"), "positions": str(tmp_path / "positions.csv"),
            "out": str(tmp_path / "out")}


@pytest.mark.parametrize("phase", ["positions", "finish", "write"])
@pytest.mark.parametrize(("text", "said"), [
    (REWRITTEN, "modified since it was first read"),
    (POSITIONS + "2,3,1\n", f"{len(POSITIONS)} bytes when first read, {len(POSITIONS) + 6} now"),
])
def test_a_local_positions_file_rewritten_during_the_run_fails_it(
        tmp_path: Path, phase: str, text: str, said: str) -> None:
    """Rewritten as reading starts, once it is read, or while the outputs are written: the
    file was described before any of its rows were read, whenever its checksum is made."""
    job = local_job(tmp_path)
    target = tmp_path / "positions.csv"

    def rewrite() -> None:
        stat = target.stat()
        target.write_text(text)
        os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))

    with pytest.raises(InputError) as raised:
        run_job(config_from_dict(job), on_event=rewrite_when(phase, rewrite))
    assert str(raised.value) == (f"{target}: changed while this run read it ({said}); nothing "
                                 "was written (rerun once it is written whole)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["positions.csv", "rules.csv"]


@pytest.mark.parametrize("phase", ["positions", "finish", "write"])
def test_a_file_renamed_over_the_input_with_its_size_and_time_fails_the_run(
        tmp_path: Path, phase: str) -> None:
    """An exporter that writes a new file and renames it over the input (the usual atomic
    write) as the run reads it, the new file of the same size and modification time: the
    run read one and checksummed the other, and exited 0 with a manifest whose checksum
    was not of the rows it evaluated. The inode tells them apart."""
    job = local_job(tmp_path)
    target = tmp_path / "positions.csv"

    def replace() -> None:
        staged = tmp_path / ".positions.csv.new"
        staged.write_text(REWRITTEN)
        stat = target.stat()
        os.utime(staged, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        os.replace(staged, target)

    with pytest.raises(InputError) as raised:
        run_job(config_from_dict(job), on_event=rewrite_when(phase, replace))
    assert str(raised.value) == (
        f"{target}: changed while this run read it (another file was put in its place since it "
        "was first read); nothing was written (rerun once it is written whole)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["positions.csv", "rules.csv"]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_positions_file_cut_short_as_it_is_read_is_said_changed_not_broken(
        tmp_path: Path, fmt: str) -> None:
    """An exporter rewriting the file in place (O_TRUNC, then writing) as the run starts
    reading it: the reader meets an empty CSV file, a Parquet file without its footer. The
    error is the change, with the hint to rerun, not "empty file" or "not a readable Parquet
    file", which send on-call to look for a broken export."""
    job = local_job(tmp_path)
    target = tmp_path / f"positions.{fmt}"
    if fmt == "parquet":
        pl.read_csv(tmp_path / "positions.csv").with_columns(
            pl.col("heaps").str.split(" ").cast(pl.List(pl.Int64))).write_parquet(target)
        (tmp_path / "positions.csv").unlink()
        job["positions"] = str(target)
    size = target.stat().st_size
    cut = 0 if fmt == "csv" else size // 2

    def rewrite() -> None:
        with target.open("r+b") as fh:
            fh.truncate(cut)

    with pytest.raises(InputError) as raised:
        run_job(config_from_dict(job), on_event=rewrite_when("positions", rewrite))
    assert str(raised.value) == (f"{target}: changed while this run read it ({size} bytes when "
                                 f"first read, {cut} now); nothing was written (rerun once it "
                                 "is written whole)")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["rules.csv", target.name])


def test_a_positions_file_cut_short_before_its_form_is_read_is_said_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The files are described before any of their bytes is read, the form and footers
    included: a file rewritten in place just then is "changed", not an "empty file"."""
    import pipeline.run

    job = local_job(tmp_path)
    target = tmp_path / "positions.csv"
    size = target.stat().st_size
    real = pipeline.run.positions_form

    def cut_then_read(*args, **kwargs):
        os.truncate(target, 0)
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline.run, "positions_form", cut_then_read)
    with pytest.raises(InputError) as raised:
        run_job(config_from_dict(job))
    assert str(raised.value) == (f"{target}: changed while this run read it ({size} bytes when "
                                 "first read, 0 now); nothing was written (rerun once it is "
                                 "written whole)")


CUT_AS_THE_SCAN_READS = '''
import os
from pipeline.io.read import csv_reader

real = csv_reader._short_lines


def short_lines(data):  # the exporter truncates the file while its bytes are checked
    if bytes(data).startswith(b"rule_set_id,position_id"):  # not the rules file's
        os.truncate(os.environ["CUT_FILE"], 0)
    return real(data)


csv_reader._short_lines = short_lines
'''


def test_a_csv_file_cut_short_while_its_bytes_are_checked_is_an_error_not_a_crash(
        tmp_path: Path) -> None:
    """The check of a CSV file's bytes once went through a memory map: a file truncated
    meanwhile ended the process with SIGBUS (no message, the staging directory left). It is
    read now; the run fails naming the change (a real CLI process: the truncation comes from
    a sitecustomize, inside the check)."""
    job = local_job(tmp_path)
    with (tmp_path / "positions.csv").open("a") as more:  # past a window of `_short_lines`
        more.writelines(f"1,{i},{i % 97} {i % 89}\n" for i in range(3, 40_000))
    size = (tmp_path / "positions.csv").stat().st_size
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(CUT_AS_THE_SCAN_READS)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "CUT_FILE": job["positions"],
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(root)])}
    proc = subprocess.run([str(CLI_EXE), "run", "--rules", job["rules"], "--positions",
                           job["positions"], "--out", job["out"]],
                          capture_output=True, text=True, env=env, timeout=120)
    assert (proc.returncode, proc.stderr) == (1, (
        f"snim-batch: error: {job['positions']}: changed while this run read it ({size} bytes "
        "when first read, 0 now); nothing was written (rerun once it is written whole)\n"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["positions.csv", "rules.csv", "site"]


def test_rules_edited_after_they_were_read_do_not_fail_the_run(tmp_path: Path) -> None:
    """The rules are read whole at the start and checked then: tomorrow's rules being
    prepared in place does not fail a long run, and the manifest names what was read."""
    job = local_job(tmp_path)
    rules = tmp_path / "rules.csv"
    result = run_job(config_from_dict(job), on_event=rewrite_when(
        "positions", lambda: rules.write_text(RULES + "3,half,\n")))
    assert result.exit_code == 0
    assert result.manifest["inputs"]["rules"][0]["sha256"] == hashlib.sha256(
        RULES.encode()).hexdigest()


def test_inputs_left_alone_pass_the_check(tmp_path: Path) -> None:
    job = local_job(tmp_path)
    result = run_job(config_from_dict(job), on_event=rewrite_when("positions", lambda: None))
    assert result.exit_code == 0
    verdicts = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")
    expected = [(0, wins("subtraction", (2, 5), [5, 12])), (2, wins("subtraction", (2, 5), [7])),
                (1, wins("nim", (), [3, 4]))]
    assert verdicts.select("position_id", "verdict").rows() == [
        (pid, "W" if won else "L") for pid, won in expected]


@pytest.fixture()
def s3_env(s3, monkeypatch: pytest.MonkeyPatch):
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    return s3


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_an_object_replaced_during_the_run_fails_it(s3_env, tmp_path: Path, fmt: str) -> None:
    client = s3_env.client()
    client.put_object(Bucket="bkt", Key="in/rules.csv", Body=RULES.encode())
    local = tmp_path / f"positions.{fmt}"
    local.write_text(POSITIONS)
    if fmt == "parquet":
        pl.read_csv(local).with_columns(pl.col("heaps").str.split(" ").cast(pl.List(pl.Int64))
                                        ).write_parquet(local)
    client.put_object(Bucket="bkt", Key=f"in/positions.{fmt}", Body=local.read_bytes())
    first = client.head_object(Bucket="bkt", Key=f"in/positions.{fmt}")["ETag"].strip('"')
    replacement = local.read_bytes() if fmt == "parquet" else REWRITTEN.encode()
    if fmt == "parquet":
        pl.read_parquet(local).reverse().write_parquet(local)
        replacement = local.read_bytes()

    def rewrite() -> None:
        client.put_object(Bucket="bkt", Key=f"in/positions.{fmt}", Body=replacement)

    job = {"rules": "s3://bkt/in/rules.csv", "positions": f"s3://bkt/in/positions.{fmt}",
           "out": str(tmp_path / "out")}
    with pytest.raises(InputError) as raised:
        run_job(config_from_dict(job), on_event=rewrite_when("positions", rewrite))
    now = client.head_object(Bucket="bkt", Key=f"in/positions.{fmt}")["ETag"].strip('"')
    assert first != now
    assert str(raised.value) == (f"s3://bkt/in/positions.{fmt}: changed while this run read it "
                                 f"(etag {first} when first read, {now} now); nothing was "
                                 "written (rerun once it is written whole)")
    assert not (tmp_path / "out").exists()


def test_an_object_deleted_during_the_run_fails_it(s3_env, tmp_path: Path) -> None:
    client = s3_env.client()
    client.put_object(Bucket="bkt", Key="in/rules.csv", Body=RULES.encode())
    client.put_object(Bucket="bkt", Key="in/positions.csv", Body=POSITIONS.encode())
    job = {"rules": "s3://bkt/in/rules.csv", "positions": "s3://bkt/in/positions.csv",
           "out": str(tmp_path / "out")}
    with pytest.raises(InputError, match=re.escape(
            "s3://bkt/in/positions.csv: changed while this run read it (it is gone now)")):
        run_job(config_from_dict(job), on_event=rewrite_when(
            "finish", lambda: client.delete_object(Bucket="bkt", Key="in/positions.csv")))
    assert not (tmp_path / "out").exists()


def test_a_store_that_refuses_the_last_look_is_said_to_fail_not_the_object_gone(
        s3_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The object is still there, but the store answers 403 when the run asks after it once
    its rows are read: the store's refusal is the error, not "it is gone now"."""
    from test_object_store import HeldRequest

    client = s3_env.client()
    client.put_object(Bucket="bkt", Key="in/rules.csv", Body=RULES.encode())
    client.put_object(Bucket="bkt", Key="in/positions.csv", Body=POSITIONS.encode())
    proxy = HeldRequest(s3_env, rb"NOT A REQUEST", refuse=True)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)

    def refuse_from_now() -> None:
        proxy.pattern = re.compile(rb"HEAD /bkt/in/positions\.csv")

    job = {"rules": "s3://bkt/in/rules.csv", "positions": "s3://bkt/in/positions.csv",
           "out": str(tmp_path / "out")}
    try:
        with pytest.raises(SnimError) as raised:
            run_job(config_from_dict(job), on_event=rewrite_when("finish", refuse_from_now))
    finally:
        proxy.close()
    assert proxy.held.is_set()
    assert isinstance(raised.value, StoreError)
    assert str(raised.value) == ("s3://bkt/in/positions.csv: the object store refused access "
                                 "while reading (check the credentials)")
    assert not (tmp_path / "out").exists()


def test_a_read_error_stays_the_error_when_the_store_cannot_say_if_the_object_changed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An object fails to read, and the store cannot be reached for the look that would tell
    whether it changed meanwhile (here: nothing listens at its endpoint): the read's error,
    which says what is wrong with the object, is the run's, not the failed look."""
    import socket

    from pipeline.io.read.files import InputFile
    from pipeline.io.store import object_store
    from pipeline.io.store.locations import Location
    from pipeline.run import _changed_is_the_error

    with socket.socket() as sock:  # a port nothing listens at once it is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    location = object_store.with_client_options(
        Location.parse("s3://bkt/in/positions.parquet", Path.cwd()), None)
    read_error = InputError(f"{location}: not a readable Parquet file (footer cut short)",
                            path=str(location))
    with pytest.raises(InputError) as raised:
        with _changed_is_the_error([InputFile(location, "parquet", 72, "etag-1", None)]):
            raise read_error
    assert raised.value is read_error
