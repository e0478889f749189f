"""Load shedding at the door of a real server: more requests inside the process than the models
hold get an immediate 503; probes are never shed. The middleware alone is checked in
tests/unit/service/test_shedding.py."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx2
import numpy as np
import orjson

from inferpool.harness.metrics import metric_total
from inferpool.harness.server import run_server, wait_ready

SAMPLE = np.zeros((1, 8, 8)).tolist()


def test_a_real_server_sheds_what_its_models_cannot_hold_and_keeps_answering_probes(tmp_path):
    # One 20 ms runtime and no queue: the engine holds one request; 8 clients send at once.
    model = ("--model", "tests.support.slow_model:slow_calls", "--runtime.backend", "eager")
    args = (*model, "--runtime.num-runtimes", "1", "--runtime.max-batch-size", "1", "--max-queue", "0")
    with run_server(tmp_path, *args) as server:
        wait_ready(server)

        def ask(_: int) -> tuple[int, str, str]:
            with httpx2.Client(base_url=server.url) as http:
                response = http.post("/predict", json={"inputs": SAMPLE})
                return response.status_code, response.headers.get("retry-after", ""), response.text

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(ask, range(48)))
            ready = httpx2.get(server.url + "/health/ready").status_code
        text = httpx2.get(server.url + "/metrics").text
    statuses = [status for status, _, _ in results]
    assert set(statuses) <= {200, 503}, statuses
    assert 200 in statuses
    refused = [(retry, body) for status, retry, body in results if status == 503]
    assert refused, statuses
    assert all(retry == "1" and orjson.loads(body)["error"] for retry, body in refused)
    assert ready == 200
    shed = metric_total(text, "inferpool_rejections_total", reason="load_shed")
    refused_by_engine = sum(
        metric_total(text, "inferpool_rejections_total", reason=reason) for reason in ("queue_full", "predicted_wait")
    )
    assert shed + refused_by_engine == len(refused)
