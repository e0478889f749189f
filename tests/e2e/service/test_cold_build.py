"""A cold start (an empty compile cache) builds in a forked child (service/processes/cold_build.py):
the port answers throughout, and a failure in the child stops the server as a failure in the
supervisor did, with the same message and status. test_memory.py checks that the serving
processes then carry no builder."""

from __future__ import annotations

import subprocess

import httpx2

from inferpool.harness.server import INFERPOOL, run_server


def test_the_standby_answers_while_the_child_builds(tmp_path):
    cache = tmp_path / "cache"
    with run_server(tmp_path, "--runtime.compile-cache-dir", str(cache), ready_timeout=180) as server:
        statuses = set()
        with httpx2.Client(base_url=server.url, timeout=10) as http:
            while (ready := http.get("/health/ready").status_code) != 200:
                statuses.add(ready)
                statuses.add(http.get("/health/live").status_code)
                assert server.process.poll() is None, server.output()
        log = server.output()
    assert statuses <= {200, 503}, statuses
    assert "building them in a child process" in log, log


def test_a_model_that_fails_in_the_child_stops_the_server_with_the_reason_and_status_2(tmp_path):
    """Its forward branches on its input: torch.export, and so the ONNX export, refuse it."""
    command = [INFERPOOL, "serve", "--port", "0", "--grpc-port", "0", "--model", "tests.support.fault_models:raising",
               "--runtime.backend", "onnxruntime", "--runtime.compile-cache-dir", str(tmp_path / "cache")]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert result.returncode == 2, result.stderr
    assert "building them in a child process" in result.stderr
    assert result.stderr.count("loading the models failed: cannot export model 'digits' to ONNX") == 1, result.stderr
    assert "use backend 'eager'" in result.stderr
    assert "Traceback" not in result.stderr
