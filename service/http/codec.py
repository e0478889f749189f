"""Request bodies in, response bodies out: orjson, with the limits checked before parsing.

Bodies sent with ``Content-Encoding: gzip`` or ``deflate`` (Triton's client sends them when
asked) are inflated as they arrive, and the size limit applies to what they inflate to, so a
small body that inflates without bound (a zip bomb) is refused after ``limit`` bytes of it.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import orjson
from fastapi import Response
from starlette.types import Receive

from inferpool.engine.errors import InvalidInput
from inferpool.service.apierror import ApiError
from inferpool.service.http.json_booleans import may_hold_boolean, mixes_booleans

_DUMP_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


class Disconnected(Exception):
    """The client went away before its body arrived: there is no one to answer."""


# Content-Encoding -> zlib's wbits for it. HTTP's "deflate" is the zlib format (RFC 9110 8.4.1.2).
WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
_LARGE = "body_too_large"


async def read_body(receive: Receive, declared: bytes | None, limit: int, encoding: bytes | None = None) -> bytearray:
    """The whole body, refusing (413) before buffering more than ``limit`` bytes; ``declared``
    is the request's Content-Length header and ``encoding`` its Content-Encoding, if any.

    Not FastAPI's ``max_body_size``: that answers 413 in plain text and signals through
    exceptions that cross every middleware, and clients here are promised JSON errors."""
    inflater = None if encoding is None else Inflater.of(encoding, limit)
    # bytes.isdigit() is ASCII only; a longer number than 19 digits is over any limit anyway.
    if declared is not None and declared.isdigit() and (len(declared) > 19 or int(declared) > limit):
        raise ApiError(413, f"request body of {declared.decode()} bytes exceeds the limit of {limit} bytes", _LARGE)
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
            raise ApiError(413, f"request body exceeds the limit of {limit} bytes", _LARGE)
        last = not message.get("more_body", False)
        if last and inflater is None and not chunks:  # a small body comes whole, in one message
            return bytearray(chunk)
        chunks.append(chunk if inflater is None else inflater.feed(chunk))
        if last:
            if inflater is not None:
                inflater.finish()
            return bytearray().join(chunks)


class Inflater:
    """One request body's decompression, never holding more than ``limit`` inflated bytes."""

    def __init__(self, name: str, wbits: int, limit: int) -> None:
        self.name = name
        self.wbits = wbits
        self.left = limit
        self.limit = limit
        self.stream = zlib.decompressobj(wbits)

    @classmethod
    def of(cls, encoding: bytes, limit: int) -> Inflater | None:
        """The inflater for a Content-Encoding header; None for identity; 415 for the rest."""
        names = [part.strip().lower() for part in encoding.decode("latin-1").split(",")]
        names = [name for name in names if name not in ("", "identity")]
        if not names:
            return None
        if len(names) > 1 or names[0] not in WBITS:
            shown = encoding.decode("latin-1")
            raise ApiError(
                415, f"Content-Encoding {shown!r} is not supported; send gzip, deflate or none", "unsupported_encoding"
            )
        return cls(names[0], WBITS[names[0]], limit)

    def feed(self, chunk: bytes) -> bytes:
        out = []
        while chunk:
            if self.stream.eof:  # gzip allows several members back to back
                self.stream = zlib.decompressobj(self.wbits)
            try:
                # One byte over what is left tells "exactly at the limit" from "over it".
                data = self.stream.decompress(chunk, self.left + 1)
            except zlib.error as exc:
                raise self._corrupt(str(exc)) from None
            if len(data) > self.left:
                raise ApiError(413, f"request body inflates to more than the limit of {self.limit} bytes", _LARGE)
            self.left -= len(data)
            out.append(data)
            chunk = self.stream.unconsumed_tail or self.stream.unused_data
        return b"".join(out)

    def finish(self) -> None:
        if not self.stream.eof:
            raise self._corrupt("the compressed data ends early")

    def _corrupt(self, why: str) -> ApiError:
        return ApiError(
            400, f"request body is not valid {self.name} data, as its Content-Encoding says: {why}", "invalid_input"
        )


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
    inputs = payload["inputs"]
    # service/http/json_booleans.py says why, and why only then; its first test inline, as most
    # bodies (numbers only) end there, without a call.
    if (b"r" in body or b"l" in body) and may_hold_boolean(body):
        _refuse_mixed_booleans(inputs)
    return inputs


def _refuse_mixed_booleans(inputs: object) -> None:
    named = inputs.items() if isinstance(inputs, dict) else [(None, inputs)]
    for name, value in named:
        if mixes_booleans(value):
            field = "'inputs'" if name is None else f"input '{name}'"
            raise InvalidInput(
                f"{field} mixes true/false with numbers; a tensor holds one kind: send numbers (0 and 1) or "
                "booleans only",
                input_name=name,
            )


def encode_json(content: Any) -> bytes:
    return orjson.dumps(content, default=_fallback, option=_DUMP_OPTIONS)


def json_response(content: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(encode_json(content), status_code=status, media_type="application/json", headers=headers)


def _fallback(value: object) -> object:
    # Non-contiguous views, unusual dtypes; and onnxruntime's int64 scalars, numpy.longlong, which
    # orjson does not take for numpy.int64 (the digits label, a call a request).
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")
