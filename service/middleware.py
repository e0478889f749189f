"""Per-request context as a pure ASGI middleware: request id, timing, request metrics.

Pure ASGI rather than ``BaseHTTPMiddleware``: no extra task or body copy per request.
"""

from __future__ import annotations

import itertools
import os
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.logs import request_id
from service.metrics import Metrics

STARTED = "inferpool.started"  # scope keys the /predict route reads and writes
INFERENCE = "inferpool.inference"
MAX_REQUEST_ID = 128


class Activity:
    """Requests being answered right now; the drain on SIGTERM waits for zero."""

    active = 0


class RequestContext:
    def __init__(self, app: ASGIApp, metrics: Metrics, activity: Activity) -> None:
        self.app = app
        self.metrics = metrics
        # Cheaper than a uuid4 per request and still unique across processes and restarts.
        self._ids = (f"{os.getpid():x}-{int(time.time()):x}-{n}" for n in itertools.count())
        self.activity = activity

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = scope[STARTED] = time.perf_counter()
        rid = _client_request_id(scope) or next(self._ids)
        request_id.set(rid)
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), (b"x-request-id", rid.encode())]
            await send(message)

        self.activity.active += 1  # only the event loop thread touches it
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            self.activity.active -= 1
            # The route template, never the raw path: raw paths would be unbounded labels.
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.observe_request(route, status, time.perf_counter() - started, scope.get(INFERENCE))


def _client_request_id(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            text = value.decode("latin-1")
            # Echoed into logs and headers: keep it short and printable.
            return text if 0 < len(text) <= MAX_REQUEST_ID and text.isprintable() else None
    return None
