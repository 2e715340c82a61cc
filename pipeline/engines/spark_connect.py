"""Spark Connect: the job run on a Spark Connect server (`spark.remote`, sc://HOST:PORT), the
way Spark 4 and Databricks clusters are reached. The client here holds no JVM: there are no
broadcast variables, no SparkContext and no RDDs, so the SG tables travel pickled inside the
tasks' closures (`ship`), and every step is a DataFrame operation."""

from __future__ import annotations

import contextlib
import logging
import pickle
import re
import socket
import warnings
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

from pyspark.sql import SparkSession

from pipeline.config import hidden_master, hidden_remote
from pipeline.engines.spark_tasks import Shipped
from pipeline.errors import MissingExtra, SparkConnectError, first_line, truncated

log = logging.getLogger(__name__)

DEFAULT_PORT = 15002  # Spark Connect's own default
REACH_TIMEOUT_S = 10.0
RETRIES = 3  # the client's own default retries for up to 10 minutes on a lost connection
# A plan travels as one gRPC message, which the server refuses above
# spark.connect.grpc.maxInboundMessageSize (128 MiB by default); a long-form plan holds the
# tables up to three times (per-heap values, rejects, winning moves).
SHIP_LIMIT = 32 << 20


def is_connect(spark: Any) -> bool:
    """Is `spark` a Spark Connect session (rather than one with a JVM in this process)?"""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def address(url: str) -> tuple[str, int]:
    """(host, port) of an sc:// URL (validated by the config: `config.remote_problem`)."""
    parsed = urlparse(url.replace("sc://", "http://", 1))
    return parsed.hostname or "", parsed.port or DEFAULT_PORT


def connect_session(url: str, conf: dict[str, str]) -> SparkSession:
    """A Spark Connect session to `url`, with the SQL settings of `conf` (a server's other
    settings are its own). The server must answer on its port within REACH_TIMEOUT_S, and a
    connection lost later is retried RETRIES times, not for minutes."""
    from pyspark.errors import PySparkException

    try:  # before pyspark's own check, which exits quietly when run by `python -c`
        import grpc  # noqa: F401
        import grpc_status  # noqa: F401
        import zstandard  # noqa: F401
        from google.rpc import error_details_pb2  # noqa: F401
    except ImportError as exc:
        raise MissingExtra("Spark Connect", "spark", f"'s client packages ({exc})") from None
    from pyspark.sql.connect.client.retries import DefaultPolicy

    host, port = address(url)
    try:
        socket.create_connection((host, port), timeout=REACH_TIMEOUT_S).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__.replace("Error", " error").lower()
        raise SparkConnectError(f"cannot reach the Spark Connect server at {host}:{port} "
                                f"(spark.remote {hidden_remote(url)}): {why}") from None
    spark = SparkSession.builder.remote(url).getOrCreate()
    spark.client.set_retry_policies([DefaultPolicy(max_retries=RETRIES)])
    # the client warns on stderr when it gives up; the run's error says so in one line
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]")
    try:  # the first call: an endpoint that is no Connect server fails here, not on a setting
        spark.version  # noqa: B018 - asks the server
    except Exception as exc:  # noqa: BLE001 - gRPC's own errors, pyspark's wrapping them
        raise SparkConnectError(f"the server at {host}:{port} (spark.remote {hidden_remote(url)}"
                                f") did not answer as a Spark Connect server ({_rpc_cause(exc)})"
                                ) from None
    for key, value in conf.items():
        if key.startswith("spark.sql."):
            try:
                spark.conf.set(key, value)
            except PySparkException as exc:  # its message quotes the value: not shown
                cause = first_line(exc).replace(f"'{value}'", "'<value>'").replace(
                    f'"{value}"', '"<value>"')
                raise SparkConnectError(f"spark.conf.{key}: the Spark Connect server refused "
                                        f"it ({cause})") from None
    log.info("Spark %s at %s through Spark Connect (%s)", spark.version,
             hidden_master(spark.conf.get("spark.master") or ""), hidden_remote(url))
    return spark


def _rpc_cause(exc: BaseException) -> str:
    """A failed gRPC call's status and details (its text starts with a line that says
    neither), else the error's first line."""
    text = str(exc)
    status = re.search(r"StatusCode\.(\w+)", text)
    details = re.search(r'details = "([^"\n]*)"', text)
    found = [m[1] for m in (status, details) if m is not None]
    return truncated(": ".join(found), 200) if found else first_line(exc)


def ship(value: Any, limit: int = SHIP_LIMIT) -> Shipped:
    """`value` for the tasks, carried in their pickled closures (read there as `.value`, as a
    broadcast variable is): small enough to go in every plan that uses it."""
    size = len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    if size > limit:
        raise SparkConnectError(
            f"the SG tables take {size / 2**20:.0f} MiB, more than Spark Connect carries in a "
            f"plan ({limit / 2**20:.0f} MiB, for the server's "
            "spark.connect.grpc.maxInboundMessageSize): lower tables.max_total_values, or run "
            "with spark.master instead of spark.remote")
    return Shipped(value)


_LOST = (r"StatusCode\.UNAVAILABLE|failed to connect to all addresses|Socket closed|GOAWAY|"
         r"SparkContext was shut down|on a stopped SparkContext")


@contextlib.contextmanager
def lost_server(url: str) -> Iterator[None]:
    """A Spark Connect server lost or stopped mid-run (after the client's retries) as one
    line; the advice for a session started here (its driver memory) does not apply."""
    try:
        yield
    except Exception as exc:
        from pyspark.errors.exceptions.connect import SparkConnectGrpcException

        if not url or not isinstance(exc, SparkConnectGrpcException):
            raise
        found = re.search(rf"(?:{_LOST})[^\n]*", str(exc))
        if found is None:
            raise
        raise SparkConnectError(f"the Spark Connect server at {hidden_remote(url)} stopped or "
                                f"was lost during the run ({found.group()[:160]})",
                                written=False, hint=": see the server's log") from None
