"""The service's own request errors (the engine has its own kinds in inferpool.engine.errors), and the
JSON every error answer carries: ``{"error": "..."}``, or under ``/v1/`` (OpenAI's API) that API's
``{"error": {"message", "type", "param", "code"}}``; with the raw HTTP writer for the answers no
ASGI app sends.

Light on purpose (no FastAPI, no metrics): the connection guard (service/http/protocol.py) is
imported before prometheus-client may be (cli/serve.py).
"""

from __future__ import annotations

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
    if path.startswith(OPENAI_PREFIX):
        return openai_error_body(status, message, reason, param)
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
