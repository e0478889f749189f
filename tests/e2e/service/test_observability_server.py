"""Observability against the real server: promtool lint, several processes, JSON logs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import numpy as np

from inferpool.harness.metrics import metric_total
from inferpool.harness.server import run_server, wait_ready
from tests.support.fault_models import POISON

PROMTOOL = shutil.which("promtool", path=str(Path(sys.executable).parent)) or shutil.which("promtool")


def test_promtool_accepts_the_metrics_output(tmp_path, images):
    assert PROMTOOL, "promtool is missing: `make test` extracts it from Debian's prometheus package"
    with run_server(tmp_path) as server:
        wait_ready(server)
        with httpx2.Client(base_url=server.url) as http:
            http.post("/predict", json={"inputs": images[0].tolist()})
            http.post("/predict", content=b"{oops")
            text = http.get("/metrics").text
    result = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""  # not even a warning
    assert result.stderr.strip() == ""


def test_two_worker_processes_report_aggregated_counts(tmp_path, images):
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "counter_stale.db").write_bytes(b"left by an earlier run")  # must be wiped
    with run_server(tmp_path, "--workers", "2", "--metrics-dir", str(metrics_dir)) as server:
        wait_ready(server)
        # Each process loads its own model, and the kernel hands a new connection to whichever
        # process accepts first (a busy or still-loading one accepts later): keep sending on
        # fresh connections until both processes have answered, counting the answers.
        pids: set[str] = set()
        answered = 0
        deadline = time.monotonic() + 60
        while (len(pids) < 2 or answered < 40) and time.monotonic() < deadline:
            response = httpx2.post(server.url + "/predict", json={"inputs": images[answered % 16].tolist()})
            if response.status_code == 503:  # that process is still loading its model
                continue
            assert response.status_code == 200, response.text
            answered += 1
            pids.add(response.headers["x-request-id"].split("-")[0])
        with httpx2.Client(base_url=server.url) as http:
            scrapes = [http.get("/metrics").text for _ in range(6)]
    assert len(pids) == 2, "both processes should have served requests"
    for text in scrapes:  # whichever process answers the scrape, it reports both
        assert metric_total(text, "inferpool_requests_total", route="/predict", status="200") == answered
        assert metric_total(text, "inferpool_inference_seconds_count") == answered
        assert metric_total(text, "inferpool_runtimes") == 2  # one runtime per process on 2 CPUs
    assert not (metrics_dir / "counter_stale.db").exists()


def test_json_logs_carry_the_request_id_and_the_traceback_once(tmp_path):
    with run_server(
        tmp_path, "--log-format", "json", "--model", "tests.support.fault_models:raising", "--runtime.backend", "eager"
    ) as server:
        wait_ready(server)
        poisoned = np.full((1, 8, 8), POISON).tolist()
        response = httpx2.post(server.url + "/predict", json={"inputs": poisoned}, headers={"X-Request-Id": "trace-me"})
        assert response.status_code == 500, server.output()
        assert "Traceback" not in response.text
        ok = httpx2.post(server.url + "/predict", json={"inputs": np.zeros((1, 8, 8)).tolist()})
        assert ok.status_code == 200
    lines = [json.loads(line) for line in server.output().splitlines() if line.startswith("{")]
    assert lines, server.output()
    traced = [line for line in lines if line["request_id"] == "trace-me"]
    failures = [line for line in traced if "exception" in line]
    assert len(failures) == 1, server.output()  # the traceback is logged once
    assert failures[0]["level"] == "error"
    assert "poisoned input" in failures[0]["exception"]
    assert any("effective config" in line["message"] for line in lines)
    assert any("intra_op_threads=" in line["message"] for line in lines)  # the thread budget
    # No per-request line at INFO: only startup, the one failure, and shutdown.
    assert not any(line["request_id"] not in ("-", "trace-me") for line in lines), server.output()
