"""The lane (service/http/lane.py): plain ``/predict`` requests answered from the HTTP parser's
callbacks, without ASGI. Raw HTTP bytes go through the server's real protocol class on an
in-memory transport; the same request sent chunked goes the ASGI way, and both answers must be
the same bytes but for the date, the request id and the timings."""

from __future__ import annotations

import asyncio
import gc
import gzip
import re
from collections.abc import Iterator

import numpy as np
import orjson
import pytest
import uvicorn
from fastapi.testclient import TestClient
from uvicorn.server import ServerState

from inferpool.harness.payloads import Payload, digits_v2_binary, digits_v2_json, v2_request
from inferpool.harness.transport import MemoryTransport
from inferpool.service.http import lane
from inferpool.service.http.fastpath import InferPoolApp
from inferpool.service.http.protocol import guarded_protocol
from inferpool.service.http.routes import v2 as v2_routes
from inferpool.service.v2.codec import InferRequest, parse_request
from tests.integration.service.conftest import app_client, metric_total

SAMPLE = orjson.dumps({"inputs": np.zeros((1, 8, 8)).tolist()})
KEY = "lane-key"
VOLATILE = re.compile(rb"^(date|x-request-id|server-timing): .*$", re.MULTILINE)


def exchange(app: InferPoolApp, *parts: bytes, answers: int | None = None) -> tuple[bytes, bool]:
    """Feed one connection these reads (each in its own loop wake-up), then wait (up to 5 s) for
    ``answers`` answers (default: one a request sent): what it wrote back, and whether the server
    closed it."""
    expected = sum(part.count(b"HTTP/1.") for part in parts) if answers is None else answers

    async def run() -> tuple[bytes, bool]:
        config = uvicorn.Config(app, lifespan="off", log_config=None)
        config.load()
        state = ServerState()
        state.default_headers = [(b"date", b"Thu, 03 Dec 2026 00:00:00 GMT"), (b"server", b"uvicorn")]
        protocol = guarded_protocol(10.0, 100)(config=config, server_state=state, app_state={})  # type: ignore[call-arg]
        transport = MemoryTransport()
        transport.protocol = protocol
        protocol.connection_made(transport)
        for part in parts:
            protocol.data_received(part)
            for _ in range(20):  # the lane's callback, or the ASGI task through its awaits
                await asyncio.sleep(0)
        waited = 0.0
        while transport.written.count(b"HTTP/1.1 ") < expected and waited < 5.0:
            await asyncio.sleep(0.002)  # a worker thread's answer comes back through the loop
            waited += 0.002
        for _ in range(50):
            await asyncio.sleep(0)
        closed = transport.closed  # by the server
        if not closed:
            transport.close()
            await asyncio.sleep(0)
        return bytes(transport.written), closed

    return asyncio.run(run())


def post(path: str, body: bytes, *headers: str, chunked: bool = False) -> bytes:
    typed = any(header.lower().startswith("content-type:") for header in headers)
    head = [f"POST {path} HTTP/1.1", "host: test", *([] if typed else ["content-type: application/json"]), *headers]
    if chunked:
        head.append("transfer-encoding: chunked")
        payload = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    else:
        head.append(f"content-length: {len(body)}")
        payload = body
    return ("\r\n".join(head) + "\r\n\r\n").encode() + payload


def without_volatile(answer: bytes) -> bytes:
    return VOLATILE.sub(b"\\1: -", answer)


@pytest.fixture(scope="module")
def app(client: TestClient) -> InferPoolApp:
    app: InferPoolApp = client.app  # type: ignore[assignment]
    assert app.lane is not None
    return app


@pytest.fixture(autouse=True, params=["eager", "at the wake-up's end"])
def answered(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    # Both ways the lane answers: at once (a process with few connections), or in the one
    # callback that answers every request a wake-up completed.
    monkeypatch.setattr(lane, "EAGER_CONNECTIONS", 2 if request.param == "eager" else 0)


@pytest.fixture
def asgi_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # The app's ASGI entry raising proves an answer came from the lane.
    monkeypatch.setattr(InferPoolApp, "__call__", refuse_asgi)


async def refuse_asgi(self: InferPoolApp, scope: object, receive: object, send: object) -> None:
    raise AssertionError("the request went the ASGI way")


def payload(sent: Payload, path: str | None = None) -> tuple[str, bytes, tuple[str, ...]]:
    return path or sent.path, sent.body, tuple(f"{name}: {value}" for name, value in sent.headers)


V2_JSON = payload(digits_v2_json())


@pytest.mark.parametrize(
    ("path", "body", "headers", "status"),
    [
        ("/predict", SAMPLE, (), 200),
        ("/predict/digits", SAMPLE, (), 200),
        ("/predict", b"{oops", (), 400),
        ("/predict", b'{"inputs": [[1, 2]]}', (), 400),
        ("/predict/nope", SAMPLE, (), 404),
        (*V2_JSON, 200),
        (*payload(digits_v2_binary()), 200),
        (*payload(digits_v2_json(), "/v2/models/digits/versions/1/infer"), 200),
        (*payload(digits_v2_json(), "/v2/models/digits/versions/9/infer"), 404),
        ("/v2/models/digits/infer", b'{"inputs": []}', (), 400),
    ],
)
def test_the_lane_answers_the_same_bytes_as_the_asgi_path(app, path, body, headers, status):
    lane, _ = exchange(app, post(path, body, *headers, "x-request-id: same"))
    asgi, _ = exchange(app, post(path, body, *headers, "x-request-id: same", chunked=True))
    assert lane.startswith(b"HTTP/1.1 %d " % status)
    assert b"\r\nx-request-id: same\r\n" in lane
    assert (b"\r\nserver-timing: " in lane) is (status == 200)
    assert without_volatile(lane) == without_volatile(asgi)


def test_a_plain_predict_or_v2_infer_never_meets_asgi(app, asgi_refused):
    binary = payload(digits_v2_binary())
    answer, _ = exchange(app, post("/predict", SAMPLE), post("/predict/digits", SAMPLE), post(*V2_JSON[:2]))
    assert answer.count(b"HTTP/1.1 200 OK") == 3
    assert answer.count(b'"label":') == 2
    assert b'"outputs":[{"name":"probabilities"' in answer
    answer, _ = exchange(app, post(binary[0], binary[1], *binary[2]))
    assert answer.startswith(b"HTTP/1.1 200 OK")
    assert b"\r\ninference-header-content-length: " in answer


def test_an_answered_request_is_freed_at_once_not_left_to_the_garbage_collector(app):
    # A request in a reference cycle waits for a collector pass (every ~140 requests on the
    # lane, and a pass can take milliseconds): one connection's answers then stall now and then.
    # The connection's last request stays in its protocol (a cycle of the connection's own).
    sent = [
        post("/predict", SAMPLE, "x-request-id: a"),
        post(*V2_JSON[:2], "x-request-id: b"),
        post("/predict", b'{"inputs": "not a tensor"}', "x-request-id: refused"),
    ]
    gc.collect()
    gc.disable()
    try:
        answer, _ = exchange(app, *sent, post("/predict", SAMPLE, "x-request-id: last"))
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        cyclic = [item.rid for item in gc.garbage if isinstance(item, lane.LaneRequest)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert answer.count(b"HTTP/1.1 200 OK") == 3
    assert answer.count(b"HTTP/1.1 400 ") == 1
    assert [rid for rid in cyclic if rid != "last"] == []


def test_pipelined_requests_are_answered_in_order(app):
    # A lane request, an ASGI one (chunked) and a lane one again, in a single read.
    three = post("/predict", SAMPLE, "x-request-id: a") + post("/predict", b"{oops", "x-request-id: b", chunked=True)
    answer, _ = exchange(app, three + post("/predict", SAMPLE, "x-request-id: c"))
    ids = re.findall(rb"x-request-id: (\w)\r\n", answer)
    statuses = re.findall(rb"HTTP/1.1 (\d+)", answer)
    assert (ids, statuses) == ([b"a", b"b", b"c"], [b"200", b"400", b"200"])


def test_connection_close_and_http_1_0_close_after_the_answer(app):
    answer, closed = exchange(app, post("/predict", SAMPLE, "connection: close"))
    assert answer.startswith(b"HTTP/1.1 200")
    assert b"\r\nconnection: close\r\n" in answer
    assert closed
    old = post("/predict", SAMPLE).replace(b"HTTP/1.1", b"HTTP/1.0", 1)
    answer, closed = exchange(app, old)
    assert answer.startswith(b"HTTP/1.1 200")
    assert b"\r\nconnection: close\r\n" in answer
    assert closed


def test_a_draining_process_says_connection_close(app):
    app.state.activity.closing = True
    try:
        answer, closed = exchange(app, post("/predict", SAMPLE))
    finally:
        app.state.activity.closing = False
    assert answer.startswith(b"HTTP/1.1 200")
    assert b"\r\nconnection: close\r\n" in answer
    assert closed


def test_a_client_gone_before_its_body_is_counted_499_and_the_door_is_empty(app, client):
    before = metric_total(client.get("/metrics").text, "inferpool_requests_total", route="/predict", status="499")
    head = post("/predict", SAMPLE)[: -len(SAMPLE) // 2]  # half the body, then the connection ends
    answer, _ = exchange(app, head, answers=0)
    after = metric_total(client.get("/metrics").text, "inferpool_requests_total", route="/predict", status="499")
    assert answer == b""
    assert after == before + 1
    assert app.state.activity.active == 0


def test_requests_the_lane_leaves_alone_are_answered_the_asgi_way(app):
    # A compressed body, a query string, 100-continue: all still answered.
    compressed = post("/predict", gzip.compress(SAMPLE), "content-encoding: gzip")
    for raw in (compressed, post("/predict?x=1", SAMPLE), post("/predict", SAMPLE, "expect: 100-continue")):
        answer, _ = exchange(app, raw)
        assert b"HTTP/1.1 200 OK" in answer, answer[:200]


def test_a_wrong_key_is_refused_and_a_right_one_takes_the_lane(monkeypatch):
    monkeypatch.setenv("INFERPOOL_API_KEY", KEY)
    with app_client() as guarded:
        keyed: InferPoolApp = guarded.app  # type: ignore[assignment]
        refused, _ = exchange(keyed, post("/predict", SAMPLE, "x-api-key: wrong"))
        assert refused.startswith(b"HTTP/1.1 401")
        with monkeypatch.context() as patch:
            patch.setattr(InferPoolApp, "__call__", refuse_asgi)
            admitted, _ = exchange(keyed, post("/predict", SAMPLE, f"x-api-key: {KEY}"))
        assert admitted.startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize(
    ("path", "body", "label"),
    [
        ("/predict/digits", SAMPLE, "/predict/{name}"),
        ("/v2/models/digits/versions/1/infer", V2_JSON[1], "/v2/models/{name}/versions/{version}/infer"),
    ],
)
def test_the_lane_counts_its_requests_under_the_routes_template(app, client, path, body, label):
    def answered() -> float:
        return metric_total(client.get("/metrics").text, "inferpool_requests_total", route=label, status="200")

    before = answered()
    exchange(app, post(path, body))
    assert answered() == before + 1


def test_a_cors_request_goes_the_asgi_way_and_gets_its_cors_headers():
    with app_client("--cors-origins", '["https://app.example.com"]') as cors:
        keyed: InferPoolApp = cors.app  # type: ignore[assignment]
        answer, _ = exchange(keyed, post("/predict", SAMPLE, "origin: https://app.example.com"))
        plain, _ = exchange(keyed, post("/predict", SAMPLE))
    assert answer.startswith(b"HTTP/1.1 200")
    assert b"\r\naccess-control-allow-origin: https://app.example.com\r\n" in answer
    assert plain.startswith(b"HTTP/1.1 200")
    assert b"access-control-allow-origin" not in plain


def test_a_full_door_sheds_at_the_head_and_a_body_over_64_kib_goes_the_asgi_way(app):
    activity = app.state.activity
    held, activity.active = activity.active, activity.limit
    try:
        shed, _ = exchange(app, post("/predict", SAMPLE))
    finally:
        activity.active = held
    assert shed.startswith(b"HTTP/1.1 503")
    assert b"\r\nretry-after: 1\r\n" in shed
    large = orjson.dumps({"inputs": np.full((250, 1, 8, 8), 12.5).tolist()})
    assert len(large) > 64 * 1024
    answer, _ = exchange(app, post("/predict", large))
    assert answer.startswith(b"HTTP/1.1 413")  # the client fixture's --max-body-bytes 65536, as the ASGI path says


def test_a_model_on_worker_threads_is_answered_on_a_task_with_the_same_bytes(monkeypatch):
    with app_client("--runtime.dispatch", "threads") as threaded:
        on_threads: InferPoolApp = threaded.app  # type: ignore[assignment]
        assert not on_threads.state.host.serving().inline
        for path, body in (("/predict", SAMPLE), ("/predict", b"{oops"), V2_JSON[:2]):
            asgi, _ = exchange(on_threads, post(path, body, "x-request-id: same", chunked=True))
            with monkeypatch.context() as patch:
                patch.setattr(InferPoolApp, "__call__", refuse_asgi)
                lane, _ = exchange(on_threads, post(path, body, "x-request-id: same"))
            assert lane.startswith(b"HTTP/1.1 200" if body != b"{oops" else b"HTTP/1.1 400")
            assert without_volatile(lane) == without_volatile(asgi)
        assert on_threads.state.activity.active == 0


@pytest.fixture(scope="module")
def roomy() -> Iterator[InferPoolApp]:
    """An app whose body limit (1 MiB) lets bodies over 64 KiB onto the lane."""
    with app_client("--max-body-bytes", "1048576") as large:
        yield large.app  # type: ignore[misc]


def images_v2_binary(tag: str) -> Payload:
    """300 digits as v2 binary tensor data (~77 KB); the tag's length moves where the data starts."""
    images = np.random.default_rng(3).integers(0, 17, size=(300, 1, 8, 8)).astype(np.float32)
    return v2_request("digits", {"image": images}, ["label"], tag=tag)


def test_a_v2_binary_body_over_64_kib_is_read_in_pieces_into_an_aligned_buffer(roomy, monkeypatch):
    viewed: list[np.ndarray] = []
    real = parse_request

    def parse(*args: object) -> InferRequest:
        parsed = real(*args)  # type: ignore[arg-type]
        viewed.append(parsed.inputs["image"])
        return parsed

    monkeypatch.setattr(v2_routes, "parse_request", parse)
    for request_id in ("a", "ab", "abc", "abcd"):  # every alignment of the data within the body
        path, body, headers = payload(images_v2_binary(request_id))
        asgi, _ = exchange(roomy, post(path, body, *headers, "x-request-id: same", chunked=True))
        raw = post(path, body, *headers, "x-request-id: same")
        with monkeypatch.context() as patch:
            patch.setattr(InferPoolApp, "__call__", refuse_asgi)
            # As a socket hands it over: the head with a little of the body, then uneven pieces.
            lane, _ = exchange(roomy, raw[:700], raw[700:40_000], raw[40_000:70_001], raw[70_001:])
        assert lane.startswith(b"HTTP/1.1 200 OK")
        assert without_volatile(lane) == without_volatile(asgi)
        image = viewed[-1]
        assert image.ctypes.data % 64 == 0
        assert not image.flags.owndata  # a view of the buffer the body was read into, not a copy
        assert image.flags.writeable


def test_two_large_bodies_pipelined_in_one_read_are_both_answered(roomy):
    # The second is the lane's when the first is answered at once, else it waits the ASGI way.
    binary = payload(images_v2_binary("one"))
    large = orjson.dumps({"inputs": np.full((250, 1, 8, 8), 12.5).tolist()})
    assert len(large) > 64 * 1024
    answer, closed = exchange(roomy, post(*binary[:2], *binary[2], "x-request-id: a") + post("/predict", large))
    assert re.findall(rb"HTTP/1.1 (\d+)", answer) == [b"200", b"200"]
    assert not closed


def test_a_client_gone_halfway_through_a_large_body_is_counted_499(roomy):
    path, body, headers = payload(images_v2_binary("gone"))
    answer, _ = exchange(roomy, post(path, body, *headers)[: -len(body) // 2], answers=0)
    assert answer == b""
    assert roomy.state.activity.active == 0


def test_a_request_in_the_same_read_as_the_end_of_a_large_body_is_parsed_afresh(roomy):
    # The body's tail goes into its buffer past the parser; the next request's head follows it.
    path, body, headers = payload(images_v2_binary("tail"))
    first = post(path, body, *headers, "x-request-id: a")
    then = post("/predict", SAMPLE, "x-request-id: b") + post(path, body, *headers, "x-request-id: c")
    answer, closed = exchange(roomy, first[:1000], first[1000:50_000], first[50_000:] + then[:5000], then[5000:])
    assert re.findall(rb"x-request-id: (\w)\r\n", answer) == [b"a", b"b", b"c"]
    assert re.findall(rb"HTTP/1.1 (\d+)", answer) == [b"200", b"200", b"200"]
    assert not closed
