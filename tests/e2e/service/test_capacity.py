"""The door never refuses work within the advertised capacity (real server, closed-loop
keep-alive clients), refuses fast beyond it, and its count returns to zero."""

from __future__ import annotations

import httpx2
import pytest

from inferpool.harness.metrics import metric_total
from inferpool.harness.payloads import digits_json, digits_v2_binary, digits_v2_json
from inferpool.harness.server import run_server, wait_ready
from loadtest import openloop

RUNTIMES, MAX_QUEUE = 2, 6
CAPACITY = RUNTIMES + MAX_QUEUE
SECONDS = 20.0  # each load: long enough for keep-alive races to show


PAYLOADS = {"predict-json": digits_json, "v2-json": digits_v2_json, "v2-binary": digits_v2_binary}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # Eager on worker threads: a real queue forms behind the two runtimes, so the door is
    # exercised at its limit (an inline model answers too fast to fill it).
    args = ("--runtime.backend", "eager", "--runtime.dispatch", "threads", "--runtime.num-runtimes", str(RUNTIMES))
    with run_server(tmp_path_factory.mktemp("capacity"), *args, "--max-queue", str(MAX_QUEUE)) as running:
        wait_ready(running)
        yield running


def closed_loop(server, payload: str, clients: int, seconds: float) -> dict:
    config = openloop.RunConfig(server.url, PAYLOADS[payload](), duration=seconds, warmup=0.5, concurrency=clients)
    return openloop.run_one(config)


def test_the_config_route_and_the_gauge_advertise_the_capacity(server):
    assert httpx2.get(f"{server.url}/v2/models/digits/config").json()["capacity"] == CAPACITY
    assert metric_total(httpx2.get(f"{server.url}/metrics").text, "inferpool_door_capacity") == CAPACITY


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
@pytest.mark.parametrize("clients", [CAPACITY, CAPACITY - 2])
def test_clients_within_the_capacity_are_never_refused(server, payload, clients):
    run = closed_loop(server, payload, clients, SECONDS)
    assert run["ok"] > 0
    assert run["rejected_503"] == 0, run
    assert run["other_status"] == {}, run
    assert run["connection_errors"] == 0, run


def test_twice_the_capacity_is_refused_fast_and_the_count_returns_to_zero(server):
    with httpx2.Client(base_url=server.url) as http:
        before = metric_total(http.get("/metrics").text, "inferpool_rejections_total", reason="load_shed")
        run = closed_loop(server, "predict-json", 2 * CAPACITY, 4.0)
        text = http.get("/metrics").text
    assert run["ok"] > 0
    assert run["rejected_503"] > 0, run
    # The warm-up's refusals are counted by the server, not in the run.
    assert metric_total(text, "inferpool_rejections_total", reason="load_shed") - before >= run["rejected_503"]
    assert metric_total(text, "inferpool_door_requests") == 0  # the load stopped: nobody is inside
    # A refusal costs the door microseconds: clients that are refused come back at once, so
    # refusals outnumber answers by far when the models are the bottleneck.
    assert run["rejected_503"] > run["ok"], run
