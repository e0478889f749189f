"""The OpenAPI description of OpenAI's embeddings API as this server serves it (service/http/routes/openai.py).

Before the models load the request body is the API's in general; once they have, ``describe``
narrows it to what the served text-embedding models take (their names, dimensions, batch and
token limits), so that what the spec accepts the server accepts (the fuzz test holds it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inferpool.engine.client import NOT_BLANK, TextEmbedding
from inferpool.service.http.openai_codec import ENCODINGS
from inferpool.service.http.openapi_schemas import Served

OPENAI_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string", "enum": ["invalid_request_error", "server_error"]},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}


def openai_error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": OPENAI_ERROR_SCHEMA}}}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_TEXT: dict[str, Any] = {"type": "string", "pattern": NOT_BLANK, "description": "A text to embed (not blank)."}
_NULLABLE_STRING: dict[str, Any] = {"type": ["string", "null"]}
EMBEDDINGS_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["input", "model"],
    "additionalProperties": False,
    "properties": {
        "input": {"oneOf": [_TEXT, {"type": "array", "minItems": 1, "items": _TEXT}]},
        "model": {"type": "string", "description": "A model GET /v1/models lists."},
        "encoding_format": {
            "enum": [*ENCODINGS, None],
            "default": "float",
            "description": "float: lists of numbers; base64: each embedding's little-endian float32 bytes.",
        },
        "dimensions": {
            "type": ["integer", "null"],
            "minimum": 1,
            "description": "Keep each embedding's first `dimensions` values, scaled back to unit length.",
        },
        "user": _NULLABLE_STRING | {"description": "Your end user's id: accepted, not used."},
        "prompt_name": _NULLABLE_STRING
        | {"description": "This server's extension: one of the model's named prompts, prefixed to every text."},
    },
}
EMBEDDINGS_REQUEST: dict[str, Any] = {
    "required": True,
    "content": {"application/json": {"schema": EMBEDDINGS_REQUEST_SCHEMA}},
}
_VECTOR: dict[str, Any] = {
    "oneOf": [
        {"type": "array", "minItems": 1, "items": {"type": "number"}},
        {"type": "string", "contentEncoding": "base64", "description": "Little-endian float32 values."},
    ]
}
EMBEDDINGS_ANSWER: dict[str, Any] = {
    "type": "object",
    "required": ["object", "data", "model", "usage"],
    "properties": {
        "object": {"const": "list"},
        "data": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["object", "index", "embedding"],
                "properties": {
                    "object": {"const": "embedding"},
                    "index": {"type": "integer", "minimum": 0},
                    "embedding": _VECTOR,
                },
            },
        },
        "model": {"type": "string"},
        "usage": {
            "type": "object",
            "required": ["prompt_tokens", "total_tokens"],
            "properties": {
                "prompt_tokens": {"type": "integer", "minimum": 0},
                "total_tokens": {"type": "integer", "minimum": 0},
            },
        },
    },
}
MODEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "object", "created", "owned_by"],
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "model"},
        "created": {"type": "integer"},
        "owned_by": {"type": "string"},
    },
}
MODEL_LIST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["object", "data"],
    "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": MODEL_SCHEMA}},
}
_NOT_READY = openai_error("Not ready, too many requests queued, or the queue ahead would make it late (Retry-After).")
EMBEDDINGS_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: _json(EMBEDDINGS_ANSWER, "One embedding per input, in order."),
    400: openai_error("The body does not fit the API, or an input or `dimensions` does not fit the model."),
    404: openai_error("No text-embedding model of that name is served (code model_not_found)."),
    413: openai_error("The body exceeds max_body_bytes."),
    503: _NOT_READY,
    504: openai_error("The request's deadline passed (X-Request-Timeout-Ms or request_timeout_ms)."),
}
MODELS_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: _json(MODEL_LIST_SCHEMA, "The text-embedding models served."),
    503: _NOT_READY,
}
MODEL_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: _json(MODEL_SCHEMA, "The model."),
    404: openai_error("No text-embedding model of that name is served (code model_not_found)."),
    503: _NOT_READY,
}


def embedders(models: list[Served]) -> list[tuple[Served, TextEmbedding]]:
    """The served models whose handler declares a text embedding."""
    found = [(m, m.handler.text_embedding if m.handler else None) for m in models]
    return [(m, declared) for m, declared in found if declared is not None]


def describe(spec: dict[str, Any], models: list[Served], timeout: Callable[[int], dict[str, Any]]) -> None:
    """The /v1 routes' parameters and body narrowed to the served text-embedding models. With
    several, each limit is the largest of theirs (one body schema serves them all); the route
    holds each model to its own. ``timeout`` makes the deadline header's parameter for a floor."""
    paths: dict[str, Any] = spec["paths"]
    for operation in (op for path, ops in paths.items() if path.startswith("/v1/") for op in ops.values()):
        operation["responses"].pop("422", None)  # nothing here is validated by FastAPI
    embeddings = paths.get("/v1/embeddings", {}).get("post")
    served = embedders(models)
    if embeddings is not None:
        floor = max(m.deadline_floor_ms for m in ([m for m, _ in served] or models))
        embeddings["parameters"] = [*embeddings.get("parameters", []), timeout(floor)]
    if not served:
        return  # the API's general body: every model name is a 404
    names = [m.name for m, _ in served]
    model_parameter = paths.get("/v1/models/{model}", {}).get("get", {}).get("parameters", [])
    for parameter in model_parameter:
        if parameter["name"] == "model":
            parameter["schema"] = {"type": "string", "enum": names}
    if embeddings is None:
        return
    body = _copy_body()
    properties = body["properties"]
    properties["model"] = {"type": "string", "enum": names}
    properties["dimensions"]["maximum"] = max(declared.dimensions for _, declared in served)
    prompts = sorted({name for _, declared in served for name, _ in declared.prompts})
    properties["prompt_name"] = {"enum": [*prompts, None], "description": properties["prompt_name"]["description"]}
    most = max(m.max_samples for m, _ in served)
    inputs = [_TEXT, {"type": "array", "minItems": 1, "maxItems": most, "items": _TEXT}]
    tokens = _tokens([declared for _, declared in served if declared.token_ids])
    if tokens is not None:
        inputs += [tokens, {"type": "array", "minItems": 1, "maxItems": most, "items": tokens}]
    properties["input"] = {"oneOf": inputs}
    embeddings["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}


def _tokens(declared: list[TextEmbedding]) -> dict[str, Any] | None:
    """One token-id list, as the models that take them do; None when none does."""
    if not declared:
        return None
    token: dict[str, Any] = {"type": "integer", "minimum": 0}
    if all(d.vocabulary is not None for d in declared):
        token["maximum"] = max(d.vocabulary or 0 for d in declared) - 1
    tokens: dict[str, Any] = {"type": "array", "minItems": 1, "items": token}
    if all(d.max_tokens is not None for d in declared):
        tokens["maxItems"] = max(d.max_tokens or 0 for d in declared)
    return tokens


def _copy_body() -> dict[str, Any]:
    schema = EMBEDDINGS_REQUEST_SCHEMA
    return schema | {"properties": {k: dict(v) for k, v in schema["properties"].items()}}
