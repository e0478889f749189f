"""Request priorities on a real server: under a flood the lowest level is shed first (503 with
Retry-After) and the highest answered, counted by level; a priority that is no level is a 400,
over HTTP's header, v2's parameter and gRPC's."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx2
import numpy as np
import orjson
import pytest
import tritonclient.grpc as triton_grpc
from tritonclient.utils import InferenceServerException

from inferpool.harness.metrics import metric_total
from inferpool.harness.server import free_port, run_server, wait_ready

SAMPLE = orjson.dumps({"inputs": np.zeros((1, 8, 8)).tolist()})
V2_SAMPLE = {"inputs": [{"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": [0.0] * 64}]}
LEVELS = "inferpool_priority_requests_total"
WAVE = 8  # requests at once, per level


def test_a_flood_sheds_the_low_level_first(tmp_path):
    """One runtime at 500 ms a call and max_queue 8: the process holds 9 requests, the low level 5
    (9 less its half). A wave of low requests fills the low level's room and the rest of it is
    shed; a wave of high ones right after, while those 5 are still inside, is still admitted up
    to the whole capacity: the low level was refused first."""
    args = (
        "--model", "tests.support.slow_model:queued_calls", "--workers", "1", "--max-queue", "8",
        "--runtime.num-runtimes", "1", "--runtime.dispatch", "threads", "--runtime.backend", "eager",
        "--runtime.max-batch-size", "1", "--priority-levels", "2", "--default-priority", "1",
    )  # fmt: skip
    with run_server(tmp_path, *args) as server:
        wait_ready(server)

        def ask(level: int) -> tuple[int, str | None]:
            headers = {"X-Request-Priority": str(level)}
            answer = httpx2.post(server.url + "/predict", content=SAMPLE, headers=headers, timeout=60)
            return answer.status_code, answer.headers.get("retry-after")

        with ThreadPoolExecutor(2 * WAVE) as pool:
            low = [pool.submit(ask, 2) for _ in range(WAVE)]
            time.sleep(0.25)  # every low one in or shed; the first call (500 ms) still runs
            high = [pool.submit(ask, 1) for _ in range(WAVE)]
            answers = {2: [f.result() for f in low], 1: [f.result() for f in high]}
        metrics = httpx2.get(server.url + "/metrics", timeout=10).text
    ok = {level: sum(1 for status, _ in found if status == 200) for level, found in answers.items()}
    for found in answers.values():
        assert {status for status, _ in found} <= {200, 503}, found
        assert all(retry is not None for status, retry in found if status == 503), found
    assert ok[2] == 5, answers  # the low level's room, the other 3 shed
    assert ok[1] >= 4, answers  # the rest of the capacity went to the high level, after lows were refused
    for level in (1, 2):  # at the door or in the model's queue, every request is counted under its level
        assert metric_total(metrics, LEVELS, priority=str(level), outcome="answered") == ok[level]
        assert metric_total(metrics, LEVELS, priority=str(level), outcome="shed") == WAVE - ok[level]


def test_a_priority_that_is_no_level_is_a_400(tmp_path):
    grpc_port = free_port()
    args = ("--priority-levels", "3", "--default-priority", "2", "--workers", "1", "--grpc-port", str(grpc_port))
    with run_server(tmp_path, *args) as server:
        wait_ready(server)
        with httpx2.Client(base_url=server.url, timeout=30) as http:
            bad_header = http.post("/predict", content=SAMPLE, headers={"X-Request-Priority": "urgent"})
            too_low = http.post("/predict", content=SAMPLE, headers={"X-Request-Priority": "4"})
            good = http.post("/predict", content=SAMPLE, headers={"X-Request-Priority": "3"})
            bad_v2 = http.post("/v2/models/digits/infer", json={**V2_SAMPLE, "parameters": {"priority": "high"}})
            good_v2 = http.post("/v2/models/digits/infer", json={**V2_SAMPLE, "parameters": {"priority": 1}})
            metrics = http.get("/metrics").text
        client = triton_grpc.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        x = triton_grpc.InferInput("image", [1, 1, 8, 8], "FP32")
        x.set_data_from_numpy(np.zeros((1, 1, 8, 8), np.float32))
        assert client.infer("digits", [x], priority=1).as_numpy("label") is not None
        with pytest.raises(InferenceServerException, match="priority' 7 is not a level"):
            client.infer("digits", [x], priority=7)
        client.close()
    assert bad_header.status_code == 400
    assert "X-Request-Priority 'urgent' is not a whole number" in bad_header.json()["error"]
    assert "send 1 (the highest) to 3 (the lowest), or 0 for the default (2)" in bad_header.json()["error"]
    assert too_low.status_code == 400
    assert good.status_code == 200
    assert bad_v2.status_code == 400
    assert "parameter 'priority' must be a whole number; got 'high'" in bad_v2.json()["error"]
    assert good_v2.status_code == 200
    assert metric_total(metrics, LEVELS, priority="3", outcome="answered") == 1
    assert metric_total(metrics, LEVELS, priority="1", outcome="answered") == 1
    assert (
        metric_total(metrics, "inferpool_failures_total", reason="invalid_priority")
        + metric_total(metrics, "inferpool_rejections_total", reason="invalid_priority")
        == 3
    )
