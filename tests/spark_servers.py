"""Real Spark servers for the tests, started from the pyspark install on 127.0.0.1 at free
ports: a standalone Master and Worker (`spark-class`), and a Spark Connect server.

Readiness is polled under a deadline (a port that accepts, the master's JSON listing the
worker); `stop` ends each JVM by its own pid (SIGTERM, then SIGKILL), also when a test fails.
Their Python workers run this interpreter with this checkout first on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from s3_server import free_port

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 180.0  # JVM start-up on a loaded 2-core machine


def spark_bin(name: str) -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / name)


def spark_env(**extra: str) -> dict[str, str]:
    """The environment of the servers and of spark-submit: this Python and this checkout."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON":
            sys.executable, "PYTHONPATH": path, "SPARK_LOCAL_IP": "127.0.0.1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            **extra}


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def wait_until(ready, procs: list[Server], what: str, timeout: float = START_TIMEOUT_S) -> None:
    """Poll `ready()` until true; fail early (with the log's tail) if a JVM exits."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while not ready():
        for proc in procs:
            proc.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout:.0f} s")
        time.sleep(delay)
        delay = min(delay * 1.5, 1.0)


class Server:
    """One JVM, its output in `log`."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str]):
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         stdin=subprocess.DEVNULL)

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.proc.args[:3]} exited with {self.proc.returncode}:\n{tail}")

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)


def _executor_options(env: dict[str, str]) -> dict[str, str]:
    """The Worker's daemon JVM options (the tests' class archive, tests/conftest.py) for the
    executors it starts too: they inherit its environment, and the `java` launcher reads
    JDK_JAVA_OPTIONS (noting so on their stderr, which goes to their log in the work dir)."""
    options = env.get("SPARK_DAEMON_JAVA_OPTS")
    return {"JDK_JAVA_OPTIONS": options} if options and "JDK_JAVA_OPTIONS" not in env else {}


class StandaloneCluster:
    """A standalone Master and one Worker (`cores`, `memory`: 1 core, 1 GiB unless told) on
    127.0.0.1, web UIs on free ports."""

    def __init__(self, where: Path, cores: int = 1, memory: str = "1g"):
        self.where, self.cores, self.memory = where, cores, memory
        self.port, self.ui_port, self.worker_ui_port = free_port(), free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.work_dir = where / "worker-work"
        self.servers: list[Server] = []

    def start(self) -> StandaloneCluster:
        env = spark_env(SPARK_NO_DAEMONIZE="1")
        cls = "org.apache.spark.deploy"
        try:
            self.servers.append(Server(
                [spark_bin("spark-class"), f"{cls}.master.Master", "--host", "127.0.0.1",
                 "--port", str(self.port), "--webui-port", str(self.ui_port)],
                self.where / "master.log", env))
            wait_until(lambda: _accepts(self.port), self.servers, "Spark master")
            self.servers.append(Server(
                [spark_bin("spark-class"), f"{cls}.worker.Worker", "--host", "127.0.0.1",
                 "--cores", str(self.cores), "--memory", self.memory,
                 "--webui-port", str(self.worker_ui_port),
                 "--work-dir", str(self.work_dir), self.url],
                self.where / "worker.log", {**env, **_executor_options(env)}))
            wait_until(lambda: bool(self.state().get("aliveworkers")), self.servers,
                       "Spark worker registration")
        except BaseException:
            self.stop()
            raise
        return self

    def state(self) -> dict:
        """The master's JSON status (workers, running and completed applications)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/",
                                        timeout=5) as resp:
                return json.load(resp)
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            return {}

    def stop(self) -> None:
        for server in reversed(self.servers):
            server.stop()


class ConnectServer:
    """A Spark Connect server (local[2]) on 127.0.0.1 at a free port; `url` is sc://..."""

    def __init__(self, where: Path):
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.where = where
        self.server: Server | None = None

    def start(self) -> ConnectServer:
        self.server = Server(
            [spark_bin("spark-submit"), "--class",
             "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", "local[2]",
             "--conf", f"spark.connect.grpc.binding.port={self.port}",
             "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
             "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.memory=1g",
             "--conf", f"spark.local.dir={self.where}"],
            self.where / "connect.log", spark_env())
        try:
            wait_until(lambda: _accepts(self.port), [self.server], "Spark Connect server")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
