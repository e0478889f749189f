"""A JSON request body read field by field, for the routes in other APIs' shapes (TEI's, Cohere's,
Infinity's: service/http/text_codec.py, rerank_codec.py).

Each refusal is an ``ApiError`` 400 naming the field at fault (``param``), which the error
boundary writes in the route's API shape (service/apierror.py). A null optional field counts as
absent, as clients built on an API's own models send them so. A text must not be blank as the
handlers judge it (Python's ``str.strip``; the spec's pattern is ``NOT_BLANK``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from inferpool.service.apierror import ApiError
from inferpool.service.v2.codec import whole_number

INVALID = "invalid_input"


def bad(message: str, param: str | None) -> ApiError:
    return ApiError(400, message, INVALID, param=param)


def json_object(body: bytes | bytearray, example: str) -> dict[str, Any]:
    """The body as a JSON object, or a 400 saying it is not one (``example``: what one looks like)."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad(f"request body is not valid JSON: {exc}", None) from None
    if not isinstance(payload, dict):
        raise bad(f"request body must be a JSON object like {example}", None)
    return payload


class BodyFields:
    """One request's JSON object; ``fields`` are the names its route takes (others are refused)."""

    def __init__(self, body: bytes | bytearray, fields: tuple[str, ...], example: str) -> None:
        payload = json_object(body, example)
        unknown = [name for name in payload if name not in fields]
        if unknown:
            raise bad(f"unknown field {unknown[0]!r}; this route takes {', '.join(fields)}", unknown[0])
        self.payload: Mapping[str, Any] = payload

    def given(self, name: str) -> bool:
        return self.payload.get(name) is not None

    def text(self, name: str) -> str:
        """A required, non-blank string."""
        if not self.given(name):
            raise bad(f"{name!r} is required: a non-blank string", name)
        return checked_text(self.payload[name], name, None)

    def name(self, name: str) -> str | None:
        """An optional string (a model's or a prompt's name), None when absent."""
        value = self.payload.get(name)
        if value is not None and not isinstance(value, str):
            raise bad(f"{name!r} must be a string; got {type(value).__name__}", name)
        return value

    def texts(self, name: str, *, one: bool) -> list[str]:
        """A required non-empty list of non-blank strings; ``one``: a single string too."""
        value = self.payload.get(name)
        if one and isinstance(value, str):
            return [checked_text(value, name, None)]
        shape = "a non-blank string or a non-empty list of them" if one else "a non-empty list of non-blank strings"
        if not isinstance(value, list) or not value:
            raise bad(f"{name!r} is required: {shape}", name)
        return [checked_text(item, name, index) for index, item in enumerate(value)]

    def flag(self, name: str, default: bool) -> bool:
        value = self.payload.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise bad(f"{name!r} must be true or false; got {orjson.dumps(value).decode()[:40]}", name)
        return value

    def count(self, name: str) -> int | None:
        """An optional positive integer."""
        value = self.payload.get(name)
        if value is None:
            return None
        number = whole_number(value)
        if number is None or number < 1:
            raise bad(f"{name!r} must be a positive integer; got {orjson.dumps(value).decode()[:40]}", name)
        return number

    def choice(self, name: str, allowed: tuple[str, ...]) -> str | None:
        value = self.payload.get(name)
        if value is not None and value not in allowed:
            raise bad(f"{name!r} must be one of {', '.join(map(repr, allowed))}; got {value!r}", name)
        return value


def checked_text(value: object, name: str, index: int | None) -> str:
    """``value`` as a non-blank string, or a 400 naming ``name`` (item ``index`` of it)."""
    where = repr(name) if index is None else f"{name!r} item {index}"
    if not isinstance(value, str):
        raise bad(f"{where} must be a string; got {type(value).__name__}", name)
    if not value.strip():
        raise bad(f"{where} is blank; send some text", name)
    return value
