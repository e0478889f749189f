"""A request whose client leaves before its answer is dropped, not run for nobody. Clients queue
requests on a slow model (500 ms a call, one runtime) over the real server's HTTP, the lane's
way (a small body) and the ASGI way (a body over 64 KiB), and close their connections: the
engine drops the queued ones unrun (``inferpool_abandoned_requests_total``), each counts 499,
the door is empty, and the next client is answered at once."""

from __future__ import annotations

import socket
import time

import httpx2
import numpy as np
import orjson
import pytest

from inferpool.harness.metrics import metric_total
from inferpool.harness.server import Server, run_server, wait_ready
from tests.support.slow_model import QUEUED_CALL_SECONDS

SERVED = (
    "--model", "tests.support.slow_model:queued_calls", "--runtime.backend", "eager",
    "--runtime.dispatch", "threads", "--runtime.num-runtimes", "1", "--runtime.max-batch-size", "1",
    "--runtime.lend-idle-cores", "off", "--runtime.warmup-iters", "1", "--workers", "1",
)  # fmt: skip
CLIENTS = 8
ONE = {"inputs": np.zeros((1, 8, 8)).tolist()}
SCRAPER = httpx2.Client()  # one keep-alive connection: a scrape well inside one model call


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with run_server(tmp_path_factory.mktemp("left"), *SERVED) as running, SCRAPER:
        wait_ready(running)
        yield running


def raw_predict(padding: int) -> bytes:
    """One sample's request; ``padding`` bytes of JSON whitespace make its body as long as wanted."""
    body = orjson.dumps(ONE) + b" " * padding
    head = b"POST /predict HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    return head % len(body) + body


def scrape(server: Server) -> str:
    return SCRAPER.get(server.url + "/metrics").text


def wait_for(server: Server, name: str, at_least: float, timeout: float = 10.0) -> str:
    """The metrics once ``name`` has reached ``at_least`` (the last scrape if it never does)."""
    stop = time.monotonic() + timeout
    while True:
        text = scrape(server)
        if metric_total(text, name) >= at_least or time.monotonic() > stop:
            return text
        time.sleep(0.01)


def status_count(text: str, status: str) -> float:
    return metric_total(text, "inferpool_requests_total", route="/predict", status=status)


@pytest.mark.parametrize("padding", [0, 600_000], ids=["lane", "asgi"])  # far over uvicorn's 64 KiB high-water mark
def test_requests_whose_clients_left_are_dropped_unrun(server, padding):
    before = scrape(server)
    host, port = server.url.removeprefix("http://").split(":")
    clients = [socket.create_connection((host, int(port)), timeout=5) for _ in range(CLIENTS)]
    for client in clients:
        client.sendall(raw_predict(padding))
    inside = wait_for(server, "inferpool_door_requests", CLIENTS)  # every body in, none answered yet
    assert metric_total(inside, "inferpool_door_requests") == CLIENTS
    for client in clients:
        client.close()
    # Without the drop they would all run, one after another: CLIENTS x 500 ms. The first was
    # running when they left (it runs to its end); on a slow machine a second may have started.
    dropped_before = metric_total(before, "inferpool_abandoned_requests_total")
    after = wait_for(server, "inferpool_abandoned_requests_total", dropped_before + CLIENTS - 2)
    dropped = metric_total(after, "inferpool_abandoned_requests_total") - dropped_before
    assert CLIENTS - 2 <= dropped <= CLIENTS - 1, after
    left = status_count(after, "499") - status_count(before, "499")
    assert CLIENTS - 1 <= left <= CLIENTS  # the first may have been answered before its client left
    assert status_count(after, "500") == 0
    assert "Traceback" not in server.log.read_text()
    started = time.monotonic()
    answered = httpx2.post(server.url + "/predict", json=ONE, timeout=10)
    assert answered.status_code == 200, answered.text
    assert time.monotonic() - started < QUEUED_CALL_SECONDS * (CLIENTS - 2)  # nothing left queued ahead of it
    assert metric_total(scrape(server), "inferpool_door_requests") == 0


LONG = (
    "--model", "tests.support.slow_model:long_calls", "--runtime.backend", "onnxruntime",
    "--runtime.dispatch", "threads", "--runtime.num-runtimes", "1", "--runtime.intra-op-threads", "1",
    "--runtime.max-batch-size", "1", "--runtime.lend-idle-cores", "off", "--runtime.warmup-iters", "1",
    "--workers", "1",
)  # fmt: skip
CHAIN = b'{"inputs": [[1, 1, 1, 1, 1, 1, 1, 1]]}'


@pytest.fixture(scope="module")
def long_server(tmp_path_factory):
    with run_server(tmp_path_factory.mktemp("long"), *LONG) as running:
        wait_ready(running)
        yield running


def test_a_running_call_whose_client_left_is_stopped(long_server):
    """On onnxruntime the call stops between two operators: the runtime takes the next request
    at once instead of after the rest of a call for nobody."""
    with httpx2.Client(base_url=long_server.url, timeout=10) as client:
        started = time.monotonic()
        assert client.post("/predict", content=CHAIN).status_code == 200
        call = time.monotonic() - started
        before = client.get("/metrics").text
        host, port = long_server.url.removeprefix("http://").split(":")
        leaving = socket.create_connection((host, int(port)), timeout=5)
        head = b"POST /predict HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
        leaving.sendall(head % len(CHAIN) + CHAIN)
        time.sleep(call / 6)  # well inside the call
        leaving.close()
        after = wait_for(long_server, "inferpool_stopped_calls_total", 1, timeout=call * 3)
        assert metric_total(after, "inferpool_stopped_calls_total") == 1, after
        left = metric_total(after, "inferpool_requests_total", route="/predict", status="499")
        assert left - metric_total(before, "inferpool_requests_total", route="/predict", status="499") == 1
        answered = client.post("/predict", content=CHAIN)
        assert answered.status_code == 200, answered.text
        assert answered.json()["outputs"]["y"] == [[1.0] * 4]
        assert metric_total(client.get("/metrics").text, "inferpool_runtimes_busy") == 0
    assert "Traceback" not in long_server.log.read_text()
