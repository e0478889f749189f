"""The service's own request errors (the engine has its own kinds in inferpool.engine.errors), and the
JSON every error answer carries: ``{"error": "..."}``, or on another API's route that API's own shape
(``ERROR_SHAPES``: OpenAI's and Infinity's ``{"error": {"message", "type", "param", "code"}}`` under
``/v1/`` and on ``/classify``, TEI's ``{"error", "error_type"}``, Cohere's ``{"message"}``); with the
raw HTTP writer for the answers no ASGI app sends.

Light on purpose (no FastAPI, no metrics): the connection guard (service/http/protocol.py) is
imported before prometheus-client may be (cli/serve.py).
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import orjson

OPENAI_PREFIX = "/v1/"
"""OpenAI's API (service/http/routes/openai.py): errors there answer in that API's shape."""
# OpenAI's own codes where it has one for the same problem; otherwise the metrics reason.
_OPENAI_CODES = {"unknown_model": "model_not_found", "auth": "invalid_api_key"}


class ApiError(Exception):
    """A request problem found by the service itself (not JSON, too large, unknown model);
    ``reason`` is its fixed metrics label, ``param`` the request field at fault, if one is."""

    def __init__(self, status: int, message: str, reason: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.param = param


def error_body(message: str, **extra: Any) -> bytes:
    return orjson.dumps({"error": message} | {k: v for k, v in extra.items() if v is not None})


def openai_error_body(status: int, message: str, reason: str | None = None, param: str | None = None) -> bytes:
    """OpenAI's error object: ``type`` from the status (the client's fault or the server's),
    ``code`` OpenAI's name for the problem when it has one, else the metrics reason."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    code = _OPENAI_CODES.get(reason, reason) if reason is not None else None
    return orjson.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})


def tei_error_body(status: int, message: str, reason: str | None = None, param: str | None = None) -> bytes:
    """Text Embeddings Inference's error object: the message and TEI's kind of error."""
    return orjson.dumps(
        {"error": message, "error_type": _TEI_TYPES.get(status, "Validation" if status < 500 else "Backend")}
    )


def cohere_error_body(status: int, message: str, reason: str | None = None, param: str | None = None) -> bytes:
    """Cohere's error object (its clients raise by status and keep the body)."""
    return orjson.dumps({"message": message})


# TEI's kinds by status; every other 4xx is "Validation", every other 5xx "Backend".
_TEI_TYPES = {503: "Overloaded", 504: "Backend"}
ErrorShape = Callable[[int, str, str | None, str | None], bytes]
"""(status, message, reason, param) -> an error answer's body in one API's shape."""
ERROR_SHAPES: dict[str, ErrorShape] = {
    "/embed": tei_error_body,
    "/rerank": tei_error_body,
    "/tokenize": tei_error_body,
    "/v2/rerank": cohere_error_body,
    "/classify": openai_error_body,  # Infinity's errors are OpenAI's objects (as under /v1/)
}
"""The routes of another API answering errors in its shape, by exact path (and OPENAI_PREFIX's)."""


def error_shape(path: str) -> ErrorShape | None:
    """The API shape of ``path``'s error answers; None: the service's own."""
    shape = ERROR_SHAPES.get(path)
    if shape is None and path.startswith(OPENAI_PREFIX):
        return openai_error_body
    return shape


def error_body_for(
    path: str,
    status: int,
    message: str,
    *,
    reason: str | None = None,
    input: str | None = None,
    param: str | None = None,
) -> bytes:
    """An error answer's body in the shape of the API ``path`` belongs to."""
    shape = error_shape(path)
    if shape is not None:
        return shape(status, message, reason, param)
    return error_body(message, input=input)


def closing_head(status: HTTPStatus, length: int, *, retry_after: bool) -> bytes:
    """The raw HTTP/1.1 head of a JSON answer of ``length`` bytes after which the connection
    closes: for answers written where no ASGI app runs (before uvicorn parses a request:
    service/http/protocol.py; while no serving process listens: service/processes/backlog_answers.py)."""
    extra = b"retry-after: 1\r\n" if retry_after else b""
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%sconnection: close\r\n\r\n"
            % (status, status.phrase.encode(), length, extra))  # fmt: skip


def closing_error(status: HTTPStatus, message: str, *, retry_after: bool = False) -> bytes:
    """A whole raw error answer, head and ``error_body``, for where ``closing_head`` is used."""
    body = error_body(message)
    return closing_head(status, len(body), retry_after=retry_after) + body
