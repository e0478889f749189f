"""The real thing: `inferpool serve` in a subprocess, spoken to over HTTP on 127.0.0.1."""

from __future__ import annotations

import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor

import httpx2
import numpy as np
import pytest

from inferpool.engine import BACKENDS
from inferpool.harness.server import INFERPOOL, run_server, wait_ready

SLOW_LOAD = "tests.support.slow_model:build"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with run_server(tmp_path_factory.mktemp("logs")) as running:
        wait_ready(running)
        yield running


def test_default_model_answers_like_eager(server, images, reference):
    probabilities, label = reference(images)
    with httpx2.Client(base_url=server.url) as http:
        one = http.post("/predict", json={"inputs": images[3].tolist()})
        batch = http.post("/predict", json={"inputs": images.tolist()})
    assert one.status_code == batch.status_code == 200
    assert one.json()["outputs"]["label"] == int(label[3])
    np.testing.assert_allclose(batch.json()["outputs"]["probabilities"], probabilities, rtol=1e-5, atol=1e-7)
    assert batch.json()["outputs"]["label"] == label.tolist()


def test_concurrent_clients_each_get_their_own_answer(server, images, reference):
    _, label = reference(images)

    def ask(i: int) -> int:
        with httpx2.Client(base_url=server.url) as http:
            response = http.post("/predict", json={"inputs": images[i].tolist()})
            response.raise_for_status()
            return int(response.json()["outputs"]["label"])

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(ask, [i % 16 for i in range(96)]))
    assert got == [int(label[i % 16]) for i in range(96)]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{oops", "not valid JSON"),
        (b'{"inputs": [[1, 2]]}', "input 'image' has shape [1, 2]"),
        (b'{"inputs": [[["x"]]]}', "must hold float32 values"),
    ],
)
def test_bad_input_is_a_4xx_json_error_and_the_server_keeps_serving(server, images, body, message):
    with httpx2.Client(base_url=server.url) as http:
        response = http.post("/predict", content=body, headers={"content-type": "application/json"})
        assert response.status_code == 400
        assert message in response.json()["error"]
        assert http.post("/predict", json={"inputs": images[0].tolist()}).status_code == 200
    assert server.process.poll() is None


def test_metrics_count_requests_by_status(server):
    with httpx2.Client(base_url=server.url) as http:
        http.post("/predict", content=b"{oops")
        text = http.get("/metrics").text
    assert 'inferpool_requests_total{route="/predict",status="400"}' in text
    assert 'inferpool_requests_total{route="/predict",status="200"}' in text


def test_ready_is_503_until_every_runtime_is_warm(tmp_path, images):
    with run_server(tmp_path, "--model", SLOW_LOAD) as loading:
        with httpx2.Client(base_url=loading.url) as http:
            assert http.get("/health/live").status_code == 200
            not_ready = http.get("/health/ready")
            assert not_ready.status_code == 503
            assert not_ready.headers["retry-after"] == "1"
            early = http.post("/predict", json={"inputs": images[0].tolist()})
            assert early.status_code == 503
            assert "not ready (loading)" in early.json()["error"]
        wait_ready(loading)
        with httpx2.Client(base_url=loading.url) as http:
            assert http.post("/predict", json={"inputs": images[0].tolist()}).status_code == 200


def test_invalid_config_exits_2_with_a_fix():
    result = subprocess.run(
        [INFERPOOL, "serve", "--runtime.backend", "nope"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert f"runtime.backend 'nope' is unknown; choose one of {sorted(BACKENDS)}" in result.stderr


def test_a_model_that_cannot_load_stops_the_server_with_the_reason():
    result = subprocess.run(
        [INFERPOOL, "serve", "--port", "0", "--model", "nonexistent.module:build"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    assert "loading the models failed: cannot import model factory 'nonexistent.module:build'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_port_in_use_is_one_line_and_exit_2():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([INFERPOOL, "serve", "--port", str(port)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}: [Errno 98] Address already in use" in result.stderr


def test_a_second_server_on_the_http_port_stops_at_once(tmp_path):
    """The listener has SO_REUSEPORT (for the drain's plug): a second server must still fail to
    start instead of joining the port's group and taking part of the first one's traffic."""
    with run_server(tmp_path, "--workers", "1") as first:
        port = first.url.rsplit(":", 1)[1]
        second = subprocess.run([INFERPOOL, "serve", "--port", port], capture_output=True, text=True, timeout=120)
        assert first.process.poll() is None
    assert second.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}: [Errno 98] Address already in use" in second.stderr


def test_impossible_thread_budget_is_refused_before_binding():
    result = subprocess.run(
        [INFERPOOL, "serve", "--runtime.num-runtimes", "64"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "lower num_runtimes or intra_op_threads" in result.stderr


def test_with_no_flags_it_measures_and_reports_its_backend_and_dispatch(server):
    config = httpx2.get(f"{server.url}/v2/models/digits/config").json()
    # The defaults: auto over the quick-starting backends, and dispatch from measured figures.
    tried = {row["backend"] for row in config["backend_selection"]["candidates"]}
    assert tried == {"eager", "static", "onnxruntime"}, config
    assert config["backend"] in tried
    assert config["dispatch"] in {"inline", "threads"}
    figures = config["dispatch_selection"]
    assert figures["call_us"] > 0, figures
    if figures["usable_cpus"] > 1:  # one process per CPU by default: one CPU each, nothing to hand off to
        assert figures["handoff_us"] > 0, figures
    assert figures["rule"], figures
    assert figures["reason"], figures
    log = server.output()
    assert f"backend={config['backend']} dispatch={config['dispatch']}" in log, log
