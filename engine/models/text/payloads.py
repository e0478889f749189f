"""The texts a /predict or v2 request carries to a text model, checked: each a clear 400 when
it is not what the model takes.

/predict sends the JSON value of ``inputs``; v2 sends ``{name: array}`` with text as ``BYTES``
(an object array of ``bytes``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from inferpool.engine.client import NOT_BLANK
from inferpool.engine.errors import InvalidInput

TEXT_SCHEMA: dict[str, Any] = {"type": "string", "pattern": NOT_BLANK, "description": "A text (not blank)."}
TEXTS_SCHEMA: dict[str, Any] = {"oneOf": [TEXT_SCHEMA, {"type": "array", "minItems": 1, "items": TEXT_SCHEMA}]}
TEXT_REQUEST_SCHEMA: dict[str, Any] = {
    "oneOf": [
        TEXTS_SCHEMA,
        {"type": "object", "required": ["text"], "properties": {"text": TEXTS_SCHEMA}, "additionalProperties": False},
    ]
}
PAIRS_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["query", "texts"],
    "properties": {
        "query": TEXT_SCHEMA,
        "texts": {"type": "array", "minItems": 1, "items": TEXT_SCHEMA},
    },
    "additionalProperties": False,
}


def texts(payload: object) -> tuple[list[str], bool]:
    """The request's texts and whether it was one string: a string, a list of strings or
    ``{"text": ...}`` (v2: a ``BYTES`` input ``text``)."""
    value = payload
    if isinstance(payload, Mapping):
        if set(payload) != {"text"}:
            raise InvalidInput(
                f'send text as a string, a list of strings or {{"text": ...}}; got keys {sorted(payload)}'
            )
        value = payload["text"]
    if isinstance(value, str | bytes):
        return [text(value, None)], True
    return text_list(value, "text"), False


def text_list(value: object, name: str) -> list[str]:
    if isinstance(value, np.ndarray):
        value = value.reshape(-1).tolist()
    if not isinstance(value, list) or not value:
        raise InvalidInput(f"send {name} as a non-empty string or a non-empty list of strings", input_name=name)
    return [text(item, i, name) for i, item in enumerate(value)]


def text(value: object, index: int | None, name: str = "text") -> str:
    where = f"the {name}" if index is None else f"{name} {index}"
    if isinstance(value, bytes):
        try:
            value = value.decode()
        except UnicodeDecodeError:
            raise InvalidInput(f"{where} is not valid UTF-8", input_name=name) from None
    if not isinstance(value, str):
        raise InvalidInput(f"{where} must be a string, got {type(value).__name__}", input_name=name)
    if not value.strip():
        raise InvalidInput(f"{where} is empty; send some text", input_name=name)
    return value


def pairs(payload: object) -> tuple[str, list[str]]:
    """A cross-encoder's request: ``{"query": str, "texts": [str, ...]}`` (v2: ``BYTES`` inputs
    ``query``, one element, and ``text``)."""
    if not isinstance(payload, Mapping) or not (
        {"query", "texts"} == set(payload) or {"query", "text"} == set(payload)
    ):
        got = f"keys {sorted(payload)}" if isinstance(payload, Mapping) else type(payload).__name__
        raise InvalidInput(f'send {{"query": "...", "texts": ["...", ...]}}; got {got}')
    query = payload["query"]
    if isinstance(query, np.ndarray):
        if query.size != 1:
            raise InvalidInput(f"send one query, got {query.size}", input_name="query")
        query = query.reshape(-1)[0]
    return text(query, None, "query"), text_list(payload.get("texts", payload.get("text")), "texts")
