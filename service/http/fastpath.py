"""The hot routes in front of FastAPI: ``POST /predict[/{name}]`` and v2 infer.

They are declared as FastAPI routes so that OpenAPI, /docs and schemathesis see them as
before (their endpoint functions only document them), but a request to one never meets
FastAPI's per-request machinery: the app's ``__call__`` matches method and path against those
routes' own compiled patterns and hands the request to the route's raw ASGI handler, through
the same user middleware the app was given (request context and door, CORS, API key), built
from the same ``Middleware`` list in the same order. Left out: Starlette's
ServerErrorMiddleware and ExceptionMiddleware, FastAPI's telemetry, body-limit and exit-stack
layers, and ``ErrorBoundary``: the hot handlers answer every exception themselves, from
service/errors.py's table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from fastapi import FastAPI
from fastapi.routing import APIRoute, APIRouter
from starlette._utils import get_route_path
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send

from inferpool.service.errors import ErrorBoundary

if TYPE_CHECKING:
    from inferpool.service.http.lane import Lane

HANDLER = "inferpool.handler"  # scope key: the raw handler FastPath matched
Handlers = Mapping[Callable[..., Any], ASGIApp]
"""A hot route's endpoint function (documentation only) -> the raw ASGI handler answering it."""


def documentation_only(*_: object, **__: object) -> NoReturn:
    """What a hot route's endpoint does if FastAPI's router ever calls it: FastPath answers
    those routes before routing, so reaching one means the app was wired without it."""
    raise RuntimeError(
        "this route is answered by inferpool.service.http.fastpath.FastPath, which is not in front of the app"
    )


class FastPath:
    """Matches the hot routes and runs them through their own middleware stack."""

    def __init__(self, app: FastAPI, handlers: Handlers, routers: list[APIRouter]) -> None:
        self.routes = [
            (route, handlers[route.endpoint])
            for router in routers
            for route in router.routes
            if isinstance(route, APIRoute) and route.endpoint in handlers and "POST" in (route.methods or ())
        ]
        missing = set(handlers) - {route.endpoint for route, _ in self.routes}
        if missing:
            raise ValueError(f"hot handlers for endpoints with no POST route: {sorted(map(str, missing))}")
        # Each handler inside its own copy of the stack: the innermost layer calls it directly,
        # not through a look-up of what matched (one frame and one await less per request).
        self.stacks = {handler: _wrap(handler, app.user_middleware) for _, handler in self.routes}
        # A path with no parameters is found by one dict look-up instead of a regex per route, unless
        # a route listed before it would match it too (the regex loop then keeps the router's order).
        self.exact: dict[str, tuple[APIRoute, ASGIApp, dict[str, Any]]] = {
            route.path: (route, handler, {})
            for at, (route, handler) in enumerate(self.routes)
            if not route.param_convertors and not any(r.path_regex.match(route.path) for r, _ in self.routes[:at])
        }
        # A route without parameters matches its own path only, so the regex loop can leave out
        # those the dict answers.
        self.searched = [(route, handler) for route, handler in self.routes if route.path not in self.exact]

    def match(self, scope: Scope) -> ASGIApp | None:
        """The matched route's stack, with the scope filled as the router would fill it (route,
        path parameters); None when no hot route matches."""
        if scope["method"] != "POST":
            return None
        path = get_route_path(scope)
        found = self.exact.get(path) or self._search(path)
        if found is None:
            return None
        route, handler, params = found
        scope["route"] = route  # the request metrics' label is route.path, the template
        scope["endpoint"] = route.endpoint
        scope["path_params"] = params or {}  # a new one for the exact paths: a layer may add to it
        scope[HANDLER] = handler
        return self.stacks[handler]

    def _search(self, path: str) -> tuple[APIRoute, ASGIApp, dict[str, Any]] | None:
        for route, handler in self.searched:
            found = route.path_regex.match(path)
            if found is not None:
                convert = route.param_convertors
                return route, handler, {key: convert[key].convert(value) for key, value in found.groupdict().items()}
        return None


def _wrap(app: ASGIApp, middleware: list[Middleware]) -> ASGIApp:
    for cls, args, kwargs in reversed(middleware):
        if cls is not ErrorBoundary:
            app = cls(app, *args, **kwargs)
    return app


class InferPoolApp(FastAPI):
    """FastAPI with FastPath in front; ``hot_handlers`` and ``hot_routers`` are set on its
    state before the first request."""

    _fast: FastPath | None = None
    lane: Lane | None = None
    """Plain ``/predict`` and v2 infer requests answered without ASGI under InferPool's own protocol
    (service/http/lane.py); None when telemetry is on (its spans and logs are ASGI's)."""

    def build_fast_path(self) -> FastPath:
        """Built once the middleware list is final: at start-up (the app's lifespan), else at
        the first request (an app driven without its lifespan, as in-process test clients do)."""
        fast = self._fast = FastPath(self, self.state.hot_handlers, self.state.hot_routers)
        return fast

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            fast = self._fast
            if fast is None:
                fast = self.build_fast_path()
            stack = fast.match(scope)
            if stack is not None:
                scope["app"] = self
                await stack(scope, receive, send)
                return
        await super().__call__(scope, receive, send)
