"""JSON Schemas of what one served model takes and answers: ``/predict`` bodies from its
schema (or its handler's), v2 infer bodies and answers from its v2 metadata, and examples.

service/http/openapi.py puts them into the spec; its docstring says why v2 batch sizes are listed
one by one, up to LISTED_BATCHES.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from inferpool.engine.client import NOT_BLANK, Handler, Schema, TensorSpec
from inferpool.service.v2.codec import VERSION, metadata
from inferpool.service.v2.datatypes import DATATYPES, MIN_TIMEOUT_US

LISTED_BATCHES = 32  # the most v2 batch sizes the spec lists one by one (the module docstring says why)
# orjson reads a larger JSON integer as a float, which is not an integer to the server.
_JSON_INT_MAX = 2**64 - 1
# A v2 BYTES input exists only for a model whose handler takes text, and those refuse blank
# text (engine/models/handlers.py), hence the pattern.
_V2_TEXT: dict[str, Any] = {"type": "string", "pattern": NOT_BLANK}


@dataclass(frozen=True)
class Served:
    """What the spec needs to know of one served model."""

    name: str
    schema: Schema
    handler: Handler | None
    max_samples: int
    deadline_floor_ms: int = 1
    """Its shortest deadline (EngineClient.deadline_floor_ms)."""


def _batch_of(spec: TensorSpec, max_samples: int, output: bool = False) -> dict[str, Any]:
    sample = spec.json_schema(output=output)
    if not spec.batched:
        return sample
    batch: dict[str, Any] = {"type": "array", "minItems": 1, "items": sample}
    if not output:
        batch["maxItems"] = max_samples
    return {"oneOf": [sample, batch]}


def describe_predict(schema: Schema, handler: Handler | None = None, max_samples: int = 1024) -> dict[str, Any]:
    """Request and response JSON Schemas for /predict on this model (its handler's, if it has one)."""
    if handler is not None:
        return {
            "request": {
                "type": "object",
                "required": ["inputs"],
                "properties": {"inputs": _limit_batches(handler.request_schema, max_samples)},
            },
            "response": {
                "type": "object",
                "required": ["model", "outputs"],
                "properties": {"model": {"type": "string"}, "outputs": _any_of(handler.response_schema)},
            },
        }
    named = {
        "type": "object",
        "required": [s.name for s in schema.inputs],
        "properties": {s.name: _batch_of(s, max_samples) for s in schema.inputs},
        "additionalProperties": False,
    }
    inputs = {"oneOf": [_batch_of(schema.inputs[0], max_samples), named]} if len(schema.inputs) == 1 else named
    outputs = {
        "type": "object",
        "required": [s.name for s in schema.outputs],
        "properties": {s.name: _batch_of(s, max_samples, output=True) for s in schema.outputs},
    }
    return {
        "request": {"type": "object", "required": ["inputs"], "properties": {"inputs": inputs}},
        "response": {
            "type": "object",
            "required": ["model", "outputs"],
            "properties": {"model": {"type": "string"}, "outputs": outputs},
        },
    }


def _limit_batches(schema: Any, max_samples: int) -> Any:
    """A handler's request schema with its outermost lists bounded by max_request_samples:
    those are the samples it counts (Handler.samples), and the server refuses more."""
    if not isinstance(schema, dict):
        return schema
    if schema.get("type") == "array":
        return schema | {"maxItems": min(schema.get("maxItems", max_samples), max_samples)}
    limited = dict(schema)
    for key in ("oneOf", "anyOf", "allOf"):
        if key in schema:
            limited[key] = [_limit_batches(s, max_samples) for s in schema[key]]
    if "properties" in schema:
        limited["properties"] = {k: _limit_batches(s, max_samples) for k, s in schema["properties"].items()}
    return limited


def _any_of(schema: Any) -> Any:
    """A response schema with ``oneOf`` read as ``anyOf``: an answer that fits two branches is
    still a valid answer (a handler's "a list of numbers, or a list" fits both for one text)."""
    if isinstance(schema, dict):
        return {("anyOf" if k == "oneOf" else k): _any_of(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_any_of(v) for v in schema]
    return schema


def _v2_value(datatype: str) -> dict[str, Any]:
    if datatype == "BYTES":
        return _V2_TEXT
    # The same element ranges as /predict: a value the datatype cannot hold is refused.
    return TensorSpec("", DATATYPES[datatype], ()).json_schema()


def describe_v2_infer(served: Served) -> dict[str, Any]:
    """The JSON body of POST /v2/models/{name}[/versions/1]/infer for this model.

    A tensor's ``data`` is flat or nested as its shape (the server takes either); the batch
    size ``b`` in ``shape`` must match the data's length, so each b has its own alternative."""
    tensors = metadata(served.name, served.schema, VERSION, served.handler)["inputs"]
    floor_us = max(MIN_TIMEOUT_US, served.deadline_floor_ms * 1000)
    base = []
    for tensor in tensors:
        value = _v2_value(tensor["datatype"])
        base.append(
            {
                "type": "object",
                "required": ["name", "datatype", "shape", "data"],
                "properties": {
                    "name": {"const": tensor["name"]},
                    "datatype": {"const": tensor["datatype"]},
                    "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                    # binary_data_size says the data follows the JSON: not in an all-JSON body.
                    "parameters": {"type": "object", "properties": {"binary_data_size": False}},
                    "data": {
                        "type": "array",
                        "minItems": 1,
                        "items": {"anyOf": [_v2_nested(value, tensor["shape"][1:]), value]},
                    },
                },
            }
        )
    batched = any(t["shape"][:1] == [-1] for t in tensors)
    listed = min(served.max_samples, LISTED_BATCHES) if batched else 1
    alternatives = [
        {"properties": {"inputs": {"items": {"anyOf": [_v2_batch(t["name"], t["shape"], batch) for t in tensors]}}}}
        for batch in range(1, listed + 1)
    ]
    description = f"An Open Inference Protocol v2 request for model {served.name!r}."
    if batched:
        description += f" Batches of 1 to {listed} samples"
        more = f"; the server takes up to {served.max_samples}" if listed < served.max_samples else ""
        description += f" (max_request_samples{more})."
    inputs: dict[str, Any] = {
        "type": "array",
        "minItems": len(tensors),
        "maxItems": len(tensors),
        "items": {"anyOf": base} if len(base) > 1 else base[0],
    }
    if len(tensors) > 1:  # each input exactly once
        inputs["allOf"] = [
            {"contains": {"properties": {"name": {"const": t["name"]}}}, "minContains": 1, "maxContains": 1}
            for t in tensors
        ]
    outputs = [t["name"] for t in metadata(served.name, served.schema, VERSION, served.handler)["outputs"]]
    return {
        "type": "object",
        "required": ["inputs"],
        "properties": {
            "id": {"type": "string"},
            "parameters": {
                "type": "object",
                "properties": {
                    "timeout": {
                        "type": "integer",
                        "minimum": floor_us,
                        "maximum": _JSON_INT_MAX,
                        "description": f"Deadline in µs, {floor_us} or more (the model's fastest call at start-up, "
                        "in whole ms: deadline_floor_ms at /v2/models/{name}/config); a shorter one is a 400; one "
                        "under the larger floor of a request of more samples is a 504 at once.",
                    },
                    "binary_data_output": {"type": "boolean", "description": "All outputs as binary data."},
                },
            },
            "inputs": inputs,
            "outputs": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"enum": outputs},
                        "parameters": {"type": "object", "properties": {"binary_data": {"type": "boolean"}}},
                    },
                },
            },
        },
        "anyOf": alternatives,
        "description": description,
    }


def _v2_nested(value: dict[str, Any], dims: list[int]) -> dict[str, Any]:
    for dim in reversed(dims):
        value = {"type": "array", "items": value} | ({} if dim == -1 else {"minItems": dim, "maxItems": dim})
    return value


def _v2_batch(name: str, shape: list[int], batch: int) -> dict[str, Any]:
    """One input at one batch size: its shape, and its data's length, flat or nested."""
    fixed = [batch if i == 0 and d == -1 else d for i, d in enumerate(shape)]
    if -1 in fixed:  # a dynamic dimension past the batch: its length is the client's to choose
        return {"properties": {"name": {"const": name}}}
    numel = math.prod(fixed)
    flat = {"minItems": numel, "maxItems": numel, "items": {"not": {"type": "array"}}}
    nested = {"minItems": fixed[0], "maxItems": fixed[0], "items": {"type": "array"}}
    data = flat if len(fixed) <= 1 else {"anyOf": [nested, flat]}
    return {"properties": {"name": {"const": name}, "shape": {"const": fixed}, "data": data}}


def describe_v2_answer(served: Served) -> dict[str, Any]:
    meta = metadata(served.name, served.schema, VERSION, served.handler)
    return {
        "type": "object",
        "required": ["model_name", "outputs"],
        "properties": {
            "model_name": {"const": served.name},
            "model_version": {"const": VERSION},
            "id": {"type": "string"},
            "outputs": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name", "datatype", "shape"],
                    "properties": {
                        "name": {"enum": [t["name"] for t in meta["outputs"]]},
                        "datatype": {"type": "string"},
                        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                        "data": {"type": "array"},
                        "parameters": {
                            "type": "object",
                            "properties": {"binary_data_size": {"type": "integer", "minimum": 0}},
                        },
                    },
                },
            },
        },
    }


def zeros(shape: tuple[int | None, ...], zero: object) -> object:
    """Nested lists of ``zero`` in this shape (a dynamic dimension: 1)."""
    value = zero
    for dim in reversed(shape):
        value = [value] * (1 if dim is None or dim < 0 else dim)
    return value


def v2_example(model: Served) -> dict[str, Any]:
    """One sample of zeros (or of text), the request /docs fills in."""
    return v2_sample(model.name, model.schema, model.handler)


def v2_sample(name: str, schema: Schema, handler: Handler | None) -> dict[str, Any]:
    """A v2 infer request of one sample of zeros (or of text) for this model: /docs' example, and
    each serving process's warm request (service/http/warmup.py)."""
    tensors = metadata(name, schema, VERSION, handler)["inputs"]
    fill = {"BOOL": False, "BYTES": "Hello, world."}
    inputs = []
    for tensor in tensors:
        shape = [1 if d == -1 else d for d in tensor["shape"]]
        data = zeros((math.prod(shape),), fill.get(tensor["datatype"], 0))
        inputs.append({"name": tensor["name"], "datatype": tensor["datatype"], "shape": shape, "data": data})
    return {"inputs": inputs}
