"""Per-request context as a pure ASGI middleware: request id, timing, request metrics, and
load shedding at the door.

Pure ASGI rather than ``BaseHTTPMiddleware``: no extra task or body copy per request.

Load shedding: the engine's admission control only sees a request once its body has been read
and decoded. When the event loop itself is the bottleneck (a model so fast that parsing,
routing and encoding cost more than inference: the digits CNN), requests pile up *before* that
point, each one a task the loop must advance, and every request's latency grows with the pile
while the engine's queue looks empty: under overload it refused next to nothing while most
admitted answers missed their deadline (docs/BENCHMARKS.md, "Overload"). So the outermost
layer also bounds the requests inside the process to what the models hold (runtimes + max_queue
each), and answers the rest at once with a prebuilt 503: no routing, no body read.
"""

from __future__ import annotations

import itertools
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inferpool.engine.client import request_id
from inferpool.service.apierror import error_body_for
from inferpool.service.frontdoor import Activity, echoable_request_id, request_ids, shed_message
from inferpool.service.http.protocol import CLIENT_LEFT
from inferpool.service.telemetry.metrics import Metrics
from inferpool.service.telemetry.observe import INFERENCE, Observer

STARTED = "inferpool.started"  # scope keys the /predict route reads and writes (and INFERENCE)
HEADER_MAP = "inferpool.headers"  # scope key: header_map's, with the header list it was built from
CLIENT_CLOSED = 499  # as nginx logs a request whose client left before it was answered
NEVER_SHED = ("/health", "/v2/health", "/metrics")  # probes and scrapes must answer under overload
# One counter per process: the hot routes run their own instance of this middleware
# (service/http/fastpath.py), the lane its own generator (service/http/lane.py), and ids must
# stay unique across all.
SERIAL = itertools.count()
SHED_RESPONSE_HEADERS = [
    (b"content-type", b"application/json"),
    (b"retry-after", b"1"),
]
CLOSE = (b"connection", b"close")


def header_map(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers by (lower-case) name, the first of repeats as Starlette's
    ``Headers.get`` gives it. Built once per request and in C (the door's request id and the hot
    routes' own headers all read it), not a Python loop over the headers for each reader; built
    again if a layer replaced the scope's header list since."""
    headers = scope["headers"]
    cached = scope.get(HEADER_MAP)
    if cached is not None and cached[0] is headers:
        return cached[1]  # type: ignore[no-any-return]
    found = dict(reversed(headers if type(headers) is list else list(headers)))
    scope[HEADER_MAP] = (headers, found)
    return found


class RequestContext:
    def __init__(self, app: ASGIApp, metrics: Metrics, activity: Activity, observer: Observer | None = None) -> None:
        self.app = app
        self.metrics = metrics
        self._ids = request_ids(SERIAL)
        self.activity = activity
        self.observer = observer
        """Traces, access log, payload log (service/telemetry/observe.py); None when all are off."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = scope[STARTED] = time.perf_counter()
        given = header_map(scope).get(b"x-request-id")
        rid = (None if given is None else echoable_request_id(given)) or next(self._ids)
        limit = self.activity.full()
        path = scope["path"]
        if limit is not None and not _never_shed(path):
            await self._shed(send, rid, limit, self.activity.closing, path)
            self.metrics.observe_error("load_shed")
            ended = time.perf_counter()
            self.metrics.observe_request("shed", 503, ended - started, None)
            if self.observer is not None:
                request_id.set(rid)
                self.observer.http(scope, self.observer.watch({}), "shed", 503, started, ended)
            return
        request_id.set(rid)
        status = 500
        counted = answered = gone = False
        observer = self.observer
        watch = None if observer is None else observer.watch(scope)

        async def counting_receive() -> Message:
            # Counted in once its body is all here, not at the door: a client that stalls
            # halfway through an upload must not hold a place (70 stalled uploads shut every
            # other client out when counted at the door). Only the event loop thread counts.
            nonlocal counted, gone
            message = await receive()
            if watch is not None:
                watch.received(message)
            gone = message["type"] == "http.disconnect"
            if not counted and message["type"] == "http.request" and not message.get("more_body", False):
                counted = True
                self.activity.active += 1
            return message

        async def send_with_id(message: Message) -> None:
            nonlocal status, answered
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = message["headers"] = [*message.get("headers", ()), (b"x-request-id", rid.encode())]
                if self.activity.closing and all(name.lower() != b"connection" for name, _ in headers):
                    headers.append(CLOSE)
            elif not message.get("more_body", False) and not answered:
                # Counted out when its answer is complete, not when its task ends: the client
                # may already have sent its next request, and a task that has answered can
                # still be waiting for the loop.
                answered = True
                self.activity.active -= counted
            if watch is not None:
                watch.sent(message)
            await send(message)

        try:
            await self.app(scope, receive if scope["method"] == "GET" else counting_receive, send_with_id)
        finally:
            if not answered:
                self.activity.active -= counted
                if gone:
                    status = CLIENT_CLOSED  # nobody to answer: not a server error
            if CLIENT_LEFT in scope:  # cancelled for a client that left, even halfway through its answer
                status = CLIENT_CLOSED
            # The route template, never the raw path: raw paths would be unbounded labels.
            route = getattr(scope.get("route"), "path", "unmatched")
            ended = time.perf_counter()
            self.metrics.observe_request(route, status, ended - started, scope.get(INFERENCE))
            if observer is not None and watch is not None:
                observer.http(scope, watch, route, status, started, ended)

    @staticmethod
    async def _shed(send: Send, rid: str, limit: int, closing: bool, path: str) -> None:
        body = error_body_for(path, 503, shed_message(limit), reason="load_shed")
        headers = [*SHED_RESPONSE_HEADERS, (b"content-length", b"%d" % len(body)), (b"x-request-id", rid.encode())]
        if closing:
            headers.append(CLOSE)
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _never_shed(path: str) -> bool:
    return path.startswith(NEVER_SHED) or path.endswith("/ready")  # v2's per-model readiness too
