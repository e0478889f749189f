"""Answering with raw ASGI messages, for the hot routes (service/http/fastpath.py).

Starlette's ``Request``/``Response`` objects, FastAPI's dependency solving and the exception
middlewares' round trips are each a few microseconds a request; on a small model they add up
to more than the model (docs/BENCHMARKS.md). The hot routes build their two send messages
themselves, and turn errors into answers in place, from the one table in service/errors.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from starlette.types import Receive, Scope, Send

from inferpool.service.errors import ErrorAnswer, answer_for, unexpected
from inferpool.service.frontdoor import FrontDoor
from inferpool.service.http.codec import Disconnected
from inferpool.service.http.middleware import STARTED, header_map
from inferpool.service.http.protocol import ANSWERING, CLIENT_LEFT, ONE_WRITE
from inferpool.service.telemetry.metrics import Inference
from inferpool.service.telemetry.observe import INFERENCE

JSON = b"application/json"
BINARY = b"application/octet-stream"
RawHeaders = list[tuple[bytes, bytes]]


request_headers = header_map
"""The request's headers by lower-case name (as ASGI gives them); the first of repeats, as
Starlette's ``Headers.get``: the map the request context built (service/http/middleware.py)."""


async def send_answer(
    scope: Scope, send: Send, status: int, body: bytes, content_type: bytes, extra: RawHeaders
) -> None:
    """Head and body, in one write of the connection where the server allows (service/http/protocol.py)."""
    headers = [(b"content-type", content_type), (b"content-length", b"%d" % len(body)), *extra]
    one_write = scope.get(ONE_WRITE)  # None under another server (tests' in-process clients)
    if one_write is not None:
        one_write.hold()
    try:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    finally:
        if one_write is not None:
            one_write.flush()  # a no-op once the body joined the head; the head alone if it never came


async def send_error(scope: Scope, send: Send, answer: ErrorAnswer) -> None:
    """The same answer ``ErrorAnswer.response(path)`` gives, without building a Response."""
    await send_answer(scope, send, answer.status, answer.body(scope["path"]), JSON, error_headers(answer))


def error_headers(answer: ErrorAnswer) -> RawHeaders:
    """An error answer's own headers (Retry-After, Connection, WWW-Authenticate), as ASGI sends them."""
    return _encoded(answer.headers.items() if answer.headers else ())


def _encoded(headers: Iterable[tuple[str, str]]) -> RawHeaders:
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]


Answer = tuple[bytes, bytes, RawHeaders]
"""A 200's body, content type and extra headers."""


def timed(scope: Scope, inference: Inference) -> tuple[bytes, bytes]:
    """The ``Server-Timing`` header of an answered request; the scope keeps the phases for the
    middleware (the server's own overhead is end to end minus inference)."""
    scope[INFERENCE] = inference
    return server_timing(scope.get(STARTED), inference)


def server_timing(started: float | None, inference: Inference) -> tuple[bytes, bytes]:
    """The ``Server-Timing`` header of a request whose head was in at ``started`` (perf_counter;
    None: when its body began to arrive)."""
    received, _, encoding, _ = inference.marks or (0.0, 0.0, 0.0, 0.0)
    total = encoding + inference.encode_seconds - (received if started is None else started)
    return b"server-timing", inference.server_timing(total).encode()


class RawRoute:
    """A hot route's raw ASGI handler: ``answer`` decodes the request, hands it to the front
    door and encodes the 200; every exception becomes its JSON error here, and a client that
    left before its answer gets nothing (once its body is in, the server's protocol cancels the
    request: service/http/protocol.py)."""

    def __init__(self, door: FrontDoor) -> None:
        self.door = door
        self.metrics = door.metrics
        self.max_body_bytes = door.host.settings.max_body_bytes

    async def answer(self, scope: Scope, receive: Receive) -> Answer:
        raise NotImplementedError

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = scope[ANSWERING] = asyncio.current_task()
        try:
            try:
                body, content_type, extra = await self.answer(scope, receive)
            except Disconnected:
                return
            except Exception as exc:  # noqa: BLE001 -- unexpected() logs the traceback
                await send_error(scope, send, answer_for(exc, self.metrics) or unexpected(scope, self.metrics))
                return
            await send_answer(scope, send, 200, body, content_type, extra)
        except asyncio.CancelledError:
            # Ours, for a client that left: nobody to answer, nothing to log. Another cancel beside
            # it (a shutdown past its grace) still ends the task as it did.
            if not scope.get(CLIENT_LEFT) or task is None or task.uncancel() > 0:
                raise
