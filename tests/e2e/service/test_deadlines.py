"""Deadlines, admission by predicted wait and dynamic batching, over real HTTP."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx2
import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from inferpool.harness.metrics import metric_total
from inferpool.harness.server import run_server, wait_ready
from tests.support.slow_model import CALL_SECONDS

SAMPLE = np.zeros((1, 8, 8)).tolist()


def _one_runtime(tmp_path_factory, factory: str):  # type: ignore[no-untyped-def]
    # eager: an exported graph would not keep the model's time.sleep
    args = (
        "--model",
        f"tests.support.slow_model:{factory}",
        "--runtime.backend",
        "eager",
        "--runtime.num-runtimes",
        "1",
        "--runtime.max-batch-size",  # a request a call, as the queue these tests build assumes
        "1",
    )
    with run_server(tmp_path_factory.mktemp(factory), *args) as server:
        wait_ready(server)
        yield server


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    """A 20 ms model on one runtime: a queue builds up after one request."""
    yield from _one_runtime(tmp_path_factory, "slow_calls")


@pytest.fixture(scope="module")
def late(tmp_path_factory):
    """Fast on its start-up calls (floor 1 ms), 20 ms on an image whose first pixel is positive."""
    yield from _one_runtime(tmp_path_factory, "late_calls")


LATE_SAMPLE = np.pad(np.ones((1, 1, 1)), ((0, 0), (0, 7), (0, 7))).tolist()  # first pixel 1: a 20 ms call


def test_a_request_past_its_deadline_gets_504_and_the_server_keeps_serving(late):
    with httpx2.Client(base_url=late.url) as http:
        assert http.get("/v2/models/digits/config").json()["deadline_floor_ms"] == 1
        missed = http.post("/predict", json={"inputs": LATE_SAMPLE}, headers={"X-Request-Timeout-Ms": "5"})
        assert missed.status_code == 504
        assert "deadline" in missed.json()["error"]
        assert http.post("/predict", json={"inputs": SAMPLE}).status_code == 200
        assert metric_total(http.get("/metrics").text, "inferpool_rejections_total", reason="deadline") >= 1


def test_a_deadline_under_the_model_floor_is_a_400_before_admission(slow):
    """The slow model's calls at start-up took 20 ms or more: 5 ms can never be met."""
    with httpx2.Client(base_url=slow.url) as http:
        floor = http.get("/v2/models/digits/config").json()["deadline_floor_ms"]
        assert floor >= CALL_SECONDS * 1e3
        short = http.post("/predict", json={"inputs": SAMPLE}, headers={"X-Request-Timeout-Ms": "5"})
        assert short.status_code == 400
        assert short.json()["error"] == (
            f"X-Request-Timeout-Ms 5 is below this model's fastest measured call ({floor} ms); "
            f"send at least {floor} or omit it"
        )


@pytest.mark.parametrize("value", ["soon", "-5", "0", "inf", "0.5", "5e-324", "1e3"])
def test_a_bad_timeout_header_is_a_400(slow, value):
    response = httpx2.post(slow.url + "/predict", json={"inputs": SAMPLE}, headers={"X-Request-Timeout-Ms": value})
    assert response.status_code == 400
    assert "must be an unsigned integer of milliseconds" in response.json()["error"]


def test_admission_refuses_at_once_what_the_queue_would_make_late(slow):
    budget_ms = CALL_SECONDS * 1e3 * 3  # room for ~3 calls; 12 clients queue far more than that

    local = threading.local()  # one keep-alive client per thread: a new client costs ~0.25 s here
    clients: list[httpx2.Client] = []

    def ask(_: int) -> tuple[int, float, str]:
        if not hasattr(local, "http"):
            local.http = httpx2.Client(base_url=slow.url)
            clients.append(local.http)
        started = time.monotonic()
        response = local.http.post(
            "/predict", json={"inputs": SAMPLE}, headers={"X-Request-Timeout-Ms": str(round(budget_ms))}
        )
        return response.status_code, time.monotonic() - started, response.headers.get("retry-after", "")

    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(ask, range(24)))
    for client in clients:
        client.close()
    statuses = [status for status, _, _ in results]
    assert set(statuses) <= {200, 503, 504}
    assert 200 in statuses
    refused = [(elapsed, retry) for status, elapsed, retry in results if status == 503]
    assert refused, statuses
    # Refused up front, not after waiting out the deadline; and told when to come back.
    assert min(elapsed for elapsed, _ in refused) < budget_ms / 1e3
    assert all(retry.isdigit() for _, retry in refused)
    text = httpx2.get(slow.url + "/metrics").text
    assert metric_total(text, "inferpool_rejections_total", reason="predicted_wait") >= 1


def test_v2_timeout_parameter_in_microseconds(slow):
    client = triton.InferenceServerClient(slow.url.removeprefix("http://"))
    tensor = triton.InferInput("image", [1, 1, 8, 8], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 1, 8, 8), dtype=np.float32))
    assert client.infer("digits", [tensor], timeout=5_000_000).as_numpy("label").shape == (1,)
    with pytest.raises(InferenceServerException, match="fastest measured call") as info:
        client.infer("digits", [tensor], timeout=2_000)  # 2 ms < one 20 ms call: never met
    assert info.value.status() == "400"
    client.close()


def test_v2_timeout_parameter_missed_is_a_504(late):
    client = triton.InferenceServerClient(late.url.removeprefix("http://"))
    tensor = triton.InferInput("image", [1, 1, 8, 8], "FP32")
    tensor.set_data_from_numpy(np.array(LATE_SAMPLE, dtype=np.float32).reshape(1, 1, 8, 8))
    with pytest.raises(InferenceServerException, match="deadline") as info:
        client.infer("digits", [tensor], timeout=2_000)  # over the 1 ms floor, under this 20 ms call
    assert info.value.status() == "504"
    client.close()


def test_batching_combines_concurrent_requests(tmp_path, images, reference):
    # A generous delay: on a loaded 2-core machine the clients are slow to send, and the test is
    # about requests sharing calls, not about latency.
    # One process: the concurrent requests must meet in one batcher. Waits always ("on"): under
    # "auto" the batcher stops waiting once its waits stop filling batches (engine/executors/patience.py,
    # tested on its own), and on a slow machine eight threaded clients fill few.
    args = ("--runtime.max-batch-size", "8", "--runtime.max-queue-delay-us", "20000", "--workers", "1",
            "--runtime.wait-for-company", "on")  # fmt: skip
    with run_server(tmp_path, *args) as server:
        wait_ready(server)

        def ask(i: int) -> tuple[int, str]:
            response = httpx2.post(server.url + "/predict", json={"inputs": images[i % 16].tolist()})
            return int(response.json()["outputs"]["label"]), response.headers["server-timing"]

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(ask, range(64)))
        text = httpx2.get(server.url + "/metrics").text
    labels = reference(images)[1]
    assert [label for label, _ in results] == [int(labels[i % 16]) for i in range(64)]
    assert all("batch;dur=" in timing for _, timing in results)
    calls = metric_total(text, "inferpool_batch_size_count")
    samples = metric_total(text, "inferpool_batch_size_sum")
    assert samples / calls > 1.5, "requests should have shared model calls"
    assert metric_total(text, "inferpool_batch_formation_seconds_count") == 64
