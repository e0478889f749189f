"""Per-request context as a pure ASGI middleware: the ASGI way's adapter to its ``Call``
(service/calls.py: request id, door count, timing, request metrics, access log and span, 499),
and load shedding at the door.

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

from inferpool.service.apierror import error_body_for
from inferpool.service.asked import PRIORITY_HEADER, asked_in
from inferpool.service.calls import HttpCall
from inferpool.service.frontdoor import Activity, request_ids, shed_message
from inferpool.service.http.protocol import CLIENT_LEFT
from inferpool.service.telemetry.metrics import Metrics
from inferpool.service.telemetry.observe import INFERENCE, Observer, Watch
from inferpool.service.telemetry.traffic import SHED

STARTED = "inferpool.started"  # scope keys the /predict route reads and writes (and INFERENCE)
HEADER_MAP = "inferpool.headers"  # scope key: header_map's, with the header list it was built from
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


class AsgiCall(HttpCall):
    """A request the ASGI way (service/calls.py): its receive and send as the app gets them,
    counting it in once its body is all here and out once its answer is, and its trace and
    access log when an ``Observer`` is on."""

    __slots__ = ("gone", "observer", "receive", "scope", "send", "status", "watch")

    def __init__(
        self, context: RequestContext, scope: Scope, receive: Receive, send: Send, started: float,
    ) -> None:  # fmt: skip
        HttpCall.__init__(self, context.activity, context.metrics, started, "unmatched")
        self.scope = scope
        self.receive = receive
        self.send = send
        self.observer = context.observer
        self.watch: Watch | None = None
        """Its bytes (and sampled bodies) for the observer; None when there is none."""
        self.status = 500
        """What its answer said (500 until it says)."""
        self.gone = False
        """The last message received said the client left."""

    async def counting_receive(self) -> Message:
        # Counted in once its body is all here, not at the door: a client that stalls halfway
        # through an upload must not hold a place (70 stalled uploads shut every other client out
        # when counted at the door). Only the event loop thread counts.
        message = await self.receive()
        if self.watch is not None:
            self.watch.received(message)
        kind = message["type"]
        self.gone = kind == "http.disconnect"
        if kind == "http.request" and not message.get("more_body", False):
            self.enter()
        return message

    async def send_with_id(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            headers = message["headers"] = [*message.get("headers", ()), (b"x-request-id", self.rid.encode())]
            if self.closes and all(name.lower() != b"connection" for name, _ in headers):
                headers.append(CLOSE)
        elif not message.get("more_body", False):
            self.answered()
        if self.watch is not None:
            self.watch.sent(message)
        await self.send(message)

    def ended(self) -> None:
        """The app returned or raised: its status (499 for a client that left before its answer
        was complete, or whose task was cancelled for leaving, even halfway through its answer)."""
        scope = self.scope
        if (self.gone and not self.was_answered) or CLIENT_LEFT in scope:
            self.disconnected = True
        self.label = getattr(scope.get("route"), "path", "unmatched")
        self.inference = scope.get(INFERENCE)
        self.finish(self.status)

    def _record(self, status: int, ended: float) -> None:
        HttpCall._record(self, status, ended)
        if self.observer is not None and self.watch is not None:
            self.observer.http(self.scope, self.watch, self.label, status, self.started, ended)


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
        call = AsgiCall(self, scope, receive, send, started)
        headers = header_map(scope)
        rid = call.identify(headers.get(b"x-request-id"), self._ids)
        level = self.activity.level_of(headers.get(PRIORITY_HEADER))
        limit = self.activity.full(level)
        path = scope["path"]
        observer = self.observer
        if limit is not None and not _never_shed(path):
            await self._shed(send, rid, limit, call.closes, path)
            self.metrics.observe_error("load_shed")
            if level:
                self.metrics.traffic.prioritised(level, SHED)
            call.label = "shed"
            if observer is not None:
                call.watch = observer.watch({})
            call.begin()
            call.finish(503)
            return
        if observer is not None:
            call.watch = observer.watch(scope)
        call.begin(asked_in(headers))
        try:
            await self.app(scope, receive if scope["method"] == "GET" else call.counting_receive, call.send_with_id)
        finally:
            call.ended()

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
