"""Optional API-key auth: ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``.

A pure ASGI middleware in front of every route except the exempt ones (health and metrics
by default, so probes and scrapers need no secret). Keys are compared in constant time.
"""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from service.errors import error_response
from service.metrics import Metrics


class ApiKeyAuth:
    def __init__(self, app: ASGIApp, key: str, exempt: frozenset[str], metrics: Metrics) -> None:
        self.app = app
        self.key = key.encode()
        self.exempt = exempt
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt or self._authorised(scope):
            await self.app(scope, receive, send)
            return
        self.metrics.observe_error("auth")
        response = error_response(
            401,
            "missing or wrong API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
            {"WWW-Authenticate": "Bearer"},
        )
        await response(scope, receive, send)

    def _authorised(self, scope: Scope) -> bool:
        given = b""
        for name, value in scope["headers"]:
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                given = value[7:].strip()
            elif name == b"x-api-key":
                given = value.strip()
        return hmac.compare_digest(given, self.key)
