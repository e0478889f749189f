"""The OpenAPI spec is the service's contract, as exactly as JSON Schema can say it.

Once the models have loaded, every body is described from the served model's own schema: what
the spec accepts the server accepts, and what it rejects the server rejects (the fuzz test,
tests/e2e/service/test_fuzz.py, holds both directions with schemathesis). Path parameters list the
served models and versions; the headers the server reads are declared; so is the API key, when
one is set, so that /docs can send it (its Authorize button).

Where the server ties two values together (a v2 tensor's ``shape`` and the length of its
``data``) JSON Schema cannot relate them, so the spec lists one alternative per batch size, up to
``max_request_samples`` (the server's own limit) or LISTED_BATCHES, whichever is lower: tools
that walk every alternative (schemathesis' coverage phase) take minutes over a thousand of them.
Beyond LISTED_BATCHES the spec is stricter than the server, and says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from inferpool.engine.client import Handler, Schema
from inferpool.service.errors import documented_error
from inferpool.service.frontdoor import MAX_REQUEST_ID
from inferpool.service.http import openai_spec, text_spec, traffic_spec
from inferpool.service.http.openapi_schemas import (
    Served,
    describe_predict,
    describe_v2_answer,
    describe_v2_infer,
    v2_example,
    zeros,
)
from inferpool.service.timing import MIN_TIMEOUT_MS, TIMEOUT_PATTERN, at_least_pattern
from inferpool.service.v2.codec import VERSION

if TYPE_CHECKING:  # the host loads models (torch); a front end only asks it for them
    from inferpool.service.models.host import ModelHost

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
HEALTH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["status", "error"],
    "properties": {"status": {"type": "string"}, "error": {"type": ["string", "null"]}},
}
HEALTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    503: {
        "description": "Not ready (loading, starting, degraded, stopping), or the model failed to load.",
        "content": {"application/json": {"schema": HEALTH_SCHEMA}},
    }
}
_TENSORS: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["name", "datatype", "shape"],
        "properties": {
            "name": {"type": "string"},
            "datatype": {"type": "string"},
            "shape": {"type": "array", "items": {"type": "integer", "minimum": -1}},
        },
    },
}
# The other routes' answers, by path (v2's after the protocol's REST spec).
_ANSWERS: dict[str, dict[str, Any]] = {
    "/health/live": HEALTH_SCHEMA,
    "/health/ready": HEALTH_SCHEMA,
    "/v2": {
        "type": "object",
        "required": ["name", "version", "extensions"],
        "properties": {
            "name": {"type": "string"},
            "version": {"type": "string"},
            "extensions": {"type": "array", "items": {"type": "string"}},
        },
    },
    "/v2/health/live": {"type": "object", "required": ["live"], "properties": {"live": {"type": "boolean"}}},
    "/v2/health/ready": {"type": "object", "required": ["ready"], "properties": {"ready": {"type": "boolean"}}},
    "/v2/models/{name}": {
        "type": "object",
        "required": ["name", "versions", "platform", "inputs", "outputs"],
        "properties": {
            "name": {"type": "string"},
            "versions": {"type": "array", "items": {"type": "string"}},
            "platform": {"type": "string"},
            "inputs": _TENSORS,
            "outputs": _TENSORS,
        },
    },
    "/v2/models/{name}/ready": {
        "type": "object",
        "required": ["name", "ready"],
        "properties": {"name": {"type": "string"}, "ready": {"type": "boolean"}},
    },
    "/v2/models/{name}/config": {
        "type": "object",
        "required": ["name", "backend", "dispatch", "max_batch_size", "runtimes", "capacity"],
        "properties": {
            "name": {"type": "string"},
            "backend": {"type": "string"},
            "dispatch": {"type": "string"},
            "max_batch_size": {"type": "integer", "minimum": 1},
            "batch_selection": {
                "type": ["object", "null"],
                "description": "max_batch_size as configured (0: chosen at start-up) and served, the rule and "
                "reason, and the figures it was decided from",
            },
            "runtimes": {"type": "integer"},
            "capacity": {"type": "integer"},
            "deadline_floor_ms": {"type": "integer", "minimum": MIN_TIMEOUT_MS},
        },
    },
}

# The headers the server reads, and the ones every answer carries.
REQUEST_ID: dict[str, Any] = {
    "name": "X-Request-Id",
    "in": "header",
    "required": False,
    "description": "Your id for the request, echoed in the answer and the logs; one is generated when it is "
    f"absent, longer than {MAX_REQUEST_ID} characters or not printable.",
    "schema": {"type": "string"},
}


def timeout_parameter(floor_ms: int = MIN_TIMEOUT_MS) -> dict[str, Any]:
    """The deadline header, for a model whose fastest call at start-up took ``floor_ms`` (a
    shorter deadline is a 400: inferpool.engine.plan.deadline_floor)."""
    return {
        "name": "X-Request-Timeout-Ms",
        "in": "header",
        "required": False,
        "description": f"This request's deadline: an unsigned integer of milliseconds, {floor_ms} or more (the "
        "model's fastest call measured at start-up, rounded up: `deadline_floor_ms` at /v2/models/{name}/config), "
        "without leading zeros (default: request_timeout_ms); anything else (0, 0.5, 1e3, +5, or under the floor) "
        "is a 400. A request of more samples has a floor of its own (the full batch's per-sample time added): under "
        "it the answer is a 504 at once, without running. Past it the answer is a 504; a request the queue ahead "
        "would make late is refused at once with "
        "a 503.",
        # A string with a pattern, not an integer: a header is text, and a validator reading "250"
        # against an integer schema calls it invalid (schemathesis does).
        "schema": {"type": "string", "pattern": TIMEOUT_PATTERN if floor_ms <= 1 else at_least_pattern(floor_ms)},
    }


# Not a declared parameter: its valid values depend on the body (the JSON's byte length), which
# JSON Schema cannot relate to a header, so a fuzzer would send lengths the spec calls valid and
# the server must refuse. The operation's description says it instead.
HEADER_LENGTH = (
    "The binary tensor data extension: send `Inference-Header-Content-Length: N` and the body is N bytes of the "
    "JSON request, then the inputs whose parameters give a binary_data_size, in order, as raw little-endian "
    "bytes (BYTES: each element a 4-byte little-endian length and its bytes). Omit it, or send 0 (Triton's "
    '"no binary data"), for an all-JSON body.'
)
ANSWER_HEADERS: dict[str, Any] = {
    "X-Request-Id": {"description": "The request's id (yours or a generated one).", "schema": {"type": "string"}},
}
TIMED_HEADERS: dict[str, Any] = ANSWER_HEADERS | {
    "Server-Timing": {"description": "Each phase of the request in milliseconds.", "schema": {"type": "string"}},
}
RETRY_HEADERS: dict[str, Any] = ANSWER_HEADERS | {
    "Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "string"}},
}
SECURITY_SCHEMES: dict[str, Any] = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "Authorization: Bearer <api key>"},
    "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key", "description": "X-API-Key: <api key>"},
}


def served_models(app: FastAPI) -> list[Served]:
    """The loaded models, the default first, each with its own max_request_samples."""
    host: ModelHost = app.state.host
    return [
        Served(model.name, model.schema, model.info.handler, plan.options.max_request_samples, model.deadline_floor_ms)
        for model, plan in host.served()
    ]


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
        _declare_auth(spec, guarded, app.state.settings.api_key is not None)
        if current_schema() is not None:
            served = served_models(app)
            _describe_models(spec, served)
            openai_spec.describe(spec, served, timeout_parameter)
            text_spec.describe(spec, served, timeout_parameter)
            app.openapi_schema = spec
        _describe_answers(spec)
        _declare_headers(spec)
        traffic_spec.declare(spec, app.state.settings)
        return spec

    return openapi


def _declare_auth(spec: dict[str, Any], guarded: Callable[[str], bool], keyed: bool) -> None:
    """The API-key middleware answers guarded paths with a 401 before any route (service/auth.py)."""
    if not keyed:
        return
    spec.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
    for path, operations in spec["paths"].items():
        if guarded(path):
            for operation in operations.values():
                operation["security"] = [{"bearer": []}, {"apiKey": []}]
                refused = text_spec.error_response(path, "Missing or wrong API key.")
                operation["responses"]["401"] = refused
                operation["responses"]["401"]["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"}}}


def _describe_models(spec: dict[str, Any], models: list[Served]) -> None:
    """Bodies from each model's schema, and path parameters limited to what is served.

    OpenAPI cannot tie a body schema to a path parameter's value: with one model served,
    ``{name}`` lists it and the body is its own; with several, a route whose body depends on
    the model gets one path per model instead."""
    paths: dict[str, Any] = spec["paths"]
    names = [m.name for m in models]
    # Once per model, referenced by both infer paths: one alternative per batch size makes it long.
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    for model in models:
        schemas[_v2_request_name(model)] = describe_v2_infer(model)
    for path, operations in list(paths.items()):
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                if parameter["name"] == "name" and parameter["in"] == "path":
                    parameter["schema"] = {"type": "string", "enum": names}
                elif parameter["name"] == "version":
                    parameter["schema"] = {"type": "string", "enum": [VERSION]}
        if path == "/predict":
            _predict_operation(operations["post"], models[0])
        elif path == "/predict/{name}" or path.endswith("/infer"):
            if len(models) > 1:
                del paths[path]
            for model in models:
                operation = operations["post"]
                if len(models) > 1:
                    operation = _copy(operation)
                    operation["operationId"] += f"_{model.name}"
                    operation["parameters"] = [p for p in operation["parameters"] if p["name"] != "name"]
                    paths[path.replace("{name}", model.name)] = {"post": operation}
                if path.endswith("/infer"):
                    _infer_operation(operation, model, versioned="{version}" in path)
                else:
                    _predict_operation(operation, model)


def _v2_request_name(model: Served) -> str:
    return "V2InferRequest_" + re.sub(r"[^A-Za-z0-9._-]", "_", model.name)  # what a component key may hold


def _predict_operation(operation: dict[str, Any], model: Served) -> None:
    shapes = describe_predict(model.schema, model.handler, model.max_samples)
    body: dict[str, Any] = {"schema": shapes["request"]}
    if model.handler is None:  # a handler's input is its own; a tensor model's is zeros of its shape
        inputs = model.schema.inputs
        sample = {s.name: zeros(s.sample_shape, False if s.dtype == "bool" else 0) for s in inputs}
        body["example"] = {"inputs": sample[inputs[0].name] if len(inputs) == 1 else sample}
    operation["requestBody"] = {"required": True, "content": {"application/json": body}}
    operation["responses"]["200"]["content"] = {"application/json": {"schema": shapes["response"]}}
    operation["responses"].pop("422", None)  # the raw route never validates with FastAPI
    operation["parameters"] = [*operation.get("parameters", []), timeout_parameter(model.deadline_floor_ms)]


def _infer_operation(operation: dict[str, Any], model: Served, versioned: bool) -> None:
    # The raw infer route reads the version from the path only: no query parameter.
    operation["parameters"] = [p for p in operation["parameters"] if versioned or p["name"] != "version"]
    operation["parameters"] += [timeout_parameter(model.deadline_floor_ms)]
    operation["description"] = HEADER_LENGTH
    operation["requestBody"] = {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"$ref": f"#/components/schemas/{_v2_request_name(model)}"},
                "example": v2_example(model),
            }
        },
    }
    operation["responses"].pop("422", None)
    answer = operation["responses"]["200"]
    answer["description"] = "The outputs: JSON, or with binary data the JSON then the binary outputs."
    answer["content"] = {
        "application/json": {"schema": describe_v2_answer(model)},
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
    }
    answer["headers"] = {
        "Inference-Header-Content-Length": {
            "description": "With binary outputs: the length of the JSON at the start of the body.",
            "schema": {"type": "string"},
        }
    }


def _describe_answers(spec: dict[str, Any]) -> None:
    """The fixed-shape answers; v2's health routes answer their own shape with a 503 too."""
    for path, operations in spec["paths"].items():
        schema = _ANSWERS.get(path.replace("/versions/{version}", ""))
        if schema is not None and "get" in operations:
            responses = operations["get"]["responses"]
            responses["200"]["content"] = {"application/json": {"schema": schema}}
            if path.startswith("/v2/health/"):
                responses["503"] = {
                    "description": "Not live (the model failed to load), or not ready (Retry-After).",
                    "content": {"application/json": {"schema": schema}},
                }
    metrics = spec["paths"].get("/metrics", {}).get("get")
    if metrics is not None:
        metrics["responses"]["200"]["content"] = {"text/plain": {"schema": {"type": "string"}}}


def _declare_headers(spec: dict[str, Any]) -> None:
    """X-Request-Id both ways on every route; Server-Timing and Retry-After where they come."""
    for operations in spec["paths"].values():
        for operation in operations.values():
            parameters = operation.setdefault("parameters", [])
            if not any(p["name"] == REQUEST_ID["name"] for p in parameters):
                parameters.append(REQUEST_ID)
            for status, answer in operation["responses"].items():
                headers = TIMED_HEADERS if status == "200" and "requestBody" in operation else ANSWER_HEADERS
                headers = RETRY_HEADERS if status == "503" else headers
                answer["headers"] = answer.get("headers", {}) | headers


def _copy(value: Any) -> Any:
    """A deep copy of JSON-like data: paths that share one FastAPI operation must not share edits."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
