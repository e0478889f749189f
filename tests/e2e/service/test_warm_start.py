"""A serving process warms its hot routes before it says it is ready (service/http/warmup.py),
and nothing of that shows: a fresh server's metrics and access log hold exactly the requests
its clients sent."""

from __future__ import annotations

import json
import time

import httpx2

from inferpool.harness.metrics import metric_total
from inferpool.harness.payloads import digits_json, digits_v2_json
from inferpool.harness.server import run_server, wait_ready

PREDICT, INFER = "/predict", "/v2/models/{name}/infer"


def test_a_fresh_server_counts_only_the_requests_sent(tmp_path):
    predict, infer = digits_json(), digits_v2_json()
    with run_server(tmp_path, "--access-log", "--log-format", "json") as server:
        wait_ready(server)
        with httpx2.Client(base_url=server.url) as http:
            # Each on a new connection, so that both serving processes get some first requests.
            for payload in (predict, predict, predict, infer, infer):
                answer = httpx2.post(server.url + payload.path, content=payload.body, headers=dict(payload.headers))
                assert answer.status_code == 200, answer.text
            time.sleep(0.5)  # the last access line is written after its answer
            text = http.get("/metrics").text
        output = server.output()
    for route, sent in ((PREDICT, 3), (INFER, 2)):
        assert metric_total(text, "inferpool_requests_total", route=route) == sent
        assert metric_total(text, "inferpool_request_duration_seconds_count", route=route) == sent
    assert metric_total(text, "inferpool_inference_seconds_count", model="digits") == 5
    assert metric_total(text, "inferpool_decode_seconds_count", model="digits") == 5
    logged = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    routes = [line["route"] for line in logged if line.get("logger") == "inferpool.access"]
    assert sorted(r for r in routes if r in (PREDICT, INFER)) == [PREDICT] * 3 + [INFER] * 2
    assert output.count("warm requests answered: 2 in") == 2  # both processes warmed their two routes
    assert "warm request to" not in output  # and each was answered 200
