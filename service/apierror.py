"""The service's own request errors (the engine has its own kinds in inferpool.engine.errors), and the
JSON every error answer carries, ``{"error": "..."}``, with the raw HTTP writer for the answers
no ASGI app sends.

Light on purpose (no FastAPI, no metrics): the connection guard (service/protocol.py) is
imported before prometheus-client may be (cli/serve.py).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import orjson


class ApiError(Exception):
    """A request problem found by the service itself (not JSON, too large, unknown model);
    ``reason`` is its fixed metrics label."""

    def __init__(self, status: int, message: str, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


def error_body(message: str, **extra: Any) -> bytes:
    return orjson.dumps({"error": message} | {k: v for k, v in extra.items() if v is not None})


def closing_head(status: HTTPStatus, length: int, *, retry_after: bool) -> bytes:
    """The raw HTTP/1.1 head of a JSON answer of ``length`` bytes after which the connection
    closes: for answers written where no ASGI app runs (before uvicorn parses a request:
    service/protocol.py; while no serving process listens: service/standby.py)."""
    extra = b"retry-after: 1\r\n" if retry_after else b""
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%sconnection: close\r\n\r\n"
            % (status, status.phrase.encode(), length, extra))  # fmt: skip


def closing_error(status: HTTPStatus, message: str, *, retry_after: bool = False) -> bytes:
    """A whole raw error answer, head and ``error_body``, for where ``closing_head`` is used."""
    body = error_body(message)
    return closing_head(status, len(body), retry_after=retry_after) + body
