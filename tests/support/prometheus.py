"""A real Prometheus server for the tests: Debian's binary (``make test`` extracts it beside
promtool, see the Makefile), a temporary config scraping given targets, on a free 127.0.0.1 port,
with every wait bounded."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import yaml  # type: ignore[import-untyped]

from inferpool.harness.server import free_port


def prometheus_binary() -> str | None:
    return shutil.which("prometheus", path=str(Path(sys.executable).parent)) or shutil.which("prometheus")


@dataclass(frozen=True)
class Prometheus:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """``/api/v1/query``: the instant vector (or scalar as one sample); raises on a query error."""
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        answer = httpx2.get(self.url + "/api/v1/query", params=params, timeout=10).json()
        if answer["status"] != "success":
            raise ValueError(f"{expr}: {answer.get('errorType')}: {answer.get('error')}")
        data = answer["data"]
        return [{"metric": {}, "value": data["result"]}] if data["resultType"] == "scalar" else list(data["result"])

    def wait_for(self, expr: str, done: Any, timeout: float) -> list[dict[str, Any]]:
        """Query until ``done(result)`` is true; TimeoutError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if done(result):
                return result
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expr} never satisfied within {timeout:g}s: {result}\n{self.tail()}")
            time.sleep(0.5)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@contextmanager
def run_prometheus(
    workdir: Path, targets: Sequence[str], interval: str = "1s", timeout: float = 60
) -> Iterator[Prometheus]:
    binary = prometheus_binary()
    assert binary, "prometheus is missing: `make test` extracts it from Debian's prometheus package"
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "scrape_configs": [{"job_name": "inferpool", "static_configs": [{"targets": list(targets)}]}],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = workdir / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {process.returncode}:\n{server.tail()}")
            try:
                if httpx2.get(server.url + "/-/ready", timeout=2).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"prometheus not ready within {timeout:g}s:\n{server.tail()}")
            time.sleep(0.2)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
