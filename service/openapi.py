"""OpenAPI pieces, with /predict's body described from the served model's own schema."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from engine import Handler, Schema, TensorSpec
from service.errors import documented_error

PREDICT_REQUEST: dict[str, Any] = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {"type": "object", "required": ["inputs"], "properties": {"inputs": {}}},
        }
    },
}
PREDICT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "The model's outputs, keyed by output name."},
    400: documented_error("The body is not JSON, or an input does not fit the model's schema (named in 'input')."),
    413: documented_error("The body exceeds max_body_bytes."),
    503: documented_error("Not ready, too many requests queued, or the queue ahead would make it late (Retry-After)."),
    504: documented_error("The request's deadline passed (X-Request-Timeout-Ms or request_timeout_ms)."),
}
HEALTH_RESPONSES: dict[int | str, dict[str, Any]] = {503: documented_error("Not ready, or the model failed to load.")}


def _batch_of(spec: TensorSpec, output: bool = False) -> dict[str, Any]:
    sample = spec.json_schema(output=output)
    return {"oneOf": [sample, {"type": "array", "minItems": 1, "items": sample}]} if spec.batched else sample


def describe_predict(schema: Schema, handler: Handler | None = None) -> dict[str, Any]:
    """Request and response JSON Schemas for /predict on this model (its handler's, if it has one)."""
    if handler is not None:
        return {
            "request": {"type": "object", "required": ["inputs"], "properties": {"inputs": handler.request_schema}},
            "response": {
                "type": "object",
                "properties": {"model": {"type": "string"}, "outputs": handler.response_schema},
            },
        }
    named = {
        "type": "object",
        "required": [s.name for s in schema.inputs],
        "properties": {s.name: _batch_of(s) for s in schema.inputs},
        "additionalProperties": False,
    }
    inputs = {"oneOf": [_batch_of(schema.inputs[0]), named]} if len(schema.inputs) == 1 else named
    outputs = {"type": "object", "properties": {s.name: _batch_of(s, output=True) for s in schema.outputs}}
    return {
        "request": {"type": "object", "required": ["inputs"], "properties": {"inputs": inputs}},
        "response": {"type": "object", "properties": {"model": {"type": "string"}, "outputs": outputs}},
    }


def model_aware_openapi(
    app: FastAPI,
    current_schema: Callable[[], Schema | None],
    current_handler: Callable[[], Handler | None] = lambda: None,
    guarded: Callable[[str], bool] = lambda path: False,
) -> Callable[[], dict[str, Any]]:
    """app.openapi replacement: generic until the model has loaded, then exact and cached."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        for path, operations in spec["paths"].items():
            if guarded(path):  # the API-key middleware answers these with a 401 before any route
                for operation in operations.values():
                    operation["responses"]["401"] = documented_error("Missing or wrong API key.")
        schema = current_schema()
        if schema is not None:
            shapes = describe_predict(schema, current_handler())
            post = spec["paths"]["/predict"]["post"]
            post["requestBody"]["content"]["application/json"]["schema"] = shapes["request"]
            post["responses"]["200"]["content"] = {"application/json": {"schema": shapes["response"]}}
            app.openapi_schema = spec
        return spec

    return openapi
