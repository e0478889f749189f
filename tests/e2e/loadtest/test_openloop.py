"""The load generator against loadtest.tiny_server (a trivial server that answers after a fixed
sleep), and one short scenario against the real InferPool server."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx2
import pytest

from inferpool.harness.payloads import digits_json
from inferpool.harness.server import REPO_ROOT, launch, python_module
from loadtest import openloop
from loadtest.run import run_scenario

SERVICE_MS = 20.0


@pytest.fixture(scope="module")
def sleepy() -> Iterator[str]:
    """A server answering every request 200 after SERVICE_MS (requests overlap)."""
    command = python_module("loadtest.tiny_server", "--sleep-ms", str(SERVICE_MS))
    with launch(command, name="tiny_server", ready_path="/", ready_answer=None, ready_timeout=20) as server:
        yield server.url


def _run(url: str, **options) -> dict:
    options = {"duration": 2.0, "warmup": 0.5, "drain": 5.0} | options
    return openloop.run_one(openloop.RunConfig(url, digits_json(), **options))


def test_open_loop_keeps_the_offered_rate_and_measures_from_intended_times(sleepy):
    run = _run(sleepy, rate=100)
    assert run["mode"] == "open"
    assert run["connections"] >= 4
    assert abs(run["achieved_rps"] - 100) <= 10, run
    assert abs(run["sent_rps"] - 100) <= 10, run
    assert run["ok"] == run["requests"] > 0
    assert run["connection_errors"] == run["rejected_503"] == run["unanswered"] == 0
    # Nothing can answer faster than the server's sleep: every latency is at least the service time.
    assert run["cdf_ms"][0] >= SERVICE_MS * 0.95
    assert run["latency_ms"]["p50"] >= SERVICE_MS * 0.95
    assert run["latency_from"] == "intended send time"
    for field in ("offered_rps", "sent_rps", "achieved_rps", "latency_ms", "send_lag_ms", "generator_cpu", "cdf_ms"):
        assert field in run
    for pct in ("p50", "p95", "p99", "max"):
        assert run["latency_ms"][pct] is not None
    json.dumps(run)  # the report is plain JSON


def test_open_loop_counts_queueing_that_a_closed_loop_would_hide(sleepy):
    # One connection, 20 ms per answer: capacity 50/s, offered 100/s. Each request waits for the
    # ones before it, and its latency from its intended time grows through the run.
    open_run = _run(sleepy, rate=100, connections=1, duration=1.5)
    closed_run = _run(sleepy, concurrency=1, duration=1.5)
    assert closed_run["latency_ms"]["p99"] < SERVICE_MS * 3
    assert 30 <= closed_run["achieved_rps"] <= 55
    assert open_run["achieved_rps"] <= 55
    assert open_run["latency_ms"]["p99"] > 10 * SERVICE_MS, open_run["latency_ms"]
    assert open_run["send_lag_ms"]["p99"] > 10 * SERVICE_MS  # the generator says where the time went


def test_closed_loop_concurrency(sleepy):
    run = _run(sleepy, concurrency=4)
    assert run["mode"] == "closed"
    assert run["connections"] == 4
    assert 120 <= run["achieved_rps"] <= 205, run  # 4 clients x at most 50/s
    assert SERVICE_MS * 0.95 <= run["latency_ms"]["p50"] < SERVICE_MS * 3


def test_results_written(sleepy, tmp_path):
    runs = [_run(sleepy, rate=50, duration=1.0), _run(sleepy, concurrency=2, duration=1.0)]
    written = openloop.write_results(runs, tmp_path, "test")
    assert json.loads((tmp_path / "runs.json").read_text())[1]["concurrency"] == 2
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert [p.name for p in written] == ["runs.json"]
    else:
        for name in ("latency_vs_throughput.png", "latency_cdf.png"):
            assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_scenario_against_the_real_server(tmp_path):
    scenario = {
        "name": "smoke",
        "server": {"args": []},
        "load": {"payload": "digits-v2-binary", "rates": [50], "duration": 1.5, "warmup": 0.5},
    }
    (run,) = run_scenario(scenario, tmp_path)
    assert run["ok"] == run["requests"] > 0, run
    assert abs(run["achieved_rps"] - 50) <= 5
    assert run["server_rss_mb"] > 50
    assert (tmp_path / "runs.json").exists()


def test_sigterm_stops_the_server_and_writes_the_finished_runs(tmp_path):
    scenario = tmp_path / "long.toml"
    scenario.write_text('name = "long"\n[load]\nconcurrency = [1, 1, 1, 1, 1, 1]\nduration = 1.0\nwarmup = 0.2\n')
    out = tmp_path / "out"
    runner = subprocess.Popen(
        [sys.executable, "-m", "loadtest.run", str(scenario), "--out", str(out)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while not list(out.glob("long-*.log")):  # the server's log, named after its port
        _still_running(runner, deadline)
        time.sleep(0.1)
    port = int(next(out.glob("long-*.log")).stem.rsplit("-", 1)[1])
    while True:  # ready, then past the first 1.2 s run
        _still_running(runner, deadline)
        try:
            if httpx2.get(f"http://127.0.0.1:{port}/health/ready", timeout=1).status_code == 200:
                break
        except httpx2.TransportError:
            pass
        time.sleep(0.1)
    time.sleep(2.5)
    runner.terminate()
    stdout, stderr = runner.communicate(timeout=60)
    assert runner.returncode == 130, stderr
    runs = json.loads((out / "runs.json").read_text())
    assert 1 <= len(runs) < 6
    assert all(run["interrupted"] and run["ok"] > 0 for run in runs)
    assert json.loads(stdout.splitlines()[-1]) == {"results": str(out), "interrupted": True, "runs": len(runs)}
    with pytest.raises(httpx2.TransportError):  # the server went with it
        httpx2.get(f"http://127.0.0.1:{port}/health/live", timeout=1)


def _still_running(runner: subprocess.Popen[str], deadline: float) -> None:
    assert runner.poll() is None, runner.communicate()
    assert time.monotonic() < deadline
