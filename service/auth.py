"""Optional API-key auth: ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``.

``ApiKey`` is the rule, the one both front ends apply (HTTP headers here, gRPC metadata in
service/grpc/servicer.py), so that they can never disagree on which key opens what. Over HTTP
it is a pure ASGI middleware in front of every route except the exempt ones (health and metrics
by default, so probes and scrapers need no secret). Keys are compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Iterator
from typing import Any

from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from inferpool.service.errors import ErrorAnswer
from inferpool.service.frontdoor import Pairs
from inferpool.service.telemetry.metrics import Metrics

DOCS = frozenset({"/docs", "/docs/oauth2-redirect", "/openapi.json"})
# Either spelling: ASGI header names are bytes, gRPC metadata keys str (both lower case).
AUTHORIZATION = (b"authorization", "authorization")
X_API_KEY = (b"x-api-key", "x-api-key")
BEARER = b"bearer "
REFUSED = ErrorAnswer(
    401,
    "missing or wrong API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
    {"WWW-Authenticate": "Bearer"},
    reason="auth",
)


class ApiKey:
    """Who may call what: a path in ``exempt`` needs nothing, any other the key, sent as
    ``authorization: Bearer <key>`` or ``x-api-key: <key>``."""

    def __init__(self, key: str, exempt: Iterable[str]) -> None:
        self.key = key.encode()
        # The docs page and its spec hold no secret (routes, model names and shapes), and a browser
        # cannot send a key to load them; the page's Authorize button then sends the key with the
        # calls it makes (the spec declares the schemes: service/http/openapi.py).
        self.exempt = frozenset(exempt) | DOCS

    def admits(self, path: str | None, pairs: Pairs) -> bool:
        """Whether a call for ``path`` (None: one with no exempt twin) carrying these headers
        or metadata may go ahead."""
        # compare_digest: the time taken must not tell a caller how much of its guess was right.
        return path in self.exempt or hmac.compare_digest(presented_key(pairs), self.key)


def presented_key(pairs: Pairs) -> bytes:
    """The key a call carries (the last one sent; b"" for none). An ``authorization`` header
    of another scheme is no key."""
    given = b""
    for name, value in pairs:
        if name in AUTHORIZATION:
            raw = _bytes(value)
            if raw[: len(BEARER)].lower() == BEARER:
                given = raw[len(BEARER) :].strip()
        elif name in X_API_KEY:
            given = _bytes(value).strip()
    return given


def _bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value  # UTF-8, as the configured key


class ApiKeyAuth:
    def __init__(self, app: ASGIApp, key: str, exempt: frozenset[str], metrics: Metrics) -> None:
        self.app = app
        self.rule = ApiKey(key, exempt)
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.rule.admits(scope["path"], scope["headers"]):
            await self.app(scope, receive, send)
            return
        self.metrics.observe_error("auth")
        _label_route(scope)
        await REFUSED.response(scope["path"])(scope, receive, send)


def _label_route(scope: Scope) -> None:
    """Find the route a refused request was for: this runs before routing, and the request
    metrics label by ``scope["route"]`` (the hot routes have it already: service/http/fastpath.py),
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
