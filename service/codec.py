"""Request bodies in, response bodies out: orjson, with the limits checked before parsing."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
from fastapi import Response
from starlette.types import Receive

from service.apierror import ApiError

_DUMP_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


class Disconnected(Exception):
    """The client went away before its body arrived: there is no one to answer."""


async def read_body(receive: Receive, declared: bytes | None, limit: int) -> bytearray:
    """The whole body, refusing (413) before buffering more than ``limit`` bytes; ``declared``
    is the request's Content-Length header, if any.

    Not FastAPI's ``max_body_size``: that answers 413 in plain text and signals through
    exceptions that cross every middleware, and clients here are promised JSON errors."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        refusal = f"request body of {declared.decode()} bytes exceeds the limit of {limit} bytes"
        raise ApiError(413, refusal, "body_too_large")
    # A bytearray costs the same single join as bytes, and numpy views of it are writable,
    # which lets torch take binary tensors from the body without a copy.
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"request body exceeds the limit of {limit} bytes", "body_too_large")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return bytearray().join(chunks)


def decode_inputs(body: bytes | bytearray) -> object:
    """``{"inputs": ...}`` -> the inputs; NaN/Infinity literals are not JSON and are refused."""
    if not body:
        raise ApiError(400, 'request body is empty; send JSON like {"inputs": [...]}', "invalid_json")
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}", "invalid_json") from None
    if not isinstance(payload, dict) or "inputs" not in payload:
        raise ApiError(400, 'request body must be a JSON object with an "inputs" field', "invalid_json")
    return payload["inputs"]


def encode_json(content: Any) -> bytes:
    return orjson.dumps(content, default=_fallback, option=_DUMP_OPTIONS)


def json_response(content: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(encode_json(content), status_code=status, media_type="application/json", headers=headers)


def _fallback(value: object) -> object:
    if isinstance(value, np.ndarray | np.generic):  # non-contiguous views, unusual dtypes
        return value.tolist()
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")
