"""Optional API-key auth: ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``.

A pure ASGI middleware in front of every route except the exempt ones (health and metrics
by default, so probes and scrapers need no secret). Keys are compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Iterator
from typing import Any

from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from service.errors import error_response
from service.metrics import Metrics

DOCS = frozenset({"/docs", "/docs/oauth2-redirect", "/openapi.json"})


class ApiKeyAuth:
    def __init__(self, app: ASGIApp, key: str, exempt: frozenset[str], metrics: Metrics) -> None:
        self.app = app
        self.key = key.encode()
        # The docs page and its spec hold no secret (routes, model names and shapes), and a browser
        # cannot send a key to load them; the page's Authorize button then sends the key with the
        # calls it makes (the spec declares the schemes: service/openapi.py).
        self.exempt = exempt | DOCS
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt or self._authorised(scope):
            await self.app(scope, receive, send)
            return
        self.metrics.observe_error("auth")
        _label_route(scope)
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


def _label_route(scope: Scope) -> None:
    """Find the route a refused request was for: this runs before routing, and the request
    metrics label by ``scope["route"]`` (the hot routes have it already: service/fastpath.py),
    so without it every 401 would count under "unmatched"."""
    if "route" in scope:
        return
    partial = None  # the path's route for another method (the router would answer 405)
    for route in _routes(getattr(scope.get("app"), "routes", ())):
        match, _ = route.matches(scope)
        if match is Match.FULL:
            scope["route"] = route
            return
        if match is Match.PARTIAL and partial is None:
            partial = route
    if partial is not None:
        scope["route"] = partial


def _routes(routes: Iterable[Any]) -> Iterator[Any]:
    """The app's routes, with included routers opened: FastAPI (0.16x) keeps each one as a
    single entry whose match does not say which of its routes matched."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is None:
            yield route
        else:
            yield from _routes(included.routes)
