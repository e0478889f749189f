"""Load shedding at the door, on the middleware alone: more requests inside the process than the
models hold get an immediate 503 before any routing or body reading; probes and scrapes are never
shed."""

from __future__ import annotations

import asyncio

import orjson
from starlette.types import Message, Receive, Scope, Send

from inferpool.harness.metrics import metric_total
from inferpool.service.frontdoor import Activity
from inferpool.service.http.middleware import RequestContext
from inferpool.service.telemetry.metrics import Metrics


def call(context: RequestContext, path: str) -> list[Message]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": []}
    asyncio.run(context(scope, receive, send))
    return sent


def test_over_the_limit_a_request_is_answered_503_without_reaching_the_app():
    reached: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    metrics, activity = Metrics(), Activity()
    context = RequestContext(app, metrics=metrics, activity=activity)
    assert call(context, "/predict")[0]["status"] == 200  # no limit while the models load
    activity.admit(3)  # a model that holds 3
    activity.active = 3  # and three requests already inside
    start, body = call(context, "/predict")
    assert reached == ["/predict"]
    assert start["status"] == 503
    headers = dict(start["headers"])
    assert headers[b"retry-after"] == b"1"
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"x-request-id"]
    assert int(headers[b"content-length"]) == len(body["body"])
    assert "3 requests are already in progress" in orjson.loads(body["body"])["error"]
    for probe in ("/health/ready", "/v2/health/live", "/metrics"):
        assert call(context, probe)[0]["status"] == 200
    activity.active = 2  # one of them answered: room at the door again
    assert call(context, "/predict")[0]["status"] == 200
    assert activity.active == 2  # every request that got in went out again
    text = metrics.render().decode()
    assert metric_total(text, "inferpool_rejections_total", reason="load_shed") == 1


def test_a_stalled_upload_holds_no_place_at_the_door():
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    activity = Activity()
    context = RequestContext(app, metrics=Metrics(), activity=activity)
    activity.admit(1)

    async def scenario() -> tuple[int, int, int]:
        rest = asyncio.Event()
        chunks = iter([{"type": "http.request", "body": b"{", "more_body": True}])

        async def stalled_receive() -> Message:
            chunk = next(chunks, None)
            if chunk is None:  # the client stops sending halfway through its body
                await rest.wait()
                chunk = {"type": "http.request", "body": b"}", "more_body": False}
            return chunk

        sent: list[Message] = []

        async def sink(message: Message) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/predict", "headers": []}
        stalled = asyncio.create_task(context(dict(scope), stalled_receive, sink))
        await asyncio.sleep(0.01)
        waiting = activity.active  # the stalled upload is not counted
        other = await asyncio.to_thread(call, context, "/predict")  # a complete request gets in
        rest.set()
        await stalled
        return waiting, other[0]["status"], sent[0]["status"]

    waiting, other, stalled = asyncio.run(scenario())
    assert waiting == 0
    assert other == 200
    assert stalled == 200
    assert activity.active == 0


def test_a_shed_openai_request_gets_the_apis_error_object():
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("shed before the app")

    activity = Activity()
    activity.admit(1)
    activity.active = 1
    start, body = call(RequestContext(app, metrics=Metrics(), activity=activity), "/v1/embeddings")
    assert start["status"] == 503
    error = orjson.loads(body["body"])["error"]
    assert (error["type"], error["code"], error["param"]) == ("server_error", "load_shed", None)
    assert "1 requests are already in progress" in error["message"]
