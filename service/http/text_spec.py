"""The OpenAPI description of the text routes in other APIs' shapes (service/http/routes/text.py).

Before the models load each body is its API's in general; once they have, ``describe`` narrows
each route to the served models of its kind (their names, prompts, batch limits, deadline
floors), so that what the spec accepts the server accepts (the fuzz test holds it): ``model`` is
required where several models of the kind are served, and a route no served model does is left
out of the spec (the server answers it 400, naming the routes the models do serve).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inferpool.engine.client import NOT_BLANK
from inferpool.service.apierror import cohere_error_body, error_shape, openai_error_body, tei_error_body
from inferpool.service.errors import documented_error
from inferpool.service.http.openai_spec import OPENAI_ERROR_SCHEMA
from inferpool.service.http.openapi_schemas import Served
from inferpool.service.http.text_models import KINDS

_STRING: dict[str, Any] = {"type": "string"}
_ERROR_SCHEMAS: dict[Callable[..., bytes], dict[str, Any]] = {
    tei_error_body: {
        "type": "object",
        "required": ["error", "error_type"],
        "properties": {"error": _STRING, "error_type": _STRING},
    },
    cohere_error_body: {"type": "object", "required": ["message"], "properties": {"message": _STRING}},
    openai_error_body: OPENAI_ERROR_SCHEMA,
}


def error_response(path: str, description: str) -> dict[str, Any]:
    """An error answer as ``path``'s API shapes it (service/apierror.py, ``ERROR_SHAPES``)."""
    shape = error_shape(path)
    if shape is None:
        return documented_error(description)
    return {"description": description, "content": {"application/json": {"schema": _ERROR_SCHEMAS[shape]}}}


_TEXT: dict[str, Any] = {"type": "string", "pattern": NOT_BLANK, "description": "A text (not blank)."}
_FLAG: dict[str, Any] = {"type": ["boolean", "null"]}
_MODEL: dict[str, Any] = {"type": ["string", "null"], "description": "The model to use (text_models' rule)."}


def _texts(most: int | None = None) -> dict[str, Any]:
    texts: dict[str, Any] = {"type": "array", "minItems": 1, "items": _TEXT}
    return texts if most is None else texts | {"maxItems": most}


def _body(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": required, "additionalProperties": False, "properties": properties}


def _requests(most: int | None) -> dict[str, dict[str, Any]]:
    """Each route's body, its text lists at most ``most`` long (None: no limit said)."""
    one_or_many = {"oneOf": [_TEXT, _texts(most)]}
    document = {"oneOf": [_TEXT, _body(["text"], {"text": _TEXT})]}
    truncation = {"truncate": _FLAG, "truncation_direction": {"enum": ["Right", None]}}
    rerank = _body(
        ["query", "documents"],
        {
            "model": _MODEL,
            "query": _TEXT,
            "documents": _texts(most) | {"items": document},
            "top_n": {"type": ["integer", "null"], "minimum": 1},
            "return_documents": _FLAG,
            "raw_scores": _FLAG,
        },
    )
    classify = _body(["input"], {"model": _MODEL, "input": one_or_many, "raw_scores": _FLAG})
    return {
        "/embed": _body(
            ["inputs"],
            {"inputs": one_or_many, "normalize": _FLAG, "prompt_name": {"type": ["string", "null"]}, "model": _MODEL}
            | truncation,
        ),
        "/rerank": _body(
            ["query", "texts"],
            {"query": _TEXT, "texts": _texts(most), "raw_scores": _FLAG, "return_text": _FLAG, "model": _MODEL}
            | truncation,
        ),
        "/tokenize": _body(["inputs"], {"inputs": one_or_many, "add_special_tokens": _FLAG, "model": _MODEL}),
        "/v1/rerank": rerank,
        "/v2/rerank": rerank,
        "/classify": classify,
        "/v1/classify": classify,
    }


_NUMBER: dict[str, Any] = {"type": "number"}
_INDEX: dict[str, Any] = {"type": "integer", "minimum": 0}
_USAGE: dict[str, Any] = {
    "type": "object",
    "required": ["prompt_tokens", "total_tokens"],
    "properties": {"prompt_tokens": _INDEX, "total_tokens": _INDEX},
}
_RERANKED: dict[str, Any] = {
    "type": "object",
    "required": ["id", "results", "model", "usage"],
    "properties": {
        "id": _STRING,
        "object": {"const": "rerank"},
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["index", "relevance_score"],
                "properties": {
                    "index": _INDEX,
                    "relevance_score": _NUMBER,
                    "document": {"type": "object", "required": ["text"], "properties": {"text": _STRING}},
                },
            },
        },
        "model": _STRING,
        "usage": _USAGE,
    },
}
_TOKEN: dict[str, Any] = {
    "type": "object",
    "required": ["id", "text", "special", "start", "stop"],
    "properties": {
        "id": _INDEX,
        "text": _STRING,
        "special": {"type": "boolean"},
        "start": {"type": ["integer", "null"]},
        "stop": {"type": ["integer", "null"]},
    },
}
_LABELS: dict[str, Any] = {
    "type": "array",
    "items": {"type": "object", "required": ["label", "score"], "properties": {"label": _STRING, "score": _NUMBER}},
}
_CLASSIFIED: dict[str, Any] = {
    "type": "object",
    "required": ["object", "data", "model", "usage"],
    "properties": {
        "object": {"const": "classify"},
        "data": {"type": "array", "items": _LABELS},
        "model": _STRING,
        "usage": _USAGE,
        "id": _STRING,
        "created": {"type": "integer"},
    },
}
ANSWERS: dict[str, tuple[dict[str, Any], str]] = {
    "/embed": ({"type": "array", "items": {"type": "array", "items": _NUMBER}}, "One embedding per input, in order."),
    "/rerank": (
        {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["index", "score"],
                "properties": {"index": _INDEX, "score": _NUMBER, "text": _STRING},
            },
        },
        "One entry per text, best first.",
    ),
    "/tokenize": ({"type": "array", "items": {"type": "array", "items": _TOKEN}}, "Each input's tokens."),
    "/v1/rerank": (_RERANKED, "The documents best first, `top_n` of them."),
    "/v2/rerank": (_RERANKED, "The documents best first, `top_n` of them."),
    "/classify": (_CLASSIFIED, "Each text's labels with their scores, best first."),
    "/v1/classify": (_CLASSIFIED, "Each text's labels with their scores, best first."),
}
ROUTE_KINDS = {route: kind for kind, text in KINDS.items() for route in text.routes if route in ANSWERS}


def _operation(path: str) -> dict[str, Any]:
    """The route's FastAPI arguments: its general body and its documented answers."""
    schema, description = ANSWERS[path]
    responses: dict[int | str, dict[str, Any]] = {
        200: {"description": description, "content": {"application/json": {"schema": schema}}},
        400: error_response(path, "The body does not fit the API, or no served model fits the route (named)."),
        404: error_response(path, "No model of that name is served."),
        413: error_response(path, "The body exceeds max_body_bytes."),
    }
    if path != "/tokenize":  # the others run the model through the front door
        responses[503] = error_response(path, "Not ready, too many requests queued, or the queue ahead is too long.")
        responses[504] = error_response(
            path, "The request's deadline passed (X-Request-Timeout-Ms or request_timeout_ms)."
        )
    body = {"required": True, "content": {"application/json": {"schema": _requests(None)[path]}}}
    return {"openapi_extra": {"requestBody": body}, "responses": responses}


OPERATIONS: dict[str, dict[str, Any]] = {path: _operation(path) for path in ANSWERS}
"""Each text route's FastAPI ``openapi_extra`` and ``responses``."""


def describe(spec: dict[str, Any], models: list[Served], timeout: Callable[[int], dict[str, Any]]) -> None:
    """Each text route narrowed to the served models of its kind, or left out if none is."""
    paths: dict[str, Any] = spec["paths"]
    for path, kind in ROUTE_KINDS.items():
        operation = paths.get(path, {}).get("post")
        if operation is None:
            continue
        fit = [m for m in models if m.handler is not None and getattr(m.handler, KINDS[kind].attribute) is not None]
        if not fit:
            del paths[path]
            continue
        operation["responses"].pop("422", None)  # nothing here is validated by FastAPI
        if path != "/tokenize":
            operation["parameters"] = [*operation.get("parameters", []), timeout(max(m.deadline_floor_ms for m in fit))]
        body = _requests(max(m.max_samples for m in fit))[path]
        properties = body["properties"]
        properties["model"] = {"enum": [m.name for m in fit]}
        if len(fit) > 1:
            body["required"] = [*body["required"], "model"]
        else:
            properties["model"]["enum"].append(None)
        if path == "/embed":
            _embedders(properties, fit)
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}


def _embedders(properties: dict[str, Any], fit: list[Served]) -> None:
    """/embed's ``prompt_name`` and ``normalize`` as the served embedders take them."""
    declared = [m.handler.text_embedding for m in fit if m.handler is not None and m.handler.text_embedding]
    names = sorted({name for d in declared for name, _ in d.prompts})
    properties["prompt_name"] = {"enum": [*names, None]}
    if not any(d.unnormalized for d in declared):
        properties["normalize"] = {"enum": [True, None]}
