"""The one place where errors become HTTP responses: ``{"error": "..."}`` JSON, always (in
OpenAI's shape under ``/v1/``: service/apierror.py).

Deliberate errors map by type to a status. Anything unexpected is logged once with its
traceback and answered with a generic 500 that leaks no internals.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inferpool.engine.errors import (
    DeadlineExceeded,
    EngineError,
    InvalidInput,
    ModelFailed,
    ModelLoadError,
    NotReady,
    Overloaded,
)
from inferpool.service.apierror import ApiError, error_body_for
from inferpool.service.telemetry.metrics import Metrics

log = logging.getLogger(__name__)


STATUS: dict[type[Exception], int] = {
    InvalidInput: 400,
    Overloaded: 503,
    NotReady: 503,
    ModelLoadError: 503,
    ModelFailed: 500,
    DeadlineExceeded: 504,
}

# Documented on every route that can produce them, so clients see the error shape.
ERROR_SCHEMA = {
    "type": "object",
    "properties": {"error": {"type": "string"}, "input": {"type": "string"}},
    "required": ["error"],
}


def documented_error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ERROR_SCHEMA}}}


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: documented_error("The request does not fit the protocol or the model's schema."),
    404: documented_error("No such model or version."),
    413: documented_error("The body exceeds max_body_bytes."),
    503: documented_error("Not ready, or too many requests are queued (see Retry-After)."),
    504: documented_error("The request's deadline passed (the v2 'timeout' parameter or request_timeout_ms)."),
}


@dataclass(frozen=True, slots=True)
class ErrorAnswer:
    """What a deliberate error answers: the FastAPI handlers and the hot routes' raw ASGI
    handlers (service/http/rawasgi.py) both build their responses from this one table."""

    status: int
    message: str
    headers: dict[str, str] | None = None
    input: str | None = None
    reason: str | None = None
    param: str | None = None

    def body(self, path: str) -> bytes:
        """The JSON, in the shape of the API ``path`` belongs to."""
        return error_body_for(path, self.status, self.message, reason=self.reason, input=self.input, param=self.param)

    def response(self, path: str = "") -> Response:
        return Response(self.body(path), status_code=self.status, media_type="application/json", headers=self.headers)


def answer_for(exc: Exception, metrics: Metrics) -> ErrorAnswer | None:
    """The answer to a deliberate error (counted under its reason), None for anything else."""
    if isinstance(exc, EngineError):
        metrics.observe_error(exc.reason)
        status = next((code for kind, code in STATUS.items() if isinstance(exc, kind)), 500)
        headers = None
        if status == 503:
            retry = exc.retry_after if isinstance(exc, Overloaded) else 1.0
            headers = {"Retry-After": str(max(1, round(retry)))}
            if isinstance(exc, NotReady):  # loading or draining: send the client to another replica
                headers["Connection"] = "close"
        return ErrorAnswer(status, str(exc), headers, getattr(exc, "input_name", None), exc.reason)
    if isinstance(exc, ApiError):
        metrics.observe_error(exc.reason)
        return ErrorAnswer(exc.status, str(exc), reason=exc.reason, param=exc.param)
    return None


def unexpected(scope: Scope, metrics: Metrics) -> ErrorAnswer:
    """Anything no handler claimed: logged once with its traceback (call it in the except
    block), answered with a 500 that leaks no internals."""
    log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
    metrics.observe_error("internal")
    return ErrorAnswer(500, "internal server error; the server log has the details", reason="internal")


def _metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


def _deliberate(request: Request, exc: Exception) -> Response:
    answer = answer_for(exc, _metrics(request))
    assert answer is not None, "registered only for EngineError and ApiError"
    return answer.response(request.url.path)


def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers) if exc.headers else None
    return ErrorAnswer(exc.status_code, str(exc.detail), headers).response(request.url.path)


def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err.get('loc', ()))}: {err.get('msg', 'invalid')}" for err in exc.errors()
    )
    return ErrorAnswer(422, f"invalid request: {problems}", reason="invalid_input").response(request.url.path)


def install_error_handlers(app: FastAPI, metrics: Metrics) -> None:
    handlers: dict[type[Exception], Callable[[Request, Exception], Response | Awaitable[Response]]] = {
        EngineError: _deliberate,
        ApiError: _deliberate,
        HTTPException: _http_error,
        RequestValidationError: _validation_error,
    }
    for kind, handler in handlers.items():
        app.add_exception_handler(kind, handler)
    app.add_middleware(ErrorBoundary, metrics=metrics)


class ErrorBoundary:
    """Catches what no handler claimed. Starlette's own 500 path re-raises to the server,
    which would log the traceback a second time and may answer in plain text."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:  # noqa: BLE001 -- unexpected() logs the traceback
            answer = unexpected(scope, self.metrics)
            if not started:
                await answer.response(scope.get("path", ""))(scope, receive, send)
