"""The Spark engine on a real Spark Connect server (started from the pyspark install on
127.0.0.1, stopped by the module): the same four tables as the polars engine, wide and long,
with rejects; and an unreachable server as one line, exit 1.

The Connect runs go through the CLI in a subprocess: a Connect session switches pyspark's
process-wide mode to "remote", which the local sessions of the other test modules must not see.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import assert_same_outputs, inputs_with_rejects
from s3_server import free_port

pytest.importorskip("pyspark")
pytest.importorskip("grpc")

from pipeline.config import config_from_dict  # noqa: E402
from pipeline.engines.spark_connect import SparkConnectError, address, ship  # noqa: E402
from pipeline.run import run_job  # noqa: E402

CLI_TIMEOUT_S = 600


def snim_batch(*args: str, where: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The CLI in a subprocess, run in `where` (no config.yaml there)."""
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True,
                          text=True, timeout=CLI_TIMEOUT_S, env=env, cwd=where)


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    from spark_servers import ConnectServer

    server = ConnectServer(tmp_path_factory.mktemp("connect")).start()
    yield server
    server.stop()


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("form", ["wide", "long"])
def test_connect_matches_polars_with_rejects(connect_server, tmp_path, form):
    from spark_servers import spark_env

    rules, positions = inputs_with_rejects(tmp_path, form)
    expected = run_job(config_from_dict({"rules": str(rules), "positions": str(positions),
                                         "out": str(tmp_path / "polars"),
                                         "winning_moves": form == "long"}))
    assert expected.exit_code == 3
    moves = ["--winning-moves"] if form == "long" else []
    done = snim_batch("run", "--engine", "spark", "--spark-remote", connect_server.url,
                      "--rules", str(rules), "--positions", str(positions),
                      "--out", str(tmp_path / "spark"), *moves, where=tmp_path, env=spark_env())
    assert done.returncode == 3, done.stderr[-3000:]
    assert_same_outputs(tmp_path / "spark", expected.out)


@pytest.mark.spark
def test_closed_connect_port_is_one_line_and_exit_1(tmp_path):
    from spark_servers import spark_env

    rules, positions = inputs_with_rejects(tmp_path, "wide")
    port = free_port()  # bound once, now closed: nothing listens there
    done = snim_batch("run", "--engine", "spark", "--spark-remote", f"sc://127.0.0.1:{port}",
                      "--rules", str(rules), "--positions", str(positions),
                      "--out", str(tmp_path / "out"), where=tmp_path, env=spark_env())
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"snim-batch: error: cannot reach the Spark Connect server at 127.0.0.1:{port} "
        f"(spark.remote sc://127.0.0.1:{port}): Connection refused"]
    assert not (tmp_path / "out").exists()


@pytest.mark.spark
def test_an_endpoint_that_is_no_connect_server_is_named_as_such(tmp_path):
    """An HTTP server where the Connect server should be: one line saying that the endpoint
    did not answer as a Spark Connect server, with gRPC's status; it blamed
    spark.conf.spark.sql.optimizer.canChangeCachedPlanOutputPartitioning, a setting of
    snim-batch's own, the first call made."""
    import http.server
    import threading

    from spark_servers import spark_env

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    rules, positions = inputs_with_rejects(tmp_path, "wide")
    try:
        done = snim_batch("run", "--engine", "spark", "--spark-remote",
                          f"sc://127.0.0.1:{port}", "--rules", str(rules), "--positions",
                          str(positions), "--out", str(tmp_path / "out"), where=tmp_path,
                          env=spark_env())
    finally:
        server.shutdown()
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"snim-batch: error: the server at 127.0.0.1:{port} (spark.remote "
                           f"sc://127.0.0.1:{port}) did not answer as a Spark Connect server "
                           "(UNAVAILABLE: "), line
    assert "spark.conf" not in line
    assert not (tmp_path / "out").exists()


@pytest.mark.spark
@pytest.mark.slow
def test_a_setting_the_server_refuses_is_named_without_its_value(connect_server, tmp_path):
    from spark_servers import spark_env

    rules, positions = inputs_with_rejects(tmp_path, "wide")
    (tmp_path / "c.yaml").write_text(
        f"rules: {rules}\npositions: {positions}\nout: {tmp_path / 'out'}\nengine: spark\n"
        f"spark:\n  remote: {connect_server.url}\n  conf:\n"
        "    spark.sql.shuffle.partitions: SECRET-LIKE-VALUE\n")
    done = snim_batch("run", "--config", str(tmp_path / "c.yaml"), where=tmp_path,
                      env=spark_env())
    assert done.returncode == 1, done.stderr
    assert ("error: spark.conf.spark.sql.shuffle.partitions: the Spark Connect server "
            "refused it (") in done.stderr, done.stderr
    assert "SECRET-LIKE-VALUE" not in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("url, expected", [
    ("sc://127.0.0.1:15002", ("127.0.0.1", 15002)),
    ("sc://spark.example.com", ("spark.example.com", 15002)),
    ("sc://h:443/;token=abc;use_ssl=true", ("h", 443)),
])
def test_address_of_a_connect_url(url, expected):
    assert address(url) == expected


@pytest.mark.spark
def test_connect_without_the_client_packages_is_exit_2(tmp_path):
    """--spark-remote without grpc (hidden from a child interpreter): one line, exit 2."""
    from spark_servers import spark_env

    rules, positions = inputs_with_rejects(tmp_path, "wide")
    hide = ("import sys; sys.modules['grpc'] = None; sys.argv[1:] = sys.argv[2:]; "
            "from pipeline.cli import app; app()")
    done = subprocess.run(
        [sys.executable, "-c", hide, "--", "run", "--engine", "spark", "--spark-remote",
         f"sc://127.0.0.1:{free_port()}", "--rules", str(rules), "--positions", str(positions),
         "--out", str(tmp_path / "out")],
        cwd=tmp_path, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env=spark_env())
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "pip install '.[spark]' in the project's checkout" in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_tables_ride_in_the_closure_up_to_a_limit():
    import numpy as np

    values = np.arange(1 << 20, dtype=np.int64)  # 8 MiB
    assert ship(values, limit=9 << 20).value is values
    with pytest.raises(SparkConnectError, match=r"the SG tables take 8 MiB, more than Spark "
                       r"Connect carries in a plan \(7 MiB.*tables\.max_total_values"):
        ship(values, limit=7 << 20)
