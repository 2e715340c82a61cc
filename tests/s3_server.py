"""A real S3 API for the tests: moto in server mode, a subprocess on 127.0.0.1 at a free port.

Readiness is polled (GET /moto-api/ until 200) under a deadline; `reset` wipes every bucket
between tests; `stop` kills the server's process group.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MotoServer:
    """One moto S3 server; `env()` and `storage_options()` are how a client reaches it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> MotoServer:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + timeout
        delay = 0.02
        while not self._ready():
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise RuntimeError(f"moto exited with {self.proc.returncode}: {err[-2000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"moto not ready after {timeout} s")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1) as resp:
                return resp.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def reset(self) -> None:
        """Wipe every bucket and object."""
        request = urllib.request.Request(self.endpoint + "/moto-api/reset", method="POST",
                                         data=b"")
        urllib.request.urlopen(request, timeout=10).read()

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout)

    def env(self) -> dict[str, str]:
        """The standard AWS environment variables that point a client at this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION,
                "AWS_DEFAULT_REGION": REGION, "AWS_ALLOW_HTTP": "true"}

    def storage_options(self) -> dict[str, str]:
        """The same, as polars/object_store storage options."""
        return {"aws_endpoint_url": self.endpoint, "aws_access_key_id": ACCESS_KEY,
                "aws_secret_access_key": SECRET_KEY, "aws_region": REGION,
                "aws_allow_http": "true"}

    def client(self):
        """A boto3 client, for the tests' own setup and inspection of buckets."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name=REGION)
