"""A real InferPool server in a subprocess on a free 127.0.0.1 port (tests and benchmarks)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
from prometheus_client.parser import text_string_to_metric_families

from service.bench_client import free_port as free_port  # re-exported: tests and procs use it

REPO_ROOT = Path(__file__).resolve().parent.parent
INFERPOOL = shutil.which("inferpool", path=str(Path(sys.executable).parent)) or "inferpool"


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def run_server(log_dir: Path, *args: str, ready_timeout: float = 60.0) -> Iterator[Server]:
    port = free_port()
    log = log_dir / f"server-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [INFERPOOL, "serve", "--host", "127.0.0.1", "--port", str(port), *args],
            stdout=sink,
            stderr=subprocess.STDOUT,
            # The repo root on the path lets tests serve their own fault-injecting models.
            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO_ROOT)},
        )
    server = Server(f"http://127.0.0.1:{port}", process, log)
    try:
        _wait_until_listening(server, ready_timeout)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def _wait_until_listening(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"server exited with {server.process.returncode}:\n{server.output()}")
        try:
            httpx2.get(server.url + "/health/live", timeout=1)
            return
        except httpx2.TransportError:
            time.sleep(0.05)
    raise TimeoutError(f"server did not start listening within {timeout}s:\n{server.output()}")


def wait_ready(server: Server, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if httpx2.get(server.url + "/health/ready", timeout=2).status_code == 200:
            return
        time.sleep(0.05)
    raise TimeoutError(f"server was not ready within {timeout}s:\n{server.output()}")


def metric_total(text: str, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``, in Prometheus text."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )
