"""Requests whose bodies complete in one loop wake-up, on many connections, for an inline model: the
lane runs them as one engine call (service/inline_together.py, inferpool.engine.serving.inline_group)
and answers each with the bytes it gets alone -- a bad one its own 4xx, its neighbours their 200s --
each with its own request id, counted in and out of the door and in the metrics."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import numpy as np
import orjson
import pytest
import uvicorn
from uvicorn.server import ServerState

from inferpool.harness.payloads import digits_v2_json
from inferpool.harness.transport import MemoryTransport
from inferpool.service.http import lane
from inferpool.service.http.fastpath import InferPoolApp
from inferpool.service.http.protocol import guarded_protocol
from tests.integration.service.conftest import metric_total
from tests.integration.service.test_lane import app as app  # the module-scoped fixture, re-exported
from tests.integration.service.test_lane import post, without_volatile

V2 = digits_v2_json()
IMAGES = np.random.default_rng(3).integers(0, 17, size=(4, 1, 8, 8)).tolist()
REQUESTS = [
    post("/predict", orjson.dumps({"inputs": IMAGES[0]}), "x-request-id: p0"),
    post(V2.path, V2.body, *(f"{n}: {v}" for n, v in V2.headers), "x-request-id: v0"),
    post("/predict", b'{"inputs": [[1, 2]]}', "x-request-id: bad-shape"),
    post("/predict", orjson.dumps({"inputs": IMAGES[1:3]}), "x-request-id: p1"),
    post("/predict", b"{oops", "x-request-id: bad-json"),
    post("/predict/nope", orjson.dumps({"inputs": IMAGES[3]}), "x-request-id: no-model"),
    post("/predict/digits", orjson.dumps({"inputs": IMAGES[3]}), "x-request-id: p2"),
]


@pytest.fixture(autouse=True)
def _at_the_wake_ups_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lane, "EAGER_CONNECTIONS", 0)


def together(app: InferPoolApp, requests: list[bytes]) -> list[bytes]:
    """Each request on its own connection, all fed in one loop wake-up: each connection's answer."""

    async def run() -> list[bytes]:
        config = uvicorn.Config(app, lifespan="off", log_config=None)
        config.load()
        state = ServerState()
        state.default_headers = [(b"date", b"Thu, 03 Dec 2026 00:00:00 GMT"), (b"server", b"uvicorn")]
        opened = []
        for _ in requests:
            protocol = guarded_protocol(10.0, 100)(config=config, server_state=state, app_state={})  # type: ignore[call-arg]
            transport = MemoryTransport()
            transport.protocol = protocol
            protocol.connection_made(transport)
            opened.append((protocol, transport))
        for (protocol, _), request in zip(opened, requests, strict=True):
            protocol.data_received(request)
        for _ in range(20):
            await asyncio.sleep(0)
        for _, transport in opened:
            transport.close()
        await asyncio.sleep(0)
        return [bytes(transport.written) for _, transport in opened]

    return asyncio.run(run())


class Calls:
    def __init__(self, app: InferPoolApp, monkeypatch: pytest.MonkeyPatch) -> None:
        runtimes = app.state.host.serving().runtimes
        run = runtimes.run
        self.rows: list[int] = []

        def counted(arrays: Any) -> Any:
            self.rows.append(next(iter(arrays.values())).shape[0])
            return run(arrays)

        monkeypatch.setattr(runtimes, "run", counted)


def test_a_wake_ups_requests_run_as_one_call_and_each_gets_what_it_gets_alone(app, monkeypatch):
    assert app.state.host.serving().inline
    alone = [together(app, [request])[0] for request in REQUESTS]
    calls = Calls(app, monkeypatch)
    found = together(app, REQUESTS)
    assert calls.rows == [1 + 1 + 2 + 1]  # the four good ones' five samples, in one call
    statuses = [re.match(rb"HTTP/1.1 (\d+)", answer).group(1) for answer in found]  # type: ignore[union-attr]
    assert statuses == [b"200", b"200", b"400", b"200", b"400", b"404", b"200"]
    assert_as_alone(found, alone, REQUESTS)
    assert app.state.activity.active == 0


def assert_as_alone(found: list[bytes], alone: list[bytes], requests: list[bytes]) -> None:
    """Each answer is what its request got alone: the same head, its own request id, and the same
    body (a 200's numbers to float rounding: a row of a larger call)."""
    for answer, single, request in zip(found, alone, requests, strict=True):
        rid = re.search(rb"x-request-id: (\S+)", request).group(1)  # type: ignore[union-attr]
        assert b"\r\nx-request-id: %s\r\n" % rid in answer
        head, body = answer.split(b"\r\n\r\n", 1)
        want_head, want_body = single.split(b"\r\n\r\n", 1)
        assert without_volatile(head) == without_volatile(want_head)
        if head.startswith(b"HTTP/1.1 200"):
            got, want = orjson.loads(body), orjson.loads(want_body)
            np.testing.assert_allclose(np.asarray(_numbers(got)), np.asarray(_numbers(want)), rtol=1e-4, atol=1e-6)
        else:
            assert body == want_body


def test_the_metrics_count_each_request_and_the_call_once(app, client):
    def read() -> tuple[float, float, float]:
        text = client.get("/metrics").text
        return (
            metric_total(text, "inferpool_requests_total", route="/predict", status="200"),
            metric_total(text, "inferpool_batch_size_count"),
            metric_total(text, "inferpool_batch_size_sum"),
        )

    before = read()
    good = [REQUESTS[0], REQUESTS[3], REQUESTS[0]]
    together(app, good)
    after = read()
    assert after[0] - before[0] == 3
    assert after[1] - before[1] == 3  # observed per request, as a batched request's
    assert after[2] - before[2] == 3 * 4  # each rode in a call of 4 samples


def _numbers(value: object) -> list[float]:
    if isinstance(value, dict):
        return [n for key in sorted(value) for n in _numbers(value[key])]
    if isinstance(value, list):
        return [n for item in value for n in _numbers(item)]
    return [float(value)] if isinstance(value, int | float) and not isinstance(value, bool) else []
